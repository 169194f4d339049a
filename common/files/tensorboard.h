/* What Keras's TensorBoard callback writes, from a training loop: a run directory
 * <logdir>/<job>/train and one <logdir>/<job>/validation, with
 *   train:      batch_loss, batch_accuracy every update_freq steps (step = the global step);
 *               epoch_loss, epoch_accuracy, learning_rate, epoch_examples_per_second and
 *               epoch_steps_per_second after each epoch (step = the epoch, from 0);
 *               <weight>/histogram every histogram_freq epochs;
 *   validation: epoch_loss, epoch_accuracy after each evaluation.
 * Accuracy is written only where the loss has one (classification). */
#ifndef TESSERA_FILES_TENSORBOARD_H
#define TESSERA_FILES_TENSORBOARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct tb_opts {
    const char *logdir, *job;
    int64_t update_freq;    /* steps between batch summaries; 0: per epoch only */
    int64_t histogram_freq; /* epochs between weight histograms; 0: none */
    bool accuracy;          /* the loss has an accuracy */
    /* only the train file, for weight histograms written beside another process's run (a
     * multi_worker_mirrored worker's, beside the chief's scalars) */
    bool histograms_only;
} tb_opts_t;

typedef struct tb_run tb_run_t;

status_t tb_open(const tb_opts_t *o, tb_run_t **ret, status_msg_t *err);

/* After training step `step` (counted from 1), with the epoch's running means so far. */
status_t tb_batch(tb_run_t *t, int64_t step, double loss, double accuracy, status_msg_t *err);

typedef struct tb_epoch {
    int64_t epoch; /* from 0 */
    double loss, accuracy, learning_rate, examples_per_second, steps_per_second;
    bool validated; /* val_loss and val_accuracy hold an evaluation */
    double val_loss, val_accuracy;
    /* the job's other metrics: names[n], their values (and val_metrics when validated),
     * written as epoch_NAME as Keras does */
    int n_metrics;
    const char *const *metric_names;
    const double *metrics, *val_metrics;
} tb_epoch_t;

/* After an epoch; flushes both files. */
status_t tb_epoch(tb_run_t *t, const tb_epoch_t *e, status_msg_t *err);

/* True when histograms are due after epoch e. */
bool tb_histograms_due(const tb_run_t *t, int64_t epoch);
status_t tb_histogram(tb_run_t *t, int64_t epoch, const char *weight, const float *values, size_t n,
                      status_msg_t *err);

/* Flushes and closes; NULL-safe. */
status_t tb_close(tb_run_t *t, status_msg_t *err);

#endif
