/* tf.train.Example against TensorFlow's own bytes (formats reference: x = [1.0, 2.0]; id = [7],
 * s = ["ab"]), both encodings of repeated numbers (packed and not), protobuf's rules (the last of
 * a name given twice, Features in several pieces), and malformed bytes. */
#include <check.h>
#include <string.h>

#include "check_run.h"
#include "files/example.h"

static const uint8_t golden_x[] = {0x0a, 0x13, 0x0a, 0x11, 0x0a, 0x01, 0x78, 0x12, 0x0c, 0x12, 0x0a,
                                   0x0a, 0x08, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40};

static const uint8_t golden_3[] = {
    0x0a, 0x2d, 0x0a, 0x0b, 0x0a, 0x02, 0x69, 0x64, 0x12, 0x05, 0x1a, 0x03, 0x0a, 0x01, 0x07, 0x0a,
    0x0b, 0x0a, 0x01, 0x73, 0x12, 0x06, 0x0a, 0x04, 0x0a, 0x02, 0x61, 0x62, 0x0a, 0x11, 0x0a, 0x01,
    0x78, 0x12, 0x0c, 0x12, 0x0a, 0x0a, 0x08, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40};

START_TEST(writer_matches_tensorflows_bytes)
{
    example_writer_t w = {0};
    const float x[2] = {1.0f, 2.0f};
    const int64_t id[1] = {7};
    const uint8_t *ex;
    size_t len = 0;

    example_writer_reset(&w);
    example_add_floats(&w, "x", x, 2);
    ex = example_finish(&w, &len);
    ck_assert_uint_eq(len, sizeof(golden_x));
    ck_assert_int_eq(memcmp(ex, golden_x, len), 0);
    example_writer_reset(&w);
    example_add_int64s(&w, "id", id, 1);
    example_add_bytes(&w, "s", "ab", 2);
    example_add_floats(&w, "x", x, 2);
    ex = example_finish(&w, &len);
    ck_assert_uint_eq(len, sizeof(golden_3));
    ck_assert_int_eq(memcmp(ex, golden_3, len), 0);
    example_writer_free(&w);
}
END_TEST

START_TEST(reader_finds_each_feature)
{
    example_feature_t f;
    float v[2];
    const uint8_t *s;
    size_t len;

    ck_assert_int_eq(example_find(golden_3, sizeof(golden_3), "x", &f), 1);
    ck_assert_int_eq(f.kind, EXAMPLE_FLOAT_LIST);
    ck_assert_int_eq(example_count(&f), 2);
    ck_assert_int_eq(example_floats(&f, v, 2), 0);
    ck_assert(v[0] == 1.0f && v[1] == 2.0f);
    ck_assert_int_eq(example_floats(&f, v, 1), -1); /* not exactly one value */
    ck_assert_int_eq(example_find(golden_3, sizeof(golden_3), "id", &f), 1);
    ck_assert_int_eq(f.kind, EXAMPLE_INT64_LIST);
    ck_assert_int_eq(example_floats(&f, v, 1), 0);
    ck_assert(v[0] == 7.0f);
    ck_assert_int_eq(example_find(golden_3, sizeof(golden_3), "s", &f), 1);
    ck_assert_int_eq(example_bytes(&f, &s, &len), 1);
    ck_assert_uint_eq(len, 2);
    ck_assert_int_eq(memcmp(s, "ab", 2), 0);
    ck_assert_int_eq(example_floats(&f, v, 1), -1); /* bytes are not numbers */
    ck_assert_int_eq(example_find(golden_3, sizeof(golden_3), "nope", &f), 0);
    ck_assert_int_eq(example_find(golden_3, sizeof(golden_3), "", &f), 0);
}
END_TEST

/* Unpacked floats (fixed32 fields) and int64s (varint fields, one negative); "x" twice: the last
 * wins; Features in two pieces. */
START_TEST(unpacked_lists_and_protobuf_merging)
{
    static const uint8_t ex[] = {
        /* features piece 1: x = float_list{1.0, 2.0} unpacked */
        0x0a, 0x13, 0x0a, 0x11, 0x0a, 0x01, 0x78, 0x12, 0x0c, 0x12, 0x0a, 0x0d, 0x00, 0x00, 0x80,
        0x3f, 0x0d, 0x00, 0x00, 0x00, 0x40,
        /* features piece 2: x again = float_list{3.0}; n = int64_list{-1, 5, 6} unpacked */
        0x0a, 0x26, 0x0a, 0x0c, 0x0a, 0x01, 0x78, 0x12, 0x07, 0x12, 0x05, 0x0d, 0x00, 0x00, 0x40,
        0x40, 0x0a, 0x16, 0x0a, 0x01, 0x6e, 0x12, 0x11, 0x1a, 0x0f, 0x08, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x08, 0x05, 0x08, 0x06};
    example_feature_t f;
    float v[3];

    ck_assert_int_eq(example_find(ex, sizeof(ex), "x", &f), 1);
    ck_assert_int_eq(example_count(&f), 1);
    ck_assert_int_eq(example_floats(&f, v, 1), 0);
    ck_assert(v[0] == 3.0f);
    ck_assert_int_eq(example_find(ex, sizeof(ex), "n", &f), 1);
    ck_assert_int_eq(example_floats(&f, v, 3), 0);
    ck_assert(v[0] == -1.0f && v[1] == 5.0f && v[2] == 6.0f);
}
END_TEST

START_TEST(malformed_bytes_are_errors)
{
    example_feature_t f;
    float v[4];
    uint8_t bad[sizeof(golden_x)];

    /* cut anywhere */
    for (size_t n = 1; n < sizeof(golden_x); n++)
        ck_assert_int_ne(example_find(golden_x, n, "x", &f), 1);
    /* a packed float list of 7 bytes */
    memcpy(bad, golden_x, sizeof(bad));
    bad[12] = 0x07;
    ck_assert(example_find(bad, sizeof(bad), "x", &f) != 1 || example_count(&f) == -1);
    /* features as a varint */
    ck_assert_int_eq(example_find((const uint8_t *)"\x08\x01", 2, "x", &f), -1);
    /* an empty Example has no features */
    ck_assert_int_eq(example_find(golden_x, 0, "x", &f), 0);
    (void)v;
}
END_TEST

int main(void)
{
    Suite *s = suite_create("example");
    TCase *tc = tcase_create("example");

    tcase_add_test(tc, writer_matches_tensorflows_bytes);
    tcase_add_test(tc, reader_finds_each_feature);
    tcase_add_test(tc, unpacked_lists_and_protobuf_merging);
    tcase_add_test(tc, malformed_bytes_are_errors);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
