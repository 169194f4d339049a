#define _POSIX_C_SOURCE 200809L
#include "coordinator.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "job/job.h"
#include "base/log.h"
#include "rpc/optimizer_proto.h"
#include "job/partitioner.h"
#include "tessera/v1/common.pb-c.h"
#include "rpc/server.h"
#include "rpc/client.h"

#define MAX_EVENTS        64
#define CONFIGURE_TIMEOUT 600000
#define CLOSURE_TIMEOUT   600000
#define CONTROL_TIMEOUT   30000

typedef struct job_file_copy {
    char *path;
    uint8_t *data;
    size_t len;
} job_file_copy_t;

typedef struct chief_job {
    struct chief_job *next;
    char id[160];
    char name[128];
    char *spec, *path;
    job_file_copy_t *files;
    size_t n_files;
    job_t job;
    Tessera__V1__JobState state;
    char reason[512];
    Tessera__V1__JobProgress progress;
    double submitted_at, started_at, finished_at;
    _Atomic bool cancel;
    char *events[MAX_EVENTS];
    double event_times[MAX_EVENTS];
    size_t n_events; /* total ever; the last MAX_EVENTS are kept */
} chief_job_t;

/* A WatchJob stream. Lives until both the stream is finished and its call is over. */
typedef struct watcher {
    struct watcher *next;
    rpc_ctx_t *ctx;
    struct coordinator *c;
    chief_job_t *job;
    bool finished; /* rpc_ctx_stream_finish called */
    bool over;     /* the call is over (done callback ran) */
    int64_t sent_step;
    size_t sent_events;
    Tessera__V1__JobState sent_state;
} watcher_t;

