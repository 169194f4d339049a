/* tessera-ps as a real process: variables created, pulled and pushed over gRPC against the
 * optimizer kernels run here, a large variable split by TensorFlow's min_size partitioner over
 * two parameter servers with round-robin placement, and hostile requests that each get the right
 * status while the server keeps serving the same values. */
#define _GNU_SOURCE
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "check_run.h"
#include "harness.h"
#include "rpc/health.h"
#include "job/initializer.h"
#include "optim/optimizer.h"
#include "job/partitioner.h"
#include "rpc/client.h"

/* ---- building requests -------------------------------------------------------------------- */

/* One shard description with the storage its pointers need. */
typedef struct var_desc {
    Tessera__V1__VariableShard msg;
    Tessera__V1__Initializer init;
    Tessera__V1__Initializer__Constant constant;
    Tessera__V1__Initializer__GlorotUniform glorot;
    int64_t shape[2], full[2];
} var_desc_t;

/* Shard `shard` of `num` of a [d0, d1] (d1 = 0: [d0]) float32 variable in the div layout,
 * initialized to `value` (glorot_seed = 0) or Glorot uniform with that seed. */
static void var_desc(var_desc_t *d, const char *name, int64_t d0, int64_t d1, int shard, int num,
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

/* An optimizer message: SGD with lr, or Adam with lr when adam is set. */
typedef struct opt_desc {
    Tessera__V1__OptimizerConfig msg;
    Tessera__V1__LearningRateSchedule lr;
    Tessera__V1__LearningRateSchedule__Constant constant;
    Tessera__V1__OptimizerConfig__Sgd sgd;
    Tessera__V1__OptimizerConfig__Adam adam;
} opt_desc_t;

static void opt_desc(opt_desc_t *o, bool adam, double lr)
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
        o->msg.kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_ADAM;
        o->msg.adam = &o->adam;
    } else {
        tessera__v1__optimizer_config__sgd__init(&o->sgd);
        o->msg.kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_SGD;
        o->msg.sgd = &o->sgd;
    }
}

static status_t create(rpc_channel_t *ch, const char *job, opt_desc_t *opt, var_desc_t *vars,
                       size_t n, int *ret_created, rpc_error_t *err)
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

static void tensor_ref(Tessera__V1__TensorRef *t, int dtype, int64_t *shape, size_t rank,
                       uint64_t offset, uint64_t bytes)
{
    tessera__v1__tensor_ref__init(t);
    t->dtype = dtype;
    t->n_shape = rank;
    t->shape = shape;
    t->payload_offset = offset;
    t->byte_length = bytes;
}

/* Pulls a whole shard (rows == NULL) or rows of it; returns the malloc'd values. */
static float *pull(rpc_channel_t *ch, const char *job, const char *var, int shard,
                   const int64_t *rows, size_t n_rows, size_t *ret_n, uint64_t *ret_version)
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
        tensor_ref(&ref, TESSERA__V1__DTYPE__DTYPE_INT64, shape, 1, 0, iov.len);
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

/* A push of one dense gradient with full control over the TensorRef, for hostile cases. */
typedef struct push_spec {
    const char *job, *var;
    int shard;
    int dtype;
    int64_t shape[2];
    size_t rank;
    uint64_t offset, byte_length, chunk_offset;
    const void *payload;
    size_t payload_len;
    bool pull_after;
} push_spec_t;

static status_t push_raw(rpc_channel_t *ch, const push_spec_t *p, rpc_error_t *err)
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
    tensor_ref(&ref, p->dtype, shape, p->rank, p->offset, p->byte_length);
    ref.chunk_offset = p->chunk_offset;
    item.gradient_case = TESSERA__V1__PUSH_ITEM__GRADIENT_DENSE;
    item.dense = &ref;
    req.job = (char *)p->job;
    req.n_items = 1;
    req.items = items;
    rc = rpc_ps_push(ch, &req, &opts, &resp, NULL, err);
    if (rc == STATUS_OK)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

