/* The activation layers with options: ReLU (Keras's relu(x, negative_slope, max_value,
 * threshold)), LeakyReLU, PReLU and ELU. Each keeps nothing: backward reads the layer's input,
 * which the layer before keeps until the next forward pass.
 *
 * ReLU as Keras computes it: pos = x above the threshold (else 0; plain relu for threshold 0),
 * clipped to [0, max_value] when there is one; neg = relu(threshold - x); y = pos -
 * negative_slope * neg. Its gradient: 1 where pos passes x through (inside the clip, bounds
 * included, as tf.clip_by_value's), plus negative_slope below the threshold. */
#include <math.h>

#include "job/initializer.h"
#include "layers/layer.h"

static float relu_of(const job_layer_t *s, float x, float *ret_grad)
{
    float thr = (float)s->threshold, slope = (float)s->negative_slope, pos, grad;
    bool pass = s->threshold != 0 ? x > thr : x > 0.0f;

    pos = pass ? x : 0.0f;
    grad = pass ? 1.0f : 0.0f;
    if (!isnan(s->max_value)) {
        float cap = (float)s->max_value;
        /* Keras takes relu6 for a cap of 6 without threshold: its gradient is 0 at 6 itself */
        bool relu6 = s->max_value == 6.0 && s->threshold == 0;
        if (pos < 0.0f || pos > cap || (relu6 && pos == cap))
            grad = 0.0f;
        pos = pos < 0.0f ? 0.0f : (pos > cap ? cap : pos);
    }
    if (slope != 0.0f && x < thr) {
        pos -= slope * (thr - x);
        grad += slope;
    }
    *ret_grad = grad;
    return pos;
}

static status_t relu_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t n = (size_t)batch * l->in_len;
    float g;

    (void)training, (void)err;
    for (size_t i = 0; i < n; i++)
        l->out[i] = relu_of(&l->spec, l->in[i], &g);
    return STATUS_OK;
}

static void relu_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t n = (size_t)batch * l->in_len;
    float g;

    for (size_t i = 0; i < n; i++) {
        (void)relu_of(&l->spec, l->in[i], &g);
        dx[i] = dy[i] * g;
    }
}

/* LeakyReLU: x, or negative_slope * x below 0 */
static status_t leaky_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t n = (size_t)batch * l->in_len;
    float slope = (float)l->spec.negative_slope;

    (void)training, (void)err;
    for (size_t i = 0; i < n; i++)
        l->out[i] = l->in[i] >= 0.0f ? l->in[i] : slope * l->in[i];
    return STATUS_OK;
}

static void leaky_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t n = (size_t)batch * l->in_len;
    float slope = (float)l->spec.negative_slope;

    for (size_t i = 0; i < n; i++)
        dx[i] = l->in[i] > 0.0f ? dy[i] : dy[i] * slope;
}

/* ELU: x above 0, alpha * (exp(x) - 1) below; the gradient below 0 is alpha * exp(x). */
static status_t elu_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t n = (size_t)batch * l->in_len;
    float alpha = (float)l->spec.alpha;

    (void)training, (void)err;
    for (size_t i = 0; i < n; i++)
        l->out[i] = l->in[i] > 0.0f ? l->in[i] : alpha * expm1f(l->in[i]);
    return STATUS_OK;
}

static void elu_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t n = (size_t)batch * l->in_len;
    float alpha = (float)l->spec.alpha;

    for (size_t i = 0; i < n; i++)
        dx[i] = l->in[i] > 0.0f ? dy[i] : dy[i] * alpha * expf(l->in[i]);
}

/* PReLU: x above 0, alpha * x below, alpha a trainable variable of the example's shape with the
 * shared axes of size 1 (Keras: relu(x) - alpha * relu(-x)). dalpha sums dy * min(x, 0) over
 * the batch and the shared axes. */
static size_t prelu_params(const job_layer_t *s)
{
    (void)s;
    return 1;
}

static status_t prelu_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    int shape[JOB_MAX_RANK];

    if (l->spec.shared_axes >> (l->in_rank + 1))
        return layer_plan_error(p, err, "shared_axes names an axis past the input %s", p->in_s);
    for (int i = 0; i < l->in_rank; i++)
        shape[i] = (l->spec.shared_axes >> (i + 1)) & 1 ? 1 : l->in_shape[i];
    l->w =
        layer_add_param(p, "alpha", shape, l->in_rank, false, &l->spec.kernel_init, JOB_INIT_ZEROS);
    if (l->w == NULL)
        return layer_plan_failed(p, err);
    initializer_fill(&l->spec.kernel_init, JOB_INIT_ZEROS, l->w->value, l->w->n, 1, 1, p->seed);
    return STATUS_OK;
}

/* The place in alpha of value i of an example (the shared axes' coordinates dropped). */
static size_t alpha_at(const layer_t *l, size_t i)
{
    size_t at = 0, stride = 1;

    for (int d = l->in_rank - 1; d >= 0; d--) {
        size_t coord = i % (size_t)l->in_shape[d];
        i /= (size_t)l->in_shape[d];
        if (!((l->spec.shared_axes >> (d + 1)) & 1)) {
            at += coord * stride;
            stride *= (size_t)l->in_shape[d];
        }
    }
    return at;
}

static status_t prelu_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    const float *alpha = l->w->value;

    (void)training, (void)err;
    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < l->in_len; i++) {
            float x = l->in[(size_t)b * l->in_len + i];
            l->out[(size_t)b * l->in_len + i] = x > 0.0f ? x : alpha[alpha_at(l, i)] * x;
        }
    return STATUS_OK;
}

static void prelu_backward_params(layer_t *l, int batch, const float *dy)
{
    float *g = l->w->grad;

    for (size_t k = 0; k < l->w->n; k++)
        g[k] = 0;
    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < l->in_len; i++) {
            float x = l->in[(size_t)b * l->in_len + i];
            if (x < 0.0f)
                g[alpha_at(l, i)] += dy[(size_t)b * l->in_len + i] * x;
        }
}

static void prelu_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    const float *alpha = l->w->value;

    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < l->in_len; i++) {
            size_t k = (size_t)b * l->in_len + i;
            float x = l->in[k];
            dx[k] = x > 0.0f ? dy[k] : (x < 0.0f ? dy[k] * alpha[alpha_at(l, i)] : 0.0f);
        }
}

const layer_ops_t layer_prelu = {.param_count = prelu_params,
                                 .plan = prelu_plan,
                                 .forward = prelu_forward,
                                 .backward_params = prelu_backward_params,
                                 .backward_input = prelu_backward_input};

const layer_ops_t layer_relu = {.forward = relu_forward, .backward_input = relu_backward_input};
const layer_ops_t layer_leaky_relu = {.forward = leaky_forward,
                                      .backward_input = leaky_backward_input};
const layer_ops_t layer_elu = {.forward = elu_forward, .backward_input = elu_backward_input};
