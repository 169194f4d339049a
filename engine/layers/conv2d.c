/* Conv2D: im2col, then one matrix product with the kernel [kh, kw, in, filters]; or, where the
 * backend has them for the shape (conv_fits: on the CPU, 16 to 64 filters over 16k channels),
 * the backend's direct kernels over a zero-padded copy of the input, without columns. Conv1D
 * is the same on an image of height 1: input (steps, channels), kernel [k, in, filters]
 * (Keras's shape, the same floats as [1, k, in, filters]). */
#include "job/initializer.h"
#include "layers/layer.h"

static size_t conv_params(const job_layer_t *s)
{
    return s->use_bias ? 2 : 1;
}

static status_t conv_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    const job_layer_t *s = &l->spec;
    backend_window_t *g = &l->win;
    int kshape[4], bshape[1] = {s->filters};

    bool one_d = s->kind == JOB_LAYER_CONV1D;

    if (one_d && l->in_rank != 2)
        return layer_plan_error(p, err, "Conv1D needs input (batch, steps, channels), got %s",
                                p->in_s);
    if (!one_d && l->in_rank != 3)
        return layer_plan_error(
            p, err, "Conv2D needs input (batch, height, width, channels), got %s", p->in_s);
    *g = (backend_window_t){.h = one_d ? 1 : l->in_shape[0],
                            .w = l->in_shape[one_d ? 0 : 1],
                            .c = l->in_shape[one_d ? 1 : 2],
                            .kh = s->kernel_size[0],
                            .kw = s->kernel_size[1],
                            .sh = s->strides[0] > 0 ? s->strides[0] : 1,
                            .sw = s->strides[1] > 0 ? s->strides[1] : 1};
    g->oh = layer_window_out(g->h, g->kh, s->strides[0], s->padding_same, &g->pad_t);
    g->ow = layer_window_out(g->w, g->kw, s->strides[1], s->padding_same, &g->pad_l);
    if (g->oh <= 0 || g->ow <= 0 || s->filters <= 0)
        return layer_plan_error(p, err, "a %dx%d kernel does not fit input %s", g->kh, g->kw,
                                p->in_s);
    if (one_d) {
        l->out_shape[0] = g->ow;
        l->out_shape[1] = s->filters;
        kshape[0] = g->kw, kshape[1] = g->c, kshape[2] = s->filters;
    } else {
        l->out_shape[0] = g->oh;
        l->out_shape[1] = g->ow;
        l->out_shape[2] = s->filters;
        kshape[0] = g->kh, kshape[1] = g->kw, kshape[2] = g->c, kshape[3] = s->filters;
    }
    l->w = layer_add_param(p, "kernel", kshape, one_d ? 3 : 4, false, &s->kernel_init,
                           JOB_INIT_GLOROT_UNIFORM);
    if (l->w == NULL)
        return layer_plan_failed(p, err);
    initializer_fill(&s->kernel_init, JOB_INIT_GLOROT_UNIFORM, l->w->value, l->w->n,
                     (double)g->kh * g->kw * g->c, (double)g->kh * g->kw * s->filters, p->seed);
    if (s->use_bias) {
        l->b = layer_add_param(p, "bias", bshape, 1, false, &s->bias_init, JOB_INIT_ZEROS);
        if (l->b == NULL)
            return layer_plan_failed(p, err);
        initializer_fill(&s->bias_init, JOB_INIT_ZEROS, l->b->value, l->b->n, 1, 1, p->seed + 1);
    }
    size_t cols = layer_mul_sat(layer_mul_sat((size_t)p->max_batch * g->oh, (size_t)g->ow),
                                (size_t)g->kh * g->kw * g->c);
    /* direct where the padded copy is no bigger than the columns (a 1x1 kernel of stride 2
     * reads a quarter of its input: im2col copies less) */
    if (l->be->conv_fits != NULL && l->be->conv_fits(g, s->filters) &&
        l->be->conv_pad_floats(g, p->max_batch) <= cols) {
        l->pad = layer_floats(p->m, l->be->conv_pad_floats(g, p->max_batch));
        l->wt = layer_floats(p->m, (size_t)g->kh * g->kw * g->c * (size_t)s->filters);
        return l->pad != NULL && l->wt != NULL ? STATUS_OK : layer_plan_failed(p, err);
    }
    l->cols = layer_floats(p->m, cols);
    return l->cols != NULL ? STATUS_OK : layer_plan_failed(p, err);
}

static status_t conv_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    const backend_window_t *g = &l->win;
    int k = g->kh * g->kw * g->c, rows = batch * g->oh * g->ow, filters = l->spec.filters;

    if (l->pad != NULL)
        l->be->conv_pad(g, l->in, batch, l->pad);
    else
        l->be->im2col(g, l->in, batch, l->cols);
    l->be->fill_rows(l->out, (size_t)rows, l->b ? l->b->value : NULL, (size_t)filters);
    if (l->pad != NULL)
        l->be->conv_forward(g, l->pad, batch, l->w->value, filters, l->out);
    else
        l->be->gemm(false, false, rows, filters, k, 1.0f, l->cols, k, l->w->value, filters, 1.0f,
                    l->out, filters);
    return STATUS_OK;
}

static void conv_backward_params(layer_t *l, int batch, const float *dy)
{
    const backend_window_t *g = &l->win;
    int k = g->kh * g->kw * g->c, rows = batch * g->oh * g->ow, filters = l->spec.filters;

    if (l->pad != NULL)
        l->be->conv_grad_kernel(g, l->pad, batch, dy, filters, l->w->grad);
    else
        l->be->gemm(true, false, k, filters, rows, 1.0f, l->cols, k, dy, filters, 0.0f, l->w->grad,
                    filters);
    if (l->b != NULL)
        l->be->column_sums(dy, (size_t)rows, (size_t)filters, l->b->grad);
}

static void conv_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    const backend_window_t *g = &l->win;
    int k = g->kh * g->kw * g->c, rows = batch * g->oh * g->ow, filters = l->spec.filters;

    /* The columns (the padded input) are no longer needed: reuse them for their gradient. */
    if (l->pad != NULL) {
        l->be->conv_grad_input(g, dy, batch, l->w->value, filters, l->wt, l->pad, dx);
        return;
    }
    l->be->gemm(false, true, rows, k, filters, 1.0f, dy, filters, l->w->value, filters, 0.0f,
                l->cols, k);
    l->be->col2im(g, l->cols, batch, dx);
}

const layer_ops_t layer_conv2d = {
    .param_count = conv_params,
    .plan = conv_plan,
    .forward = conv_forward,
    .backward_params = conv_backward_params,
    .backward_input = conv_backward_input,
    .activation = true,
};
