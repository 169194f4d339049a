/* A running job's workers (workers.h). */
#define _POSIX_C_SOURCE 200809L
#include "workers.h"

#include <stdlib.h>

#include "base/clock.h"

status_t worker_cfg_init(worker_cfg_t *cfg, coordinator_t *c, chief_job_t *j, status_msg_t *err)
{
    *cfg = (worker_cfg_t){.c = c, .j = j, .failed = SIZE_MAX, .n_shards = c->n_workers};
    if (cfg->n_shards == 0) /* the ones that announced themselves could not be taken in */
        return status_fail(err, STATUS_UNAVAILABLE, "the cluster has no worker");
    cfg->reqs = calloc(c->cap_workers + 1, sizeof(*cfg->reqs));
    cfg->entries = calloc(j->n_files + 1, sizeof(*cfg->entries));
    cfg->eptrs = calloc(j->n_files + 1, sizeof(*cfg->eptrs));
    cfg->ps = calloc(c->n_ps + 1, sizeof(*cfg->ps));
    if (!cfg->reqs || !cfg->entries || !cfg->eptrs || !cfg->ps) {
        worker_cfg_done(cfg);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < j->n_files; i++) {
        tessera__v1__configure_job_request__files_entry__init(&cfg->entries[i]);
        cfg->entries[i].key = j->files[i].path;
        cfg->entries[i].value = (ProtobufCBinaryData){j->files[i].len, j->files[i].data};
        cfg->eptrs[i] = &cfg->entries[i];
    }
    for (size_t p = 0; p < c->n_ps; p++)
        cfg->ps[p] = (char *)rpc_channel_target(c->ps[p]);
    /* a worker that joins the running job reads the shards the chief gives it; its own (for a
     * job of steps, where the workers read their own) is one of the others' */
    for (size_t w = 0; w < c->cap_workers; w++) {
        Tessera__V1__ConfigureJobRequest *q = &cfg->reqs[w];
        tessera__v1__configure_job_request__init(q);
        q->job = j->id;
        q->job_spec = j->spec;
        q->job_path = j->path ? j->path : "";
        q->n_files = j->n_files;
        q->files = cfg->eptrs;
        q->n_ps = c->n_ps;
        q->ps = cfg->ps;
        q->worker_index = (int32_t)(w % cfg->n_shards);
        q->num_workers = (int32_t)cfg->n_shards;
        q->seed = j->job.seed;
    }
    return STATUS_OK;
}

void worker_cfg_done(worker_cfg_t *cfg)
{
    free(cfg->reqs);
    free(cfg->entries);
    free(cfg->eptrs);
    free(cfg->ps);
    cfg->reqs = NULL;
    cfg->entries = NULL;
    cfg->eptrs = NULL;
    cfg->ps = NULL;
}

/* Sets the per-call fields of q: the data position (NULL: the start) and the placement. */
static void set_call(Tessera__V1__ConfigureJobRequest *q, const plan_t *plan, int64_t epoch,
                     int64_t batch, uint64_t *rng, size_t n_rng)
{
    q->start_epoch = epoch;
    q->start_batch = batch;
    q->n_rng = n_rng;
    q->rng = rng;
    q->n_placement = plan != NULL ? plan->n_places : 0;
    q->placement = plan != NULL ? plan->place_ptrs : NULL;
}

/* A worker restarted a moment ago may sit behind gRPC's reconnect backoff: the calls that found
 * their worker unreachable go once more, connecting now, before it counts as down. */
static void retry_unreachable(coordinator_t *c, fanout_t *f, size_t n)
{
    fanout_t *g = calloc(n + 1, sizeof(*g));
    bool any = false;

    if (g == NULL)
        return;
    for (size_t w = 0; w < n; w++) {
        bool down = !f[w].skip && (f[w].rc == STATUS_UNAVAILABLE || f[w].rc == STATUS_TIMEOUT);
        g[w] = (fanout_t){.ch = f[w].ch,
                          .method = f[w].method,
                          .req = f[w].req,
                          .timeout_ms = f[w].timeout_ms,
                          .skip = !down};
        if (down)
            rpc_channel_reset_backoff(c->workers[w]);
        any |= down;
    }
    if (any) {
        clock_sleep_ms(300);
        fanout_run(g, n);
        for (size_t w = 0; w < n; w++) {
            if (g[w].skip)
                continue;
            fanout_done(&f[w], 1);
            f[w] = g[w];
            g[w] = (fanout_t){0}; /* f[w] has its answer now */
        }
    }
    fanout_done(g, n);
    free(g);
}

