/* The variables' shards: planned with the job's partitioner, placed round robin over the PS
 * tasks, created there with the job's optimizer, and dropped when the job ends. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "files/init_weights.h"
#include "fanout.h"
#include "internal.h"
#include "placement.h"
#include "job/init_optimizer.h"
#include "job/partitioner.h"
#include "rpc/initializer_proto.h"
#include "rpc/optimizer_proto.h"

void placement_done(plan_t *p)
{
    free(p->places);
    free(p->place_ptrs);
    free(p->shards);
    free(p->shapes);
    for (size_t i = 0; i < p->n_values; i++)
        free(p->values[i]);
    free(p->values);
    free(p->inits);
    free(p->init_values);
    for (size_t i = 0; i < p->n_slot_values; i++)
        free(p->slot_values[i]);
    free(p->slot_values);
    free(p->slot_data);
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
        job_constraint_t con;
        status_t rc = partitioner_num_shards(&j->job.partitioner, v->full_shape, v->n_full_shape,
                                             sizeof(float), &counts[i], err);
        /* a constraint whose norms span rows needs every row in one place: one shard */
        if (rc == STATUS_OK &&
            constraint_from_proto(v->constraint, (int)v->n_full_shape, &con, err) == STATUS_OK &&
            constraint_spans_rows(&con))
            counts[i] = 1;
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
            sh->n_slots = 0; /* a worker describes variables, not their optimizer's state */
            sh->slots = NULL;
            sh->updates = 0;
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

size_t plan_elements(const int64_t *shape, size_t rank)
{
    size_t n = 1;

    for (size_t d = 0; d < rank; d++)
        n *= (size_t)shape[d];
    return n;
}

/* The variables as init_weights_check takes them. */
static status_t describe(const Tessera__V1__ConfigureJobResponse *vars, st_tensor_t **ret,
                         status_msg_t *err)
{
    st_tensor_t *v = calloc(vars->n_variables + 1, sizeof(*v));

    if (v == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < vars->n_variables; i++) {
        const Tessera__V1__VariableShard *s = vars->variables[i];
        if (s->n_full_shape > ST_MAX_RANK) {
            free(v);
            return status_fail(err, STATUS_INVALID_ARGUMENT, "variable %s has rank %zu",
                               s->variable, s->n_full_shape);
        }
        v[i].name = s->variable;
        v[i].rank = (int)s->n_full_shape;
        for (size_t d = 0; d < s->n_full_shape; d++)
            v[i].shape[d] = (uint64_t)s->full_shape[d];
    }
    *ret = v;
    return STATUS_OK;
}

/* The archive optimizer's slots of every variable (job/init_optimizer.h), read whole into
 * plan->slot_values; plan->updates gets its update count. */
static status_t read_slots(chief_job_t *j, const init_weights_t *w, const st_tensor_t *v,
                           const Tessera__V1__ConfigureJobResponse *vars, plan_t *plan,
                           status_msg_t *err)
{
    size_t n = vars->n_variables;
    bool *moving = calloc(n + 1, sizeof(*moving));
    init_optimizer_t op = {0};
    status_t rc = STATUS_OK;

    plan->slot_values = calloc(n * OPTIMIZER_MAX_SLOTS + 1, sizeof(*plan->slot_values));
    plan->slot_data = calloc(plan->n_places * OPTIMIZER_MAX_SLOTS + 1, sizeof(*plan->slot_data));
    if (moving == NULL || plan->slot_values == NULL || plan->slot_data == NULL)
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    else
        plan->n_slot_values = n * OPTIMIZER_MAX_SLOTS;
    for (size_t i = 0; i < n && rc == STATUS_OK; i++)
        moving[i] = vars->variables[i]->moving;
    if (rc == STATUS_OK)
        rc = init_optimizer_plan(w, &j->job.optimizer, v, moving, n, j->job.keras_accumulate, &op,
                                 err);
    for (size_t e = 0; e < op.n && rc == STATUS_OK; e++) {
        const Tessera__V1__VariableShard *var = vars->variables[op.param[e]];
        size_t total = plan_elements(var->full_shape, var->n_full_shape);
        float **slot = &plan->slot_values[op.param[e] * OPTIMIZER_MAX_SLOTS + op.slot[e]];
        if ((*slot = malloc(total ? total * sizeof(float) : 1)) == NULL)
            rc = status_fail(err, STATUS_NO_MEMORY, "out of memory for the slots of %s",
                             var->variable);
        else
            rc = init_optimizer_read(w, &j->job.optimizer, &op, e, *slot, err);
    }
    if (rc == STATUS_OK && init_weights_optimizer_count(w) > 0)
        plan->updates = op.updates;
    init_optimizer_done(&op);
    free(moving);
    return rc;
}

