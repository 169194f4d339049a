#define _POSIX_C_SOURCE 200809L
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/cpus.h"
#include "base/log.h"
#include "backend.h"
#include "blas.h"
#include "checkpoint.h"
#include "export.h"
#include "files/init_weights.h"
#include "files/tensorboard.h"
#include "job/init_optimizer.h"
#include "model_internal.h"
#include "trainer.h"

/* multi_worker_mirrored needs worker processes (a chief's cluster): running it here would be a
 * different job, without a word. mirrored and central_storage run
 * here: their replicas (the job's, or one per core) on threads; the CPU has one memory, so both
 * keep the variables once and apply the summed gradients once. */
static status_t check_strategy(const job_t *job, int *ret_replicas, status_msg_t *err)
{
    *ret_replicas = 1;
    if (job->strategy == JOB_STRATEGY_MULTI_WORKER_MIRRORED)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: strategy multi_worker_mirrored trains on a cluster of workers: "
                           "submit it to a chief (tessera run --local --workers N, or tessera "
                           "submit); tessera train runs one_device, mirrored and central_storage "
                           "jobs (and parameter_server jobs, as one worker)",
                           job->path ? job->path : "job");
    if (job->wire_bf16)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: train.wire_dtype bfloat16 is what gradients and values take on "
                           "the wire to parameter servers, and tessera train has none: submit "
                           "the job to a chief (tessera run --local --ps N), or leave the key out",
                           job->path ? job->path : "job");
    if (job->strategy == JOB_STRATEGY_MIRRORED || job->strategy == JOB_STRATEGY_CENTRAL_STORAGE)
        *ret_replicas = trainer_local_replicas(job, cpus_available());
    return STATUS_OK;
}

/* Loss, accuracy and the job's other metrics (ret_metrics[n_metrics]) on the test split. */
static status_t evaluate(trainer_t *t, const job_t *job, double *ret_loss, double *ret_acc,
                         double *ret_metrics, status_msg_t *err)
{
    model_stats_t st;
    double *sums = calloc(job->metric_width + 1, sizeof(double));
    status_t rc = sums == NULL ? status_fail(err, STATUS_NO_MEMORY, "out of memory")
                               : trainer_evaluate(t, NULL, NULL, &st, sums, err);

    if (rc == STATUS_OK) {
        *ret_loss = st.examples ? st.loss_sum / st.examples : NAN;
        *ret_acc = st.examples ? st.correct / st.examples : NAN;
        job_metrics_result(job, sums, ret_metrics);
    }
    free(sums);
    return rc;
}

/* Folds one step into the epoch's running means and the run's totals. */
static void count_step(train_progress_t *pr, const model_stats_t *st, const data_batch_t *b,
                       double sums[3], double t0, double epoch_t0)
{
    sums[0] += st->loss_sum;
    sums[1] += st->correct;
    sums[2] += st->examples;
    pr->step++;
    pr->epoch = b->epoch;
    pr->epoch_step++;
    pr->loss = sums[0] / sums[2];
    pr->accuracy = sums[1] / sums[2];
    pr->seconds = clock_now_s() - t0;
    pr->examples_per_second = sums[2] / (clock_now_s() - epoch_t0);
}

/* The job's TensorBoard run, or NULL without a tensorboard section. */
static status_t open_tensorboard(const job_t *job, tb_run_t **ret, status_msg_t *err)
{
    tb_opts_t o = {.logdir = job->tensorboard_logdir,
                   .job = job->name ? job->name : "job",
                   .update_freq = job->tensorboard_update_freq,
                   .histogram_freq = job->tensorboard_histogram_freq,
                   .accuracy = job_reports_accuracy(job)};

    *ret = NULL;
    return job->tensorboard_logdir != NULL ? tb_open(&o, ret, err) : STATUS_OK;
}

