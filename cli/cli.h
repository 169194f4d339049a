/* The tessera command's subcommands. Each returns the process exit code: 0 success, 1 failure
 * of the operation, 2 bad usage. */
#ifndef TESSERA_CLI_H
#define TESSERA_CLI_H

#include "rpc/health.h"
#include "tessera/v1/coordinator.pb-c.h"

int cli_cluster(int argc, char **argv);
int cli_train(int argc, char **argv);
int cli_convert(int argc, char **argv);
int cli_export(int argc, char **argv);
int cli_certs(int argc, char **argv); /* init, issue */
int cli_jobs(int argc, char **argv);  /* submit, status, watch, cancel, checkpoint, list */

/* Submits the job file to the chief; with watch, follows it to the end (exit code 0 when it
 * succeeded). */
int cli_submit_job(const char *chief, const char *path, bool watch, int64_t timeout_ms);

/* Mutual TLS for the commands that talk to a cluster: --tls-cert, --tls-key and --tls-ca, each
 * defaulting to $TESSERA_TLS_CERT, $TESSERA_TLS_KEY and $TESSERA_TLS_CA. */
typedef struct cli_tls {
    char *cert, *key, *ca;
} cli_tls_t;

#define CLI_TLS_ROWS(type, member)                                                                 \
    {"tls-cert",                                                                                   \
     CONFIG_STRING,                                                                                \
     offsetof(type, member.cert),                                                                  \
     NULL,                                                                                         \
     0,                                                                                            \
     0,                                                                                            \
     "PEM client certificate for a cluster with mutual TLS (tessera certs issue DIR client "       \
     "NAME; default $TESSERA_TLS_CERT)."},                                                         \
        {"tls-key",                                                                                \
         CONFIG_STRING,                                                                            \
         offsetof(type, member.key),                                                               \
         NULL,                                                                                     \
         0,                                                                                        \
         0,                                                                                        \
         "PEM key of --tls-cert (default $TESSERA_TLS_KEY)."},                                     \
    {                                                                                              \
        "tls-ca", CONFIG_STRING, offsetof(type, member.ca), NULL, 0, 0,                            \
            "PEM certificate of the cluster's CA (default $TESSERA_TLS_CA)."                       \
    }

/* Reads the TLS files the flags or environment name (none: plaintext); prints the error and
 * returns 2 when they are incomplete or do not load, else 0. */
int cli_tls_init(const char *cmd, const cli_tls_t *t);

/* Removes and returns the first argument that is neither a flag nor a flag's value. */
const char *cli_take_positional(int *argc, char **argv);
int cli_run(int argc, char **argv);

/* Asks the chief at addr for the cluster and prints it; returns the exit code. */
int cli_cluster_from_chief(const char *addr, int64_t timeout_ms);

/* Prints one table row per task and a summary; returns the number of unhealthy tasks. */
size_t cli_print_tasks(Tessera__V1__TaskStatus *const *tasks, size_t n);

#endif
