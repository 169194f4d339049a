/* The server half of the RPC runtime: handler threads with one completion queue each, method
 * dispatch from the method table, replies with zero-copy payloads, error details, shutdown. */
#define _POSIX_C_SOURCE 200809L
#include "rpc/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "base/log.h"
#include "rpc/offline.h"
#include "tessera/v1/common.pb-c.h"
#include "base/clock.h"

#define ACCEPTS_PER_THREAD 8
#define THREAD_WAKE_MS     500
#define RECV_BUF_KEEP_MAX  (128u << 20)
#define DEFERRED_WAIT_MS   1000

/* ---- the method table --------------------------------------------------------------------- */

static const rpc_method_t methods[] = {
#define RPC_ROW_(id, stub, svc, name, kind, RqT, rqd, RsT, rsd)                                    \
    {RPC_##id, "/" svc "/" name, svc, name, RPC_KIND_##kind, &rqd, &rsd},
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

/* ---- types -------------------------------------------------------------------------------- */

/* What a completion means: TAG_SEND ends a batch that sends the status (and, for unary calls,
 * the reply); TAG_STREAM ends one message of a server stream. */
typedef enum { TAG_ACCEPT, TAG_RECV, TAG_SEND, TAG_STREAM, TAG_CLOSE } tag_kind_t;

typedef struct tag {
    tag_kind_t kind;
    struct rpc_ctx *ctx;
} tag_t;

typedef struct server_thread {
    rpc_server_t *server;
    grpc_completion_queue *cq;
    pthread_t tid;
    bool started;
    _Atomic int64_t heartbeat_ms;
    void *recv_buf; /* reused for request payloads */
    size_t recv_cap;
} server_thread_t;

typedef struct method_counters {
    _Atomic uint64_t calls, errors, bytes_in, bytes_out, micros;
} method_counters_t;

struct rpc_server {
    grpc_server *server;
    grpc_completion_queue *shutdown_cq;
    server_thread_t *threads;
    int n_threads;
    int port;
    int task_type, task_index;
    char address[128];
    struct {
        rpc_handler_cb cb;
        void *user;
    } handlers[RPC_METHOD_COUNT_];
    method_counters_t counters[RPC_METHOD_COUNT_];
    _Atomic bool shutting_down;
    pthread_mutex_t defer_mu; /* orders every batch start against queue shutdown */
    pthread_cond_t defer_cv;  /* signalled when deferred_open drops to 0 */
    bool queues_closed;
    int deferred_open; /* deferred calls not answered yet */
};

/* The send side of a server stream. Other threads queue messages while the call's thread
 * completes sends, so it is guarded by the context's mutex. gRPC takes one message at a time:
 * the next goes out when the previous one's TAG_STREAM completes. */
typedef struct stream_queue {
    grpc_byte_buffer *queue[RPC_STREAM_QUEUE_MAX];
    size_t sizes[RPC_STREAM_QUEUE_MAX];
    size_t head, count, bytes;
    grpc_byte_buffer *in_flight;
    bool md_sent;     /* the initial metadata went out with the first message */
    bool finishing;   /* rpc_ctx_stream_finish was called */
    bool status_sent; /* the final status batch was started */
    bool broken;      /* a send failed or the queues closed: nothing more goes out */
} stream_queue_t;

struct rpc_ctx {
    rpc_server_t *server;
    server_thread_t *thread;
    tag_t t_accept, t_recv, t_send, t_stream, t_close;
    _Atomic int refs;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *recv_bb;
    grpc_byte_buffer *send_bb;
    const rpc_method_t *method;
    int cancelled;
    _Atomic bool closed;
    _Atomic bool replied;
    _Atomic bool counted; /* in the method counters already */
    bool deferred;
    rpc_payload_t payload;
    double started;
    size_t bytes_in, bytes_out;
    status_t fail_status;
    char fail_text[512];
    char fail_culprit[128];
    grpc_slice status_details;
    bool have_details;
    grpc_metadata trailer;
    uint8_t *detail_buf;
    pthread_mutex_t mu; /* guards `over`, the done callback and the stream queue */
    bool over;          /* RECV_CLOSE_ON_SERVER completed: the call has ended */
    void (*done_cb)(void *arg);
    void *done_arg;
    stream_queue_t st;
};

/* ---- context lifetime --------------------------------------------------------------------- */

static rpc_ctx_t *ctx_new(rpc_server_t *s, server_thread_t *t)
{
    rpc_ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->server = s;
    c->thread = t;
    c->t_accept = (tag_t){TAG_ACCEPT, c};
    c->t_recv = (tag_t){TAG_RECV, c};
    c->t_send = (tag_t){TAG_SEND, c};
    c->t_stream = (tag_t){TAG_STREAM, c};
    c->t_close = (tag_t){TAG_CLOSE, c};
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->mu, NULL);
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    return c;
}

/* Counts the call in its method's counters, once: when its final status is handed to gRPC, so
 * that a client holding the answer finds the call counted, or at the end for calls that never
 * got that far. The time is added when the call is freed. */
static void count_call(rpc_ctx_t *c)
{
    method_counters_t *mc;

    if (c->method == NULL || atomic_exchange(&c->counted, true))
        return;
    mc = &c->server->counters[c->method->id];
    atomic_fetch_add(&mc->calls, 1);
    atomic_fetch_add(&mc->bytes_in, c->bytes_in);
    atomic_fetch_add(&mc->bytes_out, c->bytes_out);
    if (c->fail_status != STATUS_OK)
        atomic_fetch_add(&mc->errors, 1);
}

static void ctx_free(rpc_ctx_t *c)
{
    if (c->method != NULL) {
        count_call(c);
        atomic_fetch_add(&c->server->counters[c->method->id].micros,
                         (uint64_t)((clock_now_s() - c->started) * 1e6));
    }
    if (c->call != NULL)
        grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->recv_bb != NULL)
        grpc_byte_buffer_destroy(c->recv_bb);
    if (c->send_bb != NULL)
        grpc_byte_buffer_destroy(c->send_bb);
    if (c->have_details)
        grpc_slice_unref(c->status_details);
    for (size_t i = 0; i < c->st.count; i++) /* only when the call never ran */
        grpc_byte_buffer_destroy(c->st.queue[(c->st.head + i) % RPC_STREAM_QUEUE_MAX]);
    rpc_payload_done(&c->payload);
    pthread_mutex_destroy(&c->mu);
    free(c->detail_buf);
    free(c);
}

