/* The parameter server's variable store: the shards of every job this PS serves, keyed by
 * (job, variable, shard), each with its optimizer slots, version counter and traffic counters.
 *
 * Updates are asynchronous (Hogwild-style per shard, no barrier across shards or workers): a
 * push applies the job's optimizer to each shard it names at once. The update step of a shard
 * (Adam's bias correction, the learning-rate schedule) is its version, the number of updates
 * applied to it so far.
 *
 * Threads. Every function is thread-safe. A store-wide rwlock guards the set of jobs and
 * shards: pulls, pushes and stats share it, create and drop take it alone (writers first, so a
 * stream of pulls cannot starve a drop). Each shard has its own rwlock: pulls of one shard run
 * together, a push holds it for its update, and pushes to different shards run in parallel.
 *
 * Validation. Every call checks all of its input before it changes anything: a rejected call
 * leaves the store as it was. Errors name the culprit (job, variable or field) in err. */
#ifndef TESSERA_PS_STORE_H
#define TESSERA_PS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/pieces.h"
#include "base/pool.h"
#include "job/initializer.h"
#include "job/model.h"
#include "daemon/metrics.h"
#include "optim/optimizer.h"
#include "base/status.h"
#include "tessera/v1/common.pb-c.h"

#define STORE_MAX_RANK               8
#define STORE_MAX_NAME               255 /* bytes of a job or variable name */
#define STORE_MAX_SHARDS_PER_REQUEST 65536
#define STORE_MAX_BATCHES            65536 /* of one push (PushRequest.batches) */

typedef struct store store_t;

typedef struct store_limits {
    uint64_t max_bytes;       /* values and slots of every job together */
    uint64_t max_shard_bytes; /* values of one shard */
    uint64_t max_reply_bytes; /* values one pull or push-pull returns */
    size_t max_jobs;
    size_t max_variables; /* per job */
    size_t max_shards;    /* per job */
} store_limits_t;

/* A failure with what it blames: the job, variable or field at fault ("" when none). */
typedef struct store_err {
    status_msg_t msg;
    char culprit[STORE_MAX_NAME + 1];
} store_err_t;

/* One shard to create. */
typedef struct store_shard_spec {
    const char *variable;
    int shard, num_shards;
    Tessera__V1__DType dtype; /* only DTYPE_FLOAT32 is held */
    size_t rank, full_rank;
    int64_t shape[STORE_MAX_RANK];      /* the shard's */
    int64_t full_shape[STORE_MAX_RANK]; /* the whole variable's */
    int64_t row_offset;                 /* must be the div layout's (common/job/partitioner.h) */
    job_init_t init;        /* JOB_INIT_DEFAULT = zeros; without has_seed the stream seed is */
    double fan_in, fan_out; /* derived from (job, variable); fans 0 = Keras's from full_shape */
    bool sparse;            /* updated by rows (embeddings) */
    /* a moving statistic: value * momentum + pushed * (1 - momentum), no optimizer (its slots
     * are kept, unused, so that every shard of a job has the same) */
    bool moving;
    double momentum;
    /* The shard's own starting values instead of init (init_from): values_len bytes of float32
     * little-endian, which must be the shard's size; any alignment. */
    const uint8_t *values;
    size_t values_len;
    bool has_values;
    /* The optimizer's state (init_from: an archive's optimizer going on): no slot arrays, or
     * as many as the optimizer keeps, each slots_len[k] bytes of float32 (the shard's size, any
     * alignment); and the updates applied so far, the shard's starting version. */
    const uint8_t *slots[OPTIMIZER_MAX_SLOTS];
    size_t slots_len[OPTIMIZER_MAX_SLOTS];
    size_t n_slots;
    uint64_t updates;
    /* Keras's weight constraint, applied after each update (JOB_CONSTRAINT_NONE: none); not on
     * a sparse or moving variable. One whose norms span rows (constraint_spans_rows) needs the
     * variable whole in one shard, which is then one block. */
    job_constraint_t constraint;
} store_shard_spec_t;

typedef struct store_key {
    const char *variable;
    int shard;
} store_key_t;

typedef struct store_pull_item {
    store_key_t key;
    bool has_rows;       /* false: the whole shard */
    const int64_t *rows; /* shard-local row indices, 8-byte aligned */
    size_t n_rows;
} store_pull_item_t;

/* A gradient for one shard: dense (every element of the shard, or a chunk of its rows; shape
 * the shard's) or rows (n_rows rows of the shard, shape [n_rows, the shard's shape[1:]...]);
 * duplicate rows are summed before the update. Pointers are aligned for their types, but for
 * grad_pieces. */
typedef struct store_push_item {
    store_key_t key;
    size_t rank;
    const int64_t *shape; /* the gradient's shape as sent */
    const float *grad;
    const uint16_t *grad_bf16; /* instead of grad: a dense gradient sent as bfloat16 */
    /* Instead of both: a dense gradient where it lies in the request's pieces (as gRPC received
     * it), from byte grad_at, at any alignment; bfloat16 when grad_pieces_bf16. */
    const pieces_t *grad_pieces;
    size_t grad_at;
    bool grad_pieces_bf16;
    bool has_rows;
    const int64_t *rows;
    size_t n_rows;
    /* A chunk of a dense gradient (rpc/types.h): rows [chunk_row, chunk_row + chunk_rows) of the
     * shard, whole blocks; grad holds those rows only, shape is the shard's. */
    bool has_chunk;
    size_t chunk_row, chunk_rows;
    /* The batches the push stands for (0 or 1: one; at most STORE_MAX_BATCHES): a moving
     * statistic takes them as that many updates, value * momentum^batches + g * (1 -
     * momentum^batches). */
    uint32_t batches;
} store_push_item_t;

