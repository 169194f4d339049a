/* Running a job: configure every worker (model and data shard), plan and create the variables
 * on the PS tasks, tell the workers where they are, then train epoch by epoch through the
 * closure queue (dispatch.c), evaluating on the test split at each epoch's end, and finally drop
 * the job's variables. One runner thread runs the queued jobs in order. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "chief_ckpt.h"
#include "chief_sync.h"
#include "dispatch.h"
#include "fanout.h"
#include "chief_tb.h"
#include "internal.h"
#include "placement.h"
#include "rpc/health.h"
#include "watchdog.h"
#include "workers.h"

void chief_cancel_workers(coordinator_t *c, chief_job_t *j)
{
    Tessera__V1__CancelRequest req = TESSERA__V1__CANCEL_REQUEST__INIT;
    size_t n;
    fanout_t *f;

    pthread_mutex_lock(&c->mu); /* the runner may be taking joined workers in */
    n = c->n_workers;
    pthread_mutex_unlock(&c->mu);
    if ((f = calloc(n + 1, sizeof(*f))) == NULL)
        return;
    req.job = j->id;
    for (size_t w = 0; w < n; w++)
        f[w] = (fanout_t){
            .ch = c->workers[w], .method = RPC_WORKER_CANCEL, .req = &req.base, .timeout_ms = 5000};
    fanout_run(f, n);
    fanout_done(f, n);
    free(f);
}

/* A running job: what the dispatch callbacks get, and where its checkpoints stand. */
typedef struct running {
    coordinator_t *c;
    chief_job_t *j;
    dispatch_t *d;
    const plan_t *plan;
    int64_t saved_step; /* of the newest checkpoint written or resumed from; -1: none */
    double last_save;   /* clock_now_s() of it */
    bool has_last_epoch;
    double last_loss, last_accuracy;
    double last_metrics[JOB_MAX_METRICS]; /* the job's other metrics, over the last epoch */
    watchdog_t *wd;         /* hung[w]: the worker answered no health check for too long */
    worker_cfg_t *cfg;      /* the workers' ConfigureJob requests, for rejoins */
    chief_tb_t tb;          /* the job's TensorBoard run */
    pthread_mutex_t cfg_mu; /* one reconfiguration at a time: a rejoin, or a PS recovery's */
    _Atomic long lost_ps;   /* the PS a worker could not reach, or that did not come back; -1 */
} running_t;

/* A failed call to worker w: ABORTED naming the PS when the worker could not reach one,
 * UNAVAILABLE when the watchdog cancelled it, else as it failed. */
static status_t hung_or(running_t *r, size_t w, const rpc_error_t *rerr, status_msg_t *err)
{
    long ps;
    char *end;

    /* the worker could not reach a PS: the PS is lost, not the worker */
    if (strncmp(rerr->culprit, "ps:", 3) == 0 && (ps = strtol(rerr->culprit + 3, &end, 10)) >= 0 &&
        *end == '\0' && (size_t)ps < r->c->n_ps) {
        atomic_store(&r->lost_ps, ps);
        return status_fail(err, STATUS_ABORTED, "ps:%ld (%s) cannot be reached (worker %zu: %s)",
                           ps, rpc_channel_target(r->c->ps[ps]), w, rerr->message);
    }
    if (rerr->status == STATUS_CANCELLED && atomic_load(&r->wd->hung[w]))
        return status_fail(err, STATUS_UNAVAILABLE,
                           "worker:%zu answered no health check for %.1f s (stopped, hung or cut "
                           "off)",
                           w, (double)r->wd->timeout_ms / 1000);
    /* ABORTED is the chief's word for a lost PS: the worker's own means something else */
    return status_fail(err, rerr->status == STATUS_ABORTED ? STATUS_REMOTE : rerr->status, "%s",
                       rerr->message);
}

