/* The compute pool behind blas_sgemm: products split over threads equal the one-thread result,
 * across the pool's spinning and sleeping hand-offs, and the caller's denormal flushing holds on
 * the helpers too. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_run.h"
#include "blas.h"

typedef struct shape {
    bool ta, tb;
    int m, n, k;
} shape_t;

/* Row-major op(A) [m, k] and op(B) [k, n] filled with values in [-1, 1). */
static void fill(float *v, size_t n, unsigned *seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)rand_r(seed) / ((float)RAND_MAX / 2) - 1.0f;
}

static void gemm(const shape_t *s, const float *a, const float *b, float beta, float *c)
{
    int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    blas_sgemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, beta, c, s->n);
}

/* The first element where got and want differ beyond rounding, or n. (One assertion per
 * matrix: Check logs every assertion it evaluates.) */
static size_t first_difference(const float *got, const float *want, size_t n)
{
    for (size_t j = 0; j < n; j++)
        if (!(fabsf(got[j] - want[j]) <= 1e-4f * (1.0f + fabsf(want[j]))))
            return j;
    return n;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

START_TEST(blas_sgemm_split_over_threads_matches_one_thread)
{
    /* Split by rows (m >= n), by columns (few rows), transposed operands, beta 0 and 1. */
    static const shape_t shapes[] = {
        {false, false, 256, 128, 784},
        {true, false, 784, 128, 64},
        {false, true, 64, 784, 128},
        {false, false, 4, 4096, 256},
        {true, true, 300, 97, 131},
        /* the narrow kernels' (gemm_narrow.h), split by rows of C */
        {false, false, 1000, 16, 144},
        {true, false, 144, 32, 1000},
    };
    status_msg_t err = {0};
    unsigned seed = 7;
    size_t n_shapes = sizeof(shapes) / sizeof(shapes[0]);
    float *a[8], *b[8], *one[8], *many[8];

    ck_assert_int_eq(blas_init(&err), STATUS_OK);
    for (size_t i = 0; i < n_shapes; i++) {
        const shape_t *s = &shapes[i];
        size_t mn = (size_t)s->m * s->n;
        a[i] = malloc((size_t)s->m * s->k * sizeof(float));
        b[i] = malloc((size_t)s->k * s->n * sizeof(float));
        one[i] = malloc(mn * sizeof(float));
        many[i] = malloc(mn * sizeof(float));
        fill(a[i], (size_t)s->m * s->k, &seed);
        fill(b[i], (size_t)s->k * s->n, &seed);
        fill(one[i], mn, &seed);
        memcpy(many[i], one[i], mn * sizeof(float));
        gemm(s, a[i], b[i], i % 2 ? 1.0f : 0.0f, one[i]); /* the pool has one thread yet */
    }
    ck_assert_int_eq(blas_set_threads(3, &err), STATUS_OK);
    /* Many rounds back to back (the helpers spin), and some after a pause (they sleep). */
    for (int round = 0; round < 60; round++) {
        if (round % 20 == 19)
            sleep_ms(5);
        for (size_t i = 0; i < n_shapes; i++) {
            const shape_t *s = &shapes[i];
            size_t mn = (size_t)s->m * s->n;
            float *c = malloc(mn * sizeof(float));
            memcpy(c, many[i], mn * sizeof(float));
            gemm(s, a[i], b[i], i % 2 ? 1.0f : 0.0f, c);
            size_t j = first_difference(c, one[i], mn);
            ck_assert_msg(j == mn, "shape %zu, round %d, element %zu: %g, one thread %g", i, round,
                          j, j < mn ? (double)c[j] : 0.0, j < mn ? (double)one[i][j] : 0.0);
            free(c);
        }
    }
    for (size_t i = 0; i < n_shapes; i++) {
        free(a[i]);
        free(b[i]);
        free(one[i]);
        free(many[i]);
    }
}
END_TEST

/* C = op(A) B + beta C in double, row-major with the given strides (B never transposed). */
static void reference(bool ta, int m, int n, int k, const float *a, int lda, const float *b,
                      int ldb, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double sum = beta != 0.0f ? c[(size_t)i * ldc + j] : 0.0;
            for (int p = 0; p < k; p++)
                sum += (double)(ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]) *
                       b[(size_t)p * ldb + j];
            c[(size_t)i * ldc + j] = (float)sum;
        }
}

