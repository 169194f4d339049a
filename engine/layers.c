/* Forward and backward passes of each layer kind, on the CPU. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "blas.h"
#include "model_internal.h"

/* ---- activations -------------------------------------------------------------------------- */

static void softmax_rows(float *v, size_t rows, size_t width)
{
    for (size_t r = 0; r < rows; r++) {
        float *x = v + r * width, max = x[0], sum = 0;
        for (size_t i = 1; i < width; i++)
            max = x[i] > max ? x[i] : max;
        for (size_t i = 0; i < width; i++) {
            x[i] = expf(x[i] - max);
            sum += x[i];
        }
        for (size_t i = 0; i < width; i++)
            x[i] /= sum;
    }
}

static void activate(job_activation_t act, float *v, size_t n, size_t width)
{
    switch (act) {
    case JOB_ACT_LINEAR:
        break;
    case JOB_ACT_RELU:
        for (size_t i = 0; i < n; i++)
            v[i] = v[i] > 0 ? v[i] : 0;
        break;
    case JOB_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++)
            v[i] = 1.0f / (1.0f + expf(-v[i]));
        break;
    case JOB_ACT_TANH:
        for (size_t i = 0; i < n; i++)
            v[i] = tanhf(v[i]);
        break;
    case JOB_ACT_SOFTMAX:
        softmax_rows(v, n / width, width);
        break;
    }
}

/* dy *= act'(.) expressed through the activation's output y. */
static void activate_backward(job_activation_t act, const float *y, float *dy, size_t n,
                              size_t width)
{
    switch (act) {
    case JOB_ACT_LINEAR:
        break;
    case JOB_ACT_RELU:
        for (size_t i = 0; i < n; i++)
            dy[i] = y[i] > 0 ? dy[i] : 0;
        break;
    case JOB_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++)
            dy[i] *= y[i] * (1 - y[i]);
        break;
    case JOB_ACT_TANH:
        for (size_t i = 0; i < n; i++)
            dy[i] *= 1 - y[i] * y[i];
        break;
    case JOB_ACT_SOFTMAX:
        for (size_t r = 0; r < n / width; r++) {
            const float *p = y + r * width;
            float *g = dy + r * width, dot = 0;
            for (size_t i = 0; i < width; i++)
                dot += g[i] * p[i];
            for (size_t i = 0; i < width; i++)
                g[i] = p[i] * (g[i] - dot);
        }
        break;
    }
}

static job_activation_t layer_activation(const layer_t *l)
{
    switch (l->spec.kind) {
    case JOB_LAYER_DENSE:
    case JOB_LAYER_CONV2D:
    case JOB_LAYER_ACTIVATION:
        return l->spec.activation;
    default:
        return JOB_ACT_LINEAR;
    }
}

/* out rows = bias, ready for a GEMM that adds to them. */
static void fill_bias(float *out, size_t rows, const model_param_t *b, size_t width)
{
    if (b == NULL) {
        memset(out, 0, rows * width * sizeof(float));
        return;
    }
    for (size_t r = 0; r < rows; r++)
        memcpy(out + r * width, b->value, width * sizeof(float));
}

static void column_sums(const float *restrict dy, size_t rows, size_t width, float *restrict ret)
{
    memset(ret, 0, width * sizeof(float));
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < width; i++)
            ret[i] += dy[r * width + i];
}

/* ---- Dense -------------------------------------------------------------------------------- */

static void dense_forward(layer_t *l, int batch)
{
    int in = l->in_shape[l->in_rank - 1], units = l->spec.units;
    int rows = (int)((size_t)batch * l->in_len / (size_t)in);
    fill_bias(l->out, (size_t)rows, l->b, (size_t)units);
    blas_sgemm(false, false, rows, units, in, 1.0f, l->in, in, l->w->value, units, 1.0f, l->out,
               units);
}

static void dense_backward_params(layer_t *l, int batch, const float *dy)
{
    int in = l->in_shape[l->in_rank - 1], units = l->spec.units;
    int rows = (int)((size_t)batch * l->in_len / (size_t)in);
    blas_sgemm(true, false, in, units, rows, 1.0f, l->in, in, dy, units, 0.0f, l->w->grad, units);
    if (l->b != NULL)
        column_sums(dy, (size_t)rows, (size_t)units, l->b->grad);
}

