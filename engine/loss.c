/* Losses and accuracy.
 *
 * Losses are reduced like Keras's default (sum over the batch divided by the batch size), or
 * with reduction "sum" summed over the batch.
 * A final softmax under sparse categorical cross-entropy, or a final sigmoid under binary
 * cross-entropy, is folded into the loss and computed from the logits: the same value where the
 * probabilities are representable, stable where they are not. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>

#include "base/log.h"
#include "metrics.h"
#include "model_internal.h"

#define PROB_EPSILON 1e-7f /* Keras's backend epsilon, used to clip probabilities */

status_t model_check_loss(model_t *m, status_msg_t *err)
{
    job_activation_t act = layer_activation_of(&m->layers[m->n_layers - 1]);
    const layer_t *last = &m->layers[m->n_layers - 1];

    if (m->loss == JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ||
        m->loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY) {
        const char *name = m->loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY
                               ? "categorical_crossentropy"
                               : "sparse_categorical_crossentropy";
        if (last->out_rank != 1 || last->out_len < 2)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s needs an output of (batch, classes) with classes >= 2; the "
                               "last layer '%s' gives %zu values",
                               name, last->spec.name, last->out_len);
        m->fused = !m->from_logits && act == JOB_ACT_SOFTMAX;
        if (!m->from_logits && act != JOB_ACT_SOFTMAX)
            LOG_WARNING(TRAIN,
                        "the last layer '%s' has no softmax, so its outputs are not "
                        "probabilities: did you mean %s with from_logits: true?",
                        last->spec.name, name);
    } else if (m->loss == JOB_LOSS_BINARY_CROSSENTROPY) {
        if (last->out_rank != 1 || last->out_len != 1)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "binary_crossentropy needs an output of (batch, 1); the last "
                               "layer '%s' gives %zu values",
                               last->spec.name, last->out_len);
        m->fused = !m->from_logits && act == JOB_ACT_SIGMOID;
        if (!m->from_logits && act != JOB_ACT_SIGMOID)
            LOG_WARNING(TRAIN,
                        "the last layer '%s' has no sigmoid, so its outputs are not "
                        "probabilities: did you mean binary_crossentropy with from_logits: true?",
                        last->spec.name);
    } else if (last->out_len != 1) {
        static const char *const names[] = {[JOB_LOSS_MSE] = "mean_squared_error",
                                            [JOB_LOSS_MAE] = "mean_absolute_error",
                                            [JOB_LOSS_HUBER] = "huber",
                                            [JOB_LOSS_LOG_COSH] = "log_cosh",
                                            [JOB_LOSS_HINGE] = "hinge",
                                            [JOB_LOSS_SQUARED_HINGE] = "squared_hinge",
                                            [JOB_LOSS_POISSON] = "poisson"};
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s compares one value per example with the label; the last layer "
                           "'%s' gives %zu values",
                           names[m->loss], last->spec.name, last->out_len);
    }
    if (m->fused && (last->spec.activity_reg.l1 != 0 || last->spec.activity_reg.l2 != 0))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "the last layer '%s': an activity_regularizer on an output whose "
                           "softmax or sigmoid the loss takes over is not supported",
                           last->spec.name);
    return STATUS_OK;
}

static status_t bad_label(status_msg_t *err, int example, float label, const char *what)
{
    return status_fail(err, STATUS_INVALID_ARGUMENT, "label %g of example %d is %s", (double)label,
                       example, what);
}

/* The target of class i for an example of class `label`: its one-hot value, smoothed as
 * Keras's label_smoothing s does, t (1 - s) + s / k. */
static inline float smoothed(size_t i, int label, float s, size_t k)
{
    float t = i == (size_t)label ? 1.0f : 0.0f;
    return s == 0 ? t : t * (1.0f - s) + s / (float)k;
}

/* Categorical cross-entropy (sparse, or one-hot smoothed by m->smoothing) on logits
 * (log-softmax). */
