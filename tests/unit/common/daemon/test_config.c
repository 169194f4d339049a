/* Unit tests for common/daemon/config.c: defaults, TF_CONFIG, YAML file and flags, in that order.
 */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "daemon/config.h"
#include "base/log.h"

#include "config_fixture.h"

/* ---- precedence ---- */

START_TEST(defaults_fill_every_option)
{
    test_opts_t o;
    status_msg_t err;
    config_action_t action = CONFIG_HELP;

    ck_assert_int_eq(load(&o, &action, &err, NULL), STATUS_OK);
    ck_assert_int_eq(action, CONFIG_RUN);
    assert_defaults(&o);
    config_done(&test_table, &o);
    ck_assert_ptr_null(o.listen);
    ck_assert_ptr_null(o.seeds.items);
}
END_TEST

START_TEST(tf_config_overrides_defaults)
{
    test_opts_t o;
    status_msg_t err;

    setenv("TF_CONFIG", TF_CONFIG_WORKER, 1);
    ck_assert_int_eq(load(&o, NULL, &err, NULL), STATUS_OK);
    ck_assert_str_eq(o.listen, "tf-w0:2222");
    assert_list(&o.ps, 2, "tf-ps0:2222", "tf-ps1:2222");
    ck_assert_int_eq(o.threads, 4);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(empty_tf_config_is_ignored)
{
    test_opts_t o;
    status_msg_t err;

    setenv("TF_CONFIG", "", 1);
    ck_assert_int_eq(load(&o, NULL, &err, NULL), STATUS_OK);
    assert_defaults(&o);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(invalid_tf_config_fails_the_load)
{
    test_opts_t o;
    status_msg_t err;

    setenv("TF_CONFIG", "{\"cluster\": {\"worker\": [\"w0\"]}}", 1);
    ck_assert_int_eq(load(&o, NULL, &err, NULL), STATUS_BAD_TF_CONFIG);
    assert_mentions(&err, "TF_CONFIG", "cluster.worker[0]", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(tf_config_is_not_read_without_a_hook)
{
    config_table_t t = test_table;
    test_opts_t o = {0};
    status_msg_t err = {0};
    config_action_t action;
    char *argv[] = {"test-prog", NULL};

    t.tf_config_cb = NULL;
    setenv("TF_CONFIG", "not json", 1);
    ck_assert_int_eq(config_load(&t, &o, 1, argv, &action, &err), STATUS_OK);
    assert_defaults(&o);
    config_done(&t, &o);
}
END_TEST

START_TEST(file_overrides_tf_config)
{
    test_opts_t o;
    status_msg_t err;

    setenv("TF_CONFIG", TF_CONFIG_WORKER, 1);
    ck_assert_int_eq(load_yaml(&o, &err, "listen: file-host:1\nthreads: 8\n", NULL), STATUS_OK);
    ck_assert_str_eq(o.listen, "file-host:1");
    assert_list(&o.ps, 2, "tf-ps0:2222", "tf-ps1:2222");
    ck_assert_int_eq(o.threads, 8);
    ck_assert_int_eq(o.timeout_ms, 5000);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(flags_override_file_and_tf_config)
{
    test_opts_t o;
    status_msg_t err;
    const char *path;

    setenv("TF_CONFIG", TF_CONFIG_WORKER, 1);
    path = write_temp("listen: file-host:1\nthreads: 8\nps:\n  - file-ps:1\ntimeout: 2s\n");
    ck_assert_int_eq(load(&o, NULL, &err, "--listen", "flag-host:3", "--config", path,
                          "--ps=f1:1,f2:2,f3:3", "--timeout=250ms", NULL),
                     STATUS_OK);
    ck_assert_str_eq(o.listen, "flag-host:3");
    assert_list(&o.ps, 3, "f1:1", "f2:2", "f3:3");
    ck_assert_int_eq(o.threads, 8);
    ck_assert_int_eq(o.timeout_ms, 250);
    ck_assert_int_eq(o.offset, 0);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(later_source_replaces_a_list)
{
    test_opts_t o;
    status_msg_t err;

    setenv("TF_CONFIG", TF_CONFIG_WORKER, 1);
    ck_assert_int_eq(load_yaml(&o, &err, "ps:\n  - file-ps:1\nseeds: []\n", NULL), STATUS_OK);
    assert_list(&o.ps, 1, "file-ps:1");
    ck_assert_uint_eq(o.seeds.n, 0);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--seeds", "x:9", NULL), STATUS_OK);
    assert_list(&o.seeds, 1, "x:9");
    config_done(&test_table, &o);
}
END_TEST

/* ---- flags ---- */

START_TEST(flag_value_may_follow_an_equals_sign_or_come_next)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--threads=7", "--name", "job one",
                          "--data-dir=", "--offset", "-5", NULL),
                     STATUS_OK);
    ck_assert_int_eq(o.threads, 7);
    ck_assert_str_eq(o.name, "job one");
    ck_assert_str_eq(o.data_dir, "");
    ck_assert_int_eq(o.offset, -5);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(later_flag_wins_over_earlier_flag)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--threads=7", "--threads=9", NULL), STATUS_OK);
    ck_assert_int_eq(o.threads, 9);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(boolean_flags_accept_bare_and_no_forms)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--verbose", "--no-metrics", NULL), STATUS_OK);
    ck_assert(o.verbose);
    ck_assert(!o.metrics);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--verbose=off", "--metrics=YES", NULL), STATUS_OK);
    ck_assert(!o.verbose);
    ck_assert(o.metrics);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(no_form_is_only_for_booleans_and_takes_no_value)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--no-listen", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "--no-listen", "--listen", "not a boolean", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--no-verbose=true", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "--no-verbose", "no value", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(boolean_flag_rejects_other_words)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--verbose=maybe", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "flag --verbose", "\"maybe\"", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(unknown_flag_is_rejected_with_a_pointer_to_help)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--foo", NULL), STATUS_BAD_CONFIG);
    ck_assert_str_eq(err.text, "unknown flag --foo (see test-prog --help)");
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--foo=1", NULL), STATUS_BAD_CONFIG);
    ck_assert_str_eq(err.text, "unknown flag --foo (see test-prog --help)");
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "-x", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "unknown flag -x", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(positional_arguments_are_rejected)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--verbose", "extra", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "\"extra\"", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--", "more", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "\"more\"", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(flag_without_value_is_rejected)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--listen", NULL), STATUS_BAD_CONFIG);
    ck_assert_str_eq(err.text, "flag --listen needs a value");
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--threads", "--verbose", NULL), STATUS_BAD_CONFIG);
    ck_assert_str_eq(err.text, "flag --threads needs a value");
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--config", NULL), STATUS_BAD_CONFIG);
    ck_assert_str_eq(err.text, "flag --config needs a value");
    config_done(&test_table, &o);
}
END_TEST

START_TEST(config_flag_may_be_given_once)
{
    test_opts_t o;
    status_msg_t err;
    const char *path = write_temp("");

    ck_assert_int_eq(load(&o, NULL, &err, "--config", path, "--config=x.yaml", NULL),
                     STATUS_BAD_CONFIG);
    assert_mentions(&err, "--config", "twice", NULL);
    config_done(&test_table, &o);
}
END_TEST

/* ---- values ---- */

START_TEST(integer_with_trailing_garbage_is_rejected)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--threads=12abc", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "flag --threads", "\"12abc\"", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--threads= 12", NULL), STATUS_BAD_CONFIG);
    config_done(&test_table, &o);
    ck_assert_int_eq(load(&o, NULL, &err, "--threads=0x10", NULL), STATUS_BAD_CONFIG);
    config_done(&test_table, &o);
    ck_assert_int_eq(load(&o, NULL, &err, "--threads=", NULL), STATUS_BAD_CONFIG);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(integer_outside_bounds_is_rejected)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--threads=65", NULL), STATUS_OUT_OF_RANGE);
    assert_mentions(&err, "flag --threads", "65", "1 to 64", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--threads", "0", NULL), STATUS_OUT_OF_RANGE);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--offset=99999999999999999999", NULL),
                     STATUS_OUT_OF_RANGE);
    assert_mentions(&err, "--offset", "99999999999999999999", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--threads=64", "--offset=-9223372036854775808", NULL),
                     STATUS_OK);
    ck_assert_int_eq(o.threads, 64);
    ck_assert(o.offset == INT64_MIN);
    config_done(&test_table, &o);
}
END_TEST

static const struct {
    const char *text;
    int64_t ms;
} good_durations[] = {
    {"250ms", 250}, {"2s", 2000}, {"1m", 60000}, {"1h", 3600000}, {"1500", 1500}, {"1ms", 1},
};

START_TEST(durations_take_ms_s_m_h_or_bare_milliseconds)
{
    test_opts_t o;
    status_msg_t err;
    char flag[64];

    snprintf(flag, sizeof(flag), "--timeout=%s", good_durations[_i].text);
    ck_assert_int_eq(load(&o, NULL, &err, flag, NULL), STATUS_OK);
    ck_assert_int_eq(o.timeout_ms, good_durations[_i].ms);
    config_done(&test_table, &o);
}
END_TEST

static const char *const bad_durations[] = {"5x", "1.5s", "s", "ms", "", "2 s", "1d", "-", "+1s"};

START_TEST(malformed_duration_is_rejected)
{
    test_opts_t o;
    status_msg_t err;
    char flag[64];

    snprintf(flag, sizeof(flag), "--timeout=%s", bad_durations[_i]);
    ck_assert_int_eq(load(&o, NULL, &err, flag, NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "flag --timeout", "not a duration", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(duration_outside_bounds_is_rejected)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--timeout=2h", NULL), STATUS_OUT_OF_RANGE);
    assert_mentions(&err, "flag --timeout", "2h", "3600000ms", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--timeout=0s", NULL), STATUS_OUT_OF_RANGE);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--timeout=9999999999999999h", NULL),
                     STATUS_OUT_OF_RANGE);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(malformed_address_is_rejected)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--listen=nohost", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "flag --listen", "nohost", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--listen=h:70000", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "h:70000", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--listen=[::1]:80", NULL), STATUS_OK);
    ck_assert_str_eq(o.listen, "[::1]:80");
    config_done(&test_table, &o);
}
END_TEST

START_TEST(address_list_flag_is_comma_separated_and_checked)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--ps", "a:1, b:2 ,[::1]:3", NULL), STATUS_OK);
    assert_list(&o.ps, 3, "a:1", "b:2", "[::1]:3");
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--ps=a:1,b", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "flag --ps", "'b'", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--ps=a:1,,b:2", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "flag --ps", "empty", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--ps=a:1,", NULL), STATUS_BAD_CONFIG);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--seeds=", NULL), STATUS_OK);
    ck_assert_uint_eq(o.seeds.n, 0);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(log_level_takes_syslog_names)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load(&o, NULL, &err, "--log-level=debug", NULL), STATUS_OK);
    ck_assert_int_eq(o.log_level, LOG_LEVEL_DEBUG);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--log-level", "warn", NULL), STATUS_OK);
    ck_assert_int_eq(o.log_level, LOG_LEVEL_WARNING);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--log-level=loud", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "flag --log-level", "\"loud\"", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(config_set_names_its_source_and_key)
{
    test_opts_t o = {0};
    status_msg_t err = {0};

    ck_assert_int_eq(config_set(&test_table, &o, "listen", "bad", "TF_CONFIG", &err),
                     STATUS_BAD_CONFIG);
    assert_mentions(&err, "TF_CONFIG: listen", "bad", NULL);
    ck_assert_ptr_null(o.listen);

    ck_assert_int_eq(config_set(&test_table, &o, "nope", "1", "TF_CONFIG", &err),
                     STATUS_BAD_CONFIG);
    assert_mentions(&err, "TF_CONFIG", "\"nope\"", NULL);

    ck_assert_int_eq(config_set(&test_table, &o, "listen", "h:1", "TF_CONFIG", &err), STATUS_OK);
    ck_assert_int_eq(config_set(&test_table, &o, "listen", "h:", "TF_CONFIG", &err),
                     STATUS_BAD_CONFIG);
    ck_assert_str_eq(o.listen, "h:1"); /* a failed set keeps the old value */
    ck_assert_int_eq(config_set(&test_table, &o, "listen", "h:2", "TF_CONFIG", &err), STATUS_OK);
    ck_assert_str_eq(o.listen, "h:2");
    config_done(&test_table, &o);
}
END_TEST

