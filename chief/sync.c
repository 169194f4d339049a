/* Running a multi_worker_mirrored job: every worker builds the model (the same initial values,
 * from the job's seed) and reads the whole training split in global batches of data.batch_size
 * per worker, stepping on its own slice of each; the first ConfigureJob call says where each
 * worker's ring listens, the second connects the ring; then each closure runs the same steps on
 * every worker at once, in lockstep through the ring all-reduce of the gradients
 * (worker/sync.h), and the epoch's numbers are the sums of the workers' slices. The workers'
 * variables stay equal, so the first live worker evaluates. No parameter server takes part. A
 * worker lost (killed, unreachable) does not fail the job: the others go back to where the
 * failed closure started, make a ring of their own and share its slices of every batch, so the
 * job goes on with the same global batch, the same examples in each step. A lost worker that
 * answers again joins the ring between closures and takes a survivor's state. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/net.h"
#include "chief_ckpt.h"
#include "chief_sync.h"
#include "chief_tb.h"
#include "fanout.h"
#include "rpc/health.h"
#include "watchdog.h"
#include "workers.h"

typedef struct sync_run {
    coordinator_t *c;
    chief_job_t *j;
    size_t n;
    fanout_t *f;
    Tessera__V1__RunClosureRequest *reqs;
    uint64_t next_closure;
    bool *alive;       /* in the ring now */
    char **ring;       /* where each worker's ring listens */
    worker_cfg_t *cfg; /* the ConfigureJob requests, for a ring made again */
    /* where the data stands after the last closure (a worker that comes back starts there) */
    int64_t data_epoch, data_batch;
    double next_check; /* clock_now_s() of the next look for lost workers that answer again */
    watchdog_t *wd;    /* hung[w]: worker w answered no health check for --worker-timeout */
    /* checkpoints: where the job stands besides the variables (the epoch's sums so far, the
     * last epoch's means), the newest checkpoint's step (-1: none) and when it was written */
    double epoch_sums[3];
    bool has_last_epoch;
    double last_loss, last_accuracy;
    /* the job's other metrics: the last closure's sums over the workers, the epoch's so far, and
     * the last epoch's values */
    double *closure_metrics, *epoch_metrics;
    double last_metrics[JOB_MAX_METRICS];
    int64_t saved_step;
    double last_save;
    Tessera__V1__TrainPosition pos; /* a checkpoint closure's */
    /* a resumed job: the epoch it goes on in, and that epoch's steps done */
    int64_t start_epoch, start_done;
    chief_tb_t tb; /* the job's TensorBoard run */
} sync_run_t;

/* The job's failure on worker w: named, with who is at fault. */
static status_t failed(sync_run_t *s, size_t w, status_t rc, const char *what, const char *why,
                       status_msg_t *err)
{
    status_group_t g = status_group(rc);
    bool app = g == STATUS_GROUP_INVALID_ARGUMENT || rc == STATUS_DATA_LOSS;

    pthread_mutex_lock(&s->c->mu);
    snprintf(s->j->failed_task, sizeof(s->j->failed_task), "worker:%zu", w);
    s->j->fault = app ? TESSERA__V1__FAULT__FAULT_APPLICATION : TESSERA__V1__FAULT__FAULT_WORKER;
    pthread_mutex_unlock(&s->c->mu);
    return status_fail(err, rc, "%s on worker %zu (%s): %s", what, w,
                       rpc_channel_target(s->c->workers[w]), why);
}

/* The worker a failed closure is on: the one a ring peer names (it went away or stopped
 * answering: its own call may not have failed yet), else the first whose call failed, one that
 * is gone before one that timed out. */
static size_t first_failure(const fanout_t *f, size_t n)
{
    size_t best = SIZE_MAX;
    unsigned long named;
    char *end;

    for (size_t w = 0; w < n; w++)
        if (f[w].rc != STATUS_OK && strncmp(f[w].err.culprit, "worker:", 7) == 0 &&
            (named = strtoul(f[w].err.culprit + 7, &end, 10)) < n && *end == '\0' && named != w)
            return named;
    for (size_t w = 0; w < n; w++) {
        if (f[w].rc == STATUS_OK)
            continue;
        if (best == SIZE_MAX || (f[best].rc == STATUS_TIMEOUT && f[w].rc != STATUS_TIMEOUT))
            best = w;
    }
    return best;
}

