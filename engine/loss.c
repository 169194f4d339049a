/* Losses and accuracy.
 *
 * Losses are reduced like Keras's default (sum over the batch divided by the batch size), or
 * with reduction "sum" summed over the batch.
 * A final softmax under sparse categorical cross-entropy, or a final sigmoid under binary
 * cross-entropy, is folded into the loss and computed from the logits: the same value where the
 * probabilities are representable, stable where they are not.
 *
 * Labels are one value an example (a class index, a 0/1 or a target) or one for each output
 * value (label_len == out_len: one-hot or soft classes, several 0/1 targets, a vector or an image
 * to regress). The losses of a value against its label (binary cross-entropy, the errors, hinge,
 * poisson) are Keras's: their mean over the output's last axis, summed over its other axes by
 * reduction "sum" and averaged by the default one. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>

#include "base/log.h"
#include "metrics.h"
#include "model_internal.h"

#define PROB_EPSILON 1e-7f /* Keras's backend epsilon, used to clip probabilities */

/* Whether the loss compares each output value with its own label. */
static bool elementwise(job_loss_kind_t loss)
{
    return loss != JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY &&
           loss != JOB_LOSS_CATEGORICAL_CROSSENTROPY && loss != JOB_LOSS_KL_DIVERGENCE;
}

status_t model_check_loss(model_t *m, status_msg_t *err)
{
    job_activation_t act = layer_activation_of(&m->layers[m->n_layers - 1]);
    const layer_t *last = &m->layers[m->n_layers - 1];
    const char *name = job_loss_name(m->loss);

    m->label_len = elementwise(m->loss) || m->loss == JOB_LOSS_KL_DIVERGENCE ? m->out_len : 1;
    if (m->loss == JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ||
        m->loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY || m->loss == JOB_LOSS_KL_DIVERGENCE) {
        if (last->out_rank != 1 || last->out_len < 2)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s needs an output of (batch, classes) with classes >= 2; the "
                               "last layer '%s' gives %zu values",
                               name, last->spec.name, last->out_len);
        if (m->loss == JOB_LOSS_KL_DIVERGENCE) /* of probabilities, no logits to fold */
            return STATUS_OK;
        m->fused = !m->from_logits && act == JOB_ACT_SOFTMAX;
        if (!m->from_logits && act != JOB_ACT_SOFTMAX)
            LOG_WARNING(TRAIN,
                        "the last layer '%s' has no softmax, so its outputs are not "
                        "probabilities: did you mean %s with from_logits: true?",
                        last->spec.name, name);
    } else if (m->loss == JOB_LOSS_BINARY_CROSSENTROPY) {
        m->fused = !m->from_logits && act == JOB_ACT_SIGMOID;
        if (!m->from_logits && act != JOB_ACT_SIGMOID)
            LOG_WARNING(TRAIN,
                        "the last layer '%s' has no sigmoid, so its outputs are not "
                        "probabilities: did you mean binary_crossentropy with from_logits: true?",
                        last->spec.name);
    }
    if (m->fused && (last->spec.activity_reg.l1 != 0 || last->spec.activity_reg.l2 != 0))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "the last layer '%s': an activity_regularizer on an output whose "
                           "softmax or sigmoid the loss takes over is not supported",
                           last->spec.name);
    return STATUS_OK;
}

status_t model_set_labels(model_t *m, size_t label_len, status_msg_t *err)
{
    const layer_t *last = &m->layers[m->n_layers - 1];
    const char *name = job_loss_name(m->loss);
    size_t k = m->out_len;

    if (m->loss == JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY && label_len != 1)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s takes one class index an example; the labels have %zu values an "
                           "example (one-hot labels: categorical_crossentropy)",
                           name, label_len);
    if (m->loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY && label_len != 1 && label_len != k)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s takes one class index or a row of %zu class probabilities "
                           "(one-hot) an example, as the last layer '%s' gives; the labels have "
                           "%zu values an example",
                           name, k, last->spec.name, label_len);
    if (m->loss != JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY &&
        m->loss != JOB_LOSS_CATEGORICAL_CROSSENTROPY && label_len != k)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s compares each output value with its label: the last layer '%s' "
                           "gives %zu values an example and the labels have %zu",
                           name, last->spec.name, k, label_len);
    STATUS_CHECK(metrics_check(m->metrics, m->n_metrics, k, label_len, err));
    m->label_len = label_len;
    return STATUS_OK;
}

size_t model_label_len(const model_t *m)
{
    return m->label_len;
}