/* What Keras's TensorBoard callback writes at the end of an epoch. */
static status_t tensorboard_epoch(tb_run_t *tb, trainer_t *t, const job_t *job,
                                  const train_progress_t *pr, double epoch_seconds,
                                  status_msg_t *err)
{
    model_t *m = trainer_model(t);
    const char *names[JOB_MAX_METRICS];
    for (int i = 0; i < job->n_metrics; i++)
        names[i] = job->metrics[i].name;
    tb_epoch_t e = {.epoch = pr->epoch,
                    .n_metrics = job->n_metrics,
                    .metric_names = names,
                    .metrics = pr->metrics,
                    .val_metrics = pr->test_metrics,
                    .loss = pr->loss,
                    .accuracy = pr->accuracy,
                    .learning_rate = pr->learning_rate,
                    .examples_per_second = pr->examples_per_second,
                    .steps_per_second = (double)pr->epoch_step / epoch_seconds,
                    .validated = pr->has_test,
                    .val_loss = pr->test_loss,
                    .val_accuracy = pr->test_accuracy};

    STATUS_CHECK(tb_epoch(tb, &e, err));
    return tb_histograms_due(tb, pr->epoch) ? train_histograms(tb, m, pr->epoch, err) : STATUS_OK;
}

status_t train_histograms(tb_run_t *tb, model_t *m, int64_t epoch, status_msg_t *err)
{
    for (size_t i = 0; i < model_param_count(m); i++) {
        const model_param_t *p = model_param(m, i);
        STATUS_CHECK(tb_histogram(tb, epoch, p->name, p->value, p->n, err));
    }
    return STATUS_OK;
}

/* Where a run stands between steps, for its checkpoints. */
typedef struct run_state {
    train_progress_t pr;
    double sums[3]; /* the epoch's loss, correct, examples so far */
    int64_t next_epoch, next_batch;
    double last_save; /* clock_now_s() of the last checkpoint */
    int64_t saved_step;
    bool has_last_epoch; /* an epoch has ended: its means */
    double last_loss, last_accuracy;
    double *metric_sums; /* the job's other metrics over the epoch so far */
    double last_metrics[JOB_MAX_METRICS];
    bool ckpt_due; /* a checkpoint waits for the end of a window of accumulate_steps */
} run_state_t;

/* Writes a checkpoint when the job's checkpoint section says one is due: every_steps,
 * every_seconds, or (with neither) each epoch's end; and always after the last step. One due
 * inside a window of accumulate_steps is written when the window ends (a checkpoint holds no
 * gradients). */
static status_t maybe_checkpoint(trainer_t *t, const job_t *job, run_state_t *s, bool last,
                                 status_msg_t *err)
{
    bool due;
    train_position_t pos;

    if (job->checkpoint_dir == NULL || s->saved_step == s->pr.step)
        return STATUS_OK;
    due = last ||
          (job->checkpoint_every_steps > 0 && s->pr.step % job->checkpoint_every_steps == 0) ||
          (job->checkpoint_every_seconds > 0 &&
           clock_now_s() - s->last_save >= (double)job->checkpoint_every_seconds) ||
          (job->checkpoint_every_steps == 0 && job->checkpoint_every_seconds == 0 &&
           s->pr.epoch_end) ||
          s->ckpt_due;
    s->ckpt_due = due && trainer_window_batches(t) > 0;
    if (!due || s->ckpt_due)
        return STATUS_OK;
    pos = (train_position_t){.step = s->pr.step,
                             .epoch = s->next_epoch,
                             .batch = s->next_batch,
                             .has_last_epoch = s->has_last_epoch,
                             .last_loss = s->last_loss,
                             .last_accuracy = s->last_accuracy,
                             .metric_sums = job->n_metrics > 0 ? s->metric_sums : NULL,
                             .last_metrics =
                                 job->n_metrics > 0 && s->has_last_epoch ? s->last_metrics : NULL};
    memcpy(pos.epoch_sums, s->sums, sizeof(pos.epoch_sums));
    STATUS_CHECK(train_ckpt_save(t, job, &pos, err));
    LOG_INFO(TRAIN, "checkpoint at step %lld in %s", (long long)s->pr.step, job->checkpoint_dir);
    s->last_save = clock_now_s();
    s->saved_step = s->pr.step;
    return STATUS_OK;
}

