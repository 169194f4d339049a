/* The coordinator's lifetime: channels to the tasks, the runner and watch threads, the handlers.
 * The parts are listed in internal.h. */
#define _POSIX_C_SOURCE 200809L
#include "coordinator.h"

#include <stdlib.h>

#include "internal.h"

static status_t open_channels(const config_list_t *l, rpc_channel_t ***ret, size_t *ret_n,
                              status_msg_t *err)
{
    rpc_channel_t **chans = calloc(l->n + 1, sizeof(*chans));
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
    rc = chief_journal_open(c, err);
    if (rc == STATUS_OK)
        rc = open_channels(&opts->ps, &c->ps, &c->n_ps, err);
    if (rc == STATUS_OK)
        rc = open_channels(&opts->worker, &c->workers, &c->n_workers, err);
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
    chief_journal_close(c);
    chief_metrics_free(c);
    pthread_cond_destroy(&c->watch_cv);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
