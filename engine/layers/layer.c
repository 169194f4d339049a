/* The table of layer kinds and the dispatch the model runs through. */
#define _POSIX_C_SOURCE 200809L
#include "layers/layer.h"

#include <limits.h>
#include <string.h>

#include "model_internal.h"

/* In job_layer_kind_t order. */
static const layer_ops_t *const layer_table[] = {
    [JOB_LAYER_DENSE] = &layer_dense,
    [JOB_LAYER_CONV2D] = &layer_conv2d,
    [JOB_LAYER_MAX_POOLING2D] = &layer_max_pooling2d,
    [JOB_LAYER_AVERAGE_POOLING2D] = &layer_average_pooling2d,
    [JOB_LAYER_FLATTEN] = &layer_flatten,
    [JOB_LAYER_RESHAPE] = &layer_reshape,
    [JOB_LAYER_DROPOUT] = &layer_dropout,
    [JOB_LAYER_EMBEDDING] = &layer_embedding,
    [JOB_LAYER_GLOBAL_AVERAGE_POOLING1D] = &layer_global_average_pooling1d,
    [JOB_LAYER_GLOBAL_AVERAGE_POOLING2D] = &layer_global_average_pooling2d,
    [JOB_LAYER_ACTIVATION] = &layer_activation,
    [JOB_LAYER_RESCALING] = &layer_rescaling,
    [JOB_LAYER_LAYER_NORMALIZATION] = &layer_layer_normalization,
    /* the 1D kinds are their 2D kinds' code on an image of height 1 (the plan tells them apart) */
    [JOB_LAYER_CONV1D] = &layer_conv2d,
    [JOB_LAYER_MAX_POOLING1D] = &layer_max_pooling2d,
    [JOB_LAYER_AVERAGE_POOLING1D] = &layer_average_pooling2d,
    [JOB_LAYER_GLOBAL_MAX_POOLING1D] = &layer_global_max_pooling,
    [JOB_LAYER_GLOBAL_MAX_POOLING2D] = &layer_global_max_pooling,
    [JOB_LAYER_RELU] = &layer_relu,
    [JOB_LAYER_LEAKY_RELU] = &layer_leaky_relu,
    [JOB_LAYER_ELU] = &layer_elu,
    [JOB_LAYER_SOFTMAX] = &layer_activation, /* its activation: softmax */
    [JOB_LAYER_ZERO_PADDING2D] = &layer_zero_padding2d,
    [JOB_LAYER_CROPPING2D] = &layer_cropping2d,
    [JOB_LAYER_UP_SAMPLING2D] = &layer_up_sampling2d,
    [JOB_LAYER_PERMUTE] = &layer_permute,
    [JOB_LAYER_REPEAT_VECTOR] = &layer_repeat_vector,
    [JOB_LAYER_PRELU] = &layer_prelu,
    [JOB_LAYER_SPATIAL_DROPOUT1D] = &layer_spatial_dropout,
    [JOB_LAYER_SPATIAL_DROPOUT2D] = &layer_spatial_dropout,
    [JOB_LAYER_GAUSSIAN_NOISE] = &layer_gaussian_noise,
    [JOB_LAYER_DEPTHWISE_CONV2D] = &layer_depthwise_conv2d,
    [JOB_LAYER_SEPARABLE_CONV2D] = &layer_depthwise_conv2d,
    [JOB_LAYER_ADD] = &layer_merge,
    [JOB_LAYER_SUBTRACT] = &layer_merge,
    [JOB_LAYER_MULTIPLY] = &layer_merge,
    [JOB_LAYER_AVERAGE] = &layer_merge,
    [JOB_LAYER_MAXIMUM] = &layer_merge,
    [JOB_LAYER_MINIMUM] = &layer_merge,
    [JOB_LAYER_CONCATENATE] = &layer_concatenate,
    [JOB_LAYER_BATCH_NORMALIZATION] = &layer_batch_normalization,
};

bool layer_draws(job_layer_kind_t kind)
{
    return kind == JOB_LAYER_DROPOUT || kind == JOB_LAYER_SPATIAL_DROPOUT1D ||
           kind == JOB_LAYER_SPATIAL_DROPOUT2D || kind == JOB_LAYER_GAUSSIAN_NOISE;
}

_Static_assert(sizeof(layer_table) / sizeof(layer_table[0]) == JOB_LAYER_KINDS,
               "every layer kind of the job parser has a row here");