static void ctx_ref(rpc_ctx_t *c)
{
    atomic_fetch_add(&c->refs, 1);
}

static void ctx_unref(rpc_ctx_t *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        ctx_free(c);
}

/* Starts a batch holding a reference for its completion. Refuses once rpc_server_shutdown has
 * closed the queues: an op started on a shut-down queue aborts the process, and deferred
 * replies and stream messages come from other threads at any time. */
static bool start_batch(rpc_ctx_t *c, const grpc_op *ops, size_t n, tag_t *tag)
{
    rpc_server_t *s = c->server;
    grpc_call_error e = GRPC_CALL_ERROR;
    bool closed;

    ctx_ref(c);
    pthread_mutex_lock(&s->defer_mu);
    closed = s->queues_closed;
    if (!closed)
        e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
    pthread_mutex_unlock(&s->defer_mu);
    if (e != GRPC_CALL_OK) {
        if (!closed)
            LOG_ERR(RPC, "%s: grpc_call_start_batch failed (%d)",
                    c->method ? c->method->path : "call", (int)e);
        ctx_unref(c);
        return false;
    }
    return true;
}

/* ---- accepting ---------------------------------------------------------------------------- */

static void post_accept(server_thread_t *t)
{
    rpc_server_t *s = t->server;
    rpc_ctx_t *c;

    if (atomic_load(&s->shutting_down))
        return;
    c = ctx_new(s, t);
    if (c == NULL) {
        LOG_ERR(RPC, "out of memory accepting a call");
        return;
    }
    if (grpc_server_request_call(s->server, &c->call, &c->details, &c->md, t->cq, t->cq,
                                 &c->t_accept) != GRPC_CALL_OK) {
        ctx_free(c);
    }
}

/* ---- replies ------------------------------------------------------------------------------ */

static int fault_of(const rpc_server_t *s, status_t st)
{
    status_group_t g = status_group(st);
    if (g == STATUS_GROUP_INVALID_ARGUMENT || g == STATUS_GROUP_INVALID_USAGE)
        return TESSERA__V1__FAULT__FAULT_APPLICATION;
    switch (s->task_type) {
    case TESSERA__V1__TASK_TYPE__TASK_TYPE_PS:
        return TESSERA__V1__FAULT__FAULT_PS;
    case TESSERA__V1__TASK_TYPE__TASK_TYPE_WORKER:
        return TESSERA__V1__FAULT__FAULT_WORKER;
    case TESSERA__V1__TASK_TYPE__TASK_TYPE_CHIEF:
        return TESSERA__V1__FAULT__FAULT_CHIEF;
    default:
        return TESSERA__V1__FAULT__FAULT_UNSPECIFIED;
    }
}

