/* TensorBoard events against TensorBoard's golden encodings: the file_version record byte for
 * byte, a scalar in TensorFlow 2's tensor form; the file name and its first record. (TensorBoard
 * itself reads the files in the compat suite.) */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "files/events.h"
#include "files/tfrecord.h"

static size_t unhex(const char *hex, uint8_t *out)
{
    size_t n = 0;
    for (const char *p = hex; *p != '\0';) {
        unsigned v;
        if (*p == ' ') {
            p++;
            continue;
        }
        ck_assert_int_eq(sscanf(p, "%2x", &v), 1);
        out[n++] = (uint8_t)v;
        p += 2;
    }
    return n;
}

static void assert_bytes(const pb_buf_t *b, const char *hex)
{
    uint8_t want[256];
    size_t n = unhex(hex, want);

    ck_assert(!b->failed);
    ck_assert_uint_eq(b->len, n);
    ck_assert_int_eq(memcmp(b->data, want, n), 0);
}

START_TEST(file_version_record_matches_tensorboard)
{
    pb_buf_t b = {0};
    uint8_t head[12], foot[4], want[64];

    events_encode_file_version(&b, 1700000000.0);
    assert_bytes(&b, "09 00000040fc54d941 1a0d 627261696e2e4576656e743a32");
    tfrecord_header(head, b.len);
    tfrecord_footer(foot, b.data, b.len);
    unhex("1800000000000000 a37f4b22", want);
    ck_assert_int_eq(memcmp(head, want, 12), 0);
    unhex("eced8f9d", want);
    ck_assert_int_eq(memcmp(foot, want, 4), 0);
    pb_buf_free(&b);
}
END_TEST

START_TEST(scalar_is_tensorflow_2s_tensor_form)
{
    pb_buf_t b = {0};

    events_encode_scalar(&b, "loss", 3, 1700000001.0, 0.25f);
    assert_bytes(&b, "0900004040fc54d941 1003 2a23 0a21 0a046c6f7373 4a0d 0a09 0a077363616c617273 "
                     "2001 420a 0801 1200 2a04 0000803e");
    pb_buf_free(&b);
}
END_TEST

START_TEST(writer_makes_its_directory_and_a_tfevents_file)
{
    char dir[64], sub[128], cmd[160];
    events_writer_t *w;
    status_msg_t err = {0};
    tfrecord_reader_t *r;
    const uint8_t *data;
    size_t len;
    char path[512];
    FILE *p;
    int records = 0;

    strcpy(dir, "/tmp/tessera-test-events-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(sub, sizeof(sub), "%s/job/train", dir);
    ck_assert_msg(events_open(sub, &w, &err) == STATUS_OK, "%s", err.text);
    ck_assert_ptr_nonnull(strstr(events_path(w), "/job/train/events.out.tfevents."));
    ck_assert_int_eq(events_scalar(w, "loss", 3, 1700000001.0, 0.25f, &err), STATUS_OK);
    ck_assert_int_eq(events_close(w, &err), STATUS_OK);
    snprintf(cmd, sizeof(cmd), "ls %s/job/train/events.out.tfevents.*", dir);
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(fgets(path, sizeof(path), p));
    pclose(p);
    path[strcspn(path, "\n")] = '\0';
    ck_assert_int_eq(tfrecord_open(path, 1024, &r, &err), STATUS_OK);
    while (tfrecord_next(r, &data, &len, &err) == STATUS_OK && data != NULL)
        records++;
    ck_assert_int_eq(records, 2);
    tfrecord_close(r);
    /* A directory that cannot be made is named. */
    ck_assert_int_eq(events_open("/proc/no/such", &w, &err), STATUS_IO);
    ck_assert_ptr_nonnull(strstr(err.text, "/proc/no"));
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(reader_walks_fields_and_refuses_bad_encodings)
{
    static const uint8_t ok[] = {0x08, 0x96, 0x01, 0x12, 0x02, 'h', 'i', 0x1d, 1, 2, 3, 4};
    static const uint8_t *const bad[] = {
        (const uint8_t *)"\x08\x96",     /* cut varint */
        (const uint8_t *)"\x12\x05hi",   /* length past the end */
        (const uint8_t *)"\x00\x01",     /* field 0 */
        (const uint8_t *)"\x0b\x00",     /* a group */
        (const uint8_t *)"\x1d\x01\x02", /* cut fixed32 */
    };
    static const size_t bad_len[] = {2, 4, 2, 2, 3};
    pb_reader_t r = {ok, ok + sizeof(ok)};
    pb_field_t f;

    ck_assert_int_eq(pb_next(&r, &f), 1);
    ck_assert_int_eq(f.number, 1);
    ck_assert_uint_eq(f.u64, 150);
    ck_assert_int_eq(pb_next(&r, &f), 1);
    ck_assert_int_eq(f.wire, PB_LEN);
    ck_assert_uint_eq(f.len, 2);
    ck_assert_int_eq(memcmp(f.data, "hi", 2), 0);
    ck_assert_int_eq(pb_next(&r, &f), 1);
    ck_assert_uint_eq(f.u64, 0x04030201);
    ck_assert_int_eq(pb_next(&r, &f), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pb_reader_t br = {bad[i], bad[i] + bad_len[i]};
        ck_assert_msg(pb_next(&br, &f) == -1, "bad encoding %zu accepted", i);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("events");
    TCase *tc = tcase_create("events");

    tcase_add_test(tc, file_version_record_matches_tensorboard);
    tcase_add_test(tc, scalar_is_tensorflow_2s_tensor_form);
    tcase_add_test(tc, writer_makes_its_directory_and_a_tfevents_file);
    tcase_add_test(tc, reader_walks_fields_and_refuses_bad_encodings);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
