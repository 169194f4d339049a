/* The CPU backend: OpenBLAS for the matrix products (blas.c), C loops that vectorize for the
 * rest. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "blas.h"
#include "conv_direct.h"

static status_t cpu_set_threads(int threads, status_msg_t *err)
{
    STATUS_CHECK(blas_init(err));
    return blas_set_threads(threads > 0 ? threads : 1, err);
}

static void *cpu_alloc(size_t bytes)
{
    size_t rounded = (bytes + 63) / 64 * 64;
    void *p;

    if (bytes > SIZE_MAX - 63)
        return NULL;
    p = aligned_alloc(64, rounded ? rounded : 64);
    if (p != NULL)
        memset(p, 0, rounded);
    return p;
}

static void cpu_free(void *p)
{
    free(p);
}

static void cpu_copy(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
}

static void cpu_zero(void *dst, size_t bytes)
{
    memset(dst, 0, bytes);
}

/* ---- elementwise and reductions ------------------------------------------------------------ */

static void cpu_fill_rows(float *out, size_t rows, const float *row, size_t width)
{
    if (row == NULL) {
        memset(out, 0, rows * width * sizeof(float));
        return;
    }
    for (size_t r = 0; r < rows; r++)
        memcpy(out + r * width, row, width * sizeof(float));
}

static void cpu_column_sums(const float *restrict dy, size_t rows, size_t width,
                            float *restrict ret)
{
    memset(ret, 0, width * sizeof(float));
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < width; i++)
            ret[i] += dy[r * width + i];
}

static void cpu_mul(const float *restrict a, const float *restrict b, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] * b[i];
}

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

/* Keras 3's constants (keras.activations) */
#define ELU_ALPHA        1.0f
#define SELU_ALPHA       1.67326324235437728481f
#define SELU_SCALE       1.05070098735548049342f
#define GELU_C           0.79788456080286535588f /* sqrt(2 / pi), approximate gelu's */
#define GELU_A           0.044715f
#define LEAKY_RELU_SLOPE 0.2f

static inline float sigmoidf_(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* log(1 + e^x) without overflow */
static inline float softplusf_(float x)
{
    return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

static inline float relu6f_(float x)
{
    return fminf(fmaxf(x, 0.0f), 6.0f);
}

static void log_softmax_rows(float *x, size_t rows, size_t width)
{
    for (size_t r = 0; r < rows; r++, x += width) {
        float max = x[0], sum = 0;
        for (size_t i = 1; i < width; i++)
            max = x[i] > max ? x[i] : max;
        for (size_t i = 0; i < width; i++)
            sum += expf(x[i] - max);
        float lse = max + logf(sum);
        for (size_t i = 0; i < width; i++)
            x[i] -= lse;
    }
}

static void cpu_activate(job_activation_t act, float *v, size_t n, size_t width)
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
    case JOB_ACT_GELU:
        for (size_t i = 0; i < n; i++)
            v[i] = 0.5f * v[i] * (1.0f + erff(v[i] * 0.70710678118654752f));
        break;
    case JOB_ACT_ELU:
        for (size_t i = 0; i < n; i++)
            v[i] = v[i] > 0 ? v[i] : ELU_ALPHA * expm1f(v[i]);
        break;
    case JOB_ACT_SELU:
        for (size_t i = 0; i < n; i++)
            v[i] = SELU_SCALE * (v[i] > 0 ? v[i] : SELU_ALPHA * expm1f(v[i]));
        break;
    case JOB_ACT_SOFTPLUS:
        for (size_t i = 0; i < n; i++)
            v[i] = softplusf_(v[i]);
        break;
    case JOB_ACT_SOFTSIGN:
        for (size_t i = 0; i < n; i++)
            v[i] = v[i] / (fabsf(v[i]) + 1.0f);
        break;
    case JOB_ACT_SWISH:
        for (size_t i = 0; i < n; i++)
            v[i] = v[i] * sigmoidf_(v[i]);
        break;
    case JOB_ACT_LEAKY_RELU:
        for (size_t i = 0; i < n; i++)
            v[i] = v[i] > 0 ? v[i] : LEAKY_RELU_SLOPE * v[i];
        break;
    case JOB_ACT_RELU6:
        for (size_t i = 0; i < n; i++)
            v[i] = relu6f_(v[i]);
        break;
    case JOB_ACT_HARD_SIGMOID:
        for (size_t i = 0; i < n; i++)
            v[i] = relu6f_(v[i] + 3.0f) / 6.0f;
        break;
    case JOB_ACT_HARD_SWISH:
        for (size_t i = 0; i < n; i++)
            v[i] = v[i] * relu6f_(v[i] + 3.0f) / 6.0f;
        break;
    case JOB_ACT_EXPONENTIAL:
        for (size_t i = 0; i < n; i++)
            v[i] = expf(v[i]);
        break;
    case JOB_ACT_MISH:
        for (size_t i = 0; i < n; i++)
            v[i] = v[i] * tanhf(softplusf_(v[i]));
        break;
    case JOB_ACT_LOG_SOFTMAX:
        log_softmax_rows(v, n / width, width);
        break;
    case JOB_ACT_GELU_APPROXIMATE:
        for (size_t i = 0; i < n; i++)
            v[i] = 0.5f * v[i] * (1.0f + tanhf(GELU_C * (v[i] + GELU_A * v[i] * v[i] * v[i])));
        break;
    case JOB_ACT_COUNT_:
        break;
    }
}

