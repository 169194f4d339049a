/* The ring all-reduce over TCP (ring.h). */
#define _POSIX_C_SOURCE 200809L
#include "ring.h"
#include "ring_link.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/net.h"

#define RING_MAGIC   0x47525354u /* "TSRG" little-endian: a big-endian peer reads it reversed */
#define RING_VERSION 1u
#define HELLO_BYTES  24

struct ring {
    int rank, size;
    ring_link_t next, prev; /* sends to rank + 1, receives from rank - 1 */
    ring_tls_t *tls;        /* NULL: plain TCP */
    int timeout_ms;
    float *tmp; /* a received chunk, before it is added */
    size_t tmp_len;
    int failed_peer; /* the rank the last failure was on, or -1 */
};

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The whole of buf over a link, within the deadline (clock_now_s()). */
static int io_full(ring_link_t *l, uint8_t *buf, size_t n, bool out, double deadline)
{
    size_t done = 0;

    while (done < n) {
        ssize_t k =
            out ? ring_link_send(l, buf + done, n - done) : ring_link_recv(l, buf + done, n - done);
        if (k < 0)
            return -1;
        done += (size_t)k;
        if (k == 0 && !(out == false && ring_link_buffered(l))) {
            struct pollfd p = {.fd = l->fd, .events = l->want};
            int left = (int)((deadline - clock_now_s()) * 1000);
            int ready = left > 0 ? poll(&p, 1, left) : 0;
            if (ready == 0 || (ready < 0 && errno != EINTR))
                return -1;
        }
    }
    return 0;
}

static void hello(uint8_t *h, const ring_opts_t *o)
{
    put_u32(h, RING_MAGIC);
    put_u32(h + 4, RING_VERSION);
    put_u32(h + 8, (uint32_t)o->rank);
    put_u32(h + 12, (uint32_t)o->size);
    put_u32(h + 16, (uint32_t)o->token);
    put_u32(h + 20, (uint32_t)(o->token >> 32));
}

status_t ring_listen(const char *address, int *ret_fd, int *ret_port, status_msg_t *err)
{
    char host[256], port_s[16];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    int port, fd = -1, one = 1, rc;

    STATUS_CHECK(net_split_hostport(address, host, sizeof(host), &port, err));
    snprintf(port_s, sizeof(port_s), "%d", port);
    if ((rc = getaddrinfo(host[0] ? host : NULL, port_s, &hints, &ai)) != 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "%s: %s", address, gai_strerror(rc));
    if ((fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        int e = errno;
        freeaddrinfo(ai);
        if (fd >= 0)
            close(fd);
        return status_fail(err, STATUS_UNAVAILABLE, "listening on %s: %s", address, strerror(e));
    }
    freeaddrinfo(ai);
    *ret_fd = fd;
    *ret_port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                               : ((struct sockaddr_in *)&sa)->sin_port);
    return STATUS_OK;
}

/* A connection to the next rank, retried while it is not listening yet, secured (with TLS on)
 * and with our hello sent. */
static status_t connect_next(const ring_opts_t *o, ring_tls_t *tls, double deadline,
                             ring_link_t *ret_link, status_msg_t *err)
{
    char host[256], port_s[16];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    uint8_t h[HELLO_BYTES];
    status_msg_t why = {0};
    int port, rc, e = 0;

    STATUS_CHECK(net_split_hostport(o->next_address, host, sizeof(host), &port, err));
    snprintf(port_s, sizeof(port_s), "%d", port);
    if ((rc = getaddrinfo(host[0] ? host : "localhost", port_s, &hints, &ai)) != 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "rank %d at %s: %s",
                           (o->rank + 1) % o->size, o->next_address, gai_strerror(rc));
    hello(h, o);
    for (;;) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            ring_link_t l;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            /* on failure the link is closed and why says what failed */
            if (ring_link_open(&l, fd, tls, false, host[0] ? host : "localhost", deadline, &why) ==
                STATUS_OK) {
                why.text[0] = '\0';
                if (io_full(&l, h, sizeof(h), true, deadline) == 0) {
                    freeaddrinfo(ai);
                    *ret_link = l;
                    return STATUS_OK;
                }
                e = errno;
                ring_link_close(&l);
            }
        } else {
            e = errno;
            if (fd >= 0)
                close(fd);
        }
        if (clock_now_s() >= deadline)
            break;
        clock_sleep_ms(50);
    }
    freeaddrinfo(ai);
    return status_fail(err, STATUS_UNAVAILABLE, "rank %d at %s cannot be reached: %s",
                       (o->rank + 1) % o->size, o->next_address,
                       why.text[0] ? why.text : strerror(e));
}

