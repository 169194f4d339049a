/* .npy headers as NumPy writes them (the format's float32 (2, 3) example, versions 1.0 to 3.0,
 * every dtype Tessera reads) and as it must not take them (Fortran order, big-endian, other
 * dtypes, shapes that do not match the data, broken dicts), and .npz members through libzip. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#include "check_run.h"
#include "files/npy.h"

/* A .npy image: magic, version, header padded to 64 bytes, then `data_len` bytes of data. */
static size_t make_npy(uint8_t *out, int major, const char *dict, const void *data, size_t data_len)
{
    size_t prefix = major == 1 ? 10 : 12, n = strlen(dict), total = prefix + n + 1;
    size_t pad = (64 - total % 64) % 64, hlen = n + pad + 1;

    memcpy(out, "\x93NUMPY", 6);
    out[6] = (uint8_t)major;
    out[7] = 0;
    for (size_t i = 0; i < prefix - 8; i++)
        out[8 + i] = (uint8_t)(hlen >> (8 * i));
    memcpy(out + prefix, dict, n);
    memset(out + prefix + n, ' ', pad);
    out[prefix + n + pad] = '\n';
    memcpy(out + prefix + hlen, data, data_len);
    return prefix + hlen + data_len;
}

static status_t parse(const uint8_t *buf, size_t len, npy_header_t *h, status_msg_t *err)
{
    return npy_parse(buf, len, len, "a.npy", h, err);
}

START_TEST(golden_float32_header)
{
    static const char golden[] =
        "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    uint8_t buf[256];
    const float v[6] = {1, 2, 3, 4, 5, 6};
    float out[6];
    npy_header_t h;
    size_t n = sizeof(golden) - 1;

    memcpy(buf, golden, n);
    memset(buf + n, ' ', 128 - n - 1);
    buf[127] = '\n';
    memcpy(buf + 128, v, sizeof(v));
    ck_assert_int_eq(parse(buf, 128 + sizeof(v), &h, NULL), STATUS_OK);
    ck_assert_uint_eq(h.data_offset, 128);
    ck_assert_int_eq(h.dtype, NPY_F4);
    ck_assert_int_eq(h.rank, 2);
    ck_assert_uint_eq(h.shape[0], 2);
    ck_assert_uint_eq(h.shape[1], 3);
    ck_assert_uint_eq(h.count, 6);
    npy_to_float(&h, buf + 128, out, 6, 2.0);
    ck_assert(out[0] == 2 && out[5] == 12);
}
END_TEST

START_TEST(versions_and_dtypes)
{
    uint8_t buf[512];
    const uint8_t u8[3] = {0, 7, 255};
    const int64_t i64[2] = {-5, 1LL << 40};
    const double f64[1] = {0.25};
    const int32_t i32[2] = {-1, 3};
    npy_header_t h;
    float out[3];
    size_t n;

    n = make_npy(buf, 2, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", u8, 3);
    ck_assert_int_eq(parse(buf, n, &h, NULL), STATUS_OK);
    npy_to_float(&h, buf + h.data_offset, out, 3, 1);
    ck_assert(out[2] == 255);
    n = make_npy(buf, 3, "{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (2,)}", i64,
                 16);
    ck_assert_int_eq(parse(buf, n, &h, NULL), STATUS_OK);
    npy_to_float(&h, buf + h.data_offset, out, 2, 1);
    ck_assert(out[0] == -5 && out[1] == (float)(1LL << 40));
    n = make_npy(buf, 1, "{'shape': (), 'fortran_order': False, 'descr': '<f8'}", f64, 8);
    ck_assert_int_eq(parse(buf, n, &h, NULL), STATUS_OK);
    ck_assert_int_eq(h.rank, 0);
    ck_assert_uint_eq(h.count, 1);
    n = make_npy(buf, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2), }", i32, 8);
    ck_assert_int_eq(parse(buf, n, &h, NULL), STATUS_OK);
    npy_to_float(&h, buf + h.data_offset, out, 2, 1);
    ck_assert(out[0] == -1 && out[1] == 3);
}
END_TEST