static status_t scce_logits(model_t *m, const float *z, const float *y, int batch, int total,
                            float *dy, model_stats_t *st, status_msg_t *err)
{
    size_t k = m->out_len;
    float inv = 1.0f / (float)total, s = m->smoothing;
    for (int b = 0; b < batch; b++) {
        const float *x = z + (size_t)b * k;
        float *p = m->probs + (size_t)b * k, max = x[0], sum = 0;
        int label = (int)y[b], arg = 0;
        if (!(y[b] >= 0) || label >= (int)k || (float)label != y[b])
            return bad_label(err, b, y[b], "not a class index of the output");
        for (size_t i = 1; i < k; i++)
            if (x[i] > max) {
                max = x[i];
                arg = (int)i;
            }
        for (size_t i = 0; i < k; i++) {
            p[i] = expf(x[i] - max);
            sum += p[i];
        }
        st->correct += arg == label;
        if (s == 0) {
            st->loss_sum += (double)(logf(sum) - (x[label] - max));
        } else { /* sum of t_i = 1: -sum t_i log p_i = log(sum) - sum t_i (x_i - max) */
            float dot = 0;
            for (size_t i = 0; i < k; i++)
                dot += smoothed(i, label, s, k) * (x[i] - max);
            st->loss_sum += (double)(logf(sum) - dot);
        }
        for (size_t i = 0; i < k; i++) {
            p[i] /= sum;
            if (dy != NULL)
                dy[(size_t)b * k + i] = (p[i] - smoothed(i, label, s, k)) * inv;
        }
    }
    return STATUS_OK;
}

/* The same on probabilities (a softmax not folded, or no softmax). */
static status_t scce_probs(model_t *m, const float *p, const float *y, int batch, int total,
                           float *dy, model_stats_t *st, status_msg_t *err)
{
    size_t k = m->out_len;
    float inv = 1.0f / (float)total, s = m->smoothing;
    for (int b = 0; b < batch; b++) {
        const float *x = p + (size_t)b * k;
        int label = (int)y[b], arg = 0;
        float sum = 0, pl;
        if (!(y[b] >= 0) || label >= (int)k || (float)label != y[b])
            return bad_label(err, b, y[b], "not a class index of the output");
        /* Keras rescales the outputs to sum to one, then clips. */
        for (size_t i = 0; i < k; i++) {
            sum += x[i];
            if (x[i] > x[arg])
                arg = (int)i;
        }
        st->correct += arg == label;
        if (s == 0) {
            pl = x[label] / sum;
            pl = pl < PROB_EPSILON ? PROB_EPSILON : pl > 1 - PROB_EPSILON ? 1 - PROB_EPSILON : pl;
            st->loss_sum += -(double)logf(pl);
        } else { /* -sum t_i log(clip(x_i / sum)) */
            float loss = 0;
            for (size_t i = 0; i < k; i++) {
                float pi = x[i] / sum;
                pi = pi < PROB_EPSILON       ? PROB_EPSILON
                     : pi > 1 - PROB_EPSILON ? 1 - PROB_EPSILON
                                             : pi;
                loss -= smoothed(i, label, s, k) * logf(pi);
            }
            st->loss_sum += (double)loss;
        }
        if (dy == NULL)
            continue;
        for (size_t i = 0; i < k; i++) /* d/dx_i of -sum_j t_j log(x_j / sum x) */
            dy[(size_t)b * k + i] =
                s == 0 ? ((1.0f / sum) - (i == (size_t)label ? 1.0f / x[label] : 0)) * inv
                       : ((1.0f / sum) - smoothed(i, label, s, k) / x[i]) * inv;
    }
    return STATUS_OK;
}