/* dispatch_call_fn: a training closure on a worker, over RPC. */
static status_t call_closure(void *arg, size_t w, const dispatch_closure_t *cl,
                             dispatch_result_t *ret, status_msg_t *err)
{
    running_t *r = arg;
    coordinator_t *c = r->c;
    chief_job_t *j = r->j;
    Tessera__V1__RunClosureRequest req = TESSERA__V1__RUN_CLOSURE_REQUEST__INIT;
    Tessera__V1__RunClosureResponse *resp = NULL;
    rpc_call_opts_t o = {.timeout_ms = CLOSURE_TIMEOUT, .cancel = &r->wd->hung[w]};
    rpc_error_t rerr;

    req.job = j->id;
    req.closure_id = cl->id;
    req.kind = TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN;
    req.steps = cl->steps;
    req.global_step = cl->global_step;
    req.epoch = cl->epoch;
    if (cl->shard >= 0) {
        req.data_shard = cl->shard + 1;
        req.data_epoch = cl->data_epoch;
        req.data_batch = cl->data_batch;
    }
    if (rpc_worker_run_closure(c->workers[w], &req, &o, &resp, NULL, &rerr) != STATUS_OK)
        return hung_or(r, w, &rerr, err);
    *ret = (dispatch_result_t){.steps = resp->steps,
                               .examples = resp->examples,
                               .loss_sum = resp->loss_sum,
                               .correct = resp->correct,
                               .data_epoch = resp->data_epoch,
                               .data_batch = resp->data_batch};
    if (resp->n_rng > 0 && (ret->rng = malloc(resp->n_rng * sizeof(*ret->rng))) != NULL) {
        memcpy(ret->rng, resp->rng, resp->n_rng * sizeof(*ret->rng));
        ret->n_rng = resp->n_rng;
    }
    if (resp->n_metric_sums > 0 &&
        (ret->metric_sums = malloc(resp->n_metric_sums * sizeof(double))) != NULL) {
        memcpy(ret->metric_sums, resp->metric_sums, resp->n_metric_sums * sizeof(double));
        ret->n_metric_sums = resp->n_metric_sums;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return STATUS_OK;
}

static void worker_lost(void *arg, size_t w, const char *why)
{
    const running_t *r = arg;
    metric_inc(r->c->m_worker_failures ? r->c->m_worker_failures[w] : NULL);
    chief_metrics_alive(r->c, r->d->alive, r->d->n_workers);
    chief_job_event(r->c, r->j, "worker %zu (%s) failed: %s; its closure goes back on the queue", w,
                    rpc_channel_target(r->c->workers[w]), why);
}

/* The watchdog found lost worker w answering again: it is configured for the job where its data
 * stood and gets closures again. False when that fails (the watchdog tries again later). */
static bool rejoin(void *arg, size_t w)
{
    running_t *r = arg;
    coordinator_t *c = r->c;
    dispatch_t *d = r->d;
    dispatch_pos_t pos;
    status_msg_t err;
    status_t rc;
    bool joined;

    pthread_mutex_lock(&c->mu);
    joined = w >= d->n_workers; /* new to the job: it announced itself while it ran */
    pos = d->pos[w];
    pos.rng = NULL;
    if (d->pos[w].n_rng > 0 && (pos.rng = malloc(d->pos[w].n_rng * sizeof(*pos.rng))) != NULL)
        memcpy(pos.rng, d->pos[w].rng, d->pos[w].n_rng * sizeof(*pos.rng));
    pos.n_rng = pos.rng != NULL ? d->pos[w].n_rng : 0;
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_lock(&r->cfg_mu);
    rc = workers_rejoin(r->cfg, w, r->plan, &pos, &err);
    pthread_mutex_unlock(&r->cfg_mu);
    free(pos.rng);
    pthread_mutex_lock(&c->mu);
    if (rc == STATUS_OK) {
        watchdog_revive(r->wd, w); /* before it is alive: its next call must not be cancelled */
        dispatch_revive(d, w);
        chief_metrics_alive(c, d->alive, d->n_workers);
        if (joined) {
            chief_job_event(c, r->j,
                            "worker %zu (%s) joined the running job: it reads what is left of "
                            "the others' shards",
                            w, rpc_channel_target(c->workers[w]));
            metric_inc(c->m_worker_joins);
        } else {
            metric_inc(c->m_worker_rejoins);
            chief_job_event(c, r->j,
                            "worker %zu (%s) is back: configured for the job at its data's "
                            "epoch %lld, batch %lld",
                            w, rpc_channel_target(c->workers[w]), (long long)pos.epoch + 1,
                            (long long)pos.batch);
        }
    } else {
        chief_job_event(c, r->j, "worker %zu answers again but cannot rejoin: %s", w, err.text);
    }
    pthread_mutex_unlock(&c->mu);
    return rc == STATUS_OK;
}

/* The watchdog saw no step for `seconds`: an event names what the job waits on. */
static void stalled(void *arg, double seconds)
{
    running_t *r = arg;
    coordinator_t *c = r->c;
    char names[600] = "";

    pthread_mutex_lock(&c->mu);
    for (size_t w = 0; w < r->d->n_workers; w++)
        if (r->d->busy[w] && strlen(names) + 64 < sizeof(names))
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%sworker:%zu (%s)",
                     names[0] ? ", " : "", w, rpc_channel_target(c->workers[w]));
    chief_job_event(c, r->j, "stalled: no step for %.0f s; waiting on %s", seconds,
                    names[0] ? names
                             : "no closure in flight (a lost PS, a checkpoint or an evaluation)");
    pthread_mutex_unlock(&c->mu);
}

/* Progress moved (the mutex held): the watchers wake, and a batch summary goes to TensorBoard
 * each time the step passes a multiple of update_freq. */
static void progress_moved(void *arg)
{
    running_t *r = (running_t *)arg;

    chief_job_changed(r->c);
    chief_tb_progress(&r->tb, r->j);
}

