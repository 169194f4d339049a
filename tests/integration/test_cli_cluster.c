/* The tessera command against real daemons: cluster (from a chief, a cluster file, TF_CONFIG)
 * and run --local. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "check_run.h"
#include "base/cpus.h"
#include "harness.h"

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

typedef struct cluster {
    launch_proc_t ps[2], worker[2], chief;
} cluster_t;

/* ps and worker lists, with an extra dead worker address when dead_port > 0. */
static void start_cluster(cluster_t *c, int dead_port)
{
    char ps_flag[400], worker_flag[600];
    harness_start(&c->ps[0], "tessera-ps", "cli-ps0", "--task-index=0", NULL);
    harness_start(&c->ps[1], "tessera-ps", "cli-ps1", "--task-index=1", NULL);
    harness_start(&c->worker[0], "tessera-worker", "cli-w0", "--task-index=0", NULL);
    harness_start(&c->worker[1], "tessera-worker", "cli-w1", "--task-index=1", NULL);
    snprintf(ps_flag, sizeof(ps_flag), "--ps=%s,%s", c->ps[0].listen, c->ps[1].listen);
    if (dead_port > 0)
        snprintf(worker_flag, sizeof(worker_flag), "--worker=%s,%s,127.0.0.1:%d",
                 c->worker[0].listen, c->worker[1].listen, dead_port);
    else
        snprintf(worker_flag, sizeof(worker_flag), "--worker=%s,%s", c->worker[0].listen,
                 c->worker[1].listen);
    harness_start(&c->chief, "tessera-chief", "cli-chief", ps_flag, worker_flag,
                  "--health-timeout=500ms", NULL);
}

static void stop_cluster(cluster_t *c)
{
    harness_stop(&c->chief);
    harness_stop(&c->worker[1]);
    harness_stop(&c->worker[0]);
    harness_stop(&c->ps[1]);
    harness_stop(&c->ps[0]);
}

START_TEST(cli_cluster_from_the_chief_lists_every_task_healthy)
{
    cluster_t c;
    char flag[300], *out = NULL;
    int rc;

    start_cluster(&c, 0);
    snprintf(flag, sizeof(flag), "--chief=%s", c.chief.listen);
    rc = harness_run((char *[]){(char *)harness_program("tessera"), "cluster", flag, NULL}, NULL,
                     NULL, 20000, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_int_eq(count(out, "SERVING"), 5);
    ck_assert_ptr_nonnull(strstr(out, "5 tasks, 5 healthy"));
    ck_assert_ptr_nonnull(strstr(out, c.ps[1].listen));
    ck_assert_ptr_nonnull(strstr(out, c.worker[0].listen));
    ck_assert_ptr_nonnull(strstr(out, "chief"));
    free(out);
    stop_cluster(&c);
}
END_TEST

START_TEST(cli_cluster_exits_nonzero_when_a_task_is_down)
{
    cluster_t c;
    char flag[300], *out = NULL;
    int rc;

    start_cluster(&c, harness_free_port());
    snprintf(flag, sizeof(flag), "--chief=%s", c.chief.listen);
    rc = harness_run((char *[]){(char *)harness_program("tessera"), "cluster", flag, NULL}, NULL,
                     NULL, 20000, &out);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, out);
    ck_assert_int_eq(count(out, "UNREACHABLE"), 1);
    ck_assert_ptr_nonnull(strstr(out, "6 tasks, 5 healthy"));
    free(out);
    stop_cluster(&c);
}
END_TEST

