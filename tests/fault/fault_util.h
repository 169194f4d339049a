/* Helpers of the fault tests: a cluster of real daemons on loopback, jobs on it, and what its
 * chief says about them. Each fails the running Check test when something does not happen. */
#ifndef TESSERA_FAULT_UTIL_H
#define TESSERA_FAULT_UTIL_H

#include <stdint.h>

#include "harness.h"
#include "tessera/v1/coordinator.pb-c.h"

typedef struct cluster {
    launch_proc_t ps, worker[2], chief;
    int n_workers;
    char chief_flag[300], chief_log[600];
} cluster_t;

/* A PS, n_workers workers (1 or 2) and a chief with the flags given (t1 NULL: a 3 s worker
 * timeout; t2 may be NULL). */
void start_cluster_with(cluster_t *c, int n_workers, const char *t1, const char *t2);
void start_cluster_of(cluster_t *c, int n_workers);
void start_cluster(cluster_t *c); /* two workers */
/* The chief and the PS stop cleanly; the workers (one may be dead) are killed. */
void stop_cluster(cluster_t *c);

/* Runs the CLI with args (NULL-terminated); its output in *out. */
int tessera(char *const *args, char **out);

/* A job file in the test's directory: the MLP 200-128-10 on `examples` synthetic examples
 * (batch 32), the optimizer and `train:` section given as YAML; with ckpt, a checkpoint every
 * 100 steps in that directory. */
const char *write_job_with(const char *name, const char *optimizer, int examples, const char *train,
                           const char *ckpt);
/* Epochs of 250 steps over the workers' shares of 8000 synthetic examples, Adam. */
const char *write_job_of(const char *name, const char *ckpt, int epochs);
const char *write_job_ckpt(const char *name, const char *ckpt); /* 8 epochs */
const char *write_job(const char *name);                        /* 8 epochs, no checkpoint */

/* The job id in `tessera submit`'s output (malloc'd). */
char *submitted_id(const char *out);
/* Submits a job file without waiting for it; its id (malloc'd). */
char *submit(cluster_t *c, const char *path);
/* The chief's view of a job (free with protobuf_c_message_free_unpacked). */
Tessera__V1__JobInfo *get_job(cluster_t *c, const char *id);
/* Waits (60 s at most) until the job's step is past `step`. */
void wait_running_past(cluster_t *c, const char *id, int64_t step);
/* The last "test accuracy" in a job's output: its result line's. */
double test_accuracy(const char *out);
/* Waits for the job to end (`tessera watch`, output in *ret_out) and checks that it succeeded
 * with exactly `steps` steps counted, its total. */
void expect_completed_steps(cluster_t *c, const char *id, int64_t steps, char **ret_out);
void expect_completed(cluster_t *c, const char *id, char **ret_out); /* 2000 steps */
/* Waits up to 30 s for a series of the chief's /metrics to reach value. */
void wait_metric(cluster_t *c, const char *series, double value);
/* An undisturbed run's test accuracy (write_job), measured once per test program. */
double undisturbed(cluster_t *c);
/* A disturbed job's output: its test accuracy (printed, with what) is at most 0.08 below calm,
 * an undisturbed run's (the spread of asynchronous runs of the same job). */
void expect_accuracy(const char *what, const char *out, double calm);

#endif