/* Evaluates on the first live worker that answers. */
static status_t evaluate(running_t *r, status_msg_t *err)
{
    coordinator_t *c = r->c;
    chief_job_t *j = r->j;
    dispatch_t *d = r->d;
    Tessera__V1__RunClosureRequest req = TESSERA__V1__RUN_CLOSURE_REQUEST__INIT;
    Tessera__V1__RunClosureResponse *resp = NULL;
    rpc_error_t rerr;

    for (size_t w = 0; w < c->cap_workers; w++) {
        rpc_call_opts_t o = {.timeout_ms = CLOSURE_TIMEOUT, .cancel = &r->wd->hung[w]};
        status_msg_t why;
        pthread_mutex_lock(&c->mu);
        bool alive = w < d->n_workers && d->alive[w];
        req.closure_id = d->next_closure++;
        pthread_mutex_unlock(&c->mu);
        if (!alive || atomic_load(&r->wd->hung[w]))
            continue;
        req.job = j->id;
        req.kind = TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_EVALUATE;
        if (rpc_worker_run_closure(c->workers[w], &req, &o, &resp, NULL, &rerr) != STATUS_OK) {
            status_t rc = hung_or(r, w, &rerr, &why);
            if (rc == STATUS_UNAVAILABLE || rc == STATUS_TIMEOUT) {
                pthread_mutex_lock(&c->mu);
                d->alive[w] = false;
                worker_lost(r, w, why.text);
                pthread_mutex_unlock(&c->mu);
                continue;
            }
            pthread_mutex_lock(&c->mu);
            d->failed_worker = w; /* what blame() names */
            pthread_mutex_unlock(&c->mu);
            return status_fail(err, rc, "evaluation on worker %zu: %s", w, why.text);
        }
        pthread_mutex_lock(&c->mu);
        if (resp->examples > 0) {
            j->progress.test_loss = resp->loss_sum / (double)resp->examples;
            j->progress.evaluated = true;
            j->progress.test_accuracy = resp->correct / (double)resp->examples;
        }
        if (resp->n_metric_sums == j->job.metric_width)
            dispatch_progress_metrics(&j->progress, &j->job, resp->metric_sums, true);
        else
            LOG_WARNING(CHIEF,
                        "worker %zu sent %zu metric sums of the test split, the job has "
                        "%zu: not counted",
                        w, resp->n_metric_sums, j->job.metric_width);
        chief_epoch_event(c, j, j->progress.epoch, true);
        pthread_mutex_unlock(&c->mu);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return STATUS_OK;
    }
    return status_fail(err, STATUS_UNAVAILABLE, "no worker is left to evaluate on");
}

/* Writes a checkpoint of where the job stands (the closures paused), unless that step is on disk
 * already; answers the Checkpoint calls waiting either way. */
static status_t checkpoint(running_t *r, status_msg_t *err)
{
    coordinator_t *c = r->c;
    chief_job_t *j = r->j;
    chief_position_t pos;
    status_t rc = STATUS_OK;

    pthread_mutex_lock(&c->mu);
    pos = (chief_position_t){
        .step = j->progress.step,
        .epoch_sums = {r->d->epoch_loss, r->d->epoch_correct, (double)r->d->epoch_examples},
        .has_last_epoch = r->has_last_epoch,
        .last_loss = r->last_loss,
        .last_accuracy = r->last_accuracy,
        .metric_sums = j->job.n_metrics > 0 ? r->d->epoch_metrics : NULL,
        .last_metrics = j->job.n_metrics > 0 && r->has_last_epoch ? r->last_metrics : NULL,
        .workers = r->d->pos,
        .n_workers = r->d->n_shards};
    pthread_mutex_unlock(&c->mu);
    if (pos.step != r->saved_step)
        rc = chief_ckpt_save(c, j, r->plan, &pos, err);
    pthread_mutex_lock(&c->mu);
    if (rc == STATUS_OK) {
        if (pos.step != r->saved_step)
            chief_job_event(c, j, "checkpoint at step %lld", (long long)pos.step);
        r->saved_step = pos.step;
        r->last_save = clock_now_s();
    }
    chief_ckpt_answer(c, j, rc, pos.step, rc == STATUS_OK ? "" : err->text);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* One epoch's steps, `left` of them still to run, pausing for the checkpoints that fall due. */
static status_t run_epoch(running_t *r, int64_t left, status_msg_t *err)
{
    coordinator_t *c = r->c;
    const job_t *job = &r->j->job;
    dispatch_t *d = r->d;

    for (;;) {
        int64_t before, after;
        bool paused;
        pthread_mutex_lock(&c->mu);
        if (job->checkpoint_dir != NULL) {
            int64_t every = job->checkpoint_every_steps;
            d->stop_step = every > 0 ? (d->progress->step / every + 1) * every : 0;
            d->stop_time = job->checkpoint_every_seconds > 0
                               ? r->last_save + (double)job->checkpoint_every_seconds
                               : 0;
        }
        before = d->progress->step;
        pthread_mutex_unlock(&c->mu);
        STATUS_CHECK(dispatch_run(d, err));
        pthread_mutex_lock(&c->mu);
        left = d->steps_left;
        after = d->progress->step;
        paused = dispatch_paused(d);
        pthread_mutex_unlock(&c->mu);
        if (left <= 0)
            return STATUS_OK;
        if (paused && job->checkpoint_dir != NULL) {
            status_t rc = checkpoint(r, err);
            if (rc == STATUS_UNAVAILABLE || rc == STATUS_TIMEOUT) /* a PS lost while saving */
                rc = err->status = STATUS_ABORTED;
            if (rc != STATUS_OK)
                return rc;
        } else if (after == before)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "no worker has training data left for the epoch's last %lld steps",
                               (long long)left);
    }
}

/* The epochs from where the job stands (a resumed job: mid-epoch, with the epoch's sums so far),
 * each followed by its evaluation or its summary, and by a checkpoint when they are per epoch;
 * the last step is always checkpointed. */
