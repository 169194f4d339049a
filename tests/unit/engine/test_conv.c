/* The CPU backend's direct convolutions (engine/conv_direct.h, without columns) against sums in
 * double over the definition, for the shapes they take: 16 or 32 filters over 16 or 32
 * channels, kernels of 1x1 to 5x3, strides 1 and 2, same and valid padding, images whose sides
 * fill no whole tile, and a Conv1D's image of height 1; 48 and 64 filters too. With 16 or 32
 * filters the forward pass and the kernel's gradient are bit for bit im2col's with the narrow
 * products (as conv_direct.h says), and all three results are the same on 1 and 3 threads. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "blas.h"
#include "check_run.h"
#include "conv_direct.h"
#include "gemm_narrow.h"

typedef struct cv {
    int h, w, c, f, kh, kw, sh, sw;
    bool same;
} cv_t;

static const cv_t cases[] = {
    {14, 14, 16, 16, 3, 3, 1, 1, true},  {14, 14, 16, 32, 3, 3, 2, 2, true},
    {7, 7, 32, 32, 3, 3, 1, 1, true},    {14, 14, 16, 32, 1, 1, 2, 2, false},
    {9, 11, 16, 16, 5, 3, 2, 1, false},  {5, 13, 32, 16, 3, 5, 1, 2, true},
    {1, 20, 16, 32, 1, 3, 1, 1, true}, /* Conv1D */
    {13, 13, 32, 64, 3, 3, 1, 1, false}, {6, 6, 16, 48, 2, 2, 2, 2, true},
};

#define BATCH 3

static backend_window_t window_of(const cv_t *k)
{
    backend_window_t g = {
        .h = k->h, .w = k->w, .c = k->c, .kh = k->kh, .kw = k->kw, .sh = k->sh, .sw = k->sw};
    if (k->same) {
        g.oh = (k->h + k->sh - 1) / k->sh;
        g.ow = (k->w + k->sw - 1) / k->sw;
        int ph = (g.oh - 1) * k->sh + k->kh - k->h, pw = (g.ow - 1) * k->sw + k->kw - k->w;
        g.pad_t = ph > 0 ? ph / 2 : 0;
        g.pad_l = pw > 0 ? pw / 2 : 0;
    } else {
        g.oh = (k->h - k->kh) / k->sh + 1;
        g.ow = (k->w - k->kw) / k->sw + 1;
    }
    return g;
}

static void fill(float *v, size_t n, unsigned *seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)rand_r(seed) / ((float)RAND_MAX / 2) - 1.0f;
}

/* The input element under output (b, oy, ox) at kernel element (ky, kx, c), or -1 in the
 * padding. */
static long input_at(const backend_window_t *g, int b, int oy, int ox, int ky, int kx, int c)
{
    int iy = oy * g->sh - g->pad_t + ky, ix = ox * g->sw - g->pad_l + kx;

    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
        return -1;
    return (((long)b * g->h + iy) * g->w + ix) * g->c + c;
}

/* out = bias + conv(x, w); dw = sum of window * dy; dx = sum of dy * w, in double. */
static void reference(const backend_window_t *g, int f, const float *x, const float *w,
                      const float *bias, const float *dy, double *out, double *dw, double *dx)
{
    size_t k = (size_t)g->kh * g->kw * g->c;

    memset(dw, 0, k * f * sizeof(double));
    memset(dx, 0, (size_t)BATCH * g->h * g->w * g->c * sizeof(double));
    for (int b = 0; b < BATCH; b++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++) {
                size_t r = ((size_t)b * g->oh + oy) * g->ow + ox;
                for (int o = 0; o < f; o++)
                    out[r * f + o] = bias[o];
                for (int ky = 0, e = 0; ky < g->kh; ky++)
                    for (int kx = 0; kx < g->kw; kx++)
                        for (int c = 0; c < g->c; c++, e++) {
                            long at = input_at(g, b, oy, ox, ky, kx, c);
                            for (int o = 0; at >= 0 && o < f; o++) {
                                out[r * f + o] += (double)x[at] * w[(size_t)e * f + o];
                                dw[(size_t)e * f + o] += (double)x[at] * dy[r * f + o];
                                dx[at] += (double)dy[r * f + o] * w[(size_t)e * f + o];
                            }
                        }
            }
}

/* The first element of got beyond rounding of want, or n. */
static size_t first_difference(const float *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= 1e-4 * (1.0 + fabs(want[i]))))
            return i;
    return n;
}

typedef struct result {
    float *out, *dw, *dx;
} result_t;

static void direct(const backend_t *be, const backend_window_t *g, int f, const float *x,
                   const float *w, const float *bias, const float *dy, result_t *r)
{
    size_t rows = (size_t)BATCH * g->oh * g->ow, k = (size_t)g->kh * g->kw * g->c;
    float *pad = calloc(be->conv_pad_floats(g, BATCH), sizeof(float)), *wt = malloc(k * f * 4);

    r->out = malloc(rows * f * sizeof(float));
    r->dw = malloc(k * f * sizeof(float));
    r->dx = malloc((size_t)BATCH * g->h * g->w * g->c * sizeof(float));
    for (int i = 0; i < f * (int)k; i++)
        r->dw[i] = NAN; /* overwritten, not added to */
    be->fill_rows(r->out, rows, bias, (size_t)f);
    be->conv_pad(g, x, BATCH, pad);
    be->conv_forward(g, pad, BATCH, w, f, r->out);
    be->conv_grad_kernel(g, pad, BATCH, dy, f, r->dw);
    be->conv_grad_input(g, dy, BATCH, w, f, wt, pad, r->dx);
    free(pad);
    free(wt);
}

