/* The chief's job table: queued, running and ended jobs, their events, and the limits on what
 * clients may leave in it. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "internal.h"

void chief_job_changed(coordinator_t *c)
{
    c->changes++;
    pthread_cond_broadcast(&c->watch_cv);
}

static void job_event_v(coordinator_t *c, chief_job_t *j, const char *fmt, va_list ap)
{
    char buf[600];
    size_t slot = j->n_events % CHIEF_MAX_EVENTS;

    vsnprintf(buf, sizeof(buf), fmt, ap);
    free(j->events[slot]);
    j->events[slot] = strdup(buf); /* NULL (out of memory) reads as an empty message */
    j->event_times[slot] = clock_wall_s();
    j->n_events++;
    LOG_INFO(CHIEF, "job %s: %s", j->id, buf);
    pthread_cond_broadcast(&c->cv);
    chief_job_changed(c);
}

void chief_job_event(coordinator_t *c, chief_job_t *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    job_event_v(c, j, fmt, ap);
    va_end(ap);
}

void chief_epoch_event(coordinator_t *c, chief_job_t *j, int64_t epoch, bool evaluated)
{
    const Tessera__V1__JobProgress *p = &j->progress;
    char acc[2][48] = {"", ""};

    if (job_reports_accuracy(&j->job)) {
        snprintf(acc[0], sizeof(acc[0]), ", accuracy %.4f", p->accuracy);
        snprintf(acc[1], sizeof(acc[1]), ", test accuracy %.4f", p->test_accuracy);
    }
    if (evaluated)
        chief_job_event(c, j, "epoch %lld: loss %.4f%s, test loss %.4f%s", (long long)epoch + 1,
                        p->loss, acc[0], p->test_loss, acc[1]);
    else
        chief_job_event(c, j, "epoch %lld: loss %.4f%s", (long long)epoch + 1, p->loss, acc[0]);
}

bool chief_job_ended(const chief_job_t *j)
{
    return j->state == TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED ||
           j->state == TESSERA__V1__JOB_STATE__JOB_STATE_FAILED ||
           j->state == TESSERA__V1__JOB_STATE__JOB_STATE_CANCELLED;
}

void chief_job_release(chief_job_t *j)
{
    for (size_t i = 0; i < j->n_files; i++) {
        free(j->files[i].path);
        free(j->files[i].data);
    }
    free(j->files);
    free(j->spec);
    free(j->path);
    j->files = NULL;
    j->n_files = 0;
    j->spec = j->path = NULL;
}

void chief_job_free(chief_job_t *j)
{
    if (j == NULL)
        return;
    chief_job_release(j);
    for (size_t i = 0; i < CHIEF_MAX_EVENTS; i++)
        free(j->events[i]);
    job_done(&j->job);
    free(j);
}

/* Drops the oldest ended jobs past --max-finished-jobs that no watcher holds. */
void chief_jobs_prune(coordinator_t *c)
{
    size_t ended = 0;

    for (chief_job_t *j = c->jobs; j != NULL; j = j->next)
        ended += chief_job_ended(j);
    for (chief_job_t **p = &c->jobs, *prev = NULL;
         *p != NULL && ended > (size_t)c->opts->max_finished_jobs;) {
        chief_job_t *j = *p;
        if (!chief_job_ended(j) || j->holds > 0) {
            prev = j;
            p = &j->next;
            continue;
        }
        *p = j->next;
        if (c->last == j)
            c->last = prev;
        chief_job_free(j);
        ended--;
    }
}

void chief_job_end(coordinator_t *c, chief_job_t *j, Tessera__V1__JobState state, const char *fmt,
                   ...)
{
    va_list ap;

    j->state = state;
    j->finished_at = clock_wall_s();
    if (j->started_at > 0)
        j->progress.elapsed_seconds = j->finished_at - j->started_at;
    va_start(ap, fmt);
    job_event_v(c, j, fmt, ap);
    va_end(ap);
    chief_job_release(j); /* the job file and its files were for the workers */
    chief_journal_ended(c, j);
    chief_jobs_prune(c);
}