static status_t train(running_t *r, int64_t batches, bool has_test, const ckpt_manifest_t *m,
                      status_msg_t *err)
{
    const double *sums = m != NULL ? m->epoch_sums : NULL;
    coordinator_t *c = r->c;
    chief_job_t *j = r->j;
    const job_t *job = &j->job;
    int64_t epochs = job->steps > 0 ? 1 : job->epochs;
    int64_t per_epoch = job->steps > 0 ? job->steps : batches, start;
    bool per_epoch_ckpt = job->checkpoint_every_steps == 0 && job->checkpoint_every_seconds == 0;
    status_t rc = STATUS_OK;

    pthread_mutex_lock(&c->mu);
    start = j->progress.step;
    pthread_mutex_unlock(&c->mu);
    if (start > 0 && start >= epochs * per_epoch && has_test && job->evaluate) {
        pthread_mutex_lock(&c->mu);
        j->progress.epoch = epochs - 1;
        pthread_mutex_unlock(&c->mu);
        return evaluate(r, err); /* resumed after its last step: the model's numbers */
    }
    for (int64_t e = per_epoch > 0 ? start / per_epoch : epochs; e < epochs && rc == STATUS_OK;
         e++) {
        int64_t done = e == start / per_epoch ? start - e * per_epoch : 0;
        double t0 = clock_now_s();
        pthread_mutex_lock(&c->mu);
        j->progress.epoch = e;
        pthread_mutex_unlock(&c->mu);
        dispatch_begin(r->d, per_epoch - done);
        if (done > 0 && sums != NULL) { /* the resumed epoch's sums so far */
            pthread_mutex_lock(&c->mu);
            r->d->epoch_loss = sums[0];
            r->d->epoch_correct = sums[1];
            r->d->epoch_examples = (int64_t)sums[2];
            if (m->n_metric_sums == job->metric_width && job->metric_width > 0 &&
                m->metric_signature == job_metrics_signature(job))
                memcpy(r->d->epoch_metrics, m->metric_sums, job->metric_width * sizeof(double));
            pthread_mutex_unlock(&c->mu);
        }
        rc = run_epoch(r, per_epoch - done, err);
        if (rc == STATUS_OK && has_test && job->evaluate) {
            rc = evaluate(r, err);
        } else if (rc == STATUS_OK) {
            pthread_mutex_lock(&c->mu);
            chief_epoch_event(c, j, e, false);
            pthread_mutex_unlock(&c->mu);
        }
        if (rc == STATUS_OK)
            rc = chief_tb_epoch(&r->tb, c, j, e, per_epoch - done, clock_now_s() - t0,
                                has_test && job->evaluate, err);
        if (rc == STATUS_OK && r->tb.run != NULL && tb_histograms_due(r->tb.run, e))
            rc = chief_histograms(c, j, r->plan, r->tb.run, e, err);
        if (rc != STATUS_OK)
            break;
        pthread_mutex_lock(&c->mu);
        r->has_last_epoch = true;
        r->last_loss = j->progress.loss;
        r->last_accuracy = j->progress.accuracy;
        for (int i = 0; i < job->n_metrics; i++)
            r->last_metrics[i] = j->progress.metrics[i]->value;
        r->d->epoch_loss = r->d->epoch_correct = 0;
        r->d->epoch_examples = 0;
        if (job->metric_width > 0)
            memset(r->d->epoch_metrics, 0, job->metric_width * sizeof(double));
        pthread_mutex_unlock(&c->mu);
        if (job->checkpoint_dir != NULL && (per_epoch_ckpt || e + 1 == epochs))
            rc = checkpoint(r, err);
    }
    return rc;
}

/* A resumed job: the newest checkpoint, or none (NOT_FOUND, said as an event). */
static status_t find_resume(coordinator_t *c, chief_job_t *j, char **ret_path, ckpt_manifest_t *m,
                            bool *ret_found, status_msg_t *err)
{
    status_t rc;

    *ret_found = false;
    if (j->recovered && j->job.checkpoint_dir == NULL) {
        pthread_mutex_lock(&c->mu);
        chief_job_event(c, j, "no checkpoint to go on from: starting over from step 0");
        pthread_mutex_unlock(&c->mu);
    }
    /* a job the chief takes up again goes on from its checkpoint, resume or not */
    if (!j->job.resume && !(j->recovered && j->job.checkpoint_dir != NULL))
        return STATUS_OK;
    rc = chief_ckpt_find(j, ret_path, m, err);
    if (rc == STATUS_OK && !j->job.resume && m->wall_time < j->started_at) {
        /* another run's, left in the directory: not this one's to go on from */
        ckpt_manifest_free(m);
        memset(m, 0, sizeof(*m));
        free(*ret_path);
        *ret_path = NULL;
        rc = STATUS_NOT_FOUND;
    }
    pthread_mutex_lock(&c->mu);
    if (rc == STATUS_NOT_FOUND && j->recovered)
        chief_job_event(c, j, "no checkpoint of this run in %s: starting over from step 0",
                        j->job.checkpoint_dir);
    else if (rc == STATUS_NOT_FOUND)
        chief_job_event(c, j, "no checkpoint in %s yet: starting from the beginning",
                        j->job.checkpoint_dir);
    else if (rc == STATUS_OK && m->n_data != c->n_workers)
        chief_job_event(c, j,
                        "resuming from %s, written by %zu workers: with %zu now, the data "
                        "pipelines start their epoch over",
                        *ret_path, m->n_data, c->n_workers);
    pthread_mutex_unlock(&c->mu);
    if (rc == STATUS_NOT_FOUND)
        return STATUS_OK;
    *ret_found = rc == STATUS_OK;
    return rc;
}