/* The previous rank's connection: others (a stray client, another job's ring, a peer without a
 * worker certificate of the cluster's CA) are closed and the wait goes on. */
static status_t accept_prev(const ring_opts_t *o, ring_tls_t *tls, double deadline,
                            ring_link_t *ret_link, status_msg_t *err)
{
    int prev = (o->rank + o->size - 1) % o->size;
    status_msg_t why = {0};

    for (;;) {
        struct pollfd p = {.fd = o->listen_fd, .events = POLLIN};
        int left = (int)((deadline - clock_now_s()) * 1000), fd, one = 1;
        uint8_t h[HELLO_BYTES];
        ring_link_t l;
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return status_fail(err, STATUS_TIMEOUT, "rank %d did not connect within %d ms%s%s",
                               prev, o->timeout_ms, why.text[0] ? "; the last refused: " : "",
                               why.text);
        if ((fd = accept(o->listen_fd, NULL, NULL)) < 0)
            continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (ring_link_open(&l, fd, tls, true, NULL, deadline, &why) != STATUS_OK)
            continue;
        if (io_full(&l, h, sizeof(h), false, deadline) == 0 && get_u32(h) == RING_MAGIC &&
            get_u32(h + 4) == RING_VERSION && get_u32(h + 8) == (uint32_t)prev &&
            get_u32(h + 12) == (uint32_t)o->size && get_u32(h + 16) == (uint32_t)o->token &&
            get_u32(h + 20) == (uint32_t)(o->token >> 32)) {
            *ret_link = l;
            return STATUS_OK;
        }
        ring_link_close(&l);
    }
}

void ring_abort(ring_t *r)
{
    if (r == NULL)
        return;
    ring_link_shutdown(&r->next);
    ring_link_shutdown(&r->prev);
}

int ring_failed_peer(const ring_t *r)
{
    return r != NULL ? r->failed_peer : -1;
}

void ring_free(ring_t *r)
{
    if (r == NULL)
        return;
    ring_link_close(&r->next);
    ring_link_close(&r->prev);
    ring_tls_free(r->tls);
    free(r->tmp);
    free(r);
}