/* A well-formed dense push of a [d0, d1] gradient. */
static push_spec_t dense(const char *job, const char *var, int shard, int64_t d0, int64_t d1,
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

/* Pushes rows of a [*, d1] variable: indices then values in the payload. */
static status_t push_rows(rpc_channel_t *ch, const char *job, const char *var, const int64_t *rows,
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
    tensor_ref(&ri, TESSERA__V1__DTYPE__DTYPE_INT64, ishape, 1, 0, ib);
    tensor_ref(&rv, TESSERA__V1__DTYPE__DTYPE_FLOAT32, vshape, 2, ib, vb);
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

static void assert_floats_eq(const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "element %zu: %.9g, want %.9g", i, (double)got[i],
                      (double)want[i]);
}

static rpc_channel_t *connect_to(const launch_proc_t *p)
{
    rpc_channel_t *ch;
    status_msg_t msg;
    ck_assert_int_eq(rpc_channel_new(p->listen, NULL, &ch, &msg), STATUS_OK);
    return ch;
}

/* ---- correctness -------------------------------------------------------------------------- */

START_TEST(ps_applies_pushes_with_the_optimizer_and_serves_the_values)
{
    launch_proc_t ps;
    rpc_channel_t *ch;
    rpc_error_t err;
    opt_desc_t sgd, adam;
    var_desc_t vars[2];
    float g[12], *v, *rows_back = NULL;
    int64_t rows[2] = {7, 2};
    float rg[8] = {1, 2, 3, 4, -1, -2, -3, -4};
    uint64_t version;
    size_t n;
    int created = -1;

    harness_start(&ps, "tessera-ps", "ps-roundtrip", NULL);
    ch = connect_to(&ps);
    opt_desc(&sgd, false, 0.5);
    var_desc(&vars[0], "w", 4, 3, 0, 1, 1.0, 0);
    var_desc(&vars[1], "emb", 10, 4, 0, 1, 0.0, 0);
    vars[1].msg.sparse = true;
    ck_assert_msg(create(ch, "j", &sgd, vars, 2, &created, &err) == STATUS_OK, "%s", err.message);
    ck_assert_int_eq(created, 2);
    ck_assert_int_eq(create(ch, "j", &sgd, vars, 2, &created, &err), STATUS_OK);
    ck_assert_int_eq(created, 0); /* idempotent */

    v = pull(ch, "j", "w", 0, NULL, 0, &n, &version);
    ck_assert_uint_eq(n, 12);
    ck_assert_uint_eq(version, 0);
    for (size_t i = 0; i < n; i++)
        ck_assert(v[i] == 1.0f);
    free(v);

    for (int i = 0; i < 12; i++)
        g[i] = (float)i;
    {
        push_spec_t p = dense("j", "w", 0, 4, 3, g);
        ck_assert_msg(push_raw(ch, &p, &err) == STATUS_OK, "%s", err.message);
    }
    v = pull(ch, "j", "w", 0, NULL, 0, &n, &version);
    ck_assert_uint_eq(version, 1);
    for (int i = 0; i < 12; i++)
        ck_assert(v[i] == 1.0f - 0.5f * (float)i);
    free(v);

    /* PushPull answers with the values after its own update. */
    {
        Tessera__V1__PushRequest req = TESSERA__V1__PUSH_REQUEST__INIT;
        Tessera__V1__PushResponse *resp = NULL;
        Tessera__V1__PushItem item = TESSERA__V1__PUSH_ITEM__INIT, *items[1] = {&item};
        Tessera__V1__ShardKey key = TESSERA__V1__SHARD_KEY__INIT;
        Tessera__V1__TensorRef ref;
        int64_t shape[2] = {4, 3};
        rpc_iov_t iov = {g, sizeof(g), NULL, NULL};
        rpc_call_opts_t opts = {.payload = &iov, .n_payload = 1};
        rpc_payload_t payload = {0};
        const float *got;

        key.variable = "w";
        item.key = &key;
        tensor_ref(&ref, TESSERA__V1__DTYPE__DTYPE_FLOAT32, shape, 2, 0, sizeof(g));
        item.gradient_case = TESSERA__V1__PUSH_ITEM__GRADIENT_DENSE;
        item.dense = &ref;
        req.job = "j";
        req.n_items = 1;
        req.items = items;
        ck_assert_int_eq(rpc_ps_push_pull(ch, &req, &opts, &resp, &payload, &err), STATUS_OK);
        ck_assert_uint_eq(resp->n_versions, 1);
        ck_assert_uint_eq(resp->versions[0], 2);
        ck_assert_uint_eq(resp->n_values, 1);
        ck_assert_uint_eq(resp->values[0]->version, 2);
        ck_assert_uint_eq(payload.len, sizeof(g));
        got = payload.data;
        for (int i = 0; i < 12; i++)
            ck_assert(got[i] == 1.0f - 0.5f * (float)i - 0.5f * (float)i);
        rpc_payload_done(&payload);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }

    /* Rows: only rows 7 and 2 move; the values come back through pull_after. */
    ck_assert_msg(push_rows(ch, "j", "emb", rows, 2, rg, 4, true, &rows_back, &err) == STATUS_OK,
                  "%s", err.message);
    for (int i = 0; i < 8; i++)
        ck_assert(rows_back[i] == -0.5f * rg[i]);
    free(rows_back);
    v = pull(ch, "j", "emb", 0, rows, 2, &n, NULL);
    ck_assert_uint_eq(n, 8);
    for (int i = 0; i < 8; i++)
        ck_assert(v[i] == -0.5f * rg[i]);
    free(v);
    v = pull(ch, "j", "emb", 0, NULL, 0, &n, NULL);
    for (int r = 0; r < 10; r++)
        for (int c = 0; c < 4; c++)
            ck_assert(v[r * 4 + c] == (r == 7 ? -0.5f * rg[c] : r == 2 ? -0.5f * rg[4 + c] : 0.0f));
    free(v);

    /* Adam on another job, step by step against the kernel run here. */
    opt_desc(&adam, true, 0.01);
    var_desc(&vars[0], "k", 3, 2, 0, 1, 0.0, 17);
    ck_assert_int_eq(create(ch, "a", &adam, vars, 1, &created, &err), STATUS_OK);
    {
        optimizer_config_t c;
        float slots[12] = {0}, gk[6], *want = pull(ch, "a", "k", 0, NULL, 0, NULL, NULL);
        optimizer_config_default(OPTIMIZER_ADAM, &c);
        c.schedule.lr = 0.01;
        for (int step = 0; step < 3; step++) {
            push_spec_t p;
            for (int i = 0; i < 6; i++)
                gk[i] = (float)(i - 3) * 0.25f + (float)step;
            p = dense("a", "k", 0, 3, 2, gk);
            ck_assert_int_eq(push_raw(ch, &p, &err), STATUS_OK);
            optimizer_apply_dense(&c, step, want, gk, slots, 6);
        }
        v = pull(ch, "a", "k", 0, NULL, 0, NULL, &version);
        ck_assert_uint_eq(version, 3);
        assert_floats_eq(v, want, 6);
        free(v);
        free(want);
    }

    /* Stats and DropJob. */
    {
        Tessera__V1__PsStatsRequest sreq = TESSERA__V1__PS_STATS_REQUEST__INIT;
        Tessera__V1__PsStatsResponse *sresp = NULL;
        Tessera__V1__DropJobRequest dreq = TESSERA__V1__DROP_JOB_REQUEST__INIT;
        Tessera__V1__DropJobResponse *dresp = NULL;

        sreq.job = "j";
        ck_assert_int_eq(rpc_ps_stats(ch, &sreq, NULL, &sresp, NULL, &err), STATUS_OK);
        ck_assert_uint_eq(sresp->n_shards, 2);
        ck_assert_str_eq(sresp->shards[1]->key->variable, "emb");
        ck_assert_uint_eq(sresp->shards[1]->pushes, 1);
        ck_assert_uint_eq(sresp->shards[1]->bytes_pushed, 2 * 8 + 8 * 4);
        ck_assert_uint_eq(sresp->shards[1]->bytes_pulled, 8 * 4 + 8 * 4 + 40 * 4);
        ck_assert_uint_eq(sresp->shards[0]->value_bytes, 48);
        protobuf_c_message_free_unpacked(&sresp->base, NULL);

        dreq.job = "a";
        ck_assert_int_eq(rpc_ps_drop_job(ch, &dreq, NULL, &dresp, NULL, &err), STATUS_OK);
        ck_assert_int_eq(dresp->shards, 1);
        protobuf_c_message_free_unpacked(&dresp->base, NULL);
        ck_assert_int_eq(rpc_ps_drop_job(ch, &dreq, NULL, &dresp, NULL, &err), STATUS_NOT_FOUND);
        sreq.job = "";
        ck_assert_int_eq(rpc_ps_stats(ch, &sreq, NULL, &sresp, NULL, &err), STATUS_OK);
        ck_assert_uint_eq(sresp->n_shards, 2); /* only job j is left */
        protobuf_c_message_free_unpacked(&sresp->base, NULL);
    }

    /* The metrics moved. */
    {
        char *headers, *body;
        ck_assert_int_eq(harness_http_get(ps.metrics, "/metrics", &headers, &body), 200);
        ck_assert_ptr_nonnull(strstr(body, "tessera_ps_push_requests_total 6"));
        ck_assert_ptr_nonnull(strstr(body, "tessera_ps_param_bytes 208"));
        ck_assert_ptr_nonnull(strstr(body, "tessera_ps_variables 2"));
        ck_assert_ptr_nonnull(strstr(body, "tessera_ps_apply_duration_seconds_count 6"));
        ck_assert_ptr_nonnull(strstr(body, "tessera_ps_pulled_bytes_total"));
        free(headers);
        free(body);
    }
    rpc_channel_free(ch);
    harness_stop(&ps);
}
END_TEST

/* ---- partitioning over two parameter servers ---------------------------------------------- */

typedef struct planned {
    const char *name;
    int64_t d0, d1;
} planned_t;

typedef struct placed {
    var_desc_t desc;
    int ps;
} placed_t;

START_TEST(ps_large_variable_splits_over_two_ps_round_robin)
{
    /* 512 KiB (> 256 KiB) in 2 shards; a small bias stays whole; 300 KiB in 2 shards. */
    static const planned_t vars[] = {{"big", 256, 512}, {"bias", 512, 0}, {"emb", 300, 256}};
    job_partitioner_t part = {
        .kind = JOB_PARTITIONER_MIN_SIZE, .min_shard_bytes = 256 << 10, .max_shards = 2};
    partitioner_placement_t pl;
    placed_t shards[8];
    size_t n_shards = 0;
    launch_proc_t ps[2];
    rpc_channel_t *ch[2];
    opt_desc_t opt;
    rpc_error_t err;
    status_msg_t msg;

    harness_start(&ps[0], "tessera-ps", "ps-split-0", NULL);
    harness_start(&ps[1], "tessera-ps", "ps-split-1", "--task-index=1", NULL);
    ch[0] = connect_to(&ps[0]);
    ch[1] = connect_to(&ps[1]);
    opt_desc(&opt, false, 0.1);

    /* The chief's side: partition, lay out, place. */
    partitioner_placement_init(&pl, 2);
    for (size_t v = 0; v < sizeof(vars) / sizeof(vars[0]); v++) {
        int64_t shape[2] = {vars[v].d0, vars[v].d1};
        int n = 0;
        ck_assert_int_eq(partitioner_num_shards(&part, shape, vars[v].d1 ? 2 : 1, 4, &n, &msg),
                         STATUS_OK);
        ck_assert_int_eq(n, vars[v].d1 ? 2 : 1);
        for (int k = 0; k < n; k++, n_shards++) {
            var_desc(&shards[n_shards].desc, vars[v].name, vars[v].d0, vars[v].d1, k, n, 0.0,
                     1000 + v);
            shards[n_shards].ps = partitioner_placement_next(&pl);
        }
    }
    ck_assert_uint_eq(n_shards, 5);
    /* big/0 -> 0, big/1 -> 1, bias/0 -> 0, emb/0 -> 1, emb/1 -> 0 */
    ck_assert_int_eq(shards[0].ps, 0);
    ck_assert_int_eq(shards[1].ps, 1);
    ck_assert_int_eq(shards[2].ps, 0);
    ck_assert_int_eq(shards[3].ps, 1);
    ck_assert_int_eq(shards[4].ps, 0);
    for (int p = 0; p < 2; p++) {
        var_desc_t mine[8];
        size_t m = 0;
        int created = -1;
        for (size_t i = 0; i < n_shards; i++)
            if (shards[i].ps == p) {
                mine[m] = shards[i].desc;
                mine[m].msg.shape = mine[m].shape; /* re-point into the copy */
                mine[m].msg.full_shape = mine[m].full;
                mine[m].msg.initializer = &mine[m].init;
                mine[m].init.glorot_uniform = &mine[m].glorot;
                m++;
            }
        ck_assert_msg(create(ch[p], "split", &opt, mine, m, &created, &err) == STATUS_OK, "%s",
                      err.message);
        ck_assert_int_eq(created, (int)m);
    }

    /* Each PS reports exactly its shards. */
    for (int p = 0; p < 2; p++) {
        Tessera__V1__PsStatsRequest sreq = TESSERA__V1__PS_STATS_REQUEST__INIT;
        Tessera__V1__PsStatsResponse *sresp = NULL;
        size_t k = 0;
        sreq.job = "split";
        ck_assert_int_eq(rpc_ps_stats(ch[p], &sreq, NULL, &sresp, NULL, &err), STATUS_OK);
        for (size_t i = 0; i < n_shards; i++) {
            const var_desc_t *d = &shards[i].desc;
            const Tessera__V1__ShardStats *st;
            if (shards[i].ps != p)
                continue;
            ck_assert(k < sresp->n_shards);
            st = sresp->shards[k++];
            ck_assert_str_eq(st->key->variable, d->msg.variable);
            ck_assert_int_eq(st->key->shard, d->msg.shard);
            ck_assert_int_eq(st->shape[0], d->shape[0]);
            ck_assert_uint_eq(st->value_bytes, (uint64_t)d->shape[0] *
                                                   (uint64_t)(d->shape[1] ? d->shape[1] : 1) * 4);
        }
        ck_assert_uint_eq(sresp->n_shards, k);
        protobuf_c_message_free_unpacked(&sresp->base, NULL);
    }

    /* The two halves of 'big', from two processes, are the halves of one Glorot variable. */
    {
        static float whole[256 * 512];
        job_init_t init = {.kind = JOB_INIT_GLOROT_UNIFORM, .has_seed = true, .seed = 1000};
        float *a, *b;
        size_t na, nb;
        initializer_fill(&init, JOB_INIT_ZEROS, whole, 256 * 512, 256, 512, 0);
        a = pull(ch[0], "split", "big", 0, NULL, 0, &na, NULL);
        b = pull(ch[1], "split", "big", 1, NULL, 0, &nb, NULL);
        ck_assert_uint_eq(na + nb, 256 * 512);
        assert_floats_eq(a, whole, na);
        assert_floats_eq(b, whole + na, nb);
        free(a);
        free(b);
    }
    /* A shard lives only where it was placed. */
    {
        Tessera__V1__PullRequest req = TESSERA__V1__PULL_REQUEST__INIT;
        Tessera__V1__PullResponse *resp = NULL;
        Tessera__V1__PullItem item = TESSERA__V1__PULL_ITEM__INIT, *items[1] = {&item};
        Tessera__V1__ShardKey key = TESSERA__V1__SHARD_KEY__INIT;
        key.variable = "big";
        key.shard = 1;
        item.key = &key;
        req.job = "split";
        req.n_items = 1;
        req.items = items;
        ck_assert_int_eq(rpc_ps_pull(ch[0], &req, NULL, &resp, NULL, &err), STATUS_NOT_FOUND);
        ck_assert_str_eq(err.culprit, "big");
        ck_assert_ptr_nonnull(strstr(err.task, "ps 0"));
    }
    rpc_channel_free(ch[0]);
    rpc_channel_free(ch[1]);
    harness_stop(&ps[1]);
    harness_stop(&ps[0]);
}
END_TEST

/* ---- hostile requests --------------------------------------------------------------------- */

typedef struct fixture {
    launch_proc_t ps;
    rpc_channel_t *ch;
    float *w, *emb; /* the values every rejected request must leave */
} fixture_t;

static void fixture_up(fixture_t *f)
{
    opt_desc_t opt;
    var_desc_t vars[2];
    rpc_error_t err;

    harness_start(&f->ps, "tessera-ps", "ps-hostile", NULL);
    f->ch = connect_to(&f->ps);
    opt_desc(&opt, true, 0.01);
    var_desc(&vars[0], "w", 4, 3, 0, 1, 0.0, 3);
    var_desc(&vars[1], "emb", 10, 4, 0, 1, 0.0, 4);
    ck_assert_int_eq(create(f->ch, "h", &opt, vars, 2, NULL, &err), STATUS_OK);
    f->w = pull(f->ch, "h", "w", 0, NULL, 0, NULL, NULL);
    f->emb = pull(f->ch, "h", "emb", 0, NULL, 0, NULL, NULL);
}

/* The server still answers, with the values it had. */
static void assert_intact(fixture_t *f, const char *after)
{
    uint64_t vw, ve;
    float *w = pull(f->ch, "h", "w", 0, NULL, 0, NULL, &vw);
    float *emb = pull(f->ch, "h", "emb", 0, NULL, 0, NULL, &ve);
    ck_assert_msg(vw == 0 && ve == 0, "after %s: versions %llu and %llu", after,
                  (unsigned long long)vw, (unsigned long long)ve);
    ck_assert_msg(memcmp(w, f->w, 12 * sizeof(float)) == 0, "after %s: w changed", after);
    ck_assert_msg(memcmp(emb, f->emb, 40 * sizeof(float)) == 0, "after %s: emb changed", after);
    free(w);
    free(emb);
}

static void expect(fixture_t *f, status_t got, status_t want, const rpc_error_t *err,
                   const char *culprit, const char *needle, const char *what)
{
    ck_assert_msg(got == want, "%s: got %s (%s), want %s", what, status_name(got), err->message,
                  status_name(want));
    if (culprit != NULL)
        ck_assert_msg(strcmp(err->culprit, culprit) == 0, "%s: culprit '%s', want '%s' (%s)", what,
                      err->culprit, culprit, err->message);
    if (needle != NULL)
        ck_assert_msg(strstr(err->message, needle) != NULL, "%s: '%s' not in: %s", what, needle,
                      err->message);
    assert_intact(f, what);
}

START_TEST(ps_rejects_hostile_requests_and_keeps_serving_the_same_values)
{
    fixture_t f;
    rpc_error_t err;
    float g[16] = {0}, nan_g[12] = {0};
    double g64[12] = {0};
    int64_t bad_rows[2] = {1, 10}, neg_rows[2] = {-1, 0};
    float rg[8] = {0};
    push_spec_t p;

    fixture_up(&f);

    p = dense("h", "w", 0, 3, 4, g); /* the right byte count, the wrong shape */
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "[3, 4]",
           "wrong shape");

    p = dense("h", "nope", 0, 4, 3, g);
    expect(&f, push_raw(f.ch, &p, &err), STATUS_NOT_FOUND, &err, "nope", "'nope'",
           "unknown variable");
    p = dense("h", "w", 5, 4, 3, g);
    expect(&f, push_raw(f.ch, &p, &err), STATUS_NOT_FOUND, &err, "w", "shard 5", "unknown shard");
    p = dense("nojob", "w", 0, 4, 3, g);
    expect(&f, push_raw(f.ch, &p, &err), STATUS_NOT_FOUND, &err, "nojob", NULL, "unknown job");
    p = dense("", "w", 0, 4, 3, g);
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "job", NULL,
           "empty job name");

    expect(&f, push_rows(f.ch, "h", "emb", bad_rows, 2, rg, 4, false, NULL, &err),
           STATUS_INVALID_ARGUMENT, &err, "emb", "row index 10", "row out of range");
    expect(&f, push_rows(f.ch, "h", "emb", neg_rows, 2, rg, 4, false, NULL, &err),
           STATUS_INVALID_ARGUMENT, &err, "emb", "row index -1", "negative row");

    p = dense("h", "w", 0, 4, 3, NULL);
    p.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT64;
    p.byte_length = p.payload_len = sizeof(g64);
    p.payload = g64;
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "DTYPE_FLOAT64",
           "float64 gradient");

    nan_g[5] = NAN;
    p = dense("h", "w", 0, 4, 3, nan_g);
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "nan", "NaN gradient");

    p = dense("h", "w", 0, 4, 3, g);
    p.offset = UINT64_MAX - 8; /* offset + length wraps around */
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "payload",
           "huge offset");

    p = dense("h", "w", 0, 4, 3, g);
    p.payload_len = 40; /* 48 declared */
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "payload",
           "short payload");

    p = dense("h", "w", 0, 4, 3, g);
    p.payload_len = 64; /* 16 bytes nobody refers to */
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "payload", NULL,
           "long payload");

    p = dense("h", "w", 0, 4, 3, g);
    p.byte_length = 44; /* disagrees with the shape */
    p.payload_len = 44;
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "44",
           "byte_length against shape");

    p = dense("h", "w", 0, 4, 3, g);
    p.shape[0] = -4;
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", NULL,
           "negative dimension");

    p = dense("h", "w", 0, 4, 3, g);
    p.chunk_offset = 16;
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "chunk", "chunk");

    p = dense("h", "w", 0, 4, 3, g);
    p.offset = 2; /* misaligned and then too short */
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", NULL,
           "misaligned and short");

    /* Empty bodies: an empty PushRequest names no job; an empty CreateVariables neither. */
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/Push", "", 0, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, "job", NULL, "empty Push body");
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/PushPull", "", 0, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, "job", NULL, "empty PushPull body");
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/Pull", "", 0, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, "job", NULL, "empty Pull body");
    expect(&f,
           rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/CreateVariables", "", 0, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, "job", NULL, "empty CreateVariables body");
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/DropJob", "", 0, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, "job", NULL, "empty DropJob body");

    /* Garbage that does not parse, and random bytes that may. */
    {
        static const char garbage[] = "\x22\xff\xff\xff\xff\x0f\x01\x02";
        expect(&f,
               rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/Push", garbage, sizeof(garbage) - 1,
                             5000, &err),
               STATUS_INVALID_ARGUMENT, &err, NULL, "does not parse", "garbage");
        for (int round = 0; round < 30; round++) {
            uint8_t junk[512];
            uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(round + 1);
            status_t rc;
            for (size_t i = 0; i < sizeof(junk); i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                junk[i] = (uint8_t)x;
            }
            rc = rpc_unary_raw(f.ch,
                               round % 3 == 0   ? "/tessera.v1.ParameterServer/Push"
                               : round % 3 == 1 ? "/tessera.v1.ParameterServer/Pull"
                                                : "/tessera.v1.ParameterServer/CreateVariables",
                               junk, (size_t)(round * 17) % sizeof(junk), 5000, &err);
            ck_assert_msg(rc != STATUS_UNAVAILABLE && rc != STATUS_TIMEOUT && rc != STATUS_RPC,
                          "round %d: %s", round, err.message);
        }
        assert_intact(&f, "random bytes");
    }

    /* Creation with a float64 dtype, or a conflicting shape, changes nothing. */
    {
        opt_desc_t opt;
        var_desc_t bad;
        opt_desc(&opt, true, 0.01);
        var_desc(&bad, "d", 4, 0, 0, 1, 0.0, 0);
        bad.msg.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT64;
        expect(&f, create(f.ch, "h", &opt, &bad, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err, "d",
               "DTYPE_FLOAT64", "float64 variable");
        var_desc(&bad, "w", 5, 3, 0, 1, 0.0, 0);
        expect(&f, create(f.ch, "h", &opt, &bad, 1, NULL, &err), STATUS_ALREADY_EXISTS, &err, "w",
               NULL, "another shape");
    }
    /* Checkpoints come later. */
    {
        Tessera__V1__SaveRequest sreq = TESSERA__V1__SAVE_REQUEST__INIT;
        Tessera__V1__SaveResponse *sresp = NULL;
        sreq.job = "h";
        expect(&f, rpc_ps_save(f.ch, &sreq, NULL, &sresp, NULL, &err), STATUS_UNIMPLEMENTED, &err,
               NULL, "not implemented", "Save");
    }
    {
        health_state_t h = health_check(f.ps.listen, "tessera.v1.ParameterServer", 2000, &err);
        ck_assert_int_eq(h, HEALTH_SERVING);
    }
    /* A tensor at an odd payload offset is legal: the server copies it to aligned memory and
     * applies it like any other. */
    {
        uint8_t odd[1 + 12 * sizeof(float)];
        float ones[12], slots[24] = {0}, *w;
        optimizer_config_t c;
        uint64_t version;
        for (int i = 0; i < 12; i++)
            ones[i] = 1.0f;
        odd[0] = 0xAA;
        memcpy(odd + 1, ones, sizeof(ones));
        p = dense("h", "w", 0, 4, 3, NULL);
        p.payload = odd;
        p.payload_len = sizeof(odd);
        p.offset = 1;
        ck_assert_msg(push_raw(f.ch, &p, &err) == STATUS_OK, "%s", err.message);
        optimizer_config_default(OPTIMIZER_ADAM, &c);
        c.schedule.lr = 0.01;
        optimizer_apply_dense(&c, 0, f.w, ones, slots, 12);
        w = pull(f.ch, "h", "w", 0, NULL, 0, NULL, &version);
        ck_assert_uint_eq(version, 1);
        assert_floats_eq(w, f.w, 12);
        free(w);
    }
    free(f.w);
    free(f.emb);
    rpc_channel_free(f.ch);
    harness_stop(&f.ps);
}
END_TEST

