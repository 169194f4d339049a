/* The variables' shards: planned with the job's partitioner, placed round robin over the PS
 * tasks, created there with the job's optimizer, and dropped when the job ends. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "base/log.h"
#include "fanout.h"
#include "internal.h"
#include "placement.h"
#include "job/partitioner.h"
#include "rpc/optimizer_proto.h"

void placement_done(plan_t *p)
{
    free(p->places);
    free(p->place_ptrs);
    free(p->shards);
    free(p->shapes);
}

status_t placement_plan(coordinator_t *c, chief_job_t *j,
                        const Tessera__V1__ConfigureJobResponse *vars, plan_t *plan,
                        status_msg_t *err)
{
    partitioner_placement_t pl;
    size_t total = 0, k = 0;
    int *counts = calloc(vars->n_variables + 1, sizeof(int));

    if (counts == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < vars->n_variables; i++) {
        const Tessera__V1__VariableShard *v = vars->variables[i];
        status_t rc = partitioner_num_shards(&j->job.partitioner, v->full_shape, v->n_full_shape,
                                             sizeof(float), &counts[i], err);
        if (rc != STATUS_OK) {
            free(counts);
            return rc;
        }
        total += (size_t)counts[i];
    }
    plan->places = calloc(total + 1, sizeof(*plan->places));
    plan->place_ptrs = calloc(total + 1, sizeof(*plan->place_ptrs));
    plan->shards = calloc(total + 1, sizeof(*plan->shards));
    plan->shapes = calloc(4 * total + 4, sizeof(*plan->shapes));
    if (!plan->places || !plan->place_ptrs || !plan->shards || !plan->shapes) {
        free(counts);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    partitioner_placement_init(&pl, (int)c->n_ps);
    for (size_t i = 0; i < vars->n_variables; i++) {
        const Tessera__V1__VariableShard *v = vars->variables[i];
        for (int s = 0; s < counts[i]; s++, k++) {
            int64_t off, rows;
            Tessera__V1__ShardPlacement *p = &plan->places[k];
            Tessera__V1__VariableShard *sh = &plan->shards[k];
            partitioner_shard_rows(v->full_shape[0], counts[i], s, &off, &rows);
            tessera__v1__shard_placement__init(p);
            p->variable = v->variable;
            p->shard = s;
            p->ps_task = partitioner_placement_next(&pl);
            p->row_offset = off;
            p->rows = rows;
            plan->place_ptrs[k] = p;
            *sh = *v;
            sh->shard = s;
            sh->num_shards = counts[i];
            sh->row_offset = off;
            for (size_t d = 0; d < v->n_full_shape && d < 4; d++)
                plan->shapes[4 * k + d] = d == 0 ? rows : v->full_shape[d];
            sh->shape = &plan->shapes[4 * k];
            sh->n_shape = v->n_full_shape;
        }
    }
    plan->n_places = total;
    free(counts);
    return STATUS_OK;
}

status_t placement_create(coordinator_t *c, chief_job_t *j, const plan_t *plan, status_msg_t *err)
{
    optimizer_msg_t opt;
    Tessera__V1__CreateVariablesRequest *reqs = calloc(c->n_ps, sizeof(*reqs));
    Tessera__V1__VariableShard ***lists = calloc(c->n_ps, sizeof(*lists));
    fanout_t *f = calloc(c->n_ps, sizeof(*f));
    double scale =
        j->job.optimizer.lr_scale == 0 ? (double)c->n_workers : j->job.optimizer.lr_scale;
    status_t rc = STATUS_OK;

    if (!reqs || !lists || !f) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        goto out;
    }
    optimizer_to_proto(&j->job.optimizer, scale, &opt);
    for (size_t p = 0; p < c->n_ps; p++) {
        tessera__v1__create_variables_request__init(&reqs[p]);
        reqs[p].job = j->id;
        reqs[p].optimizer = &opt.msg;
        lists[p] = calloc(plan->n_places + 1, sizeof(**lists));
        if (lists[p] == NULL) {
            rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
            goto out;
        }
        reqs[p].shards = lists[p];
    }
    for (size_t k = 0; k < plan->n_places; k++) {
        size_t p = (size_t)plan->places[k].ps_task;
        reqs[p].shards[reqs[p].n_shards++] = &plan->shards[k];
    }
    for (size_t p = 0; p < c->n_ps; p++)
        f[p] = (fanout_t){.ch = c->ps[p],
                          .method = RPC_PS_CREATE_VARIABLES,
                          .req = &reqs[p].base,
                          .timeout_ms = CONTROL_TIMEOUT};
    fanout_run(f, c->n_ps);
    for (size_t p = 0; p < c->n_ps && rc == STATUS_OK; p++)
        if (f[p].rc != STATUS_OK)
            rc = status_fail(err, f[p].rc, "creating the variables on ps %zu (%s): %s", p,
                             rpc_channel_target(c->ps[p]), f[p].err.message);
    fanout_done(f, c->n_ps);
out:
    for (size_t p = 0; lists && p < c->n_ps; p++)
        free(lists[p]);
    free(lists);
    free(reqs);
    free(f);
    return rc;
}

void placement_drop(coordinator_t *c, chief_job_t *j)
{
    Tessera__V1__DropJobRequest req = TESSERA__V1__DROP_JOB_REQUEST__INIT;
    fanout_t *f = calloc(c->n_ps + 1, sizeof(*f));
    if (f == NULL)
        return;
    req.job = j->id;
    for (size_t p = 0; p < c->n_ps; p++)
        f[p] = (fanout_t){.ch = c->ps[p],
                          .method = RPC_PS_DROP_JOB,
                          .req = &req.base,
                          .timeout_ms = CONTROL_TIMEOUT};
    fanout_run(f, c->n_ps);
    for (size_t p = 0; p < c->n_ps; p++)
        if (f[p].rc != STATUS_OK)
            LOG_WARNING(CHIEF, "job %s: dropping its variables on ps %zu failed: %s", j->id, p,
                        f[p].err.message);
    fanout_done(f, c->n_ps);
    free(f);
}
