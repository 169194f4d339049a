/* HOST:PORT as flags, config files and TF_CONFIG give it. */
#include <check.h>
#include <string.h>

#include "check_run.h"
#include "base/net.h"

START_TEST(host_and_port_are_split_with_brackets_for_ipv6)
{
    char host[64];
    int port = -1;

    ck_assert_int_eq(net_split_hostport("ps-0.example:2222", host, sizeof(host), &port, NULL),
                     STATUS_OK);
    ck_assert_str_eq(host, "ps-0.example");
    ck_assert_int_eq(port, 2222);
    ck_assert_int_eq(net_split_hostport("[::1]:0", host, sizeof(host), &port, NULL), STATUS_OK);
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(port, 0);
    ck_assert_int_eq(net_split_hostport(":65535", host, sizeof(host), &port, NULL), STATUS_OK);
    ck_assert_str_eq(host, "");
    ck_assert_int_eq(port, 65535);
}
END_TEST

/* The port is strict decimal: " 80" and "+80" were once taken as 80. */
START_TEST(bad_addresses_are_refused_naming_the_address)
{
    const char *bad[] = {"",        "localhost", "h:",     "h: 80",   "h:+80",   "h:80 ", "h:0x50",
                         "h:65536", "h:-1",      "::1:80", "[::1]80", "[::1:80", "h:80x"};
    char host[64];
    int port;
    status_msg_t err = {0};

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(net_split_hostport(bad[i], host, sizeof(host), &port, &err) ==
                          STATUS_INVALID_ARGUMENT,
                      "'%s' was accepted", bad[i]);
        ck_assert_msg(bad[i][0] == '\0' || strstr(err.text, bad[i]) != NULL, "%s", err.text);
        ck_assert(!net_hostport_valid(bad[i]));
    }
    ck_assert_int_eq(net_split_hostport("averyveryverylonghostname:1", host, 8, &port, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.text, "host name too long"));
}
END_TEST

static Suite *net_suite(void)
{
    Suite *s = suite_create("net");
    TCase *tc = tcase_create("net");

    tcase_add_test(tc, host_and_port_are_split_with_brackets_for_ipv6);
    tcase_add_test(tc, bad_addresses_are_refused_naming_the_address);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(net_suite(), CK_FORK);
}
