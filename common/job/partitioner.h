/* TensorFlow's variable partitioners (tf.distribute.experimental.partitioners), the "div" shard
 * layout of ParameterServerStrategy, and its round-robin placement of shards on PS tasks
 * (README: "Parameter-server training").
 *
 * Variables are split along axis 0 only. A variable of d0 rows in n shards is laid out as
 * contiguous row ranges; with base = d0 / n and extra = d0 % n the first `extra` shards hold
 * base + 1 rows. All functions are pure and thread-safe except the placement counter, which
 * belongs to its caller. */
#ifndef TESSERA_PARTITIONER_H
#define TESSERA_PARTITIONER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef enum {
    JOB_PARTITIONER_NONE,
    JOB_PARTITIONER_MIN_SIZE, /* min_shard_bytes, max_shards */
    JOB_PARTITIONER_MAX_SIZE, /* max_shard_bytes, max_shards */
    JOB_PARTITIONER_FIXED,    /* num_shards */
} job_partitioner_kind_t;

typedef struct job_partitioner {
    job_partitioner_kind_t kind;
    int64_t min_shard_bytes, max_shard_bytes;
    int max_shards, num_shards;
} job_partitioner_t;

/* How many shards TensorFlow's partitioner `p` makes of a variable of `shape` (rank dims) whose
 * elements take elem_bytes each:
 *   min_size(min_shard_bytes, max_shards): max(1, min(d0, max_shards, ceil(B / min_shard_bytes)))
 *   max_size(max_shard_bytes, max_shards): ceil(d0 / max(1, floor(max_shard_bytes / row_bytes))),
 *                                          then at most max_shards (<= 0: no cap)
 *   fixed(num_shards):                     min(num_shards, d0)
 *   none:                                  1
 * where B is the variable's bytes and row_bytes those of one row. Like ParameterServerStrategy,
 * a scalar (rank 0) is never split and the count never exceeds d0 (at least 1). Fails with
 * STATUS_INVALID_ARGUMENT when the partitioner's options are out of range (err names the
 * option), a dimension is negative, or the variable's size overflows 64 bits; *ret_shards is
 * then untouched. */
status_t partitioner_num_shards(const job_partitioner_t *p, const int64_t *shape, size_t rank,
                                size_t elem_bytes, int *ret_shards, status_msg_t *err);

/* The rows of shard `shard` of n (0 <= shard < n, n >= 1) in the div layout of d0 rows:
 * rows [*ret_offset, *ret_offset + *ret_rows) of the whole variable. */
void partitioner_shard_rows(int64_t d0, int n, int shard, int64_t *ret_offset, int64_t *ret_rows);

/* The shard of n that holds row `row` (0 <= row < d0) of the variable, and in *ret_local (may
 * be NULL) the row's index inside that shard: TensorFlow's sparse-op mapping
 * s = max(row / (base + 1), (row - extra) / base). Returns -1 when row is outside [0, d0). */
int partitioner_shard_of_row(int64_t d0, int n, int64_t row, int64_t *ret_local);

/* Round-robin placement as ParameterServerStrategy does it: one counter over every shard of
 * every variable in creation order (a variable left whole counts as one shard), so shard k
 * created overall goes to PS task k mod num_ps. Variables are therefore not each started on
 * task 0: after a 3-shard variable on 2 PS (tasks 0, 1, 0) the next variable starts on task 1. */
typedef struct partitioner_placement {
    int num_ps;
    uint64_t created; /* shards placed so far */
} partitioner_placement_t;

/* Starts a placement over num_ps >= 1 tasks. */
void partitioner_placement_init(partitioner_placement_t *pl, int num_ps);

/* The PS task of the next shard created; advances the counter. */
int partitioner_placement_next(partitioner_placement_t *pl);

#endif
