/* tessera-ps: the parameter server. */
#include <stddef.h>

#include "daemon/daemon.h"
#include "service.h"

static status_t ps_tf_config(const config_table_t *t, void *opts, const cluster_spec_t *spec,
                             status_msg_t *err)
{
    return daemon_apply_tf_config(t, opts, spec, CLUSTER_PS, err);
}

static const config_option_t ps_options[] = {
    DAEMON_OPTION_ROWS("2223", "9401"),
    {"max-memory-bytes", CONFIG_INT, offsetof(ps_opts_t, max_memory_bytes), "0", 0, INT64_MAX,
     "Most bytes of variable values and optimizer slots held for all jobs together; creating "
     "more fails with RESOURCE_EXHAUSTED. 0 = the machine's physical memory."},
    {"max-jobs", CONFIG_INT, offsetof(ps_opts_t, max_jobs), "256", 1, 1000000,
     "Most jobs whose variables this parameter server holds at once."},
    {"max-variables-per-job", CONFIG_INT, offsetof(ps_opts_t, max_variables_per_job), "65536", 1,
     100000000, "Most variables one job may create on this parameter server."},
    {"max-shards-per-job", CONFIG_INT, offsetof(ps_opts_t, max_shards_per_job), "262144", 1,
     100000000,
     "Most variable shards one job may create on this parameter server. Each shard also costs "
     "about 300 bytes of bookkeeping, counted against --max-memory-bytes."},
    {"apply-threads", CONFIG_INT, offsetof(ps_opts_t, apply_threads), "0", 0, 1024,
     "Threads that apply a pushed gradient to a large dense shard (256 KiB of values and more) "
     "and check it first, the handler's own thread among them; 0 = one per CPU this PS may run on "
     "(its CPU affinity, within its cgroup's CPU quota), 1 = the handler's thread alone."},
};

static const config_table_t ps_table = {
    .program = "tessera-ps",
    .summary = "Tessera parameter server: holds variable shards and applies pushed gradients.",
    .options = ps_options,
    .n_options = sizeof(ps_options) / sizeof(ps_options[0]),
    .tf_config_cb = ps_tf_config,
};

int main(int argc, char **argv)
{
    ps_opts_t opts = {0};
    return daemon_main(&ps_daemon_spec, &ps_table, &opts, argc, argv);
}
