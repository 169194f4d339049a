/* The chief's closure queue (chief/dispatch.c): every step of an epoch runs exactly once over the
 * live workers, a worker that is gone gives its closure back, the staleness bound holds, and
 * errors and cancellation end the epoch. The workers here are functions: the RPC path is covered
 * by the integration tests with real daemons. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_run.h"
#include "dispatch.h"

#define WORKERS 3
#define SLOTS   (WORKERS + 1) /* room for one that joins */

typedef struct fake {
    dispatch_t d;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic bool cancel;
    bool stopping;
    Tessera__V1__JobProgress progress;
    /* behaviour */
    status_t fail_rc[SLOTS]; /* returned by the worker's calls from fail_from on */
    int fail_from[SLOTS];    /* 1-based call number; 0: never fails */
    int short_by[SLOTS];     /* steps the worker's first closure comes back short */
    int sleep_us[SLOTS];
    int cancel_after; /* cancel the job after this many calls (0: never) */
    /* what happened */
    int calls[SLOTS], ran[SLOTS], lost[SLOTS];
    int64_t max_lead; /* largest lead over the slowest live worker at a call */
    uint64_t ids_seen;
    /* by shard: each shard's batches per epoch, the batches read of it and by whom, each batch's
     * reads (epochs 0 to 3), a front closure that did not start where its shard stood, and
     * closures reading the same part of a shard at once */
    int64_t shard_read[WORKERS], read_by[WORKERS][SLOTS];
    int64_t shard_epoch[WORKERS], shard_batch[WORKERS];
    int batch_reads[WORKERS][4][32];
    bool out_of_place, shared;
    int reading[WORKERS][2]; /* front, tail */
} fake_t;