/* ---- file ---- */

START_TEST(file_sets_every_type)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load_yaml(&o, &err,
                               "# comment\n"
                               "listen: \"[::1]:9\"\n"
                               "ps: [\"a:1\", b:2]\n"
                               "seeds:\n  - c:3\n  - 'd:4'\n"
                               "name: hello world\n"
                               "data-dir: /var/lib/tessera\n"
                               "threads: 16\n"
                               "offset: -3\n"
                               "verbose: yes\n"
                               "metrics: off\n"
                               "timeout: 1m\n"
                               "log-level: notice\n",
                               NULL),
                     STATUS_OK);
    ck_assert_str_eq(o.listen, "[::1]:9");
    assert_list(&o.ps, 2, "a:1", "b:2");
    assert_list(&o.seeds, 2, "c:3", "d:4");
    ck_assert_str_eq(o.name, "hello world");
    ck_assert_str_eq(o.data_dir, "/var/lib/tessera");
    ck_assert_int_eq(o.threads, 16);
    ck_assert_int_eq(o.offset, -3);
    ck_assert(o.verbose);
    ck_assert(!o.metrics);
    ck_assert_int_eq(o.timeout_ms, 60000);
    ck_assert_int_eq(o.log_level, LOG_LEVEL_NOTICE);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(file_list_may_be_a_comma_separated_scalar)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load_yaml(&o, &err, "ps: a:1,b:2\n", NULL), STATUS_OK);
    assert_list(&o.ps, 2, "a:1", "b:2");
    config_done(&test_table, &o);
}
END_TEST

