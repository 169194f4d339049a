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

#include "blas.h"
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
    l->stat_weight = 1;
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

/* The passes over a batch, split over the GEMMs' threads (blas_parallel): the sums by channel,
 * each channel's over the rows in order, and the per-element passes by rows, so that every
 * value is what one thread computes. */
typedef struct bn_job {
    layer_t *l;
    size_t c, rows;
    const float *gamma, *beta, *dy;
    float *dx;
    float n; /* the rows the input gradient's statistics are over */
} bn_job_t;

static void span(size_t n, int part, int parts, size_t *ret_lo, size_t *ret_hi)
{
    *ret_lo = n * (size_t)part / (size_t)parts;
    *ret_hi = n * (size_t)(part + 1) / (size_t)parts;
}

/* The batch's sums per channel, in double row by row. */
static void sum_part(void *arg, int part, int parts)
{
    const bn_job_t *j = arg;
    size_t c = j->c, rows = j->rows, lo, hi;
    double *sum = j->l->sums;
    const float *in = j->l->in; /* locals: the stores below may not alias them */

    span(c, part, parts, &lo, &hi);
    for (size_t i = lo; i < hi; i++)
        sum[i] = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = lo; i < hi; i++)
            sum[i] += in[r * c + i];
}

/* The squared distances from the mean (in sums[0..c)) per channel, summed the same way. */
static void squares_part(void *arg, int part, int parts)
{
    const bn_job_t *j = arg;
    size_t c = j->c, rows = j->rows, lo, hi;
    const double *mean = j->l->sums;
    double *sq = j->l->sums + c;
    const float *in = j->l->in;

    span(c, part, parts, &lo, &hi);
    for (size_t i = lo; i < hi; i++)
        sq[i] = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = lo; i < hi; i++) {
            double d = (double)in[r * c + i] - mean[i];
            sq[i] += d * d;
        }
}

/* The mean (into sums[0..c)) and the summed squared distances from it (sums[c..2c)) per
 * channel, and the rows they are over: this batch's, or with l->sync the global batch's over
 * every local replica (each sum added up over them, so every replica normalizes by the same
 * statistics). false when another replica failed this step. */
static bool batch_stats(layer_t *l, bn_job_t *j, double *ret_rows)
{
    size_t c = j->c;
    double *sums = l->sums, rows = (double)j->rows;

    blas_parallel(sum_part, j, j->rows * c);
    if (l->sync != NULL) {
        sums[c] = rows;
        if (!layer_sync_sum(l->sync, l->sync_rank, sums, c + 1))
            return false;
        rows = sums[c];
    }
    for (size_t i = 0; i < c; i++)
        sums[i] /= rows; /* the mean */
    blas_parallel(squares_part, j, 2 * j->rows * c);
    if (l->sync != NULL && !layer_sync_sum(l->sync, l->sync_rank, sums + c, c))
        return false;
    *ret_rows = rows;
    return true;
}

static void normalize_part(void *arg, int part, int parts)
{
    const bn_job_t *j = arg;
    const layer_t *l = j->l;
    const float *gamma = j->gamma, *beta = j->beta, *mean = l->batch_mean, *inv = l->inv_std;
    float *xhat = l->xhat, *out = l->out;
    const float *in = l->in;
    size_t c = j->c, lo, hi;

    span(j->rows, part, parts, &lo, &hi);
    for (size_t r = lo; r < hi; r++) {
        const float *x = in + r * c;
        float *xh = xhat + r * c, *y = out + r * c;
        for (size_t i = 0; i < c; i++) {
            xh[i] = (x[i] - mean[i]) * inv[i];
            y[i] = xh[i] * (gamma ? gamma[i] : 1.0f) + (beta ? beta[i] : 0.0f);
        }
    }
}

static status_t bn_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t c = bn_channels(l), rows = bn_rows(l, batch);
    bn_job_t j = {.l = l,
                  .c = c,
                  .rows = rows,
                  .gamma = l->w ? l->w->value : NULL,
                  .beta = l->b ? l->b->value : NULL};
    double eps = l->spec.epsilon, n;

    if (training) {
        const double *sum = l->sums, *sq = l->sums + c;
        if (!batch_stats(l, &j, &n))
            return status_fail(err, STATUS_CANCELLED, "layer %s: another replica failed this step",
                               l->spec.name);
        l->sync_rows = n;
        for (size_t i = 0; i < c; i++) {
            l->batch_mean[i] = (float)sum[i];
            l->batch_var[i] = (float)(sq[i] / n);
            l->inv_std[i] = (float)(1.0 / sqrt(sq[i] / n + eps));
        }
    } else {
        const float *mm = bn_moving(l, 0)->value, *mv = bn_moving(l, 1)->value;
        for (size_t i = 0; i < c; i++) {
            l->batch_mean[i] = mm[i];
            l->inv_std[i] = (float)(1.0 / sqrt((double)mv[i] + eps));
        }
    }
    blas_parallel(normalize_part, &j, 3 * rows * c);
    return STATUS_OK;
}