static status_t bad_label(status_msg_t *err, int example, float label, const char *what)
{
    return status_fail(err, STATUS_INVALID_ARGUMENT, "label %g of example %d is %s", (double)label,
                       example, what);
}

/* A categorical cross-entropy example's labels: its class (a class index, or the largest value
 * of its row, as Keras's categorical accuracy takes it), checked; the targets are then
 * target(). */
static status_t class_of(const model_t *m, const float *row, int b, int *ret_class,
                         status_msg_t *err)
{
    size_t k = m->out_len;
    int best = 0;

    if (m->label_len == 1) {
        int label = (int)row[0];
        if (!(row[0] >= 0) || label >= (int)k || (float)label != row[0])
            return bad_label(err, b, row[0], "not a class index of the output");
        *ret_class = label;
        return STATUS_OK;
    }
    for (size_t i = 0; i < k; i++) {
        if (!(row[i] >= 0 && row[i] <= 1))
            return bad_label(err, b, row[i], "outside [0, 1] (class probabilities)");
        best = row[i] > row[best] ? (int)i : best;
    }
    *ret_class = best;
    return STATUS_OK;
}

/* The target of class i: its one-hot value for a class index, or the label row's, smoothed as
 * Keras's label_smoothing s does, t (1 - s) + s / k. */
static inline float target(const model_t *m, const float *row, int label, size_t i)
{
    float t = m->label_len == 1 ? (i == (size_t)label ? 1.0f : 0.0f) : row[i], s = m->smoothing;
    return s == 0 ? t : t * (1.0f - s) + s / (float)m->out_len;
}

/* Categorical cross-entropy (sparse, or of one-hot or soft targets) on logits (log-softmax):
 * -sum t_i log p_i = T log(sum) - sum t_i (x_i - max), T the targets' sum (1 for one-hot), and
 * its gradient T p_i - t_i. */
static status_t scce_logits(model_t *m, const float *z, const float *y, int batch, float inv,
                            float *dy, model_stats_t *st, status_msg_t *err)
{
    size_t k = m->out_len, L = m->label_len;
    for (int b = 0; b < batch; b++) {
        const float *x = z + (size_t)b * k, *row = y + (size_t)b * L;
        float *p = m->probs + (size_t)b * k, max = x[0], sum = 0, total = 0, dot = 0;
        int label, arg = 0;
        STATUS_CHECK(class_of(m, row, b, &label, err));
        for (size_t i = 1; i < k; i++)
            if (x[i] > max) {
                max = x[i];
                arg = (int)i;
            }
        for (size_t i = 0; i < k; i++) {
            float t = target(m, row, label, i);
            p[i] = expf(x[i] - max);
            sum += p[i];
            total += t;
            if (t != 0)
                dot += t * (x[i] - max);
        }
        st->correct += arg == label;
        st->loss_sum += (double)(total * logf(sum) - dot);
        for (size_t i = 0; i < k; i++) {
            p[i] /= sum;
            if (dy != NULL)
                dy[(size_t)b * k + i] = (total * p[i] - target(m, row, label, i)) * inv;
        }
    }
    return STATUS_OK;
}

static inline float clip_prob(float p)
{
    return p < PROB_EPSILON ? PROB_EPSILON : p > 1 - PROB_EPSILON ? 1 - PROB_EPSILON : p;
}

/* The same on probabilities (a softmax not folded, or no softmax). Keras rescales the outputs
 * to sum to one, then clips: -sum t_i log(clip(x_i / sum)). */
static status_t scce_probs(model_t *m, const float *p, const float *y, int batch, float inv,
                           float *dy, model_stats_t *st, status_msg_t *err)
{
    size_t k = m->out_len, L = m->label_len;
    for (int b = 0; b < batch; b++) {
        const float *x = p + (size_t)b * k, *row = y + (size_t)b * L;
        float sum = 0, total = 0, loss = 0;
        int label, arg = 0;
        STATUS_CHECK(class_of(m, row, b, &label, err));
        for (size_t i = 0; i < k; i++) {
            sum += x[i];
            if (x[i] > x[arg])
                arg = (int)i;
        }
        st->correct += arg == label;
        for (size_t i = 0; i < k; i++) {
            float t = target(m, row, label, i);
            total += t;
            if (t != 0)
                loss -= t * logf(clip_prob(x[i] / sum));
        }
        st->loss_sum += (double)loss;
        if (dy == NULL)
            continue;
        for (size_t i = 0; i < k; i++) { /* d/dx_i of -sum_j t_j log(x_j / sum x) */
            float t = target(m, row, label, i);
            dy[(size_t)b * k + i] = (total / sum - (t != 0 ? t / x[i] : 0.0f)) * inv;
        }
    }
    return STATUS_OK;
}

