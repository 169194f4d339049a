/* The client half of the RPC runtime: channels and unary calls with deadlines, zero-copy request
 * payloads, single-copy response payloads and the server's error detail. */
#define _POSIX_C_SOURCE 200809L
#include "rpc/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "base/log.h"
#include "base/net.h"
#include "rpc/security.h"
#include "tessera/v1/common.pb-c.h"

struct rpc_channel {
    grpc_channel *channel;
    void *registered[RPC_METHOD_COUNT_];
    int64_t timeout_ms;
    char target[256];
};

static bool valid_target(const char *t)
{
    return net_hostport_valid(t) || strncmp(t, "unix:", 5) == 0 || strncmp(t, "dns:", 4) == 0 ||
           strncmp(t, "ipv4:", 5) == 0 || strncmp(t, "ipv6:", 5) == 0;
}

status_t rpc_channel_new(const char *target, const rpc_channel_opts_t *opts,
                         rpc_channel_t **ret_channel, status_msg_t *err)
{
    rpc_channel_opts_t o = opts ? *opts : (rpc_channel_opts_t){0};
    int64_t max = o.max_message_bytes > 0 ? o.max_message_bytes : RPC_DEFAULT_MAX_MESSAGE;
    int max_msg = max < INT32_MAX ? (int)max : INT32_MAX;
    grpc_arg args[] = {
        {GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = max_msg}},
        {GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = max_msg}},
        {GRPC_ARG_INTEGER, (char *)GRPC_ARG_ENABLE_RETRIES, {.integer = 0}},
        {GRPC_ARG_INTEGER,
         (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
         {.integer = o.shared_connection ? 0 : 1}},
    };
    grpc_channel_args cargs = {sizeof(args) / sizeof(args[0]), args};
    grpc_channel_credentials *creds;
    rpc_channel_t *ch;

    if (target == NULL || !valid_target(target))
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "'%s' is not a valid address (expected HOST:PORT)", target);
    rpc_tune_malloc();
    ch = calloc(1, sizeof(*ch));
    if (ch == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory creating a channel");
    snprintf(ch->target, sizeof(ch->target), "%s", target);
    ch->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : RPC_DEFAULT_TIMEOUT_MS;
    creds = rpc_security_enabled() ? rpc_security_channel_creds(err)
                                   : grpc_insecure_credentials_create();
    if (creds == NULL) {
        free(ch);
        return STATUS_BAD_CONFIG;
    }
    ch->channel = grpc_channel_create(target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    for (int i = 0; i < RPC_METHOD_COUNT_; i++)
        ch->registered[i] = grpc_channel_register_call(
            ch->channel, rpc_method_get((rpc_method_id_t)i)->path, NULL, NULL);
    *ret_channel = ch;
    return STATUS_OK;
}

void rpc_channel_free(rpc_channel_t *ch)
{
    if (ch == NULL)
        return;
    grpc_channel_destroy(ch->channel);
    free(ch);
}

const char *rpc_channel_target(const rpc_channel_t *ch)
{
    return ch->target;
}

void rpc_channel_reset_backoff(rpc_channel_t *ch)
{
    grpc_channel_reset_connect_backoff(ch->channel);
}

/* Fills err from a finished call's status, message and trailing metadata (rpc_internal.h). */
void rpc_error_fill(rpc_error_t *err, grpc_status_code code, grpc_slice details,
                    const char *error_string, const grpc_metadata_array *trailing,
                    const char *target, const char *path)
{
    size_t n = GRPC_SLICE_LENGTH(details);

    memset(err, 0, sizeof(*err));
    err->grpc_code = (int)code;
    err->status = status_from_grpc((int)code);
    if (n >= sizeof(err->message))
        n = sizeof(err->message) - 1;
    memcpy(err->message, GRPC_SLICE_START_PTR(details), n);
    err->message[n] = '\0';
    if (n == 0)
        snprintf(err->message, sizeof(err->message), "%s",
                 error_string ? error_string : "no message");
    snprintf(err->task, sizeof(err->task), "%s", target);
    for (size_t i = 0; i < trailing->count; i++) {
        const grpc_metadata *md = &trailing->metadata[i];
        Tessera__V1__ErrorDetail *d;
        if (grpc_slice_str_cmp(md->key, RPC_ERROR_DETAIL_KEY) != 0)
            continue;
        d = tessera__v1__error_detail__unpack(NULL, GRPC_SLICE_LENGTH(md->value),
                                              GRPC_SLICE_START_PTR(md->value));
        if (d == NULL)
            break;
        if (d->status != NULL) {
            for (int s = 0; s < STATUS_COUNT_; s++)
                if (strcmp(d->status, status_name((status_t)s)) == 0)
                    err->status = (status_t)s;
        }
        if (d->task != NULL) {
            static const char *const types[] = {"task", "chief",     "worker",
                                                "ps",   "evaluator", "client"};
            int t = d->task->type >= 0 && d->task->type <= 5 ? (int)d->task->type : 0;
            snprintf(err->task, sizeof(err->task), "%s %d (%s)", types[t], d->task->index,
                     d->task->address ? d->task->address : target);
        }
        err->fault = (int)d->fault;
        snprintf(err->culprit, sizeof(err->culprit), "%s", d->culprit ? d->culprit : "");
        tessera__v1__error_detail__free_unpacked(d, NULL);
        break;
    }
    if (code == GRPC_STATUS_UNAVAILABLE && !rpc_security_enabled() &&
        strstr(err->message, "Socket closed") != NULL) {
        /* What a plaintext client sees of a mutual-TLS server, which says nothing else. */
        size_t len = strlen(err->message);
        snprintf(err->message + len, sizeof(err->message) - len,
                 " (if the cluster uses mutual TLS, give --tls-cert, --tls-key and --tls-ca)");
    }
    if (code == GRPC_STATUS_UNAVAILABLE || code == GRPC_STATUS_DEADLINE_EXCEEDED)
        LOG_DEBUG(RPC, "%s on %s: %s", path, target, err->message);
}

typedef struct call_state {
    grpc_metadata_array initial, trailing;
    grpc_byte_buffer *resp_bb;
    grpc_status_code code;
    grpc_slice details;
    const char *error_string;
    bool trailing_held; /* we hold refs on the trailing metadata slices */
} call_state_t;

/* The received metadata slices belong to the call and go with its last unref: take our own
 * refs on the trailing ones, which rpc_error_fill reads after the call is gone. */
static void hold_trailing(call_state_t *st)
{
    for (size_t i = 0; i < st->trailing.count; i++) {
        grpc_slice_ref(st->trailing.metadata[i].key);
        grpc_slice_ref(st->trailing.metadata[i].value);
    }
    st->trailing_held = true;
}

/* Runs one unary call on its own completion queue and waits for it. */
static status_t run_call(rpc_channel_t *ch, void *registered, const char *path,
                         grpc_byte_buffer *req_bb, int64_t timeout_ms, const _Atomic bool *cancel,
                         call_state_t *st)
{
    grpc_completion_queue *cq;
    gpr_timespec deadline = rpc_deadline_ms(timeout_ms);

    if (cancel != NULL && atomic_load(cancel)) { /* cancelled before it started */
        st->code = GRPC_STATUS_CANCELLED;
        return STATUS_OK;
    }
    cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_call *call;
    grpc_op ops[6];
    grpc_event ev;
    int tag;

    if (registered != NULL)
        call = grpc_channel_create_registered_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                                   registered, deadline, NULL);
    else
        call = grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                        grpc_slice_from_static_string(path), NULL, deadline, NULL);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = req_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &st->initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &st->resp_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &st->trailing;
    ops[5].data.recv_status_on_client.status = &st->code;
    ops[5].data.recv_status_on_client.status_details = &st->details;
    ops[5].data.recv_status_on_client.error_string = &st->error_string;
    if (grpc_call_start_batch(call, ops, 6, &tag, NULL) != GRPC_CALL_OK) {
        grpc_call_unref(call);
        grpc_completion_queue_shutdown(cq);
        grpc_completion_queue_destroy(cq);
        return STATUS_INTERNAL;
    }
    if (cancel == NULL) {
        ev = grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    } else {
        bool cancelled = false;
        /* in slices, looking at the flag between them; once cancelled, the status op completes */
        while (
            (ev = grpc_completion_queue_pluck(cq, &tag, rpc_deadline_ms(RPC_CANCEL_POLL_MS), NULL))
                .type == GRPC_QUEUE_TIMEOUT)
            if (!cancelled && atomic_load(cancel)) {
                grpc_call_cancel(call, NULL);
                cancelled = true;
            }
    }
    (void)ev; /* the status op always reports success: the status code says what happened */
    hold_trailing(st);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    return STATUS_OK;
}

