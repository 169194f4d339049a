/* GlobalAveragePooling1D and 2D: the mean over the steps (or pixels) of each channel. */
#include "layers/layer.h"

static status_t gap1d_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    if (l->in_rank != 2)
        return layer_plan_error(
            p, err, "GlobalAveragePooling1D needs input (batch, steps, features), got %s", p->in_s);
    l->out_rank = 1;
    l->out_shape[0] = l->in_shape[1];
    return STATUS_OK;
}

static status_t gap2d_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    if (l->in_rank != 3)
        return layer_plan_error(
            p, err, "GlobalAveragePooling2D needs input (batch, height, width, channels), got %s",
            p->in_s);
    l->out_rank = 1;
    l->out_shape[0] = l->in_shape[2];
    return STATUS_OK;
}

static status_t gap_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t channels = (size_t)l->out_shape[0];
    l->be->mean_steps(l->in, batch, l->in_len / channels, channels, l->out);
    return STATUS_OK;
}

static void gap_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t channels = (size_t)l->out_shape[0];
    l->be->mean_steps_backward(dy, batch, l->in_len / channels, channels, dx);
}

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
