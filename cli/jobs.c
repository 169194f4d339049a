/* tessera submit / status / watch / cancel / checkpoint / list: jobs on a running chief. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "cli.h"
#include "daemon/cluster.h"
#include "daemon/config.h"
#include "job/job.h"
#include "rpc/client.h"
#include "rpc/security.h"
#include "base/clock.h"
#include "base/file.h"
#include "base/log.h"

typedef struct jobs_opts {
    char *chief;
    bool watch;
    int64_t timeout_ms;
    cli_tls_t tls;
} jobs_opts_t;

static const config_option_t jobs_options[] = {
    {"chief", CONFIG_ADDRESS, offsetof(jobs_opts_t, chief), NULL, 0, 0,
     "The chief, HOST:PORT (default: $TESSERA_CHIEF, else $TF_CONFIG's chief, or its worker 0 "
     "when it has none, who leads, else 127.0.0.1:2222)."},
    {"watch", CONFIG_BOOL, offsetof(jobs_opts_t, watch), "false", 0, 0,
     "submit: follow the job's progress until it ends."},
    {"timeout", CONFIG_DURATION_MS, offsetof(jobs_opts_t, timeout_ms), "10s", 10, 600000,
     "How long each call to the chief may take (checkpoint: at least 10 minutes, as a "
     "checkpoint waits for the closures in flight and the PS tasks' writes)."},
    CLI_TLS_ROWS(jobs_opts_t, tls),
};

static const config_table_t jobs_table = {
    .program = "tessera",
    .summary = "Talks to a running chief: submit JOB.yaml, status JOB, watch JOB, cancel JOB, "
               "checkpoint JOB, list.",
    .options = jobs_options,
    .n_options = sizeof(jobs_options) / sizeof(jobs_options[0]),
};

static const char *const state_names[] = {"unknown",   "queued", "running",
                                          "succeeded", "failed", "cancelled"};

/* " (fault: application, at worker:0)" for a failed job that names them, else "". */
static const char *fault_note(const Tessera__V1__JobInfo *j, char *buf, size_t len)
{
    static const char *const faults[] = {"unknown", "worker", "ps", "chief", "application"};
    int f = (int)j->fault;

    if (j->failed_task == NULL || j->failed_task[0] == '\0')
        return "";
    snprintf(buf, len, " (fault: %s, at %s)", f >= 0 && f <= 4 ? faults[f] : "unknown",
             j->failed_task);
    return buf;
}

static const char *state_name(Tessera__V1__JobState s)
{
    return (int)s >= 0 && (int)s <= 5 ? state_names[s] : "unknown";
}

const char *cli_take_positional(int *argc, char **argv)
{
    for (int i = 1; i < *argc; i++) {
        if (argv[i][0] == '-') {
            /* a flag's separate value follows flags that take one */
            if (strchr(argv[i], '=') == NULL && strncmp(argv[i], "--no-", 5) != 0 &&
                strcmp(argv[i], "--help") != 0 && strcmp(argv[i], "-h") != 0 &&
                strcmp(argv[i], "--watch") != 0 && strcmp(argv[i], "--local") != 0 &&
                strcmp(argv[i], "--keep") != 0)
                i++;
            continue;
        }
        const char *p = argv[i];
        memmove(&argv[i], &argv[i + 1], (size_t)(*argc - i) * sizeof(*argv));
        (*argc)--;
        return p;
    }
    return NULL;
}

/* Whether the progress holds an evaluation's numbers (a chief's journal from before
 * `evaluated` existed: a test accuracy or loss not 0). */
static bool evaluated(const Tessera__V1__JobProgress *p)
{
    return p->evaluated || p->test_accuracy > 0 || p->test_loss > 0;
}

/* A job's metrics beyond loss and accuracy, as "SEP PREFIXNAME VALUE" each. */
static void print_metrics(Tessera__V1__MetricValue *const *m, size_t n, const char *sep,
                          const char *prefix)
{
    for (size_t i = 0; i < n; i++)
        printf("%s%s%s %.4f", sep, prefix, m[i]->name, m[i]->value);
}

