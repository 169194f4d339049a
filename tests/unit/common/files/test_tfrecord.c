/* TFRecord framing against TensorFlow's own bytes (the records of "" and "hello"), and the
 * reader on plain and gzip files, cut files and wrong CRCs: each an error naming the file and
 * the record's offset. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "check_run.h"
#include "files/tfrecord.h"

static char dir[64];

static void setup(void)
{
    strcpy(dir, "/tmp/tessera-test-tfrecord-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Writes len bytes to dir/name (gzip-compressed when gz) and returns the path. */
static const char *put(const char *name, const void *data, size_t len, int gz)
{
    static char path[4][128];
    static int next;
    char *p = path[next++ % 4];

    snprintf(p, sizeof(path[0]), "%s/%s", dir, name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(gzwrite(f, data, (unsigned)len), (int)len);
        ck_assert_int_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(p, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(data, 1, len, f), len);
        ck_assert_int_eq(fclose(f), 0);
    }
    return p;
}

/* The records of "" and "hello", as TensorFlow's record writer frames them. */
static const uint8_t golden[] = {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x29, 0x03,
                                 0x98, 0x07, 0xd8, 0xea, 0x82, 0xa2, 0x05, 0x00, 0x00, 0x00,
                                 0x00, 0x00, 0x00, 0x00, 0xea, 0xb2, 0x04, 0x3e, 'h',  'e',
                                 'l',  'l',  'o',  0xbb, 0x1f, 0x1c, 0x19};

START_TEST(writer_frames_records_as_tensorflow_does)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    ck_assert_int_eq(tfrecord_write(f, "mem", "", 0, NULL), STATUS_OK);
    ck_assert_int_eq(tfrecord_write(f, "mem", "hello", 5, NULL), STATUS_OK);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_uint_eq(len, sizeof(golden));
    ck_assert_int_eq(memcmp(buf, golden, len), 0);
    free(buf);
}
END_TEST

static void read_golden(const char *path)
{
    tfrecord_reader_t *r;
    status_msg_t err = {0};
    const uint8_t *data;
    size_t len;

    ck_assert_msg(tfrecord_open(path, 1 << 20, &r, &err) == STATUS_OK, "%s", err.text);
    ck_assert_int_eq(tfrecord_next(r, &data, &len, &err), STATUS_OK);
    ck_assert_ptr_nonnull(data);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(tfrecord_next(r, &data, &len, &err), STATUS_OK);
    ck_assert_uint_eq(len, 5);
    ck_assert_int_eq(memcmp(data, "hello", 5), 0);
    ck_assert_uint_eq(tfrecord_offset(r), sizeof(golden));
    ck_assert_int_eq(tfrecord_next(r, &data, &len, &err), STATUS_OK);
    ck_assert_ptr_null(data); /* the end */
    tfrecord_close(r);
}

START_TEST(reader_takes_plain_and_gzip_files)
{
    read_golden(put("plain.tfrecord", golden, sizeof(golden), 0));
    read_golden(put("gz.tfrecord.gz", golden, sizeof(golden), 1));
}
END_TEST

START_TEST(large_records_round_trip)
{
    size_t n = 3u << 20;
    uint8_t *big = malloc(n);
    char path[128];
    FILE *f;
    tfrecord_reader_t *r;
    status_msg_t err = {0};
    const uint8_t *data;
    size_t len;

    for (size_t i = 0; i < n; i++)
        big[i] = (uint8_t)(i * 2654435761u >> 13);
    snprintf(path, sizeof(path), "%s/big.tfrecord", dir);
    f = fopen(path, "wb");
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(tfrecord_write(f, path, big, n - (size_t)k * 1000, &err), STATUS_OK);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(tfrecord_open(path, n, &r, &err), STATUS_OK);
    for (int k = 0; k < 3; k++) {
        ck_assert_msg(tfrecord_next(r, &data, &len, &err) == STATUS_OK, "%s", err.text);
        ck_assert_uint_eq(len, n - (size_t)k * 1000);
        ck_assert_int_eq(memcmp(data, big, len), 0);
    }
    tfrecord_close(r);
    free(big);
}
END_TEST

/* Reads path to its end or first error; returns the status with the message in err. */
static status_t read_all(const char *path, size_t max, status_msg_t *err)
{
    tfrecord_reader_t *r;
    const uint8_t *data;
    size_t len;
    status_t rc = tfrecord_open(path, max, &r, err);

    while (rc == STATUS_OK) {
        rc = tfrecord_next(r, &data, &len, err);
        if (data == NULL)
            break;
    }
    tfrecord_close(r);
    return rc;
}

static void expect_loss(const char *path, size_t max, const char *needle)
{
    status_msg_t err = {0};
    ck_assert_int_eq(read_all(path, max, &err), STATUS_DATA_LOSS);
    ck_assert_msg(strstr(err.text, path) != NULL && strstr(err.text, needle) != NULL,
                  "'%s' lacks the file or '%s'", err.text, needle);
}

START_TEST(damage_is_data_loss_naming_file_and_offset)
{
    uint8_t bad[sizeof(golden)];
    status_msg_t err = {0};

    /* Cut anywhere inside the second record. */
    for (size_t cut = 17; cut < sizeof(golden); cut++)
        expect_loss(put("cut.tfrecord", golden, cut, 0), 1 << 20, "at byte 16");
    expect_loss(put("cut.tfrecord.gz", golden, sizeof(golden) - 1, 1), 1 << 20, "at byte 16");
    memcpy(bad, golden, sizeof(bad));
    bad[30] ^= 1; /* a payload byte */
    expect_loss(put("crc.tfrecord", bad, sizeof(bad), 0), 1 << 20, "payload's CRC");
    memcpy(bad, golden, sizeof(bad));
    bad[16] = 0x06; /* the length, under its old CRC */
    expect_loss(put("len.tfrecord", bad, sizeof(bad), 0), 1 << 20, "length's CRC");
    expect_loss(put("max.tfrecord", golden, sizeof(golden), 0), 4, "claims 5 bytes");
    ck_assert_int_eq(read_all("/nonexistent/x.tfrecord", 16, &err), STATUS_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.text, "/nonexistent/x.tfrecord"));
}
END_TEST

/* A length claiming a terabyte in a 20-byte file costs nothing before the data runs out. */
START_TEST(claimed_length_is_not_allocated_up_front)
{
    uint8_t rec[20] = {0};
    const uint64_t tb = 1ull << 40;

    tfrecord_header(rec, (size_t)tb);
    expect_loss(put("huge.tfrecord", rec, sizeof(rec), 0), SIZE_MAX, "cut short");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tfrecord");
    TCase *tc = tcase_create("tfrecord");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, writer_frames_records_as_tensorflow_does);
    tcase_add_test(tc, reader_takes_plain_and_gzip_files);
    tcase_add_test(tc, large_records_round_trip);
    tcase_add_test(tc, damage_is_data_loss_naming_file_and_offset);
    tcase_add_test(tc, claimed_length_is_not_allocated_up_front);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
