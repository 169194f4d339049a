/* The server half of the RPC runtime: handler threads with one completion queue each, method
 * dispatch from the method table, replies with zero-copy payloads, error details, shutdown. */
#define _POSIX_C_SOURCE 200809L
#include "rpc/server_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc_security.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "base/log.h"
#include "job/job.h"
#include "rpc/security.h"
#include "tessera/v1/common.pb-c.h"
#include "base/clock.h"

#define ACCEPTS_PER_THREAD 8
#define RECV_BUF_KEEP_MAX  (128u << 20)
#define DEFERRED_WAIT_MS   1000

/* ---- the method table --------------------------------------------------------------------- */

static const rpc_method_t methods[] = {
#define RPC_ROW_(id, stub, svc, name, kind, callers, RqT, rqd, RsT, rsd)                           \
    {RPC_##id, "/" svc "/" name, svc, name, RPC_KIND_##kind, RPC_CALLERS_##callers, &rqd, &rsd},
    RPC_METHOD_LIST(RPC_ROW_)
#undef RPC_ROW_
};

const rpc_method_t *rpc_method_get(rpc_method_id_t id)
{
    return (int)id >= 0 && id < RPC_METHOD_COUNT_ ? &methods[id] : NULL;
}

const rpc_method_t *rpc_method_find(const char *path, size_t len)
{
    for (size_t i = 0; i < RPC_METHOD_COUNT_; i++)
        if (strlen(methods[i].path) == len && memcmp(methods[i].path, path, len) == 0)
            return &methods[i];
    return NULL;
}

int rpc_service_known(const char *service)
{
    for (size_t i = 0; i < RPC_METHOD_COUNT_; i++)
        if (strcmp(methods[i].service, service) == 0)
            return 1;
    return 0;
}

/* ---- time helpers ------------------------------------------------------------------------- */

gpr_timespec rpc_deadline_ms(int64_t ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* ---- accepting ---------------------------------------------------------------------------- */

static void post_accept(server_thread_t *t)
{
    rpc_server_t *s = t->server;
    rpc_ctx_t *c;

    if (atomic_load(&s->shutting_down))
        return;
    c = server_ctx_new(s, t);
    if (c == NULL) {
        LOG_ERR(RPC, "out of memory accepting a call");
        return;
    }
    if (grpc_server_request_call(s->server, &c->call, &c->details, &c->md, t->cq, t->cq,
                                 &c->t_accept) != GRPC_CALL_OK) {
        server_ctx_free(c);
    }
}

/* ---- dispatch ----------------------------------------------------------------------------- */

/* Whether the caller may call c's method under mutual TLS; if not, records the error to send:
 * UNAUTHENTICATED for a call without TLS (a plaintext health port), PERMISSION_DENIED naming
 * the method, the caller and the roles that may. */
static bool authorized(rpc_ctx_t *c)
{
    const rpc_method_t *m = c->method;
    unsigned roles;
    char who[300], may[64];

    if (m->callers & RPC_ROLE_NONE_) /* health: anyone, TLS or not */
        return true;
    if (!rpc_security_peer(c->call, &roles, who, sizeof(who))) {
        rpc_ctx_fail(c, STATUS_UNAUTHENTICATED, m->path,
                     "%s needs mutual TLS: this plaintext port answers only %s", m->path,
                     RPC_SVC_HEALTH);
        return false;
    }
    /* read-only methods: any certificate of the cluster's CA, with a role or not */
    if (m->callers == RPC_CALLERS_PEERS || (roles & m->callers))
        return true;
    rpc_ctx_fail(c, STATUS_PERMISSION_DENIED, m->path, "%s may not call %s (allowed: %s)", who,
                 m->path, rpc_roles_describe(m->callers, may, sizeof(may)));
    return false;
}

static void on_accept(rpc_ctx_t *c, bool ok)
{
    rpc_server_t *s = c->server;
    const rpc_method_t *m;
    grpc_op op;

    post_accept(c->thread);
    if (!ok) { /* shutting down: the accept was cancelled */
        server_ctx_unref(c);
        return;
    }
    c->started = clock_now_s();
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    server_start_batch(c, &op, 1, &c->t_close);

    m = rpc_method_find((const char *)GRPC_SLICE_START_PTR(c->details.method),
                        GRPC_SLICE_LENGTH(c->details.method));
    if (m == NULL || m->kind == RPC_KIND_BIDI_STREAM || s->handlers[m->id].cb == NULL) {
        char path[256];
        size_t n = GRPC_SLICE_LENGTH(c->details.method);
        if (n >= sizeof(path))
            n = sizeof(path) - 1;
        memcpy(path, GRPC_SLICE_START_PTR(c->details.method), n);
        path[n] = '\0';
        c->method = m;
        atomic_store(&c->replied, true);
        rpc_ctx_fail(c, STATUS_UNIMPLEMENTED, path, "method %s is not served by this %s task", path,
                     s->task_type == TESSERA__V1__TASK_TYPE__TASK_TYPE_PS       ? "ps"
                     : s->task_type == TESSERA__V1__TASK_TYPE__TASK_TYPE_WORKER ? "worker"
                     : s->task_type == TESSERA__V1__TASK_TYPE__TASK_TYPE_CHIEF  ? "chief"
                                                                                : "");
        server_send_error(c);
        server_ctx_unref(c);
        return;
    }
    c->method = m;
    if (rpc_security_enabled() && !authorized(c)) {
        atomic_fetch_add(&s->counters[m->id].denied, 1);
        atomic_store(&c->replied, true);
        server_send_error(c);
        server_ctx_unref(c);
        return;
    }
    if (!server_peer_enter(c)) {
        atomic_store(&c->replied, true);
        server_send_error(c);
        server_ctx_unref(c);
        return;
    }
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_bb;
    server_start_batch(c, &op, 1, &c->t_recv);
    server_ctx_unref(c);
}

/* The largest request a method takes: control calls are small, whatever the message limit;
 * job submissions carry their files; data calls may use the whole --max-message-bytes. */
static size_t request_limit(const rpc_server_t *s, rpc_method_id_t id)
{
    switch (id) {
    case RPC_HEALTH_CHECK:
    case RPC_HEALTH_WATCH:
        return 4u << 10;
    case RPC_COORD_GET_JOB:
    case RPC_COORD_LIST_JOBS:
    case RPC_COORD_CANCEL_JOB:
    case RPC_COORD_WATCH_JOB:
    case RPC_COORD_GET_CLUSTER:
    case RPC_COORD_CHECKPOINT:
    case RPC_COORD_EXPORT:
    case RPC_COORD_REGISTER_WORKER:
    case RPC_WORKER_CANCEL:
    case RPC_PS_STATS:
    case RPC_PS_DROP_JOB:
    case RPC_PS_SAVE:
    case RPC_PS_RESTORE:
        return 64u << 10;
    case RPC_COORD_SUBMIT_JOB: /* the job file and the files it brings (job/job.h) */
        return (size_t)JOB_MAX_FILE_BYTES * (JOB_MAX_FILES + 1) + (64u << 10);
    default:
        return (size_t)s->max_message_bytes;
    }
}

/* Adds the seconds since *since to counter, and moves *since to now. */
static void count_phase(_Atomic uint64_t *counter, double *since)
{
    double now = clock_now_s();
    atomic_fetch_add(counter, (uint64_t)((now - *since) * 1e6));
    *since = now;
}

void server_on_recv(rpc_ctx_t *c, bool ok)
{
    server_thread_t *t = c->thread;
    rpc_server_t *s = c->server;
    method_counters_t *mc = &s->counters[c->method->id];
    ProtobufCMessage *req = NULL;
    status_msg_t why = {0};
    double phase;
    status_t rc;

    if (!ok || c->recv_bb == NULL) {
        atomic_store(&c->replied, true);
        rpc_ctx_fail(c, STATUS_INVALID_ARGUMENT, NULL, "%s: the call carried no request message",
                     c->method->path);
        server_send_error(c);
        server_ctx_unref(c);
        return;
    }
    phase = c->started;
    count_phase(&mc->receive_micros, &phase);
    c->bytes_in = grpc_byte_buffer_length(c->recv_bb);
    if (c->bytes_in > request_limit(s, c->method->id)) {
        grpc_byte_buffer_destroy(c->recv_bb);
        c->recv_bb = NULL;
        atomic_store(&c->replied, true);
        rpc_ctx_fail(c, STATUS_RESOURCE_EXHAUSTED, c->method->path,
                     "%s: the request is %zu bytes, more than the %zu this method takes",
                     c->method->path, c->bytes_in, request_limit(s, c->method->id));
        server_send_error(c);
        server_ctx_unref(c);
        return;
    }
    rc = rpc_decode(c->method->request, c->recv_bb, t->recv_buf, t->recv_cap,
                    s->handlers[c->method->id].in_place, &req, &c->payload, &why);
    grpc_byte_buffer_destroy(c->recv_bb);
    c->recv_bb = NULL;
    count_phase(&mc->decode_micros, &phase);
    if (rc == STATUS_OK && c->payload.owned && c->payload.len <= RECV_BUF_KEEP_MAX &&
        c->payload.len > t->recv_cap) {
        /* Keep the larger buffer for the next calls on this thread: fresh multi-megabyte
         * allocations are mmap'd and page-faulted on every message. */
        free(t->recv_buf);
        t->recv_buf = c->payload.data;
        t->recv_cap = (c->payload.len + 63) / 64 * 64;
        c->payload.owned = false;
    }
    if (rc != STATUS_OK) {
        atomic_store(&c->replied, true);
        rpc_ctx_fail(c,
                     rc == STATUS_NO_MEMORY || rc == STATUS_RESOURCE_EXHAUSTED
                         ? rc
                         : STATUS_INVALID_ARGUMENT,
                     NULL, "%s: the request (%zu bytes) is refused: %s", c->method->path,
                     c->bytes_in, why.text);
        server_send_error(c);
        server_ctx_unref(c);
        return;
    }
    rc = s->handlers[c->method->id].cb(c, req, s->handlers[c->method->id].user);
    /* up to its reply, if it made one here: sending that is the reply's phase */
    atomic_fetch_add(
        &mc->handle_micros,
        (uint64_t)(((c->respond_at > phase ? c->respond_at : clock_now_s()) - phase) * 1e6));
    protobuf_c_message_free_unpacked(req, NULL);
    if (!c->deferred) {
        if (rc != STATUS_OK && !atomic_exchange(&c->replied, true)) {
            if (c->fail_status == STATUS_OK)
                rpc_ctx_fail(c, rc, NULL, "%s", status_str(rc));
            c->fail_status = rc;
            server_send_error(c);
        } else if (rc == STATUS_OK && !atomic_exchange(&c->replied, true)) {
            rpc_ctx_fail(c, STATUS_INTERNAL, NULL, "%s: the handler sent no reply",
                         c->method->path);
            server_send_error(c);
        }
        /* The thread's buffer goes back to the thread unless the handler took it; a payload of
         * the call's own stays until the call is freed (the reply may still be sending it). */
        if (!c->payload.owned && c->payload.held == NULL)
            c->payload = (rpc_payload_t){0};
    }
    server_ctx_unref(c);
}

/* TAG_CLOSE: the call is over (answered, cancelled by the client, past its deadline, or
 * cancelled by shutdown). Whatever a stream still had queued will never go out. */
static void on_close(rpc_ctx_t *c)
{
    grpc_byte_buffer *dead[RPC_STREAM_QUEUE_MAX];
    void (*cb)(void *arg);
    void *arg;
    size_t n_dead;

    atomic_store(&c->closed, true);
    pthread_mutex_lock(&c->mu);
    c->over = true;
    n_dead = server_stream_drain_locked(c, dead);
    cb = c->done_cb;
    arg = c->done_arg;
    c->done_cb = NULL;
    pthread_mutex_unlock(&c->mu);
    server_destroy_buffers(dead, n_dead);
    if (cb != NULL)
        cb(arg); /* our reference keeps the context valid inside */
    server_ctx_unref(c);
}

static void handle_event(server_thread_t *t, grpc_event ev)
{
    tag_t *tag = ev.tag;
    rpc_ctx_t *c = tag->ctx;

    (void)t;
    switch (tag->kind) {
    case TAG_ACCEPT:
        on_accept(c, ev.success);
        break;
    case TAG_RECV:
        server_on_recv(c, ev.success);
        break;
    case TAG_SEND:
        if (c->send_bb != NULL) {
            grpc_byte_buffer_destroy(c->send_bb);
            c->send_bb = NULL;
        }
        server_ctx_unref(c);
        break;
    case TAG_STREAM:
        server_stream_sent(c, ev.success);
        break;
    case TAG_CLOSE:
        on_close(c);
        break;
    }
}

static void *thread_main(void *arg)
{
    server_thread_t *t = arg;

    for (int i = 0; i < ACCEPTS_PER_THREAD; i++)
        post_accept(t);
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(t->cq, rpc_deadline_ms(RPC_SERVER_WAKE_MS), NULL);
        atomic_store(&t->heartbeat_ms, clock_now_ms());
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE)
            handle_event(t, ev);
    }
    free(t->recv_buf);
    t->recv_buf = NULL;
    return NULL;
}