/* Rewrites the text in buf as well-formed UTF-8 (utf8_escape), cutting it if the escapes make it
 * longer than buf. */
static void text_for_wire(char *buf, size_t size)
{
    size_t len = strlen(buf);
    char *copy;

    if (utf8_valid_text(buf, len))
        return;
    copy = strdup(buf);
    if (copy != NULL)
        utf8_escape(buf, size, copy, len);
    else
        buf[0] = '\0'; /* no memory to escape it: send no text rather than text that is not UTF-8 */
    free(copy);
}

/* Fills op with the SEND_STATUS_FROM_SERVER of the call's recorded failure, its error detail as
 * trailing metadata, and logs it. The slices live in the context until it is freed. */
static void error_status_op(rpc_ctx_t *c, grpc_op *op)
{
    rpc_server_t *s = c->server;
    Tessera__V1__ErrorDetail detail = TESSERA__V1__ERROR_DETAIL__INIT;
    Tessera__V1__TaskId task = TESSERA__V1__TASK_ID__INIT;
    size_t len;

    if (c->fail_text[0] == '\0')
        snprintf(c->fail_text, sizeof(c->fail_text), "%s", status_str(c->fail_status));
    /* The sentence may quote what the client sent, and the detail's fields are proto3 strings:
     * bytes that are not UTF-8 go out escaped. */
    text_for_wire(c->fail_text, sizeof(c->fail_text));
    text_for_wire(c->fail_culprit, sizeof(c->fail_culprit));
    task.type = (Tessera__V1__TaskType)s->task_type;
    task.index = s->task_index;
    task.address = s->address;
    detail.task = &task;
    detail.fault = (Tessera__V1__Fault)fault_of(s, c->fail_status);
    detail.status = (char *)status_name(c->fail_status);
    detail.reason = c->fail_text;
    detail.culprit = c->fail_culprit;
    len = tessera__v1__error_detail__get_packed_size(&detail);
    c->detail_buf = malloc(len ? len : 1);
    if (c->detail_buf != NULL) {
        tessera__v1__error_detail__pack(&detail, c->detail_buf);
        c->trailer.key = grpc_slice_from_static_string(RPC_ERROR_DETAIL_KEY);
        c->trailer.value = grpc_slice_from_static_buffer(c->detail_buf, len);
    }
    c->status_details = grpc_slice_from_copied_string(c->fail_text);
    c->have_details = true;

    memset(op, 0, sizeof(*op));
    op->op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    op->data.send_status_from_server.status = (grpc_status_code)status_to_grpc(c->fail_status);
    op->data.send_status_from_server.status_details = &c->status_details;
    op->data.send_status_from_server.trailing_metadata_count = c->detail_buf ? 1 : 0;
    op->data.send_status_from_server.trailing_metadata = c->detail_buf ? &c->trailer : NULL;
    if (c->fail_status != STATUS_UNIMPLEMENTED &&
        status_group(c->fail_status) != STATUS_GROUP_INVALID_ARGUMENT)
        LOG_WARNING(RPC, "%s failed: %s", c->method ? c->method->path : "call", c->fail_text);
    else
        LOG_DEBUG(RPC, "%s rejected: %s", c->method ? c->method->path : "call", c->fail_text);
}

static void send_error(rpc_ctx_t *c)
{
    grpc_op ops[2];

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    error_status_op(c, &ops[1]);
    count_call(c);
    start_batch(c, ops, 2, &c->t_send);
}

static void fail_fmt(rpc_ctx_t *c, status_t st, const char *culprit, const char *fmt, va_list ap)
{
    if (st == STATUS_OK)
        st = STATUS_INTERNAL;
    c->fail_status = st;
    if (fmt != NULL)
        vsnprintf(c->fail_text, sizeof(c->fail_text), fmt, ap);
    else
        snprintf(c->fail_text, sizeof(c->fail_text), "%s", status_str(st));
    snprintf(c->fail_culprit, sizeof(c->fail_culprit), "%s", culprit ? culprit : "");
}

status_t rpc_ctx_fail(rpc_ctx_t *c, status_t st, const char *culprit, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_fmt(c, st, culprit, fmt, ap);
    va_end(ap);
    return c->fail_status;
}