static status_t bce(model_t *m, const float *out, const float *y, int batch, int total, bool logits,
                    float *dy, model_stats_t *st, status_msg_t *err)
{
    float inv = 1.0f / (float)total, s = m->smoothing;
    for (int b = 0; b < batch; b++) {
        float t = y[b], v = out[b], p, label = t;
        if (!(t >= 0 && t <= 1))
            return bad_label(err, b, t, "outside [0, 1]");
        if (s != 0) /* Keras's label_smoothing: toward 1/2 */
            t = t * (1.0f - s) + 0.5f * s;
        if (logits) {
            /* max(z, 0) - z t + log(1 + exp(-|z|)) */
            st->loss_sum += (double)(fmaxf(v, 0) - v * t + log1pf(expf(-fabsf(v))));
            p = 1.0f / (1.0f + expf(-v));
            m->probs[b] = p;
            if (dy != NULL)
                dy[b] = (p - t) * inv;
        } else {
            p = v < PROB_EPSILON ? PROB_EPSILON : v > 1 - PROB_EPSILON ? 1 - PROB_EPSILON : v;
            st->loss_sum += -(double)(t * logf(p) + (1 - t) * logf(1 - p));
            if (dy != NULL)
                dy[b] = (p - t) / (p * (1 - p)) * inv;
        }
        /* Keras thresholds the output as it is (unclipped), or the logits' sigmoid */
        st->correct += ((logits ? p : v) > m->accuracy_threshold) == (label > 0.5f);
    }
    return STATUS_OK;
}

/* The losses of one value per example against its label, as Keras 3 defines them (keras.losses):
 * each example's loss and its derivative in the prediction. */
static status_t pointwise(model_t *m, const float *out, const float *y, int batch, int total,
                          float *dy, model_stats_t *st, status_msg_t *err)
{
    float inv = 1.0f / (float)total, delta = (float)m->huber_delta;

    for (int b = 0; b < batch; b++) {
        float p = out[b], t = y[b], d = p - t, loss, grad;
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
            loss =
                d + fmaxf(-2.0f * d, 0.0f) + log1pf(expf(-fabsf(2.0f * d))) - 0.69314718055994531f;
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
        st->loss_sum += (double)loss;
        if (dy != NULL)
            dy[b] = grad * inv;
    }
    return STATUS_OK;
}

static status_t loss_of(model_t *m, const float *out, bool logits, const float *y, int batch,
                        int total, float *dy, model_stats_t *st, status_msg_t *err)
{
    switch (m->loss) {
    case JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
    case JOB_LOSS_CATEGORICAL_CROSSENTROPY: /* the same; only the first smooths its labels */
        return logits ? scce_logits(m, out, y, batch, total, dy, st, err)
                      : scce_probs(m, out, y, batch, total, dy, st, err);
    case JOB_LOSS_BINARY_CROSSENTROPY:
        return bce(m, out, y, batch, total, logits, dy, st, err);
    case JOB_LOSS_MSE:
    case JOB_LOSS_MAE:
    case JOB_LOSS_HUBER:
    case JOB_LOSS_LOG_COSH:
    case JOB_LOSS_HINGE:
    case JOB_LOSS_SQUARED_HINGE:
    case JOB_LOSS_POISSON:
        return pointwise(m, out, y, batch, total, dy, st, err);
    }
    return STATUS_INTERNAL;
}

status_t model_loss(model_t *m, const float *y, int batch, int total, float *dy, model_stats_t *st,
                    status_msg_t *err)
{
    const float *out = m->layers[m->n_layers - 1].out;
    /* the cross-entropies on logits leave the probabilities in m->probs */
    bool logits = (m->fused || m->from_logits) && job_loss_has_accuracy(m->loss);

    st->examples = batch;
    if (m->loss_sum) {
        /* reduction "sum": the gradient of the batch's sum, and the batch's loss (its sum)
         * counted once per example, as Keras's epoch loss weighs each batch's by its size */
        double before = st->loss_sum;
        STATUS_CHECK(loss_of(m, out, logits, y, batch, 1, dy, st, err));
        st->loss_sum = before + (st->loss_sum - before) * (double)total;
    } else if (m->loss_unreduced) {
        /* reduction "none": Keras's fit (TensorFlow's backend; JAX's and torch's need a
         * scalar) steps on the gradient of the losses' sum and reports their mean, each
         * example's loss counted once */
        STATUS_CHECK(loss_of(m, out, logits, y, batch, 1, dy, st, err));
    } else {
        STATUS_CHECK(loss_of(m, out, logits, y, batch, total, dy, st, err));
    }
    /* the metrics read probabilities, as the loss does; the errors the outputs, as Keras's */
    if (m->metric_sink != NULL && m->n_metrics > 0)
        metrics_update(m->metrics, m->n_metrics, logits ? m->probs : out, out, m->out_len, y, batch,
                       m->metric_sink);
    return STATUS_OK;
}
