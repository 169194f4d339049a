/* The chief's pieces, shared between its files. */
#ifndef TESSERA_CHIEF_H
#define TESSERA_CHIEF_H

#include "daemon/daemon.h"

typedef struct chief_opts {
    daemon_opts_t common;
    config_list_t ps;
    config_list_t worker;
    int64_t health_timeout_ms;
    int64_t worker_timeout_ms; /* a worker answering no health check this long is lost; 0: never */
    int64_t ps_timeout_ms;     /* how long a job waits for a lost PS to come back */
    int64_t stall_timeout_ms;  /* a job without a step this long gets a `stalled` event */
    int64_t rejoin_timeout_ms; /* how long a job with every worker lost waits for one */
    char *state_dir;           /* the job journal's directory; NULL: none (jobs die with us) */
    int64_t max_queued_jobs;   /* SubmitJob refuses more waiting jobs */
    int64_t max_finished_jobs; /* ended jobs kept for GetJob and ListJobs */
    int64_t max_watch_streams; /* WatchJob streams open at once */
} chief_opts_t;

extern const daemon_spec_t chief_daemon_spec;
extern const config_table_t chief_table;

/* TF_CONFIG: this task's listen port and index (type chief), and the ps and worker lists. */
status_t chief_apply_tf_config(const config_table_t *t, void *opts, const cluster_spec_t *spec,
                               status_msg_t *err);

/* The options of a chief that worker 0 runs for a TF_CONFIG cluster without a chief: the
 * defaults, and the cluster's ps and worker lists. Release with config_done(&chief_table, o). */
status_t chief_lead_opts(chief_opts_t *o, const cluster_spec_t *spec, status_msg_t *err);

#endif
