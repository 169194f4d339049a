/* The metrics' sums, as Keras 3 counts them: AUC's predictions clipped to [0, 1] and bucketed
 * by ceil(p (thresholds - 1)) - 1 (a prediction exactly on a threshold is below it), the
 * positives and negatives of each bucket kept apart; precision and recall count p > threshold
 * (with top_k, of an example's k highest predictions only: ties go to the lower index, as
 * tf.math.top_k picks them);
 * a class is in the top k when fewer than k classes score strictly higher (ties count in, as
 * TensorFlow's in_top_k). */
#include "metrics.h"

#include <math.h>

static const char *const needs_classes = "needs an output of class probabilities (2 or more)";

status_t metrics_check(const job_metric_t *ms, int n, size_t outputs, size_t label_len,
                       status_msg_t *err)
{
    for (int i = 0; i < n; i++) {
        const job_metric_t *m = &ms[i];
        switch (m->kind) {
        case JOB_METRIC_TOP_K:
            if (outputs < 2)
                return status_fail(err, STATUS_BAD_CONFIG, "metric %s %s; the model gives %zu",
                                   m->name, needs_classes, outputs);
            break;
        case JOB_METRIC_MAE:
        case JOB_METRIC_MSE:
        case JOB_METRIC_RMSE:
            if (outputs != label_len)
                return status_fail(err, STATUS_BAD_CONFIG,
                                   "metric %s compares each predicted value with its label; the "
                                   "model gives %zu values an example, the labels %zu",
                                   m->name, outputs, label_len);
            break;
        case JOB_METRIC_PRECISION:
        case JOB_METRIC_RECALL:
            if (m->class_id >= 0 && (size_t)m->class_id >= outputs)
                return status_fail(err, STATUS_BAD_CONFIG,
                                   "metric %s: class_id %d is not one of the model's %zu outputs",
                                   m->name, m->class_id, outputs);
            break;
        case JOB_METRIC_AUC:
            if (m->num_labels > 0 && (size_t)m->num_labels != outputs)
                return status_fail(err, STATUS_BAD_CONFIG,
                                   "metric %s: multi_label over num_labels %d (given, or the last "
                                   "axis of the output's layers); the model gives %zu values an "
                                   "example: give num_labels, or make the output one value a "
                                   "label (a Dense, a global pooling)",
                                   m->name, m->num_labels, outputs);
            if (m->label_weights != NULL && (size_t)m->n_label_weights != outputs)
                return status_fail(err, STATUS_BAD_CONFIG,
                                   "metric %s: %d label_weights; the model gives %zu values an "
                                   "example, one weight each",
                                   m->name, m->n_label_weights, outputs);
            break;
        case JOB_METRIC_OUTPUT_LOSS:
        case JOB_METRIC_OUTPUT_ACCURACY:
            break;
        }
    }
    return STATUS_OK;
}

/* Whether output i of example b is a positive: its own label is not 0 (labels of as many values
 * as outputs, or one output), or the example's label is class i. */
static inline bool positive(size_t outputs, const float *y, size_t label_len, size_t stride, int b,
                            size_t i)
{
    if (label_len == outputs)
        return y[(size_t)b * stride + i] != 0;
    return (size_t)y[(size_t)b * stride] == i;
}

/* The class of example b: its label, or its label row's largest value (the first of equals). */
static size_t class_of(const float *y, size_t label_len, size_t stride, int b)
{
    const float *row = y + (size_t)b * stride;
    size_t best = 0;

    if (label_len == 1)
        return (size_t)row[0];
    for (size_t i = 1; i < label_len; i++)
        best = row[i] > row[best] ? i : best;
    return best;
}

/* The bucket of prediction p among thresholds -epsilon, list..., 1 + epsilon: the last whose
 * threshold p passes; as for evenly spaced ones, 0 for NaN and below 0, and above 1 as 1. */
static int listed_bucket(const float *list, int n, float p)
{
    int lo = 0, hi = n; /* how many of the list p passes: the first index it does not */

    if (!(p > 0))
        return 0;
    p = p > 1 ? 1 : p;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (p > list[mid])
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo; /* -epsilon and lo of the list passed */
}

/* The buckets' positives and negatives: in s, [positives, negatives] of num_thresholds each;
 * with multi_label one such pair an output, one after the other. */