/* Binary cross-entropy of each output value against its 0/1 label (several for a multi-label
 * output), the example's loss their mean; its accuracy the share of values right. */
static status_t bce(model_t *m, const float *out, const float *y, int batch, float inv, bool logits,
                    float *dy, model_stats_t *st, status_msg_t *err)
{
    size_t k = m->out_len;
    float s = m->smoothing, per = inv / (float)k;
    for (int b = 0; b < batch; b++) {
        double loss = 0, right = 0;
        for (size_t j = 0; j < k; j++) {
            size_t at = (size_t)b * k + j;
            float t = y[at], v = out[at], p, label = t;
            if (!(t >= 0 && t <= 1))
                return bad_label(err, b, t, "outside [0, 1]");
            if (s != 0) /* Keras's label_smoothing: toward 1/2 */
                t = t * (1.0f - s) + 0.5f * s;
            if (logits) {
                /* max(z, 0) - z t + log(1 + exp(-|z|)) */
                loss += (double)(fmaxf(v, 0) - v * t + log1pf(expf(-fabsf(v))));
                p = 1.0f / (1.0f + expf(-v));
                m->probs[at] = p;
                if (dy != NULL)
                    dy[at] = (p - t) * per;
            } else {
                p = clip_prob(v);
                loss += -(double)(t * logf(p) + (1 - t) * logf(1 - p));
                if (dy != NULL)
                    dy[at] = (p - t) / (p * (1 - p)) * per;
            }
            /* Keras thresholds the output as it is (unclipped), or the logits' sigmoid */
            right += ((logits ? p : v) > m->accuracy_threshold) == (label > 0.5f);
        }
        st->loss_sum += loss / (double)k;
        st->correct += right / (double)k;
    }
    return STATUS_OK;
}

/* The losses of each output value against its label, as Keras 3 defines them (keras.losses):
 * each value's loss and its derivative in the prediction, the example's loss their mean. */
static status_t pointwise(model_t *m, const float *out, const float *y, int batch, float inv,
                          float *dy, model_stats_t *st, status_msg_t *err)
{
    size_t k = m->out_len;
    float per = inv / (float)k, delta = (float)m->huber_delta;

    for (int b = 0; b < batch; b++) {
        double sum = 0;
        for (size_t j = 0; j < k; j++) {
            size_t at = (size_t)b * k + j;
            float p = out[at], t = y[at], d = p - t, loss, grad;
            switch (m->loss) {
            case JOB_LOSS_MAE:
                loss = fabsf(d);
                grad = (float)((d > 0) - (d < 0));
                break;
            case JOB_LOSS_HUBER: /* 0.5 d^2 within delta, linear beyond */
                loss = fabsf(d) <= delta ? 0.5f * d * d : delta * (fabsf(d) - 0.5f * delta);
                grad = fabsf(d) <= delta ? d : delta * (float)((d > 0) - (d < 0));
                break;
            case JOB_LOSS_LOG_COSH: /* log(cosh(d)) = d + softplus(-2d) - log 2, without overflow */
                loss = d + fmaxf(-2.0f * d, 0.0f) + log1pf(expf(-fabsf(2.0f * d))) -
                       0.69314718055994531f;
                grad = tanhf(d);
                break;
            case JOB_LOSS_HINGE:
            case JOB_LOSS_SQUARED_HINGE: { /* labels -1 or 1; 0 counts as -1 */
                float s, h;
                if (!(t == -1 || t == 0 || t == 1))
                    return bad_label(err, b, t, "not -1, 0 or 1 (hinge losses)");
                s = t == 1 ? 1.0f : -1.0f;
                h = fmaxf(1.0f - s * p, 0.0f);
                loss = m->loss == JOB_LOSS_HINGE ? h : h * h;
                grad = h > 0 ? (m->loss == JOB_LOSS_HINGE ? -s : -2.0f * s * h) : 0.0f;
                break;
            }
            case JOB_LOSS_POISSON: /* p - t log(p + eps): p must be a rate, > 0 */
                if (!(t >= 0))
                    return bad_label(err, b, t, "negative (poisson counts)");
                loss = p - t * logf(p + PROB_EPSILON);
                grad = 1.0f - t / (p + PROB_EPSILON);
                break;
            default: /* JOB_LOSS_MSE */
                loss = d * d;
                grad = 2.0f * d;
                break;
            }
            sum += (double)loss;
            if (dy != NULL)
                dy[at] = grad * per;
        }
        st->loss_sum += sum / (double)k;
    }
    return STATUS_OK;
}

