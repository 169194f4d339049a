/* bench-rpc: how fast Tessera's RPC runtime moves small calls and tensors over loopback.
 *
 * Starts a real tessera-ps, then measures in the same run, in interleaved rounds so that a noisy
 * neighbour spreads over every figure: tiny unary round trips per second (Diagnostics.Sink with
 * an empty payload) on one and on two client threads, each with its own channel and hence its
 * own TCP connection; push throughput of 1, 16 and 64 MiB tensors (Sink with the tensor as one
 * zero-copy segment from a buffer that stays allocated, no checksum); and single-stream loopback
 * TCP with iperf3 as the ceiling. Before that it checks integrity once: a 64 MiB Echo round trip
 * compared with memcmp and a Sink whose server-side CRC-32C must match crc32c() of the buffer.
 *
 * It reports against the targets of the issue (64 MiB push >= 50 % of iperf3, tiny unary >=
 * 10,000 calls/s on one thread) without failing on them: the exit status is 0 unless something
 * failed to run or the integrity check found a difference. Run it through bench/rpc/run.sh. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "base/crc32c.h"
#include "rpc/client.h"
#include "base/clock.h"

#define MIB               ((size_t)1 << 20)
#define MIN_PUSH_CALLS    5
#define WARMUP_PUSH_CALLS 2
#define CALL_TIMEOUT_MS   60000
#define TARGET_PUSH_RATIO 0.50
#define TARGET_UNARY_RATE 10000.0

static const size_t push_sizes[] = {1 * MIB, 16 * MIB, 64 * MIB};
#define N_PUSH_SIZES (sizeof(push_sizes) / sizeof(push_sizes[0]))

/* ---- options ------------------------------------------------------------------------------ */

typedef struct bench_opts {
    long rounds;
    double seconds;        /* per measurement, after warm-up */
    double warmup_seconds; /* tiny unary warm-up */
    long iperf_seconds;
    bool iperf;
    const char *ps_path; /* NULL: beside this program */
} bench_opts_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: bench-rpc [--rounds=N] [--seconds=S] [--iperf-seconds=S] [--no-iperf]\n"
               "                 [--ps=PATH]\n"
               "  --rounds=N          interleaved repetitions of every measurement (default 3)\n"
               "  --seconds=S         length of each measurement after warm-up (default 3)\n"
               "  --iperf-seconds=S   iperf3 -t (default 5)\n"
               "  --no-iperf          skip the iperf3 reference\n"
               "  --ps=PATH           the tessera-ps to start (default: beside bench-rpc)\n");
}

static bool parse_long(const char *s, long lo, long hi, long *ret)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *ret = v;
    return true;
}

static bool parse_double(const char *s, double lo, double hi, double *ret)
{
    char *end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi))
        return false;
    *ret = v;
    return true;
}

