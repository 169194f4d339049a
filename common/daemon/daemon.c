#define _GNU_SOURCE
#include "daemon/daemon.h"

#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif

#include <grpc/grpc.h>

#include "base/clock.h"
#include "base/crc32c.h"
#include "rpc/health.h"
#include "base/log.h"
#include "base/net.h"
#include "base/notify.h"
#include "job/paths.h"
#include "rpc/offline.h"
#include "rpc/security.h"
#include "rpc/server.h"

struct daemon {
    const daemon_spec_t *spec;
    daemon_opts_t *opts;
    rpc_server_t *rpc;
    metrics_t *metrics;
    metrics_server_t *metrics_server;
    health_t *health;
    void *role_state;
    roots_t roots;
    char listen[300];
    char metrics_listen[300];
};

rpc_server_t *daemon_rpc(daemon_t *d)
{
    return d->rpc;
}

metrics_t *daemon_metrics(daemon_t *d)
{
    return d->metrics;
}

const daemon_spec_t *daemon_spec(daemon_t *d)
{
    return d->spec;
}

const char *daemon_address(daemon_t *d)
{
    return d->listen;
}

const roots_t *daemon_roots(daemon_t *d)
{
    return &d->roots;
}

/* ---- TF_CONFIG ---------------------------------------------------------------------------- */

status_t daemon_apply_tf_config(const config_table_t *t, void *opts, const cluster_spec_t *spec,
                                int task_type, status_msg_t *err)
{
    char host[256], port_s[16], idx_s[16];
    const char *addr;
    int port;

    (void)opts;
    if (!spec->has_task)
        return STATUS_OK;
    if ((int)spec->task_type != task_type) {
        cluster_task_type_t lead;
        int lead_index;
        /* TensorFlow's chief of a cluster without one is worker 0: here that is tessera-worker,
         * which leads the cluster beside its Worker service. */
        if (task_type == CLUSTER_CHIEF && cluster_spec_chief(spec, &lead, &lead_index) &&
            lead == CLUSTER_WORKER && spec->task_type == CLUSTER_WORKER &&
            spec->task_index == lead_index)
            return status_fail(err, STATUS_BAD_TF_CONFIG,
                               "TF_CONFIG names worker %d of a cluster without a chief: run "
                               "tessera-worker there, which leads the cluster as TensorFlow's "
                               "worker 0 does (tessera-chief runs only a cluster's chief task)",
                               lead_index);
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG task.type is \"%s\" but %s runs tasks of type \"%s\"",
                           cluster_task_type_name(spec->task_type), t->program,
                           cluster_task_type_name((cluster_task_type_t)task_type));
    }
    addr = cluster_spec_address(spec, spec->task_type, spec->task_index);
    if (addr == NULL)
        return STATUS_OK;
    STATUS_CHECK(net_split_hostport(addr, host, sizeof(host), &port, err));
    /* The cluster entry is how others reach this task; listen on every interface at its port,
     * as TensorFlow's server does. */
    snprintf(port_s, sizeof(port_s), "0.0.0.0:%d", port);
    snprintf(idx_s, sizeof(idx_s), "%d", spec->task_index);
    STATUS_CHECK(config_set(t, opts, "listen", port_s, "TF_CONFIG", err));
    return config_set(t, opts, "task-index", idx_s, "TF_CONFIG", err);
}

/* ---- diagnostics service (every daemon) --------------------------------------------------- */

static status_t on_echo(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__EchoRequest *req = (const void *)msg;
    daemon_t *d = user;
    Tessera__V1__EchoResponse resp = TESSERA__V1__ECHO_RESPONSE__INIT;
    Tessera__V1__TaskId task = TESSERA__V1__TASK_ID__INIT;
    rpc_iov_t iov = {0};
    size_t len;
    void *data = rpc_ctx_take_payload(ctx, &len);

    task.type = (Tessera__V1__TaskType)d->spec->task_type;
    task.index = (int32_t)d->opts->task_index;
    task.address = d->listen;
    resp.task = &task;
    resp.tensor = req->tensor;
    iov = (rpc_iov_t){data, len, free, data};
    if (data == NULL)
        return rpc_ctx_respond(ctx, &resp.base, NULL, 0);
    return rpc_ctx_respond(ctx, &resp.base, &iov, 1);
}