static status_t train_loop(trainer_t *t, const job_t *job, int64_t steps_limit,
                           train_progress_cb cb, void *arg, run_state_t *s, train_result_t *ret,
                           status_msg_t *err)
{
    train_progress_t *pr = &s->pr;
    data_batch_t b;
    double t0 = clock_now_s(), epoch_t0 = t0, total_examples = 0;
    int64_t epochs = job->epochs, first_step = pr->step;
    tb_run_t *tb = NULL;
    status_t rc;

    pr->epoch_steps = data_pipeline_batches_per_epoch(trainer_pipeline(t));
    pr->epochs = steps_limit > 0 ? 0 : epochs;
    pr->total_steps = steps_limit > 0 ? steps_limit : pr->epochs * pr->epoch_steps;
    pr->has_test = trainer_test_examples(t) > 0 && job->evaluate;
    s->last_save = t0;
    LOG_INFO(TRAIN, "training %s on %zu examples, batch %d%s, %s", job->name ? job->name : "job",
             trainer_train_examples(t), job->data.batch_size * trainer_replicas(t),
             trainer_replicas(t) > 1 ? " (split over the replicas)" : "",
             model_backend(trainer_model(t))->device_memory ? "on the GPU"
                                                            : "BLAS kernels for this CPU");
    STATUS_CHECK(open_tensorboard(job, &tb, err));
    while ((steps_limit == 0 || pr->step < steps_limit) && trainer_next(t, &b)) {
        model_stats_t st;
        STATUS_CHECK_GOTO(trainer_step(t, &b, &st, err), rc, out);
        pr->learning_rate = trainer_learning_rate(t, trainer_iterations(t));
        STATUS_CHECK_GOTO(trainer_apply(t, err), rc, out);
        total_examples += st.examples;
        count_step(pr, &st, &b, s->sums, t0, epoch_t0);
        if (s->metric_sums != NULL)
            trainer_take_metrics(t, s->metric_sums);
        pr->epoch_end = b.last_of_epoch || (steps_limit > 0 && pr->step == steps_limit);
        if (pr->epoch_end)
            job_metrics_result(job, s->metric_sums, pr->metrics);
        if (pr->epoch_end && pr->has_test) {
            STATUS_CHECK_GOTO(
                evaluate(t, job, &pr->test_loss, &pr->test_accuracy, pr->test_metrics, err), rc,
                out);
            ret->test_loss = pr->test_loss;
            ret->test_accuracy = pr->test_accuracy;
            memcpy(ret->test_metrics, pr->test_metrics, sizeof(ret->test_metrics));
        }
        if (tb != NULL)
            STATUS_CHECK_GOTO(tb_batch(tb, pr->step, pr->loss, pr->accuracy, err), rc, out);
        if (tb != NULL && pr->epoch_end)
            STATUS_CHECK_GOTO(tensorboard_epoch(tb, t, job, pr, clock_now_s() - epoch_t0, err), rc,
                              out);
        if (cb != NULL)
            cb(pr, arg);
        s->next_epoch = b.last_of_epoch ? b.epoch + 1 : b.epoch;
        s->next_batch = b.last_of_epoch ? 0 : pr->epoch_step;
        if (pr->epoch_end) {
            ret->loss = s->last_loss = pr->loss;
            ret->accuracy = s->last_accuracy = pr->accuracy;
            ret->epochs = b.epoch + 1;
            s->has_last_epoch = true;
            memcpy(s->last_metrics, pr->metrics, sizeof(s->last_metrics));
            memcpy(ret->metrics, pr->metrics, sizeof(ret->metrics));
        }
        /* The sums run on past a --steps end, which is not an epoch's: a run resumed from its
         * checkpoint goes on with the epoch. */
        if (b.last_of_epoch) {
            s->sums[0] = s->sums[1] = s->sums[2] = 0;
            if (s->metric_sums != NULL)
                memset(s->metric_sums, 0, job->metric_width * sizeof(double));
            pr->epoch_step = 0;
            epoch_t0 = clock_now_s();
        }
        STATUS_CHECK_GOTO(maybe_checkpoint(t, job, s, false, err), rc, out);
    }
    /* the last window, if it has fewer batches, is applied too (as a closure's on a cluster) */
    if (trainer_close_window(t))
        STATUS_CHECK_GOTO(trainer_update(t, err), rc, out);
    STATUS_CHECK_GOTO(maybe_checkpoint(t, job, s, true, err), rc, out);
    /* A resumed run with nothing left to train still reports the model's results. */
    if (pr->step == first_step && s->has_last_epoch) {
        ret->loss = s->last_loss;
        ret->accuracy = s->last_accuracy;
        ret->epochs = s->next_epoch;
        memcpy(ret->metrics, s->last_metrics, sizeof(ret->metrics));
    }
    if (pr->has_test && isnan(ret->test_loss))
        STATUS_CHECK_GOTO(
            evaluate(t, job, &ret->test_loss, &ret->test_accuracy, ret->test_metrics, err), rc,
            out);
    ret->steps = pr->step;
    ret->steps_run = pr->step - first_step;
    ret->seconds = clock_now_s() - t0;
    ret->examples_per_second = ret->seconds > 0 ? total_examples / ret->seconds : 0;
    return tb_close(tb, err);
out:
    tb_close(tb, NULL);
    return rc;
}

