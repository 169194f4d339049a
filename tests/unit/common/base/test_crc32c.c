#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "base/crc32c.h"

START_TEST(crc32c_matches_the_published_vectors)
{
    uint8_t zeros[32] = {0};
    const char tb[] = "\x1a\x11"
                      "CRC test, one two";
    ck_assert_uint_eq(crc32c("123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(crc32c(zeros, sizeof(zeros)), 0x8A9136AAu);
    ck_assert_uint_eq(crc32c_mask(crc32c(tb, sizeof(tb) - 1)), 0x5794D08Au);
    ck_assert_uint_eq(crc32c_mask(0), 0xA282EAD8u);
}
END_TEST

START_TEST(crc32c_extends_across_splits_and_unmasks)
{
    uint8_t buf[1000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 31 + 7);
    uint32_t whole = crc32c(buf, sizeof(buf));
    for (size_t cut = 0; cut <= sizeof(buf); cut += 37)
        ck_assert_uint_eq(crc32c_extend(crc32c(buf, cut), buf + cut, sizeof(buf) - cut), whole);
    ck_assert_uint_eq(crc32c_unmask(crc32c_mask(whole)), whole);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("crc32c");
    TCase *tc = tcase_create("crc32c");
    tcase_add_test(tc, crc32c_matches_the_published_vectors);
    tcase_add_test(tc, crc32c_extends_across_splits_and_unmasks);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
