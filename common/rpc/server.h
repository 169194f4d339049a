/* The server side of Tessera's RPC runtime (rpc/types.h): handlers per method of the table
 * (rpc/methods.h), deferred replies and server streams. */
#ifndef TESSERA_RPC_SERVER_H
#define TESSERA_RPC_SERVER_H

#include "rpc/types.h"

typedef struct rpc_server rpc_server_t;
typedef struct rpc_ctx rpc_ctx_t;

typedef struct rpc_server_opts {
    const char *listen; /* "host:port"; port 0 = pick one */
    /* With mutual TLS on (rpc/security.h): a second, plaintext "host:port" that answers only
     * grpc.health.v1.Health (for Kubernetes probes); NULL = none. Refused without TLS, where
     * the main port answers health checks itself. */
    const char *health_listen;
    int threads;               /* handler threads, >= 1 */
    int64_t max_message_bytes; /* receive and send limit */
    int task_type;             /* Tessera__V1__TaskType, named in error details */
    int max_calls_per_peer;    /* calls one host may have in flight; 0: no limit */
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

/* The handler of method id reads its request payload where gRPC received it, in pieces
 * (rpc_ctx_take_payload_pieces), instead of from one aligned copy: before rpc_server_start. */
void rpc_server_payload_in_place(rpc_server_t *s, rpc_method_id_t id);

/* Starts the handler threads. */
status_t rpc_server_start(rpc_server_t *s, status_msg_t *err);

/* The bound port. */
int rpc_server_port(const rpc_server_t *s);

/* The bound plaintext health port, 0 without one. */
int rpc_server_health_port(const rpc_server_t *s);

/* How often an idle handler thread comes back from its queue, at least. */
#define RPC_SERVER_WAKE_MS 500

/* True when every handler thread has come back to its queue within max_age_ms (watchdog; less
 * than RPC_SERVER_WAKE_MS may find an idle thread late). */
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
    uint64_t denied; /* refused before the handler: no TLS, or the caller's role may not */
    double seconds;  /* summed handler + transfer time */
    /* Its parts, summed: from the accept to the whole request's arrival (the request on the
     * wire), decoding it (the payload assembled from gRPC's slices, the message unpacked), the
     * handler; the rest of `seconds` is the reply's encoding and sending. */
    double receive_seconds, decode_seconds, handle_seconds;
} rpc_method_stats_t;
void rpc_server_stats(const rpc_server_t *s, rpc_method_id_t id, rpc_method_stats_t *ret);

/* Received payload of the call; valid until the reply is sent. NULL for a payload read in
 * place (use rpc_ctx_take_payload_pieces). */
const void *rpc_ctx_payload(const rpc_ctx_t *ctx, size_t *ret_len);

/* Takes the received payload out of the call: the caller owns it (free()). NULL for a payload
 * read in place. */
void *rpc_ctx_take_payload(rpc_ctx_t *ctx, size_t *ret_len);

/* Takes the received payload out of the call, read in place or not (rpc_payload_pieces reads
 * either): the caller releases it with rpc_payload_done(). */
void rpc_ctx_take_payload_pieces(rpc_ctx_t *ctx, rpc_payload_t *ret);

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

#endif
