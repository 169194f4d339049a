/* The worker's gRPC service (tessera.v1.Worker). */
#ifndef TESSERA_WORKER_SERVICE_H
#define TESSERA_WORKER_SERVICE_H

#include "daemon.h"

typedef struct worker_service worker_service_t;

/* daemon_spec_t hooks: install the handlers and start the closure executor; stop it (pending
 * closures fail with UNAVAILABLE); free the state. */
status_t worker_service_setup(daemon_t *d, void *opts, void **ret_state, status_msg_t *err);
void worker_service_stop(void *state);
void worker_service_teardown(void *state);

#endif
