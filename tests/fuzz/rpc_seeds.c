/* The requests of the rpc fuzz target's seed corpus (rpc_seeds.h). */
#include "rpc_seeds.h"

#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>

#include "job/initializer.h"
#include "rpc/initializer_proto.h"
#include "rpc/optimizer_proto.h"
#include "rpc/internal.h"

/* A model file that jobs below refer to as keras_json: m.json (resolved: fuzz/m.json). */
static const char keras_json[] =
    "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"m\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 4], "
    "\"dtype\": \"float32\", \"name\": \"input_1\"}}, "
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": 3, "
    "\"activation\": \"softmax\", \"use_bias\": true}}]}, "
    "\"keras_version\": \"2.15.0\", \"backend\": \"tensorflow\"}";

static const char job_keras[] =
    "{\"name\": \"fuzz\", \"strategy\": \"parameter_server\", \"model\": {\"keras_json\": "
    "\"m.json\"}, \"loss\": \"sparse_categorical_crossentropy\", \"optimizer\": {\"sgd\": "
    "{\"learning_rate\": 0.1}}, \"data\": {\"train\": {\"format\": \"synthetic\", \"kind\": "
    "\"classification\", \"examples\": 64, \"shape\": [4], \"classes\": 3, \"seed\": 1}, "
    "\"batch_size\": 8}, \"train\": {\"steps\": 10}}";

static const char job_yaml[] =
    "name: fuzz\n"
    "strategy: parameter_server\n"
    "model:\n"
    "  - {embedding: {input_dim: 20, output_dim: 4}, input_shape: [5]}\n"
    "  - global_average_pooling1d\n"
    "  - {dense: {units: 1}}\n"
    "loss: {binary_crossentropy: {from_logits: true}}\n"
    "metrics: [accuracy]\n"
    "optimizer: {adam: {learning_rate: 0.001}}\n"
    "data:\n"
    "  train: {format: synthetic, kind: text, examples: 32, shape: [5], vocabulary: 20, seed: 1}\n"
    "  batch_size: 4\n"
    "partitioner: {fixed: {num_shards: 2}}\n"
    "train: {epochs: 1}\n";

/* ---- building -------------------------------------------------------------------------- */

typedef struct seeds {
    rpc_seed_t *v;
    size_t n, cap;
} seeds_t;

static void add(seeds_t *s, const char *name, rpc_method_id_t id, const ProtobufCMessage *msg,
                const void *payload, size_t payload_len)
{
    rpc_iov_t iov = {payload, payload_len, NULL, NULL};
    grpc_byte_buffer_reader r;
    grpc_byte_buffer *bb;
    grpc_slice all;
    size_t len;

    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 32;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        if (s->v == NULL)
            abort();
    }
    if (rpc_encode(msg, &iov, payload != NULL ? 1 : 0, NULL, &bb, &len) != STATUS_OK ||
        !grpc_byte_buffer_reader_init(&r, bb))
        abort();
    all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    grpc_byte_buffer_destroy(bb);
    s->v[s->n].name = name;
    s->v[s->n].id = id;
    s->v[s->n].len = GRPC_SLICE_LENGTH(all);
    s->v[s->n].bytes = malloc(s->v[s->n].len + 1);
    if (s->v[s->n].bytes == NULL)
        abort();
    memcpy(s->v[s->n].bytes, GRPC_SLICE_START_PTR(all), s->v[s->n].len);
    grpc_slice_unref(all);
    s->n++;
}

static Tessera__V1__TensorRef tensor(Tessera__V1__DType dtype, size_t rank, int64_t *shape,
                                     uint64_t offset, uint64_t bytes)
{
    Tessera__V1__TensorRef t = TESSERA__V1__TENSOR_REF__INIT;
    t.dtype = dtype;
    t.n_shape = rank;
    t.shape = shape;
    t.payload_offset = offset;
    t.byte_length = bytes;
    return t;
}

static void shard(Tessera__V1__VariableShard *v, const char *name, int index, int num_shards,
                  size_t rank, int64_t *shape, int64_t *full_shape, Tessera__V1__Initializer *init,
                  bool sparse)
{
    tessera__v1__variable_shard__init(v);
    v->variable = (char *)name;
    v->shard = index;
    v->num_shards = num_shards;
    v->dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
    v->n_shape = v->n_full_shape = rank;
    v->shape = shape;
    v->full_shape = full_shape;
    v->initializer = init;
    v->sparse = sparse;
}

