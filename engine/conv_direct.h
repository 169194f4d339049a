/* Convolutions of 16 to 64 filters (a multiple of 16) straight from a zero-padded copy of the
 * input, without the columns im2col writes: each output pixel's window is kh runs of kw * c
 * floats in the padded image (channels last), which these kernels read where they are. The
 * columns of a 14x14x16 batch of 64 take 7 MB that im2col writes and the products read back
 * twice; the padded copy takes 1 MB. The arithmetic is gemm_narrow's: the same tiles, the same
 * order of sums, so with 16 or 32 filters the forward pass and the kernel's gradient are bit
 * for bit those of im2col and gemm_narrow.
 *
 * The caller (backend/cpu.c) pads the input and splits the work over threads: forward by
 * output rows, the kernel's gradient by its rows (every sum then runs over all output rows in
 * order), the input's gradient by images. Results do not depend on the split. */
#ifndef TESSERA_ENGINE_CONV_DIRECT_H
#define TESSERA_ENGINE_CONV_DIRECT_H

#include <stdbool.h>
#include <stddef.h>

/* One convolution over a padded batch. */
typedef struct conv_direct {
    int rows;          /* output pixels: batch * oh * ow */
    int oh, ow;        /* output height and width */
    int kh;            /* kernel rows */
    int seg;           /* floats of one kernel row's window: kw * c, a multiple of 16 */
    int filters;       /* 16, 32, 48 or 64 */
    size_t row_stride; /* floats between rows of the padded image: wp * c */
    size_t image;      /* floats of one padded image: hp * wp * c */
    size_t step_y;     /* floats between the windows of vertically neighbouring outputs */
    size_t step_x;     /* the same horizontally: sw * c */
} conv_direct_t;

/* Picks the kernels for the CPU as gemm_narrow_select does (2: AVX-512, 1: AVX2, 0: none). */
void conv_direct_select(int level);

/* Whether the kernels take a convolution of `filters` filters whose kernel rows are `seg`
 * floats: a CPU they were built for, 16 to 64 filters in steps of 16, seg a multiple of 16.
 * (Wider, OpenBLAS's products over columns win back what im2col costs.) */
bool conv_direct_fits(int seg, int filters);

/* out[r, f] += the convolution, for output rows [lo, hi). w is the kernel [kh * seg, filters]. */
void conv_direct_forward(const conv_direct_t *d, const float *pad, const float *w, float *out,
                         int lo, int hi);

/* dw[k, f] = sum over every output row r of window(r)[k] * dy[r, f], for kernel rows [lo, hi)
 * of dw (k < kh * seg). */
void conv_direct_grad_kernel(const conv_direct_t *d, const float *pad, const float *dy, float *dw,
                             int lo, int hi);

/* dpad += the input's gradient, for the output rows [lo, hi) (whole images, so that no other
 * call adds into the same floats): window(r)[k] += sum over f of dy[r, f] * w[k, f]. wt is the
 * kernel transposed, [filters, kh * seg]. */
void conv_direct_grad_input(const conv_direct_t *d, const float *dy, const float *wt, float *dpad,
                            int lo, int hi);

#endif
