/* The variable store's internals, shared by store.c (lookups, lifetime, drop, stats),
 * store_create.c (validation, planning and the commit of new shards) and store_update.c (pull
 * and push). Not for use outside ps-server/store*.c. */
#ifndef TESSERA_STORE_INTERNAL_H
#define TESSERA_STORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "store.h"

typedef struct var var_t;

/* A block of a shard's rows: the unit a push may send alone (a chunk is whole blocks), with its
 * own lock, update count and bounds, so that chunks of one shard are applied at once on several
 * threads. A dense shard is cut into blocks of RPC_BLOCK_BYTES of rows (rpc_block_rows); a
 * sparse one (updated by rows) is one block. */
typedef struct block {
    pthread_mutex_t mu;        /* guards its rows of values and slots, and bounds */
    _Atomic uint64_t version;  /* updates applied to it (written under mu) */
    optimizer_bounds_t bounds; /* on |values| and |slots| of its rows */
} block_t;

typedef struct shard {
    var_t *var;
    int index;
    int64_t row_offset;
    size_t rank;
    int64_t shape[STORE_MAX_RANK];
    size_t n;       /* elements */
    size_t n_rows;  /* shape[0], 1 for a scalar */
    size_t row_len; /* elements per row */
    float *values;
    float *slots; /* optimizer_slot_count arrays of n, slot-major; NULL when none */
    size_t n_slots;
    /* Each block has its lock; what reads or changes several blocks at once (rows of a pull,
     * a restore) locks them all in order, and what holds one block never waits for another. */
    size_t block_rows, n_blocks; /* rows per block (the last may have fewer) */
    block_t *blocks;
    atomic_uint_fast64_t pulls, pushes, bytes_pulled, bytes_pushed;
} shard_t;

/* The shard's version: the fewest updates any of its blocks has had (they differ only while
 * the chunks of a push are being applied). */
uint64_t store_shard_version(const shard_t *sh);

/* Block b's first row and its number of rows. */
static inline size_t block_first_row(const shard_t *sh, size_t b)
{
    return b * sh->block_rows;
}

static inline size_t block_n_rows(const shard_t *sh, size_t b)
{
    size_t first = b * sh->block_rows;
    return sh->n_rows - first < sh->block_rows ? sh->n_rows - first : sh->block_rows;
}

struct var {
    char *name;
    size_t rank;
    int64_t full_shape[STORE_MAX_RANK];
    int num_shards;
    bool sparse;
    bool moving;                 /* store_shard_spec_t.moving */
    float momentum, rest;        /* rest: 1 - momentum, computed in double as Keras does */
    job_constraint_t constraint; /* store_shard_spec_t.constraint */
    shard_t **shards;            /* held here, sorted by index */
    size_t n_shards, cap_shards;
};

typedef struct sjob {
    char *name;
    optimizer_config_t opt;
    size_t n_slots;
    var_t **vars;
    size_t n_vars, cap_vars;
    size_t *index; /* position in vars + 1; 0 = empty slot */
    size_t index_cap;
    uint64_t param_bytes, slot_bytes, overhead_bytes;
    size_t n_shards;
} sjob_t;

struct store {
    pthread_rwlock_t lock; /* guards the jobs, their variables and shard sets, the totals */
    store_limits_t limits;
    metric_t *apply_seconds;
    pool_t *pool;                  /* NULL: updates on the handler's thread */
    _Atomic uint64_t apply_micros; /* the updates' time, summed (store_apply_seconds) */
    sjob_t **jobs;
    size_t n_jobs, cap_jobs;
    uint64_t param_bytes, slot_bytes, overhead_bytes;
    size_t n_vars, n_shards;
};

/* What a shard and a variable cost beyond their values and slots: the structures, the index and
 * the allocator's headers. They count against --max-memory-bytes, so that a million tiny shards
 * cannot grow the server past its limit 4 bytes at a time. */
#define SHARD_OVERHEAD (sizeof(shard_t) + sizeof(block_t) + 3 * sizeof(void *) + 64)
#define VAR_OVERHEAD   (sizeof(var_t) + 4 * sizeof(size_t) + 64)

/* Fills *err (when not NULL) with st, the message and the culprit, and returns st. */
status_t store_fail(store_err_t *err, status_t st, const char *culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* FNV-1a of s, continuing from h: the variable index's hash. */
uint64_t store_hash(uint64_t h, const char *s);

/* A writer-preferring rwlock, so that a stream of pulls cannot starve a create or a push. */
void store_rwlock_init(pthread_rwlock_t *l);

/* "[2, 3]" into buf. */
const char *store_shape_str(const int64_t *shape, size_t rank, char *buf, size_t len);
bool store_same_dims(const int64_t *a, const int64_t *b, size_t n);

/* A job or variable name: non-empty, at most STORE_MAX_NAME bytes, no control characters.
 * `what` names it in the message. */
status_t store_check_name(const char *name, const char *what, store_err_t *err);

/* Lookups, under the store lock: NULL (or NOT_FOUND naming the culprit) when absent. */
sjob_t *store_find_job(const store_t *s, const char *name, size_t *ret_pos);
var_t *store_find_var(const sjob_t *j, const char *name);
shard_t *store_find_shard(const var_t *v, int index);
status_t store_lookup_job(const store_t *s, const char *job, sjob_t **ret, store_err_t *err);
status_t store_lookup_shard(const sjob_t *j, const store_key_t *key, shard_t **ret,
                            store_err_t *err);

/* Frees a shard, a variable with its shards, a job with its variables. */
void store_shard_free(shard_t *sh);
void store_var_free(var_t *v);
void store_job_free(sjob_t *j);

#endif
