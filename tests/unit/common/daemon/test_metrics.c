#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_run.h"
#include "daemon/metrics.h"

#define PROMTOOL "/usr/bin/promtool"

/* Renders m, failing the test on error; the caller frees the text. */
static char *render(metrics_t *m)
{
    char *text = NULL;
    size_t len = 0;

    ck_assert_int_eq(metrics_render(m, &text, &len), STATUS_OK);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(len, strlen(text));
    return text;
}

/* The part of a rendering after the process_* metrics, which metrics_new registers first. */
static const char *own_part(const char *text)
{
    const char *p = strstr(text, "# HELP tessera_");
    ck_assert_msg(p != NULL, "no tessera_ metrics in:\n%s", text);
    return p;
}

/* The value on the line that starts with `prefix` (followed by a space). */
static double sample_value(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);

    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, prefix, n) == 0 && line[n] == ' ')
            return strtod(line + n + 1, NULL);
        line = strchr(line, '\n');
        line = line != NULL ? line + 1 : NULL;
    }
    ck_abort_msg("no sample '%s' in:\n%s", prefix, text);
    return NAN;
}

static double answer_fn(void *arg)
{
    return *(const double *)arg;
}

START_TEST(metrics_render_groups_families_with_exact_text)
{
    metrics_t *m = metrics_new();
    static const double bounds[] = {0.5, 1};
    double answer = 42;
    char *text;

    ck_assert_ptr_nonnull(m);
    metric_t *push = metrics_counter(m, "tessera_test_requests_total", "Requests handled.",
                                     (const char *[]){"method", "Push", NULL});
    metric_t *temp = metrics_gauge(m, "tessera_test_temperature_celsius", "Temperature.", NULL);
    metric_t *pull = metrics_counter(m, "tessera_test_requests_total", "Requests handled.",
                                     (const char *[]){"method", "Pull", NULL});
    metric_t *lat =
        metrics_histogram(m, "tessera_test_latency_seconds", "Latency.", NULL, bounds, 2);
    metric_t *fn =
        metrics_gauge_fn(m, "tessera_test_answer", "Computed.",
                         (const char *[]){"shard", "3", "role", "ps", NULL}, answer_fn, &answer);
    ck_assert_ptr_nonnull(push);
    ck_assert_ptr_nonnull(temp);
    ck_assert_ptr_nonnull(pull);
    ck_assert_ptr_nonnull(lat);
    ck_assert_ptr_nonnull(fn);
    metric_inc(push);
    metric_add(push, 2);
    metric_add(pull, 1.5);
    metric_set(temp, -2.5);
    metric_observe(lat, 0.25);
    metric_observe(lat, 0.5); /* upper bounds are inclusive */
    metric_observe(lat, 0.75);
    metric_observe(lat, 4);
    ck_assert(metric_value(push) == 3);
    ck_assert(metric_value(temp) == -2.5);
    ck_assert(metric_value(lat) == 4);
    ck_assert(metric_value(fn) == 42);

    text = render(m);
    ck_assert_str_eq(own_part(text), "# HELP tessera_test_requests_total Requests handled.\n"
                                     "# TYPE tessera_test_requests_total counter\n"
                                     "tessera_test_requests_total{method=\"Push\"} 3\n"
                                     "tessera_test_requests_total{method=\"Pull\"} 1.5\n"
                                     "# HELP tessera_test_temperature_celsius Temperature.\n"
                                     "# TYPE tessera_test_temperature_celsius gauge\n"
                                     "tessera_test_temperature_celsius -2.5\n"
                                     "# HELP tessera_test_latency_seconds Latency.\n"
                                     "# TYPE tessera_test_latency_seconds histogram\n"
                                     "tessera_test_latency_seconds_bucket{le=\"0.5\"} 2\n"
                                     "tessera_test_latency_seconds_bucket{le=\"1\"} 3\n"
                                     "tessera_test_latency_seconds_bucket{le=\"+Inf\"} 4\n"
                                     "tessera_test_latency_seconds_sum 5.5\n"
                                     "tessera_test_latency_seconds_count 4\n"
                                     "# HELP tessera_test_answer Computed.\n"
                                     "# TYPE tessera_test_answer gauge\n"
                                     "tessera_test_answer{role=\"ps\",shard=\"3\"} 42\n");
    free(text);
    metrics_free(m);
}
END_TEST