static void call_state_done(call_state_t *st)
{
    for (size_t i = 0; st->trailing_held && i < st->trailing.count; i++) {
        grpc_slice_unref(st->trailing.metadata[i].key);
        grpc_slice_unref(st->trailing.metadata[i].value);
    }
    grpc_metadata_array_destroy(&st->initial);
    grpc_metadata_array_destroy(&st->trailing);
    if (st->resp_bb != NULL)
        grpc_byte_buffer_destroy(st->resp_bb);
    grpc_slice_unref(st->details);
    gpr_free((void *)st->error_string);
}

static void call_state_init(call_state_t *st)
{
    memset(st, 0, sizeof(*st));
    grpc_metadata_array_init(&st->initial);
    grpc_metadata_array_init(&st->trailing);
    st->details = grpc_empty_slice();
}

status_t rpc_unary(rpc_channel_t *ch, rpc_method_id_t id, const ProtobufCMessage *req,
                   const rpc_call_opts_t *opts, ProtobufCMessage **ret_resp,
                   rpc_payload_t *ret_payload, rpc_error_t *err)
{
    const rpc_method_t *m = rpc_method_get(id);
    rpc_call_opts_t o = opts ? *opts : (rpc_call_opts_t){0};
    rpc_release_tracker_t tracker;
    grpc_byte_buffer *req_bb;
    call_state_t st;
    size_t len;
    status_t rc;
    rpc_error_t local_err;

    if (err == NULL)
        err = &local_err;
    memset(err, 0, sizeof(*err));
    if (m == NULL || m->kind != RPC_KIND_UNARY || req->descriptor != m->request) {
        err->status = STATUS_INVALID_USAGE;
        snprintf(err->message, sizeof(err->message), "rpc_unary: bad method or request type");
        return err->status;
    }
    if (o.n_payload > 0 && !rpc_has_payload_field(m->request)) {
        err->status = STATUS_INVALID_USAGE;
        snprintf(err->message, sizeof(err->message), "%s: request has no payload field", m->path);
        return err->status;
    }
    rpc_tracker_init(&tracker);
    rc = rpc_encode(req, o.payload, o.n_payload, &tracker, &req_bb, &len);
    if (rc != STATUS_OK) {
        rpc_tracker_wait_done(&tracker);
        err->status = rc;
        snprintf(err->message, sizeof(err->message), "%s: cannot encode the request", m->path);
        return rc;
    }
    call_state_init(&st);
    rc = run_call(ch, ch->registered[id], m->path, req_bb,
                  o.timeout_ms > 0 ? o.timeout_ms : ch->timeout_ms, o.cancel, &st);
    grpc_byte_buffer_destroy(req_bb);
    rpc_tracker_wait_done(&tracker);
    if (rc == STATUS_OK && st.code != GRPC_STATUS_OK) {
        rpc_error_fill(err, st.code, st.details, st.error_string, &st.trailing, ch->target,
                       m->path);
        rc = err->status == STATUS_OK ? STATUS_RPC : err->status;
    } else if (rc == STATUS_OK && st.resp_bb == NULL) {
        err->status = rc = STATUS_RPC;
        snprintf(err->message, sizeof(err->message), "%s on %s: no response message", m->path,
                 ch->target);
    } else if (rc == STATUS_OK) {
        status_msg_t why = {0};
        rc = rpc_decode(m->response, st.resp_bb, o.recv_buf, o.recv_cap, false, ret_resp,
                        ret_payload, &why);
        if (rc != STATUS_OK) {
            err->status = rc;
            snprintf(err->message, sizeof(err->message),
                     "%s on %s: the response is refused: %.200s", m->path, ch->target, why.text);
        }
    }
    call_state_done(&st);
    return rc;
}

