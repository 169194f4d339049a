/* bfloat16: the top 16 bits of a float32 (sign, the 8 exponent bits, 7 of the mantissa's), as
 * parameter-server jobs with train.wire_dtype: bfloat16 send gradients and values. Narrowing
 * rounds to the nearest, ties to even, as TensorFlow's and PyTorch's casts do; NaN stays NaN;
 * widening is exact. */
#ifndef TESSERA_BF16_H
#define TESSERA_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/pieces.h"

static inline uint16_t bf16_from_float(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

/* dst[i] = bf16(src[i]) for n elements. */
void bf16_from_floats(uint16_t *dst, const float *src, size_t n);

/* dst[i] = float(src[i]); src at any byte address. */
void bf16_to_floats(float *dst, const unaligned_u16_t *src, size_t n);

/* Error feedback: t = g[i] + residual[i]; dst[i] = bf16(t); residual[i] = t - float(dst[i]).
 * What rounding drops from one gradient is added to the next, so that none is lost for good. */
void bf16_from_floats_feedback(uint16_t *dst, const float *g, float *residual, size_t n);

#endif
