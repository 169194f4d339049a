/* BatchNormalization over the last axis, as Keras 3 computes it. Training normalizes each of the
 * C channels by the batch's statistics over every other axis (N values: the examples and their
 * positions), mean and biased variance; inference by the moving statistics:
 *   y = gamma * (x - mean) / sqrt(variance + epsilon) + beta.
 * gamma (scale) and beta (center) are trainable [C] vectors; moving_mean and moving_variance are
 * variables the optimizer does not train (model_param_t.moving): a training pass hands the
 * batch's statistics over as their "gradient", share-weighted like a gradient so that replicas'
 * and workers' sums are their mean, and the update is Keras's moving average
 *   moving = moving * momentum + statistic * (1 - momentum).
 * Backward, with xhat the normalized input and g = dy:
 *   dgamma = sum g * xhat, dbeta = sum g,
 *   dx = gamma * inv / N * (N g - sum g - xhat * sum(g * xhat)), inv = 1 / sqrt(var + eps). */
#include <math.h>
#include <string.h>

#include "job/initializer.h"
#include "layers/layer.h"

static size_t bn_params(const job_layer_t *s)
{
    return (size_t)s->scale_gamma + (size_t)s->center + 2;
}

static size_t bn_channels(const layer_t *l)
{
    return (size_t)l->in_shape[l->in_rank - 1];
}

/* Rows of C values in a batch: the examples times their positions. */
static size_t bn_rows(const layer_t *l, int batch)
{
    return (size_t)batch * (l->in_len / bn_channels(l));
}

static status_t bn_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    const job_layer_t *s = &l->spec;
    int c = l->in_shape[l->in_rank - 1], shape[1] = {c};
    size_t len = layer_shape_len(l->in_shape, l->in_rank);
    model_param_t *stat[2];

    if (s->axis != -1 && s->axis != l->in_rank)
        return layer_plan_error(p, err,
                                "axis %d is not the last axis of its input %s (only the last is "
                                "supported)",
                                s->axis, p->in_s);
    STATUS_CHECK(layer_add_gamma_beta(p, l, c, err));
    for (int k = 0; k < 2; k++) {
        const job_init_t *init = k == 0 ? &s->moving_mean_init : &s->moving_variance_init;
        job_init_kind_t dflt = k == 0 ? JOB_INIT_ZEROS : JOB_INIT_ONES;
        stat[k] = layer_add_param(p, k == 0 ? "moving_mean" : "moving_variance", shape, 1, false,
                                  init, dflt);
        if (stat[k] == NULL)
            return layer_plan_failed(p, err);
        initializer_fill(init, dflt, stat[k]->value, stat[k]->n, 1, 1, p->seed + 2 + (uint64_t)k);
        stat[k]->moving = true;
        stat[k]->momentum = (float)s->momentum;
        stat[k]->rest = (float)(1.0 - s->momentum);
    }
    l->xhat = layer_floats(p->m, layer_mul_sat((size_t)p->max_batch, len));
    l->inv_std = layer_floats(p->m, (size_t)c);
    l->batch_mean = layer_floats(p->m, (size_t)c);
    l->batch_var = layer_floats(p->m, (size_t)c);
    l->sums = layer_alloc(p->m, 3 * (size_t)c, sizeof(double));
    if (l->xhat == NULL || l->inv_std == NULL || l->batch_mean == NULL || l->batch_var == NULL ||
        l->sums == NULL)
        return layer_plan_failed(p, err);
    return STATUS_OK;
}

/* The moving statistics: the layer's last two parameters. */
static model_param_t *bn_moving(const layer_t *l, int k)
{
    return l->params + l->n_params - 2 + k;
}