static void result_free(result_t *r)
{
    free(r->out);
    free(r->dw);
    free(r->dx);
}

/* Every case on the kernels of one instruction set (gemm_narrow_select's levels). */
static void check_level(int level)
{
    const backend_t *be = backend_cpu();
    status_msg_t err = {0};
    unsigned seed = 5;

    ck_assert_int_eq(be->init(&err), STATUS_OK);
    gemm_narrow_select(level);
    conv_direct_select(level);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const cv_t *k = &cases[i];
        backend_window_t g = window_of(k);
        size_t rows = (size_t)BATCH * g.oh * g.ow, kk = (size_t)g.kh * g.kw * g.c,
               nx = (size_t)BATCH * g.h * g.w * g.c, at;
        float *x = malloc(nx * 4), *w = malloc(kk * k->f * 4), *bias = malloc(k->f * 4),
              *dy = malloc(rows * k->f * 4), *cols = malloc(rows * kk * 4),
              *out = malloc(rows * k->f * 4), *dw = malloc(kk * k->f * 4);
        double *rout = malloc(rows * k->f * 8), *rdw = malloc(kk * k->f * 8), *rdx = malloc(nx * 8);
        result_t one, three;

        ck_assert_msg(be->conv_fits(&g, k->f), "case %zu is not taken", i);
        fill(x, nx, &seed);
        fill(w, kk * k->f, &seed);
        fill(bias, k->f, &seed);
        fill(dy, rows * k->f, &seed);
        reference(&g, k->f, x, w, bias, dy, rout, rdw, rdx);
        ck_assert_int_eq(be->set_threads(1, &err), STATUS_OK);
        direct(be, &g, k->f, x, w, bias, dy, &one);
        at = first_difference(one.out, rout, rows * k->f);
        ck_assert_msg(at == rows * k->f, "case %zu: out[%zu] %g, the sum %g", i, at,
                      at < rows * k->f ? (double)one.out[at] : 0, at < rows * k->f ? rout[at] : 0);
        at = first_difference(one.dw, rdw, kk * k->f);
        ck_assert_msg(at == kk * k->f, "case %zu: dw[%zu] %g, the sum %g", i, at,
                      at < kk * k->f ? (double)one.dw[at] : 0, at < kk * k->f ? rdw[at] : 0);
        at = first_difference(one.dx, rdx, nx);
        ck_assert_msg(at == nx, "case %zu: dx[%zu] %g, the sum %g", i, at,
                      at < nx ? (double)one.dx[at] : 0, at < nx ? rdx[at] : 0);

        /* im2col and the narrow products where they take the product: the same bits */
        be->im2col(&g, x, BATCH, cols);
        be->fill_rows(out, rows, bias, (size_t)k->f);
        be->gemm(false, false, (int)rows, k->f, (int)kk, 1.0f, cols, (int)kk, w, k->f, 1.0f, out,
                 k->f);
        bool narrow = k->f == 16 || k->f == 32;
        if (narrow && rows >= 64)
            ck_assert_msg(memcmp(out, one.out, rows * k->f * 4) == 0, "case %zu: forward", i);
        be->gemm(true, false, (int)kk, k->f, (int)rows, 1.0f, cols, (int)kk, dy, k->f, 0.0f, dw,
                 k->f);
        if (narrow && rows >= 256)
            ck_assert_msg(memcmp(dw, one.dw, kk * k->f * 4) == 0, "case %zu: dw", i);

        /* the same bits on 3 threads */
        ck_assert_int_eq(be->set_threads(3, &err), STATUS_OK);
        direct(be, &g, k->f, x, w, bias, dy, &three);
        ck_assert_msg(memcmp(one.out, three.out, rows * k->f * 4) == 0 &&
                          memcmp(one.dw, three.dw, kk * k->f * 4) == 0 &&
                          memcmp(one.dx, three.dx, nx * 4) == 0,
                      "case %zu: 3 threads differ from 1", i);
        result_free(&one);
        result_free(&three);
        free(x), free(w), free(bias), free(dy), free(cols), free(out), free(dw);
        free(rout), free(rdw), free(rdx);
    }
}

START_TEST(conv_direct_equals_the_definition_and_im2col)
{
    /* AVX-512 where the CPU has it, then AVX2 (the test has its own process: the choice dies
     * with it) */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        check_level(2);
    check_level(1);
}
END_TEST

int main(void)
{
    status_msg_t err = {0};
    backend_window_t g = window_of(&cases[0]);
    Suite *s = suite_create("conv");
    TCase *tc = tcase_create("conv");

    if (backend_cpu()->init(&err) != STATUS_OK || !backend_cpu()->conv_fits(&g, 16)) {
        printf("skipped: this CPU has no direct convolution kernels (AVX2 with FMA)\n");
        return 77;
    }
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, conv_direct_equals_the_definition_and_im2col);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
