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

/* One output's loss against its layer. */
static status_t check_head(model_t *m, model_head_t *h, status_msg_t *err)
{
    const layer_t *last = &m->layers[h->layer];
    job_activation_t act = layer_activation_of(last);
    const char *name = job_loss_name(h->loss);
    bool read = false; /* by another layer: its activation stays (others read its output) */

    for (size_t i = 0; m->graph && i < m->n_layers; i++)
        for (int k = 0; k < m->layers[i].n_ins; k++)
            read |= m->layers[i].src[k] == h->layer;
    h->out_len = last->out_len;
    h->label_len = elementwise(h->loss) || h->loss == JOB_LOSS_KL_DIVERGENCE ? h->out_len : 1;
    h->fused = false;
    if (h->loss == JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ||
        h->loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY || h->loss == JOB_LOSS_KL_DIVERGENCE) {
        if (last->out_rank != 1 || last->out_len < 2)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s needs an output of (batch, classes) with classes >= 2; the "
                               "%s layer '%s' gives %zu values",
                               name, m->n_heads > 1 ? "output" : "last", last->spec.name,
                               last->out_len);
        if (h->loss == JOB_LOSS_KL_DIVERGENCE) /* of probabilities, no logits to fold */
            return STATUS_OK;
        h->fused = !h->from_logits && act == JOB_ACT_SOFTMAX && !read;
        if (!h->from_logits && act != JOB_ACT_SOFTMAX)
            LOG_WARNING(TRAIN,
                        "the output layer '%s' has no softmax, so its outputs are not "
                        "probabilities: did you mean %s with from_logits: true?",
                        last->spec.name, name);
    } else if (h->loss == JOB_LOSS_BINARY_CROSSENTROPY) {
        h->fused = !h->from_logits && act == JOB_ACT_SIGMOID && !read;
        if (!h->from_logits && act != JOB_ACT_SIGMOID)
            LOG_WARNING(TRAIN,
                        "the output layer '%s' has no sigmoid, so its outputs are not "
                        "probabilities: did you mean binary_crossentropy with from_logits: true?",
                        last->spec.name);
    }
    if (h->fused && (last->spec.activity_reg.l1 != 0 || last->spec.activity_reg.l2 != 0))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "the output layer '%s': an activity_regularizer on an output whose "
                           "softmax or sigmoid the loss takes over is not supported",
                           last->spec.name);
    return STATUS_OK;
}

status_t model_check_loss(model_t *m, status_msg_t *err)
{
    m->label_len = 0;
    for (int k = 0; k < m->n_heads; k++) {
        STATUS_CHECK(check_head(m, &m->heads[k], err));
        m->heads[k].label_at = m->label_len;
        m->label_len += m->heads[k].label_len;
    }
    m->out_len = m->heads[0].out_len;
    return STATUS_OK;
}

bool model_layer_fused(const model_t *m, size_t i)
{
    for (int k = 0; k < m->n_heads; k++)
        if ((size_t)m->heads[k].layer == i)
            return m->heads[k].fused;
    return false;
}

/* Whether output h takes labels of label_len values an example; err says why not. */
static status_t check_labels(const model_t *m, const model_head_t *h, size_t label_len,
                             status_msg_t *err)
{
    const char *name = job_loss_name(h->loss), *layer = m->layers[h->layer].spec.name;
    size_t k = h->out_len;

    if (h->loss == JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY && label_len != 1)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s takes one class index an example; the labels of '%s' have %zu "
                           "values an example (one-hot labels: categorical_crossentropy)",
                           name, layer, label_len);
    if (h->loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY && label_len != 1 && label_len != k)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s takes one class index or a row of %zu class probabilities "
                           "(one-hot) an example, as the layer '%s' gives; the labels have %zu "
                           "values an example",
                           name, k, layer, label_len);
    if (h->loss != JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY &&
        h->loss != JOB_LOSS_CATEGORICAL_CROSSENTROPY && label_len != k)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s compares each output value with its label: the layer '%s' gives "
                           "%zu values an example and the labels have %zu",
                           name, layer, k, label_len);
    return STATUS_OK;
}

