/* The parameter server's gRPC service (tessera.v1.ParameterServer) over the variable store. */
#ifndef TESSERA_PS_SERVICE_H
#define TESSERA_PS_SERVICE_H

#include <stdint.h>

#include "daemon/daemon.h"

typedef struct ps_opts {
    daemon_opts_t common;
    int64_t max_memory_bytes; /* values and slots of all jobs; 0 = the machine's memory */
    int64_t max_jobs;
    int64_t max_variables_per_job;
    int64_t max_shards_per_job;
    int64_t apply_threads; /* threads an update of a large shard spreads over; 0 = one per CPU */
} ps_opts_t;

/* daemon_spec_t hooks: create the store and the metrics and install the handlers (opts is a
 * ps_opts_t); free the store once the RPC server has shut down. */
status_t ps_service_setup(daemon_t *d, void *opts, void **ret_state, status_msg_t *err);
void ps_service_teardown(void *state);

/* tessera-ps as daemon_main (and the fuzz targets' offline daemon) runs it: its services and
 * the hooks above. */
extern const daemon_spec_t ps_daemon_spec;

#endif