static status_t fake_run(void *arg, size_t w, const dispatch_closure_t *cl, dispatch_result_t *ret,
                         status_msg_t *err)
{
    fake_t *f = arg;
    int n, steps = cl->steps;

    pthread_mutex_lock(&f->mu);
    n = ++f->calls[w];
    {
        int64_t min = INT64_MAX;
        for (size_t k = 0; k < f->d.n_workers; k++)
            if (f->d.alive[k] && f->d.worker_steps[k] < min)
                min = f->d.worker_steps[k];
        if (f->d.worker_steps[w] - min > f->max_lead)
            f->max_lead = f->d.worker_steps[w] - min;
    }
    f->ids_seen++;
    if (f->cancel_after > 0 && (int)f->ids_seen >= f->cancel_after)
        atomic_store(&f->cancel, true);
    pthread_mutex_unlock(&f->mu);
    if (f->sleep_us[w] > 0)
        nanosleep(&(struct timespec){0, f->sleep_us[w] * 1000L}, NULL);
    if (f->fail_from[w] > 0 && n >= f->fail_from[w])
        return status_fail(err, f->fail_rc[w], "worker %zu says no", w);
    if (n == 1 && f->short_by[w] > 0)
        steps -= f->short_by[w];
    pthread_mutex_lock(&f->mu);
    f->ran[w] += steps;
    *ret = (dispatch_result_t){
        .steps = steps, .examples = steps * 10, .loss_sum = steps * 10 * 0.5, .correct = steps};
    if (cl->shard >= 0) { /* reads the shard from where the chief says */
        int s = cl->shard;
        int64_t b = cl->data_batch + steps;
        /* its front, from where it stands (or the next epoch's start, others having read the
         * last batches of this one) */
        if (!cl->tail && !(cl->data_epoch > f->shard_epoch[s] && cl->data_batch == 0))
            f->out_of_place |=
                cl->data_epoch != f->shard_epoch[s] || cl->data_batch != f->shard_batch[s];
        for (int64_t k = cl->data_batch; k < b && cl->data_epoch < 4 && k < 32; k++)
            f->batch_reads[s][cl->data_epoch][k]++;
        f->shard_read[s] += steps;
        f->read_by[s][w] += steps;
        ret->data_epoch = b == f->d.shard_batches[s] ? cl->data_epoch + 1 : cl->data_epoch;
        ret->data_batch = b == f->d.shard_batches[s] ? 0 : b;
        if (!cl->tail) {
            f->shard_epoch[s] = ret->data_epoch;
            f->shard_batch[s] = ret->data_batch;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return STATUS_OK;
}

/* Counts the closures reading each shard at once: never more than one. */
static status_t fake_call(void *arg, size_t w, const dispatch_closure_t *cl, dispatch_result_t *ret,
                          status_msg_t *err)
{
    fake_t *f = arg;
    status_t rc;

    pthread_mutex_lock(&f->mu);
    if (cl->shard >= 0)
        f->shared |= f->reading[cl->shard][cl->tail]++ != 0;
    pthread_mutex_unlock(&f->mu);
    rc = fake_run(arg, w, cl, ret, err);
    pthread_mutex_lock(&f->mu);
    if (cl->shard >= 0)
        f->reading[cl->shard][cl->tail]--;
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static void fake_lost(void *arg, size_t w, const char *why)
{
    fake_t *f = arg;
    f->lost[w]++;
    ck_assert_ptr_nonnull(strstr(why, "says no"));
}

static fake_t *fake_new(int spc, int64_t staleness)
{
    fake_t *f = calloc(1, sizeof(*f));
    status_msg_t err = {0};

    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    tessera__v1__job_progress__init(&f->progress);
    f->d = (dispatch_t){.mu = &f->mu,
                        .cv = &f->cv,
                        .steps_per_closure = spc,
                        .max_staleness = staleness,
                        .cancel = &f->cancel,
                        .stopping = &f->stopping,
                        .progress = &f->progress,
                        .call = fake_call,
                        .lost = fake_lost,
                        .arg = f};
    ck_assert_int_eq(dispatch_init(&f->d, WORKERS, SLOTS, &err), STATUS_OK);
    return f;
}

static void fake_free(fake_t *f)
{
    dispatch_done(&f->d);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

static int total_ran(const fake_t *f)
{
    return f->ran[0] + f->ran[1] + f->ran[2] + f->ran[3];
}

START_TEST(every_step_runs_once)
{
    fake_t *f = fake_new(4, 0);
    status_msg_t err = {0};

    ck_assert_int_eq(dispatch_epoch(&f->d, 101, &err), STATUS_OK);
    ck_assert_int_eq(total_ran(f), 101);
    ck_assert_int_eq(f->progress.step, 101);
    ck_assert_double_eq_tol(f->progress.loss, 0.5, 1e-12);
    ck_assert_double_eq_tol(f->progress.accuracy, 0.1, 1e-12);
    ck_assert_uint_eq(f->d.next_closure, 26); /* 25 closures of 4 and one of 1 */
    ck_assert_int_eq(dispatch_epoch(&f->d, 7, &err), STATUS_OK);
    ck_assert_int_eq(f->progress.step, 108);
    fake_free(f);
}
END_TEST

/* A worker that is gone gives its closure back to the others, once, and is not called again. */
START_TEST(a_lost_workers_closure_goes_back_on_the_queue)
{
    fake_t *f = fake_new(5, 0);
    status_msg_t err = {0};

    f->fail_rc[1] = STATUS_UNAVAILABLE;
    f->fail_from[1] = 2;
    f->sleep_us[0] = f->sleep_us[1] = f->sleep_us[2] = 200;
    ck_assert_int_eq(dispatch_epoch(&f->d, 200, &err), STATUS_OK);
    ck_assert_int_eq(total_ran(f), 200);
    ck_assert_int_eq(f->lost[1], 1);
    ck_assert_int_eq(f->calls[1], 2);
    ck_assert(!f->d.alive[1]);
    ck_assert_uint_eq(dispatch_first_alive(&f->d), 0);
    /* The next epoch runs on the two that are left. */
    ck_assert_int_eq(dispatch_epoch(&f->d, 50, &err), STATUS_OK);
    ck_assert_int_eq(total_ran(f), 250);
    ck_assert_int_eq(f->calls[1], 2);
    fake_free(f);
}
END_TEST

/* The last closure in flight is lost after the others have run everything else: its steps
 * go to a worker that waited for it, not to nobody. */
START_TEST(a_closure_lost_at_the_end_of_the_epoch_is_run_by_another)
{
    fake_t *f = fake_new(1, 0);
    status_msg_t err = {0};

    f->fail_rc[2] = STATUS_UNAVAILABLE;
    f->fail_from[2] = 1;
    f->sleep_us[0] = f->sleep_us[1] = 1000;
    f->sleep_us[2] = 100000; /* the others are done long before */
    ck_assert_int_eq(dispatch_epoch(&f->d, 30, &err), STATUS_OK);
    ck_assert_int_eq(total_ran(f), 30);
    ck_assert_int_eq(f->lost[2], 1);
    ck_assert_int_eq(f->progress.step, 30);
    fake_free(f);
}
END_TEST

/* A worker out of data comes back short: the steps it did not run go to the others. */
START_TEST(a_short_closure_hands_the_rest_on)
{
    fake_t *f = fake_new(10, 0);
    status_msg_t err = {0};

    f->short_by[2] = 7;
    ck_assert_int_eq(dispatch_epoch(&f->d, 60, &err), STATUS_OK);
    ck_assert_int_eq(total_ran(f), 60);
    ck_assert_int_eq(f->progress.step, 60);
    fake_free(f);
}
END_TEST

START_TEST(the_epoch_fails_when_every_worker_is_gone)
{
    fake_t *f = fake_new(2, 0);
    status_msg_t err = {0};

    for (int w = 0; w < WORKERS; w++) {
        f->fail_rc[w] = w == 2 ? STATUS_TIMEOUT : STATUS_UNAVAILABLE;
        f->fail_from[w] = 1;
    }
    ck_assert_int_ne(dispatch_epoch(&f->d, 40, &err), STATUS_OK);
    ck_assert(err.status == STATUS_UNAVAILABLE || err.status == STATUS_TIMEOUT);
    ck_assert_msg(strstr(err.text, "every worker failed") != NULL, "%s", err.text);
    ck_assert_uint_eq(dispatch_first_alive(&f->d), SIZE_MAX);
    fake_free(f);
}
END_TEST

/* Any other error is the job's, not the worker's: the epoch fails naming the worker. */
START_TEST(another_error_fails_the_epoch)
{
    fake_t *f = fake_new(2, 0);
    status_msg_t err = {0};

    f->fail_rc[2] = STATUS_INVALID_ARGUMENT;
    f->fail_from[2] = 2;
    f->sleep_us[0] = f->sleep_us[1] = f->sleep_us[2] = 200;
    ck_assert_int_eq(dispatch_epoch(&f->d, 1000, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.text, "worker 2: worker 2 says no") != NULL, "%s", err.text);
    ck_assert_int_lt(total_ran(f), 1000);
    ck_assert_int_eq(f->lost[2], 0);
    fake_free(f);
}
END_TEST

/* With a bound of 3 steps, no worker starts a closure more than 3 steps ahead of the slowest,
 * however slow it is; without one, the fast workers run ahead. */
START_TEST(the_staleness_bound_holds_fast_workers_back)
{
    fake_t *f = fake_new(1, 3);
    status_msg_t err = {0};

    f->sleep_us[2] = 3000;
    ck_assert_int_eq(dispatch_epoch(&f->d, 90, &err), STATUS_OK);
    ck_assert_int_eq(total_ran(f), 90);
    ck_assert_int_le(f->max_lead, 3);
    ck_assert_int_ge(f->ran[2], 90 / 3 - 3);
    fake_free(f);

    f = fake_new(1, 0);
    f->sleep_us[2] = 3000;
    ck_assert_int_eq(dispatch_epoch(&f->d, 90, &err), STATUS_OK);
    ck_assert_int_gt(f->max_lead, 3);
    fake_free(f);
}
END_TEST

START_TEST(cancelling_ends_the_epoch)
{
    fake_t *f = fake_new(1, 0);
    status_msg_t err = {0};

    f->cancel_after = 10;
    ck_assert_int_eq(dispatch_epoch(&f->d, 100000, &err), STATUS_CANCELLED);
    ck_assert_int_lt(total_ran(f), 20);
    fake_free(f);
}
END_TEST

/* Each batch of each shard read exactly once in epoch e. */
static void assert_read_once(const fake_t *f, int e, const int64_t *sizes)
{
    for (int s = 0; s < WORKERS; s++)
        for (int64_t k = 0; k < 32; k++)
            ck_assert_msg(f->batch_reads[s][e][k] == (k < sizes[s] ? 1 : 0),
                          "epoch %d, shard %d, batch %lld read %d times", e, s, (long long)k,
                          f->batch_reads[s][e][k]);
}

/* By shard, an epoch reads each shard's batches exactly once, from where the shard stands; a
 * lost worker's shard is read by the others, one closure at a time; a worker done with its own
 * reads the last batches of another's. */
START_TEST(by_shard_every_shard_is_read_once_a_lost_ones_by_the_others)
{
    fake_t *f = fake_new(3, 0);
    status_msg_t err = {0};
    static const int64_t sizes[WORKERS] = {20, 20, 17};

    f->d.by_shard = true;
    for (int s = 0; s < WORKERS; s++)
        f->d.shard_batches[s] = sizes[s];
    f->fail_rc[1] = STATUS_UNAVAILABLE;
    f->fail_from[1] = 3;
    f->sleep_us[0] = f->sleep_us[1] = f->sleep_us[2] = 300;
    for (int e = 0; e < 2; e++) {
        f->progress.epoch = e;
        ck_assert_int_eq(dispatch_epoch(&f->d, 57, &err), STATUS_OK);
        ck_assert(f->d.epoch_by_shard);
        assert_read_once(f, e, sizes);
        for (int s = 0; s < WORKERS; s++) {
            const dispatch_pos_t *p = &f->d.pos[s];
            ck_assert_int_eq(f->shard_read[s], sizes[s] * (e + 1));
            /* the front stands past the epoch, or where the others read its tail from */
            ck_assert_msg((p->epoch == e + 1 && p->batch == 0) ||
                              (p->epoch == e && p->end > 0 && p->batch == p->end),
                          "shard %d at %lld/%lld (end %lld)", s, (long long)p->epoch,
                          (long long)p->batch, (long long)p->end);
        }
    }
    ck_assert_msg(!f->out_of_place, "out of place");
    ck_assert_msg(!f->shared, "shared");
    ck_assert_int_eq(f->lost[1], 1);
    ck_assert_int_eq(f->read_by[1][1], 6); /* two closures, then lost */
    ck_assert_int_eq(f->read_by[1][0] + f->read_by[1][2], 34);
    ck_assert_int_eq(f->progress.step, 114);

    /* positions from another number of workers: the epoch falls back to a pool */
    f->progress.epoch = 2;
    f->d.pos[0] = (dispatch_pos_t){.epoch = 2, .batch = 5};
    ck_assert_int_eq(dispatch_epoch(&f->d, 57, &err), STATUS_OK);
    ck_assert(!f->d.epoch_by_shard);
    ck_assert_int_eq(f->progress.step, 171);
    fake_free(f);
}
END_TEST

typedef struct joiner {
    fake_t *f;
    int64_t at_step;
} joiner_t;

/* Takes worker 3 in once the epoch is past at_step, as the chief's watchdog does. */
static void *join_later(void *arg)
{
    joiner_t *j = arg;
    fake_t *f = j->f;

    for (;;) {
        pthread_mutex_lock(&f->mu);
        if (f->progress.step >= j->at_step) {
            dispatch_revive(&f->d, 3);
            pthread_mutex_unlock(&f->mu);
            return NULL;
        }
        pthread_mutex_unlock(&f->mu);
        nanosleep(&(struct timespec){0, 200000L}, NULL);
    }
}

/* A worker that joins mid-epoch gets a dispatcher at once and reads the last batches of the
 * others' shards; a closure of it that fails gives its batches back: every batch is still read
 * exactly once, and the next epoch has four workers from its start. */
START_TEST(by_shard_a_worker_that_joins_reads_the_last_batches_of_the_others)
{
    fake_t *f = fake_new(2, 0);
    status_msg_t err = {0};
    static const int64_t sizes[WORKERS] = {24, 24, 22};
    joiner_t j = {.f = f, .at_step = 10};
    pthread_t tid;

    f->d.by_shard = true;
    for (int s = 0; s < WORKERS; s++)
        f->d.shard_batches[s] = sizes[s];
    f->sleep_us[0] = f->sleep_us[1] = f->sleep_us[2] = 2000;
    f->sleep_us[3] = 500;
    f->fail_rc[3] = STATUS_UNAVAILABLE;
    f->fail_from[3] = 4; /* its fourth closure: lost, its tail back to the others */
    ck_assert_int_eq(f->d.n_workers, 3);
    ck_assert_int_eq(pthread_create(&tid, NULL, join_later, &j), 0);
    ck_assert_int_eq(dispatch_epoch(&f->d, 70, &err), STATUS_OK);
    pthread_join(tid, NULL);
    ck_assert_int_eq(f->d.n_workers, 4);
    ck_assert(f->d.epoch_by_shard);
    assert_read_once(f, 0, sizes);
    ck_assert_int_eq(f->calls[3], 4);
    ck_assert_int_eq(f->ran[3], 6); /* three closures of 2 */
    ck_assert_int_eq(f->lost[3], 1);
    ck_assert_msg(!f->out_of_place, "out of place");
    ck_assert_msg(!f->shared, "shared");
    ck_assert_int_eq(f->progress.step, 70);

    /* back for the next epoch: it reads from its start */
    f->fail_from[3] = 0;
    pthread_mutex_lock(&f->mu);
    dispatch_revive(&f->d, 3);
    pthread_mutex_unlock(&f->mu);
    f->progress.epoch = 1;
    ck_assert_int_eq(dispatch_epoch(&f->d, 70, &err), STATUS_OK);
    assert_read_once(f, 1, sizes);
    ck_assert_int_gt(f->ran[3], 6);
    ck_assert_int_eq(f->progress.step, 140);
    fake_free(f);
}
END_TEST

static Suite *dispatch_suite(void)
{
    Suite *s = suite_create("dispatch");
    TCase *tc = tcase_create("dispatch");
    tcase_add_test(tc, every_step_runs_once);
    tcase_add_test(tc, a_lost_workers_closure_goes_back_on_the_queue);
    tcase_add_test(tc, a_short_closure_hands_the_rest_on);
    tcase_add_test(tc, a_closure_lost_at_the_end_of_the_epoch_is_run_by_another);
    tcase_add_test(tc, the_epoch_fails_when_every_worker_is_gone);
    tcase_add_test(tc, another_error_fails_the_epoch);
    tcase_add_test(tc, the_staleness_bound_holds_fast_workers_back);
    tcase_add_test(tc, cancelling_ends_the_epoch);
    tcase_add_test(tc, by_shard_every_shard_is_read_once_a_lost_ones_by_the_others);
    tcase_add_test(tc, by_shard_a_worker_that_joins_reads_the_last_batches_of_the_others);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(dispatch_suite(), CK_FORK);
}
