/* Every kernel of the CUDA backend against the CPU backend's on the same inputs: within 1e-4
 * (relative past magnitude 1), max pooling's argmax exactly. Skips (77) without a GPU. */
#include <check.h>
#include <string.h>

#include "check_run.h"
#include "gpu_test.h"

static const backend_t *gpu, *cpu;

/* n values of each backend: the CPU's in host memory, the GPU's a copy in its own. */
typedef struct pair {
    float *c, *g;
    size_t n;
} pair_t;

static uint64_t rng_state = 88172645463325252ull;

static float uniform(float lo, float hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)(rng_state >> 40) / (float)(1 << 24);
}

static pair_t pair_new(size_t n, float lo, float hi)
{
    pair_t p = {.c = cpu->alloc(n * sizeof(float)), .g = gpu->alloc(n * sizeof(float)), .n = n};

    ck_assert_ptr_nonnull(p.c);
    ck_assert_ptr_nonnull(p.g);
    for (size_t i = 0; i < n && lo < hi; i++)
        p.c[i] = uniform(lo, hi);
    gpu->copy(p.g, p.c, n * sizeof(float));
    return p;
}

static void pair_free(pair_t *p)
{
    cpu->free(p->c);
    gpu->free(p->g);
}

/* The GPU's values equal the CPU's within 1e-4; `what` names the kernel in a failure. */
static void expect_same(const pair_t *p, const char *what)
{
    float *back = malloc(p->n * sizeof(float) + 1);
    status_msg_t err;
    size_t at;
    double e;

    ck_assert_ptr_nonnull(back);
    gpu->copy(back, p->g, p->n * sizeof(float));
    ck_assert_msg(gpu->check == NULL || gpu->check(&err) == STATUS_OK, "%s: %s", what, err.text);
    e = gpu_test_error(back, p->c, p->n, &at);
    ck_assert_msg(e <= 1e-4, "%s: element %zu is %.9g on the GPU, %.9g on the CPU (error %.3g)",
                  what, at, p->n ? back[at] : 0.0f, p->n ? p->c[at] : 0.0f, e);
    free(back);
}

START_TEST(gemm_matches_in_every_transposition)
{
    const int m = 67, n = 33, k = 129;

    for (int t = 0; t < 8; t++) {
        bool ta = t & 1, tb = t & 2;
        float beta = t & 4 ? 1.0f : 0.0f;
        int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
        pair_t a = pair_new((size_t)(ta ? k : m) * lda, -1, 1);
        pair_t b = pair_new((size_t)(tb ? n : k) * ldb, -1, 1);
        pair_t c = pair_new((size_t)m * ldc, -1, 1);
        char what[64];

        cpu->gemm(ta, tb, m, n, k, 0.5f, a.c, lda, b.c, ldb, beta, c.c, ldc);
        gpu->gemm(ta, tb, m, n, k, 0.5f, a.g, lda, b.g, ldb, beta, c.g, ldc);
        snprintf(what, sizeof(what), "gemm(trans_a %d, trans_b %d, beta %g)", ta, tb, beta);
        expect_same(&c, what);
        pair_free(&a);
        pair_free(&b);
        pair_free(&c);
    }
}
END_TEST

START_TEST(rows_columns_and_products_match)
{
    const size_t rows = 1000, width = 37;
    pair_t x = pair_new(rows * width, -2, 2), y = pair_new(rows * width, -2, 2);
    pair_t row = pair_new(width, -1, 1), out = pair_new(rows * width, 0, 0);
    pair_t sums = pair_new(width, 0, 0);

    cpu->fill_rows(out.c, rows, row.c, width);
    gpu->fill_rows(out.g, rows, row.g, width);
    expect_same(&out, "fill_rows");
    cpu->fill_rows(out.c, rows, NULL, width);
    gpu->fill_rows(out.g, rows, NULL, width);
    expect_same(&out, "fill_rows (zeros)");
    cpu->column_sums(x.c, rows, width, sums.c);
    gpu->column_sums(x.g, rows, width, sums.g);
    expect_same(&sums, "column_sums");
    cpu->mul(x.c, y.c, out.c, rows * width);
    gpu->mul(x.g, y.g, out.g, rows * width);
    expect_same(&out, "mul");
    cpu->zero(out.c, rows * width * sizeof(float));
    gpu->zero(out.g, rows * width * sizeof(float));
    expect_same(&out, "zero");
    {
        /* more elements than one grid's threads: the loops stride round */
        const size_t big = (size_t)17 << 20;
        pair_t a = pair_new(big, -1, 1), b = pair_new(big, -1, 1), c = pair_new(big, 0, 0);
        cpu->mul(a.c, b.c, c.c, big);
        gpu->mul(a.g, b.g, c.g, big);
        expect_same(&c, "mul (17 Mi elements)");
        pair_free(&a);
        pair_free(&b);
        pair_free(&c);
    }
    pair_free(&x);
    pair_free(&y);
    pair_free(&row);
    pair_free(&out);
    pair_free(&sums);
}
END_TEST

