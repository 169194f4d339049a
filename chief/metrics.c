/* The chief's metrics of failures and recoveries (internal.h), beside the daemon's own. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/* One counter per task: name{task="worker:3"}. */
#define FAILURES_HELP "Times a task was lost (killed, unreachable, hung), by task."
#define SEEN_HELP                                                                                  \
    "Unix time of the task's last answered health check (workers of a running job, checked "       \
    "each second)."

static metric_t *one_task(metrics_t *m, const char *name, const char *help, const char *type,
                          size_t i, bool gauge)
{
    char task[32];

    snprintf(task, sizeof(task), "%s:%zu", type, i);
    const char *labels[] = {"task", task, NULL};
    return gauge ? metrics_gauge(m, name, help, labels) : metrics_counter(m, name, help, labels);
}

/* One series per task, name{task="worker:3"}, for the first n of room. */
static metric_t **per_task(metrics_t *m, const char *name, const char *help, const char *type,
                           size_t n, size_t room, bool gauge)
{
    metric_t **v = calloc(room + 1, sizeof(*v));

    for (size_t i = 0; v != NULL && i < n; i++)
        v[i] = one_task(m, name, help, type, i, gauge);
    return v;
}

void chief_metrics_add_worker(coordinator_t *c, size_t w)
{
    metrics_t *m = daemon_metrics(c->daemon);

    if (m == NULL || c->m_worker_failures == NULL || c->m_worker_seen == NULL)
        return;
    c->m_worker_failures[w] =
        one_task(m, "tessera_chief_task_failures_total", FAILURES_HELP, "worker", w, false);
    c->m_worker_seen[w] =
        one_task(m, "tessera_chief_task_last_seen_timestamp_seconds", SEEN_HELP, "worker", w, true);
}

status_t chief_metrics_init(coordinator_t *c, status_msg_t *err)
{
    metrics_t *m = daemon_metrics(c->daemon);

    if (m == NULL)
        return STATUS_OK;
    c->m_closures = metrics_counter(m, "tessera_chief_closures_total",
                                    "Training closures the workers completed.", NULL);
    c->m_retried =
        metrics_counter(m, "tessera_chief_closures_retried_total",
                        "Closures handed back to the queue because their worker was lost.", NULL);
    c->m_running = metrics_gauge(m, "tessera_chief_closures_running",
                                 "Closures of the running job in flight on workers.", NULL);
    c->m_queued = metrics_gauge(m, "tessera_chief_closures_queued",
                                "Closures of the running job's epoch not handed out yet.", NULL);
    c->m_workers_alive = metrics_gauge(m, "tessera_chief_workers_alive",
                                       "Workers the running job uses (0 when no job runs).", NULL);
    c->m_ps_recoveries =
        metrics_counter(m, "tessera_chief_ps_recoveries_total",
                        "Times a job went on from its checkpoint after a lost PS came back.", NULL);
    c->m_worker_rejoins = metrics_counter(
        m, "tessera_chief_worker_rejoins_total",
        "Times a lost worker answered again and was taken back into the running job.", NULL);
    c->m_worker_joins = metrics_counter(
        m, "tessera_chief_worker_joins_total",
        "Workers that announced themselves while a job ran and were taken into it.", NULL);
    c->m_worker_failures = per_task(m, "tessera_chief_task_failures_total", FAILURES_HELP, "worker",
                                    c->n_workers, c->cap_workers, false);
    c->m_ps_failures = per_task(m, "tessera_chief_task_failures_total", FAILURES_HELP, "ps",
                                c->n_ps, c->n_ps, false);
    c->m_worker_seen = per_task(m, "tessera_chief_task_last_seen_timestamp_seconds", SEEN_HELP,
                                "worker", c->n_workers, c->cap_workers, true);
    if (c->m_worker_failures == NULL || c->m_ps_failures == NULL || c->m_worker_seen == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    return STATUS_OK;
}

void chief_metrics_free(coordinator_t *c)
{
    free(c->m_worker_failures);
    free(c->m_ps_failures);
    free(c->m_worker_seen);
}

void chief_metrics_alive(coordinator_t *c, const bool *alive, size_t n)
{
    size_t live = 0;

    for (size_t i = 0; alive != NULL && i < n; i++)
        live += alive[i];
    metric_set(c->m_workers_alive, (double)live);
}
