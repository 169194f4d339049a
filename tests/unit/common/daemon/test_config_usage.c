/* The config loader's help, version, usage text and commented sample file. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "config_fixture.h"

/* Runs config_load with one argument while capturing stdout; returns the text (caller frees). */
static char *load_capturing_stdout(const char *arg, config_action_t *action, status_t *rc,
                                   test_opts_t *o)
{
    char path[] = "/tmp/tessera-test-stdout-XXXXXX";
    char *argv[] = {"test-prog", "--threads=2", (char *)arg, "--bogus", NULL};
    status_msg_t err = {0};
    int fd = mkstemp(path), saved;
    char *text = calloc(1, 65536);
    ssize_t n;

    ck_assert_int_ge(fd, 0);
    ck_assert_ptr_nonnull(text);
    fflush(stdout);
    saved = dup(STDOUT_FILENO);
    ck_assert_int_ge(dup2(fd, STDOUT_FILENO), 0);
    memset(o, 0, sizeof(*o));
    *rc = config_load(&test_table, o, 4, argv, action, &err);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    n = pread(fd, text, 65535, 0);
    ck_assert_int_ge(n, 0);
    close(fd);
    unlink(path);
    return text;
}

START_TEST(help_flag_prints_usage_to_stdout_and_stops)
{
    config_action_t action = CONFIG_RUN;
    test_opts_t o;
    status_t rc;
    char *out = load_capturing_stdout("--help", &action, &rc, &o);

    ck_assert_int_eq(rc, STATUS_OK);
    ck_assert_int_eq(action, CONFIG_HELP);
    ck_assert_ptr_nonnull(strstr(out, "Usage: test-prog [--config FILE] [OPTIONS]"));
    ck_assert_ptr_null(o.listen); /* nothing loaded */
    free(out);
    config_done(&test_table, &o);

    out = load_capturing_stdout("-h", &action, &rc, &o);
    ck_assert_int_eq(rc, STATUS_OK);
    ck_assert_int_eq(action, CONFIG_HELP);
    ck_assert_ptr_nonnull(strstr(out, "Usage: test-prog"));
    free(out);
    config_done(&test_table, &o);
}
END_TEST

START_TEST(version_flag_returns_version_action)
{
    config_action_t action = CONFIG_RUN;
    test_opts_t o;
    status_t rc;
    char *out = load_capturing_stdout("--version", &action, &rc, &o);

    ck_assert_int_eq(rc, STATUS_OK);
    ck_assert_int_eq(action, CONFIG_VERSION);
    ck_assert_str_eq(out, "");
    free(out);
    config_done(&test_table, &o);
}
END_TEST

/* Renders a table function into a string (caller frees). */
static char *render(void (*fn)(const config_table_t *, FILE *))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    ck_assert_ptr_nonnull(f);
    fn(&test_table, f);
    ck_assert_int_eq(fclose(f), 0);
    return buf;
}

static void assert_line_width(const char *text, size_t max)
{
    for (const char *p = text; *p != '\0';) {
        size_t len = strcspn(p, "\n");
        ck_assert_msg(len <= max, "line too long: %.*s", (int)len, p);
        p += len + (p[len] == '\n');
    }
}

START_TEST(usage_lists_every_flag_with_help_and_default)
{
    char *out = render(config_print_usage);

    ck_assert_ptr_nonnull(strstr(out, "Usage: test-prog [--config FILE] [OPTIONS]\n"));
    ck_assert_ptr_nonnull(strstr(out, test_table.summary));
    ck_assert_ptr_nonnull(strstr(out, "--config FILE"));
    ck_assert_ptr_nonnull(strstr(out, "  --listen HOST:PORT\n"));
    ck_assert_ptr_nonnull(strstr(out, "Address the server listens on."));
    ck_assert_ptr_nonnull(strstr(out, "Default: 0.0.0.0:2222"));
    ck_assert_ptr_nonnull(strstr(out, "  --ps HOST:PORT,...\n"));
    ck_assert_ptr_nonnull(strstr(out, "  --threads N\n"));
    ck_assert_ptr_nonnull(strstr(out, "Default: 4\n"));
    ck_assert_ptr_nonnull(strstr(out, "  --verbose, --no-verbose\n"));
    ck_assert_ptr_nonnull(strstr(out, "  --timeout DURATION\n"));
    ck_assert_ptr_nonnull(strstr(out, "Default: 5s\n"));
    ck_assert_ptr_nonnull(strstr(out, "  --log-level LEVEL\n"));
    ck_assert_ptr_nonnull(strstr(out, "--help"));
    ck_assert_ptr_nonnull(strstr(out, "--version"));
    /* The long help of --ps is wrapped, not cut. */
    ck_assert_ptr_nonnull(strstr(out, "to it.\n"));
    assert_line_width(out, 82);
    free(out);
}
END_TEST

