#define _POSIX_C_SOURCE 200809L
#include "dispatch.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"

typedef struct dispatcher {
    dispatch_t *d;
    size_t worker;
    pthread_t tid;
    bool started;
} dispatcher_t;

void dispatch_progress_metrics(Tessera__V1__JobProgress *p, const job_t *job, const double *sums,
                               bool test)
{
    double v[JOB_MAX_METRICS];
    Tessera__V1__MetricValue **to = test ? p->test_metrics : p->metrics;
    size_t n = p->n_metrics; /* both lists have the job's length */

    if (to == NULL || job->n_metrics == 0 || n != (size_t)job->n_metrics)
        return;
    job_metrics_result(job, sums, v);
    for (int i = 0; i < job->n_metrics; i++)
        to[i]->value = v[i];
    if (test)
        p->n_test_metrics = n;
}

void dispatch_add_metrics(dispatch_t *d, const double *sums, size_t n, size_t w)
{
    size_t width = d->job != NULL ? d->job->metric_width : 0;

    if (width == 0)
        return;
    if (n != width) { /* another build of the worker, or a broken one */
        LOG_WARNING(CHIEF, "worker %zu sent %zu metric sums, the job has %zu: not counted", w, n,
                    width);
        return;
    }
    for (size_t k = 0; k < width; k++)
        d->epoch_metrics[k] += sums[k];
    dispatch_progress_metrics(d->progress, d->job, d->epoch_metrics, false);
}

