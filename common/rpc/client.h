/* The client side of Tessera's RPC runtime (rpc/types.h): channels, unary calls with typed
 * stubs per method of the table (rpc/methods.h), and server streams. */
#ifndef TESSERA_RPC_CLIENT_H
#define TESSERA_RPC_CLIENT_H

#include <stdatomic.h>
#include <stdbool.h>

#include "rpc/types.h"

typedef struct rpc_channel rpc_channel_t;

typedef struct rpc_channel_opts {
    int64_t max_message_bytes; /* 0 = default (RPC_DEFAULT_MAX_MESSAGE) */
    int64_t timeout_ms;        /* default per-call deadline; 0 = RPC_DEFAULT_TIMEOUT_MS */
    bool shared_connection;    /* reuse a connection with other channels to the same target */
} rpc_channel_opts_t;

#define RPC_DEFAULT_MAX_MESSAGE (256LL << 20)
#define RPC_DEFAULT_TIMEOUT_MS  30000

/* Creates a channel to "host:port" (connects lazily). NULL opts = defaults. */
status_t rpc_channel_new(const char *target, const rpc_channel_opts_t *opts,
                         rpc_channel_t **ret_channel, status_msg_t *err);
void rpc_channel_free(rpc_channel_t *ch);
const char *rpc_channel_target(const rpc_channel_t *ch);

/* Makes the channel try to connect again now, not after gRPC's reconnect backoff (which grows to
 * minutes while the peer is down): for a peer known to be back, or worth asking again. */
void rpc_channel_reset_backoff(rpc_channel_t *ch);

typedef struct rpc_call_opts {
    int64_t timeout_ms;       /* 0 = the channel's default */
    const rpc_iov_t *payload; /* request payload segments */
    size_t n_payload;
    void *recv_buf; /* optional buffer for the response payload, reused across calls */
    size_t recv_cap;
    /* optional: set from another thread, it cancels the call within RPC_CANCEL_POLL_MS (the
     * call fails with STATUS_CANCELLED) */
    const _Atomic bool *cancel;
} rpc_call_opts_t;

#define RPC_CANCEL_POLL_MS 50

/* Calls a unary method and waits. On success *ret_resp is the decoded response (free with
 * protobuf_c_message_free_unpacked(resp, NULL)) and *ret_payload, when not NULL, its payload
 * (in recv_buf when it fits, else allocated; release with rpc_payload_done). On failure nothing
 * is returned and err (may be NULL) says what went wrong. Thread-safe. */
status_t rpc_unary(rpc_channel_t *ch, rpc_method_id_t id, const ProtobufCMessage *req,
                   const rpc_call_opts_t *opts, ProtobufCMessage **ret_resp,
                   rpc_payload_t *ret_payload, rpc_error_t *err);

/* Sends raw bytes as the request of a method (any path) and reports the status: for tests of
 * how servers treat malformed input. */
status_t rpc_unary_raw(rpc_channel_t *ch, const char *path, const void *body, size_t len,
                       int64_t timeout_ms, rpc_error_t *err);

/* Typed stubs from the method table, for unary methods only:
 * rpc_ps_push(ch, req, opts, &resp, &payload, &err). */
#define RPC_UNARY_STUB_SERVER_STREAM(id, stub, RqT, RsT)
#define RPC_UNARY_STUB_BIDI_STREAM(id, stub, RqT, RsT)
#define RPC_UNARY_STUB_UNARY(id, stub, RqT, RsT)                                                   \
    static inline status_t rpc_##stub(rpc_channel_t *ch, const RqT *req,                           \
                                      const rpc_call_opts_t *opts, RsT **ret_resp,                 \
                                      rpc_payload_t *ret_payload, rpc_error_t *err)                \
    {                                                                                              \
        return rpc_unary(ch, RPC_##id, &req->base, opts, (ProtobufCMessage **)ret_resp,            \
                         ret_payload, err);                                                        \
    }
#define RPC_STUB_(id, stub, svc, name, kind, callers, RqT, rqd, RsT, rsd)                          \
    RPC_UNARY_STUB_##kind(id, stub, RqT, RsT)
RPC_METHOD_LIST(RPC_STUB_)
#undef RPC_STUB_

