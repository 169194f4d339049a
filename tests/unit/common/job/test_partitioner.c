/* TensorFlow's partitioners, div layout and round-robin placement, against the worked examples
 * of TensorFlow's partitioner documentation and values printed by TensorFlow 2 itself
 * (tf.distribute.experimental.partitioners.*(...)(tf.TensorShape(shape), tf.float32)). */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "check_run.h"
#include "job/partitioner.h"

static int shards_of(job_partitioner_t p, int64_t d0, int64_t d1)
{
    int64_t shape[2] = {d0, d1};
    status_msg_t err;
    int n = -1;

    ck_assert_msg(partitioner_num_shards(&p, shape, d1 > 0 ? 2 : 1, 4, &n, &err) == STATUS_OK, "%s",
                  err.text);
    return n;
}

static job_partitioner_t min_size(int64_t min_shard_bytes, int max_shards)
{
    return (job_partitioner_t){.kind = JOB_PARTITIONER_MIN_SIZE,
                               .min_shard_bytes = min_shard_bytes,
                               .max_shards = max_shards};
}

static job_partitioner_t max_size(int64_t max_shard_bytes, int max_shards)
{
    return (job_partitioner_t){.kind = JOB_PARTITIONER_MAX_SIZE,
                               .max_shard_bytes = max_shard_bytes,
                               .max_shards = max_shards};
}

static job_partitioner_t fixed(int n)
{
    return (job_partitioner_t){.kind = JOB_PARTITIONER_FIXED, .num_shards = n};
}

START_TEST(partitioner_min_size_matches_the_worked_examples)
{
    ck_assert_int_eq(shards_of(min_size(4, 2), 6, 1), 2);   /* ceil(24/4)=6, capped at 2 */
    ck_assert_int_eq(shards_of(min_size(4, 10), 6, 1), 6);  /* min(6, 10, 6) */
    ck_assert_int_eq(shards_of(min_size(5, 100), 7, 3), 7); /* ceil(84/5)=17, capped at d0 */
    /* 4 MiB in 256 KiB pieces: 16 shards of 64 rows when allowed. */
    ck_assert_int_eq(shards_of(min_size(256 << 10, 16), 1024, 1024), 16);
    ck_assert_int_eq(shards_of(min_size(256 << 10, 100), 1024, 1024), 16);
}
END_TEST

START_TEST(partitioner_min_size_caps_at_max_shards)
{
    ck_assert_int_eq(shards_of(min_size(256 << 10, 4), 1024, 1024), 4);
    ck_assert_int_eq(shards_of(min_size(1, 3), 1000, 1000), 3);
}
END_TEST

START_TEST(partitioner_min_size_defaults_shard_nothing)
{
    ck_assert_int_eq(shards_of(min_size(256 << 10, 1), 1024, 1024), 1);
    ck_assert_int_eq(shards_of(min_size(256 << 10, 1), 1 << 20, 1024), 1);
}
END_TEST

START_TEST(partitioner_min_size_rounds_up_to_shards_below_min_shard_bytes)
{
    /* 300 KiB with max_shards >= 2: ceil(300/256) = 2 shards of 150 KiB each. */
    ck_assert_int_eq(shards_of(min_size(256 << 10, 4), 300, 256), 2);
    /* A variable smaller than min_shard_bytes stays whole. */
    ck_assert_int_eq(shards_of(min_size(256 << 10, 4), 10, 10), 1);
}
END_TEST

START_TEST(partitioner_max_size_matches_tensorflow)
{
    ck_assert_int_eq(shards_of(max_size(4, INT_MAX), 6, 1), 6); /* a row per shard */
    ck_assert_int_eq(shards_of(max_size(4, 2), 6, 1), 2);       /* max_shards wins */
    ck_assert_int_eq(shards_of(max_size(1024, INT_MAX), 6, 1), 1);
    ck_assert_int_eq(shards_of(max_size(20, INT_MAX), 10, 3), 10);     /* rows of 12 B: 1 each */
    ck_assert_int_eq(shards_of(max_size(1000, INT_MAX), 1000, 7), 29); /* 35 rows per shard */
    ck_assert_int_eq(shards_of(max_size(1000, 5), 1000, 7), 5);
    ck_assert_int_eq(shards_of(max_size(1000, 0), 1000, 7), 29); /* <= 0: no cap */
}
END_TEST

START_TEST(partitioner_fixed_never_exceeds_the_rows)
{
    ck_assert_int_eq(shards_of(fixed(5), 3, 2), 3);
    ck_assert_int_eq(shards_of(fixed(2), 10, 0), 2);
    ck_assert_int_eq(shards_of(fixed(1), 10, 4), 1);
}
END_TEST

START_TEST(partitioner_scalars_and_no_partitioner_give_one_shard)
{
    job_partitioner_t none = {.kind = JOB_PARTITIONER_NONE};
    job_partitioner_t f = fixed(4);
    status_msg_t err;
    int n = -1;

    ck_assert_int_eq(shards_of(none, 1 << 20, 1024), 1);
    ck_assert_int_eq(partitioner_num_shards(&f, NULL, 0, 4, &n, &err), STATUS_OK);
    ck_assert_int_eq(n, 1);
}
END_TEST