/* ---- server lifetime ---------------------------------------------------------------------- */

status_t rpc_server_new(const rpc_server_opts_t *o, rpc_server_t **ret_server, status_msg_t *err)
{
    rpc_server_t *s;
    grpc_server_credentials *creds;
    int max_msg = o->max_message_bytes > 0 && o->max_message_bytes < INT32_MAX
                      ? (int)o->max_message_bytes
                      : INT32_MAX;
    grpc_arg args[] = {
        {GRPC_ARG_INTEGER, (char *)GRPC_ARG_ALLOW_REUSEPORT, {.integer = 0}},
        {GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = max_msg}},
        {GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = max_msg}},
    };
    grpc_channel_args cargs = {sizeof(args) / sizeof(args[0]), args};

    if (o->health_listen != NULL && !rpc_security_enabled())
        return status_fail(err, STATUS_BAD_CONFIG,
                           "--health-listen %s needs mutual TLS (--tls-cert, --tls-key, "
                           "--tls-ca): without it the main port answers health checks",
                           o->health_listen);
    if (o->threads < 1)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "rpc server needs at least one thread");
    rpc_tune_malloc();
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory creating the rpc server");
    s->threads = calloc((size_t)o->threads, sizeof(*s->threads));
    if (s->threads == NULL) {
        free(s);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory creating the rpc server");
    }
    pthread_mutex_init(&s->defer_mu, NULL);
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&s->defer_cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    s->n_threads = o->threads;
    s->task_type = o->task_type;
    s->task_index = o->task_index;
    s->max_calls_per_peer = o->max_calls_per_peer;
    s->max_message_bytes = max_msg;
    pthread_mutex_init(&s->peers.mu, NULL);
    s->server = grpc_server_create(&cargs, NULL);
    s->shutdown_cq = grpc_completion_queue_create_for_pluck(NULL);
    for (int i = 0; i < s->n_threads; i++) {
        s->threads[i].server = s;
        s->threads[i].cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(s->server, s->threads[i].cq, NULL);
    }
    creds = rpc_security_enabled() ? rpc_security_server_creds(err)
                                   : grpc_insecure_server_credentials_create();
    if (creds == NULL) {
        rpc_server_shutdown(s, 0);
        return STATUS_BAD_CONFIG;
    }
    s->port = grpc_server_add_http2_port(s->server, o->listen, creds);
    grpc_server_credentials_release(creds);
    if (s->port == 0) {
        rpc_server_shutdown(s, 0);
        return status_fail(err, STATUS_ADDRESS_IN_USE,
                           "cannot listen on %s: the address is in use or not local", o->listen);
    }
    if (o->health_listen != NULL) {
        creds = grpc_insecure_server_credentials_create();
        s->health_port = grpc_server_add_http2_port(s->server, o->health_listen, creds);
        grpc_server_credentials_release(creds);
        if (s->health_port == 0) {
            rpc_server_shutdown(s, 0);
            return status_fail(err, STATUS_ADDRESS_IN_USE,
                               "cannot listen on %s (health): the address is in use or not local",
                               o->health_listen);
        }
    }
    {
        /* Name this task by the address clients use: the listen host with the real port. */
        char host[100];
        const char *colon = strrchr(o->listen, ':');
        size_t hl = colon ? (size_t)(colon - o->listen) : 0;
        if (hl >= sizeof(host))
            hl = sizeof(host) - 1;
        memcpy(host, o->listen, hl);
        host[hl] = '\0';
        snprintf(s->address, sizeof(s->address), "%s:%d", host, s->port);
    }
    *ret_server = s;
    return STATUS_OK;
}

