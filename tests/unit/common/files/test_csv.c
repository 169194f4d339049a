/* The CSV reader on RFC 4180's cases (quotes holding delimiters, newlines and doubled quotes;
 * CRLF; a last row without a newline; empty fields and lines) and on what it must refuse, each
 * error naming the file and the line. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "files/csv.h"

static size_t text_len; /* of the next put's text: strlen unless set (a NUL inside) */

static const char *put(const char *text)
{
    static char path[64];
    FILE *f;

    snprintf(path, sizeof(path), "/tmp/tessera-test-csv-%d.csv", (int)getpid());
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(text, 1, text_len ? text_len : strlen(text), f);
    text_len = 0;
    fclose(f);
    return path;
}

/* Reads every row, joining each row's fields with '|' and the rows with '/'. */
static status_t read_all(const char *text, char delim, char *out, size_t len, status_msg_t *err)
{
    csv_reader_t *r;
    const csv_field_t *f;
    size_t n, at = 0;
    status_t rc;

    out[0] = '\0';
    ck_assert_int_eq(csv_open(put(text), delim, &r, NULL), STATUS_OK);
    while ((rc = csv_next(r, &f, &n, err)) == STATUS_OK && n > 0) {
        for (size_t i = 0; i < n; i++)
            at += (size_t)snprintf(out + at, len - at, "%s%s", i ? "|" : "", f[i].text);
        at += (size_t)snprintf(out + at, len - at, "/");
    }
    csv_close(r);
    return rc;
}

START_TEST(rfc_4180_cases)
{
    char out[512];

    ck_assert_int_eq(read_all("a,b,c\n1,2,3\n", ',', out, sizeof(out), NULL), STATUS_OK);
    ck_assert_str_eq(out, "a|b|c/1|2|3/");
    ck_assert_int_eq(read_all("a,b\r\n\"x,y\",\"say \"\"hi\"\"\"\r\n\"multi\nline\",4", ',', out,
                              sizeof(out), NULL),
                     STATUS_OK);
    ck_assert_str_eq(out, "a|b/x,y|say \"hi\"/multi\nline|4/");
    ck_assert_int_eq(read_all("a;b\n\n1;\n;2\n\n", ';', out, sizeof(out), NULL), STATUS_OK);
    ck_assert_str_eq(out, "a|b/1|/|2/");
    ck_assert_int_eq(read_all("", ',', out, sizeof(out), NULL), STATUS_OK);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq(read_all("\"q\"\r\n", ',', out, sizeof(out), NULL), STATUS_OK);
    ck_assert_str_eq(out, "q/");
}
END_TEST

static void expect_bad(const char *text, const char *needle)
{
    char out[512];
    status_msg_t err = {0};

    ck_assert_int_eq(read_all(text, ',', out, sizeof(out), &err), STATUS_DATA_LOSS);
    ck_assert_msg(strstr(err.text, ".csv:") && strstr(err.text, needle), "'%s' lacks '%s'",
                  err.text, needle);
}

START_TEST(damage_names_the_line)
{
    expect_bad("a\n\"open\n", ":2: a quoted field is not closed");
    expect_bad("a,b\n\"x\"y,2\n", ":2: a character after a closing quote");
    text_len = 6;
    expect_bad("a\nb\0c\n", ":2: a NUL byte");
}
END_TEST

START_TEST(missing_file)
{
    csv_reader_t *r;
    status_msg_t err = {0};

    ck_assert_int_eq(csv_open("/nonexistent/x.csv", ',', &r, &err), STATUS_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.text, "/nonexistent/x.csv"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("csv");
    TCase *tc = tcase_create("csv");
    int rc;
    char path[64];

    tcase_add_test(tc, rfc_4180_cases);
    tcase_add_test(tc, damage_names_the_line);
    tcase_add_test(tc, missing_file);
    suite_add_tcase(s, tc);
    rc = check_run(s, CK_NOFORK);
    snprintf(path, sizeof(path), "/tmp/tessera-test-csv-%d.csv", (int)getpid());
    unlink(path);
    return rc;
}