/* Sends now, from whatever thread: refuses once the server's queues are closed. */
static bool deferred_may_send(rpc_ctx_t *c)
{
    bool ok;
    pthread_mutex_lock(&c->server->defer_mu);
    ok = !c->server->queues_closed;
    pthread_mutex_unlock(&c->server->defer_mu);
    return ok;
}

/* Drops the reference rpc_ctx_defer took, once the deferred call is answered or finished, and
 * lets rpc_server_shutdown know. The server outlives every deferred call (see there). */
static void release_deferred(rpc_ctx_t *c)
{
    rpc_server_t *s = c->server;

    ctx_unref(c);
    pthread_mutex_lock(&s->defer_mu);
    if (--s->deferred_open == 0)
        pthread_cond_broadcast(&s->defer_cv);
    pthread_mutex_unlock(&s->defer_mu);
}

static bool is_stream(const rpc_ctx_t *c)
{
    return c->method != NULL && c->method->kind == RPC_KIND_SERVER_STREAM;
}

static void stream_finish_v(rpc_ctx_t *c, status_t st, const char *culprit, const char *fmt,
                            va_list ap);

void rpc_ctx_fail_now(rpc_ctx_t *c, status_t st, const char *culprit, const char *fmt, ...)
{
    va_list ap;

    if (is_stream(c) && c->deferred) {
        va_start(ap, fmt);
        stream_finish_v(c, st == STATUS_OK ? STATUS_INTERNAL : st, culprit, fmt, ap);
        va_end(ap);
        return;
    }
    if (atomic_exchange(&c->replied, true))
        return;
    va_start(ap, fmt);
    fail_fmt(c, st, culprit, fmt, ap);
    va_end(ap);
    if (!c->deferred || deferred_may_send(c))
        send_error(c);
    if (c->deferred)
        release_deferred(c);
}

status_t rpc_ctx_respond(rpc_ctx_t *c, const ProtobufCMessage *resp, const rpc_iov_t *iov,
                         size_t n_iov)
{
    grpc_op ops[3];
    status_t rc;

    if (is_stream(c)) /* streams answer with rpc_ctx_stream_send and _finish */
        return STATUS_INVALID_USAGE;
    if (atomic_exchange(&c->replied, true))
        return STATUS_INVALID_USAGE;
    if (resp->descriptor != c->method->response) {
        atomic_store(&c->replied, false);
        return rpc_ctx_fail(c, STATUS_INTERNAL, NULL, "%s: handler replied with a %s",
                            c->method->path, resp->descriptor->name);
    }
    rc = rpc_encode(resp, iov, n_iov, NULL, &c->send_bb, &c->bytes_out);
    if (rc != STATUS_OK) {
        atomic_store(&c->replied, false);
        return rpc_ctx_fail(c, rc, NULL, "%s: cannot encode the reply", c->method->path);
    }
    if (c->deferred && !deferred_may_send(c)) {
        release_deferred(c);
        return STATUS_CANCELLED;
    }
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = c->send_bb;
    ops[2].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[2].data.send_status_from_server.status = GRPC_STATUS_OK;
    count_call(c);
    start_batch(c, ops, 3, &c->t_send);
    if (c->deferred)
        release_deferred(c);
    return STATUS_OK;
}

void rpc_ctx_defer(rpc_ctx_t *c)
{
    server_thread_t *t = c->thread;
    if (c->deferred)
        return;
    c->deferred = true;
    ctx_ref(c);
    pthread_mutex_lock(&c->server->defer_mu);
    c->server->deferred_open++;
    pthread_mutex_unlock(&c->server->defer_mu);
    /* The thread's receive buffer is reused by the next call: give this call its own copy. */
    if (c->payload.data != NULL && !c->payload.owned && c->payload.data == t->recv_buf) {
        c->payload.owned = true;
        t->recv_buf = NULL;
        t->recv_cap = 0;
    }
}

void rpc_ctx_on_done(rpc_ctx_t *c, void (*cb)(void *arg), void *arg)
{
    bool over;

    pthread_mutex_lock(&c->mu);
    over = c->over;
    if (!over) {
        c->done_cb = cb;
        c->done_arg = arg;
    }
    pthread_mutex_unlock(&c->mu);
    if (over && cb != NULL)
        cb(arg);
}

/* ---- server streaming --------------------------------------------------------------------- */

/* Moves every queued message into out (RPC_STREAM_QUEUE_MAX entries) and returns how many, for
 * the caller to destroy once c->mu is released: destroying a byte buffer runs the senders'
 * release callbacks, which may take locks of their own. Call with c->mu held. */
