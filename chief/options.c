/* The chief's options: tessera-chief's flags, config file and TF_CONFIG, and the defaults of a
 * chief that worker 0 runs beside its Worker service (a cluster without a chief). */
#include <stddef.h>

#include "chief.h"

static const config_option_t chief_options[] = {
    DAEMON_OPTION_ROWS("2222", "9400"),
    {"ps", CONFIG_ADDRESS_LIST, offsetof(chief_opts_t, ps), NULL, 0, 0,
     "Parameter server tasks, by index: HOST:PORT,HOST:PORT. TF_CONFIG's cluster.ps sets it."},
    {"worker", CONFIG_ADDRESS_LIST, offsetof(chief_opts_t, worker), NULL, 0, 0,
     "Worker tasks, by index: HOST:PORT,HOST:PORT. TF_CONFIG's cluster.worker sets it."},
    {"health-timeout", CONFIG_DURATION_MS, offsetof(chief_opts_t, health_timeout_ms), "1s", 10,
     60000, "How long a health check of one task may take before it counts as unreachable."},
    {"worker-timeout", CONFIG_DURATION_MS, offsetof(chief_opts_t, worker_timeout_ms), "10s", 500,
     3600000,
     "How long a worker of a running job may answer no health check (stopped, hung, cut off by "
     "the network) before its closure goes back on the queue and the job goes on without it."},
    {"ps-timeout", CONFIG_DURATION_MS, offsetof(chief_opts_t, ps_timeout_ms), "10m", 1000, 86400000,
     "How long a job whose parameter server was lost waits for it to come back (restarted at "
     "its address) before it fails; back, the job goes on from its newest checkpoint."},
    {"stall-timeout", CONFIG_DURATION_MS, offsetof(chief_opts_t, stall_timeout_ms), "5m", 1000,
     86400000,
     "How long a running job may go without a step before a `stalled` event names the tasks it "
     "waits on (once per stall)."},
    {"rejoin-timeout", CONFIG_DURATION_MS, offsetof(chief_opts_t, rejoin_timeout_ms), "10m", 1000,
     86400000,
     "How long a job whose every worker was lost waits for one to come back (restarted at its "
     "address) before it fails."},
    {"state-dir", CONFIG_STRING, offsetof(chief_opts_t, state_dir), NULL, 0, 0,
     "Directory of the job journal: every job submitted, started and ended is written there "
     "(fsynced) first, so that a chief restarted after a crash or a stop lists the same jobs, "
     "keeps the queued ones queued and takes the running one up again from its newest "
     "checkpoint. Without it, jobs live in memory only."},
    {"max-queued-jobs", CONFIG_INT, offsetof(chief_opts_t, max_queued_jobs), "64", 1, 1024,
     "Jobs that may wait to run; SubmitJob answers RESOURCE_EXHAUSTED beyond."},
    {"max-finished-jobs", CONFIG_INT, offsetof(chief_opts_t, max_finished_jobs), "100", 0, 100000,
     "Ended jobs kept for status and list (and in the journal); older ones are forgotten."},
    {"max-watch-streams", CONFIG_INT, offsetof(chief_opts_t, max_watch_streams), "64", 1, 10000,
     "WatchJob streams (tessera watch, submit --watch) open at once; more answer "
     "RESOURCE_EXHAUSTED."},
};

const config_table_t chief_table = {
    .program = "tessera-chief",
    .summary = "Tessera chief: accepts jobs and coordinates parameter servers and workers.",
    .options = chief_options,
    .n_options = sizeof(chief_options) / sizeof(chief_options[0]),
    .tf_config_cb = chief_apply_tf_config,
};
