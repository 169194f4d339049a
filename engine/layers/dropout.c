/* Dropout: in training, each value is kept with probability 1 - rate and scaled by
 * 1 / (1 - rate), or dropped; outside training the output is the input. */
#include "layers/layer.h"

static status_t dropout_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    const job_layer_t *s = &l->spec;

    if (!(s->rate >= 0 && s->rate < 1))
        return layer_plan_error(p, err, "rate must be in [0, 1), got %g", s->rate);
    l->mask = layer_floats(
        p->m, layer_mul_sat((size_t)p->max_batch, layer_shape_len(l->in_shape, l->in_rank)));
    if (l->mask == NULL)
        return layer_plan_failed(p, err);
    l->rng = s->dropout_seed ? s->dropout_seed : p->seed;
    return STATUS_OK;
}

static status_t dropout_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t n = (size_t)batch * l->in_len;
    float keep = (float)(1.0 - l->spec.rate), scale = 1.0f / keep;

    if (!training || l->spec.rate == 0) {
        l->be->copy(l->out, l->in, n * sizeof(float));
        if (training)
            for (size_t i = 0; i < n; i++)
                l->mask[i] = 1.0f;
        return STATUS_OK;
    }
    /* Drawn in example order: keyed, from the seed and the pass's key alone (the same batch
     * slice drops the same values whoever computes it, whenever); else from the layer's stream,
     * which moves on with every pass. */
    uint64_t keyed = l->rng ^ l->draw_key, *s = l->draw_keyed ? &keyed : &l->rng;
    if (l->draw_keyed)
        keyed = layer_rng_next(&keyed);
    for (size_t i = 0; i < n; i++) {
        double u = (double)(layer_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
        l->mask[i] = u < l->spec.rate ? 0.0f : scale;
    }
    l->be->mul(l->in, l->mask, l->out, n);
    return STATUS_OK;
}

static void dropout_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    l->be->mul(dy, l->mask, dx, (size_t)batch * l->in_len);
}

const layer_ops_t layer_dropout = {
    .plan = dropout_plan,
    .forward = dropout_forward,
    .backward_input = dropout_backward_input,
};
