/* Prometheus metrics: a registry of counters, gauges and histograms, its text exposition
 * (format 0.0.4) and an HTTP endpoint serving it on its own port.
 *
 * Metrics are created once at start-up and updated lock-free from any thread. A family (one
 * name) may hold several label sets; HELP and TYPE are written once per family, its samples
 * contiguous. Counter names must end in _total. Label values are escaped on registration. */
#ifndef TESSERA_METRICS_H
#define TESSERA_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct metrics metrics_t;
typedef struct metric metric_t;
typedef struct metrics_server metrics_server_t;

/* A registry. Adds the standard process_* metrics (cpu seconds, resident memory, start time,
 * open fds, max fds), computed at scrape time. Returns NULL on allocation failure. */
metrics_t *metrics_new(void);
void metrics_free(metrics_t *m);

/* Registers a metric. `labels` is NULL or a list of name/value pairs ending in NULL
 * (e.g. (const char *[]){"method", "Push", NULL}). Returns NULL when the name or labels are
 * invalid for Prometheus, or the same name+labels exists, or on allocation failure; the pointer
 * lives as long as the registry. */
metric_t *metrics_counter(metrics_t *m, const char *name, const char *help,
                          const char *const *labels);
metric_t *metrics_gauge(metrics_t *m, const char *name, const char *help,
                        const char *const *labels);
/* bounds: increasing upper bounds without +Inf; NULL = Prometheus defaults (.005 … 10). */
metric_t *metrics_histogram(metrics_t *m, const char *name, const char *help,
                            const char *const *labels, const double *bounds, size_t n_bounds);
/* A gauge whose value is computed by fn(arg) at each scrape (called on the HTTP thread). */
metric_t *metrics_gauge_fn(metrics_t *m, const char *name, const char *help,
                           const char *const *labels, double (*fn)(void *arg), void *arg);

/* A counter whose value is computed by fn(arg) at each scrape (for counts another module keeps,
 * such as the RPC server's per-method totals). The name must end in _total. */
metric_t *metrics_counter_fn(metrics_t *m, const char *name, const char *help,
                             const char *const *labels, double (*fn)(void *arg), void *arg);

/* Updates; thread-safe and lock-free. NULL metric is ignored. */
void metric_add(metric_t *c, double v); /* counter or gauge */
void metric_inc(metric_t *c);
void metric_set(metric_t *g, double v);     /* gauge */
void metric_observe(metric_t *h, double v); /* histogram */
double metric_value(const metric_t *c);     /* current counter/gauge value (tests, status lines) */

/* Renders the whole registry in text format 0.0.4 into a malloc'd string (*ret_text, length
 * *ret_len). */
status_t metrics_render(metrics_t *m, char **ret_text, size_t *ret_len);

/* The Content-Type to serve the exposition with. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Serves GET /metrics (anything else: 404) on addr "host:port" (port 0 = pick one) with
 * libmicrohttpd on its own thread. *ret_port receives the bound port. Fails with
 * STATUS_ADDRESS_IN_USE when the port is taken. */
status_t metrics_server_start(metrics_t *m, const char *addr, metrics_server_t **ret_server,
                              int *ret_port, status_msg_t *err);

/* The same over HTTPS, TLS 1.3 only, with a PEM certificate and key (the daemon's own, for
 * Prometheus's tls_config with the cluster's CA); NULL cert_pem = plain HTTP. */
status_t metrics_server_start_tls(metrics_t *m, const char *addr, const char *cert_pem,
                                  const char *key_pem, metrics_server_t **ret_server, int *ret_port,
                                  status_msg_t *err);
void metrics_server_stop(metrics_server_t *s);

/* A plain-HTTP/1.0 GET of path from an IPv4 "host:port", for the tests and benchmarks that read
 * a daemon's endpoint: the status code (-1 when nothing usable came back), with the headers and
 * the body in malloc'd strings (NULL on -1). */
int metrics_http_get(const char *addr, const char *path, char **ret_headers, char **ret_body);

/* The value of the sample `series` (a name with its labels, as exposed) on the daemon whose
 * metrics endpoint is addr; NOT_FOUND when it exposes no such sample, REMOTE when the GET
 * fails. */
status_t metrics_http_value(const char *addr, const char *series, double *ret);

#endif
