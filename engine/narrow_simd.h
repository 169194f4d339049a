/* What the narrow kernels (gemm_narrow.c, conv_direct.c) are written in: GCC's vectors of 8
 * floats, unaligned loads and stores, and the tile sizes of each instruction set. Included by
 * those files only, on x86-64 with GCC. */
#ifndef TESSERA_ENGINE_NARROW_SIMD_H
#define TESSERA_ENGINE_NARROW_SIMD_H

typedef float vec8 __attribute__((vector_size(32)));
typedef float vec8_u __attribute__((vector_size(32), aligned(4))); /* unaligned access */
#define LOAD(p)     (*(const vec8_u *)(p))
#define STORE(p, v) (*(vec8_u *)(p) = (v))

#define NARROW_CHUNK 256 /* rows of A^T B at a time: 256 x 288 floats of A stay in L2 */

/* AVX-512: 32 vector registers, 24 of them accumulators */
#define NARROW_V4_ROWS   12
#define NARROW_V4_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
/* AVX2: 16 vector registers, 12 of them accumulators */
#define NARROW_V3_ROWS   6
#define NARROW_V3_TARGET __attribute__((target("avx2,fma")))

#endif
