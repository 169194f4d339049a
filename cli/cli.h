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
int cli_jobs(int argc, char **argv); /* submit, status, watch, cancel, checkpoint, list */

/* Submits the job file to the chief; with watch, follows it to the end (exit code 0 when it
 * succeeded). */
int cli_submit_job(const char *chief, const char *path, bool watch, int64_t timeout_ms);

/* Removes and returns the first argument that is neither a flag nor a flag's value. */
const char *cli_take_positional(int *argc, char **argv);
int cli_run(int argc, char **argv);

/* Asks the chief at addr for the cluster and prints it; returns the exit code. */
int cli_cluster_from_chief(const char *addr, int64_t timeout_ms);

/* Prints one table row per task and a summary; returns the number of unhealthy tasks. */
size_t cli_print_tasks(Tessera__V1__TaskStatus *const *tasks, size_t n);

#endif
