/* LayerNormalization over the last axis, as Keras 3 computes it: each row x of C values (every
 * position of every example) becomes gamma * (x - mean) / sqrt(variance + epsilon) + beta, with
 * the row's mean and biased variance; gamma (scale) and beta (center) are trainable [C] vectors.
 * The normalized rows and each row's 1 / sqrt(variance + epsilon) are kept for backward:
 *   dgamma = sum over rows of dy * xhat, dbeta = sum of dy;
 *   dx = inv / C * (C g - sum(g) - xhat * sum(g * xhat)), g = dy * gamma. */
#include <math.h>

#include "job/initializer.h"
#include "layers/layer.h"

status_t layer_add_gamma_beta(layer_plan_t *p, layer_t *l, int c, status_msg_t *err)
{
    const job_layer_t *s = &l->spec;
    int shape[1] = {c};

    if (s->scale_gamma) {
        l->w = layer_add_param(p, "gamma", shape, 1, false, &s->kernel_init, JOB_INIT_ONES);
        if (l->w == NULL)
            return layer_plan_failed(p, err);
        initializer_fill(&s->kernel_init, JOB_INIT_ONES, l->w->value, l->w->n, 1, 1, p->seed);
    }
    if (s->center) {
        l->b = layer_add_param(p, "beta", shape, 1, false, &s->bias_init, JOB_INIT_ZEROS);
        if (l->b == NULL)
            return layer_plan_failed(p, err);
        initializer_fill(&s->bias_init, JOB_INIT_ZEROS, l->b->value, l->b->n, 1, 1, p->seed + 1);
    }
    return STATUS_OK;
}

static size_t norm_params(const job_layer_t *s)
{
    return (size_t)s->scale_gamma + (size_t)s->center;
}

static int norm_width(const layer_t *l)
{
    return l->in_shape[l->in_rank - 1];
}

static size_t norm_rows(const layer_t *l, int batch)
{
    return (size_t)batch * l->in_len / (size_t)norm_width(l);
}

static status_t norm_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    int c = l->in_shape[l->in_rank - 1];
    size_t len = layer_shape_len(l->in_shape, l->in_rank);

    STATUS_CHECK(layer_add_gamma_beta(p, l, c, err));
    l->xhat = layer_floats(p->m, layer_mul_sat((size_t)p->max_batch, len));
    l->inv_std = layer_floats(p->m, layer_mul_sat((size_t)p->max_batch, len / (size_t)c));
    if (l->xhat == NULL || l->inv_std == NULL)
        return layer_plan_failed(p, err);
    return STATUS_OK;
}

static status_t norm_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t c = (size_t)norm_width(l), rows = norm_rows(l, batch);
    const float *gamma = l->w ? l->w->value : NULL, *beta = l->b ? l->b->value : NULL;
    double eps = l->spec.epsilon;

    (void)training, (void)err;
    for (size_t r = 0; r < rows; r++) {
        const float *x = l->in + r * c;
        float *xh = l->xhat + r * c, *y = l->out + r * c, inv;
        double sum = 0, sq = 0, mean;
        for (size_t i = 0; i < c; i++)
            sum += x[i];
        mean = sum / (double)c;
        for (size_t i = 0; i < c; i++)
            sq += ((double)x[i] - mean) * ((double)x[i] - mean);
        inv = (float)(1.0 / sqrt(sq / (double)c + eps));
        l->inv_std[r] = inv;
        for (size_t i = 0; i < c; i++) {
            xh[i] = (float)((double)x[i] - mean) * inv;
            y[i] = xh[i] * (gamma ? gamma[i] : 1.0f) + (beta ? beta[i] : 0.0f);
        }
    }
    return STATUS_OK;
}

static void norm_backward_params(layer_t *l, int batch, const float *dy)
{
    size_t c = (size_t)norm_width(l), rows = norm_rows(l, batch);
    float *dg = l->w ? l->w->grad : NULL, *db = l->b ? l->b->grad : NULL;

    for (size_t i = 0; i < c; i++) {
        if (dg != NULL)
            dg[i] = 0;
        if (db != NULL)
            db[i] = 0;
    }
    for (size_t r = 0; r < rows; r++) {
        const float *d = dy + r * c, *xh = l->xhat + r * c;
        for (size_t i = 0; i < c; i++) {
            if (dg != NULL)
                dg[i] += d[i] * xh[i];
            if (db != NULL)
                db[i] += d[i];
        }
    }
}

static void norm_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t c = (size_t)norm_width(l), rows = norm_rows(l, batch);
    const float *gamma = l->w ? l->w->value : NULL;

    for (size_t r = 0; r < rows; r++) {
        const float *d = dy + r * c, *xh = l->xhat + r * c;
        float *out = dx + r * c;
        double sum_g = 0, sum_gx = 0;
        float k;
        for (size_t i = 0; i < c; i++) {
            double g = (double)d[i] * (gamma ? gamma[i] : 1.0f);
            sum_g += g;
            sum_gx += g * xh[i];
        }
        k = l->inv_std[r] / (float)c;
        for (size_t i = 0; i < c; i++) {
            float g = d[i] * (gamma ? gamma[i] : 1.0f);
            out[i] = k * ((float)c * g - (float)sum_g - xh[i] * (float)sum_gx);
        }
    }
}

const layer_ops_t layer_layer_normalization = {
    .param_count = norm_params,
    .plan = norm_plan,
    .forward = norm_forward,
    .backward_params = norm_backward_params,
    .backward_input = norm_backward_input,
};
