/* A running job's workers: configured at the start (model and data shard, then the placement of
 * the variables), and again one by one when a worker that was lost comes back (rejoin). */
#ifndef TESSERA_CHIEF_WORKERS_H
#define TESSERA_CHIEF_WORKERS_H

#include "dispatch.h"
#include "fanout.h"
#include "files/checkpoint.h"
#include "internal.h"
#include "placement.h"

/* The job's ConfigureJob requests, one per worker, and what they point at; they live as long as
 * the job runs. */
typedef struct worker_cfg {
    coordinator_t *c;
    chief_job_t *j;
    Tessera__V1__ConfigureJobRequest *reqs;
    Tessera__V1__ConfigureJobRequest__FilesEntry *entries, **eptrs;
    char **ps;
    size_t n_shards; /* the workers when the job started: one shard of the data each */
    size_t failed;   /* the worker a failed configure call names; SIZE_MAX: none */
} worker_cfg_t;

status_t worker_cfg_init(worker_cfg_t *cfg, coordinator_t *c, chief_job_t *j, status_msg_t *err);
void worker_cfg_done(worker_cfg_t *cfg); /* safe on a zeroed one */

/* Configures the live workers among the first n (alive[w]): a first call (plan NULL) builds
 * model and data pipeline, starting where the checkpoint being resumed (resume, may be NULL) left
 * each worker's data; a second gives the placement. f[w] holds each answer. A worker that cannot be
 * reached is marked dead (an event says so) and the job goes on with the others; none left fails
 * the job. */
status_t workers_configure(worker_cfg_t *cfg, const plan_t *plan, const ckpt_manifest_t *resume,
                           fanout_t *f, bool *alive, size_t n, status_msg_t *err);

/* One ConfigureJob call q to worker w, which has just answered a health check after being lost:
 * an UNAVAILABLE answer (the chief's channel still in gRPC's reconnect backoff) resets the
 * channel's backoff and the call goes once more. */
status_t worker_configure_again(coordinator_t *c, size_t w,
                                const Tessera__V1__ConfigureJobRequest *q,
                                Tessera__V1__ConfigureJobResponse **ret, rpc_error_t *rerr);

/* Configures worker w for the running job again, both calls, its data pipeline starting at pos
 * (where it stood when it was lost): a restarted worker builds the job afresh, one that was
 * stopped drops what it had. */
status_t workers_rejoin(worker_cfg_t *cfg, size_t w, const plan_t *plan, const dispatch_pos_t *pos,
                        status_msg_t *err);

#endif
