/* safetensors against the format's golden bytes (F32 "w" = [1, 2]), round trips of every dtype
 * Tessera writes, and damaged files: each a DATA_LOSS naming the file and what is wrong. Also the
 * strict JSON reader the header goes through, and atomic writes leaving nothing behind on
 * failure. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "files/atomic.h"
#include "files/json.h"
#include "files/safetensors.h"

static char dir[64];

static void setup(void)
{
    strcpy(dir, "/tmp/tessera-test-st-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *path_of(const char *name)
{
    static char path[4][128];
    static int next;
    char *p = path[next++ % 4];

    snprintf(p, sizeof(path[0]), "%s/%s", dir, name);
    return p;
}

static const char *put(const char *name, const void *data, size_t len)
{
    const char *p = path_of(name);
    FILE *f = fopen(p, "wb");

    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    return p;
}

/* A file of the 8-byte length, the header text as given, then data. */
static const char *put_st(const char *name, const char *header, const void *data, size_t len)
{
    size_t hl = strlen(header);
    uint8_t *buf = malloc(8 + hl + len + 1);

    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (len > 0)
        memcpy(buf + 8 + hl, data, len);
    const char *p = put(name, buf, 8 + hl + len);
    free(buf);
    return p;
}

static uint8_t *slurp(const char *path, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;

    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *ret_len = (size_t)n;
    return buf;
}

static int files_in_dir(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."));
    closedir(d);
    return n;
}

START_TEST(writer_matches_the_golden_file)
{
    static const char json[] = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\","
                               "\"shape\":[2],\"data_offsets\":[0,8]}}   ";
    const float w[2] = {1.0f, 2.0f};
    st_tensor_t t = {.name = "w", .dtype = ST_F32, .rank = 1, .shape = {2}, .data = w};
    uint64_t bytes = 0;
    size_t len;
    uint8_t *buf;

    ck_assert_int_eq(st_write_file(path_of("w.safetensors"), &t, 1, NULL, 0, &bytes, NULL),
                     STATUS_OK);
    buf = slurp(path_of("w.safetensors"), &len);
    ck_assert_uint_eq(len, 8 + 88 + 8);
    ck_assert_uint_eq(bytes, len);
    ck_assert_int_eq(memcmp(buf, "\x58\0\0\0\0\0\0\0", 8), 0);
    ck_assert_int_eq(memcmp(buf + 8, json, 88), 0);
    ck_assert_int_eq(memcmp(buf + 96, "\x00\x00\x80\x3f\x00\x00\x00\x40", 8), 0);
    free(buf);
    ck_assert_int_eq(files_in_dir(), 1); /* no temporary left */
}
END_TEST

