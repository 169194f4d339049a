/* Failures of workers, parameter servers and the chief with real daemons on loopback: a worker
 * killed with SIGKILL mid-job, a worker stopped with SIGSTOP (hung: its connections stay up,
 * nothing answers) and noticed within the chief's --worker-timeout, a job submitted while a
 * worker is down, a worker restarted at its address, the PS killed and restarted mid-job, and
 * the chief killed (or stopped) and started again on its --state-dir. Each job completes with
 * every step of it counted. A lost worker's shard of the data is read by the others from where
 * it stood, so every epoch still visits every example once: a worker killed at step 300 of 2000
 * ends at 0.827 test accuracy and one down from the start at 0.829, against 0.789 undisturbed
 * (the order of updates differs; before the takeover they ended at 0.75 and 0.66). A worker
 * restarted at its address, or woken from SIGSTOP, rejoins the running job; after the PS's restart
 * the one-worker job ends at exactly the undisturbed numbers. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "base/clock.h"
#include "check_run.h"
#include "fault_util.h"
#include "rpc/client.h"

#define WORKER_TIMEOUT_S 3 /* the chief's --worker-timeout in start_cluster */

START_TEST(fault_worker_killed_mid_job_the_job_finishes_on_the_other)
{
    cluster_t c;
    char *out = NULL, *id;
    double calm, got;

    start_cluster(&c);
    calm = undisturbed(&c);
    id = submit(&c, write_job("killed"));
    wait_running_past(&c, id, 300);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    expect_completed(&c, id, &out);
    ck_assert_msg(strstr(out, "worker 1 (") != NULL && strstr(out, "failed") != NULL, "%s", out);
    got = test_accuracy(out);
    printf("worker killed: test accuracy %.4f\n", got);
    ck_assert_double_eq(
        harness_metric(&c.chief, "tessera_chief_task_failures_total{task=\"worker:1\"}"), 1);
    ck_assert_double_eq(
        harness_metric(&c.chief, "tessera_chief_task_failures_total{task=\"worker:0\"}"), 0);
    ck_assert_double_eq(harness_metric(&c.chief, "tessera_chief_workers_alive"),
                        0); /* no job runs */
    ck_assert_msg(harness_metric(&c.chief, "tessera_chief_closures_total") >= 4000, "closures");
    ck_assert_msg(
        harness_metric(&c.chief,
                       "tessera_chief_task_last_seen_timestamp_seconds{task=\"worker:0\"}") > 1e9,
        "worker 0 never seen");
    /* its shard was read by the other: the same data, so about the same accuracy */
    ck_assert_msg(got >= calm - 0.04, "%.4f, undisturbed %.4f: %s", got, calm, out);
    free(out);
    free(id);
    stop_cluster(&c);
}
END_TEST

START_TEST(fault_worker_stopped_is_noticed_within_the_timeout_and_the_job_finishes)
{
    cluster_t c;
    char *out = NULL, *id;
    double t0, noticed, calm;

    start_cluster(&c);
    calm = undisturbed(&c);
    /* long enough for the woken worker to be back before the end */
    id = submit(&c, write_job_of("hung", NULL, 24));
    wait_running_past(&c, id, 300);
    ck_assert_int_eq(kill(c.worker[1].pid, SIGSTOP), 0);
    t0 = clock_now_s();
    while (!harness_file_contains(c.chief_log, "answered no health check")) {
        ck_assert_msg(clock_now_s() - t0 < 30, "a stopped worker not noticed in 30 s");
        usleep(50000);
    }
    noticed = clock_now_s() - t0;
    printf("stopped worker noticed after %.1f s (--worker-timeout=%ds)\n", noticed,
           WORKER_TIMEOUT_S);
    /* the timeout, a health check's own second, and the watchdog's period */
    ck_assert_msg(noticed <= WORKER_TIMEOUT_S + 2.5, "noticed after %.1f s", noticed);
    /* its closure is cancelled and handed on; then, woken, it answers again and rejoins */
    while (!harness_file_contains(c.chief_log, "stopped, hung or cut off")) {
        ck_assert_msg(clock_now_s() - t0 < 30, "the stopped worker's closure was not handed on");
        usleep(20000);
    }
    ck_assert_int_eq(kill(c.worker[1].pid, SIGCONT), 0);
    expect_completed_steps(&c, id, 6000, &out);
    ck_assert_msg(strstr(out, "stopped, hung or cut off") != NULL &&
                      strstr(out, "worker 1 (") != NULL && strstr(out, "is back") != NULL,
                  "%s", out);
    expect_accuracy("worker stopped and woken", out, calm);
    free(out);
    free(id);
    stop_cluster(&c);
}
END_TEST

/* Killed, then started again at its address (as systemd or Kubernetes would): the chief
 * configures it for the running job where its data stood and it works again. Meanwhile the
 * job's variables are read from the PS as usual: a checkpoint asked for while the worker is
 * away is written (TensorFlow's testFetchFromPSAfterWorkerFailure). */
