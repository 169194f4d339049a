/* The closure queue of an epoch, like TensorFlow's ClusterCoordinator: one dispatcher thread per
 * worker takes closures of steps_per_execution steps from the epoch's remaining steps and runs
 * them on its worker. A worker that is gone (UNAVAILABLE or a timeout) is marked dead and its
 * closure goes back on the queue for the others; the epoch fails only when every worker is gone,
 * or on any other error. With a staleness bound, a worker more than max_staleness steps ahead of
 * the slowest live one waits. The caller's mutex guards the state; its condition variable is
 * broadcast at every hand-off. */
#ifndef TESSERA_CHIEF_DISPATCH_H
#define TESSERA_CHIEF_DISPATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "tessera/v1/coordinator.pb-c.h"

typedef struct dispatch_closure {
    uint64_t id;
    int steps;
    int64_t global_step, epoch;
} dispatch_closure_t;

typedef struct dispatch_result {
    int steps; /* fewer than asked: the worker ran out of data */
    int64_t examples;
    double loss_sum, correct;
} dispatch_result_t;

/* Runs a training closure on `worker`, without the mutex held. */
typedef status_t (*dispatch_call_fn)(void *arg, size_t worker, const dispatch_closure_t *cl,
                                     dispatch_result_t *ret, status_msg_t *err);
/* A worker is gone (called with the mutex held). */
typedef void (*dispatch_lost_fn)(void *arg, size_t worker, const char *why);

typedef struct dispatch {
    /* set before dispatch_epoch */
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    int steps_per_closure;
    int64_t max_staleness;              /* 0: none */
    _Atomic bool *cancel;               /* the job is being cancelled */
    const bool *stopping;               /* read with mu held */
    Tessera__V1__JobProgress *progress; /* step, epoch read; step, loss, accuracy, rate written */
    dispatch_call_fn call;
    dispatch_lost_fn lost;
    void (*changed)(void *arg); /* progress moved (mutex held); may be NULL */
    void *arg;
    /* state */
    size_t n_workers;
    bool *alive;
    int64_t *worker_steps; /* steps each worker ran, for the staleness bound */
    uint64_t next_closure;
    int64_t steps_left; /* of this epoch, not yet handed out */
    int in_flight;
    bool failed;
    status_msg_t err;
    double epoch_loss, epoch_correct, epoch_t0;
    int64_t epoch_examples;
} dispatch_t;

/* Every worker alive. */
status_t dispatch_init(dispatch_t *d, size_t n_workers, status_msg_t *err);
void dispatch_done(dispatch_t *d);

/* Hands out `steps` steps over the live workers and waits for them. STATUS_CANCELLED when the
 * job is cancelled or the chief stops. */
status_t dispatch_epoch(dispatch_t *d, int64_t steps, status_msg_t *err);

/* Live workers, in index order: the first, or SIZE_MAX when none is left. */
size_t dispatch_first_alive(const dispatch_t *d);

#endif
