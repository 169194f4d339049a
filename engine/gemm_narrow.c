/* Matrix products with a narrow side (gemm_narrow.h). Built with -ffp-contract=fast (meson):
 * each `s += x * b` is one fused multiply-add, as in OpenBLAS's kernels. */
#include "gemm_narrow.h"

#include <stddef.h>
#include <string.h>

typedef void (*narrow_fn)(int m, int n, int k, const float *a, size_t lda, const float *b,
                          size_t ldb, float *c, size_t ldc, bool acc);

static narrow_fn nn_impl, tn_impl; /* NULL: none for this CPU */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)

#include "narrow_simd.h"

#define NARROW_ROWS     NARROW_V4_ROWS
#define NARROW_FN(name) name##_v4
#define NARROW_TARGET   NARROW_V4_TARGET
#include "gemm_narrow_body.h"
#undef NARROW_ROWS
#undef NARROW_FN
#undef NARROW_TARGET

#define NARROW_ROWS     NARROW_V3_ROWS
#define NARROW_FN(name) name##_v3
#define NARROW_TARGET   NARROW_V3_TARGET
#include "gemm_narrow_body.h"
#undef NARROW_ROWS
#undef NARROW_FN
#undef NARROW_TARGET

void gemm_narrow_select(int level)
{
    nn_impl = level >= 2 ? nn_v4 : level == 1 ? nn_v3 : NULL;
    tn_impl = level >= 2 ? tn_v4 : level == 1 ? tn_v3 : NULL;
}

#else

void gemm_narrow_select(int level)
{
    (void)level; /* OpenBLAS for every product */
}

#endif

bool gemm_narrow_fits(bool trans_a, bool trans_b, int m, int n, int k, float alpha, float beta)
{
    return nn_impl != NULL && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) &&
           (n == 16 || n == 32) && !trans_b && (trans_a ? k >= 256 && m >= 1 : m >= 64 && k >= 1);
}

void gemm_narrow(bool trans_a, int m, int n, int k, const float *a, int lda, const float *b,
                 int ldb, float beta, float *c, int ldc)
{
    (trans_a ? tn_impl : nn_impl)(m, n, k, a, (size_t)lda, b, (size_t)ldb, c, (size_t)ldc,
                                  beta != 0.0f);
}
