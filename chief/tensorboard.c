/* A job's TensorBoard run on the chief (chief_tb.h). */
#define _POSIX_C_SOURCE 200809L
#include "chief_tb.h"

#include "optim/optimizer.h"

status_t chief_tb_open(chief_tb_t *t, const chief_job_t *j, status_msg_t *err)
{
    tb_opts_t o = {.logdir = j->job.tensorboard_logdir,
                   .job = j->job.name ? j->job.name : j->name,
                   .update_freq = j->job.tensorboard_update_freq,
                   .histogram_freq = j->job.tensorboard_histogram_freq,
                   .accuracy = job_reports_accuracy(&j->job)};

    *t = (chief_tb_t){.rc = STATUS_OK};
    return j->job.tensorboard_logdir != NULL ? tb_open(&o, &t->run, err) : STATUS_OK;
}

void chief_tb_progress(chief_tb_t *t, const chief_job_t *j)
{
    int64_t freq = j->job.tensorboard_update_freq, step = j->progress.step;

    if (t->run != NULL && freq > 0 && step / freq > t->last_step / freq && t->rc == STATUS_OK)
        t->rc = tb_batch(t->run, step, j->progress.loss, j->progress.accuracy, &t->err);
    t->last_step = step;
}

status_t chief_tb_epoch(chief_tb_t *t, coordinator_t *c, const chief_job_t *j, int64_t epoch,
                        int64_t steps, double seconds, bool validated, status_msg_t *err)
{
    tb_epoch_t e;
    const char *names[JOB_MAX_METRICS];
    double values[JOB_MAX_METRICS], test_values[JOB_MAX_METRICS];
    int n = j->job.n_metrics;

    if (t->run == NULL)
        return STATUS_OK;
    if (t->rc != STATUS_OK)
        return status_fail(err, t->rc, "%s", t->err.text);
    pthread_mutex_lock(&c->mu);
    e = (tb_epoch_t){
        .epoch = epoch,
        .loss = j->progress.loss,
        .accuracy = j->progress.accuracy,
        .learning_rate = optimizer_learning_rate(
            &j->job.optimizer, j->updates_from + j->progress.step / job_window(&j->job)),
        .examples_per_second = j->progress.examples_per_second,
        .steps_per_second = seconds > 0 ? (double)steps / seconds : 0,
        .validated = validated,
        .val_loss = j->progress.test_loss,
        .val_accuracy = j->progress.test_accuracy,
        .n_metrics = (size_t)n == j->progress.n_metrics ? n : 0,
        .metric_names = names,
        .metrics = values,
        .val_metrics = j->progress.n_test_metrics > 0 ? test_values : NULL};
    for (int i = 0; i < e.n_metrics; i++) {
        names[i] = j->job.metrics[i].name;
        values[i] = j->progress.metrics[i]->value;
        test_values[i] = j->progress.n_test_metrics > 0 ? j->progress.test_metrics[i]->value : 0;
    }
    pthread_mutex_unlock(&c->mu);
    return tb_epoch(t->run, &e, err);
}

status_t chief_tb_close(chief_tb_t *t, bool ok, status_msg_t *err)
{
    status_t rc = tb_close(t->run, ok ? err : NULL);

    t->run = NULL;
    return ok ? rc : STATUS_OK;
}