/* Returns 0 to run, 1 for --help, 2 for a bad flag (after saying which). */
static int parse_args(int argc, char **argv, bench_opts_t *o)
{
    *o = (bench_opts_t){
        .rounds = 3, .seconds = 3.0, .warmup_seconds = 0.5, .iperf_seconds = 5, .iperf = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 1;
        if (strncmp(a, "--rounds=", 9) == 0)
            ok = parse_long(a + 9, 1, 100, &o->rounds);
        else if (strncmp(a, "--seconds=", 10) == 0)
            ok = parse_double(a + 10, 0.1, 600, &o->seconds);
        else if (strncmp(a, "--iperf-seconds=", 16) == 0)
            ok = parse_long(a + 16, 1, 600, &o->iperf_seconds);
        else if (strcmp(a, "--no-iperf") == 0)
            o->iperf = false;
        else if (strncmp(a, "--ps=", 5) == 0 && a[5] != '\0')
            o->ps_path = a + 5;
        else
            ok = false;
        if (!ok) {
            fprintf(stderr, "bench-rpc: bad argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    return 0;
}

/* ---- calls ---------------------------------------------------------------------------------- */

/* Diagnostics.Sink of len bytes from buf (one segment, borrowed until the call returns). With
 * checksum set the server computes the CRC-32C, returned in *ret_crc. Fails when the server
 * reports another byte count. */
static status_t sink(rpc_channel_t *ch, const void *buf, size_t len, bool checksum,
                     uint32_t *ret_crc, rpc_error_t *err)
{
    Tessera__V1__SinkRequest req = TESSERA__V1__SINK_REQUEST__INIT;
    Tessera__V1__SinkResponse *resp = NULL;
    rpc_iov_t iov = {buf, len, NULL, NULL};
    rpc_call_opts_t opts = {.payload = &iov, .n_payload = len > 0 ? 1 : 0};
    status_t rc;

    req.checksum = checksum;
    rc = rpc_diag_sink(ch, &req, &opts, &resp, NULL, err);
    if (rc != STATUS_OK)
        return rc;
    if (resp->bytes != len) {
        err->status = rc = STATUS_INTERNAL;
        snprintf(err->message, sizeof(err->message),
                 "Sink answered %" PRIu64 " bytes received, %zu were sent", resp->bytes, len);
    } else if (ret_crc != NULL) {
        *ret_crc = resp->crc32c;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

/* ---- tiny unary ----------------------------------------------------------------------------- */

typedef struct unary_worker {
    rpc_channel_t *ch;
    pthread_barrier_t *barrier;
    double warmup_s, seconds;
    uint64_t calls;
    double elapsed;
    samples_t lat_us;
    status_t rc;
    rpc_error_t err;
} unary_worker_t;

/* Warms up, meets the other threads at the barrier, then calls back to back for `seconds`. */
static void *unary_thread(void *arg)
{
    unary_worker_t *w = arg;
    double t0 = clock_now_s(), t;

    while (w->rc == STATUS_OK && clock_now_s() - t0 < w->warmup_s)
        w->rc = sink(w->ch, NULL, 0, false, NULL, &w->err);
    pthread_barrier_wait(w->barrier);
    if (w->rc != STATUS_OK)
        return NULL;
    t0 = t = clock_now_s();
    while (t - t0 < w->seconds) {
        double t1;
        w->rc = sink(w->ch, NULL, 0, false, NULL, &w->err);
        if (w->rc != STATUS_OK)
            break;
        t1 = clock_now_s();
        if (!samples_add(&w->lat_us, (t1 - t) * 1e6)) {
            w->rc = STATUS_NO_MEMORY;
            break;
        }
        w->calls++;
        t = t1;
    }
    w->elapsed = t - t0;
    return NULL;
}

/* Runs n_threads client threads, thread i on channels[i], and adds the combined calls/s to
 * *rates and each call's latency to *lat_us. */
static status_t bench_unary(rpc_channel_t **channels, int n_threads, const bench_opts_t *o,
                            samples_t *rates, samples_t *lat_us, status_msg_t *err)
{
    unary_worker_t w[2] = {0};
    pthread_t tid[2];
    pthread_barrier_t barrier;
    uint64_t calls = 0;
    double elapsed = 0;
    status_t rc = STATUS_OK;
    int started = 0;

    if (n_threads < 1 || n_threads > 2)
        return status_fail(err, STATUS_INVALID_USAGE, "bench_unary: 1 or 2 threads");
    pthread_barrier_init(&barrier, NULL, (unsigned)n_threads);
    for (int i = 0; i < n_threads; i++) {
        w[i] = (unary_worker_t){.ch = channels[i],
                                .barrier = &barrier,
                                .warmup_s = o->warmup_seconds,
                                .seconds = o->seconds};
        if (pthread_create(&tid[i], NULL, unary_thread, &w[i]) != 0) {
            rc = status_fail(err, STATUS_SYSTEM, "cannot start a client thread");
            break;
        }
        started++;
    }
    if (started < n_threads) {
        /* The barrier counts n_threads: stand in for the threads that did not start. */
        for (int i = started; i < n_threads; i++)
            pthread_barrier_wait(&barrier);
    }
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&barrier);
    for (int i = 0; i < started; i++) {
        if (rc == STATUS_OK && w[i].rc != STATUS_OK)
            rc = status_fail(err, w[i].rc, "tiny unary call on %s failed: %s",
                             rpc_channel_target(w[i].ch), w[i].err.message);
        calls += w[i].calls;
        elapsed = w[i].elapsed > elapsed ? w[i].elapsed : elapsed;
        if (rc == STATUS_OK && !samples_merge(lat_us, &w[i].lat_us))
            rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        samples_free(&w[i].lat_us);
    }
    if (rc == STATUS_OK && (elapsed <= 0 || !samples_add(rates, (double)calls / elapsed)))
        rc = status_fail(err, STATUS_INTERNAL, "no tiny unary calls were timed");
    return rc;
}

/* ---- push ----------------------------------------------------------------------------------- */

/* Pushes len bytes of buf for o->seconds (at least MIN_PUSH_CALLS calls) after a warm-up of
 * o->warmup_seconds (at least WARMUP_PUSH_CALLS calls), adding
 * each call's MB/s to *per_call and the round's median to *round_medians. */
static status_t bench_push(rpc_channel_t *ch, const void *buf, size_t len, const bench_opts_t *o,
                           samples_t *per_call, samples_t *round_medians, status_msg_t *err)
{
    samples_t round = {0};
    rpc_error_t rerr;
    status_t rc = STATUS_OK;
    double t0 = clock_now_s();

    /* A fresh connection needs about a second before gRPC's flow-control window (sized from its
     * bandwidth-delay probes) lets large messages through at full speed. */
    for (int i = 0;
         rc == STATUS_OK && (i < WARMUP_PUSH_CALLS || clock_now_s() - t0 < o->warmup_seconds); i++)
        rc = sink(ch, buf, len, false, NULL, &rerr);
    t0 = clock_now_s();
    while (rc == STATUS_OK && (round.n < MIN_PUSH_CALLS || clock_now_s() - t0 < o->seconds)) {
        double t = clock_now_s();
        rc = sink(ch, buf, len, false, NULL, &rerr);
        if (rc == STATUS_OK && !samples_add(&round, (double)len / MB / (clock_now_s() - t)))
            rc = rerr.status = STATUS_NO_MEMORY;
    }
    if (rc != STATUS_OK) {
        status_fail(err, rc, "push of %zu MiB failed: %s", len / MIB, rerr.message);
    } else if (!samples_merge(per_call, &round) ||
               !samples_add(round_medians, samples_quantile(&round, 0.5))) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    samples_free(&round);
    return rc;
}

/* ---- integrity ------------------------------------------------------------------------------ */

/* Echoes len bytes of buf into recv (len bytes) and compares, then has the server checksum the
 * same bytes. Prints both results; STATUS_INTERNAL when either differs. */
static status_t check_integrity(rpc_channel_t *ch, const uint8_t *buf, uint8_t *recv, size_t len,
                                status_msg_t *err)
{
    Tessera__V1__EchoRequest req = TESSERA__V1__ECHO_REQUEST__INIT;
    Tessera__V1__EchoResponse *resp = NULL;
    rpc_iov_t iov = {buf, len, NULL, NULL};
    rpc_call_opts_t opts = {.payload = &iov, .n_payload = 1, .recv_buf = recv, .recv_cap = len};
    rpc_payload_t payload = {0};
    rpc_error_t rerr;
    uint32_t local, remote = 0;
    bool echo_ok, crc_ok;
    status_t rc;

    memset(recv, 0, len);
    rc = rpc_diag_echo(ch, &req, &opts, &resp, &payload, &rerr);
    if (rc != STATUS_OK)
        return status_fail(err, rc, "Echo of %zu MiB failed: %s", len / MIB, rerr.message);
    echo_ok = payload.len == len && memcmp(payload.data, buf, len) == 0;
    printf("  Echo round trip, returned payload memcmp'd to the sent one   %-4s  %zu of %zu "
           "bytes back%s\n",
           echo_ok ? "OK" : "FAIL", payload.len, len,
           echo_ok ? ", identical" : (payload.len == len ? ", CONTENT DIFFERS" : ""));
    rpc_payload_done(&payload);
    protobuf_c_message_free_unpacked(&resp->base, NULL);

    local = crc32c(buf, len);
    rc = sink(ch, buf, len, true, &remote, &rerr);
    if (rc != STATUS_OK)
        return status_fail(err, rc, "Sink with checksum failed: %s", rerr.message);
    crc_ok = remote == local;
    printf("  Sink checksum=1, server CRC-32C vs local crc32c()            %-4s  0x%08x %s "
           "0x%08x\n",
           crc_ok ? "OK" : "FAIL", remote, crc_ok ? "==" : "!=", local);
    if (!echo_ok || !crc_ok)
        return status_fail(err, STATUS_INTERNAL, "the payload came back altered");
    return STATUS_OK;
}

/* ---- the run -------------------------------------------------------------------------------- */

typedef struct results {
    samples_t unary_rate[2];             /* calls/s, one per round, for 1 and 2 threads */
    samples_t unary_lat[2];              /* microseconds, one per call */
    samples_t push[N_PUSH_SIZES];        /* MB/s, one per call */
    samples_t push_rounds[N_PUSH_SIZES]; /* MB/s, the median of each round */
    samples_t iperf;                     /* MB/s, one per round */
    status_msg_t iperf_err;
    bool iperf_failed;
} results_t;

static void results_free(results_t *r)
{
    for (int i = 0; i < 2; i++) {
        samples_free(&r->unary_rate[i]);
        samples_free(&r->unary_lat[i]);
    }
    for (size_t i = 0; i < N_PUSH_SIZES; i++) {
        samples_free(&r->push[i]);
        samples_free(&r->push_rounds[i]);
    }
    samples_free(&r->iperf);
}

/* One round of every measurement, printed as one row of the rounds table. */
static status_t run_round(rpc_channel_t **channels, const uint8_t *buf, const bench_opts_t *o,
                          int round, results_t *r, status_msg_t *err)
{
    printf("  round %-3d", round);
    fflush(stdout);
    for (int t = 0; t < 2; t++) {
        STATUS_CHECK(bench_unary(channels, t + 1, o, &r->unary_rate[t], &r->unary_lat[t], err));
        printf(" %11s", NUM(r->unary_rate[t].v[r->unary_rate[t].n - 1]));
        fflush(stdout);
    }
    for (size_t i = 0; i < N_PUSH_SIZES; i++) {
        samples_t *m = &r->push_rounds[i];
        STATUS_CHECK(bench_push(channels[0], buf, push_sizes[i], o, &r->push[i], m, err));
        printf(" %12s", NUM(m->v[m->n - 1]));
        fflush(stdout);
    }
    if (o->iperf && !r->iperf_failed) {
        double mbps = 0;
        if (run_iperf(o->iperf_seconds, &mbps, &r->iperf_err) == STATUS_OK &&
            samples_add(&r->iperf, mbps)) {
            printf(" %10s", NUM(mbps));
        } else {
            r->iperf_failed = true;
            printf(" %10s", "failed");
        }
    }
    printf("\n");
    fflush(stdout);
    return STATUS_OK;
}

static void print_summary(const bench_opts_t *o, results_t *r)
{
    static const char *const labels[] = {"1 client thread", "2 client threads"};
    double push64, iperf, unary1;
    char line[128];

    printf("\nTiny unary RPC: Diagnostics.Sink, empty payload, one call in flight per thread,\n"
           "each thread with its own channel (own TCP connection)\n");
    printf("  %-18s %10s %9s %9s %9s %9s\n", "", "median", "min", "max", "p50 us", "p99 us");
    for (int t = 0; t < 2; t++) {
        samples_t *rate = &r->unary_rate[t], *lat = &r->unary_lat[t];
        printf("  %-18s %10s %9s %9s %9.1f %9.1f   calls/s\n", labels[t],
               NUM(samples_quantile(rate, 0.5)), NUM(samples_quantile(rate, 0)),
               NUM(samples_quantile(rate, 1)), samples_quantile(lat, 0.5),
               samples_quantile(lat, 0.99));
    }

    printf("\nPush: Diagnostics.Sink, tensor as one zero-copy segment from a buffer that stays\n"
           "allocated, no checksum; per-call throughput over all rounds (MB/s, 1 MB = 10^6 "
           "bytes)\n");
    printf("  %-8s %7s %12s %12s %12s %14s\n", "tensor", "calls", "median MB/s", "best MB/s",
           "worst MB/s", "median ms/call");
    for (size_t i = 0; i < N_PUSH_SIZES; i++) {
        samples_t *s = &r->push[i];
        double med = samples_quantile(s, 0.5);
        printf("  %3zu MiB  %7zu %12s %12s %12s %14.2f\n", push_sizes[i] / MIB, s->n, NUM(med),
               NUM(samples_quantile(s, 1)), NUM(samples_quantile(s, 0)),
               (double)push_sizes[i] / MB / med * 1e3);
    }

    printf("\nLoopback TCP: iperf3 -c 127.0.0.1 -t %ld -J, single stream, "
           "end.sum_received (MB/s)\n",
           o->iperf_seconds);
    if (!o->iperf)
        printf("  skipped (--no-iperf)\n");
    else if (r->iperf_failed)
        printf("  FAILED: %s\n", r->iperf_err.text);
    else
        printf("  median %s   min %s   max %s   (%zu runs)\n",
               NUM(samples_quantile(&r->iperf, 0.5)), NUM(samples_quantile(&r->iperf, 0)),
               NUM(samples_quantile(&r->iperf, 1)), r->iperf.n);

    push64 = samples_quantile(&r->push[N_PUSH_SIZES - 1], 0.5);
    iperf = r->iperf_failed ? NAN : samples_quantile(&r->iperf, 0.5);
    unary1 = samples_quantile(&r->unary_rate[0], 0.5);
    printf("\nTargets of the issue (a report, not a test)\n");
    printf("  %-42s %-36s %s\n", "target", "measured (medians)", "result");
    if (isnan(iperf))
        snprintf(line, sizeof(line), "%s MB/s, no iperf3 figure", NUM(push64));
    else
        snprintf(line, sizeof(line), "%s / %s MB/s = %.1f%%", NUM(push64), NUM(iperf),
                 100 * push64 / iperf);
    printf("  %-42s %-36s %s\n", "64 MiB push >= 50% of iperf3", line,
           isnan(iperf)                          ? "n/a"
           : push64 >= TARGET_PUSH_RATIO * iperf ? "PASS"
                                                 : "MISS");
    snprintf(line, sizeof(line), "%s calls/s", NUM(unary1));
    printf("  %-42s %-36s %s\n", "tiny unary >= 10,000 calls/s on one thread", line,
           unary1 >= TARGET_UNARY_RATE ? "PASS" : "MISS");
}

/* Everything after the server is up: channels, integrity, the rounds, the summary. */
static status_t bench_all(const bench_opts_t *o, const char *target, status_msg_t *err)
{
    rpc_channel_opts_t copts = {.timeout_ms = CALL_TIMEOUT_MS};
    rpc_channel_t *channels[2] = {NULL, NULL};
    size_t max_len = push_sizes[N_PUSH_SIZES - 1];
    uint8_t *buf = malloc(max_len), *recv = malloc(max_len);
    results_t r = {0};
    status_t rc = STATUS_OK;

    if (buf == NULL || recv == NULL) {
        rc = status_fail(err, STATUS_NO_MEMORY, "cannot allocate 2 x %zu MiB", max_len / MIB);
        goto out;
    }
    fill_pattern(buf, max_len);
    for (int i = 0; i < 2; i++)
        STATUS_CHECK_GOTO(rpc_channel_new(target, &copts, &channels[i], err), rc, out);

    printf("\nIntegrity (%zu MiB of pseudo-random bytes, once)\n", max_len / MIB);
    STATUS_CHECK_GOTO(check_integrity(channels[0], buf, recv, max_len, err), rc, out);

    printf("\nRounds (each figure after warm-up; unary in calls/s, push: the round's median "
           "MB/s)\n");
    printf("  %-9s %11s %11s %12s %12s %12s%s\n", "", "unary 1 thr", "unary 2 thr", "push 1 MiB",
           "push 16 MiB", "push 64 MiB", o->iperf ? "     iperf3" : "");
    for (long i = 1; i <= o->rounds; i++)
        STATUS_CHECK_GOTO(run_round(channels, buf, o, (int)i, &r, err), rc, out);
    print_summary(o, &r);
    if (o->iperf && r.iperf_failed)
        rc = status_fail(err, STATUS_REMOTE, "%s", r.iperf_err.text);
out:
    for (int i = 0; i < 2; i++)
        rpc_channel_free(channels[i]);
    results_free(&r);
    free(buf);
    free(recv);
    return rc;
}

static status_t body(const void *opts, const char *target, const char *metrics, status_msg_t *err)
{
    return bench_all(opts, target, err);
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    char client[128];
    int pr = parse_args(argc, argv, &o);

    if (pr != 0) {
        if (pr == 1)
            usage(stdout);
        return pr == 1 ? 0 : 2;
    }
    snprintf(client, sizeof(client),
             "this process; %ld rounds, %.1f s per measurement after %.1f s warm-up", o.rounds,
             o.seconds, o.warmup_seconds);
    return bench_against_ps("bench-rpc", "Tessera RPC benchmark (bench/rpc)", client, o.ps_path, 2,
                            body, &o);
}
