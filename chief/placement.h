/* The variables' shards of a job: planned with the job's partitioner, created on the PS tasks,
 * dropped when the job ends. */
#ifndef TESSERA_CHIEF_PLACEMENT_H
#define TESSERA_CHIEF_PLACEMENT_H

#include "files/tensorboard.h"
#include "internal.h"

typedef struct plan {
    Tessera__V1__ShardPlacement *places;
    Tessera__V1__ShardPlacement **place_ptrs;
    size_t n_places;
    Tessera__V1__VariableShard *shards; /* one per place, in the same order */
    int64_t *shapes;                    /* 4 per place */
} plan_t;

/* Shards each variable the workers described with the job's partitioner, round robin over the
 * PS tasks. */
status_t placement_plan(coordinator_t *c, chief_job_t *j,
                        const Tessera__V1__ConfigureJobResponse *vars, plan_t *plan,
                        status_msg_t *err);
void placement_done(plan_t *p);
/* One CreateVariables call per PS, with the job's optimizer. */
status_t placement_create(coordinator_t *c, chief_job_t *j, const plan_t *plan, status_msg_t *err);
void placement_drop(coordinator_t *c, chief_job_t *j);

/* Weight histograms for TensorBoard (histograms.c): pulls every shard of each variable from its
 * PS (between epochs, nothing in flight), checks the values against the plan and writes each
 * whole variable's histogram for `epoch`. */
status_t chief_histograms(coordinator_t *c, chief_job_t *j, const plan_t *plan, tb_run_t *tb,
                          int64_t epoch, status_msg_t *err);

#endif