/* One value returned by a pull: bytes [offset, offset + bytes) of the reply buffer, of the
 * given shape (the shard's, or [n, row...] for rows), and the shard's version when read. */
typedef struct store_value {
    size_t offset, bytes;
    size_t chunk_offset; /* where in the shard's bytes they start: a chunk's rows, else 0 */
    bool bf16;           /* bfloat16 values (STORE_PULL_BFLOAT16), else float32 */
    size_t rank;
    int64_t shape[STORE_MAX_RANK];
    uint64_t version;
} store_value_t;

/* Creates an empty store. apply_seconds (may be NULL) is a histogram that observes the time of
 * each shard update. Returns NULL when out of memory. */
store_t *store_new(const store_limits_t *limits, metric_t *apply_seconds);

/* Spreads the optimizer updates of large dense shards, and the checks of their gradients, over
 * pool's threads beside the handler's (NULL: on the handler's thread alone). The pool outlives
 * the store; set it before the first push. */
void store_set_pool(store_t *s, pool_t *pool);

/* Seconds the optimizer's updates (with the values they write for a pull) have taken, summed
 * over every push since the store was made. */
double store_apply_seconds(const store_t *s);

/* Frees the store and every job in it. NULL-safe; no other call may be running. */
void store_free(store_t *s);

/* Creates the n shards of `job` (all or none). A new job needs `opt` (validated); for an
 * existing job opt may be NULL, or must equal the job's optimizer (ALREADY_EXISTS otherwise:
 * dropping the job is the way to change it). A shard that exists with the same description is
 * left as it is; one that differs fails with ALREADY_EXISTS naming the variable. Values are
 * initialized outside the store lock. *ret_created (may be NULL) counts the shards made.
 * Fails with INVALID_ARGUMENT (bad names, dtype other than float32, shapes, layout or
 * initializer), RESOURCE_EXHAUSTED (a limit), NO_MEMORY. */
status_t store_create(store_t *s, const char *job, const optimizer_config_t *opt,
                      const store_shard_spec_t *specs, size_t n, size_t *ret_created,
                      store_err_t *err);

/* Reads n values, each copied under its shard's read lock into one malloc'd buffer
 * (*ret_buf, *ret_len; NULL when 0 bytes; the caller frees it) described by ret_values[n].
 * Unknown job, variable or shard: NOT_FOUND; rows on a scalar, or out of range: INVALID_ARGUMENT;
 * more than max_reply_bytes: RESOURCE_EXHAUSTED. */
status_t store_pull(store_t *s, const char *job, const store_pull_item_t *items, size_t n,
                    store_value_t *ret_values, void **ret_buf, size_t *ret_len, store_err_t *err);

/* Applies n gradients block by block (store_internal.h), each block under its lock, spread over
 * the pool, after checking all of them (keys, shapes, chunks, row indices, finite values);
 * ret_versions[n] gets each item's version after its update (its blocks' fewest). With
 * pull_after, each updated block's values (or the pushed rows, in push order) are also written,
 * in the same pass, into ret_values and *ret_buf as store_pull does (a chunk's value is its rows,
 * chunk_offset saying where; in bfloat16 with STORE_PULL_BFLOAT16, which row items refuse);
 * otherwise ret_values and ret_buf may be NULL. A gradient may be bfloat16 (grad_bf16): each
 * block's is widened to float32 before its update. Errors as store_pull,
 * and INVALID_ARGUMENT for a gradient whose shape differs from the shard's, that holds NaN or
 * infinity, a chunk that is not whole blocks of its shard, or two items that update the same
 * rows. */
typedef enum {
    STORE_PUSH_ONLY,     /* false */
    STORE_PULL_FLOAT32,  /* true: the values after the update, float32 */
    STORE_PULL_BFLOAT16, /* the same rounded to bfloat16 (dense items only) */
} store_pull_after_t;

status_t store_push(store_t *s, const char *job, const store_push_item_t *items, size_t n,
                    store_pull_after_t pull_after, uint64_t *ret_versions,
                    store_value_t *ret_values, void **ret_buf, size_t *ret_len, store_err_t *err);

/* Writes every shard of `job` held here, with its optimizer slots and version, to the
 * safetensors file `path` (atomically: files/atomic.h; the caller fsyncs the directory), names as
 * files/checkpoint.h gives them. Each shard is copied under its read lock and written after,
 * so pushes wait at most one copy. *ret_bytes and *ret_shards (may be NULL) get the file's size
 * and the shards written, *ret_updates (may be NULL) the most updates a written shard that the
 * optimizer trains (not a moving statistic) had. NOT_FOUND for an unknown job; the file's errors
 * (IO, NO_MEMORY) name path. */
status_t store_save(store_t *s, const char *job, const char *path, uint64_t *ret_bytes,
                    size_t *ret_shards, uint64_t *ret_updates, store_err_t *err);

/* Loads what store_save wrote into the job's shards here, which must be exactly the file's
 * (BAD_CONFIG naming the first tensor that is missing or differs in shape). Values and
 * slots are checked (finite; sums of squares not negative) and a damaged file is DATA_LOSS naming
 * the file and tensor. The file is checked whole before any shard changes, but a tensor found
 * damaged while reading leaves the shards before it restored: the caller fails the job then. */
status_t store_restore(store_t *s, const char *job, const char *path, size_t *ret_shards,
                       store_err_t *err);

/* Frees every shard of job; *ret_shards (may be NULL) gets how many. NOT_FOUND if unknown. */
status_t store_drop_job(store_t *s, const char *job, size_t *ret_shards, store_err_t *err);

#endif
