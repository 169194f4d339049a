/* tessera cluster: one line per task with its role, index, address and health. */
#include <stdio.h>
#include <stdlib.h>

#include <grpc/grpc.h>

#include "cli.h"
#include "base/file.h"
#include "daemon/cluster.h"
#include "daemon/config.h"
#include "rpc/client.h"
#include "rpc/security.h"

typedef struct cluster_cmd_opts {
    char *chief;
    char *cluster_file;
    int64_t timeout_ms;
    cli_tls_t tls;
} cluster_cmd_opts_t;

static const config_option_t cluster_options[] = {
    {"chief", CONFIG_ADDRESS, offsetof(cluster_cmd_opts_t, chief), NULL, 0, 0,
     "Address of a running chief, HOST:PORT; it reports every task of its cluster."},
    {"cluster-file", CONFIG_STRING, offsetof(cluster_cmd_opts_t, cluster_file), NULL, 0, 0,
     "A JSON file in TF_CONFIG's format ({\"cluster\": {...}}) naming the tasks to check."},
    {"timeout", CONFIG_DURATION_MS, offsetof(cluster_cmd_opts_t, timeout_ms), "2s", 10, 600000,
     "How long to wait for each answer."},
    CLI_TLS_ROWS(cluster_cmd_opts_t, tls),
};

static const config_table_t cluster_table = {
    .program = "tessera cluster",
    .summary = "Shows every task of a cluster and its health; exits 1 if any is unhealthy. The "
               "cluster comes from --chief, --cluster-file or $TF_CONFIG.",
    .options = cluster_options,
    .n_options = sizeof(cluster_options) / sizeof(cluster_options[0]),
};

static const char *const type_names[] = {"?", "chief", "worker", "ps", "evaluator", "client"};
static const char *const health_names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "UNREACHABLE"};

size_t cli_print_tasks(Tessera__V1__TaskStatus *const *tasks, size_t n)
{
    size_t bad = 0;

    printf("%-10s %-5s %-24s %-12s %s\n", "ROLE", "INDEX", "ADDRESS", "HEALTH", "DETAIL");
    for (size_t i = 0; i < n; i++) {
        const Tessera__V1__TaskStatus *t = tasks[i];
        int type = t->task && t->task->type >= 0 && t->task->type <= 5 ? (int)t->task->type : 0;
        int h = t->health >= 0 && t->health <= 3 ? (int)t->health : 0;
        char detail[600];
        if (t->health == TESSERA__V1__TASK_HEALTH__TASK_HEALTH_SERVING)
            snprintf(detail, sizeof(detail), "%.1f ms", t->latency_seconds * 1e3);
        else
            snprintf(detail, sizeof(detail), "%s", t->detail ? t->detail : "");
        printf("%-10s %-5d %-24s %-12s %s\n", type_names[type], t->task ? t->task->index : -1,
               t->task && t->task->address ? t->task->address : "-", health_names[h], detail);
        bad += t->health != TESSERA__V1__TASK_HEALTH__TASK_HEALTH_SERVING;
    }
    printf("%zu tasks, %zu healthy\n", n, n - bad);
    return bad;
}

int cli_cluster_from_chief(const char *addr, int64_t timeout_ms)
{
    Tessera__V1__GetClusterRequest req = TESSERA__V1__GET_CLUSTER_REQUEST__INIT;
    Tessera__V1__GetClusterResponse *resp = NULL;
    rpc_call_opts_t opts = {.timeout_ms = timeout_ms};
    rpc_channel_t *ch;
    status_msg_t msg;
    rpc_error_t err;
    size_t bad;

    if (rpc_channel_new(addr, NULL, &ch, &msg) != STATUS_OK) {
        fprintf(stderr, "tessera cluster: %s\n", msg.text);
        return 2;
    }
    if (rpc_coord_get_cluster(ch, &req, &opts, &resp, NULL, &err) != STATUS_OK) {
        fprintf(stderr, "tessera cluster: the chief at %s did not answer: %s\n", addr, err.message);
        rpc_channel_free(ch);
        return 1;
    }
    bad = cli_print_tasks(resp->tasks, resp->n_tasks);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    rpc_channel_free(ch);
    return bad ? 1 : 0;
}

