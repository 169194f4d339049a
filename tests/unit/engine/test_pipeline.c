/* The data pipeline: sharding, shuffling, batching, epochs, prefetching, and its options. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "check_run.h"
#include "data.h"

/* A dataset built by hand: example e has features {e, e + 0.5} and label e. */
static dataset_t *counting_dataset(size_t n)
{
    dataset_t *ds = calloc(1, sizeof(*ds));
    ck_assert_ptr_nonnull(ds);
    ds->n = n;
    ds->feature_len = 2;
    ds->label_len = 1;
    ds->rank = 1;
    ds->shape[0] = 2;
    ds->features = aligned_alloc(64, (n * 2 * sizeof(float) + 63) / 64 * 64);
    ds->labels = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    ck_assert_ptr_nonnull(ds->features);
    ck_assert_ptr_nonnull(ds->labels);
    for (size_t e = 0; e < n; e++) {
        ds->features[2 * e] = (float)e;
        ds->features[2 * e + 1] = (float)e + 0.5f;
        ds->labels[e] = (float)e;
    }
    return ds;
}

static data_pipeline_opts_t opts_default(void)
{
    data_pipeline_opts_t o = {.shard_index = 0,
                              .num_shards = 1,
                              .batch_size = 8,
                              .drop_remainder = false,
                              .shuffle_buffer = 0,
                              .seed = 42,
                              .epochs = 1,
                              .prefetch = 0};
    return o;
}

static data_pipeline_t *pipeline(const dataset_t *ds, const data_pipeline_opts_t *o)
{
    data_pipeline_t *p = NULL;
    status_msg_t err = {0};
    status_t rc = data_pipeline_new(ds, o, &p, &err);
    ck_assert_msg(rc == STATUS_OK, "data_pipeline_new: %s", err.text);
    return p;
}

/* Drains the pipeline into order[] (example ids, i.e. labels), epochs[] per element; checks
 * that every batch's feature rows belong to its labels. Returns the element count. */
static size_t drain(data_pipeline_t *p, size_t *order, int64_t *epochs, size_t cap)
{
    data_batch_t b;
    size_t n = 0;
    while (data_pipeline_next(p, &b)) {
        for (int i = 0; i < b.size; i++) {
            ck_assert_uint_lt(n, cap);
            ck_assert_float_eq(b.features[2 * i], b.labels[i]);
            ck_assert_float_eq(b.features[2 * i + 1], b.labels[i] + 0.5f);
            order[n] = (size_t)b.labels[i];
            if (epochs != NULL)
                epochs[n] = b.epoch;
            n++;
        }
    }
    return n;
}

/* Checks that order[0..m) holds each index of shard (i % shards == index, i < n) exactly once. */
static void assert_permutation_of_shard(const size_t *order, size_t m, size_t n, size_t shards,
                                        size_t index)
{
    char *seen = calloc(n, 1);
    size_t expect = 0;
    ck_assert_ptr_nonnull(seen);
    for (size_t i = index; i < n; i += shards)
        expect++;
    ck_assert_uint_eq(m, expect);
    for (size_t i = 0; i < m; i++) {
        ck_assert_uint_lt(order[i], n);
        ck_assert_uint_eq(order[i] % shards, index);
        ck_assert_int_eq(seen[order[i]], 0);
        seen[order[i]] = 1;
    }
    free(seen);
}

START_TEST(pipeline_two_shards_partition_the_data_exactly)
{
    dataset_t *ds = counting_dataset(103);
    data_pipeline_opts_t o = opts_default();
    size_t order[2][103], n[2];
    char seen[103] = {0};
    o.num_shards = 2;
    o.shuffle_buffer = 10;
    for (int s = 0; s < 2; s++) {
        o.shard_index = s;
        data_pipeline_t *p = pipeline(ds, &o);
        ck_assert_int_eq(data_pipeline_batches_per_epoch(p), 7);
        n[s] = drain(p, order[s], NULL, 103);
        assert_permutation_of_shard(order[s], n[s], 103, 2, (size_t)s);
        data_pipeline_free(p);
    }
    ck_assert_uint_eq(n[0], 52);
    ck_assert_uint_eq(n[1], 51);
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < n[s]; i++)
            seen[order[s][i]]++;
    for (size_t i = 0; i < 103; i++)
        ck_assert_int_eq(seen[i], 1);
    dataset_free(ds);
}
END_TEST