status_t workers_configure(worker_cfg_t *cfg, const plan_t *plan, const ckpt_manifest_t *resume,
                           fanout_t *f, bool *alive, size_t n, status_msg_t *err)
{
    coordinator_t *c = cfg->c;
    chief_job_t *j = cfg->j;
    size_t n_alive = 0;
    status_t rc = STATUS_OK;

    for (size_t w = 0; w < n; w++) {
        Tessera__V1__ConfigureJobRequest *q = &cfg->reqs[w];
        if (resume != NULL && resume->n_data == cfg->n_shards && w < cfg->n_shards)
            set_call(q, plan, resume->data[w].epoch, resume->data[w].batch, resume->data[w].rng,
                     resume->data[w].n_rng);
        else
            set_call(q, plan, 0, 0, NULL, 0);
        f[w] = (fanout_t){.ch = c->workers[w],
                          .method = RPC_WORKER_CONFIGURE_JOB,
                          .req = &q->base,
                          .timeout_ms = CONFIGURE_TIMEOUT,
                          .skip = !alive[w]};
    }
    fanout_run(f, n);
    retry_unreachable(c, f, n);
    for (size_t w = 0; w < n && rc == STATUS_OK; w++) {
        if (f[w].skip)
            continue;
        if (f[w].rc == STATUS_UNAVAILABLE || f[w].rc == STATUS_TIMEOUT) {
            alive[w] = false;
            pthread_mutex_lock(&c->mu);
            chief_job_event(c, j,
                            "worker %zu (%s) is down: the job goes on without it until it comes "
                            "back: %s",
                            w, rpc_channel_target(c->workers[w]), f[w].err.message);
            pthread_mutex_unlock(&c->mu);
        } else if (f[w].rc != STATUS_OK) {
            cfg->failed = w;
            rc = status_fail(err, f[w].rc, "configuring worker %zu (%s): %s", w,
                             rpc_channel_target(c->workers[w]), f[w].err.message);
        } else {
            n_alive++;
        }
    }
    if (rc == STATUS_OK && n_alive == 0)
        rc = status_fail(err, STATUS_UNAVAILABLE, "no worker could be configured; the first: %s",
                         f[0].err.message);
    return rc;
}

status_t worker_configure_again(coordinator_t *c, size_t w,
                                const Tessera__V1__ConfigureJobRequest *q,
                                Tessera__V1__ConfigureJobResponse **ret, rpc_error_t *rerr)
{
    rpc_call_opts_t o = {.timeout_ms = CONFIGURE_TIMEOUT};

    if (rpc_worker_configure_job(c->workers[w], q, &o, ret, NULL, rerr) == STATUS_OK)
        return STATUS_OK;
    if (rerr->status != STATUS_UNAVAILABLE)
        return rerr->status;
    /* it answered a health check: the chief's channel may sit in its reconnect backoff from
     * when the worker was down; connect now, once */
    rpc_channel_reset_backoff(c->workers[w]);
    clock_sleep_ms(300);
    return rpc_worker_configure_job(c->workers[w], q, &o, ret, NULL, rerr);
}

status_t workers_rejoin(worker_cfg_t *cfg, size_t w, const plan_t *plan, const dispatch_pos_t *pos,
                        status_msg_t *err)
{
    Tessera__V1__ConfigureJobRequest q = cfg->reqs[w]; /* a copy: the fields set here are its own */
    Tessera__V1__ConfigureJobResponse *resp = NULL;
    rpc_error_t rerr;

    for (int call = 0; call < 2; call++) {
        set_call(&q, call == 0 ? NULL : plan, pos->epoch, pos->batch, pos->rng, pos->n_rng);
        if (worker_configure_again(cfg->c, w, &q, &resp, &rerr) != STATUS_OK)
            return status_fail(err, rerr.status, "configuring worker %zu (%s) again: %s", w,
                               rpc_channel_target(cfg->c->workers[w]), rerr.message);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    return STATUS_OK;
}
