/* The worker's gRPC service (tessera.v1.Worker). */
#ifndef TESSERA_WORKER_SERVICE_H
#define TESSERA_WORKER_SERVICE_H

#include "daemon/daemon.h"

typedef struct worker_opts {
    daemon_opts_t common;
    /* Most bytes of one job's model and data (datasets, batches, parameters, gradients,
     * activations); ConfigureJob fails with RESOURCE_EXHAUSTED past it. 0: physical memory. */
    int64_t max_memory_bytes;
    char *chief;             /* announce this worker to the chief at this address (NULL: do not) */
    char *advertise;         /* the address announced; NULL: the listen address */
    char *device;            /* --device: cpu, cuda or cuda:N; NULL: the job's device */
    int64_t compute_threads; /* a job's model computes on this many threads; 0: cpus_available */
} worker_opts_t;

/* tessera-worker: the handlers are installed and the closure executor started by setup; stop
 * ends it (pending closures fail with UNAVAILABLE); teardown frees the state. */
extern const daemon_spec_t worker_daemon_spec;

#endif