/* With resume asked for, the newest checkpoint's position (and its manifest, to restore after
 * the trainer is built); none is not an error: the run starts at step 0, as Keras's
 * BackupAndRestore does. */
static status_t find_resume(const job_t *job, bool resume, char **ret_path, ckpt_manifest_t *m,
                            run_state_t *s, status_msg_t *err)
{
    status_t rc;

    *ret_path = NULL;
    memset(m, 0, sizeof(*m));
    if (!resume)
        return STATUS_OK;
    if (job->checkpoint_dir == NULL)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: resuming needs checkpoint.dir in the job, where checkpoints are",
                           job->path ? job->path : "job");
    rc = train_ckpt_find(job, ret_path, m, err);
    if (rc == STATUS_NOT_FOUND) {
        LOG_INFO(TRAIN, "no checkpoint in %s yet: starting at step 0", job->checkpoint_dir);
        return STATUS_OK;
    }
    STATUS_CHECK(rc);
    s->pr.step = s->saved_step = m->step;
    s->pr.epoch = s->next_epoch = m->data[0].epoch;
    s->pr.epoch_step = s->next_batch = m->data[0].batch;
    memcpy(s->sums, m->epoch_sums, sizeof(s->sums));
    s->has_last_epoch = m->has_last_epoch;
    s->last_loss = m->last_loss;
    s->last_accuracy = m->last_accuracy;
    /* the metrics' sums and values when the checkpoint has the job's (it may predate them) */
    if (m->n_metric_sums == job->metric_width && job->metric_width > 0 &&
        m->metric_signature == job_metrics_signature(job))
        memcpy(s->metric_sums, m->metric_sums, job->metric_width * sizeof(double));
    else if (job->metric_width > 0)
        LOG_WARNING(TRAIN, "the checkpoint has no sums of the job's metrics (or of other "
                           "metrics): they start again at its step");
    if (m->n_last_metrics == (size_t)job->n_metrics && job->n_metrics > 0 &&
        m->metric_signature == job_metrics_signature(job))
        memcpy(s->last_metrics, m->last_metrics, (size_t)job->n_metrics * sizeof(double));
    return STATUS_OK;
}

/* Checks the starting weights against the model, then copies every variable in; a .keras
 * file's layers are found by their class paths (job_keras_paths). */