/* Keras's KL divergence: sum t_i log(t_i / p_i), t and p clipped to [eps, 1] (where p is
 * clipped its gradient is 0, as the clip's). */
static status_t kl_divergence(model_t *m, const float *out, const float *y, int batch, float inv,
                              float *dy, model_stats_t *st)
{
    size_t k = m->out_len;

    for (int b = 0; b < batch; b++) {
        double sum = 0;
        for (size_t j = 0; j < k; j++) {
            size_t at = (size_t)b * k + j;
            float t = y[at], p = out[at];
            bool inside = p >= PROB_EPSILON && p <= 1;
            t = t < PROB_EPSILON ? PROB_EPSILON : t > 1 ? 1 : t;
            p = p < PROB_EPSILON ? PROB_EPSILON : p > 1 ? 1 : p;
            sum += (double)(t * logf(t / p));
            if (dy != NULL)
                dy[at] = inside ? -t / p * inv : 0.0f;
        }
        st->loss_sum += sum;
    }
    return STATUS_OK;
}

/* The loss of the batch against y, with its gradient scaled by inv into dy. */
static status_t loss_of(model_t *m, const float *out, bool logits, const float *y, int batch,
                        float inv, float *dy, model_stats_t *st, status_msg_t *err)
{
    switch (m->loss) {
    case JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
    case JOB_LOSS_CATEGORICAL_CROSSENTROPY: /* the same; only the first smooths its labels */
        return logits ? scce_logits(m, out, y, batch, inv, dy, st, err)
                      : scce_probs(m, out, y, batch, inv, dy, st, err);
    case JOB_LOSS_BINARY_CROSSENTROPY:
        return bce(m, out, y, batch, inv, logits, dy, st, err);
    case JOB_LOSS_KL_DIVERGENCE:
        return kl_divergence(m, out, y, batch, inv, dy, st);
    case JOB_LOSS_MSE:
    case JOB_LOSS_MAE:
    case JOB_LOSS_HUBER:
    case JOB_LOSS_LOG_COSH:
    case JOB_LOSS_HINGE:
    case JOB_LOSS_SQUARED_HINGE:
    case JOB_LOSS_POISSON:
        return pointwise(m, out, y, batch, inv, dy, st, err);
    }
    return STATUS_INTERNAL;
}

status_t model_loss(model_t *m, const float *y, int batch, int total, float *dy, model_stats_t *st,
                    status_msg_t *err)
{
    const layer_t *last = &m->layers[m->n_layers - 1];
    const float *out = last->out;
    /* the cross-entropies on logits leave the probabilities in m->probs */
    bool logits = (m->fused || m->from_logits) && job_loss_has_accuracy(m->loss);
    /* an elementwise loss of an output of several axes: each example's loss is the mean of
     * `positions` losses (one per place along the axes before the last), which "sum" and "none"
     * add up instead */
    double positions = elementwise(m->loss)
                           ? (double)(m->out_len / (size_t)last->out_shape[last->out_rank - 1])
                           : 1.0;

    st->examples = batch;
    if (m->loss_sum) {
        /* reduction "sum": the gradient of the batch's sum, and the batch's loss (its sum)
         * counted once per example, as Keras's epoch loss weighs each batch's by its size */
        double before = st->loss_sum;
        STATUS_CHECK(loss_of(m, out, logits, y, batch, (float)positions, dy, st, err));
        st->loss_sum = before + (st->loss_sum - before) * positions * (double)total;
    } else if (m->loss_unreduced) {
        /* reduction "none": Keras's fit (TensorFlow's backend; JAX's and torch's need a
         * scalar) steps on the gradient of the losses' sum and reports their mean, each
         * example's loss counted once */
        STATUS_CHECK(loss_of(m, out, logits, y, batch, (float)positions, dy, st, err));
    } else {
        STATUS_CHECK(loss_of(m, out, logits, y, batch, 1.0f / (float)total, dy, st, err));
    }
    /* the metrics read probabilities, as the loss does; the errors the outputs, as Keras's */
    if (m->metric_sink != NULL && m->n_metrics > 0)
        metrics_update(m->metrics, m->n_metrics, logits ? m->probs : out, out, m->out_len, y,
                       m->label_len, batch, m->metric_sink);
    return STATUS_OK;
}