static void expect_bad(const char *dict, size_t data_len, const char *needle)
{
    uint8_t buf[512] = {0}, zeros[64] = {0};
    npy_header_t h;
    status_msg_t err = {0};
    size_t n = make_npy(buf, 1, dict, zeros, data_len);

    ck_assert_int_eq(parse(buf, n, &h, &err), STATUS_DATA_LOSS);
    ck_assert_msg(strstr(err.text, "a.npy") && strstr(err.text, needle), "'%s' lacks '%s'",
                  err.text, needle);
}

START_TEST(what_numpy_would_not_have_written_is_refused)
{
    expect_bad("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, "Fortran order");
    expect_bad("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, "'>f4'");
    expect_bad("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, "'<c8'");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 8, "needs 12 bytes");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12, "holds 12");
    expect_bad("{'descr': '<f4', 'fortran_order': False}", 0, "lacks");
    expect_bad("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", 4, "twice");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", 8, "shape");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, "
               "99999999999, 99999999999), }",
               0, "overflows");
    expect_bad("['descr']", 0, "not a dict");

    uint8_t buf[16] = "\x93NUMPY\x01\x00\xff\xff";
    npy_header_t h;
    status_msg_t err = {0};
    ck_assert_int_eq(parse(buf, sizeof(buf), &h, &err), STATUS_DATA_LOSS);
    ck_assert_ptr_nonnull(strstr(err.text, "over the limit or past the end"));
    ck_assert_int_eq(parse((const uint8_t *)"PK\3\4nope", 9, &h, &err), STATUS_DATA_LOSS);
    ck_assert_ptr_nonnull(strstr(err.text, "magic"));
}
END_TEST

START_TEST(files_and_npz_members)
{
    char dir[] = "/tmp/tessera-test-npy-XXXXXX", path[128], npz[128];
    uint8_t buf[512];
    const float v[4] = {1, 2, 3, 4};
    size_t n =
        make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", v, 16);
    npy_array_t a;
    status_msg_t err = {0};
    FILE *f;
    int e = 0;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/x.npy", dir);
    snprintf(npz, sizeof(npz), "%s/d.npz", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "wb"));
    fwrite(buf, 1, n, f);
    fclose(f);
    ck_assert_int_eq(npy_load(path, &a, &err), STATUS_OK);
    ck_assert_uint_eq(a.h.count, 4);
    ck_assert_int_eq(memcmp(a.data, v, 16), 0);
    npy_release(&a);
    zip_t *z = zip_open(npz, ZIP_CREATE | ZIP_TRUNCATE, &e);
    zip_file_add(z, "x_train.npy", zip_source_buffer(z, buf, n, 0), 0); /* deflated */
    ck_assert_int_eq(zip_close(z), 0);
    ck_assert_int_eq(npz_load(npz, "x_train", 0, &a, &err), STATUS_OK);
    ck_assert_int_eq(memcmp(a.data, v, 16), 0);
    npy_release(&a);
    ck_assert_int_eq(npz_load(npz, "y_train", 0, &a, &err), STATUS_DATA_LOSS);
    ck_assert_ptr_nonnull(strstr(err.text, "no member y_train.npy"));
    ck_assert_int_eq(npz_load(npz, "x_train", 10, &a, &err), STATUS_RESOURCE_EXHAUSTED);
    ck_assert_int_eq(npz_load(path, "x", 0, &a, &err), STATUS_DATA_LOSS); /* not a zip */
    ck_assert_int_eq(npy_load("/nonexistent/x.npy", &a, &err), STATUS_NOT_FOUND);
    unlink(path);
    unlink(npz);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("npy");

    tcase_add_test(tc, golden_float32_header);
    tcase_add_test(tc, versions_and_dtypes);
    tcase_add_test(tc, what_numpy_would_not_have_written_is_refused);
    tcase_add_test(tc, files_and_npz_members);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