status_t dispatch_init(dispatch_t *d, size_t n_workers, size_t cap, status_msg_t *err)
{
    if (cap < n_workers)
        cap = n_workers;
    d->n_workers = d->n_shards = n_workers;
    d->cap = cap;
    d->alive = calloc(cap + 1, sizeof(*d->alive));
    d->worker_steps = calloc(cap + 1, sizeof(*d->worker_steps));
    d->pos = calloc(cap + 1, sizeof(*d->pos));
    d->busy = calloc(cap + 1, sizeof(*d->busy));
    d->left = calloc(n_workers + 1, sizeof(*d->left));
    d->reader = calloc(n_workers + 1, sizeof(*d->reader));
    d->tail_reader = calloc(n_workers + 1, sizeof(*d->tail_reader));
    d->shard_batches = calloc(n_workers + 1, sizeof(*d->shard_batches));
    d->epoch_metrics = calloc((d->job != NULL ? d->job->metric_width : 0) + 1, sizeof(double));
    if (d->alive == NULL || d->worker_steps == NULL || d->pos == NULL || d->busy == NULL ||
        d->left == NULL || d->reader == NULL || d->tail_reader == NULL ||
        d->shard_batches == NULL || d->epoch_metrics == NULL) {
        dispatch_done(d);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (size_t w = 0; w < n_workers; w++) {
        d->alive[w] = true;
        d->reader[w] = d->tail_reader[w] = -1;
    }
    d->failed_worker = SIZE_MAX;
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
    free(d->left);
    free(d->reader);
    free(d->tail_reader);
    free(d->shard_batches);
    free(d->epoch_metrics);
    d->epoch_metrics = NULL;
    d->left = d->shard_batches = NULL;
    d->reader = d->tail_reader = NULL;
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

    if (w >= d->cap)
        return;
    if (w >= d->n_workers) /* joined: the slots up to it are in use (the others not alive) */
        d->n_workers = w + 1;
    /* the staleness bound counts from the others, not from when it was lost */
    if (slowest != INT64_MAX)
        d->worker_steps[w] = slowest;
    d->alive[w] = true;
    d->all_lost_at = 0;
    if (!d->failed)
        d->failed_worker = SIZE_MAX; /* "every worker failed" did not come to pass */
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

/* The shard worker w reads next: its own while it has batches left and no other worker reads it,
 * else the one with most left of those whose worker is lost, both from the front; else (*tail)
 * the last batches of the one with most left that nobody reads so; -1: none now. Mutex held. */
static int pick_shard(const dispatch_t *d, size_t w, bool *tail)
{
    int best = -1;

    *tail = false;
    if (w < d->n_shards && d->left[w] > 0 && d->reader[w] < 0)
        return (int)w;
    for (size_t s = 0; s < d->n_shards; s++)
        if (!d->alive[s] && d->left[s] > 0 && d->reader[s] < 0 &&
            (best < 0 || d->left[s] > d->left[best]))
            best = (int)s;
    if (best >= 0)
        return best;
    for (size_t s = 0; s < d->n_shards; s++)
        if (d->left[s] > 0 && d->tail_reader[s] < 0 && (best < 0 || d->left[s] > d->left[best]))
            best = (int)s;
    *tail = best >= 0;
    return best;
}

/* Where the unread batches of shard s end in its epoch. */
static int64_t shard_end(const dispatch_t *d, size_t s)
{
    return d->pos[s].end > 0 ? d->pos[s].end : d->shard_batches[s];
}

/* The next closure's steps for worker w and the shard it reads (cl->shard), waiting while the
 * staleness bound holds it back, while everything is handed out but a closure is still in
 * flight (its worker may be lost and its steps come back) or, by shard, while the batches left
 * are being read; 0 when the epoch is done, a pause is due or the job stops; -1 when w was lost
 * meanwhile.
 * Mutex held. */
static int take_closure(dispatch_t *d, size_t w, dispatch_closure_t *cl)
{
    int steps, shard = -1;
    int64_t avail;
    bool tail = false;

    for (;;) {
        if (stopped(d) || dispatch_paused(d) || (d->steps_left <= 0 && d->in_flight == 0))
            return 0;
        if (!d->alive[w])
            return -1;
        if (d->steps_left <= 0) { /* all handed out: one in flight may yet come back */
            pthread_cond_wait(d->cv, d->mu);
            continue;
        }
        if (d->max_staleness > 0 && d->worker_steps[w] - slowest_alive(d) > d->max_staleness) {
            pthread_cond_wait(d->cv, d->mu);
            continue;
        }
        if (!d->epoch_by_shard || (shard = pick_shard(d, w, &tail)) >= 0)
            break;
        pthread_cond_wait(d->cv, d->mu);
    }
    avail = shard >= 0 ? d->left[shard] : d->steps_left;
    steps = (int)(avail < d->steps_per_closure ? avail : d->steps_per_closure);
    if (d->stop_step > 0 && d->stop_step - (d->progress->step + d->steps_in_flight) < steps)
        steps = (int)(d->stop_step - (d->progress->step + d->steps_in_flight));
    cl->shard = shard;
    cl->tail = tail;
    if (shard >= 0 && tail) { /* the last `steps` unread batches */
        d->pos[shard].end = shard_end(d, (size_t)shard) - steps;
        d->left[shard] -= steps;
        d->tail_reader[shard] = (int)w;
        cl->data_epoch = d->pos[shard].epoch;
        cl->data_batch = d->pos[shard].end;
    } else if (shard >= 0) {
        d->left[shard] -= steps;
        d->reader[shard] = (int)w;
        cl->data_epoch = d->pos[shard].epoch;
        cl->data_batch = d->pos[shard].batch;
    }
    d->steps_left -= steps;
    d->steps_in_flight += steps;
    d->in_flight++;
    gauges(d);
    return steps;
}

/* The closure's shard is free again; steps of it not run go back to it (a tail closure gives
 * back all of its steps or none: the unread batches stay one run). Mutex held. */
static void give_back(dispatch_t *d, const dispatch_closure_t *cl, int steps)
{
    d->steps_left += steps;
    if (cl->shard >= 0 && cl->tail) {
        d->left[cl->shard] += steps;
        d->pos[cl->shard].end += steps; /* no other tail was taken meanwhile: it is the end */
        if (d->pos[cl->shard].end >= d->shard_batches[cl->shard])
            d->pos[cl->shard].end = 0;
        d->tail_reader[cl->shard] = -1;
    } else if (cl->shard >= 0) {
        d->left[cl->shard] += steps;
        d->reader[cl->shard] = -1;
    }
}

static void count_result(dispatch_t *d, size_t w, const dispatch_closure_t *cl,
                         dispatch_result_t *res)
{
    Tessera__V1__JobProgress *p = d->progress;
    size_t s = cl->shard >= 0 ? (size_t)cl->shard : w;

    if (cl->tail && res->steps < cl->steps) {
        /* its batches were counted when the epoch began: the data is not what it was */
        give_back(d, cl, 0);
        d->steps_left -= cl->steps - res->steps; /* nobody has them: the epoch ends short */
        if (!d->failed) {
            d->failed = true;
            d->failed_worker = w;
            status_fail(&d->err, STATUS_DATA_LOSS,
                        "shard %d of the training data ended at batch %lld of epoch %lld on "
                        "worker %zu, short of the %lld batches counted when the epoch began: "
                        "the workers do not see the same data",
                        cl->shard, (long long)(cl->data_batch + res->steps),
                        (long long)cl->data_epoch + 1, w, (long long)d->shard_batches[s]);
        }
        free(res->rng);
        res->rng = NULL;
        return;
    }
    if (!cl->tail) { /* a tail closure leaves the shard's front where it is */
        d->pos[s].epoch = res->data_epoch;
        d->pos[s].batch = res->data_batch;
    }
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
    dispatch_add_metrics(d, res->metric_sums, res->n_metric_sums, w);
    /* fewer: the worker ran out of data, the rest is for the others */
    if (cl->tail)
        give_back(d, cl, 0);
    else
        give_back(d, cl, cl->steps - (res->steps < cl->steps ? res->steps : cl->steps));
    metric_inc(d->m_done);
    if (d->changed != NULL)
        d->changed(d->arg);
}

/* The closure failed: a worker that is gone gives its steps back; a lost PS (ABORTED) stops the
 * epoch, blaming the PS; anything else fails the epoch. Mutex held. */
static void count_failure(dispatch_t *d, size_t w, const dispatch_closure_t *cl, status_t rc,
                          const char *why)
{
    int steps = cl->steps;

    if (rc == STATUS_CANCELLED || atomic_load(d->cancel)) {
        give_back(d, cl, 0); /* the job is being cancelled: nothing to record */
        return;
    }
    if (rc == STATUS_UNAVAILABLE || rc == STATUS_TIMEOUT) {
        give_back(d, cl, steps);
        metric_inc(d->m_retried);
        d->alive[w] = false;
        d->lost(d->arg, w, why);
        if (slowest_alive(d) == INT64_MAX && !d->failed) {
            d->failed_worker = w; /* the last one */
            status_fail(d->lost_grace_s > 0 ? &d->lost_err : &d->err, rc,
                        "every worker failed; the last: %s", why);
            if (d->lost_grace_s > 0) /* the lost dispatchers wait for one to come back */
                d->all_lost_at = clock_now_s();
            else
                d->failed = true;
        }
    } else if (rc == STATUS_ABORTED && !d->failed) {
        give_back(d, cl, steps); /* a PS is lost (why names it): not the worker's fault */
        d->failed = true;
        status_fail(&d->err, rc, "%s", why);
    } else {
        give_back(d, cl, 0);
        if (!d->failed) {
            d->failed = true;
            d->failed_worker = w;
            status_fail(&d->err, rc, "worker %zu: %s", w, why);
        }
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
        cl = (dispatch_closure_t){.shard = -1};
        steps = d->alive[w] ? take_closure(d, w, &cl) : 0;
        if (steps < 0)
            continue; /* lost while it waited: wait as the lost do */
        if (steps == 0)
            break;
        cl.id = d->next_closure++;
        cl.steps = steps;
        cl.global_step = d->progress->step;
        cl.epoch = d->progress->epoch;
        d->busy[w] = true;
        pthread_mutex_unlock(d->mu);
        rc = d->call(d->arg, w, &cl, &res, &err);
        pthread_mutex_lock(d->mu);
        d->busy[w] = false;
        d->in_flight--;
        d->steps_in_flight -= steps;
        if (rc == STATUS_OK)
            count_result(d, w, &cl, &res);
        else
            count_failure(d, w, &cl, rc, err.text);
        free(res.metric_sums); /* counted, or none */
        res.metric_sums = NULL;
        gauges(d);
        pthread_cond_broadcast(d->cv);
    }
    d->n_threads--;
    pthread_cond_broadcast(d->cv);
    pthread_mutex_unlock(d->mu);
    return NULL;
}

/* Each shard's batches of the epoch from where it stands; whether they add up to `steps` (else
 * the steps are a pool: positions from another number of workers, say). Mutex held. */
static bool shard_budgets(dispatch_t *d, int64_t steps)
{
    int64_t e = d->progress->epoch, sum = 0;

    for (size_t s = 0; s < d->n_shards; s++) {
        int64_t b = d->shard_batches[s] > 0 ? d->shard_batches[s] : 0, end;
        dispatch_pos_t *p = &d->pos[s];
        if (p->epoch < e) { /* done with the last epoch (its tail read by others): this one */
            p->epoch = e;
            p->batch = p->end = 0;
        }
        end = p->end > 0 && p->end < b ? p->end : b;
        d->left[s] = p->epoch > e || p->batch >= end ? 0 : end - p->batch;
        d->reader[s] = d->tail_reader[s] = -1;
        sum += d->left[s];
    }
    return sum == steps;
}

void dispatch_begin(dispatch_t *d, int64_t steps)
{
    pthread_mutex_lock(d->mu);
    d->steps_left = steps;
    d->epoch_by_shard = d->by_shard && shard_budgets(d, steps);
    d->epoch_loss = d->epoch_correct = 0;
    d->epoch_examples = 0;
    if (d->job != NULL)
        memset(d->epoch_metrics, 0, d->job->metric_width * sizeof(double));
    d->epoch_t0 = clock_now_s();
    pthread_mutex_unlock(d->mu);
}

status_t dispatch_run(dispatch_t *d, status_msg_t *err)
{
    dispatcher_t *t = calloc(d->cap + 1, sizeof(*t));
    sigset_t all, old;
    size_t n = 0;
    bool failed, cancelled;
    double t0 = clock_now_s();

    if (t == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    /* The dispatchers inherit a full signal mask: signals belong to the main thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_mutex_lock(d->mu);
    /* a dispatcher per worker, and one for each worker that joins while they run */
    for (;;) {
        while (n < d->n_workers) {
            t[n] = (dispatcher_t){.d = d, .worker = n};
            d->n_threads++;
            t[n].started = pthread_create(&t[n].tid, NULL, dispatcher_main, &t[n]) == 0;
            if (!t[n].started) { /* no thread to spare: run this worker's closures here */
                pthread_mutex_unlock(d->mu);
                dispatcher_main(&t[n]);
                pthread_mutex_lock(d->mu);
            }
            n++;
        }
        if (d->n_threads == 0)
            break;
        pthread_cond_wait(d->cv, d->mu);
    }
    pthread_mutex_unlock(d->mu);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    for (size_t w = 0; w < n; w++)
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
