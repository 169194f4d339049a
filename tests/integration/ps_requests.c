#define _GNU_SOURCE
#include "ps_requests.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "job/partitioner.h"

void ps_var_desc(var_desc_t *d, const char *name, int64_t d0, int64_t d1, int shard, int num,
                 double value, uint64_t glorot_seed)
{
    int64_t off, rows;

    memset(d, 0, sizeof(*d));
    tessera__v1__variable_shard__init(&d->msg);
    tessera__v1__initializer__init(&d->init);
    partitioner_shard_rows(d0, num, shard, &off, &rows);
    d->shape[0] = rows;
    d->full[0] = d0;
    d->shape[1] = d->full[1] = d1;
    d->msg.variable = (char *)name;
    d->msg.shard = shard;
    d->msg.num_shards = num;
    d->msg.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
    d->msg.n_shape = d->msg.n_full_shape = d1 > 0 ? 2 : 1;
    d->msg.shape = d->shape;
    d->msg.full_shape = d->full;
    d->msg.row_offset = off;
    if (glorot_seed != 0) {
        tessera__v1__initializer__glorot_uniform__init(&d->glorot);
        d->init.kind_case = TESSERA__V1__INITIALIZER__KIND_GLOROT_UNIFORM;
        d->init.glorot_uniform = &d->glorot;
        d->init.seed = glorot_seed;
    } else {
        tessera__v1__initializer__constant__init(&d->constant);
        d->constant.value = value;
        d->init.kind_case = TESSERA__V1__INITIALIZER__KIND_CONSTANT;
        d->init.constant = &d->constant;
    }
    d->msg.initializer = &d->init;
}

void ps_opt_desc(opt_desc_t *o, bool adam, double lr)
{
    tessera__v1__optimizer_config__init(&o->msg);
    tessera__v1__learning_rate_schedule__init(&o->lr);
    tessera__v1__learning_rate_schedule__constant__init(&o->constant);
    o->constant.learning_rate = lr;
    o->lr.kind_case = TESSERA__V1__LEARNING_RATE_SCHEDULE__KIND_CONSTANT;
    o->lr.constant = &o->constant;
    o->msg.learning_rate = &o->lr;
    if (adam) {
        tessera__v1__optimizer_config__adam__init(&o->adam);
        /* every field is a value on the wire: Keras's defaults */
        o->adam.beta_1 = 0.9;
        o->adam.beta_2 = 0.999;
        o->adam.epsilon = 1e-7;
        o->msg.kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_ADAM;
        o->msg.adam = &o->adam;
    } else {
        tessera__v1__optimizer_config__sgd__init(&o->sgd);
        o->msg.kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_SGD;
        o->msg.sgd = &o->sgd;
    }
}

