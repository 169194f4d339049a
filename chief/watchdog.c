/* The workers' watchdog (watchdog.h). */
#define _POSIX_C_SOURCE 200809L
#include "watchdog.h"

#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "chief.h"
#include "rpc/health.h"

#define WATCHDOG_PERIOD_MS 1000

static void sleep_unless_stopped(watchdog_t *w, int64_t ms)
{
    for (int64_t slept = 0; slept < ms && !atomic_load(&w->stop); slept += 50) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Reports a job whose step has not moved for stall_ms, once until it moves again. */
static void check_stall(watchdog_t *w)
{
    double now = clock_now_s();
    int64_t step;

    if (w->step == NULL || w->stall_ms <= 0 || w->stalled == NULL)
        return;
    pthread_mutex_lock(&w->c->mu);
    step = *w->step;
    pthread_mutex_unlock(&w->c->mu);
    if (step != w->last_step || w->moved_at == 0) {
        w->last_step = step;
        w->moved_at = now;
        w->reported = false;
    } else if (!w->reported && (now - w->moved_at) * 1000 >= (double)w->stall_ms) {
        w->reported = true;
        w->stalled(w->arg, now - w->moved_at);
    }
}

static void *watchdog_main(void *arg)
{
    watchdog_t *w = arg;
    const char **targets = calloc(w->n + 1, sizeof(*targets));
    health_state_t *states = calloc(w->n + 1, sizeof(*states));
    bool *dead = calloc(w->n + 1, sizeof(*dead));
    /* a check may take as long as the chief's health timeout, and never longer than the limit */
    int64_t check_ms = w->c->opts->health_timeout_ms > 0 ? w->c->opts->health_timeout_ms : 1000;

    if (check_ms > w->timeout_ms)
        check_ms = w->timeout_ms;
    while (targets != NULL && states != NULL && dead != NULL && !atomic_load(&w->stop)) {
        double now = clock_now_s();
        pthread_mutex_lock(&w->c->mu);
        /* workers that announced themselves join the cluster, and (as lost ones) the job */
        if (w->rejoin != NULL)
            chief_adopt_workers(w->c);
        for (size_t i = 0; i < w->n; i++) {
            /* the live ones, and the lost ones due for a try */
            dead[i] = !w->alive[i] || atomic_load(&w->hung[i]);
            targets[i] =
                i < w->c->n_workers && (!dead[i] || (w->rejoin != NULL && now >= w->next_try[i]))
                    ? rpc_channel_target(w->c->workers[i])
                    : NULL;
        }
        pthread_mutex_unlock(&w->c->mu);
        health_check_many(targets, w->n, check_ms, states, NULL, NULL);
        now = clock_now_s();
        for (size_t i = 0; i < w->n && !atomic_load(&w->stop); i++) {
            if (targets[i] == NULL)
                continue;
            if (dead[i]) {
                /* a hung worker is still alive to the dispatch until its call comes back */
                bool lost;
                pthread_mutex_lock(&w->c->mu);
                lost = !w->alive[i];
                pthread_mutex_unlock(&w->c->mu);
                if (lost && states[i] == HEALTH_SERVING && !w->rejoin(w->arg, i))
                    w->next_try[i] = clock_now_s() + REJOIN_RETRY_S;
            } else if (states[i] == HEALTH_SERVING) {
                struct timespec wall;
                w->last_ok[i] = now;
                clock_gettime(CLOCK_REALTIME, &wall);
                if (w->c->m_worker_seen != NULL)
                    metric_set(w->c->m_worker_seen[i], (double)wall.tv_sec + wall.tv_nsec / 1e9);
            } else if ((now - w->last_ok[i]) * 1000 >= (double)w->timeout_ms) {
                LOG_WARNING(CHIEF, "worker %zu (%s) answered no health check for %.1f s", i,
                            targets[i], now - w->last_ok[i]);
                atomic_store(&w->hung[i], true);
            }
        }
        check_stall(w);
        sleep_unless_stopped(w, WATCHDOG_PERIOD_MS);
    }
    free(dead);
    free(targets);
    free(states);
    return NULL;
}

status_t watchdog_start(watchdog_t *w, coordinator_t *c, const bool *alive, size_t n,
                        int64_t timeout_ms, bool (*rejoin)(void *arg, size_t w), void *arg,
                        status_msg_t *err)
{
    sigset_t all, old;
    double now = clock_now_s();

    *w = (watchdog_t){.c = c,
                      .alive = alive,
                      .n = n,
                      .timeout_ms = timeout_ms,
                      .rejoin = rejoin,
                      .arg = arg,
                      .step = w->step, /* watchdog_watch_step's, which comes first */
                      .stall_ms = w->stall_ms,
                      .stalled = w->stalled};
    w->hung = calloc(n + 1, sizeof(*w->hung));
    w->last_ok = calloc(n + 1, sizeof(*w->last_ok));
    w->next_try = calloc(n + 1, sizeof(*w->next_try));
    if (w->hung == NULL || w->last_ok == NULL || w->next_try == NULL) {
        watchdog_stop(w);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        atomic_init(&w->hung[i], false);
        w->last_ok[i] = now;
    }
    if (timeout_ms <= 0)
        return STATUS_OK;
    sigfillset(&all); /* signals belong to the main thread */
    pthread_sigmask(SIG_BLOCK, &all, &old);
    w->started = pthread_create(&w->tid, NULL, watchdog_main, w) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!w->started)
        LOG_WARNING(CHIEF, "no thread for the workers' watchdog: a hung worker is noticed only "
                           "when its closure's deadline passes");
    return STATUS_OK;
}

void watchdog_stop(watchdog_t *w)
{
    if (w->started) {
        atomic_store(&w->stop, true);
        pthread_join(w->tid, NULL);
        w->started = false;
    }
    free((void *)w->hung);
    free(w->last_ok);
    free(w->next_try);
    w->hung = NULL;
    w->last_ok = NULL;
    w->next_try = NULL;
}

void watchdog_watch_step(watchdog_t *w, const int64_t *step, int64_t stall_ms,
                         void (*stalled)(void *arg, double seconds))
{
    w->step = step;
    w->stall_ms = stall_ms;
    w->stalled = stalled;
}

void watchdog_revive(watchdog_t *w, size_t i)
{
    w->last_ok[i] = clock_now_s();
    atomic_store(&w->hung[i], false);
}
