/* The chief's view of the cluster: Coordinator.GetCluster reports every task with its health. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chief.h"
#include "coordinator.h"
#include "rpc/health.h"
#include "base/log.h"
#include "tessera/v1/common.pb-c.h"
#include "rpc/server.h"

typedef struct chief_state {
    daemon_t *daemon;
    chief_opts_t *opts;
    coordinator_t *coordinator;
} chief_state_t;

static status_t set_list(const config_table_t *t, void *opts, const char *key,
                         const cluster_job_t *job, status_msg_t *err)
{
    char buf[8192];
    size_t n = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < job->n; i++) {
        if (job->addrs[i] == NULL)
            return status_fail(err, STATUS_BAD_TF_CONFIG,
                               "TF_CONFIG: cluster.%s has no task %zu; the chief needs every "
                               "task's address",
                               key, i);
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? "," : "", job->addrs[i]);
        if (n >= sizeof(buf))
            return status_fail(err, STATUS_BAD_TF_CONFIG, "TF_CONFIG: cluster.%s is too long", key);
    }
    if (job->n == 0)
        return STATUS_OK;
    return config_set(t, opts, key, buf, "TF_CONFIG", err);
}

status_t chief_apply_tf_config(const config_table_t *t, void *opts, const cluster_spec_t *spec,
                               status_msg_t *err)
{
    if (spec->has_task)
        STATUS_CHECK(daemon_apply_tf_config(t, opts, spec, CLUSTER_CHIEF, err));
    STATUS_CHECK(set_list(t, opts, "ps", &spec->jobs[CLUSTER_PS], err));
    return set_list(t, opts, "worker", &spec->jobs[CLUSTER_WORKER], err);
}

status_t chief_lead_opts(chief_opts_t *o, const cluster_spec_t *spec, status_msg_t *err)
{
    memset(o, 0, sizeof(*o));
    STATUS_CHECK(config_defaults(&chief_table, o, err));
    STATUS_CHECK(set_list(&chief_table, o, "ps", &spec->jobs[CLUSTER_PS], err));
    return set_list(&chief_table, o, "worker", &spec->jobs[CLUSTER_WORKER], err);
}

static status_t on_get_cluster(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    chief_state_t *st = user;
    chief_opts_t *o = st->opts;
    char **addrs = NULL;
    size_t n_ps, n = coordinator_tasks(st->coordinator, &addrs, &n_ps);
    Tessera__V1__GetClusterResponse resp = TESSERA__V1__GET_CLUSTER_RESPONSE__INIT;
    Tessera__V1__TaskStatus *tasks = calloc(n + 1, sizeof(*tasks));
    Tessera__V1__TaskStatus **ptrs = calloc(n + 1, sizeof(*ptrs));
    Tessera__V1__TaskId *ids = calloc(n + 1, sizeof(*ids));
    const char **targets = calloc(n ? n : 1, sizeof(*targets));
    health_state_t *states = calloc(n ? n : 1, sizeof(*states));
    rpc_error_t *errs = calloc(n ? n : 1, sizeof(*errs));
    double *secs = calloc(n ? n : 1, sizeof(*secs));
    char self[1] = "";
    status_t rc;

    (void)msg;
    if (!tasks || !ptrs || !ids || !targets || !states || !errs || !secs || !addrs) {
        rc = rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        targets[i] = addrs[i] != NULL ? addrs[i] : "";
    health_check_many(targets, n, o->health_timeout_ms, states, errs, secs);

    for (size_t i = 0; i <= n; i++) {
        tessera__v1__task_status__init(&tasks[i]);
        tessera__v1__task_id__init(&ids[i]);
        tasks[i].task = &ids[i];
        ptrs[i] = &tasks[i];
        if (i == 0) { /* the chief itself: it is answering, so it serves */
            ids[i].type = TESSERA__V1__TASK_TYPE__TASK_TYPE_CHIEF;
            ids[i].index = (int32_t)o->common.task_index;
            ids[i].address = (char *)daemon_address(st->daemon);
            tasks[i].health = TESSERA__V1__TASK_HEALTH__TASK_HEALTH_SERVING;
            tasks[i].detail = self;
            continue;
        }
        size_t k = i - 1;
        bool is_ps = k < n_ps;
        ids[i].type =
            is_ps ? TESSERA__V1__TASK_TYPE__TASK_TYPE_PS : TESSERA__V1__TASK_TYPE__TASK_TYPE_WORKER;
        ids[i].index = (int32_t)(is_ps ? k : k - n_ps);
        ids[i].address = (char *)targets[k];
        tasks[i].health = (Tessera__V1__TaskHealth)states[k];
        tasks[i].detail = states[k] == HEALTH_UNREACHABLE ? errs[k].message : self;
        tasks[i].latency_seconds = secs[k];
    }
    resp.n_tasks = n + 1;
    resp.tasks = ptrs;
    rc = rpc_ctx_respond(ctx, &resp.base, NULL, 0);
out:
    for (size_t i = 0; addrs != NULL && i < n; i++)
        free(addrs[i]);
    free(addrs);
    free(tasks);
    free(ptrs);
    free(ids);
    free(targets);
    free(states);
    free(errs);
    free(secs);
    return rc;
}

static status_t chief_setup(daemon_t *d, void *opts, void **ret_state, status_msg_t *err)
{
    chief_state_t *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    st->daemon = d;
    st->opts = opts;
    rpc_server_handle(daemon_rpc(d), RPC_COORD_GET_CLUSTER, on_get_cluster, st);
    if (coordinator_new(d, st->opts, &st->coordinator, err) != STATUS_OK) {
        free(st);
        return err != NULL ? err->status : STATUS_INTERNAL;
    }
    LOG_INFO(CHIEF, "cluster: %zu ps, %zu workers (and up to %d more may join)", st->opts->ps.n,
             st->opts->worker.n, CHIEF_MAX_JOINED);
    *ret_state = st;
    return STATUS_OK;
}

static void chief_stop(void *state)
{
    chief_state_t *st = state;
    coordinator_stop(st->coordinator);
}

static void chief_teardown(void *state)
{
    chief_state_t *st = state;
    coordinator_free(st->coordinator);
    free(st);
}

static const char *const chief_services[] = {RPC_SVC_COORD, RPC_SVC_DIAG, NULL};

const daemon_spec_t chief_daemon_spec = {
    .program = "tessera-chief",
    .role = "chief",
    .task_type = TESSERA__V1__TASK_TYPE__TASK_TYPE_CHIEF,
    .services = chief_services,
    .setup = chief_setup,
    .stop = chief_stop,
    .teardown = chief_teardown,
};