status_t rpc_unary_raw(rpc_channel_t *ch, const char *path, const void *body, size_t len,
                       int64_t timeout_ms, rpc_error_t *err)
{
    grpc_slice s = grpc_slice_from_copied_buffer(body, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    call_state_t st;
    status_t rc;

    grpc_slice_unref(s);
    call_state_init(&st);
    rc = run_call(ch, NULL, path, bb, timeout_ms > 0 ? timeout_ms : ch->timeout_ms, NULL, &st);
    grpc_byte_buffer_destroy(bb);
    memset(err, 0, sizeof(*err));
    if (rc == STATUS_OK && st.code != GRPC_STATUS_OK) {
        rpc_error_fill(err, st.code, st.details, st.error_string, &st.trailing, ch->target, path);
        rc = err->status == STATUS_OK ? STATUS_RPC : err->status;
    }
    call_state_done(&st);
    return rc;
}

/* ---- server streams ----------------------------------------------------------------------- */

/* One server-streaming call on its own completion queue, driven by the thread that calls
 * rpc_stream_next: at most one batch of each kind (status, send, receive) in flight. */
struct rpc_stream {
    rpc_channel_t *ch;
    const rpc_method_t *method;
    grpc_completion_queue *cq;
    grpc_call *call;
    int t_status, t_send, t_recv; /* tags: their addresses */
    bool status_pending, send_pending, recv_pending;
    bool status_done; /* the final status arrived */
    bool eof;         /* no more messages will come */
    bool initial_md;  /* the next receive also takes the initial metadata */
    grpc_byte_buffer *req_bb, *recv_bb;
    call_state_t st; /* initial and trailing metadata, status */
    rpc_error_t final;
    bool have_final;
};

static bool stream_post_recv(rpc_stream_t *s)
{
    grpc_op ops[2];
    size_t n = 0;

    memset(ops, 0, sizeof(ops));
    if (s->initial_md) {
        /* Pitfall: without it a trailers-only answer (an error, no message) never completes. */
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n++].data.recv_initial_metadata.recv_initial_metadata = &s->st.initial;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &s->recv_bb;
    if (grpc_call_start_batch(s->call, ops, n, &s->t_recv, NULL) != GRPC_CALL_OK)
        return false;
    s->initial_md = false;
    s->recv_pending = true;
    return true;
}

/* Starts the three batches of a server-streaming call: the status first, then the request with
 * the half-close, then the first receive. */
static status_t stream_start(rpc_stream_t *s)
{
    grpc_op ops[3];

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &s->st.trailing;
    ops[0].data.recv_status_on_client.status = &s->st.code;
    ops[0].data.recv_status_on_client.status_details = &s->st.details;
    ops[0].data.recv_status_on_client.error_string = &s->st.error_string;
    if (grpc_call_start_batch(s->call, ops, 1, &s->t_status, NULL) != GRPC_CALL_OK)
        return STATUS_INTERNAL;
    s->status_pending = true;

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = s->req_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    if (grpc_call_start_batch(s->call, ops, 3, &s->t_send, NULL) != GRPC_CALL_OK)
        return STATUS_INTERNAL;
    s->send_pending = true;

    s->initial_md = true;
    return stream_post_recv(s) ? STATUS_OK : STATUS_INTERNAL;
}

status_t rpc_stream_open(rpc_channel_t *ch, rpc_method_id_t id, const ProtobufCMessage *req,
                         int64_t timeout_ms, rpc_stream_t **ret, rpc_error_t *err)
{
    const rpc_method_t *m = rpc_method_get(id);
    gpr_timespec deadline;
    rpc_error_t local_err;
    rpc_stream_t *s;
    size_t len;
    status_t rc;

    if (err == NULL)
        err = &local_err;
    memset(err, 0, sizeof(*err));
    if (ch == NULL || ret == NULL || m == NULL || m->kind != RPC_KIND_SERVER_STREAM ||
        req == NULL || req->descriptor != m->request || timeout_ms < 0) {
        err->status = STATUS_INVALID_USAGE;
        snprintf(err->message, sizeof(err->message),
                 "rpc_stream_open: bad method, request type or timeout");
        return err->status;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        err->status = STATUS_NO_MEMORY;
        snprintf(err->message, sizeof(err->message), "%s: out of memory", m->path);
        return err->status;
    }
    s->ch = ch;
    s->method = m;
    call_state_init(&s->st);
    rc = rpc_encode(req, NULL, 0, NULL, &s->req_bb, &len);
    if (rc != STATUS_OK) {
        call_state_done(&s->st);
        free(s);
        err->status = rc;
        snprintf(err->message, sizeof(err->message), "%s: cannot encode the request", m->path);
        return rc;
    }
    deadline = timeout_ms > 0 ? rpc_deadline_ms(timeout_ms) : gpr_inf_future(GPR_CLOCK_MONOTONIC);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    s->call = grpc_channel_create_registered_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq,
                                                  ch->registered[id], deadline, NULL);
    rc = stream_start(s);
    if (rc != STATUS_OK) {
        rpc_stream_free(s);
        err->status = rc;
        snprintf(err->message, sizeof(err->message), "%s on %s: cannot start the call", m->path,
                 ch->target);
        return rc;
    }
    *ret = s;
    return STATUS_OK;
}