static void add_create(seeds_t *s)
{
    Tessera__V1__CreateVariablesRequest req = TESSERA__V1__CREATE_VARIABLES_REQUEST__INIT;
    Tessera__V1__VariableShard v[4], *pv[4] = {&v[0], &v[1], &v[2], &v[3]};
    int64_t kernel[] = {4, 3}, bias[] = {3}, emb[] = {10, 4}, emb_full[] = {20, 4};
    job_init_t glorot = {.kind = JOB_INIT_GLOROT_UNIFORM};
    job_init_t normal = {
        .kind = JOB_INIT_RANDOM_NORMAL, .a = 0, .b = 0.05, .has_seed = true, .seed = 7};
    job_init_t constant = {.kind = JOB_INIT_CONSTANT, .a = 0.5};
    initializer_msg_t init[3];
    optimizer_config_t opt;
    optimizer_msg_t om;

    initializer_to_proto(&glorot, JOB_INIT_GLOROT_UNIFORM, &init[0]);
    initializer_to_proto(NULL, JOB_INIT_ZEROS, &init[1]);
    initializer_to_proto(&normal, JOB_INIT_RANDOM_NORMAL, &init[2]);
    shard(&v[0], "dense/kernel", 0, 1, 2, kernel, kernel, &init[0].msg, false);
    shard(&v[1], "dense/bias", 0, 1, 1, bias, bias, &init[1].msg, false);
    shard(&v[2], "emb", 0, 2, 2, emb, emb_full, &init[2].msg, true);
    /* BatchNormalization's moving mean: averaged in, not trained */
    shard(&v[3], "bn/moving_mean", 0, 1, 1, bias, bias, &init[1].msg, false);
    v[3].moving = true;
    v[3].momentum = 0.99;
    optimizer_config_default(OPTIMIZER_ADAM, &opt);
    optimizer_to_proto(&opt, 1.0, &om);
    req.job = "j";
    req.optimizer = &om.msg;
    req.n_shards = 4;
    req.shards = pv;
    add(s, "create-adam", RPC_PS_CREATE_VARIABLES, &req.base, NULL, 0);
    /* the same variables under Ftrl with weight decay (another job: a job keeps its optimizer) */
    optimizer_config_default(OPTIMIZER_FTRL, &opt);
    opt.weight_decay = 0.01;
    opt.l1 = 0.1;
    optimizer_to_proto(&opt, 1.0, &om);
    req.job = "f";
    add(s, "create-ftrl", RPC_PS_CREATE_VARIABLES, &req.base, NULL, 0);
    optimizer_config_default(OPTIMIZER_ADAM, &opt);
    optimizer_to_proto(&opt, 1.0, &om);
    req.job = "j";

    /* A second job, with SGD and momentum, for drops and stats. */
    optimizer_config_default(OPTIMIZER_SGD, &opt);
    opt.momentum = 0.9;
    optimizer_to_proto(&opt, 2.0, &om);
    initializer_to_proto(&constant, JOB_INIT_CONSTANT, &init[0]);
    v[0].variable = "w";
    v[0].n_shape = v[0].n_full_shape = 1;
    v[0].shape = v[0].full_shape = bias;
    req.job = "k";
    req.n_shards = 1;
    add(s, "create-sgd", RPC_PS_CREATE_VARIABLES, &req.base, NULL, 0);

    /* A job whose Adam goes on from a Keras archive's state: the kernel's own values, its two
     * slots and the updates applied so far; the kernel constrained. */
    static float values[12], m[12], vel[12];
    Tessera__V1__Initializer own = TESSERA__V1__INITIALIZER__INIT;
    Tessera__V1__Initializer__Values own_values = TESSERA__V1__INITIALIZER__VALUES__INIT;
    ProtobufCBinaryData slots[2] = {{sizeof(m), (uint8_t *)m}, {sizeof(vel), (uint8_t *)vel}};
    for (int i = 0; i < 12; i++) {
        values[i] = 0.1f * (float)(i - 6);
        m[i] = 0.01f * (float)(6 - i);
        vel[i] = 1e-4f * (float)(i + 1);
    }
    own_values.data = (ProtobufCBinaryData){sizeof(values), (uint8_t *)values};
    own.kind_case = TESSERA__V1__INITIALIZER__KIND_VALUES;
    own.values = &own_values;
    optimizer_config_default(OPTIMIZER_ADAM, &opt);
    optimizer_to_proto(&opt, 1.0, &om);
    shard(&v[0], "dense/kernel", 0, 1, 2, kernel, kernel, &own, false);
    v[0].n_slots = 2;
    v[0].slots = slots;
    v[0].updates = 42;
    /* and a max_norm over its columns, which the PS applies after each update */
    Tessera__V1__Constraint con = TESSERA__V1__CONSTRAINT__INIT;
    con.kind = TESSERA__V1__CONSTRAINT__KIND__KIND_MAX_NORM;
    con.max_value = 2;
    con.axes = 1;
    v[0].constraint = &con;
    req.job = "s";
    add(s, "create-state", RPC_PS_CREATE_VARIABLES, &req.base, NULL, 0);
}