START_TEST(pipeline_shuffle_permutes_the_shard_differently_each_epoch)
{
    dataset_t *ds = counting_dataset(100);
    data_pipeline_opts_t o = opts_default();
    size_t order[300];
    int64_t epochs[300];
    o.batch_size = 7;
    o.shuffle_buffer = 16;
    o.epochs = 3;
    data_pipeline_t *p = pipeline(ds, &o);
    ck_assert_uint_eq(drain(p, order, epochs, 300), 300);
    for (int e = 0; e < 3; e++) {
        bool identity = true;
        assert_permutation_of_shard(order + 100 * e, 100, 100, 1, 0);
        for (size_t i = 0; i < 100; i++) {
            ck_assert_int_eq(epochs[100 * e + i], e);
            identity &= order[100 * e + i] == i;
        }
        ck_assert(!identity);
    }
    ck_assert_int_ne(memcmp(order, order + 100, 100 * sizeof(size_t)), 0);
    ck_assert_int_ne(memcmp(order + 100, order + 200, 100 * sizeof(size_t)), 0);
    data_pipeline_free(p);
    dataset_free(ds);
}
END_TEST

START_TEST(pipeline_same_seed_repeats_the_order_and_another_seed_changes_it)
{
    dataset_t *ds = counting_dataset(64);
    data_pipeline_opts_t o = opts_default();
    size_t a[128], b[128], c[128];
    data_pipeline_t *p;
    o.shuffle_buffer = 64;
    o.epochs = 2;
    p = pipeline(ds, &o);
    drain(p, a, NULL, 128);
    data_pipeline_free(p);
    p = pipeline(ds, &o);
    drain(p, b, NULL, 128);
    data_pipeline_free(p);
    o.seed = 43;
    p = pipeline(ds, &o);
    drain(p, c, NULL, 128);
    data_pipeline_free(p);
    ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
    ck_assert_int_ne(memcmp(a, c, sizeof(a)), 0);
    dataset_free(ds);
}
END_TEST

START_TEST(pipeline_buffer_of_zero_or_one_keeps_the_dataset_order)
{
    dataset_t *ds = counting_dataset(30);
    data_pipeline_opts_t o = opts_default();
    size_t order[90];
    o.num_shards = 3;
    o.shard_index = 1;
    o.epochs = 2;
    for (int buffer = 0; buffer <= 1; buffer++) {
        o.shuffle_buffer = buffer;
        data_pipeline_t *p = pipeline(ds, &o);
        ck_assert_uint_eq(drain(p, order, NULL, 90), 20);
        for (size_t i = 0; i < 20; i++)
            ck_assert_uint_eq(order[i], 1 + 3 * (i % 10));
        data_pipeline_free(p);
    }
    dataset_free(ds);
}
END_TEST

/* A buffer of B holds only the next B inputs: output i comes from the first i + B. A buffer as
 * large as the shard can put any example first. */
START_TEST(pipeline_shuffle_buffer_bounds_how_far_examples_move)
{
    dataset_t *ds = counting_dataset(200);
    data_pipeline_opts_t o = opts_default();
    size_t order[200];
    bool first_from_back_half = false;
    o.shuffle_buffer = 5;
    for (uint64_t seed = 0; seed < 20; seed++) {
        o.seed = seed;
        data_pipeline_t *p = pipeline(ds, &o);
        drain(p, order, NULL, 200);
        for (size_t i = 0; i < 200; i++)
            ck_assert_uint_lt(order[i], i + 5);
        data_pipeline_free(p);
    }
    o.shuffle_buffer = 1000;
    for (uint64_t seed = 0; seed < 20; seed++) {
        o.seed = seed;
        data_pipeline_t *p = pipeline(ds, &o);
        drain(p, order, NULL, 200);
        assert_permutation_of_shard(order, 200, 200, 1, 0);
        first_from_back_half |= order[0] >= 100;
        data_pipeline_free(p);
    }
    ck_assert(first_from_back_half);
    dataset_free(ds);
}
END_TEST

