/* Running a server's handlers without gRPC: an "offline" server holds handlers like any other
 * (rpc_server_handle) but listens nowhere; rpc_offline_call decodes a request exactly as a served
 * call would (rpc_decode, then the handler, then the error detail a client would receive), and
 * keeps the encoded reply instead of sending it. For the fuzz targets in tests/fuzz/, which
 * feed request bytes to the real handlers; not for production use.
 *
 * Not thread-safe: one call at a time per offline server. Handlers that defer their answer
 * (rpc_ctx_defer) and streaming methods are not supported. */
#ifndef TESSERA_RPC_OFFLINE_H
#define TESSERA_RPC_OFFLINE_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/byte_buffer.h>

#include "rpc/server.h"

/* What a client would have received. */
typedef struct rpc_offline_result {
    status_t status;         /* STATUS_OK: the handler replied with `reply` */
    grpc_byte_buffer *reply; /* the encoded reply (caller's), NULL on failure */
    char text[512];          /* the failure's sentence, as sent */
    char culprit[128];
    uint8_t *detail; /* the packed Tessera__V1__ErrorDetail of a failure (caller's, malloc) */
    size_t detail_len;
} rpc_offline_result_t;

/* A server with no network and no threads, naming itself as task_type/task_index in error
 * details. NULL when out of memory. Free with rpc_offline_server_free, not rpc_server_shutdown. */
rpc_server_t *rpc_offline_server_new(int task_type, int task_index);
void rpc_offline_server_free(rpc_server_t *s);

/* Runs the unary method `id` on the request bytes in bb (left to the caller) as a call that
 * arrived would run: decoded by rpc_decode, handled, and answered with a reply or an error.
 * Fills *ret (release with rpc_offline_result_done). Returns ret->status; STATUS_UNIMPLEMENTED
 * when the method is not unary or has no handler, STATUS_INVALID_USAGE when the handler
 * deferred (the call is then leaked). */
status_t rpc_offline_call(rpc_server_t *s, rpc_method_id_t id, grpc_byte_buffer *bb,
                          rpc_offline_result_t *ret);

void rpc_offline_result_done(rpc_offline_result_t *r);

#endif