START_TEST(every_activation_and_its_gradient_match)
{
    /* rows of softmax narrower and wider than a warp */
    static const size_t widths[] = {10, 100}, rows[] = {64, 67};

    for (int k = 0; k < 2 * JOB_ACT_COUNT_; k++) {
        int act = k % JOB_ACT_COUNT_;
        size_t width = widths[k / JOB_ACT_COUNT_], n = rows[k / JOB_ACT_COUNT_] * width;
        pair_t pre = pair_new(n, -4, 4), v = pair_new(n, 0, 0), dy = pair_new(n, -1, 1);
        bool needs_x = job_activation_needs_input((job_activation_t)act);
        char what[64];

        memcpy(v.c, pre.c, n * sizeof(float));
        gpu->copy(v.g, pre.g, n * sizeof(float));
        cpu->activate((job_activation_t)act, v.c, n, width);
        gpu->activate((job_activation_t)act, v.g, n, width);
        snprintf(what, sizeof(what), "activation %d (width %zu)", act, width);
        expect_same(&v, what);
        cpu->activate_backward((job_activation_t)act, needs_x ? pre.c : NULL, v.c, dy.c, n, width);
        gpu->activate_backward((job_activation_t)act, needs_x ? pre.g : NULL, v.g, dy.g, n, width);
        snprintf(what, sizeof(what), "activation %d's gradient (width %zu)", act, width);
        expect_same(&dy, what);
        pair_free(&pre);
        pair_free(&v);
        pair_free(&dy);
    }
}
END_TEST

/* Windows with padding on both sides, strides that skip and overlap. */
static const backend_window_t windows[] = {
    {.h = 9, .w = 7, .c = 3, .kh = 3, .kw = 2, .sh = 2, .sw = 1, .oh = 5, .ow = 7, .pad_t = 1},
    {.h = 8,
     .w = 8,
     .c = 5,
     .kh = 3,
     .kw = 3,
     .sh = 1,
     .sw = 1,
     .oh = 8,
     .ow = 8,
     .pad_t = 1,
     .pad_l = 1},
    {.h = 6, .w = 10, .c = 4, .kh = 2, .kw = 2, .sh = 2, .sw = 2, .oh = 3, .ow = 5},
    {.h = 1, .w = 12, .c = 6, .kh = 1, .kw = 4, .sh = 1, .sw = 3, .oh = 1, .ow = 4, .pad_l = 1},
    /* strides past the window: inputs no window covers */
    {.h = 7, .w = 7, .c = 3, .kh = 1, .kw = 1, .sh = 2, .sw = 2, .oh = 4, .ow = 4},
    {.h = 7,
     .w = 7,
     .c = 2,
     .kh = 4,
     .kw = 4,
     .sh = 2,
     .sw = 2,
     .oh = 4,
     .ow = 4,
     .pad_t = 1,
     .pad_l = 1},
};

START_TEST(convolution_columns_match)
{
    const int batch = 3;

    for (size_t i = 0; i < sizeof(windows) / sizeof(windows[0]); i++) {
        const backend_window_t *g = &windows[i];
        size_t in = (size_t)batch * g->h * g->w * g->c;
        size_t cols = (size_t)batch * g->oh * g->ow * g->kh * g->kw * g->c;
        pair_t x = pair_new(in, -1, 1), c = pair_new(cols, 0, 0), dc = pair_new(cols, -1, 1);
        pair_t dx = pair_new(in, 0, 0);

        cpu->im2col(g, x.c, batch, c.c);
        gpu->im2col(g, x.g, batch, c.g);
        expect_same(&c, "im2col");
        cpu->col2im(g, dc.c, batch, dx.c);
        gpu->col2im(g, dc.g, batch, dx.g);
        expect_same(&dx, "col2im");
        pair_free(&x);
        pair_free(&c);
        pair_free(&dc);
        pair_free(&dx);
    }
}
END_TEST