/* After the PS tasks restored the checkpoint: the job's step, and each worker's data position
 * as the workers were configured with it. */
static status_t resume_position(running_t *r, const char *path, const ckpt_manifest_t *m,
                                status_msg_t *err)
{
    coordinator_t *c = r->c;
    dispatch_t *d = r->d;

    pthread_mutex_lock(&c->mu);
    r->j->progress.step = m->step;
    /* the updates before the job's first step (an archive's optimizer going on): the
     * checkpoint's less its batches' (an update a window of accumulate_steps) */
    int64_t updates = m->step / job_window(&r->j->job);
    r->j->updates_from = m->iterations > updates ? m->iterations - updates : 0;
    if (m->has_last_epoch) { /* what a job resumed after its last step reports */
        r->j->progress.loss = m->last_loss;
        r->j->progress.accuracy = m->last_accuracy;
    }
    r->saved_step = m->step;
    r->has_last_epoch = m->has_last_epoch;
    r->last_loss = m->last_loss;
    r->last_accuracy = m->last_accuracy;
    if (m->n_last_metrics == (size_t)r->j->job.n_metrics && m->n_last_metrics > 0 &&
        m->metric_signature == job_metrics_signature(&r->j->job)) {
        memcpy(r->last_metrics, m->last_metrics, m->n_last_metrics * sizeof(double));
        for (size_t i = 0; m->has_last_epoch && i < m->n_last_metrics; i++)
            r->j->progress.metrics[i]->value = m->last_metrics[i];
    }
    for (size_t w = 0; m->n_data == d->n_shards && w < d->n_shards; w++) {
        free(d->pos[w].rng);
        d->pos[w] = (dispatch_pos_t){
            .epoch = m->data[w].epoch, .batch = m->data[w].batch, .end = m->data[w].end};
        if (m->data[w].n_rng > 0 &&
            (d->pos[w].rng = malloc(m->data[w].n_rng * sizeof(uint64_t))) != NULL) {
            memcpy(d->pos[w].rng, m->data[w].rng, m->data[w].n_rng * sizeof(uint64_t));
            d->pos[w].n_rng = m->data[w].n_rng;
        }
    }
    chief_job_event(c, r->j, "restored from step %lld (%s)", (long long)m->step, path);
    pthread_mutex_unlock(&c->mu);
    (void)err;
    return STATUS_OK;
}

/* Waits until every PS answers a health check, for at most the chief's --ps-timeout. */
static status_t wait_for_ps(running_t *r, status_msg_t *err)
{
    coordinator_t *c = r->c;
    const char **targets = calloc(c->n_ps + 1, sizeof(*targets));
    health_state_t *states = calloc(c->n_ps + 1, sizeof(*states));
    rpc_error_t *errs = calloc(c->n_ps + 1, sizeof(*errs));
    double until = clock_now_s() + (double)c->opts->ps_timeout_ms / 1000;
    status_t rc = STATUS_OK;

    if (!targets || !states || !errs)
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t p = 0; targets && p < c->n_ps; p++)
        targets[p] = rpc_channel_target(c->ps[p]);
    while (rc == STATUS_OK) {
        size_t down = c->n_ps;
        health_check_many(targets, c->n_ps, 1000, states, errs, NULL);
        for (size_t p = 0; p < c->n_ps && down == c->n_ps; p++)
            if (states[p] != HEALTH_SERVING)
                down = p;
        if (down == c->n_ps)
            break;
        pthread_mutex_lock(&c->mu);
        bool stopping = c->stopping;
        pthread_mutex_unlock(&c->mu);
        if (atomic_load(&r->j->cancel) || stopping)
            rc = status_fail(err, STATUS_CANCELLED, "cancelled while waiting for ps:%zu", down);
        else if (clock_now_s() < until)
            clock_sleep_ms(500);
        else {
            atomic_store(&r->lost_ps, (long)down);
            rc = status_fail(err, STATUS_UNAVAILABLE,
                             "ps:%zu (%s) did not come back within --ps-timeout (%.0f s): %s", down,
                             targets[down], (double)c->opts->ps_timeout_ms / 1000,
                             errs[down].message);
        }
    }
    free(targets);
    free(states);
    free(errs);
    return rc;
}

/* The job starts over from step 0 (a lost PS and no checkpoint): positions and sums cleared. */
static status_t start_over(running_t *r)
{
    coordinator_t *c = r->c;
    dispatch_t *d = r->d;

    pthread_mutex_lock(&c->mu);
    r->j->progress.step = 0;
    r->j->progress.epoch = 0;
    r->saved_step = -1;
    r->has_last_epoch = false;
    for (size_t w = 0; w < d->n_workers; w++) {
        free(d->pos[w].rng);
        d->pos[w] = (dispatch_pos_t){0};
    }
    chief_job_event(c, r->j, "no checkpoint to go on from: starting over from step 0");
    pthread_mutex_unlock(&c->mu);
    return STATUS_OK;
}

