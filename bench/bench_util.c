/* Helpers the benchmarks share; see bench_util.h. */
#define _GNU_SOURCE
#include "bench_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <grpc/grpc.h>

#include "base/clock.h"
#include "base/log.h"
#include "daemon/launch.h"
#include "rpc/types.h"

#define PS_START_TIMEOUT_MS 15000
#define PS_STOP_TIMEOUT_MS  10000
#define IPERF_START_TIMEOUT 5000  /* ms for the iperf3 server to listen */
#define IPERF_EXTRA_TIMEOUT 20000 /* ms beyond -t for the client to report */

extern char **environ;

/* ---- samples and formatting --------------------------------------------------------------- */

bool samples_add(samples_t *s, double x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        double *nv = realloc(s->v, cap * sizeof(*nv));
        if (nv == NULL)
            return false;
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return true;
}

bool samples_merge(samples_t *dst, const samples_t *src)
{
    for (size_t i = 0; i < src->n; i++)
        if (!samples_add(dst, src->v[i]))
            return false;
    return true;
}

void samples_free(samples_t *s)
{
    free(s->v);
    *s = (samples_t){0};
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0 = min, 0.5 = median, 1 = max), interpolated; NAN when empty. Sorts. */
double samples_quantile(samples_t *s, double q)
{
    double pos, frac;
    size_t lo;

    if (s->n == 0)
        return NAN;
    qsort(s->v, s->n, sizeof(*s->v), cmp_double);
    pos = q * (double)(s->n - 1);
    lo = (size_t)pos;
    frac = pos - (double)lo;
    if (lo + 1 >= s->n)
        return s->v[s->n - 1];
    return s->v[lo] * (1 - frac) + s->v[lo + 1] * frac;
}

/* Formats v rounded to an integer with thousands separators ("12,345"), or "n/a". */
const char *fmt_num(char *buf, size_t len, double v)
{
    char digits[32], *out = buf;
    size_t n, lead;
    long long x;

    if (isnan(v)) {
        snprintf(buf, len, "n/a");
        return buf;
    }
    x = llround(v);
    snprintf(digits, sizeof(digits), "%lld", x < 0 ? -x : x);
    n = strlen(digits);
    if (len < n + n / 3 + 2)
        return "?";
    if (x < 0)
        *out++ = '-';
    lead = n % 3 ? n % 3 : 3;
    memcpy(out, digits, lead);
    out += lead;
    for (size_t i = lead; i < n; i += 3) {
        *out++ = ',';
        memcpy(out, digits + i, 3);
        out += 3;
    }
    *out = '\0';
    return buf;
}

/* ---- iperf3 --------------------------------------------------------------------------------- */

