/* The CUDA backend's kernels: what backend.h asks of a device beside the matrix products
 * (cuBLAS, in cuda.c). Each computes what the CPU backend's loop of the same name computes;
 * where the CPU backend adds in an order (a pooling window, a column's first 256 rows), the
 * kernel adds in the same order (nvcc may still fuse a multiply and an add the CPU rounds
 * twice: the tests hold the two within 1e-4, not to the bit). Gradients that several outputs
 * send to one input (col2im, average pooling) are gathered per input, not scattered with atomics,
 * so that a step is deterministic; max pooling's and Embedding's scatters add with atomics (their
 * rows rarely collide). */
#include <cuda_runtime.h>
#include <math.h>

#include "backend/cuda_kernels.h"
#include "job/model.h"

namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 65535;

/* Blocks for n elements, each thread looping with the grid's stride past the cap. */
unsigned blocks_for(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b == 0 ? 1 : b < kMaxBlocks ? b : kMaxBlocks);
}

#define GRID_LOOP(i, n)                                                                         \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                     \
         i += (size_t)blockDim.x * gridDim.x)

int launched()
{
    return (int)cudaGetLastError();
}

/* ---- elementwise and reductions ------------------------------------------------------------ */

__global__ void fill_rows_k(float *out, size_t n, const float *row, size_t width)
{
    GRID_LOOP(i, n)
    out[i] = row != nullptr ? row[i % width] : 0.0f;
}

/* Column sums in two passes: partial[chunk][col] over kChunk rows each, in row order, then the
 * chunks' partials in chunk order; with one chunk this is the CPU's order exactly. */
constexpr size_t kChunk = 256;

__global__ void column_partials_k(const float *x, size_t rows, size_t width, float *partial)
{
    size_t chunks = (rows + kChunk - 1) / kChunk;
    GRID_LOOP(i, chunks * width)
    {
        size_t chunk = i / width, col = i % width, end = (chunk + 1) * kChunk;
        float s = 0.0f;
        if (end > rows)
            end = rows;
        for (size_t r = chunk * kChunk; r < end; r++)
            s += x[r * width + col];
        partial[i] = s;
    }
}

__global__ void column_total_k(const float *partial, size_t chunks, size_t width, float *ret)
{
    GRID_LOOP(col, width)
    {
        float s = 0.0f;
        for (size_t c = 0; c < chunks; c++)
            s += partial[c * width + col];
        ret[col] = s;
    }
}

__global__ void mul_k(const float *a, const float *b, float *out, size_t n)
{
    GRID_LOOP(i, n)
    out[i] = a[i] * b[i];
}

/* ---- activations -------------------------------------------------------------------------- */

/* Keras 3's constants, as the CPU backend's */
#define ELU_ALPHA        1.0f
#define SELU_ALPHA       1.67326324235437728481f
#define SELU_SCALE       1.05070098735548049342f
#define GELU_C           0.79788456080286535588f
#define GELU_A           0.044715f
#define LEAKY_RELU_SLOPE 0.2f