START_TEST(metrics_histogram_default_bounds_with_labels)
{
    metrics_t *m = metrics_new();
    metric_t *h = metrics_histogram(m, "tessera_test_pull_seconds", "Pull latency.",
                                    (const char *[]){"shard", "0", NULL}, NULL, 0);
    char *text;

    ck_assert_ptr_nonnull(h);
    metric_observe(h, 0.001953125); /* powers of two, so that the sum is exact */
    metric_observe(h, 0.375);
    metric_observe(h, 11);
    text = render(m);
    ck_assert_str_eq(own_part(text),
                     "# HELP tessera_test_pull_seconds Pull latency.\n"
                     "# TYPE tessera_test_pull_seconds histogram\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"0.005\"} 1\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"0.01\"} 1\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"0.025\"} 1\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"0.05\"} 1\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"0.1\"} 1\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"0.25\"} 1\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"0.5\"} 2\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"1\"} 2\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"2.5\"} 2\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"5\"} 2\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"10\"} 2\n"
                     "tessera_test_pull_seconds_bucket{shard=\"0\",le=\"+Inf\"} 3\n"
                     "tessera_test_pull_seconds_sum{shard=\"0\"} 11.376953125\n"
                     "tessera_test_pull_seconds_count{shard=\"0\"} 3\n");
    free(text);
    metrics_free(m);
}
END_TEST

START_TEST(metrics_histogram_inf_bucket_equals_count)
{
    metrics_t *m = metrics_new();
    static const double bounds[] = {1, 2, 3};
    metric_t *h = metrics_histogram(m, "tessera_test_sizes_bytes", "Sizes.", NULL, bounds, 3);
    char *text;

    ck_assert_ptr_nonnull(h);
    for (int i = 0; i < 100; i++)
        metric_observe(h, i * 0.1);
    metric_observe(h, INFINITY);
    metric_observe(h, NAN);
    text = render(m);
    ck_assert(sample_value(text, "tessera_test_sizes_bytes_bucket{le=\"+Inf\"}") == 102);
    ck_assert(sample_value(text, "tessera_test_sizes_bytes_count") == 102);
    ck_assert(sample_value(text, "tessera_test_sizes_bytes_bucket{le=\"1\"}") == 11);
    ck_assert(sample_value(text, "tessera_test_sizes_bytes_bucket{le=\"3\"}") == 31);
    free(text);
    metrics_free(m);
}
END_TEST

START_TEST(metrics_values_print_as_go_floats)
{
    metrics_t *m = metrics_new();
    static const struct {
        const char *name;
        double v;
        const char *want;
    } cases[] = {
        {"tessera_test_nan", NAN, "NaN"},
        {"tessera_test_pinf", INFINITY, "+Inf"},
        {"tessera_test_ninf", -INFINITY, "-Inf"},
        {"tessera_test_tenth", 0.1, "0.1"},
        {"tessera_test_third", 1.0 / 3, "0.3333333333333333"},
        {"tessera_test_tiny", 1e-7, "1e-07"},
        {"tessera_test_big", 123456789, "1.23456789e+08"},
        {"tessera_test_million", 1e6, "1e+06"},
        {"tessera_test_ten", 10, "10"},
        {"tessera_test_six_digits", 123456, "123456"},
        {"tessera_test_small", 0.0001, "0.0001"},
        {"tessera_test_smaller", 0.00001, "1e-05"},
        {"tessera_test_negative", -0.75, "-0.75"},
        {"tessera_test_zero", 0, "0"},
    };
    char *text, line[128];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        metric_set(metrics_gauge(m, cases[i].name, "Value.", NULL), cases[i].v);
    text = render(m);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(line, sizeof(line), "\n%s %s\n", cases[i].name, cases[i].want);
        ck_assert_msg(strstr(text, line) != NULL, "missing '%s' in:\n%s", line + 1, text);
    }
    free(text);
    metrics_free(m);
}
END_TEST

