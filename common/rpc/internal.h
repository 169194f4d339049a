/* Internals shared by the files of the RPC runtime (rpc.c, rpc_client.c, rpc_codec.c). */
#ifndef TESSERA_RPC_INTERNAL_H
#define TESSERA_RPC_INTERNAL_H

#include <pthread.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "rpc/server.h"
#include "rpc/client.h"

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

/* The most entries a repeated message field of a received message may have (a CreateVariables
 * request's shards, a Pull's keys): counted on the wire, before anything is unpacked. */
#define RPC_MAX_REPEATED 65536

/* Decodes bb as a message of desc, copying field 15 once into recv_buf (if it fits) or a fresh
 * aligned buffer; with in_place, keeping references to the slices that hold it instead, unless
 * they are so many and small (or compressed) that one copy costs less. Bytes that do not parse fail
 * with STATUS_BAD_MESSAGE; a repeated field of more than RPC_MAX_REPEATED entries with
 * STATUS_RESOURCE_EXHAUSTED; a string field (at any depth) holding a NUL byte or bytes that are not
 * UTF-8 with STATUS_INVALID_ARGUMENT naming the field (rpc_check_wire). err (may be NULL) gets the
 * sentence. */
status_t rpc_decode(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb, void *recv_buf,
                    size_t recv_cap, bool in_place, ProtobufCMessage **ret_msg,
                    rpc_payload_t *ret_payload, status_msg_t *err);

/* Checks a message's bytes (buf, of a message of desc) before they are unpacked: every string
 * field, at any depth, UTF-8 without NUL (else STATUS_INVALID_ARGUMENT naming the field path,
 * "PullRequest.items.key.variable"); at most RPC_MAX_REPEATED entries in each top-level repeated
 * field (else STATUS_RESOURCE_EXHAUSTED). Bytes that do not parse are left to unpacking. */
status_t rpc_check_wire(const ProtobufCMessageDescriptor *desc, const void *buf, size_t len,
                        status_msg_t *err);

/* Credentials from rpc_security_init's material (rpc/security.c): TLS 1.3 only, client
 * certificates required and checked against the CA. NULL (err says why) when gRPC refuses. */
grpc_server_credentials *rpc_security_server_creds(status_msg_t *err);
grpc_channel_credentials *rpc_security_channel_creds(status_msg_t *err);

/* Who made a call: false when it came without TLS (a plaintext health port); else *ret_roles
 * holds the roles of its certificate (0 for none) and who names it. */
bool rpc_security_peer(grpc_call *call, unsigned *ret_roles, char *who, size_t len);

/* Counts gRPC's reports of failed TLS handshakes (its log is the only place they appear). */
void rpc_security_note_log(const char *message);

/* Tunes glibc malloc for messages of many megabytes (see rpc_codec.c), once per process,
 * unless the environment already sets those knobs. Called by rpc_server_new and
 * rpc_channel_new; thread-safe. */
void rpc_tune_malloc(void);

bool rpc_has_payload_field(const ProtobufCMessageDescriptor *desc);

gpr_timespec rpc_deadline_ms(int64_t ms);

/* Fills err (all of it) from a finished call's status code, status message and trailing
 * metadata, decoding the server's Tessera__V1__ErrorDetail (RPC_ERROR_DETAIL_KEY) when one came:
 * what any bytes a peer sends there turn into. `target` names the peer when the detail does not,
 * `path` the method in debug logs. Thread-safe; rpc_client.c, and tests/fuzz. */
void rpc_error_fill(rpc_error_t *err, grpc_status_code code, grpc_slice details,
                    const char *error_string, const grpc_metadata_array *trailing,
                    const char *target, const char *path);

#endif