static void dense_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    int in = l->in_shape[l->in_rank - 1], units = l->spec.units;
    int rows = (int)((size_t)batch * l->in_len / (size_t)in);
    blas_sgemm(false, true, rows, in, units, 1.0f, dy, units, l->w->value, units, 0.0f, dx, in);
}

/* ---- Conv2D ------------------------------------------------------------------------------- */

static int stride_of(int s)
{
    return s > 0 ? s : 1;
}

static void im2col(const layer_t *l, const float *in, int batch, float *cols)
{
    int H = l->in_shape[0], W = l->in_shape[1], C = l->in_shape[2];
    int kh = l->spec.kernel_size[0], kw = l->spec.kernel_size[1];
    int sh = stride_of(l->spec.strides[0]), sw = stride_of(l->spec.strides[1]);
    size_t row = (size_t)kh * kw * C;

    for (int b = 0; b < batch; b++) {
        const float *img = in + (size_t)b * H * W * C;
        for (int oy = 0; oy < l->oh; oy++) {
            for (int ox = 0; ox < l->ow; ox++) {
                float *dst = cols + (((size_t)b * l->oh + oy) * l->ow + ox) * row;
                int ix0 = ox * sw - l->pad_l;
                bool inside_x = ix0 >= 0 && ix0 + kw <= W;
                for (int ky = 0; ky < kh; ky++) {
                    int iy = oy * sh - l->pad_t + ky;
                    if (inside_x && iy >= 0 && iy < H) {
                        /* Channels last: the kernel's row of kw pixels is one contiguous run. */
                        memcpy(dst, img + ((size_t)iy * W + ix0) * C,
                               (size_t)kw * C * sizeof(float));
                        dst += (size_t)kw * C;
                        continue;
                    }
                    for (int kx = 0; kx < kw; kx++, dst += C) {
                        int ix = ix0 + kx;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                            memset(dst, 0, (size_t)C * sizeof(float));
                        else
                            memcpy(dst, img + ((size_t)iy * W + ix) * C, (size_t)C * sizeof(float));
                    }
                }
            }
        }
    }
}

static void col2im(const layer_t *l, const float *cols, int batch, float *dx)
{
    int H = l->in_shape[0], W = l->in_shape[1], C = l->in_shape[2];
    int kh = l->spec.kernel_size[0], kw = l->spec.kernel_size[1];
    int sh = stride_of(l->spec.strides[0]), sw = stride_of(l->spec.strides[1]);
    size_t row = (size_t)kh * kw * C;

    memset(dx, 0, (size_t)batch * H * W * C * sizeof(float));
    for (int b = 0; b < batch; b++) {
        float *img = dx + (size_t)b * H * W * C;
        for (int oy = 0; oy < l->oh; oy++) {
            for (int ox = 0; ox < l->ow; ox++) {
                const float *src = cols + (((size_t)b * l->oh + oy) * l->ow + ox) * row;
                for (int ky = 0; ky < kh; ky++) {
                    int iy = oy * sh - l->pad_t + ky;
                    for (int kx = 0; kx < kw; kx++, src += C) {
                        int ix = ox * sw - l->pad_l + kx;
                        float *d;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                            continue;
                        d = img + ((size_t)iy * W + ix) * C;
                        for (int c = 0; c < C; c++)
                            d[c] += src[c];
                    }
                }
            }
        }
    }
}

static void conv_forward(layer_t *l, int batch)
{
    int k = l->spec.kernel_size[0] * l->spec.kernel_size[1] * l->in_shape[2];
    int rows = batch * l->oh * l->ow, filters = l->spec.filters;
    im2col(l, l->in, batch, l->cols);
    fill_bias(l->out, (size_t)rows, l->b, (size_t)filters);
    blas_sgemm(false, false, rows, filters, k, 1.0f, l->cols, k, l->w->value, filters, 1.0f, l->out,
               filters);
}

