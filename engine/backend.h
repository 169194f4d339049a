/* The device a model computes on: its memory and the kernels the layers are made of.
 *
 * Layers never call BLAS or touch a device themselves: they plan their buffers with the
 * backend's allocator and run the backend's kernels on them. The CPU backend (backend/cpu.c,
 * OpenBLAS for the matrix products) is the first implementation; the CUDA backend
 * (backend/cuda.c, cuBLAS and CUDA kernels) provides the same table over device memory.
 * Pointers passed to the kernels are the backend's memory; the host-side values a kernel takes
 * (ids, shapes) are plain arguments.
 *
 * Tensors are float32, row-major, channels last (NHWC), batch first. */
#ifndef TESSERA_BACKEND_H
#define TESSERA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "job/job.h"

/* A 2-D window sliding over an NHWC image: convolution and pooling. */
typedef struct backend_window {
    int h, w, c;      /* input height, width, channels */
    int kh, kw;       /* window */
    int sh, sw;       /* strides */
    int oh, ow;       /* output height and width */
    int pad_t, pad_l; /* padding before the first row and column */
} backend_window_t;

typedef struct backend {
    const char *name;
    /* The kernels cannot read the host's own memory (malloc's): the model copies its inputs
     * into memory of the backend first. The backend's memory is readable by the host after
     * each kernel returns, on every backend. */
    bool device_memory;
    /* Prepares the kernels; idempotent and thread-safe. */
    status_t (*init)(status_msg_t *err);
    /* Compute threads a kernel may use; call before training, not while a kernel runs. */
    status_t (*set_threads)(int threads, status_msg_t *err);
    /* The first failure of a kernel since init (the kernels themselves return nothing), or
     * STATUS_OK; NULL where kernels cannot fail. A step checks it before it trusts its
     * results. */
    status_t (*check)(status_msg_t *err);

    /* Memory: zeroed, 64-byte aligned; NULL when there is not enough. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *dst, size_t bytes);

    /* C = alpha * op(A) op(B) + beta * C. */
    void (*gemm)(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
    /* Every row of out (rows x width) = row, or zeros when row is NULL. */
    void (*fill_rows)(float *out, size_t rows, const float *row, size_t width);
    /* ret[i] = sum over rows of x[r, i]. */
    void (*column_sums)(const float *x, size_t rows, size_t width, float *ret);
    /* out[i] = a[i] * b[i]. */
    void (*mul)(const float *a, const float *b, float *out, size_t n);

    /* v = act(v) in place; softmax and log_softmax over rows of `width`. */
    void (*activate)(job_activation_t act, float *v, size_t n, size_t width);
    /* dy *= act'(.), through the activation's output y and, for the activations that need it
     * (job_activation_needs_input), its input x (else NULL). */
    void (*activate_backward)(job_activation_t act, const float *x, const float *y, float *dy,
                              size_t n, size_t width);

    /* Convolution as a matrix product: one row of kh*kw*c values per output pixel. */
    void (*im2col)(const backend_window_t *g, const float *in, int batch, float *cols);
    void (*col2im)(const backend_window_t *g, const float *cols, int batch, float *dx);
    /* Convolution without columns, straight from a zero-padded copy of the input; optional
     * (NULL, or conv_fits false: im2col and gemm). The kernel w is [kh * kw * c, filters].
     * conv_pad writes the copy (conv_pad_floats of it), conv_forward adds the convolution into
     * out, conv_grad_kernel sets dw from the same copy, conv_grad_input sets dx, through dpad
     * (conv_pad_floats, its own) and wt (filters * kh * kw * c floats, scratch). */
    bool (*conv_fits)(const backend_window_t *g, int filters);
    size_t (*conv_pad_floats)(const backend_window_t *g, int batch);
    void (*conv_pad)(const backend_window_t *g, const float *in, int batch, float *pad);
    void (*conv_forward)(const backend_window_t *g, const float *pad, int batch, const float *w,
                         int filters, float *out);
    void (*conv_grad_kernel)(const backend_window_t *g, const float *pad, int batch,
                             const float *dy, int filters, float *dw);
    void (*conv_grad_input)(const backend_window_t *g, const float *dy, int batch, const float *w,
                            int filters, float *wt, float *dpad, float *dx);

    /* Pooling. Max keeps each output's input offset in argmax for the backward pass; average
     * divides by the window's elements inside the input, as TensorFlow does. */
    void (*max_pool)(const backend_window_t *g, const float *in, int batch, float *out,
                     int32_t *argmax);
    void (*max_pool_backward)(const backend_window_t *g, const int32_t *argmax, const float *dy,
                              int batch, float *dx);
    void (*average_pool)(const backend_window_t *g, const float *in, int batch, float *out);
    void (*average_pool_backward)(const backend_window_t *g, const float *dy, int batch, float *dx);
    /* out[b, c] = mean over s of x[b, s, c], and its gradient. */
    void (*mean_steps)(const float *x, int batch, size_t steps, size_t channels, float *out);
    void (*mean_steps_backward)(const float *dy, int batch, size_t steps, size_t channels,
                                float *dx);

    /* Embedding: out[i] = table[ids[i]] (rows of dim); rows[slot[i]] += dy[i]. */
    void (*gather_rows)(const float *table, size_t dim, const int64_t *ids, size_t n, float *out);
    void (*scatter_add_rows)(const float *dy, size_t dim, const int32_t *slot, size_t n,
                             float *rows);
} backend_t;

/* The CPU backend: OpenBLAS (chosen for this CPU, see blas.h) and vectorized C loops. */
const backend_t *backend_cpu(void);

/* The backend of a job's device (job.h's job_device_t: cpu, cuda, cuda:N; a bare cuda is
 * cuda:0), initialized. Fails with STATUS_CUDA naming the device where it is not there, and
 * with STATUS_UNIMPLEMENTED where this build has no CUDA backend. One CUDA device a process. */
status_t backend_open(const job_device_t *device, const backend_t **ret, status_msg_t *err);

/* The CUDA backend on device `ordinal`, initialized (backend/cuda.c; built with CUDA only). */
status_t backend_cuda(int ordinal, const backend_t **ret, status_msg_t *err);

#endif
