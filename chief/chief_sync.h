/* multi_worker_mirrored jobs on the chief's cluster (sync.c). */
#ifndef TESSERA_CHIEF_SYNC_H
#define TESSERA_CHIEF_SYNC_H

#include "internal.h"

/* Runs job j on every worker of the cluster, synchronously (the runner thread, c->mu not held).
 * STATUS_CANCELLED when it is cancelled or the chief stops; a failure names the worker. */
status_t chief_run_sync(coordinator_t *c, chief_job_t *j, status_msg_t *err);

#endif