START_TEST(metrics_rejects_invalid_registrations)
{
    metrics_t *m = metrics_new();
    static const double unsorted[] = {1, 0.5};

    ck_assert_ptr_nonnull(metrics_counter(m, "tessera_test_ok_total", "Ok.",
                                          (const char *[]){"a", "1", "b", "2", NULL}));
    ck_assert_ptr_nonnull(metrics_gauge(m, "tessera_test_gauge", "Ok.", NULL));
    /* bad names */
    ck_assert_ptr_null(metrics_gauge(m, "1tessera", "Bad.", NULL));
    ck_assert_ptr_null(metrics_gauge(m, "tessera-test", "Bad.", NULL));
    ck_assert_ptr_null(metrics_gauge(m, "tessera:test", "Colons are for recording rules.", NULL));
    ck_assert_ptr_null(metrics_gauge(m, "", "Bad.", NULL));
    ck_assert_ptr_null(metrics_gauge(m, NULL, "Bad.", NULL));
    /* counters end in _total, and only counters do */
    ck_assert_ptr_null(metrics_counter(m, "tessera_test_requests", "Bad.", NULL));
    ck_assert_ptr_null(metrics_gauge(m, "tessera_test_things_total", "Bad.", NULL));
    /* the same name and label set, in any order */
    ck_assert_ptr_null(metrics_counter(m, "tessera_test_ok_total", "Ok.",
                                       (const char *[]){"a", "1", "b", "2", NULL}));
    ck_assert_ptr_null(metrics_counter(m, "tessera_test_ok_total", "Ok.",
                                       (const char *[]){"b", "2", "a", "1", NULL}));
    ck_assert_ptr_null(metrics_gauge(m, "tessera_test_gauge", "Ok.", NULL));
    /* label names */
    ck_assert_ptr_null(
        metrics_gauge(m, "tessera_test_g2", "Bad.", (const char *[]){"__name", "x", NULL}));
    ck_assert_ptr_null(
        metrics_gauge(m, "tessera_test_g2", "Bad.", (const char *[]){"1a", "x", NULL}));
    ck_assert_ptr_null(
        metrics_gauge(m, "tessera_test_g2", "Bad.", (const char *[]){"a", "x", "a", "y", NULL}));
    ck_assert_ptr_null(metrics_gauge(m, "tessera_test_g2", "Bad.", (const char *[]){"a", NULL}));
    ck_assert_ptr_null(
        metrics_gauge(m, "tessera_test_g2", "Bad.", (const char *[]){"a", "\xff", NULL}));
    ck_assert_ptr_null(
        metrics_histogram(m, "tessera_test_h", "Bad.", (const char *[]){"le", "1", NULL}, NULL, 0));
    /* one type per name */
    ck_assert_ptr_null(metrics_histogram(m, "tessera_test_gauge", "Ok.", NULL, NULL, 0));
    ck_assert_ptr_null(
        metrics_counter(m, "tessera_test_gauge", "Ok.", (const char *[]){"x", "1", NULL}));
    /* one help text per name */
    ck_assert_ptr_null(
        metrics_gauge(m, "tessera_test_gauge", "Other.", (const char *[]){"x", "1", NULL}));
    /* histogram bounds, and names its samples would clash with */
    ck_assert_ptr_null(metrics_histogram(m, "tessera_test_h", "Bad.", NULL, unsorted, 2));
    ck_assert_ptr_nonnull(metrics_histogram(m, "tessera_test_h", "Ok.", NULL, NULL, 0));
    ck_assert_ptr_null(metrics_gauge(m, "tessera_test_h_count", "Clash.", NULL));
    ck_assert_ptr_nonnull(metrics_gauge(m, "tessera_test_x_sum", "Ok.", NULL));
    ck_assert_ptr_null(metrics_histogram(m, "tessera_test_x", "Clash.", NULL, NULL, 0));
    ck_assert_ptr_null(metrics_gauge_fn(m, "tessera_test_fn", "No function.", NULL, NULL, NULL));
    /* a NULL registry registers nothing; NULL metrics ignore updates */
    ck_assert_ptr_null(metrics_counter(NULL, "tessera_test_ok_total", "Ok.", NULL));
    metric_inc(NULL);
    metric_set(NULL, 1);
    metric_observe(NULL, 1);
    ck_assert(metric_value(NULL) == 0);
    metrics_free(m);
    metrics_free(NULL);
}
END_TEST

