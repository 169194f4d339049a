/* Whole-file reads: job files, Keras JSON and cluster files come through file_read_all. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check_run.h"
#include "base/file.h"

/* Writes len bytes of `fill` to a fresh temporary file and returns its path (free it). */
static char *temp_file(size_t len, char fill)
{
    char *path = strdup("/tmp/tessera-test-file.XXXXXX");
    int fd = mkstemp(path);
    char buf[4096];

    ck_assert_int_ge(fd, 0);
    memset(buf, fill, sizeof(buf));
    for (size_t done = 0; done < len;) {
        size_t n = len - done < sizeof(buf) ? len - done : sizeof(buf);
        ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
        done += n;
    }
    close(fd);
    return path;
}

START_TEST(a_file_is_read_whole_and_terminated)
{
    const size_t sizes[] = {0, 1, 8191, 8192, 100000};
    status_msg_t err = {0};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char *path = temp_file(sizes[i], 'a'), *text = NULL;
        size_t len = 1;
        ck_assert_msg(file_read_all(path, "test file", 100000, &text, &len, &err) == STATUS_OK,
                      "%s", err.text);
        ck_assert_uint_eq(len, sizes[i]);
        ck_assert_int_eq(text[len], '\0');
        ck_assert(len == 0 || (text[0] == 'a' && text[len - 1] == 'a'));
        free(text);
        unlink(path);
        free(path);
    }
}
END_TEST

START_TEST(a_file_over_the_limit_is_refused_by_name)
{
    char *path = temp_file(10001, 'b'), *text = NULL;
    size_t len = 0;
    status_msg_t err = {0};

    ck_assert_int_eq(file_read_all(path, "job file", 10000, &text, &len, &err),
                     STATUS_RESOURCE_EXHAUSTED);
    ck_assert_msg(strstr(err.text, "job file '/tmp/tessera-test-file.") != NULL &&
                      strstr(err.text, "is larger than 10000 bytes") != NULL,
                  "%s", err.text);
    ck_assert_ptr_null(text);
    unlink(path);
    free(path);
}
END_TEST

START_TEST(a_missing_file_or_a_directory_is_named_with_the_reason)
{
    char *text = NULL;
    size_t len = 0;
    status_msg_t err = {0};

    ck_assert_int_ne(file_read_all("/nonexistent/x.yaml", "job file", 100, &text, &len, &err),
                     STATUS_OK);
    ck_assert_str_eq(err.text,
                     "cannot read job file '/nonexistent/x.yaml': No such file or directory");
    ck_assert_int_ne(file_read_all("/tmp", "job file", 100, &text, &len, &err), STATUS_OK);
    ck_assert_msg(strstr(err.text, "cannot read job file '/tmp'") != NULL, "%s", err.text);
    ck_assert_ptr_null(text);
}
END_TEST

/* Streams: a pipe has no size to ask for. */
START_TEST(a_file_without_a_size_is_read_by_streaming)
{
    char *text = NULL;
    size_t len = 0;
    status_msg_t err = {0};

    ck_assert_msg(file_read_all("/proc/self/status", "status", 1 << 20, &text, &len, &err) ==
                      STATUS_OK,
                  "%s", err.text);
    ck_assert_uint_gt(len, 0);
    ck_assert_ptr_nonnull(strstr(text, "Name:"));
    free(text);
}
END_TEST

static Suite *file_suite(void)
{
    Suite *s = suite_create("file");
    TCase *tc = tcase_create("file");

    tcase_add_test(tc, a_file_is_read_whole_and_terminated);
    tcase_add_test(tc, a_file_over_the_limit_is_refused_by_name);
    tcase_add_test(tc, a_missing_file_or_a_directory_is_named_with_the_reason);
    tcase_add_test(tc, a_file_without_a_size_is_read_by_streaming);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(file_suite(), CK_FORK);
}