void rpc_server_handle(rpc_server_t *s, rpc_method_id_t id, rpc_handler_cb cb, void *user)
{
    if ((int)id < 0 || id >= RPC_METHOD_COUNT_)
        return;
    s->handlers[id].cb = cb;
    s->handlers[id].user = user;
}

void rpc_server_payload_in_place(rpc_server_t *s, rpc_method_id_t id)
{
    if ((int)id >= 0 && id < RPC_METHOD_COUNT_)
        s->handlers[id].in_place = true;
}

status_t rpc_server_start(rpc_server_t *s, status_msg_t *err)
{
    grpc_server_start(s->server);
    for (int i = 0; i < s->n_threads; i++) {
        server_thread_t *t = &s->threads[i];
        atomic_store(&t->heartbeat_ms, clock_now_ms());
        if (pthread_create(&t->tid, NULL, thread_main, t) != 0)
            return status_fail(err, STATUS_SYSTEM, "cannot start rpc handler thread %d", i);
        t->started = true;
    }
    LOG_INFO(RPC, "serving gRPC on %s with %d handler threads", s->address, s->n_threads);
    if (rpc_security_enabled() && s->health_port)
        LOG_INFO(RPC, "mutual TLS 1.3 as %s; plaintext health checks on port %d",
                 rpc_security_identity(), s->health_port);
    else if (rpc_security_enabled())
        LOG_INFO(RPC, "mutual TLS 1.3 as %s", rpc_security_identity());
    return STATUS_OK;
}