START_TEST(metrics_updates_of_the_wrong_kind_are_ignored)
{
    metrics_t *m = metrics_new();
    metric_t *c = metrics_counter(m, "tessera_test_c_total", "C.", NULL);
    metric_t *h = metrics_histogram(m, "tessera_test_h", "H.", NULL, NULL, 0);

    metric_add(c, 2);
    metric_add(c, -1);
    metric_add(c, NAN);
    metric_set(c, 100);
    ck_assert(metric_value(c) == 2);
    metric_add(h, 5);
    metric_set(h, 5);
    ck_assert(metric_value(h) == 0);
    metrics_free(m);
}
END_TEST

START_TEST(metrics_escapes_help_and_label_values)
{
    metrics_t *m = metrics_new();
    char *text;

    ck_assert_ptr_nonnull(metrics_gauge(m, "tessera_test_escape", "A \"quoted\" back\\slash\nline.",
                                        (const char *[]){"path", "C:\\dir\n\"x\"", NULL}));
    text = render(m);
    ck_assert_str_eq(own_part(text),
                     "# HELP tessera_test_escape A \"quoted\" back\\\\slash\\nline.\n"
                     "# TYPE tessera_test_escape gauge\n"
                     "tessera_test_escape{path=\"C:\\\\dir\\n\\\"x\\\"\"} 0\n");
    free(text);
    metrics_free(m);
}
END_TEST

START_TEST(metrics_process_metrics_are_plausible)
{
    metrics_t *m = metrics_new();
    char *text = render(m);
    double now = (double)time(NULL);
    double start = sample_value(text, "process_start_time_seconds");

    ck_assert_msg(start > now - 3600 && start <= now + 2, "start %f, now %f", start, now);
    ck_assert(sample_value(text, "process_cpu_seconds_total") >= 0);
    ck_assert(sample_value(text, "process_resident_memory_bytes") > 4096);
    ck_assert(sample_value(text, "process_virtual_memory_bytes") >=
              sample_value(text, "process_resident_memory_bytes"));
    ck_assert(sample_value(text, "process_open_fds") >= 3);
    ck_assert(sample_value(text, "process_max_fds") >= sample_value(text, "process_open_fds"));
    ck_assert(strstr(text, "# TYPE process_cpu_seconds_total counter\n") != NULL);
    free(text);
    metrics_free(m);
}
END_TEST

#define THREADS    4
#define ITERATIONS 100000

struct hammer {
    metric_t *c, *g, *h;
};

static void *hammer_thread(void *arg)
{
    struct hammer *hm = arg;

    for (int i = 0; i < ITERATIONS; i++) {
        metric_inc(hm->c);
        metric_add(hm->g, 0.5);
        metric_observe(hm->h, (i % 3) * 0.5);
    }
    return NULL;
}

