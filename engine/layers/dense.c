/* Dense: out = activation(in . kernel + bias), over the last axis of the input. */
#include "job/initializer.h"
#include "layers/layer.h"

static size_t dense_params(const job_layer_t *s)
{
    return s->use_bias ? 2 : 1;
}

static status_t dense_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    const job_layer_t *s = &l->spec;
    int in = l->in_shape[l->in_rank - 1];
    int kshape[2] = {in, s->units}, bshape[1] = {s->units};

    if (s->units <= 0)
        return layer_plan_error(p, err, "units must be positive");
    l->out_shape[l->out_rank - 1] = s->units;
    l->w = layer_add_param(p, "kernel", kshape, 2, false, &s->kernel_init, JOB_INIT_GLOROT_UNIFORM);
    if (l->w == NULL)
        return layer_plan_failed(p, err);
    initializer_fill(&s->kernel_init, JOB_INIT_GLOROT_UNIFORM, l->w->value, l->w->n, in, s->units,
                     p->seed);
    if (s->use_bias) {
        l->b = layer_add_param(p, "bias", bshape, 1, false, &s->bias_init, JOB_INIT_ZEROS);
        if (l->b == NULL)
            return layer_plan_failed(p, err);
        initializer_fill(&s->bias_init, JOB_INIT_ZEROS, l->b->value, l->b->n, 1, 1, p->seed + 1);
    }
    return STATUS_OK;
}

/* Rows of the product: the examples times every axis before the last. */
static int dense_rows(const layer_t *l, int batch)
{
    return (int)((size_t)batch * l->in_len / (size_t)l->in_shape[l->in_rank - 1]);
}

static status_t dense_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    int in = l->in_shape[l->in_rank - 1], units = l->spec.units, rows = dense_rows(l, batch);

    l->be->fill_rows(l->out, (size_t)rows, l->b ? l->b->value : NULL, (size_t)units);
    l->be->gemm(false, false, rows, units, in, 1.0f, l->in, in, l->w->value, units, 1.0f, l->out,
                units);
    return STATUS_OK;
}

static void dense_backward_params(layer_t *l, int batch, const float *dy)
{
    int in = l->in_shape[l->in_rank - 1], units = l->spec.units, rows = dense_rows(l, batch);

    l->be->gemm(true, false, in, units, rows, 1.0f, l->in, in, dy, units, 0.0f, l->w->grad, units);
    if (l->b != NULL)
        l->be->column_sums(dy, (size_t)rows, (size_t)units, l->b->grad);
}

static void dense_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    int in = l->in_shape[l->in_rank - 1], units = l->spec.units, rows = dense_rows(l, batch);

    l->be->gemm(false, true, rows, in, units, 1.0f, dy, units, l->w->value, units, 0.0f, dx, in);
}

const layer_ops_t layer_dense = {
    .param_count = dense_params,
    .plan = dense_plan,
    .forward = dense_forward,
    .backward_params = dense_backward_params,
    .backward_input = dense_backward_input,
    .activation = true,
};
