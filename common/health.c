#include "health.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

struct health {
    _Atomic bool serving;
    const char *const *services;
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

health_t *health_new(rpc_server_t *s, const char *const *services)
{
    health_t *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    h->services = services;
    rpc_server_handle(s, RPC_HEALTH_CHECK, on_check, h);
    return h;
}

void health_free(health_t *h)
{
    free(h);
}

void health_set_serving(health_t *h, bool serving)
{
    atomic_store(&h->serving, serving);
    LOG_INFO(HEALTH, "health: %s", serving ? "SERVING" : "NOT_SERVING");
}

health_state_t health_check(const char *target, const char *service, int64_t timeout_ms,
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
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    p->state = health_check(p->target, "", p->timeout_ms, &p->err);
    clock_gettime(CLOCK_MONOTONIC, &b);
    p->seconds = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
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
