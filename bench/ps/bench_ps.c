/* bench-ps: what one tessera-ps sustains over loopback, against iperf3 as the ceiling.
 *
 * Starts a real tessera-ps, creates a job with SGD and two float32 variables, then measures in
 * interleaved rounds (so that a noisy neighbour spreads over every figure):
 *   - push+pull of one 64 MiB variable: PushPull calls that send a dense gradient of the whole
 *     variable (zero-copy from a buffer that stays allocated), have the server apply SGD to it
 *     and return the updated 64 MiB; the rate counts the bytes of both directions;
 *   - the same as a worker sends a step of it: chunks of one PS block (1 MiB) over 4
 *     connections at once (iperf3 below is one stream: the comparison is with what a single
 *     TCP stream carries, not with four);
 *   - single-stream loopback TCP with iperf3;
 *   - 16 clients, each with its own channel (its own TCP connection) on its own thread, pushing
 *     1 MiB gradients of one shared variable as fast as they can: aggregate throughput and the
 *     latency of every push (p50, p99);
 *   - then push+pull of the same variable to a second tessera-ps with mutual TLS 1.3 (its
 *     certificates made by `tessera certs` in a temporary directory), in rounds interleaved with
 *     the plaintext one, and the ratio of the two.
 * After the timed calls of each round it checks that the values pulled are the ones SGD gives.
 *
 * It reports against the targets (push+pull >= 80% of iperf3; no push payload byte
 * copied in the PS's user space, read from its tessera_ps_push_copied_bytes_total; issue 14)
 * without failing on them: the exit status is 0 unless something failed to run or a check found
 * wrong values. Run it through bench/ps/run.sh. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "rpc/optimizer_proto.h"
#include "rpc/client.h"
#include "rpc/security.h"
#include "daemon/metrics.h"
#include "base/clock.h"

#define MIB             ((size_t)1 << 20)
#define JOB             "bench-ps"
#define LEARNING_RATE   0x1p-10 /* exact in float: the expected values are exact too */
#define MIN_BIG_CALLS   3
#define CALL_TIMEOUT_MS 60000
#define TARGET_RATIO    0.80
#define TARGET_TLS      0.70 /* push+pull over mTLS against plaintext */
#define MAX_CLIENTS     256

/* ---- options ------------------------------------------------------------------------------ */

typedef struct bench_opts {
    long rounds;
    double seconds; /* per measurement */
    long clients;
    long big_mib, small_mib;
    long iperf_seconds;
    bool iperf;
    bool tls;
    long ps_threads;
    const char *ps_path; /* NULL: beside this program */
} bench_opts_t;

static void usage(FILE *f)
{
    fprintf(f, "usage: bench-ps [--rounds=N] [--seconds=S] [--clients=N] [--big-mib=N]\n"
               "                [--small-mib=N] [--iperf-seconds=S] [--no-iperf] [--no-tls]\n"
               "                [--ps-threads=N] [--ps=PATH]\n"
               "Measures push+pull of one large variable against iperf3 and many clients\n"
               "pushing to one tessera-ps (defaults: 3 rounds of 3 s, 16 clients, 64 MiB and\n"
               "1 MiB, iperf3 for 3 s, as many server threads as CPUs).\n");
}

static bool parse_long(const char *s, long lo, long hi, long *ret)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *ret = v;
    return true;
}