static size_t stream_drain_locked(rpc_ctx_t *c, grpc_byte_buffer **out)
{
    size_t n = 0;

    while (c->st.count > 0) {
        out[n++] = c->st.queue[c->st.head];
        c->st.head = (c->st.head + 1) % RPC_STREAM_QUEUE_MAX;
        c->st.count--;
    }
    c->st.bytes = 0;
    return n;
}

static void destroy_buffers(grpc_byte_buffer **bbs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (bbs[i] != NULL)
            grpc_byte_buffer_destroy(bbs[i]);
}

/* Starts sending bb, preceded by the initial metadata on the first message. c->mu held. */
static bool stream_start_send_locked(rpc_ctx_t *c, grpc_byte_buffer *bb)
{
    grpc_op ops[2];
    size_t n = 0;

    memset(ops, 0, sizeof(ops));
    if (!c->st.md_sent)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
    if (!start_batch(c, ops, n, &c->t_stream))
        return false;
    c->st.md_sent = true;
    c->st.in_flight = bb;
    return true;
}

/* Sends the final status: OK, or the failure recorded in the context. Only once nothing is
 * queued or in flight, so that it follows every message. c->mu held. */
static void stream_start_status_locked(rpc_ctx_t *c)
{
    grpc_op ops[2];
    size_t n = 0;

    memset(ops, 0, sizeof(ops));
    if (!c->st.md_sent)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (c->fail_status != STATUS_OK) {
        error_status_op(c, &ops[n++]);
    } else {
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n++].data.send_status_from_server.status = GRPC_STATUS_OK;
    }
    c->st.md_sent = true;
    c->st.status_sent = true;
    count_call(c);
    start_batch(c, ops, n, &c->t_send);
}

/* Calls every release callback of iov: a refused message still hands its segments over. */
static void release_iov(const rpc_iov_t *iov, size_t n_iov)
{
    for (size_t i = 0; i < n_iov; i++)
        if (iov[i].release != NULL)
            iov[i].release(iov[i].arg);
}