static void add_pull(seeds_t *s)
{
    Tessera__V1__PullRequest req = TESSERA__V1__PULL_REQUEST__INIT;
    Tessera__V1__PullItem it[3], *pit[3] = {&it[0], &it[1], &it[2]};
    Tessera__V1__ShardKey key[3];
    int64_t rows[] = {1, 3}, rows_shape[] = {2};
    Tessera__V1__TensorRef rows_ref =
        tensor(TESSERA__V1__DTYPE__DTYPE_INT64, 1, rows_shape, 0, sizeof(rows));
    const char *names[] = {"dense/kernel", "dense/bias", "emb"};

    for (int i = 0; i < 3; i++) {
        tessera__v1__pull_item__init(&it[i]);
        tessera__v1__shard_key__init(&key[i]);
        key[i].variable = (char *)names[i];
        it[i].key = &key[i];
    }
    it[2].rows = &rows_ref;
    req.job = "j";
    req.n_items = 2;
    req.items = pit;
    add(s, "pull-dense", RPC_PS_PULL, &req.base, NULL, 0);
    req.n_items = 1;
    req.items = &pit[2];
    add(s, "pull-rows", RPC_PS_PULL, &req.base, rows, sizeof(rows));
}

static void add_push(seeds_t *s)
{
    Tessera__V1__PushRequest req = TESSERA__V1__PUSH_REQUEST__INIT;
    Tessera__V1__PushItem it[2], *pit[2] = {&it[0], &it[1]};
    Tessera__V1__ShardKey key[2];
    Tessera__V1__RowSlices slices = TESSERA__V1__ROW_SLICES__INIT;
    Tessera__V1__TaskId worker = TESSERA__V1__TASK_ID__INIT;
    int64_t kernel[] = {4, 3}, idx_shape[] = {2}, val_shape[] = {2, 4};
    /* Payload: 12 kernel gradients, then 2 row indices, then 2 rows of 4 gradients. */
    struct {
        float kernel[12];
        int64_t rows[2];
        float values[8];
    } payload;
    Tessera__V1__TensorRef kref =
        tensor(TESSERA__V1__DTYPE__DTYPE_FLOAT32, 2, kernel, 0, sizeof(payload.kernel));
    Tessera__V1__TensorRef iref = tensor(TESSERA__V1__DTYPE__DTYPE_INT64, 1, idx_shape,
                                         offsetof(__typeof__(payload), rows), sizeof(payload.rows));
    Tessera__V1__TensorRef vref =
        tensor(TESSERA__V1__DTYPE__DTYPE_FLOAT32, 2, val_shape,
               offsetof(__typeof__(payload), values), sizeof(payload.values));

    for (int i = 0; i < 12; i++)
        payload.kernel[i] = 0.01f * (float)(i - 6);
    payload.rows[0] = 1;
    payload.rows[1] = 3;
    for (int i = 0; i < 8; i++)
        payload.values[i] = 0.5f;
    for (int i = 0; i < 2; i++) {
        tessera__v1__push_item__init(&it[i]);
        tessera__v1__shard_key__init(&key[i]);
        it[i].key = &key[i];
    }
    key[0].variable = "dense/kernel";
    it[0].gradient_case = TESSERA__V1__PUSH_ITEM__GRADIENT_DENSE;
    it[0].dense = &kref;
    key[1].variable = "emb";
    slices.indices = &iref;
    slices.values = &vref;
    it[1].gradient_case = TESSERA__V1__PUSH_ITEM__GRADIENT_ROWS;
    it[1].rows = &slices;
    worker.type = TESSERA__V1__TASK_TYPE__TASK_TYPE_WORKER;
    worker.address = "127.0.0.1:2224";
    req.job = "j";
    req.step = 1;
    req.worker = &worker;
    req.n_items = 2;
    req.items = pit;
    add(s, "push", RPC_PS_PUSH, &req.base, &payload, sizeof(payload));
    req.pull_after = true;
    add(s, "push-pull-after", RPC_PS_PUSH, &req.base, &payload, sizeof(payload));
    add(s, "push-pull", RPC_PS_PUSH_PULL, &req.base, &payload, sizeof(payload));
    /* the kernel's gradient as a chunk of its rows (the server checks them against its blocks),
     * and as bfloat16 with the values asked back in bfloat16 */
    kref.chunk_offset = 3 * sizeof(float);
    kref.byte_length = 6 * sizeof(float);
    req.n_items = 1;
    add(s, "push-pull-chunk", RPC_PS_PUSH_PULL, &req.base, &payload, 6 * sizeof(float));
    kref.dtype = TESSERA__V1__DTYPE__DTYPE_BFLOAT16;
    kref.chunk_offset = 0;
    kref.byte_length = 12 * sizeof(uint16_t);
    req.pull_dtype = TESSERA__V1__DTYPE__DTYPE_BFLOAT16;
    add(s, "push-pull-bf16", RPC_PS_PUSH_PULL, &req.base, &payload, 12 * sizeof(uint16_t));
    /* a window of 4 accumulated batches' moving mean: averaged in as 4 updates */
    int64_t stat[] = {3};
    Tessera__V1__TensorRef sref =
        tensor(TESSERA__V1__DTYPE__DTYPE_FLOAT32, 1, stat, 0, 3 * sizeof(float));
    key[0].variable = "bn/moving_mean";
    it[0].dense = &sref;
    req.pull_dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
    req.batches = 4;
    add(s, "push-pull-batches", RPC_PS_PUSH_PULL, &req.base, &payload, 3 * sizeof(float));
}

