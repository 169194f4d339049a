/* What a handler sends: replies with zero-copy payloads, failures with their error detail,
 * deferred replies from other threads, and server streams. */
#define _POSIX_C_SOURCE 200809L
#include "rpc/server_internal.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/support/log.h>

#include "base/clock.h"
#include "base/log.h"
#include "tessera/v1/common.pb-c.h"

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

void server_error_status_op(rpc_ctx_t *c, grpc_op *op)
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

void server_send_error(rpc_ctx_t *c)
{
    grpc_op ops[2];

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    server_error_status_op(c, &ops[1]);
    server_count_call(c);
    server_start_batch(c, ops, 2, &c->t_send);
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

    server_ctx_unref(c);
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
        server_send_error(c);
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
    c->respond_at = clock_now_s(); /* the handler's work ends, the reply's begins */
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
    server_count_call(c);
    server_start_batch(c, ops, 3, &c->t_send);
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
    server_ctx_ref(c);
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

size_t server_stream_drain_locked(rpc_ctx_t *c, grpc_byte_buffer **out)
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

void server_destroy_buffers(grpc_byte_buffer **bbs, size_t n)
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
    if (!server_start_batch(c, ops, n, &c->t_stream))
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
        server_error_status_op(c, &ops[n++]);
    } else {
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n++].data.send_status_from_server.status = GRPC_STATUS_OK;
    }
    c->st.md_sent = true;
    c->st.status_sent = true;
    server_count_call(c);
    server_start_batch(c, ops, n, &c->t_send);
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

void server_stream_sent(rpc_ctx_t *c, bool ok)
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
        n_dead += server_stream_drain_locked(c, dead + n_dead);
    else if (c->st.in_flight == NULL && c->st.finishing && !c->st.status_sent)
        stream_start_status_locked(c);
    pthread_mutex_unlock(&c->mu);
    server_destroy_buffers(dead, n_dead);
    server_ctx_unref(c);
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
        n_dead = server_stream_drain_locked(c, dead);
    else if (c->st.in_flight == NULL)
        stream_start_status_locked(c);
    /* else server_stream_sent sends the status after the last queued message */
    pthread_mutex_unlock(&c->mu);
    server_destroy_buffers(dead, n_dead);
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