START_TEST(pipeline_keeps_the_last_partial_batch)
{
    dataset_t *ds = counting_dataset(10);
    data_pipeline_opts_t o = opts_default();
    const int sizes[3] = {4, 4, 2};
    data_batch_t b;
    o.batch_size = 4;
    data_pipeline_t *p = pipeline(ds, &o);
    ck_assert_int_eq(data_pipeline_batches_per_epoch(p), 3);
    for (int i = 0; i < 3; i++) {
        ck_assert(data_pipeline_next(p, &b));
        ck_assert_int_eq(b.size, sizes[i]);
        ck_assert_int_eq(b.last_of_epoch, i == 2);
        for (int r = 0; r < b.size; r++) {
            ck_assert_float_eq(b.labels[r], (float)(4 * i + r));
            ck_assert_float_eq(b.features[2 * r + 1], (float)(4 * i + r) + 0.5f);
        }
    }
    ck_assert(!data_pipeline_next(p, &b));
    ck_assert(!data_pipeline_next(p, &b));
    data_pipeline_free(p);
    dataset_free(ds);
}
END_TEST

START_TEST(pipeline_drop_remainder_drops_the_partial_batch)
{
    dataset_t *ds = counting_dataset(10);
    data_pipeline_opts_t o = opts_default();
    data_batch_t b;
    int count = 0;
    o.batch_size = 4;
    o.drop_remainder = true;
    o.epochs = 2;
    o.shuffle_buffer = 10;
    data_pipeline_t *p = pipeline(ds, &o);
    ck_assert_int_eq(data_pipeline_batches_per_epoch(p), 2);
    while (data_pipeline_next(p, &b)) {
        ck_assert_int_eq(b.size, 4);
        ck_assert_int_eq(b.epoch, count / 2);
        ck_assert_int_eq(b.last_of_epoch, count % 2 == 1);
        count++;
    }
    ck_assert_int_eq(count, 4);
    data_pipeline_free(p);
    dataset_free(ds);
}
END_TEST

START_TEST(pipeline_repeats_for_the_epochs_asked_and_numbers_them)
{
    dataset_t *ds = counting_dataset(9);
    data_pipeline_opts_t o = opts_default();
    data_batch_t b;
    int count = 0;
    o.batch_size = 3;
    o.epochs = 3;
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        o.prefetch = prefetch;
        data_pipeline_t *p = pipeline(ds, &o);
        count = 0;
        while (data_pipeline_next(p, &b)) {
            ck_assert_int_eq(b.epoch, count / 3);
            ck_assert_int_eq(b.last_of_epoch, count % 3 == 2);
            count++;
        }
        ck_assert_int_eq(count, 9);
        ck_assert(!data_pipeline_next(p, &b));
        data_pipeline_free(p);
    }
    dataset_free(ds);
}
END_TEST