/* Records how the stream ended, once the last message and the status are in. */
static void stream_set_final(rpc_stream_t *s)
{
    if (s->have_final)
        return;
    s->have_final = true;
    if (s->st.code == GRPC_STATUS_OK) {
        memset(&s->final, 0, sizeof(s->final));
        snprintf(s->final.task, sizeof(s->final.task), "%.*s", (int)sizeof(s->final.task) - 1,
                 s->ch->target);
        return;
    }
    rpc_error_fill(&s->final, s->st.code, s->st.details, s->st.error_string, &s->st.trailing,
                   s->ch->target, s->method->path);
    if (s->final.status == STATUS_OK)
        s->final.status = STATUS_RPC;
}

/* Ends the stream on our side with status st (a reply that does not parse). */
static void stream_fail_local(rpc_stream_t *s, status_t st, const char *what)
{
    grpc_call_cancel(s->call, NULL);
    s->have_final = true;
    memset(&s->final, 0, sizeof(s->final));
    s->final.status = st;
    snprintf(s->final.task, sizeof(s->final.task), "%.*s", (int)sizeof(s->final.task) - 1,
             s->ch->target);
    snprintf(s->final.message, sizeof(s->final.message), "%s on %s: %s", s->method->path,
             s->ch->target, what);
}

/* Takes one completion; returns false when wait_until passed first. */
static bool stream_pump(rpc_stream_t *s, gpr_timespec wait_until, grpc_byte_buffer **ret_bb)
{
    grpc_event ev = grpc_completion_queue_next(s->cq, wait_until, NULL);

    if (ev.type != GRPC_OP_COMPLETE)
        return false;
    if (ev.tag == &s->t_status) {
        s->status_pending = false;
        s->status_done = true;
    } else if (ev.tag == &s->t_send) {
        s->send_pending = false;
        grpc_byte_buffer_destroy(s->req_bb);
        s->req_bb = NULL;
    } else if (ev.tag == &s->t_recv) {
        s->recv_pending = false;
        if (ev.success && s->recv_bb != NULL) {
            *ret_bb = s->recv_bb;
            s->recv_bb = NULL;
        } else {
            s->eof = true;
        }
    }
    return true;
}