START_TEST(partitioner_rejects_bad_options_and_shapes)
{
    job_partitioner_t bad[] = {min_size(0, 2),
                               min_size(10, 0),
                               max_size(0, 2),
                               fixed(0),
                               {.kind = (job_partitioner_kind_t)42}};
    int64_t shape[2] = {10, 10}, neg[2] = {10, -1}, huge[2] = {INT64_MAX, INT64_MAX};
    job_partitioner_t ok = fixed(2);
    status_msg_t err;
    int n = 77;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(partitioner_num_shards(&bad[i], shape, 2, 4, &n, &err),
                         STATUS_INVALID_ARGUMENT);
        ck_assert_int_eq(n, 77); /* untouched */
    }
    ck_assert_int_eq(partitioner_num_shards(&ok, neg, 2, 4, &n, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_int_eq(partitioner_num_shards(&ok, huge, 2, 4, &n, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_int_eq(n, 77);
}
END_TEST

START_TEST(partitioner_div_layout_gives_the_first_shards_one_more_row)
{
    /* 13 rows over 5 shards: base 2, extra 3 -> [0-2], [3-5], [6-8], [9-10], [11-12]. */
    static const int64_t off13[] = {0, 3, 6, 9, 11}, rows13[] = {3, 3, 3, 2, 2};
    /* ParameterServerStrategy's own example: 10 rows over 4 -> [3, 3, 2, 2]. */
    static const int64_t off10[] = {0, 3, 6, 8}, rows10[] = {3, 3, 2, 2};
    int64_t off, rows;

    for (int s = 0; s < 5; s++) {
        partitioner_shard_rows(13, 5, s, &off, &rows);
        ck_assert_int_eq(off, off13[s]);
        ck_assert_int_eq(rows, rows13[s]);
    }
    for (int s = 0; s < 4; s++) {
        partitioner_shard_rows(10, 4, s, &off, &rows);
        ck_assert_int_eq(off, off10[s]);
        ck_assert_int_eq(rows, rows10[s]);
    }
}
END_TEST

START_TEST(partitioner_maps_rows_to_shards_like_sparse_ops)
{
    int64_t local = -1;

    ck_assert_int_eq(partitioner_shard_of_row(13, 5, 10, &local), 3);
    ck_assert_int_eq(local, 1);
    ck_assert_int_eq(partitioner_shard_of_row(13, 5, 2, &local), 0);
    ck_assert_int_eq(local, 2);
    ck_assert_int_eq(partitioner_shard_of_row(13, 5, -1, NULL), -1);
    ck_assert_int_eq(partitioner_shard_of_row(13, 5, 13, NULL), -1);
    /* Every row of several layouts lands inside the range of the shard it maps to. */
    for (int64_t d0 = 1; d0 <= 40; d0++)
        for (int n = 1; n <= d0; n++)
            for (int64_t r = 0; r < d0; r++) {
                int64_t off, rows;
                int s = partitioner_shard_of_row(d0, n, r, &local);
                ck_assert(s >= 0 && s < n);
                partitioner_shard_rows(d0, n, s, &off, &rows);
                ck_assert(r >= off && r < off + rows);
                ck_assert_int_eq(local, r - off);
            }
}
END_TEST

START_TEST(partitioner_places_shards_round_robin_across_variables)
{
    partitioner_placement_t pl;

    /* ParameterServerStrategy: one counter over every shard created. With 2 PS, a variable of
     * 3 shards takes tasks 0, 1, 0; the next one (whole) goes to 1, then 2 shards to 0 and 1. */
    partitioner_placement_init(&pl, 2);
    ck_assert_int_eq(partitioner_placement_next(&pl), 0);
    ck_assert_int_eq(partitioner_placement_next(&pl), 1);
    ck_assert_int_eq(partitioner_placement_next(&pl), 0);
    ck_assert_int_eq(partitioner_placement_next(&pl), 1);
    ck_assert_int_eq(partitioner_placement_next(&pl), 0);
    ck_assert_int_eq(partitioner_placement_next(&pl), 1);
    partitioner_placement_init(&pl, 3);
    for (int i = 0; i < 9; i++)
        ck_assert_int_eq(partitioner_placement_next(&pl), i % 3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("partitioner");
    TCase *tc = tcase_create("partitioner");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, partitioner_min_size_matches_the_worked_examples);
    tcase_add_test(tc, partitioner_min_size_caps_at_max_shards);
    tcase_add_test(tc, partitioner_min_size_defaults_shard_nothing);
    tcase_add_test(tc, partitioner_min_size_rounds_up_to_shards_below_min_shard_bytes);
    tcase_add_test(tc, partitioner_max_size_matches_tensorflow);
    tcase_add_test(tc, partitioner_fixed_never_exceeds_the_rows);
    tcase_add_test(tc, partitioner_scalars_and_no_partitioner_give_one_shard);
    tcase_add_test(tc, partitioner_rejects_bad_options_and_shapes);
    tcase_add_test(tc, partitioner_div_layout_gives_the_first_shards_one_more_row);
    tcase_add_test(tc, partitioner_maps_rows_to_shards_like_sparse_ops);
    tcase_add_test(tc, partitioner_places_shards_round_robin_across_variables);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