status_t model_set_labels(model_t *m, const size_t *lens, int n, status_msg_t *err)
{
    size_t at = 0;

    if (n != m->n_heads)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "the data gives the labels of %d output%s, and the model has %d", n,
                           n == 1 ? "" : "s", m->n_heads);
    for (int k = 0; k < n; k++)
        STATUS_CHECK(check_labels(m, &m->heads[k], lens[k], err));
    for (int i = 0; i < m->n_metrics; i++) { /* each against its output */
        int k = m->n_heads > 1 ? m->metrics[i].output : 0;
        if (k < 0 || k >= n)
            return status_fail(err, STATUS_BAD_CONFIG, "metric %s: no output %d",
                               m->metrics[i].name, k);
        STATUS_CHECK(metrics_check(&m->metrics[i], 1, m->heads[k].out_len, lens[k], err));
    }
    for (int k = 0; k < n; k++) {
        m->heads[k].label_at = at;
        m->heads[k].label_len = lens[k];
        at += lens[k];
    }
    m->label_len = at;
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

/* A categorical cross-entropy example's labels (its head's, `row`): its class (a class index,
 * or the largest value of its row, as Keras's categorical accuracy takes it), checked; the
 * targets are then target(). */
static status_t class_of(const model_head_t *h, const float *row, int b, int *ret_class,
                         status_msg_t *err)
{
    size_t k = h->out_len;
    int best = 0;

    if (h->label_len == 1) {
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
static inline float target(const model_head_t *h, const float *row, int label, size_t i)
{
    float t = h->label_len == 1 ? (i == (size_t)label ? 1.0f : 0.0f) : row[i], s = h->smoothing;
    return s == 0 ? t : t * (1.0f - s) + s / (float)h->out_len;
}

/* What each loss below reads: the head, its output [batch, out_len] (logits or probabilities),
 * its labels y (example b's at y + b * stride), the gradient's scale, dy (or NULL). */
typedef struct loss_args {
    const model_t *m;
    model_head_t *h;
    const float *out, *y;
    size_t stride;
    int batch;
    float inv;
    float *dy;
} loss_args_t;

/* Categorical cross-entropy (sparse, or of one-hot or soft targets) on logits (log-softmax):
 * -sum t_i log p_i = T log(sum) - sum t_i (x_i - max), T the targets' sum (1 for one-hot), and
 * its gradient T p_i - t_i. */
static status_t scce_logits(const loss_args_t *a, model_stats_t *st, status_msg_t *err)
{
    model_head_t *h = a->h;
    size_t k = h->out_len;
    for (int b = 0; b < a->batch; b++) {
        const float *x = a->out + (size_t)b * k, *row = a->y + (size_t)b * a->stride;
        float *p = h->probs + (size_t)b * k, max = x[0], sum = 0, total = 0, dot = 0;
        int label, arg = 0;
        STATUS_CHECK(class_of(h, row, b, &label, err));
        for (size_t i = 1; i < k; i++)
            if (x[i] > max) {
                max = x[i];
                arg = (int)i;
            }
        for (size_t i = 0; i < k; i++) {
            float t = target(h, row, label, i);
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
            if (a->dy != NULL)
                a->dy[(size_t)b * k + i] = (total * p[i] - target(h, row, label, i)) * a->inv;
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
static status_t scce_probs(const loss_args_t *a, model_stats_t *st, status_msg_t *err)
{
    const model_head_t *h = a->h;
    size_t k = h->out_len;
    for (int b = 0; b < a->batch; b++) {
        const float *x = a->out + (size_t)b * k, *row = a->y + (size_t)b * a->stride;
        float sum = 0, total = 0, loss = 0;
        int label, arg = 0;
        STATUS_CHECK(class_of(h, row, b, &label, err));
        for (size_t i = 0; i < k; i++) {
            sum += x[i];
            if (x[i] > x[arg])
                arg = (int)i;
        }
        st->correct += arg == label;
        for (size_t i = 0; i < k; i++) {
            float t = target(h, row, label, i);
            total += t;
            if (t != 0)
                loss -= t * logf(clip_prob(x[i] / sum));
        }
        st->loss_sum += (double)loss;
        if (a->dy == NULL)
            continue;
        for (size_t i = 0; i < k; i++) { /* d/dx_i of -sum_j t_j log(x_j / sum x) */
            float t = target(h, row, label, i);
            a->dy[(size_t)b * k + i] = (total / sum - (t != 0 ? t / x[i] : 0.0f)) * a->inv;
        }
    }
    return STATUS_OK;
}

/* Binary cross-entropy of each output value against its 0/1 label (several for a multi-label
 * output), the example's loss their mean; its accuracy the share of values right. */
static status_t bce(const loss_args_t *a, bool logits, model_stats_t *st, status_msg_t *err)
{
    model_head_t *h = a->h;
    size_t k = h->out_len;
    float s = h->smoothing, per = a->inv / (float)k;
    for (int b = 0; b < a->batch; b++) {
        double loss = 0, right = 0;
        for (size_t j = 0; j < k; j++) {
            size_t at = (size_t)b * k + j;
            float t = a->y[(size_t)b * a->stride + j], v = a->out[at], p, label = t;
            if (!(t >= 0 && t <= 1))
                return bad_label(err, b, t, "outside [0, 1]");
            if (s != 0) /* Keras's label_smoothing: toward 1/2 */
                t = t * (1.0f - s) + 0.5f * s;
            if (logits) {
                /* max(z, 0) - z t + log(1 + exp(-|z|)) */
                loss += (double)(fmaxf(v, 0) - v * t + log1pf(expf(-fabsf(v))));
                p = 1.0f / (1.0f + expf(-v));
                h->probs[at] = p;
                if (a->dy != NULL)
                    a->dy[at] = (p - t) * per;
            } else {
                p = clip_prob(v);
                loss += -(double)(t * logf(p) + (1 - t) * logf(1 - p));
                if (a->dy != NULL)
                    a->dy[at] = (p - t) / (p * (1 - p)) * per;
            }
            /* Keras thresholds the output as it is (unclipped), or the logits' sigmoid */
            right += ((logits ? p : v) > h->threshold) == (label > 0.5f);
        }
        st->loss_sum += loss / (double)k;
        st->correct += right / (double)k;
    }
    return STATUS_OK;
}

/* The losses of each output value against its label, as Keras 3 defines them (keras.losses):
 * each value's loss and its derivative in the prediction, the example's loss their mean. */
static status_t pointwise(const loss_args_t *a, model_stats_t *st, status_msg_t *err)
{
    const model_head_t *h = a->h;
    size_t k = h->out_len;
    float per = a->inv / (float)k, delta = (float)h->huber_delta;

    for (int b = 0; b < a->batch; b++) {
        double sum = 0;
        for (size_t j = 0; j < k; j++) {
            size_t at = (size_t)b * k + j;
            float p = a->out[at], t = a->y[(size_t)b * a->stride + j], d = p - t, loss, grad;
            switch (h->loss) {
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
                float s, hinge;
                if (!(t == -1 || t == 0 || t == 1))
                    return bad_label(err, b, t, "not -1, 0 or 1 (hinge losses)");
                s = t == 1 ? 1.0f : -1.0f;
                hinge = fmaxf(1.0f - s * p, 0.0f);
                loss = h->loss == JOB_LOSS_HINGE ? hinge : hinge * hinge;
                grad = hinge > 0 ? (h->loss == JOB_LOSS_HINGE ? -s : -2.0f * s * hinge) : 0.0f;
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
            if (a->dy != NULL)
                a->dy[at] = grad * per;
        }
        st->loss_sum += sum / (double)k;
    }
    return STATUS_OK;
}

/* Keras's KL divergence: sum t_i log(t_i / p_i), t and p clipped to [eps, 1] (where p is
 * clipped its gradient is 0, as the clip's). */
static status_t kl_divergence(const loss_args_t *a, model_stats_t *st)
{
    size_t k = a->h->out_len;

    for (int b = 0; b < a->batch; b++) {
        double sum = 0;
        for (size_t j = 0; j < k; j++) {
            size_t at = (size_t)b * k + j;
            float t = a->y[(size_t)b * a->stride + j], p = a->out[at];
            bool inside = p >= PROB_EPSILON && p <= 1;
            t = t < PROB_EPSILON ? PROB_EPSILON : t > 1 ? 1 : t;
            p = p < PROB_EPSILON ? PROB_EPSILON : p > 1 ? 1 : p;
            sum += (double)(t * logf(t / p));
            if (a->dy != NULL)
                a->dy[at] = inside ? -t / p * a->inv : 0.0f;
        }
        st->loss_sum += sum;
    }
    return STATUS_OK;
}

/* The loss of one output over the batch, with its gradient scaled by a->inv. */
static status_t loss_of(const loss_args_t *a, bool logits, model_stats_t *st, status_msg_t *err)
{
    switch (a->h->loss) {
    case JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
    case JOB_LOSS_CATEGORICAL_CROSSENTROPY: /* the same; only the first smooths its labels */
        return logits ? scce_logits(a, st, err) : scce_probs(a, st, err);
    case JOB_LOSS_BINARY_CROSSENTROPY:
        return bce(a, logits, st, err);
    case JOB_LOSS_KL_DIVERGENCE:
        return kl_divergence(a, st);
    case JOB_LOSS_MSE:
    case JOB_LOSS_MAE:
    case JOB_LOSS_HUBER:
    case JOB_LOSS_LOG_COSH:
    case JOB_LOSS_HINGE:
    case JOB_LOSS_SQUARED_HINGE:
    case JOB_LOSS_POISSON:
        return pointwise(a, st, err);
    }
    return STATUS_INTERNAL;
}

/* Output h's loss: its part of the batch's loss (weighted) in st, its gradient in h->dy. */
static status_t head_loss(model_t *m, model_head_t *h, const float *y, int batch, int total,
                          bool grad, model_stats_t *st, status_msg_t *err)
{
    const layer_t *last = &m->layers[h->layer];
    /* the cross-entropies on logits leave the probabilities in h->probs */
    bool logits = (h->fused || h->from_logits) && job_loss_has_accuracy(h->loss);
    /* an elementwise loss of an output of several axes: each example's loss is the mean of
     * `positions` losses (one per place along the axes before the last), which "sum" and "none"
     * add up instead */
    double positions = elementwise(h->loss)
                           ? (double)(h->out_len / (size_t)last->out_shape[last->out_rank - 1])
                           : 1.0;
    loss_args_t a = {.m = m,
                     .h = h,
                     .out = last->out,
                     .y = y + h->label_at,
                     .stride = m->label_len,
                     .batch = batch,
                     .inv = h->weight / (float)total,
                     .dy = grad ? h->dy : NULL};
    model_stats_t one = {0};

    if (m->loss_sum) {
        /* reduction "sum": the gradient of the batch's sum, and the batch's loss (its sum)
         * counted once per example, as Keras's epoch loss weighs each batch's by its size */
        a.inv = h->weight * (float)positions;
        STATUS_CHECK(loss_of(&a, logits, &one, err));
        one.loss_sum *= positions * (double)total;
    } else if (m->loss_unreduced) {
        /* reduction "none": Keras's fit (TensorFlow's backend; JAX's and torch's need a
         * scalar) steps on the gradient of the losses' sum and reports their mean, each
         * example's loss counted once */
        a.inv = h->weight * (float)positions;
        STATUS_CHECK(loss_of(&a, logits, &one, err));
    } else {
        STATUS_CHECK(loss_of(&a, logits, &one, err));
    }
    st->loss_sum += one.loss_sum * h->weight;
    if (m->n_heads == 1)
        st->correct += one.correct;
    /* this output's metrics (every metric, of a model of one) */
    for (int i = 0; m->metric_sink != NULL && i < m->n_metrics; i++) {
        const job_metric_t *me = &m->metrics[i];
        double *s = m->metric_sink + me->offset;
        if (m->n_heads > 1 && me->output != (int)(h - m->heads))
            continue;
        if (me->kind == JOB_METRIC_OUTPUT_LOSS || me->kind == JOB_METRIC_OUTPUT_ACCURACY) {
            s[0] += me->kind == JOB_METRIC_OUTPUT_LOSS ? one.loss_sum : one.correct;
            s[1] += batch; /* its own loss, unweighted */
            continue;
        }
        /* the metrics read probabilities, as the loss does; the errors the outputs, as Keras's
         * (a folded activation's output is probs: Keras's errors compare that) */
        metrics_update(me, 1, logits ? h->probs : last->out, h->fused ? h->probs : last->out,
                       h->out_len, a.y, h->label_len, m->label_len, batch, m->metric_sink);
    }
    return STATUS_OK;
}

status_t model_loss(model_t *m, const float *y, int batch, int total, bool grad, model_stats_t *st,
                    status_msg_t *err)
{
    st->examples = batch;
    for (int k = 0; k < m->n_heads; k++)
        STATUS_CHECK(head_loss(m, &m->heads[k], y, batch, total, grad, st, err));
    return STATUS_OK;
}
