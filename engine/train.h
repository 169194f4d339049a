/* One-device training of a job: the loop `tessera train` runs and workers build on.
 *
 * Loads the data, builds the model, and runs the epochs or steps the job asks for, applying the
 * job's optimizer after each step (sparse rows for embeddings), evaluating on the test split
 * after each epoch. A NaN or infinite loss stops training with an error naming the step. */
#ifndef TESSERA_TRAIN_H
#define TESSERA_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "job/job.h"
#include "base/status.h"
#include "files/tensorboard.h"
#include "model.h"
#include "trainer.h"

typedef struct train_opts {
    int threads;                /* compute threads (large GEMMs are split over them) */
    int64_t steps;              /* > 0 overrides the job's train length in steps */
    int64_t epochs;             /* > 0 overrides the job's epochs */
    bool resume;                /* as the job's resume: true */
    const char *init_from;      /* overrides the job's init_from */
    bool evaluate_only;         /* no training: evaluate the starting model on the test split */
    const job_device_t *device; /* overrides the job's device */
} train_opts_t;

typedef struct train_progress {
    int64_t step, total_steps; /* total 0 when unknown */
    int64_t epoch, epochs;
    int64_t epoch_step, epoch_steps;
    double loss, accuracy;      /* running means over the current epoch */
    double examples_per_second; /* over the current epoch */
    double learning_rate;
    bool epoch_end; /* the call after the last step of an epoch */
    bool has_test;
    double test_loss, test_accuracy; /* valid at epoch_end when has_test */
    double seconds;                  /* since training started */
    /* the job's other metrics (job_t.metrics), over the epoch and the test split: valid at
     * epoch_end (test_metrics when has_test) */
    double metrics[JOB_MAX_METRICS], test_metrics[JOB_MAX_METRICS];
} train_progress_t;

typedef void (*train_progress_cb)(const train_progress_t *p, void *arg);

typedef struct train_result {
    int64_t steps;        /* the step training ended at */
    int64_t steps_run;    /* by this run (fewer when resumed) */
    int64_t resumed_step; /* the checkpoint's step this run resumed from; 0: none */
    /* model: {keras: PATH}: the iteration of the archive's optimizer the run went on from (its
     * state restored); -1: none */
    int64_t optimizer_from;
    int64_t epochs;
    double loss, accuracy;           /* last epoch's training means */
    double test_loss, test_accuracy; /* last evaluation; NaN without a test split */
    double seconds;
    double examples_per_second; /* over the whole run */
    /* the job's other metrics: the last epoch's, the last evaluation's (NaN without one) */
    double metrics[JOB_MAX_METRICS], test_metrics[JOB_MAX_METRICS];
} train_result_t;

/* Starting weights (init_from): the file's variables (Keras .weights.h5 or .keras, or
 * safetensors) checked against the model's by name and shape, then copied into t's model; an
 * error names the file and what differs. With job->init_optimizer (model: {keras: PATH} and
 * its optimizer), the archive optimizer's state too, when t keeps the optimizer's slots. */
status_t train_init_weights(trainer_t *t, const job_t *job, const char *path, status_msg_t *err);

/* Trains the job in this process. cb (may be NULL) sees every step and every epoch's end.
 *
 * With a checkpoint section, writes checkpoints (every_steps, every_seconds, or each epoch's end,
 * and after the last step); with resume (the job's or opts'), starts from the newest complete
 * checkpoint there, if any, at its step, optimizer state, learning-rate position, data position
 * and dropout streams: the run then takes exactly the steps an uninterrupted one would. */
status_t train_run(const job_t *job, const train_opts_t *opts, train_progress_cb cb, void *arg,
                   train_result_t *ret_result, status_msg_t *err);

/* Writes a histogram of each of the model's weights after `epoch` into the run, as Keras's
 * TensorBoard callback does with histogram_freq. */
status_t train_histograms(tb_run_t *tb, model_t *m, int64_t epoch, status_msg_t *err);

#endif