/* Probes every task of a TF_CONFIG-style spec from here. */
static int cluster_from_spec(const cluster_spec_t *spec, int64_t timeout_ms)
{
    size_t n = 0, k = 0, bad;
    const char **targets;
    health_state_t *states;
    rpc_error_t *errs;
    double *secs;
    Tessera__V1__TaskStatus *tasks, **ptrs;
    Tessera__V1__TaskId *ids;

    for (int t = 0; t < CLUSTER_TASK_TYPE_COUNT_; t++)
        n += spec->jobs[t].n;
    targets = calloc(n + 1, sizeof(*targets));
    states = calloc(n + 1, sizeof(*states));
    errs = calloc(n + 1, sizeof(*errs));
    secs = calloc(n + 1, sizeof(*secs));
    tasks = calloc(n + 1, sizeof(*tasks));
    ptrs = calloc(n + 1, sizeof(*ptrs));
    ids = calloc(n + 1, sizeof(*ids));
    if (!targets || !states || !errs || !secs || !tasks || !ptrs || !ids) {
        fprintf(stderr, "tessera cluster: out of memory\n");
        bad = 1;
        goto out;
    }
    for (int t = 0; t < CLUSTER_TASK_TYPE_COUNT_; t++)
        for (size_t i = 0; i < spec->jobs[t].n; i++)
            targets[k++] = spec->jobs[t].addrs[i];
    health_check_many(targets, n, timeout_ms, states, errs, secs);
    k = 0;
    for (int t = 0; t < CLUSTER_TASK_TYPE_COUNT_; t++) {
        static const int proto_type[] = {1, 2, 3, 4};
        for (size_t i = 0; i < spec->jobs[t].n; i++, k++) {
            tessera__v1__task_status__init(&tasks[k]);
            tessera__v1__task_id__init(&ids[k]);
            ids[k].type = (Tessera__V1__TaskType)proto_type[t];
            ids[k].index = (int32_t)i;
            ids[k].address = (char *)(targets[k] ? targets[k] : "-");
            tasks[k].task = &ids[k];
            tasks[k].health = (Tessera__V1__TaskHealth)states[k];
            tasks[k].detail = errs[k].message;
            tasks[k].latency_seconds = secs[k];
            ptrs[k] = &tasks[k];
        }
    }
    bad = cli_print_tasks(ptrs, n);
out:
    free(targets);
    free(states);
    free(errs);
    free(secs);
    free(tasks);
    free(ptrs);
    free(ids);
    return bad ? 1 : 0;
}

/* The largest --cluster-file read: a TF_CONFIG of thousands of tasks is well under it. */
#define CLUSTER_FILE_MAX ((size_t)16 << 20)

int cli_cluster(int argc, char **argv)
{
    cluster_cmd_opts_t o = {0};
    config_action_t action;
    status_msg_t err = {0};
    cluster_spec_t spec;
    bool present = false;
    int rc = 2;

    cluster_spec_init(&spec);
    if (config_load(&cluster_table, &o, argc, argv, &action, &err) != STATUS_OK) {
        fprintf(stderr, "tessera cluster: %s\n", err.text);
        goto out;
    }
    if (action != CONFIG_RUN) {
        rc = 0;
        goto out;
    }
    if (cli_tls_init("cluster", &o.tls) != 0)
        goto out;
    grpc_init();
    if (o.chief != NULL) {
        rc = cli_cluster_from_chief(o.chief, o.timeout_ms);
    } else if (o.cluster_file != NULL) {
        char *json = NULL;
        size_t len;
        if (file_read_all(o.cluster_file, "cluster file", CLUSTER_FILE_MAX, &json, &len, &err) !=
            STATUS_OK)
            fprintf(stderr, "tessera cluster: %s\n", err.text);
        else if (cluster_spec_parse_tf_config(json, &spec, &err) != STATUS_OK)
            fprintf(stderr, "tessera cluster: %s: %s\n", o.cluster_file, err.text);
        else
            rc = cluster_from_spec(&spec, o.timeout_ms);
        free(json);
    } else if (cluster_spec_from_env(&spec, &present, &err) != STATUS_OK) {
        fprintf(stderr, "tessera cluster: %s\n", err.text);
    } else if (!present) {
        fprintf(stderr, "tessera cluster: name the cluster with --chief HOST:PORT, "
                        "--cluster-file FILE or $TF_CONFIG\n");
    } else {
        rc = cluster_from_spec(&spec, o.timeout_ms);
    }
    grpc_shutdown();
out:
    rpc_security_done();
    cluster_spec_done(&spec);
    config_done(&cluster_table, &o);
    return rc;
}