int rpc_server_port(const rpc_server_t *s)
{
    return s->port;
}

int rpc_server_health_port(const rpc_server_t *s)
{
    return s->health_port;
}

bool rpc_server_alive(const rpc_server_t *s, int64_t max_age_ms)
{
    int64_t now = clock_now_ms();
    for (int i = 0; i < s->n_threads; i++)
        if (s->threads[i].started && now - atomic_load(&s->threads[i].heartbeat_ms) > max_age_ms)
            return false;
    return true;
}

void rpc_server_stats(const rpc_server_t *s, rpc_method_id_t id, rpc_method_stats_t *ret)
{
    const method_counters_t *mc = &s->counters[id];
    ret->calls = atomic_load(&mc->calls);
    ret->errors = atomic_load(&mc->errors);
    ret->bytes_in = atomic_load(&mc->bytes_in);
    ret->bytes_out = atomic_load(&mc->bytes_out);
    ret->seconds = (double)atomic_load(&mc->micros) * 1e-6;
    ret->denied = atomic_load(&mc->denied);
    ret->receive_seconds = (double)atomic_load(&mc->receive_micros) * 1e-6;
    ret->decode_seconds = (double)atomic_load(&mc->decode_micros) * 1e-6;
    ret->handle_seconds = (double)atomic_load(&mc->handle_micros) * 1e-6;
}