/* The products the narrow kernels take (16 or 32 columns: a convolution's forward pass and its
 * kernel's gradient) equal the sums, with rows of C and of A's long side that fill no whole
 * tile or chunk, strides wider than the rows, beta 1 adding to C, and beta 0 overwriting a C
 * of NaN (as BLAS does). */
START_TEST(blas_sgemm_narrow_products_equal_the_sums)
{
    static const struct {
        bool ta;
        int m, n, k, pad;
    } shapes[] = {
        {false, 1000, 16, 144, 0}, {false, 77, 32, 9, 3},    {false, 64, 16, 1, 0},
        {false, 131, 32, 288, 5},  {true, 144, 16, 1000, 0}, {true, 9, 32, 300, 2},
        {true, 13, 16, 513, 7},    {true, 288, 32, 256, 0},
    };
    status_msg_t err = {0};
    unsigned seed = 11;

    ck_assert_int_eq(blas_init(&err), STATUS_OK);
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        bool ta = shapes[i].ta;
        int m = shapes[i].m, n = shapes[i].n, k = shapes[i].k, pad = shapes[i].pad;
        int lda = (ta ? m : k) + pad, ldb = n + pad, ldc = n + pad;
        size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)k * ldb, nc = (size_t)m * ldc;
        float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float)),
              *c = malloc(nc * sizeof(float)), *want = malloc(nc * sizeof(float));
        fill(a, na, &seed);
        fill(b, nb, &seed);
        for (int beta = 0; beta < 2; beta++) {
            fill(want, nc, &seed);
            memcpy(c, want, nc * sizeof(float));
            if (beta == 0)
                for (size_t j = 0; j < nc; j++)
                    c[j] = NAN;
            blas_sgemm(ta, false, m, n, k, 1.0f, a, lda, b, ldb, (float)beta, c, ldc);
            reference(ta, m, n, k, a, lda, b, ldb, (float)beta, want, ldc);
            for (int r = 0; r < m; r++) { /* the padding between rows is not C's */
                size_t j = first_difference(c + (size_t)r * ldc, want + (size_t)r * ldc, (size_t)n);
                ck_assert_msg(j == (size_t)n, "shape %zu, beta %d, C[%d][%zu]: %g, the sum %g", i,
                              beta, r, j, j < (size_t)n ? (double)c[(size_t)r * ldc + j] : 0.0,
                              j < (size_t)n ? (double)want[(size_t)r * ldc + j] : 0.0);
            }
        }
        free(a);
        free(b);
        free(c);
        free(want);
    }
}
END_TEST

/* Every element of C is 1e-21 * 1e-21 * 128, denormal: nonzero unless flushed. */
static int nonzero_products(void)
{
    enum { N = 128 };
    float *a = malloc(N * N * sizeof(float)), *b = malloc(N * N * sizeof(float)),
          *c = malloc(N * N * sizeof(float));
    int nonzero = 0;
    for (int i = 0; i < N * N; i++)
        a[i] = b[i] = 1e-21f;
    blas_sgemm(false, false, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
    for (int i = 0; i < N * N; i++) {
        /* The bits, not c[i] != 0: with DAZ on, the comparison would read a denormal as 0. */
        uint32_t bits;
        memcpy(&bits, &c[i], sizeof(bits));
        nonzero += (bits & 0x7fffffffu) != 0;
    }
    free(a);
    free(b);
    free(c);
    return nonzero;
}

START_TEST(blas_flush_denormals_holds_on_the_helpers_and_restores)
{
    status_msg_t err = {0};
    blas_fp_mode_t old;

    ck_assert_int_eq(blas_init(&err), STATUS_OK);
    ck_assert_int_eq(blas_set_threads(2, &err), STATUS_OK);
    ck_assert_int_eq(nonzero_products(), 128 * 128);
    old = blas_flush_denormals();
#if defined(__SSE__)
    ck_assert_int_eq(nonzero_products(), 0); /* the helper's half of C too */
#endif
    blas_fp_mode_restore(old);
    ck_assert_int_eq(nonzero_products(), 128 * 128);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("blas");
    TCase *tc = tcase_create("blas");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, blas_sgemm_split_over_threads_matches_one_thread);
    tcase_add_test(tc, blas_sgemm_narrow_products_equal_the_sums);
    tcase_add_test(tc, blas_flush_denormals_holds_on_the_helpers_and_restores);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
