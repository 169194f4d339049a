/* Tessera's RPC runtime on the gRPC C core: servers, channels, unary calls and server streams
 * with protobuf-c messages and zero-copy tensor payloads.
 *
 * Payloads. Messages that carry tensor bytes have a top-level `bytes payload = 15` field (see
 * proto/tessera/v1/common.proto). Callers never fill that field: they pass the bytes as a list
 * of segments (rpc_iov_t), which are sent straight from their memory after the packed small
 * fields, and they read received bytes through rpc_payload_t / rpc_ctx_payload(), filled with a
 * single copy into a 64-byte-aligned buffer; or, for the methods a server reads in place
 * (rpc_server_payload_in_place), where gRPC received them, in pieces. The decoded message's
 * payload field stays empty.
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
#ifndef TESSERA_RPC_TYPES_H
#define TESSERA_RPC_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "base/pieces.h"
#include "base/status.h"
#include "rpc/methods.h"

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

/* A received payload: len bytes at `data`, 64-byte aligned (NULL when len is 0); or, read in
 * place, data NULL and the bytes in n_parts parts of the slices gRPC received them in, which the
 * payload holds references to. Release either with rpc_payload_done(). */
typedef struct rpc_payload {
    void *data;
    size_t len;
    bool owned;           /* data is the payload's own */
    pieces_part_t *parts; /* in place */
    size_t n_parts;
    void *held; /* the grpc_slice references */
    size_t n_held;
    size_t copied;      /* bytes decoding copied: len, or 0 in place */
    pieces_part_t flat; /* rpc_payload_pieces's one part over data */
} rpc_payload_t;

void rpc_payload_done(rpc_payload_t *p);

/* The payload's bytes as pieces: its parts, or one part over data. Valid until it is done, and
 * only while p stays where it is: for a flat payload the pieces point at p->flat, inside p. */
pieces_t rpc_payload_pieces(rpc_payload_t *p);

/* A buffer for a payload, 64-byte aligned; one of 32 MiB or more lies on transparent huge
 * pages where the kernel allows, which makes its first touch several times cheaper. Release it
 * with free(). */
void *rpc_buffer_alloc(size_t len);

/* What failed in a call, for the caller to log or show. */
typedef struct rpc_error {
    status_t status;
    int grpc_code;
    char message[512]; /* the server's message, or the transport's */
    char task[96];     /* "ps 1 (127.0.0.1:2223)" when the server named itself */
    int fault;         /* Tessera__V1__Fault */
    char culprit[128]; /* variable, key or field at fault, when the server named one */
} rpc_error_t;

/* Routes gRPC's own log lines into Tessera's log (subsystem grpc). Call before grpc_init(). */
void rpc_log_init(void);

/* Chunks. A push may send the gradient of a dense shard in chunks (TensorRef.chunk_offset and
 * byte_length), each applied, and answered by a push-pull with the same rows' new values, as it
 * arrives. A shard is cut into blocks of rpc_block_rows() rows, RPC_BLOCK_BYTES of them (at
 * least one row); a chunk is whole blocks: it starts at a block's first row and ends at a
 * block's end or the shard's. The parameter server keeps each block's update count, so the
 * chunks of one step may come in any order, on any connection, and each is one update. */
#define RPC_BLOCK_BYTES ((size_t)1 << 20)

/* The most workers a job may name (ConfigureJobRequest.num_workers): a worker keeps a data reader
 * and counts per worker's shard, so a hostile count must not size its allocations. */
#define RPC_MAX_WORKERS 65536

static inline size_t rpc_block_rows(size_t row_bytes)
{
    return row_bytes >= RPC_BLOCK_BYTES || row_bytes == 0 ? 1 : RPC_BLOCK_BYTES / row_bytes;
}

#endif
