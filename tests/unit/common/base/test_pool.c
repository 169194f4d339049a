/* The thread pool the parameter server spreads optimizer updates over: every part of every job
 * runs exactly once, callers return only when their parts are done, and several callers at once
 * share the pool. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/pool.h"
#include "check_run.h"

enum { PARTS = 64, CALLERS = 4, ROUNDS = 200 };

typedef struct job {
    _Atomic int runs[PARTS];
    _Atomic int finished;
    pthread_t *threads; /* the thread that ran each part */
} job_t;

static void count_part(void *arg, size_t part)
{
    job_t *j = arg;
    atomic_fetch_add(&j->runs[part], 1);
    if (j->threads != NULL)
        j->threads[part] = pthread_self();
    if (part % 7 == 0)
        usleep(100); /* some parts slower than others */
    atomic_fetch_add(&j->finished, 1);
}

static void assert_each_ran_once(job_t *j, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(atomic_load(&j->runs[i]), 1);
    ck_assert_int_eq(atomic_load(&j->finished), (int)n); /* all done before pool_run returned */
}

START_TEST(every_part_runs_once_and_before_pool_run_returns)
{
    pool_t *p;
    status_msg_t err;
    pthread_t threads[PARTS];
    size_t others = 0;

    ck_assert_int_eq(pool_new(3, &p, &err), STATUS_OK);
    ck_assert_uint_eq(pool_threads(p), 3);
    /* On a busy machine the caller may finish a round before any pool thread wakes: rounds go
     * on (every one checked) until a pool thread has taken a part, for up to 100 sweeps. */
    for (int sweep = 0; sweep < 100 && others == 0; sweep++) {
        for (size_t n = 0; n <= PARTS; n += 9) {
            job_t *j = calloc(1, sizeof(*j));
            j->threads = threads;
            pool_run(p, n, count_part, j);
            assert_each_ran_once(j, n);
            for (size_t i = 0; i < n; i++)
                others += !pthread_equal(threads[i], pthread_self());
            free(j);
        }
    }
    ck_assert_uint_gt(others, 0); /* the pool's threads took parts */
    pool_free(p);
}
END_TEST

START_TEST(without_threads_the_caller_runs_every_part)
{
    pool_t *p;
    status_msg_t err;
    pthread_t threads[PARTS];
    job_t *j = calloc(1, sizeof(*j));

    ck_assert_int_eq(pool_new(0, &p, &err), STATUS_OK);
    j->threads = threads;
    pool_run(p, PARTS, count_part, j);
    assert_each_ran_once(j, PARTS);
    for (size_t i = 0; i < PARTS; i++)
        ck_assert(pthread_equal(threads[i], pthread_self()));
    pool_free(p);
    memset(j, 0, sizeof(*j));
    pool_run(NULL, 5, count_part, j);
    assert_each_ran_once(j, 5);
    free(j);
    pool_free(NULL);
}
END_TEST

static pool_t *shared;

static void *caller_main(void *arg)
{
    (void)arg;
    for (int r = 0; r < ROUNDS; r++) {
        job_t *j = calloc(1, sizeof(*j));
        size_t n = (size_t)(r % PARTS) + 1;
        pool_run(shared, n, count_part, j);
        for (size_t i = 0; i < n; i++)
            if (atomic_load(&j->runs[i]) != 1)
                return (void *)1;
        if (atomic_load(&j->finished) != (int)n)
            return (void *)1;
        free(j);
    }
    return NULL;
}

START_TEST(several_callers_share_the_pool)
{
    pthread_t t[CALLERS];
    status_msg_t err;

    ck_assert_int_eq(pool_new(2, &shared, &err), STATUS_OK);
    for (int i = 0; i < CALLERS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, caller_main, NULL), 0);
    for (int i = 0; i < CALLERS; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        ck_assert_ptr_null(rc);
    }
    pool_free(shared);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_part_runs_once_and_before_pool_run_returns);
    tcase_add_test(tc, without_threads_the_caller_runs_every_part);
    tcase_add_test(tc, several_callers_share_the_pool);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