static status_t apply_init_weights(init_weights_t *w, model_t *m, status_msg_t *err)
{
    size_t n = model_param_count(m), nl = m->n_layers;
    st_tensor_t *vars = export_tensors(m);
    job_layer_t *specs = calloc(nl + 1, sizeof(*specs));
    char(*paths)[96] = calloc(nl + 1, sizeof(*paths));
    const char **names = calloc(nl + 1, sizeof(*names)), **at = calloc(nl + 1, sizeof(*at));
    status_t rc = STATUS_OK;

    if (vars == NULL || specs == NULL || paths == NULL || names == NULL || at == NULL)
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    if (rc == STATUS_OK) {
        for (size_t l = 0; l < nl; l++)
            specs[l] = m->layers[l].spec;
        job_keras_paths(specs, nl, paths);
        for (size_t l = 0; l < nl; l++) {
            names[l] = m->layers[l].spec.name;
            at[l] = paths[l];
        }
        init_weights_map_layers(w, names, at, nl);
        rc = init_weights_check(w, vars, n, err);
    }
    for (size_t i = 0; i < n && rc == STATUS_OK; i++)
        rc = init_weights_read(w, vars, n, i, model_param(m, i)->value, err);
    init_weights_map_layers(w, NULL, NULL, 0);
    free(vars);
    free(specs);
    free(paths);
    free(names);
    free(at);
    return rc;
}

/* model: {keras: PATH}: the archive optimizer's state, as Keras's load_model restores it
 * (job/init_optimizer.h): the iteration count (Keras counts batches under gradient
 * accumulation, Tessera the updates: a window in progress, whose gradients Keras keeps, starts
 * again) and the slots. An optimizer Keras never built (a model saved before training) holds
 * no slots and starts anew. */
static status_t apply_init_optimizer(const init_weights_t *w, trainer_t *t, const job_t *job,
                                     int64_t *ret_from, status_msg_t *err)
{
    const optimizer_config_t *o = trainer_optimizer(t);
    model_t *m = trainer_model(t);
    size_t np = model_param_count(m);
    st_tensor_t *vars = calloc(np + 1, sizeof(*vars));
    bool *moving = calloc(np + 1, sizeof(*moving));
    init_optimizer_t plan = {0};
    status_t rc = STATUS_OK;

    if (vars == NULL || moving == NULL)
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < np && rc == STATUS_OK; i++) {
        const model_param_t *p = model_param(m, i);
        vars[i].name = p->name;
        vars[i].rank = p->rank;
        for (int d = 0; d < p->rank; d++)
            vars[i].shape[d] = (uint64_t)p->shape[d];
        moving[i] = p->moving;
    }
    if (rc == STATUS_OK)
        rc = init_optimizer_plan(w, o, vars, moving, np, job->keras_accumulate, &plan, err);
    for (size_t j = 0; j < plan.n && rc == STATUS_OK; j++)
        rc = init_optimizer_read(
            w, o, &plan, j,
            trainer_slots(t, plan.param[j]) + plan.slot[j] * model_param(m, plan.param[j])->n, err);
    if (rc == STATUS_OK && init_weights_optimizer_count(w) > 0) {
        trainer_set_updates(t, plan.updates);
        *ret_from = plan.updates;
        LOG_INFO(TRAIN, "%s: the optimizer goes on from iteration %lld", w->path,
                 (long long)plan.updates);
    }
    init_optimizer_done(&plan);
    free(vars);
    free(moving);
    return rc;
}

status_t train_init_weights(trainer_t *t, const job_t *job, const char *path, status_msg_t *err)
{
    init_weights_t w = {0};
    status_t rc = init_weights_open(path, &w, err);

    if (rc == STATUS_OK)
        rc = apply_init_weights(&w, trainer_model(t), err);
    int64_t from;
    if (rc == STATUS_OK && job->init_optimizer && trainer_keeps_optimizer(t))
        rc = apply_init_optimizer(&w, t, job, &from, err);
    init_weights_close(&w);
    return rc;
}

