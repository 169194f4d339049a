#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "base/status.h"

START_TEST(status_every_code_has_a_name_and_a_sentence)
{
    for (int s = 0; s < STATUS_COUNT_; s++) {
        ck_assert_ptr_nonnull(status_name((status_t)s));
        ck_assert_str_ne(status_name((status_t)s), "UNKNOWN_STATUS");
        ck_assert_uint_gt(strlen(status_str((status_t)s)), 5);
    }
    ck_assert_str_eq(status_name(STATUS_OK), "OK");
    ck_assert_str_eq(status_name(STATUS_COUNT_), "UNKNOWN_STATUS");
    ck_assert_str_eq(status_name((status_t)-1), "UNKNOWN_STATUS");
    ck_assert_ptr_nonnull(strstr(status_str((status_t)999), "bug"));
}
END_TEST

START_TEST(status_names_are_unique)
{
    for (int a = 0; a < STATUS_COUNT_; a++)
        for (int b = a + 1; b < STATUS_COUNT_; b++)
            ck_assert_str_ne(status_name((status_t)a), status_name((status_t)b));
}
END_TEST

START_TEST(status_groups_say_who_is_at_fault)
{
    ck_assert_int_eq(status_group(STATUS_OK), STATUS_GROUP_NONE);
    ck_assert_int_eq(status_group(STATUS_BAD_TF_CONFIG), STATUS_GROUP_INVALID_ARGUMENT);
    ck_assert_int_eq(status_group(STATUS_ADDRESS_IN_USE), STATUS_GROUP_SYSTEM);
    ck_assert_int_eq(status_group(STATUS_UNAVAILABLE), STATUS_GROUP_RPC);
    ck_assert_int_eq(status_group(STATUS_NCCL), STATUS_GROUP_NCCL);
    ck_assert_int_eq(status_group(STATUS_TIMEOUT), STATUS_GROUP_TIMEOUT);
    ck_assert_int_eq(status_group(STATUS_INTERNAL), STATUS_GROUP_INTERNAL);
}
END_TEST

START_TEST(status_grpc_codes_map_both_ways)
{
    ck_assert_int_eq(status_to_grpc(STATUS_OK), 0);
    ck_assert_int_eq(status_to_grpc(STATUS_INVALID_ARGUMENT), 3);
    ck_assert_int_eq(status_to_grpc(STATUS_NOT_FOUND), 5);
    ck_assert_int_eq(status_to_grpc(STATUS_UNIMPLEMENTED), 12);
    ck_assert_int_eq(status_to_grpc(STATUS_UNAVAILABLE), 14);
    ck_assert_int_eq(status_to_grpc(STATUS_TIMEOUT), 4);
    /* Every status maps to a code that maps back into the same group or, for the
     * many-to-one codes, to a status of the same gRPC code. */
    for (int s = 0; s < STATUS_COUNT_; s++) {
        int code = status_to_grpc((status_t)s);
        ck_assert_int_ge(code, 0);
        ck_assert_int_le(code, 16);
        ck_assert_int_eq(status_to_grpc(status_from_grpc(code)), code == 13 ? 2 : code);
    }
}
END_TEST

START_TEST(status_errno_maps_to_the_right_fault)
{
    ck_assert_int_eq(status_from_errno(0), STATUS_OK);
    ck_assert_int_eq(status_from_errno(ENOMEM), STATUS_NO_MEMORY);
    ck_assert_int_eq(status_from_errno(EADDRINUSE), STATUS_ADDRESS_IN_USE);
    ck_assert_int_eq(status_from_errno(ENOENT), STATUS_NOT_FOUND);
    ck_assert_int_eq(status_from_errno(EACCES), STATUS_IO);
    ck_assert_int_eq(status_from_errno(ECONNREFUSED), STATUS_UNAVAILABLE);
    ck_assert_int_eq(status_from_errno(EBADF), STATUS_SYSTEM);
}
END_TEST

START_TEST(status_fail_formats_and_returns_the_status)
{
    status_msg_t m = {0};
    ck_assert_int_eq(status_fail(&m, STATUS_BAD_CONFIG, "key %s: %d", "threads", 7),
                     STATUS_BAD_CONFIG);
    ck_assert_str_eq(m.text, "key threads: 7");
    ck_assert_int_eq(m.status, STATUS_BAD_CONFIG);
    ck_assert_int_eq(status_fail(NULL, STATUS_IO, "x"), STATUS_IO);
}
END_TEST

/* Text that reaches a proto3 string or a person: well-formed UTF-8 passes, anything else is
 * escaped, and nothing is ever cut inside a character. */
START_TEST(utf8_is_checked_and_escaped_without_cutting_characters)
{
    char out[16];

    ck_assert(utf8_valid_text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14));
    ck_assert(!utf8_valid_text("a\0b", 3));
    ck_assert(!utf8_valid_text("\xc3\x28", 2));         /* bad continuation */
    ck_assert(!utf8_valid_text("\xc0\xaf", 2));         /* overlong '/' */
    ck_assert(!utf8_valid_text("\xed\xa0\x80", 3));     /* a surrogate */
    ck_assert(!utf8_valid_text("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
    ck_assert(!utf8_valid_text("\xe2\x82", 2));         /* cut short */
    ck_assert_str_eq(utf8_escape(out, sizeof(out), "a\xff\x01z", 4), "a\\xff\\x01z");
    /* "\xe2\x82\xac" does not fit after 13 bytes of 'x' in 16: it is left out whole. */
    ck_assert_str_eq(utf8_escape(out, sizeof(out), "xxxxxxxxxxxxx\xe2\x82\xac", 16),
                     "xxxxxxxxxxxxx");
}
END_TEST

/* A sentence cut at the end of its buffer never ends inside a character. */
START_TEST(status_fail_never_cuts_a_character)
{
    status_msg_t m;
    char long_text[600];

    memset(long_text, 'x', sizeof(long_text));
    for (size_t i = 509; i + 2 < sizeof(long_text); i += 3)
        memcpy(long_text + i, "\xe2\x82\xac", 3);
    long_text[sizeof(long_text) - 1] = '\0';
    for (int shift = 0; shift < 3; shift++) {
        status_fail(&m, STATUS_IO, "%.*s%s", shift, "yy", long_text);
        ck_assert(utf8_valid_text(m.text, strlen(m.text)));
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("status");

    tcase_add_test(tc, status_every_code_has_a_name_and_a_sentence);
    tcase_add_test(tc, status_names_are_unique);
    tcase_add_test(tc, status_groups_say_who_is_at_fault);
    tcase_add_test(tc, status_grpc_codes_map_both_ways);
    tcase_add_test(tc, status_errno_maps_to_the_right_fault);
    tcase_add_test(tc, status_fail_formats_and_returns_the_status);
    tcase_add_test(tc, utf8_is_checked_and_escaped_without_cutting_characters);
    tcase_add_test(tc, status_fail_never_cuts_a_character);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
