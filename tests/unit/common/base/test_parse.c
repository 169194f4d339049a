/* The strict number parsers every flag, config key, job key and address goes through. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include "check_run.h"
#include "base/parse.h"

START_TEST(integers_are_decimal_digits_with_an_optional_minus_and_nothing_else)
{
    int64_t v = 7;

    ck_assert_int_eq(parse_int("42", 0, 100, &v), 0);
    ck_assert_int_eq(v, 42);
    ck_assert_int_eq(parse_int("-5", -10, 10, &v), 0);
    ck_assert_int_eq(v, -5);
    ck_assert_int_eq(parse_int("08", 0, 100, &v), 0); /* decimal, not octal */
    ck_assert_int_eq(v, 8);
    v = 7;
    /* Refused, and *ret left alone: what strtol would have taken. */
    const char *bad[] = {"", " 8", "+8", "8 ", "8x", "0x10", "-", "--1", "1e3", "1.0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(parse_int(bad[i], INT64_MIN, INT64_MAX, &v) == EINVAL, "'%s'", bad[i]);
    ck_assert_int_eq(v, 7);
}
END_TEST

START_TEST(integers_outside_the_bounds_or_int64_are_out_of_range)
{
    int64_t v = 7;

    ck_assert_int_eq(parse_int("101", 0, 100, &v), ERANGE);
    ck_assert_int_eq(parse_int("-1", 0, 100, &v), ERANGE);
    ck_assert_int_eq(parse_int("9223372036854775808", INT64_MIN, INT64_MAX, &v), ERANGE);
    ck_assert_int_eq(parse_int("-9223372036854775809", INT64_MIN, INT64_MAX, &v), ERANGE);
    ck_assert_int_eq(v, 7);
    ck_assert_int_eq(parse_int("9223372036854775807", INT64_MIN, INT64_MAX, &v), 0);
    ck_assert(v == INT64_MAX);
}
END_TEST

START_TEST(durations_take_a_unit_or_mean_milliseconds)
{
    int64_t ms = 0;

    ck_assert_int_eq(parse_duration_ms("250", &ms), 0);
    ck_assert_int_eq(ms, 250);
    ck_assert_int_eq(parse_duration_ms("250ms", &ms), 0);
    ck_assert_int_eq(ms, 250);
    ck_assert_int_eq(parse_duration_ms("2s", &ms), 0);
    ck_assert_int_eq(ms, 2000);
    ck_assert_int_eq(parse_duration_ms("3m", &ms), 0);
    ck_assert_int_eq(ms, 180000);
    ck_assert_int_eq(parse_duration_ms("1h", &ms), 0);
    ck_assert_int_eq(ms, 3600000);
    ck_assert_int_eq(parse_duration_ms("2 s", &ms), EINVAL);
    ck_assert_int_eq(parse_duration_ms("2sec", &ms), EINVAL);
    ck_assert_int_eq(parse_duration_ms("s", &ms), EINVAL);
    ck_assert_int_eq(parse_duration_ms("1.5s", &ms), EINVAL);
    ck_assert_int_eq(parse_duration_ms("9223372036854775807h", &ms), ERANGE);
    ck_assert_int_eq(ms, 3600000);
}
END_TEST

static Suite *parse_suite(void)
{
    Suite *s = suite_create("parse");
    TCase *tc = tcase_create("parse");

    tcase_add_test(tc, integers_are_decimal_digits_with_an_optional_minus_and_nothing_else);
    tcase_add_test(tc, integers_outside_the_bounds_or_int64_are_out_of_range);
    tcase_add_test(tc, durations_take_a_unit_or_mean_milliseconds);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(parse_suite(), CK_FORK);
}
