/* The coordinator's lifetime: channels to the tasks, the runner and watch threads, the handlers.
 * The parts are listed in internal.h. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/net.h"

#include "internal.h"

static status_t open_channels(const config_list_t *l, size_t room, rpc_channel_t ***ret,
                              size_t *ret_n, status_msg_t *err)
{
    rpc_channel_t **chans = calloc(room + 1, sizeof(*chans));
    rpc_channel_opts_t o = {.timeout_ms = CONTROL_TIMEOUT};
    if (chans == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    *ret = chans;
    *ret_n = 0;
    for (size_t i = 0; i < l->n; i++) {
        STATUS_CHECK(rpc_channel_new(l->items[i], &o, &chans[i], err));
        (*ret_n)++;
    }
    return STATUS_OK;
}

status_t coordinator_new(daemon_t *d, chief_opts_t *opts, coordinator_t **ret, status_msg_t *err)
{
    coordinator_t *c = calloc(1, sizeof(*c));
    rpc_server_t *s = daemon_rpc(d);
    status_t rc;

    if (c == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    c->daemon = d;
    c->opts = opts;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_cond_init(&c->watch_cv, NULL);
    rc = open_channels(&opts->ps, opts->ps.n, &c->ps, &c->n_ps, err);
    c->cap_workers = opts->worker.n + CHIEF_MAX_JOINED;
    if (rc == STATUS_OK)
        rc = open_channels(&opts->worker, c->cap_workers, &c->workers, &c->n_workers, err);
    if (rc == STATUS_OK) /* after the channels: the journal names the workers that joined */
        rc = chief_journal_open(c, err);
    if (rc == STATUS_OK)
        rc = chief_metrics_init(c, err);
    if (rc == STATUS_OK && pthread_create(&c->runner, NULL, chief_runner_main, c) != 0)
        rc = status_fail(err, STATUS_SYSTEM, "cannot start the job runner");
    else if (rc == STATUS_OK)
        c->runner_started = true;
    if (rc == STATUS_OK)
        rc = chief_watch_start(c, s, err);
    if (rc != STATUS_OK) {
        coordinator_free(c);
        return rc;
    }
    chief_handlers_register(c, s);
    *ret = c;
    return STATUS_OK;
}

void coordinator_stop(coordinator_t *c)
{
    chief_job_t *running = NULL;
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    for (chief_job_t *j = c->jobs; j; j = j->next)
        if (j->state == TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING) {
            atomic_store(&j->cancel, true);
            running = j;
        }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (running != NULL)
        chief_cancel_workers(c, running);
    if (c->runner_started)
        pthread_join(c->runner, NULL);
    c->runner_started = false;
    chief_watch_stop(c);
}

void coordinator_free(coordinator_t *c)
{
    if (c == NULL)
        return;
    coordinator_stop(c);
    chief_watch_free(c);
    while (c->jobs != NULL) {
        chief_job_t *j = c->jobs;
        c->jobs = j->next;
        chief_job_free(j);
    }
    for (size_t i = 0; i < c->n_ps; i++)
        rpc_channel_free(c->ps[i]);
    for (size_t i = 0; i < c->n_workers; i++)
        rpc_channel_free(c->workers[i]);
    free(c->ps);
    free(c->workers);
    for (size_t i = 0; i < c->n_joining; i++)
        free(c->joining[i]);
    free(c->joining);
    chief_journal_close(c);
    chief_metrics_free(c);
    pthread_cond_destroy(&c->watch_cv);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

status_t chief_register_worker(coordinator_t *c, const char *address, size_t *ret_index,
                               bool *ret_added, status_msg_t *err)
{
    char **joining;

    *ret_added = false;
    if (!net_hostport_valid(address))
        return status_fail(err, STATUS_INVALID_ARGUMENT, "\"%s\" is not a HOST:PORT address",
                           address);
    for (size_t w = 0; w < c->n_workers; w++)
        if (strcmp(rpc_channel_target(c->workers[w]), address) == 0) {
            *ret_index = w;
            return STATUS_OK;
        }
    for (size_t k = 0; k < c->n_joining; k++)
        if (strcmp(c->joining[k], address) == 0) {
            *ret_index = c->n_workers + k;
            return STATUS_OK;
        }
    if (c->n_workers + c->n_joining >= c->cap_workers)
        return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                           "this chief has room for %zu workers, all taken (%d may join past its "
                           "--worker list)",
                           c->cap_workers, CHIEF_MAX_JOINED);
    joining = realloc(c->joining, (c->n_joining + 1) * sizeof(*joining));
    if (joining == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    c->joining = joining;
    if ((c->joining[c->n_joining] = strdup(address)) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    *ret_index = c->n_workers + c->n_joining++;
    *ret_added = true;
    pthread_cond_broadcast(&c->cv); /* the runner takes it in */
    return STATUS_OK;
}

void chief_adopt_workers(coordinator_t *c)
{
    rpc_channel_opts_t o = {.timeout_ms = CONTROL_TIMEOUT};

    for (size_t k = 0; k < c->n_joining; k++) {
        status_msg_t err = {0};
        size_t w = c->n_workers;
        if (rpc_channel_new(c->joining[k], &o, &c->workers[w], &err) != STATUS_OK) {
            LOG_WARNING(CHIEF, "worker %s announced itself but cannot be reached: %s",
                        c->joining[k], err.text);
        } else {
            chief_metrics_add_worker(c, w);
            c->n_workers = w + 1;
            chief_journal_worker(c, c->joining[k]);
            LOG_NOTICE(CHIEF, "worker %zu (%s) joined the cluster", w, c->joining[k]);
        }
        free(c->joining[k]);
    }
    c->n_joining = 0;
}

size_t coordinator_tasks(coordinator_t *c, char ***ret, size_t *ret_n_ps)
{
    size_t n;
    char **t;

    pthread_mutex_lock(&c->mu);
    n = c->n_ps + c->n_workers + c->n_joining;
    t = calloc(n + 1, sizeof(*t));
    for (size_t i = 0; t != NULL && i < n; i++) {
        const char *a = i < c->n_ps                  ? rpc_channel_target(c->ps[i])
                        : i < c->n_ps + c->n_workers ? rpc_channel_target(c->workers[i - c->n_ps])
                                                     : c->joining[i - c->n_ps - c->n_workers];
        t[i] = strdup(a);
    }
    *ret_n_ps = c->n_ps;
    pthread_mutex_unlock(&c->mu);
    *ret = t;
    return t != NULL ? n : 0;
}
