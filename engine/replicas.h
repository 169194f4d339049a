/* Local replicas of a model for the synchronous strategies on one host (mirrored,
 * central_storage): replica 0 is the trainer's own model, driven by the calling thread; the
 * others are copies on threads of their own. A step splits the global batch into contiguous
 * slices, one per replica (the same examples, in the same order, as one device would take in
 * one batch), runs forward and backward on every replica at once (each replica's gradients of
 * its slice's loss divided by the whole batch's examples), and sums the gradients into replica
 * 0's: replica 0 then holds the gradient of the mean loss over the whole batch, as one device
 * would have computed it, and the caller applies the optimizer there once. Each replica takes
 * replica 0's values at the start of every step, so every replica steps from the same weights
 * (restored, loaded or updated in between). */
#ifndef TESSERA_REPLICAS_H
#define TESSERA_REPLICAS_H

#include <stdbool.h>

#include "base/status.h"
#include "data.h"
#include "job/job.h"
#include "model.h"

typedef struct replicas replicas_t;

/* n replicas (n >= 2) of `first`, each for batches of at most per_replica examples, their
 * buffers at most max_bytes together. */
status_t replicas_new(const job_t *job, model_t *first, int n, int per_replica, uint64_t max_bytes,
                      replicas_t **ret, status_msg_t *err);
void replicas_free(replicas_t *r); /* NULL-safe; stops the threads */

int replicas_count(const replicas_t *r);
size_t replicas_bytes(const replicas_t *r); /* of the copies, replica 0 not counted */

/* One step of the global batch b (at most n * per_replica examples). The statistics are summed
 * over the replicas; an error is the first replica's that failed, by replica order. The sum of
 * the gradients is made by all the replicas at once, each summing its part of every tensor. */
status_t replicas_step(replicas_t *r, const data_batch_t *b, model_stats_t *ret_stats,
                       status_msg_t *err);

/* After a step, param's sparse gradient (an Embedding table's): one row per id any replica
 * touched, the replicas' rows of it summed; the caller may change them in place (clipping).
 * false for a dense param, whose sum is in replica 0's gradient. */
bool replicas_rows(const replicas_t *r, size_t param, const int64_t **ret_index, float **ret_grad,
                   size_t *ret_n);

/* Runs fn(arg, q, n) on every replica's thread (q = 0 on the caller's) and waits for all: work
 * split n ways between the steps, such as the optimizer's update of replica 0's variables. */
typedef void (*replicas_fn)(void *arg, int q, int n);
/* Replica q's part [*ret_lo, *ret_hi) of len elements split n ways (how such work divides). */
void replicas_part(int q, int n, size_t len, size_t *ret_lo, size_t *ret_hi);
void replicas_parallel(replicas_t *r, replicas_fn fn, void *arg);

#endif