START_TEST(metrics_concurrent_updates_sum_exactly)
{
    metrics_t *m = metrics_new();
    static const double bounds[] = {0.25, 0.75};
    struct hammer hm = {
        metrics_counter(m, "tessera_test_ops_total", "Ops.", NULL),
        metrics_gauge(m, "tessera_test_level", "Level.", NULL),
        metrics_histogram(m, "tessera_test_obs", "Observations.", NULL, bounds, 2),
    };
    pthread_t t[THREADS];
    char *text;
    int renders = 0;

    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, hammer_thread, &hm), 0);
    /* Scrapes racing the updates must still show +Inf equal to _count. */
    while (metric_value(hm.c) < THREADS * ITERATIONS && renders < 200) {
        text = render(m);
        ck_assert(sample_value(text, "tessera_test_obs_bucket{le=\"+Inf\"}") ==
                  sample_value(text, "tessera_test_obs_count"));
        free(text);
        renders++;
    }
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
    ck_assert(metric_value(hm.c) == THREADS * ITERATIONS);
    ck_assert(metric_value(hm.g) == THREADS * ITERATIONS * 0.5);
    ck_assert(metric_value(hm.h) == THREADS * ITERATIONS);
    text = render(m);
    /* i % 3 gives 0, 0.5, 1: 33334 + 33333 + 33333 per thread */
    ck_assert(sample_value(text, "tessera_test_obs_bucket{le=\"0.25\"}") == THREADS * 33334);
    ck_assert(sample_value(text, "tessera_test_obs_bucket{le=\"0.75\"}") == THREADS * 66667);
    ck_assert(sample_value(text, "tessera_test_obs_sum") == THREADS * 33333 * 1.5);
    free(text);
    metrics_free(m);
}
END_TEST

/* ---- HTTP ---- */

/* Sends `request` to addr:port over a plain socket and returns everything the server sent until
 * it closed the connection (malloc'd, NUL-terminated). */
static char *http_raw(int family, const char *addr, int port, const char *request)
{
    struct sockaddr_storage ss = {0};
    socklen_t len;
    struct timeval tv = {5, 0};
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    ssize_t r;
    int fd;

    ck_assert_ptr_nonnull(buf);
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        ck_assert_int_eq(inet_pton(AF_INET6, addr, &a->sin6_addr), 1);
        len = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        ck_assert_int_eq(inet_pton(AF_INET, addr, &a->sin_addr), 1);
        len = sizeof(*a);
    }
    fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    ck_assert_msg(connect(fd, (struct sockaddr *)&ss, len) == 0, "connect: %s", strerror(errno));
    ck_assert_int_eq(write(fd, request, strlen(request)), (ssize_t)strlen(request));
    while ((r = read(fd, buf + n, cap - n - 1)) > 0) {
        n += (size_t)r;
        if (cap - n < 1024) {
            cap *= 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
    }
    ck_assert_msg(r == 0, "read: %s", strerror(errno));
    close(fd);
    buf[n] = '\0';
    return buf;
}

static int http_status(const char *resp)
{
    ck_assert_msg(strncmp(resp, "HTTP/1.", 7) == 0, "not an HTTP response: %s", resp);
    return (int)strtol(resp + 9, NULL, 10);
}

static const char *http_body(const char *resp)
{
    const char *p = strstr(resp, "\r\n\r\n");
    ck_assert_ptr_nonnull(p);
    return p + 4;
}

