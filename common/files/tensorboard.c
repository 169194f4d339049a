#define _POSIX_C_SOURCE 200809L
#include "files/tensorboard.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "files/events.h"

#define HISTOGRAM_BUCKETS 30 /* tf.summary.histogram's default */

struct tb_run {
    tb_opts_t opts;
    events_writer_t *train, *validation;
};

status_t tb_open(const tb_opts_t *o, tb_run_t **ret, status_msg_t *err)
{
    tb_run_t *t = calloc(1, sizeof(*t));
    char dir[4096];
    status_t rc;

    *ret = NULL;
    if (t == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    t->opts = *o;
    t->opts.logdir = t->opts.job = NULL; /* not kept: the caller's strings */
    snprintf(dir, sizeof(dir), "%s/%s/train", o->logdir, o->job);
    rc = events_open(dir, &t->train, err);
    if (rc == STATUS_OK && !o->histograms_only) {
        snprintf(dir, sizeof(dir), "%s/%s/validation", o->logdir, o->job);
        rc = events_open(dir, &t->validation, err);
    }
    if (rc != STATUS_OK) {
        tb_close(t, NULL);
        return rc;
    }
    *ret = t;
    return STATUS_OK;
}

status_t tb_batch(tb_run_t *t, int64_t step, double loss, double accuracy, status_msg_t *err)
{
    double now;

    if (t->opts.update_freq <= 0 || step % t->opts.update_freq != 0)
        return STATUS_OK;
    now = clock_wall_s();
    STATUS_CHECK(events_scalar(t->train, "batch_loss", step, now, (float)loss, err));
    if (t->opts.accuracy)
        STATUS_CHECK(events_scalar(t->train, "batch_accuracy", step, now, (float)accuracy, err));
    return STATUS_OK;
}

static status_t metric_scalars(events_writer_t *w, const tb_epoch_t *e, const double *values,
                               double now, status_msg_t *err)
{
    char tag[96];

    for (int i = 0; values != NULL && i < e->n_metrics; i++) {
        snprintf(tag, sizeof(tag), "epoch_%s", e->metric_names[i]);
        STATUS_CHECK(events_scalar(w, tag, e->epoch, now, (float)values[i], err));
    }
    return STATUS_OK;
}

status_t tb_epoch(tb_run_t *t, const tb_epoch_t *e, status_msg_t *err)
{
    double now = clock_wall_s();
    events_writer_t *w = t->train;

    STATUS_CHECK(events_scalar(w, "epoch_loss", e->epoch, now, (float)e->loss, err));
    if (t->opts.accuracy)
        STATUS_CHECK(events_scalar(w, "epoch_accuracy", e->epoch, now, (float)e->accuracy, err));
    STATUS_CHECK(events_scalar(w, "learning_rate", e->epoch, now, (float)e->learning_rate, err));
    STATUS_CHECK(events_scalar(w, "epoch_examples_per_second", e->epoch, now,
                               (float)e->examples_per_second, err));
    STATUS_CHECK(
        events_scalar(w, "epoch_steps_per_second", e->epoch, now, (float)e->steps_per_second, err));
    STATUS_CHECK(metric_scalars(w, e, e->metrics, now, err));
    STATUS_CHECK(events_flush(w, err));
    if (!e->validated)
        return STATUS_OK;
    w = t->validation;
    STATUS_CHECK(events_scalar(w, "epoch_loss", e->epoch, now, (float)e->val_loss, err));
    if (t->opts.accuracy)
        STATUS_CHECK(
            events_scalar(w, "epoch_accuracy", e->epoch, now, (float)e->val_accuracy, err));
    STATUS_CHECK(metric_scalars(w, e, e->val_metrics, now, err));
    return events_flush(w, err);
}

bool tb_histograms_due(const tb_run_t *t, int64_t epoch)
{
    return t->opts.histogram_freq > 0 && epoch % t->opts.histogram_freq == 0;
}

status_t tb_histogram(tb_run_t *t, int64_t epoch, const char *weight, const float *values, size_t n,
                      status_msg_t *err)
{
    char tag[256];

    snprintf(tag, sizeof(tag), "%s/histogram", weight);
    return events_histogram(t->train, tag, epoch, clock_wall_s(), values, n, HISTOGRAM_BUCKETS,
                            err);
}

status_t tb_close(tb_run_t *t, status_msg_t *err)
{
    status_t rc, rc2;

    if (t == NULL)
        return STATUS_OK;
    rc = events_close(t->train, err);
    rc2 = events_close(t->validation, rc == STATUS_OK ? err : NULL);
    free(t);
    return rc != STATUS_OK ? rc : rc2;
}