static status_t on_sink(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__SinkRequest *req = (const void *)msg;
    Tessera__V1__SinkResponse resp = TESSERA__V1__SINK_RESPONSE__INIT;
    size_t len;
    const void *data = rpc_ctx_payload(ctx, &len);

    (void)user;
    resp.bytes = len;
    if (req->checksum)
        resp.crc32c = crc32c(data, len);
    return rpc_ctx_respond(ctx, &resp.base, NULL, 0);
}

/* ---- metrics of the RPC server ------------------------------------------------------------ */

typedef struct rpc_metric_arg {
    daemon_t *d;
    rpc_method_id_t id;
    int field;
} rpc_metric_arg_t;

static double rpc_metric_value(void *arg)
{
    rpc_metric_arg_t *a = arg;
    rpc_method_stats_t st;
    rpc_server_stats(a->d->rpc, a->id, &st);
    switch (a->field) {
    case 0:
        return (double)st.calls;
    case 1:
        return (double)st.errors;
    case 2:
        return (double)st.bytes_in;
    case 3:
        return (double)st.bytes_out;
    case 4:
        return st.seconds;
    case 5:
        return (double)st.denied;
    case 6:
        return st.receive_seconds;
    case 7:
        return st.decode_seconds;
    case 8:
        return st.handle_seconds;
    default: /* the reply: what the parts before it leave */
        return fmax(0.0, st.seconds - st.receive_seconds - st.decode_seconds - st.handle_seconds);
    }
}

#define RPC_METRIC_FIELDS 6 /* one series per method of each */
#define RPC_PHASE_FIRST   6 /* then the phases of rpc_phase_seconds_total */
#define RPC_PHASES        4
static rpc_metric_arg_t rpc_metric_args[RPC_METHOD_COUNT_][RPC_METRIC_FIELDS + RPC_PHASES];

static double handshake_failures(void *arg)
{
    (void)arg;
    return (double)rpc_security_handshake_failures();
}

/* Whether d serves unary method m (health and diagnostics: every daemon). */
static bool serves(const daemon_t *d, const rpc_method_t *m)
{
    bool served = strcmp(m->service, RPC_SVC_HEALTH) == 0 || strcmp(m->service, RPC_SVC_DIAG) == 0;
    for (const char *const *s = d->spec->services; s && *s; s++)
        served |= strcmp(*s, m->service) == 0;
    return served && m->kind == RPC_KIND_UNARY;
}