__device__ float sigmoid_d(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

__device__ float softplus_d(float x)
{
    return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
}

__device__ float relu6_d(float x)
{
    return fminf(fmaxf(x, 0.0f), 6.0f);
}

__device__ float act_d(int act, float v)
{
    switch (act) {
    case JOB_ACT_RELU:
        return v > 0 ? v : 0;
    case JOB_ACT_SIGMOID:
        return 1.0f / (1.0f + expf(-v));
    case JOB_ACT_TANH:
        return tanhf(v);
    case JOB_ACT_GELU:
        return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case JOB_ACT_ELU:
        return v > 0 ? v : ELU_ALPHA * expm1f(v);
    case JOB_ACT_SELU:
        return SELU_SCALE * (v > 0 ? v : SELU_ALPHA * expm1f(v));
    case JOB_ACT_SOFTPLUS:
        return softplus_d(v);
    case JOB_ACT_SOFTSIGN:
        return v / (fabsf(v) + 1.0f);
    case JOB_ACT_SWISH:
        return v * sigmoid_d(v);
    case JOB_ACT_LEAKY_RELU:
        return v > 0 ? v : LEAKY_RELU_SLOPE * v;
    case JOB_ACT_RELU6:
        return relu6_d(v);
    case JOB_ACT_HARD_SIGMOID:
        return relu6_d(v + 3.0f) / 6.0f;
    case JOB_ACT_HARD_SWISH:
        return v * relu6_d(v + 3.0f) / 6.0f;
    case JOB_ACT_EXPONENTIAL:
        return expf(v);
    case JOB_ACT_MISH:
        return v * tanhf(softplus_d(v));
    case JOB_ACT_GELU_APPROXIMATE:
        return 0.5f * v * (1.0f + tanhf(GELU_C * (v + GELU_A * v * v * v)));
    default: /* linear; the row-wise ones have their own kernels */
        return v;
    }
}

/* dy * act'(.), through the output y and (job_activation_needs_input) the input x */
__device__ float act_grad_d(int act, float x, float y, float dy)
{
    switch (act) {
    case JOB_ACT_RELU:
        return y > 0 ? dy : 0;
    case JOB_ACT_SIGMOID:
        return dy * (y * (1 - y));
    case JOB_ACT_TANH:
        return dy * (1 - y * y);
    case JOB_ACT_GELU:
        return dy * (0.5f * (1.0f + erff(x * 0.70710678118654752f)) +
                     x * 0.39894228040143268f * expf(-0.5f * x * x));
    case JOB_ACT_ELU:
        return dy * (y > 0 ? 1.0f : y + ELU_ALPHA);
    case JOB_ACT_SELU:
        return dy * (y > 0 ? SELU_SCALE : y + SELU_SCALE * SELU_ALPHA);
    case JOB_ACT_SOFTPLUS:
        return dy * -expm1f(-y);
    case JOB_ACT_SOFTSIGN:
        return dy * ((1.0f - fabsf(y)) * (1.0f - fabsf(y)));
    case JOB_ACT_SWISH: {
        float s = sigmoid_d(x);
        return dy * (s + x * s * (1.0f - s));
    }
    case JOB_ACT_LEAKY_RELU:
        return dy * (y > 0 ? 1.0f : LEAKY_RELU_SLOPE);
    case JOB_ACT_RELU6:
        return y > 0 && y < 6.0f ? dy : 0;
    case JOB_ACT_HARD_SIGMOID:
        return y > 0 && y < 1.0f ? dy / 6.0f : 0;
    case JOB_ACT_HARD_SWISH:
        return dy * (relu6_d(x + 3.0f) / 6.0f + (x > -3.0f && x < 3.0f ? x / 6.0f : 0.0f));
    case JOB_ACT_EXPONENTIAL:
        return dy * y;
    case JOB_ACT_MISH: {
        float t = tanhf(softplus_d(x));
        return dy * (t + x * (1.0f - t * t) * sigmoid_d(x));
    }
    case JOB_ACT_GELU_APPROXIMATE: {
        float t = tanhf(GELU_C * (x + GELU_A * x * x * x));
        return dy * (0.5f * (1.0f + t) +
                     0.5f * x * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * GELU_A * x * x));
    }
    default:
        return dy;
    }
}

__global__ void activate_k(int act, float *v, size_t n)
{
    GRID_LOOP(i, n)
    v[i] = act_d(act, v[i]);
}

__global__ void activate_backward_k(int act, const float *x, const float *y, float *dy, size_t n)
{
    GRID_LOOP(i, n)
    dy[i] = act_grad_d(act, x != nullptr ? x[i] : 0.0f, y[i], dy[i]);
}

/* Row-wise (softmax, log_softmax): a warp per row, lanes striding over its width. */
constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;

