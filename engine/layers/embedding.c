/* Embedding: each token id selects a row of the table [input_dim, output_dim]. Its gradient is
 * sparse: one row per distinct id of the batch (model_param_t's rows_*). It reads a model input;
 * a shared one (several calls, each on an input of its own) sums its calls' rows (step.c).
 * With mask_zero, id 0 is padding: the layer keeps the mask of each example's steps, which the
 * model hands to the layers that use it (model.c). */
#include <string.h>

#include "job/initializer.h"
#include "layers/layer.h"

static size_t embedding_params(const job_layer_t *s)
{
    return 1;
}

static status_t embedding_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    const job_layer_t *s = &l->spec;
    int shape[2] = {s->input_dim, s->output_dim};
    job_init_t dflt = {.kind = JOB_INIT_RANDOM_UNIFORM, .a = -0.05, .b = 0.05};
    size_t max_rows;

    if (l->src[0] >= 0) /* its ids are one of the model's inputs */
        return layer_plan_error(p, err, "an Embedding reads one of the model's inputs");
    if (s->input_dim <= 0 || s->output_dim <= 0)
        return layer_plan_error(p, err, "input_dim and output_dim must be positive");
    l->out_rank = l->in_rank + 1;
    l->out_shape[l->in_rank] = s->output_dim;
    l->w =
        layer_add_param(p, "embeddings", shape, 2, true, &s->kernel_init, JOB_INIT_RANDOM_UNIFORM);
    if (l->w == NULL)
        return layer_plan_failed(p, err);
    initializer_fill(s->kernel_init.kind == JOB_INIT_DEFAULT ? &dflt : &s->kernel_init,
                     JOB_INIT_RANDOM_UNIFORM, l->w->value, l->w->n, 1, 1, p->seed);
    max_rows = layer_mul_sat((size_t)p->max_batch, layer_shape_len(l->in_shape, l->in_rank));
    l->rows_cap = max_rows;
    l->w->rows_index = layer_alloc(p->m, max_rows, sizeof(int64_t));
    l->w->rows_grad = layer_floats(p->m, layer_mul_sat(max_rows, (size_t)s->output_dim));
    l->slot_of_row = layer_alloc(p->m, (size_t)s->input_dim, sizeof(int32_t));
    l->ids = layer_alloc(p->m, max_rows, sizeof(int64_t));
    l->slots = layer_alloc(p->m, max_rows, sizeof(int32_t));
    if (s->mask_zero) /* a step is kept (1) unless its id is 0 */
        l->mask = layer_floats(p->m, max_rows);
    if (!l->w->rows_index || !l->w->rows_grad || !l->slot_of_row || !l->ids || !l->slots ||
        (s->mask_zero && l->mask == NULL))
        return layer_plan_failed(p, err);
    for (int i = 0; i < s->input_dim; i++)
        l->slot_of_row[i] = -1;
    return STATUS_OK;
}

/* The ids come as floats (the features); each must be a whole number in the vocabulary. */
static status_t embedding_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t n = (size_t)batch * l->in_len;

    for (size_t i = 0; i < n; i++) {
        float f = l->in[i];
        int64_t id = (int64_t)f;
        if (!(f >= 0) || (float)id != f || id >= l->spec.input_dim)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "layer %s: token id %g of example %zu is outside the vocabulary "
                               "[0, %d)",
                               l->spec.name, (double)f, i / l->in_len, l->spec.input_dim);
        l->ids[i] = id;
        if (l->mask != NULL)
            l->mask[i] = id != 0 ? 1.0f : 0.0f;
    }
    l->be->gather_rows(l->w->value, (size_t)l->spec.output_dim, l->ids, n, l->out);
    return STATUS_OK;
}

/* Gives each distinct id of the batch a slot in rows_index, then sums the gradient rows of
 * each id into its slot. */
static void embedding_backward_params(layer_t *l, int batch, const float *dy)
{
    model_param_t *p = l->w;
    size_t n = (size_t)batch * l->in_len, dim = (size_t)l->spec.output_dim;

    p->n_rows = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t id = l->ids[i];
        int32_t slot = l->slot_of_row[id];
        if (slot < 0) {
            slot = (int32_t)p->n_rows++;
            l->slot_of_row[id] = slot;
            p->rows_index[slot] = id;
        }
        l->slots[i] = slot;
    }
    for (size_t s = 0; s < p->n_rows; s++)
        l->slot_of_row[p->rows_index[s]] = -1;
    l->be->zero(p->rows_grad, p->n_rows * dim * sizeof(float));
    l->be->scatter_add_rows(dy, dim, l->slots, n, p->rows_grad);
}

const layer_ops_t layer_embedding = {
    .param_count = embedding_params,
    .plan = embedding_plan,
    .forward = embedding_forward,
    .backward_params = embedding_backward_params,
    .no_input_grad = true,
};