static status_t register_rpc_metrics(daemon_t *d)
{
    static const char *const phases[RPC_PHASES] = {"receive", "decode", "handle", "reply"};
    static const char *const phase_help =
        "Seconds of handling_seconds_total by phase, summed, by method: receive (from the "
        "accept to the whole request's arrival: the request on the wire), decode (the payload "
        "assembled from gRPC's slices, the message unpacked), handle (the handler: for a PS "
        "push, the checks and the optimizer's update that also writes the pulled values), reply "
        "(encoding and sending the answer). The four add up to handling_seconds_total.";
    static const char *const names[] = {"requests_total",         "errors_total",
                                        "received_bytes_total",   "sent_bytes_total",
                                        "handling_seconds_total", "denied_total"};
    static const char *const helps[] = {
        "RPCs completed, by method.",
        "RPCs that ended with an error status, by method.",
        "Request bytes received, by method.",
        "Response bytes sent, by method.",
        "Seconds from accepting an RPC to finishing it, summed, by method.",
        "RPCs refused before their handler under mutual TLS, by method: the caller's "
        "certificate role may not call it (PERMISSION_DENIED), or it came over the plaintext "
        "health port (UNAUTHENTICATED)."};
    char name[128];

    snprintf(name, sizeof(name), "tessera_%s_tls_handshake_failures_total", d->spec->role);
    if (metrics_counter_fn(d->metrics, name,
                           "TLS handshakes refused or failed: no client certificate, one from "
                           "another CA, plaintext or a TLS version below 1.3.",
                           NULL, handshake_failures, NULL) == NULL)
        return STATUS_INTERNAL;
    for (int f = 0; f < RPC_METRIC_FIELDS + RPC_PHASES; f++) {
        bool phase = f >= RPC_PHASE_FIRST;
        snprintf(name, sizeof(name), "tessera_%s_rpc_%s", d->spec->role,
                 phase ? "phase_seconds_total" : names[f]);
        for (int i = 0; i < RPC_METHOD_COUNT_; i++) {
            const rpc_method_t *m = rpc_method_get((rpc_method_id_t)i);
            const char *labels[5] = {"method", m->path, NULL, NULL, NULL};
            if (!serves(d, m))
                continue;
            if (phase) {
                labels[2] = "phase";
                labels[3] = phases[f - RPC_PHASE_FIRST];
            }
            rpc_metric_args[i][f] = (rpc_metric_arg_t){d, (rpc_method_id_t)i, f};
            if (metrics_counter_fn(d->metrics, name, phase ? phase_help : helps[f], labels,
                                   rpc_metric_value, &rpc_metric_args[i][f]) == NULL)
                return STATUS_INTERNAL;
        }
    }
    return STATUS_OK;
}

/* ---- start-up and the main loop ----------------------------------------------------------- */

static void report_address(char *out, size_t len, const char *configured, int port)
{
    char host[256];
    int unused;
    if (net_split_hostport(configured, host, sizeof(host), &unused, NULL) != STATUS_OK)
        host[0] = '\0';
    if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0)
        snprintf(out, len, "127.0.0.1:%d", port);
    else if (strchr(host, ':') != NULL)
        snprintf(out, len, "[%s]:%d", host, port);
    else
        snprintf(out, len, "%s:%d", host, port);
}

