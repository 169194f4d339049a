/* Tessera's RPC runtime on the gRPC C core: servers, channels, unary calls and server streams
 * with protobuf-c messages and zero-copy tensor payloads.
 *
 * Payloads. Messages that carry tensor bytes have a top-level `bytes payload = 15` field (see
 * proto/tessera/v1/common.proto). Callers never fill that field: they pass the bytes as a list
 * of segments (rpc_iov_t), which are sent straight from their memory after the packed small
 * fields, and they read received bytes through rpc_payload_t / rpc_ctx_payload(), filled with a
 * single copy into a 64-byte-aligned buffer. The decoded message's payload field stays empty.
 *
 * Memory. The first rpc_server_new() or rpc_channel_new() raises glibc's malloc trim threshold
 * (64 MiB) and pins its mmap threshold (32 MiB) for the whole process, so that the memory of
 * large received messages is reused instead of being returned to the kernel and faulted in
 * again for every message (2x faster bulk receives). It leaves both alone when
 * MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES set them.
 *
 * Threads. A server runs N handler threads, each with its own completion queue; a call stays on
 * the thread that accepted it and its handler runs there. A handler that will take long (or
 * waits on other calls) defers its reply with rpc_ctx_defer() and answers later from any thread.
 * Channels are thread-safe; any number of threads may call through one channel at once. */
#ifndef TESSERA_RPC_H
#define TESSERA_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "rpc_methods.h"
#include "status.h"

/* One segment of an outgoing payload. When `release` is NULL the memory must stay valid and
 * unchanged until the call that sends it has finished (rpc_unary returns only once gRPC has let
 * go of it; a server reply must use memory that outlives the server, or a release callback).
 * Otherwise gRPC calls release(arg) once, on any thread, when it no longer needs the bytes. */
typedef struct rpc_iov {
    const void *base;
    size_t len;
    void (*release)(void *arg);
    void *arg;
} rpc_iov_t;

/* A received payload. `data` is 64-byte aligned, or NULL when len is 0. */
typedef struct rpc_payload {
    void *data;
    size_t len;
    bool owned; /* free with rpc_payload_done() */
} rpc_payload_t;

void rpc_payload_done(rpc_payload_t *p);

/* A buffer for a payload, 64-byte aligned; one of 32 MiB or more lies on transparent huge
 * pages where the kernel allows, which makes its first touch several times cheaper. Release it
 * with free(). */
void *rpc_buffer_alloc(size_t len);

/* Milliseconds on the monotonic clock. */
int64_t rpc_now_ms(void);

/* What failed in a call, for the caller to log or show. */
typedef struct rpc_error {
    status_t status;
    int grpc_code;
    char message[512]; /* the server's message, or the transport's */
    char task[96];     /* "ps 1 (127.0.0.1:2223)" when the server named itself */
    int fault;         /* Tessera__V1__Fault */
    char culprit[128]; /* variable, key or field at fault, when the server named one */
} rpc_error_t;

/* ------------------------------------------------------------------------------------------ */
/* Server                                                                                       */

typedef struct rpc_server rpc_server_t;
typedef struct rpc_ctx rpc_ctx_t;

typedef struct rpc_server_opts {
    const char *listen;        /* "host:port"; port 0 = pick one */
    int threads;               /* handler threads, >= 1 */
    int64_t max_message_bytes; /* receive and send limit */
    int task_type;             /* Tessera__V1__TaskType, named in error details */
    int task_index;
} rpc_server_opts_t;

/* A handler runs on a server thread with the decoded request (payload field empty: see
 * rpc_ctx_payload). It either answers with rpc_ctx_respond() and returns STATUS_OK; or returns an
 * error status, after rpc_ctx_fail() has given the sentence; or calls rpc_ctx_defer() and returns
 * STATUS_OK, then answers later. `req` is valid until the handler returns. A handler of a
 * server-streaming method (RPC_KIND_SERVER_STREAM) fails the same way, or defers and then
 * streams (rpc_ctx_stream_send, rpc_ctx_stream_finish). */
typedef status_t (*rpc_handler_cb)(rpc_ctx_t *ctx, const ProtobufCMessage *req, void *user);

/* Creates a server listening on opts->listen. Fails with STATUS_ADDRESS_IN_USE when the port
 * is taken (port sharing is off) and err names the address. Call grpc_init() first. */
status_t rpc_server_new(const rpc_server_opts_t *opts, rpc_server_t **ret_server,
                        status_msg_t *err);

/* Installs the handler of a method; before rpc_server_start only. Methods without a handler
 * answer UNIMPLEMENTED. */
void rpc_server_handle(rpc_server_t *s, rpc_method_id_t id, rpc_handler_cb cb, void *user);

/* Starts the handler threads. */
status_t rpc_server_start(rpc_server_t *s, status_msg_t *err);

/* The bound port. */
int rpc_server_port(const rpc_server_t *s);

/* True when every handler thread has come back to its queue within max_age_ms (watchdog). */
bool rpc_server_alive(const rpc_server_t *s, int64_t max_age_ms);

/* Stops accepting calls, lets running calls (open streams included) finish for up to grace_ms,
 * cancels the rest, joins the threads and frees the server. Deferred calls must be answered or
 * finished by then: their done callbacks (rpc_ctx_on_done) run during the shutdown at the
 * latest, and it waits up to a second more for other threads to finish them (a call never
 * finished is reported and leaked). NULL-safe. */
