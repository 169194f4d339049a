/* The metrics' HTTP endpoint: GET /metrics in Prometheus's text format (metrics_render), served
 * by libmicrohttpd on a socket bound here, so that the port (":0" too) is known before the
 * daemon says it is ready. */
#define _POSIX_C_SOURCE 200809L
#include "daemon/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <microhttpd.h>

#include "base/log.h"
#include "base/net.h"

#define HTTP_CONNECTION_LIMIT 64u
#define HTTP_TIMEOUT_S        10u
#define LISTEN_BACKLOG        64

struct metrics_server {
    metrics_t *m;
    struct MHD_Daemon *daemon;
    int fd; /* our listening socket; libmicrohttpd owns a duplicate of it */
};

static void mhd_log_cb(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    size_t n;

    (void)cls;
    if (!log_enabled(LOG_LEVEL_WARNING, LOG_SUB_METRICS))
        return;
    vsnprintf(line, sizeof(line), fmt, ap);
    n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    LOG_WARNING(METRICS, "libmicrohttpd: %s", line);
}

static enum MHD_Result reply_static(struct MHD_Connection *conn, unsigned int code,
                                    const char *body)
{
    struct MHD_Response *resp;
    enum MHD_Result ret;

    resp = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (resp == NULL)
        return MHD_NO;
    if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8") !=
            MHD_YES ||
        (code == MHD_HTTP_METHOD_NOT_ALLOWED &&
         MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD") != MHD_YES)) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    ret = MHD_queue_response(conn, code, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Runs on the daemon's thread. GET and HEAD /metrics render the registry; HEAD gets the same
 * headers without the body (libmicrohttpd drops it). */
static enum MHD_Result handle_request(void *cls, struct MHD_Connection *conn, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_data_size,
                                      void **con_cls)
{
    metrics_server_t *s = cls;
    struct MHD_Response *resp;
    enum MHD_Result ret;
    char *text;
    size_t len;

    (void)version, (void)upload_data, (void)upload_data_size, (void)con_cls;
    if (strcmp(url, "/metrics") != 0)
        return reply_static(conn, MHD_HTTP_NOT_FOUND, "Not Found: metrics are at /metrics\n");
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply_static(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "Method Not Allowed\n");
    if (metrics_render(s->m, &text, &len) != STATUS_OK)
        return reply_static(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "Out of memory\n");
    resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(text);
        return MHD_NO;
    }
    if (MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, METRICS_CONTENT_TYPE) !=
        MHD_YES) {
        MHD_destroy_response(resp);
        return MHD_NO;
    }
    ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* A listening socket bound to ai, or -1 with errno set. An IPv6 wildcard accepts IPv4 too. */
static int listen_one(const struct addrinfo *ai)
{
    int one = 1, fd, err;

    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -1;
    /* SO_REUSEADDR lets a restarted daemon bind over TIME_WAIT connections, yet still fails on a
     * port another socket listens on; SO_REUSEPORT would silently share it. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
        goto fail;
    if (ai->ai_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ai->ai_addr;
        int v6only = !IN6_IS_ADDR_UNSPECIFIED(&a->sin6_addr);
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) != 0)
            goto fail;
    }
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, LISTEN_BACKLOG) != 0)
        goto fail;
    return fd;
fail:
    err = errno;
    close(fd);
    errno = err;
    return -1;
}

/* Resolves host (empty: all interfaces, IPv6 dual-stack preferred) and listens on the first
 * address that binds. */
static status_t listen_addr(const char *addr, const char *host, int port, int *ret_fd,
                            int *ret_family, status_msg_t *err)
{
    struct addrinfo hints = {0}, *res, *ai;
    char service[16];
    int rc, fd = -1, first_err = 0;
    bool in_use = false, wildcard = *host == '\0';

    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(service, sizeof(service), "%d", port);
    rc = getaddrinfo(wildcard ? NULL : host, service, &hints, &res);
    if (rc != 0)
        return status_fail(err, rc == EAI_AGAIN ? STATUS_UNAVAILABLE : STATUS_INVALID_ARGUMENT,
                           "metrics address '%s': cannot resolve '%s': %s", addr, host,
                           rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    /* Two passes for the wildcard, so that [::] (which also takes IPv4) wins over 0.0.0.0. */
    for (int pass = wildcard ? 0 : 1; pass < 2 && fd < 0; pass++) {
        for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
            if (wildcard && (pass == 0) != (ai->ai_family == AF_INET6))
                continue;
            fd = listen_one(ai);
            if (fd >= 0) {
                *ret_family = ai->ai_family;
            } else {
                in_use |= errno == EADDRINUSE;
                first_err = first_err ? first_err : errno;
            }
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        *ret_fd = fd;
        return STATUS_OK;
    }
    if (in_use)
        return status_fail(err, STATUS_ADDRESS_IN_USE,
                           "metrics address '%s': port %d is already in use by another socket",
                           addr, port);
    return status_fail(err, status_from_errno(first_err), "metrics address '%s': cannot listen: %s",
                       addr, strerror(first_err ? first_err : EINVAL));
}

static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

/* libmicrohttpd closes the listening socket it was given on some failure paths and not on
 * others, so it gets a duplicate; afterwards the duplicate is closed here only if it is still
 * the same socket. */
static void close_if_same(int dup_fd, int fd)
{
    struct stat a, b;

    if (fstat(dup_fd, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino)
        close(dup_fd);
}

status_t metrics_server_start(metrics_t *m, const char *addr, metrics_server_t **ret_server,
                              int *ret_port, status_msg_t *err)
{
    return metrics_server_start_tls(m, addr, NULL, NULL, ret_server, ret_port, err);
}

/* GnuTLS's priority string: its defaults, TLS 1.3 only. */
#define TLS13_ONLY "NORMAL:-VERS-ALL:+VERS-TLS1.3"

status_t metrics_server_start_tls(metrics_t *m, const char *addr, const char *cert_pem,
                                  const char *key_pem, metrics_server_t **ret_server, int *ret_port,
                                  status_msg_t *err)
{
    char host[256];
    int port, family = AF_INET, mhd_fd;
    metrics_server_t *s;
    status_t rc;
    unsigned int flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;

    if (m == NULL || ret_server == NULL)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "metrics server: the registry and ret_server must not be NULL");
    STATUS_CHECK(net_split_hostport(addr, host, sizeof(host), &port, err));
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "metrics server '%s': out of memory", addr);
    s->m = m;
    rc = listen_addr(addr, host, port, &s->fd, &family, err);
    if (rc != STATUS_OK) {
        free(s);
        return rc;
    }
    port = bound_port(s->fd);
    mhd_fd = fcntl(s->fd, F_DUPFD_CLOEXEC, 0);
    if (mhd_fd < 0 || port < 0) {
        rc = status_fail(err, status_from_errno(errno), "metrics server '%s': %s", addr,
                         strerror(errno));
        goto fail;
    }
    if (family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (cert_pem != NULL)
        s->daemon = MHD_start_daemon(
            flags | MHD_USE_TLS, (uint16_t)port, NULL, NULL, handle_request, s,
            MHD_OPTION_EXTERNAL_LOGGER, mhd_log_cb, NULL, MHD_OPTION_LISTEN_SOCKET, mhd_fd,
            MHD_OPTION_CONNECTION_LIMIT, HTTP_CONNECTION_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
            HTTP_TIMEOUT_S, MHD_OPTION_HTTPS_MEM_CERT, cert_pem, MHD_OPTION_HTTPS_MEM_KEY, key_pem,
            MHD_OPTION_HTTPS_PRIORITIES, TLS13_ONLY, MHD_OPTION_END);
    else
        s->daemon = MHD_start_daemon(
            flags, (uint16_t)port, NULL, NULL, handle_request, s, MHD_OPTION_EXTERNAL_LOGGER,
            mhd_log_cb, NULL, MHD_OPTION_LISTEN_SOCKET, mhd_fd, MHD_OPTION_CONNECTION_LIMIT,
            HTTP_CONNECTION_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT, HTTP_TIMEOUT_S, MHD_OPTION_END);
    if (s->daemon == NULL) {
        close_if_same(mhd_fd, s->fd);
        rc = status_fail(err, STATUS_SYSTEM,
                         "metrics server '%s': libmicrohttpd failed to start (see its log line)",
                         addr);
        goto fail;
    }
    LOG_INFO(METRICS, "serving metrics on '%s' (port %d) at /metrics%s", addr, port,
             cert_pem ? " over HTTPS (TLS 1.3)" : "");
    *ret_server = s;
    if (ret_port != NULL)
        *ret_port = port;
    return STATUS_OK;
fail:
    close(s->fd);
    free(s);
    return rc;
}

/* Stops the daemon (waiting for its thread) and closes the listening socket. */
void metrics_server_stop(metrics_server_t *s)
{
    if (s == NULL)
        return;
    MHD_stop_daemon(s->daemon);
    close(s->fd);
    free(s);
}

/* ---- the client side ---------------------------------------------------------------------- */

int metrics_http_get(const char *addr, const char *path, char **ret_headers, char **ret_body)
{
    char host[256], req[512];
    struct sockaddr_in sa = {.sin_family = AF_INET};
    size_t len = 0, cap = 65536;
    char *buf = malloc(cap), *split;
    int port, fd = -1, status = -1;

    *ret_headers = *ret_body = NULL;
    if (buf == NULL || net_split_hostport(addr, host, sizeof(host), &port, NULL) != STATUS_OK ||
        inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        goto out;
    sa.sin_port = htons((uint16_t)port);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        goto out;
    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr);
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req))
        goto out;
    for (;;) {
        ssize_t n;
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL)
                goto out;
            buf = nb;
            cap *= 2;
        }
        n = read(fd, buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    split = strstr(buf, "\r\n\r\n");
    if (split == NULL || sscanf(buf, "HTTP/1.%*d %d", &status) != 1) {
        status = -1;
        goto out;
    }
    *split = '\0';
    *ret_headers = strdup(buf);
    *ret_body = strdup(split + 4);
    if (*ret_headers == NULL || *ret_body == NULL) {
        free(*ret_headers);
        free(*ret_body);
        *ret_headers = *ret_body = NULL;
        status = -1;
    }
out:
    if (fd >= 0)
        close(fd);
    free(buf);
    return status;
}

status_t metrics_http_value(const char *addr, const char *series, double *ret)
{
    char *headers, *body, line[300];
    const char *at;
    status_t rc = STATUS_NOT_FOUND;

    if (metrics_http_get(addr, "/metrics", &headers, &body) != 200) {
        free(headers);
        free(body);
        return STATUS_REMOTE;
    }
    snprintf(line, sizeof(line), "\n%s ", series);
    if ((at = strstr(body, line)) != NULL) {
        *ret = strtod(at + strlen(line), NULL);
        rc = STATUS_OK;
    }
    free(headers);
    free(body);
    return rc;
}
