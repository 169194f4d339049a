/* The sums of the job's metrics beyond loss and accuracy (job_metric_t), from a batch's
 * predictions; their results are job_metrics_result's. */
#ifndef TESSERA_ENGINE_METRICS_H
#define TESSERA_ENGINE_METRICS_H

#include <stddef.h>

#include "base/status.h"
#include "job/job.h"

/* Checks that each metric applies to a model of `outputs` values per example and labels of
 * label_len values (1, or outputs): top-k needs classes (outputs >= 2), the errors a label
 * value for each output, a class_id must be one of the outputs. err names the metric. */
status_t metrics_check(const job_metric_t *ms, int n, size_t outputs, size_t label_len,
                       status_msg_t *err);

/* Adds a batch's sums into state (the job's metric_width of them). pred[batch * outputs]: each
 * output's probability (of its class, or of its 0/1 target). y[batch * label_len]: with one
 * label an example and outputs >= 2, the class ids; with one of each, labels other than 0 are
 * positive; with a label for each output (one-hot classes, several 0/1 targets), each output is
 * positive where its label is not 0, and top-k's class is the label's largest (Keras's argmax).
 * raw: the model's outputs as they are (logits where pred is their sigmoid), which the errors
 * (MAE, MSE, RMSE) compare with y value by value, as Keras's do. Example b's labels are at
 * y + b * stride (stride: label_len, or the whole row of a model of several outputs). Labels
 * were checked by the loss. */
void metrics_update(const job_metric_t *ms, int n, const float *pred, const float *raw,
                    size_t outputs, const float *y, size_t label_len, size_t stride, int batch,
                    double *state);

#endif