static void print_info(const Tessera__V1__JobInfo *j)
{
    const Tessera__V1__JobProgress *p = j->progress;
    printf("%-28s %-10s", j->id, state_name(j->state));
    if (p != NULL && p->total_steps > 0) {
        printf(" step %lld/%lld epoch %lld loss %.4f", (long long)p->step,
               (long long)p->total_steps, (long long)p->epoch + 1, p->loss);
        if (!p->no_accuracy)
            printf(" accuracy %.4f", p->accuracy);
        print_metrics(p->metrics, p->n_metrics, " ", "");
    }
    if (p != NULL && evaluated(p))
        printf(" test_loss %.4f", p->test_loss);
    if (p != NULL && evaluated(p) && !p->no_accuracy)
        printf(" test_accuracy %.4f", p->test_accuracy);
    if (p != NULL)
        print_metrics(p->test_metrics, p->n_test_metrics, " ", "test_");
    if (j->reason != NULL && j->reason[0]) {
        char note[96];
        printf(" (%s)%s", j->reason, fault_note(j, note, sizeof(note)));
    }
    printf("\n");
}

static int get_job(rpc_channel_t *ch, const char *id, int64_t timeout_ms,
                   Tessera__V1__GetJobResponse **ret)
{
    Tessera__V1__GetJobRequest req = TESSERA__V1__GET_JOB_REQUEST__INIT;
    rpc_call_opts_t o = {.timeout_ms = timeout_ms};
    rpc_error_t err;
    req.id = (char *)id;
    if (rpc_coord_get_job(ch, &req, &o, ret, NULL, &err) != STATUS_OK) {
        fprintf(stderr, "tessera: %s\n", err.message);
        return 1;
    }
    return 0;
}

/* How long `tessera watch` keeps trying to reach a chief that went away (restarted by systemd
 * or Kubernetes, it takes its jobs up again from its journal). */
#define WATCH_RECONNECT_S 600

typedef struct watch_state {
    bool tty;
    int64_t last_step;
    double last_line;
    double last_event; /* wall time of the newest event shown: a new stream repeats older ones */
} watch_state_t;

static void show_progress(const Tessera__V1__JobInfo *j, watch_state_t *ws)
{
    const Tessera__V1__JobProgress *p = j->progress;
    double t;

    if (p == NULL)
        return;
    t = clock_now_s();
    if (p->step != ws->last_step && p->total_steps > 0) {
        if (ws->tty) {
            int width = 30, filled = (int)(width * p->step / p->total_steps);
            char bar[64];
            for (int i = 0; i < width; i++)
                bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
            bar[width] = '\0';
            printf("\r\033[K%s [%s] %lld/%lld  loss %.4f", j->id, bar, (long long)p->step,
                   (long long)p->total_steps, p->loss);
            if (!p->no_accuracy)
                printf("  accuracy %.4f", p->accuracy);
            printf("  %.0f examples/s", p->examples_per_second);
            fflush(stdout);
        } else if (t - ws->last_line >= 5) {
            printf("step %lld/%lld: loss %.4f", (long long)p->step, (long long)p->total_steps,
                   p->loss);
            if (!p->no_accuracy)
                printf(", accuracy %.4f", p->accuracy);
            printf(", %.0f examples/s\n", p->examples_per_second);
            ws->last_line = t;
        }
    }
    ws->last_step = p->step;
}

/* The chief's events as they happen (epochs with their numbers, checkpoints, restores, lost
 * workers), but for those the progress line and the result already say, and those shown
 * before a reconnection. */
static void show_events(const Tessera__V1__WatchJobUpdate *up, watch_state_t *ws)
{
    static const char *const quiet[] = {"queued", "started", "succeeded in ", "cancelled",
                                        "failed: "};

    for (size_t i = 0; i < up->n_events; i++) {
        const char *m = up->events[i]->message;
        bool skip = up->events[i]->wall_time <= ws->last_event;
        if (!skip)
            ws->last_event = up->events[i]->wall_time;
        for (size_t k = 0; k < sizeof(quiet) / sizeof(quiet[0]) && !skip; k++)
            skip = strncmp(m, quiet[k], strlen(quiet[k])) == 0;
        if (skip)
            continue;
        if (ws->tty)
            printf("\r\033[K");
        printf("%s\n", m);
    }
}

static bool state_ended(Tessera__V1__JobState s)
{
    return s == TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED ||
           s == TESSERA__V1__JOB_STATE__JOB_STATE_FAILED ||
           s == TESSERA__V1__JOB_STATE__JOB_STATE_CANCELLED;
}

