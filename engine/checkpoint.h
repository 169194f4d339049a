/* Checkpoints of one-device training (tessera train): the model's variables and their optimizer
 * slots in one safetensors file (train-0.safetensors), and a manifest (files/checkpoint.h) with
 * the step, the optimizer's iterations, the data pipeline's position, the dropout streams and
 * the epoch's running sums, so that a resumed run takes exactly the steps an uninterrupted one
 * would. */
#ifndef TESSERA_ENGINE_CHECKPOINT_H
#define TESSERA_ENGINE_CHECKPOINT_H

#include <stdint.h>

#include "base/status.h"
#include "files/checkpoint.h"
#include "job/job.h"
#include "trainer.h"

#define TRAIN_CKPT_FILE "train-0.safetensors"

/* Where training stands after `step` steps. */
typedef struct train_position {
    int64_t step;
    int64_t epoch, batch; /* the next batch the pipeline gives */
    double epoch_sums[3]; /* loss, correct, examples of the epoch so far */
    bool has_last_epoch;  /* an epoch has ended: its mean loss and accuracy */
    double last_loss, last_accuracy;
    /* the job's other metrics: the epoch's sums so far (job_t.metric_width) and the last
     * epoch's values (job_t.n_metrics); borrowed */
    const double *metric_sums, *last_metrics;
} train_position_t;

/* Writes checkpoint `pos->step` of t under job->checkpoint_dir and keeps the newest
 * job->checkpoint_keep. A complete checkpoint of that step already there is kept as it is. */
status_t train_ckpt_save(trainer_t *t, const job_t *job, const train_position_t *pos,
                         status_msg_t *err);

/* The newest complete checkpoint of the job, its manifest checked against the job: the same
 * optimizer and slots (STATUS_BAD_CONFIG naming what differs). STATUS_NOT_FOUND when there is
 * none. Free *ret_path and ckpt_manifest_free(ret). */
status_t train_ckpt_find(const job_t *job, char **ret_path, ckpt_manifest_t *ret,
                         status_msg_t *err);

/* Loads the checkpoint's variables, slots, iterations and dropout streams into t. Every
 * variable of the model must be there with its shape, and no other (STATUS_BAD_CONFIG naming
 * the first that differs); a damaged file is STATUS_DATA_LOSS naming it. t is unchanged when
 * the checkpoint does not fit the model. */
status_t train_ckpt_restore(trainer_t *t, const char *path, const ckpt_manifest_t *m,
                            status_msg_t *err);

/* The same into a model and its optimizer slots outside a trainer (slots[i]: param i's
 * slot arrays, laid out as optimizer_slots_init does; slots NULL: values only). */
status_t ckpt_load_model(model_t *model, float *const *slots, const char *path,
                         const ckpt_manifest_t *m, status_msg_t *err);

/* The checkpoint directory to read: `path` itself when it holds a manifest, else the newest
 * complete checkpoint under it. Free *ret_path and ckpt_manifest_free(ret). */
status_t ckpt_open_any(const char *path, char **ret_path, ckpt_manifest_t *ret, status_msg_t *err);

#endif
