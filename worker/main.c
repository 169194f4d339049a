/* tessera-worker: trains the job's model on its share of the data, driven by the chief. */
#include <stddef.h>

#include "daemon/daemon.h"
#include "lead.h"
#include "service.h"

static status_t worker_tf_config(const config_table_t *t, void *opts, const cluster_spec_t *spec,
                                 status_msg_t *err)
{
    return daemon_apply_tf_config(t, opts, spec, CLUSTER_WORKER, err);
}

static const config_option_t worker_options[] = {
    DAEMON_OPTION_ROWS("2224", "9402"),
    {"max-memory-bytes", CONFIG_INT, offsetof(worker_opts_t, max_memory_bytes), "0", 0, INT64_MAX,
     "Most bytes one job's model and data may take on this worker: datasets, batches, "
     "parameters, gradients and activations. ConfigureJob fails with RESOURCE_EXHAUSTED past "
     "it. 0 = the machine's physical memory."},
    {"chief", CONFIG_ADDRESS, offsetof(worker_opts_t, chief), NULL, 0, 0,
     "Announce this worker to the chief at HOST:PORT, at start and every 5 s: the chief adds it "
     "to its cluster (`tessera cluster` lists it) and it takes part in the jobs that start "
     "after. Without it, the chief knows the workers of its --worker list only."},
    {"advertise", CONFIG_ADDRESS, offsetof(worker_opts_t, advertise), NULL, 0, 0,
     "The HOST:PORT announced with --chief (default: the listen address, with this machine's "
     "name when it listens on every interface)."},
    {"device", CONFIG_STRING, offsetof(worker_opts_t, device), NULL, 0, 0,
     "The device this worker computes on when a job's device: is cuda: cuda:N picks the GPU "
     "(several workers on one host, one GPU each); cpu makes the worker refuse GPU jobs. "
     "Unset: the job's cuda:N, or cuda:0. A job on the cpu computes on the cpu."},
    {"compute-threads", CONFIG_INT, offsetof(worker_opts_t, compute_threads), "0", 0, 4096,
     "Threads a job's model computes on: the matrix products and the layers' loops, split "
     "between them (TensorFlow's intra-op threads). 0: one per CPU this worker may run on (its "
     "CPU affinity, within its cgroup's CPU quota: a Kubernetes CPU limit, systemd's "
     "CPUQuota=); at most 64. Several workers on one host share its CPUs: give each its part."},
};

static const config_table_t worker_table = {
    .program = "tessera-worker",
    .summary = "Tessera worker: runs training closures for the chief.",
    .options = worker_options,
    .n_options = sizeof(worker_options) / sizeof(worker_options[0]),
    .tf_config_cb = worker_tf_config,
};

int main(int argc, char **argv)
{
    worker_opts_t opts = {0};
    const daemon_spec_t *role = &worker_daemon_spec;
    cluster_spec_t spec;
    bool present = false;

    /* (a TF_CONFIG that does not parse is daemon_main's to report) */
    if (cluster_spec_from_env(&spec, &present, NULL) == STATUS_OK && present) {
        if (worker_leads(&spec))
            role = &worker_lead_spec;
        cluster_spec_done(&spec);
    }
    return daemon_main(role, &worker_table, &opts, argc, argv);
}