status_t rpc_stream_next(rpc_stream_t *s, ProtobufCMessage **ret_msg, rpc_payload_t *ret_payload,
                         int64_t wait_ms, rpc_error_t *err)
{
    gpr_timespec until =
        wait_ms < 0 ? gpr_inf_future(GPR_CLOCK_MONOTONIC) : rpc_deadline_ms(wait_ms);
    rpc_error_t local_err;

    if (err == NULL)
        err = &local_err;
    memset(err, 0, sizeof(*err));
    if (s == NULL || ret_msg == NULL) {
        err->status = STATUS_INVALID_USAGE;
        snprintf(err->message, sizeof(err->message), "rpc_stream_next: no stream");
        return err->status;
    }
    while (!s->have_final) {
        grpc_byte_buffer *bb = NULL;
        status_t rc;

        if (s->eof && s->status_done) {
            stream_set_final(s);
            break;
        }
        if (!stream_pump(s, until, &bb)) {
            err->status = STATUS_TIMEOUT;
            snprintf(err->message, sizeof(err->message),
                     "%s on %s: no message within %lld ms (the stream is still open)",
                     s->method->path, s->ch->target, (long long)wait_ms);
            return STATUS_TIMEOUT;
        }
        if (bb == NULL)
            continue;
        /* Ask for the next message before decoding this one, so that it can arrive meanwhile. */
        if (!stream_post_recv(s))
            s->eof = true;
        rc = rpc_decode(s->method->response, bb, NULL, 0, false, ret_msg, ret_payload, NULL);
        grpc_byte_buffer_destroy(bb);
        if (rc == STATUS_OK)
            return STATUS_OK;
        stream_fail_local(s, rc == STATUS_NO_MEMORY ? rc : STATUS_BAD_MESSAGE,
                          "a message does not parse as the response type");
    }
    *err = s->final;
    if (s->final.status == STATUS_OK)
        *ret_msg = NULL;
    return s->final.status;
}

