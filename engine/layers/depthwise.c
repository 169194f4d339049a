/* DepthwiseConv2D and SeparableConv2D (channels last). Depthwise: each input channel c is
 * convolved with its own depth_multiplier filters, kernel [kh, kw, in, dm], output channel
 * c * dm + m. Separable: a depthwise convolution (kernel "depthwise_kernel", no bias), then a
 * pointwise 1x1 convolution (kernel "pointwise_kernel" [1, 1, in * dm, filters]) and the bias,
 * as tf.nn.separable_conv2d. Both run on the im2col columns of Conv2D (row: kh*kw*in values,
 * in (ky, kx, c) order), with loops for the depthwise products and one matrix product for the
 * pointwise one. */
#include <string.h>

#include "job/initializer.h"
#include "layers/layer.h"

static bool separable(const layer_t *l)
{
    return l->spec.kind == JOB_LAYER_SEPARABLE_CONV2D;
}

static size_t dw_params(const job_layer_t *s)
{
    return 1 + (s->kind == JOB_LAYER_SEPARABLE_CONV2D) + (s->use_bias ? 1 : 0);
}

/* Channels out of the depthwise step. */
static int dw_channels(const layer_t *l)
{
    return l->win.c * l->spec.depth_multiplier;
}

static status_t dw_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    const job_layer_t *s = &l->spec;
    backend_window_t *g = &l->win;
    int dm = s->depth_multiplier, kshape[4], pshape[4], bshape[1];
    size_t rows;

    if (l->in_rank != 3)
        return layer_plan_error(p, err, "%s needs input (batch, height, width, channels), got %s",
                                separable(l) ? "SeparableConv2D" : "DepthwiseConv2D", p->in_s);
    *g = (backend_window_t){.h = l->in_shape[0],
                            .w = l->in_shape[1],
                            .c = l->in_shape[2],
                            .kh = s->kernel_size[0],
                            .kw = s->kernel_size[1],
                            .sh = s->strides[0] > 0 ? s->strides[0] : 1,
                            .sw = s->strides[1] > 0 ? s->strides[1] : 1};
    g->oh = layer_window_out(g->h, g->kh, g->sh, s->padding_same, &g->pad_t);
    g->ow = layer_window_out(g->w, g->kw, g->sw, s->padding_same, &g->pad_l);
    if (g->oh <= 0 || g->ow <= 0 || dm <= 0)
        return layer_plan_error(p, err, "a %dx%d kernel does not fit input %s", g->kh, g->kw,
                                p->in_s);
    if ((int64_t)g->c * dm > INT32_MAX)
        return layer_plan_error(p, err, "depth_multiplier %d is too large for input %s", dm,
                                p->in_s);
    l->out_shape[0] = g->oh;
    l->out_shape[1] = g->ow;
    l->out_shape[2] = separable(l) ? s->filters : g->c * dm;
    kshape[0] = g->kh, kshape[1] = g->kw, kshape[2] = g->c, kshape[3] = dm;
    l->w = layer_add_param(p, separable(l) ? "depthwise_kernel" : "kernel", kshape, 4, false,
                           &s->kernel_init, JOB_INIT_GLOROT_UNIFORM);
    if (l->w == NULL)
        return layer_plan_failed(p, err);
    initializer_fill(&s->kernel_init, JOB_INIT_GLOROT_UNIFORM, l->w->value, l->w->n,
                     (double)g->kh * g->kw * g->c, (double)g->kh * g->kw * dm, p->seed);
    if (separable(l)) {
        pshape[0] = pshape[1] = 1, pshape[2] = g->c * dm, pshape[3] = s->filters;
        l->w2 = layer_add_param(p, "pointwise_kernel", pshape, 4, false, &s->pointwise_init,
                                JOB_INIT_GLOROT_UNIFORM);
        if (l->w2 == NULL)
            return layer_plan_failed(p, err);
        initializer_fill(&s->pointwise_init, JOB_INIT_GLOROT_UNIFORM, l->w2->value, l->w2->n,
                         (double)g->c * dm, (double)s->filters, p->seed + 2);
    }
    if (s->use_bias) {
        bshape[0] = l->out_shape[2];
        l->b = layer_add_param(p, "bias", bshape, 1, false, &s->bias_init, JOB_INIT_ZEROS);
        if (l->b == NULL)
            return layer_plan_failed(p, err);
        initializer_fill(&s->bias_init, JOB_INIT_ZEROS, l->b->value, l->b->n, 1, 1, p->seed + 1);
    }
    rows = layer_mul_sat((size_t)p->max_batch * g->oh, (size_t)g->ow);
    l->cols = layer_floats(p->m, layer_mul_sat(rows, (size_t)g->kh * g->kw * g->c));
    if (l->cols == NULL)
        return layer_plan_failed(p, err);
    if (separable(l)) { /* the depthwise step's output, then its gradient */
        l->mid = layer_floats(p->m, layer_mul_sat(rows, (size_t)g->c * dm));
        l->dmid = layer_floats(p->m, layer_mul_sat(rows, (size_t)g->c * dm));
        if (l->mid == NULL || l->dmid == NULL)
            return layer_plan_failed(p, err);
    }
    return STATUS_OK;
}

