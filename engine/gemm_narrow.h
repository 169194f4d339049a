/* Matrix products with a narrow side: C of 16 or 32 columns, as a convolution of 16 or 32
 * filters makes (its columns times its kernel, forward; its columns' transpose times the output
 * gradient, for the kernel's gradient). OpenBLAS packs both operands of every product into its
 * own layout first, and with so few columns that packing costs as much as the arithmetic; these
 * kernels read A and B where they are and keep a tile of C in vector registers while they run
 * down the long side (about 1.2-1.6 times OpenBLAS's speed on such shapes). blas.c routes the
 * products that fit to them. */
#ifndef TESSERA_ENGINE_GEMM_NARROW_H
#define TESSERA_ENGINE_GEMM_NARROW_H

#include <stdbool.h>

/* Picks the kernels for the CPU: 2 for AVX-512 (F, VL, BW, DQ), 1 for AVX2 with FMA,
 * 0 for none (every product stays OpenBLAS's). Call once, before any product. */
void gemm_narrow_select(int level);

/* Whether row-major C = alpha op(A) op(B) + beta C is a product these kernels take: alpha 1,
 * beta 0 or 1, n 16 or 32, and long: A not transposed with m >= 64 rows, or A transposed over
 * k >= 256 rows. Decide on the whole product: a part of its rows is computed the same way. */
bool gemm_narrow_fits(bool trans_a, bool trans_b, int m, int n, int k, float alpha, float beta);

/* The product (or a block of C's rows of one that fits), as cblas_sgemm computes it. The sums
 * run in the same order whatever block of rows a call computes, so results do not depend on
 * how a product is split over threads. */
void gemm_narrow(bool trans_a, int m, int n, int k, const float *a, int lda, const float *b,
                 int ldb, float beta, float *c, int ldc);

#endif
