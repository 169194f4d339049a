/* Flatten and Reshape: the same values under another shape; the output is the input. */
#include "layers/layer.h"

static status_t flatten_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    l->out_rank = 1;
    l->out_shape[0] = (int)layer_shape_len(l->in_shape, l->in_rank);
    return STATUS_OK;
}

/* Keras's target_shape, one axis of which may be -1 (inferred). */
static status_t reshape_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    const job_layer_t *s = &l->spec;
    int infer = -1;
    size_t known = 1, total = layer_shape_len(l->in_shape, l->in_rank);

    l->out_rank = s->target_rank;
    for (int i = 0; i < s->target_rank; i++) {
        l->out_shape[i] = s->target_shape[i];
        if (s->target_shape[i] == -1)
            infer = i;
        else
            known = layer_mul_sat(known, (size_t)(s->target_shape[i] > 0 ? s->target_shape[i] : 0));
    }
    if (infer >= 0 && known > 0 && total % known == 0)
        l->out_shape[infer] = (int)(total / known);
    if (layer_shape_len(l->out_shape, l->out_rank) != total || s->target_rank < 1)
        return layer_plan_error(p, err, "cannot reshape %s to the target shape", p->in_s);
    return STATUS_OK;
}

const layer_ops_t layer_flatten = {.plan = flatten_plan, .alias = true};
const layer_ops_t layer_reshape = {.plan = reshape_plan, .alias = true};
