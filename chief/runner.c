/* Running a job: configure every worker (model and data shard), plan and create the variables
 * on the PS tasks, tell the workers where they are, then train epoch by epoch through the
 * closure queue (dispatch.c), evaluating on the test split at each epoch's end, and finally drop
 * the job's variables. One runner thread runs the queued jobs in order. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "dispatch.h"
#include "fanout.h"
#include "internal.h"
#include "placement.h"

void chief_cancel_workers(coordinator_t *c, chief_job_t *j)
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

/* What the dispatch callbacks get: the job they run for. */
typedef struct running {
    coordinator_t *c;
    chief_job_t *j;
} running_t;

/* dispatch_call_fn: a training closure on a worker, over RPC. */
static status_t call_closure(void *arg, size_t w, const dispatch_closure_t *cl,
                             dispatch_result_t *ret, status_msg_t *err)
{
    const running_t *r = arg;
    coordinator_t *c = r->c;
    chief_job_t *j = r->j;
    Tessera__V1__RunClosureRequest req = TESSERA__V1__RUN_CLOSURE_REQUEST__INIT;
    Tessera__V1__RunClosureResponse *resp = NULL;
    rpc_call_opts_t o = {.timeout_ms = CLOSURE_TIMEOUT};
    rpc_error_t rerr;

    req.job = j->id;
    req.closure_id = cl->id;
    req.kind = TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN;
    req.steps = cl->steps;
    req.global_step = cl->global_step;
    req.epoch = cl->epoch;
    if (rpc_worker_run_closure(c->workers[w], &req, &o, &resp, NULL, &rerr) != STATUS_OK)
        return status_fail(err, rerr.status, "%s", rerr.message);
    *ret = (dispatch_result_t){.steps = resp->steps,
                               .examples = resp->examples,
                               .loss_sum = resp->loss_sum,
                               .correct = resp->correct};
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return STATUS_OK;
}

static void worker_lost(void *arg, size_t w, const char *why)
{
    const running_t *r = arg;
    chief_job_event(r->c, r->j, "worker %zu (%s) failed: %s; its closure goes back on the queue", w,
                    rpc_channel_target(r->c->workers[w]), why);
}

static void progress_moved(void *arg)
{
    chief_job_changed(((const running_t *)arg)->c);
}

/* Evaluates on the first live worker that answers. */
static status_t evaluate(coordinator_t *c, chief_job_t *j, dispatch_t *d, status_msg_t *err)
{
    Tessera__V1__RunClosureRequest req = TESSERA__V1__RUN_CLOSURE_REQUEST__INIT;
    Tessera__V1__RunClosureResponse *resp = NULL;
    rpc_call_opts_t o = {.timeout_ms = CLOSURE_TIMEOUT};
    rpc_error_t rerr;

    for (size_t w = 0; w < c->n_workers; w++) {
        if (!d->alive[w])
            continue;
        req.job = j->id;
        req.closure_id = d->next_closure++;
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
        chief_job_event(c, j,
                        "epoch %lld: loss %.4f, accuracy %.4f, test loss %.4f, test accuracy %.4f",
                        (long long)j->progress.epoch + 1, j->progress.loss, j->progress.accuracy,
                        j->progress.test_loss, j->progress.test_accuracy);
        pthread_mutex_unlock(&c->mu);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return STATUS_OK;
    }
    return status_fail(err, STATUS_UNAVAILABLE, "no worker is left to evaluate on");
}

/* The epochs, each followed by its evaluation or its summary. */
static status_t train(coordinator_t *c, chief_job_t *j, dispatch_t *d, int64_t batches,
                      bool has_test, status_msg_t *err)
{
    int64_t epochs = j->job.steps > 0 ? 1 : j->job.epochs;
    status_t rc = STATUS_OK;

    for (int64_t e = 0; e < epochs && rc == STATUS_OK; e++) {
        pthread_mutex_lock(&c->mu);
        j->progress.epoch = e;
        pthread_mutex_unlock(&c->mu);
        rc = dispatch_epoch(d, j->job.steps > 0 ? j->job.steps : batches, err);
        if (rc == STATUS_OK && has_test && j->job.evaluate) {
            rc = evaluate(c, j, d, err);
        } else if (rc == STATUS_OK) {
            pthread_mutex_lock(&c->mu);
            chief_job_event(c, j, "epoch %lld: loss %.4f, accuracy %.4f", (long long)e + 1,
                            j->progress.loss, j->progress.accuracy);
            pthread_mutex_unlock(&c->mu);
        }
    }
    return rc;
}