/* A PS was lost mid-job (why: STATUS_ABORTED naming it). Waits for it to be back (restarted at
 * its address), then the job goes on from its newest checkpoint: the variables are created again
 * where they are missing, every PS restores its file, every live worker is configured again
 * where the checkpoint left its data, and the steps after the checkpoint are run again. Without
 * a checkpoint the job starts over: every variable from its initializer, every worker's data from
 * the start. *m and *path become the checkpoint's (zeroed when there is none). */
static status_t recover_ps(running_t *r, const char *why, ckpt_manifest_t *m, char **path,
                           status_msg_t *err)
{
    coordinator_t *c = r->c;
    chief_job_t *j = r->j;
    dispatch_t *d = r->d;
    fanout_t *f = calloc(c->cap_workers + 1, sizeof(*f));
    bool fresh = j->job.checkpoint_dir == NULL; /* no checkpoint to go on from: from step 0 */
    size_t ps, n;
    status_t rc;

    if (f == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    if (sscanf(why, "ps:%zu", &ps) == 1 && ps < c->n_ps && c->m_ps_failures != NULL)
        metric_inc(c->m_ps_failures[ps]);
    pthread_mutex_lock(&c->mu);
    chief_job_event(c, j, "%s: waiting for it to come back", why);
    pthread_mutex_unlock(&c->mu);
    ckpt_manifest_free(m);
    memset(m, 0, sizeof(*m));
    free(*path);
    *path = NULL;
    rc = wait_for_ps(r, err);
    if (rc == STATUS_OK && j->job.checkpoint_dir != NULL) {
        rc = chief_ckpt_find(j, path, m, err);
        fresh = rc == STATUS_NOT_FOUND;
        rc = fresh ? STATUS_OK : rc;
    }
    pthread_mutex_lock(&r->cfg_mu); /* no rejoin in between: it would see half a recovery */
    if (rc == STATUS_OK && fresh)   /* every variable from its initializer again */
        placement_drop(c, j);
    if (rc == STATUS_OK)
        rc = placement_create(c, j, r->plan, err);
    if (rc == STATUS_OK && !fresh)
        rc = chief_ckpt_restore(c, j, r->plan, *path, m, err);
    if (rc == STATUS_OK) {
        pthread_mutex_lock(&c->mu);
        d->failed = false;
        memset(&d->err, 0, sizeof(d->err));
        for (size_t w = 0; w < d->n_workers; w++)
            d->worker_steps[w] = 0;
        pthread_mutex_unlock(&c->mu);
        rc = fresh ? start_over(r) : resume_position(r, *path, m, err);
    }
    pthread_mutex_lock(&c->mu); /* no worker joins without cfg_mu */
    n = d->n_workers;
    pthread_mutex_unlock(&c->mu);
    if (rc == STATUS_OK)
        rc = workers_configure(r->cfg, NULL, fresh ? NULL : m, f, d->alive, n, err);
    fanout_done(f, n);
    if (rc == STATUS_OK)
        rc = workers_configure(r->cfg, r->plan, NULL, f, d->alive, n, err);
    pthread_mutex_unlock(&r->cfg_mu);
    fanout_done(f, n);
    free(f);
    if (rc == STATUS_OK) {
        metric_inc(c->m_ps_recoveries);
        pthread_mutex_lock(&c->mu);
        chief_metrics_alive(c, d->alive, d->n_workers);
        pthread_mutex_unlock(&c->mu);
    }
    return rc;
}

/* The batches per epoch of the shards of workers that could not be configured, from what the
 * others can tell (every worker holds every example unless the data is sharded by file); the
 * sum over the shards, and *examples grown by theirs. A shard nobody can tell is not read. */
static int64_t shard_sizes(dispatch_t *d, const fanout_t *f, size_t n, const job_t *job,
                           int64_t *examples)
{
    int64_t sum = 0, b = job->data.batch_size;

    for (size_t s = 0; s < n; s++) {
        for (size_t w = 0; w < n && !d->alive[s] && d->shard_batches[s] == 0; w++) {
            const Tessera__V1__ConfigureJobResponse *resp = (const void *)f[w].resp;
            int64_t e;
            if (!d->alive[w] || resp == NULL || resp->n_shard_examples != n ||
                (e = resp->shard_examples[s]) <= 0)
                continue;
            d->shard_batches[s] = job->data.drop_remainder ? e / b : (e + b - 1) / b;
            *examples += e;
            break;
        }
        sum += d->shard_batches[s];
    }
    return sum;
}

/* Who a failed job is on: the job itself (its configuration, data or numbers: no retry helps)
 * or the task that failed, the chief's own when no task is named. j->mu held. */
static void blame(chief_job_t *j, status_t rc, const running_t *r, const dispatch_t *d,
                  const worker_cfg_t *cfg)
{
    status_group_t g = status_group(rc);
    bool app = g == STATUS_GROUP_INVALID_ARGUMENT || rc == STATUS_DATA_LOSS ||
               rc == STATUS_RESOURCE_EXHAUSTED;
    size_t w = d->failed_worker != SIZE_MAX ? d->failed_worker : cfg->failed;

    if (w != SIZE_MAX) {
        snprintf(j->failed_task, sizeof(j->failed_task), "worker:%zu", w);
        j->fault = app ? TESSERA__V1__FAULT__FAULT_APPLICATION : TESSERA__V1__FAULT__FAULT_WORKER;
    } else if (atomic_load(&r->lost_ps) >= 0 && !app) {
        snprintf(j->failed_task, sizeof(j->failed_task), "ps:%ld", atomic_load(&r->lost_ps));
        j->fault = TESSERA__V1__FAULT__FAULT_PS;
    } else {
        snprintf(j->failed_task, sizeof(j->failed_task), "chief:0");
        j->fault = app ? TESSERA__V1__FAULT__FAULT_APPLICATION : TESSERA__V1__FAULT__FAULT_CHIEF;
    }
}

static status_t run_job(coordinator_t *c, chief_job_t *j, status_msg_t *err)
{
    /* the workers now, one shard of the data each; more may join while it runs (the watchdog) */
    size_t n0 = c->n_workers, n_absent = 0, asker = SIZE_MAX;
    fanout_t *f1 = calloc(n0 + 1, sizeof(*f1)), *f2 = calloc(n0 + 1, sizeof(*f2));
    int32_t *absent = calloc(n0 + 1, sizeof(*absent));
    dispatch_t d = {.mu = &c->mu,
                    .cv = &c->cv,
                    .steps_per_closure = job_closure_steps(&j->job),
                    .max_staleness = j->job.max_staleness,
                    .cancel = &j->cancel,
                    .stopping = &c->stopping,
                    .progress = &j->progress,
                    .call = call_closure,
                    .lost = worker_lost,
                    .changed = progress_moved,
                    .pause = &j->ckpt_wanted,
                    .lost_grace_s = (double)c->opts->rejoin_timeout_ms / 1000,
                    .m_done = c->m_closures,
                    .m_retried = c->m_retried,
                    .m_running = c->m_running,
                    .m_queued = c->m_queued,
                    .failed_worker = SIZE_MAX};
    plan_t plan = {0};
    watchdog_t wd = {0};
    worker_cfg_t cfg = {.failed = SIZE_MAX};
    running_t run = {.c = c,
                     .cfg = &cfg,
                     .j = j,
                     .d = &d,
                     .plan = &plan,
                     .wd = &wd,
                     .saved_step = -1,
                     .lost_ps = -1,
                     .last_save = clock_now_s()};
    const Tessera__V1__ConfigureJobResponse *first = NULL;
    size_t n_alive = 0;
    ckpt_manifest_t m = {0};
    char *resume_path = NULL;
    int64_t train_examples = 0, batches = 0, b = j->job.data.batch_size;
    bool has_test = false, resumed = false;
    status_t rc;

    d.arg = &run;
    pthread_mutex_init(&run.cfg_mu, NULL);
    if (!f1 || !f2 || !absent) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        goto out;
    }
    d.job = &j->job;
    rc = dispatch_init(&d, n0, c->cap_workers, err);
    if (rc == STATUS_OK)
        rc = worker_cfg_init(&cfg, c, j, err);
    if (rc == STATUS_OK)
        rc = chief_tb_open(&run.tb, j, err);
    if (rc == STATUS_OK)
        rc = find_resume(c, j, &resume_path, &m, &resumed, err);
    if (rc == STATUS_OK)
        rc = workers_configure(&cfg, NULL, resumed ? &m : NULL, f1, d.alive, n0, err);
    if (rc != STATUS_OK)
        goto out;
    for (size_t w = 0; w < n0; w++) {
        const Tessera__V1__ConfigureJobResponse *resp = (const void *)f1[w].resp;
        if (!d.alive[w])
            continue;
        if (first == NULL)
            first = resp;
        n_alive++;
        train_examples += resp->train_examples;
        d.shard_batches[w] = j->job.data.drop_remainder ? resp->train_examples / b
                                                        : (resp->train_examples + b - 1) / b;
        has_test |= resp->test_examples > 0;
    }
    batches = shard_sizes(&d, f1, n0, &j->job, &train_examples);
    /* shards in files that only their absent workers read: the first live worker loads them */
    for (size_t w = 0; w < n0; w++)
        if (d.shard_batches[w] == 0 && !d.alive[w] && (asker = dispatch_first_alive(&d)) < n0)
            absent[n_absent++] = (int32_t)w;
    if (n_absent > 0) {
        cfg.reqs[asker].n_size_shards = n_absent;
        cfg.reqs[asker].size_shards = absent;
    }
    /* an epoch reads every shard once, a lost worker's by the others; `steps` jobs: a pool */
    d.by_shard = j->job.steps == 0;
    rc = placement_plan(c, j, first, &plan, err);
    /* Starting weights only for a job that starts: a resumed one has its checkpoint's. */
    if (rc == STATUS_OK && j->job.init_from != NULL && !resumed) {
        rc = placement_init_from(j, first, &plan, err);
        if (rc == STATUS_OK) {
            pthread_mutex_lock(&c->mu);
            chief_job_event(c, j, "starting from the weights in %s", j->job.init_from);
            if (plan.updates >= 0)
                chief_job_event(c, j, "the optimizer goes on from iteration %lld",
                                (long long)plan.updates);
            j->updates_from = plan.updates > 0 ? plan.updates : 0;
            pthread_mutex_unlock(&c->mu);
        }
    }
    if (rc == STATUS_OK && j->recovered) /* a PS may be coming back too (--ps-timeout) */
        rc = wait_for_ps(&run, err);
    if (rc == STATUS_OK && j->recovered) /* what the crashed chief left on the PS tasks */
        placement_drop(c, j);
    if (rc == STATUS_OK)
        rc = placement_create(c, j, &plan, err);
    if (rc == STATUS_OK && resumed)
        rc = chief_ckpt_restore(c, j, &plan, resume_path, &m, err);
    if (rc == STATUS_OK && resumed)
        rc = resume_position(&run, resume_path, &m, err);
    if (rc == STATUS_OK)
        rc = workers_configure(&cfg, &plan, NULL, f2, d.alive, n0, err);
    if (n_absent > 0) {
        cfg.reqs[asker].n_size_shards = 0; /* a rejoin needs none */
        cfg.reqs[asker].size_shards = NULL;
        batches = shard_sizes(&d, f2, n0, &j->job, &train_examples);
    }
    for (size_t w = 0; rc == STATUS_OK && w < n0; w++)
        if (d.shard_batches[w] == 0 && !d.alive[w]) {
            pthread_mutex_lock(&c->mu);
            chief_job_event(c, j,
                            "worker %zu's shard of the data is in files no live worker can read: "
                            "the job trains without it",
                            w);
            pthread_mutex_unlock(&c->mu);
        }
    watchdog_watch_step(&wd, &j->progress.step, c->opts->stall_timeout_ms, stalled);
    if (rc == STATUS_OK)
        rc = watchdog_start(&wd, c, d.alive, c->cap_workers, c->opts->worker_timeout_ms, rejoin,
                            &run, err);
    if (rc != STATUS_OK)
        goto out;
    pthread_mutex_lock(&c->mu);
    chief_metrics_alive(c, d.alive, d.n_workers);
    j->progress.total_steps = j->job.steps > 0 ? j->job.steps : j->job.epochs * batches;
    chief_job_event(
        c, j, "training on %zu workers and %zu ps: %lld examples, %lld steps, %zu shards", n_alive,
        c->n_ps, (long long)train_examples, (long long)j->progress.total_steps, plan.n_places);
    pthread_mutex_unlock(&c->mu);
    rc = train(&run, batches, has_test, resumed ? &m : NULL, err);
    /* a lost PS: back to the newest checkpoint, as often as it takes */
    while (rc == STATUS_ABORTED) {
        char why[sizeof(err->text)];
        snprintf(why, sizeof(why), "%s", err->text);
        rc = recover_ps(&run, why, &m, &resume_path, err);
        if (rc == STATUS_OK)
            rc = train(&run, batches, has_test, &m, err);
    }
out:
    if (rc != STATUS_OK && rc != STATUS_CANCELLED) {
        pthread_mutex_lock(&c->mu);
        blame(j, rc, &run, &d, &cfg);
        pthread_mutex_unlock(&c->mu);
    }
    watchdog_stop(&wd);
    chief_metrics_alive(c, NULL, 0);
    metric_set(c->m_running, 0);
    metric_set(c->m_queued, 0);
    if (rc == STATUS_CANCELLED)
        chief_cancel_workers(c, j);
    if (plan.n_places > 0)
        placement_drop(c, j);
    if (f1 != NULL)
        fanout_done(f1, n0);
    if (f2 != NULL)
        fanout_done(f2, n0);
    placement_done(&plan);
    dispatch_done(&d);
    if (rc == STATUS_OK)
        rc = chief_tb_close(&run.tb, true, err);
    else
        chief_tb_close(&run.tb, false, NULL);
    ckpt_manifest_free(&m);
    free(resume_path);
    free(f1);
    free(f2);
    free(absent);
    worker_cfg_done(&cfg);
    pthread_mutex_destroy(&run.cfg_mu);
    return rc;
}

