#include "rpc/health.h"

#include "rpc/client.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "rpc/server.h"
#include "base/clock.h"

/* Open Watch streams at most; more are refused with RESOURCE_EXHAUSTED. */
#define HEALTH_MAX_WATCHERS 1024

typedef Grpc__Health__V1__HealthCheckResponse__ServingStatus serving_status_t;

/* One open Watch stream. It stays in the list from the handler until the call is over. */
typedef struct watcher {
    struct watcher *prev, *next;
    health_t *h;
    rpc_ctx_t *ctx;
    bool known;    /* the service exists: it gets a message on every change */
    bool finished; /* rpc_ctx_stream_finish was called: ctx no longer ours to send on */
} watcher_t;

struct health {
    _Atomic bool serving;
    const char *const *services;
    pthread_mutex_t mu; /* guards the watchers and orders changes with their messages */
    watcher_t *watchers;
    size_t n_watchers;
};

static bool service_known(const health_t *h, const char *name)
{
    if (name == NULL || name[0] == '\0')
        return true;
    for (const char *const *s = h->services; s && *s; s++)
        if (strcmp(*s, name) == 0)
            return true;
    return false;
}

static status_t on_check(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Grpc__Health__V1__HealthCheckRequest *req = (const void *)msg;
    health_t *h = user;
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;

    if (!service_known(h, req->service))
        return rpc_ctx_fail(ctx, STATUS_NOT_FOUND, req->service, "unknown service \"%s\"",
                            req->service);
    resp.status = atomic_load(&h->serving)
                      ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                      : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    return rpc_ctx_respond(ctx, &resp.base, NULL, 0);
}

