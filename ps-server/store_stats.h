/* What the variable store reports: per shard (sizes, versions, traffic) for the PS's metrics and
 * its GetStats RPC, and totals over the whole store. */
#ifndef TESSERA_PS_STORE_STATS_H
#define TESSERA_PS_STORE_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* What store_stats reports per shard; strings and shape are valid during the callback only.
 * bytes_pulled counts the value bytes sent, bytes_pushed the gradient bytes received (values
 * and row indices), so sparse traffic counts only the rows it moved. */
typedef struct store_shard_stats {
    const char *job, *variable;
    int shard;
    size_t rank;
    const int64_t *shape;
    uint64_t version, value_bytes, slot_bytes;
    uint64_t pulls, pushes, bytes_pulled, bytes_pushed;
} store_shard_stats_t;

typedef struct store_totals {
    uint64_t param_bytes, slot_bytes;
    uint64_t overhead_bytes; /* bookkeeping per shard and variable, counted against max_bytes */
    size_t jobs, variables, shards;
} store_totals_t;

/* Calls cb for each shard of `job` (NULL or "" = every job) in creation order, under the store
 * read lock: cb must not call the store. NOT_FOUND for an unknown job. */
typedef void (*store_stats_cb)(const store_shard_stats_t *st, void *arg);
status_t store_stats(store_t *s, const char *job, store_stats_cb cb, void *arg, store_err_t *err);

/* Sums over the whole store. */
void store_totals(store_t *s, store_totals_t *ret);

#endif
