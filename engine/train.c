#define _POSIX_C_SOURCE 200809L
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blas.h"
#include "data.h"
#include "base/log.h"
#include "base/memory.h"
#include "model.h"
#include "optim/optimizer.h"
#include "base/clock.h"

typedef struct trainer {
    const job_t *job;
    optimizer_config_t opt;
    model_t *model;
    dataset_t *train, *test;
    float **slots;  /* per param */
    int64_t *steps; /* per param: updates applied */
} trainer_t;

static void trainer_done(trainer_t *t)
{
    if (t->model != NULL)
        for (size_t i = 0; i < model_param_count(t->model); i++)
            free(t->slots ? t->slots[i] : NULL);
    free(t->slots);
    free(t->steps);
    model_free(t->model);
    dataset_free(t->train);
    dataset_free(t->test);
}

/* The model's input and output must fit the data the job feeds it. */
static status_t check_data_fits(const trainer_t *t, const dataset_t *ds, const char *split,
                                status_msg_t *err)
{
    const job_t *job = t->job;
    if (ds->feature_len != model_input_len(t->model))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: the %s data has %zu values per example but the model's input "
                           "takes %zu",
                           job->path ? job->path : "job", split, ds->feature_len,
                           model_input_len(t->model));
    if (job->loss == JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY &&
        (size_t)ds->classes > model_output_len(t->model))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: the %s labels go up to %d but the model's output has only %zu "
                           "classes",
                           job->path ? job->path : "job", split, ds->classes - 1,
                           model_output_len(t->model));
    return STATUS_OK;
}

static status_t trainer_init(trainer_t *t, const job_t *job, status_msg_t *err)
{
    uint64_t max_bytes = memory_physical_bytes();
    size_t n_params;

    t->job = job;
    t->opt = job->optimizer;
    /* The synchronous strategies need replicas and all-reduce, which are not built yet: running
     * such a job on one device would be a different job, without a word. */
    if (job->strategy == JOB_STRATEGY_MIRRORED || job->strategy == JOB_STRATEGY_CENTRAL_STORAGE ||
        job->strategy == JOB_STRATEGY_MULTI_WORKER_MIRRORED)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: strategy %s is not available yet: tessera train runs one_device "
                           "jobs (and parameter_server jobs, as one worker)",
                           job->path ? job->path : "job",
                           job->strategy == JOB_STRATEGY_MIRRORED ? "mirrored"
                           : job->strategy == JOB_STRATEGY_CENTRAL_STORAGE
                               ? "central_storage"
                               : "multi_worker_mirrored");
    if (t->opt.lr_scale == 0) /* "scale by replicas": one replica here */
        t->opt.lr_scale = 1;
    if (!job->data.train.present)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: data.train is missing",
                           job->path ? job->path : "job");
    /* Data and model past the machine's memory: a clear error, not the kernel's OOM killer. */
    STATUS_CHECK(dataset_load(&job->data.train, job->data.scale, max_bytes, &t->train, err));
    if (job->data.test.present)
        STATUS_CHECK(dataset_load(&job->data.test, job->data.scale,
                                  memory_left(max_bytes, dataset_bytes(t->train)), &t->test, err));
    STATUS_CHECK(model_new(
        &job->model, job->loss, job->from_logits, job->data.batch_size, job->seed,
        memory_left(max_bytes, dataset_bytes(t->train) + dataset_bytes(t->test)), &t->model, err));
    STATUS_CHECK(check_data_fits(t, t->train, "training", err));
    if (t->test != NULL)
        STATUS_CHECK(check_data_fits(t, t->test, "test", err));
    n_params = model_param_count(t->model);
    t->slots = calloc(n_params + 1, sizeof(*t->slots));
    t->steps = calloc(n_params + 1, sizeof(*t->steps));
    if (t->slots == NULL || t->steps == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n_params; i++) {
        model_param_t *p = model_param(t->model, i);
        size_t k = optimizer_slot_count(&t->opt);
        t->slots[i] = calloc(k * p->n + 1, sizeof(float));
        if (t->slots[i] == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory for optimizer slots");
        optimizer_slots_init(&t->opt, t->slots[i], p->n);
    }
    return STATUS_OK;
}

static status_t apply_gradients(trainer_t *t, status_msg_t *err)
{
    for (size_t i = 0; i < model_param_count(t->model); i++) {
        model_param_t *p = model_param(t->model, i);
        if (p->sparse) {
            STATUS_CHECK(optimizer_apply_rows(&t->opt, t->steps[i], p->value, (size_t)p->shape[0],
                                              (size_t)p->shape[1], p->rows_index, p->rows_grad,
                                              p->n_rows, t->slots[i], NULL, err));
        } else {
            optimizer_apply_dense(&t->opt, t->steps[i], p->value, p->grad, t->slots[i], p->n);
        }
        t->steps[i]++;
    }
    return STATUS_OK;
}

