/* tessera-worker: trains the job's model on its share of the data, driven by the chief. */
#include <stddef.h>

#include "daemon.h"
#include "service.h"
#include "tessera/v1/common.pb-c.h"

typedef struct worker_opts {
    daemon_opts_t common;
} worker_opts_t;

static status_t worker_tf_config(const config_table_t *t, void *opts, const cluster_spec_t *spec,
                                 status_msg_t *err)
{
    return daemon_apply_tf_config(t, opts, spec, CLUSTER_WORKER, err);
}

static const config_option_t worker_options[] = {DAEMON_OPTION_ROWS("2224", "9402")};

static const config_table_t worker_table = {
    .program = "tessera-worker",
    .summary = "Tessera worker: runs training closures for the chief.",
    .options = worker_options,
    .n_options = sizeof(worker_options) / sizeof(worker_options[0]),
    .tf_config_cb = worker_tf_config,
};

static const char *const worker_services[] = {RPC_SVC_WORKER, RPC_SVC_DIAG, NULL};

static const daemon_spec_t worker_spec = {
    .program = "tessera-worker",
    .role = "worker",
    .task_type = TESSERA__V1__TASK_TYPE__TASK_TYPE_WORKER,
    .services = worker_services,
    .setup = worker_service_setup,
    .stop = worker_service_stop,
    .teardown = worker_service_teardown,
};

int main(int argc, char **argv)
{
    worker_opts_t opts = {0};
    return daemon_main(&worker_spec, &worker_table, &opts, argc, argv);
}
