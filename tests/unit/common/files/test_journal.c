/* The journal's file: records back in order after a reopen, a torn last record dropped (and the
 * file cut back so that appends go on), damage before the end refused naming the offset, a file
 * that is not a journal refused, a second opener refused by the lock, and a rewrite. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_run.h"
#include "files/journal.h"

typedef struct seen {
    char recs[8][32];
    size_t n;
} seen_t;

static status_t collect(void *arg, const uint8_t *rec, size_t len, status_msg_t *err)
{
    seen_t *s = arg;
    if (s->n < 8 && len < 32)
        memcpy(s->recs[s->n], rec, len);
    s->n++;
    return STATUS_OK;
}

static char dir[64], path[128];

static void fresh(void)
{
    snprintf(dir, sizeof(dir), "/tmp/tessera-test-journal-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/state/journal", dir);
}

static void cleanup(void)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static journal_t *open_ok(seen_t *s, uint64_t *dropped)
{
    journal_t *j = NULL;
    status_msg_t err = {0};
    uint64_t d;

    memset(s, 0, sizeof(*s));
    ck_assert_msg(journal_open(path, collect, s, &j, dropped ? dropped : &d, &err) == STATUS_OK,
                  "%s", err.text);
    return j;
}

static void append3(void)
{
    seen_t s;
    status_msg_t err = {0};
    journal_t *j = open_ok(&s, NULL);

    ck_assert_uint_eq(s.n, 0);
    ck_assert_int_eq(journal_append(j, "one", 3, &err), STATUS_OK);
    ck_assert_int_eq(journal_append(j, "", 0, &err), STATUS_OK);
    ck_assert_int_eq(journal_append(j, "three", 5, &err), STATUS_OK);
    ck_assert_uint_eq(journal_size(j), 8 + 11 + 8 + 13);
    journal_close(j);
}

static off_t file_size(void)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_size;
}

START_TEST(records_come_back_in_order)
{
    seen_t s;
    journal_t *j;

    fresh();
    append3();
    j = open_ok(&s, NULL);
    ck_assert_uint_eq(s.n, 3);
    ck_assert_str_eq(s.recs[0], "one");
    ck_assert_str_eq(s.recs[1], "");
    ck_assert_str_eq(s.recs[2], "three");
    journal_close(j);
    cleanup();
}
END_TEST

START_TEST(a_torn_last_record_is_dropped_and_appends_go_on)
{
    seen_t s;
    uint64_t dropped;
    status_msg_t err = {0};
    journal_t *j;

    fresh();
    append3();
    ck_assert_int_eq(truncate(path, file_size() - 2), 0); /* "three" cut: a crash mid-append */
    j = open_ok(&s, &dropped);
    ck_assert_uint_eq(s.n, 2);
    ck_assert_uint_eq(dropped, 11);
    ck_assert_int_eq(file_size(), 8 + 11 + 8);
    ck_assert_int_eq(journal_append(j, "four", 4, &err), STATUS_OK);
    journal_close(j);
    j = open_ok(&s, &dropped);
    ck_assert_uint_eq(s.n, 3);
    ck_assert_str_eq(s.recs[2], "four");
    ck_assert_uint_eq(dropped, 0);
    journal_close(j);

    /* only the record header written */
    ck_assert_int_eq(truncate(path, file_size() - 12 + 5), 0);
    j = open_ok(&s, &dropped);
    ck_assert_uint_eq(s.n, 2);
    journal_close(j);
    cleanup();
}
END_TEST

static void flip(off_t at)
{
    int fd = open(path, O_RDWR);
    uint8_t b;
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

START_TEST(damage_before_the_end_is_refused_naming_the_offset)
{
    seen_t s;
    journal_t *j = NULL;
    status_msg_t err = {0};
    uint64_t dropped;

    fresh();
    append3();
    flip(8 + 8 + 1); /* in "one" */
    ck_assert_int_eq(journal_open(path, collect, &s, &j, &dropped, &err), STATUS_DATA_LOSS);
    ck_assert_ptr_null(j);
    ck_assert_msg(strstr(err.text, path) && strstr(err.text, "byte 8 ") &&
                      strstr(err.text, "damaged"),
                  "%s", err.text);
    ck_assert_int_eq(file_size(), 8 + 11 + 8 + 13); /* nothing cut */
    cleanup();

    /* the last record's checksum wrong: half written, dropped */
    fresh();
    append3();
    flip(file_size() - 1);
    j = open_ok(&s, &dropped);
    ck_assert_uint_eq(s.n, 2);
    ck_assert_uint_eq(dropped, 13);
    journal_close(j);
    cleanup();
}
END_TEST

START_TEST(not_a_journal_is_refused)
{
    seen_t s;
    journal_t *j = NULL;
    status_msg_t err = {0};
    uint64_t dropped;
    FILE *f;

    fresh();
    append3(); /* makes the directory */
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs("jobs: [a, b]\n", f);
    fclose(f);
    ck_assert_int_eq(journal_open(path, collect, &s, &j, &dropped, &err), STATUS_DATA_LOSS);
    ck_assert_msg(strstr(err.text, "is not a Tessera journal") != NULL, "%s", err.text);

    /* a header cut by a crash: an empty journal */
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs("TSJ", f);
    fclose(f);
    j = open_ok(&s, &dropped);
    ck_assert_uint_eq(s.n, 0);
    ck_assert_int_eq(file_size(), 8);
    journal_close(j);
    cleanup();
}
END_TEST

START_TEST(a_second_opener_is_refused)
{
    seen_t s, s2;
    journal_t *j, *j2 = NULL;
    status_msg_t err = {0};
    uint64_t dropped;

    fresh();
    j = open_ok(&s, NULL);
    ck_assert_int_eq(journal_open(path, collect, &s2, &j2, &dropped, &err), STATUS_UNAVAILABLE);
    ck_assert_msg(strstr(err.text, "in use by another process") != NULL, "%s", err.text);
    journal_close(j);
    j = open_ok(&s, NULL); /* closed: free again */
    journal_close(j);
    cleanup();
}
END_TEST

START_TEST(a_rewrite_replaces_the_records)
{
    seen_t s;
    pb_buf_t b = {0};
    status_msg_t err = {0};
    journal_t *j;

    fresh();
    append3();
    j = open_ok(&s, NULL);
    journal_frame(&b, "only", 4);
    ck_assert_int_eq(journal_replace(j, &b, &err), STATUS_OK);
    ck_assert_int_eq(journal_append(j, "after", 5, &err), STATUS_OK);
    journal_close(j);
    pb_buf_free(&b);
    j = open_ok(&s, NULL);
    ck_assert_uint_eq(s.n, 2);
    ck_assert_str_eq(s.recs[0], "only");
    ck_assert_str_eq(s.recs[1], "after");
    journal_close(j);
    cleanup();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("journal");
    TCase *tc = tcase_create("journal");

    tcase_add_test(tc, records_come_back_in_order);
    tcase_add_test(tc, a_torn_last_record_is_dropped_and_appends_go_on);
    tcase_add_test(tc, damage_before_the_end_is_refused_naming_the_offset);
    tcase_add_test(tc, not_a_journal_is_refused);
    tcase_add_test(tc, a_second_opener_is_refused);
    tcase_add_test(tc, a_rewrite_replaces_the_records);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
