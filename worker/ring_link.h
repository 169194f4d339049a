/* One connection of the ring all-reduce (ring.h): a non-blocking TCP socket, wrapped in TLS 1.3
 * with the process's certificate when mutual TLS is on (rpc/security.h), so gradients never
 * cross the network in the clear and only another worker of the cluster's CA can join a ring.
 * A link carries one direction of the ring: the connecting side only sends, the accepting side
 * only receives. */
#ifndef TESSERA_WORKER_RING_LINK_H
#define TESSERA_WORKER_RING_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/status.h"

typedef struct ring_tls ring_tls_t;

/* The TLS context of the process's certificate, key and CA; *ret is NULL (and STATUS_OK) when
 * mutual TLS is off. */
status_t ring_tls_new(ring_tls_t **ret, status_msg_t *err);
void ring_tls_free(ring_tls_t *t); /* NULL-safe */

typedef struct ring_link {
    int fd;     /* non-blocking; -1 = none */
    void *ssl;  /* SSL *, NULL over plain TCP */
    short want; /* what to poll for before the next call: POLLIN or POLLOUT */
} ring_link_t;

#define RING_LINK_NONE ((ring_link_t){.fd = -1})

/* Takes over fd (made non-blocking) and, with tls, runs the handshake until the deadline
 * (clock_now_s()): `server` for the accepting side. The connecting side checks that the peer's
 * certificate names `host` (a DNS name or an IP address); both check it names the worker role.
 * On failure fd is closed and err says why. */
status_t ring_link_open(ring_link_t *l, int fd, ring_tls_t *tls, bool server, const char *host,
                        double deadline, status_msg_t *err);

/* Move up to n bytes: > 0 bytes moved; 0 would block (poll l->want, then call again with the
 * same bytes); -1 the connection failed or closed (errno: ECONNRESET when closed, EPROTO for a
 * TLS error). */
ssize_t ring_link_send(ring_link_t *l, const void *buf, size_t n);
ssize_t ring_link_recv(ring_link_t *l, void *buf, size_t n);

/* Received bytes already decrypted and waiting: read them before polling again. */
bool ring_link_buffered(const ring_link_t *l);

/* Breaks the connection (the peer sees it closed) but keeps the link to be closed later. */
void ring_link_shutdown(ring_link_t *l);
void ring_link_close(ring_link_t *l);

#endif