/* Shard k (of variable i, whose rows are row_len elements) takes its rows of the variable's
 * slots. */
static void give_slots(plan_t *plan, size_t i, size_t k, size_t row_len)
{
    Tessera__V1__VariableShard *sh = &plan->shards[k];
    ProtobufCBinaryData *data = &plan->slot_data[k * OPTIMIZER_MAX_SLOTS];
    float *const *slot = &plan->slot_values[i * OPTIMIZER_MAX_SLOTS];
    size_t s = 0;

    for (; s < OPTIMIZER_MAX_SLOTS && slot[s] != NULL; s++) {
        data[s].data = (uint8_t *)(slot[s] + (uint64_t)sh->row_offset * row_len);
        data[s].len = plan_elements(sh->shape, sh->n_shape) * sizeof(float);
    }
    sh->n_slots = s;
    sh->slots = s > 0 ? data : NULL;
}

status_t placement_init_from(chief_job_t *j, const Tessera__V1__ConfigureJobResponse *vars,
                             plan_t *plan, status_msg_t *err)
{
    init_weights_t w = {0};
    st_tensor_t *v = NULL;
    size_t n = vars->n_variables, k = 0;
    status_t rc;

    /* The archive is unpacked in a child process: only the safetensors file it leaves is read
     * here, so a hostile file cannot crash the chief. */
    size_t nl = j->job.model.n_layers;
    char(*paths)[96] = calloc(nl + 1, sizeof(*paths));
    const char **names = calloc(nl + 1, sizeof(*names)), **at = calloc(nl + 1, sizeof(*at));

    plan->updates = -1;
    rc = init_weights_open(j->job.init_from, &w, err);
    if (rc == STATUS_OK && (paths == NULL || names == NULL || at == NULL))
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    if (rc == STATUS_OK) { /* a .keras file's layers are found by their class paths */
        job_keras_paths(j->job.model.layers, nl, paths);
        for (size_t l = 0; l < nl; l++) {
            names[l] = j->job.model.layers[l].name;
            at[l] = paths[l];
        }
        init_weights_map_layers(&w, names, at, nl);
    }
    if (rc == STATUS_OK)
        rc = describe(vars, &v, err);
    if (rc == STATUS_OK)
        rc = init_weights_check(&w, v, n, err);
    if (rc == STATUS_OK && j->job.init_optimizer)
        rc = read_slots(j, &w, v, vars, plan, err);
    if (rc == STATUS_OK) {
        plan->values = calloc(n + 1, sizeof(*plan->values));
        plan->inits = calloc(plan->n_places + 1, sizeof(*plan->inits));
        plan->init_values = calloc(plan->n_places + 1, sizeof(*plan->init_values));
        if (!plan->values || !plan->inits || !plan->init_values)
            rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < n && rc == STATUS_OK; i++) {
        const Tessera__V1__VariableShard *var = vars->variables[i];
        size_t total = plan_elements(var->full_shape, var->n_full_shape);
        size_t row_len =
            var->n_full_shape > 0 ? plan_elements(var->full_shape + 1, var->n_full_shape - 1) : 1;
        if ((plan->values[i] = malloc(total ? total * sizeof(float) : 1)) == NULL) {
            rc = status_fail(err, STATUS_NO_MEMORY, "out of memory for %s (%llu floats)",
                             var->variable, (unsigned long long)total);
            break;
        }
        plan->n_values++;
        rc = init_weights_read(&w, v, n, i, plan->values[i], err);
        /* the plan lists each variable's shards in order, right after the previous one's */
        for (; rc == STATUS_OK && k < plan->n_places &&
               strcmp(plan->shards[k].variable, var->variable) == 0;
             k++) {
            Tessera__V1__VariableShard *sh = &plan->shards[k];
            Tessera__V1__Initializer *in = &plan->inits[k];
            Tessera__V1__Initializer__Values *val = &plan->init_values[k];
            tessera__v1__initializer__init(in);
            tessera__v1__initializer__values__init(val);
            val->data.data = (uint8_t *)(plan->values[i] + (uint64_t)sh->row_offset * row_len);
            val->data.len = plan_elements(sh->shape, sh->n_shape) * sizeof(float);
            in->kind_case = TESSERA__V1__INITIALIZER__KIND_VALUES;
            in->values = val;
            sh->initializer = in;
            if (plan->slot_values != NULL)
                give_slots(plan, i, k, row_len);
            /* SGD without momentum keeps no slots, but its schedule goes on too */
            sh->updates = plan->updates > 0 ? (uint64_t)plan->updates : 0;
        }
    }
    if (rc == STATUS_OK && k != plan->n_places)
        rc =
            status_fail(err, STATUS_INTERNAL, "init_from: the plan's shard %zu is out of order", k);
    free(v);
    init_weights_close(&w);
    free(paths);
    free(names);
    free(at);
    return rc;
}

