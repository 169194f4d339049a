#define _POSIX_C_SOURCE 200809L
#include "dispatch.h"

#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "base/clock.h"

typedef struct dispatcher {
    dispatch_t *d;
    size_t worker;
    pthread_t tid;
    bool started;
} dispatcher_t;

status_t dispatch_init(dispatch_t *d, size_t n_workers, status_msg_t *err)
{
    d->n_workers = n_workers;
    d->alive = calloc(n_workers + 1, sizeof(*d->alive));
    d->worker_steps = calloc(n_workers + 1, sizeof(*d->worker_steps));
    d->pos = calloc(n_workers + 1, sizeof(*d->pos));
    d->busy = calloc(n_workers + 1, sizeof(*d->busy));
    if (d->alive == NULL || d->worker_steps == NULL || d->pos == NULL || d->busy == NULL) {
        dispatch_done(d);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (size_t w = 0; w < n_workers; w++)
        d->alive[w] = true;
    return STATUS_OK;
}

void dispatch_done(dispatch_t *d)
{
    for (size_t w = 0; d->pos != NULL && w < d->n_workers; w++)
        free(d->pos[w].rng);
    free(d->pos);
    free(d->alive);
    free(d->busy);
    free(d->worker_steps);
    d->busy = NULL;
    d->alive = NULL;
    d->worker_steps = NULL;
    d->pos = NULL;
}

size_t dispatch_first_alive(const dispatch_t *d)
{
    for (size_t w = 0; w < d->n_workers; w++)
        if (d->alive[w])
            return w;
    return SIZE_MAX;
}

static int64_t slowest_alive(const dispatch_t *d)
{
    int64_t min = INT64_MAX;
    for (size_t w = 0; w < d->n_workers; w++)
        if (d->alive[w] && d->worker_steps[w] < min)
            min = d->worker_steps[w];
    return min;
}

void dispatch_revive(dispatch_t *d, size_t w)
{
    int64_t slowest = slowest_alive(d);

    /* the staleness bound counts from the others, not from when it was lost */
    if (slowest != INT64_MAX)
        d->worker_steps[w] = slowest;
    d->alive[w] = true;
    d->all_lost_at = 0;
    pthread_cond_broadcast(d->cv);
}

/* The closures in flight and still to hand out (mutex held). */
static void gauges(const dispatch_t *d)
{
    int64_t per = d->steps_per_closure > 0 ? d->steps_per_closure : 1;

    metric_set(d->m_running, d->in_flight);
    metric_set(d->m_queued, (double)((d->steps_left > 0 ? d->steps_left : 0) + per - 1) / per);
}

static bool stopped(const dispatch_t *d)
{
    return d->failed || atomic_load(d->cancel) || *d->stopping;
}

bool dispatch_paused(const dispatch_t *d)
{
    return (d->pause != NULL && atomic_load(d->pause)) ||
           (d->stop_step > 0 && d->progress->step + d->steps_in_flight >= d->stop_step) ||
           (d->stop_time > 0 && clock_now_s() >= d->stop_time);
}

/* The next closure's steps for worker w, waiting while the staleness bound holds it back; 0 when
 * the epoch is handed out, a pause is due or the job stops. Mutex held. */
static int take_closure(dispatch_t *d, size_t w)
{
    int steps;

    for (;;) {
        if (stopped(d) || d->steps_left <= 0 || dispatch_paused(d))
            return 0;
        if (d->max_staleness <= 0 || d->worker_steps[w] - slowest_alive(d) <= d->max_staleness)
            break;
        pthread_cond_wait(d->cv, d->mu);
    }
    steps = (int)(d->steps_left < d->steps_per_closure ? d->steps_left : d->steps_per_closure);
    if (d->stop_step > 0 && d->stop_step - (d->progress->step + d->steps_in_flight) < steps)
        steps = (int)(d->stop_step - (d->progress->step + d->steps_in_flight));
    d->steps_left -= steps;
    d->steps_in_flight += steps;
    d->in_flight++;
    gauges(d);
    return steps;
}

static void count_result(dispatch_t *d, size_t w, int steps, dispatch_result_t *res)
{
    Tessera__V1__JobProgress *p = d->progress;

    d->pos[w].epoch = res->data_epoch;
    d->pos[w].batch = res->data_batch;
    free(d->pos[w].rng);
    d->pos[w].rng = res->rng;
    d->pos[w].n_rng = res->n_rng;
    res->rng = NULL;
    p->step += res->steps;
    d->worker_steps[w] += res->steps;
    d->epoch_loss += res->loss_sum;
    d->epoch_correct += res->correct;
    d->epoch_examples += res->examples;
    if (d->epoch_examples > 0) {
        p->loss = d->epoch_loss / (double)d->epoch_examples;
        p->accuracy = d->epoch_correct / (double)d->epoch_examples;
        p->examples_per_second = (double)d->epoch_examples / (clock_now_s() - d->epoch_t0);
    }
    if (res->steps < steps) /* the worker ran out of data: hand the rest to the others */
        d->steps_left += steps - res->steps;
    metric_inc(d->m_done);
    if (d->changed != NULL)
        d->changed(d->arg);
}

/* The closure failed: a worker that is gone gives its steps back; a lost PS (ABORTED) stops the
 * epoch, blaming the PS; anything else fails the epoch. Mutex held. */
static void count_failure(dispatch_t *d, size_t w, int steps, status_t rc, const char *why)
{
    if (rc == STATUS_CANCELLED || atomic_load(d->cancel))
        return; /* the job is being cancelled: nothing to record */
    if (rc == STATUS_UNAVAILABLE || rc == STATUS_TIMEOUT) {
        d->steps_left += steps;
        metric_inc(d->m_retried);
        d->alive[w] = false;
        d->lost(d->arg, w, why);
        if (slowest_alive(d) == INT64_MAX && !d->failed) {
            status_fail(d->lost_grace_s > 0 ? &d->lost_err : &d->err, rc,
                        "every worker failed; the last: %s", why);
            if (d->lost_grace_s > 0) /* the lost dispatchers wait for one to come back */
                d->all_lost_at = clock_now_s();
            else
                d->failed = true;
        }
    } else if (rc == STATUS_ABORTED && !d->failed) {
        d->steps_left += steps; /* a PS is lost (why names it): not the worker's fault */
        d->failed = true;
        status_fail(&d->err, rc, "%s", why);
    } else if (!d->failed) {
        d->failed = true;
        status_fail(&d->err, rc, "worker %zu: %s", w, why);
    }
}

static void *dispatcher_main(void *arg)
{
    dispatcher_t *me = arg;
    dispatch_t *d = me->d;
    size_t w = me->worker;

    pthread_mutex_lock(d->mu);
    for (;;) {
        dispatch_closure_t cl;
        dispatch_result_t res = {0};
        status_msg_t err = {0};
        status_t rc;
        int steps;
        /* A lost worker waits while the others work: it may be back (dispatch_t.alive) */
        while (!d->alive[w] && !stopped(d) && !dispatch_paused(d) &&
               (d->steps_left > 0 || d->in_flight > 0)) {
            if (d->all_lost_at == 0) {
                pthread_cond_wait(d->cv, d->mu);
            } else if (clock_now_s() - d->all_lost_at >= d->lost_grace_s) {
                d->failed = true; /* none came back in time */
                d->err = d->lost_err;
                pthread_cond_broadcast(d->cv);
            } else {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += 200 * 1000000L;
                if (until.tv_nsec >= 1000000000L) {
                    until.tv_sec++;
                    until.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(d->cv, d->mu, &until);
            }
        }
        steps = d->alive[w] ? take_closure(d, w) : 0;
        if (steps == 0)
            break;
        cl = (dispatch_closure_t){.id = d->next_closure++,
                                  .steps = steps,
                                  .global_step = d->progress->step,
                                  .epoch = d->progress->epoch};
        d->busy[w] = true;
        pthread_mutex_unlock(d->mu);
        rc = d->call(d->arg, w, &cl, &res, &err);
        pthread_mutex_lock(d->mu);
        d->busy[w] = false;
        d->in_flight--;
        d->steps_in_flight -= steps;
        if (rc == STATUS_OK)
            count_result(d, w, steps, &res);
        else
            count_failure(d, w, steps, rc, err.text);
        gauges(d);
        pthread_cond_broadcast(d->cv);
    }
    pthread_cond_broadcast(d->cv);
    pthread_mutex_unlock(d->mu);
    return NULL;
}

void dispatch_begin(dispatch_t *d, int64_t steps)
{
    pthread_mutex_lock(d->mu);
    d->steps_left = steps;
    d->epoch_loss = d->epoch_correct = 0;
    d->epoch_examples = 0;
    d->epoch_t0 = clock_now_s();
    pthread_mutex_unlock(d->mu);
}

status_t dispatch_run(dispatch_t *d, status_msg_t *err)
{
    dispatcher_t *t = calloc(d->n_workers + 1, sizeof(*t));
    sigset_t all, old;
    bool failed, cancelled;
    double t0 = clock_now_s();

    if (t == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    /* The dispatchers inherit a full signal mask: signals belong to the main thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (size_t w = 0; w < d->n_workers; w++) {
        t[w] = (dispatcher_t){.d = d, .worker = w};
        t[w].started = pthread_create(&t[w].tid, NULL, dispatcher_main, &t[w]) == 0;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    for (size_t w = 0; w < d->n_workers; w++)
        if (!t[w].started) /* no thread to spare: run this worker's closures here */
            dispatcher_main(&t[w]);
    for (size_t w = 0; w < d->n_workers; w++)
        if (t[w].started)
            pthread_join(t[w].tid, NULL);
    free(t);
    pthread_mutex_lock(d->mu);
    d->progress->train_seconds += clock_now_s() - t0;
    failed = d->failed;
    cancelled = atomic_load(d->cancel) || *d->stopping;
    pthread_mutex_unlock(d->mu);
    if (failed)
        return status_fail(err, d->err.status ? d->err.status : STATUS_REMOTE, "%s", d->err.text);
    return cancelled ? STATUS_CANCELLED : STATUS_OK;
}

status_t dispatch_epoch(dispatch_t *d, int64_t steps, status_msg_t *err)
{
    dispatch_begin(d, steps);
    for (;;) {
        int64_t left, before, after;
        bool paused;
        pthread_mutex_lock(d->mu);
        before = d->progress->step;
        pthread_mutex_unlock(d->mu);
        STATUS_CHECK(dispatch_run(d, err));
        pthread_mutex_lock(d->mu);
        left = d->steps_left;
        after = d->progress->step;
        paused = dispatch_paused(d);
        pthread_mutex_unlock(d->mu);
        if (left <= 0 || paused)
            return STATUS_OK;
        if (after == before) /* steps given back, none taken: every live worker is out of data */
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "no worker has training data left for the epoch's last %lld steps",
                               (long long)left);
    }
}
