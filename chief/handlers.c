/* The Coordinator service's unary calls: SubmitJob, GetJob, ListJobs, CancelJob, Checkpoint. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/log.h"
#include "job/paths.h"
#include "internal.h"
#include "placement.h"

/* The job `id`, returned with c->mu held; or STATUS_NOT_FOUND, given as the call's error, with
 * the mutex let go. */
static status_t find_locked(coordinator_t *c, rpc_ctx_t *ctx, const char *id, chief_job_t **ret)
{
    pthread_mutex_lock(&c->mu);
    *ret = chief_find_job(c, id);
    if (*ret != NULL)
        return STATUS_OK;
    pthread_mutex_unlock(&c->mu);
    return rpc_ctx_fail(ctx, STATUS_NOT_FOUND, id, "no job \"%s\"", id);
}

/* Answers with resp, its `job` field (*slot) set to j's info; then lets go of c->mu. */
static status_t respond_job_unlock(coordinator_t *c, rpc_ctx_t *ctx, ProtobufCMessage *resp,
                                   Tessera__V1__JobInfo **slot, const chief_job_t *j)
{
    Tessera__V1__JobInfo info;
    Tessera__V1__JobProgress pr;
    status_t rc;

    chief_job_info(j, &info, &pr);
    *slot = &info;
    rc = rpc_ctx_respond(ctx, resp, NULL, 0);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static status_t on_submit(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__SubmitJobRequest *req = (const void *)msg;
    coordinator_t *c = user;
    Tessera__V1__SubmitJobResponse resp = TESSERA__V1__SUBMIT_JOB_RESPONSE__INIT;
    chief_job_t *j = NULL;
    status_msg_t err = {0};
    status_t rc;

    if (c->n_workers + c->n_joining == 0)
        return rpc_ctx_fail(ctx, STATUS_INVALID_USAGE, NULL,
                            "this chief has no workers: start it with --worker (or TF_CONFIG)");
    rc = chief_job_new(req, &j, &err);
    if (rc != STATUS_OK)
        return rpc_ctx_fail(ctx, rc == STATUS_NO_MEMORY ? rc : STATUS_INVALID_ARGUMENT,
                            req->job_path, "%s", err.text);
    /* what the chief itself reads and writes of the job (the workers check the data) */
    rc = job_paths_check(&j->job, JOB_PATHS_INIT | JOB_PATHS_CHECKPOINT | JOB_PATHS_TENSORBOARD,
                         daemon_roots(c->daemon), &err);
    if (rc != STATUS_OK) {
        chief_job_free(j);
        return rpc_ctx_fail(ctx, rc, req->job_path, "%s", err.text);
    }
    /* the synchronous strategies need no parameter server; parameter_server does */
    if (c->n_ps == 0 && !job_is_synchronous(&j->job)) {
        chief_job_free(j);
        return rpc_ctx_fail(ctx, STATUS_INVALID_USAGE, NULL,
                            "this chief has no parameter servers: start it with --ps (or "
                            "TF_CONFIG), or submit a multi_worker_mirrored or mirrored job");
    }
    pthread_mutex_lock(&c->mu);
    rc = chief_jobs_add(c, j, &err);
    if (rc != STATUS_OK) {
        pthread_mutex_unlock(&c->mu);
        chief_job_free(j);
        return rpc_ctx_fail(ctx, rc, NULL, "%s", err.text);
    }
    return respond_job_unlock(c, ctx, &resp.base, &resp.job, j);
}

static status_t on_get(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__GetJobRequest *req = (const void *)msg;
    coordinator_t *c = user;
    Tessera__V1__GetJobResponse resp = TESSERA__V1__GET_JOB_RESPONSE__INIT;
    chief_job_t *j;

    STATUS_CHECK(find_locked(c, ctx, req->id, &j));
    return respond_job_unlock(c, ctx, &resp.base, &resp.job, j);
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
        chief_job_info(j, &infos[k], &prs[k]);
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

/* RegisterWorker: a worker started with --chief announces itself; it takes part from the next
 * job on (a running job's workers are fixed when it starts). */
static status_t on_register(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__RegisterWorkerRequest *req = (const void *)msg;
    coordinator_t *c = user;
    Tessera__V1__RegisterWorkerResponse resp = TESSERA__V1__REGISTER_WORKER_RESPONSE__INIT;
    status_msg_t err = {0};
    size_t index;
    bool added;
    status_t rc;

    pthread_mutex_lock(&c->mu);
    rc = chief_register_worker(c, req->address, &index, &added, &err);
    pthread_mutex_unlock(&c->mu);
    if (rc != STATUS_OK)
        return rpc_ctx_fail(ctx, rc, "address", "%s", err.text);
    if (added)
        LOG_NOTICE(CHIEF, "worker %s announced itself: worker:%zu from the next job on",
                   req->address, index);
    resp.index = (int32_t)index;
    resp.added = added;
    return rpc_ctx_respond(ctx, &resp.base, NULL, 0);
}

static status_t on_cancel(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__CancelJobRequest *req = (const void *)msg;
    coordinator_t *c = user;
    Tessera__V1__CancelJobResponse resp = TESSERA__V1__CANCEL_JOB_RESPONSE__INIT;
    chief_job_t *j;

    STATUS_CHECK(find_locked(c, ctx, req->id, &j));
    j->holds++; /* not pruned while this call uses it */
    if (j->state == TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED) {
        bool left_behind = j->recovered; /* the crashed chief's variables are on the PS tasks */
        chief_job_end(c, j, TESSERA__V1__JOB_STATE__JOB_STATE_CANCELLED,
                      "cancelled before it started");
        if (left_behind) {
            pthread_mutex_unlock(&c->mu);
            placement_drop(c, j);
            chief_cancel_workers(c, j);
            pthread_mutex_lock(&c->mu);
        }
    } else if (j->state == TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING) {
        j->user_cancel = true;
        atomic_store(&j->cancel, true);
        chief_job_event(c, j, "cancelling");
        pthread_mutex_unlock(&c->mu);
        /* Stop the closures now rather than after their last step. */
        chief_cancel_workers(c, j);
        pthread_mutex_lock(&c->mu);
    }
    j->holds--;
    return respond_job_unlock(c, ctx, &resp.base, &resp.job, j);
}

/* Asks the runner for a checkpoint at the next pause of the closures and waits for it (until the
 * client's deadline): the reply names its directory and step. */
static status_t on_checkpoint(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__CheckpointRequest *req = (const void *)msg;
    coordinator_t *c = user;
    Tessera__V1__CheckpointResponse resp = TESSERA__V1__CHECKPOINT_RESPONSE__INIT;
    chief_job_t *j;
    char path[4200];
    uint64_t before;
    status_t rc = STATUS_OK;

    STATUS_CHECK(find_locked(c, ctx, req->id, &j));
    if (j->job.checkpoint_dir == NULL) {
        pthread_mutex_unlock(&c->mu);
        return rpc_ctx_fail(ctx, STATUS_BAD_CONFIG, req->id,
                            "job %s has no checkpoint section: add checkpoint: {dir: ...} to its "
                            "file to checkpoint it",
                            j->id);
    }
    if (j->state != TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING) {
        pthread_mutex_unlock(&c->mu);
        return rpc_ctx_fail(ctx, STATUS_INVALID_USAGE, req->id, "job %s is not running", j->id);
    }
    j->holds++;
    before = j->ckpt_done;
    atomic_store(&j->ckpt_wanted, true);
    pthread_cond_broadcast(&c->cv);
    while (j->ckpt_done == before && !chief_job_ended(j) && !c->stopping &&
           !rpc_ctx_cancelled(ctx)) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1; /* to notice a client that went away */
        pthread_cond_timedwait(&c->cv, &c->mu, &until);
    }
    if (j->ckpt_done == before)
        rc = rpc_ctx_fail(ctx, chief_job_ended(j) ? STATUS_ABORTED : STATUS_CANCELLED, req->id,
                          "job %s ended before its checkpoint", j->id);
    else if (j->ckpt_rc != STATUS_OK)
        rc = rpc_ctx_fail(ctx, j->ckpt_rc, req->id, "checkpoint of job %s: %s", j->id,
                          j->ckpt_error);
    if (rc == STATUS_OK) {
        snprintf(path, sizeof(path), "%s/ckpt-%lld", j->job.checkpoint_dir,
                 (long long)j->ckpt_step);
        resp.path = path;
        resp.step = j->ckpt_step;
        rc = rpc_ctx_respond(ctx, &resp.base, NULL, 0);
    }
    j->holds--;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void chief_handlers_register(coordinator_t *c, rpc_server_t *s)
{
    rpc_server_handle(s, RPC_COORD_SUBMIT_JOB, on_submit, c);
    rpc_server_handle(s, RPC_COORD_GET_JOB, on_get, c);
    rpc_server_handle(s, RPC_COORD_LIST_JOBS, on_list, c);
    rpc_server_handle(s, RPC_COORD_CANCEL_JOB, on_cancel, c);
    rpc_server_handle(s, RPC_COORD_REGISTER_WORKER, on_register, c);
    rpc_server_handle(s, RPC_COORD_CHECKPOINT, on_checkpoint, c);
}