struct coordinator {
    daemon_t *daemon;
    chief_opts_t *opts;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* job queue changes, progress, dispatcher hand-offs */
    chief_job_t *jobs, *last;
    unsigned next_id;
    bool stopping;
    pthread_t runner;
    bool runner_started;
    rpc_channel_t **ps, **workers;
    size_t n_ps, n_workers;
    watcher_t *watchers;
    pthread_t watch_thread;
    bool watch_started;
};

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Records an event of a job; call with c->mu held. */
static void job_event(coordinator_t *c, chief_job_t *j, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void job_event(coordinator_t *c, chief_job_t *j, const char *fmt, ...)
{
    char buf[600];
    va_list ap;
    size_t slot = j->n_events % MAX_EVENTS;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    free(j->events[slot]);
    j->events[slot] = strdup(buf);
    j->event_times[slot] = wall_now();
    j->n_events++;
    LOG_INFO(CHIEF, "job %s: %s", j->id, buf);
    pthread_cond_broadcast(&c->cv);
}

static void chief_job_free(chief_job_t *j)
{
    if (j == NULL)
        return;
    for (size_t i = 0; i < j->n_files; i++) {
        free(j->files[i].path);
        free(j->files[i].data);
    }
    for (size_t i = 0; i < MAX_EVENTS; i++)
        free(j->events[i]);
    free(j->files);
    free(j->spec);
    free(j->path);
    job_done(&j->job);
    free(j);
}

/* ---- talking to many tasks at once -------------------------------------------------------- */

typedef struct fanout {
    rpc_channel_t *ch;
    rpc_method_id_t method;
    const ProtobufCMessage *req;
    ProtobufCMessage *resp;
    int64_t timeout_ms;
    status_t rc;
    rpc_error_t err;
    pthread_t tid;
    bool started;
} fanout_t;

static void *fanout_main(void *arg)
{
    fanout_t *f = arg;
    rpc_call_opts_t o = {.timeout_ms = f->timeout_ms};
    f->rc = rpc_unary(f->ch, f->method, f->req, &o, &f->resp, NULL, &f->err);
    return NULL;
}

/* Sends reqs[i] to chans[i] for every i at once and waits for all. */
static void fanout_run(fanout_t *f, size_t n)
{
    sigset_t all, old;

    /* The calling threads inherit a full signal mask: signals belong to the main thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (size_t i = 0; i < n; i++) {
        f[i].started = pthread_create(&f[i].tid, NULL, fanout_main, &f[i]) == 0;
        if (!f[i].started) /* no thread to spare: call from here */
            fanout_main(&f[i]);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    for (size_t i = 0; i < n; i++)
        if (f[i].started)
            pthread_join(f[i].tid, NULL);
}

static void fanout_done(fanout_t *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (f[i].resp != NULL)
            protobuf_c_message_free_unpacked(f[i].resp, NULL);
}

/* ---- placement ---------------------------------------------------------------------------- */

typedef struct plan {
    Tessera__V1__ShardPlacement *places;
    Tessera__V1__ShardPlacement **place_ptrs;
    size_t n_places;
    Tessera__V1__VariableShard *shards; /* one per place, in the same order */
    int64_t *shapes;                    /* 4 per place */
} plan_t;

static void plan_done(plan_t *p)
{
    free(p->places);
    free(p->place_ptrs);
    free(p->shards);
    free(p->shapes);
}

static status_t plan_variables(coordinator_t *c, chief_job_t *j,
                               const Tessera__V1__ConfigureJobResponse *vars, plan_t *plan,
                               status_msg_t *err)
{
    partitioner_placement_t pl;
    size_t total = 0, k = 0;
    int *counts = calloc(vars->n_variables + 1, sizeof(int));

    if (counts == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < vars->n_variables; i++) {
        const Tessera__V1__VariableShard *v = vars->variables[i];
        status_t rc = partitioner_num_shards(&j->job.partitioner, v->full_shape, v->n_full_shape,
                                             sizeof(float), &counts[i], err);
        if (rc != STATUS_OK) {
            free(counts);
            return rc;
        }
        total += (size_t)counts[i];
    }
    plan->places = calloc(total + 1, sizeof(*plan->places));
    plan->place_ptrs = calloc(total + 1, sizeof(*plan->place_ptrs));
    plan->shards = calloc(total + 1, sizeof(*plan->shards));
    plan->shapes = calloc(4 * total + 4, sizeof(*plan->shapes));
    if (!plan->places || !plan->place_ptrs || !plan->shards || !plan->shapes) {
        free(counts);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    partitioner_placement_init(&pl, (int)c->n_ps);
    for (size_t i = 0; i < vars->n_variables; i++) {
        const Tessera__V1__VariableShard *v = vars->variables[i];
        for (int s = 0; s < counts[i]; s++, k++) {
            int64_t off, rows;
            Tessera__V1__ShardPlacement *p = &plan->places[k];
            Tessera__V1__VariableShard *sh = &plan->shards[k];
            partitioner_shard_rows(v->full_shape[0], counts[i], s, &off, &rows);
            tessera__v1__shard_placement__init(p);
            p->variable = v->variable;
            p->shard = s;
            p->ps_task = partitioner_placement_next(&pl);
            p->row_offset = off;
            p->rows = rows;
            plan->place_ptrs[k] = p;
            *sh = *v;
            sh->shard = s;
            sh->num_shards = counts[i];
            sh->row_offset = off;
            for (size_t d = 0; d < v->n_full_shape && d < 4; d++)
                plan->shapes[4 * k + d] = d == 0 ? rows : v->full_shape[d];
            sh->shape = &plan->shapes[4 * k];
            sh->n_shape = v->n_full_shape;
        }
    }
    plan->n_places = total;
    free(counts);
    return STATUS_OK;
}

/* Creates each PS's shards with one CreateVariables call per PS. */
static status_t create_variables(coordinator_t *c, chief_job_t *j, const plan_t *plan,
                                 status_msg_t *err)
{
    optimizer_msg_t opt;
    Tessera__V1__CreateVariablesRequest *reqs = calloc(c->n_ps, sizeof(*reqs));
    Tessera__V1__VariableShard ***lists = calloc(c->n_ps, sizeof(*lists));
    fanout_t *f = calloc(c->n_ps, sizeof(*f));
    double scale =
        j->job.optimizer.lr_scale == 0 ? (double)c->n_workers : j->job.optimizer.lr_scale;
    status_t rc = STATUS_OK;

    if (!reqs || !lists || !f) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        goto out;
    }
    optimizer_to_proto(&j->job.optimizer, scale, &opt);
    for (size_t p = 0; p < c->n_ps; p++) {
        tessera__v1__create_variables_request__init(&reqs[p]);
        reqs[p].job = j->id;
        reqs[p].optimizer = &opt.msg;
        lists[p] = calloc(plan->n_places + 1, sizeof(**lists));
        if (lists[p] == NULL) {
            rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
            goto out;
        }
        reqs[p].shards = lists[p];
    }
    for (size_t k = 0; k < plan->n_places; k++) {
        size_t p = (size_t)plan->places[k].ps_task;
        reqs[p].shards[reqs[p].n_shards++] = &plan->shards[k];
    }
    for (size_t p = 0; p < c->n_ps; p++)
        f[p] = (fanout_t){.ch = c->ps[p],
                          .method = RPC_PS_CREATE_VARIABLES,
                          .req = &reqs[p].base,
                          .timeout_ms = CONTROL_TIMEOUT};
    fanout_run(f, c->n_ps);
    for (size_t p = 0; p < c->n_ps && rc == STATUS_OK; p++)
        if (f[p].rc != STATUS_OK)
            rc = status_fail(err, f[p].rc, "creating the variables on ps %zu (%s): %s", p,
                             rpc_channel_target(c->ps[p]), f[p].err.message);
    fanout_done(f, c->n_ps);
out:
    for (size_t p = 0; lists && p < c->n_ps; p++)
        free(lists[p]);
    free(lists);
    free(reqs);
    free(f);
    return rc;
}

static void drop_variables(coordinator_t *c, chief_job_t *j)
{
    Tessera__V1__DropJobRequest req = TESSERA__V1__DROP_JOB_REQUEST__INIT;
    fanout_t *f = calloc(c->n_ps + 1, sizeof(*f));
    if (f == NULL)
        return;
    req.job = j->id;
    for (size_t p = 0; p < c->n_ps; p++)
        f[p] = (fanout_t){.ch = c->ps[p],
                          .method = RPC_PS_DROP_JOB,
                          .req = &req.base,
                          .timeout_ms = CONTROL_TIMEOUT};
    fanout_run(f, c->n_ps);
    for (size_t p = 0; p < c->n_ps; p++)
        if (f[p].rc != STATUS_OK)
            LOG_WARNING(CHIEF, "job %s: dropping its variables on ps %zu failed: %s", j->id, p,
                        f[p].err.message);
    fanout_done(f, c->n_ps);
    free(f);
}

static void cancel_workers(coordinator_t *c, chief_job_t *j)
{
    Tessera__V1__CancelRequest req = TESSERA__V1__CANCEL_REQUEST__INIT;
    fanout_t *f = calloc(c->n_workers + 1, sizeof(*f));
    if (f == NULL)
        return;
    req.job = j->id;
    for (size_t w = 0; w < c->n_workers; w++)
        f[w] = (fanout_t){
            .ch = c->workers[w], .method = RPC_WORKER_CANCEL, .req = &req.base, .timeout_ms = 5000};
    fanout_run(f, c->n_workers);
    fanout_done(f, c->n_workers);
    free(f);
}

/* ---- the closure queue -------------------------------------------------------------------- */

typedef struct run {
    coordinator_t *c;
    chief_job_t *j;
    int64_t epoch_steps_left; /* steps of this epoch not yet handed out */
    int in_flight;
    int steps_per_closure;
    uint64_t next_closure;
    bool failed;
    bool *alive;
    int64_t *worker_steps; /* for the staleness bound */
    double epoch_loss, epoch_correct;
    int64_t epoch_examples;
    double epoch_t0;
    status_msg_t err;
} run_t;

typedef struct dispatcher {
    run_t *r;
    size_t worker;
    pthread_t tid;
} dispatcher_t;

static int64_t slowest_alive(const run_t *r)
{
    int64_t min = INT64_MAX;
    for (size_t w = 0; w < r->c->n_workers; w++)
        if (r->alive[w] && r->worker_steps[w] < min)
            min = r->worker_steps[w];
    return min;
}

/* Takes the next closure for worker w, waiting while the staleness bound holds it back;
 * returns 0 steps when the epoch is handed out or the job stops. Call with c->mu held. */
static int take_closure(run_t *r, size_t w)
{
    coordinator_t *c = r->c;
    int64_t bound = r->j->job.max_staleness;
    for (;;) {
        if (r->failed || atomic_load(&r->j->cancel) || c->stopping || r->epoch_steps_left <= 0)
            return 0;
        if (bound <= 0 || r->worker_steps[w] - slowest_alive(r) <= bound)
            break;
        pthread_cond_wait(&c->cv, &c->mu);
    }
    int steps = (int)(r->epoch_steps_left < r->steps_per_closure ? r->epoch_steps_left
                                                                 : r->steps_per_closure);
    r->epoch_steps_left -= steps;
    r->in_flight++;
    return steps;
}

static void *dispatcher_main(void *arg)
{
    dispatcher_t *d = arg;
    run_t *r = d->r;
    coordinator_t *c = r->c;
    chief_job_t *j = r->j;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        Tessera__V1__RunClosureRequest req = TESSERA__V1__RUN_CLOSURE_REQUEST__INIT;
        Tessera__V1__RunClosureResponse *resp = NULL;
        rpc_call_opts_t o = {.timeout_ms = CLOSURE_TIMEOUT};
        rpc_error_t err;
        status_t rc;
        int steps = r->alive[d->worker] ? take_closure(r, d->worker) : 0;
        if (steps == 0)
            break;
        req.job = j->id;
        req.closure_id = r->next_closure++;
        req.kind = TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN;
        req.steps = steps;
        req.global_step = j->progress.step;
        req.epoch = j->progress.epoch;
        pthread_mutex_unlock(&c->mu);
        rc = rpc_worker_run_closure(c->workers[d->worker], &req, &o, &resp, NULL, &err);
        pthread_mutex_lock(&c->mu);
        r->in_flight--;
        if (rc == STATUS_OK) {
            j->progress.step += resp->steps;
            r->worker_steps[d->worker] += resp->steps;
            r->epoch_loss += resp->loss_sum;
            r->epoch_correct += resp->correct;
            r->epoch_examples += resp->examples;
            if (r->epoch_examples > 0) {
                j->progress.loss = r->epoch_loss / (double)r->epoch_examples;
                j->progress.accuracy = r->epoch_correct / (double)r->epoch_examples;
                j->progress.examples_per_second =
                    (double)r->epoch_examples / (wall_now() - r->epoch_t0);
            }
            if (resp->steps < steps) /* the worker ran out of data: hand the rest to others */
                r->epoch_steps_left += steps - resp->steps;
            protobuf_c_message_free_unpacked(&resp->base, NULL);
        } else if (rc == STATUS_CANCELLED || atomic_load(&j->cancel)) {
            /* the job is being cancelled: nothing to record */
        } else if (rc == STATUS_UNAVAILABLE || rc == STATUS_TIMEOUT) {
            /* The worker is gone: its closure goes back on the queue for the others. */
            r->epoch_steps_left += steps;
            r->alive[d->worker] = false;
            job_event(c, j, "worker %zu (%s) failed: %s; its closure goes back on the queue",
                      d->worker, rpc_channel_target(c->workers[d->worker]), err.message);
            if (slowest_alive(r) == INT64_MAX && !r->failed) {
                r->failed = true;
                status_fail(&r->err, rc, "every worker failed; the last: %s", err.message);
            }
        } else if (!r->failed) {
            r->failed = true;
            status_fail(&r->err, rc, "worker %zu: %s", d->worker, err.message);
        }
        pthread_cond_broadcast(&c->cv);
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Runs one epoch (or the remaining steps) over all alive workers. */
static status_t run_epoch(run_t *r, int64_t steps, status_msg_t *err)
{
    coordinator_t *c = r->c;
    dispatcher_t *d = calloc(c->n_workers, sizeof(*d));

    if (d == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    pthread_mutex_lock(&c->mu);
    r->epoch_steps_left = steps;
    r->epoch_loss = r->epoch_correct = 0;
    r->epoch_examples = 0;
    r->epoch_t0 = wall_now();
    pthread_mutex_unlock(&c->mu);
    for (size_t w = 0; w < c->n_workers; w++) {
        d[w] = (dispatcher_t){r, w, 0};
        pthread_create(&d[w].tid, NULL, dispatcher_main, &d[w]);
    }
    for (size_t w = 0; w < c->n_workers; w++)
        pthread_join(d[w].tid, NULL);
    free(d);
    pthread_mutex_lock(&c->mu);
    r->j->progress.train_seconds += wall_now() - r->epoch_t0;
    pthread_mutex_unlock(&c->mu);
    if (r->failed)
        return status_fail(err, r->err.status ? r->err.status : STATUS_REMOTE, "%s", r->err.text);
    if (atomic_load(&r->j->cancel) || c->stopping)
        return STATUS_CANCELLED;
    return STATUS_OK;
}

static status_t evaluate(run_t *r, status_msg_t *err)
{
    coordinator_t *c = r->c;
    chief_job_t *j = r->j;
    Tessera__V1__RunClosureRequest req = TESSERA__V1__RUN_CLOSURE_REQUEST__INIT;
    Tessera__V1__RunClosureResponse *resp = NULL;
    rpc_call_opts_t o = {.timeout_ms = CLOSURE_TIMEOUT};
    rpc_error_t rerr;

    for (size_t w = 0; w < c->n_workers; w++) {
        if (!r->alive[w])
            continue;
        req.job = j->id;
        req.closure_id = r->next_closure++;
        req.kind = TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_EVALUATE;
        if (rpc_worker_run_closure(c->workers[w], &req, &o, &resp, NULL, &rerr) != STATUS_OK) {
            if (rerr.status == STATUS_UNAVAILABLE)
                continue;
            return status_fail(err, rerr.status, "evaluation on worker %zu: %s", w, rerr.message);
        }
        pthread_mutex_lock(&c->mu);
        if (resp->examples > 0) {
            j->progress.test_loss = resp->loss_sum / (double)resp->examples;
            j->progress.test_accuracy = resp->correct / (double)resp->examples;
        }
        job_event(c, j, "epoch %lld: loss %.4f, accuracy %.4f, test loss %.4f, test accuracy %.4f",
                  (long long)j->progress.epoch + 1, j->progress.loss, j->progress.accuracy,
                  j->progress.test_loss, j->progress.test_accuracy);
        pthread_mutex_unlock(&c->mu);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return STATUS_OK;
    }
    return status_fail(err, STATUS_UNAVAILABLE, "no worker is left to evaluate on");
}

/* ---- running a job ------------------------------------------------------------------------ */

static status_t configure_workers(coordinator_t *c, chief_job_t *j, const plan_t *plan, fanout_t *f,
                                  Tessera__V1__ConfigureJobRequest *reqs, status_msg_t *err)
{
    Tessera__V1__ConfigureJobRequest__FilesEntry *entries =
        calloc(j->n_files + 1, sizeof(*entries));
    Tessera__V1__ConfigureJobRequest__FilesEntry **eptrs = calloc(j->n_files + 1, sizeof(*eptrs));
    char **ps = calloc(c->n_ps + 1, sizeof(*ps));
    status_t rc = STATUS_OK;

    if (!entries || !eptrs || !ps) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < j->n_files; i++) {
        tessera__v1__configure_job_request__files_entry__init(&entries[i]);
        entries[i].key = j->files[i].path;
        entries[i].value = (ProtobufCBinaryData){j->files[i].len, j->files[i].data};
        eptrs[i] = &entries[i];
    }
    for (size_t p = 0; p < c->n_ps; p++)
        ps[p] = (char *)rpc_channel_target(c->ps[p]);
    for (size_t w = 0; w < c->n_workers; w++) {
        Tessera__V1__ConfigureJobRequest *q = &reqs[w];
        tessera__v1__configure_job_request__init(q);
        q->job = j->id;
        q->job_spec = j->spec;
        q->job_path = j->path ? j->path : "";
        q->n_files = j->n_files;
        q->files = eptrs;
        q->n_ps = c->n_ps;
        q->ps = ps;
        q->worker_index = (int32_t)w;
        q->num_workers = (int32_t)c->n_workers;
        q->seed = j->job.seed;
        if (plan != NULL) {
            q->n_placement = plan->n_places;
            q->placement = plan->place_ptrs;
        }
        f[w] = (fanout_t){.ch = c->workers[w],
                          .method = RPC_WORKER_CONFIGURE_JOB,
                          .req = &q->base,
                          .timeout_ms = CONFIGURE_TIMEOUT};
    }
    fanout_run(f, c->n_workers);
    for (size_t w = 0; w < c->n_workers && rc == STATUS_OK; w++)
        if (f[w].rc != STATUS_OK)
            rc = status_fail(err, f[w].rc, "configuring worker %zu (%s): %s", w,
                             rpc_channel_target(c->workers[w]), f[w].err.message);
out:
    free(entries);
    free(eptrs);
    free(ps);
    return rc;
}

static status_t run_job(coordinator_t *c, chief_job_t *j, status_msg_t *err)
{
    fanout_t *f1 = calloc(c->n_workers, sizeof(*f1)), *f2 = calloc(c->n_workers, sizeof(*f2));
    Tessera__V1__ConfigureJobRequest *reqs = calloc(c->n_workers, sizeof(*reqs));
    run_t r = {.c = c, .j = j};
    plan_t plan = {0};
    int64_t train_examples = 0, batches = 0, total, epochs;
    bool has_test = false;
    status_t rc;

    r.alive = calloc(c->n_workers, sizeof(bool));
    r.worker_steps = calloc(c->n_workers, sizeof(int64_t));
    if (!f1 || !f2 || !reqs || !r.alive || !r.worker_steps) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        goto out;
    }
    rc = configure_workers(c, j, NULL, f1, reqs, err);
    if (rc != STATUS_OK)
        goto out;
    for (size_t w = 0; w < c->n_workers; w++) {
        const Tessera__V1__ConfigureJobResponse *resp = (const void *)f1[w].resp;
        int64_t b = j->job.data.batch_size;
        r.alive[w] = true;
        train_examples += resp->train_examples;
        batches += j->job.data.drop_remainder ? resp->train_examples / b
                                              : (resp->train_examples + b - 1) / b;
        has_test |= resp->test_examples > 0;
    }
    rc = plan_variables(c, j, (const void *)f1[0].resp, &plan, err);
    if (rc == STATUS_OK)
        rc = create_variables(c, j, &plan, err);
    if (rc == STATUS_OK)
        rc = configure_workers(c, j, &plan, f2, reqs, err);
    if (rc != STATUS_OK)
        goto out;

    r.steps_per_closure = j->job.steps_per_execution > 0 ? j->job.steps_per_execution : 1;
    epochs = j->job.steps > 0 ? 1 : j->job.epochs;
    total = j->job.steps > 0 ? j->job.steps : epochs * batches;
    pthread_mutex_lock(&c->mu);
    j->progress.total_steps = total;
    job_event(c, j, "training on %zu workers and %zu ps: %lld examples, %lld steps, %zu shards",
              c->n_workers, c->n_ps, (long long)train_examples, (long long)total, plan.n_places);
    pthread_mutex_unlock(&c->mu);
    for (int64_t e = 0; e < epochs && rc == STATUS_OK; e++) {
        pthread_mutex_lock(&c->mu);
        j->progress.epoch = e;
        pthread_mutex_unlock(&c->mu);
        rc = run_epoch(&r, j->job.steps > 0 ? j->job.steps : batches, err);
        if (rc == STATUS_OK && has_test && j->job.evaluate)
            rc = evaluate(&r, err);
        else if (rc == STATUS_OK) {
            pthread_mutex_lock(&c->mu);
            job_event(c, j, "epoch %lld: loss %.4f, accuracy %.4f", (long long)e + 1,
                      j->progress.loss, j->progress.accuracy);
            pthread_mutex_unlock(&c->mu);
        }
    }
out:
    if (rc == STATUS_CANCELLED)
        cancel_workers(c, j);
    if (plan.n_places > 0)
        drop_variables(c, j);
    if (f1 != NULL)
        fanout_done(f1, c->n_workers);
    if (f2 != NULL)
        fanout_done(f2, c->n_workers);
    plan_done(&plan);
    free(f1);
    free(f2);
    free(reqs);
    free(r.alive);
    free(r.worker_steps);
    return rc;
}

static chief_job_t *next_queued(coordinator_t *c)
{
    for (chief_job_t *j = c->jobs; j != NULL; j = j->next)
        if (j->state == TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED)
            return j;
    return NULL;
}

static void *runner_main(void *arg)
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
        while (!c->stopping && (j = next_queued(c)) == NULL)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stopping)
            break;
        j->state = TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING;
        j->started_at = wall_now();
        job_event(c, j, "started");
        pthread_mutex_unlock(&c->mu);
        rc = run_job(c, j, &err);
        pthread_mutex_lock(&c->mu);
        j->finished_at = wall_now();
        j->progress.elapsed_seconds = j->finished_at - j->started_at;
        if (rc == STATUS_OK) {
            j->state = TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED;
            job_event(c, j, "succeeded in %.1f s", j->progress.elapsed_seconds);
        } else if (rc == STATUS_CANCELLED) {
            j->state = TESSERA__V1__JOB_STATE__JOB_STATE_CANCELLED;
            job_event(c, j, "cancelled");
        } else {
            j->state = TESSERA__V1__JOB_STATE__JOB_STATE_FAILED;
            snprintf(j->reason, sizeof(j->reason), "%s", err.text[0] ? err.text : status_str(rc));
            job_event(c, j, "failed: %s", j->reason);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- the Coordinator service ------------------------------------------------------------- */

/* A job by id, or by name (its most recent job). Call with c->mu held. */
static chief_job_t *find_job(coordinator_t *c, const char *id)
{
    chief_job_t *by_name = NULL;
    for (chief_job_t *j = c->jobs; j != NULL; j = j->next) {
        if (strcmp(j->id, id) == 0)
            return j;
        if (strcmp(j->name, id) == 0)
            by_name = j;
    }
    return by_name;
}

/* Fills info from j; call with c->mu held. The strings point into j. */
static void job_info(chief_job_t *j, Tessera__V1__JobInfo *info, Tessera__V1__JobProgress *pr)
{
    tessera__v1__job_info__init(info);
    *pr = j->progress;
    info->id = j->id;
    info->name = j->name;
    info->state = j->state;
    info->reason = j->reason;
    info->progress = pr;
    info->submitted_at = j->submitted_at;
    info->started_at = j->started_at;
    info->finished_at = j->finished_at;
    if (j->state == TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING)
        pr->elapsed_seconds = wall_now() - j->started_at;
}

static status_t on_submit(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__SubmitJobRequest *req = (const void *)msg;
    coordinator_t *c = user;
    Tessera__V1__SubmitJobResponse resp = TESSERA__V1__SUBMIT_JOB_RESPONSE__INIT;
    Tessera__V1__JobInfo info;
    Tessera__V1__JobProgress pr;
    job_file_t *files = calloc(req->n_files + 1, sizeof(*files));
    chief_job_t *j = calloc(1, sizeof(*j));
    status_msg_t err = {0};
    status_t rc;

    if (files == NULL || j == NULL) {
        free(files);
        free(j);
        return rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
    }
    if (c->n_ps == 0 || c->n_workers == 0) {
        free(files);
        free(j);
        return rpc_ctx_fail(ctx, STATUS_INVALID_USAGE, NULL,
                            "this chief has no %s: start it with --ps and --worker (or TF_CONFIG)",
                            c->n_ps == 0 ? "parameter servers" : "workers");
    }
    for (size_t i = 0; i < req->n_files; i++)
        files[i] = (job_file_t){req->files[i]->key, (const char *)req->files[i]->value.data,
                                req->files[i]->value.len};
    rc = job_parse_with_files(req->job_spec, strlen(req->job_spec),
                              req->job_path[0] ? req->job_path : NULL, files, req->n_files, &j->job,
                              &err);
    free(files);
    if (rc == STATUS_OK && j->job.strategy != JOB_STRATEGY_PARAMETER_SERVER &&
        j->job.strategy != JOB_STRATEGY_ONE_DEVICE)
        rc = status_fail(&err, STATUS_BAD_CONFIG,
                         "%s: strategy %s is not available on a parameter-server cluster yet",
                         req->job_path, "mirrored/central_storage/multi_worker_mirrored");
    if (rc != STATUS_OK) {
        chief_job_free(j);
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, req->job_path, "%s", err.text);
    }
    j->spec = strdup(req->job_spec);
    j->path = strdup(req->job_path);
    j->files = calloc(req->n_files + 1, sizeof(*j->files));
    j->n_files = req->n_files;
    for (size_t i = 0; j->files && i < req->n_files; i++) {
        j->files[i].path = strdup(req->files[i]->key);
        j->files[i].len = req->files[i]->value.len;
        j->files[i].data = malloc(j->files[i].len + 1);
        if (j->files[i].data)
            memcpy(j->files[i].data, req->files[i]->value.data, j->files[i].len);
    }
    snprintf(j->name, sizeof(j->name), "%s", j->job.name ? j->job.name : "job");
    tessera__v1__job_progress__init(&j->progress);
    j->state = TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED;
    j->submitted_at = wall_now();
    pthread_mutex_lock(&c->mu);
    snprintf(j->id, sizeof(j->id), "%s-%u", j->name, ++c->next_id);
    if (c->last)
        c->last->next = j;
    else
        c->jobs = j;
    c->last = j;
    job_event(c, j, "queued");
    job_info(j, &info, &pr);
    resp.job = &info;
    rc = rpc_ctx_respond(ctx, &resp.base, NULL, 0);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static status_t on_get(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__GetJobRequest *req = (const void *)msg;
    coordinator_t *c = user;
    Tessera__V1__GetJobResponse resp = TESSERA__V1__GET_JOB_RESPONSE__INIT;
    Tessera__V1__JobInfo info;
    Tessera__V1__JobProgress pr;
    chief_job_t *j;
    status_t rc;

    pthread_mutex_lock(&c->mu);
    j = find_job(c, req->id);
    if (j == NULL) {
        pthread_mutex_unlock(&c->mu);
        return rpc_ctx_fail(ctx, STATUS_NOT_FOUND, req->id, "no job \"%s\"", req->id);
    }
    job_info(j, &info, &pr);
    resp.job = &info;
    rc = rpc_ctx_respond(ctx, &resp.base, NULL, 0);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static status_t on_list(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    coordinator_t *c = user;
    Tessera__V1__ListJobsResponse resp = TESSERA__V1__LIST_JOBS_RESPONSE__INIT;
    size_t n = 0, k = 0;
    Tessera__V1__JobInfo *infos, **ptrs;
    Tessera__V1__JobProgress *prs;
    status_t rc;

    (void)msg;
    pthread_mutex_lock(&c->mu);
    for (chief_job_t *j = c->jobs; j; j = j->next)
        n++;
    infos = calloc(n + 1, sizeof(*infos));
    ptrs = calloc(n + 1, sizeof(*ptrs));
    prs = calloc(n + 1, sizeof(*prs));
    if (!infos || !ptrs || !prs) {
        pthread_mutex_unlock(&c->mu);
        free(infos);
        free(ptrs);
        free(prs);
        return rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
    }
    for (chief_job_t *j = c->jobs; j; j = j->next, k++) {
        job_info(j, &infos[k], &prs[k]);
        ptrs[k] = &infos[k];
    }
    resp.n_jobs = n;
    resp.jobs = ptrs;
    rc = rpc_ctx_respond(ctx, &resp.base, NULL, 0);
    pthread_mutex_unlock(&c->mu);
    free(infos);
    free(ptrs);
    free(prs);
    return rc;
}

static status_t on_cancel(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__CancelJobRequest *req = (const void *)msg;
    coordinator_t *c = user;
    Tessera__V1__CancelJobResponse resp = TESSERA__V1__CANCEL_JOB_RESPONSE__INIT;
    Tessera__V1__JobInfo info;
    Tessera__V1__JobProgress pr;
    chief_job_t *j;
    status_t rc;

    pthread_mutex_lock(&c->mu);
    j = find_job(c, req->id);
    if (j == NULL) {
        pthread_mutex_unlock(&c->mu);
        return rpc_ctx_fail(ctx, STATUS_NOT_FOUND, req->id, "no job \"%s\"", req->id);
    }
    if (j->state == TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED) {
        j->state = TESSERA__V1__JOB_STATE__JOB_STATE_CANCELLED;
        j->finished_at = wall_now();
        job_event(c, j, "cancelled before it started");
    } else if (j->state == TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING) {
        atomic_store(&j->cancel, true);
        job_event(c, j, "cancelling");
        pthread_mutex_unlock(&c->mu);
        /* Stop the closures now rather than after their last step. */
        cancel_workers(c, j);
        pthread_mutex_lock(&c->mu);
    }
    job_info(j, &info, &pr);
    resp.job = &info;
    rc = rpc_ctx_respond(ctx, &resp.base, NULL, 0);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- WatchJob: progress streamed to the CLI ---------------------------------------------- */

/* Sends what changed since the last update; finishes the stream when the job has ended. Call
 * with c->mu held. */
static void watcher_update(watcher_t *w)
{
    chief_job_t *j = w->job;
    Tessera__V1__WatchJobUpdate up = TESSERA__V1__WATCH_JOB_UPDATE__INIT;
    Tessera__V1__JobInfo info;
    Tessera__V1__JobProgress pr;
    Tessera__V1__JobEvent ev[MAX_EVENTS], *evp[MAX_EVENTS];
    size_t first = w->sent_events, n = 0;
    bool ended = j->state == TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED ||
                 j->state == TESSERA__V1__JOB_STATE__JOB_STATE_FAILED ||
                 j->state == TESSERA__V1__JOB_STATE__JOB_STATE_CANCELLED;

    if (w->finished)
        return;
    if (j->progress.step == w->sent_step && j->n_events == w->sent_events &&
        j->state == w->sent_state && !ended)
        return;
    if (j->n_events > MAX_EVENTS && first < j->n_events - MAX_EVENTS)
        first = j->n_events - MAX_EVENTS; /* older events are gone */
    for (size_t e = first; e < j->n_events; e++, n++) {
        tessera__v1__job_event__init(&ev[n]);
        ev[n].wall_time = j->event_times[e % MAX_EVENTS];
        ev[n].message = j->events[e % MAX_EVENTS] ? j->events[e % MAX_EVENTS] : "";
        evp[n] = &ev[n];
    }
    job_info(j, &info, &pr);
    up.job = &info;
    up.n_events = n;
    up.events = evp;
    if (rpc_ctx_stream_send(w->ctx, &up.base, NULL, 0) == STATUS_OK) {
        w->sent_step = j->progress.step;
        w->sent_events = j->n_events;
        w->sent_state = j->state;
    }
    if (ended) {
        rpc_ctx_stream_finish(w->ctx, STATUS_OK, NULL);
        w->finished = true;
    }
}

static void watcher_done_cb(void *arg)
{
    watcher_t *w = arg;
    coordinator_t *c = w->c;
    pthread_mutex_lock(&c->mu);
    if (!w->finished) { /* the client went away: let go of the stream */
        rpc_ctx_stream_finish(w->ctx, STATUS_CANCELLED, "the watcher went away");
        w->finished = true;
    }
    w->over = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Updates every watcher when progress changes, at most five times a second. */
static void *watch_main(void *arg)
{
    coordinator_t *c = arg;
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        struct timespec ts;
        for (watcher_t **p = &c->watchers; *p != NULL;) {
            watcher_t *w = *p;
            watcher_update(w);
            if (w->finished && w->over) {
                *p = w->next;
                free(w);
            } else {
                p = &w->next;
            }
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    for (watcher_t *w = c->watchers; w != NULL; w = w->next)
        if (!w->finished) {
            rpc_ctx_stream_finish(w->ctx, STATUS_UNAVAILABLE, "the chief is stopping");
            w->finished = true;
        }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static status_t on_watch(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__WatchJobRequest *req = (const void *)msg;
    coordinator_t *c = user;
    watcher_t *w = calloc(1, sizeof(*w));
    chief_job_t *j;

    if (w == NULL)
        return rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
    pthread_mutex_lock(&c->mu);
    j = find_job(c, req->id);
    if (j == NULL || c->stopping) {
        pthread_mutex_unlock(&c->mu);
        free(w);
        if (j == NULL)
            return rpc_ctx_fail(ctx, STATUS_NOT_FOUND, req->id, "no job \"%s\"", req->id);
        return rpc_ctx_fail(ctx, STATUS_UNAVAILABLE, NULL, "the chief is stopping");
    }
    w->ctx = ctx;
    w->c = c;
    w->job = j;
    w->sent_step = -1;
    rpc_ctx_defer(ctx);
    w->next = c->watchers;
    c->watchers = w;
    watcher_update(w);
    pthread_mutex_unlock(&c->mu);
    /* Registered last: the callback may run at once if the client already left. */
    rpc_ctx_on_done(ctx, watcher_done_cb, w);
    return STATUS_OK;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

static status_t open_channels(const config_list_t *l, rpc_channel_t ***ret, size_t *ret_n,
                              status_msg_t *err)
{
    rpc_channel_t **chans = calloc(l->n + 1, sizeof(*chans));
    rpc_channel_opts_t o = {.timeout_ms = CONTROL_TIMEOUT};
    if (chans == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    *ret = chans;
    *ret_n = 0;
    for (size_t i = 0; i < l->n; i++) {
        STATUS_CHECK(rpc_channel_new(l->items[i], &o, &chans[i], err));
        (*ret_n)++;
    }
    return STATUS_OK;
}

status_t coordinator_new(daemon_t *d, chief_opts_t *opts, coordinator_t **ret, status_msg_t *err)
{
    coordinator_t *c = calloc(1, sizeof(*c));
    rpc_server_t *s = daemon_rpc(d);
    status_t rc;

    if (c == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    c->daemon = d;
    c->opts = opts;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    rc = open_channels(&opts->ps, &c->ps, &c->n_ps, err);
    if (rc == STATUS_OK)
        rc = open_channels(&opts->worker, &c->workers, &c->n_workers, err);
    if (rc == STATUS_OK && pthread_create(&c->runner, NULL, runner_main, c) != 0)
        rc = status_fail(err, STATUS_SYSTEM, "cannot start the job runner");
    else if (rc == STATUS_OK)
        c->runner_started = true;
    if (rc == STATUS_OK && pthread_create(&c->watch_thread, NULL, watch_main, c) != 0)
        rc = status_fail(err, STATUS_SYSTEM, "cannot start the watch thread");
    else if (rc == STATUS_OK)
        c->watch_started = true;
    if (rc != STATUS_OK) {
        coordinator_free(c);
        return rc;
    }
    rpc_server_handle(s, RPC_COORD_SUBMIT_JOB, on_submit, c);
    rpc_server_handle(s, RPC_COORD_GET_JOB, on_get, c);
    rpc_server_handle(s, RPC_COORD_LIST_JOBS, on_list, c);
    rpc_server_handle(s, RPC_COORD_CANCEL_JOB, on_cancel, c);
    rpc_server_handle(s, RPC_COORD_WATCH_JOB, on_watch, c);
    *ret = c;
    return STATUS_OK;
}

void coordinator_stop(coordinator_t *c)
{
    chief_job_t *running = NULL;
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    for (chief_job_t *j = c->jobs; j; j = j->next)
        if (j->state == TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING) {
            atomic_store(&j->cancel, true);
            running = j;
        }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (running != NULL)
        cancel_workers(c, running);
    if (c->runner_started)
        pthread_join(c->runner, NULL);
    c->runner_started = false;
    if (c->watch_started)
        pthread_join(c->watch_thread, NULL);
    c->watch_started = false;
}

void coordinator_free(coordinator_t *c)
{
    if (c == NULL)
        return;
    coordinator_stop(c);
    /* The RPC server is gone: no done callback can run any more. */
    while (c->watchers != NULL) {
        watcher_t *w = c->watchers;
        c->watchers = w->next;
        free(w);
    }
    while (c->jobs != NULL) {
        chief_job_t *j = c->jobs;
        c->jobs = j->next;
        chief_job_free(j);
    }
    for (size_t i = 0; i < c->n_ps; i++)
        rpc_channel_free(c->ps[i]);
    for (size_t i = 0; i < c->n_workers; i++)
        rpc_channel_free(c->workers[i]);
    free(c->ps);
    free(c->workers);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