START_TEST(metrics_server_serves_metrics_over_http)
{
    metrics_t *m = metrics_new();
    metrics_server_t *s = NULL;
    status_msg_t err = {0};
    int port = -1;
    char *resp, *text;

    metric_add(metrics_counter(m, "tessera_test_pushes_total", "Pushes.", NULL), 7);
    metric_observe(metrics_histogram(m, "tessera_test_push_seconds", "Push.", NULL, NULL, 0), .2);
    ck_assert_int_eq(metrics_server_start(m, "127.0.0.1:0", &s, &port, &err), STATUS_OK);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_gt(port, 0);

    resp = http_raw(AF_INET, "127.0.0.1", port, "GET /metrics HTTP/1.0\r\n\r\n");
    text = render(m);
    ck_assert_int_eq(http_status(resp), 200);
    ck_assert_msg(strstr(resp, "\r\nContent-Type: " METRICS_CONTENT_TYPE "\r\n") != NULL,
                  "no exact Content-Type in:\n%s", resp);
    ck_assert(strncmp(http_body(resp), "# HELP process_cpu_seconds_total ", 33) == 0);
    ck_assert_str_eq(own_part(http_body(resp)), own_part(text));
    free(resp);
    free(text);

    resp = http_raw(AF_INET, "127.0.0.1", port, "HEAD /metrics HTTP/1.0\r\n\r\n");
    ck_assert_int_eq(http_status(resp), 200);
    ck_assert(strstr(resp, "\r\nContent-Type: " METRICS_CONTENT_TYPE "\r\n") != NULL);
    ck_assert_str_eq(http_body(resp), "");
    free(resp);

    resp = http_raw(AF_INET, "127.0.0.1", port, "GET /other HTTP/1.0\r\n\r\n");
    ck_assert_int_eq(http_status(resp), 404);
    free(resp);

    resp =
        http_raw(AF_INET, "127.0.0.1", port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    ck_assert_int_eq(http_status(resp), 405);
    ck_assert(strstr(resp, "\r\nAllow: GET, HEAD\r\n") != NULL);
    free(resp);

    metrics_server_stop(s);
    metrics_server_stop(NULL);
    metrics_free(m);
}
END_TEST

START_TEST(metrics_server_taken_port_fails_with_address_in_use)
{
    metrics_t *m = metrics_new();
    metrics_server_t *s = NULL, *s2 = NULL;
    status_msg_t err = {0};
    char addr[64];
    int port = -1, port2 = -1;

    ck_assert_int_eq(metrics_server_start(m, "127.0.0.1:0", &s, &port, &err), STATUS_OK);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    ck_assert_int_eq(metrics_server_start(m, addr, &s2, &port2, &err), STATUS_ADDRESS_IN_USE);
    ck_assert_ptr_null(s2);
    ck_assert_int_eq(port2, -1);
    ck_assert_msg(strstr(err.text, addr) != NULL, "message does not name %s: %s", addr, err.text);
    /* The wildcard takes IPv4 too, so it collides as well. */
    snprintf(addr, sizeof(addr), ":%d", port);
    ck_assert_int_eq(metrics_server_start(m, addr, &s2, &port2, &err), STATUS_ADDRESS_IN_USE);
    metrics_server_stop(s);
    /* Once stopped, the port is free again. */
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
    ck_assert_int_eq(metrics_server_start(m, addr, &s2, &port2, &err), STATUS_OK);
    ck_assert_int_eq(port2, port);
    metrics_server_stop(s2);
    metrics_free(m);
}
END_TEST

START_TEST(metrics_server_rejects_bad_addresses)
{
    metrics_t *m = metrics_new();
    metrics_server_t *s = NULL;
    status_msg_t err = {0};
    int port = -1;

    ck_assert_int_eq(metrics_server_start(m, "127.0.0.1", &s, &port, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_int_eq(metrics_server_start(m, "127.0.0.1:70000", &s, &port, &err),
                     STATUS_INVALID_ARGUMENT);
    /* Without a resolver the lookup may fail as temporary instead. */
    status_t rc = metrics_server_start(m, "no-such-host.invalid:0", &s, &port, &err);
    ck_assert_msg(rc == STATUS_INVALID_ARGUMENT || rc == STATUS_UNAVAILABLE, "%s", err.text);
    ck_assert_int_eq(metrics_server_start(NULL, "127.0.0.1:0", &s, &port, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_null(s);
    metrics_free(m);
}
END_TEST

START_TEST(metrics_server_wildcard_accepts_ipv4)
{
    metrics_t *m = metrics_new();
    metrics_server_t *s = NULL;
    status_msg_t err = {0};
    int port = -1;
    char *resp;

    ck_assert_msg(metrics_server_start(m, ":0", &s, &port, &err) == STATUS_OK, "%s", err.text);
    resp = http_raw(AF_INET, "127.0.0.1", port, "GET /metrics HTTP/1.0\r\n\r\n");
    ck_assert_int_eq(http_status(resp), 200);
    free(resp);
    metrics_server_stop(s);
    metrics_free(m);
}
END_TEST

static int ipv6_loopback_usable(void)
{
    struct sockaddr_in6 a = {0};
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

    if (fd < 0)
        return 0;
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

START_TEST(metrics_server_listens_on_ipv6_literal)
{
    metrics_t *m = metrics_new();
    metrics_server_t *s = NULL;
    status_msg_t err = {0};
    int port = -1;
    char *resp;

    ck_assert_msg(metrics_server_start(m, "[::1]:0", &s, &port, &err) == STATUS_OK, "%s", err.text);
    resp = http_raw(AF_INET6, "::1", port, "GET /metrics HTTP/1.0\r\n\r\n");
    ck_assert_int_eq(http_status(resp), 200);
    free(resp);
    metrics_server_stop(s);
    metrics_free(m);
}
END_TEST

/* Pipes text into `promtool check metrics` and returns its exit status. */
static int promtool_check(const char *text)
{
    FILE *p = popen(PROMTOOL " check metrics", "w");
    int st;

    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(fwrite(text, 1, strlen(text), p), strlen(text));
    st = pclose(p);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

START_TEST(metrics_render_passes_promtool_check)
{
    metrics_t *m = metrics_new();
    char *text;

    /* scripts/setup-deps.sh installs it: its absence is a failure, not a pass. */
    ck_assert_msg(access(PROMTOOL, X_OK) == 0, "%s is missing: apt-get install prometheus",
                  PROMTOOL);
    metric_inc(metrics_counter(m, "tessera_ps_push_requests_total", "Push requests handled.",
                               (const char *[]){"shard", "0", NULL}));
    metric_inc(metrics_counter(m, "tessera_ps_push_requests_total", "Push requests handled.",
                               (const char *[]){"shard", "1", NULL}));
    metric_set(metrics_gauge(m, "tessera_ps_param_bytes", "Parameter bytes \"held\"\\.", NULL),
               1 << 20);
    metric_observe(metrics_histogram(m, "tessera_ps_pull_duration_seconds", "Pull latency.",
                                     (const char *[]){"shard", "0", NULL}, NULL, 0),
                   0.03);
    text = render(m);
    ck_assert_int_eq(promtool_check(text), 0);
    /* The check is real: promtool flags a counter without _total. */
    ck_assert_int_ne(promtool_check("# HELP x_seconds X.\n# TYPE x_seconds counter\n"
                                    "x_seconds 1\n"),
                     0);
    free(text);
    metrics_free(m);
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("registry");
    TCase *http = tcase_create("http");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, metrics_render_groups_families_with_exact_text);
    tcase_add_test(tc, metrics_histogram_default_bounds_with_labels);
    tcase_add_test(tc, metrics_histogram_inf_bucket_equals_count);
    tcase_add_test(tc, metrics_values_print_as_go_floats);
    tcase_add_test(tc, metrics_rejects_invalid_registrations);
    tcase_add_test(tc, metrics_updates_of_the_wrong_kind_are_ignored);
    tcase_add_test(tc, metrics_escapes_help_and_label_values);
    tcase_add_test(tc, metrics_process_metrics_are_plausible);
    tcase_add_test(tc, metrics_concurrent_updates_sum_exactly);
    suite_add_tcase(s, tc);
    tcase_set_timeout(http, 30);
    tcase_add_test(http, metrics_server_serves_metrics_over_http);
    tcase_add_test(http, metrics_server_taken_port_fails_with_address_in_use);
    tcase_add_test(http, metrics_server_rejects_bad_addresses);
    tcase_add_test(http, metrics_server_wildcard_accepts_ipv4);
    tcase_add_test(http, metrics_render_passes_promtool_check);
    suite_add_tcase(s, http);
    return s;
}

/* The IPv6 case runs as a test of its own (meson passes --ipv6) so that a machine without an
 * IPv6 loopback shows it as skipped (exit 77) instead of passing it silently. */
int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--ipv6") == 0) {
        Suite *s;
        TCase *tc;

        if (!ipv6_loopback_usable()) {
            fprintf(stderr, "skipped: no IPv6 loopback on this machine\n");
            return 77;
        }
        s = suite_create("metrics_ipv6");
        tc = tcase_create("ipv6");
        tcase_add_test(tc, metrics_server_listens_on_ipv6_literal);
        suite_add_tcase(s, tc);
        return check_run(s, CK_FORK);
    }
    return check_run(metrics_suite(), CK_FORK);
}