/* ---- memory ------------------------------------------------------------------------------- */

static uint64_t resident_bytes(pid_t pid)
{
    char path[64], line[256];
    uint64_t kib = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %" SCNu64 " kB", &kib) == 1)
            break;
    fclose(f);
    return kib * 1024;
}

/* ASan's shadow memory and quarantine, or valgrind, make resident memory meaningless. */
static bool instrumented(pid_t pid)
{
    char path[64], line[512];
    bool found = false;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, "libasan") != NULL || strstr(line, "libtsan") != NULL ||
                strstr(line, "vgpreload") != NULL;
    fclose(f);
    return found;
}

START_TEST(ps_resident_memory_stays_near_the_variables_and_slots)
{
    enum { ROWS = 2048, COLS = 4096, VARS = 3 };
    static const char *const names[VARS] = {"m0", "m1", "m2"};
    size_t n = (size_t)ROWS * COLS;
    float *g = malloc(n * sizeof(float));
    uint64_t held = (uint64_t)VARS * n * sizeof(float) * 3; /* Adam: values + 2 slots */
    uint64_t rss, limit = held + held / 10 + (64u << 20);
    launch_proc_t ps;
    rpc_channel_t *ch;
    opt_desc_t opt;
    var_desc_t vars[VARS];
    rpc_error_t err;

    for (size_t i = 0; i < n; i++)
        g[i] = (float)(i % 7) * 0.01f;
    harness_start(&ps, "tessera-ps", "ps-memory", NULL);
    ch = connect_to(&ps);
    opt_desc(&opt, true, 0.001);
    for (int v = 0; v < VARS; v++)
        var_desc(&vars[v], names[v], ROWS, COLS, 0, 1, 0.0, 9);
    ck_assert_int_eq(create(ch, "mem", &opt, vars, VARS, NULL, &err), STATUS_OK);
    for (int round = 0; round < 2; round++)
        for (int v = 0; v < VARS; v++) {
            push_spec_t p = dense("mem", names[v], 0, ROWS, COLS, g);
            ck_assert_msg(push_raw(ch, &p, &err) == STATUS_OK, "%s", err.message);
            free(pull(ch, "mem", names[v], 0, NULL, 0, NULL, NULL));
        }
    /* The last reply's buffer is freed once gRPC has sent it, a moment after the client has it:
     * the bound holds for the server at rest. */
    for (int tries = 0; (rss = resident_bytes(ps.pid)) > limit && tries < 40; tries++)
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    if (instrumented(ps.pid))
        rss = 0;
    free(g);
    rpc_channel_free(ch);
    harness_stop(&ps);
    if (rss == 0)
        fprintf(stderr, "ps: resident memory not checked: the server is instrumented\n");
    else
        fprintf(stderr, "ps: resident %.1f MiB for %.1f MiB of variables and slots\n",
                (double)rss / (1 << 20), (double)held / (1 << 20));
    ck_assert_msg(rss <= limit,
                  "resident %.1f MiB, over %.1f MiB for %.1f MiB of variables and slots",
                  (double)rss / (1 << 20), (double)limit / (1 << 20), (double)held / (1 << 20));
}
END_TEST