/* Returns 0 to run, 1 after --help, 2 on a bad argument. */
static int parse_args(int argc, char **argv, bench_opts_t *o)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (bench_opts_t){.rounds = 3,
                        .seconds = 3,
                        .clients = 16,
                        .big_mib = 64,
                        .small_mib = 1,
                        .iperf_seconds = 3,
                        .iperf = true,
                        .tls = true,
                        .ps_threads = cpus > 0 ? cpus : 2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = strchr(a, '=');
        long secs;
        bool ok = true;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 1;
        if (strcmp(a, "--no-iperf") == 0)
            o->iperf = false;
        else if (strcmp(a, "--no-tls") == 0)
            o->tls = false;
        else if (v == NULL)
            ok = false;
        else if (strncmp(a, "--rounds=", 9) == 0)
            ok = parse_long(v + 1, 1, 1000, &o->rounds);
        else if (strncmp(a, "--seconds=", 10) == 0) {
            ok = parse_long(v + 1, 1, 3600, &secs);
            o->seconds = (double)secs;
        } else if (strncmp(a, "--clients=", 10) == 0)
            ok = parse_long(v + 1, 1, MAX_CLIENTS, &o->clients);
        else if (strncmp(a, "--big-mib=", 10) == 0)
            ok = parse_long(v + 1, 1, 1024, &o->big_mib);
        else if (strncmp(a, "--small-mib=", 12) == 0)
            ok = parse_long(v + 1, 1, 256, &o->small_mib);
        else if (strncmp(a, "--iperf-seconds=", 16) == 0)
            ok = parse_long(v + 1, 1, 600, &o->iperf_seconds);
        else if (strncmp(a, "--ps-threads=", 13) == 0)
            ok = parse_long(v + 1, 1, 256, &o->ps_threads);
        else if (strncmp(a, "--ps=", 5) == 0)
            o->ps_path = v + 1;
        else
            ok = false;
        if (!ok) {
            fprintf(stderr, "bench-ps: bad argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    return 0;
}

/* ---- requests ----------------------------------------------------------------------------- */

/* A float32 variable [rows, 256] in one shard, initialized to zeros. */
typedef struct var {
    const char *name;
    int64_t shape[2];
    size_t bytes;
    Tessera__V1__VariableShard msg;
    Tessera__V1__Initializer init;
    Tessera__V1__Initializer__Zeros zeros;
} var_t;

static void var_init(var_t *v, const char *name, size_t mib)
{
    memset(v, 0, sizeof(*v));
    v->name = name;
    v->bytes = mib * MIB;
    v->shape[0] = (int64_t)(v->bytes / (256 * sizeof(float)));
    v->shape[1] = 256;
    tessera__v1__variable_shard__init(&v->msg);
    tessera__v1__initializer__init(&v->init);
    tessera__v1__initializer__zeros__init(&v->zeros);
    v->init.kind_case = TESSERA__V1__INITIALIZER__KIND_ZEROS;
    v->init.zeros = &v->zeros;
    v->msg.variable = (char *)name;
    v->msg.num_shards = 1;
    v->msg.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
    v->msg.n_shape = v->msg.n_full_shape = 2;
    v->msg.shape = v->msg.full_shape = v->shape;
    v->msg.initializer = &v->init;
}

static status_t create_job(rpc_channel_t *ch, var_t *const *vars, size_t n, status_msg_t *err)
{
    Tessera__V1__CreateVariablesRequest req = TESSERA__V1__CREATE_VARIABLES_REQUEST__INIT;
    Tessera__V1__CreateVariablesResponse *resp = NULL;
    Tessera__V1__VariableShard *ptrs[4];
    optimizer_config_t sgd;
    optimizer_msg_t opt;
    rpc_error_t rerr;

    optimizer_config_default(OPTIMIZER_SGD, &sgd);
    sgd.schedule.kind = LR_CONSTANT;
    sgd.schedule.lr = LEARNING_RATE;
    optimizer_to_proto(&sgd, 1, &opt);
    for (size_t i = 0; i < n; i++)
        ptrs[i] = &vars[i]->msg;
    req.job = JOB;
    req.optimizer = &opt.msg;
    req.n_shards = n;
    req.shards = ptrs;
    if (rpc_ps_create_variables(ch, &req, NULL, &resp, NULL, &rerr) != STATUS_OK)
        return status_fail(err, rerr.status, "CreateVariables: %s", rerr.message);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return STATUS_OK;
}

/* A push of bytes [at, at + len) of v's gradient from grad (zero-copy; 0 and v->bytes: the
 * whole); with pull_after the updated values of those bytes come back into recv at the same
 * place. */
static status_t push_part(rpc_channel_t *ch, const var_t *v, const float *grad, bool pull_after,
                          float *recv, size_t at, size_t len, status_msg_t *err)
{
    Tessera__V1__PushRequest req = TESSERA__V1__PUSH_REQUEST__INIT;
    Tessera__V1__PushResponse *resp = NULL;
    Tessera__V1__PushItem item = TESSERA__V1__PUSH_ITEM__INIT, *items[1] = {&item};
    Tessera__V1__ShardKey key = TESSERA__V1__SHARD_KEY__INIT;
    Tessera__V1__TensorRef ref = TESSERA__V1__TENSOR_REF__INIT;
    rpc_iov_t iov = {(const char *)grad + at, len, NULL, NULL};
    rpc_call_opts_t o = {.timeout_ms = CALL_TIMEOUT_MS, .payload = &iov, .n_payload = 1};
    rpc_payload_t payload = {0};
    rpc_error_t rerr;
    status_t rc = STATUS_OK;

    key.variable = (char *)v->name;
    ref.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
    ref.n_shape = 2;
    ref.shape = (int64_t *)v->shape;
    ref.byte_length = len;
    ref.chunk_offset = at;
    item.key = &key;
    item.gradient_case = TESSERA__V1__PUSH_ITEM__GRADIENT_DENSE;
    item.dense = &ref;
    req.job = JOB;
    req.n_items = 1;
    req.items = items;
    req.pull_after = pull_after;
    if (pull_after) {
        o.recv_buf = (char *)recv + at;
        o.recv_cap = len;
    }
    if (rpc_unary(ch, pull_after ? RPC_PS_PUSH_PULL : RPC_PS_PUSH, &req.base, &o,
                  (ProtobufCMessage **)&resp, &payload, &rerr) != STATUS_OK)
        return status_fail(err, rerr.status, "%s of %s: %s", pull_after ? "PushPull" : "Push",
                           v->name, rerr.message);
    if (pull_after) {
        const Tessera__V1__TensorRef *t =
            resp->n_values == 1 && resp->values[0]->value ? resp->values[0]->value : NULL;
        if (t == NULL || t->payload_offset != 0 || t->byte_length != len || t->chunk_offset != at ||
            payload.len != len)
            rc = status_fail(err, STATUS_BAD_MESSAGE, "PushPull of %s returned %zu bytes, not %zu",
                             v->name, payload.len, len);
        else if (payload.data != (char *)recv + at)
            memcpy((char *)recv + at, payload.data, len);
    }
    rpc_payload_done(&payload);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

static status_t push(rpc_channel_t *ch, const var_t *v, const float *grad, bool pull_after,
                     float *recv, status_msg_t *err)
{
    return push_part(ch, v, grad, pull_after, recv, 0, v->bytes, err);
}

/* ---- push+pull of the large variable ------------------------------------------------------ */

/* Every value after `updates` SGD steps of gradient 1 from zeros is -updates * lr, exact. */
static status_t check_values(const float *v, size_t n, uint64_t updates, status_msg_t *err)
{
    float want = 0;
    for (uint64_t i = 0; i < updates; i++)
        want -= (float)LEARNING_RATE;
    for (size_t i = 0; i < n; i++)
        if (v[i] != want)
            return status_fail(err, STATUS_REMOTE,
                               "value %zu is %.9g after %llu updates; SGD gives %.9g", i,
                               (double)v[i], (unsigned long long)updates, (double)want);
    return STATUS_OK;
}

/* PushPull calls for o->seconds (at least MIN_BIG_CALLS): each call's MB/s (both directions)
 * into *per_call. */
static status_t bench_push_pull(rpc_channel_t *ch, const var_t *v, const float *grad, float *recv,
                                const bench_opts_t *o, uint64_t *updates, samples_t *per_call,
                                status_msg_t *err)
{
    double t0 = clock_now_s();
    for (int calls = 0; calls < MIN_BIG_CALLS || clock_now_s() - t0 < o->seconds; calls++) {
        double t = clock_now_s();
        STATUS_CHECK(push(ch, v, grad, true, recv, err));
        (*updates)++;
        if (!samples_add(per_call, 2.0 * (double)v->bytes / MB / (clock_now_s() - t)))
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    return check_values(recv, v->bytes / sizeof(float), *updates, err);
}

/* The same variable as a worker sends a step of it: chunks of one PS block (1 MiB of rows,
 * rpc/types.h) over CHUNK_CONNECTIONS connections at once (fewer with fewer --clients), each
 * taking every n-th chunk; one sample per whole variable pushed and pulled. */
#define CHUNK_CONNECTIONS 4

typedef struct chunker {
    rpc_channel_t *ch;
    const var_t *v;
    const float *grad;
    float *recv;
    size_t first, step, chunk;
    status_t rc;
    status_msg_t err;
} chunker_t;

static void *chunker_main(void *arg)
{
    chunker_t *k = arg;
    for (size_t at = k->first * k->chunk; at < k->v->bytes && k->rc == STATUS_OK;
         at += k->step * k->chunk)
        k->rc = push_part(k->ch, k->v, k->grad, true, k->recv, at,
                          k->v->bytes - at < k->chunk ? k->v->bytes - at : k->chunk, &k->err);
    return NULL;
}

static status_t bench_push_pull_chunked(rpc_channel_t **chs, const var_t *v, const float *grad,
                                        float *recv, const bench_opts_t *o, uint64_t *updates,
                                        samples_t *per_step, status_msg_t *err)
{
    size_t row_bytes = (size_t)v->shape[1] * sizeof(float);
    size_t chunk = rpc_block_rows(row_bytes) * row_bytes;
    size_t conns = o->clients < CHUNK_CONNECTIONS ? (size_t)o->clients : CHUNK_CONNECTIONS;
    double t0 = clock_now_s();

    for (int n = 0; n < MIN_BIG_CALLS || clock_now_s() - t0 < o->seconds; n++) {
        chunker_t k[CHUNK_CONNECTIONS];
        pthread_t tid[CHUNK_CONNECTIONS];
        double t = clock_now_s();
        size_t started = 0;
        for (; started < conns; started++) {
            k[started] = (chunker_t){.ch = chs[started],
                                     .v = v,
                                     .grad = grad,
                                     .recv = recv,
                                     .first = started,
                                     .step = conns,
                                     .chunk = chunk};
            if (pthread_create(&tid[started], NULL, chunker_main, &k[started]) != 0)
                break;
        }
        for (size_t i = 0; i < started; i++)
            pthread_join(tid[i], NULL);
        if (started < conns)
            return status_fail(err, STATUS_SYSTEM, "cannot start a thread");
        for (size_t i = 0; i < conns; i++)
            if (k[i].rc != STATUS_OK) {
                *err = k[i].err;
                return k[i].rc;
            }
        (*updates)++;
        if (!samples_add(per_step, 2.0 * (double)v->bytes / MB / (clock_now_s() - t)))
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    return check_values(recv, v->bytes / sizeof(float), *updates, err);
}

/* ---- many clients ------------------------------------------------------------------------- */

typedef struct start_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    double until; /* when the clients stop */
} start_gate_t;

typedef struct client {
    rpc_channel_t *ch;
    const var_t *v;
    const float *grad;
    start_gate_t *gate;
    samples_t lat_us;
    status_msg_t err;
    status_t rc;
    pthread_t tid;
} client_t;

static void *client_main(void *arg)
{
    client_t *c = arg;
    double until;

    pthread_mutex_lock(&c->gate->mu);
    while (!c->gate->open)
        pthread_cond_wait(&c->gate->cv, &c->gate->mu);
    until = c->gate->until;
    pthread_mutex_unlock(&c->gate->mu);
    while (c->rc == STATUS_OK && clock_now_s() < until) {
        double t = clock_now_s();
        c->rc = push(c->ch, c->v, c->grad, false, NULL, &c->err);
        if (c->rc == STATUS_OK && !samples_add(&c->lat_us, (clock_now_s() - t) * 1e6))
            c->rc = status_fail(&c->err, STATUS_NO_MEMORY, "out of memory");
    }
    return NULL;
}

/* o->clients threads push v's gradient for o->seconds once all are up: the round's MB/s into
 * *rate and every push's latency (us) into *lat; *pushes counts them. */
static status_t bench_clients(rpc_channel_t **chs, const var_t *v, const float *grad,
                              const bench_opts_t *o, samples_t *rate, samples_t *lat,
                              uint64_t *pushes, status_msg_t *err)
{
    client_t *cs = calloc((size_t)o->clients, sizeof(*cs));
    start_gate_t gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0};
    status_t rc = STATUS_OK;
    size_t n = 0, started = 0;
    double t0, wall;

    if (cs == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (long i = 0; i < o->clients; i++) {
        cs[i] = (client_t){.ch = chs[i], .v = v, .grad = grad, .gate = &gate};
        if (pthread_create(&cs[i].tid, NULL, client_main, &cs[i]) != 0) {
            rc = status_fail(err, STATUS_SYSTEM, "cannot start client thread %ld", i);
            break;
        }
        started++;
    }
    pthread_mutex_lock(&gate.mu);
    t0 = clock_now_s();
    gate.until = rc == STATUS_OK ? t0 + o->seconds : t0; /* on failure they stop at once */
    gate.open = true;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
    for (size_t i = 0; i < started; i++)
        pthread_join(cs[i].tid, NULL);
    wall = clock_now_s() - t0;
    for (size_t i = 0; i < started; i++) {
        if (cs[i].rc != STATUS_OK && rc == STATUS_OK)
            rc = status_fail(err, cs[i].rc, "client %zu: %s", i, cs[i].err.text);
        n += cs[i].lat_us.n;
        if (!samples_merge(lat, &cs[i].lat_us) && rc == STATUS_OK)
            rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        samples_free(&cs[i].lat_us);
    }
    if (rc == STATUS_OK && !samples_add(rate, (double)n * (double)v->bytes / MB / wall))
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    *pushes += n;
    free(cs);
    return rc;
}

/* ---- the run ------------------------------------------------------------------------------ */

typedef struct results {
    samples_t big;       /* push+pull MB/s, one per call */
    samples_t big_round; /* push+pull MB/s, the median of each round */
    samples_t chunked;   /* the same in chunks over several connections, one per variable */
    samples_t iperf;     /* MB/s, one per round */
    samples_t rate;      /* clients' aggregate MB/s, one per round */
    samples_t lat;       /* clients' push latency in us, every push */
    uint64_t big_updates, small_pushes;
    double pushed, copied; /* the PS's payload bytes received, and copied on their way */
    status_msg_t iperf_err;
    bool iperf_failed;
} results_t;

static void results_free(results_t *r)
{
    samples_free(&r->big);
    samples_free(&r->big_round);
    samples_free(&r->chunked);
    samples_free(&r->iperf);
    samples_free(&r->rate);
    samples_free(&r->lat);
}

typedef struct setup {
    rpc_channel_t **chs; /* o->clients channels; the first also does push+pull */
    var_t big, small;
    float *grad, *recv; /* big->bytes each; grad is all ones */
} setup_t;

static status_t run_round(setup_t *s, const bench_opts_t *o, long round, results_t *r,
                          status_msg_t *err)
{
    samples_t calls = {0}, lat = {0};
    size_t rate_before = r->rate.n;
    double big_med, chunked_med, p50, p99;
    status_t rc;

    rc = bench_push_pull(s->chs[0], &s->big, s->grad, s->recv, o, &r->big_updates, &calls, err);
    if (rc == STATUS_OK && (!samples_merge(&r->big, &calls) ||
                            !samples_add(&r->big_round, samples_quantile(&calls, 0.5))))
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    big_med = samples_quantile(&calls, 0.5);
    samples_free(&calls);
    STATUS_CHECK(rc);
    rc =
        bench_push_pull_chunked(s->chs, &s->big, s->grad, s->recv, o, &r->big_updates, &calls, err);
    if (rc == STATUS_OK && !samples_merge(&r->chunked, &calls))
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    chunked_med = samples_quantile(&calls, 0.5);
    samples_free(&calls);
    STATUS_CHECK(rc);
    if (o->iperf && !r->iperf_failed) {
        double mbps;
        if (run_iperf(o->iperf_seconds, &mbps, &r->iperf_err) != STATUS_OK ||
            !samples_add(&r->iperf, mbps))
            r->iperf_failed = true;
    }
    rc = bench_clients(s->chs, &s->small, s->grad, o, &r->rate, &lat, &r->small_pushes, err);
    if (rc == STATUS_OK && !samples_merge(&r->lat, &lat))
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    p50 = samples_quantile(&lat, 0.5);
    p99 = samples_quantile(&lat, 0.99);
    samples_free(&lat);
    STATUS_CHECK(rc);
    printf("  %5ld %14s %10s %12s %14s %10s %10s\n", round, NUM(big_med), NUM(chunked_med),
           r->iperf.n > 0 && !r->iperf_failed ? NUM(r->iperf.v[r->iperf.n - 1]) : "n/a",
           NUM(r->rate.n > rate_before ? r->rate.v[r->rate.n - 1] : NAN), NUM(p50), NUM(p99));
    fflush(stdout);
    return STATUS_OK;
}

/* The shared variable got every push: a zero gradient leaves it as it is and pulls it. */
static status_t check_small(setup_t *s, uint64_t pushes, status_msg_t *err)
{
    size_t n = s->small.bytes / sizeof(float);
    float *zeros = calloc(n, sizeof(float));
    status_t rc;

    if (zeros == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    rc = push(s->chs[0], &s->small, zeros, true, s->recv, err);
    if (rc == STATUS_OK)
        rc = check_values(s->recv, n, pushes, err);
    free(zeros);
    return rc;
}

static void print_summary(const bench_opts_t *o, results_t *r)
{
    double big = samples_quantile(&r->big, 0.5), chunked = samples_quantile(&r->chunked, 0.5);
    double iperf = r->iperf_failed ? NAN : samples_quantile(&r->iperf, 0.5);
    double rate = samples_quantile(&r->rate, 0.5);
    char line[160];

    printf("\nPush+pull of one %ld MiB variable (PushPull: the gradient in, SGD applied, the "
           "values out;\n%zu calls; MB/s counts both directions)\n",
           o->big_mib, r->big.n);
    printf("  median %s MB/s, best %s, worst %s; median %.1f ms per call\n", NUM(big),
           NUM(samples_quantile(&r->big, 1)), NUM(samples_quantile(&r->big, 0)),
           2.0 * (double)o->big_mib * (double)MIB / MB / big * 1e3);
    printf("\nThe same in chunks of 1 MiB over %ld connections at once, as a worker sends a "
           "step\n(%zu whole variables)\n",
           o->clients < CHUNK_CONNECTIONS ? o->clients : CHUNK_CONNECTIONS, r->chunked.n);
    printf("  median %s MB/s, best %s, worst %s; median %.1f ms per variable\n", NUM(chunked),
           NUM(samples_quantile(&r->chunked, 1)), NUM(samples_quantile(&r->chunked, 0)),
           2.0 * (double)o->big_mib * (double)MIB / MB / chunked * 1e3);
    printf("\nLoopback TCP: iperf3 -c 127.0.0.1 -t %ld -J, single stream (MB/s)\n",
           o->iperf_seconds);
    if (!o->iperf)
        printf("  skipped (--no-iperf)\n");
    else if (r->iperf_failed)
        printf("  FAILED: %s\n", r->iperf_err.text);
    else
        printf("  median %s MB/s, best %s, worst %s over %zu runs\n", NUM(iperf),
               NUM(samples_quantile(&r->iperf, 1)), NUM(samples_quantile(&r->iperf, 0)),
               r->iperf.n);
    printf("\n%ld clients pushing %ld MiB gradients of one shared variable (Push, SGD applied; "
           "each client\non its own thread and TCP connection; %llu pushes in all)\n",
           o->clients, o->small_mib, (unsigned long long)r->small_pushes);
    printf("  throughput: median %s MB/s = %s pushes/s over the rounds\n", NUM(rate),
           NUM(rate * MB / ((double)o->small_mib * (double)MIB)));
    printf("  latency per push: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
           samples_quantile(&r->lat, 0.5) / 1e3, samples_quantile(&r->lat, 0.99) / 1e3,
           samples_quantile(&r->lat, 1) / 1e3);

    printf("\nTarget of the issue (a report, not a test)\n");
    for (int k = 0; k < 2; k++) {
        double v = k == 0 ? big : chunked;
        if (isnan(iperf))
            snprintf(line, sizeof(line), "%s MB/s, no iperf3 figure", NUM(v));
        else
            snprintf(line, sizeof(line), "%s / %s MB/s = %.1f%%", NUM(v), NUM(iperf),
                     100 * v / iperf);
        printf("  %ld MiB push+pull%s >= 80%% of iperf3 %-36s %s\n", o->big_mib,
               k == 0 ? ", one call" : ", chunked ", line,
               isnan(iperf)                ? "n/a"
               : v >= TARGET_RATIO * iperf ? "PASS"
                                           : "MISS");
    }
    if (isnan(r->copied))
        snprintf(line, sizeof(line), "not counted by this PS");
    else
        snprintf(line, sizeof(line), "%s of %s MB", NUM(r->copied / MB), NUM(r->pushed / MB));
    printf("  PS user-space copies of push payloads: 0    %-36s %s\n", line,
           isnan(r->copied) ? "n/a"
           : r->copied == 0 ? "PASS"
                            : "MISS");
}

/* ---- mutual TLS against plaintext ---------------------------------------------------------- */

/* Makes a CA and the certificates of a PS and a worker (the role that may push) in dir. */
static status_t make_pki(const char *dir, status_msg_t *err)
{
    char tessera[4096], cmd[13000];

    STATUS_CHECK(launch_find_program("tessera", tessera, sizeof(tessera), err));
    snprintf(cmd, sizeof(cmd),
             "'%s' certs init --dir %s >/dev/null && '%s' certs issue --dir %s ps 0 --host "
             "127.0.0.1 >/dev/null && '%s' certs issue --dir %s worker 0 >/dev/null",
             tessera, dir, tessera, dir, tessera, dir);
    if (system(cmd) != 0)
        return status_fail(err, STATUS_SYSTEM, "tessera certs failed in %s", dir);
    return STATUS_OK;
}

/* Push+pull of s->big to the plaintext PS (s->chs[0]) and to a second PS with mutual TLS, in
 * interleaved rounds; prints both medians and their ratio. Turns this process's channels made
 * from now on to mutual TLS. */
static status_t bench_tls(const bench_opts_t *o, setup_t *s, results_t *r, status_msg_t *err)
{
    char dir[] = "/tmp/bench-ps-tls-XXXXXX", cert[100], key[100], ca[100], flags[3][120],
         shown[4096], cmd[200];
    char *extra[] = {flags[0], flags[1], flags[2], NULL};
    rpc_channel_opts_t copts = {.timeout_ms = CALL_TIMEOUT_MS};
    samples_t plain = {0}, secure = {0};
    rpc_channel_t *ch = NULL;
    uint64_t tls_updates = 0;
    launch_proc_t ps;
    bool started = false;
    status_t rc;

    if (mkdtemp(dir) == NULL)
        return status_fail(err, STATUS_SYSTEM, "mkdtemp: %s", strerror(errno));
    STATUS_CHECK_GOTO(make_pki(dir, err), rc, out);
    snprintf(flags[0], sizeof(flags[0]), "--tls-cert=%s/ps-0.crt", dir);
    snprintf(flags[1], sizeof(flags[1]), "--tls-key=%s/ps-0.key", dir);
    snprintf(flags[2], sizeof(flags[2]), "--tls-ca=%s/ca.crt", dir);
    STATUS_CHECK_GOTO(
        bench_start_ps(o->ps_path, (int)o->ps_threads, extra, &ps, shown, sizeof(shown), err), rc,
        out);
    started = true;
    snprintf(cert, sizeof(cert), "%s/worker-0.crt", dir);
    snprintf(key, sizeof(key), "%s/worker-0.key", dir);
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    STATUS_CHECK_GOTO(rpc_security_init(cert, key, ca, err), rc, out);
    STATUS_CHECK_GOTO(rpc_channel_new(ps.listen, &copts, &ch, err), rc, out);
    STATUS_CHECK_GOTO(create_job(ch, (var_t *[]){&s->big}, 1, err), rc, out);
    printf("\nPush+pull of one %ld MiB variable, plaintext and mutual TLS 1.3 (a second "
           "tessera-ps,\npid %d, gRPC with mTLS on %s), in interleaved rounds (the round's "
           "median MB/s)\n",
           o->big_mib, (int)ps.pid, ps.listen);
    printf("  %5s %14s %14s\n", "round", "plaintext", "mTLS");
    for (long i = 1; i <= o->rounds; i++) {
        samples_t a = {0}, b = {0};
        rc = bench_push_pull(s->chs[0], &s->big, s->grad, s->recv, o, &r->big_updates, &a, err);
        if (rc == STATUS_OK)
            rc = bench_push_pull(ch, &s->big, s->grad, s->recv, o, &tls_updates, &b, err);
        if (rc == STATUS_OK && (!samples_merge(&plain, &a) || !samples_merge(&secure, &b)))
            rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        if (rc == STATUS_OK)
            printf("  %5ld %14s %14s\n", i, NUM(samples_quantile(&a, 0.5)),
                   NUM(samples_quantile(&b, 0.5)));
        samples_free(&a);
        samples_free(&b);
        STATUS_CHECK_GOTO(rc, rc, out);
    }
    {
        double p = samples_quantile(&plain, 0.5), t = samples_quantile(&secure, 0.5);
        printf("  median: plaintext %s MB/s, mTLS %s MB/s over %zu and %zu calls\n", NUM(p), NUM(t),
               plain.n, secure.n);
        printf("  %ld MiB push+pull over mTLS >= 70%% of plaintext   %s / %s MB/s = %.1f%%  %s\n",
               o->big_mib, NUM(t), NUM(p), 100 * t / p, t >= TARGET_TLS * p ? "PASS" : "MISS");
    }
    rc = STATUS_OK;
out:
    rpc_channel_free(ch);
    if (started && !bench_stop_ps("bench-ps", &ps) && rc == STATUS_OK)
        rc = status_fail(err, STATUS_REMOTE, "the mTLS tessera-ps did not stop cleanly");
    samples_free(&plain);
    samples_free(&secure);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench-ps: could not remove %s\n", dir);
    return rc;
}

/* Everything after the server is up: channels, the job, the rounds, the checks, the summary. */
static status_t bench_all(const bench_opts_t *o, const char *target, const char *metrics,
                          status_msg_t *err)
{
    rpc_channel_opts_t copts = {.timeout_ms = CALL_TIMEOUT_MS};
    setup_t s = {0};
    results_t r = {0};
    status_t rc = STATUS_OK;

    var_init(&s.big, "big", (size_t)o->big_mib);
    var_init(&s.small, "small", (size_t)o->small_mib);
    s.chs = calloc((size_t)o->clients, sizeof(*s.chs));
    s.grad = malloc(s.big.bytes > s.small.bytes ? s.big.bytes : s.small.bytes);
    s.recv = malloc(s.big.bytes > s.small.bytes ? s.big.bytes : s.small.bytes);
    if (s.chs == NULL || s.grad == NULL || s.recv == NULL) {
        rc = status_fail(err, STATUS_NO_MEMORY, "cannot allocate 2 x %ld MiB", o->big_mib);
        goto out;
    }
    for (size_t i = 0; i < (s.big.bytes > s.small.bytes ? s.big.bytes : s.small.bytes) / 4; i++)
        s.grad[i] = 1.0f;
    for (long i = 0; i < o->clients; i++)
        STATUS_CHECK_GOTO(rpc_channel_new(target, &copts, &s.chs[i], err), rc, out);
    STATUS_CHECK_GOTO(create_job(s.chs[0], (var_t *[]){&s.big, &s.small}, 2, err), rc, out);

    printf("\nRounds (push+pull: the round's median MB/s; clients: aggregate MB/s and push "
           "latency in us)\n");
    printf("  %5s %14s %10s %12s %14s %10s %10s\n", "round", "push+pull", "chunked", "iperf3",
           "clients MB/s", "p50 us", "p99 us");
    for (long i = 1; i <= o->rounds; i++)
        STATUS_CHECK_GOTO(run_round(&s, o, i, &r, err), rc, out);
    STATUS_CHECK_GOTO(check_small(&s, r.small_pushes, err), rc, out);
    printf("  checked: the pulled values are exactly SGD's after %llu and %llu updates\n",
           (unsigned long long)r.big_updates, (unsigned long long)r.small_pushes);
    if (metrics_http_value(metrics, "tessera_ps_pushed_bytes_total", &r.pushed) != STATUS_OK) {
        rc = status_fail(err, STATUS_REMOTE, "cannot read the PS's metrics on %s", metrics);
        goto out;
    }
    /* A PS built before the counter (--ps=, an A/B against an older build) has none. */
    if (metrics_http_value(metrics, "tessera_ps_push_copied_bytes_total", &r.copied) != STATUS_OK)
        r.copied = NAN;
    print_summary(o, &r);
    if (o->tls)
        STATUS_CHECK_GOTO(bench_tls(o, &s, &r, err), rc, out);
    if (o->iperf && r.iperf_failed)
        rc = status_fail(err, STATUS_REMOTE, "%s", r.iperf_err.text);
out:
    for (long i = 0; s.chs != NULL && i < o->clients; i++)
        rpc_channel_free(s.chs[i]);
    free(s.chs);
    free(s.grad);
    free(s.recv);
    results_free(&r);
    return rc;
}

static status_t body(const void *opts, const char *target, const char *metrics, status_msg_t *err)
{
    return bench_all(opts, target, metrics, err);
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
    snprintf(client, sizeof(client), "this process; %ld rounds of %.0f s per measurement", o.rounds,
             o.seconds);
    return bench_against_ps("bench-ps", "Tessera parameter-server benchmark (bench/ps, bench-ps)",
                            client, o.ps_path, (int)o.ps_threads, body, &o);
}
