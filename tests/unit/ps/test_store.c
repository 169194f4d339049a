/* The parameter server's variable store: creation, pulls and pushes against the optimizer
 * kernels applied by hand, versions, idempotent creation, drop, traffic counters, limits, and
 * rejected calls that leave every value as it was. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bf16.h"
#include "check_run.h"
#include "job/initializer.h"
#include "optim/optimizer.h"
#include "job/partitioner.h"
#include "rpc/types.h"
#include "store.h"
#include "store_stats.h"

#define MiB (1024 * 1024)

static store_t *new_store(void)
{
    store_limits_t lim = {
        .max_bytes = 64 * MiB,
        .max_shard_bytes = 16 * MiB,
        .max_reply_bytes = 32 * MiB,
        .max_jobs = 4,
        .max_variables = 8,
        .max_shards = 64,
    };
    store_t *s = store_new(&lim, NULL);
    ck_assert_ptr_nonnull(s);
    return s;
}

static optimizer_config_t sgd(double lr)
{
    optimizer_config_t c;
    optimizer_config_default(OPTIMIZER_SGD, &c);
    c.schedule.lr = lr;
    return c;
}

static optimizer_config_t adam(void)
{
    optimizer_config_t c;
    optimizer_config_default(OPTIMIZER_ADAM, &c);
    c.schedule.lr = 0.01;
    return c;
}

/* Shard `shard` of `num` of a [d0, d1] variable (d1 = 0: [d0]), in the div layout. */
static store_shard_spec_t spec(const char *name, int64_t d0, int64_t d1, int shard, int num)
{
    store_shard_spec_t sp = {.variable = name, .shard = shard, .num_shards = num};
    int64_t off, rows;

    partitioner_shard_rows(d0, num, shard, &off, &rows);
    sp.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
    sp.rank = sp.full_rank = d1 > 0 ? 2 : 1;
    sp.shape[0] = rows;
    sp.full_shape[0] = d0;
    sp.shape[1] = sp.full_shape[1] = d1;
    sp.row_offset = off;
    sp.init.kind = JOB_INIT_RANDOM_UNIFORM;
    sp.init.a = -1;
    sp.init.b = 1;
    return sp;
}

static void create_ok(store_t *s, const char *job, const optimizer_config_t *opt,
                      const store_shard_spec_t *specs, size_t n, size_t want_created)
{
    store_err_t err;
    size_t created = 999;

    ck_assert_msg(store_create(s, job, opt, specs, n, &created, &err) == STATUS_OK, "%s",
                  err.msg.text);
    ck_assert_uint_eq(created, want_created);
}

/* A description refused with INVALID_ARGUMENT naming `want` and the variable, nothing made. */
static void create_refused(store_t *s, const optimizer_config_t *opt, const store_shard_spec_t *sp,
                           const char *want)
{
    store_totals_t t;
    store_err_t err;
    char name[300];

    snprintf(name, sizeof(name), "variable '%s'", sp->variable);
    ck_assert_int_eq(store_create(s, "job", opt, sp, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.msg.text, want) != NULL && strstr(err.msg.text, name) != NULL, "%s",
                  err.msg.text);
    store_totals(s, &t);
    ck_assert_uint_eq(t.shards + t.jobs, 0);
}

/* The whole shard's values (malloc'd) and its version. */
static float *pull_all(store_t *s, const char *job, const char *var, int shard, size_t *ret_n,
                       uint64_t *ret_version)
{
    store_pull_item_t it = {.key = {var, shard}};
    store_value_t val;
    store_err_t err;
    void *buf = NULL;
    size_t len = 0;

    ck_assert_msg(store_pull(s, job, &it, 1, &val, &buf, &len, &err) == STATUS_OK, "%s",
                  err.msg.text);
    ck_assert_uint_eq(val.offset, 0);
    ck_assert_uint_eq(val.bytes, len);
    if (ret_n)
        *ret_n = len / sizeof(float);
    if (ret_version)
        *ret_version = val.version;
    return buf;
}

static void push_dense(store_t *s, const char *job, const char *var, int shard,
                       const int64_t *shape, size_t rank, const float *g, uint64_t want_version)
{
    store_push_item_t it = {.key = {var, shard}, .rank = rank, .shape = shape, .grad = g};
    uint64_t version = 0;
    store_err_t err;

    ck_assert_msg(store_push(s, job, &it, 1, false, &version, NULL, NULL, NULL, &err) == STATUS_OK,
                  "%s", err.msg.text);
    ck_assert_uint_eq(version, want_version);
}

static void assert_floats_eq(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "element %zu: %.9g, want %.9g", i, (double)got[i],
                      (double)want[i]);
}

/* ---- creation ----------------------------------------------------------------------------- */

START_TEST(store_create_initializes_and_pull_returns_the_values)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(0.1);
    store_shard_spec_t sp[2] = {spec("w", 4, 3, 0, 1), spec("b", 3, 0, 0, 1)};
    store_totals_t t;
    uint64_t version = 7;
    size_t n;
    float *v;

    sp[1].init = (job_init_t){.kind = JOB_INIT_CONSTANT, .a = 0.5};
    create_ok(s, "job", &opt, sp, 2, 2);
    v = pull_all(s, "job", "b", 0, &n, &version);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(version, 0);
    for (size_t i = 0; i < n; i++)
        ck_assert(v[i] == 0.5f);
    free(v);
    v = pull_all(s, "job", "w", 0, &n, NULL);
    ck_assert_uint_eq(n, 12);
    for (size_t i = 0; i < n; i++)
        ck_assert(v[i] >= -1.0f && v[i] <= 1.0f);
    /* Deterministic: a second store derives the same stream from (job, variable). */
    {
        store_t *s2 = new_store();
        float *v2;
        create_ok(s2, "job", &opt, sp, 1, 1);
        v2 = pull_all(s2, "job", "w", 0, NULL, NULL);
        assert_floats_eq(v2, v, 12);
        free(v2);
        store_free(s2);
    }
    free(v);
    store_totals(s, &t);
    ck_assert_uint_eq(t.param_bytes, 15 * sizeof(float));
    ck_assert_uint_eq(t.slot_bytes, 0);
    ck_assert_uint_eq(t.variables, 2);
    ck_assert_uint_eq(t.shards, 2);
    ck_assert_uint_eq(t.jobs, 1);
    store_free(s);
}
END_TEST

START_TEST(store_shards_of_a_variable_hold_the_slices_of_the_whole)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(0.1);
    store_shard_spec_t sp[3];
    job_init_t init = {.kind = JOB_INIT_GLOROT_UNIFORM, .has_seed = true, .seed = 11};
    float whole[13 * 4];
    size_t at = 0;

    for (int k = 0; k < 3; k++) {
        sp[k] = spec("emb", 13, 4, k, 3);
        sp[k].init = init;
    }
    create_ok(s, "job", &opt, sp, 3, 3);
    initializer_fill(&init, JOB_INIT_ZEROS, whole, 13 * 4, 13, 4, 0);
    for (int k = 0; k < 3; k++) {
        size_t n;
        float *v = pull_all(s, "job", "emb", k, &n, NULL);
        ck_assert_uint_eq(n, (size_t)sp[k].shape[0] * 4);
        assert_floats_eq(v, whole + at, n);
        at += n;
        free(v);
    }
    ck_assert_uint_eq(at, 13 * 4);
    store_free(s);
}
END_TEST

START_TEST(store_create_of_the_same_shard_again_leaves_it_as_it_is)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(1.0);
    store_shard_spec_t sp = spec("w", 2, 2, 0, 1);
    int64_t shape[2] = {2, 2};
    float g[4] = {1, 1, 1, 1}, *before, *after;
    uint64_t version;

    create_ok(s, "job", &opt, &sp, 1, 1);
    push_dense(s, "job", "w", 0, shape, 2, g, 1);
    before = pull_all(s, "job", "w", 0, NULL, NULL);
    sp.init = (job_init_t){.kind = JOB_INIT_ONES}; /* the initializer does not matter */
    create_ok(s, "job", &opt, &sp, 1, 0);
    create_ok(s, "job", NULL, &sp, 1, 0); /* an existing job may omit the optimizer */
    after = pull_all(s, "job", "w", 0, NULL, &version);
    assert_floats_eq(after, before, 4);
    ck_assert_uint_eq(version, 1);
    free(before);
    free(after);
    store_free(s);
}
END_TEST

START_TEST(store_create_with_another_shape_fails_with_already_exists)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(1.0), other = adam();
    store_shard_spec_t sp = spec("w", 4, 2, 0, 1), bigger = spec("w", 5, 2, 0, 1),
                       resharded = spec("w", 4, 2, 0, 2), fresh = spec("v", 4, 2, 0, 1);
    store_shard_spec_t both[2] = {fresh, bigger};
    store_err_t err;
    store_totals_t t;

    create_ok(s, "job", &opt, &sp, 1, 1);
    ck_assert_int_eq(store_create(s, "job", &opt, &bigger, 1, NULL, &err), STATUS_ALREADY_EXISTS);
    ck_assert_str_eq(err.culprit, "w");
    ck_assert_ptr_nonnull(strstr(err.msg.text, "'w'"));
    ck_assert_int_eq(store_create(s, "job", &opt, &resharded, 1, NULL, &err),
                     STATUS_ALREADY_EXISTS);
    /* All or nothing: 'v' is not created when 'w' conflicts in the same request. */
    ck_assert_int_eq(store_create(s, "job", &opt, both, 2, NULL, &err), STATUS_ALREADY_EXISTS);
    store_totals(s, &t);
    ck_assert_uint_eq(t.shards, 1);
    /* Another optimizer for the same job. */
    ck_assert_int_eq(store_create(s, "job", &other, &fresh, 1, NULL, &err), STATUS_ALREADY_EXISTS);
    ck_assert_str_eq(err.culprit, "job");
    store_free(s);
}
END_TEST