/* Spawns argv (searched on $PATH) with its stdout on a pipe whose read end is returned. */
status_t spawn_piped(char *const argv[], pid_t *ret_pid, int *ret_fd, status_msg_t *err)
{
    posix_spawn_file_actions_t fa;
    int fds[2], e;

    if (pipe2(fds, O_CLOEXEC) != 0)
        return status_fail(err, STATUS_SYSTEM, "pipe: %s", strerror(errno));
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    e = posix_spawnp(ret_pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (e != 0) {
        close(fds[0]);
        return status_fail(err, STATUS_SYSTEM, "cannot run %s: %s", argv[0], strerror(e));
    }
    *ret_fd = fds[0];
    return STATUS_OK;
}

/* Appends what fd has to *buf until `until` appears in it (NULL: until EOF) or the deadline. */
static status_t read_until(int fd, const char *until, int64_t timeout_ms, char **buf, size_t *len,
                           size_t *cap)
{
    double deadline = clock_now_s() + (double)timeout_ms / 1000;

    for (;;) {
        struct pollfd pfd = {fd, POLLIN, 0};
        double left = deadline - clock_now_s();
        ssize_t n;

        if (until != NULL && *buf != NULL && strstr(*buf, until) != NULL)
            return STATUS_OK;
        if (left <= 0)
            return STATUS_TIMEOUT;
        int pr = poll(&pfd, 1, (int)(left * 1000) + 1);

        if (pr < 0 && errno == EINTR)
            continue;
        if (pr < 0)
            return STATUS_SYSTEM;
        if (pr == 0)
            continue;
        if (*len + 4096 + 1 > *cap) {
            size_t ncap = (*cap ? *cap * 2 : 16384) + 4096;
            char *nb = realloc(*buf, ncap);
            if (nb == NULL)
                return STATUS_NO_MEMORY;
            *buf = nb;
            *cap = ncap;
        }
        n = read(fd, *buf + *len, 4096);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return STATUS_SYSTEM;
        if (n == 0)
            return until == NULL ? STATUS_OK : STATUS_REMOTE;
        *len += (size_t)n;
        (*buf)[*len] = '\0';
    }
}

/* Waits for pid, killing it when it has not exited within timeout_ms. */
int reap_child(pid_t pid, int64_t timeout_ms)
{
    double deadline = clock_now_s() + (double)timeout_ms / 1000;
    int st = 0;

    while (waitpid(pid, &st, WNOHANG) == 0) {
        struct timespec ts = {0, 10 * 1000000};
        if (clock_now_s() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        nanosleep(&ts, NULL);
    }
    return st;
}

/* A port on 127.0.0.1 that was free a moment ago. */
int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* Reads end.sum_received.bits_per_second from iperf3's -J report. */
static status_t parse_iperf_json(const char *json, double *ret_mbps, status_msg_t *err)
{
    cJSON *root = cJSON_Parse(json);
    const cJSON *end, *sum, *bps, *error;
    status_t rc = STATUS_OK;

    if (root == NULL)
        return status_fail(err, STATUS_BAD_MESSAGE, "iperf3 -J printed no JSON");
    error = cJSON_GetObjectItemCaseSensitive(root, "error");
    end = cJSON_GetObjectItemCaseSensitive(root, "end");
    sum = cJSON_GetObjectItemCaseSensitive(end, "sum_received");
    bps = cJSON_GetObjectItemCaseSensitive(sum, "bits_per_second");
    if (cJSON_IsString(error))
        rc = status_fail(err, STATUS_REMOTE, "iperf3: %s", error->valuestring);
    else if (!cJSON_IsNumber(bps) || bps->valuedouble <= 0)
        rc = status_fail(err, STATUS_BAD_MESSAGE, "iperf3 -J has no end.sum_received");
    else
        *ret_mbps = bps->valuedouble / 8 / MB;
    cJSON_Delete(root);
    return rc;
}

/* Runs `iperf3 -s -1` on a free 127.0.0.1 port and one single-stream client against it. */
status_t run_iperf(long seconds, double *ret_mbps, status_msg_t *err)
{
    char port_s[16], secs_s[16];
    char *srv_argv[] = {"iperf3", "-s",   "-1",           "-B", "127.0.0.1",
                        "-p",     port_s, "--forceflush", NULL};
    char *cli_argv[] = {"iperf3", "-c", "127.0.0.1", "-p", port_s, "-t", secs_s, "-J", NULL};
    char *sbuf = NULL, *cbuf = NULL;
    size_t slen = 0, scap = 0, clen = 0, ccap = 0;
    pid_t spid = -1, cpid = -1;
    int sfd = -1, cfd = -1, port = free_port(), cst;
    status_t rc;

    if (port < 0)
        return status_fail(err, STATUS_SYSTEM, "no free port for iperf3: %s", strerror(errno));
    snprintf(port_s, sizeof(port_s), "%d", port);
    snprintf(secs_s, sizeof(secs_s), "%ld", seconds);
    STATUS_CHECK(spawn_piped(srv_argv, &spid, &sfd, err));
    rc = read_until(sfd, "Server listening", IPERF_START_TIMEOUT, &sbuf, &slen, &scap);
    if (rc != STATUS_OK) {
        rc = status_fail(err, rc, "iperf3 -s did not start listening on 127.0.0.1:%d", port);
        goto out;
    }
    STATUS_CHECK_GOTO(spawn_piped(cli_argv, &cpid, &cfd, err), rc, out);
    rc = read_until(cfd, NULL, seconds * 1000 + IPERF_EXTRA_TIMEOUT, &cbuf, &clen, &ccap);
    cst = reap_child(cpid, rc == STATUS_OK ? 5000 : 0);
    if (rc != STATUS_OK || cbuf == NULL) {
        rc = status_fail(err, rc != STATUS_OK ? rc : STATUS_REMOTE, "iperf3 -c gave no report");
        goto out;
    }
    rc = parse_iperf_json(cbuf, ret_mbps, err);
    if (rc == STATUS_OK && !(WIFEXITED(cst) && WEXITSTATUS(cst) == 0))
        rc = status_fail(err, STATUS_REMOTE, "iperf3 -c exited with status 0x%x", cst);
out:
    if (cfd >= 0)
        close(cfd);
    if (sfd >= 0) {
        /* -1 makes the server exit after its one test: drain its report so it never blocks. */
        read_until(sfd, NULL, rc == STATUS_OK ? 5000 : 0, &sbuf, &slen, &scap);
        close(sfd);
    }
    if (spid > 0)
        reap_child(spid, rc == STATUS_OK ? 5000 : 0);
    free(sbuf);
    free(cbuf);
    return rc;
}

/* Fills buf with a pseudo-random pattern (xorshift64), so that a misplaced block shows. */
void fill_pattern(uint8_t *buf, size_t len)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }
}

