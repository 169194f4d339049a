/* A worker's part in a multi_worker_mirrored job: its trainer reads the whole training split in
 * global batches and steps on its own slice of each (engine/trainer.h); the gradients are summed
 * over the workers by the ring all-reduce (ring.h), packed into one buffer, and every worker
 * applies the same sum with its own copy of the optimizer, so the workers' variables stay equal
 * without a parameter server. The first ConfigureJob call makes the ring's listener (its port
 * goes back to the chief), the second connects the ring. */
#ifndef TESSERA_WORKER_SYNC_H
#define TESSERA_WORKER_SYNC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "trainer.h"

typedef struct sync sync_t;

/* Worker rank of size, over trainer t (made with slice_index rank and slice_count size, and its
 * optimizer); listens for the previous rank on every interface, port *ret_port. The gradients
 * are all-reduced in buckets of at least bytes_per_pack bytes (0: automatic), each while
 * backward goes on through the layers before it, unless the job is accumulating gradients
 * (accumulate_steps: the window's mean goes after backward). An Embedding is refused (its
 * gradients are rows, not summed yet). */
status_t sync_new(trainer_t *t, int rank, int size, int64_t bytes_per_pack, bool accumulating,
                  sync_t **ret, int *ret_port, status_msg_t *err);

/* How many buckets a step's gradients are all-reduced in. */
size_t sync_buckets(const sync_t *s);

typedef struct sync_counts {
    uint64_t allreduces;      /* all-reduce calls of gradients */
    uint64_t during_backward; /* of them, started while the step's backward was still running */
} sync_counts_t;

/* The counts since the last call (for the worker's /metrics). */
void sync_take_counts(sync_t *s, sync_counts_t *ret);
void sync_free(sync_t *s); /* NULL-safe */

/* Connects the ring as its rank `rank`: ring[i] is where its rank i listens; token is the
 * job's. A ring of fewer than the job's workers (some were lost) shares their slices of each
 * global batch among the survivors. */
status_t sync_connect(sync_t *s, char *const *ring, size_t n, int rank, uint64_t token,
                      int timeout_ms, status_msg_t *err);

/* Every worker of the ring takes the values, optimizer slots and update count of ring rank
 * `root` (a worker that came back takes the others' state; a resumed job, the checkpoint's). */
status_t sync_broadcast(sync_t *s, int root, status_msg_t *err);

/* Back to where the last closure started (a closure the ring failed in may have applied some
 * of its steps here and not on the others). */
status_t sync_rollback(sync_t *s, status_msg_t *err);

/* Runs `steps` synchronous steps (fewer when *cancelled is set, then STATUS_CANCELLED): each
 * reads the next global batch, steps on this worker's slice, all-reduces the gradients and
 * applies them. *ret sums this worker's slices; *ret_steps counts the steps done. */
status_t sync_steps(sync_t *s, int steps, _Atomic bool *cancelled, model_stats_t *ret,
                    int *ret_steps, status_msg_t *err);

/* The worker (rank) the last failed step's all-reduce waited on, or -1. */
int sync_failed_peer(const sync_t *s);

#endif
