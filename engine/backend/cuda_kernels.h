/* The CUDA backend's kernels, launched on the calling thread's default stream (the build
 * compiles with per-thread default streams). Each launcher returns the launch's cudaError_t as
 * an int (0: launched); the backend (cuda.c) waits for the stream and keeps the first error.
 *
 * Plain C declarations, so that cuda.c (a C file) and cuda_kernels.cu (CUDA C++) share them;
 * the semantics of each are those of backend.h's entry of the same name. */
#ifndef TESSERA_CUDA_KERNELS_H
#define TESSERA_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

int cuda_fill_rows(float *out, size_t rows, const float *row, size_t width);
/* partial: scratch of cuda_column_sums_scratch(rows, width) floats */
size_t cuda_column_sums_scratch(size_t rows, size_t width);
int cuda_column_sums(const float *x, size_t rows, size_t width, float *partial, float *ret);
int cuda_mul(const float *a, const float *b, float *out, size_t n);
/* act: a job_activation_t */
int cuda_activate(int act, float *v, size_t n, size_t width);
int cuda_activate_backward(int act, const float *x, const float *y, float *dy, size_t n,
                           size_t width);
int cuda_im2col(const backend_window_t *g, const float *in, int batch, float *cols);
int cuda_col2im(const backend_window_t *g, const float *cols, int batch, float *dx);
int cuda_max_pool(const backend_window_t *g, const float *in, int batch, float *out,
                  int32_t *argmax);
int cuda_max_pool_backward(const backend_window_t *g, const int32_t *argmax, const float *dy,
                           int batch, float *dx);
int cuda_average_pool(const backend_window_t *g, const float *in, int batch, float *out);
int cuda_average_pool_backward(const backend_window_t *g, const float *dy, int batch, float *dx);
int cuda_mean_steps(const float *x, int batch, size_t steps, size_t channels, float *out);
int cuda_mean_steps_backward(const float *dy, int batch, size_t steps, size_t channels, float *dx);
/* ids and slot: device copies of the host's */
int cuda_gather_rows(const float *table, size_t dim, const int64_t *ids, size_t n, float *out);
int cuda_scatter_add_rows(const float *dy, size_t dim, const int32_t *slot, size_t n, float *rows);

#ifdef __cplusplus
}
#endif

#endif
