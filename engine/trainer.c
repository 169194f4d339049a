#define _POSIX_C_SOURCE 200809L
#include "trainer.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/memory.h"
#include "metrics.h"
#include "optim/optimizer.h"
#include "replicas.h"

/* A shard of the training data and where its pipeline stands. */
typedef struct shard_reader {
    dataset_t *ds; /* another shard's own files (sharded by file); NULL: the trainer's split */
    data_pipeline_t *pipe;
    int64_t epoch, batch; /* of the next batch it gives */
} shard_reader_t;

struct trainer {
    const job_t *job;
    const char *where; /* the job file, for errors */
    model_t *model;
    dataset_t *train, *test;
    data_pipeline_t *pipe; /* readers[shard].pipe */
    int shard, n_shards;
    bool by_file;            /* each shard is its own files; else every trainer holds them all */
    uint64_t max;            /* the memory budget */
    data_pipeline_opts_t po; /* this trainer's pipeline's options */
    shard_reader_t *readers; /* per shard: this trainer's own, and those it reads for others */
    int64_t steps;           /* steps this trainer ran */
    optimizer_config_t opt;  /* the job's, for one replica */
    /* when the optimizer is applied here */
    float **slots;    /* per param */
    int64_t *applied; /* per param: updates applied */
    replicas_t *reps; /* mirrored, central_storage: the other replicas; NULL: one */
    /* multi_worker_mirrored: each global batch is n_slices slices of data.batch_size; this
     * process steps on slices slice, slice + stride, ... (stride 1 < n_slices once workers are
     * lost: the survivors share the lost ones' slices), summing their gradients in mb_acc */
    int slice, n_slices, stride;
    float **mb_acc;
    float **mb_mask; /* an Embedding's: the rows its mb_acc (the table's shape) holds */
    /* accumulate_steps: the gradients of the window so far, each batch's weighted by its size;
     * a moving statistic's batches folded as its updates would take them (trainer_accumulate),
     * moving_batches of them in the update that ends the window (0 or 1: one batch's; a
     * parameter server takes them as the push's batches) */
    float **acc;
    int acc_count, last_batch, moving_batches;
    double acc_examples;
    double *metrics; /* the metric sums of the steps since trainer_take_metrics */
    /* optimizer_clip's arguments, made at the first clipped update */
    float **clip_grads;
    size_t *clip_lens;
};

void trainer_free(trainer_t *t)
{
    if (t == NULL)
        return;
    if (t->slots != NULL)
        for (size_t i = 0; i < model_param_count(t->model); i++)
            free(t->slots[i]);
    free(t->slots);
    free(t->applied);
    free(t->clip_grads);
    free(t->clip_lens);
    free(t->metrics);
    for (size_t i = 0; t->acc != NULL && i < model_param_count(t->model); i++)
        free(t->acc[i]);
    free(t->acc);
    for (size_t i = 0; t->mb_acc != NULL && i < model_param_count(t->model); i++)
        free(t->mb_acc[i]);
    free(t->mb_acc);
    for (size_t i = 0; t->mb_mask != NULL && i < model_param_count(t->model); i++)
        free(t->mb_mask[i]);
    free(t->mb_mask);
    for (int i = 0; t->readers != NULL && i < t->n_shards; i++) {
        data_pipeline_free(t->readers[i].pipe);
        dataset_free(t->readers[i].ds);
    }
    free(t->readers);
    replicas_free(t->reps);
    model_free(t->model);
    dataset_free(t->train);
    dataset_free(t->test);
    free(t);
}

/* The labels of each output in a dataset's rows, one after the other (NumPy: one array each;
 * else one part of all of them): their values per example into lens, and how many parts. */
static int label_parts(const dataset_t *ds, size_t *lens)
{
    if (ds->n_label_parts == 0) {
        lens[0] = ds->label_len;
        return 1;
    }
    memcpy(lens, ds->label_part_len, (size_t)ds->n_label_parts * sizeof(*lens));
    return ds->n_label_parts;
}