bool rpc_stream_done(const rpc_stream_t *s)
{
    return s->have_final;
}

void rpc_stream_cancel(rpc_stream_t *s)
{
    if (s != NULL && s->call != NULL)
        grpc_call_cancel(s->call, NULL);
}

void rpc_stream_free(rpc_stream_t *s)
{
    if (s == NULL)
        return;
    if (s->call != NULL) {
        if (!s->status_done)
            grpc_call_cancel(s->call, NULL);
        /* Every started batch must complete before the queue can go. */
        while (s->status_pending || s->send_pending || s->recv_pending) {
            grpc_byte_buffer *bb = NULL;
            stream_pump(s, gpr_inf_future(GPR_CLOCK_MONOTONIC), &bb);
            if (bb != NULL)
                grpc_byte_buffer_destroy(bb);
        }
        grpc_call_unref(s->call);
    }
    if (s->cq != NULL) {
        grpc_completion_queue_shutdown(s->cq);
        while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
            ;
        grpc_completion_queue_destroy(s->cq);
    }
    if (s->req_bb != NULL)
        grpc_byte_buffer_destroy(s->req_bb);
    if (s->recv_bb != NULL)
        grpc_byte_buffer_destroy(s->recv_bb);
    call_state_done(&s->st);
    free(s);
}
