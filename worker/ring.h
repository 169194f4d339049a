/* A ring all-reduce of float32 buffers between the worker processes of a synchronous job, over
 * plain TCP connections (the data plane; the addresses come over gRPC): rank r sends to rank
 * r + 1 and receives from rank r - 1. An all-reduce of n floats over p ranks is a reduce-scatter
 * then an all-gather, p - 1 steps each, one chunk of n / p floats sent and one received per
 * step: every rank sends 2 (p - 1) / p of the buffer, the least any all-reduce can (bandwidth
 * optimal). Sending and receiving go on at once (poll), and a received chunk is added as its
 * bytes arrive. Every rank gets the same sum, bit for bit (each element is summed in the same
 * order on the rank that reduces it, then copied). A peer that sends or takes nothing for the
 * timeout fails the call, naming the rank it waited on; a broken connection fails it at once. */
#ifndef TESSERA_WORKER_RING_H
#define TESSERA_WORKER_RING_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct ring ring_t;

typedef struct ring_opts {
    int rank, size;
    int listen_fd;            /* a listening socket of this rank (the caller's; not closed) */
    const char *next_address; /* HOST:PORT where rank + 1 listens */
    uint64_t token;           /* the job's: a connection that does not carry it is refused */
    int timeout_ms;           /* to connect, and for any wait on a peer; 0: 30 s */
} ring_opts_t;

/* Connects to the next rank and accepts the previous one (either may come up first: the
 * connection is retried until the timeout). size 1 makes a ring of one, whose all-reduce does
 * nothing. */
status_t ring_connect(const ring_opts_t *o, ring_t **ret, status_msg_t *err);
void ring_free(ring_t *r); /* NULL-safe; closes the connections */

/* Replaces buf[0..n) on every rank with the sum over the ranks. Every rank calls it with the
 * same n. A failure leaves buf undefined and the ring unusable. */
status_t ring_allreduce(ring_t *r, float *buf, size_t n, status_msg_t *err);

/* Breaks the ring's connections (this rank failed on its own, a NaN loss say): its neighbours'
 * all-reduces fail at once, naming it, instead of waiting for the timeout. */
void ring_abort(ring_t *r);

/* The rank the last failed all-reduce waited on or could not reach; -1 when none failed. */
int ring_failed_peer(const ring_t *r);

/* A listening TCP socket on HOST:PORT (port 0: any free one; *ret_port says which). */
status_t ring_listen(const char *address, int *ret_fd, int *ret_port, status_msg_t *err);

#endif