/* dy *= act'(.) expressed through the activation's output y. */
static void cpu_activate_backward(job_activation_t act, const float *x, const float *y, float *dy,
                                  size_t n, size_t width)
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
    case JOB_ACT_GELU: /* Phi(x) + x phi(x) */
        for (size_t i = 0; i < n; i++)
            dy[i] *= 0.5f * (1.0f + erff(x[i] * 0.70710678118654752f)) +
                     x[i] * 0.39894228040143268f * expf(-0.5f * x[i] * x[i]);
        break;
    case JOB_ACT_ELU: /* x > 0 exactly when y > 0; below, alpha e^x = y + alpha */
        for (size_t i = 0; i < n; i++)
            dy[i] *= y[i] > 0 ? 1.0f : y[i] + ELU_ALPHA;
        break;
    case JOB_ACT_SELU:
        for (size_t i = 0; i < n; i++)
            dy[i] *= y[i] > 0 ? SELU_SCALE : y[i] + SELU_SCALE * SELU_ALPHA;
        break;
    case JOB_ACT_SOFTPLUS: /* sigmoid(x) = 1 - e^-y */
        for (size_t i = 0; i < n; i++)
            dy[i] *= -expm1f(-y[i]);
        break;
    case JOB_ACT_SOFTSIGN: /* 1 / (1 + |x|)^2 = (1 - |y|)^2 */
        for (size_t i = 0; i < n; i++)
            dy[i] *= (1.0f - fabsf(y[i])) * (1.0f - fabsf(y[i]));
        break;
    case JOB_ACT_SWISH:
        for (size_t i = 0; i < n; i++) {
            float s = sigmoidf_(x[i]);
            dy[i] *= s + x[i] * s * (1.0f - s);
        }
        break;
    case JOB_ACT_LEAKY_RELU:
        for (size_t i = 0; i < n; i++)
            dy[i] *= y[i] > 0 ? 1.0f : LEAKY_RELU_SLOPE;
        break;
    case JOB_ACT_RELU6:
        for (size_t i = 0; i < n; i++)
            dy[i] = y[i] > 0 && y[i] < 6.0f ? dy[i] : 0;
        break;
    case JOB_ACT_HARD_SIGMOID:
        for (size_t i = 0; i < n; i++)
            dy[i] = y[i] > 0 && y[i] < 1.0f ? dy[i] / 6.0f : 0;
        break;
    case JOB_ACT_HARD_SWISH: /* relu6(x + 3) / 6 + x / 6 inside (-3, 3) */
        for (size_t i = 0; i < n; i++)
            dy[i] *=
                relu6f_(x[i] + 3.0f) / 6.0f + (x[i] > -3.0f && x[i] < 3.0f ? x[i] / 6.0f : 0.0f);
        break;
    case JOB_ACT_EXPONENTIAL:
        for (size_t i = 0; i < n; i++)
            dy[i] *= y[i];
        break;
    case JOB_ACT_MISH: /* tanh(sp) + x sech^2(sp) sigmoid(x), sp = softplus(x) */
        for (size_t i = 0; i < n; i++) {
            float t = tanhf(softplusf_(x[i]));
            dy[i] *= t + x[i] * (1.0f - t * t) * sigmoidf_(x[i]);
        }
        break;
    case JOB_ACT_LOG_SOFTMAX: /* g - softmax * sum(g), softmax = e^y */
        for (size_t r = 0; r < n / width; r++) {
            const float *p = y + r * width;
            float *g = dy + r * width, sum = 0;
            for (size_t i = 0; i < width; i++)
                sum += g[i];
            for (size_t i = 0; i < width; i++)
                g[i] -= expf(p[i]) * sum;
        }
        break;
    case JOB_ACT_GELU_APPROXIMATE: /* 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2) */
        for (size_t i = 0; i < n; i++) {
            float v = x[i], t = tanhf(GELU_C * (v + GELU_A * v * v * v));
            dy[i] *= 0.5f * (1.0f + t) +
                     0.5f * v * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * GELU_A * v * v);
        }
        break;
    case JOB_ACT_COUNT_:
        break;
    }
}