static int show_result(const Tessera__V1__JobInfo *j, const watch_state_t *ws)
{
    const Tessera__V1__JobProgress *p = j->progress;
    if (ws->tty)
        printf("\r\033[K");
    printf("job %s %s", j->id, state_name(j->state));
    if (j->state == TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED && p != NULL) {
        printf(": %lld steps in %.1f s", (long long)p->step, p->elapsed_seconds);
        if (p->train_seconds > 0)
            printf(" (training %.2f s, %.0f steps/s)", p->train_seconds,
                   (double)p->step / p->train_seconds);
        printf("; loss %.4f", p->loss);
        if (!p->no_accuracy)
            printf(", accuracy %.4f", p->accuracy);
        print_metrics(p->metrics, p->n_metrics, ", ", "");
        if (evaluated(p)) {
            printf("; test loss %.4f", p->test_loss);
            if (!p->no_accuracy)
                printf(", test accuracy %.4f", p->test_accuracy);
            print_metrics(p->test_metrics, p->n_test_metrics, ", test ", "");
        }
    } else if (j->reason && j->reason[0]) {
        char note[96];
        printf(": %s%s", j->reason, fault_note(j, note, sizeof(note)));
    }
    printf("\n");
    return j->state == TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? 0 : 1;
}

/* The chief went away (killed, stopping, restarting): worth waiting for. */
static bool chief_gone(status_t s)
{
    return s == STATUS_UNAVAILABLE || s == STATUS_CANCELLED || s == STATUS_TIMEOUT;
}

/* Follows a job through the chief's WatchJob stream until it ends, reconnecting for up to
 * WATCH_RECONNECT_S when the chief goes away; exit code 0 when the job succeeded. */
static int watch_job(rpc_channel_t *ch, const char *id, int64_t timeout_ms)
{
    Tessera__V1__WatchJobRequest req = TESSERA__V1__WATCH_JOB_REQUEST__INIT;
    Tessera__V1__WatchJobUpdate *last = NULL;
    watch_state_t ws = {.tty = isatty(STDOUT_FILENO) != 0, .last_step = -1};
    rpc_stream_t *stream = NULL;
    rpc_error_t err = {0};
    double lost_at = 0; /* when the chief went away; 0 while it answers */
    int rc = 1;

    (void)timeout_ms;
    req.id = (char *)id;
    for (;;) {
        Tessera__V1__WatchJobUpdate *up = NULL;
        status_t s =
            stream != NULL ? STATUS_OK : rpc_coord_watch_job_open(ch, &req, 0, &stream, &err);
        if (s == STATUS_OK)
            s = rpc_coord_watch_job_next(stream, &up, NULL, -1, &err);
        if (s == STATUS_OK && up == NULL && last != NULL && last->job != NULL &&
            state_ended(last->job->state)) { /* the chief ended the stream: the job is over */
            rc = show_result(last->job, &ws);
            break;
        }
        if (s == STATUS_OK && up == NULL) /* ended early: the chief is stopping */
            s = err.status = STATUS_UNAVAILABLE;
        /* a chief never reached is not waited for: a wrong address fails at once */
        if (s != STATUS_OK && (!chief_gone(s) || last == NULL ||
                               (lost_at > 0 && clock_now_s() - lost_at > WATCH_RECONNECT_S))) {
            if (ws.tty)
                printf("\n");
            if (s == STATUS_NOT_FOUND && lost_at > 0)
                fprintf(stderr,
                        "tessera watch: the chief came back without job %s (is it started "
                        "with --state-dir?)\n",
                        id);
            else
                fprintf(stderr, "tessera watch: %s\n", err.message);
            break;
        }
        if (s != STATUS_OK) {
            if (lost_at == 0) {
                lost_at = clock_now_s();
                if (ws.tty)
                    printf("\r\033[K");
                fprintf(stderr, "tessera watch: lost the chief (%s); reconnecting for up to %d s\n",
                        err.message, WATCH_RECONNECT_S);
            }
            rpc_stream_free(stream);
            stream = NULL;
            usleep(500000);
            continue;
        }
        if (lost_at > 0) {
            fprintf(stderr, "tessera watch: reconnected after %.1f s\n", clock_now_s() - lost_at);
            lost_at = 0;
        }
        show_events(up, &ws);
        if (up->job != NULL)
            show_progress(up->job, &ws);
        if (last != NULL)
            protobuf_c_message_free_unpacked(&last->base, NULL);
        last = up;
    }
    if (last != NULL)
        protobuf_c_message_free_unpacked(&last->base, NULL);
    rpc_stream_free(stream);
    return rc;
}