/* out[row, c*dm + m] = sum over the window p of cols[row, p*C + c] * K[p, c, m] (+ bias). */
static void depthwise(const layer_t *l, int rows, const float *bias, float *out)
{
    const backend_window_t *g = &l->win;
    int C = g->c, dm = l->spec.depth_multiplier, taps = g->kh * g->kw, oc = C * dm;
    const float *k = l->w->value;

    for (int r = 0; r < rows; r++) {
        const float *col = l->cols + (size_t)r * taps * C;
        float *o = out + (size_t)r * oc;
        for (int j = 0; j < oc; j++)
            o[j] = bias ? bias[j] : 0.0f;
        for (int p = 0; p < taps; p++)
            for (int c = 0; c < C; c++) {
                float x = col[p * C + c];
                const float *kk = k + ((size_t)p * C + c) * dm;
                for (int m = 0; m < dm; m++)
                    o[c * dm + m] += x * kk[m];
            }
    }
}

static status_t dw_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    const backend_window_t *g = &l->win;
    int rows = batch * g->oh * g->ow, oc = dw_channels(l), filters = l->spec.filters;

    (void)training, (void)err;
    l->be->im2col(g, l->in, batch, l->cols);
    if (!separable(l)) {
        depthwise(l, rows, l->b ? l->b->value : NULL, l->out);
        return STATUS_OK;
    }
    depthwise(l, rows, NULL, l->mid);
    l->be->fill_rows(l->out, (size_t)rows, l->b ? l->b->value : NULL, (size_t)filters);
    l->be->gemm(false, false, rows, filters, oc, 1.0f, l->mid, oc, l->w2->value, filters, 1.0f,
                l->out, filters);
    return STATUS_OK;
}

/* dK[p, c, m] = sum over rows of cols[row, p*C + c] * d[row, c*dm + m], d the gradient of the
 * depthwise step's output. */
static void depthwise_kernel_grad(layer_t *l, int rows, const float *d)
{
    const backend_window_t *g = &l->win;
    int C = g->c, dm = l->spec.depth_multiplier, taps = g->kh * g->kw, oc = C * dm;
    float *dk = l->w->grad;

    memset(dk, 0, l->w->n * sizeof(float));
    for (int r = 0; r < rows; r++) {
        const float *col = l->cols + (size_t)r * taps * C, *dr = d + (size_t)r * oc;
        for (int p = 0; p < taps; p++)
            for (int c = 0; c < C; c++) {
                float x = col[p * C + c];
                float *kk = dk + ((size_t)p * C + c) * dm;
                for (int m = 0; m < dm; m++)
                    kk[m] += x * dr[c * dm + m];
            }
    }
}

static void dw_backward_params(layer_t *l, int batch, const float *dy)
{
    const backend_window_t *g = &l->win;
    int rows = batch * g->oh * g->ow, oc = dw_channels(l), filters = l->spec.filters;

    if (l->b != NULL)
        l->be->column_sums(dy, (size_t)rows, (size_t)(separable(l) ? filters : oc), l->b->grad);
    if (!separable(l)) {
        depthwise_kernel_grad(l, rows, dy);
        return;
    }
    /* pointwise: dP = mid^T dy; the depthwise step's gradient dmid = dy P^T */
    l->be->gemm(true, false, oc, filters, rows, 1.0f, l->mid, oc, dy, filters, 0.0f, l->w2->grad,
                filters);
    l->be->gemm(false, true, rows, oc, filters, 1.0f, dy, filters, l->w2->value, filters, 0.0f,
                l->dmid, oc);
    depthwise_kernel_grad(l, rows, l->dmid);
}

static void dw_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    const backend_window_t *g = &l->win;
    int C = g->c, dm = l->spec.depth_multiplier, taps = g->kh * g->kw, oc = C * dm;
    int rows = batch * g->oh * g->ow;
    const float *k = l->w->value, *d = separable(l) ? l->dmid : dy;

    /* dcols[row, p*C + c] = sum over m of K[p, c, m] * d[row, c*dm + m], into the columns */
    for (int r = 0; r < rows; r++) {
        float *col = l->cols + (size_t)r * taps * C;
        const float *dr = d + (size_t)r * oc;
        for (int p = 0; p < taps; p++)
            for (int c = 0; c < C; c++) {
                const float *kk = k + ((size_t)p * C + c) * dm;
                float s = 0;
                for (int m = 0; m < dm; m++)
                    s += kk[m] * dr[c * dm + m];
                col[p * C + c] = s;
            }
    }
    l->be->col2im(g, l->cols, batch, dx);
}

const layer_ops_t layer_depthwise_conv2d = {
    .param_count = dw_params,
    .plan = dw_plan,
    .forward = dw_forward,
    .backward_params = dw_backward_params,
    .backward_input = dw_backward_input,
    .activation = true,
};