/* A server-streaming call (one request, many responses), read by one thread at a time. */
typedef struct rpc_stream rpc_stream_t;

/* Starts a call of a server-streaming method with its request and returns at once; connection
 * failures and the server's answer show in rpc_stream_next. timeout_ms bounds the whole stream
 * (0 = no deadline). Fails only on bad arguments (STATUS_INVALID_USAGE) or lack of memory.
 * Free the stream with rpc_stream_free. Thread-safe on the channel. */
status_t rpc_stream_open(rpc_channel_t *ch, rpc_method_id_t id, const ProtobufCMessage *req,
                         int64_t timeout_ms, rpc_stream_t **ret_stream, rpc_error_t *err);

/* Waits up to wait_ms (< 0: without limit, 0: only looks) for the next message:
 * - STATUS_OK with *ret_msg set: a message (free it with protobuf_c_message_free_unpacked(msg,
 *   NULL)), and its payload in *ret_payload when not NULL (release with rpc_payload_done);
 * - STATUS_OK with *ret_msg NULL: the server ended the stream with status OK;
 * - an error: the stream ended with it, as err says (server error, cancel, deadline,
 *   unavailable peer, or a message that does not parse);
 * - STATUS_TIMEOUT with rpc_stream_done() false: nothing came within wait_ms, the stream is
 *   still open (a deadline that ended the stream is STATUS_TIMEOUT with rpc_stream_done() true).
 * Once the stream has ended, every call returns the same end again. */
status_t rpc_stream_next(rpc_stream_t *s, ProtobufCMessage **ret_msg, rpc_payload_t *ret_payload,
                         int64_t wait_ms, rpc_error_t *err);

/* True once rpc_stream_next has returned the end of the stream. */
bool rpc_stream_done(const rpc_stream_t *s);

/* Cancels the call: the server sees the client go away, rpc_stream_next returns the messages
 * already received and then STATUS_CANCELLED. Any thread, also while another is in
 * rpc_stream_next. */
void rpc_stream_cancel(rpc_stream_t *s);

/* Cancels the stream if it is still open, waits for gRPC to let go of it and frees it.
 * NULL-safe. */
void rpc_stream_free(rpc_stream_t *s);

/* Typed streams for the server-streaming methods of the table:
 * rpc_health_watch_open(ch, req, timeout_ms, &stream, &err) and
 * rpc_health_watch_next(stream, &resp, &payload, wait_ms, &err). */
#define RPC_STREAM_STUB_UNARY(stub, RqT, RsT)
#define RPC_STREAM_STUB_BIDI_STREAM(stub, RqT, RsT)
#define RPC_STREAM_STUB_SERVER_STREAM(stub, RqT, RsT)                                              \
    static inline status_t rpc_##stub##_next(rpc_stream_t *s, RsT **ret_msg,                       \
                                             rpc_payload_t *ret_payload, int64_t wait_ms,          \
                                             rpc_error_t *err)                                     \
    {                                                                                              \
        return rpc_stream_next(s, (ProtobufCMessage **)ret_msg, ret_payload, wait_ms, err);        \
    }
#define RPC_STREAM_OPEN_UNARY(id, stub, RqT)
#define RPC_STREAM_OPEN_BIDI_STREAM(id, stub, RqT)
#define RPC_STREAM_OPEN_SERVER_STREAM(id, stub, RqT)                                               \
    static inline status_t rpc_##stub##_open(rpc_channel_t *ch, const RqT *req,                    \
                                             int64_t timeout_ms, rpc_stream_t **ret_stream,        \
                                             rpc_error_t *err)                                     \
    {                                                                                              \
        return rpc_stream_open(ch, RPC_##id, &req->base, timeout_ms, ret_stream, err);             \
    }
#define RPC_STREAM_STUBS_(id, stub, svc, name, kind, callers, RqT, rqd, RsT, rsd)                  \
    RPC_STREAM_OPEN_##kind(id, stub, RqT) RPC_STREAM_STUB_##kind(stub, RqT, RsT)
RPC_METHOD_LIST(RPC_STREAM_STUBS_)
#undef RPC_STREAM_STUBS_

#endif