static void conv_backward_params(layer_t *l, int batch, const float *dy)
{
    int k = l->spec.kernel_size[0] * l->spec.kernel_size[1] * l->in_shape[2];
    int rows = batch * l->oh * l->ow, filters = l->spec.filters;
    blas_sgemm(true, false, k, filters, rows, 1.0f, l->cols, k, dy, filters, 0.0f, l->w->grad,
               filters);
    if (l->b != NULL)
        column_sums(dy, (size_t)rows, (size_t)filters, l->b->grad);
}

static void conv_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    int k = l->spec.kernel_size[0] * l->spec.kernel_size[1] * l->in_shape[2];
    int rows = batch * l->oh * l->ow, filters = l->spec.filters;
    /* The columns are no longer needed: reuse them for their gradient. */
    blas_sgemm(false, true, rows, k, filters, 1.0f, dy, filters, l->w->value, filters, 0.0f,
               l->cols, k);
    col2im(l, l->cols, batch, dx);
}

/* ---- pooling ------------------------------------------------------------------------------ */

/* One max-pooling window for all C channels, channels innermost so that the loop vectorizes:
 * the largest value and its input offset; the first on ties, and the window's first element
 * when nothing beats -inf (all NaN). */
static void max_window(const float *img, int W, int C, int y0, int y1, int x0, int x1,
                       float *restrict o, int32_t *restrict am)
{
    int32_t first = (int32_t)(((size_t)y0 * W + x0) * C);
    for (int c = 0; c < C; c++) {
        o[c] = -INFINITY;
        am[c] = first + c;
    }
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            int32_t off = (int32_t)(((size_t)y * W + x) * C);
            const float *restrict v = img + off;
            for (int c = 0; c < C; c++) {
                /* A mask, not a branch: GCC turns `gt ? a : b` on stores into jumps. */
                float now = v[c], best = o[c];
                int32_t gt = -(int32_t)(now > best);
                o[c] = now > best ? now : best;
                am[c] = (am[c] & ~gt) | ((off + c) & gt);
            }
        }
}

/* One average-pooling window: TensorFlow averages over the window's elements inside the input. */
static void average_window(const float *img, int W, int C, int y0, int y1, int x0, int x1,
                           float *restrict o)
{
    float scale = 1.0f / (float)((y1 - y0) * (x1 - x0));
    memset(o, 0, (size_t)C * sizeof(float));
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            const float *restrict v = img + ((size_t)y * W + x) * C;
            for (int c = 0; c < C; c++)
                o[c] += v[c];
        }
    for (int c = 0; c < C; c++)
        o[c] *= scale;
}

static void pool_forward(layer_t *l, int batch)
{
    int H = l->in_shape[0], W = l->in_shape[1], C = l->in_shape[2];
    int ph = l->spec.pool_size[0], pw = l->spec.pool_size[1];
    bool is_max = l->spec.kind == JOB_LAYER_MAX_POOLING2D;

    for (int b = 0; b < batch; b++) {
        const float *img = l->in + (size_t)b * H * W * C;
        float *out = l->out + (size_t)b * l->out_len;
        int32_t *am = is_max ? l->argmax + (size_t)b * l->out_len : NULL;
        for (int oy = 0; oy < l->oh; oy++) {
            int y0 = oy * l->sh - l->pad_t, y1 = y0 + ph;
            y0 = y0 < 0 ? 0 : y0;
            y1 = y1 > H ? H : y1;
            for (int ox = 0; ox < l->ow; ox++) {
                int x0 = ox * l->sw - l->pad_l, x1 = x0 + pw;
                size_t at = ((size_t)oy * l->ow + ox) * C;
                x0 = x0 < 0 ? 0 : x0;
                x1 = x1 > W ? W : x1;
                if (is_max)
                    max_window(img, W, C, y0, y1, x0, x1, out + at, am + at);
                else
                    average_window(img, W, C, y0, y1, x0, x1, out + at);
            }
        }
    }
}

