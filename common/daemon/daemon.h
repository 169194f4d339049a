/* The skeleton every Tessera daemon runs: configuration, signals, the RPC server with health
 * and diagnostics, the metrics endpoint, systemd notification, watchdog and graceful stop.
 *
 * A daemon's main() is one call to daemon_main() with its spec, config table and options
 * struct, whose first member is a daemon_opts_t. */
#ifndef TESSERA_DAEMON_H
#define TESSERA_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/config.h"
#include "base/roots.h"
#include "daemon/metrics.h"
#include "rpc/server.h"

/* Options every daemon has; the first member of each daemon's options struct. */
typedef struct daemon_opts {
    char *listen;
    char *metrics_listen;
    int64_t task_index;
    int64_t threads;
    int64_t max_message_bytes;
    int64_t shutdown_grace_ms;
    int64_t drain_ms;
    int log_level;
    char *log_subsystems;
    char *tls_cert, *tls_key, *tls_ca;
    char *health_listen;
    config_list_t data_roots;
    int64_t max_calls_per_peer;
    bool metrics_tls;
} daemon_opts_t;

/* Config rows for daemon_opts_t, for the start of each daemon's table. `role_port` is the
 * default gRPC port of the role. */
#define DAEMON_OPTION_ROWS(port, metrics_port)                                                     \
    {"listen",                                                                                     \
     CONFIG_ADDRESS,                                                                               \
     offsetof(daemon_opts_t, listen),                                                              \
     "0.0.0.0:" port,                                                                              \
     0,                                                                                            \
     0,                                                                                            \
     "Address the gRPC server listens on, HOST:PORT. Port 0 picks a free port and logs it. "       \
     "TF_CONFIG sets the port of this task's cluster entry."},                                     \
        {"metrics-listen",                                                                         \
         CONFIG_ADDRESS,                                                                           \
         offsetof(daemon_opts_t, metrics_listen),                                                  \
         "0.0.0.0:" metrics_port,                                                                  \
         0,                                                                                        \
         0,                                                                                        \
         "Address of the Prometheus /metrics endpoint, HOST:PORT. Port 0 picks a free port."},     \
        {"task-index",                                                                             \
         CONFIG_INT,                                                                               \
         offsetof(daemon_opts_t, task_index),                                                      \
         "0",                                                                                      \
         0,                                                                                        \
         1000000,                                                                                  \
         "Index of this task among the tasks of its role (TF_CONFIG task.index sets it)."},        \
        {"threads",                                                                                \
         CONFIG_INT,                                                                               \
         offsetof(daemon_opts_t, threads),                                                         \
         "2",                                                                                      \
         1,                                                                                        \
         256,                                                                                      \
         "gRPC handler threads, each with its own completion queue."},                             \
        {"max-message-bytes",                                                                      \
         CONFIG_INT,                                                                               \
         offsetof(daemon_opts_t, max_message_bytes),                                               \
         "268435456",                                                                              \
         1024,                                                                                     \
         2147483647,                                                                               \
         "Largest message accepted or sent; larger tensors travel in chunks."},                    \
        {"shutdown-grace",                                                                         \
         CONFIG_DURATION_MS,                                                                       \
         offsetof(daemon_opts_t, shutdown_grace_ms),                                               \
         "1s",                                                                                     \
         0,                                                                                        \
         600000,                                                                                   \
         "On SIGTERM, how long running calls may finish before they are cancelled."},              \
        {"drain-delay",                                                                            \
         CONFIG_DURATION_MS,                                                                       \
         offsetof(daemon_opts_t, drain_ms),                                                        \
         "0ms",                                                                                    \
         0,                                                                                        \
         600000,                                                                                   \
         "On SIGTERM, how long to keep serving as NOT_SERVING before closing, so readiness "       \
         "probes notice first."},                                                                  \
        {"log-level",                                                                              \
         CONFIG_LOG_LEVEL,                                                                         \
         offsetof(daemon_opts_t, log_level),                                                       \
         "info",                                                                                   \
         0,                                                                                        \
         0,                                                                                        \
         "Most verbose log level written: err, warning, notice, info or debug."},                  \
        {"log-subsystems",                                                                         \
         CONFIG_STRING,                                                                            \
         offsetof(daemon_opts_t, log_subsystems),                                                  \
         "all",                                                                                    \
         0,                                                                                        \
         0,                                                                                        \
         "Comma-separated subsystems to log (main, config, rpc, grpc, metrics, health, ps, "       \
         "worker, chief, cli, train, data), 'all', or 'all,-grpc' style exclusions."},             \
        {"tls-cert",                                                                               \
         CONFIG_STRING,                                                                            \
         offsetof(daemon_opts_t, tls_cert),                                                        \
         NULL,                                                                                     \
         0,                                                                                        \
         0,                                                                                        \
         "PEM certificate of this task (tessera certs issue). With --tls-key and --tls-ca every "  \
         "gRPC port and channel uses mutual TLS 1.3 and calls are authorized by the callers' "     \
         "roles."},                                                                                \
        {"tls-key",                                                                                \
         CONFIG_STRING,                                                                            \
         offsetof(daemon_opts_t, tls_key),                                                         \
         NULL,                                                                                     \
         0,                                                                                        \
         0,                                                                                        \
         "PEM private key of --tls-cert (unencrypted; keep it readable by this user only)."},      \
        {"tls-ca",                                                                                 \
         CONFIG_STRING,                                                                            \
         offsetof(daemon_opts_t, tls_ca),                                                          \
         NULL,                                                                                     \
         0,                                                                                        \
         0,                                                                                        \
         "PEM certificate(s) of the cluster's CA: peers must present a certificate it signed."},   \
        {"max-calls-per-peer",                                                                     \
         CONFIG_INT,                                                                               \
         offsetof(daemon_opts_t, max_calls_per_peer),                                              \
         "256",                                                                                    \
         0,                                                                                        \
         1000000,                                                                                  \
         "Calls one client host may have in flight at once; more answer RESOURCE_EXHAUSTED. "      \
         "0: no limit."},                                                                          \
        {"metrics-tls",                                                                            \
         CONFIG_BOOL,                                                                              \
         offsetof(daemon_opts_t, metrics_tls),                                                     \
         "false",                                                                                  \
         0,                                                                                        \
         0,                                                                                        \
         "Serve /metrics over HTTPS (TLS 1.3) with --tls-cert and --tls-key; Prometheus then "     \
         "scrapes with scheme: https and the cluster's CA in tls_config."},                        \
        {"health-listen",                                                                          \
         CONFIG_ADDRESS,                                                                           \
         offsetof(daemon_opts_t, health_listen),                                                   \
         NULL,                                                                                     \
         0,                                                                                        \
         0,                                                                                        \
         "With mutual TLS: a plaintext HOST:PORT that answers only grpc.health.v1.Health, for "    \
         "Kubernetes gRPC probes (which cannot present a certificate)."},                          \
    {                                                                                              \
        "data-root", CONFIG_PATH_LIST, offsetof(daemon_opts_t, data_roots), NULL, 0, 0,            \
            "A directory under which this daemon may read and write the files jobs name (data, "   \
            "init_from, checkpoint and TensorBoard directories), symbolic links resolved; "        \
            "repeatable. None: it touches no file a job names (the chief then takes model files "  \
            "sent with the job, as tessera submit sends them)."                                    \
    }