START_TEST(pooling_matches)
{
    const int batch = 3;

    for (size_t i = 0; i < sizeof(windows) / sizeof(windows[0]); i++) {
        const backend_window_t *g = &windows[i];
        size_t in = (size_t)batch * g->h * g->w * g->c, out = (size_t)batch * g->oh * g->ow * g->c;
        pair_t x = pair_new(in, -1, 1), y = pair_new(out, 0, 0), dy = pair_new(out, -1, 1);
        pair_t dx = pair_new(in, 0, 0);
        int32_t *am_c = cpu->alloc(out * sizeof(int32_t)),
                *am_g = gpu->alloc(out * sizeof(int32_t));
        int32_t *back = malloc(out * sizeof(int32_t) + 1);

        ck_assert_ptr_nonnull(back);
        x.c[g->c] = x.c[0]; /* a tie in channel 0: the first pixel wins on both */
        gpu->copy(x.g, x.c, in * sizeof(float));
        cpu->max_pool(g, x.c, batch, y.c, am_c);
        gpu->max_pool(g, x.g, batch, y.g, am_g);
        expect_same(&y, "max_pool");
        gpu->copy(back, am_g, out * sizeof(int32_t));
        ck_assert_msg(memcmp(back, am_c, out * sizeof(int32_t)) == 0, "max_pool's argmax");
        cpu->max_pool_backward(g, am_c, dy.c, batch, dx.c);
        gpu->max_pool_backward(g, am_g, dy.g, batch, dx.g);
        expect_same(&dx, "max_pool_backward");
        cpu->average_pool(g, x.c, batch, y.c);
        gpu->average_pool(g, x.g, batch, y.g);
        expect_same(&y, "average_pool");
        cpu->average_pool_backward(g, dy.c, batch, dx.c);
        gpu->average_pool_backward(g, dy.g, batch, dx.g);
        expect_same(&dx, "average_pool_backward");
        cpu->free(am_c);
        gpu->free(am_g);
        free(back);
        pair_free(&x);
        pair_free(&y);
        pair_free(&dy);
        pair_free(&dx);
    }
}
END_TEST

START_TEST(means_over_steps_match)
{
    const int batch = 5;
    const size_t steps = 49, channels = 24;
    pair_t x = pair_new((size_t)batch * steps * channels, -1, 1);
    pair_t y = pair_new((size_t)batch * channels, 0, 0),
           dy = pair_new((size_t)batch * channels, -1, 1);
    pair_t dx = pair_new((size_t)batch * steps * channels, 0, 0);

    cpu->mean_steps(x.c, batch, steps, channels, y.c);
    gpu->mean_steps(x.g, batch, steps, channels, y.g);
    expect_same(&y, "mean_steps");
    cpu->mean_steps_backward(dy.c, batch, steps, channels, dx.c);
    gpu->mean_steps_backward(dy.g, batch, steps, channels, dx.g);
    expect_same(&dx, "mean_steps_backward");
    pair_free(&x);
    pair_free(&y);
    pair_free(&dy);
    pair_free(&dx);
}
END_TEST

START_TEST(embedding_rows_match)
{
    const size_t vocab = 50, dim = 12, n = 40, slots = 7;
    pair_t table = pair_new(vocab * dim, -1, 1), out = pair_new(n * dim, 0, 0);
    pair_t dy = pair_new(n * dim, -1, 1), rows = pair_new(slots * dim, 0, 0);
    int64_t ids[40];
    int32_t slot[40];

    for (size_t i = 0; i < n; i++) {
        ids[i] = (int64_t)((i * 7) % vocab);
        slot[i] = (int32_t)(i % slots); /* repeated: their gradients add */
    }
    cpu->gather_rows(table.c, dim, ids, n, out.c);
    gpu->gather_rows(table.g, dim, ids, n, out.g);
    expect_same(&out, "gather_rows");
    cpu->scatter_add_rows(dy.c, dim, slot, n, rows.c);
    gpu->scatter_add_rows(dy.g, dim, slot, n, rows.g);
    expect_same(&rows, "scatter_add_rows");
    pair_free(&table);
    pair_free(&out);
    pair_free(&dy);
    pair_free(&rows);
}
END_TEST

int main(void)
{
    status_msg_t err;
    Suite *s = suite_create("cuda_backend");
    TCase *tc = tcase_create("kernels");

    gpu = gpu_test_backend(NULL);
    cpu = backend_cpu();
    if (cpu->init(&err) != STATUS_OK) {
        fprintf(stderr, "%s\n", err.text);
        return EXIT_FAILURE;
    }
    tcase_add_test(tc, gemm_matches_in_every_transposition);
    tcase_add_test(tc, rows_columns_and_products_match);
    tcase_add_test(tc, every_activation_and_its_gradient_match);
    tcase_add_test(tc, convolution_columns_match);
    tcase_add_test(tc, pooling_matches);
    tcase_add_test(tc, means_over_steps_match);
    tcase_add_test(tc, embedding_rows_match);
    suite_add_tcase(s, tc);
    /* one process: a CUDA context does not survive fork() */
    return check_run(s, CK_NOFORK);
}
