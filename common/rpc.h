/* Tessera's RPC runtime on the gRPC C core: servers, channels and unary calls with protobuf-c
 * messages and zero-copy tensor payloads.
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
 * STATUS_OK, then answers later. `req` is valid until the handler returns. */
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

/* Stops accepting calls, lets running calls finish for up to grace_ms, cancels the rest, joins
 * the threads and frees the server. NULL-safe. */
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

/* True once the client cancelled or its deadline passed. */
bool rpc_ctx_cancelled(const rpc_ctx_t *ctx);

/* Sends the reply: resp (its payload field left empty) followed by the payload segments. */
status_t rpc_ctx_respond(rpc_ctx_t *ctx, const ProtobufCMessage *resp, const rpc_iov_t *iov,
                         size_t n_iov);

/* Records the error to send when the handler returns a failing status (or, for a deferred call,
 * sends it now when `now` is set). `culprit` may be NULL. Returns s. */
status_t rpc_ctx_fail(rpc_ctx_t *ctx, status_t s, const char *culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void rpc_ctx_fail_now(rpc_ctx_t *ctx, status_t s, const char *culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The handler will answer later (rpc_ctx_respond or rpc_ctx_fail_now, from any thread, once). */
void rpc_ctx_defer(rpc_ctx_t *ctx);

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

/* Typed stubs from the method table: rpc_ps_push(ch, req, opts, &resp, &payload, &err). */
#define RPC_STUB_(id, stub, svc, name, kind, RqT, rqd, RsT, rsd)                                   \
    static inline status_t rpc_##stub(rpc_channel_t *ch, const RqT *req,                           \
                                      const rpc_call_opts_t *opts, RsT **ret_resp,                 \
                                      rpc_payload_t *ret_payload, rpc_error_t *err)                \
    {                                                                                              \
        return rpc_unary(ch, RPC_##id, &req->base, opts, (ProtobufCMessage **)ret_resp,            \
                         ret_payload, err);                                                        \
    }
RPC_METHOD_LIST(RPC_STUB_)
#undef RPC_STUB_

/* Routes gRPC's own log lines into Tessera's log (subsystem grpc). Call before grpc_init(). */
void rpc_log_init(void);

#endif