status_t bench_start_ps(const char *path, int threads, char *const *extra, launch_proc_t *ps,
                        char *ret_shown, size_t len, status_msg_t *err)
{
    char prog[4096], threads_flag[32];
    char *argv[16] = {prog, "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", threads_flag,
                      "--log-level=warning"};

    for (int i = 0, a = 5; extra != NULL && extra[i] != NULL && a < 15; i++)
        argv[a++] = extra[i];
    if (path != NULL)
        snprintf(prog, sizeof(prog), "%s", path);
    else
        STATUS_CHECK(launch_find_program("tessera-ps", prog, sizeof(prog), err));
    snprintf(threads_flag, sizeof(threads_flag), "--threads=%d", threads);
    STATUS_CHECK(launch_start("ps 0", argv, NULL, PS_START_TIMEOUT_MS, ps, err));
    if (realpath(prog, ret_shown) == NULL)
        snprintf(ret_shown, len, "%s", prog);
    return STATUS_OK;
}

bool bench_stop_ps(const char *prog, launch_proc_t *ps)
{
    int st = 0;
    if (launch_stop(ps, SIGTERM, PS_STOP_TIMEOUT_MS, &st) != STATUS_OK || !WIFEXITED(st) ||
        WEXITSTATUS(st) != 0) {
        fprintf(stderr, "%s: tessera-ps did not stop cleanly (wait status 0x%x)\n", prog, st);
        return false;
    }
    return true;
}

static int finish(const char *prog, launch_proc_t *ps, status_t rc, const status_msg_t *err)
{
    if (!bench_stop_ps(prog, ps) && rc == STATUS_OK)
        rc = STATUS_REMOTE;
    if (rc != STATUS_OK && err->text[0] != '\0')
        fprintf(stderr, "%s: %s\n", prog, err->text);
    fflush(stdout);
    return rc == STATUS_OK ? 0 : 1;
}

int bench_against_ps(const char *prog, const char *title, const char *client_line,
                     const char *ps_path, int threads, bench_body_fn body, const void *opts)
{
    char shown[PATH_MAX];
    status_msg_t err = {0};
    launch_proc_t ps;
    struct utsname un;
    status_t rc;

    signal(SIGPIPE, SIG_IGN);
    log_set_identity(prog, -1);
    log_set_level(LOG_LEVEL_WARNING);
    if (uname(&un) != 0)
        snprintf(un.release, sizeof(un.release), "?");
    printf("%s\n", title);
    printf("  host     Linux %s, %ld CPUs online, gRPC core %s\n", un.release,
           sysconf(_SC_NPROCESSORS_ONLN), grpc_version_string());
    printf("  client   %s\n", client_line);
    printf("  units    MB/s = 10^6 bytes per second; MiB = 2^20 bytes\n");
    /* The daemon is spawned before gRPC starts its threads here. */
    rc = bench_start_ps(ps_path, threads, NULL, &ps, shown, sizeof(shown), &err);
    if (rc != STATUS_OK) {
        fprintf(stderr, "%s: %s\n", prog, err.text);
        return 1;
    }
    printf("  server   %s --threads=%d, pid %d, gRPC on %s\n", shown, threads, (int)ps.pid,
           ps.listen);
    rpc_log_init();
    grpc_init();
    rc = body(opts, ps.listen, ps.metrics, &err);
    grpc_shutdown();
    return finish(prog, &ps, rc, &err);
}