status_t ps_create(rpc_channel_t *ch, const char *job, opt_desc_t *opt, var_desc_t *vars, size_t n,
                   int *ret_created, rpc_error_t *err)
{
    Tessera__V1__CreateVariablesRequest req = TESSERA__V1__CREATE_VARIABLES_REQUEST__INIT;
    Tessera__V1__CreateVariablesResponse *resp = NULL;
    Tessera__V1__VariableShard *ptrs[16];
    status_t rc;

    ck_assert(n <= 16);
    for (size_t i = 0; i < n; i++)
        ptrs[i] = &vars[i].msg;
    req.job = (char *)job;
    req.optimizer = opt ? &opt->msg : NULL;
    req.n_shards = n;
    req.shards = ptrs;
    rc = rpc_ps_create_variables(ch, &req, NULL, &resp, NULL, err);
    if (rc == STATUS_OK) {
        if (ret_created)
            *ret_created = resp->created;
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    return rc;
}

void ps_tensor_ref(Tessera__V1__TensorRef *t, int dtype, int64_t *shape, size_t rank,
                   uint64_t offset, uint64_t bytes)
{
    tessera__v1__tensor_ref__init(t);
    t->dtype = dtype;
    t->n_shape = rank;
    t->shape = shape;
    t->payload_offset = offset;
    t->byte_length = bytes;
}

float *ps_pull(rpc_channel_t *ch, const char *job, const char *var, int shard, const int64_t *rows,
               size_t n_rows, size_t *ret_n, uint64_t *ret_version)
{
    Tessera__V1__PullRequest req = TESSERA__V1__PULL_REQUEST__INIT;
    Tessera__V1__PullResponse *resp = NULL;
    Tessera__V1__PullItem item = TESSERA__V1__PULL_ITEM__INIT, *items[1] = {&item};
    Tessera__V1__ShardKey key = TESSERA__V1__SHARD_KEY__INIT;
    Tessera__V1__TensorRef ref;
    int64_t shape[1] = {(int64_t)n_rows};
    rpc_iov_t iov = {rows, n_rows * sizeof(int64_t), NULL, NULL};
    rpc_call_opts_t opts = {.payload = &iov, .n_payload = rows ? 1 : 0};
    rpc_payload_t payload = {0};
    rpc_error_t err;
    float *out;

    key.variable = (char *)var;
    key.shard = shard;
    item.key = &key;
    if (rows != NULL) {
        ps_tensor_ref(&ref, TESSERA__V1__DTYPE__DTYPE_INT64, shape, 1, 0, iov.len);
        item.rows = &ref;
    }
    req.job = (char *)job;
    req.n_items = 1;
    req.items = items;
    ck_assert_msg(rpc_ps_pull(ch, &req, &opts, &resp, &payload, &err) == STATUS_OK,
                  "pull %s/%d: %s", var, shard, err.message);
    ck_assert_uint_eq(resp->n_values, 1);
    ck_assert_str_eq(resp->values[0]->key->variable, var);
    ck_assert_uint_eq(resp->values[0]->value->byte_length, payload.len);
    out = malloc(payload.len ? payload.len : 1);
    memcpy(out, payload.data, payload.len);
    if (ret_n)
        *ret_n = payload.len / sizeof(float);
    if (ret_version)
        *ret_version = resp->values[0]->version;
    rpc_payload_done(&payload);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return out;
}

status_t ps_push_raw(rpc_channel_t *ch, const push_spec_t *p, rpc_error_t *err)
{
    Tessera__V1__PushRequest req = TESSERA__V1__PUSH_REQUEST__INIT;
    Tessera__V1__PushResponse *resp = NULL;
    Tessera__V1__PushItem item = TESSERA__V1__PUSH_ITEM__INIT, *items[1] = {&item};
    Tessera__V1__ShardKey key = TESSERA__V1__SHARD_KEY__INIT;
    Tessera__V1__TensorRef ref;
    int64_t shape[2] = {p->shape[0], p->shape[1]};
    rpc_iov_t iov = {p->payload, p->payload_len, NULL, NULL};
    rpc_call_opts_t opts = {.payload = &iov, .n_payload = 1};
    status_t rc;

    key.variable = (char *)p->var;
    key.shard = p->shard;
    item.key = &key;
    ps_tensor_ref(&ref, p->dtype, shape, p->rank, p->offset, p->byte_length);
    ref.chunk_offset = p->chunk_offset;
    item.gradient_case = TESSERA__V1__PUSH_ITEM__GRADIENT_DENSE;
    item.dense = &ref;
    req.job = (char *)p->job;
    req.n_items = 1;
    req.items = items;
    req.batches = p->batches;
    rc = rpc_ps_push(ch, &req, &opts, &resp, NULL, err);
    if (rc == STATUS_OK)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

push_spec_t ps_dense(const char *job, const char *var, int shard, int64_t d0, int64_t d1,
                     const float *g)
{
    push_spec_t p = {.job = job, .var = var, .shard = shard};
    size_t bytes = (size_t)(d0 * (d1 ? d1 : 1)) * sizeof(float);

    p.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
    p.shape[0] = d0;
    p.shape[1] = d1;
    p.rank = d1 ? 2 : 1;
    p.byte_length = bytes;
    p.payload = g;
    p.payload_len = bytes;
    return p;
}

status_t ps_push_rows(rpc_channel_t *ch, const char *job, const char *var, const int64_t *rows,
                      size_t n, const float *values, int64_t d1, bool pull_after,
                      float **ret_values, rpc_error_t *err)
{
    Tessera__V1__PushRequest req = TESSERA__V1__PUSH_REQUEST__INIT;
    Tessera__V1__PushResponse *resp = NULL;
    Tessera__V1__PushItem item = TESSERA__V1__PUSH_ITEM__INIT, *items[1] = {&item};
    Tessera__V1__ShardKey key = TESSERA__V1__SHARD_KEY__INIT;
    Tessera__V1__RowSlices slices = TESSERA__V1__ROW_SLICES__INIT;
    Tessera__V1__TensorRef ri, rv;
    int64_t ishape[1] = {(int64_t)n}, vshape[2] = {(int64_t)n, d1};
    size_t ib = n * sizeof(int64_t), vb = n * (size_t)d1 * sizeof(float);
    rpc_iov_t iov[2] = {{rows, ib, NULL, NULL}, {values, vb, NULL, NULL}};
    rpc_call_opts_t opts = {.payload = iov, .n_payload = 2};
    rpc_payload_t payload = {0};
    status_t rc;

    key.variable = (char *)var;
    item.key = &key;
    ps_tensor_ref(&ri, TESSERA__V1__DTYPE__DTYPE_INT64, ishape, 1, 0, ib);
    ps_tensor_ref(&rv, TESSERA__V1__DTYPE__DTYPE_FLOAT32, vshape, 2, ib, vb);
    slices.indices = &ri;
    slices.values = &rv;
    item.gradient_case = TESSERA__V1__PUSH_ITEM__GRADIENT_ROWS;
    item.rows = &slices;
    req.job = (char *)job;
    req.n_items = 1;
    req.items = items;
    req.pull_after = pull_after;
    rc = rpc_ps_push(ch, &req, &opts, &resp, &payload, err);
    if (rc != STATUS_OK)
        return rc;
    if (pull_after) {
        ck_assert_uint_eq(resp->n_values, 1);
        ck_assert_uint_eq(payload.len, vb);
        ck_assert_int_eq(resp->values[0]->value->shape[0], (int64_t)n);
        *ret_values = malloc(vb);
        memcpy(*ret_values, payload.data, vb);
    }
    rpc_payload_done(&payload);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return STATUS_OK;
}

void assert_floats_eq(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "element %zu: %.9g, want %.9g", i, (double)got[i],
                      (double)want[i]);
}
