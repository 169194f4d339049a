/* GlobalAveragePooling1D and 2D: the mean over the steps (or pixels) of each channel;
 * GlobalMaxPooling1D and 2D: the largest, whose place backward sends the gradient to (the first
 * of equal ones, as TensorFlow's reduce_max gradient does not: it splits among ties, which
 * float inputs almost never have). */
#include "layers/layer.h"

static status_t gap1d_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    if (l->in_rank != 2)
        return layer_plan_error(p, err, "%s needs input (batch, steps, features), got %s",
                                l->spec.kind == JOB_LAYER_GLOBAL_MAX_POOLING1D
                                    ? "GlobalMaxPooling1D"
                                    : "GlobalAveragePooling1D",
                                p->in_s);
    l->out_rank = 1;
    l->out_shape[0] = l->in_shape[1];
    return STATUS_OK;
}

static status_t gap2d_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    if (l->in_rank != 3)
        return layer_plan_error(p, err, "%s needs input (batch, height, width, channels), got %s",
                                l->spec.kind == JOB_LAYER_GLOBAL_MAX_POOLING2D
                                    ? "GlobalMaxPooling2D"
                                    : "GlobalAveragePooling2D",
                                p->in_s);
    l->out_rank = 1;
    l->out_shape[0] = l->in_shape[2];
    return STATUS_OK;
}

/* With a mask (Keras's masked GlobalAveragePooling1D): the sum over the kept steps divided by
 * their count (0 / 0 when an example has none, as Keras's). */
static void masked_mean(const layer_t *l, int batch, float *out)
{
    size_t channels = (size_t)l->out_shape[0], steps = l->in_len / channels;

    for (int b = 0; b < batch; b++) {
        const float *x = l->in + (size_t)b * l->in_len, *mk = l->seq_mask + (size_t)b * steps;
        float *y = out + (size_t)b * channels, count = 0;
        for (size_t c = 0; c < channels; c++)
            y[c] = 0;
        for (size_t s = 0; s < steps; s++) {
            count += mk[s];
            for (size_t c = 0; mk[s] != 0 && c < channels; c++)
                y[c] += x[s * channels + c];
        }
        for (size_t c = 0; c < channels; c++)
            y[c] /= count;
    }
}

static status_t gap_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t channels = (size_t)l->out_shape[0];

    (void)training, (void)err;
    if (l->seq_mask != NULL)
        masked_mean(l, batch, l->out);
    else
        l->be->mean_steps(l->in, batch, l->in_len / channels, channels, l->out);
    return STATUS_OK;
}

static void gap_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t channels = (size_t)l->out_shape[0], steps = l->in_len / channels;

    if (l->seq_mask == NULL) {
        l->be->mean_steps_backward(dy, batch, steps, channels, dx);
        return;
    }
    for (int b = 0; b < batch; b++) { /* dx = mask * dy / count */
        const float *mk = l->seq_mask + (size_t)b * steps;
        float count = 0;
        for (size_t s = 0; s < steps; s++)
            count += mk[s];
        for (size_t s = 0; s < steps; s++)
            for (size_t c = 0; c < channels; c++)
                dx[(size_t)b * l->in_len + s * channels + c] =
                    mk[s] != 0 ? dy[(size_t)b * channels + c] / count : 0.0f;
    }
}

static status_t gmp_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    STATUS_CHECK(l->spec.kind == JOB_LAYER_GLOBAL_MAX_POOLING1D ? gap1d_plan(p, l, err)
                                                                : gap2d_plan(p, l, err));
    l->argmax = layer_alloc(p->m, layer_mul_sat((size_t)p->max_batch, (size_t)l->out_shape[0]),
                            sizeof(int32_t));
    return l->argmax != NULL ? STATUS_OK : layer_plan_failed(p, err);
}

static status_t gmp_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t channels = (size_t)l->out_shape[0], steps = l->in_len / channels;

    (void)training, (void)err;
    for (int b = 0; b < batch; b++) {
        const float *x = l->in + (size_t)b * l->in_len;
        float *y = l->out + (size_t)b * channels;
        int32_t *at = l->argmax + (size_t)b * channels;
        for (size_t c = 0; c < channels; c++) {
            y[c] = x[c];
            at[c] = (int32_t)c;
        }
        for (size_t s = 1; s < steps; s++)
            for (size_t c = 0; c < channels; c++)
                if (x[s * channels + c] > y[c]) {
                    y[c] = x[s * channels + c];
                    at[c] = (int32_t)(s * channels + c);
                }
    }
    return STATUS_OK;
}

static void gmp_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t channels = (size_t)l->out_shape[0];

    for (int b = 0; b < batch; b++) {
        float *d = dx + (size_t)b * l->in_len;
        for (size_t i = 0; i < l->in_len; i++)
            d[i] = 0;
        for (size_t c = 0; c < channels; c++)
            d[l->argmax[(size_t)b * channels + c]] = dy[(size_t)b * channels + c];
    }
}

const layer_ops_t layer_global_max_pooling = {
    .plan = gmp_plan,
    .forward = gmp_forward,
    .backward_input = gmp_backward_input,
};

const layer_ops_t layer_global_average_pooling1d = {
    .plan = gap1d_plan,
    .forward = gap_forward,
    .backward_input = gap_backward_input,
};

const layer_ops_t layer_global_average_pooling2d = {
    .plan = gap2d_plan,
    .forward = gap_forward,
    .backward_input = gap_backward_input,
};