/* Per channel: sum of dy into l->sums[0..c), of dy * xhat into l->sums[c..2c). */
static void dy_sums_part(void *arg, int part, int parts)
{
    const bn_job_t *j = arg;
    size_t c = j->c, rows = j->rows, lo, hi;
    double *sg = j->l->sums, *sgx = j->l->sums + c;
    const float *dy = j->dy, *xhat = j->l->xhat;

    span(c, part, parts, &lo, &hi);
    for (size_t i = lo; i < hi; i++)
        sg[i] = sgx[i] = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = lo; i < hi; i++) {
            sg[i] += dy[r * c + i];
            sgx[i] += (double)dy[r * c + i] * xhat[r * c + i];
        }
}

static void bn_dy_sums(layer_t *l, size_t c, size_t rows, const float *dy)
{
    bn_job_t j = {.l = l, .c = c, .rows = rows, .dy = dy};

    blas_parallel(dy_sums_part, &j, 2 * rows * c);
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
        mean_g[i] = l->batch_mean[i] * l->share * l->stat_weight;
        var_g[i] = l->batch_var[i] * l->share * l->stat_weight;
    }
}

static void input_part(void *arg, int part, int parts)
{
    const bn_job_t *j = arg;
    size_t c = j->c, lo, hi;
    const double *sums = j->l->sums, *k = sums + 2 * c;
    const float *dy = j->dy, *xhat = j->l->xhat;
    float *dx = j->dx, n = j->n;

    span(j->rows, part, parts, &lo, &hi);
    for (size_t r = lo; r < hi; r++)
        for (size_t i = 0; i < c; i++)
            dx[r * c + i] = (float)k[i] * (n * dy[r * c + i] - (float)sums[i] -
                                           xhat[r * c + i] * (float)sums[c + i]);
}

static void bn_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t c = bn_channels(l), rows = bn_rows(l, batch);
    const float *gamma = l->w ? l->w->value : NULL;
    float n = (float)rows;

    double *k = l->sums + 2 * c;
    /* synchronized: the sums and rows of the global batch (a replica that failed fails the
     * step, whatever is computed here) */
    if (l->sync != NULL && layer_sync_sum(l->sync, l->sync_rank, l->sums, 2 * c))
        n = (float)l->sync_rows;

    for (size_t i = 0; i < c; i++) /* gamma * inv / N, per channel */
        k[i] = (double)((gamma ? gamma[i] : 1.0f) * l->inv_std[i] / n);
    bn_job_t j = {.l = l, .c = c, .rows = rows, .dy = dy, .dx = dx, .n = n};
    blas_parallel(input_part, &j, 3 * rows * c);
}

void layer_batch_norm_share(layer_t *layers, size_t first)
{
    double momentum = layers[first].spec.momentum, stays;
    int calls = 0;
    bool ranked = true; /* the ranks are 0 .. calls - 1, each once (else: the calls' order) */

    for (int c = (int)first + 1; c > 0; c = layers[c - 1].next_call)
        calls++;
    for (int c = (int)first + 1; c > 0 && ranked; c = layers[c - 1].next_call) {
        int rank = layers[c - 1].spec.run_rank;
        ranked = rank >= 0 && rank < calls;
        for (int d = layers[c - 1].next_call; d > 0 && ranked; d = layers[d - 1].next_call)
            ranked = layers[d - 1].spec.run_rank != rank;
    }
    stays = pow(momentum, calls);
    int at = 0;
    for (int c = (int)first + 1; c > 0; c = layers[c - 1].next_call, at++) {
        layer_t *l = &layers[c - 1];
        int rank = ranked ? l->spec.run_rank : at;
        l->stat_weight =
            stays < 1 ? (float)((1 - momentum) * pow(momentum, calls - 1 - rank) / (1 - stays))
                      : (float)(1.0 / calls);
    }
    for (int k = 0; k < 2; k++) {
        bn_moving(&layers[first], k)->momentum = (float)stays;
        bn_moving(&layers[first], k)->rest = (float)(1 - stays);
    }
}

bool layer_batch_norm_idle(layer_t *l, bool backward, double *zeros, size_t width)
{
    size_t c = bn_channels(l);

    memset(zeros, 0, width * sizeof(double));
    if (backward) /* as bn_backward_input: the sums of dy and dy * xhat */
        return layer_sync_sum(l->sync, l->sync_rank, zeros, 2 * c);
    /* as batch_stats: the channels' sums and the rows, then the squared distances */
    if (!layer_sync_sum(l->sync, l->sync_rank, zeros, c + 1))
        return false;
    memset(zeros, 0, width * sizeof(double));
    return layer_sync_sum(l->sync, l->sync_rank, zeros, c);
}

const layer_ops_t layer_batch_normalization = {
    .param_count = bn_params,
    .plan = bn_plan,
    .forward = bn_forward,
    .backward_params = bn_backward_params,
    .backward_input = bn_backward_input,
};