int cli_submit_job(const char *chief, const char *path, bool watch, int64_t timeout_ms)
{
    Tessera__V1__SubmitJobRequest req = TESSERA__V1__SUBMIT_JOB_REQUEST__INIT;
    Tessera__V1__SubmitJobRequest__FilesEntry entry =
        TESSERA__V1__SUBMIT_JOB_REQUEST__FILES_ENTRY__INIT;
    Tessera__V1__SubmitJobRequest__FilesEntry *entries[1] = {&entry};
    Tessera__V1__SubmitJobResponse *resp = NULL;
    rpc_call_opts_t o = {.timeout_ms = timeout_ms};
    char abs[PATH_MAX];
    status_msg_t msg = {0};
    rpc_channel_t *ch = NULL;
    rpc_error_t err;
    job_t job;
    char *text = NULL;
    size_t len = 0;
    int rc = 1;

    memset(&job, 0, sizeof(job));
    if (realpath(path, abs) == NULL) {
        fprintf(stderr, "tessera submit: cannot read job file '%s': %s\n", path, strerror(errno));
        return 2;
    }
    if (file_read_all(abs, "job file", JOB_MAX_FILE_BYTES, &text, &len, &msg) != STATUS_OK) {
        fprintf(stderr, "tessera submit: %s\n", msg.text);
        return 2;
    }
    /* Check the job here first, by the path the chief will resolve its files against. */
    if (job_parse(text, len, abs, &job, &msg) != STATUS_OK) {
        fprintf(stderr, "tessera submit: %s\n", msg.text);
        free(text);
        return 2;
    }
    req.job_spec = text;
    req.job_path = abs;
    if (job.model.keras_json != NULL && job.model.keras_json_path != NULL) {
        entry.key = job.model.keras_json_path;
        entry.value =
            (ProtobufCBinaryData){strlen(job.model.keras_json), (uint8_t *)job.model.keras_json};
        req.n_files = 1;
        req.files = entries;
    }
    if (rpc_channel_new(chief, NULL, &ch, &msg) != STATUS_OK) {
        fprintf(stderr, "tessera submit: %s\n", msg.text);
        goto out;
    }
    if (rpc_coord_submit_job(ch, &req, &o, &resp, NULL, &err) != STATUS_OK) {
        fprintf(stderr, "tessera submit: the chief at %s refused the job: %s\n", chief,
                err.message);
        rc = err.status == STATUS_INVALID_ARGUMENT ? 2 : 1;
        goto out;
    }
    printf("submitted %s (%s)\n", resp->job->id, state_name(resp->job->state));
    fflush(stdout);
    rc = watch ? watch_job(ch, resp->job->id, timeout_ms) : 0;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
out:
    rpc_channel_free(ch);
    free(text);
    job_done(&job);
    return rc;
}

static int run_simple(const char *cmd, const char *chief, const char *id, int64_t timeout_ms)
{
    rpc_call_opts_t o = {.timeout_ms = timeout_ms};
    status_msg_t msg = {0};
    rpc_channel_t *ch;
    rpc_error_t err;
    int rc = 0;

    if (rpc_channel_new(chief, NULL, &ch, &msg) != STATUS_OK) {
        fprintf(stderr, "tessera %s: %s\n", cmd, msg.text);
        return 2;
    }
    if (strcmp(cmd, "list") == 0) {
        Tessera__V1__ListJobsRequest req = TESSERA__V1__LIST_JOBS_REQUEST__INIT;
        Tessera__V1__ListJobsResponse *resp;
        if (rpc_coord_list_jobs(ch, &req, &o, &resp, NULL, &err) != STATUS_OK) {
            fprintf(stderr, "tessera list: %s\n", err.message);
            rc = 1;
        } else {
            for (size_t i = 0; i < resp->n_jobs; i++)
                print_info(resp->jobs[i]);
            if (resp->n_jobs == 0)
                printf("no jobs\n");
            protobuf_c_message_free_unpacked(&resp->base, NULL);
        }
    } else if (strcmp(cmd, "cancel") == 0) {
        Tessera__V1__CancelJobRequest req = TESSERA__V1__CANCEL_JOB_REQUEST__INIT;
        Tessera__V1__CancelJobResponse *resp;
        req.id = (char *)id;
        if (rpc_coord_cancel_job(ch, &req, &o, &resp, NULL, &err) != STATUS_OK) {
            fprintf(stderr, "tessera cancel: %s\n", err.message);
            rc = 1;
        } else {
            print_info(resp->job);
            protobuf_c_message_free_unpacked(&resp->base, NULL);
        }
    } else if (strcmp(cmd, "checkpoint") == 0) {
        Tessera__V1__CheckpointRequest req = TESSERA__V1__CHECKPOINT_REQUEST__INIT;
        Tessera__V1__CheckpointResponse *resp;
        req.id = (char *)id;
        if (o.timeout_ms < 600000)
            o.timeout_ms = 600000;
        if (rpc_coord_checkpoint(ch, &req, &o, &resp, NULL, &err) != STATUS_OK) {
            fprintf(stderr, "tessera checkpoint: %s\n", err.message);
            rc = 1;
        } else {
            printf("checkpoint at step %lld: %s\n", (long long)resp->step, resp->path);
            protobuf_c_message_free_unpacked(&resp->base, NULL);
        }
    } else if (strcmp(cmd, "status") == 0) {
        Tessera__V1__GetJobResponse *resp;
        rc = get_job(ch, id, timeout_ms, &resp);
        if (rc == 0) {
            print_info(resp->job);
            rc = resp->job->state == TESSERA__V1__JOB_STATE__JOB_STATE_FAILED ? 1 : 0;
            protobuf_c_message_free_unpacked(&resp->base, NULL);
        }
    } else {
        rc = watch_job(ch, id, timeout_ms);
    }
    rpc_channel_free(ch);
    return rc;
}

