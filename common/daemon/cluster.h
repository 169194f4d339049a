/* Cluster membership: the TF_CONFIG parser and the cluster spec every daemon and the CLI use.
 *
 * Accepts exactly what TensorFlow's TFConfigClusterResolver accepts (reference formats.md §8):
 * `cluster` maps a job name to a list of "host:port" (position = index) or to a sparse map
 * {"<index>": "host:port"}; `task` has `type` and `index` (a number or a numeric string);
 * `master` means `chief`; unknown top-level keys (environment, rpc_layer, session_master) are
 * accepted; at most one chief and one evaluator; task.type must exist in `cluster` (except
 * `evaluator`) and task.index must be inside it. Job names other than chief/master, worker, ps and
 * evaluator are rejected: Tessera has no use for them and a typo should not pass silently. */
#ifndef TESSERA_CLUSTER_H
#define TESSERA_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

typedef enum {
    CLUSTER_CHIEF,
    CLUSTER_WORKER,
    CLUSTER_PS,
    CLUSTER_EVALUATOR,
    CLUSTER_TASK_TYPE_COUNT_
} cluster_task_type_t;

/* One job's tasks. addrs[i] is the address of task i; NULL where a sparse map left a hole. */
typedef struct cluster_job {
    char **addrs;
    size_t n;
} cluster_job_t;

typedef struct cluster_spec {
    cluster_job_t jobs[CLUSTER_TASK_TYPE_COUNT_];
    bool has_task;                 /* TF_CONFIG named a task */
    cluster_task_type_t task_type; /* valid when has_task */
    int task_index;                /* valid when has_task */
    char *environment;             /* NULL when absent */
    char *rpc_layer;               /* NULL when absent */
    /* jobs of other names (TensorFlow takes any name; Tessera runs none of them), checked like
     * the others and kept only by name, for a warning */
    char *other_jobs; /* "trainer, workers", NULL when none */
} cluster_spec_t;

/* "chief", "worker", "ps", "evaluator". */
const char *cluster_task_type_name(cluster_task_type_t t);

/* Parses a task type name ("master" = chief). */
status_t cluster_task_type_parse(const char *s, cluster_task_type_t *ret_type);

/* Parses TF_CONFIG JSON text into ret_spec (initialized here; free with cluster_spec_done). On
 * failure ret_spec is left empty and err says what is wrong, naming the key. */
status_t cluster_spec_parse_tf_config(const char *json, cluster_spec_t *ret_spec,
                                      status_msg_t *err);

/* Reads $TF_CONFIG. *ret_present is false (and OK returned) when the variable is unset or empty. */
status_t cluster_spec_from_env(cluster_spec_t *ret_spec, bool *ret_present, status_msg_t *err);

/* The chief task of the spec: chief 0, or worker 0 when there is no chief (as TFJob does).
 * Returns false when the spec has neither. */
bool cluster_spec_chief(const cluster_spec_t *spec, cluster_task_type_t *ret_type, int *ret_index);

/* Address of a task, or NULL if it is not in the spec. */
const char *cluster_spec_address(const cluster_spec_t *spec, cluster_task_type_t type, int index);

/* Number of tasks in the spec, holes not counted. */
size_t cluster_spec_task_count(const cluster_spec_t *spec);

void cluster_spec_init(cluster_spec_t *spec);
void cluster_spec_done(cluster_spec_t *spec);

#endif
