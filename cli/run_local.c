/* tessera run --local: a whole cluster on this machine, as child processes on loopback. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "base/cpus.h"
#include "cli.h"
#include "daemon/config.h"
#include "daemon/launch.h"

#define MAX_TASKS 64

typedef struct run_opts {
    bool local;
    int64_t ps;
    int64_t workers;
    bool keep;
    char *log_dir;
    int64_t start_timeout_ms;
} run_opts_t;

static const config_option_t run_options[] = {
    {"local", CONFIG_BOOL, offsetof(run_opts_t, local), "false", 0, 0,
     "Start the cluster here, as child processes on 127.0.0.1 (required for now)."},
    {"ps", CONFIG_INT, offsetof(run_opts_t, ps), "2", 0, 16,
     "Parameter server tasks (0: none, for multi_worker_mirrored jobs)."},
    {"workers", CONFIG_INT, offsetof(run_opts_t, workers), "2", 1, 32, "Worker tasks."},
    {"keep", CONFIG_BOOL, offsetof(run_opts_t, keep), "false", 0, 0,
     "Keep the cluster running until Ctrl-C instead of stopping it after the report."},
    {"log-dir", CONFIG_STRING, offsetof(run_opts_t, log_dir), NULL, 0, 0,
     "Directory for the daemons' logs (default: a new directory under /tmp)."},
    {"start-timeout", CONFIG_DURATION_MS, offsetof(run_opts_t, start_timeout_ms), "20s", 100,
     600000, "How long each daemon may take to report ready."},
};

static const config_table_t run_table = {
    .program = "tessera run",
    .summary = "tessera run --local [--ps N] [--workers N] [JOB.yaml]: starts a chief, parameter "
               "servers and workers on this machine, shows the cluster's health, runs the job "
               "when one is named, and stops them (or keeps them with --keep).",
    .options = run_options,
    .n_options = sizeof(run_options) / sizeof(run_options[0]),
};

typedef struct local_cluster {
    launch_proc_t procs[MAX_TASKS];
    size_t n;
    char log_dir[256];
} local_cluster_t;

static status_t start_task(local_cluster_t *c, const char *program, const char *role, int index,
                           char *const *extra, int64_t timeout_ms, status_msg_t *err)
{
    char path[4096], idx[16], name[32], log[400];
    char *argv[24];
    int a = 0;

    STATUS_CHECK(launch_find_program(program, path, sizeof(path), err));
    snprintf(idx, sizeof(idx), "%d", index);
    snprintf(name, sizeof(name), "%s %d", role, index);
    snprintf(log, sizeof(log), "%s/%s-%d.log", c->log_dir, role, index);
    argv[a++] = path;
    argv[a++] = "--listen=127.0.0.1:0";
    argv[a++] = "--metrics-listen=127.0.0.1:0";
    /* a cluster of the user's own processes on this machine: the user's own files */
    argv[a++] = "--data-root=/";
    argv[a++] = "--task-index";
    argv[a++] = idx;
    for (size_t i = 0; extra != NULL && extra[i] != NULL && a < 22; i++)
        argv[a++] = extra[i];
    argv[a] = NULL;
    STATUS_CHECK(launch_start(name, argv, log, timeout_ms, &c->procs[c->n], err));
    c->n++;
    return STATUS_OK;
}

/* Joins the listen addresses of procs [from, to) with commas. */
static void join_addrs(const local_cluster_t *c, size_t from, size_t to, char *out, size_t len)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = from; i < to && n < len; i++)
        n += (size_t)snprintf(out + n, len - n, "%s%s", i > from ? "," : "", c->procs[i].listen);
}

/* Stops in reverse start order (chief, workers, then PS), reporting unclean exits. */
static int stop_all(local_cluster_t *c)
{
    int bad = 0;
    for (size_t i = c->n; i-- > 0;) {
        int st = 0;
        status_t rc = launch_stop(&c->procs[i], SIGTERM, 5000, &st);
        if (rc != STATUS_OK || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "tessera run: %s did not stop cleanly (see %s)\n", c->procs[i].name,
                    c->log_dir);
            bad = 1;
        }
    }
    c->n = 0;
    return bad;
}

static void wait_for_interrupt(void)
{
    sigset_t set;
    int sig;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    printf("cluster running; press Ctrl-C to stop it\n");
    fflush(stdout);
    sigwait(&set, &sig);
}

int cli_run(int argc, char **argv)
{
    run_opts_t o = {0};
    local_cluster_t *c = calloc(1, sizeof(*c));
    config_action_t action;
    status_msg_t err = {0};
    char ps_list[2048], worker_list[2048];
    int rc = 2;

    const char *job = cli_take_positional(&argc, argv);

    if (c == NULL)
        return 1;
    if (config_load(&run_table, &o, argc, argv, &action, &err) != STATUS_OK) {
        fprintf(stderr, "tessera run: %s\n", err.text);
        goto out;
    }
    if (action != CONFIG_RUN) {
        rc = 0;
        goto out;
    }
    if (!o.local) {
        fprintf(stderr, "tessera run: only --local clusters can be started this way\n");
        goto out;
    }
    if (o.log_dir != NULL) {
        snprintf(c->log_dir, sizeof(c->log_dir), "%s", o.log_dir);
        mkdir(c->log_dir, 0755);
    } else {
        snprintf(c->log_dir, sizeof(c->log_dir), "/tmp/tessera-run-XXXXXX");
        if (mkdtemp(c->log_dir) == NULL) {
            perror("tessera run: mkdtemp");
            rc = 1;
            goto out;
        }
    }
    rc = 1;
    for (int i = 0; i < o.ps; i++)
        if (start_task(c, "tessera-ps", "ps", i, NULL, o.start_timeout_ms, &err) != 0)
            goto fail;
    {
        /* the workers share this machine's CPUs (the PS's updates take their turns beside) */
        char threads[40], *worker_args[] = {threads, NULL};
        int share = cpus_available() / (int)o.workers;
        snprintf(threads, sizeof(threads), "--compute-threads=%d", share > 1 ? share : 1);
        for (int i = 0; i < o.workers; i++)
            if (start_task(c, "tessera-worker", "worker", i, worker_args, o.start_timeout_ms,
                           &err) != 0)
                goto fail;
    }
    join_addrs(c, 0, (size_t)o.ps, ps_list, sizeof(ps_list));
    join_addrs(c, (size_t)o.ps, c->n, worker_list, sizeof(worker_list));
    {
        char *chief_args[] = {"--worker", worker_list, "--ps", ps_list, NULL};
        if (o.ps == 0) /* a cluster of workers only: multi_worker_mirrored */
            chief_args[2] = NULL;
        if (start_task(c, "tessera-chief", "chief", 0, chief_args, o.start_timeout_ms, &err) != 0)
            goto fail;
    }
    printf("started %lld ps, %lld workers and a chief on 127.0.0.1 (logs in %s)\n", (long long)o.ps,
           (long long)o.workers, c->log_dir);
    grpc_init();
    rc = cli_cluster_from_chief(c->procs[c->n - 1].listen, 5000);
    if (rc == 0 && job != NULL)
        rc = cli_submit_job(c->procs[c->n - 1].listen, job, true, 10000);
    grpc_shutdown();
    if (o.keep && rc == 0)
        wait_for_interrupt();
    rc |= stop_all(c);
    goto out;
fail:
    fprintf(stderr, "tessera run: %s\n", err.text);
    stop_all(c);
out:
    config_done(&run_table, &o);
    free(c);
    return rc;
}
