/* A fixed set of threads that run the parts of a job beside the thread that asks for it: the
 * parameter server's optimizer updates of large shards, spread over its cores.
 *
 * pool_run() hands n parts to the pool, runs parts itself until none is left, and returns when
 * every part has finished. Several threads may call it at once: their jobs are served in the
 * order they came, and no caller waits on a part of another's job that is still to start. */
#ifndef TESSERA_POOL_H
#define TESSERA_POOL_H

#include <stddef.h>

#include "base/status.h"

typedef struct pool pool_t;

/* Runs part `part` of a job; parts of one job run on several threads at once. */
typedef void (*pool_fn)(void *arg, size_t part);

/* A pool of `threads` threads (0: no threads, every part runs on the caller). */
status_t pool_new(unsigned threads, pool_t **ret, status_msg_t *err);

/* Stops and joins the threads. No pool_run may be in progress. NULL is ignored. */
void pool_free(pool_t *p);

/* The pool's threads (0 for NULL). */
unsigned pool_threads(const pool_t *p);

/* Runs fn(arg, 0) .. fn(arg, n - 1), on the pool's threads and the caller's, and returns once
 * every one has returned. A NULL pool runs them all on the caller. */
void pool_run(pool_t *p, size_t n, pool_fn fn, void *arg);

#endif