static void pool_backward(layer_t *l, int batch, const float *dy, float *dx)
{
    int H = l->in_shape[0], W = l->in_shape[1], C = l->in_shape[2];
    int ph = l->spec.pool_size[0], pw = l->spec.pool_size[1];

    memset(dx, 0, (size_t)batch * l->in_len * sizeof(float));
    for (int b = 0; b < batch; b++) {
        const float *g = dy + (size_t)b * l->out_len;
        float *d = dx + (size_t)b * l->in_len;
        if (l->spec.kind == JOB_LAYER_MAX_POOLING2D) {
            const int32_t *am = l->argmax + (size_t)b * l->out_len;
            for (size_t i = 0; i < l->out_len; i++)
                d[am[i]] += g[i];
            continue;
        }
        for (int oy = 0; oy < l->oh; oy++) {
            int y0 = oy * l->sh - l->pad_t, y1 = y0 + ph;
            y0 = y0 < 0 ? 0 : y0;
            y1 = y1 > H ? H : y1;
            for (int ox = 0; ox < l->ow; ox++) {
                int x0 = ox * l->sw - l->pad_l, x1 = x0 + pw;
                const float *go = g + ((size_t)oy * l->ow + ox) * C;
                float scale;
                x0 = x0 < 0 ? 0 : x0;
                x1 = x1 > W ? W : x1;
                scale = 1.0f / (float)((y1 - y0) * (x1 - x0));
                for (int y = y0; y < y1; y++)
                    for (int x = x0; x < x1; x++)
                        for (int c = 0; c < C; c++)
                            d[((size_t)y * W + x) * C + c] += go[c] * scale;
            }
        }
    }
}

/* ---- Embedding ---------------------------------------------------------------------------- */

static status_t embedding_forward(layer_t *l, int batch, status_msg_t *err)
{
    size_t n = (size_t)batch * l->in_len, dim = (size_t)l->spec.output_dim;
    for (size_t i = 0; i < n; i++) {
        float f = l->in[i];
        int64_t id = (int64_t)f;
        if (!(f >= 0) || (float)id != f || id >= l->spec.input_dim)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "layer %s: token id %g of example %zu is outside the vocabulary "
                               "[0, %d)",
                               l->spec.name, (double)f, i / l->in_len, l->spec.input_dim);
        memcpy(l->out + i * dim, l->w->value + (size_t)id * dim, dim * sizeof(float));
    }
    return STATUS_OK;
}

/* Sums the gradient rows per distinct id into the param's sparse gradient. */
static void embedding_backward(layer_t *l, int batch, const float *dy)
{
    model_param_t *p = l->w;
    size_t n = (size_t)batch * l->in_len, dim = (size_t)l->spec.output_dim;

    p->n_rows = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t id = (int64_t)l->in[i];
        int32_t slot = l->slot_of_row[id];
        float *row;
        if (slot < 0) {
            slot = (int32_t)p->n_rows++;
            l->slot_of_row[id] = slot;
            p->rows_index[slot] = id;
            memset(p->rows_grad + (size_t)slot * dim, 0, dim * sizeof(float));
        }
        row = p->rows_grad + (size_t)slot * dim;
        for (size_t k = 0; k < dim; k++)
            row[k] += dy[i * dim + k];
    }
    for (size_t s = 0; s < p->n_rows; s++)
        l->slot_of_row[p->rows_index[s]] = -1;
}

/* ---- global average pooling, dropout -------------------------------------------------------- */

static void gap_forward(layer_t *l, int batch)
{
    size_t channels = (size_t)l->out_shape[0], steps = l->in_len / channels;
    for (int b = 0; b < batch; b++) {
        const float *x = l->in + (size_t)b * l->in_len;
        float *o = l->out + (size_t)b * channels;
        memset(o, 0, channels * sizeof(float));
        for (size_t t = 0; t < steps; t++)
            for (size_t c = 0; c < channels; c++)
                o[c] += x[t * channels + c];
        for (size_t c = 0; c < channels; c++)
            o[c] /= (float)steps;
    }
}

static void gap_backward(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t channels = (size_t)l->out_shape[0], steps = l->in_len / channels;
    float scale = 1.0f / (float)steps;
    for (int b = 0; b < batch; b++)
        for (size_t t = 0; t < steps; t++)
            for (size_t c = 0; c < channels; c++)
                dx[(size_t)b * l->in_len + t * channels + c] = dy[(size_t)b * channels + c] * scale;
}