static void add_ps_admin(seeds_t *s)
{
    Tessera__V1__DropJobRequest drop = TESSERA__V1__DROP_JOB_REQUEST__INIT;
    Tessera__V1__PsStatsRequest stats = TESSERA__V1__PS_STATS_REQUEST__INIT;
    Tessera__V1__SaveRequest save = TESSERA__V1__SAVE_REQUEST__INIT;
    Tessera__V1__RestoreRequest restore = TESSERA__V1__RESTORE_REQUEST__INIT;

    drop.job = "k";
    add(s, "drop-job", RPC_PS_DROP_JOB, &drop.base, NULL, 0);
    add(s, "stats-all", RPC_PS_STATS, &stats.base, NULL, 0);
    stats.job = "j";
    add(s, "stats-job", RPC_PS_STATS, &stats.base, NULL, 0);
    save.job = "j";
    save.directory = "ckpt";
    save.step = 1;
    add(s, "save", RPC_PS_SAVE, &save.base, NULL, 0);
    restore.job = "j";
    restore.file = "ckpt/ckpt-1/ps-0.safetensors";
    add(s, "restore", RPC_PS_RESTORE, &restore.base, NULL, 0);
}

static void add_common(seeds_t *s)
{
    Grpc__Health__V1__HealthCheckRequest health = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    Tessera__V1__EchoRequest echo = TESSERA__V1__ECHO_REQUEST__INIT;
    Tessera__V1__SinkRequest sink = TESSERA__V1__SINK_REQUEST__INIT;
    int64_t shape[] = {4};
    Tessera__V1__TensorRef t = tensor(TESSERA__V1__DTYPE__DTYPE_FLOAT32, 1, shape, 0, 16);
    static const uint8_t bytes[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

    add(s, "health-server", RPC_HEALTH_CHECK, &health.base, NULL, 0);
    health.service = RPC_SVC_PS;
    add(s, "health-ps", RPC_HEALTH_CHECK, &health.base, NULL, 0);
    add(s, "health-watch", RPC_HEALTH_WATCH, &health.base, NULL, 0);
    echo.tensor = &t;
    add(s, "echo", RPC_DIAG_ECHO, &echo.base, bytes, sizeof(bytes));
    sink.checksum = true;
    add(s, "sink", RPC_DIAG_SINK, &sink.base, bytes, sizeof(bytes));
}

static void add_jobs(seeds_t *s)
{
    Tessera__V1__ConfigureJobRequest conf = TESSERA__V1__CONFIGURE_JOB_REQUEST__INIT;
    Tessera__V1__ConfigureJobRequest__FilesEntry cfile =
        TESSERA__V1__CONFIGURE_JOB_REQUEST__FILES_ENTRY__INIT;
    Tessera__V1__ConfigureJobRequest__FilesEntry *cfiles[] = {&cfile};
    Tessera__V1__SubmitJobRequest submit = TESSERA__V1__SUBMIT_JOB_REQUEST__INIT;
    Tessera__V1__SubmitJobRequest__FilesEntry sfile =
        TESSERA__V1__SUBMIT_JOB_REQUEST__FILES_ENTRY__INIT;
    Tessera__V1__SubmitJobRequest__FilesEntry *sfiles[] = {&sfile};
    char *ps[] = {"127.0.0.1:2223"};
    Tessera__V1__ShardPlacement kernel = TESSERA__V1__SHARD_PLACEMENT__INIT,
                                bias = TESSERA__V1__SHARD_PLACEMENT__INIT;
    Tessera__V1__ShardPlacement *place[] = {&kernel, &bias};

    kernel.variable = "dense/kernel";
    kernel.rows = 4;
    bias.variable = "dense/bias";
    bias.rows = 3;

    cfile.key = "fuzz/m.json";
    cfile.value.data = (uint8_t *)keras_json;
    cfile.value.len = strlen(keras_json);
    conf.job = "1";
    conf.job_spec = (char *)job_keras;
    conf.job_path = "fuzz/job.json";
    conf.n_files = 1;
    conf.files = cfiles;
    conf.n_ps = 1;
    conf.ps = ps;
    conf.num_workers = 1;
    conf.seed = 1;
    add(s, "configure-job-keras", RPC_WORKER_CONFIGURE_JOB, &conf.base, NULL, 0);
    /* The second call: where the variables of configure-job-keras live. */
    conf.n_placement = 2;
    conf.placement = place;
    add(s, "configure-job-placement", RPC_WORKER_CONFIGURE_JOB, &conf.base, NULL, 0);
    conf.n_placement = 0;
    conf.job_spec = (char *)job_yaml;
    conf.job_path = "fuzz/job.yaml";
    conf.n_files = 0;
    add(s, "configure-job-yaml", RPC_WORKER_CONFIGURE_JOB, &conf.base, NULL, 0);

    sfile.key = "fuzz/m.json";
    sfile.value = cfile.value;
    submit.job_spec = (char *)job_keras;
    submit.job_path = "fuzz/job.json";
    submit.n_files = 1;
    submit.files = sfiles;
    add(s, "submit-job-keras", RPC_COORD_SUBMIT_JOB, &submit.base, NULL, 0);
    submit.job_spec = (char *)job_yaml;
    submit.job_path = "fuzz/job.yaml";
    submit.n_files = 0;
    add(s, "submit-job-yaml", RPC_COORD_SUBMIT_JOB, &submit.base, NULL, 0);
}

static void add_others(seeds_t *s)
{
    Tessera__V1__RunClosureRequest run = TESSERA__V1__RUN_CLOSURE_REQUEST__INIT;
    Tessera__V1__CancelRequest cancel = TESSERA__V1__CANCEL_REQUEST__INIT;
    Tessera__V1__CollectiveChunk chunk = TESSERA__V1__COLLECTIVE_CHUNK__INIT;
    Tessera__V1__GetJobRequest get = TESSERA__V1__GET_JOB_REQUEST__INIT;
    Tessera__V1__ListJobsRequest list = TESSERA__V1__LIST_JOBS_REQUEST__INIT;
    Tessera__V1__CancelJobRequest cancel_job = TESSERA__V1__CANCEL_JOB_REQUEST__INIT;
    Tessera__V1__WatchJobRequest watch = TESSERA__V1__WATCH_JOB_REQUEST__INIT;
    Tessera__V1__GetClusterRequest cluster = TESSERA__V1__GET_CLUSTER_REQUEST__INIT;
    Tessera__V1__RegisterWorkerRequest reg = TESSERA__V1__REGISTER_WORKER_REQUEST__INIT;
    Tessera__V1__CheckpointRequest ckpt = TESSERA__V1__CHECKPOINT_REQUEST__INIT;
    Tessera__V1__ExportRequest export = TESSERA__V1__EXPORT_REQUEST__INIT;
    int64_t shape[] = {2};
    Tessera__V1__TensorRef t = tensor(TESSERA__V1__DTYPE__DTYPE_FLOAT32, 1, shape, 0, 8);
    static const float data[2] = {1.0f, -1.0f};

    run.job = "1";
    run.closure_id = 7;
    run.kind = TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN;
    run.steps = 1;
    add(s, "run-closure", RPC_WORKER_RUN_CLOSURE, &run.base, NULL, 0);
    {
        /* a checkpoint closure, with the epoch's metric sums and the last epoch's values */
        Tessera__V1__TrainPosition pos = TESSERA__V1__TRAIN_POSITION__INIT;
        double sums[4] = {3, 10, 1, 2}, last[2] = {0.5, 0.25};
        pos.step = 5;
        pos.has_last_epoch = true;
        pos.n_epoch_metric_sums = 4;
        pos.epoch_metric_sums = sums;
        pos.n_last_metrics = 2;
        pos.last_metrics = last;
        run.kind = TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_CHECKPOINT;
        run.position = &pos;
        add(s, "run-closure-checkpoint", RPC_WORKER_RUN_CLOSURE, &run.base, NULL, 0);
        run.position = NULL;
        run.kind = TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN;
    }
    cancel.job = "1";
    add(s, "cancel", RPC_WORKER_CANCEL, &cancel.base, NULL, 0);
    chunk.job = "1";
    chunk.collective_id = 3;
    chunk.from_rank = 1;
    chunk.data = &t;
    add(s, "collective", RPC_WORKER_COLLECTIVE, &chunk.base, data, sizeof(data));
    get.id = "1";
    add(s, "get-job", RPC_COORD_GET_JOB, &get.base, NULL, 0);
    add(s, "list-jobs", RPC_COORD_LIST_JOBS, &list.base, NULL, 0);
    cancel_job.id = "1";
    add(s, "cancel-job", RPC_COORD_CANCEL_JOB, &cancel_job.base, NULL, 0);
    watch.id = "1";
    add(s, "watch-job", RPC_COORD_WATCH_JOB, &watch.base, NULL, 0);
    add(s, "get-cluster", RPC_COORD_GET_CLUSTER, &cluster.base, NULL, 0);
    ckpt.id = "1";
    add(s, "checkpoint", RPC_COORD_CHECKPOINT, &ckpt.base, NULL, 0);
    export.id = "1";
    export.directory = "out";
    add(s, "export", RPC_COORD_EXPORT, &export.base, NULL, 0);
    reg.address = "127.0.0.1:2224";
    add(s, "register-worker", RPC_COORD_REGISTER_WORKER, &reg.base, NULL, 0);
}

size_t rpc_seeds_build(rpc_seed_t **ret_seeds)
{
    seeds_t s = {0};

    add_create(&s);
    add_pull(&s);
    add_push(&s);
    add_ps_admin(&s);
    add_common(&s);
    add_jobs(&s);
    add_others(&s);
    *ret_seeds = s.v;
    return s.n;
}

void rpc_seeds_free(rpc_seed_t *seeds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(seeds[i].bytes);
    free(seeds);
}