START_TEST(store_create_rejects_bad_descriptions_and_names_the_culprit)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(1.0), bad_opt = sgd(-1.0);
    store_shard_spec_t sp;
    store_err_t err;
    store_totals_t t;

    sp = spec("w", 4, 2, 0, 1);
    sp.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT64;
    ck_assert_int_eq(store_create(s, "job", &opt, &sp, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.msg.text, "DTYPE_FLOAT64"));
    ck_assert_str_eq(err.culprit, "w");

    sp = spec("w", 10, 2, 1, 3);
    sp.row_offset = 3; /* the div layout puts shard 1 of 10 rows in 3 at row 4 */
    ck_assert_int_eq(store_create(s, "job", &opt, &sp, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.msg.text, "div layout"));

    sp = spec("w", 4, 2, 0, 1);
    sp.full_shape[1] = 3;
    ck_assert_int_eq(store_create(s, "job", &opt, &sp, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    sp = spec("w", 4, 2, 0, 1);
    sp.shape[1] = 0;
    sp.full_shape[1] = 0;
    ck_assert_int_eq(store_create(s, "job", &opt, &sp, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    sp = spec("w", 4, 2, 3, 2);
    ck_assert_int_eq(store_create(s, "job", &opt, &sp, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    sp = spec("", 4, 2, 0, 1);
    ck_assert_int_eq(store_create(s, "job", &opt, &sp, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    sp = spec("bad\nname", 4, 2, 0, 1);
    ck_assert_int_eq(store_create(s, "job", &opt, &sp, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    sp = spec("w", 4, 2, 0, 1);
    ck_assert_int_eq(store_create(s, "", &opt, &sp, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_int_eq(store_create(s, "job", &bad_opt, &sp, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_str_eq(err.culprit, "optimizer");
    /* A new job without an optimizer. */
    ck_assert_int_eq(store_create(s, "job", NULL, &sp, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    store_totals(s, &t);
    ck_assert_uint_eq(t.shards, 0);
    ck_assert_uint_eq(t.jobs, 0);
    store_free(s);
}
END_TEST

START_TEST(store_limits_refuse_whole_requests)
{
    store_t *s = new_store();        /* 64 MiB in all, 16 MiB per shard, 8 variables per job */
    optimizer_config_t opt = adam(); /* two slots: 3x the values */
    store_shard_spec_t big = spec("big", 5 * MiB, 1, 0, 1), many[9];
    char names[9][8];
    store_err_t err;
    store_totals_t t;

    ck_assert_int_eq(store_create(s, "job", &opt, &big, 1, NULL, &err), STATUS_RESOURCE_EXHAUSTED);
    ck_assert_ptr_nonnull(strstr(err.msg.text, "shard"));
    big = spec("big", 3 * MiB, 1, 0, 1); /* 12 MiB of values + 24 of slots: fits */
    create_ok(s, "job", &opt, &big, 1, 1);
    big.variable = "big2"; /* 36 more: over 64 */
    ck_assert_int_eq(store_create(s, "job", &opt, &big, 1, NULL, &err), STATUS_RESOURCE_EXHAUSTED);
    ck_assert_ptr_nonnull(strstr(err.msg.text, "--max-memory-bytes"));
    for (int i = 0; i < 9; i++) {
        snprintf(names[i], sizeof(names[i]), "v%d", i);
        many[i] = spec(names[i], 2, 0, 0, 1);
    }
    /* 'big' and 8 more would be 9 variables: refused whole. */
    ck_assert_int_eq(store_create(s, "job", &opt, many, 8, NULL, &err), STATUS_RESOURCE_EXHAUSTED);
    store_totals(s, &t);
    ck_assert_uint_eq(t.variables, 1);
    create_ok(s, "job", &opt, many, 7, 7);
    store_free(s);
}
END_TEST

/* ---- pushes against the kernels ----------------------------------------------------------- */

START_TEST(store_dense_push_applies_adam_with_the_shard_version_as_step)
{
    store_t *s = new_store();
    optimizer_config_t opt = adam();
    store_shard_spec_t sp = spec("w", 3, 2, 0, 1);
    int64_t shape[2] = {3, 2};
    float slots[2 * 6] = {0}, g[6], *want;

    create_ok(s, "job", &opt, &sp, 1, 1);
    want = pull_all(s, "job", "w", 0, NULL, NULL);
    optimizer_slots_init(&opt, slots, 6);
    for (int step = 0; step < 4; step++) {
        float *got;
        for (int i = 0; i < 6; i++)
            g[i] = (float)(i - 2) * 0.5f + (float)step;
        push_dense(s, "job", "w", 0, shape, 2, g, (uint64_t)step + 1);
        optimizer_apply_dense(&opt, step, want, g, slots, 6);
        got = pull_all(s, "job", "w", 0, NULL, NULL);
        assert_floats_eq(got, want, 6);
        free(got);
    }
    free(want);
    store_free(s);
}
END_TEST

/* BatchNormalization's moving statistics: what a worker pushes is its batch's statistic, which
 * the PS averages in (value * momentum + pushed * (1 - momentum)), not the job's optimizer; a
 * non-finite statistic changes nothing; a description that disagrees is refused. */
START_TEST(store_moving_statistic_takes_the_moving_average)
{
    store_t *s = new_store();
    optimizer_config_t opt = adam();
    store_shard_spec_t sp = spec("bn/moving_mean", 4, 0, 0, 1), other;
    int64_t shape[1] = {4};
    float want[4], g[4] = {1, -2, 0.5f, 8}, bad[4] = {1, NAN, 0, 0}, *got;
    store_push_item_t it = {.key = {"bn/moving_mean", 0}, .rank = 1, .shape = shape, .grad = bad};
    uint64_t version;
    store_err_t err;
    size_t created;

    sp.moving = true;
    sp.momentum = 0.99;
    create_ok(s, "job", &opt, &sp, 1, 1);
    got = pull_all(s, "job", "bn/moving_mean", 0, NULL, NULL);
    memcpy(want, got, sizeof(want));
    free(got);
    for (int step = 0; step < 3; step++) {
        push_dense(s, "job", "bn/moving_mean", 0, shape, 1, g, (uint64_t)step + 1);
        for (int i = 0; i < 4; i++)
            want[i] = want[i] * 0.99f + g[i] * (float)(1.0 - 0.99);
        got = pull_all(s, "job", "bn/moving_mean", 0, NULL, NULL);
        assert_floats_eq(got, want, 4);
        free(got);
    }
    /* a window of 3 accumulated batches: momentum^3 of the average stays, as 3 updates leave */
    it.grad = g;
    it.batches = 3;
    ck_assert_int_eq(store_push(s, "job", &it, 1, false, &version, NULL, NULL, NULL, &err),
                     STATUS_OK);
    for (int i = 0; i < 4; i++)
        want[i] = want[i] * (0.99f * 0.99f * 0.99f) + g[i] * (1 - 0.99f * 0.99f * 0.99f);
    got = pull_all(s, "job", "bn/moving_mean", 0, NULL, NULL);
    assert_floats_eq(got, want, 4);
    free(got);
    it.grad = bad;
    it.batches = 0;
    ck_assert_int_eq(store_push(s, "job", &it, 1, false, &version, NULL, NULL, NULL, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.msg.text, "the statistic holds nan"), "%s", err.msg.text);
    got = pull_all(s, "job", "bn/moving_mean", 0, NULL, NULL);
    assert_floats_eq(got, want, 4);
    free(got);
    other = sp; /* the same variable as a weight: not the same variable */
    other.moving = false;
    ck_assert_int_eq(store_create(s, "job", &opt, &other, 1, &created, &err),
                     STATUS_ALREADY_EXISTS);
    other = sp;
    other.momentum = 1.5;
    other.variable = "bn/moving_variance";
    ck_assert_int_eq(store_create(s, "job", &opt, &other, 1, &created, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.msg.text, "momentum from 0 to 1"), "%s", err.msg.text);
    store_free(s);
}
END_TEST

/* A shard large enough to be spread over the pool's threads: each push-pull returns the values
 * it leaves, and both are the kernels' own, bit for bit, as if one thread had applied them. */
START_TEST(store_push_pull_over_a_pool_matches_the_kernels_bit_for_bit)
{
    enum { ROWS = 1001, COLS = 517, N = ROWS * COLS }; /* ~2 MiB: eight parts, a ragged last */
    store_t *s = new_store();
    optimizer_config_t opt = adam();
    store_shard_spec_t sp = spec("w", ROWS, COLS, 0, 1);
    int64_t shape[2] = {ROWS, COLS};
    float *slots = calloc(2 * N, sizeof(float)), *g = malloc(N * sizeof(float)), *want;
    store_push_item_t it = {.key = {"w", 0}, .rank = 2, .shape = shape, .grad = g};
    pool_t *pool;
    status_msg_t perr;

    ck_assert_int_eq(pool_new(7, &pool, &perr), STATUS_OK);
    store_set_pool(s, pool);
    create_ok(s, "job", &opt, &sp, 1, 1);
    want = pull_all(s, "job", "w", 0, NULL, NULL);
    optimizer_slots_init(&opt, slots, N);
    for (int step = 0; step < 3; step++) {
        store_value_t val;
        store_err_t err;
        uint64_t version;
        void *buf = NULL;
        size_t len = 0;
        float *got;
        for (size_t i = 0; i < N; i++)
            g[i] = (float)((int)((i * 7 + (size_t)step) % 23) - 11) * 0.125f;
        g[N - 1] = (float)(40 + step); /* the largest, in the last part */
        ck_assert_msg(store_push(s, "job", &it, 1, true, &version, &val, &buf, &len, &err) ==
                          STATUS_OK,
                      "%s", err.msg.text);
        ck_assert_uint_eq(version, (uint64_t)step + 1);
        ck_assert_uint_eq(val.version, version);
        ck_assert_uint_eq(len, N * sizeof(float));
        ck_assert_int_eq(val.shape[0], ROWS);
        ck_assert_int_eq(val.shape[1], COLS);
        optimizer_apply_dense(&opt, step, want, g, slots, N);
        assert_floats_eq(buf, want, N);
        free(buf);
        got = pull_all(s, "job", "w", 0, NULL, NULL);
        assert_floats_eq(got, want, N);
        free(got);
    }
    free(want);
    free(g);
    free(slots);
    store_free(s);
    pool_free(pool);
}
END_TEST

/* Shard 0 of `var` of "job" holds the same n values, bit for bit, in stores a and b. */
static void assert_same_values(store_t *a, store_t *b, const char *var, size_t n)
{
    float *va = pull_all(a, "job", var, 0, NULL, NULL),
          *vb = pull_all(b, "job", var, 0, NULL, NULL);

    ck_assert(memcmp(va, vb, n * sizeof(float)) == 0);
    free(va);
    free(vb);
}

/* A [ROWS, 64] shard is cut into blocks of rpc_block_rows(256) rows: three, the last short. */
enum { C_COLS = 64, C_ROWS = 10000, C_N = C_ROWS * C_COLS };

static store_push_item_t chunk_item(const int64_t *shape, const float *g, size_t row, size_t rows)
{
    return (store_push_item_t){.key = {"w", 0},
                               .rank = 2,
                               .shape = shape,
                               .grad = g + row * C_COLS,
                               .has_chunk = true,
                               .chunk_row = row,
                               .chunk_rows = rows};
}

/* A dense gradient sent as chunks of whole blocks, in any order and over several calls, makes
 * the values a whole push makes, bit for bit; each push-pull of a chunk returns that chunk's
 * rows, where they are in the shard, as they are after its update. */
START_TEST(store_chunked_pushes_equal_whole_pushes_bit_for_bit)
{
    store_t *whole = new_store(), *chunked = new_store();
    optimizer_config_t opt = adam();
    store_shard_spec_t sp = spec("w", C_ROWS, C_COLS, 0, 1);
    int64_t shape[2] = {C_ROWS, C_COLS};
    size_t br = rpc_block_rows(C_COLS * sizeof(float));
    /* [0, br) and [2br, end) in one call, then [br, 2br) in another */
    size_t cuts[3][2] = {{0, br}, {2 * br, C_ROWS - 2 * br}, {br, br}};
    float *g = malloc(C_N * sizeof(float)), *a;

    ck_assert_uint_eq(br, 4096);
    create_ok(whole, "job", &opt, &sp, 1, 1);
    create_ok(chunked, "job", &opt, &sp, 1, 1);
    for (int step = 0; step < 3; step++) {
        store_push_item_t items[2];
        store_value_t vals[2];
        uint64_t versions[2];
        store_err_t err;
        void *buf = NULL;
        size_t len = 0;
        for (size_t i = 0; i < C_N; i++)
            g[i] = (float)((int)((i * 13 + (size_t)step * 5) % 29) - 14) * 0.0625f;
        push_dense(whole, "job", "w", 0, shape, 2, g, (uint64_t)step + 1);
        items[0] = chunk_item(shape, g, cuts[0][0], cuts[0][1]);
        items[1] = chunk_item(shape, g, cuts[1][0], cuts[1][1]);
        ck_assert_msg(store_push(chunked, "job", items, 2, true, versions, vals, &buf, &len,
                                 &err) == STATUS_OK,
                      "%s", err.msg.text);
        ck_assert_uint_eq(len, (br + C_ROWS - 2 * br) * C_COLS * sizeof(float));
        ck_assert_uint_eq(vals[1].chunk_offset, 2 * br * C_COLS * sizeof(float));
        ck_assert_uint_eq(vals[1].bytes, (C_ROWS - 2 * br) * C_COLS * sizeof(float));
        ck_assert_uint_eq(versions[0], (uint64_t)step + 1);
        a = pull_all(chunked, "job", "w", 0, NULL, NULL);
        ck_assert(memcmp((char *)buf + vals[1].offset, (char *)a + vals[1].chunk_offset,
                         vals[1].bytes) == 0);
        free(a);
        free(buf);
        items[0] = chunk_item(shape, g, cuts[2][0], cuts[2][1]);
        ck_assert_msg(store_push(chunked, "job", items, 1, false, versions, NULL, NULL, NULL,
                                 &err) == STATUS_OK,
                      "%s", err.msg.text);
    }
    assert_same_values(whole, chunked, "w", C_N);
    free(g);
    store_free(whole);
    store_free(chunked);
}
END_TEST

/* A chunk outside the shard, not whole blocks, duplicated or overlapping another item of the
 * request, on a row gradient, is refused with the whole request: nothing changes. */
START_TEST(store_bad_chunks_are_refused_whole)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(0.5);
    store_shard_spec_t sp = spec("w", C_ROWS, C_COLS, 0, 1);
    int64_t shape[2] = {C_ROWS, C_COLS};
    size_t br = rpc_block_rows(C_COLS * sizeof(float));
    float *g = calloc(C_N, sizeof(float)), *before, *after;
    const struct {
        size_t row[2], rows[2];
        int n;
        const char *says;
    } bad[] = {
        {{0, 0}, {br + 1, 0}, 1, "not whole blocks"},
        {{1, 0}, {br - 1, 0}, 1, "not whole blocks"},
        {{2 * br, 0}, {C_ROWS - 1, 0}, 1, "outside"},
        {{0, 0}, {0, 0}, 1, "outside"},
        {{0, 0}, {br, br}, 2, "both update rows"},      /* duplicated */
        {{0, br}, {2 * br, br}, 2, "both update rows"}, /* overlapping */
        {{br, 0}, {br, C_ROWS}, 2, "both update rows"}, /* beside the whole shard */
    };
    store_err_t err;
    uint64_t versions[2];

    for (size_t i = 0; i < C_N; i++)
        g[i] = 1.0f;
    create_ok(s, "job", &opt, &sp, 1, 1);
    before = pull_all(s, "job", "w", 0, NULL, NULL);
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        store_push_item_t items[2];
        for (int i = 0; i < bad[k].n; i++) {
            items[i] = chunk_item(shape, g, bad[k].row[i], bad[k].rows[i]);
            if (bad[k].rows[i] == C_ROWS) { /* the whole shard */
                items[i].has_chunk = false;
                items[i].grad = g;
            }
        }
        ck_assert_msg(store_push(s, "job", items, (size_t)bad[k].n, false, versions, NULL, NULL,
                                 NULL, &err) == STATUS_INVALID_ARGUMENT,
                      "case %zu was taken", k);
        ck_assert_msg(strstr(err.msg.text, bad[k].says) != NULL, "case %zu: %s", k, err.msg.text);
    }
    after = pull_all(s, "job", "w", 0, NULL, NULL);
    ck_assert(memcmp(before, after, C_N * sizeof(float)) == 0);
    free(before);
    free(after);
    free(g);
    store_free(s);
}
END_TEST

/* Half k of the bfloat16 gradient h of "w": its first block of br rows (k 0) or the rest. */
static store_push_item_t bf16_halves(const int64_t *shape, const uint16_t *h, size_t br, int k)
{
    return (store_push_item_t){.key = {"w", 0},
                               .rank = 2,
                               .shape = shape,
                               .grad_bf16 = k == 0 ? h : h + br * C_COLS,
                               .has_chunk = true,
                               .chunk_row = k == 0 ? 0 : br,
                               .chunk_rows = k == 0 ? br : C_ROWS - br};
}

/* A bfloat16 gradient (in chunks too) gives the values its float32 widening gives, bit for bit,
 * and a push-pull in bfloat16 returns the float32 values the PS keeps, rounded to nearest even. */
START_TEST(store_bfloat16_pushes_are_their_widened_float32_pushes)
{
    store_t *wide = new_store(), *narrow = new_store();
    optimizer_config_t opt = adam();
    store_shard_spec_t sp = spec("w", C_ROWS, C_COLS, 0, 1);
    int64_t shape[2] = {C_ROWS, C_COLS};
    size_t br = rpc_block_rows(C_COLS * sizeof(float));
    float *g = malloc(C_N * sizeof(float)), *a;
    uint16_t *h = malloc(C_N * sizeof(uint16_t));

    create_ok(wide, "job", &opt, &sp, 1, 1);
    create_ok(narrow, "job", &opt, &sp, 1, 1);
    for (int step = 0; step < 3; step++) {
        store_push_item_t items[2] = {bf16_halves(shape, h, br, 0), bf16_halves(shape, h, br, 1)};
        store_value_t vals[2];
        uint64_t versions[2];
        store_err_t err;
        void *buf = NULL;
        size_t len = 0;
        for (size_t i = 0; i < C_N; i++)
            h[i] = bf16_from_float((float)sin((double)(i + (size_t)step * 7)) * 0.3f);
        bf16_to_floats(g, h, C_N);
        push_dense(wide, "job", "w", 0, shape, 2, g, (uint64_t)step + 1);
        ck_assert_msg(store_push(narrow, "job", items, 2, STORE_PULL_BFLOAT16, versions, vals, &buf,
                                 &len, &err) == STATUS_OK,
                      "%s", err.msg.text);
        ck_assert_uint_eq(len, C_N * sizeof(uint16_t));
        ck_assert(vals[0].bf16 && vals[1].bf16);
        ck_assert_uint_eq(vals[1].chunk_offset, br * C_COLS * sizeof(uint16_t));
        a = pull_all(narrow, "job", "w", 0, NULL, NULL);
        for (size_t i = 0; i < C_N; i++)
            ck_assert_uint_eq(((uint16_t *)buf)[i], bf16_from_float(a[i]));
        free(a);
        free(buf);
    }
    assert_same_values(wide, narrow, "w", C_N);
    free(g);
    free(h);
    store_free(wide);
    store_free(narrow);
}
END_TEST

/* bytes [0, len) behind `lead` bytes of junk, cut as gRPC's slices cut a payload: into pieces of
 * 0 to ~20 KiB (an eighth of a small payload) at any byte, each in memory of its own (freed by
 * scattered_free). */
typedef struct scattered {
    pieces_part_t parts[4096];
    uint8_t *mem[4096];
    pieces_t p;
} scattered_t;

static void scatter(scattered_t *s, const void *bytes, size_t len, size_t lead, unsigned seed)
{
    size_t total = lead + len, at = 0, n = 0, most = len < 40000 ? len / 8 + 1 : 20000;

    while (at < total || n == 0) {
        size_t take = (size_t)rand_r(&seed) % 5 == 0 ? (size_t)rand_r(&seed) % 7
                                                     : (size_t)rand_r(&seed) % most;
        if (take > total - at)
            take = total - at;
        ck_assert_uint_lt(n, 4096);
        s->mem[n] = malloc(take + 1);
        for (size_t k = 0; k < take; k++) {
            size_t b = at + k;
            s->mem[n][k] = b < lead ? 0xee : ((const uint8_t *)bytes)[b - lead];
        }
        s->parts[n] = (pieces_part_t){s->mem[n], take, at};
        at += take;
        n++;
    }
    s->p = (pieces_t){s->parts, n, total};
}

static void scattered_free(scattered_t *s)
{
    for (size_t i = 0; i < s->p.n; i++)
        free(s->mem[i]);
}

/* A dense gradient read where gRPC left it, in pieces cut at any byte (elements split between
 * pieces too), updates the variable bit for bit as the same gradient in one buffer does: float32
 * over the pool's threads, bfloat16 chunks, a moving statistic. A non-finite or overflowing
 * element, whether a cut splits it or not, is found and named by its index, and nothing is
 * applied; a payload too short for the gradient, or a row gradient in pieces, is refused. */
START_TEST(store_pushes_read_in_place_from_any_cut_equal_flat_pushes)
{
    store_t *flat = new_store(), *cut = new_store();
    optimizer_config_t opt = adam(), big = sgd(1e10);
    store_shard_spec_t sp[3] = {spec("w", C_ROWS, C_COLS, 0, 1),
                                spec("bn/moving_mean", 99, 0, 0, 1), spec("v", 300, 0, 0, 1)};
    int64_t shape[2] = {C_ROWS, C_COLS}, mshape[1] = {99}, vshape[1] = {300};
    size_t br = rpc_block_rows(C_COLS * sizeof(float));
    float *g = malloc(C_N * sizeof(float)), m[99], v[300];
    uint16_t *h = malloc(C_N * sizeof(uint16_t));
    scattered_t *sc = malloc(sizeof(*sc));
    pool_t *pool;
    status_msg_t perr;
    store_err_t err;
    uint64_t versions[2];

    ck_assert_int_eq(pool_new(3, &pool, &perr), STATUS_OK);
    store_set_pool(cut, pool);
    sp[1].moving = true;
    sp[1].momentum = 0.9;
    create_ok(flat, "job", &opt, sp, 2, 2);
    create_ok(cut, "job", &opt, sp, 2, 2);
    create_ok(flat, "big", &big, &sp[2], 1, 1);
    create_ok(cut, "big", &big, &sp[2], 1, 1);
    for (unsigned step = 0; step < 4; step++) {
        store_push_item_t it = {.key = {"w", 0}, .rank = 2, .shape = shape};
        store_value_t vals[2];
        void *buf = NULL, *fbuf = NULL;
        size_t len = 0, flen = 0;
        for (size_t i = 0; i < C_N; i++)
            g[i] = (float)sin((double)(i * 3 + step)) * 0.25f;
        for (size_t i = 0; i < 99; i++)
            m[i] = (float)(i + step) * 0.5f;
        /* float32, whole, with a pull: the reply is the flat push's too */
        it.grad = g;
        ck_assert_msg(store_push(flat, "job", &it, 1, STORE_PULL_FLOAT32, versions, vals, &fbuf,
                                 &flen, &err) == STATUS_OK,
                      "%s", err.msg.text);
        scatter(sc, g, C_N * sizeof(float), 3 + step, 100 + step);
        it.grad = NULL;
        it.grad_pieces = &sc->p;
        it.grad_at = 3 + step;
        ck_assert_msg(store_push(cut, "job", &it, 1, STORE_PULL_FLOAT32, versions, vals, &buf, &len,
                                 &err) == STATUS_OK,
                      "%s", err.msg.text);
        ck_assert_uint_eq(len, flen);
        ck_assert(memcmp(buf, fbuf, len) == 0);
        free(buf);
        free(fbuf);
        scattered_free(sc);
        /* bfloat16, in two chunks from one payload */
        for (size_t i = 0; i < C_N; i++)
            h[i] = bf16_from_float(g[C_N - 1 - i]);
        {
            store_push_item_t items[2] = {bf16_halves(shape, h, br, 0),
                                          bf16_halves(shape, h, br, 1)};
            ck_assert_int_eq(store_push(flat, "job", items, 2, STORE_PUSH_ONLY, versions, NULL,
                                        NULL, NULL, &err),
                             STATUS_OK);
            scatter(sc, h, C_N * sizeof(uint16_t), 1, 200 + step);
            for (int k = 0; k < 2; k++) {
                items[k].grad_bf16 = NULL;
                items[k].grad_pieces = &sc->p;
                items[k].grad_pieces_bf16 = true;
            }
            items[0].grad_at = 1;
            items[1].grad_at = 1 + br * C_COLS * sizeof(uint16_t);
            ck_assert_int_eq(
                store_push(cut, "job", items, 2, STORE_PUSH_ONLY, versions, NULL, NULL, NULL, &err),
                STATUS_OK);
            scattered_free(sc);
        }
        /* a moving statistic, 99 elements cut anywhere */
        push_dense(flat, "job", "bn/moving_mean", 0, mshape, 1, m, step + 1);
        scatter(sc, m, sizeof(m), 2, 300 + step);
        it = (store_push_item_t){.key = {"bn/moving_mean", 0},
                                 .rank = 1,
                                 .shape = mshape,
                                 .grad_pieces = &sc->p,
                                 .grad_at = 2};
        ck_assert_int_eq(
            store_push(cut, "job", &it, 1, STORE_PUSH_ONLY, versions, NULL, NULL, NULL, &err),
            STATUS_OK);
        scattered_free(sc);
    }
    assert_same_values(flat, cut, "w", C_N);
    assert_same_values(flat, cut, "bn/moving_mean", 99);
    /* bad elements, where the cut splits one and inside either piece: named by their index
     * in the gradient, and nothing applied */
    for (size_t i = 0; i < 300; i++)
        v[i] = 1e-3f;
    static const size_t bad_at[] = {137, 30, 200};
    for (size_t b = 0; b < sizeof(bad_at) / sizeof(bad_at[0]); b++)
        for (int bad = 0; bad < 2; bad++) {
            store_push_item_t it = {.key = {"v", 0}, .rank = 1, .shape = vshape, .grad_at = 1};
            pieces_part_t parts[2];
            uint8_t *bytes = malloc(1 + sizeof(v));
            char want[64];
            v[bad_at[b]] = bad == 0 ? NAN : 1e30f; /* 1e10 * 1e30 overflows float32 */
            bytes[0] = 0xee;
            memcpy(bytes + 1, v, sizeof(v));
            v[bad_at[b]] = 1e-3f;
            /* element 137 lies in bytes [549, 553) of the payload: cut at 551; element 30 lies
             * in the first piece, element 200 in the second */
            parts[0] = (pieces_part_t){bytes, 551, 0};
            parts[1] = (pieces_part_t){bytes + 551, sizeof(v) + 1 - 551, 551};
            it.grad_pieces = &(pieces_t){parts, 2, 1 + sizeof(v)};
            ck_assert_int_eq(
                store_push(cut, "big", &it, 1, STORE_PUSH_ONLY, versions, NULL, NULL, NULL, &err),
                STATUS_INVALID_ARGUMENT);
            snprintf(want, sizeof(want), bad == 0 ? "nan at element %zu" : "gradient element %zu ",
                     bad_at[b]);
            ck_assert_msg(strstr(err.msg.text, want) != NULL, "%s", err.msg.text);
            free(bytes);
        }
    /* pieces that end before the gradient does, and a row gradient in pieces or in none: refused
     * by the store itself */
    {
        store_push_item_t it = {.key = {"v", 0}, .rank = 1, .shape = vshape, .grad_at = 5};
        pieces_part_t part;
        pieces_t p = pieces_flat(&part, v, sizeof(v));
        int64_t rows[2] = {0, 1}, rshape[2] = {2, C_COLS};
        it.grad_pieces = &p;
        ck_assert_int_eq(
            store_push(cut, "big", &it, 1, STORE_PUSH_ONLY, versions, NULL, NULL, NULL, &err),
            STATUS_INVALID_ARGUMENT);
        ck_assert_msg(strstr(err.msg.text, "needs 1200 bytes from byte 5 of a payload of 1200"),
                      "%s", err.msg.text);
        it = (store_push_item_t){.key = {"w", 0},
                                 .rank = 2,
                                 .shape = rshape,
                                 .has_rows = true,
                                 .rows = rows,
                                 .n_rows = 2,
                                 .grad_pieces = &p};
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(
                store_push(cut, "job", &it, 1, STORE_PUSH_ONLY, versions, NULL, NULL, NULL, &err),
                STATUS_INVALID_ARGUMENT);
            ck_assert_msg(strstr(err.msg.text, "a row gradient is float32, in one array"), "%s",
                          err.msg.text);
            it.grad_pieces = NULL; /* and no gradient at all */
        }
    }
    {
        float *a = pull_all(flat, "big", "v", 0, NULL, NULL),
              *b = pull_all(cut, "big", "v", 0, NULL, NULL);
        ck_assert(memcmp(a, b, sizeof(v)) == 0);
        free(a);
        free(b);
    }
    free(g);
    free(h);
    free(sc);
    store_free(flat);
    store_free(cut);
    pool_free(pool);
}
END_TEST

START_TEST(store_row_push_applies_adam_to_the_touched_rows_only)
{
    store_t *s = new_store();
    optimizer_config_t opt = adam();
    store_shard_spec_t sp = spec("emb", 6, 3, 0, 1);
    float slots[2 * 18] = {0}, grads[3 * 3] = {1, 2, 3, -1, -2, -3, 0.5f, 0.5f, 0.5f};
    int64_t rows[3] = {4, 1, 4}, shape[2] = {3, 3}; /* row 4 twice: summed */
    store_push_item_t it = {.key = {"emb", 0},
                            .rank = 2,
                            .shape = shape,
                            .grad = grads,
                            .has_rows = true,
                            .rows = rows,
                            .n_rows = 3};
    uint64_t version;
    store_err_t err;
    float *want, *got;

    sp.sparse = true;
    create_ok(s, "job", &opt, &sp, 1, 1);
    want = pull_all(s, "job", "emb", 0, NULL, NULL);
    optimizer_slots_init(&opt, slots, 18);
    for (int step = 0; step < 3; step++) {
        ck_assert_int_eq(store_push(s, "job", &it, 1, false, &version, NULL, NULL, NULL, &err),
                         STATUS_OK);
        ck_assert_uint_eq(version, (uint64_t)step + 1);
        ck_assert_int_eq(
            optimizer_apply_rows(&opt, step, want, 6, 3, rows, grads, 3, slots, NULL, NULL),
            STATUS_OK);
    }
    got = pull_all(s, "job", "emb", 0, NULL, NULL);
    assert_floats_eq(got, want, 18);
    free(got);
    free(want);
    store_free(s);
}
END_TEST

START_TEST(store_learning_rate_schedule_runs_on_each_shard_version)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(1.0);
    store_shard_spec_t sp[2] = {spec("w", 2, 0, 0, 2), spec("w", 2, 0, 1, 2)};
    int64_t shape[1] = {1};
    float g = 1.0f, *v;

    opt.schedule.kind = LR_PIECEWISE_CONSTANT;
    opt.schedule.n_boundaries = 1;
    opt.schedule.boundaries[0] = 0;
    opt.schedule.values[0] = 1.0; /* step 0 */
    opt.schedule.values[1] = 0.1; /* later */
    for (int k = 0; k < 2; k++)
        sp[k].init = (job_init_t){.kind = JOB_INIT_ZEROS};
    create_ok(s, "job", &opt, sp, 2, 2);
    push_dense(s, "job", "w", 0, shape, 1, &g, 1);
    push_dense(s, "job", "w", 0, shape, 1, &g, 2);
    push_dense(s, "job", "w", 1, shape, 1, &g, 1); /* shard 1's first update: lr 1 */
    v = pull_all(s, "job", "w", 0, NULL, NULL);
    ck_assert(fabsf(v[0] - -1.1f) < 1e-6f);
    free(v);
    v = pull_all(s, "job", "w", 1, NULL, NULL);
    ck_assert(v[0] == -1.0f);
    free(v);
    store_free(s);
}
END_TEST

START_TEST(store_pull_of_rows_returns_them_in_request_order)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(1.0);
    store_shard_spec_t sp = spec("emb", 5, 2, 0, 1);
    int64_t rows[3] = {3, 0, 3};
    store_pull_item_t it = {.key = {"emb", 0}, .has_rows = true, .rows = rows, .n_rows = 3};
    store_value_t val;
    store_err_t err;
    void *buf;
    size_t len;
    float *all = NULL, *got;

    create_ok(s, "job", &opt, &sp, 1, 1);
    all = pull_all(s, "job", "emb", 0, NULL, NULL);
    ck_assert_int_eq(store_pull(s, "job", &it, 1, &val, &buf, &len, &err), STATUS_OK);
    got = buf;
    ck_assert_uint_eq(len, 3 * 2 * sizeof(float));
    ck_assert_uint_eq(val.rank, 2);
    ck_assert_int_eq(val.shape[0], 3);
    ck_assert_int_eq(val.shape[1], 2);
    assert_floats_eq(got, all + 6, 2);
    assert_floats_eq(got + 2, all, 2);
    assert_floats_eq(got + 4, all + 6, 2);
    free(buf);
    free(all);
    store_free(s);
}
END_TEST

START_TEST(store_push_pull_returns_the_updated_values)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(0.5);
    store_shard_spec_t sp[2] = {spec("w", 2, 2, 0, 1), spec("emb", 4, 2, 0, 1)};
    int64_t wshape[2] = {2, 2}, rshape[2] = {1, 2}, rows[1] = {2};
    float gw[4] = {1, 2, 3, 4}, gr[2] = {2, 2};
    store_push_item_t items[2] = {
        {.key = {"w", 0}, .rank = 2, .shape = wshape, .grad = gw},
        {.key = {"emb", 0},
         .rank = 2,
         .shape = rshape,
         .grad = gr,
         .has_rows = true,
         .rows = rows,
         .n_rows = 1},
    };
    store_value_t vals[2];
    uint64_t versions[2];
    store_err_t err;
    float *w0, *e0, *got;
    void *buf;
    size_t len;

    create_ok(s, "job", &opt, sp, 2, 2);
    w0 = pull_all(s, "job", "w", 0, NULL, NULL);
    e0 = pull_all(s, "job", "emb", 0, NULL, NULL);
    ck_assert_int_eq(store_push(s, "job", items, 2, true, versions, vals, &buf, &len, &err),
                     STATUS_OK);
    got = buf;
    ck_assert_uint_eq(len, 6 * sizeof(float));
    ck_assert_uint_eq(versions[0], 1);
    ck_assert_uint_eq(vals[0].version, 1);
    ck_assert_uint_eq(vals[1].offset, 4 * sizeof(float));
    for (int i = 0; i < 4; i++)
        ck_assert(got[i] == w0[i] - 0.5f * gw[i]);
    ck_assert(got[4] == e0[4] - 1.0f && got[5] == e0[5] - 1.0f);
    free(buf);
    free(w0);
    free(e0);
    store_free(s);
}
END_TEST

/* ---- rejections --------------------------------------------------------------------------- */

START_TEST(store_rejected_push_leaves_every_value_intact)
{
    store_t *s = new_store();
    optimizer_config_t opt = adam();
    store_shard_spec_t sp[2] = {spec("w", 2, 2, 0, 1), spec("emb", 4, 2, 0, 1)};
    int64_t wshape[2] = {2, 2}, bad_shape[2] = {4, 1}, rshape[2] = {2, 2};
    int64_t good_rows[2] = {0, 3}, bad_rows[2] = {1, 4}, neg_rows[2] = {-1, 0};
    float gw[4] = {1, 1, 1, 1}, gr[4] = {1, 1, 1, 1}, nan_g[4] = {1, NAN, 1, 1};
    float inf_g[4] = {1, 1, INFINITY, 1};
    store_push_item_t items[2] = {
        {.key = {"w", 0}, .rank = 2, .shape = wshape, .grad = gw},
        {.key = {"emb", 0},
         .rank = 2,
         .shape = rshape,
         .grad = gr,
         .has_rows = true,
         .rows = bad_rows,
         .n_rows = 2},
    };
    uint64_t versions[2], version;
    store_err_t err;
    float *w0, *e0, *w1, *e1;

    create_ok(s, "job", &opt, sp, 2, 2);
    w0 = pull_all(s, "job", "w", 0, NULL, NULL);
    e0 = pull_all(s, "job", "emb", 0, NULL, NULL);

    /* The second item's row 4 is out of range: the first is not applied either. */
    ck_assert_int_eq(store_push(s, "job", items, 2, false, versions, NULL, NULL, NULL, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_str_eq(err.culprit, "emb");
    ck_assert_ptr_nonnull(strstr(err.msg.text, "row index 4"));
    items[1].rows = neg_rows;
    ck_assert_int_eq(store_push(s, "job", items, 2, false, versions, NULL, NULL, NULL, &err),
                     STATUS_INVALID_ARGUMENT);
    items[1].rows = good_rows;
    items[1].grad = nan_g;
    ck_assert_int_eq(store_push(s, "job", items, 2, false, versions, NULL, NULL, NULL, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.msg.text, "nan"));
    items[1].grad = gr;
    items[0].grad = inf_g;
    ck_assert_int_eq(store_push(s, "job", items, 2, false, versions, NULL, NULL, NULL, &err),
                     STATUS_INVALID_ARGUMENT);
    items[0].grad = gw;
    items[0].shape = bad_shape; /* same size, another shape */
    ck_assert_int_eq(store_push(s, "job", items, 2, false, versions, NULL, NULL, NULL, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.msg.text, "[4, 1]"));
    items[0].shape = wshape;
    items[1].key.variable = "nope";
    ck_assert_int_eq(store_push(s, "job", items, 2, false, versions, NULL, NULL, NULL, &err),
                     STATUS_NOT_FOUND);
    ck_assert_str_eq(err.culprit, "nope");
    items[1].key = (store_key_t){"emb", 1};
    ck_assert_int_eq(store_push(s, "job", items, 2, false, versions, NULL, NULL, NULL, &err),
                     STATUS_NOT_FOUND);
    items[1].key = (store_key_t){"emb", 0};
    ck_assert_int_eq(store_push(s, "other", items, 2, false, versions, NULL, NULL, NULL, &err),
                     STATUS_NOT_FOUND);
    ck_assert_str_eq(err.culprit, "other");

    w1 = pull_all(s, "job", "w", 0, NULL, &version);
    ck_assert_uint_eq(version, 0);
    e1 = pull_all(s, "job", "emb", 0, NULL, &version);
    ck_assert_uint_eq(version, 0);
    assert_floats_eq(w1, w0, 4);
    assert_floats_eq(e1, e0, 8);
    /* And the same push, corrected, goes through. */
    ck_assert_int_eq(store_push(s, "job", items, 2, false, versions, NULL, NULL, NULL, &err),
                     STATUS_OK);
    ck_assert_uint_eq(versions[0], 1);
    ck_assert_uint_eq(versions[1], 1);
    free(w0);
    free(e0);
    free(w1);
    free(e1);
    store_free(s);
}
END_TEST

/* An update that would leave float32 (an overflow, or NaN from one) is refused whole: the
 * first item is fine, the second would overflow, and neither is applied. */
START_TEST(store_push_that_would_overflow_float32_changes_nothing)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(1.0);
    store_shard_spec_t sp[2] = {spec("a", 2, 0, 0, 1), spec("b", 2, 0, 0, 1)};
    int64_t shape[1] = {2};
    float ga[2] = {1, 1}, gb[2] = {3e38f, 1}, *a0, *b0, *a1, *b1;
    store_push_item_t items[2] = {{.key = {"a", 0}, .rank = 1, .shape = shape, .grad = ga},
                                  {.key = {"b", 0}, .rank = 1, .shape = shape, .grad = gb}};
    uint64_t versions[2];
    store_err_t err;

    sp[1].init.kind = JOB_INIT_CONSTANT;
    sp[1].init.a = -3e38;
    create_ok(s, "job", &opt, sp, 2, 2);
    a0 = pull_all(s, "job", "a", 0, NULL, NULL);
    b0 = pull_all(s, "job", "b", 0, NULL, NULL);
    ck_assert_int_eq(store_push(s, "job", items, 2, false, versions, NULL, NULL, NULL, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_str_eq(err.culprit, "b");
    ck_assert_msg(strstr(err.msg.text, "overflow float32") != NULL &&
                      strstr(err.msg.text, "nothing was applied") != NULL,
                  "%s", err.msg.text);
    a1 = pull_all(s, "job", "a", 0, NULL, NULL);
    b1 = pull_all(s, "job", "b", 0, NULL, NULL);
    ck_assert_mem_eq(a0, a1, sizeof(ga));
    ck_assert_mem_eq(b0, b1, sizeof(gb));
    gb[0] = 1;
    ck_assert_int_eq(store_push(s, "job", items, 2, false, versions, NULL, NULL, NULL, &err),
                     STATUS_OK);
    free(a0);
    free(b0);
    free(a1);
    free(b1);
    store_free(s);
}
END_TEST

/* Initial values that are not finite in float32 create nothing. */
START_TEST(store_create_refuses_initial_values_beyond_float32)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(0.1);
    store_shard_spec_t sp = spec("w", 4, 0, 0, 1);

    sp.init.kind = JOB_INIT_RANDOM_UNIFORM;
    sp.init.a = -1e39;
    sp.init.b = 1e39;
    create_refused(s, &opt, &sp, "float32");
    store_free(s);
}
END_TEST

/* An optimizer that goes on (a Keras archive's): the shard takes the slots and update count it
 * is given, and its next updates are the kernels' from that state, bias correction included. */
START_TEST(store_create_with_optimizer_state_goes_on_from_it)
{
    store_t *s = new_store();
    optimizer_config_t opt = adam();
    store_shard_spec_t sp = spec("w", 3, 2, 1, 2); /* rows 2..3 of 3: one row */
    int64_t shape[2] = {1, 2};
    float values[2] = {0.5f, -0.25f}, m[2] = {0.01f, -0.02f}, v[2] = {4e-4f, 1e-3f};
    float want[2] = {0.5f, -0.25f}, slots[4] = {0.01f, -0.02f, 4e-4f, 1e-3f}, g[2] = {0.3f, -0.1f};
    uint64_t version = 0;

    sp.has_values = true;
    sp.values = (const uint8_t *)values;
    sp.values_len = sizeof(values);
    sp.slots[0] = (const uint8_t *)m;
    sp.slots[1] = (const uint8_t *)v;
    sp.slots_len[0] = sp.slots_len[1] = sizeof(m);
    sp.n_slots = 2;
    sp.updates = 1000;
    create_ok(s, "job", &opt, &sp, 1, 1);
    free(pull_all(s, "job", "w", 1, NULL, &version));
    ck_assert_uint_eq(version, 1000);
    for (int step = 0; step < 3; step++) {
        push_dense(s, "job", "w", 1, shape, 2, g, 1001 + (uint64_t)step);
        optimizer_apply_dense(&opt, 1000 + step, want, g, slots, 2);
        float *got = pull_all(s, "job", "w", 1, NULL, NULL);
        assert_floats_eq(got, want, 2);
        free(got);
    }
    /* from a fresh state the same pushes end elsewhere: the state was used */
    float fresh[2] = {0.5f, -0.25f}, zero[4] = {0};
    for (int step = 0; step < 3; step++)
        optimizer_apply_dense(&opt, step, fresh, g, zero, 2);
    ck_assert(fresh[0] != want[0] && fresh[1] != want[1]);
    store_free(s);
}
END_TEST

/* A state that does not fit the optimizer or the shard, or that the update cannot take, is
 * refused naming the variable and the slot, and nothing is created. */
START_TEST(store_create_refuses_a_bad_optimizer_state)
{
    static const struct {
        size_t n_slots, len1;
        float v0;
        uint64_t updates;
        const char *want;
    } cases[] = {
        {1, 8, 1e-3f, 0, "1 optimizer slots given, but adam keeps 2"},
        {2, 4, 1e-3f, 0, "its velocity slot is 4 bytes, the shard's 2 float32 take 8"},
        {2, 8, -1e-3f, 0, "its velocity slot holds -0.001 at element 0, but it is a sum"},
        {2, 8, NAN, 0, "its velocity slot holds nan at element 0"},
        {2, 8, 1e-3f, (1ull << 53) + 1, "updates so far, more than 2^53"},
    };
    optimizer_config_t opt = adam();
    float m[2] = {0}, v[2];

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        store_t *s = new_store();
        store_shard_spec_t sp = spec("w", 2, 0, 0, 1);
        v[0] = cases[c].v0;
        v[1] = 1e-3f;
        sp.slots[0] = (const uint8_t *)m;
        sp.slots[1] = (const uint8_t *)v;
        sp.slots_len[0] = sizeof(m);
        sp.slots_len[1] = cases[c].len1;
        sp.n_slots = cases[c].n_slots;
        sp.updates = cases[c].updates;
        create_refused(s, &opt, &sp, cases[c].want);
        store_free(s);
    }
}
END_TEST

/* Keras's weight constraints, applied by the PS after each update: a max_norm over the
 * kernel's columns (norms that span rows: the variable is one shard, one block) and a
 * unit_norm over each row of a variable in 2 shards, each the kernels' update and then
 * job_constraint_apply's; where the PS cannot apply one, the description is refused. */
START_TEST(store_constraints_follow_each_update)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(0.5);
    store_shard_spec_t sp[3] = {spec("col", 3, 2, 0, 1), spec("row", 4, 2, 0, 2),
                                spec("row", 4, 2, 1, 2)},
                       bad;
    int64_t cshape[2] = {3, 2}, rshape[2] = {2, 2};
    float g[6] = {1, -2, 0.5f, 3, -1, 0.25f}, *want, *got;
    int full[2] = {3, 2}, half[2] = {2, 2};
    store_err_t err;

    sp[0].constraint =
        (job_constraint_t){.kind = JOB_CONSTRAINT_MAX_NORM, .max_value = 0.3, .axes = 1};
    sp[1].constraint = sp[2].constraint =
        (job_constraint_t){.kind = JOB_CONSTRAINT_UNIT_NORM, .axes = 2};
    create_ok(s, "job", &opt, sp, 3, 3);
    want = pull_all(s, "job", "col", 0, NULL, NULL);
    for (int step = 0; step < 2; step++) {
        push_dense(s, "job", "col", 0, cshape, 2, g, (uint64_t)step + 1);
        optimizer_apply_dense(&opt, step, want, g, NULL, 6);
        job_constraint_apply(&sp[0].constraint, want, full, 2, 6);
        got = pull_all(s, "job", "col", 0, NULL, NULL);
        assert_floats_eq(got, want, 6);
        free(got);
    }
    free(want);
    want = pull_all(s, "job", "row", 1, NULL, NULL);
    push_dense(s, "job", "row", 1, rshape, 2, g, 1);
    optimizer_apply_dense(&opt, 0, want, g, NULL, 4);
    job_constraint_apply(&sp[1].constraint, want, half, 2, 4);
    got = pull_all(s, "job", "row", 1, NULL, NULL);
    assert_floats_eq(got, want, 4);
    ck_assert_float_eq_tol(want[0] * want[0] + want[1] * want[1], 1.0f, 1e-5f);
    free(got);
    free(want);

    /* norms over rows cut in shards, a sparse or moving variable: refused, nothing made */
    bad = spec("split", 4, 2, 0, 2);
    bad.constraint = sp[0].constraint;
    ck_assert_int_eq(store_create(s, "job2", &opt, &bad, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.msg.text, "norms span rows, so it is one shard, not 2"), "%s",
                  err.msg.text);
    bad = spec("huge", 5000, 1000, 0, 1); /* 20 MB over the 16 MiB a shard may hold */
    bad.constraint = sp[0].constraint;
    ck_assert_int_eq(store_create(s, "job2", &opt, &bad, 1, NULL, &err), STATUS_RESOURCE_EXHAUSTED);
    ck_assert_msg(strstr(err.msg.text, "cannot be split: raise the parameter servers' "
                                       "--max-message-bytes"),
                  "%s", err.msg.text);
    bad = spec("emb", 4, 2, 0, 1);
    bad.sparse = true;
    bad.constraint = sp[1].constraint;
    ck_assert_int_eq(store_create(s, "job2", &opt, &bad, 1, NULL, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.msg.text, "a constraint on a sparse"), "%s", err.msg.text);
    /* finite values stay finite where float's own arithmetic would overflow: a slice whose norm
     * is past float's range, and a scale up to a huge min_value (0 * inf would be NaN) */
    float big[2] = {3e38f, 3e38f}, small[4] = {0, 0, 1e-30f, 0};
    int two[1] = {2}, two_by_two[2] = {2, 2};
    job_constraint_t mm = {.kind = JOB_CONSTRAINT_MIN_MAX_NORM,
                           .min_value = 1e32,
                           .max_value = 3e38,
                           .rate = 0.5,
                           .axes = 2};
    job_constraint_apply(&sp[0].constraint, big, two, 1, 2);
    ck_assert_msg(isfinite(big[0]) && big[0] > 0 && big[0] <= 0.3f, "%g", (double)big[0]);
    job_constraint_apply(&mm, small, two_by_two, 2, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(isfinite(small[i]), "element %d: %g", i, (double)small[i]);
    ck_assert_float_eq(small[0], 0.0f);
    ck_assert_float_gt(small[2], 1e8f); /* 1e-30 * 5e31 / 1e-7 */

    /* the same variable with another constraint is another variable */
    bad = sp[0];
    bad.constraint.max_value = 0.4;
    ck_assert_int_eq(store_create(s, "job", &opt, &bad, 1, NULL, &err), STATUS_ALREADY_EXISTS);
    store_free(s);
}
END_TEST

/* Each shard's bookkeeping counts against the memory limit, and shards per job are capped. */
START_TEST(store_tiny_shards_pay_for_their_bookkeeping)
{
    store_limits_t lim = {.max_bytes = 64 * 1024,
                          .max_shard_bytes = 16 * MiB,
                          .max_reply_bytes = 16 * MiB,
                          .max_jobs = 4,
                          .max_variables = 8,
                          .max_shards = 100000};
    store_t *s = store_new(&lim, NULL);
    optimizer_config_t opt = sgd(0.1);
    enum { N = 1000 };
    store_shard_spec_t *sp = calloc(N, sizeof(*sp));
    store_totals_t t;
    store_err_t err;

    for (int i = 0; i < N; i++)
        sp[i] = spec("tiny", N, 0, i, N);
    /* 4 KB of values, far more of bookkeeping: over 64 KiB. */
    ck_assert_int_eq(store_create(s, "job", &opt, sp, N, NULL, &err), STATUS_RESOURCE_EXHAUSTED);
    ck_assert_msg(strstr(err.msg.text, "bookkeeping") != NULL, "%s", err.msg.text);
    create_ok(s, "job", &opt, sp, 10, 10);
    store_totals(s, &t);
    ck_assert_uint_ge(t.overhead_bytes, 10 * 200);
    store_free(s);
    lim.max_bytes = 64 * MiB;
    lim.max_shards = 100;
    s = store_new(&lim, NULL);
    ck_assert_int_eq(store_create(s, "job", &opt, sp, N, NULL, &err), STATUS_RESOURCE_EXHAUSTED);
    ck_assert_msg(strstr(err.msg.text, "--max-shards-per-job") != NULL, "%s", err.msg.text);
    store_free(s);
    free(sp);
}
END_TEST

START_TEST(store_pull_rejects_unknown_keys_and_bad_rows)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(1.0);
    store_shard_spec_t sp[2] = {spec("emb", 4, 2, 0, 1), spec("step", 1, 0, 0, 1)};
    int64_t rows[2] = {0, 4};
    store_pull_item_t it = {.key = {"emb", 0}, .has_rows = true, .rows = rows, .n_rows = 2};
    store_value_t val;
    store_err_t err;
    void *buf = NULL;
    size_t len;

    sp[1].rank = sp[1].full_rank = 0; /* a scalar */
    create_ok(s, "job", &opt, sp, 2, 2);
    ck_assert_int_eq(store_pull(s, "job", &it, 1, &val, &buf, &len, &err), STATUS_INVALID_ARGUMENT);
    it.key.variable = "step";
    rows[1] = 0;
    ck_assert_int_eq(store_pull(s, "job", &it, 1, &val, &buf, &len, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.msg.text, "scalar"));
    it.key.variable = "missing";
    ck_assert_int_eq(store_pull(s, "job", &it, 1, &val, &buf, &len, &err), STATUS_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.msg.text, "'missing'"));
    it.key = (store_key_t){"emb", 2};
    ck_assert_int_eq(store_pull(s, "job", &it, 1, &val, &buf, &len, &err), STATUS_NOT_FOUND);
    ck_assert_int_eq(store_pull(s, "nojob", &it, 1, &val, &buf, &len, &err), STATUS_NOT_FOUND);
    ck_assert_ptr_null(buf);
    store_free(s);
}
END_TEST

/* ---- drop and stats ----------------------------------------------------------------------- */

START_TEST(store_drop_frees_the_job_and_only_it)
{
    store_t *s = new_store();
    optimizer_config_t opt = adam();
    store_shard_spec_t sp[2] = {spec("w", 4, 4, 0, 2), spec("w", 4, 4, 1, 2)};
    store_totals_t t;
    store_err_t err;
    size_t shards = 0;
    float *v;

    create_ok(s, "a", &opt, sp, 2, 2);
    create_ok(s, "b", &opt, sp, 1, 1);
    ck_assert_int_eq(store_drop_job(s, "a", &shards, &err), STATUS_OK);
    ck_assert_uint_eq(shards, 2);
    store_totals(s, &t);
    ck_assert_uint_eq(t.jobs, 1);
    ck_assert_uint_eq(t.shards, 1);
    ck_assert_uint_eq(t.param_bytes, 8 * sizeof(float));
    ck_assert_uint_eq(t.slot_bytes, 2 * 8 * sizeof(float));
    v = pull_all(s, "b", "w", 0, NULL, NULL);
    free(v);
    ck_assert_int_eq(store_drop_job(s, "a", &shards, &err), STATUS_NOT_FOUND);
    ck_assert_int_eq(store_drop_job(s, "b", &shards, &err), STATUS_OK);
    store_totals(s, &t);
    ck_assert_uint_eq(t.param_bytes + t.slot_bytes + t.shards + t.variables + t.jobs, 0);
    /* The name is free again, with another optimizer if need be. */
    opt = sgd(0.1);
    create_ok(s, "a", &opt, sp, 2, 2);
    store_free(s);
}
END_TEST

typedef struct stats_seen {
    store_shard_stats_t st[8];
    char vars[8][32];
    size_t n;
} stats_seen_t;

static void collect(const store_shard_stats_t *st, void *arg)
{
    stats_seen_t *s = arg;
    ck_assert(s->n < 8);
    s->st[s->n] = *st;
    snprintf(s->vars[s->n], sizeof(s->vars[0]), "%s", st->variable);
    s->n++;
}

START_TEST(store_stats_count_the_bytes_actually_moved)
{
    store_t *s = new_store();
    optimizer_config_t opt = adam();
    store_shard_spec_t sp[2] = {spec("emb", 100, 8, 0, 1), spec("w", 3, 0, 0, 1)};
    int64_t rows[2] = {7, 50}, rshape[2] = {2, 8}, wshape[1] = {3};
    float g[16] = {0}, gw[3] = {1, 2, 3};
    store_push_item_t push = {.key = {"emb", 0},
                              .rank = 2,
                              .shape = rshape,
                              .grad = g,
                              .has_rows = true,
                              .rows = rows,
                              .n_rows = 2};
    store_pull_item_t pull = {.key = {"emb", 0}, .has_rows = true, .rows = rows, .n_rows = 2};
    store_value_t val;
    stats_seen_t seen = {0};
    store_err_t err;
    uint64_t version;
    void *buf;
    size_t len;

    sp[0].sparse = true;
    create_ok(s, "job", &opt, sp, 2, 2);
    ck_assert_int_eq(store_pull(s, "job", &pull, 1, &val, &buf, &len, &err), STATUS_OK);
    free(buf);
    ck_assert_int_eq(store_push(s, "job", &push, 1, false, &version, NULL, NULL, NULL, &err),
                     STATUS_OK);
    push_dense(s, "job", "w", 0, wshape, 1, gw, 1);
    free(pull_all(s, "job", "w", 0, NULL, NULL));

    ck_assert_int_eq(store_stats(s, "job", collect, &seen, &err), STATUS_OK);
    ck_assert_uint_eq(seen.n, 2);
    ck_assert_str_eq(seen.vars[0], "emb"); /* creation order */
    ck_assert_int_eq(seen.st[0].rank, 2);
    ck_assert_uint_eq(seen.st[0].version, 1);
    ck_assert_uint_eq(seen.st[0].value_bytes, 800 * sizeof(float));
    ck_assert_uint_eq(seen.st[0].slot_bytes, 2 * 800 * sizeof(float));
    ck_assert_uint_eq(seen.st[0].pulls, 1);
    ck_assert_uint_eq(seen.st[0].pushes, 1);
    ck_assert_uint_eq(seen.st[0].bytes_pulled, 2 * 8 * sizeof(float)); /* two rows, not 100 */
    ck_assert_uint_eq(seen.st[0].bytes_pushed, 2 * sizeof(int64_t) + 2 * 8 * sizeof(float));
    ck_assert_str_eq(seen.vars[1], "w");
    ck_assert_uint_eq(seen.st[1].bytes_pulled, 3 * sizeof(float));
    ck_assert_uint_eq(seen.st[1].bytes_pushed, 3 * sizeof(float));
    seen.n = 0;
    ck_assert_int_eq(store_stats(s, NULL, collect, &seen, &err), STATUS_OK);
    ck_assert_uint_eq(seen.n, 2);
    ck_assert_int_eq(store_stats(s, "nope", collect, &seen, &err), STATUS_NOT_FOUND);
    store_free(s);
}
END_TEST

/* ---- threads ------------------------------------------------------------------------------ */

#define THREADS 4
#define PUSHES  200
#define WIDTH   4096

static float ones[WIDTH];

typedef struct racer {
    store_t *s;
    bool puller;
    int torn;
} racer_t;

static void *race_main(void *arg)
{
    racer_t *r = arg;
    int64_t shape[1] = {WIDTH};
    store_push_item_t it = {.key = {"w", 0}, .rank = 1, .shape = shape, .grad = ones};
    store_pull_item_t pl = {.key = {"w", 0}};

    for (int k = 0; k < PUSHES; k++) {
        store_err_t err;
        if (r->puller) {
            store_value_t val;
            void *buf;
            size_t len;
            if (store_pull(r->s, "job", &pl, 1, &val, &buf, &len, &err) == STATUS_OK) {
                const float *v = buf;
                for (int i = 1; i < WIDTH; i++)
                    r->torn += v[i] != v[0];
                free(buf);
            }
        } else {
            uint64_t version;
            if (store_push(r->s, "job", &it, 1, false, &version, NULL, NULL, NULL, &err) !=
                STATUS_OK)
                r->torn++;
        }
    }
    return NULL;
}

START_TEST(store_concurrent_pushes_all_apply_and_pulls_never_see_half_an_update)
{
    store_t *s = new_store();
    optimizer_config_t opt = sgd(1.0);
    store_shard_spec_t sp = spec("w", WIDTH, 0, 0, 1);
    pthread_t tids[THREADS];
    racer_t racers[THREADS];
    uint64_t version;
    float *v;

    sp.init = (job_init_t){.kind = JOB_INIT_ZEROS};
    create_ok(s, "job", &opt, &sp, 1, 1);
    for (int i = 0; i < WIDTH; i++)
        ones[i] = 1.0f;
    for (int i = 0; i < THREADS; i++) {
        racers[i] = (racer_t){s, i % 2 == 1, 0};
        pthread_create(&tids[i], NULL, race_main, &racers[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(tids[i], NULL);
        ck_assert_int_eq(racers[i].torn, 0);
    }
    v = pull_all(s, "job", "w", 0, NULL, &version);
    ck_assert_uint_eq(version, (THREADS / 2) * PUSHES);
    for (int i = 0; i < WIDTH; i++)
        ck_assert(v[i] == -(float)((THREADS / 2) * PUSHES));
    free(v);
    store_free(s);
}
END_TEST

/* ---- checkpoints -------------------------------------------------------------------------- */

/* Saved after two Adam updates and restored into a fresh store: the same values, slots (the next
 * update agrees) and versions; a file of another layout, or with a NaN in it, is refused naming
 * the tensor, and the shards stay as they were. */
START_TEST(store_save_and_restore_round_trip_and_refuse_damage)
{
    store_t *a = new_store(), *b = new_store();
    optimizer_config_t opt = adam();
    store_shard_spec_t specs[2] = {spec("w", 5, 3, 0, 2), spec("w", 5, 3, 1, 2)};
    const int64_t shape0[2] = {3, 3};
    float g[9], *va, *vb, *saved;
    char path[256];
    store_err_t err;
    size_t n, shards = 0;
    uint64_t bytes = 0, version = 0, updates = 0;

    for (int i = 0; i < 9; i++)
        g[i] = 0.1f * (float)(i - 4);
    create_ok(a, "j", &opt, specs, 2, 2);
    push_dense(a, "j", "w", 0, shape0, 2, g, 1);
    push_dense(a, "j", "w", 0, shape0, 2, g, 2);
    snprintf(path, sizeof(path), "/tmp/tessera-store-ckpt-%d.safetensors", (int)getpid());
    ck_assert_msg(store_save(a, "j", path, &bytes, &shards, &updates, &err) == STATUS_OK, "%s",
                  err.msg.text);
    ck_assert_uint_eq(shards, 2);
    ck_assert_uint_eq(updates, 2); /* shard 0's two pushes: the optimizer's step */
    ck_assert_uint_gt(bytes, 15 * 3 * sizeof(float));

    /* a store whose job has one shard more refuses the file by the missing tensor */
    store_shard_spec_t other = spec("v", 4, 0, 0, 1);
    create_ok(b, "j", &opt, specs, 2, 2);
    create_ok(b, "j", NULL, &other, 1, 1);
    ck_assert_int_eq(store_restore(b, "j", path, NULL, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.msg.text, path) != NULL, "%s", err.msg.text);
    ck_assert_int_eq(store_drop_job(b, "j", NULL, &err), STATUS_OK);
    create_ok(b, "j", &opt, specs, 2, 2);
    ck_assert_msg(store_restore(b, "j", path, &shards, &err) == STATUS_OK, "%s", err.msg.text);
    ck_assert_uint_eq(shards, 2);
    va = pull_all(a, "j", "w", 0, &n, NULL);
    vb = pull_all(b, "j", "w", 0, &n, &version);
    ck_assert_uint_eq(version, 2);
    assert_floats_eq(vb, va, n);
    saved = va;
    free(vb);
    /* the slots came back too: a third update lands on the same values */
    push_dense(a, "j", "w", 0, shape0, 2, g, 3);
    push_dense(b, "j", "w", 0, shape0, 2, g, 3);
    va = pull_all(a, "j", "w", 0, &n, NULL);
    vb = pull_all(b, "j", "w", 0, &n, NULL);
    assert_floats_eq(vb, va, n);
    free(va);

    /* a NaN in the second shard's values (file order: part_0, its 2 slots and count, part_1) */
    FILE *f = fopen(path, "r+b");
    uint64_t hlen = 0;
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fread(&hlen, 8, 1, f), 1);
    fseek(f, (long)(8 + hlen + 3 * 9 * sizeof(float) + 8), SEEK_SET);
    fwrite("\xff\xff\xff\x7f", 1, 4, f);
    fclose(f);
    ck_assert_int_eq(store_restore(b, "j", path, NULL, &err), STATUS_DATA_LOSS);
    ck_assert_msg(strstr(err.msg.text, "w/part_1") && strstr(err.msg.text, "NaN"), "%s",
                  err.msg.text);
    /* the shard read before the damaged one holds the file's values (the store says so) */
    va = pull_all(b, "j", "w", 0, &n, NULL);
    assert_floats_eq(va, saved, n);
    free(va);
    free(vb);
    free(saved);
    remove(path);
    store_free(a);
    store_free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("store");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, store_create_initializes_and_pull_returns_the_values);
    tcase_add_test(tc, store_shards_of_a_variable_hold_the_slices_of_the_whole);
    tcase_add_test(tc, store_create_of_the_same_shard_again_leaves_it_as_it_is);
    tcase_add_test(tc, store_create_with_another_shape_fails_with_already_exists);
    tcase_add_test(tc, store_create_rejects_bad_descriptions_and_names_the_culprit);
    tcase_add_test(tc, store_limits_refuse_whole_requests);
    tcase_add_test(tc, store_dense_push_applies_adam_with_the_shard_version_as_step);
    tcase_add_test(tc, store_moving_statistic_takes_the_moving_average);
    tcase_add_test(tc, store_push_pull_over_a_pool_matches_the_kernels_bit_for_bit);
    tcase_add_test(tc, store_chunked_pushes_equal_whole_pushes_bit_for_bit);
    tcase_add_test(tc, store_bad_chunks_are_refused_whole);
    tcase_add_test(tc, store_bfloat16_pushes_are_their_widened_float32_pushes);
    tcase_add_test(tc, store_pushes_read_in_place_from_any_cut_equal_flat_pushes);
    tcase_add_test(tc, store_row_push_applies_adam_to_the_touched_rows_only);
    tcase_add_test(tc, store_learning_rate_schedule_runs_on_each_shard_version);
    tcase_add_test(tc, store_pull_of_rows_returns_them_in_request_order);
    tcase_add_test(tc, store_push_pull_returns_the_updated_values);
    tcase_add_test(tc, store_rejected_push_leaves_every_value_intact);
    tcase_add_test(tc, store_pull_rejects_unknown_keys_and_bad_rows);
    tcase_add_test(tc, store_drop_frees_the_job_and_only_it);
    tcase_add_test(tc, store_stats_count_the_bytes_actually_moved);
    tcase_add_test(tc, store_concurrent_pushes_all_apply_and_pulls_never_see_half_an_update);
    tcase_add_test(tc, store_push_that_would_overflow_float32_changes_nothing);
    tcase_add_test(tc, store_create_refuses_initial_values_beyond_float32);
    tcase_add_test(tc, store_create_with_optimizer_state_goes_on_from_it);
    tcase_add_test(tc, store_create_refuses_a_bad_optimizer_state);
    tcase_add_test(tc, store_constraints_follow_each_update);
    tcase_add_test(tc, store_tiny_shards_pay_for_their_bookkeeping);
    tcase_add_test(tc, store_save_and_restore_round_trip_and_refuse_damage);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