static serving_status_t status_of(bool serving)
{
    return serving ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                   : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

/* Sends one status on a watcher's stream; a client too slow to take even a few messages is
 * cut off. Call with h->mu held. */
static void watcher_send(watcher_t *w, serving_status_t status)
{
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    status_t rc;

    if (w->finished)
        return;
    resp.status = status;
    rc = rpc_ctx_stream_send(w->ctx, &resp.base, NULL, 0);
    if (rc == STATUS_OK)
        return;
    w->finished = true;
    if (rc == STATUS_CANCELLED) /* the call is over or the server is stopping: nothing to send */
        rpc_ctx_stream_finish(w->ctx, STATUS_OK, NULL);
    else
        rpc_ctx_stream_finish(w->ctx, rc, "the health watcher does not read its updates (%s)",
                              status_name(rc));
}

/* The Watch call is over: forget the watcher and finish its stream if nobody did. */
static void on_watch_done(void *arg)
{
    watcher_t *w = arg;
    health_t *h = w->h;

    pthread_mutex_lock(&h->mu);
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        h->watchers = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    h->n_watchers--;
    if (!w->finished) /* the call is over: this only lets go of it */
        rpc_ctx_stream_finish(w->ctx, STATUS_OK, NULL);
    pthread_mutex_unlock(&h->mu);
    free(w);
}

static status_t on_watch(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Grpc__Health__V1__HealthCheckRequest *req = (const void *)msg;
    health_t *h = user;
    watcher_t *w;

    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory for a health watch");
    w->h = h;
    w->ctx = ctx;
    w->known = service_known(h, req->service);
    pthread_mutex_lock(&h->mu);
    if (h->n_watchers >= HEALTH_MAX_WATCHERS) {
        pthread_mutex_unlock(&h->mu);
        free(w);
        return rpc_ctx_fail(ctx, STATUS_RESOURCE_EXHAUSTED, NULL,
                            "%d health watches are open already", HEALTH_MAX_WATCHERS);
    }
    rpc_ctx_defer(ctx);
    w->next = h->watchers;
    if (h->watchers != NULL)
        h->watchers->prev = w;
    h->watchers = w;
    h->n_watchers++;
    /* The current status at once; an unknown service is told so and the stream stays open,
     * in case the service appears (formats.md §4). */
    watcher_send(w, w->known
                        ? status_of(atomic_load(&h->serving))
                        : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN);
    pthread_mutex_unlock(&h->mu);
    /* Registered outside h->mu: when the call is over already, the callback runs right here. */
    rpc_ctx_on_done(ctx, on_watch_done, w);
    return STATUS_OK;
}

health_t *health_new(rpc_server_t *s, const char *const *services)
{
    health_t *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    h->services = services;
    pthread_mutex_init(&h->mu, NULL);
    rpc_server_handle(s, RPC_HEALTH_CHECK, on_check, h);
    rpc_server_handle(s, RPC_HEALTH_WATCH, on_watch, h);
    return h;
}

void health_free(health_t *h)
{
    if (h == NULL)
        return;
    /* The server is shut down by now, so every watch is over and forgotten. */
    if (h->n_watchers > 0)
        LOG_ERR(HEALTH, "health freed with %zu watches open", h->n_watchers);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

void health_set_serving(health_t *h, bool serving)
{
    pthread_mutex_lock(&h->mu);
    if (atomic_exchange(&h->serving, serving) != serving) {
        for (watcher_t *w = h->watchers; w != NULL; w = w->next)
            if (w->known)
                watcher_send(w, status_of(serving));
    }
    pthread_mutex_unlock(&h->mu);
    LOG_INFO(HEALTH, "health: %s", serving ? "SERVING" : "NOT_SERVING");
}

/* One Check call on a fresh channel (each has its own connection, so a retry reconnects at once
 * instead of waiting out a shared connection's back-off). */
static health_state_t check_once(const char *target, const char *service, int64_t timeout_ms,
                                 rpc_error_t *err)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    Grpc__Health__V1__HealthCheckResponse *resp = NULL;
    rpc_call_opts_t opts = {.timeout_ms = timeout_ms};
    rpc_channel_t *ch;
    status_msg_t msg;
    health_state_t state;

    memset(err, 0, sizeof(*err));
    if (rpc_channel_new(target, NULL, &ch, &msg) != STATUS_OK) {
        err->status = msg.status;
        memcpy(err->message, msg.text, sizeof(err->message));
        return HEALTH_UNREACHABLE;
    }
    req.service = (char *)(service ? service : "");
    if (rpc_health_check(ch, &req, &opts, &resp, NULL, err) != STATUS_OK) {
        rpc_channel_free(ch);
        return HEALTH_UNREACHABLE;
    }
    switch (resp->status) {
    case GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING:
        state = HEALTH_SERVING;
        break;
    case GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING:
        state = HEALTH_NOT_SERVING;
        break;
    default:
        state = HEALTH_UNKNOWN;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    rpc_channel_free(ch);
    return state;
}

health_state_t health_check(const char *target, const char *service, int64_t timeout_ms,
                            rpc_error_t *err)
{
    /* A refused or reset connection fails at once. Within the deadline it is retried: a task
     * that has just started (or a loaded host that dropped the first SYN) is not unreachable. */
    const int64_t retry_pause_ms = 100;
    int64_t deadline = clock_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - clock_now_ms();
        health_state_t state = check_once(target, service, left > 1 ? left : 1, err);
        if (state != HEALTH_UNREACHABLE || err->status != STATUS_UNAVAILABLE ||
            deadline - clock_now_ms() < 2 * retry_pause_ms)
            return state;
        nanosleep(&(struct timespec){.tv_nsec = retry_pause_ms * 1000000L}, NULL);
    }
}

const char *health_state_name(health_state_t s)
{
    switch (s) {
    case HEALTH_SERVING:
        return "SERVING";
    case HEALTH_NOT_SERVING:
        return "NOT_SERVING";
    case HEALTH_UNREACHABLE:
        return "UNREACHABLE";
    default:
        return "UNKNOWN";
    }
}

typedef struct probe {
    const char *target;
    int64_t timeout_ms;
    health_state_t state;
    rpc_error_t err;
    double seconds;
    pthread_t tid;
    bool started;
} probe_t;

static void *probe_main(void *arg)
{
    probe_t *p = arg;
    double t0 = clock_now_s();
    p->state = health_check(p->target, "", p->timeout_ms, &p->err);
    p->seconds = clock_now_s() - t0;
    return NULL;
}

void health_check_many(const char *const *targets, size_t n, int64_t timeout_ms,
                       health_state_t *ret_states, rpc_error_t *ret_errs, double *ret_seconds)
{
    enum { BATCH = 64 };
    probe_t probes[BATCH];

    for (size_t base = 0; base < n; base += BATCH) {
        size_t m = n - base < BATCH ? n - base : BATCH;
        for (size_t i = 0; i < m; i++) {
            probe_t *p = &probes[i];
            memset(p, 0, sizeof(*p));
            p->target = targets[base + i];
            p->timeout_ms = timeout_ms;
            p->state = HEALTH_UNREACHABLE;
            if (p->target == NULL) {
                snprintf(p->err.message, sizeof(p->err.message), "no address");
                continue;
            }
            p->started = pthread_create(&p->tid, NULL, probe_main, p) == 0;
            if (!p->started) /* no thread to spare: check inline */
                probe_main(p);
        }
        for (size_t i = 0; i < m; i++) {
            probe_t *p = &probes[i];
            if (p->started)
                pthread_join(p->tid, NULL);
            ret_states[base + i] = p->state;
            if (ret_errs != NULL)
                ret_errs[base + i] = p->err;
            if (ret_seconds != NULL)
                ret_seconds[base + i] = p->seconds;
        }
    }
}