static status_t bn_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t c = bn_channels(l), rows = bn_rows(l, batch);
    const float *gamma = l->w ? l->w->value : NULL, *beta = l->b ? l->b->value : NULL;
    double eps = l->spec.epsilon;

    (void)err;
    if (training) { /* the batch's statistics, per channel, summed in double row by row */
        double *sum = l->sums, *sq = l->sums + c;
        for (size_t i = 0; i < c; i++)
            sum[i] = sq[i] = 0;
        for (size_t r = 0; r < rows; r++)
            for (size_t i = 0; i < c; i++)
                sum[i] += l->in[r * c + i];
        for (size_t i = 0; i < c; i++)
            sum[i] /= (double)rows; /* the mean */
        for (size_t r = 0; r < rows; r++)
            for (size_t i = 0; i < c; i++) {
                double d = (double)l->in[r * c + i] - sum[i];
                sq[i] += d * d;
            }
        for (size_t i = 0; i < c; i++) {
            l->batch_mean[i] = (float)sum[i];
            l->batch_var[i] = (float)(sq[i] / (double)rows);
            l->inv_std[i] = (float)(1.0 / sqrt(sq[i] / (double)rows + eps));
        }
    } else {
        const float *mm = bn_moving(l, 0)->value, *mv = bn_moving(l, 1)->value;
        for (size_t i = 0; i < c; i++) {
            l->batch_mean[i] = mm[i];
            l->inv_std[i] = (float)(1.0 / sqrt((double)mv[i] + eps));
        }
    }
    for (size_t r = 0; r < rows; r++) {
        const float *x = l->in + r * c;
        float *xh = l->xhat + r * c, *y = l->out + r * c;
        for (size_t i = 0; i < c; i++) {
            xh[i] = (x[i] - l->batch_mean[i]) * l->inv_std[i];
            y[i] = xh[i] * (gamma ? gamma[i] : 1.0f) + (beta ? beta[i] : 0.0f);
        }
    }
    return STATUS_OK;
}

/* Per channel: sum of dy into l->sums[0..c), of dy * xhat into l->sums[c..2c). */
static void bn_dy_sums(layer_t *l, size_t c, size_t rows, const float *dy)
{
    double *sg = l->sums, *sgx = l->sums + c;

    for (size_t i = 0; i < c; i++)
        sg[i] = sgx[i] = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < c; i++) {
            sg[i] += dy[r * c + i];
            sgx[i] += (double)dy[r * c + i] * l->xhat[r * c + i];
        }
}

static void bn_backward_params(layer_t *l, int batch, const float *dy)
{
    size_t c = bn_channels(l), rows = bn_rows(l, batch);
    float *dg = l->w ? l->w->grad : NULL, *db = l->b ? l->b->grad : NULL;
    float *mean_g = bn_moving(l, 0)->grad, *var_g = bn_moving(l, 1)->grad;

    bn_dy_sums(l, c, rows, dy); /* kept for bn_backward_input, which follows */
    for (size_t i = 0; i < c; i++) {
        if (dg != NULL)
            dg[i] = (float)l->sums[c + i];
        if (db != NULL)
            db[i] = (float)l->sums[i];
        /* the statistics for the moving averages, weighted as the gradients are */
        mean_g[i] = l->batch_mean[i] * l->share;
        var_g[i] = l->batch_var[i] * l->share;
    }
}

static void bn_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t c = bn_channels(l), rows = bn_rows(l, batch);
    const float *gamma = l->w ? l->w->value : NULL;
    float n = (float)rows;

    double *k = l->sums + 2 * c;

    for (size_t i = 0; i < c; i++) /* gamma * inv / N, per channel */
        k[i] = (double)((gamma ? gamma[i] : 1.0f) * l->inv_std[i] / n);
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < c; i++)
            dx[r * c + i] = (float)k[i] * (n * dy[r * c + i] - (float)l->sums[i] -
                                           l->xhat[r * c + i] * (float)l->sums[c + i]);
}

const layer_ops_t layer_batch_normalization = {
    .param_count = bn_params,
    .plan = bn_plan,
    .forward = bn_forward,
    .backward_params = bn_backward_params,
    .backward_input = bn_backward_input,
};