status_t train_run(const job_t *job, const train_opts_t *opts, train_progress_cb cb, void *arg,
                   train_result_t *ret, status_msg_t *err)
{
    trainer_t *t = NULL;
    int64_t steps_limit = opts->steps > 0 ? opts->steps : opts->epochs > 0 ? 0 : job->steps;
    job_t run = *job; /* with the epochs asked for */
    /* Denormals, which Adam's moments turn into, would slow training by a third; see blas.h. */
    blas_fp_mode_t fp_mode = blas_flush_denormals();
    run_state_t s = {.saved_step = -1};
    ckpt_manifest_t m = {0};
    char *ckpt = NULL;
    const char *init = opts->init_from ? opts->init_from : job->init_from;
    init_weights_t w = {0};
    int replicas = 1;
    const backend_t *be = NULL;
    status_t rc;

    memset(ret, 0, sizeof(*ret));
    ret->test_loss = ret->test_accuracy = NAN;
    ret->optimizer_from = -1;
    for (int i = 0; i < JOB_MAX_METRICS; i++)
        ret->test_metrics[i] = NAN;
    s.metric_sums = calloc(job->metric_width + 1, sizeof(double));
    if (s.metric_sums == NULL) {
        blas_fp_mode_restore(fp_mode);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    if (opts->epochs > 0)
        run.epochs = opts->epochs;
    rc = check_strategy(job, &replicas, err);
    if (rc == STATUS_OK)
        rc = job_set_replicas(&run, replicas, err);
    if (rc == STATUS_OK) /* the host's share of the work, on a GPU too */
        rc = backend_cpu()->set_threads(opts->threads, err);

    if (rc == STATUS_OK)
        rc = find_resume(job, job->resume || opts->resume, &ckpt, &m, &s, err);
    /* Starting weights only for a run that starts: a resumed one has its checkpoint's. */
    if (rc == STATUS_OK && init != NULL && ckpt == NULL)
        rc = init_weights_open(init, &w, err);
    /* after the forks of reading a .keras archive: a child of a process with a CUDA context
     * inherits its address space */
    if (rc == STATUS_OK)
        rc = backend_open(opts->device != NULL ? opts->device : &job->device, &be, err);
    if (rc == STATUS_OK) {
        trainer_opts_t to = {.num_shards = 1,
                             .epochs = steps_limit > 0 ? -1 : run.epochs,
                             .optimizer = true,
                             .start_epoch = s.next_epoch,
                             .start_batch = s.next_batch,
                             .replicas = replicas,
                             .backend = be};
        rc = trainer_new(&run, &to, &t, err);
    }
    if (rc == STATUS_OK && ckpt != NULL) {
        rc = train_ckpt_restore(t, ckpt, &m, err);
        if (rc == STATUS_OK)
            LOG_INFO(TRAIN, "resumed from %s at step %lld", ckpt, (long long)s.pr.step);
        ret->resumed_step = s.pr.step;
    }
    if (rc == STATUS_OK && w.file != NULL) {
        rc = apply_init_weights(&w, trainer_model(t), err);
        if (rc == STATUS_OK)
            LOG_INFO(TRAIN, "starting from the weights in %s", init);
        if (rc == STATUS_OK && job->init_optimizer && opts->init_from == NULL)
            rc = apply_init_optimizer(&w, t, job, &ret->optimizer_from, err);
    }
    init_weights_close(&w);
    ckpt_manifest_free(&m);
    free(ckpt);
    if (rc == STATUS_OK && opts->evaluate_only) {
        rc = trainer_test_examples(t) > 0
                 ? evaluate(t, job, &ret->test_loss, &ret->test_accuracy, ret->test_metrics, err)
                 : status_fail(err, STATUS_BAD_CONFIG, "%s has no data.test to evaluate on",
                               job->path ? job->path : "job");
        ret->steps = s.pr.step;
    } else if (rc == STATUS_OK) {
        rc = train_loop(t, &run, steps_limit, cb, arg, &s, ret, err);
    }
    trainer_free(t);
    free(s.metric_sums);
    blas_fp_mode_restore(fp_mode);
    return rc;
}
