/* Direct convolutions (conv_direct.h). Built as gemm_narrow.c is, with -ffp-contract=fast:
 * each `s += x * b` is one fused multiply-add. */
#include "conv_direct.h"

#include <string.h>

typedef struct conv_direct_impl {
    void (*fwd)(const conv_direct_t *d, const float *pad, const float *w, float *out, int lo,
                int hi);
    void (*gk)(const conv_direct_t *d, const float *pad, const float *dy, float *dw, int lo,
               int hi);
    void (*gi)(const conv_direct_t *d, const float *dy, const float *wt, float *dpad, int lo,
               int hi);
} conv_direct_impl_t;

static const conv_direct_impl_t *impl; /* NULL: none for this CPU */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)

#include "narrow_simd.h"

#define NARROW_ROWS     NARROW_V4_ROWS
#define NARROW_FN(name) conv_##name##_v4
#define NARROW_TARGET   NARROW_V4_TARGET
#include "conv_direct_body.h"
#undef NARROW_ROWS
#undef NARROW_FN
#undef NARROW_TARGET

#define NARROW_ROWS     NARROW_V3_ROWS
#define NARROW_FN(name) conv_##name##_v3
#define NARROW_TARGET   NARROW_V3_TARGET
#include "conv_direct_body.h"
#undef NARROW_ROWS
#undef NARROW_FN
#undef NARROW_TARGET

static const conv_direct_impl_t impl_v4 = {conv_fwd_v4, conv_gk_v4, conv_gi_v4};
static const conv_direct_impl_t impl_v3 = {conv_fwd_v3, conv_gk_v3, conv_gi_v3};

void conv_direct_select(int level)
{
    impl = level >= 2 ? &impl_v4 : level == 1 ? &impl_v3 : NULL;
}

#else

void conv_direct_select(int level)
{
    (void)level; /* im2col and OpenBLAS for every convolution */
}

#endif

bool conv_direct_fits(int seg, int filters)
{
    return impl != NULL && filters > 0 && filters <= 64 && filters % 16 == 0 && seg > 0 &&
           seg % 16 == 0;
}

void conv_direct_forward(const conv_direct_t *d, const float *pad, const float *w, float *out,
                         int lo, int hi)
{
    impl->fwd(d, pad, w, out, lo, hi);
}

void conv_direct_grad_kernel(const conv_direct_t *d, const float *pad, const float *dy, float *dw,
                             int lo, int hi)
{
    impl->gk(d, pad, dy, dw, lo, hi);
}

void conv_direct_grad_input(const conv_direct_t *d, const float *dy, const float *wt, float *dpad,
                            int lo, int hi)
{
    impl->gi(d, dy, wt, dpad, lo, hi);
}