/* ---- the hostile-input findings ------------------------------------------------------------ */

/* Packs msg, then overwrites the first byte `mark` with NUL: protobuf-c cannot send a NUL inside
 * a string, an attacker's client can. */
static uint8_t *packed_with_nul(const ProtobufCMessage *msg, char mark, size_t *ret_len)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len), *at;

    protobuf_c_message_pack(msg, buf);
    at = memchr(buf, mark, len);
    ck_assert_ptr_nonnull(at);
    *at = '\0';
    *ret_len = len;
    return buf;
}

static void expect_text_is_utf8(const rpc_error_t *err, const char *what)
{
    ck_assert_msg(utf8_valid_text(err->message, strlen(err->message)) &&
                      utf8_valid_text(err->culprit, strlen(err->culprit)),
                  "%s: the error is not UTF-8: %s", what, err->message);
}

START_TEST(ps_hostile_findings_get_clear_errors_and_change_nothing)
{
    fixture_t f;
    rpc_error_t err;
    opt_desc_t opt;
    var_desc_t v;
    Tessera__V1__PullRequest pr = TESSERA__V1__PULL_REQUEST__INIT;
    Tessera__V1__DropJobRequest dr = TESSERA__V1__DROP_JOB_REQUEST__INIT;
    Tessera__V1__Initializer__RandomNormal rn = TESSERA__V1__INITIALIZER__RANDOM_NORMAL__INIT;
    int64_t sq[2] = {INT64_C(1) << 31, INT64_C(1) << 31}, rows3[3] = {2, 2, 2};
    float big[12], huge_rows[12];
    uint8_t *raw;
    size_t len;
    push_spec_t p;

    fixture_up(&f);

    /* 5. float32 overflow: hyper-parameters and initializer arguments checked as float32, and
     * updates that would leave float32 refused whole. */
    opt_desc(&opt, false, 1e39);
    var_desc(&v, "x", 4, 0, 0, 1, 0.0, 0);
    expect(&f, create(f.ch, "f5", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err,
           "optimizer", "schedule.lr", "learning rate 1e39");
    opt_desc(&opt, true, 0.001);
    opt.adam.epsilon = 1e-50;
    expect(&f, create(f.ch, "f5", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err,
           "optimizer", "epsilon", "Adam epsilon 1e-50");
    opt_desc(&opt, false, 0.001);
    opt.msg.scale = 1e300;
    expect(&f, create(f.ch, "f5", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err,
           "optimizer", "float32", "scale 1e300");
    opt_desc(&opt, false, 0.01);
    var_desc(&v, "x", 4, 0, 0, 1, 1e39, 0);
    expect(&f, create(f.ch, "f5", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err, "x",
           "float32", "constant 1e39");
    rn.mean = 0;
    rn.stddev = 1e300;
    v.init.kind_case = TESSERA__V1__INITIALIZER__KIND_RANDOM_NORMAL;
    v.init.random_normal = &rn;
    expect(&f, create(f.ch, "f5", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err, "x",
           "float32", "RandomNormal stddev 1e300");
    for (int i = 0; i < 12; i++)
        huge_rows[i] = 3e38f;
    expect(&f, push_rows(f.ch, "h", "emb", rows3, 3, huge_rows, 4, false, NULL, &err),
           STATUS_INVALID_ARGUMENT, &err, "emb", "float32", "summed duplicate rows of 3e38");
    for (int i = 0; i < 12; i++)
        big[i] = 1e20f; /* finite, but Adam squares it */
    p = dense("h", "w", 0, 4, 3, big);
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "nothing was applied",
           "a gradient whose square overflows");

    /* 6. NUL inside names: refused by name, never served from the prefix. */
    pr.job = "hXevil";
    raw = packed_with_nul(&pr.base, 'X', &len);
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/Pull", raw, len, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, NULL, "PullRequest.job", "Pull of job 'h\\0evil'");
    free(raw);
    dr.job = "hXtail";
    raw = packed_with_nul(&dr.base, 'X', &len);
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/DropJob", raw, len, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, NULL, "DropJobRequest.job", "DropJob of 'h\\0tail'");
    free(raw);

    /* 7. Sizes that wrap are reported as what they are. */
    var_desc(&v, "sq", 1, 1, 0, 1, 0.0, 0);
    v.msg.shape = v.msg.full_shape = sq;
    expect(&f, create(f.ch, "f7", NULL, &v, 1, NULL, &err), STATUS_RESOURCE_EXHAUSTED, &err, "sq",
           "4611686018427387904 elements", "a [2^31, 2^31] variable");
    ck_assert_msg(strstr(err.message, " 0 bytes") == NULL, "%s", err.message);
    p = dense("h", "w", 0, INT64_C(1) << 62, 0, big);
    p.byte_length = p.payload_len = 48;
    expect(&f, push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "more than 2^64",
           "a [2^62] gradient");
    expect_text_is_utf8(&err, "a [2^62] gradient");

    ck_assert_int_eq(health_check(f.ps.listen, "", 5000, &err), HEALTH_SERVING);
    free(f.w);
    free(f.emb);
    rpc_channel_free(f.ch);
    harness_stop(&f.ps);
}
END_TEST

/* 9. Many tiny shards pay for their bookkeeping, and a request of a million of them is refused
 * before it is unpacked. */
START_TEST(ps_many_tiny_shards_count_against_the_memory_limit)
{
    enum { TINY = 10000, MILLION = 1000000 };
    Tessera__V1__CreateVariablesRequest req = TESSERA__V1__CREATE_VARIABLES_REQUEST__INIT;
    Tessera__V1__CreateVariablesResponse *resp = NULL;
    Tessera__V1__VariableShard *shards = calloc(TINY, sizeof(*shards)), **ptrs;
    int64_t *dims = calloc(2 * TINY, sizeof(*dims));
    uint8_t *raw = malloc((size_t)MILLION * 5 + 16);
    size_t len = 0;
    uint64_t before, after;
    launch_proc_t ps;
    rpc_channel_t *ch;
    opt_desc_t opt;
    rpc_error_t err;
    status_t rc;

    ptrs = calloc(TINY, sizeof(*ptrs));
    harness_start(&ps, "tessera-ps", "ps-tiny", "--max-memory-bytes=1048576", NULL);
    ch = connect_to(&ps);
    opt_desc(&opt, false, 0.01);
    for (int i = 0; i < TINY; i++) {
        tessera__v1__variable_shard__init(&shards[i]);
        shards[i].variable = "tiny";
        shards[i].shard = i;
        shards[i].num_shards = TINY;
        shards[i].dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
        dims[2 * i] = 1;
        dims[2 * i + 1] = TINY;
        shards[i].n_shape = shards[i].n_full_shape = 1;
        shards[i].shape = &dims[2 * i];
        shards[i].full_shape = &dims[2 * i + 1];
        shards[i].row_offset = i;
        ptrs[i] = &shards[i];
    }
    req.job = "tiny";
    req.optimizer = &opt.msg;
    req.n_shards = TINY;
    req.shards = ptrs;
    /* 40 KB of values, but 10,000 shards of bookkeeping: over a 1 MiB limit. */
    rc = rpc_ps_create_variables(ch, &req, NULL, &resp, NULL, &err);
    ck_assert_msg(rc == STATUS_RESOURCE_EXHAUSTED, "10,000 tiny shards: %s (%s)", status_name(rc),
                  err.message);
    ck_assert_msg(strstr(err.message, "bookkeeping") != NULL, "%s", err.message);

    /* A million shards in one request: refused while still bytes. */
    raw[len++] = 0x0a; /* job = "big" */
    raw[len++] = 3;
    memcpy(raw + len, "big", 3);
    len += 3;
    for (int i = 0; i < MILLION; i++) {
        static const uint8_t entry[5] = {0x1a, 3, 0x0a, 1, 'v'}; /* shards { variable: "v" } */
        memcpy(raw + len, entry, sizeof(entry));
        len += sizeof(entry);
    }
    before = resident_bytes(ps.pid);
    rc = rpc_unary_raw(ch, "/tessera.v1.ParameterServer/CreateVariables", raw, len, 30000, &err);
    after = resident_bytes(ps.pid);
    ck_assert_msg(rc == STATUS_RESOURCE_EXHAUSTED, "a million shards: %s (%s)", status_name(rc),
                  err.message);
    ck_assert_msg(strstr(err.message, "CreateVariablesRequest.shards") != NULL, "%s", err.message);
    if (!instrumented(ps.pid))
        ck_assert_msg(after < before + (64u << 20), "resident memory grew from %.1f to %.1f MiB",
                      (double)before / (1 << 20), (double)after / (1 << 20));
    ck_assert_int_eq(health_check(ps.listen, "", 5000, &err), HEALTH_SERVING);

    free(raw);
    free(shards);
    free(ptrs);
    free(dims);
    rpc_channel_free(ch);
    harness_stop(&ps);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ps");
    TCase *tc = tcase_create("ps");

    grpc_init();
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ps_applies_pushes_with_the_optimizer_and_serves_the_values);
    tcase_add_test(tc, ps_large_variable_splits_over_two_ps_round_robin);
    tcase_add_test(tc, ps_rejects_hostile_requests_and_keeps_serving_the_same_values);
    tcase_add_test(tc, ps_resident_memory_stays_near_the_variables_and_slots);
    tcase_add_test(tc, ps_hostile_findings_get_clear_errors_and_change_nothing);
    tcase_add_test(tc, ps_many_tiny_shards_count_against_the_memory_limit);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
