/* Worker 0 of a TF_CONFIG cluster without a chief: as in TensorFlow's MultiWorkerMirroredStrategy
 * it leads. The process serves the Coordinator (the chief's service, with its defaults and the
 * cluster's worker and ps lists) beside its own Worker service, on the same port: `tessera
 * submit --chief` names worker 0, or reads the same TF_CONFIG. The chief reaches this worker as it
 * reaches the others, over gRPC. */
#include "lead.h"

#include <stdlib.h>

#include "base/log.h"
#include "chief.h"
#include "daemon/cluster.h"
#include "rpc/methods.h"
#include "service.h"

typedef struct lead {
    void *worker; /* worker_daemon_spec's state */
    chief_opts_t chief_opts;
    void *chief; /* chief_daemon_spec's state */
} lead_t;

bool worker_leads(const cluster_spec_t *spec)
{
    return spec->has_task && spec->task_type == CLUSTER_WORKER && spec->task_index == 0 &&
           spec->jobs[CLUSTER_CHIEF].n == 0;
}

static void lead_stop(void *state)
{
    lead_t *l = state;
    if (l->chief != NULL) /* the chief first: its job's calls to this worker end */
        chief_daemon_spec.stop(l->chief);
    worker_daemon_spec.stop(l->worker);
}

static void lead_teardown(void *state)
{
    lead_t *l = state;
    if (l->chief != NULL)
        chief_daemon_spec.teardown(l->chief);
    worker_daemon_spec.teardown(l->worker);
    config_done(&chief_table, &l->chief_opts);
    free(l);
}

static status_t lead_setup(daemon_t *d, void *opts, void **ret_state, status_msg_t *err)
{
    lead_t *l = calloc(1, sizeof(*l));
    cluster_spec_t spec;
    bool present = false;
    status_t rc;

    if (l == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    rc = worker_daemon_spec.setup(d, opts, &l->worker, err);
    if (rc != STATUS_OK) {
        free(l);
        return rc;
    }
    cluster_spec_init(&spec);
    rc = cluster_spec_from_env(&spec, &present, err);
    if (rc == STATUS_OK && !(present && worker_leads(&spec)))
        rc = status_fail(err, STATUS_BAD_TF_CONFIG,
                         "TF_CONFIG changed: it no longer makes this task worker 0 of a cluster "
                         "without a chief");
    if (rc == STATUS_OK)
        rc = chief_lead_opts(&l->chief_opts, &spec, err);
    if (rc == STATUS_OK)
        rc = chief_daemon_spec.setup(d, &l->chief_opts, &l->chief, err);
    cluster_spec_done(&spec);
    if (rc != STATUS_OK) {
        lead_stop(l);
        lead_teardown(l);
        return rc;
    }
    LOG_INFO(WORKER, "TF_CONFIG has no chief: worker 0 leads, serving the Coordinator at %s",
             daemon_address(d));
    *ret_state = l;
    return STATUS_OK;
}

static const char *const lead_services[] = {RPC_SVC_WORKER, RPC_SVC_COORD, RPC_SVC_DIAG, NULL};

const daemon_spec_t worker_lead_spec = {
    .program = "tessera-worker",
    .role = "worker",
    .task_type = TESSERA__V1__TASK_TYPE__TASK_TYPE_WORKER,
    .services = lead_services,
    .setup = lead_setup,
    .stop = lead_stop,
    .teardown = lead_teardown,
};