static void dropout_forward(layer_t *l, int batch, bool training)
{
    size_t n = (size_t)batch * l->in_len;
    float keep = (float)(1.0 - l->spec.rate), scale = 1.0f / keep;
    if (!training || l->spec.rate == 0) {
        memcpy(l->out, l->in, n * sizeof(float));
        for (size_t i = 0; training && i < n; i++)
            l->mask[i] = 1.0f;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        double u = (double)(model_rng_next(&l->rng) >> 11) * (1.0 / 9007199254740992.0);
        l->mask[i] = u < l->spec.rate ? 0.0f : scale;
        l->out[i] = l->in[i] * l->mask[i];
    }
}

/* ---- dispatch ----------------------------------------------------------------------------- */

status_t layer_forward(layer_t *l, int batch, bool training, bool skip_activation,
                       status_msg_t *err)
{
    switch (l->spec.kind) {
    case JOB_LAYER_DENSE:
        dense_forward(l, batch);
        break;
    case JOB_LAYER_CONV2D:
        conv_forward(l, batch);
        break;
    case JOB_LAYER_MAX_POOLING2D:
    case JOB_LAYER_AVERAGE_POOLING2D:
        pool_forward(l, batch);
        break;
    case JOB_LAYER_FLATTEN:
    case JOB_LAYER_RESHAPE:
        l->out = (float *)l->in;
        break;
    case JOB_LAYER_DROPOUT:
        dropout_forward(l, batch, training);
        break;
    case JOB_LAYER_EMBEDDING:
        STATUS_CHECK(embedding_forward(l, batch, err));
        break;
    case JOB_LAYER_GLOBAL_AVERAGE_POOLING1D:
    case JOB_LAYER_GLOBAL_AVERAGE_POOLING2D:
        gap_forward(l, batch);
        break;
    case JOB_LAYER_ACTIVATION:
        memcpy(l->out, l->in, (size_t)batch * l->in_len * sizeof(float));
        break;
    }
    if (!skip_activation)
        activate(layer_activation(l), l->out, (size_t)batch * l->out_len,
                 (size_t)l->out_shape[l->out_rank - 1]);
    return STATUS_OK;
}

void layer_backward_params(layer_t *l, int batch, float *dy, bool skip_activation)
{
    if (!skip_activation)
        activate_backward(layer_activation(l), l->out, dy, (size_t)batch * l->out_len,
                          (size_t)l->out_shape[l->out_rank - 1]);
    switch (l->spec.kind) {
    case JOB_LAYER_DENSE:
        dense_backward_params(l, batch, dy);
        break;
    case JOB_LAYER_CONV2D:
        conv_backward_params(l, batch, dy);
        break;
    case JOB_LAYER_EMBEDDING:
        embedding_backward(l, batch, dy);
        break;
    default:
        break;
    }
}

float *layer_backward_input(layer_t *l, int batch, float *dy, float *dx)
{
    switch (l->spec.kind) {
    case JOB_LAYER_DENSE:
        if (dx != NULL)
            dense_backward_input(l, batch, dy, dx);
        break;
    case JOB_LAYER_CONV2D:
        if (dx != NULL)
            conv_backward_input(l, batch, dy, dx);
        break;
    case JOB_LAYER_MAX_POOLING2D:
    case JOB_LAYER_AVERAGE_POOLING2D:
        if (dx != NULL)
            pool_backward(l, batch, dy, dx);
        break;
    case JOB_LAYER_FLATTEN:
    case JOB_LAYER_RESHAPE:
    case JOB_LAYER_ACTIVATION:
        return dy;
    case JOB_LAYER_DROPOUT:
        if (dx != NULL)
            for (size_t i = 0; i < (size_t)batch * l->in_len; i++)
                dx[i] = dy[i] * l->mask[i];
        break;
    case JOB_LAYER_EMBEDDING: /* the first layer: no input gradient */
        return NULL;
    case JOB_LAYER_GLOBAL_AVERAGE_POOLING1D:
    case JOB_LAYER_GLOBAL_AVERAGE_POOLING2D:
        if (dx != NULL)
            gap_backward(l, batch, dy, dx);
        break;
    }
    return dx;
}