/* The bytes of starting values a shard's creation carries. */
static size_t shard_bytes(const Tessera__V1__VariableShard *sh)
{
    const Tessera__V1__Initializer *in = sh->initializer;

    size_t bytes = in != NULL && in->kind_case == TESSERA__V1__INITIALIZER__KIND_VALUES
                       ? in->values->data.len
                       : 0;

    for (size_t s = 0; s < sh->n_slots; s++)
        bytes += sh->slots[s].len;
    return bytes;
}

status_t placement_create(coordinator_t *c, chief_job_t *j, const plan_t *plan, status_msg_t *err)
{
    optimizer_msg_t opt;
    Tessera__V1__CreateVariablesRequest *reqs = calloc(c->n_ps, sizeof(*reqs));
    Tessera__V1__VariableShard ***lists = calloc(c->n_ps, sizeof(*lists));
    size_t *count = calloc(c->n_ps, sizeof(*count)), *sent = calloc(c->n_ps, sizeof(*sent));
    fanout_t *f = calloc(c->n_ps, sizeof(*f));
    double scale =
        j->job.optimizer.lr_scale == 0 ? (double)c->n_workers : j->job.optimizer.lr_scale;
    status_t rc = STATUS_OK;
    bool more = true;

    if (!reqs || !lists || !f || !count || !sent) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        goto out;
    }
    optimizer_to_proto(&j->job.optimizer, scale, &opt);
    for (size_t p = 0; p < c->n_ps; p++) {
        lists[p] = calloc(plan->n_places + 1, sizeof(**lists));
        if (lists[p] == NULL) {
            rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
            goto out;
        }
    }
    for (size_t k = 0; k < plan->n_places; k++) {
        size_t p = (size_t)plan->places[k].ps_task;
        lists[p][count[p]++] = &plan->shards[k];
    }
    /* Rounds: every PS gets its next shards, up to PLACEMENT_BATCH_BYTES of values each. A PS
     * without shards still gets one (empty) request: it learns the job and its optimizer. */
    for (int round = 0; more && rc == STATUS_OK; round++) {
        size_t n_calls = 0;
        more = false;
        for (size_t p = 0; p < c->n_ps; p++) {
            size_t bytes = 0, first = sent[p];
            if (round > 0 && sent[p] == count[p])
                continue;
            tessera__v1__create_variables_request__init(&reqs[p]);
            reqs[p].job = j->id;
            reqs[p].optimizer = &opt.msg;
            reqs[p].shards = &lists[p][first];
            while (sent[p] < count[p] &&
                   (sent[p] == first ||
                    bytes + shard_bytes(lists[p][sent[p]]) <= PLACEMENT_BATCH_BYTES))
                bytes += shard_bytes(lists[p][sent[p]++]);
            reqs[p].n_shards = sent[p] - first;
            more |= sent[p] < count[p];
            f[n_calls++] = (fanout_t){.ch = c->ps[p],
                                      .method = RPC_PS_CREATE_VARIABLES,
                                      .req = &reqs[p].base,
                                      .timeout_ms = CONTROL_TIMEOUT};
        }
        fanout_run(f, n_calls);
        for (size_t i = 0; i < n_calls && rc == STATUS_OK; i++)
            if (f[i].rc != STATUS_OK) {
                size_t p = (size_t)(((const Tessera__V1__CreateVariablesRequest *)f[i].req) - reqs);
                rc = status_fail(err, f[i].rc, "creating the variables on ps %zu (%s): %s%s", p,
                                 rpc_channel_target(c->ps[p]), f[i].err.message,
                                 f[i].rc == STATUS_RESOURCE_EXHAUSTED && j->job.init_from
                                     ? " (init_from sends each shard's values, and its "
                                       "optimizer's slots, in one message: "
                                       "partition the variable, or raise the PS's "
                                       "max_message_bytes)"
                                     : "");
            }
        fanout_done(f, n_calls);
    }
out:
    for (size_t p = 0; lists && p < c->n_ps; p++)
        free(lists[p]);
    free(lists);
    free(reqs);
    free(count);
    free(sent);
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