/* The chief's address into buf: --chief, $TESSERA_CHIEF, $TF_CONFIG's chief (or worker 0, who
 * leads a cluster without one), else the default port here. */
static status_t find_chief(const char *flag, char *buf, size_t len, status_msg_t *err)
{
    cluster_spec_t spec;
    cluster_task_type_t type;
    bool present = false;
    int index;
    const char *env = getenv("TESSERA_CHIEF");

    snprintf(buf, len, "%s", flag ? flag : env ? env : "127.0.0.1:2222");
    if (flag != NULL || env != NULL)
        return STATUS_OK;
    STATUS_CHECK(cluster_spec_from_env(&spec, &present, err));
    if (present && cluster_spec_chief(&spec, &type, &index))
        snprintf(buf, len, "%s", cluster_spec_address(&spec, type, index));
    cluster_spec_done(&spec);
    return STATUS_OK;
}

int cli_tls_init(const char *cmd, const cli_tls_t *t)
{
    status_msg_t err = {0};
    const char *cert = t->cert ? t->cert : getenv("TESSERA_TLS_CERT");
    const char *key = t->key ? t->key : getenv("TESSERA_TLS_KEY");
    const char *ca = t->ca ? t->ca : getenv("TESSERA_TLS_CA");
    unsigned mask;

    /* gRPC's own reports go through the log, without its own lines: the command's error says
     * what failed. */
    if (log_subsystems_parse("all,-grpc", &mask) == STATUS_OK)
        log_set_subsystems(mask);
    rpc_log_init();

    if (rpc_security_init(cert, key, ca, &err) != STATUS_OK) {
        fprintf(stderr, "tessera %s: %s\n", cmd, err.text);
        return 2;
    }
    return 0;
}

int cli_jobs(int argc, char **argv)
{
    jobs_opts_t o = {0};
    config_action_t action;
    status_msg_t err = {0};
    const char *cmd = argv[0];
    const char *arg = cli_take_positional(&argc, argv);
    char chief[300];
    int rc = 2;

    if (config_load(&jobs_table, &o, argc, argv, &action, &err) != STATUS_OK) {
        fprintf(stderr, "tessera %s: %s\n", cmd, err.text);
        goto out;
    }
    if (action != CONFIG_RUN) {
        rc = 0;
        goto out;
    }
    if (arg == NULL && strcmp(cmd, "list") != 0) {
        fprintf(stderr, "tessera %s: name a %s\n", cmd,
                strcmp(cmd, "submit") == 0 ? "job file" : "job");
        goto out;
    }
    if (find_chief(o.chief, chief, sizeof(chief), &err) != STATUS_OK) {
        fprintf(stderr, "tessera %s: %s\n", cmd, err.text);
        goto out;
    }
    if (cli_tls_init(cmd, &o.tls) != 0)
        goto out;
    grpc_init();
    if (strcmp(cmd, "submit") == 0)
        rc = cli_submit_job(chief, arg, o.watch, o.timeout_ms);
    else
        rc = run_simple(cmd, chief, arg, o.timeout_ms);
    grpc_shutdown();
out:
    rpc_security_done();
    config_done(&jobs_table, &o);
    return rc;
}