/* ---- convolution ------------------------------------------------------------------------- */

/* im2col and col2im over a part of the batch's examples (blas_parallel). */
typedef struct window_job {
    const backend_window_t *g;
    const float *src;
    float *dst;
    int batch;
} window_job_t;

static void part_of(int batch, int part, int parts, int *ret_lo, int *ret_hi)
{
    *ret_lo = (int)((int64_t)batch * part / parts);
    *ret_hi = (int)((int64_t)batch * (part + 1) / parts);
}

static void im2col_part(void *arg, int part, int parts)
{
    const window_job_t *j = arg;
    const backend_window_t *g = j->g;
    const float *in = j->src;
    float *cols = j->dst;
    int H = g->h, W = g->w, C = g->c, kh = g->kh, kw = g->kw, sh = g->sh, sw = g->sw, lo, hi;
    size_t row = (size_t)kh * kw * C;

    part_of(j->batch, part, parts, &lo, &hi);
    for (int b = lo; b < hi; b++) {
        const float *img = in + (size_t)b * H * W * C;
        for (int oy = 0; oy < g->oh; oy++) {
            for (int ox = 0; ox < g->ow; ox++) {
                float *dst = cols + (((size_t)b * g->oh + oy) * g->ow + ox) * row;
                int ix0 = ox * sw - g->pad_l;
                bool inside_x = ix0 >= 0 && ix0 + kw <= W;
                for (int ky = 0; ky < kh; ky++) {
                    int iy = oy * sh - g->pad_t + ky;
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

/* fn over the batch's examples on the GEMMs' threads; the work is the columns' size. */
static void run_window(blas_part_fn fn, const backend_window_t *g, const float *src, int batch,
                       float *dst)
{
    window_job_t j = {.g = g, .src = src, .dst = dst, .batch = batch};

    blas_parallel(fn, &j, (size_t)batch * g->oh * g->ow * (size_t)g->kh * g->kw * (size_t)g->c);
}

static void cpu_im2col(const backend_window_t *g, const float *in, int batch, float *cols)
{
    run_window(im2col_part, g, in, batch, cols);
}

static void col2im_part(void *arg, int part, int parts)
{
    const window_job_t *j = arg;
    const backend_window_t *g = j->g;
    const float *cols = j->src;
    float *dx = j->dst;
    int H = g->h, W = g->w, C = g->c, kh = g->kh, kw = g->kw, sh = g->sh, sw = g->sw, lo, hi;
    size_t row = (size_t)kh * kw * C;

    part_of(j->batch, part, parts, &lo, &hi);
    memset(dx + (size_t)lo * H * W * C, 0, (size_t)(hi - lo) * H * W * C * sizeof(float));
    for (int b = lo; b < hi; b++) {
        float *img = dx + (size_t)b * H * W * C;
        for (int oy = 0; oy < g->oh; oy++) {
            for (int ox = 0; ox < g->ow; ox++) {
                const float *src = cols + (((size_t)b * g->oh + oy) * g->ow + ox) * row;
                for (int ky = 0; ky < kh; ky++) {
                    int iy = oy * sh - g->pad_t + ky;
                    for (int kx = 0; kx < kw; kx++, src += C) {
                        int ix = ox * sw - g->pad_l + kx;
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

static void cpu_col2im(const backend_window_t *g, const float *cols, int batch, float *dx)
{
    run_window(col2im_part, g, cols, batch, dx);
}

/* The padded image a direct convolution reads: pad_t zero rows above the input and pad_l zero
 * columns left of it, and zeros after it as far as the last windows reach. */
static void padded_size(const backend_window_t *g, int *ret_hp, int *ret_wp)
{
    int hp = (g->oh - 1) * g->sh + g->kh, wp = (g->ow - 1) * g->sw + g->kw;

    *ret_hp = hp > g->pad_t + g->h ? hp : g->pad_t + g->h;
    *ret_wp = wp > g->pad_l + g->w ? wp : g->pad_l + g->w;
}

static conv_direct_t direct_of(const backend_window_t *g, int batch, int filters)
{
    int hp, wp;

    padded_size(g, &hp, &wp);
    return (conv_direct_t){.rows = batch * g->oh * g->ow,
                           .oh = g->oh,
                           .ow = g->ow,
                           .kh = g->kh,
                           .seg = g->kw * g->c,
                           .filters = filters,
                           .row_stride = (size_t)wp * g->c,
                           .image = (size_t)hp * wp * g->c,
                           .step_y = (size_t)g->sh * wp * g->c,
                           .step_x = (size_t)g->sw * g->c};
}

static bool cpu_conv_fits(const backend_window_t *g, int filters)
{
    return conv_direct_fits(g->kw * g->c, filters);
}

static size_t cpu_conv_pad_floats(const backend_window_t *g, int batch)
{
    int hp, wp;

    padded_size(g, &hp, &wp);
    return (size_t)batch * hp * wp * g->c;
}

/* A direct convolution's work over the threads: the padded copy and the input's gradient by
 * images, the forward pass by output rows, the kernel's gradient by its rows. */
typedef struct direct_job {
    const backend_window_t *g;
    conv_direct_t d;
    int batch;
    const float *in, *pad, *w, *dy;
    float *out, *dpad, *dx;
} direct_job_t;

static void pad_part(void *arg, int part, int parts)
{
    const direct_job_t *j = arg;
    const backend_window_t *g = j->g;
    size_t row = (size_t)g->w * g->c, left = (size_t)g->pad_l * g->c;
    size_t hp = j->d.image / j->d.row_stride; /* the padded image's rows */
    int lo, hi;

    part_of(j->batch, part, parts, &lo, &hi);
    for (int b = lo; b < hi; b++) {
        float *img = j->out + (size_t)b * j->d.image;
        const float *in = j->in + (size_t)b * g->h * row;
        for (int y = 0; y < (int)hp; y++) {
            float *p = img + (size_t)y * j->d.row_stride;
            int iy = y - g->pad_t;
            if (iy < 0 || iy >= g->h) {
                memset(p, 0, j->d.row_stride * sizeof(float));
                continue;
            }
            memset(p, 0, left * sizeof(float));
            memcpy(p + left, in + (size_t)iy * row, row * sizeof(float));
            memset(p + left + row, 0, (j->d.row_stride - left - row) * sizeof(float));
        }
    }
}

static void cpu_conv_pad(const backend_window_t *g, const float *in, int batch, float *pad)
{
    direct_job_t j = {.g = g, .d = direct_of(g, batch, 16), .batch = batch, .in = in, .out = pad};

    blas_parallel(pad_part, &j, (size_t)batch * j.d.image);
}

static void forward_part(void *arg, int part, int parts)
{
    const direct_job_t *j = arg;
    int lo, hi;

    part_of(j->d.rows, part, parts, &lo, &hi);
    conv_direct_forward(&j->d, j->pad, j->w, j->out, lo, hi);
}

static void cpu_conv_forward(const backend_window_t *g, const float *pad, int batch, const float *w,
                             int filters, float *out)
{
    direct_job_t j = {.d = direct_of(g, batch, filters), .pad = pad, .w = w, .out = out};

    blas_parallel(forward_part, &j, (size_t)j.d.rows * j.d.kh * j.d.seg * filters);
}

static void grad_kernel_part(void *arg, int part, int parts)
{
    const direct_job_t *j = arg;
    int lo, hi;

    part_of(j->d.kh * j->d.seg, part, parts, &lo, &hi);
    conv_direct_grad_kernel(&j->d, j->pad, j->dy, j->out, lo, hi);
}

static void cpu_conv_grad_kernel(const backend_window_t *g, const float *pad, int batch,
                                 const float *dy, int filters, float *dw)
{
    direct_job_t j = {.d = direct_of(g, batch, filters), .pad = pad, .dy = dy, .out = dw};

    blas_parallel(grad_kernel_part, &j, (size_t)j.d.rows * j.d.kh * j.d.seg * filters);
}

/* The input's gradient for a part of the images: into their padded images (zeroed first),
 * then the inside of each into dx. */
static void grad_input_part(void *arg, int part, int parts)
{
    const direct_job_t *j = arg;
    const backend_window_t *g = j->g;
    size_t row = (size_t)g->w * g->c, per = (size_t)g->oh * g->ow;
    int lo, hi;

    part_of(j->batch, part, parts, &lo, &hi);
    memset(j->dpad + (size_t)lo * j->d.image, 0, (size_t)(hi - lo) * j->d.image * sizeof(float));
    conv_direct_grad_input(&j->d, j->dy, j->w, j->dpad, (int)(lo * per), (int)(hi * per));
    for (int b = lo; b < hi; b++)
        for (int y = 0; y < g->h; y++)
            memcpy(j->dx + ((size_t)b * g->h + y) * row,
                   j->dpad + (size_t)b * j->d.image + (size_t)(y + g->pad_t) * j->d.row_stride +
                       (size_t)g->pad_l * g->c,
                   row * sizeof(float));
}

static void cpu_conv_grad_input(const backend_window_t *g, const float *dy, int batch,
                                const float *w, int filters, float *wt, float *dpad, float *dx)
{
    direct_job_t j = {.g = g, .d = direct_of(g, batch, filters), .batch = batch, .dy = dy, .w = wt};
    size_t k = (size_t)j.d.kh * j.d.seg;

    for (size_t r = 0; r < k; r++) /* the kernel transposed: a row a filter */
        for (int f = 0; f < filters; f++)
            wt[(size_t)f * k + r] = w[r * filters + f];
    j.dpad = dpad;
    j.dx = dx;
    blas_parallel(grad_input_part, &j, (size_t)j.d.rows * k * filters);
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

/* The part of a pooling window inside the input, along one axis: [*lo, *hi) for output o. */
static void window_span(int o, int stride, int pad, int k, int limit, int *lo, int *hi)
{
    int a = o * stride - pad, b = a + k;
    *lo = a < 0 ? 0 : a;
    *hi = b > limit ? limit : b;
}

static void cpu_max_pool(const backend_window_t *g, const float *in, int batch, float *out,
                         int32_t *argmax)
{
    size_t in_len = (size_t)g->h * g->w * g->c, out_len = (size_t)g->oh * g->ow * g->c;

    for (int b = 0; b < batch; b++) {
        const float *img = in + (size_t)b * in_len;
        for (int oy = 0; oy < g->oh; oy++) {
            int y0, y1;
            window_span(oy, g->sh, g->pad_t, g->kh, g->h, &y0, &y1);
            for (int ox = 0; ox < g->ow; ox++) {
                size_t at = (size_t)b * out_len + ((size_t)oy * g->ow + ox) * g->c;
                int x0, x1;
                window_span(ox, g->sw, g->pad_l, g->kw, g->w, &x0, &x1);
                max_window(img, g->w, g->c, y0, y1, x0, x1, out + at, argmax + at);
            }
        }
    }
}

static void cpu_max_pool_backward(const backend_window_t *g, const int32_t *argmax, const float *dy,
                                  int batch, float *dx)
{
    size_t in_len = (size_t)g->h * g->w * g->c, out_len = (size_t)g->oh * g->ow * g->c;

    memset(dx, 0, (size_t)batch * in_len * sizeof(float));
    for (int b = 0; b < batch; b++) {
        const float *gy = dy + (size_t)b * out_len;
        const int32_t *am = argmax + (size_t)b * out_len;
        float *d = dx + (size_t)b * in_len;
        for (size_t i = 0; i < out_len; i++)
            d[am[i]] += gy[i];
    }
}

static void cpu_average_pool(const backend_window_t *g, const float *in, int batch, float *out)
{
    size_t in_len = (size_t)g->h * g->w * g->c, out_len = (size_t)g->oh * g->ow * g->c;

    for (int b = 0; b < batch; b++) {
        const float *img = in + (size_t)b * in_len;
        for (int oy = 0; oy < g->oh; oy++) {
            int y0, y1;
            window_span(oy, g->sh, g->pad_t, g->kh, g->h, &y0, &y1);
            for (int ox = 0; ox < g->ow; ox++) {
                int x0, x1;
                window_span(ox, g->sw, g->pad_l, g->kw, g->w, &x0, &x1);
                average_window(img, g->w, g->c, y0, y1, x0, x1,
                               out + (size_t)b * out_len + ((size_t)oy * g->ow + ox) * g->c);
            }
        }
    }
}

static void cpu_average_pool_backward(const backend_window_t *g, const float *dy, int batch,
                                      float *dx)
{
    int W = g->w, C = g->c;
    size_t in_len = (size_t)g->h * W * C, out_len = (size_t)g->oh * g->ow * C;

    memset(dx, 0, (size_t)batch * in_len * sizeof(float));
    for (int b = 0; b < batch; b++) {
        const float *gy = dy + (size_t)b * out_len;
        float *d = dx + (size_t)b * in_len;
        for (int oy = 0; oy < g->oh; oy++) {
            int y0, y1;
            window_span(oy, g->sh, g->pad_t, g->kh, g->h, &y0, &y1);
            for (int ox = 0; ox < g->ow; ox++) {
                const float *go = gy + ((size_t)oy * g->ow + ox) * C;
                float scale;
                int x0, x1;
                window_span(ox, g->sw, g->pad_l, g->kw, W, &x0, &x1);
                scale = 1.0f / (float)((y1 - y0) * (x1 - x0));
                for (int y = y0; y < y1; y++)
                    for (int x = x0; x < x1; x++)
                        for (int c = 0; c < C; c++)
                            d[((size_t)y * W + x) * C + c] += go[c] * scale;
            }
        }
    }
}

static void cpu_mean_steps(const float *x, int batch, size_t steps, size_t channels, float *out)
{
    for (int b = 0; b < batch; b++) {
        const float *xb = x + (size_t)b * steps * channels;
        float *o = out + (size_t)b * channels;
        memset(o, 0, channels * sizeof(float));
        for (size_t t = 0; t < steps; t++)
            for (size_t c = 0; c < channels; c++)
                o[c] += xb[t * channels + c];
        for (size_t c = 0; c < channels; c++)
            o[c] /= (float)steps;
    }
}

static void cpu_mean_steps_backward(const float *dy, int batch, size_t steps, size_t channels,
                                    float *dx)
{
    float scale = 1.0f / (float)steps;
    for (int b = 0; b < batch; b++)
        for (size_t t = 0; t < steps; t++)
            for (size_t c = 0; c < channels; c++)
                dx[((size_t)b * steps + t) * channels + c] = dy[(size_t)b * channels + c] * scale;
}

/* ---- embedding rows ----------------------------------------------------------------------- */

static void cpu_gather_rows(const float *table, size_t dim, const int64_t *ids, size_t n,
                            float *out)
{
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * dim, table + (size_t)ids[i] * dim, dim * sizeof(float));
}

static void cpu_scatter_add_rows(const float *dy, size_t dim, const int32_t *slot, size_t n,
                                 float *rows)
{
    for (size_t i = 0; i < n; i++) {
        float *row = rows + (size_t)slot[i] * dim;
        for (size_t k = 0; k < dim; k++)
            row[k] += dy[i * dim + k];
    }
}

static const backend_t cpu_backend = {
    .name = "cpu",
    .init = blas_init,
    .set_threads = cpu_set_threads,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .gemm = blas_sgemm,
    .fill_rows = cpu_fill_rows,
    .column_sums = cpu_column_sums,
    .mul = cpu_mul,
    .activate = cpu_activate,
    .activate_backward = cpu_activate_backward,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .conv_fits = cpu_conv_fits,
    .conv_pad_floats = cpu_conv_pad_floats,
    .conv_pad = cpu_conv_pad,
    .conv_forward = cpu_conv_forward,
    .conv_grad_kernel = cpu_conv_grad_kernel,
    .conv_grad_input = cpu_conv_grad_input,
    .max_pool = cpu_max_pool,
    .max_pool_backward = cpu_max_pool_backward,
    .average_pool = cpu_average_pool,
    .average_pool_backward = cpu_average_pool_backward,
    .mean_steps = cpu_mean_steps,
    .mean_steps_backward = cpu_mean_steps_backward,
    .gather_rows = cpu_gather_rows,
    .scatter_add_rows = cpu_scatter_add_rows,
};

const backend_t *backend_cpu(void)
{
    return &cpu_backend;
}
