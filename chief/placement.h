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
    /* init_from (placement_init_from): each variable's starting values, and each shard's
     * Initializer naming its slice of them */
    float **values;
    size_t n_values;
    Tessera__V1__Initializer *inits;
    Tessera__V1__Initializer__Values *init_values;
    /* and when the archive's optimizer goes on (job.init_optimizer): each variable's slots
     * (OPTIMIZER_MAX_SLOTS a variable, NULL where it has none), each shard's slices of them
     * (OPTIMIZER_MAX_SLOTS a place) and the updates it has applied (-1: it starts anew) */
    float **slot_values;
    size_t n_slot_values;
    ProtobufCBinaryData *slot_data;
    int64_t updates;
} plan_t;

/* Elements of a shape (1 for a scalar). */
size_t plan_elements(const int64_t *shape, size_t rank);

/* Shards each variable the workers described with the job's partitioner, round robin over the
 * PS tasks. */
status_t placement_plan(coordinator_t *c, chief_job_t *j,
                        const Tessera__V1__ConfigureJobResponse *vars, plan_t *plan,
                        status_msg_t *err);
void placement_done(plan_t *p);
/* init_from: reads the job's starting weights (a .keras archive or a safetensors file), checks
 * them against the variables the workers described, and gives every shard of the plan its
 * slice as its initializer; with job.init_optimizer, its slice of the archive optimizer's slots
 * and its update count too (plan->updates). */
status_t placement_init_from(chief_job_t *j, const Tessera__V1__ConfigureJobResponse *vars,
                             plan_t *plan, status_msg_t *err);
/* CreateVariables on every PS, with the job's optimizer: in rounds, each PS's request carrying
 * at most PLACEMENT_BATCH_BYTES of starting values (one shard more may exceed it). */
#define PLACEMENT_BATCH_BYTES (64u << 20)
status_t placement_create(coordinator_t *c, chief_job_t *j, const plan_t *plan, status_msg_t *err);
void placement_drop(coordinator_t *c, chief_job_t *j);

/* Weight histograms for TensorBoard (histograms.c): pulls every shard of each variable from its
 * PS (between epochs, nothing in flight), checks the values against the plan and writes each
 * whole variable's histogram for `epoch`. */
status_t chief_histograms(coordinator_t *c, chief_job_t *j, const plan_t *plan, tb_run_t *tb,
                          int64_t epoch, status_msg_t *err);

#endif