/* The model's input and output must fit the data the job feeds it. */
static status_t check_data_fits(const trainer_t *t, const dataset_t *ds, const char *split,
                                status_msg_t *err)
{
    const job_model_t *spec = &t->job->model;
    int inputs = job_model_inputs(spec);

    /* arrays given one a model input (NumPy): as many as the inputs, each fitting its own */
    if (ds->n_parts > 0 && ds->n_parts != inputs)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: the %s data gives %d input array%s (x) but the model takes %d "
                           "input%s",
                           t->where, split, ds->n_parts, ds->n_parts == 1 ? "" : "s", inputs,
                           inputs == 1 ? "" : "s");
    for (int k = 0; k < ds->n_parts && inputs > 1; k++) {
        int rank;
        const int *shape = job_model_input_shape(spec, k, &rank);
        size_t len = job_shape_len(shape, rank);
        if (ds->part_len[k] != len)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: the %s data's input array %d (x[%d]) has %zu values per "
                               "example but the model's input '%s' takes %zu",
                               t->where, split, k, k, ds->part_len[k], spec->inputs[k].name, len);
    }
    if (ds->feature_len != model_input_len(t->model))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: the %s data has %zu values per example but the model's input "
                           "takes %zu",
                           t->where, split, ds->feature_len, model_input_len(t->model));
    size_t lens[JOB_MAX_OUTPUTS], train_lens[JOB_MAX_OUTPUTS];
    int parts = label_parts(ds, lens), train_parts = label_parts(t->train, train_lens);
    if (ds != t->train &&
        (parts != train_parts || memcmp(lens, train_lens, (size_t)parts * sizeof(*lens)) != 0))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: the %s labels have %zu values an example in %d array%s, the "
                           "training labels %zu in %d",
                           t->where, split, ds->label_len, parts, parts == 1 ? "" : "s",
                           t->train->label_len, train_parts);
    status_msg_t why;
    if (model_set_labels(t->model, lens, parts, &why) != STATUS_OK)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: %s", t->where, why.text);
    if ((t->job->loss == JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ||
         t->job->loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY) &&
        (size_t)ds->classes > model_output_len(t->model))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: the %s labels go up to %d but the model's output has only %zu "
                           "classes",
                           t->where, split, ds->classes - 1, model_output_len(t->model));
    return STATUS_OK;
}