__device__ float warp_max(float v)
{
    for (int d = kWarp / 2; d > 0; d /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
}

__device__ float warp_sum(float v)
{
    for (int d = kWarp / 2; d > 0; d /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, d);
    return v;
}

/* v = softmax(v) or log_softmax(v) over each row */
__global__ void softmax_rows_k(float *v, size_t rows, size_t width, bool log_form)
{
    size_t r = (size_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
    int lane = (int)(threadIdx.x % kWarp);
    float *x = v + r * width, max = -INFINITY, sum = 0.0f;

    if (r >= rows)
        return;
    for (size_t i = lane; i < width; i += kWarp)
        max = fmaxf(max, x[i]);
    max = warp_max(max);
    for (size_t i = lane; i < width; i += kWarp)
        sum += expf(x[i] - max);
    sum = warp_sum(sum);
    if (log_form) {
        float lse = max + logf(sum);
        for (size_t i = lane; i < width; i += kWarp)
            x[i] -= lse;
    } else {
        for (size_t i = lane; i < width; i += kWarp)
            x[i] = expf(x[i] - max) / sum;
    }
}

/* softmax: g = p (g - <g, p>); log_softmax: g = g - e^y sum(g) */
__global__ void softmax_rows_backward_k(const float *y, float *dy, size_t rows, size_t width,
                                        bool log_form)
{
    size_t r = (size_t)blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
    int lane = (int)(threadIdx.x % kWarp);
    const float *p = y + r * width;
    float *g = dy + r * width, s = 0.0f;

    if (r >= rows)
        return;
    for (size_t i = lane; i < width; i += kWarp)
        s += log_form ? g[i] : g[i] * p[i];
    s = warp_sum(s);
    for (size_t i = lane; i < width; i += kWarp)
        g[i] = log_form ? g[i] - expf(p[i]) * s : p[i] * (g[i] - s);
}

unsigned row_blocks(size_t rows)
{
    return (unsigned)((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

/* ---- convolution and pooling --------------------------------------------------------------- */

/* Element i's place in a [batch, h, w, c] tensor. */
struct nhwc {
    size_t b;
    int y, x, c;
};

__device__ nhwc place(size_t i, int h, int w, int c)
{
    nhwc p;
    p.c = (int)(i % c);
    i /= c;
    p.x = (int)(i % w);
    i /= w;
    p.y = (int)(i % h);
    p.b = i / h;
    return p;
}

/* cols[b, oy, ox, ky, kx, c] = in[b, oy*sh - pad_t + ky, ox*sw - pad_l + kx, c], 0 outside */
__global__ void im2col_k(backend_window_t g, const float *in, int batch, float *cols)
{
    size_t n = (size_t)batch * g.oh * g.ow * g.kh * g.kw * g.c;
    GRID_LOOP(i, n)
    {
        size_t t = i;
        int c = (int)(t % g.c);
        t /= g.c;
        int kx = (int)(t % g.kw);
        t /= g.kw;
        int ky = (int)(t % g.kh);
        t /= g.kh;
        int ox = (int)(t % g.ow);
        t /= g.ow;
        int oy = (int)(t % g.oh);
        size_t b = t / g.oh;
        int iy = oy * g.sh - g.pad_t + ky, ix = ox * g.sw - g.pad_l + kx;
        cols[i] = iy < 0 || iy >= g.h || ix < 0 || ix >= g.w
                      ? 0.0f
                      : in[((b * g.h + iy) * g.w + ix) * g.c + c];
    }
}

/* The outputs whose window along one axis covers input position i: [*lo, *hi). */
__device__ void covering(int i, int stride, int pad, int k, int outs, int *lo, int *hi)
{
    int top = i + pad;             /* o * stride <= top < o * stride + k */
    int a = top - k + 1;
    *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
    *hi = top / stride + 1;
    if (*hi > outs)
        *hi = outs;
}

/* Input element i's place, and the outputs whose windows cover it: [*oy0, *oy1) by
 * [*ox0, *ox1). */
__device__ nhwc covered_by(const backend_window_t &g, size_t i, int *oy0, int *oy1, int *ox0,
                           int *ox1)
{
    nhwc p = place(i, g.h, g.w, g.c);
    covering(p.y, g.sh, g.pad_t, g.kh, g.oh, oy0, oy1);
    covering(p.x, g.sw, g.pad_l, g.kw, g.ow, ox0, ox1);
    return p;
}

/* dx[b, iy, ix, c] = the sum of the columns that copied it */
__global__ void col2im_k(backend_window_t g, const float *cols, int batch, float *dx)
{
    size_t n = (size_t)batch * g.h * g.w * g.c, row = (size_t)g.kh * g.kw * g.c;
    GRID_LOOP(i, n)
    {
        int oy0, oy1, ox0, ox1;
        nhwc p = covered_by(g, i, &oy0, &oy1, &ox0, &ox1);
        size_t b = p.b;
        int iy = p.y, ix = p.x, c = p.c;
        float s = 0.0f;
        for (int oy = oy0; oy < oy1; oy++)
            for (int ox = ox0; ox < ox1; ox++) {
                int ky = iy + g.pad_t - oy * g.sh, kx = ix + g.pad_l - ox * g.sw;
                s += cols[((b * g.oh + oy) * g.ow + ox) * row + ((size_t)ky * g.kw + kx) * g.c + c];
            }
        dx[i] = s;
    }
}

/* The part of a window inside the input along one axis, as the CPU backend's window_span. */
__device__ void span(int o, int stride, int pad, int k, int limit, int *lo, int *hi)
{
    int a = o * stride - pad, b = a + k;
    *lo = a < 0 ? 0 : a;
    *hi = b > limit ? limit : b;
}

/* Output element i's window: its example's image, the rows [*y0, *y1) and columns [*x0, *x1)
 * of it inside the input, and its channel. */
__device__ const float *window_of(const backend_window_t &g, size_t i, const float *in, int *y0,
                                  int *y1, int *x0, int *x1, int *c)
{
    nhwc p = place(i, g.oh, g.ow, g.c);
    span(p.y, g.sh, g.pad_t, g.kh, g.h, y0, y1);
    span(p.x, g.sw, g.pad_l, g.kw, g.w, x0, x1);
    *c = p.c;
    return in + p.b * g.h * g.w * g.c;
}

/* out[b, oy, ox, c]: the window's largest value, the first on ties, and its offset in the
 * example's image (argmax); the window's first element when nothing beats -inf */
__global__ void max_pool_k(backend_window_t g, const float *in, int batch, float *out,
                           int32_t *argmax)
{
    size_t n = (size_t)batch * g.oh * g.ow * g.c;
    GRID_LOOP(i, n)
    {
        int y0, y1, x0, x1, c;
        const float *img = window_of(g, i, in, &y0, &y1, &x0, &x1, &c);
        float best = -INFINITY;
        int32_t at = (int32_t)(((size_t)y0 * g.w + x0) * g.c + c);
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++) {
                int32_t off = (int32_t)(((size_t)y * g.w + x) * g.c + c);
                if (img[off] > best) {
                    best = img[off];
                    at = off;
                }
            }
        out[i] = best;
        argmax[i] = at;
    }
}

__global__ void max_pool_backward_k(backend_window_t g, const int32_t *argmax, const float *dy,
                                    int batch, float *dx)
{
    size_t out_len = (size_t)g.oh * g.ow * g.c, in_len = (size_t)g.h * g.w * g.c;
    GRID_LOOP(i, (size_t)batch * out_len)
    atomicAdd(dx + (i / out_len) * in_len + argmax[i], dy[i]);
}

/* TensorFlow's average: over the window's elements inside the input */
__global__ void average_pool_k(backend_window_t g, const float *in, int batch, float *out)
{
    size_t n = (size_t)batch * g.oh * g.ow * g.c;
    GRID_LOOP(i, n)
    {
        int y0, y1, x0, x1, c;
        const float *img = window_of(g, i, in, &y0, &y1, &x0, &x1, &c);
        float s = 0.0f;
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++)
                s += img[((size_t)y * g.w + x) * g.c + c];
        out[i] = s * (1.0f / (float)((y1 - y0) * (x1 - x0)));
    }
}

/* dx[b, iy, ix, c] = the sum over the windows covering it of dy / the window's count */
__global__ void average_pool_backward_k(backend_window_t g, const float *dy, int batch, float *dx)
{
    size_t n = (size_t)batch * g.h * g.w * g.c, out_len = (size_t)g.oh * g.ow * g.c;
    GRID_LOOP(i, n)
    {
        int oy0, oy1, ox0, ox1;
        nhwc p = covered_by(g, i, &oy0, &oy1, &ox0, &ox1);
        size_t b = p.b;
        int c = p.c;
        float s = 0.0f;
        for (int oy = oy0; oy < oy1; oy++)
            for (int ox = ox0; ox < ox1; ox++) {
                int y0, y1, x0, x1;
                span(oy, g.sh, g.pad_t, g.kh, g.h, &y0, &y1);
                span(ox, g.sw, g.pad_l, g.kw, g.w, &x0, &x1);
                s += dy[b * out_len + ((size_t)oy * g.ow + ox) * g.c + c] *
                     (1.0f / (float)((y1 - y0) * (x1 - x0)));
            }
        dx[i] = s;
    }
}

__global__ void mean_steps_k(const float *x, int batch, size_t steps, size_t channels,
                             float *out)
{
    GRID_LOOP(i, (size_t)batch * channels)
    {
        size_t b = i / channels, c = i % channels;
        const float *xb = x + b * steps * channels;
        float s = 0.0f;
        for (size_t t = 0; t < steps; t++)
            s += xb[t * channels + c];
        out[i] = s / (float)steps;
    }
}

__global__ void mean_steps_backward_k(const float *dy, int batch, size_t steps, size_t channels,
                                      float *dx)
{
    float scale = 1.0f / (float)steps;
    GRID_LOOP(i, (size_t)batch * steps * channels)
    dx[i] = dy[(i / (steps * channels)) * channels + i % channels] * scale;
}

/* ---- embedding rows ----------------------------------------------------------------------- */

__global__ void gather_rows_k(const float *table, size_t dim, const int64_t *ids, size_t n,
                              float *out)
{
    GRID_LOOP(i, n * dim)
    out[i] = table[(size_t)ids[i / dim] * dim + i % dim];
}

__global__ void scatter_add_rows_k(const float *dy, size_t dim, const int32_t *slot, size_t n,
                                   float *rows)
{
    GRID_LOOP(i, n * dim)
    atomicAdd(rows + (size_t)slot[i / dim] * dim + i % dim, dy[i]);
}

} // namespace

/* ---- the launchers -------------------------------------------------------------------------- */

extern "C" int cuda_fill_rows(float *out, size_t rows, const float *row, size_t width)
{
    size_t n = rows * width;
    if (n == 0)
        return 0;
    fill_rows_k<<<blocks_for(n), kThreads>>>(out, n, row, width);
    return launched();
}

extern "C" size_t cuda_column_sums_scratch(size_t rows, size_t width)
{
    return (rows + kChunk - 1) / kChunk * width;
}

extern "C" int cuda_column_sums(const float *x, size_t rows, size_t width, float *partial,
                                float *ret)
{
    size_t chunks = (rows + kChunk - 1) / kChunk;
    if (width == 0)
        return 0;
    if (chunks == 0) {
        fill_rows_k<<<blocks_for(width), kThreads>>>(ret, width, nullptr, width);
        return launched();
    }
    column_partials_k<<<blocks_for(chunks * width), kThreads>>>(x, rows, width, partial);
    column_total_k<<<blocks_for(width), kThreads>>>(partial, chunks, width, ret);
    return launched();
}

extern "C" int cuda_mul(const float *a, const float *b, float *out, size_t n)
{
    if (n == 0)
        return 0;
    mul_k<<<blocks_for(n), kThreads>>>(a, b, out, n);
    return launched();
}

extern "C" int cuda_activate(int act, float *v, size_t n, size_t width)
{
    bool rows = act == JOB_ACT_SOFTMAX || act == JOB_ACT_LOG_SOFTMAX;
    if (n == 0 || act == JOB_ACT_LINEAR || (rows && n / width == 0))
        return 0;
    if (rows)
        softmax_rows_k<<<row_blocks(n / width), kThreads>>>(v, n / width, width,
                                                             act == JOB_ACT_LOG_SOFTMAX);
    else
        activate_k<<<blocks_for(n), kThreads>>>(act, v, n);
    return launched();
}

extern "C" int cuda_activate_backward(int act, const float *x, const float *y, float *dy,
                                      size_t n, size_t width)
{
    bool rows = act == JOB_ACT_SOFTMAX || act == JOB_ACT_LOG_SOFTMAX;
    if (n == 0 || act == JOB_ACT_LINEAR || (rows && n / width == 0))
        return 0;
    if (rows)
        softmax_rows_backward_k<<<row_blocks(n / width), kThreads>>>(
            y, dy, n / width, width, act == JOB_ACT_LOG_SOFTMAX);
    else
        activate_backward_k<<<blocks_for(n), kThreads>>>(act, x, y, dy, n);
    return launched();
}

extern "C" int cuda_im2col(const backend_window_t *g, const float *in, int batch, float *cols)
{
    size_t n = (size_t)batch * g->oh * g->ow * g->kh * g->kw * g->c;
    if (n == 0)
        return 0;
    im2col_k<<<blocks_for(n), kThreads>>>(*g, in, batch, cols);
    return launched();
}

extern "C" int cuda_col2im(const backend_window_t *g, const float *cols, int batch, float *dx)
{
    size_t n = (size_t)batch * g->h * g->w * g->c;
    if (n == 0)
        return 0;
    col2im_k<<<blocks_for(n), kThreads>>>(*g, cols, batch, dx);
    return launched();
}

extern "C" int cuda_max_pool(const backend_window_t *g, const float *in, int batch, float *out,
                             int32_t *argmax)
{
    size_t n = (size_t)batch * g->oh * g->ow * g->c;
    if (n == 0)
        return 0;
    max_pool_k<<<blocks_for(n), kThreads>>>(*g, in, batch, out, argmax);
    return launched();
}

/* dx is zeroed first (cuda.c), then each output's gradient added at its argmax */
extern "C" int cuda_max_pool_backward(const backend_window_t *g, const int32_t *argmax,
                                      const float *dy, int batch, float *dx)
{
    size_t n = (size_t)batch * g->oh * g->ow * g->c;
    if (n == 0)
        return 0;
    max_pool_backward_k<<<blocks_for(n), kThreads>>>(*g, argmax, dy, batch, dx);
    return launched();
}

extern "C" int cuda_average_pool(const backend_window_t *g, const float *in, int batch, float *out)
{
    size_t n = (size_t)batch * g->oh * g->ow * g->c;
    if (n == 0)
        return 0;
    average_pool_k<<<blocks_for(n), kThreads>>>(*g, in, batch, out);
    return launched();
}

extern "C" int cuda_average_pool_backward(const backend_window_t *g, const float *dy, int batch,
                                          float *dx)
{
    size_t n = (size_t)batch * g->h * g->w * g->c;
    if (n == 0)
        return 0;
    average_pool_backward_k<<<blocks_for(n), kThreads>>>(*g, dy, batch, dx);
    return launched();
}

extern "C" int cuda_mean_steps(const float *x, int batch, size_t steps, size_t channels,
                               float *out)
{
    size_t n = (size_t)batch * channels;
    if (n == 0)
        return 0;
    mean_steps_k<<<blocks_for(n), kThreads>>>(x, batch, steps, channels, out);
    return launched();
}

extern "C" int cuda_mean_steps_backward(const float *dy, int batch, size_t steps,
                                        size_t channels, float *dx)
{
    size_t n = (size_t)batch * steps * channels;
    if (n == 0)
        return 0;
    mean_steps_backward_k<<<blocks_for(n), kThreads>>>(dy, batch, steps, channels, dx);
    return launched();
}

extern "C" int cuda_gather_rows(const float *table, size_t dim, const int64_t *ids, size_t n,
                                float *out)
{
    if (n * dim == 0)
        return 0;
    gather_rows_k<<<blocks_for(n * dim), kThreads>>>(table, dim, ids, n, out);
    return launched();
}

extern "C" int cuda_scatter_add_rows(const float *dy, size_t dim, const int32_t *slot, size_t n,
                                     float *rows)
{
    if (n * dim == 0)
        return 0;
    scatter_add_rows_k<<<blocks_for(n * dim), kThreads>>>(dy, dim, slot, n, rows);
    return launched();
}
