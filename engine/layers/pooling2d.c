/* MaxPooling2D and AveragePooling2D: a window sliding over each channel of an NHWC image; the 1D
 * poolings are the same on an image of height 1 (input (steps, channels)). */
#include "layers/layer.h"

static status_t pool_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    const job_layer_t *s = &l->spec;
    backend_window_t *g = &l->win;

    bool one_d = s->kind == JOB_LAYER_MAX_POOLING1D || s->kind == JOB_LAYER_AVERAGE_POOLING1D;

    if (one_d && l->in_rank != 2)
        return layer_plan_error(p, err, "1D pooling needs input (batch, steps, channels), got %s",
                                p->in_s);
    if (!one_d && l->in_rank != 3)
        return layer_plan_error(
            p, err, "pooling needs input (batch, height, width, channels), got %s", p->in_s);
    *g = (backend_window_t){.h = one_d ? 1 : l->in_shape[0],
                            .w = l->in_shape[one_d ? 0 : 1],
                            .c = l->in_shape[one_d ? 1 : 2],
                            .kh = s->pool_size[0],
                            .kw = s->pool_size[1],
                            .sh = s->strides[0] > 0 ? s->strides[0] : s->pool_size[0],
                            .sw = s->strides[1] > 0 ? s->strides[1] : s->pool_size[1]};
    g->oh = layer_window_out(g->h, g->kh, g->sh, s->padding_same, &g->pad_t);
    g->ow = layer_window_out(g->w, g->kw, g->sw, s->padding_same, &g->pad_l);
    if (g->oh <= 0 || g->ow <= 0)
        return layer_plan_error(p, err, "a %dx%d pool does not fit input %s", g->kh, g->kw,
                                p->in_s);
    if (one_d) {
        l->out_shape[0] = g->ow;
    } else {
        l->out_shape[0] = g->oh;
        l->out_shape[1] = g->ow;
    }
    return STATUS_OK;
}

static status_t max_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    STATUS_CHECK(pool_plan(p, l, err));
    l->argmax = layer_alloc(
        p->m, layer_mul_sat((size_t)p->max_batch, layer_shape_len(l->out_shape, l->out_rank)),
        sizeof(int32_t));
    return l->argmax != NULL ? STATUS_OK : layer_plan_failed(p, err);
}

static status_t max_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    l->be->max_pool(&l->win, l->in, batch, l->out, l->argmax);
    return STATUS_OK;
}

static void max_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    l->be->max_pool_backward(&l->win, l->argmax, dy, batch, dx);
}

static status_t average_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    l->be->average_pool(&l->win, l->in, batch, l->out);
    return STATUS_OK;
}

static void average_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    l->be->average_pool_backward(&l->win, dy, batch, dx);
}

const layer_ops_t layer_max_pooling2d = {
    .plan = max_plan,
    .forward = max_forward,
    .backward_input = max_backward_input,
};

const layer_ops_t layer_average_pooling2d = {
    .plan = pool_plan,
    .forward = average_forward,
    .backward_input = average_backward_input,
};