const layer_ops_t *layer_ops(job_layer_kind_t kind)
{
    return layer_table[kind];
}

job_activation_t layer_activation_of(const layer_t *l)
{
    return layer_table[l->spec.kind]->activation ? l->spec.activation : JOB_ACT_LINEAR;
}

status_t layer_plan(model_t *m, layer_t *l, int index, uint64_t seed, status_msg_t *err)
{
    const layer_ops_t *ops = layer_table[l->spec.kind];
    layer_plan_t p = {
        .m = m, .max_batch = m->max_batch, .index = index, .name = l->spec.name, .seed = seed};

    l->be = m->be;
    layer_shape_str(l->in_shape, l->in_rank, p.in_s, sizeof(p.in_s));
    if (layer_shape_len(l->in_shape, l->in_rank) > INT_MAX)
        return layer_plan_error(&p, err, "input %s has more than %d values per example", p.in_s,
                                INT_MAX);
    l->out_rank = l->in_rank;
    memcpy(l->out_shape, l->in_shape, sizeof(l->out_shape));
    l->in_len = layer_shape_len(l->in_shape, l->in_rank);
    l->params = m->params + m->n_params;
    if (ops->plan != NULL)
        STATUS_CHECK(ops->plan(&p, l, err));
    l->n_params = (size_t)(m->params + m->n_params - l->params);
    /* the weights' constraints; an axis past a weight's rank is Keras's error too */
    for (int k = 0; k < 3; k++) {
        model_param_t *w = k == 0 ? l->w : k == 1 ? l->b : l->w2;
        const job_constraint_t *c = k == 0   ? &l->spec.kernel_constraint
                                    : k == 1 ? &l->spec.bias_constraint
                                             : &l->spec.pointwise_constraint;
        if (w == NULL || c->kind == JOB_CONSTRAINT_NONE)
            continue;
        if (c->kind != JOB_CONSTRAINT_NON_NEG && (c->axes >> w->rank) != 0)
            return layer_plan_error(&p, err, "%s's constraint names an axis past its rank %d",
                                    w->name, w->rank);
        w->constraint = *c;
    }
    l->in_len = layer_shape_len(l->in_shape, l->in_rank);
    l->out_len = layer_shape_len(l->out_shape, l->out_rank);
    if (!ops->alias) {
        l->out = layer_floats(m, layer_mul_sat((size_t)m->max_batch, l->out_len));
        if (l->out == NULL)
            return layer_plan_failed(&p, err);
    }
    if (ops->activation && job_activation_needs_input(l->spec.activation)) {
        l->pre = layer_floats(m, layer_mul_sat((size_t)m->max_batch, l->out_len));
        if (l->pre == NULL)
            return layer_plan_failed(&p, err);
    }
    return STATUS_OK;
}

status_t layer_forward(layer_t *l, int batch, bool training, bool skip_activation,
                       status_msg_t *err)
{
    const layer_ops_t *ops = layer_table[l->spec.kind];

    if (ops->alias)
        l->out = (float *)l->in;
    else
        STATUS_CHECK(ops->forward(l, batch, training, err));
    if (!skip_activation && ops->activation && l->spec.activation != JOB_ACT_LINEAR) {
        if (training && l->pre != NULL) /* kept for the gradient */
            l->be->copy(l->pre, l->out, (size_t)batch * l->out_len * sizeof(float));
        l->be->activate(l->spec.activation, l->out, (size_t)batch * l->out_len,
                        (size_t)l->out_shape[l->out_rank - 1]);
    }
    return STATUS_OK;
}

void layer_backward_params(layer_t *l, int batch, float *dy, bool skip_activation)
{
    const layer_ops_t *ops = layer_table[l->spec.kind];

    if (!skip_activation && ops->activation && l->spec.activation != JOB_ACT_LINEAR)
        l->be->activate_backward(l->spec.activation, l->pre, l->out, dy, (size_t)batch * l->out_len,
                                 (size_t)l->out_shape[l->out_rank - 1]);
    if (ops->backward_params != NULL)
        ops->backward_params(l, batch, dy);
}

float *layer_backward_input(layer_t *l, int batch, float *dy, float *dx)
{
    const layer_ops_t *ops = layer_table[l->spec.kind];

    if (ops->no_input_grad)
        return NULL;
    if (ops->backward_input == NULL)
        return dy;
    if (dx != NULL)
        ops->backward_input(l, batch, dy, dx);
    return dx;
}
