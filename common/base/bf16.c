/* The loops of bf16.h, written branch-free per element so that they vectorize. */
#include "base/bf16.h"

void bf16_from_floats(uint16_t *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_from_float(src[i]);
}

void bf16_to_floats(float *restrict dst, const unaligned_u16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16_to_float(src[i]);
}

void bf16_from_floats_feedback(uint16_t *restrict dst, const float *restrict g,
                               float *restrict residual, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float t = g[i] + residual[i];
        uint16_t h = bf16_from_float(t);
        dst[i] = h;
        residual[i] = t - bf16_to_float(h);
    }
}
