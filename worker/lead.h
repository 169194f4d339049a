/* A worker that leads: worker 0 of a TF_CONFIG cluster without a chief serves the Coordinator too
 * (lead.c). */
#ifndef TESSERA_WORKER_LEAD_H
#define TESSERA_WORKER_LEAD_H

#include <stdbool.h>

#include "daemon/cluster.h"
#include "daemon/daemon.h"

/* Whether TF_CONFIG makes this task the leader: worker 0, and no chief in the cluster. */
bool worker_leads(const cluster_spec_t *spec);

/* tessera-worker's daemon with the chief's Coordinator beside the Worker service. */
extern const daemon_spec_t worker_lead_spec;

#endif