START_TEST(every_dtype_round_trips_with_metadata)
{
    const float f32[6] = {1, -2, 3.5f, 0, 1e-30f, 7};
    const double f64[3] = {1.0 / 3, -0.0, 1e300};
    const int64_t i64[2] = {INT64_MIN, INT64_MAX};
    const uint8_t u8[5] = {0, 1, 2, 254, 255};
    st_tensor_t t[] = {
        {.name = "dense/kernel", .dtype = ST_F32, .rank = 2, .shape = {2, 3}, .data = f32},
        {.name = "step", .dtype = ST_I64, .rank = 0, .data = i64},
        {.name = "ids", .dtype = ST_I64, .rank = 1, .shape = {2}, .data = i64},
        {.name = "empty", .dtype = ST_F32, .rank = 2, .shape = {0, 4}, .data = f32},
        {.name = "x\"y\\z", .dtype = ST_F64, .rank = 1, .shape = {3}, .data = f64},
        {.name = "pixels", .dtype = ST_U8, .rank = 1, .shape = {5}, .data = u8},
    };
    st_meta_t meta[] = {{"job", "mlp \"one\""}, {"step", "12"}};
    st_file_t *f;
    status_msg_t err = {0};

    ck_assert_int_eq(st_write_file(path_of("all.safetensors"), t, 6, meta, 2, NULL, &err),
                     STATUS_OK);
    ck_assert_msg(st_open(path_of("all.safetensors"), &f, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(st_count(f), 6);
    ck_assert_str_eq(st_metadata(f, "format"), "pt");
    ck_assert_str_eq(st_metadata(f, "job"), "mlp \"one\"");
    ck_assert_ptr_null(st_metadata(f, "nope"));
    for (size_t i = 0; i < 6; i++) {
        const st_info_t *in = st_find(f, t[i].name);
        ck_assert_ptr_nonnull(in);
        ck_assert_int_eq(in->dtype, t[i].dtype);
        ck_assert_int_eq(in->rank, t[i].rank);
        for (int d = 0; d < in->rank; d++)
            ck_assert_uint_eq(in->shape[d], t[i].shape[d]);
        size_t n = (size_t)(in->end - in->begin);
        uint8_t *got = malloc(n + 1);
        ck_assert_int_eq(st_read(f, in, got, NULL), STATUS_OK);
        ck_assert_int_eq(memcmp(got, t[i].data, n), 0);
        free(got);
    }
    ck_assert_uint_eq(st_find(f, "empty")->elements, 0);
    st_close(f);
}
END_TEST

/* Tensors big enough for direct I/O (written through the staging buffer, read through an
 * aligned one), at offsets that are not block-aligned, on the test's disk and on a tmpfs, which
 * refuses O_DIRECT and takes the buffered path. */
static void big_round_trip(const char *path)
{
    size_t n = (3u << 20) + 12345, m = (9u << 20) / 4 + 7;
    float *a = malloc(n * sizeof(float)), *b = malloc(m * sizeof(float));
    float *ra = malloc(n * sizeof(float)), *rb = malloc(m * sizeof(float));
    st_tensor_t t[3] = {
        {.name = "small", .dtype = ST_U8, .rank = 1, .shape = {3}, .data = "abc"},
        {.name = "a", .dtype = ST_F32, .rank = 1, .shape = {n}, .data = a},
        {.name = "b", .dtype = ST_F32, .rank = 2, .shape = {1, m}, .data = b},
    };
    status_msg_t err = {0};
    st_file_t *f;

    for (size_t i = 0; i < n; i++)
        a[i] = (float)i * 0.5f;
    for (size_t i = 0; i < m; i++)
        b[i] = -(float)i;
    ck_assert_msg(st_write_file(path, t, 3, NULL, 0, NULL, &err) == STATUS_OK, "%s", err.text);
    ck_assert_msg(st_open(path, &f, &err) == STATUS_OK, "%s", err.text);
    ck_assert_int_eq(st_read(f, st_find(f, "a"), ra, NULL), STATUS_OK);
    ck_assert_int_eq(st_read(f, st_find(f, "b"), rb, NULL), STATUS_OK);
    ck_assert_int_eq(memcmp(ra, a, n * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(rb, b, m * sizeof(float)), 0);
    st_close(f);
    free(a);
    free(b);
    free(ra);
    free(rb);
}

START_TEST(big_tensors_round_trip_on_any_filesystem)
{
    big_round_trip(path_of("big.safetensors"));
    if (access("/dev/shm", W_OK) == 0) {
        char shm[64];
        snprintf(shm, sizeof(shm), "/dev/shm/tessera-test-%d.safetensors", (int)getpid());
        big_round_trip(shm);
        unlink(shm);
    }
}
END_TEST

START_TEST(duplicate_and_non_utf8_names_write_nothing)
{
    const float v[1] = {1};
    st_tensor_t t[2] = {{.name = "a", .dtype = ST_F32, .rank = 1, .shape = {1}, .data = v},
                        {.name = "a", .dtype = ST_F32, .rank = 1, .shape = {1}, .data = v}};
    status_msg_t err = {0};

    ck_assert_int_eq(st_write_file(path_of("dup.safetensors"), t, 2, NULL, 0, NULL, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.text, "named twice"));
    ck_assert_int_eq(files_in_dir(), 0);
    /* the header is UTF-8 JSON: a name that is not UTF-8 would make a file no reader takes */
    t[1].name = "dens\xff";
    ck_assert_int_eq(st_write_file(path_of("dup.safetensors"), t, 2, NULL, 0, NULL, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.text, "\"dens\\xff\" is not UTF-8") != NULL, "%s", err.text);
    ck_assert_int_eq(files_in_dir(), 0);
}
END_TEST

/* The file at path fails to open with DATA_LOSS, naming the file and saying `what`. */
static void expect_corrupt(const char *path, const char *what)
{
    status_msg_t err = {0};
    st_file_t *f = NULL;

    ck_assert_int_eq(st_open(path, &f, &err), STATUS_DATA_LOSS);
    ck_assert_ptr_null(f);
    ck_assert_msg(strstr(err.text, path) != NULL, "'%s' does not name the file", err.text);
    ck_assert_msg(strstr(err.text, what) != NULL, "'%s' does not say '%s'", err.text, what);
}

START_TEST(damaged_files_are_data_loss_naming_what)
{
    const uint8_t d8[8] = {0};
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};

    expect_corrupt(put("short", "abc", 3), "shorter than");
    expect_corrupt(put("huge", huge, sizeof(huge)), "claims 4294967295 bytes");
    expect_corrupt(put_st("ws", " {}", NULL, 0), "begin with '{'");
    expect_corrupt(put_st("json", "{\"a\":", NULL, 0), "end of the document");
    expect_corrupt(put_st("dup", "{\"a\":1,\"a\":2}", NULL, 0), "duplicate key \"a\"");
    expect_corrupt(
        put_st("dtype", "{\"a\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}", d8, 4),
        "dtype F99");
    expect_corrupt(
        put_st("size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", d8, 8),
        "does not match");
    expect_corrupt(
        put_st("extra", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}",
               d8, 4),
        "no more");
    expect_corrupt(
        put_st("gap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", d8, 8),
        "leave a gap");
    expect_corrupt(put_st("overlap",
                          "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                          "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
                          d8, 6),
                   "overlap");
    expect_corrupt(
        put_st("cut", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d8, 5),
        "take 8 bytes but the file holds 5");
    expect_corrupt(
        put_st("long", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", d8, 8),
        "take 4 bytes but the file holds 8");
    expect_corrupt(put_st("overflow",
                          "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
                          "\"data_offsets\":[0,0]}}",
                          NULL, 0),
                   "overflows");
    expect_corrupt(put_st("meta", "{\"__metadata__\":{\"format\":1}}", NULL, 0),
                   "object of strings");
    expect_corrupt(
        put_st("neg", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", d8, 4),
        "unsigned integer");
}
END_TEST

START_TEST(missing_file_is_not_found)
{
    status_msg_t err = {0};
    st_file_t *f;

    ck_assert_int_eq(st_open("/nonexistent/m.safetensors", &f, &err), STATUS_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.text, "/nonexistent/m.safetensors"));
}
END_TEST

/* ---- JSON ---- */

static status_t parse(const char *text, json_doc_t *doc, status_msg_t *err)
{
    return json_parse(text, strlen(text), "doc", doc, err);
}

START_TEST(json_reads_values_exactly)
{
    json_doc_t doc;
    const json_node_t *root, *v;
    uint64_t u;
    int64_t i;
    double d;
    size_t len;

    ck_assert_int_eq(parse(" {\"big\": 18446744073709551615, \"neg\": -9223372036854775808, "
                           "\"f\": 2.5e-3, \"s\": \"a\\u00e9\\ud83d\\ude00\\n\\u0000b\", "
                           "\"l\": [true, false, null, []], \"o\": {}} ",
                           &doc, NULL),
                     STATUS_OK);
    root = json_root(&doc);
    ck_assert_int_eq(root->kind, JSON_OBJECT);
    ck_assert_uint_eq(root->n, 6);
    ck_assert(json_u64(&doc, json_get(&doc, root, "big"), &u));
    ck_assert_uint_eq(u, UINT64_MAX);
    ck_assert(json_i64(&doc, json_get(&doc, root, "neg"), &i));
    ck_assert_int_eq(i, INT64_MIN);
    ck_assert(!json_u64(&doc, json_get(&doc, root, "neg"), &u));
    ck_assert(!json_i64(&doc, json_get(&doc, root, "f"), &i));
    ck_assert(json_double(&doc, json_get(&doc, root, "f"), &d));
    ck_assert_double_eq(d, 2.5e-3);

    const char *s = json_string(&doc, json_get(&doc, root, "s"), &len);
    ck_assert_uint_eq(len, 1 + 2 + 4 + 1 + 1 + 1);
    ck_assert_int_eq(memcmp(s, "a\xc3\xa9\xf0\x9f\x98\x80\n\0b", len), 0);
    v = json_first(&doc, json_get(&doc, root, "l"));
    ck_assert_int_eq(v->kind, JSON_TRUE);
    v = json_next(&doc, json_next(&doc, json_next(&doc, v)));
    ck_assert_int_eq(v->kind, JSON_ARRAY);
    ck_assert_ptr_null(json_next(&doc, v));
    json_free(&doc);
    /* Valid JSON, but no double holds the first two. */
    ck_assert_int_eq(parse("[1e999, -1e999, 1e-999]", &doc, NULL), STATUS_OK);
    v = json_first(&doc, json_root(&doc));
    ck_assert(!json_double(&doc, v, &d));
    ck_assert(!json_double(&doc, json_next(&doc, v), &d));
    ck_assert(json_double(&doc, json_next(&doc, json_next(&doc, v)), &d));
    json_free(&doc);
}
END_TEST

START_TEST(json_rejects_what_rfc_8259_does)
{
    static const char *bad[] = {
        "",
        "[1,]",
        "{\"a\":1,}",
        "01",
        "1.",
        "-",
        "1e",
        "[1 2]",
        "{\"a\" 1}",
        "{1:2}",
        "\"\\x\"",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"a",
        "nul",
        "[] []",
        "\"\x01\"",
        "\"\xc0\xaf\"",
        "\"\xed\xa0\x80\"",
        "\"\xf4\x90\x80\x80\"",
        "{\"a\":1,\"a\":1}",
        "// c\n1",
        "'a'",
        "NaN",
        "[\"\\u12\"]",
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        json_doc_t doc;
        status_msg_t err = {0};
        ck_assert_msg(parse(bad[k], &doc, &err) == STATUS_DATA_LOSS, "accepted %s", bad[k]);
        ck_assert_msg(strncmp(err.text, "doc", 3) == 0, "%s", err.text);
        json_free(&doc);
    }
}
END_TEST

START_TEST(json_limits_nesting)
{
    char deep[200];
    json_doc_t doc;

    memset(deep, '[', sizeof(deep));
    deep[sizeof(deep) - 1] = '\0';
    ck_assert_int_eq(parse(deep, &doc, NULL), STATUS_DATA_LOSS);
    json_free(&doc);
}
END_TEST

START_TEST(json_writer_escapes)
{
    pb_buf_t b = {0};
    json_doc_t doc;

    json_put_string(&b, "q\"b\\s\x01\n");
    ck_assert_int_eq(json_parse((const char *)b.data, b.len, "w", &doc, NULL), STATUS_OK);
    ck_assert_str_eq(json_string(&doc, json_root(&doc), NULL), "q\"b\\s\x01\n");
    json_free(&doc);
    pb_buf_free(&b);
}
END_TEST

START_TEST(atomic_put_replaces_whole_files)
{
    size_t len;
    uint8_t *buf;
    status_msg_t err = {0};

    ck_assert_int_eq(atomic_file_put(path_of("f"), "old", 3, NULL), STATUS_OK);
    ck_assert_int_eq(atomic_file_put(path_of("f"), "newer", 5, NULL), STATUS_OK);
    buf = slurp(path_of("f"), &len);
    ck_assert_uint_eq(len, 5);
    free(buf);
    ck_assert_int_eq(files_in_dir(), 1);
    ck_assert_int_eq(atomic_file_put("/nonexistent/dir/f", "x", 1, &err), STATUS_IO);
    ck_assert_ptr_nonnull(strstr(err.text, "/nonexistent/dir/f"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("safetensors"), *js = tcase_create("json");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, writer_matches_the_golden_file);
    tcase_add_test(tc, every_dtype_round_trips_with_metadata);
    tcase_add_test(tc, duplicate_and_non_utf8_names_write_nothing);
    tcase_add_test(tc, big_tensors_round_trip_on_any_filesystem);
    tcase_add_test(tc, damaged_files_are_data_loss_naming_what);
    tcase_add_test(tc, missing_file_is_not_found);
    tcase_add_test(tc, atomic_put_replaces_whole_files);
    tcase_add_test(js, json_reads_values_exactly);
    tcase_add_test(js, json_rejects_what_rfc_8259_does);
    tcase_add_test(js, json_limits_nesting);
    tcase_add_test(js, json_writer_escapes);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, js);
    return check_run(s, CK_FORK);
}