/* Copies the job file and the files that came with it, for configuring the workers. */
static status_t copy_files(const Tessera__V1__SubmitJobRequest *req, chief_job_t *j,
                           status_msg_t *err)
{
    j->spec = strdup(req->job_spec);
    j->path = strdup(req->job_path);
    j->files = calloc(req->n_files + 1, sizeof(*j->files));
    if (j->spec == NULL || j->path == NULL || j->files == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory for the job file");
    for (size_t i = 0; i < req->n_files; i++) {
        job_file_copy_t *f = &j->files[i];
        j->n_files++;
        f->path = strdup(req->files[i]->key);
        f->len = req->files[i]->value.len;
        f->data = malloc(f->len + 1);
        if (f->path == NULL || f->data == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory for %s", req->files[i]->key);
        memcpy(f->data, req->files[i]->value.data, f->len);
    }
    return STATUS_OK;
}

status_t chief_job_new(const Tessera__V1__SubmitJobRequest *req, chief_job_t **ret,
                       status_msg_t *err)
{
    job_file_t *files = calloc(req->n_files + 1, sizeof(*files));
    chief_job_t *j = calloc(1, sizeof(*j));
    status_t rc;

    if (files == NULL || j == NULL) {
        free(files);
        free(j);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < req->n_files; i++)
        files[i] = (job_file_t){req->files[i]->key, (const char *)req->files[i]->value.data,
                                req->files[i]->value.len};
    rc = job_parse_with_files(req->job_spec, strlen(req->job_spec),
                              req->job_path[0] ? req->job_path : NULL, files, req->n_files, &j->job,
                              err);
    free(files);
    /* what the synchronous strategies do not do yet on a cluster is refused by name */
    if (rc == STATUS_OK && job_is_synchronous(&j->job)) {
        const char *missing = j->job.max_staleness > 0 ? "max_staleness" : NULL;
        if (missing != NULL)
            rc = status_fail(err, STATUS_BAD_CONFIG, "%s: %s is not available for %s jobs yet",
                             req->job_path[0] ? req->job_path : "job", missing,
                             j->job.strategy == JOB_STRATEGY_MIRRORED ? "mirrored"
                             : j->job.strategy == JOB_STRATEGY_CENTRAL_STORAGE
                                 ? "central_storage"
                                 : "multi_worker_mirrored");
    }
    if (rc == STATUS_OK && j->job.init_from != NULL && j->job.init_from[0] != '/')
        rc = status_fail(err, STATUS_BAD_CONFIG,
                         "%s: init_from \"%s\" must be an absolute path when the job is "
                         "submitted without its file's path (tessera submit sends it)",
                         req->job_path[0] ? req->job_path : "job", j->job.init_from);
    /* The chief and the PS tasks write there: a relative path would mean their working
     * directories, not the one the user had in mind. */
    if (rc == STATUS_OK && j->job.checkpoint_dir != NULL && j->job.checkpoint_dir[0] != '/')
        rc = status_fail(err, STATUS_BAD_CONFIG,
                         "%s: checkpoint.dir \"%s\" must be an absolute path when the job is "
                         "submitted without its file's path (tessera submit sends it)",
                         req->job_path[0] ? req->job_path : "job", j->job.checkpoint_dir);
    if (rc == STATUS_OK && j->job.tensorboard_logdir != NULL && j->job.tensorboard_logdir[0] != '/')
        rc = status_fail(err, STATUS_BAD_CONFIG,
                         "%s: tensorboard.logdir \"%s\" must be an absolute path when the job is "
                         "submitted without its file's path (tessera submit sends it)",
                         req->job_path[0] ? req->job_path : "job", j->job.tensorboard_logdir);
    if (rc == STATUS_OK)
        rc = copy_files(req, j, err);
    if (rc != STATUS_OK) {
        chief_job_free(j);
        return rc;
    }
    snprintf(j->name, sizeof(j->name), "%s", j->job.name ? j->job.name : "job");
    tessera__v1__job_progress__init(&j->progress);
    j->progress.no_accuracy = !job_reports_accuracy(&j->job);
    chief_job_metrics_init(j);
    j->state = TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED;
    j->submitted_at = clock_wall_s();
    *ret = j;
    return STATUS_OK;
}

status_t chief_jobs_add(coordinator_t *c, chief_job_t *j, status_msg_t *err)
{
    status_msg_t jerr = {0};
    size_t queued = 0;

    for (chief_job_t *k = c->jobs; k != NULL; k = k->next)
        queued += k->state == TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED;
    if (queued >= (size_t)c->opts->max_queued_jobs)
        return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                           "%zu jobs are already queued on this chief (--max-queued-jobs %lld): "
                           "wait for them or cancel some",
                           queued, (long long)c->opts->max_queued_jobs);
    snprintf(j->id, sizeof(j->id), "%s-%u", j->name, ++c->next_id);
    /* on the disk before the client hears that it was taken */
    if (chief_journal_submitted(c, j, &jerr) != STATUS_OK) {
        c->next_id--;
        return status_fail(err, jerr.status, "the job cannot be recorded: %s", jerr.text);
    }
    chief_jobs_link(c, j);
    chief_job_event(c, j, "queued");
    return STATUS_OK;
}

void chief_jobs_link(coordinator_t *c, chief_job_t *j)
{
    j->next = NULL;
    if (c->last)
        c->last->next = j;
    else
        c->jobs = j;
    c->last = j;
}

chief_job_t *chief_find_job(coordinator_t *c, const char *id)
{
    chief_job_t *by_name = NULL;
    for (chief_job_t *j = c->jobs; j != NULL; j = j->next) {
        if (strcmp(j->id, id) == 0)
            return j;
        if (strcmp(j->name, id) == 0)
            by_name = j;
    }
    return by_name;
}

chief_job_t *chief_next_queued(coordinator_t *c)
{
    for (chief_job_t *j = c->jobs; j != NULL; j = j->next)
        if (j->state == TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED)
            return j;
    return NULL;
}

/* n metrics named names[i] (each cut to 63 bytes), all 0. */
static void metrics_init(chief_job_t *j, size_t n, const char *(*name_of)(const void *, size_t),
                         const void *arg)
{
    n = n < JOB_MAX_METRICS ? n : JOB_MAX_METRICS;
    for (size_t i = 0; i < n; i++) {
        snprintf(j->metric_names[i], sizeof(j->metric_names[i]), "%s", name_of(arg, i));
        for (int t = 0; t < 2; t++) {
            tessera__v1__metric_value__init(&j->metric_values[t][i]);
            j->metric_values[t][i].name = j->metric_names[i];
            j->metric_ptrs[t][i] = &j->metric_values[t][i];
        }
    }
    j->progress.n_metrics = n;
    j->progress.metrics = j->metric_ptrs[0];
    j->progress.n_test_metrics = 0;
    j->progress.test_metrics = j->metric_ptrs[1];
}

static const char *job_metric_name(const void *arg, size_t i)
{
    return ((const job_t *)arg)->metrics[i].name;
}

static const char *progress_metric_name(const void *arg, size_t i)
{
    const Tessera__V1__MetricValue *v = ((const Tessera__V1__JobProgress *)arg)->metrics[i];
    return v->name != NULL ? v->name : "";
}

void chief_job_metrics_init(chief_job_t *j)
{
    metrics_init(j, (size_t)j->job.n_metrics, job_metric_name, &j->job);
}

void chief_job_metrics_adopt(chief_job_t *j, const Tessera__V1__JobProgress *p)
{
    size_t n;

    metrics_init(j, p->n_metrics, progress_metric_name, p);
    n = j->progress.n_metrics;
    for (size_t i = 0; i < n; i++)
        j->progress.metrics[i]->value = p->metrics[i]->value;
    if (p->n_test_metrics == p->n_metrics) {
        for (size_t i = 0; i < n; i++)
            j->progress.test_metrics[i]->value = p->test_metrics[i]->value;
        j->progress.n_test_metrics = n;
    }
}

void chief_job_info(const chief_job_t *j, Tessera__V1__JobInfo *info, Tessera__V1__JobProgress *pr)
{
    tessera__v1__job_info__init(info);
    *pr = j->progress;
    info->id = (char *)j->id;
    info->name = (char *)j->name;
    info->state = j->state;
    info->reason = (char *)j->reason;
    info->failed_task = (char *)j->failed_task;
    info->fault = (Tessera__V1__Fault)j->fault;
    info->progress = pr;
    info->submitted_at = j->submitted_at;
    info->started_at = j->started_at;
    info->finished_at = j->finished_at;
    if (j->state == TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING)
        pr->elapsed_seconds = clock_wall_s() - j->started_at;
}