START_TEST(fault_worker_restarted_at_its_address_rejoins_the_job)
{
    cluster_t c;
    char *out = NULL, *id, listen[300];
    double calm;
    int rc;

    start_cluster(&c);
    calm = undisturbed(&c);
    id = submit(&c, write_job_of("restarted", "restarted-ckpt", 16));
    wait_running_past(&c, id, 300);
    snprintf(listen, sizeof(listen), "--listen=%s", c.worker[1].listen);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    wait_running_past(&c, id, 500);
    rc = tessera((char *[]){"checkpoint", id, c.chief_flag, NULL}, &out);
    ck_assert_msg(rc == 0 && strstr(out, "checkpoint at step ") != NULL, "exit %d: %s", rc, out);
    free(out);
    harness_start(&c.worker[1], "tessera-worker", "fault-w1-again", "--task-index=1", listen, NULL);
    expect_completed_steps(&c, id, 4000, &out);
    ck_assert_msg(strstr(out, "failed") != NULL && strstr(out, "is back") != NULL, "%s", out);
    expect_accuracy("worker restarted mid-job", out, calm);
    free(out);
    free(id);
    /* it took closures again: the new process counted steps */
    ck_assert_msg(harness_metric(&c.worker[1], "tessera_worker_steps_total") > 0,
                  "the restarted worker ran no step");
    ck_assert_double_eq(harness_metric(&c.chief, "tessera_chief_worker_rejoins_total"), 1);
    stop_cluster(&c);
}
END_TEST

/* TensorFlow's testWorkerPreemptionBetweenFunctions: a worker killed and restarted between two
 * jobs; the second runs on both, every step of each counted exactly. */
START_TEST(fault_worker_restarted_between_jobs_takes_part_in_the_next)
{
    cluster_t c;
    char *out = NULL, *id, listen[300];
    double before, calm;

    start_cluster(&c);
    calm = undisturbed(&c);
    id = submit(&c, write_job("between-a"));
    expect_completed(&c, id, &out);
    free(out);
    free(id);
    snprintf(listen, sizeof(listen), "--listen=%s", c.worker[1].listen);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    harness_start(&c.worker[1], "tessera-worker", "fault-w1-between", "--task-index=1", listen,
                  NULL);
    before = harness_metric(&c.worker[1], "tessera_worker_steps_total");
    id = submit(&c, write_job("between-b"));
    expect_completed(&c, id, &out);
    ck_assert_msg(strstr(out, "training on 2 workers") != NULL && strstr(out, "failed") == NULL,
                  "%s", out);
    ck_assert_msg(harness_metric(&c.worker[1], "tessera_worker_steps_total") > before,
                  "the restarted worker ran no step");
    expect_accuracy("worker restarted between jobs", out, calm);
    free(out);
    free(id);
    stop_cluster(&c);
}
END_TEST

