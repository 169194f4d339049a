/* WatchJob: a job's progress and events streamed to the CLI. The watch thread sleeps until a job
 * changes (chief_job_changed: an event, a closure's result) or a watcher's call ends, then sends
 * each watcher what changed, at most five times a second. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "base/clock.h"
#include "internal.h"

#define MIN_INTERVAL_MS 200 /* between two rounds of updates */

/* A WatchJob stream. Lives until both the stream is finished and its call is over. */
struct watcher {
    struct watcher *next;
    rpc_ctx_t *ctx;
    coordinator_t *c;
    chief_job_t *job; /* held (job->holds) while the watcher lives */
    bool finished;    /* rpc_ctx_stream_finish called */
    bool over;        /* the call is over (done callback ran) */
    int64_t sent_step;
    size_t sent_events;
    Tessera__V1__JobState sent_state;
};

/* Sends what changed since the last update; finishes the stream when the job has ended. Call
 * with c->mu held. */
static void watcher_update(watcher_t *w)
{
    chief_job_t *j = w->job;
    Tessera__V1__WatchJobUpdate up = TESSERA__V1__WATCH_JOB_UPDATE__INIT;
    Tessera__V1__JobInfo info;
    Tessera__V1__JobProgress pr;
    Tessera__V1__JobEvent ev[CHIEF_MAX_EVENTS], *evp[CHIEF_MAX_EVENTS];
    size_t first = w->sent_events, n = 0;
    bool ended = chief_job_ended(j);

    if (w->finished)
        return;
    if (j->progress.step == w->sent_step && j->n_events == w->sent_events &&
        j->state == w->sent_state && !ended)
        return;
    if (j->n_events > CHIEF_MAX_EVENTS && first < j->n_events - CHIEF_MAX_EVENTS)
        first = j->n_events - CHIEF_MAX_EVENTS; /* older events are gone */
    for (size_t e = first; e < j->n_events; e++, n++) {
        size_t slot = e % CHIEF_MAX_EVENTS;
        tessera__v1__job_event__init(&ev[n]);
        ev[n].wall_time = j->event_times[slot];
        ev[n].message = j->events[slot] ? j->events[slot] : "";
        evp[n] = &ev[n];
    }
    chief_job_info(j, &info, &pr);
    up.job = &info;
    up.n_events = n;
    up.events = evp;
    if (rpc_ctx_stream_send(w->ctx, &up.base, NULL, 0) == STATUS_OK) {
        w->sent_step = j->progress.step;
        w->sent_events = j->n_events;
        w->sent_state = j->state;
    }
    if (ended) {
        rpc_ctx_stream_finish(w->ctx, STATUS_OK, NULL);
        w->finished = true;
    }
}

static void watcher_done_cb(void *arg)
{
    watcher_t *w = arg;
    coordinator_t *c = w->c;
    pthread_mutex_lock(&c->mu);
    if (!w->finished) { /* the client went away: let go of the stream */
        rpc_ctx_stream_finish(w->ctx, STATUS_CANCELLED, "the watcher went away");
        w->finished = true;
    }
    w->over = true;
    chief_job_changed(c); /* the watch thread frees it */
    pthread_mutex_unlock(&c->mu);
}

static void update_all(coordinator_t *c)
{
    for (watcher_t **p = &c->watchers; *p != NULL;) {
        watcher_t *w = *p;
        watcher_update(w);
        if (w->finished && w->over) {
            *p = w->next;
            w->job->holds--;
            c->n_watchers--;
            free(w);
        } else {
            p = &w->next;
        }
    }
}

/* Waits on the watch condition until `deadline_ms` (monotonic) passes or the chief stops. */
static void wait_until(coordinator_t *c, int64_t deadline_ms)
{
    struct timespec ts;
    int64_t left = deadline_ms - clock_now_ms();

    if (left <= 0)
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += left / 1000;
    ts.tv_nsec += (left % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&c->watch_cv, &c->mu, &ts);
}

static void *watch_main(void *arg)
{
    coordinator_t *c = arg;
    sigset_t all;
    uint64_t seen = 0;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        int64_t next;
        while (c->changes == seen && !c->stopping)
            pthread_cond_wait(&c->watch_cv, &c->mu);
        if (c->stopping)
            break;
        seen = c->changes;
        update_all(c);
        /* Progress moves with every closure: gather what comes in the next 200 ms. */
        next = clock_now_ms() + MIN_INTERVAL_MS;
        while (!c->stopping && clock_now_ms() < next)
            wait_until(c, next);
    }
    for (watcher_t *w = c->watchers; w != NULL; w = w->next)
        if (!w->finished) {
            rpc_ctx_stream_finish(w->ctx, STATUS_UNAVAILABLE, "the chief is stopping");
            w->finished = true;
        }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static status_t on_watch(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__WatchJobRequest *req = (const void *)msg;
    coordinator_t *c = user;
    watcher_t *w = calloc(1, sizeof(*w));
    chief_job_t *j;

    if (w == NULL)
        return rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
    pthread_mutex_lock(&c->mu);
    if (c->n_watchers >= (size_t)c->opts->max_watch_streams) {
        size_t n = c->n_watchers;
        pthread_mutex_unlock(&c->mu);
        free(w);
        return rpc_ctx_fail(ctx, STATUS_RESOURCE_EXHAUSTED, NULL,
                            "%zu WatchJob streams are open on this chief (--max-watch-streams "
                            "%lld): close some, or poll with tessera status",
                            n, (long long)c->opts->max_watch_streams);
    }
    j = chief_find_job(c, req->id);
    if (j == NULL || c->stopping) {
        pthread_mutex_unlock(&c->mu);
        free(w);
        if (j == NULL)
            return rpc_ctx_fail(ctx, STATUS_NOT_FOUND, req->id, "no job \"%s\"", req->id);
        return rpc_ctx_fail(ctx, STATUS_UNAVAILABLE, NULL, "the chief is stopping");
    }
    w->ctx = ctx;
    w->c = c;
    w->job = j;
    j->holds++;
    w->sent_step = -1;
    rpc_ctx_defer(ctx);
    w->next = c->watchers;
    c->watchers = w;
    c->n_watchers++;
    watcher_update(w);
    pthread_mutex_unlock(&c->mu);
    /* Registered last: the callback may run at once if the client already left. */
    rpc_ctx_on_done(ctx, watcher_done_cb, w);
    return STATUS_OK;
}

status_t chief_watch_start(coordinator_t *c, rpc_server_t *s, status_msg_t *err)
{
    if (pthread_create(&c->watch_thread, NULL, watch_main, c) != 0)
        return status_fail(err, STATUS_SYSTEM, "cannot start the watch thread");
    c->watch_started = true;
    rpc_server_handle(s, RPC_COORD_WATCH_JOB, on_watch, c);
    return STATUS_OK;
}

void chief_watch_stop(coordinator_t *c)
{
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->watch_cv);
    pthread_mutex_unlock(&c->mu);
    if (c->watch_started)
        pthread_join(c->watch_thread, NULL);
    c->watch_started = false;
}

void chief_watch_free(coordinator_t *c)
{
    /* The RPC server is gone: no done callback can run any more. */
    while (c->watchers != NULL) {
        watcher_t *w = c->watchers;
        c->watchers = w->next;
        w->job->holds--;
        c->n_watchers--;
        free(w);
    }
}