static status_t run_job(coordinator_t *c, chief_job_t *j, status_msg_t *err)
{
    fanout_t *f1 = calloc(c->n_workers, sizeof(*f1)), *f2 = calloc(c->n_workers, sizeof(*f2));
    Tessera__V1__ConfigureJobRequest *reqs = calloc(c->n_workers, sizeof(*reqs));
    running_t run = {c, j};
    dispatch_t d = {.mu = &c->mu,
                    .cv = &c->cv,
                    .steps_per_closure =
                        j->job.steps_per_execution > 0 ? j->job.steps_per_execution : 1,
                    .max_staleness = j->job.max_staleness,
                    .cancel = &j->cancel,
                    .stopping = &c->stopping,
                    .progress = &j->progress,
                    .call = call_closure,
                    .lost = worker_lost,
                    .changed = progress_moved,
                    .arg = &run};
    plan_t plan = {0};
    int64_t train_examples = 0, batches = 0, b = j->job.data.batch_size;
    bool has_test = false;
    status_t rc;

    if (!f1 || !f2 || !reqs) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        goto out;
    }
    rc = dispatch_init(&d, c->n_workers, err);
    if (rc == STATUS_OK)
        rc = configure_workers(c, j, NULL, f1, reqs, err);
    if (rc != STATUS_OK)
        goto out;
    for (size_t w = 0; w < c->n_workers; w++) {
        const Tessera__V1__ConfigureJobResponse *resp = (const void *)f1[w].resp;
        train_examples += resp->train_examples;
        batches += j->job.data.drop_remainder ? resp->train_examples / b
                                              : (resp->train_examples + b - 1) / b;
        has_test |= resp->test_examples > 0;
    }
    rc = placement_plan(c, j, (const void *)f1[0].resp, &plan, err);
    if (rc == STATUS_OK)
        rc = placement_create(c, j, &plan, err);
    if (rc == STATUS_OK)
        rc = configure_workers(c, j, &plan, f2, reqs, err);
    if (rc != STATUS_OK)
        goto out;
    pthread_mutex_lock(&c->mu);
    j->progress.total_steps = j->job.steps > 0 ? j->job.steps : j->job.epochs * batches;
    chief_job_event(c, j,
                    "training on %zu workers and %zu ps: %lld examples, %lld steps, %zu shards",
                    c->n_workers, c->n_ps, (long long)train_examples,
                    (long long)j->progress.total_steps, plan.n_places);
    pthread_mutex_unlock(&c->mu);
    rc = train(c, j, &d, batches, has_test, err);
out:
    if (rc == STATUS_CANCELLED)
        chief_cancel_workers(c, j);
    if (plan.n_places > 0)
        placement_drop(c, j);
    if (f1 != NULL)
        fanout_done(f1, c->n_workers);
    if (f2 != NULL)
        fanout_done(f2, c->n_workers);
    placement_done(&plan);
    dispatch_done(&d);
    free(f1);
    free(f2);
    free(reqs);
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
        while (!c->stopping && (j = chief_next_queued(c)) == NULL)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stopping)
            break;
        j->state = TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING;
        j->started_at = clock_wall_s();
        chief_job_event(c, j, "started");
        pthread_mutex_unlock(&c->mu);
        rc = run_job(c, j, &err);
        pthread_mutex_lock(&c->mu);
        if (rc == STATUS_OK) {
            chief_job_end(c, j, TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED, "succeeded in %.1f s",
                          clock_wall_s() - j->started_at);
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