static status_t make_slots(trainer_t *t, status_msg_t *err)
{
    size_t n_params = model_param_count(t->model);

    t->slots = calloc(n_params + 1, sizeof(*t->slots));
    t->applied = calloc(n_params + 1, sizeof(*t->applied));
    if (t->slots == NULL || t->applied == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n_params; i++) {
        model_param_t *p = model_param(t->model, i);
        t->slots[i] = calloc(optimizer_slot_count(&t->opt) * p->n + 1, sizeof(float));
        if (t->slots[i] == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory for optimizer slots");
        optimizer_slots_init(&t->opt, t->slots[i], p->n);
    }
    return STATUS_OK;
}

/* accumulate_steps: the window's buffers, wherever the optimizer runs */
static status_t make_window(trainer_t *t, status_msg_t *err)
{
    size_t n_params = model_param_count(t->model);

    if (t->job->accumulate_steps <= 1)
        return STATUS_OK;
    if ((t->acc = calloc(n_params + 1, sizeof(*t->acc))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n_params; i++) {
        model_param_t *p = model_param(t->model, i);
        if (p->sparse)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: %s is an Embedding table: accumulate_steps does not add up "
                               "its row gradients yet",
                               t->where, p->name);
        if ((t->acc[i] = calloc(p->n + 1, sizeof(float))) == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory for accumulated gradients");
    }
    return STATUS_OK;
}

static status_t trainer_build(trainer_t *t, const trainer_opts_t *o, status_msg_t *err)
{
    const job_t *job = t->job;
    uint64_t max = o->max_bytes > 0 ? o->max_bytes : memory_physical_bytes();
    data_pipeline_opts_t po;

    int replicas = o->replicas > 1 ? o->replicas : 1;
    int slices = o->slice_count > 1 ? o->slice_count : 1;

    t->opt = job->optimizer;
    if (t->opt.lr_scale == 0) /* "scale by replicas" (the linear scaling rule) */
        t->opt.lr_scale = replicas * slices;
    if (slices > 1 && (replicas > 1 || o->slice_index < 0 || o->slice_index >= slices))
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: slice %d of %d (with %d local replicas)", t->where, o->slice_index,
                           slices, replicas);
    if (o->backend != NULL && o->backend->device_memory && (replicas > 1 || slices > 1))
        return status_fail(err, STATUS_UNIMPLEMENTED,
                           "%s: replicas on a %s device are not built yet (one replica a process)",
                           t->where, o->backend->name);
    t->slice = slices > 1 ? o->slice_index : 0;
    t->n_slices = slices;
    t->stride = slices;
    if (!job->data.train.present)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: data.train is missing", t->where);
    /* Data and model past the budget: a clear error, not the kernel's OOM killer. */
    /* This trainer's files when the job has enough of them; else all, sharded by example. */
    data_part_t part = {.index = o->shard_index, .count = o->num_shards > 0 ? o->num_shards : 1};
    bool by_file = false;
    STATUS_CHECK(
        dataset_load_part(&job->data.train, job->data.scale, max, &part, &t->train, &by_file, err));
    if (job->data.test.present)
        STATUS_CHECK(dataset_load(&job->data.test, job->data.scale,
                                  memory_left(max, dataset_bytes(t->train)), &t->test, err));
    STATUS_CHECK(model_new_on(
        o->backend != NULL ? o->backend : backend_cpu(), &job->model, job->loss, job->from_logits,
        job->data.batch_size, o->seed ? o->seed : job->seed,
        memory_left(max, dataset_bytes(t->train) + dataset_bytes(t->test)), &t->model, err));
    status_msg_t why;
    if (model_set_loss_options(t->model, job, &why) != STATUS_OK)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: %s", t->where, why.text);
    if (job->metric_width > 0 && (t->metrics = calloc(job->metric_width, sizeof(double))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    model_metrics_into(t->model, t->metrics);
    STATUS_CHECK(check_data_fits(t, t->train, "training", err));
    if (t->test != NULL)
        STATUS_CHECK(check_data_fits(t, t->test, "test", err));
    if (o->optimizer)
        STATUS_CHECK(make_slots(t, err));
    STATUS_CHECK(make_window(t, err));
    if (replicas > TRAINER_MAX_REPLICAS || slices > TRAINER_MAX_REPLICAS ||
        (int64_t)job->data.batch_size * replicas * slices > INT_MAX)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: %d replicas of batch %d: at most %d replicas, and a global batch "
                           "of at most %d",
                           t->where, replicas, job->data.batch_size, TRAINER_MAX_REPLICAS, INT_MAX);
    if (replicas > 1)
        STATUS_CHECK(
            replicas_new(job, t->model, replicas, job->data.batch_size,
                         memory_left(max, dataset_bytes(t->train) + dataset_bytes(t->test) +
                                              model_bytes(t->model)),
                         &t->reps, err));
    t->shard = o->shard_index;
    t->n_shards = o->num_shards > 0 ? o->num_shards : 1;
    t->by_file = by_file;
    t->max = max;
    t->readers = calloc((size_t)t->n_shards, sizeof(*t->readers));
    if (t->readers == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    po = (data_pipeline_opts_t){
        .shard_index = by_file ? 0 : o->shard_index,
        .num_shards = by_file ? 1 : t->n_shards,
        .batch_size = job->data.batch_size * replicas * slices, /* the global batch */
        .drop_remainder = job->data.drop_remainder,
        .shuffle_buffer = job->data.shuffle_buffer,
        .seed = job->data.seed + (uint64_t)o->shard_index * 7919,
        .epochs = o->epochs,
        .prefetch = job->data.prefetch,
        .max_bytes = memory_left(max, dataset_bytes(t->train) + dataset_bytes(t->test) +
                                          model_bytes(t->model) +
                                          (t->reps != NULL ? replicas_bytes(t->reps) : 0)),
        .start_epoch = o->start_epoch,
        .start_batch = o->start_batch,
    };
    t->po = po;
    t->readers[t->shard] = (shard_reader_t){.epoch = o->start_epoch, .batch = o->start_batch};
    STATUS_CHECK(data_pipeline_new(t->train, &po, &t->readers[t->shard].pipe, err));
    t->pipe = t->readers[t->shard].pipe;
    return STATUS_OK;
}

status_t trainer_new(const job_t *job, const trainer_opts_t *opts, trainer_t **ret,
                     status_msg_t *err)
{
    trainer_t *t = calloc(1, sizeof(*t));
    status_t rc;

    *ret = NULL;
    if (t == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    t->job = job;
    t->where = job->path ? job->path : "job";
    rc = trainer_build(t, opts, err);
    if (rc != STATUS_OK) {
        trainer_free(t);
        return rc;
    }
    *ret = t;
    return STATUS_OK;
}

model_t *trainer_model(const trainer_t *t)
{
    return t->model;
}

int trainer_replicas(const trainer_t *t)
{
    return t->reps != NULL ? replicas_count(t->reps) : 1;
}

int trainer_global_batch(const trainer_t *t)
{
    return t->po.batch_size;
}

int trainer_local_replicas(const job_t *job, int threads)
{
    return job->replicas > 0 ? job->replicas : threads;
}

const data_pipeline_t *trainer_pipeline(const trainer_t *t)
{
    return t->pipe;
}

size_t trainer_train_examples(const trainer_t *t)
{
    return data_pipeline_examples(t->readers[t->shard].pipe);
}

size_t trainer_test_examples(const trainer_t *t)
{
    return t->test != NULL ? t->test->n : 0;
}

static void advance(shard_reader_t *r, const data_batch_t *b)
{
    if (b->last_of_epoch) {
        r->epoch = b->epoch + 1;
        r->batch = 0;
    } else {
        r->batch = b->epoch == r->epoch ? r->batch + 1 : 1;
        r->epoch = b->epoch;
    }
}

bool trainer_next(trainer_t *t, data_batch_t *ret_batch)
{
    return trainer_next_of(t, t->shard, ret_batch);
}

bool trainer_next_of(trainer_t *t, int shard, data_batch_t *ret_batch)
{
    shard_reader_t *r = shard >= 0 && shard < t->n_shards ? &t->readers[shard] : NULL;

    if (r == NULL || r->pipe == NULL || !data_pipeline_next(r->pipe, ret_batch))
        return false;
    ret_batch->shard = shard;
    advance(r, ret_batch);
    return true;
}

void trainer_position(const trainer_t *t, int shard, int64_t *ret_epoch, int64_t *ret_batch)
{
    const shard_reader_t *r = shard >= 0 && shard < t->n_shards ? &t->readers[shard] : NULL;

    *ret_epoch = r != NULL ? r->epoch : 0;
    *ret_batch = r != NULL ? r->batch : 0;
}

/* The files of another shard, when the data is sharded by file: loaded once, into its reader. */
static status_t load_shard(trainer_t *t, int shard, status_msg_t *err)
{
    shard_reader_t *r = &t->readers[shard];
    data_part_t part = {.index = shard, .count = t->n_shards};
    bool by_file = false;
    uint64_t used = dataset_bytes(t->train) + dataset_bytes(t->test) + model_bytes(t->model);

    if (r->ds != NULL)
        return STATUS_OK;
    return dataset_load_part(&t->job->data.train, t->job->data.scale, memory_left(t->max, used),
                             &part, &r->ds, &by_file, err);
}

status_t trainer_seek(trainer_t *t, int shard, int64_t epoch, int64_t batch, status_msg_t *err)
{
    shard_reader_t *r;
    data_pipeline_opts_t po = t->po;
    const dataset_t *ds = t->train;

    if (shard < 0 || shard >= t->n_shards)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "shard %d of %d: no such shard", shard,
                           t->n_shards);
    r = &t->readers[shard];
    if (r->pipe != NULL && r->epoch == epoch && r->batch == batch)
        return STATUS_OK;
    data_pipeline_free(r->pipe);
    r->pipe = NULL;
    if (shard == t->shard)
        t->pipe = NULL;
    if (shard != t->shard && t->by_file) { /* its files, as its own trainer loads them */
        STATUS_CHECK(load_shard(t, shard, err));
        ds = r->ds;
    } else if (shard != t->shard) {
        po.shard_index = shard;
    }
    po.seed = t->job->data.seed + (uint64_t)shard * 7919; /* the shard's own order */
    po.start_epoch = epoch;
    po.start_batch = batch;
    STATUS_CHECK(data_pipeline_new(ds, &po, &r->pipe, err));
    r->epoch = epoch;
    r->batch = batch;
    if (shard == t->shard)
        t->pipe = r->pipe;
    return STATUS_OK;
}

status_t trainer_size_shard(trainer_t *t, int shard, int64_t *ret, status_msg_t *err)
{
    int64_t all[1];

    if (shard < 0 || shard >= t->n_shards)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "shard %d of %d: no such shard", shard,
                           t->n_shards);
    if (!t->by_file || shard == t->shard) {
        int64_t *each = t->n_shards > 1 ? calloc((size_t)t->n_shards, sizeof(*each)) : all;
        if (each == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
        trainer_shard_examples(t, each);
        *ret = each[shard];
        if (each != all)
            free(each);
        return STATUS_OK;
    }
    STATUS_CHECK(load_shard(t, shard, err));
    *ret = (int64_t)t->readers[shard].ds->n;
    return STATUS_OK;
}

void trainer_shard_examples(const trainer_t *t, int64_t *ret)
{
    size_t n = t->train->n, k = (size_t)t->n_shards;

    for (int s = 0; s < t->n_shards; s++) {
        if (s == t->shard)
            ret[s] = (int64_t)data_pipeline_examples(t->readers[s].pipe);
        else if (t->by_file)
            ret[s] = -1; /* in files this trainer does not read */
        else             /* examples s, s + k, s + 2k, ... */
            ret[s] = n > (size_t)s ? (int64_t)((n - (size_t)s + k - 1) / k) : 0;
    }
}

status_t trainer_set_slices(trainer_t *t, int first, int stride, status_msg_t *err)
{
    if (t->n_slices < 2 || first < 0 || stride < 1 || first >= stride || stride > t->n_slices)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "slices from %d by %d of a global batch of %d slices", first, stride,
                           t->n_slices);
    if (stride < t->n_slices && t->mb_acc == NULL) {
        size_t n = model_param_count(t->model);
        if ((t->mb_acc = calloc(n + 1, sizeof(*t->mb_acc))) == NULL ||
            (t->mb_mask = calloc(n + 1, sizeof(*t->mb_mask))) == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
        for (size_t i = 0; i < n; i++) {
            model_param_t *p = model_param(t->model, i);
            if ((t->mb_acc[i] = calloc(p->n + 1, sizeof(float))) == NULL ||
                (p->sparse &&
                 (t->mb_mask[i] = calloc((size_t)p->shape[0] + 1, sizeof(float))) == NULL))
                return status_fail(err, STATUS_NO_MEMORY, "out of memory");
        }
    }
    t->slice = first;
    t->stride = stride;
    return STATUS_OK;
}

/* Adds an Embedding's rows into the dense g (the table's shape), marking each in mask. */
static void add_rows(const model_param_t *p, float *g, float *mask)
{
    size_t dim = p->n / (size_t)p->shape[0];

    for (size_t j = 0; j < p->n_rows; j++) {
        size_t id = (size_t)p->rows_index[j];
        for (size_t k = 0; k < dim; k++)
            g[id * dim + k] += p->rows_grad[j * dim + k];
        mask[id] = 1;
    }
}

static void clear_rows_acc(trainer_t *t, size_t i)
{
    model_param_t *p = model_param(t->model, i);
    memset(t->mb_acc[i], 0, p->n * sizeof(float));
    memset(t->mb_mask[i], 0, (size_t)p->shape[0] * sizeof(float));
}

void trainer_rows_into(const trainer_t *t, size_t param, float *g, float *mask)
{
    model_param_t *p = model_param(t->model, param);
    size_t rows = (size_t)p->shape[0];

    if (t->stride >= t->n_slices || t->mb_acc == NULL) {
        add_rows(p, g, mask);
        return;
    }
    for (size_t k = 0; k < p->n; k++)
        g[k] += t->mb_acc[param][k];
    for (size_t r = 0; r < rows; r++)
        mask[r] = mask[r] > 0 || t->mb_mask[param][r] > 0 ? 1.0f : 0.0f;
}

/* This process's slices of the global batch b: their gradients, of the loss summed over the
 * slice and divided by the whole batch's examples (nothing for the empty slices of a short last
 * batch), so that the sum over the processes is the gradient of the mean loss over the whole
 * batch. With one slice a step (no worker lost) the gradients are final as backward makes them,
 * layer by layer: the all-reduce may take them while backward goes on. Every process makes as
 * many passes as the one with the most slices, in lockstep: a synchronized BatchNormalization
 * sums its statistics over the slices of each pass (the whole global batch while no worker is
 * lost), and a process whose slice of a pass is empty still takes its part in those sums. */
static status_t slice_step(trainer_t *t, const data_batch_t *b, model_stats_t *ret_stats,
                           status_msg_t *err)
{
    int per = t->job->data.batch_size, ran = 0, passes = (t->n_slices + t->stride - 1) / t->stride;
    size_t in = model_input_len(t->model), np = model_param_count(t->model);

    for (int pass = 0, v = t->slice; pass < passes; pass++, v += t->stride) {
        int lo = v * per, n = b->size - lo < per ? b->size - lo : per;
        model_stats_t st;
        if (v >= t->n_slices || n <= 0) {
            if (!model_sync_idle(t->model))
                return status_fail(err, STATUS_CANCELLED,
                                   "the sums of synchronized BatchNormalization failed (another "
                                   "worker failed this step, or no memory)");
            continue;
        }
        /* slice v of this batch drops the same values whichever worker computes it */
        model_set_draw_key(t->model, model_draw_key(b->epoch, b->index, v));
        status_t rc = model_train_slice(t->model, b->features + (size_t)lo * in,
                                        b->labels + (size_t)lo * model_label_len(t->model), n,
                                        b->size, &st, err);
        ret_stats->loss_sum += st.loss_sum; /* a loss that is not finite: trainer_step says where */
        if (rc != STATUS_OK)
            return rc;
        ret_stats->correct += st.correct;
        ret_stats->examples += st.examples;
        for (size_t i = 0; t->stride < t->n_slices && i < np; i++) {
            model_param_t *p = model_param(t->model, i);
            float *acc = t->mb_acc[i];
            if (p->sparse) { /* the rows, densified: an id's rows from every slice add up */
                if (ran == 0)
                    clear_rows_acc(t, i);
                add_rows(p, acc, t->mb_mask[i]);
                continue;
            }
            for (size_t k = 0; k < p->n; k++)
                acc[k] = ran == 0 ? p->grad[k] : acc[k] + p->grad[k];
        }
        ran++;
    }
    for (size_t i = 0; i < np; i++) {
        model_param_t *p = model_param(t->model, i);
        if (ran == 0 && p->sparse) { /* empty slices: no rows */
            p->n_rows = 0;
            if (t->stride < t->n_slices)
                clear_rows_acc(t, i);
        } else if (p->sparse) {
            continue; /* its rows stay where they are: trainer_rows_into */
        } else if (ran == 0) {
            memset(p->grad, 0, p->n * sizeof(float));
        } else if (t->stride < t->n_slices) {
            memcpy(p->grad, t->mb_acc[i], p->n * sizeof(float));
        }
    }
    return STATUS_OK;
}

status_t trainer_step(trainer_t *t, const data_batch_t *b, model_stats_t *ret_stats,
                      status_msg_t *err)
{
    status_t rc;

    *ret_stats = (model_stats_t){0};
    t->last_batch = b->size;
    if (t->n_slices > 1)
        rc = slice_step(t, b, ret_stats, err);
    else if (t->reps != NULL)
        rc = replicas_step(t->reps, b, ret_stats, err);
    else {
        model_set_draw_key(t->model, model_draw_key(b->epoch, b->index, b->shard));
        rc = model_train_step(t->model, b->features, b->labels, b->size, ret_stats, err);
    }
    t->steps++;
    if (rc == STATUS_INVALID_ARGUMENT && !isfinite(ret_stats->loss_sum)) /* say where */
        rc = status_fail(err, STATUS_INVALID_ARGUMENT,
                         "the loss became %s at step %lld (epoch %lld): lower the learning rate "
                         "or check the data",
                         isnan(ret_stats->loss_sum) ? "NaN" : "infinite", (long long)t->steps,
                         (long long)b->epoch + 1);
    return rc;
}

bool trainer_accumulate(trainer_t *t)
{
    double w = t->last_batch > 0 ? t->last_batch : 1;

    if (t->acc == NULL)
        return true;
    for (size_t i = 0; i < model_param_count(t->model); i++) {
        model_param_t *p = model_param(t->model, i);
        if (p->moving) /* Keras moves the average every batch, whatever its size */
            for (size_t k = 0; k < p->n; k++)
                t->acc[i][k] = t->acc[i][k] * p->momentum + p->grad[k] * p->rest;
        else
            for (size_t k = 0; k < p->n; k++)
                t->acc[i][k] += (float)w * p->grad[k];
    }
    t->acc_examples += w;
    return ++t->acc_count >= t->job->accumulate_steps && trainer_close_window(t);
}

bool trainer_close_window(trainer_t *t)
{
    t->moving_batches = 0;
    if (t->acc == NULL || t->acc_count == 0)
        return false;
    for (size_t i = 0; i < model_param_count(t->model); i++) {
        model_param_t *p = model_param(t->model, i);
        /* a moving statistic: the batches' statistics weighted as their updates would weigh
         * them, a mean, which the window's update takes as that many updates (update_moving;
         * a parameter server as the push's batches) */
        float left = !p->moving ? 0
                     : t->acc_count == 1
                         ? p->rest /* what update_moving takes */
                         : 1 - optimizer_momentum_power(p->momentum, (uint32_t)t->acc_count);
        float inv = !p->moving ? (float)(1.0 / t->acc_examples) : left > 0 ? 1 / left : 0;
        for (size_t k = 0; k < p->n; k++) {
            p->grad[k] = t->acc[i][k] * inv;
            t->acc[i][k] = 0;
        }
    }
    t->moving_batches = t->acc_count;
    t->acc_count = 0;
    t->acc_examples = 0;
    return true;
}

void trainer_drop_window(trainer_t *t)
{
    for (size_t i = 0; t->acc != NULL && t->acc_count > 0 && i < model_param_count(t->model); i++)
        memset(t->acc[i], 0, model_param(t->model, i)->n * sizeof(float));
    t->acc_count = 0;
    t->acc_examples = 0;
    t->moving_batches = 0;
}

int trainer_window_batches(const trainer_t *t)
{
    return t->acc_count;
}

int trainer_window_closed(const trainer_t *t)
{
    return t->moving_batches > 1 ? t->moving_batches : 1;
}

status_t trainer_apply(trainer_t *t, status_msg_t *err)
{
    return trainer_accumulate(t) ? trainer_update(t, err) : STATUS_OK;
}

/* A moving statistic's update from the statistic in its grad (model_param_t.moving), Keras's
 * moving * momentum + statistic * (1 - momentum), in float32; after a window of accumulate_steps,
 * the window's batches at once (trainer_close_window): momentum^batches of the average stays. */
static void update_moving(const trainer_t *t, model_param_t *p, size_t lo, size_t n)
{
    float m = p->momentum, rest = p->rest;

    if (t->moving_batches > 1) {
        m = optimizer_momentum_power(p->momentum, (uint32_t)t->moving_batches);
        rest = 1 - m;
    }
    for (size_t k = lo; k < lo + n; k++)
        p->value[k] = p->value[k] * m + p->grad[k] * rest;
}

/* Replica q's part of every dense variable's update. */
static void update_part(void *arg, int q, int n)
{
    trainer_t *t = arg;

    for (size_t i = 0; i < model_param_count(t->model); i++) {
        model_param_t *p = model_param(t->model, i);
        size_t lo, hi;
        replicas_part(q, n, p->n, &lo, &hi);
        if (p->sparse)
            continue;
        if (p->moving)
            update_moving(t, p, lo, hi - lo);
        else
            optimizer_apply_dense_part(&t->opt, t->applied[i], p->value, p->grad, t->slots[i], p->n,
                                       lo, hi - lo, NULL);
    }
}

/* The optimizer's gradient clipping over every gradient of the step (after the replicas' sum
 * and the window's mean: the gradient the update is about to take). */
static status_t clip_gradients(trainer_t *t, status_msg_t *err)
{
    size_t n = model_param_count(t->model);
    float **grads;
    size_t *lens;

    if (t->clip_grads == NULL)
        t->clip_grads = malloc((n + 1) * sizeof(*t->clip_grads));
    if (t->clip_lens == NULL)
        t->clip_lens = malloc((n + 1) * sizeof(*t->clip_lens));
    if (t->clip_grads == NULL || t->clip_lens == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory for clipping the gradients");
    grads = t->clip_grads;
    lens = t->clip_lens;
    for (size_t i = 0; i < n; i++) {
        model_param_t *p = model_param(t->model, i);
        const int64_t *index;
        size_t rows;
        grads[i] = p->grad;
        lens[i] = p->moving ? 0 : p->n; /* a moving statistic is no gradient */
        if (t->reps != NULL && replicas_rows(t->reps, i, &index, &grads[i], &rows))
            lens[i] = rows * (size_t)p->shape[1];
        else if (p->sparse) {
            grads[i] = p->rows_grad;
            lens[i] = p->n_rows * (size_t)p->shape[1];
        }
    }
    optimizer_clip(&t->opt, grads, lens, n);
    return STATUS_OK;
}

status_t trainer_update(trainer_t *t, status_msg_t *err)
{
    if (t->slots == NULL)
        return status_fail(err, STATUS_INVALID_USAGE,
                           "this trainer sends its gradients away: it has no optimizer");
    if (optimizer_clips(&t->opt))
        STATUS_CHECK(clip_gradients(t, err));
    if (t->reps != NULL) { /* every replica's thread updates its part; the rows here */
        replicas_parallel(t->reps, update_part, t);
        for (size_t i = 0; i < model_param_count(t->model); i++) {
            model_param_t *p = model_param(t->model, i);
            const int64_t *index;
            float *grad;
            size_t n;
            if (replicas_rows(t->reps, i, &index, &grad, &n))
                STATUS_CHECK(optimizer_apply_rows(&t->opt, t->applied[i], p->value,
                                                  (size_t)p->shape[0], (size_t)p->shape[1], index,
                                                  grad, n, t->slots[i], NULL, err));
            t->applied[i]++;
        }
        model_constrain(t->model);
        t->moving_batches = 0;
        return STATUS_OK;
    }
    for (size_t i = 0; i < model_param_count(t->model); i++) {
        model_param_t *p = model_param(t->model, i);
        if (p->sparse)
            STATUS_CHECK(optimizer_apply_rows(&t->opt, t->applied[i], p->value, (size_t)p->shape[0],
                                              (size_t)p->shape[1], p->rows_index, p->rows_grad,
                                              p->n_rows, t->slots[i], NULL, err));
        else if (p->moving)
            update_moving(t, p, 0, p->n);
        else
            optimizer_apply_dense(&t->opt, t->applied[i], p->value, p->grad, t->slots[i], p->n);
        t->applied[i]++;
    }
    model_constrain(t->model); /* after every update, as Keras */
    t->moving_batches = 0;
    return STATUS_OK;
}

bool trainer_keeps_optimizer(const trainer_t *t)
{
    return t->slots != NULL;
}

const optimizer_config_t *trainer_optimizer(const trainer_t *t)
{
    return &t->opt;
}

float *trainer_slots(trainer_t *t, size_t param)
{
    return t->slots != NULL && param < model_param_count(t->model) ? t->slots[param] : NULL;
}

int64_t trainer_iterations(const trainer_t *t)
{
    return t->applied != NULL ? t->applied[0] : 0;
}

void trainer_set_updates(trainer_t *t, int64_t n)
{
    for (size_t i = 0; t->applied != NULL && i < model_param_count(t->model); i++)
        t->applied[i] = n;
}

void trainer_set_iterations(trainer_t *t, int64_t n)
{
    t->steps = n;
    trainer_set_updates(t, n);
}

double trainer_learning_rate(const trainer_t *t, int64_t step)
{
    return optimizer_learning_rate(&t->opt, step);
}

void trainer_take_metrics(trainer_t *t, double *into)
{
    for (size_t k = 0; t->metrics != NULL && k < t->job->metric_width; k++) {
        into[k] += t->metrics[k];
        t->metrics[k] = 0;
    }
}

status_t trainer_evaluate(trainer_t *t, trainer_batch_fn before, void *arg, model_stats_t *ret_sum,
                          double *ret_metrics, status_msg_t *err)
{
    data_pipeline_opts_t po = {.num_shards = 1, .batch_size = t->job->data.batch_size, .epochs = 1};
    data_pipeline_t *pipe;
    data_batch_t b;
    status_t rc = STATUS_OK;

    *ret_sum = (model_stats_t){0};
    if (t->test == NULL)
        return status_fail(err, STATUS_INVALID_USAGE, "%s has no test split to evaluate", t->where);
    STATUS_CHECK(data_pipeline_new(t->test, &po, &pipe, err));
    model_metrics_into(t->model, ret_metrics);
    while (rc == STATUS_OK && data_pipeline_next(pipe, &b)) {
        model_stats_t st;
        if (before != NULL)
            rc = before(arg, &b, err);
        if (rc == STATUS_OK)
            rc = model_evaluate(t->model, b.features, b.labels, b.size, &st, err);
        if (rc == STATUS_OK) {
            ret_sum->loss_sum += st.loss_sum;
            ret_sum->correct += st.correct;
            ret_sum->examples += st.examples;
        }
    }
    model_metrics_into(t->model, t->metrics);
    data_pipeline_free(pipe);
    return rc;
}
