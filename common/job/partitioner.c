/* TensorFlow's partitioners, read from tensorflow/python/ops/partitioned_variables.py
 * (min_max_variable_partitioner, variable_axis_size_partitioner), distribute/sharded_variable.py
 * (MinSizePartitioner, MaxSizePartitioner, FixedShardsPartitioner) and
 * distribute/parameter_server_strategy_v2.py (_create_variable: scalars are not split, the count
 * is capped by shape[0], the "div" layout; _create_variable_round_robin: the global counter).
 * Python computes the byte ratios in floating point; the integer forms below give the same
 * results for every size below 2^53 and stay exact beyond. */
#include "job/partitioner.h"

#include <inttypes.h>
#include <limits.h>

static int64_t min_i64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Bytes of one row and of the whole variable, with overflow and sign checks. */
static status_t variable_bytes(const int64_t *shape, size_t rank, size_t elem_bytes,
                               uint64_t *ret_row, uint64_t *ret_total, status_msg_t *err)
{
    uint64_t row = elem_bytes, total;

    for (size_t i = 0; i < rank; i++)
        if (shape[i] < 0)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "partitioner: dimension %zu of the variable is negative (%" PRId64
                               ")",
                               i, shape[i]);
    for (size_t i = 1; i < rank; i++)
        if (__builtin_mul_overflow(row, (uint64_t)shape[i], &row))
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "partitioner: the variable's rows overflow 64 bits");
    if (__builtin_mul_overflow(row, (uint64_t)shape[0], &total))
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "partitioner: the variable's size overflows 64 bits");
    *ret_row = row;
    *ret_total = total;
    return STATUS_OK;
}

static status_t check_options(const job_partitioner_t *p, status_msg_t *err)
{
    switch (p->kind) {
    case JOB_PARTITIONER_NONE:
        return STATUS_OK;
    case JOB_PARTITIONER_MIN_SIZE:
        if (p->min_shard_bytes < 1)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "partitioner.min_size.min_shard_bytes must be >= 1, got %" PRId64,
                               p->min_shard_bytes);
        if (p->max_shards < 1)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "partitioner.min_size.max_shards must be >= 1, got %d",
                               p->max_shards);
        return STATUS_OK;
    case JOB_PARTITIONER_MAX_SIZE:
        if (p->max_shard_bytes < 1)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "partitioner.max_size.max_shard_bytes must be >= 1, got %" PRId64,
                               p->max_shard_bytes);
        return STATUS_OK;
    case JOB_PARTITIONER_FIXED:
        if (p->num_shards < 1)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "partitioner.fixed.num_shards must be >= 1, got %d", p->num_shards);
        return STATUS_OK;
    }
    return status_fail(err, STATUS_INVALID_ARGUMENT, "partitioner: unknown kind %d", (int)p->kind);
}

status_t partitioner_num_shards(const job_partitioner_t *p, const int64_t *shape, size_t rank,
                                size_t elem_bytes, int *ret_shards, status_msg_t *err)
{
    uint64_t row_bytes = 0, total = 0;
    int64_t d0, n = 1;

    STATUS_CHECK(check_options(p, err));
    if (rank == 0) { /* ParameterServerStrategy skips partitioning rank-0 variables */
        *ret_shards = 1;
        return STATUS_OK;
    }
    STATUS_CHECK(variable_bytes(shape, rank, elem_bytes, &row_bytes, &total, err));
    d0 = shape[0];
    switch (p->kind) {
    case JOB_PARTITIONER_NONE:
        n = 1;
        break;
    case JOB_PARTITIONER_MIN_SIZE: {
        /* ceil(total / min_shard_bytes) without overflowing */
        uint64_t m = (uint64_t)p->min_shard_bytes;
        uint64_t want = total / m + (total % m != 0);
        n = min_i64(min_i64(d0, p->max_shards), want > INT64_MAX ? INT64_MAX : (int64_t)want);
        break;
    }
    case JOB_PARTITIONER_MAX_SIZE: {
        /* a row of 0 bytes (a zero dimension) fits any number of times per shard */
        uint64_t per = row_bytes == 0 ? UINT64_MAX : (uint64_t)p->max_shard_bytes / row_bytes;
        if (per < 1)
            per = 1;
        n = (int64_t)((uint64_t)d0 / per + ((uint64_t)d0 % per != 0));
        if (p->max_shards > 0)
            n = min_i64(n, p->max_shards);
        break;
    }
    case JOB_PARTITIONER_FIXED:
        n = p->num_shards;
        break;
    }
    /* The strategy takes min(num_partitions, shape[0]); a shard count is at least 1. */
    n = min_i64(n, d0);
    if (n < 1)
        n = 1;
    if (n > INT_MAX)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "partitioner: %" PRId64 " shards are too many; set max_shards", n);
    *ret_shards = (int)n;
    return STATUS_OK;
}

void partitioner_shard_rows(int64_t d0, int n, int shard, int64_t *ret_offset, int64_t *ret_rows)
{
    int64_t base = d0 / n, extra = d0 % n;

    *ret_offset = (int64_t)shard * base + min_i64(shard, extra);
    *ret_rows = base + (shard < extra ? 1 : 0);
}

int partitioner_shard_of_row(int64_t d0, int n, int64_t row, int64_t *ret_local)
{
    int64_t base = d0 / n, extra = d0 % n, s, offset, rows;

    if (row < 0 || row >= d0 || n < 1)
        return -1;
    /* With base == 0 (fewer rows than shards) every row is in a one-row shard of its own. */
    s = base == 0 ? row : row / (base + 1);
    if (base > 0 && (row - extra) / base > s)
        s = (row - extra) / base;
    partitioner_shard_rows(d0, n, (int)s, &offset, &rows);
    if (ret_local)
        *ret_local = row - offset;
    return (int)s;
}

void partitioner_placement_init(partitioner_placement_t *pl, int num_ps)
{
    pl->num_ps = num_ps < 1 ? 1 : num_ps;
    pl->created = 0;
}

int partitioner_placement_next(partitioner_placement_t *pl)
{
    return (int)(pl->created++ % (uint64_t)pl->num_ps);
}
