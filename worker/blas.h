/* The BLAS the CPU backend calls, chosen for this CPU.
 *
 * Debian's OpenBLAS is built for many CPUs and picks its kernels when it is loaded; on AMD Zen 4
 * and other AVX-512 machines it picks its Haswell (AVX2) kernels, half as fast for sgemm.
 * blas_init() therefore reads the CPU's features itself (CPUID and the OS's saved vector
 * state), sets OPENBLAS_CORETYPE to the best kernel family the CPU runs (SkylakeX with
 * AVX-512F/BW/DQ/VL, Haswell with AVX2+FMA, else OpenBLAS's own choice), then loads OpenBLAS
 * with dlopen, so the choice takes effect; and it makes OpenBLAS single-threaded, since Tessera
 * runs its own threads. TESSERA_BLAS_CORETYPE overrides the choice. */
#ifndef TESSERA_BLAS_H
#define TESSERA_BLAS_H

#include <stdbool.h>

#include "status.h"

/* Row-major single-precision GEMM: C = alpha * op(A) op(B) + beta * C. */
typedef void (*blas_sgemm_fn)(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                              const float *a, int lda, const float *b, int ldb, float beta,
                              float *c, int ldc);

/* Loads the BLAS once (thread-safe, idempotent). */
status_t blas_init(status_msg_t *err);

/* The kernel family in use ("SkylakeX", "Haswell", ...). */
const char *blas_core_name(void);

/* Splits each large GEMM over `threads` threads of Tessera's own (1 = the calling thread
 * only). Call before training starts; not while a GEMM runs. */
status_t blas_set_threads(int threads, status_msg_t *err);

/* C = alpha * op(A) * op(B) + beta * C, row-major. blas_init must have succeeded. Products
 * large enough to pay for it are split by rows of C (or columns, when C has few rows) over the
 * threads set by blas_set_threads. */
void blas_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc);

#endif
