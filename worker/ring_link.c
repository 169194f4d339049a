/* Ring connections over TCP, in TLS 1.3 when mutual TLS is on (ring_link.h). */
#define _POSIX_C_SOURCE 200809L
#include "ring_link.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "base/clock.h"
#include "rpc/methods.h"
#include "rpc/security.h"

struct ring_tls {
    SSL_CTX *ctx;
};

/* ---- the context -------------------------------------------------------------------------- */

static status_t tls_fail(ring_tls_t *t, const char *what, status_msg_t *err)
{
    unsigned long e = ERR_peek_last_error();
    status_fail(err, STATUS_BAD_CONFIG, "ring TLS: %s: %s", what,
                e ? ERR_reason_error_string(e) : "unknown error");
    ERR_clear_error();
    ring_tls_free(t);
    return STATUS_BAD_CONFIG;
}

status_t ring_tls_new(ring_tls_t **ret, status_msg_t *err)
{
    const char *cert_pem, *key_pem, *ca_pem;
    ring_tls_t *t;
    BIO *b;
    X509 *x;
    EVP_PKEY *k;
    int n_ca = 0;

    *ret = NULL;
    rpc_security_pem(&cert_pem, &key_pem, &ca_pem);
    if (cert_pem == NULL)
        return STATUS_OK;
    if ((t = calloc(1, sizeof(*t))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    t->ctx = SSL_CTX_new(TLS_method());
    if (t->ctx == NULL || !SSL_CTX_set_min_proto_version(t->ctx, TLS1_3_VERSION))
        return tls_fail(t, "cannot make a TLS 1.3 context", err);
    SSL_CTX_set_num_tickets(t->ctx, 0); /* no session tickets: the client side never reads */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    /* the certificate, then any intermediates */
    b = BIO_new_mem_buf(cert_pem, -1);
    x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    if (x == NULL || SSL_CTX_use_certificate(t->ctx, x) != 1) {
        X509_free(x);
        BIO_free(b);
        return tls_fail(t, "the certificate", err);
    }
    X509_free(x);
    while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL)
        if (SSL_CTX_add_extra_chain_cert(t->ctx, x) != 1)
            X509_free(x);
    BIO_free(b);
    b = BIO_new_mem_buf(key_pem, -1);
    k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    if (k == NULL || SSL_CTX_use_PrivateKey(t->ctx, k) != 1) {
        EVP_PKEY_free(k);
        return tls_fail(t, "the key", err);
    }
    EVP_PKEY_free(k);
    b = BIO_new_mem_buf(ca_pem, -1);
    while (b != NULL && (x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL) {
        n_ca += X509_STORE_add_cert(SSL_CTX_get_cert_store(t->ctx), x) == 1;
        X509_free(x);
    }
    BIO_free(b);
    if (n_ca == 0)
        return tls_fail(t, "the CA", err);
    ERR_clear_error();
    *ret = t;
    return STATUS_OK;
}

void ring_tls_free(ring_tls_t *t)
{
    if (t == NULL)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

/* ---- links -------------------------------------------------------------------------------- */

/* Whether the peer's verified certificate names the worker role. */
static bool peer_is_worker(SSL *ssl)
{
    return (rpc_security_cert_roles(SSL_get0_peer_certificate(ssl)) & RPC_ROLE_WORKER) != 0;
}

static status_t handshake(ring_link_t *l, bool server, double deadline, status_msg_t *err)
{
    SSL *ssl = l->ssl;

    for (;;) {
        int rc = server ? SSL_accept(ssl) : SSL_connect(ssl);
        if (rc == 1)
            break;
        int e = SSL_get_error(ssl, rc);
        int left = (int)((deadline - clock_now_s()) * 1000);
        struct pollfd p = {.fd = l->fd, .events = e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN};
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
            long v = SSL_get_verify_result(ssl);
            unsigned long q = ERR_peek_last_error();
            status_fail(err, STATUS_UNAUTHENTICATED, "TLS handshake failed: %s",
                        v != X509_V_OK ? X509_verify_cert_error_string(v)
                        : q            ? ERR_reason_error_string(q)
                                       : "the peer closed the connection");
            ERR_clear_error();
            return STATUS_UNAUTHENTICATED;
        }
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return status_fail(err, STATUS_TIMEOUT, "TLS handshake: no answer in time");
    }
    if (!peer_is_worker(ssl))
        return status_fail(err, STATUS_PERMISSION_DENIED,
                           "the peer's certificate does not name the worker role");
    return STATUS_OK;
}

status_t ring_link_open(ring_link_t *l, int fd, ring_tls_t *tls, bool server, const char *host,
                        double deadline, status_msg_t *err)
{
    int flags = fcntl(fd, F_GETFL);
    status_t rc;

    *l = (ring_link_t){.fd = fd, .want = server ? POLLIN : POLLOUT};
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        rc = status_fail(err, STATUS_SYSTEM, "fcntl: %s", strerror(errno));
        ring_link_close(l);
        return rc;
    }
    if (tls == NULL)
        return STATUS_OK;
    SSL *ssl = SSL_new(tls->ctx);
    if (ssl == NULL || SSL_set_fd(ssl, fd) != 1) {
        SSL_free(ssl);
        ring_link_close(l);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory for a TLS connection");
    }
    l->ssl = ssl;
    if (!server && host != NULL) {
        unsigned char ip[16];
        X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
        if (inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1)
            X509_VERIFY_PARAM_set1_ip_asc(vp, host);
        else
            SSL_set1_host(ssl, host);
    }
    rc = handshake(l, server, deadline, err);
    if (rc != STATUS_OK)
        ring_link_close(l);
    return rc;
}

static ssize_t tls_io(ring_link_t *l, void *buf, size_t n, bool out)
{
    size_t moved = 0;
    int rc = out ? SSL_write_ex(l->ssl, buf, n, &moved) : SSL_read_ex(l->ssl, buf, n, &moved);

    if (rc == 1)
        return (ssize_t)moved;
    switch (SSL_get_error(l->ssl, rc)) {
    case SSL_ERROR_WANT_READ:
        l->want = POLLIN;
        return 0;
    case SSL_ERROR_WANT_WRITE:
        l->want = POLLOUT;
        return 0;
    case SSL_ERROR_ZERO_RETURN:
        errno = ECONNRESET;
        return -1;
    case SSL_ERROR_SYSCALL:
        if (errno == 0)
            errno = ECONNRESET;
        ERR_clear_error();
        return -1;
    default:
        ERR_clear_error();
        errno = EPROTO;
        return -1;
    }
}

ssize_t ring_link_send(ring_link_t *l, const void *buf, size_t n)
{
    ssize_t k;

    if (l->ssl != NULL)
        return tls_io(l, (void *)buf, n, true);
    k = send(l->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    l->want = POLLOUT;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    return k;
}

ssize_t ring_link_recv(ring_link_t *l, void *buf, size_t n)
{
    ssize_t k;

    if (l->ssl != NULL)
        return tls_io(l, buf, n, false);
    k = recv(l->fd, buf, n, MSG_DONTWAIT);
    l->want = POLLIN;
    if (k == 0) {
        errno = ECONNRESET;
        return -1;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    return k;
}

bool ring_link_buffered(const ring_link_t *l)
{
    return l->ssl != NULL && SSL_pending(l->ssl) > 0;
}

void ring_link_shutdown(ring_link_t *l)
{
    if (l->fd >= 0)
        shutdown(l->fd, SHUT_RDWR);
}

void ring_link_close(ring_link_t *l)
{
    SSL_free(l->ssl); /* without a close_notify: the ring is over either way */
    if (l->fd >= 0)
        close(l->fd);
    *l = RING_LINK_NONE;
}