START_TEST(cli_cluster_reads_tf_config_and_cluster_files)
{
    cluster_t c;
    char env[1024], path[512], flag[600], *out = NULL;
    const char *json_fmt = "{\"cluster\":{\"chief\":[\"%s\"],\"ps\":[\"%s\",\"%s\"],"
                           "\"worker\":[\"%s\",\"%s\"]},\"task\":{\"type\":\"chief\",\"index\":0}}";
    FILE *f;
    int rc;

    start_cluster(&c, 0);
    snprintf(env, sizeof(env), "TF_CONFIG=");
    snprintf(env + 10, sizeof(env) - 10, json_fmt, c.chief.listen, c.ps[0].listen, c.ps[1].listen,
             c.worker[0].listen, c.worker[1].listen);
    rc = harness_run((char *[]){(char *)harness_program("tessera"), "cluster", NULL},
                     (char *[]){env, NULL}, NULL, 20000, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_ptr_nonnull(strstr(out, "5 tasks, 5 healthy"));
    free(out);

    snprintf(path, sizeof(path), "%s/cluster.json", harness_tmpdir());
    f = fopen(path, "w");
    fputs(env + 10, f);
    fclose(f);
    snprintf(flag, sizeof(flag), "--cluster-file=%s", path);
    rc = harness_run((char *[]){(char *)harness_program("tessera"), "cluster", flag, NULL}, NULL,
                     NULL, 20000, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_int_eq(count(out, "SERVING"), 5);
    free(out);
    stop_cluster(&c);
}
END_TEST

START_TEST(cli_cluster_reports_bad_input_clearly)
{
    char *tessera = (char *)harness_program("tessera"), *out = NULL, flag[64];
    int rc;

    snprintf(flag, sizeof(flag), "--chief=127.0.0.1:%d", harness_free_port());
    rc = harness_run((char *[]){tessera, "cluster", flag, "--timeout=500ms", NULL}, NULL, NULL,
                     20000, &out);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, out);
    ck_assert_ptr_nonnull(strstr(out, "did not answer"));
    free(out);

    rc = harness_run((char *[]){tessera, "cluster", NULL}, (char *[]){"TF_CONFIG=", NULL}, NULL,
                     20000, &out);
    ck_assert_int_eq(rc, 2);
    ck_assert_ptr_nonnull(strstr(out, "--chief"));
    free(out);

    rc = harness_run((char *[]){tessera, "cluster", "--cluster-file=/nonexistent.json", NULL}, NULL,
                     NULL, 20000, &out);
    ck_assert_int_eq(rc, 2);
    ck_assert_ptr_nonnull(strstr(out, "/nonexistent.json"));
    free(out);

    rc = harness_run((char *[]){tessera, "frobnicate", NULL}, NULL, NULL, 20000, &out);
    ck_assert_int_eq(rc, 2);
    ck_assert_ptr_nonnull(strstr(out, "frobnicate"));
    free(out);

    rc = harness_run((char *[]){tessera, "cluster", "--chief", NULL}, NULL, NULL, 20000, &out);
    ck_assert_int_eq(rc, 2);
    free(out);
}
END_TEST

START_TEST(cli_run_local_starts_a_healthy_cluster_and_stops_it)
{
    char *out = NULL, logdir[300], flag[320];
    int rc;

    snprintf(logdir, sizeof(logdir), "%s/run-local", harness_tmpdir());
    snprintf(flag, sizeof(flag), "--log-dir=%s", logdir);
    rc = harness_run((char *[]){(char *)harness_program("tessera"), "run", "--local", "--ps", "2",
                                "--workers", "2", flag, NULL},
                     NULL, NULL, 60000, &out);
    if (rc != 0) { /* show why: the daemons' own logs */
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "tail -n 20 %s/*.log >&2", logdir);
        (void)!system(cmd);
    }
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_ptr_nonnull(strstr(out, "5 tasks, 5 healthy"));
    ck_assert_int_eq(count(out, "SERVING"), 5);
    free(out);
    /* Every daemon logged its clean stop. */
    {
        static const char *const logs[] = {"ps-0", "ps-1", "worker-0", "worker-1", "chief-0"};
        for (int i = 0; i < 5; i++) {
            char path[400];
            snprintf(path, sizeof(path), "%s/%s.log", logdir, logs[i]);
            ck_assert_msg(harness_file_contains(path, "stopped"), "%s has no clean stop", path);
        }
    }
    /* The two workers split the machine's CPUs between them (64 at most each). */
    {
        char path[400], line[64];
        int share = cpus_available() / 2 < 64 ? cpus_available() / 2 : 64;
        snprintf(line, sizeof(line), "jobs compute on %d thread%s", share > 1 ? share : 1,
                 share > 1 ? "s" : "");
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof(path), "%s/worker-%d.log", logdir, i);
            ck_assert_msg(harness_file_contains(path, line), "%s does not say '%s'", path, line);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli_cluster");
    TCase *tc = tcase_create("cli_cluster");

    grpc_init();
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, cli_cluster_from_the_chief_lists_every_task_healthy);
    tcase_add_test(tc, cli_cluster_exits_nonzero_when_a_task_is_down);
    tcase_add_test(tc, cli_cluster_reads_tf_config_and_cluster_files);
    tcase_add_test(tc, cli_cluster_reports_bad_input_clearly);
    tcase_add_test(tc, cli_run_local_starts_a_healthy_cluster_and_stops_it);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
