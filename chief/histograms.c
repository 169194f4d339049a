/* Weight histograms of a parameter-server job for TensorBoard: between epochs (no closure in
 * flight) the chief pulls every shard of each variable from the PS that holds it, one Pull per
 * shard, checks what comes back against the plan, puts the rows together and writes the whole
 * variable's histogram as tessera train does. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "placement.h"
#include "tessera/v1/ps.pb-c.h"

/* Pulls shard k of the plan into whole[], at its rows. */
static status_t pull_shard(coordinator_t *c, chief_job_t *j, const plan_t *plan, size_t k,
                           float *whole, status_msg_t *err)
{
    const Tessera__V1__VariableShard *sh = &plan->shards[k];
    size_t p = (size_t)plan->places[k].ps_task, n = plan_elements(sh->shape, sh->n_shape);
    size_t row_len =
        sh->n_full_shape > 0 ? plan_elements(sh->full_shape + 1, sh->n_full_shape - 1) : 1;
    Tessera__V1__PullRequest req = TESSERA__V1__PULL_REQUEST__INIT;
    Tessera__V1__PullItem item = TESSERA__V1__PULL_ITEM__INIT, *items[1] = {&item};
    Tessera__V1__ShardKey key = TESSERA__V1__SHARD_KEY__INIT;
    Tessera__V1__PullResponse *resp = NULL;
    rpc_call_opts_t o = {.timeout_ms = CONTROL_TIMEOUT};
    rpc_payload_t payload = {0};
    rpc_error_t rerr;
    status_t rc = STATUS_OK;

    key.variable = sh->variable;
    key.shard = sh->shard;
    item.key = &key;
    req.job = j->id;
    req.n_items = 1;
    req.items = items;
    if (rpc_ps_pull(c->ps[p], &req, &o, &resp, &payload, &rerr) != STATUS_OK)
        return status_fail(err, rerr.status, "pulling %s shard %d from ps:%zu for TensorBoard: %s",
                           sh->variable, sh->shard, p, rerr.message);
    const Tessera__V1__TensorRef *v =
        resp->n_values == 1 && resp->values[0]->value ? resp->values[0]->value : NULL;
    if (v == NULL || v->dtype != TESSERA__V1__DTYPE__DTYPE_FLOAT32 ||
        v->byte_length != n * sizeof(float) || v->payload_offset > payload.len ||
        payload.len - v->payload_offset < v->byte_length)
        rc = status_fail(err, STATUS_BAD_MESSAGE,
                         "ps:%zu answered a pull of %s shard %d with something other than its "
                         "%zu float32 values",
                         p, sh->variable, sh->shard, n);
    else
        memcpy(whole + (size_t)sh->row_offset * row_len,
               (const char *)payload.data + v->payload_offset, v->byte_length);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    rpc_payload_done(&payload);
    return rc;
}

status_t chief_histograms(coordinator_t *c, chief_job_t *j, const plan_t *plan, tb_run_t *tb,
                          int64_t epoch, status_msg_t *err)
{
    status_t rc = STATUS_OK;

    /* The plan lists each variable's shards together. */
    for (size_t k = 0; k < plan->n_places && rc == STATUS_OK;) {
        const Tessera__V1__VariableShard *sh = &plan->shards[k];
        size_t n = plan_elements(sh->full_shape, sh->n_full_shape), end = k;
        float *whole = malloc((n + 1) * sizeof(float));
        if (whole == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory for %s", sh->variable);
        while (end < plan->n_places && strcmp(plan->shards[end].variable, sh->variable) == 0)
            end++;
        for (size_t s = k; s < end && rc == STATUS_OK; s++)
            rc = pull_shard(c, j, plan, s, whole, err);
        if (rc == STATUS_OK)
            rc = tb_histogram(tb, epoch, sh->variable, whole, n, err);
        free(whole);
        k = end;
    }
    return rc;
}
