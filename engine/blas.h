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
#include <stddef.h>

#include "base/status.h"

/* Row-major single-precision GEMM: C = alpha * op(A) op(B) + beta * C. */
typedef void (*blas_sgemm_fn)(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                              const float *a, int lda, const float *b, int ldb, float beta,
                              float *c, int ldc);

/* The most threads blas_set_threads takes. */
#define BLAS_MAX_THREADS 64

/* Loads the BLAS once (thread-safe, idempotent). */
status_t blas_init(status_msg_t *err);

/* The kernel family in use ("SkylakeX", "Haswell", ...). */
const char *blas_core_name(void);

/* Splits each large GEMM over `threads` threads of Tessera's own (1 = the calling thread
 * only). Call before training starts; not while a GEMM runs. The pool only grows: helpers live
 * for the process, spinning for a fraction of a millisecond after each GEMM in case another
 * follows, then sleeping. */
status_t blas_set_threads(int threads, status_msg_t *err);

/* C = alpha * op(A) * op(B) + beta * C, row-major. blas_init must have succeeded. Products
 * large enough to pay for it are split by rows of C (or columns, when C has few rows) over the
 * threads set by blas_set_threads. */
void blas_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* With serial set, the calling thread's GEMMs run on it alone, never on the pool: for threads
 * that run GEMMs at the same time as others (the pool serves one caller at a time). */
void blas_thread_serial(bool serial);

/* Work split over the GEMMs' threads: fn(arg, part, parts) for every part, part 0 on the
 * calling thread, returning when all are done; parts is 1 (one call here) for small work
 * (`work`: about the floats it moves), one thread, or a serial thread. Each part must touch
 * what no other does, so that results do not depend on the thread count. */
typedef void (*blas_part_fn)(void *arg, int part, int parts);
void blas_parallel(blas_part_fn fn, void *arg, size_t work);

/* The calling thread's floating-point control state (MXCSR on x86). */
typedef unsigned blas_fp_mode_t;

/* Makes float arithmetic on the calling thread flush denormals to zero (FTZ and DAZ on x86; a
 * no-op elsewhere), as TensorFlow's compute threads do, and returns the previous mode for
 * blas_fp_mode_restore. Denormals are 50-100 times slower to compute with, and training makes
 * them: Adam's first moment of a weight whose gradient stays 0 (a pixel that is always blank)
 * decays by beta_1 every step and turns denormal after about 800 steps. The pool's helpers take
 * on the caller's mode for each GEMM they share, so results do not depend on the thread count. */
blas_fp_mode_t blas_flush_denormals(void);

/* Puts the calling thread's floating-point mode back to one blas_flush_denormals returned. */
void blas_fp_mode_restore(blas_fp_mode_t mode);

#endif
