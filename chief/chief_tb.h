/* A job's TensorBoard run on the chief (tensorboard.c): the scalars Keras's TensorBoard
 * callback writes, from the chief's account of the job, for every strategy the chief runs. */
#ifndef TESSERA_CHIEF_TB_H
#define TESSERA_CHIEF_TB_H

#include "files/tensorboard.h"
#include "internal.h"

typedef struct chief_tb {
    tb_run_t *run;     /* NULL without a tensorboard section */
    int64_t last_step; /* of the last batch summary */
    status_t rc;       /* the first failed write of a batch summary */
    status_msg_t err;
} chief_tb_t;

/* Opens the run under the job's tensorboard.logdir (nothing without the section). */
status_t chief_tb_open(chief_tb_t *t, const chief_job_t *j, status_msg_t *err);

/* The job's progress moved (c->mu held): a batch summary each time the step passes a multiple
 * of update_freq. A failed write is kept for chief_tb_epoch to report. */
void chief_tb_progress(chief_tb_t *t, const chief_job_t *j);

/* Epoch `epoch` (from 0) ended after `steps` steps in `seconds`: its scalars (validated: the
 * test numbers too). */
status_t chief_tb_epoch(chief_tb_t *t, coordinator_t *c, const chief_job_t *j, int64_t epoch,
                        int64_t steps, double seconds, bool validated, status_msg_t *err);

/* Flushes and closes (ok: report a failure in err; else quietly). */
status_t chief_tb_close(chief_tb_t *t, bool ok, status_msg_t *err);

#endif