START_TEST(empty_file_loads_defaults)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load_yaml(&o, &err, "", NULL), STATUS_OK);
    assert_defaults(&o);
    config_done(&test_table, &o);

    ck_assert_int_eq(load_yaml(&o, &err, "# only a comment\n\n", NULL), STATUS_OK);
    assert_defaults(&o);
    config_done(&test_table, &o);

    ck_assert_int_eq(load_yaml(&o, &err, "---\n", NULL), STATUS_OK);
    assert_defaults(&o);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(file_null_value_unsets_strings_but_not_numbers)
{
    test_opts_t o;
    status_msg_t err;
    const char *path;
    char where[128];

    ck_assert_int_eq(load_yaml(&o, &err, "listen:\nseeds: ~\nname: ''\n", NULL), STATUS_OK);
    ck_assert_ptr_null(o.listen);
    ck_assert_uint_eq(o.seeds.n, 0);
    ck_assert_str_eq(o.name, "");
    config_done(&test_table, &o);

    ck_assert_int_eq(load_yaml(&o, &err, "verbose: true\nthreads:\n", &path), STATUS_BAD_CONFIG);
    snprintf(where, sizeof(where), "%s:2", path);
    assert_mentions(&err, where, "threads", "needs a value", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(unknown_file_key_is_rejected_with_file_and_line)
{
    test_opts_t o;
    status_msg_t err;
    const char *path;
    char where[128];

    ck_assert_int_eq(load_yaml(&o, &err, "listen: a:1\nthreads: 2\nbogus: 3\n", &path),
                     STATUS_BAD_CONFIG);
    snprintf(where, sizeof(where), "%s:3:", path);
    assert_mentions(&err, where, "\"bogus\"", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(config_key_is_not_accepted_inside_the_file)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_eq(load_yaml(&o, &err, "config: other.yaml\n", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "\"config\"", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(duplicate_file_key_is_rejected)
{
    test_opts_t o;
    status_msg_t err;
    const char *path;
    char where[128];

    ck_assert_int_eq(load_yaml(&o, &err, "threads: 2\nverbose: true\nthreads: 3\n", &path),
                     STATUS_BAD_CONFIG);
    snprintf(where, sizeof(where), "%s:3:", path);
    assert_mentions(&err, where, "\"threads\"", "line 1", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(nested_map_in_file_is_rejected)
{
    test_opts_t o;
    status_msg_t err;
    const char *path;

    ck_assert_int_eq(load_yaml(&o, &err, "listen:\n  host: a\n  port: 1\n", &path),
                     STATUS_BAD_CONFIG);
    assert_mentions(&err, path, "listen", "nested", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load_yaml(&o, &err, "ps:\n  - [a:1]\n", &path), STATUS_BAD_CONFIG);
    assert_mentions(&err, path, "ps", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(list_for_a_single_value_key_is_rejected)
{
    test_opts_t o;
    status_msg_t err;
    const char *path;
    char where[128];

    ck_assert_int_eq(load_yaml(&o, &err, "\nthreads: [1, 2]\n", &path), STATUS_BAD_CONFIG);
    snprintf(where, sizeof(where), "%s:2:", path);
    assert_mentions(&err, where, "threads", "single value", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(bad_file_value_names_file_line_and_key)
{
    test_opts_t o;
    status_msg_t err;
    const char *path;
    char where[128];

    ck_assert_int_eq(load_yaml(&o, &err, "listen: a:1\nthreads: 12abc\n", &path),
                     STATUS_BAD_CONFIG);
    snprintf(where, sizeof(where), "%s:2: threads", path);
    assert_mentions(&err, where, "12abc", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load_yaml(&o, &err, "ps:\n  - a:1\n  - nope\n", &path), STATUS_BAD_CONFIG);
    snprintf(where, sizeof(where), "%s:3: ps", path);
    assert_mentions(&err, where, "nope", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(top_level_must_be_a_mapping)
{
    test_opts_t o;
    status_msg_t err;
    const char *path;

    ck_assert_int_eq(load_yaml(&o, &err, "- listen\n- ps\n", &path), STATUS_BAD_CONFIG);
    assert_mentions(&err, path, "top level", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load_yaml(&o, &err, "just text\n", &path), STATUS_BAD_CONFIG);
    assert_mentions(&err, path, NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(second_yaml_document_is_rejected)
{
    test_opts_t o;
    status_msg_t err;
    const char *path;

    ck_assert_int_eq(load_yaml(&o, &err, "threads: 2\n---\nthreads: 3\n", &path),
                     STATUS_BAD_CONFIG);
    assert_mentions(&err, path, "one YAML document", NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(invalid_yaml_is_rejected_naming_the_file)
{
    test_opts_t o;
    status_msg_t err;
    const char *path;

    ck_assert_int_eq(load_yaml(&o, &err, "listen: a:1\nps: [a:1\n", &path), STATUS_BAD_CONFIG);
    assert_mentions(&err, path, "YAML", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load_yaml(&o, &err, "threads: &x 1\noffset: *x\n", &path), STATUS_BAD_CONFIG);
    assert_mentions(&err, path, NULL);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(unreadable_config_file_is_named)
{
    test_opts_t o;
    status_msg_t err;

    ck_assert_int_ne(load(&o, NULL, &err, "--config=/nonexistent/tessera/ps.yaml", NULL),
                     STATUS_OK);
    assert_mentions(&err, "/nonexistent/tessera/ps.yaml", NULL);
    config_done(&test_table, &o);

    ck_assert_int_eq(load(&o, NULL, &err, "--config", "/tmp", NULL), STATUS_BAD_CONFIG);
    assert_mentions(&err, "/tmp", "directory", NULL);
    config_done(&test_table, &o);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");

    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, defaults_fill_every_option);
    tcase_add_test(tc, tf_config_overrides_defaults);
    tcase_add_test(tc, empty_tf_config_is_ignored);
    tcase_add_test(tc, invalid_tf_config_fails_the_load);
    tcase_add_test(tc, tf_config_is_not_read_without_a_hook);
    tcase_add_test(tc, file_overrides_tf_config);
    tcase_add_test(tc, flags_override_file_and_tf_config);
    tcase_add_test(tc, later_source_replaces_a_list);
    tcase_add_test(tc, flag_value_may_follow_an_equals_sign_or_come_next);
    tcase_add_test(tc, later_flag_wins_over_earlier_flag);
    tcase_add_test(tc, boolean_flags_accept_bare_and_no_forms);
    tcase_add_test(tc, no_form_is_only_for_booleans_and_takes_no_value);
    tcase_add_test(tc, boolean_flag_rejects_other_words);
    tcase_add_test(tc, unknown_flag_is_rejected_with_a_pointer_to_help);
    tcase_add_test(tc, positional_arguments_are_rejected);
    tcase_add_test(tc, flag_without_value_is_rejected);
    tcase_add_test(tc, config_flag_may_be_given_once);
    tcase_add_test(tc, integer_with_trailing_garbage_is_rejected);
    tcase_add_test(tc, integer_outside_bounds_is_rejected);
    tcase_add_loop_test(tc, durations_take_ms_s_m_h_or_bare_milliseconds, 0,
                        (int)(sizeof(good_durations) / sizeof(good_durations[0])));
    tcase_add_loop_test(tc, malformed_duration_is_rejected, 0,
                        (int)(sizeof(bad_durations) / sizeof(bad_durations[0])));
    tcase_add_test(tc, duration_outside_bounds_is_rejected);
    tcase_add_test(tc, malformed_address_is_rejected);
    tcase_add_test(tc, address_list_flag_is_comma_separated_and_checked);
    tcase_add_test(tc, log_level_takes_syslog_names);
    tcase_add_test(tc, config_set_names_its_source_and_key);
    tcase_add_test(tc, file_sets_every_type);
    tcase_add_test(tc, file_list_may_be_a_comma_separated_scalar);
    tcase_add_test(tc, empty_file_loads_defaults);
    tcase_add_test(tc, file_null_value_unsets_strings_but_not_numbers);
    tcase_add_test(tc, unknown_file_key_is_rejected_with_file_and_line);
    tcase_add_test(tc, config_key_is_not_accepted_inside_the_file);
    tcase_add_test(tc, duplicate_file_key_is_rejected);
    tcase_add_test(tc, nested_map_in_file_is_rejected);
    tcase_add_test(tc, list_for_a_single_value_key_is_rejected);
    tcase_add_test(tc, bad_file_value_names_file_line_and_key);
    tcase_add_test(tc, top_level_must_be_a_mapping);
    tcase_add_test(tc, second_yaml_document_is_rejected);
    tcase_add_test(tc, invalid_yaml_is_rejected_naming_the_file);
    tcase_add_test(tc, unreadable_config_file_is_named);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(config_suite(), CK_FORK);
}
