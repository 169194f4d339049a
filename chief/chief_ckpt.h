/* Checkpoints of a parameter-server job: written by the PS tasks (one shard file each) and
 * committed by the chief's manifest; read back on resume (checkpoint.c). */
#ifndef TESSERA_CHIEF_CKPT_H
#define TESSERA_CHIEF_CKPT_H

#include "dispatch.h"
#include "files/checkpoint.h"
#include "internal.h"
#include "placement.h"

/* Where training stands, besides the variables. */
typedef struct chief_position {
    int64_t step;
    double epoch_sums[3]; /* loss, correct, examples of the epoch so far */
    bool has_last_epoch;  /* an epoch has ended: its mean loss and accuracy */
    double last_loss, last_accuracy;
    /* the job's other metrics: the epoch's sums so far, the last epoch's values (or NULL) */
    const double *metric_sums, *last_metrics;
    const dispatch_pos_t *workers; /* each worker's data position and dropout streams */
    size_t n_workers;
} chief_position_t;

/* Writes checkpoint pos->step of job j under its checkpoint.dir: every PS holding shards writes
 * them in parallel, then the manifest commits it and the oldest beyond checkpoint.keep go. The
 * closures must be paused. A complete checkpoint of that step already there is kept as it is.
 * Errors name the PS that failed. */
status_t chief_ckpt_save(coordinator_t *c, chief_job_t *j, const plan_t *plan,
                         const chief_position_t *pos, status_msg_t *err);

/* The newest complete checkpoint under the job's checkpoint.dir, written with the job's
 * optimizer (STATUS_BAD_CONFIG otherwise); STATUS_NOT_FOUND when there is none. Free *ret_path
 * and ckpt_manifest_free(ret). */
status_t chief_ckpt_find(chief_job_t *j, char **ret_path, ckpt_manifest_t *ret, status_msg_t *err);

/* Checks that the checkpoint holds the plan's variables, shards and placement (STATUS_BAD_CONFIG
 * naming what differs: another model, another PS count or partitioner), then has every PS that
 * holds shards load its file, all at once. */
status_t chief_ckpt_restore(coordinator_t *c, chief_job_t *j, const plan_t *plan, const char *path,
                            const ckpt_manifest_t *m, status_msg_t *err);

/* After an attempt at a checkpoint of step `step` (rc; error, "" when none): answers the
 * Checkpoint calls waiting on job j (tessera checkpoint). Call with c->mu held. */
void chief_ckpt_answer(coordinator_t *c, chief_job_t *j, status_t rc, int64_t step,
                       const char *error);

#endif