typedef struct daemon daemon_t;

typedef struct daemon_spec {
    const char *program;         /* "tessera-ps" */
    const char *role;            /* "ps", for logs and metric names */
    int task_type;               /* Tessera__V1__TaskType */
    const char *const *services; /* gRPC services the role serves, NULL-terminated */
    /* Installs the role's handlers and metrics; opts is the whole options struct. */
    status_t (*setup)(daemon_t *d, void *opts, void **ret_state, status_msg_t *err);
    /* Stops the role's background work (before the RPC server shuts down). */
    void (*stop)(void *state);
    /* Frees the role's state (after the RPC server shut down). */
    void (*teardown)(void *state);
} daemon_spec_t;

/* Runs the daemon until SIGTERM or SIGINT and returns the process exit code: 0 after a clean
 * stop or --help, 2 for bad configuration, 1 when start-up fails. */
int daemon_main(const daemon_spec_t *spec, const config_table_t *table, void *opts, int argc,
                char **argv);

rpc_server_t *daemon_rpc(daemon_t *d);
metrics_t *daemon_metrics(daemon_t *d);
const daemon_spec_t *daemon_spec(daemon_t *d);

/* The address clients reach this daemon's gRPC server at (the bound port, 127.0.0.1 for a
 * wildcard listen host). */
const char *daemon_address(daemon_t *d);

/* The directories jobs' files must lie under (--data-root). */
const roots_t *daemon_roots(daemon_t *d);

/* A TF_CONFIG hook for tables whose struct starts with daemon_opts_t: when TF_CONFIG names a
 * task of the daemon's own type, sets listen to its port and task-index to its index; a task of
 * another type is an error naming both. task_type is the cluster_task_type_t of the role. */
status_t daemon_apply_tf_config(const config_table_t *t, void *opts, const cluster_spec_t *spec,
                                int task_type, status_msg_t *err);

/* A daemon without network, signals or threads, for the fuzz targets (tests/fuzz/): what
 * daemon_main would serve (health, diagnostics and spec->setup's handlers) on an offline RPC
 * server (rpc_offline.h), to be called with rpc_offline_call(daemon_rpc(d), ...). opts is the
 * role's options struct, filled by the caller, and must outlive the daemon. Fails as
 * spec->setup does, or with STATUS_NO_MEMORY. */
status_t daemon_offline_new(const daemon_spec_t *spec, void *opts, daemon_t **ret_daemon,
                            status_msg_t *err);

/* Stops the role (spec->stop), tears it down (spec->teardown) and frees the offline daemon.
 * NULL-safe. */
void daemon_offline_free(daemon_t *d);

#endif