static uint64_t new_token(void)
{
    uint64_t token = 0;

    if (getrandom(&token, sizeof(token), 0) != (ssize_t)sizeof(token))
        token = (uint64_t)(clock_wall_s() * 1e6) ^ 0x9E3779B97F4A7C15ull;
    return token;
}

/* Worker w's ring address: its host as the chief reaches it, the port it reported. */
static status_t set_ring_address(sync_run_t *s, size_t w, int ring_port, status_msg_t *err)
{
    char host[256], *addr;
    int port;

    STATUS_CHECK(
        net_split_hostport(rpc_channel_target(s->c->workers[w]), host, sizeof(host), &port, err));
    if (ring_port <= 0 || ring_port > 65535)
        return status_fail(err, STATUS_REMOTE, "no ring port");
    if ((addr = malloc(strlen(host) + 16)) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    sprintf(addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, ring_port);
    free(s->ring[w]);
    s->ring[w] = addr;
    return STATUS_OK;
}

static status_t make_ring(sync_run_t *s, const fanout_t *f, status_msg_t *err)
{
    for (size_t w = 0; w < s->n; w++) {
        const Tessera__V1__ConfigureJobResponse *resp = (const void *)f[w].resp;
        if (set_ring_address(s, w, resp->ring_port, err) != STATUS_OK) {
            char why[sizeof(err->text)];
            snprintf(why, sizeof(why), "%s", err->text); /* failed() writes err */
            return failed(s, w, err->status, "configuring the ring", why, err);
        }
    }
    return STATUS_OK;
}

/* Connects the ring of the live workers, renumbered in index order (rollback: each first goes
 * back to where its last closure started; root < n: then every one takes worker root's values
 * and slots, and the job's step as its update count); their ConfigureJob calls go all at once,
 * since each waits for its neighbours. */
static status_t connect_ring(sync_run_t *s, bool rollback, size_t root, status_msg_t *err)
{
    char **addrs = calloc(s->n + 1, sizeof(*addrs));
    uint64_t token = new_token();
    size_t n = 0, rank = 0, bad;
    status_t rc = STATUS_OK;

    if (addrs == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t w = 0; w < s->n; w++)
        if (s->alive[w])
            addrs[n++] = s->ring[w];
    for (size_t w = 0; w < s->n; w++) {
        Tessera__V1__ConfigureJobRequest *q = &s->cfg->reqs[w];
        q->n_ring = n;
        q->ring = addrs;
        q->ring_token = token;
        if (w == root)
            q->ring_root = (int32_t)rank; /* every request names it: set below */
        q->ring_rank = s->alive[w] ? (int32_t)rank++ : 0;
        q->ring_rollback = rollback;
        q->ring_broadcast = root < s->n;
        q->ring_timeout_ms = (int32_t)s->c->opts->worker_timeout_ms;
        s->f[w] = (fanout_t){.ch = s->c->workers[w],
                             .method = RPC_WORKER_CONFIGURE_JOB,
                             .req = &q->base,
                             .timeout_ms = CONFIGURE_TIMEOUT,
                             .skip = !s->alive[w]};
    }
    for (size_t w = 0; root < s->n && w < s->n; w++)
        s->cfg->reqs[w].ring_root = s->cfg->reqs[root].ring_root;
    fanout_run(s->f, s->n);
    for (size_t w = 0; w < s->n; w++)
        if (s->f[w].skip)
            s->f[w].rc = STATUS_OK; /* not in the ring: not a failure */
    if ((bad = first_failure(s->f, s->n)) != SIZE_MAX)
        rc = failed(s, bad, s->f[bad].rc != STATUS_OK ? s->f[bad].rc : STATUS_UNAVAILABLE,
                    "connecting the ring", s->f[bad].err.message, err);
    fanout_done(s->f, s->n);
    for (size_t w = 0; w < s->n; w++) {
        s->cfg->reqs[w].n_ring = 0; /* the requests point at addrs no more */
        s->cfg->reqs[w].ring = NULL;
        s->cfg->reqs[w].ring_broadcast = s->cfg->reqs[w].ring_rollback = false;
        s->cfg->reqs[w].ring_seek = false;
    }
    free(addrs);
    return rc;
}

/* Worker `lost` left the ring (killed, unreachable): the live ones, back where the failed
 * closure started, make a ring of their own and share its slices of every batch. */
static status_t regroup(sync_run_t *s, size_t lost, const char *why, status_msg_t *err)
{
    const char **targets = calloc(s->n + 1, sizeof(*targets));
    health_state_t *states = calloc(s->n + 1, sizeof(*states));
    size_t left = 0;

    if (targets == NULL || states == NULL) {
        free(targets);
        free(states);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (size_t w = 0; w < s->n; w++)
        targets[w] = s->alive[w] && w != lost ? rpc_channel_target(s->c->workers[w]) : NULL;
    health_check_many(targets, s->n, 2000, states, NULL, NULL);
    pthread_mutex_lock(&s->c->mu); /* the watchdog reads alive */
    for (size_t w = 0; w < s->n; w++) {
        bool was = s->alive[w];
        s->alive[w] = targets[w] != NULL && states[w] == HEALTH_SERVING;
        left += s->alive[w];
        if (was && !s->alive[w] && s->c->m_worker_failures != NULL)
            metric_inc(s->c->m_worker_failures[w]);
    }
    pthread_mutex_unlock(&s->c->mu);
    free(targets);
    free(states);
    if (left == 0)
        return failed(s, lost, STATUS_UNAVAILABLE, "training", why, err);
    pthread_mutex_lock(&s->c->mu);
    chief_job_event(s->c, s->j,
                    "worker %zu (%s) lost: %s; the job goes on from step %lld with %zu worker%s, "
                    "taking its slice of every batch too",
                    lost, rpc_channel_target(s->c->workers[lost]), why,
                    (long long)s->j->progress.step, left, left == 1 ? "" : "s");
    pthread_mutex_unlock(&s->c->mu);
    return connect_ring(s, true, SIZE_MAX, err);
}

/* Lost worker w answers again (restarted at its address, woken, reconnected): it builds the job
 * with its data where the others' stands, joins the ring, and takes the values and optimizer
 * slots of a worker that stayed. False when it cannot (it is tried again later). */
static bool rejoin(sync_run_t *s, size_t w, status_msg_t *err)
{
    Tessera__V1__ConfigureJobRequest q = s->cfg->reqs[w];
    Tessera__V1__ConfigureJobResponse *resp = NULL;
    rpc_error_t rerr;
    status_t rc;

    q.start_epoch = s->data_epoch;
    q.start_batch = s->data_batch;
    if (worker_configure_again(s->c, w, &q, &resp, &rerr) != STATUS_OK)
        return false;
    rc = set_ring_address(s, w, resp->ring_port, err);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (rc != STATUS_OK)
        return false;
    pthread_mutex_lock(&s->c->mu);
    watchdog_revive(s->wd, w); /* before it is alive: its calls must not be cancelled */
    s->alive[w] = true;
    chief_job_event(s->c, s->j, "worker %zu (%s) is back: it joins the ring at step %lld", w,
                    rpc_channel_target(s->c->workers[w]), (long long)s->j->progress.step);
    pthread_mutex_unlock(&s->c->mu);
    metric_inc(s->c->m_worker_rejoins);
    return true;
}

/* Every few seconds between closures: lost workers that answer again join the ring. */
static status_t take_back(sync_run_t *s, status_msg_t *err)
{
    const char **targets;
    health_state_t *states;
    size_t back = 0, root = 0;
    status_t rc = STATUS_OK;

    if (clock_now_s() < s->next_check)
        return STATUS_OK;
    s->next_check = clock_now_s() + 2;
    for (size_t w = 0; w < s->n; w++)
        back += !s->alive[w];
    if (back == 0)
        return STATUS_OK;
    targets = calloc(s->n + 1, sizeof(*targets));
    states = calloc(s->n + 1, sizeof(*states));
    if (targets == NULL || states == NULL) {
        free(targets);
        free(states);
        return STATUS_OK;
    }
    for (size_t w = 0; w < s->n; w++)
        targets[w] = s->alive[w] ? NULL : rpc_channel_target(s->c->workers[w]);
    health_check_many(targets, s->n, 1000, states, NULL, NULL);
    while (root < s->n && !s->alive[root])
        root++;
    back = 0;
    for (size_t w = 0; w < s->n; w++)
        if (targets[w] != NULL && states[w] == HEALTH_SERVING)
            back += rejoin(s, w, err);
    free(targets);
    free(states);
    if (back > 0)
        rc = connect_ring(s, false, root, err);
    return rc;
}

/* One closure of `steps` steps on every live worker at once (only: on that one alone); the
 * sums of their answers. A worker gone meanwhile is *ret_lost (err says why), not a failure. */
static status_t run_closure(sync_run_t *s, int kind, int steps, size_t only, int *ret_steps,
                            double sums[3], size_t *ret_lost, status_msg_t *err)
{
    status_t rc = STATUS_OK;
    size_t bad;

    *ret_lost = SIZE_MAX;
    for (size_t w = 0; w < s->n; w++) {
        Tessera__V1__RunClosureRequest *q = &s->reqs[w];
        tessera__v1__run_closure_request__init(q);
        q->job = s->j->id;
        q->closure_id = s->next_closure++;
        q->kind = kind;
        q->steps = steps;
        q->global_step = s->j->progress.step;
        q->epoch = s->j->progress.epoch;
        q->position = kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_CHECKPOINT ? &s->pos : NULL;
        s->f[w] = (fanout_t){.ch = s->c->workers[w],
                             .method = RPC_WORKER_RUN_CLOSURE,
                             .req = &q->base,
                             .timeout_ms = CLOSURE_TIMEOUT,
                             .skip = !s->alive[w] || (only != SIZE_MAX && w != only),
                             .cancel = s->wd->hung != NULL ? &s->wd->hung[w] : NULL};
    }
    fanout_run(s->f, s->n);
    sums[0] = sums[1] = sums[2] = 0;
    memset(s->closure_metrics, 0, s->j->job.metric_width * sizeof(double));
    *ret_steps = -1;
    for (size_t w = 0; w < s->n; w++) {
        const Tessera__V1__RunClosureResponse *resp = (const void *)s->f[w].resp;
        if (s->f[w].skip) {
            s->f[w].rc = STATUS_OK; /* not asked: not a failure */
            continue;
        }
        if (s->f[w].rc != STATUS_OK)
            continue;
        sums[0] += resp->loss_sum;
        sums[1] += resp->correct;
        sums[2] += (double)resp->examples;
        if (resp->n_metric_sums == s->j->job.metric_width)
            for (size_t k = 0; k < resp->n_metric_sums; k++)
                s->closure_metrics[k] += resp->metric_sums[k];
        else if (kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN ||
                 kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_EVALUATE)
            LOG_WARNING(CHIEF, "worker %zu sent %zu metric sums, the job has %zu: not counted", w,
                        resp->n_metric_sums, s->j->job.metric_width);
        if (*ret_steps < 0 && kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN) {
            s->data_epoch = resp->data_epoch; /* every live worker stands at the same place */
            s->data_batch = resp->data_batch;
        }
        if (*ret_steps < 0 || resp->steps < *ret_steps)
            *ret_steps = resp->steps;
    }
    bad = first_failure(s->f, s->n);
    if (bad != SIZE_MAX && s->alive[bad] &&
        (s->f[bad].rc == STATUS_OK || s->f[bad].rc == STATUS_UNAVAILABLE ||
         s->f[bad].rc == STATUS_TIMEOUT ||
         (s->f[bad].rc == STATUS_CANCELLED && s->wd->hung != NULL &&
          atomic_load(&s->wd->hung[bad])))) {
        *ret_lost = bad; /* gone, hung, or its ring neighbours lost it: the others go on */
        if (s->f[bad].rc == STATUS_CANCELLED)
            snprintf(err->text, sizeof(err->text),
                     "it answered no health check for %.1f s (stopped, hung or cut off)",
                     (double)s->wd->timeout_ms / 1000);
        else
            snprintf(err->text, sizeof(err->text), "%s",
                     s->f[bad].rc != STATUS_OK ? s->f[bad].err.message
                                               : "its ring neighbours lost it");
    } else if (bad != SIZE_MAX) {
        rc = failed(
            s, bad, s->f[bad].rc != STATUS_OK ? s->f[bad].rc : STATUS_UNAVAILABLE,
            kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN        ? "training"
            : kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_CHECKPOINT ? "writing a checkpoint"
            : kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_HISTOGRAMS ? "writing histograms"
                                                                         : "evaluation",
            s->f[bad].rc != STATUS_OK ? s->f[bad].err.message : "its ring neighbours lost it", err);
    }
    fanout_done(s->f, s->n);
    return rc;
}

/* Runs a closure, regrouping the ring (and running it again) each time a worker is lost. */
static status_t closure(sync_run_t *s, int kind, int steps, int *ret_steps, double sums[3],
                        status_msg_t *err)
{
    if (kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN)
        STATUS_CHECK(take_back(s, err));
    for (;;) {
        size_t lost, first = 0;
        char why[sizeof(err->text)];
        while (first < s->n && !s->alive[first])
            first++;
        STATUS_CHECK(
            run_closure(s, kind, steps,
                        kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN ? SIZE_MAX : first,
                        ret_steps, sums, &lost, err));
        if (lost == SIZE_MAX)
            return STATUS_OK;
        snprintf(why, sizeof(why), "%s", err->text);
        STATUS_CHECK(regroup(s, lost, why, err));
    }
}

/* ---- checkpoints and resume ------------------------------------------------------------- */

/* Has the first live worker write a checkpoint of where the job stands (between closures: every
 * worker holds the same variables), unless that step is on disk already; answers the Checkpoint
 * calls waiting either way. */
static status_t checkpoint(sync_run_t *s, status_msg_t *err)
{
    coordinator_t *c = s->c;
    chief_job_t *j = s->j;
    int64_t step = j->progress.step;
    double sums[3];
    int got;
    status_t rc = STATUS_OK;

    if (step != s->saved_step) {
        tessera__v1__train_position__init(&s->pos);
        s->pos.step = step;
        s->pos.epoch_loss = s->epoch_sums[0];
        s->pos.epoch_correct = s->epoch_sums[1];
        s->pos.epoch_examples = s->epoch_sums[2];
        s->pos.has_last_epoch = s->has_last_epoch;
        s->pos.last_loss = s->last_loss;
        s->pos.last_accuracy = s->last_accuracy;
        s->pos.n_epoch_metric_sums = j->job.metric_width;
        s->pos.epoch_metric_sums = s->epoch_metrics;
        s->pos.n_last_metrics = s->has_last_epoch ? (size_t)j->job.n_metrics : 0;
        s->pos.last_metrics = s->last_metrics;
        rc = closure(s, TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_CHECKPOINT, 0, &got, sums, err);
    }
    pthread_mutex_lock(&c->mu);
    if (rc == STATUS_OK && step != s->saved_step)
        chief_job_event(c, j, "checkpoint at step %lld", (long long)step);
    if (rc == STATUS_OK) {
        s->saved_step = step;
        s->last_save = clock_now_s();
    }
    chief_ckpt_answer(c, j, rc, step, rc == STATUS_OK ? "" : err->text);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Whether a checkpoint falls due after the closure that took the job from step `before`: every
 * checkpoint.every_steps (at the end of the closure it falls in), every_seconds, or with
 * neither each epoch's end; and whenever tessera checkpoint asks. */
static bool checkpoint_due(sync_run_t *s, int64_t before, bool epoch_end)
{
    const job_t *job = &s->j->job;
    int64_t every = job->checkpoint_every_steps, step = s->j->progress.step;

    if (job->checkpoint_dir == NULL)
        return false;
    return atomic_load(&s->j->ckpt_wanted) || (every > 0 && before / every < step / every) ||
           (job->checkpoint_every_seconds > 0 &&
            clock_now_s() - s->last_save >= (double)job->checkpoint_every_seconds) ||
           (every == 0 && job->checkpoint_every_seconds == 0 && epoch_end);
}

/* A resumed job (resume: true, or taken up again by a restarted chief): every worker restored
 * the newest checkpoint it sees and reported its manifest; the newest of them all is the one
 * to go on from, and its worker the ring's root, in *ret_root (SIZE_MAX when there is none:
 * the job starts from the beginning, as an event says). */
static status_t find_resumed(sync_run_t *s, const fanout_t *f, size_t *ret_root, status_msg_t *err)
{
    chief_job_t *j = s->j;
    ckpt_manifest_t best = {0};
    char where[64];

    *ret_root = SIZE_MAX;
    for (size_t w = 0; w < s->n; w++) {
        const Tessera__V1__ConfigureJobResponse *resp = (const void *)f[w].resp;
        ckpt_manifest_t m;
        if (!s->alive[w] || resp == NULL || resp->resume_manifest.len == 0)
            continue;
        snprintf(where, sizeof(where), "worker %zu's checkpoint", w);
        if (ckpt_manifest_decode((const char *)resp->resume_manifest.data,
                                 resp->resume_manifest.len, where, &m, err) != STATUS_OK) {
            char why[sizeof(err->text)];
            snprintf(why, sizeof(why), "%s", err->text); /* failed() writes err */
            ckpt_manifest_free(&best);
            return failed(s, w, STATUS_DATA_LOSS, "resuming", why, err);
        }
        /* another run's, left in the directory, is not a restarted chief's to go on from */
        bool ours = j->job.resume || m.wall_time >= j->started_at;
        if (ours && m.n_data > 0 && (*ret_root == SIZE_MAX || m.step > best.step)) {
            ckpt_manifest_free(&best);
            best = m;
            *ret_root = w;
        } else {
            ckpt_manifest_free(&m);
        }
    }
    pthread_mutex_lock(&s->c->mu);
    if (*ret_root == SIZE_MAX) {
        chief_job_event(s->c, j, "no checkpoint in %s yet: starting from the beginning",
                        j->job.checkpoint_dir);
    } else {
        j->progress.step = s->saved_step = best.step;
        memcpy(s->epoch_sums, best.epoch_sums, sizeof(s->epoch_sums));
        s->has_last_epoch = best.has_last_epoch;
        s->last_loss = best.last_loss;
        s->last_accuracy = best.last_accuracy;
        bool same_metrics = best.metric_signature == job_metrics_signature(&j->job);
        if (best.n_metric_sums == j->job.metric_width && best.n_metric_sums > 0 && same_metrics)
            memcpy(s->epoch_metrics, best.metric_sums, best.n_metric_sums * sizeof(double));
        if (best.n_last_metrics == (size_t)j->job.n_metrics && best.n_last_metrics > 0 &&
            same_metrics) {
            memcpy(s->last_metrics, best.last_metrics, best.n_last_metrics * sizeof(double));
            for (size_t i = 0; best.has_last_epoch && i < best.n_last_metrics; i++)
                j->progress.metrics[i]->value = best.last_metrics[i];
        }
        if (best.has_last_epoch) { /* what a job resumed after its last step reports */
            j->progress.loss = best.last_loss;
            j->progress.accuracy = best.last_accuracy;
        }
        s->start_epoch = j->job.steps > 0 ? 0 : best.data[0].epoch;
        s->start_done = j->job.steps > 0 ? best.step : best.data[0].batch;
        for (size_t w = 0; w < s->n; w++) { /* every pipeline where the root's stands */
            s->cfg->reqs[w].ring_seek = true;
            s->cfg->reqs[w].start_epoch = best.data[0].epoch;
            s->cfg->reqs[w].start_batch = best.data[0].batch;
        }
        chief_job_event(s->c, j, "resuming at step %lld from worker %zu's checkpoint in %s",
                        (long long)best.step, *ret_root, j->job.checkpoint_dir);
    }
    pthread_mutex_unlock(&s->c->mu);
    ckpt_manifest_free(&best);
    return STATUS_OK;
}

/* The end of epoch e: its numbers, and the test split's (worker 0 evaluates). */
static status_t end_epoch(sync_run_t *s, int64_t e, bool has_test, status_msg_t *err)
{
    coordinator_t *c = s->c;
    chief_job_t *j = s->j;
    double sums[3] = {0, 0, 0};
    int got;

    if (has_test && j->job.evaluate)
        STATUS_CHECK(
            closure(s, TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_EVALUATE, 0, &got, sums, err));
    pthread_mutex_lock(&c->mu);
    if (sums[2] > 0) {
        j->progress.test_loss = sums[0] / sums[2];
        j->progress.evaluated = true;
        j->progress.test_accuracy = sums[1] / sums[2];
        dispatch_progress_metrics(&j->progress, &j->job, s->closure_metrics, true);
        chief_epoch_event(c, j, e, true);
    } else {
        chief_epoch_event(c, j, e, false);
    }
    pthread_mutex_unlock(&c->mu);
    return STATUS_OK;
}

static status_t train(sync_run_t *s, int64_t batches, bool has_test, status_msg_t *err)
{
    coordinator_t *c = s->c;
    chief_job_t *j = s->j;
    const job_t *job = &j->job;
    int64_t epochs = job->steps > 0 ? 1 : job->epochs,
            per_epoch = job->steps > 0 ? job->steps : batches;
    int spc = job_closure_steps(job);

    for (int64_t e = s->start_epoch; e < epochs; e++) {
        double *epoch_sums = s->epoch_sums, t0 = clock_now_s();
        int64_t done = e == s->start_epoch ? s->start_done : 0, before = j->progress.step;
        pthread_mutex_lock(&c->mu);
        j->progress.epoch = e;
        pthread_mutex_unlock(&c->mu);
        while (done < per_epoch) {
            int want = per_epoch - done < spc ? (int)(per_epoch - done) : spc, got;
            double sums[3];
            pthread_mutex_lock(&c->mu);
            bool stop = c->stopping;
            pthread_mutex_unlock(&c->mu);
            if (atomic_load(&j->cancel) || stop)
                return status_fail(err, STATUS_CANCELLED, "cancelled");
            STATUS_CHECK(
                closure(s, TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN, want, &got, sums, err));
            if (got <= 0)
                return status_fail(err, STATUS_INVALID_ARGUMENT,
                                   "the workers have no training data left for the epoch's last "
                                   "%lld steps",
                                   (long long)(per_epoch - done));
            done += got;
            for (int k = 0; k < 3; k++)
                epoch_sums[k] += sums[k];
            for (size_t k = 0; k < job->metric_width; k++)
                s->epoch_metrics[k] += s->closure_metrics[k];
            pthread_mutex_lock(&c->mu);
            dispatch_progress_metrics(&j->progress, job, s->epoch_metrics, false);
            before = j->progress.step;
            j->progress.step += got;
            if (epoch_sums[2] > 0) {
                j->progress.loss = epoch_sums[0] / epoch_sums[2];
                j->progress.accuracy = epoch_sums[1] / epoch_sums[2];
                j->progress.examples_per_second = epoch_sums[2] / (clock_now_s() - t0);
            }
            chief_job_changed(c);
            chief_tb_progress(&s->tb, j);
            pthread_mutex_unlock(&c->mu);
            if (done < per_epoch && checkpoint_due(s, before, false))
                STATUS_CHECK(checkpoint(s, err));
        }
        if (epoch_sums[2] > 0) { /* the epoch's means, which a checkpoint keeps */
            s->has_last_epoch = true;
            s->last_loss = epoch_sums[0] / epoch_sums[2];
            s->last_accuracy = epoch_sums[1] / epoch_sums[2];
            job_metrics_result(job, s->epoch_metrics, s->last_metrics);
        }
        STATUS_CHECK(end_epoch(s, e, has_test, err));
        STATUS_CHECK(chief_tb_epoch(&s->tb, c, j, e,
                                    per_epoch - (e == s->start_epoch ? s->start_done : 0),
                                    clock_now_s() - t0, has_test && job->evaluate, err));
        /* the weights live on the workers: the first live one writes their histograms */
        if (s->tb.run != NULL && tb_histograms_due(s->tb.run, e)) {
            double none[3];
            int got;
            STATUS_CHECK(
                closure(s, TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_HISTOGRAMS, 0, &got, none, err));
        }
        pthread_mutex_lock(&c->mu);
        j->progress.train_seconds += clock_now_s() - t0;
        pthread_mutex_unlock(&c->mu);
        epoch_sums[0] = epoch_sums[1] = epoch_sums[2] = 0; /* a checkpoint now is between epochs */
        memset(s->epoch_metrics, 0, job->metric_width * sizeof(double));
        if (e + 1 < epochs && checkpoint_due(s, before, true))
            STATUS_CHECK(checkpoint(s, err));
    }
    /* resumed after its last epoch: the model's numbers on the test split */
    if (s->start_epoch >= epochs)
        STATUS_CHECK(end_epoch(s, epochs - 1, has_test, err));
    /* the last one, always */
    return s->j->job.checkpoint_dir != NULL ? checkpoint(s, err) : STATUS_OK;
}

status_t chief_run_sync(coordinator_t *c, chief_job_t *j, status_msg_t *err)
{
    /* mirrored and central_storage run on one worker, its replicas on its cores */
    bool local = j->job.strategy != JOB_STRATEGY_MULTI_WORKER_MIRRORED;
    size_t n = local ? 1 : c->n_workers;
    worker_cfg_t cfg = {.failed = SIZE_MAX};
    watchdog_t wd = {0};
    sync_run_t s = {.c = c,
                    .j = j,
                    .n = n,
                    .cfg = &cfg,
                    .wd = &wd,
                    .saved_step = -1,
                    .last_save = clock_now_s()};
    /* a job the chief takes up again goes on from its checkpoint, resume or not */
    bool resume = j->job.checkpoint_dir != NULL && (j->job.resume || j->recovered);
    size_t root = SIZE_MAX;
    fanout_t *f = calloc(n + 1, sizeof(*f));
    bool *alive = calloc(n + 1, sizeof(*alive));
    char **ring = calloc(n + 1, sizeof(*ring));
    int64_t examples = 0, global, batches;
    bool has_test;
    status_t rc;

    s.f = calloc(n + 1, sizeof(*s.f));
    s.reqs = calloc(n + 1, sizeof(*s.reqs));
    s.closure_metrics = calloc(j->job.metric_width + 1, sizeof(double));
    s.epoch_metrics = calloc(j->job.metric_width + 1, sizeof(double));
    s.alive = alive;
    s.ring = ring;
    if (!f || !alive || !ring || !s.f || !s.reqs || !s.closure_metrics || !s.epoch_metrics) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        goto out;
    }
    /* data.global_batch_size over the workers (a mirrored job's worker splits it itself) */
    rc = local ? STATUS_OK : job_set_replicas(&j->job, (int)n, err);
    if (rc == STATUS_OK)
        rc = worker_cfg_init(&cfg, c, j, err);
    if (rc == STATUS_OK)
        rc = chief_tb_open(&s.tb, j, err);
    for (size_t w = 0; w < n; w++) {
        alive[w] = true;
        if (rc == STATUS_OK)
            cfg.reqs[w].resume = resume;
    }
    if (rc == STATUS_OK)
        rc = workers_configure(&cfg, NULL, NULL, f, alive, n, err);
    if (rc != STATUS_OK && cfg.failed != SIZE_MAX) {
        char why[sizeof(err->text)];
        snprintf(why, sizeof(why), "%s", err->text); /* failed() writes err */
        rc = failed(&s, cfg.failed, rc, "configuring the job", why, err);
        goto out;
    }
    for (size_t w = 0; rc == STATUS_OK && w < n; w++)
        if (!alive[w]) /* every worker holds a slice of every batch */
            rc = failed(&s, w, STATUS_UNAVAILABLE, "configuring the job",
                        "multi_worker_mirrored needs every worker, and this one is down", err);
    if (rc != STATUS_OK)
        goto out;
    examples = ((const Tessera__V1__ConfigureJobResponse *)f[0].resp)->train_examples;
    global = ((const Tessera__V1__ConfigureJobResponse *)f[0].resp)->global_batch;
    has_test = ((const Tessera__V1__ConfigureJobResponse *)f[0].resp)->test_examples > 0;
    rc = resume ? find_resumed(&s, f, &root, err) : STATUS_OK;
    if (rc == STATUS_OK)
        rc = make_ring(&s, f, err);
    fanout_done(f, n);
    /* resumed: every worker takes the checkpoint's state from the one that restored it */
    if (rc == STATUS_OK)
        rc = connect_ring(&s, false, root, err);
    /* health checks of the workers in the ring: a hung one's closure call is cancelled */
    if (rc == STATUS_OK)
        rc = watchdog_start(&wd, c, alive, n, c->opts->worker_timeout_ms, NULL, NULL, err);
    if (rc != STATUS_OK)
        goto out;
    if (global <= 0) /* a worker that does not say */
        global = (int64_t)j->job.data.batch_size * (int64_t)(local ? 1 : n);
    batches = j->job.data.drop_remainder ? examples / global : (examples + global - 1) / global;
    pthread_mutex_lock(&c->mu);
    j->progress.total_steps = j->job.steps > 0 ? j->job.steps : j->job.epochs * batches;
    if (local)
        chief_job_event(c, j,
                        "training on worker 0 (%s, its replicas on its cores): %lld examples, "
                        "global batch %lld, %lld steps",
                        j->job.strategy == JOB_STRATEGY_MIRRORED ? "mirrored" : "central_storage",
                        (long long)examples, (long long)global, (long long)j->progress.total_steps);
    else
        chief_job_event(c, j,
                        "training on %zu workers (multi_worker_mirrored, a ring all-reduce): %lld "
                        "examples, global batch %lld, %lld steps",
                        n, (long long)examples, (long long)global,
                        (long long)j->progress.total_steps);
    pthread_mutex_unlock(&c->mu);
    rc = train(&s, batches, has_test, err);
out:
    watchdog_stop(&wd);
    if (rc == STATUS_OK)
        rc = chief_tb_close(&s.tb, true, err);
    else
        chief_tb_close(&s.tb, false, NULL);
    if (rc != STATUS_OK)
        chief_cancel_workers(c, j);
    for (size_t w = 0; ring != NULL && w < n; w++)
        free(ring[w]);
    free(ring);
    free(alive);
    if (f != NULL)
        fanout_done(f, n);
    free(f);
    free(s.f);
    free(s.reqs);
    free(s.closure_metrics);
    free(s.epoch_metrics);
    worker_cfg_done(&cfg);
    return rc;
}