/* Waits up to DEFERRED_WAIT_MS for the deferred calls that other threads still hold to be
 * answered or finished; their done callbacks have run by now, so a well-behaved producer is
 * finishing at this moment. Returns how many are left. */
static int wait_deferred(rpc_server_t *s)
{
    struct timespec until;
    int left;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += DEFERRED_WAIT_MS / 1000;
    until.tv_nsec += (DEFERRED_WAIT_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->defer_mu);
    while (s->deferred_open > 0 &&
           pthread_cond_timedwait(&s->defer_cv, &s->defer_mu, &until) != ETIMEDOUT)
        ;
    left = s->deferred_open;
    pthread_mutex_unlock(&s->defer_mu);
    return left;
}

void rpc_server_shutdown(rpc_server_t *s, int64_t grace_ms)
{
    static int shutdown_tag;
    grpc_event ev;
    int leaked;

    if (s == NULL)
        return;
    atomic_store(&s->shutting_down, true);
    grpc_server_shutdown_and_notify(s->server, s->shutdown_cq, &shutdown_tag);
    ev =
        grpc_completion_queue_pluck(s->shutdown_cq, &shutdown_tag, rpc_deadline_ms(grace_ms), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        LOG_NOTICE(RPC, "calls still running after %lld ms: cancelling them", (long long)grace_ms);
        grpc_server_cancel_all_calls(s->server);
        grpc_completion_queue_pluck(s->shutdown_cq, &shutdown_tag,
                                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    }
    pthread_mutex_lock(&s->defer_mu);
    s->queues_closed = true;
    pthread_mutex_unlock(&s->defer_mu);
    for (int i = 0; i < s->n_threads; i++)
        grpc_completion_queue_shutdown(s->threads[i].cq);
    for (int i = 0; i < s->n_threads; i++) {
        server_thread_t *t = &s->threads[i];
        if (t->started) {
            pthread_join(t->tid, NULL);
        } else { /* never started: drain here */
            while (
                grpc_completion_queue_next(t->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
                GRPC_QUEUE_SHUTDOWN)
                ;
        }
    }
    /* Late answers from other threads unref their calls: keep the server and queues until then. */
    leaked = wait_deferred(s);
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(s->shutdown_cq);
    while (
        grpc_completion_queue_pluck(s->shutdown_cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
            .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(s->shutdown_cq);
    for (int i = 0; i < s->n_threads; i++)
        grpc_completion_queue_destroy(s->threads[i].cq);
    if (leaked > 0) {
        /* Someone still holds a deferred call and may touch it (and through it the server):
         * keeping the small server struct is safer than a use after free. */
        LOG_ERR(RPC, "%d deferred calls were never answered or finished: leaking them", leaked);
        return;
    }
    pthread_cond_destroy(&s->defer_cv);
    pthread_mutex_destroy(&s->defer_mu);
    server_peers_done(&s->peers);
    pthread_mutex_destroy(&s->peers.mu);
    free(s->threads);
    free(s);
}

/* ---- gRPC's own log ----------------------------------------------------------------------- */

static void grpc_log_cb(gpr_log_func_args *a)
{
    log_level_t level = a->severity == GPR_LOG_SEVERITY_ERROR  ? LOG_LEVEL_ERR
                        : a->severity == GPR_LOG_SEVERITY_INFO ? LOG_LEVEL_INFO
                                                               : LOG_LEVEL_DEBUG;
    if (a->severity == GPR_LOG_SEVERITY_ERROR)
        rpc_security_note_log(a->message);
    if (log_enabled(level, LOG_SUB_GRPC))
        log_write(level, LOG_SUB_GRPC, "%s (%s:%d)", a->message, a->file, a->line);
}

void rpc_log_init(void)
{
    gpr_set_log_function(grpc_log_cb);
    gpr_set_log_verbosity(log_enabled(LOG_LEVEL_DEBUG, LOG_SUB_GRPC) ? GPR_LOG_SEVERITY_DEBUG
                                                                     : GPR_LOG_SEVERITY_ERROR);
}
