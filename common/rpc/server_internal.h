/* The server runtime's internals, shared by server.c (method table, accepting, dispatch,
 * lifetime), server_context.c (a call's context: lifetime, batches, accessors), server_reply.c
 * (replies, errors, server streams) and offline.c (calls run without a network). Not for use
 * outside common/rpc/server*.c and offline.c. Dependencies run one way:
 * context <- reply <- server <- offline. */
#ifndef TESSERA_RPC_SERVER_INTERNAL_H
#define TESSERA_RPC_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "rpc/internal.h"

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

/* Calls in flight per peer host (server_peers.c), under mu. */
typedef struct server_peers {
    pthread_mutex_t mu;
    struct {
        char host[64];
        int calls; /* 0: a free slot */
    } * slots;
    size_t n, cap;
} server_peers_t;

typedef struct method_counters {
    _Atomic uint64_t calls, errors, bytes_in, bytes_out, micros, denied;
    /* the parts of micros up to the handler's return (rpc_method_stats_t) */
    _Atomic uint64_t receive_micros, decode_micros, handle_micros;
} method_counters_t;

struct rpc_server {
    grpc_server *server;
    grpc_completion_queue *shutdown_cq;
    server_thread_t *threads;
    int n_threads;
    int port, health_port;
    int max_calls_per_peer; /* 0: no limit */
    int64_t max_message_bytes;
    server_peers_t peers;
    int task_type, task_index;
    char address[128];
    struct {
        rpc_handler_cb cb;
        void *user;
        bool in_place; /* rpc_server_payload_in_place */
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
    double respond_at; /* when the handler called rpc_ctx_respond (0: not yet) */
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
    int peer_slot; /* in server.peers, -1: not counted */
};

/* ---- calls in flight per peer (server_peers.c) ---- */

/* Counts c against its peer host; false (the error recorded in c) past the limit. */
bool server_peer_enter(rpc_ctx_t *c);
void server_peer_leave(rpc_ctx_t *c); /* once the call is over; idempotent */
void server_peers_done(server_peers_t *t);

/* ---- a call's context (server_context.c) ---- */

/* A fresh context for a call accepted on thread t, holding one reference. */
rpc_ctx_t *server_ctx_new(rpc_server_t *s, server_thread_t *t);

/* References: the last server_ctx_unref frees the context, counting its time in the method's
 * counters; server_ctx_free frees one at once (an accept gRPC refused). */
void server_ctx_free(rpc_ctx_t *c);
void server_ctx_ref(rpc_ctx_t *c);
void server_ctx_unref(rpc_ctx_t *c);

/* Counts the call in its method's counters, once: when its final status is handed to gRPC, or
 * at the end for calls that never got that far. */
void server_count_call(rpc_ctx_t *c);

/* Starts a batch holding a reference for its completion; false (and no reference) once
 * rpc_server_shutdown has closed the queues, or when gRPC refuses it. */
bool server_start_batch(rpc_ctx_t *c, const grpc_op *ops, size_t n, tag_t *tag);

/* ---- replies and streams (server_reply.c) ---- */

/* Sends the call's recorded failure as its status. */
void server_send_error(rpc_ctx_t *c);

/* Fills op with the SEND_STATUS_FROM_SERVER of the call's recorded failure, its error detail as
 * trailing metadata, and logs it. The slices live in the context until it is freed. */
void server_error_status_op(rpc_ctx_t *c, grpc_op *op);

/* TAG_STREAM: one message went out (or the call broke); send the next, or the status. */
void server_stream_sent(rpc_ctx_t *c, bool ok);

/* Moves every queued message into out (RPC_STREAM_QUEUE_MAX entries) and returns how many, for
 * the caller to destroy with server_destroy_buffers once c->mu is released: destroying a byte
 * buffer runs the senders' release callbacks, which may take locks of their own. */
size_t server_stream_drain_locked(rpc_ctx_t *c, grpc_byte_buffer **out);
void server_destroy_buffers(grpc_byte_buffer **bbs, size_t n);

/* ---- dispatch (server.c) ---- */

/* TAG_RECV: the request arrived (ok) or the call ended first; decodes it and runs the handler. */
void server_on_recv(rpc_ctx_t *c, bool ok);

#endif
