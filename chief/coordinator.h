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

status_t coordinator_new(daemon_t *d, chief_opts_t *opts, coordinator_t **ret, status_msg_t *err);

/* Stops the running job (cancelled) and the runner thread. */
void coordinator_stop(coordinator_t *c);
void coordinator_free(coordinator_t *c);

#endif