START_TEST(pipeline_prefetch_thread_yields_the_inline_sequence)
{
    job_synthetic_t spec = {.kind = JOB_SYNTHETIC_CLASSIFICATION,
                            .examples = 3000,
                            .shape = {8},
                            .rank = 1,
                            .classes = 3,
                            .seed = 5};
    dataset_t *ds = NULL;
    data_pipeline_opts_t o = opts_default();
    status_msg_t err = {0};

    ck_assert_msg(dataset_synthetic(&spec, 1.0, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    const int prefetches[3] = {1, 3, 8};
    o.batch_size = 64;
    o.shuffle_buffer = 500;
    o.epochs = 4;
    o.num_shards = 3;
    o.shard_index = 2;
    for (int k = 0; k < 3; k++) {
        data_pipeline_opts_t t = o;
        t.prefetch = prefetches[k];
        data_pipeline_t *inl = pipeline(ds, &o), *thr = pipeline(ds, &t);
        data_batch_t a, b;
        int batches = 0;
        for (;;) {
            bool more_a = data_pipeline_next(inl, &a), more_b = data_pipeline_next(thr, &b);
            ck_assert_int_eq(more_a, more_b);
            if (!more_a)
                break;
            ck_assert_int_eq(a.size, b.size);
            ck_assert_int_eq(a.epoch, b.epoch);
            ck_assert_int_eq(a.last_of_epoch, b.last_of_epoch);
            ck_assert_uint_eq((uintptr_t)b.features % 64, 0);
            ck_assert_int_eq(memcmp(a.features, b.features, (size_t)a.size * 8 * sizeof(float)), 0);
            ck_assert_int_eq(memcmp(a.labels, b.labels, (size_t)a.size * sizeof(float)), 0);
            batches++;
        }
        ck_assert_int_eq(batches, 4 * data_pipeline_batches_per_epoch(inl));
        data_pipeline_free(inl);
        data_pipeline_free(thr);
    }
    dataset_free(ds);
}
END_TEST

START_TEST(pipeline_free_stops_an_endless_prefetch_promptly)
{
    dataset_t *ds = counting_dataset(20000);
    data_pipeline_opts_t o = opts_default();
    data_batch_t b;
    double start;
    o.batch_size = 32;
    o.shuffle_buffer = 20000;
    o.epochs = -1;
    o.prefetch = 4;
    for (int consumed = 0; consumed <= 5; consumed += 5) {
        data_pipeline_t *p = pipeline(ds, &o);
        for (int i = 0; i < consumed; i++)
            ck_assert(data_pipeline_next(p, &b));
        start = clock_now_s();
        data_pipeline_free(p);
        ck_assert_double_lt(clock_now_s() - start, 1.0);
    }
    /* Endless really is endless: several epochs go by. */
    o.shuffle_buffer = 0;
    o.batch_size = 5000;
    data_pipeline_t *p = pipeline(ds, &o);
    for (int i = 0; i < 13; i++) {
        ck_assert(data_pipeline_next(p, &b));
        ck_assert_int_eq(b.epoch, i / 4);
    }
    data_pipeline_free(p);
    dataset_free(ds);
}
END_TEST

static void expect_opts_error(const dataset_t *ds, const data_pipeline_opts_t *o,
                              const char *phrase)
{
    data_pipeline_t *p = NULL;
    status_msg_t err = {0};
    status_t rc = data_pipeline_new(ds, o, &p, &err);
    ck_assert_msg(rc == STATUS_INVALID_ARGUMENT, "got %s (%s)", status_name(rc), err.text);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(err.text, phrase) != NULL, "'%s' does not say '%s'", err.text, phrase);
}

START_TEST(pipeline_rejects_bad_options_with_the_name)
{
    dataset_t *ds = counting_dataset(10);
    data_pipeline_opts_t o = opts_default();
    o.batch_size = 0;
    expect_opts_error(ds, &o, "batch_size");
    o = opts_default();
    o.shard_index = 2;
    o.num_shards = 2;
    expect_opts_error(ds, &o, "shard");
    o.shard_index = -1;
    expect_opts_error(ds, &o, "shard");
    o.shard_index = 0;
    o.num_shards = 0;
    expect_opts_error(ds, &o, "shard");
    o = opts_default();
    o.shuffle_buffer = -1;
    expect_opts_error(ds, &o, "shuffle_buffer");
    o = opts_default();
    o.epochs = 0;
    expect_opts_error(ds, &o, "epochs");
    o.epochs = -2;
    expect_opts_error(ds, &o, "epochs");
    o = opts_default();
    o.prefetch = -1;
    expect_opts_error(ds, &o, "prefetch");
    /* An epoch without a single batch would make an endless repeat spin. */
    o = opts_default();
    o.batch_size = 16;
    o.drop_remainder = true;
    expect_opts_error(ds, &o, "not one batch");
    o = opts_default();
    o.num_shards = 12;
    o.shard_index = 11;
    expect_opts_error(ds, &o, "holds 0");
    dataset_free(ds);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("pipeline");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, pipeline_two_shards_partition_the_data_exactly);
    tcase_add_test(tc, pipeline_shuffle_permutes_the_shard_differently_each_epoch);
    tcase_add_test(tc, pipeline_same_seed_repeats_the_order_and_another_seed_changes_it);
    tcase_add_test(tc, pipeline_buffer_of_zero_or_one_keeps_the_dataset_order);
    tcase_add_test(tc, pipeline_shuffle_buffer_bounds_how_far_examples_move);
    tcase_add_test(tc, pipeline_keeps_the_last_partial_batch);
    tcase_add_test(tc, pipeline_drop_remainder_drops_the_partial_batch);
    tcase_add_test(tc, pipeline_repeats_for_the_epochs_asked_and_numbers_them);
    tcase_add_test(tc, pipeline_prefetch_thread_yields_the_inline_sequence);
    tcase_add_test(tc, pipeline_free_stops_an_endless_prefetch_promptly);
    tcase_add_test(tc, pipeline_rejects_bad_options_with_the_name);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