static status_t evaluate(trainer_t *t, double *ret_loss, double *ret_acc, status_msg_t *err)
{
    data_pipeline_opts_t po = {.shard_index = 0,
                               .num_shards = 1,
                               .batch_size = t->job->data.batch_size,
                               .epochs = 1,
                               .prefetch = 0};
    data_pipeline_t *pipe;
    data_batch_t b;
    double loss = 0, correct = 0;
    int64_t n = 0;
    status_t rc = STATUS_OK;

    STATUS_CHECK(data_pipeline_new(t->test, &po, &pipe, err));
    while (data_pipeline_next(pipe, &b)) {
        model_stats_t st;
        rc = model_evaluate(t->model, b.features, b.labels, b.size, &st, err);
        if (rc != STATUS_OK)
            break;
        loss += st.loss_sum;
        correct += st.correct;
        n += st.examples;
    }
    data_pipeline_free(pipe);
    *ret_loss = n ? loss / (double)n : NAN;
    *ret_acc = n ? correct / (double)n : NAN;
    return rc;
}

status_t train_run(const job_t *job, const train_opts_t *opts, train_progress_cb cb, void *arg,
                   train_result_t *ret, status_msg_t *err)
{
    trainer_t t = {0};
    data_pipeline_t *pipe = NULL;
    data_pipeline_opts_t po;
    train_progress_t pr = {0};
    data_batch_t b;
    double t0 = clock_now_s(), epoch_t0 = t0, loss = 0, correct = 0;
    int64_t epoch_examples = 0, total_examples = 0, steps_limit;
    /* Denormals, which Adam's moments turn into, would slow training by a third; see blas.h. */
    blas_fp_mode_t fp_mode = blas_flush_denormals();
    status_t rc;

    memset(ret, 0, sizeof(*ret));
    ret->test_loss = ret->test_accuracy = NAN;
    rc = blas_init(err);
    if (rc == STATUS_OK)
        rc = blas_set_threads(opts->threads > 0 ? opts->threads : 1, err);
    if (rc == STATUS_OK)
        rc = trainer_init(&t, job, err);
    if (rc != STATUS_OK)
        goto out;
    steps_limit = opts->steps > 0 ? opts->steps : opts->epochs > 0 ? 0 : job->steps;
    po = (data_pipeline_opts_t){
        .shard_index = 0,
        .num_shards = 1,
        .batch_size = job->data.batch_size,
        .drop_remainder = job->data.drop_remainder,
        .shuffle_buffer = job->data.shuffle_buffer,
        .seed = job->data.seed,
        .epochs = steps_limit > 0    ? -1
                  : opts->epochs > 0 ? opts->epochs
                                     : job->epochs,
        .prefetch = job->data.prefetch,
    };
    rc = data_pipeline_new(t.train, &po, &pipe, err);
    if (rc != STATUS_OK)
        goto out;
    pr.epochs = steps_limit > 0 ? 0 : po.epochs;
    pr.epoch_steps = data_pipeline_batches_per_epoch(pipe);
    pr.total_steps = steps_limit > 0 ? steps_limit : pr.epochs * pr.epoch_steps;
    pr.has_test = t.test != NULL && job->evaluate;
    t0 = epoch_t0 = clock_now_s(); /* rates count training, not loading the data */
    LOG_INFO(TRAIN, "training %s on %zu examples, batch %d, BLAS kernels for this CPU",
             job->name ? job->name : "job", t.train->n, job->data.batch_size);

    while ((steps_limit == 0 || pr.step < steps_limit) && data_pipeline_next(pipe, &b)) {
        model_stats_t st = {0};
        rc = model_train_step(t.model, b.features, b.labels, b.size, &st, err);
        if (rc == STATUS_INVALID_ARGUMENT && !isfinite(st.loss_sum)) { /* say where */
            rc = status_fail(err, STATUS_INVALID_ARGUMENT,
                             "the loss became %s at step %lld (epoch %lld): lower the learning "
                             "rate or check the data",
                             isnan(st.loss_sum) ? "NaN" : "infinite", (long long)pr.step + 1,
                             (long long)b.epoch + 1);
        }
        if (rc != STATUS_OK)
            goto out;
        pr.learning_rate = optimizer_learning_rate(&t.opt, pr.step);
        rc = apply_gradients(&t, err);
        if (rc != STATUS_OK)
            goto out;
        loss += st.loss_sum;
        correct += st.correct;
        epoch_examples += st.examples;
        total_examples += st.examples;
        pr.step++;
        pr.epoch = b.epoch;
        pr.epoch_step++;
        pr.loss = loss / (double)epoch_examples;
        pr.accuracy = correct / (double)epoch_examples;
        pr.seconds = clock_now_s() - t0;
        pr.examples_per_second = (double)epoch_examples / (clock_now_s() - epoch_t0);
        pr.epoch_end = b.last_of_epoch || (steps_limit > 0 && pr.step == steps_limit);
        if (pr.epoch_end && pr.has_test) {
            rc = evaluate(&t, &pr.test_loss, &pr.test_accuracy, err);
            if (rc != STATUS_OK)
                goto out;
            ret->test_loss = pr.test_loss;
            ret->test_accuracy = pr.test_accuracy;
        }
        if (cb != NULL)
            cb(&pr, arg);
        if (pr.epoch_end) {
            ret->loss = pr.loss;
            ret->accuracy = pr.accuracy;
            ret->epochs = b.epoch + 1;
            loss = correct = 0;
            epoch_examples = 0;
            pr.epoch_step = 0;
            epoch_t0 = clock_now_s();
        }
    }
    ret->steps = pr.step;
    ret->seconds = clock_now_s() - t0;
    ret->examples_per_second = (double)total_examples / ret->seconds;
out:
    data_pipeline_free(pipe);
    trainer_done(&t);
    blas_fp_mode_restore(fp_mode);
    return rc;
}