static void auc_update(const job_metric_t *m, const float *pred, size_t outputs, const float *y,
                       size_t label_len, size_t stride, int batch, double *s)
{
    float scale = (float)(m->thresholds - 1);
    size_t t = (size_t)m->thresholds;

    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < outputs; i++) {
            float p = pred[(size_t)b * outputs + i];
            double *pos = m->num_labels > 0 ? s + 2 * t * i : s;
            /* one curve of every output: each counts by its weight */
            double w = m->label_weights != NULL && m->num_labels == 0 ? m->label_weights[i] : 1;
            int bucket;
            if (m->threshold_list != NULL) {
                bucket = listed_bucket(m->threshold_list, m->thresholds - 2, p);
            } else {
                p = p > 1 ? 1 : p;
                bucket = p > 0 ? (int)ceilf(p * scale) - 1 : 0; /* NaN: bucket 0 */
                bucket = bucket < 0 ? 0 : bucket;
            }
            if (positive(outputs, y, label_len, stride, b, i))
                pos[bucket] += w;
            else
                pos[t + (size_t)bucket] += w;
        }
}

/* Whether prediction i of row p is among its k highest (ties to the lower index). */
static bool in_top_k(const float *p, size_t outputs, size_t i, int k)
{
    int before = 0;

    for (size_t j = 0; j < outputs && before < k; j++)
        before += p[j] > p[i] || (p[j] == p[i] && j < i);
    return before < k;
}

static void confusion_update(const job_metric_t *m, const float *pred, size_t outputs,
                             const float *y, size_t label_len, size_t stride, int batch, double *s)
{
    size_t lo = m->class_id >= 0 ? (size_t)m->class_id : 0;
    size_t hi = m->class_id >= 0 ? lo + 1 : outputs;

    for (int b = 0; b < batch; b++)
        for (size_t i = lo; i < hi; i++) {
            const float *row = pred + (size_t)b * outputs;
            bool above =
                row[i] > m->threshold && (m->top_k == 0 || in_top_k(row, outputs, i, m->top_k));
            bool pos = positive(outputs, y, label_len, stride, b, i);
            s[0] += pos && above;  /* true positives */
            s[1] += !pos && above; /* false positives */
            s[2] += pos && !above; /* false negatives */
        }
}

static void top_k_update(const job_metric_t *m, const float *pred, size_t outputs, const float *y,
                         size_t label_len, size_t stride, int batch, double *s)
{
    for (int b = 0; b < batch; b++) {
        const float *p = pred + (size_t)b * outputs;
        size_t label = class_of(y, label_len, stride, b), higher = 0;
        if (label < outputs && isfinite(p[label]))
            for (size_t i = 0; i < outputs && higher < (size_t)m->k; i++)
                higher += p[i] > p[label];
        s[0] += label < outputs && isfinite(p[label]) && higher < (size_t)m->k;
        s[1] += 1;
    }
}

void metrics_update(const job_metric_t *ms, int n, const float *pred, const float *raw,
                    size_t outputs, const float *y, size_t label_len, size_t stride, int batch,
                    double *state)
{
    for (int i = 0; i < n; i++) {
        const job_metric_t *m = &ms[i];
        double *s = state + m->offset;
        switch (m->kind) {
        case JOB_METRIC_TOP_K:
            top_k_update(m, pred, outputs, y, label_len, stride, batch, s);
            break;
        case JOB_METRIC_AUC:
            auc_update(m, pred, outputs, y, label_len, stride, batch, s);
            break;
        case JOB_METRIC_PRECISION:
        case JOB_METRIC_RECALL:
            confusion_update(m, pred, outputs, y, label_len, stride, batch, s);
            break;
        case JOB_METRIC_OUTPUT_LOSS: /* the loss adds these (model_loss) */
        case JOB_METRIC_OUTPUT_ACCURACY:
            break;
        case JOB_METRIC_MAE:
        case JOB_METRIC_MSE:
        case JOB_METRIC_RMSE: /* label_len == outputs (metrics_check) */
            for (int b = 0; b < batch; b++)
                for (size_t v = 0; v < label_len; v++) {
                    double d =
                        (double)y[(size_t)b * stride + v] - (double)raw[(size_t)b * outputs + v];
                    s[0] += m->kind == JOB_METRIC_MAE ? fabs(d) : d * d;
                    s[1] += 1;
                }
            break;
        }
    }
}