START_TEST(sample_comments_out_every_option_with_help_and_default)
{
    char *out = render(config_write_sample);

    ck_assert_ptr_nonnull(strstr(out, "# Sample configuration for test-prog.\n"));
    ck_assert_ptr_nonnull(
        strstr(out, "# Address the server listens on.\n# listen: \"0.0.0.0:2222\"\n"));
    ck_assert_ptr_nonnull(strstr(out, "# ps:\n"));
    ck_assert_ptr_nonnull(strstr(out, "# seeds: [\"a:1\", \"[::1]:2\"]\n"));
    ck_assert_ptr_nonnull(strstr(out, "# name: \"tessera \\\"test\\\"\"\n"));
    ck_assert_ptr_nonnull(strstr(out, "# threads: 4\n"));
    ck_assert_ptr_nonnull(strstr(out, "# verbose: false\n"));
    ck_assert_ptr_nonnull(strstr(out, "# timeout: 5s\n"));
    ck_assert_ptr_nonnull(strstr(out, "# log-level: info\n"));
    ck_assert_ptr_nonnull(strstr(out, "to it.\n# ps:"));
    for (const char *p = out; *p != '\0';) {
        size_t len = strcspn(p, "\n");
        ck_assert_msg(len == 0 || p[0] == '#', "uncommented line: %.*s", (int)len, p);
        p += len + (p[len] == '\n');
    }
    assert_line_width(out, 82);
    free(out);
}
END_TEST

START_TEST(sample_loads_back_as_the_defaults)
{
    test_opts_t o;
    status_msg_t err;
    char *out = render(config_write_sample);

    ck_assert_int_eq(load_yaml(&o, &err, out, NULL), STATUS_OK);
    assert_defaults(&o);
    config_done(&test_table, &o);
    free(out);
}
END_TEST

/* Uncommenting every "# key: default" line must give a loadable file with the same values. */
START_TEST(sample_with_every_option_uncommented_loads_as_the_defaults)
{
    test_opts_t o;
    status_msg_t err;
    char *out = render(config_write_sample);
    char *edited = calloc(1, strlen(out) + 1), *w = edited;

    ck_assert_ptr_nonnull(edited);
    for (const char *p = out; *p != '\0';) {
        size_t len = strcspn(p, "\n") + (p[strcspn(p, "\n")] == '\n');
        const char *line = p;
        for (size_t i = 0; i < test_table.n_options; i++) {
            size_t k = strlen(test_table.options[i].key);
            if (strncmp(p, "# ", 2) == 0 && strncmp(p + 2, test_table.options[i].key, k) == 0 &&
                p[2 + k] == ':') {
                line = p + 2;
                break;
            }
        }
        memcpy(w, line, len - (size_t)(line - p));
        w += len - (size_t)(line - p);
        p += len;
    }
    ck_assert_ptr_nonnull(strstr(edited, "\nlisten: \"0.0.0.0:2222\"\n"));
    ck_assert_ptr_nonnull(strstr(edited, "\nlog-level: info\n"));
    ck_assert_int_eq(load_yaml(&o, &err, edited, NULL), STATUS_OK);
    assert_defaults(&o);
    config_done(&test_table, &o);
    free(edited);
    free(out);
}
END_TEST

START_TEST(bad_default_in_table_is_an_internal_error)
{
    static const config_option_t bad[] = {
        {"threads", CONFIG_INT, offsetof(test_opts_t, threads), "many", 1, 64, "Threads."},
    };
    config_table_t t = {.program = "bad-prog", .options = bad, .n_options = 1};
    test_opts_t o = {0};
    status_msg_t err = {0};
    config_action_t action;
    char *argv[] = {"bad-prog", NULL};

    ck_assert_int_eq(config_load(&t, &o, 1, argv, &action, &err), STATUS_INTERNAL);
    assert_mentions(&err, "default", "threads", "many", NULL);
    config_done(&t, &o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config_usage");
    TCase *tc = tcase_create("config_usage");

    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, help_flag_prints_usage_to_stdout_and_stops);
    tcase_add_test(tc, version_flag_returns_version_action);
    tcase_add_test(tc, usage_lists_every_flag_with_help_and_default);
    tcase_add_test(tc, sample_comments_out_every_option_with_help_and_default);
    tcase_add_test(tc, sample_loads_back_as_the_defaults);
    tcase_add_test(tc, sample_with_every_option_uncommented_loads_as_the_defaults);
    tcase_add_test(tc, bad_default_in_table_is_an_internal_error);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
