/* The chief's job manager and ClusterCoordinator.
 *
 * Jobs submitted by the CLI queue in order and run one at a time. Running a job: configure
 * every worker (model and data shard), plan the variables' shards with the job's partitioner and
 * place them round robin over the PS tasks, create them there, tell the workers where they are,
 * then hand out closures of steps_per_execution steps from a queue, one dispatcher thread per
 * worker, evaluating on the test split (inline, on worker 0) at each epoch's end, and finally
 * drop the job's variables. A closure that fails because its worker is unreachable goes back on
 * the queue for the other workers. */
#ifndef TESSERA_COORDINATOR_H
#define TESSERA_COORDINATOR_H

#include "chief.h"

typedef struct coordinator coordinator_t;

#define CHIEF_MAX_JOINED 64 /* workers that may announce themselves, past the --worker list */

status_t coordinator_new(daemon_t *d, chief_opts_t *opts, coordinator_t **ret, status_msg_t *err);

/* A copy of the cluster's task addresses, the n_ps PS tasks first, then the workers (those that
 * joined too); their number. Free each and the array. */
size_t coordinator_tasks(coordinator_t *c, char ***ret, size_t *ret_n_ps);

/* Stops the running job (cancelled) and the runner thread. */
void coordinator_stop(coordinator_t *c);
void coordinator_free(coordinator_t *c);

#endif
