/* The workers' watchdog of a running job: health checks of every live worker, every second; a
 * worker that has answered none for the chief's --worker-timeout (stopped, hung, cut off by the
 * network: its RPCs neither fail nor finish) is marked hung, which cancels its closure in flight
 * (call_closure passes its flag as the call's cancel) and so hands its steps to the others.
 * A killed worker needs no watchdog: its calls fail at once. Lost workers are checked too: one
 * that answers again (restarted, woken, reconnected) is handed to the rejoin callback, tried
 * again every REJOIN_RETRY_S while that fails; workers that announced themselves are taken into
 * the cluster (chief_adopt_workers) and, lost to the job so far, handed to it the same way. Its
 * n slots are the cluster's room for workers (cap_workers). It also watches the job's step: one
 * that does not move for the chief's --stall-timeout is reported (a `stalled` event naming what it
 * waits on). */
#ifndef TESSERA_CHIEF_WATCHDOG_H
#define TESSERA_CHIEF_WATCHDOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "internal.h"

typedef struct watchdog {
    coordinator_t *c;
    const bool *alive;                   /* the dispatch's, read under c->mu */
    _Atomic bool *hung;                  /* per worker */
    double *last_ok;                     /* clock_now_s() of its last answered check */
    double *next_try;                    /* of a rejoin */
    bool (*rejoin)(void *arg, size_t w); /* may be NULL; called without c->mu */
    /* A job that has not moved for stall_ms (0: never looked at): stalled(arg, seconds) once
     * per stall, called without c->mu. step is read under it. */
    const int64_t *step;
    int64_t stall_ms;
    void (*stalled)(void *arg, double seconds);
    int64_t last_step;
    double moved_at;
    bool reported;
    void *arg;
    size_t n;
    int64_t timeout_ms;
    _Atomic bool stop;
    pthread_t tid;
    bool started;
} watchdog_t;

#define REJOIN_RETRY_S 10

/* Allocates the flags (all clear) and, with a timeout above 0, starts the thread. */
status_t watchdog_start(watchdog_t *w, coordinator_t *c, const bool *alive, size_t n,
                        int64_t timeout_ms, bool (*rejoin)(void *arg, size_t w), void *arg,
                        status_msg_t *err);
/* Watches the job's step (read under c->mu) for stalls; call before watchdog_start. */
void watchdog_watch_step(watchdog_t *w, const int64_t *step, int64_t stall_ms,
                         void (*stalled)(void *arg, double seconds));
/* Worker i is about to be alive again (the rejoin callback, with c->mu held): clears its flag. */
void watchdog_revive(watchdog_t *w, size_t i);
/* Stops the thread and frees the flags; safe on a zeroed watchdog. */
void watchdog_stop(watchdog_t *w);

#endif
