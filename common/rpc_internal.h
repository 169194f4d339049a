/* Internals shared by the files of the RPC runtime (rpc.c, rpc_client.c, rpc_codec.c). */
#ifndef TESSERA_RPC_INTERNAL_H
#define TESSERA_RPC_INTERNAL_H

#include <pthread.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "rpc.h"

#define RPC_ERROR_DETAIL_KEY "tessera-error-bin"

/* Counts payload segments gRPC still holds, so rpc_unary can return only once the caller's
 * memory is free again. */
typedef struct rpc_release_tracker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int outstanding;
} rpc_release_tracker_t;

void rpc_tracker_init(rpc_release_tracker_t *t);
void rpc_tracker_hold(rpc_release_tracker_t *t);
void rpc_tracker_release(void *arg);
/* Waits until every held segment is released, then destroys the tracker. */
void rpc_tracker_wait_done(rpc_release_tracker_t *t);

/* Packs msg and appends the payload segments as field 15. Segments without a release callback
 * are tracked by `tracker` when given, else treated as static. */
status_t rpc_encode(const ProtobufCMessage *msg, const rpc_iov_t *iov, size_t n_iov,
                    rpc_release_tracker_t *tracker, grpc_byte_buffer **ret_bb, size_t *ret_len);

/* Decodes bb as a message of desc, copying field 15 once into recv_buf (if it fits) or a fresh
 * aligned buffer. */
status_t rpc_decode(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb, void *recv_buf,
                    size_t recv_cap, ProtobufCMessage **ret_msg, rpc_payload_t *ret_payload);

/* Tunes glibc malloc for messages of many megabytes (see rpc_codec.c), once per process,
 * unless the environment already sets those knobs. Called by rpc_server_new and
 * rpc_channel_new; thread-safe. */
void rpc_tune_malloc(void);

bool rpc_has_payload_field(const ProtobufCMessageDescriptor *desc);

gpr_timespec rpc_deadline_ms(int64_t ms);

#endif