status_t ring_connect(const ring_opts_t *o, ring_t **ret, status_msg_t *err)
{
    ring_t *r;
    double deadline;
    status_t rc;

    *ret = NULL;
    if (o->size < 1 || o->rank < 0 || o->rank >= o->size)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "rank %d of a ring of %d", o->rank,
                           o->size);
    if ((r = calloc(1, sizeof(*r))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    *r = (ring_t){.rank = o->rank,
                  .size = o->size,
                  .next = RING_LINK_NONE,
                  .prev = RING_LINK_NONE,
                  .timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000,
                  .failed_peer = -1};
    if (o->size == 1) {
        *ret = r;
        return STATUS_OK;
    }
    deadline = clock_now_s() + r->timeout_ms / 1000.0;
    rc = ring_tls_new(&r->tls, err);
    /* A TLS handshake needs both ends at it: if every rank connected before it accepted, each
     * would wait on a neighbour that waits on the next. Odd ranks accept first, so each even
     * rank's connection is taken at once and no wait goes round the ring. */
    if (rc == STATUS_OK && o->rank % 2 == 1)
        rc = accept_prev(o, r->tls, deadline, &r->prev, err);
    if (rc == STATUS_OK)
        rc = connect_next(o, r->tls, deadline, &r->next, err);
    if (rc == STATUS_OK && o->rank % 2 == 0)
        rc = accept_prev(o, r->tls, deadline, &r->prev, err);
    if (rc != STATUS_OK) {
        ring_free(r);
        return rc;
    }
    *ret = r;
    return STATUS_OK;
}

/* One step: sends out[0..out_n) to the next rank while receiving in_n floats from the previous
 * one, into `in` (add: added to it as they arrive, through r->tmp). */
static status_t exchange(ring_t *r, const float *out, size_t out_n, float *in, size_t in_n,
                         bool add, status_msg_t *err)
{
    int prev = (r->rank + r->size - 1) % r->size, next = (r->rank + 1) % r->size;
    const uint8_t *sp = (const uint8_t *)out;
    uint8_t *rp = add ? (uint8_t *)r->tmp : (uint8_t *)in;
    size_t sb = out_n * sizeof(float), rb = in_n * sizeof(float), sent = 0, got = 0, added = 0;

    while (sent < sb || got < rb) {
        /* bytes TLS has decrypted already do not show in poll */
        bool buffered = got < rb && ring_link_buffered(&r->prev);
        struct pollfd p[2] = {{.fd = r->next.fd, .events = sent < sb ? r->next.want : 0},
                              {.fd = r->prev.fd, .events = got < rb ? r->prev.want : 0}};
        int k = poll(p, 2, buffered ? 0 : r->timeout_ms);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0 && !buffered) {
            r->failed_peer = got < rb ? prev : next;
            return status_fail(err, STATUS_TIMEOUT, "all-reduce: rank %d %s for %d ms",
                               r->failed_peer, got < rb ? "sent nothing" : "took nothing",
                               r->timeout_ms);
        }
        if (sent < sb && p[0].revents != 0) {
            ssize_t n = ring_link_send(&r->next, sp + sent, sb - sent);
            if (n < 0) {
                r->failed_peer = next;
                return status_fail(err, STATUS_UNAVAILABLE, "all-reduce: sending to rank %d: %s",
                                   next, strerror(errno));
            }
            sent += n > 0 ? (size_t)n : 0;
        }
        if (got < rb && (p[1].revents != 0 || buffered)) {
            ssize_t n = ring_link_recv(&r->prev, rp + got, rb - got);
            if (n < 0) {
                r->failed_peer = prev;
                return status_fail(err, STATUS_UNAVAILABLE, "all-reduce: rank %d %s", prev,
                                   errno == ECONNRESET ? "closed the connection" : strerror(errno));
            }
            got += n > 0 ? (size_t)n : 0;
            for (; add && added < got / sizeof(float); added++) /* the floats complete so far */
                in[added] += r->tmp[added];
        }
    }
    return STATUS_OK;
}

status_t ring_allreduce(ring_t *r, float *buf, size_t n, status_msg_t *err)
{
    size_t p = (size_t)r->size, me = (size_t)r->rank, most = (n + p - 1) / p;
#define OFF(c) ((c)*n / p)
#define LEN(c) (OFF((c) + 1) - OFF(c))

    if (p == 1 || n == 0)
        return STATUS_OK;
    if (most > r->tmp_len) {
        float *t = realloc(r->tmp, most * sizeof(float));
        if (t == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
        r->tmp = t;
        r->tmp_len = most;
    }
    /* reduce-scatter: after it, this rank holds chunk me + 1 summed over every rank */
    for (size_t s = 0; s + 1 < p; s++) {
        size_t out = (me + p - s) % p, in = (me + 2 * p - s - 1) % p;
        STATUS_CHECK(exchange(r, buf + OFF(out), LEN(out), buf + OFF(in), LEN(in), true, err));
    }
    /* all-gather: the summed chunks go round */
    for (size_t s = 0; s + 1 < p; s++) {
        size_t out = (me + 1 + p - s) % p, in = (me + p - s) % p;
        STATUS_CHECK(exchange(r, buf + OFF(out), LEN(out), buf + OFF(in), LEN(in), false, err));
    }
    return STATUS_OK;
#undef OFF
#undef LEN
}