START_TEST(fault_job_submitted_while_a_worker_is_down_runs_on_the_others)
{
    cluster_t c;
    char *out = NULL;
    double calm, before;
    int rc;

    start_cluster(&c);
    calm = undisturbed(&c);
    before = harness_metric(&c.worker[0], "tessera_worker_examples_total");
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    rc = tessera((char *[]){"submit", (char *)write_job("down"), c.chief_flag, "--watch", NULL},
                 &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(
        strstr(out, "worker 1 (") != NULL && strstr(out, "the job goes on without it") != NULL &&
            strstr(out, "training on 1 workers and 1 ps: 8000 examples, 2000 steps") != NULL,
        "%s", out);
    double acc = test_accuracy(out);
    printf("one worker down from the start: test accuracy %.4f, undisturbed %.4f\n", acc, calm);
    /* the one worker read both shards: every example of every epoch, once */
    ck_assert_double_eq(harness_metric(&c.worker[0], "tessera_worker_examples_total") - before,
                        8 * 8000);
    ck_assert_msg(acc >= calm - 0.04, "%.4f, undisturbed %.4f: %s", acc, calm, out);
    free(out);
    stop_cluster(&c);
}
END_TEST

/* Training data in 4 CSV files of 500 rows (x0..x199, y): sharded by file over 2 workers. */
static const char *write_csv_job(const char *name)
{
    static char path[600];
    char file[600];
    uint64_t r = 12345;
    FILE *f;

    for (int k = 0; k < 4; k++) {
        snprintf(file, sizeof(file), "%s/%s-%d.csv", harness_tmpdir(), name, k);
        ck_assert_ptr_nonnull(f = fopen(file, "w"));
        for (int i = 0; i < 200; i++)
            fprintf(f, "x%d,", i);
        fprintf(f, "y\n");
        for (int row = 0; row < 500; row++) {
            double sum = 0;
            for (int i = 0; i < 200; i++) {
                double x;
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                x = (double)(r >> 11) / 9007199254740992.0 - 0.5;
                sum += i < 20 ? x : 0;
                fprintf(f, "%.4f,", x);
            }
            fprintf(f, "%d\n", sum > 0.3 ? 2 : sum < -0.3 ? 0 : 1);
        }
        ck_assert_int_eq(fclose(f), 0);
    }
    snprintf(path, sizeof(path), "%s/%s.yaml", harness_tmpdir(), name);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fprintf(f,
            "name: %s\nstrategy: parameter_server\nmodel:\n"
            "  - {dense: {units: 64, activation: relu}, input_shape: [200]}\n"
            "  - {dense: {units: 3, activation: softmax}}\n"
            "loss: sparse_categorical_crossentropy\nmetrics: [accuracy]\n"
            "optimizer: {adam: {learning_rate: 0.001}}\n"
            "data:\n  batch_size: 32\n"
            "  train: {format: csv, files: ['%s/%s-*.csv'], label: y}\n"
            "train: {epochs: 4}\n",
            name, harness_tmpdir(), name);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

/* Data sharded by file, a worker down when the job starts: the live one sizes and reads the
 * absent one's files too, so every epoch still reads every example once. */
START_TEST(fault_job_sharded_by_file_with_a_worker_down_reads_its_files_too)
{
    cluster_t c;
    char *out = NULL;
    double before;
    int rc;

    start_cluster(&c);
    before = harness_metric(&c.worker[0], "tessera_worker_examples_total");
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    rc = tessera(
        (char *[]){"submit", (char *)write_csv_job("byfile"), c.chief_flag, "--watch", NULL}, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    /* 2 shards of 2 files, 1000 rows each: 32 batches of 32 per shard and epoch */
    ck_assert_msg(strstr(out, "training on 1 workers and 1 ps: 2000 examples, 256 steps") != NULL &&
                      strstr(out, "trains without it") == NULL,
                  "%s", out);
    ck_assert_double_eq(harness_metric(&c.worker[0], "tessera_worker_examples_total") - before,
                        4 * 2000);
    free(out);
    stop_cluster(&c);
}
END_TEST

/* Both workers killed and started again, then one of them killed and restarted twice more: the
 * job waits for them (a dispatcher whose worker is lost waits for it), takes each back, and
 * completes with every step counted. */
START_TEST(fault_workers_killed_again_and_again_rejoin_and_the_job_completes)
{
    cluster_t c;
    char *out = NULL, *id, listen[2][300];
    int64_t at = 300;

    start_cluster(&c);
    id = submit(&c, write_job_of("again", NULL, 40));
    for (int w = 0; w < 2; w++)
        snprintf(listen[w], sizeof(listen[w]), "--listen=%s", c.worker[w].listen);
    wait_running_past(&c, id, at);
    launch_stop(&c.worker[0], SIGKILL, 5000, NULL);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    usleep(300000);
    harness_start(&c.worker[0], "tessera-worker", "fault-w0-b", "--task-index=0", listen[0], NULL);
    harness_start(&c.worker[1], "tessera-worker", "fault-w1-b", "--task-index=1", listen[1], NULL);
    wait_metric(&c, "tessera_chief_worker_rejoins_total", 2);
    for (int round = 0; round < 2; round++) {
        at += 1000;
        wait_running_past(&c, id, at);
        launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
        usleep(200000);
        harness_start(&c.worker[1], "tessera-worker", round ? "fault-w1-d" : "fault-w1-c",
                      "--task-index=1", listen[1], NULL);
        wait_metric(&c, "tessera_chief_worker_rejoins_total", 3 + round);
    }
    expect_completed_steps(&c, id, 10000, &out);
    printf("workers killed 4 times: test accuracy %.4f\n", test_accuracy(out));
    ck_assert_double_eq(
        harness_metric(&c.chief, "tessera_chief_task_failures_total{task=\"worker:1\"}"), 3);
    ck_assert_double_eq(
        harness_metric(&c.chief, "tessera_chief_task_failures_total{task=\"worker:0\"}"), 1);
    free(out);
    free(id);
    stop_cluster(&c);
}
END_TEST

/* The PS killed with SIGKILL mid-job and started again at its address: the job waits for it,
 * restores its newest checkpoint on the PS and the worker, runs the steps after it again and
 * ends at exactly the numbers of a run never disturbed (one worker: the same order of updates). */
START_TEST(fault_ps_killed_and_restarted_the_job_goes_on_from_its_checkpoint)
{
    cluster_t c;
    char *out = NULL, *id, listen[300];
    double calm, got;
    int rc;

    start_cluster_of(&c, 1);
    rc = tessera((char *[]){"submit", (char *)write_job_ckpt("ps-calm", "ps-calm"), c.chief_flag,
                            "--watch", NULL},
                 &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    calm = test_accuracy(out);
    free(out);
    id = submit(&c, write_job_ckpt("ps-lost", "ps-lost"));
    wait_running_past(&c, id, 650);
    snprintf(listen, sizeof(listen), "--listen=%s", c.ps.listen);
    launch_stop(&c.ps, SIGKILL, 5000, NULL);
    usleep(500000);
    harness_start(&c.ps, "tessera-ps", "fault-ps-again", "--task-index=0", listen, NULL);
    expect_completed(&c, id, &out);
    /* the call that finds it gone: a push ("cannot be reached") or a checkpoint's write */
    ck_assert_msg(strstr(out, "ps:0 (") != NULL &&
                      strstr(out, "waiting for it to come back") != NULL &&
                      strstr(out, "restored from step") != NULL,
                  "%s", out);
    got = test_accuracy(out);
    printf("ps killed and restarted: test accuracy %.4f, undisturbed %.4f\n", got, calm);
    ck_assert_double_eq(harness_metric(&c.chief, "tessera_chief_ps_recoveries_total"), 1);
    ck_assert_double_eq(
        harness_metric(&c.chief, "tessera_chief_task_failures_total{task=\"ps:0\"}"), 1);
    ck_assert_msg(got == calm, "%.4f, undisturbed %.4f: %s", got, calm, out);
    free(out);
    free(id);

    /* a job without checkpoints starts over from step 0, with the same numbers in the end */
    id = submit(&c, write_job("ps-fresh"));
    wait_running_past(&c, id, 650);
    launch_stop(&c.ps, SIGKILL, 5000, NULL);
    usleep(500000);
    harness_start(&c.ps, "tessera-ps", "fault-ps-third", "--task-index=0", listen, NULL);
    expect_completed(&c, id, &out);
    ck_assert_msg(strstr(out, "starting over from step 0") != NULL, "%s", out);
    got = test_accuracy(out);
    printf("ps killed, no checkpoint, started over: test accuracy %.4f\n", got);
    ck_assert_msg(got == calm, "%.4f, undisturbed %.4f: %s", got, calm, out);
    ck_assert_double_eq(harness_metric(&c.chief, "tessera_chief_ps_recoveries_total"), 2);
    free(out);
    free(id);
    stop_cluster(&c);
}
END_TEST

/* Both workers stopped, with a worker timeout longer than the stall timeout: the job says it is
 * stalled and on which workers, then, woken, they finish it. */
START_TEST(fault_stalled_job_names_the_workers_it_waits_on)
{
    cluster_t c;
    char *out = NULL, *id;
    double t0;

    start_cluster_with(&c, 2, "--worker-timeout=60s", "--stall-timeout=2s");
    id = submit(&c, write_job("stalled"));
    wait_running_past(&c, id, 300);
    ck_assert_int_eq(kill(c.worker[0].pid, SIGSTOP), 0);
    ck_assert_int_eq(kill(c.worker[1].pid, SIGSTOP), 0);
    t0 = clock_now_s();
    while (!harness_file_contains(c.chief_log, "stalled: no step for")) {
        ck_assert_msg(clock_now_s() - t0 < 20, "no stalled event in 20 s");
        usleep(50000);
    }
    printf("stalled event after %.1f s (--stall-timeout=2s)\n", clock_now_s() - t0);
    ck_assert_int_eq(kill(c.worker[0].pid, SIGCONT), 0);
    ck_assert_int_eq(kill(c.worker[1].pid, SIGCONT), 0);
    expect_completed(&c, id, &out);
    ck_assert_msg(strstr(out, "stalled: no step for") != NULL && strstr(out, "worker:0 (") &&
                      strstr(out, "worker:1 ("),
                  "%s", out);
    free(out);
    free(id);
    stop_cluster(&c);
}
END_TEST

/* The PS and a worker killed together and both started again: the job goes back to its newest
 * checkpoint when the PS is back, takes the worker back when it is, and completes. */
START_TEST(fault_ps_and_a_worker_killed_together_the_job_completes)
{
    cluster_t c;
    char *out = NULL, *id, ps_listen[300], w_listen[300];

    start_cluster(&c);
    /* 16 epochs: the restarted worker has time to be taken back before the job ends (with 8 a
     * clean clone once finished the last 1400 steps in 1.2 s, before it was) */
    id = submit(&c, write_job_of("together", "together", 16));
    snprintf(ps_listen, sizeof(ps_listen), "--listen=%s", c.ps.listen);
    snprintf(w_listen, sizeof(w_listen), "--listen=%s", c.worker[1].listen);
    wait_running_past(&c, id, 650);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    launch_stop(&c.ps, SIGKILL, 5000, NULL);
    usleep(500000);
    harness_start(&c.ps, "tessera-ps", "fault-ps-together", "--task-index=0", ps_listen, NULL);
    usleep(500000);
    harness_start(&c.worker[1], "tessera-worker", "fault-w1-together", "--task-index=1", w_listen,
                  NULL);
    expect_completed_steps(&c, id, 4000, &out);
    ck_assert_msg(strstr(out, "restored from step") != NULL && strstr(out, "is back") != NULL, "%s",
                  out);
    printf("ps and worker killed together: test accuracy %.4f\n", test_accuracy(out));
    ck_assert_msg(test_accuracy(out) >= 0.6, "%s", out);
    ck_assert_double_eq(harness_metric(&c.chief, "tessera_chief_ps_recoveries_total"), 1);
    free(out);
    free(id);
    stop_cluster(&c);
}
END_TEST

/* ---- a worker cut off by the network (root only) ---------------------------------------- */

static char netns_name[32], veth_root[16], veth_ns[16];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[400];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd);
}

static void netns_remove(void)
{
    if (netns_name[0] != '\0') /* takes the veth pair with it */
        sh("ip netns del %s 2>/dev/null; ip link del %s 2>/dev/null", netns_name, veth_root);
    netns_name[0] = '\0';
}

/* A network namespace joined to this one by a veth pair: ROOT_IP here, NS_IP there. False (and
 * nothing left behind) where that cannot be made: not root, no iproute2, no veth in the kernel or
 * no right to make one (a container), with the reason in *why. */
static bool netns_make(const char *root_ip, const char *ns_ip, const char **why)
{
    int id = (int)getpid() % 100000;

    snprintf(netns_name, sizeof(netns_name), "tsfault%d", id);
    snprintf(veth_root, sizeof(veth_root), "tsr%d", id);
    snprintf(veth_ns, sizeof(veth_ns), "tsn%d", id);
    *why = geteuid() != 0 ? "not root" : "`ip netns add` fails (no iproute2, or not allowed)";
    if (geteuid() != 0 || sh("ip netns add %s 2>/dev/null", netns_name) != 0) {
        netns_name[0] = '\0';
        return false;
    }
    atexit(netns_remove);
    *why = "a veth pair cannot be made or addressed";
    if (sh("ip link add %s type veth peer name %s netns %s", veth_root, veth_ns, netns_name) != 0 ||
        sh("ip addr add %s/30 dev %s && ip link set %s up", root_ip, veth_root, veth_root) != 0 ||
        sh("ip -n %s addr add %s/30 dev %s && ip -n %s link set %s up && ip -n %s link set lo up",
           netns_name, ns_ip, veth_ns, netns_name, veth_ns, netns_name) != 0) {
        netns_remove();
        return false;
    }
    return true;
}

/* A worker cut off by the network: the link to its namespace goes down (its connections stay
 * open, nothing answers, as when a cable or a switch fails). The chief notices within
 * --worker-timeout, the job goes on with the other worker reading both shards, and when the
 * link comes back the worker is taken back into the job. */
START_TEST(fault_worker_cut_off_by_the_network_is_noticed_and_taken_back)
{
    char root_ip[32], ns_ip[32], ps_listen[64], w_listen[64], w_metrics[64], ps_flag[200];
    char worker_flag[400], prog[512], log[600], *out = NULL, *id;
    launch_proc_t ps, w0, w1, chief;
    status_msg_t err = {0};
    cluster_t c;
    double calm, t0, cut_noticed;
    const char *ip, *why;
    int net = (int)(getpid() % 60) * 4;

    snprintf(root_ip, sizeof(root_ip), "10.213.%d.%d", net / 256, net % 256 + 1);
    snprintf(ns_ip, sizeof(ns_ip), "10.213.%d.%d", net / 256, net % 256 + 2);
    if (!netns_make(root_ip, ns_ip, &why)) {
        printf("SKIP fault_worker_cut_off_by_the_network_is_noticed_and_taken_back: %s (it needs "
               "a network namespace and a veth pair)\n",
               why);
        return;
    }
    snprintf(ps_listen, sizeof(ps_listen), "--listen=%s:0", root_ip);
    harness_start(&ps, "tessera-ps", "cut-ps", "--task-index=0", ps_listen, NULL);
    harness_start(&w0, "tessera-worker", "cut-w0", "--task-index=0", NULL);
    snprintf(prog, sizeof(prog), "%s", harness_program("tessera-worker"));
    ip = access("/usr/sbin/ip", X_OK) == 0 ? "/usr/sbin/ip" : "/sbin/ip";
    snprintf(w_listen, sizeof(w_listen), "--listen=%s:0", ns_ip);
    snprintf(w_metrics, sizeof(w_metrics), "--metrics-listen=%s:0", ns_ip);
    snprintf(log, sizeof(log), "%s/cut-w1.log", harness_tmpdir());
    ck_assert_msg(
        launch_start("cut-w1",
                     (char *[]){(char *)ip, "netns", "exec", netns_name, prog, w_listen, w_metrics,
                                "--task-index=1", "--data-root=/", "--compute-threads=1", NULL},
                     log, 20000, &w1, &err) == STATUS_OK,
        "%s", err.text);
    snprintf(ps_flag, sizeof(ps_flag), "--ps=%s", ps.listen);
    snprintf(worker_flag, sizeof(worker_flag), "--worker=%s,%s", w0.listen, w1.listen);
    harness_start(&chief, "tessera-chief", "cut-chief", ps_flag, worker_flag, "--worker-timeout=3s",
                  NULL);
    c = (cluster_t){.chief = chief, .n_workers = 0};
    snprintf(c.chief_flag, sizeof(c.chief_flag), "--chief=%s", chief.listen);
    calm = undisturbed(&c);
    id = submit(&c, write_job_of("cut", NULL, 80));
    wait_running_past(&c, id, 300);
    ck_assert_int_eq(sh("ip -n %s link set %s down", netns_name, veth_ns), 0);
    t0 = clock_now_s();
    wait_metric(&c, "tessera_chief_task_failures_total{task=\"worker:1\"}", 1);
    cut_noticed = clock_now_s() - t0;
    wait_running_past(&c, id, 2500); /* the job goes on without it */
    ck_assert_int_eq(sh("ip -n %s link set %s up", netns_name, veth_ns), 0);
    t0 = clock_now_s();
    wait_metric(&c, "tessera_chief_worker_rejoins_total", 1);
    printf("worker cut off: noticed after %.1f s (--worker-timeout=3s), back %.1f s after the "
           "link\n",
           cut_noticed, clock_now_s() - t0);
    expect_completed_steps(&c, id, 20000, &out);
    ck_assert_msg(strstr(out, "answered no health check") != NULL && strstr(out, "is back") != NULL,
                  "%s", out);
    printf("worker cut off by the network and back: test accuracy %.4f\n", test_accuracy(out));
    ck_assert_msg(test_accuracy(out) >= calm - 0.04, "%.4f: %s", calm, out);
    free(out);
    free(id);
    harness_stop(&chief);
    launch_stop(&w1, SIGKILL, 5000, NULL);
    harness_stop(&w0);
    harness_stop(&ps);
    netns_remove();
}
END_TEST

/* TensorFlow's testHandleDatasetCreationFailure: a worker killed while the job's data is being
 * built (300,000 examples each) fails nothing; the job runs on the other, every step counted. */
START_TEST(fault_worker_killed_while_its_data_is_built_the_job_completes)
{
    cluster_t c;
    char *out = NULL, *id;

    start_cluster(&c);
    id = submit(&c, write_job_with("building", "{adam: {learning_rate: 0.001}}", 300000,
                                   "{steps: 300}", NULL));
    usleep(150000);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    expect_completed_steps(&c, id, 300, &out);
    free(out);
    free(id);
    stop_cluster(&c);
}
END_TEST

/* TensorFlow's testOneWorkerPreemptionWithCancellation: with a worker down, an application error
 * (a loss that becomes NaN) fails the job at once, blaming the job, not a task; the cluster then
 * runs the next job, on both workers once the lost one is back. */
START_TEST(fault_application_error_with_a_worker_down_fails_the_job_and_the_next_one_runs)
{
    cluster_t c;
    char *out = NULL, listen[300];
    int rc;

    start_cluster(&c);
    snprintf(listen, sizeof(listen), "--listen=%s", c.worker[1].listen);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    rc = tessera((char *[]){"submit",
                            (char *)write_job_with("nan", "{sgd: {learning_rate: 1.0e30}}", 8000,
                                                   "{steps: 500}", NULL),
                            c.chief_flag, "--watch", NULL},
                 &out);
    ck_assert_msg(rc != 0 && strstr(out, "the loss became") != NULL &&
                      strstr(out, "(fault: application, at worker:0)") != NULL,
                  "exit %d: %s", rc, out);
    free(out);
    harness_start(&c.worker[1], "tessera-worker", "fault-w1-after-nan", "--task-index=1", listen,
                  NULL);
    rc = tessera(
        (char *[]){"submit", (char *)write_job("after-nan"), c.chief_flag, "--watch", NULL}, &out);
    ck_assert_msg(rc == 0 && strstr(out, "training on 2 workers") != NULL, "exit %d: %s", rc, out);
    free(out);
    stop_cluster(&c);
}
END_TEST

/* A PS restarted so fast that nobody saw it unreachable answers that it has no such job: the
 * workers name it as lost (not the job as wrong) and the job goes on from its checkpoint. Here
 * the PS forgets the job by a DropJob of its variables, the same state a fresh PS is in. */
START_TEST(fault_ps_that_forgot_the_job_is_recovered_from_the_checkpoint)
{
    Tessera__V1__DropJobRequest req = TESSERA__V1__DROP_JOB_REQUEST__INIT;
    Tessera__V1__DropJobResponse *resp = NULL;
    rpc_channel_t *ch;
    rpc_error_t err;
    cluster_t c;
    char *out = NULL, *id;
    double calm;

    start_cluster_of(&c, 1);
    calm = undisturbed(&c);
    id = submit(&c, write_job_ckpt("ps-forgot", "ps-forgot"));
    wait_running_past(&c, id, 650);
    ch = harness_channel(&c.ps);
    req.job = id;
    ck_assert_msg(rpc_ps_drop_job(ch, &req, NULL, &resp, NULL, &err) == STATUS_OK, "%s",
                  err.message);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    rpc_channel_free(ch);
    expect_completed(&c, id, &out);
    ck_assert_msg(strstr(out, "restored from step") != NULL, "%s", out);
    ck_assert_double_eq(harness_metric(&c.chief, "tessera_chief_ps_recoveries_total"), 1);
    expect_accuracy("PS that forgot the job", out, calm);
    free(out);
    free(id);
    stop_cluster(&c);
}
END_TEST

/* A PS that does not come back within --ps-timeout fails the job, naming it and blaming it. */
START_TEST(fault_ps_gone_for_good_fails_the_job_naming_it)
{
    cluster_t c;
    char *out = NULL, *id, listen[300];
    int rc;

    start_cluster_with(&c, 1, "--worker-timeout=3s", "--ps-timeout=2s");
    id = submit(&c, write_job_ckpt("ps-gone", "ps-gone"));
    wait_running_past(&c, id, 300);
    snprintf(listen, sizeof(listen), "--listen=%s", c.ps.listen);
    launch_stop(&c.ps, SIGKILL, 5000, NULL);
    rc = tessera((char *[]){"watch", id, c.chief_flag, NULL}, &out);
    ck_assert_msg(rc != 0 && strstr(out, "did not come back within --ps-timeout") != NULL &&
                      strstr(out, "(fault: ps, at ps:0)") != NULL,
                  "exit %d: %s", rc, out);
    free(out);
    free(id);
    harness_start(&c.ps, "tessera-ps", "fault-ps-gone-again", "--task-index=0", listen, NULL);
    stop_cluster(&c);
}
END_TEST

/* A worker started with --chief announces itself: the chief adds it to its cluster (`tessera
 * cluster` lists it) and to the running job, where it reads the last batches of the other's
 * shard (every step still counted once); the next job trains on both from its start; killed in
 * the middle of that job, it is removed from it without failing it; and the chief's journal
 * keeps it across a restart. */
START_TEST(fault_worker_announcing_itself_joins_the_running_job_and_the_next)
{
    cluster_t c;
    char *out = NULL, *id, chief[300], state[400], ps[300], worker[300], listen[300];
    double t0, before, calm;

    snprintf(state, sizeof(state), "--state-dir=%s/grow-state", harness_tmpdir());
    start_cluster_with(&c, 1, NULL, state);
    calm = undisturbed(&c);
    id = submit(&c, write_job_of("grow-a", NULL, 16));
    wait_running_past(&c, id, 300);
    snprintf(chief, sizeof(chief), "--chief=%s", c.chief.listen);
    harness_start(&c.worker[1], "tessera-worker", "fault-joined", chief, NULL);
    c.n_workers = 2;
    t0 = clock_now_s();
    while (!harness_file_contains(c.chief_log, "joined the running job")) {
        ck_assert_msg(clock_now_s() - t0 < 30, "the announced worker did not join the job");
        usleep(50000);
    }
    printf("announced worker in the running job after %.1f s\n", clock_now_s() - t0);
    expect_completed_steps(&c, id, 4000, &out);
    ck_assert_msg(strstr(out, "training on 1 workers") != NULL &&
                      strstr(out, "worker 1 (") != NULL &&
                      strstr(out, "joined the running job") != NULL,
                  "%s", out);
    ck_assert_msg(harness_metric(&c.worker[1], "tessera_worker_steps_total") > 0,
                  "the worker that joined ran no step of the job");
    ck_assert_double_eq(harness_metric(&c.chief, "tessera_chief_worker_joins_total"), 1);
    ck_assert_double_eq(harness_metric(&c.chief, "tessera_chief_worker_rejoins_total"), 0);
    expect_accuracy("worker joined mid-job", out, calm);
    free(out);
    free(id);
    ck_assert_int_eq(tessera((char *[]){"cluster", c.chief_flag, NULL}, &out), 0);
    ck_assert_msg(strstr(out, "worker     1") != NULL && strstr(out, c.worker[1].listen) != NULL,
                  "%s", out);
    free(out);

    before = harness_metric(&c.worker[1], "tessera_worker_steps_total");
    id = submit(&c, write_job("grow-b"));
    wait_running_past(&c, id, 500);
    ck_assert_msg(harness_metric(&c.worker[1], "tessera_worker_steps_total") > before,
                  "the joined worker ran no step of the next job");
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    expect_completed(&c, id, &out);
    ck_assert_msg(strstr(out, "training on 2 workers") != NULL && strstr(out, "worker 1 (") != NULL,
                  "%s", out);
    ck_assert_double_eq(
        harness_metric(&c.chief, "tessera_chief_task_failures_total{task=\"worker:1\"}"), 1);
    free(out);
    free(id);

    /* a chief restarted on its state dir still knows the worker that joined (dead now: it
     * cannot have announced itself again) */
    snprintf(ps, sizeof(ps), "--ps=%s", c.ps.listen);
    snprintf(worker, sizeof(worker), "--worker=%s", c.worker[0].listen);
    snprintf(listen, sizeof(listen), "--listen=%s", c.chief.listen);
    launch_stop(&c.chief, SIGKILL, 5000, NULL);
    harness_start(&c.chief, "tessera-chief", "fault-grow-again", ps, worker, listen, state, NULL);
    ck_assert_int_ne(tessera((char *[]){"cluster", c.chief_flag, NULL}, &out), -1);
    ck_assert_msg(strstr(out, "worker     1") != NULL && strstr(out, c.worker[1].listen) != NULL,
                  "%s", out);
    free(out);
    stop_cluster(&c);
}
END_TEST

typedef struct watch_thread {
    pthread_t tid;
    char *args[4];
    char *out;
    int rc;
} watch_thread_t;

static void *watch_main(void *arg)
{
    watch_thread_t *w = arg;
    w->rc = tessera(w->args, &w->out);
    return NULL;
}

/* `tessera watch id` in the background, for a job whose chief goes away meanwhile. */
static void watch_start(watch_thread_t *w, cluster_t *c, const char *id)
{
    *w = (watch_thread_t){.args = {"watch", (char *)id, c->chief_flag, NULL}};
    ck_assert_int_eq(pthread_create(&w->tid, NULL, watch_main, w), 0);
}

/* The chief killed with SIGKILL (and later stopped with SIGTERM) mid-job and started again with
 * the same --state-dir: its journal gives it back the job table. The running job goes on from
 * its newest checkpoint and ends at exactly the undisturbed numbers (one worker), the queued job
 * runs after it, the ended one is still listed, and `tessera watch` rides through the restart. */
START_TEST(fault_chief_killed_and_restarted_takes_its_jobs_up_again)
{
    cluster_t c;
    watch_thread_t w;
    char *out = NULL, *calm_id, *id, *next_id, state[400], listen[300], ps[300], worker[300];
    char ps_listen[300];
    Tessera__V1__JobInfo *job;
    double calm;

    snprintf(state, sizeof(state), "--state-dir=%s/chief-state", harness_tmpdir());
    start_cluster_with(&c, 1, NULL, state);
    snprintf(listen, sizeof(listen), "--listen=%s", c.chief.listen);
    snprintf(ps, sizeof(ps), "--ps=%s", c.ps.listen);
    snprintf(worker, sizeof(worker), "--worker=%s", c.worker[0].listen);
    ck_assert_int_eq(
        tessera((char *[]){"submit", (char *)write_job_ckpt("chief-calm", "chief-calm"),
                           c.chief_flag, "--watch", NULL},
                &out),
        0);
    calm = test_accuracy(out);
    calm_id = strdup("chief-calm-1");
    free(out);
    id = submit(&c, write_job_ckpt("chief-lost", "chief-lost"));
    next_id = submit(&c, write_job_of("chief-next", NULL, 2));
    watch_start(&w, &c, id);
    wait_running_past(&c, id, 650);
    launch_stop(&c.chief, SIGKILL, 5000, NULL);
    usleep(500000);
    harness_start(&c.chief, "tessera-chief", "fault-chief-again", ps, worker, listen, state,
                  "--worker-timeout=3s", NULL);
    pthread_join(w.tid, NULL);
    ck_assert_msg(w.rc == 0, "exit %d: %s", w.rc, w.out);
    ck_assert_msg(strstr(w.out, "lost the chief") != NULL && strstr(w.out, "reconnected") != NULL &&
                      strstr(w.out, "restored from step") != NULL,
                  "%s", w.out);
    printf("chief killed and restarted: test accuracy %.4f, undisturbed %.4f\n",
           test_accuracy(w.out), calm);
    ck_assert_msg(test_accuracy(w.out) == calm, "%s", w.out);
    free(w.out);
    job = get_job(&c, id);
    ck_assert_int_eq(job->state, TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
    ck_assert_int_eq(job->progress->step, 2000);
    protobuf_c_message_free_unpacked(&job->base, NULL);
    expect_completed_steps(&c, next_id, 500, &out); /* queued before, run after */
    free(out);
    job = get_job(&c, calm_id); /* ended before the crash: still listed */
    ck_assert_int_eq(job->state, TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
    ck_assert_int_eq(job->progress->step, 2000);
    protobuf_c_message_free_unpacked(&job->base, NULL);
    free(id);

    /* stopped cleanly (SIGTERM, as systemd restarts it) mid-job: the same */
    id = submit(&c, write_job_ckpt("chief-stop", "chief-stop"));
    watch_start(&w, &c, id);
    wait_running_past(&c, id, 350);
    harness_stop(&c.chief);
    harness_start(&c.chief, "tessera-chief", "fault-chief-third", ps, worker, listen, state,
                  "--worker-timeout=3s", NULL);
    pthread_join(w.tid, NULL);
    ck_assert_msg(w.rc == 0 && strstr(w.out, "restored from step") != NULL &&
                      test_accuracy(w.out) == calm,
                  "exit %d: %s", w.rc, w.out);
    free(w.out);
    expect_completed_steps(&c, id, 2000, &out);
    free(out);
    free(id);

    /* the chief and the PS killed together; the chief back first, waiting for the PS */
    id = submit(&c, write_job_ckpt("chief-ps", "chief-ps"));
    wait_running_past(&c, id, 450);
    snprintf(ps_listen, sizeof(ps_listen), "--listen=%s", c.ps.listen);
    launch_stop(&c.chief, SIGKILL, 5000, NULL);
    launch_stop(&c.ps, SIGKILL, 5000, NULL);
    harness_start(&c.chief, "tessera-chief", "fault-chief-fourth", ps, worker, listen, state,
                  "--worker-timeout=3s", NULL);
    usleep(1000000);
    harness_start(&c.ps, "tessera-ps", "fault-ps-with-chief", "--task-index=0", ps_listen, NULL);
    expect_completed_steps(&c, id, 2000, &out);
    ck_assert_msg(strstr(out, "restored from step") != NULL && test_accuracy(out) == calm, "%s",
                  out);
    free(out);
    free(id);
    /* the job that ended before the first crash keeps its metrics through three restarts and
     * the journal's rewrites */
    job = get_job(&c, calm_id);
    ck_assert_uint_eq(job->progress->n_metrics, 1);
    ck_assert_str_eq(job->progress->metrics[0]->name, "precision");
    ck_assert_uint_eq(job->progress->n_test_metrics, 1);
    ck_assert_msg(job->progress->test_metrics[0]->value > 0.5, "test precision %g",
                  job->progress->test_metrics[0]->value);
    protobuf_c_message_free_unpacked(&job->base, NULL);
    free(next_id);
    free(calm_id);
    stop_cluster(&c);
}
END_TEST

/* TESSERA_FAULT_TEST=WORDS runs only the tests whose names contain it (while working on one). */
#define ADD(t)                                                                                     \
    do {                                                                                           \
        const char *only = getenv("TESSERA_FAULT_TEST");                                           \
        if (only == NULL || strstr(#t, only) != NULL)                                              \
            tcase_add_test(tc, t);                                                                 \
    } while (0)

int main(void)
{
    Suite *s = suite_create("fault");
    TCase *tc = tcase_create("fault");

    grpc_init();
    tcase_set_timeout(tc, 600);
    ADD(fault_worker_killed_mid_job_the_job_finishes_on_the_other);
    ADD(fault_worker_stopped_is_noticed_within_the_timeout_and_the_job_finishes);
    ADD(fault_worker_restarted_between_jobs_takes_part_in_the_next);
    ADD(fault_job_submitted_while_a_worker_is_down_runs_on_the_others);
    ADD(fault_job_sharded_by_file_with_a_worker_down_reads_its_files_too);
    ADD(fault_worker_restarted_at_its_address_rejoins_the_job);
    ADD(fault_ps_killed_and_restarted_the_job_goes_on_from_its_checkpoint);
    ADD(fault_stalled_job_names_the_workers_it_waits_on);
    ADD(fault_workers_killed_again_and_again_rejoin_and_the_job_completes);
    ADD(fault_ps_and_a_worker_killed_together_the_job_completes);
    ADD(fault_chief_killed_and_restarted_takes_its_jobs_up_again);
    ADD(fault_worker_cut_off_by_the_network_is_noticed_and_taken_back);
    ADD(fault_worker_announcing_itself_joins_the_running_job_and_the_next);
    ADD(fault_ps_gone_for_good_fails_the_job_naming_it);
    ADD(fault_ps_that_forgot_the_job_is_recovered_from_the_checkpoint);
    ADD(fault_worker_killed_while_its_data_is_built_the_job_completes);
    ADD(fault_application_error_with_a_worker_down_fails_the_job_and_the_next_one_runs);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