status_t rpc_ctx_stream_send(rpc_ctx_t *c, const ProtobufCMessage *msg, const rpc_iov_t *iov,
                             size_t n_iov)
{
    grpc_byte_buffer *bb = NULL, *dead = NULL;
    size_t wire = 0;
    status_t rc;

    if (c == NULL || msg == NULL || !is_stream(c) || !c->deferred ||
        msg->descriptor != c->method->response ||
        (n_iov > 0 && !rpc_has_payload_field(c->method->response))) {
        release_iov(iov, n_iov);
        return STATUS_INVALID_USAGE;
    }
    for (size_t i = 0; i < n_iov; i++)
        wire += iov[i].len;
    wire += protobuf_c_message_get_packed_size(msg);

    pthread_mutex_lock(&c->mu);
    if (c->st.finishing)
        rc = STATUS_INVALID_USAGE;
    else if (c->over || c->st.broken)
        rc = STATUS_CANCELLED;
    else if (c->st.count >= RPC_STREAM_QUEUE_MAX ||
             (c->st.count > 0 && c->st.bytes + wire > RPC_STREAM_QUEUE_MAX_BYTES))
        rc = STATUS_RESOURCE_EXHAUSTED; /* the client reads slower than we produce */
    else if (!deferred_may_send(c))     /* the server is shutting down */
        rc = STATUS_CANCELLED;
    else
        rc = rpc_encode(msg, iov, n_iov, NULL, &bb, &wire);
    if (rc == STATUS_OK) {
        c->bytes_out += wire;
        if (c->st.in_flight == NULL) {
            if (!stream_start_send_locked(c, bb)) {
                c->st.broken = true;
                dead = bb;
                rc = STATUS_CANCELLED;
            }
        } else {
            size_t tail = (c->st.head + c->st.count) % RPC_STREAM_QUEUE_MAX;
            c->st.queue[tail] = bb;
            c->st.sizes[tail] = wire;
            c->st.count++;
            c->st.bytes += wire;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (dead != NULL)
        grpc_byte_buffer_destroy(dead); /* releases the segments */
    else if (rc != STATUS_OK)
        release_iov(iov, n_iov);
    return rc;
}

/* TAG_STREAM: one message went out (or the call broke); send the next, or the status. */
static void on_stream_sent(rpc_ctx_t *c, bool ok)
{
    grpc_byte_buffer *dead[RPC_STREAM_QUEUE_MAX + 2];
    size_t n_dead = 0;

    pthread_mutex_lock(&c->mu);
    dead[n_dead++] = c->st.in_flight;
    c->st.in_flight = NULL;
    if (!ok)
        c->st.broken = true;
    while (!c->st.broken && c->st.count > 0) {
        grpc_byte_buffer *next = c->st.queue[c->st.head];
        c->st.bytes -= c->st.sizes[c->st.head];
        c->st.head = (c->st.head + 1) % RPC_STREAM_QUEUE_MAX;
        c->st.count--;
        if (stream_start_send_locked(c, next))
            break;
        c->st.broken = true;
        dead[n_dead++] = next;
    }
    if (c->st.broken)
        n_dead += stream_drain_locked(c, dead + n_dead);
    else if (c->st.in_flight == NULL && c->st.finishing && !c->st.status_sent)
        stream_start_status_locked(c);
    pthread_mutex_unlock(&c->mu);
    destroy_buffers(dead, n_dead);
    ctx_unref(c);
}

static void stream_finish_v(rpc_ctx_t *c, status_t st, const char *culprit, const char *fmt,
                            va_list ap)
{
    grpc_byte_buffer *dead[RPC_STREAM_QUEUE_MAX];
    size_t n_dead = 0;

    pthread_mutex_lock(&c->mu);
    if (c->st.finishing) { /* finished before: the reference is gone already */
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->st.finishing = true;
    if (st != STATUS_OK)
        fail_fmt(c, st, culprit, fmt, ap);
    if (c->over || c->st.broken || !deferred_may_send(c))
        n_dead = stream_drain_locked(c, dead);
    else if (c->st.in_flight == NULL)
        stream_start_status_locked(c);
    /* else on_stream_sent sends the status after the last queued message */
    pthread_mutex_unlock(&c->mu);
    destroy_buffers(dead, n_dead);
    release_deferred(c);
}

void rpc_ctx_stream_finish(rpc_ctx_t *c, status_t st, const char *fmt, ...)
{
    va_list ap;

    if (c == NULL)
        return;
    if (!is_stream(c) || !c->deferred) {
        LOG_ERR(RPC, "%s: rpc_ctx_stream_finish on a call that is not a deferred stream",
                c->method ? c->method->path : "call");
        return;
    }
    va_start(ap, fmt);
    stream_finish_v(c, st, NULL, fmt, ap);
    va_end(ap);
}

const void *rpc_ctx_payload(const rpc_ctx_t *c, size_t *ret_len)
{
    *ret_len = c->payload.len;
    return c->payload.data;
}

void *rpc_ctx_take_payload(rpc_ctx_t *c, size_t *ret_len)
{
    void *p = c->payload.data;
    *ret_len = c->payload.len;
    if (p == NULL)
        return NULL;
    if (!c->payload.owned) { /* the thread's buffer: hand it over, the thread makes a new one */
        c->thread->recv_buf = NULL;
        c->thread->recv_cap = 0;
    }
    c->payload = (rpc_payload_t){0};
    return p;
}

const rpc_method_t *rpc_ctx_method(const rpc_ctx_t *c)
{
    return c->method;
}

int64_t rpc_ctx_remaining_ms(const rpc_ctx_t *c)
{
    gpr_timespec d = gpr_convert_clock_type(c->details.deadline, GPR_CLOCK_MONOTONIC);
    gpr_timespec left;
    if (gpr_time_cmp(d, gpr_inf_future(GPR_CLOCK_MONOTONIC)) == 0)
        return INT64_MAX;
    left = gpr_time_sub(d, gpr_now(GPR_CLOCK_MONOTONIC));
    return gpr_time_to_millis(left);
}

bool rpc_ctx_cancelled(const rpc_ctx_t *c)
{
    return atomic_load(&c->closed) && c->cancelled;
}

/* ---- dispatch ----------------------------------------------------------------------------- */

static void on_accept(rpc_ctx_t *c, bool ok)
{
    rpc_server_t *s = c->server;
    const rpc_method_t *m;
    grpc_op op;

    post_accept(c->thread);
    if (!ok) { /* shutting down: the accept was cancelled */
        ctx_unref(c);
        return;
    }
    c->started = clock_now_s();
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    start_batch(c, &op, 1, &c->t_close);

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
        send_error(c);
        ctx_unref(c);
        return;
    }
    c->method = m;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_bb;
    start_batch(c, &op, 1, &c->t_recv);
    ctx_unref(c);
}

static void on_recv(rpc_ctx_t *c, bool ok)
{
    server_thread_t *t = c->thread;
    rpc_server_t *s = c->server;
    ProtobufCMessage *req = NULL;
    status_msg_t why = {0};
    status_t rc;

    if (!ok || c->recv_bb == NULL) {
        atomic_store(&c->replied, true);
        rpc_ctx_fail(c, STATUS_INVALID_ARGUMENT, NULL, "%s: the call carried no request message",
                     c->method->path);
        send_error(c);
        ctx_unref(c);
        return;
    }
    c->bytes_in = grpc_byte_buffer_length(c->recv_bb);
    rc = rpc_decode(c->method->request, c->recv_bb, t->recv_buf, t->recv_cap, &req, &c->payload,
                    &why);
    grpc_byte_buffer_destroy(c->recv_bb);
    c->recv_bb = NULL;
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
        send_error(c);
        ctx_unref(c);
        return;
    }
    rc = s->handlers[c->method->id].cb(c, req, s->handlers[c->method->id].user);
    protobuf_c_message_free_unpacked(req, NULL);
    if (!c->deferred) {
        if (rc != STATUS_OK && !atomic_exchange(&c->replied, true)) {
            if (c->fail_status == STATUS_OK)
                rpc_ctx_fail(c, rc, NULL, "%s", status_str(rc));
            c->fail_status = rc;
            send_error(c);
        } else if (rc == STATUS_OK && !atomic_exchange(&c->replied, true)) {
            rpc_ctx_fail(c, STATUS_INTERNAL, NULL, "%s: the handler sent no reply",
                         c->method->path);
            send_error(c);
        }
        /* The reply no longer needs the request payload unless the handler took it. */
        if (!c->payload.owned)
            c->payload = (rpc_payload_t){0};
    }
    ctx_unref(c);
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
    n_dead = stream_drain_locked(c, dead);
    cb = c->done_cb;
    arg = c->done_arg;
    c->done_cb = NULL;
    pthread_mutex_unlock(&c->mu);
    destroy_buffers(dead, n_dead);
    if (cb != NULL)
        cb(arg); /* our reference keeps the context valid inside */
    ctx_unref(c);
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
        on_recv(c, ev.success);
        break;
    case TAG_SEND:
        if (c->send_bb != NULL) {
            grpc_byte_buffer_destroy(c->send_bb);
            c->send_bb = NULL;
        }
        ctx_unref(c);
        break;
    case TAG_STREAM:
        on_stream_sent(c, ev.success);
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
        grpc_event ev = grpc_completion_queue_next(t->cq, rpc_deadline_ms(THREAD_WAKE_MS), NULL);
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
    s->server = grpc_server_create(&cargs, NULL);
    s->shutdown_cq = grpc_completion_queue_create_for_pluck(NULL);
    for (int i = 0; i < s->n_threads; i++) {
        s->threads[i].server = s;
        s->threads[i].cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(s->server, s->threads[i].cq, NULL);
    }
    creds = grpc_insecure_server_credentials_create();
    s->port = grpc_server_add_http2_port(s->server, o->listen, creds);
    grpc_server_credentials_release(creds);
    if (s->port == 0) {
        rpc_server_shutdown(s, 0);
        return status_fail(err, STATUS_ADDRESS_IN_USE,
                           "cannot listen on %s: the address is in use or not local", o->listen);
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
    return STATUS_OK;
}

int rpc_server_port(const rpc_server_t *s)
{
    return s->port;
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
    free(s->threads);
    free(s);
}

/* ---- gRPC's own log ----------------------------------------------------------------------- */

static void grpc_log_cb(gpr_log_func_args *a)
{
    log_level_t level = a->severity == GPR_LOG_SEVERITY_ERROR  ? LOG_LEVEL_ERR
                        : a->severity == GPR_LOG_SEVERITY_INFO ? LOG_LEVEL_INFO
                                                               : LOG_LEVEL_DEBUG;
    if (log_enabled(level, LOG_SUB_GRPC))
        log_write(level, LOG_SUB_GRPC, "%s (%s:%d)", a->message, a->file, a->line);
}

void rpc_log_init(void)
{
    gpr_set_log_function(grpc_log_cb);
    gpr_set_log_verbosity(log_enabled(LOG_LEVEL_DEBUG, LOG_SUB_GRPC) ? GPR_LOG_SEVERITY_DEBUG
                                                                     : GPR_LOG_SEVERITY_ERROR);
}

/* ---- offline calls (rpc_offline.h) --------------------------------------------------------- */

/* An offline server counts as shut down with its queues closed: nothing is ever accepted, and
 * start_batch refuses every batch, so a reply stays encoded in its context (c->send_bb) and an
 * error stays recorded there, for rpc_offline_call to hand back. */
rpc_server_t *rpc_offline_server_new(int task_type, int task_index)
{
    rpc_server_t *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->threads = calloc(1, sizeof(*s->threads));
    if (s->threads == NULL) {
        free(s);
        return NULL;
    }
    s->threads[0].server = s;
    s->n_threads = 1;
    s->task_type = task_type;
    s->task_index = task_index;
    snprintf(s->address, sizeof(s->address), "offline");
    atomic_store(&s->shutting_down, true);
    s->queues_closed = true;
    pthread_mutex_init(&s->defer_mu, NULL);
    pthread_cond_init(&s->defer_cv, NULL);
    return s;
}

void rpc_offline_server_free(rpc_server_t *s)
{
    if (s == NULL)
        return;
    free(s->threads[0].recv_buf);
    pthread_cond_destroy(&s->defer_cv);
    pthread_mutex_destroy(&s->defer_mu);
    free(s->threads);
    free(s);
}

/* What on_recv does after the handler, less the sending: the failure that goes out. */
static void offline_finish(rpc_ctx_t *c, status_t rc)
{
    if (atomic_exchange(&c->replied, true))
        return;
    if (rc == STATUS_OK) {
        rpc_ctx_fail(c, STATUS_INTERNAL, NULL, "%s: the handler sent no reply", c->method->path);
    } else {
        if (c->fail_status == STATUS_OK)
            rpc_ctx_fail(c, rc, NULL, "%s", status_str(rc));
        c->fail_status = rc;
    }
}

status_t rpc_offline_call(rpc_server_t *s, rpc_method_id_t id, grpc_byte_buffer *bb,
                          rpc_offline_result_t *ret)
{
    const rpc_method_t *m = rpc_method_get(id);
    ProtobufCMessage *req = NULL;
    status_msg_t why = {0};
    rpc_ctx_t *c;
    grpc_op op;
    status_t rc;

    memset(ret, 0, sizeof(*ret));
    if (m == NULL || m->kind != RPC_KIND_UNARY || s->handlers[id].cb == NULL)
        return ret->status = STATUS_UNIMPLEMENTED;
    c = ctx_new(s, &s->threads[0]);
    if (c == NULL)
        return ret->status = STATUS_NO_MEMORY;
    c->method = m;
    c->started = clock_now_s();
    c->details.deadline = gpr_inf_future(GPR_CLOCK_MONOTONIC);
    c->bytes_in = grpc_byte_buffer_length(bb);
    rc = rpc_decode(m->request, bb, NULL, 0, &req, &c->payload, &why);
    if (rc != STATUS_OK) {
        atomic_store(&c->replied, true);
        rpc_ctx_fail(c, rc == STATUS_NO_MEMORY ? rc : STATUS_INVALID_ARGUMENT, NULL,
                     "%s: the request (%zu bytes) is refused: %s", m->path, c->bytes_in, why.text);
    } else {
        rc = s->handlers[id].cb(c, req, s->handlers[id].user);
        protobuf_c_message_free_unpacked(req, NULL);
        if (c->deferred) {
            LOG_ERR(RPC, "%s: an offline call cannot be deferred", m->path);
            ctx_unref(c);
            return ret->status = STATUS_INVALID_USAGE;
        }
        offline_finish(c, rc);
    }
    if (c->send_bb != NULL) { /* answered: a later failure would not have been sent */
        ret->reply = c->send_bb;
        c->send_bb = NULL;
    } else {
        error_status_op(c, &op);
        ret->status = c->fail_status;
        snprintf(ret->text, sizeof(ret->text), "%s", c->fail_text);
        snprintf(ret->culprit, sizeof(ret->culprit), "%s", c->fail_culprit);
        if (c->detail_buf != NULL) {
            ret->detail_len = GRPC_SLICE_LENGTH(c->trailer.value);
            ret->detail = malloc(ret->detail_len ? ret->detail_len : 1);
            if (ret->detail != NULL)
                memcpy(ret->detail, c->detail_buf, ret->detail_len);
            else
                ret->detail_len = 0;
        }
    }
    ctx_unref(c);
    return ret->status;
}

void rpc_offline_result_done(rpc_offline_result_t *r)
{
    if (r == NULL)
        return;
    if (r->reply != NULL)
        grpc_byte_buffer_destroy(r->reply);
    free(r->detail);
    memset(r, 0, sizeof(*r));
}
