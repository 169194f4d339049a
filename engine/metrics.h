/* The sums of the job's metrics beyond loss and accuracy (job_metric_t), from a batch's
 * predictions; their results are job_metrics_result's. */
#ifndef TESSERA_ENGINE_METRICS_H
#define TESSERA_ENGINE_METRICS_H

#include <stddef.h>

#include "base/status.h"
#include "job/job.h"

/* Checks that each metric applies to a model of `outputs` values per example: top-k needs
 * classes (outputs >= 2), the errors one value (outputs == 1), a class_id must be one of the
 * outputs. err names the metric. */
status_t metrics_check(const job_metric_t *ms, int n, size_t outputs, status_msg_t *err);

/* Adds a batch's sums into state (the job's metric_width of them). pred[batch * outputs]: with
 * outputs >= 2, each class's probability and y the class ids; with one output, the probability
 * of class 1 (labels other than 0 are positive). raw: the model's outputs as they are (logits
 * where pred is their sigmoid), which the errors (MAE, MSE, RMSE) compare with y, as Keras's do.
 * Labels were checked by the loss. */
void metrics_update(const job_metric_t *ms, int n, const float *pred, const float *raw,
                    size_t outputs, const float *y, int batch, double *state);

#endif