void *chief_runner_main(void *arg)
{
    coordinator_t *c = arg;
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        chief_job_t *j;
        status_msg_t err = {0};
        status_t rc;
        chief_adopt_workers(c); /* between jobs; while one runs, its watchdog does */
        while (!c->stopping && (j = chief_next_queued(c)) == NULL) {
            pthread_cond_wait(&c->cv, &c->mu);
            chief_adopt_workers(c);
        }
        if (c->stopping)
            break;
        j->state = TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING;
        if (!j->recovered) /* a recovered job keeps its first start: its checkpoints are after */
            j->started_at = clock_wall_s();
        chief_journal_started(c, j);
        chief_job_event(c, j, "started");
        pthread_mutex_unlock(&c->mu);
        rc = job_is_synchronous(&j->job) ? chief_run_sync(c, j, &err) : run_job(c, j, &err);
        pthread_mutex_lock(&c->mu);
        if (rc == STATUS_OK) {
            chief_job_end(c, j, TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "succeeded in %.1f s",
                          clock_wall_s() - j->started_at);
        } else if (rc == STATUS_CANCELLED && c->stopping && c->journal != NULL && !j->user_cancel) {
            /* not an end: the journal still has it running, for the next start */
            chief_job_event(c, j,
                            "the chief stops: the job goes on from its newest checkpoint when "
                            "the chief starts again");
        } else if (rc == STATUS_CANCELLED) {
            chief_job_end(c, j, TESSERA__V1__JOB_STATE__JOB_STATE_CANCELLED, "cancelled");
        } else {
            snprintf(j->reason, sizeof(j->reason), "%s", err.text[0] ? err.text : status_str(rc));
            chief_job_end(c, j, TESSERA__V1__JOB_STATE__JOB_STATE_FAILED, "failed: %s", j->reason);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}
