/* Dropout: in training, each value is kept with probability 1 - rate and scaled by
 * 1 / (1 - rate), or dropped; outside training the output is the input. SpatialDropout1D and 2D
 * keep or drop whole channels (a draw per example and channel, shared by every step or pixel).
 * GaussianNoise adds stddev times a standard normal draw to each value in training (its
 * gradient is the output's). All draw from the same keyed streams (model_set_draw_key). */
#include <math.h>

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
    if (s->kind == JOB_LAYER_SPATIAL_DROPOUT1D && l->in_rank != 2)
        return layer_plan_error(p, err,
                                "SpatialDropout1D needs input (batch, steps, channels), "
                                "got %s",
                                p->in_s);
    if (s->kind == JOB_LAYER_SPATIAL_DROPOUT2D && l->in_rank != 3)
        return layer_plan_error(p, err,
                                "SpatialDropout2D needs input (batch, height, width, "
                                "channels), got %s",
                                p->in_s);
    return STATUS_OK;
}

/* This pass's stream: keyed, from the seed and the pass's key alone (the same batch slice draws
 * the same values whoever computes it, whenever); else the layer's own, which moves on with
 * every pass. */
static uint64_t *draw_stream(layer_t *l, uint64_t *keyed)
{
    if (!l->draw_keyed)
        return &l->rng;
    *keyed = l->rng ^ l->draw_key;
    *keyed = layer_rng_next(keyed);
    return keyed;
}

static double uniform(uint64_t *s)
{
    return (double)(layer_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
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
    uint64_t keyed, *s = draw_stream(l, &keyed);
    if (l->spec.kind == JOB_LAYER_DROPOUT) {
        for (size_t i = 0; i < n; i++) /* in example order */
            l->mask[i] = uniform(s) < l->spec.rate ? 0.0f : scale;
    } else { /* a draw per example and channel, spread over its steps or pixels */
        size_t c = (size_t)l->in_shape[l->in_rank - 1], places = l->in_len / c;
        for (int b = 0; b < batch; b++) {
            float *m = l->mask + (size_t)b * l->in_len;
            for (size_t k = 0; k < c; k++)
                m[k] = uniform(s) < l->spec.rate ? 0.0f : scale;
            for (size_t p = 1; p < places; p++)
                for (size_t k = 0; k < c; k++)
                    m[p * c + k] = m[k];
        }
    }
    l->be->mul(l->in, l->mask, l->out, n);
    return STATUS_OK;
}

static status_t noise_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t n = (size_t)batch * l->in_len;
    uint64_t keyed, *s;

    (void)err;
    if (!training || l->spec.stddev == 0) {
        l->be->copy(l->out, l->in, n * sizeof(float));
        return STATUS_OK;
    }
    s = draw_stream(l, &keyed);
    for (size_t i = 0; i < n; i += 2) { /* Box-Muller: two normal draws from two uniform ones */
        double u1 = 1.0 - uniform(s), u2 = uniform(s), r = sqrt(-2.0 * log(u1));
        l->out[i] = l->in[i] + (float)(l->spec.stddev * r * cos(2.0 * M_PI * u2));
        if (i + 1 < n)
            l->out[i + 1] = l->in[i + 1] + (float)(l->spec.stddev * r * sin(2.0 * M_PI * u2));
    }
    return STATUS_OK;
}

static status_t noise_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    (void)err;
    l->rng = l->spec.dropout_seed ? l->spec.dropout_seed : p->seed;
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

const layer_ops_t layer_spatial_dropout = {
    .plan = dropout_plan,
    .forward = dropout_forward,
    .backward_input = dropout_backward_input,
};

const layer_ops_t layer_gaussian_noise = {.plan = noise_plan, .forward = noise_forward};