void rpc_server_shutdown(rpc_server_t *s, int64_t grace_ms);

/* The counters kept per method, for metrics. */
typedef struct rpc_method_stats {
    uint64_t calls, errors, bytes_in, bytes_out;
    double seconds; /* summed handler + transfer time */
} rpc_method_stats_t;
void rpc_server_stats(const rpc_server_t *s, rpc_method_id_t id, rpc_method_stats_t *ret);

/* Received payload of the call; valid until the reply is sent. */
const void *rpc_ctx_payload(const rpc_ctx_t *ctx, size_t *ret_len);

/* Takes the received payload out of the call: the caller owns it (free()). */
void *rpc_ctx_take_payload(rpc_ctx_t *ctx, size_t *ret_len);

const rpc_method_t *rpc_ctx_method(const rpc_ctx_t *ctx);

/* Milliseconds left before the client's deadline (INT64_MAX when it set none). */
int64_t rpc_ctx_remaining_ms(const rpc_ctx_t *ctx);

/* True once the client cancelled, its deadline passed, or the server cancelled the call at
 * shutdown. Thread-safe while the caller holds the call (deferred and not yet finished). */
bool rpc_ctx_cancelled(const rpc_ctx_t *ctx);

/* Calls cb(arg) once, on a server thread, when the call is over: answered or finished and
 * delivered, cancelled by the client, past its deadline, or cancelled at shutdown. If the call
 * is over already, cb runs at once on the calling thread. The context is valid inside cb, so a
 * stream producer unregisters there and calls rpc_ctx_stream_finish. One callback per call (a
 * later one replaces it); cb must not block. */
void rpc_ctx_on_done(rpc_ctx_t *ctx, void (*cb)(void *arg), void *arg);

/* Sends the reply: resp (its payload field left empty) followed by the payload segments. */
status_t rpc_ctx_respond(rpc_ctx_t *ctx, const ProtobufCMessage *resp, const rpc_iov_t *iov,
                         size_t n_iov);

/* Records the error to send when the handler returns a failing status (or, for a deferred call,
 * sends it now when `now` is set). `culprit` may be NULL. Returns s. */
status_t rpc_ctx_fail(rpc_ctx_t *ctx, status_t s, const char *culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void rpc_ctx_fail_now(rpc_ctx_t *ctx, status_t s, const char *culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The handler will answer later (rpc_ctx_respond or rpc_ctx_fail_now, from any thread, once; a
 * stream with rpc_ctx_stream_send and rpc_ctx_stream_finish). Call it from the handler. */
void rpc_ctx_defer(rpc_ctx_t *ctx);

/* Server streaming. After rpc_ctx_defer, any thread may send messages, one call at a time or
 * concurrently; they go out in the order of the calls, one in flight at a time. Messages wait
 * in a queue of at most RPC_STREAM_QUEUE_MAX messages and RPC_STREAM_QUEUE_MAX_BYTES (a single
 * message of any size is always accepted when nothing is queued). */
#define RPC_STREAM_QUEUE_MAX       64
#define RPC_STREAM_QUEUE_MAX_BYTES (64u << 20)

/* Queues msg (the method's response type) and its payload segments (only when the response has
 * a payload field) to be sent on the stream. The segments are handed over whatever the result:
 * their release callbacks run once gRPC is done with them, or before this returns when the
 * message is refused; segments without one must stay valid until the server shuts down.
 * Fails with STATUS_RESOURCE_EXHAUSTED when the queue is full (the client reads too slowly:
 * drop the message, retry later, or finish the stream with the error), STATUS_CANCELLED when the
 * call is over or the server is shutting down (stop producing and finish), STATUS_INVALID_USAGE
 * when ctx is not a deferred stream, is finished, or msg has the wrong type. */
status_t rpc_ctx_stream_send(rpc_ctx_t *ctx, const ProtobufCMessage *msg, const rpc_iov_t *iov,
                             size_t n_iov);

/* Ends the stream with status s (STATUS_OK, or an error with the sentence fmt; fmt is ignored
 * for STATUS_OK and may be NULL) after the queued messages, and drops the reference that
 * rpc_ctx_defer took: ctx must not be used afterwards, except inside its done callback. Every
 * deferred stream must be finished, also after the client went away (then nothing is sent); a
 * second call is ignored, which is safe only inside the done callback, where ctx is still
 * valid. Any thread. */
void rpc_ctx_stream_finish(rpc_ctx_t *ctx, status_t s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------------------------------ */
/* Client                                                                                       */

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

typedef struct rpc_call_opts {
    int64_t timeout_ms;       /* 0 = the channel's default */
    const rpc_iov_t *payload; /* request payload segments */
    size_t n_payload;
    void *recv_buf; /* optional buffer for the response payload, reused across calls */
    size_t recv_cap;
} rpc_call_opts_t;

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
#define RPC_STUB_(id, stub, svc, name, kind, RqT, rqd, RsT, rsd)                                   \
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
#define RPC_STREAM_STUBS_(id, stub, svc, name, kind, RqT, rqd, RsT, rsd)                           \
    RPC_STREAM_OPEN_##kind(id, stub, RqT) RPC_STREAM_STUB_##kind(stub, RqT, RsT)
RPC_METHOD_LIST(RPC_STREAM_STUBS_)
#undef RPC_STREAM_STUBS_

/* Routes gRPC's own log lines into Tessera's log (subsystem grpc). Call before grpc_init(). */
void rpc_log_init(void);

#endif