static status_t daemon_start(daemon_t *d, status_msg_t *err)
{
    const daemon_spec_t *spec = d->spec;
    daemon_opts_t *o = d->opts;
    rpc_server_opts_t ro = {
        .listen = o->listen,
        .health_listen = o->health_listen,
        .max_calls_per_peer = (int)o->max_calls_per_peer,
        .threads = (int)o->threads,
        .max_message_bytes = o->max_message_bytes,
        .task_type = spec->task_type,
        .task_index = (int)o->task_index,
    };
    int mport;

    d->metrics = metrics_new();
    if (d->metrics == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    STATUS_CHECK(rpc_server_new(&ro, &d->rpc, err));
    report_address(d->listen, sizeof(d->listen), o->listen, rpc_server_port(d->rpc));
    d->health = health_new(d->rpc, spec->services);
    if (d->health == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    rpc_server_handle(d->rpc, RPC_DIAG_ECHO, on_echo, d);
    rpc_server_handle(d->rpc, RPC_DIAG_SINK, on_sink, d);
    if (register_rpc_metrics(d) != STATUS_OK)
        return status_fail(err, STATUS_INTERNAL, "cannot register the rpc metrics");
    if (spec->setup != NULL)
        STATUS_CHECK(spec->setup(d, o, &d->role_state, err));
    STATUS_CHECK(rpc_server_start(d->rpc, err));
    {
        const char *cert = NULL, *key = NULL, *ca = NULL;
        if (o->metrics_tls && !rpc_security_enabled())
            return status_fail(err, STATUS_BAD_CONFIG,
                               "--metrics-tls needs --tls-cert, --tls-key and --tls-ca");
        if (o->metrics_tls)
            rpc_security_pem(&cert, &key, &ca);
        STATUS_CHECK(metrics_server_start_tls(d->metrics, o->metrics_listen, cert, key,
                                              &d->metrics_server, &mport, err));
    }
    report_address(d->metrics_listen, sizeof(d->metrics_listen), o->metrics_listen, mport);
    return STATUS_OK;
}

static void daemon_stop(daemon_t *d)
{
    if (d->spec->stop != NULL && d->role_state != NULL)
        d->spec->stop(d->role_state);
    rpc_server_shutdown(d->rpc, d->opts->shutdown_grace_ms);
    d->rpc = NULL;
    metrics_server_stop(d->metrics_server);
    d->metrics_server = NULL;
    if (d->spec->teardown != NULL && d->role_state != NULL)
        d->spec->teardown(d->role_state);
    health_free(d->health);
    metrics_free(d->metrics);
}

/* Calls answered so far, over every method. */
static uint64_t calls_answered(const rpc_server_t *s)
{
    uint64_t n = 0;
    for (int id = 0; id < RPC_METHOD_COUNT_; id++) {
        rpc_method_stats_t st;
        rpc_server_stats(s, (rpc_method_id_t)id, &st);
        n += st.calls;
    }
    return n;
}

/* Once a second: after a full second without a call, gives the free heap back to the kernel.
 * Handler threads keep up to RPC_MALLOC_TRIM_THRESHOLD of freed heap each so that busy traffic
 * does not fault its buffers in again (rpc/codec.c); a daemon at rest holds only what it uses.
 * Busy, it never trims: some call arrives every second. */
#define IDLE_TRIM_MS 1000

typedef struct idle_trim {
    uint64_t calls;
    bool trimmed;
} idle_trim_t;

static void idle_trim_tick(idle_trim_t *t, const rpc_server_t *s)
{
    uint64_t calls = calls_answered(s);
    if (calls != t->calls) {
        t->calls = calls;
        t->trimmed = false;
        return;
    }
    if (!t->trimmed) {
#ifdef __GLIBC__
        malloc_trim(0);
#endif
        t->trimmed = true;
    }
}

/* Waits for SIGTERM/SIGINT, pinging the systemd watchdog while every handler thread is alive and
 * trimming the heap when idle. */
static int wait_for_stop(daemon_t *d, const sigset_t *set)
{
    uint64_t wd_usec = notify_watchdog_usec();
    int64_t ping_ms = wd_usec ? (int64_t)(wd_usec / 2000) : INT64_MAX, last_ping = clock_now_ms();
    int64_t period_ms = ping_ms < IDLE_TRIM_MS ? ping_ms : IDLE_TRIM_MS;
    idle_trim_t trim = {calls_answered(d->rpc), true};

    for (;;) {
        struct timespec ts = {period_ms / 1000, (period_ms % 1000) * 1000000};
        int sig = sigtimedwait(set, NULL, &ts);
        if (sig == SIGTERM || sig == SIGINT)
            return sig;
        if (sig == SIGHUP) {
            LOG_NOTICE(MAIN, "SIGHUP: configuration reload is not supported; restart to apply");
            continue;
        }
        if (sig >= 0 || errno != EAGAIN)
            continue;
        idle_trim_tick(&trim, d->rpc);
        /* a quarter of slack: the wait itself ends a hair early or late, and a ping skipped
         * for that would leave a gap of two periods, the whole of WATCHDOG_USEC */
        if (wd_usec && clock_now_ms() - last_ping >= ping_ms - ping_ms / 4) {
            last_ping = clock_now_ms();
            /* Ping only while the queues turn: a wedged handler thread should get us killed. */
            int64_t wd_ms = (int64_t)(wd_usec / 1000);
            if (rpc_server_alive(d->rpc,
                                 wd_ms > 2 * RPC_SERVER_WAKE_MS ? wd_ms : 2 * RPC_SERVER_WAKE_MS))
                notify_watchdog();
            else
                LOG_WARNING(MAIN, "a handler thread is stuck: not pinging the watchdog");
        }
    }
}

static int daemon_run(daemon_t *d, const sigset_t *set)
{
    status_msg_t err = {0};
    char status[800];
    int sig;

    if (daemon_start(d, &err) != STATUS_OK) {
        fprintf(stderr, "%s: %s\n", d->spec->program, err.text);
        LOG_ERR(MAIN, "start-up failed: %s", err.text);
        daemon_stop(d);
        return 1;
    }
    health_set_serving(d->health, true);
    snprintf(status, sizeof(status), "serving gRPC on %s%s, metrics on %s://%s/metrics", d->listen,
             rpc_security_enabled() ? " (mutual TLS)" : "", d->opts->metrics_tls ? "https" : "http",
             d->metrics_listen);
    LOG_NOTICE(MAIN, "%s", status);
    notify_ready(status, d->listen, d->metrics_listen);

    sig = wait_for_stop(d, set);
    LOG_NOTICE(MAIN, "%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    notify_stopping();
    health_set_serving(d->health, false);
    if (d->opts->drain_ms > 0) {
        struct timespec ts = {d->opts->drain_ms / 1000, (d->opts->drain_ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
    }
    daemon_stop(d);
    LOG_NOTICE(MAIN, "stopped");
    return 0;
}

/* Puts glibc's heap on transparent huge pages by starting this program again, once, with
 * GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (glibc reads tunables only at startup). gRPC receives a
 * large message into heap slices that are trimmed back to the kernel after each message; on
 * 4 KiB pages every one of them faults in again: measured on loopback, a 64 MiB push+pull took
 * 90-180 ms instead of 52. Skipped where THP is off, under valgrind, when the operator set the
 * tunable, and with TESSERA_MALLOC_HUGEPAGES=0. */
static void heap_on_huge_pages(char **argv)
{
    const char *tunables = getenv("GLIBC_TUNABLES"), *opt = getenv("TESSERA_MALLOC_HUGEPAGES");
    const char *preload = getenv("LD_PRELOAD");
    char thp[128] = "", exe[4096], env[1024];
    FILE *f;
    ssize_t n;

    if ((opt != NULL && strcmp(opt, "0") == 0) ||
        (tunables != NULL && strstr(tunables, "malloc.hugetlb") != NULL) ||
        (preload != NULL && strstr(preload, "vgpreload") != NULL))
        return;
#ifdef __GLIBC__
    {
        int major = 0, minor = 0;
        if (sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor) != 2 ||
            major * 100 + minor < 235) /* the tunable came with glibc 2.35 */
            return;
    }
#else
    return;
#endif
    f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == NULL)
        return;
    if (fgets(thp, sizeof(thp), f) == NULL || strstr(thp, "[never]") != NULL) {
        fclose(f);
        return;
    }
    fclose(f);
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0 || (size_t)n >= sizeof(exe) - 1)
        return;
    exe[n] = '\0';
    snprintf(env, sizeof(env), "%s%sglibc.malloc.hugetlb=1", tunables ? tunables : "",
             tunables && *tunables ? ":" : "");
    if (setenv("GLIBC_TUNABLES", env, 1) != 0)
        return;
    execv(exe, argv);
    /* Still here: run as we are, with the environment as it was. */
    if (tunables != NULL)
        setenv("GLIBC_TUNABLES", tunables, 1);
    else
        unsetenv("GLIBC_TUNABLES");
}

/* A daemon that launch_start() spawned (tessera run --local, the tests) stops with its parent:
 * the parent's death sends SIGTERM, which the main thread takes like any stop request. */
static void stop_with_launcher(void)
{
    const char *s = getenv("TESSERA_PARENT_PID");
    if (s == NULL)
        return;
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if ((long)getppid() != strtol(s, NULL, 10)) /* it died before prctl took */
        kill(getpid(), SIGTERM);
}

int daemon_main(const daemon_spec_t *spec, const config_table_t *table, void *opts, int argc,
                char **argv)
{
    daemon_t d = {.spec = spec, .opts = opts};
    status_msg_t err = {0};
    config_action_t action;
    sigset_t set;
    unsigned mask;
    int rc;

    heap_on_huge_pages(argv);
    /* Block the stop signals before gRPC starts its threads, which inherit the mask; the main
     * thread takes them with sigtimedwait. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    stop_with_launcher();
    log_set_identity(spec->role, -1);

    if (argc == 2 && strcmp(argv[1], "--sample-config") == 0) {
        /* deploy/config/ holds this output; a test checks the shipped files still load. */
        config_write_sample(table, stdout);
        return 0;
    }
    if (config_load(table, opts, argc, argv, &action, &err) != STATUS_OK) {
        fprintf(stderr, "%s: %s\n", spec->program, err.text);
        config_done(table, opts);
        return 2;
    }
    if (action != CONFIG_RUN) {
        if (action == CONFIG_VERSION)
            printf("%s %s\n", spec->program, TESSERA_VERSION);
        config_done(table, opts);
        return 0;
    }
    if (log_subsystems_parse(d.opts->log_subsystems, &mask) != STATUS_OK) {
        fprintf(stderr, "%s: --log-subsystems: unknown subsystem in \"%s\"\n", spec->program,
                d.opts->log_subsystems);
        config_done(table, opts);
        return 2;
    }
    log_set_level((log_level_t)d.opts->log_level);
    log_set_subsystems(mask);
    log_set_identity(spec->role, (int)d.opts->task_index);

    if (rpc_security_init(d.opts->tls_cert, d.opts->tls_key, d.opts->tls_ca, &err) != STATUS_OK ||
        roots_init(&d.roots, spec->program, d.opts->data_roots.items, d.opts->data_roots.n, &err) !=
            STATUS_OK) {
        fprintf(stderr, "%s: %s\n", spec->program, err.text);
        rpc_security_done();
        config_done(table, opts);
        return 2;
    }
    job_paths_confine(&d.roots);
    rpc_log_init();
    grpc_init();
    rc = daemon_run(&d, &set);
    grpc_shutdown();
    job_paths_confine(NULL);
    roots_done(&d.roots);
    rpc_security_done();
    config_done(table, opts);
    return rc;
}

/* ---- offline daemons (daemon.h, rpc_offline.h) --------------------------------------------- */

status_t daemon_offline_new(const daemon_spec_t *spec, void *opts, daemon_t **ret_daemon,
                            status_msg_t *err)
{
    daemon_t *d = calloc(1, sizeof(*d));
    status_msg_t why = {0};
    status_t rc;

    if (d == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    d->spec = spec;
    d->opts = opts;
    d->roots.owner = spec->program; /* no roots: offline daemons touch no job's files */
    snprintf(d->listen, sizeof(d->listen), "offline");
    snprintf(d->metrics_listen, sizeof(d->metrics_listen), "offline");
    d->metrics = metrics_new();
    d->rpc = rpc_offline_server_new(spec->task_type, (int)d->opts->task_index);
    d->health = d->rpc != NULL ? health_new(d->rpc, spec->services) : NULL;
    if (d->metrics == NULL || d->rpc == NULL || d->health == NULL) {
        daemon_offline_free(d);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    rpc_server_handle(d->rpc, RPC_DIAG_ECHO, on_echo, d);
    rpc_server_handle(d->rpc, RPC_DIAG_SINK, on_sink, d);
    if (spec->setup != NULL && (rc = spec->setup(d, opts, &d->role_state, &why)) != STATUS_OK) {
        daemon_offline_free(d);
        return status_fail(err, rc, "%s", why.text);
    }
    health_set_serving(d->health, true);
    *ret_daemon = d;
    return STATUS_OK;
}

void daemon_offline_free(daemon_t *d)
{
    if (d == NULL)
        return;
    if (d->spec->stop != NULL && d->role_state != NULL)
        d->spec->stop(d->role_state);
    if (d->spec->teardown != NULL && d->role_state != NULL)
        d->spec->teardown(d->role_state);
    health_free(d->health);
    rpc_offline_server_free(d->rpc);
    metrics_free(d->metrics);
    free(d);
}
