/* multi_worker_mirrored with real daemons on loopback: a chief (with no parameter server) and
 * two workers whose gradients meet in the ring all-reduce. The Fashion-MNIST MLP reaches 86%;
 * an epoch of it ends at the test accuracy `tessera train` reaches on one device with the same
 * global batch (the same examples in each step, split between the workers); a worker killed
 * mid-job leaves the job finishing on the other, at the numbers of an undisturbed run. */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "check_run.h"
#include "harness.h"

typedef struct cluster {
    launch_proc_t worker[2], chief;
    char chief_flag[300];
} cluster_t;

static void start_cluster_with(cluster_t *c, const char *chief_flag)
{
    char worker_flag[400];

    harness_start(&c->worker[0], "tessera-worker", "sync-w0", "--task-index=0", NULL);
    harness_start(&c->worker[1], "tessera-worker", "sync-w1", "--task-index=1", NULL);
    snprintf(worker_flag, sizeof(worker_flag), "--worker=%s,%s", c->worker[0].listen,
             c->worker[1].listen);
    harness_start(&c->chief, "tessera-chief", "sync-chief", worker_flag, chief_flag, NULL);
    snprintf(c->chief_flag, sizeof(c->chief_flag), "--chief=%s", c->chief.listen);
}

static void start_cluster(cluster_t *c)
{
    start_cluster_with(c, NULL);
}

static void stop_cluster(cluster_t *c)
{
    harness_stop(&c->chief);
    launch_stop(&c->worker[1], SIGKILL, 5000, NULL);
    harness_stop(&c->worker[0]);
}

static double test_accuracy(const char *out)
{
    const char *p = NULL, *q = out;
    while ((q = strstr(q, "test accuracy ")) != NULL)
        p = q++;
    return p ? strtod(p + strlen("test accuracy "), NULL) : -1;
}

/* The MLP example with `strategy` and `batch` (per worker) and `epochs`, in the test's dir. */
static const char *mlp_job(const char *name, const char *strategy, int batch, int epochs)
{
    static char path[4][600];
    static int next;
    char *text = NULL, *out = path[next++ % 4], *s, *b, *e;
    size_t len = 0;
    FILE *f = fopen(harness_source("examples/fashion-mnist-mlp.yaml"), "r");

    ck_assert_ptr_nonnull(f);
    ck_assert(getdelim(&text, &len, '\0', f) > 0);
    fclose(f);
    ck_assert_ptr_nonnull(s = strstr(text, "strategy: one_device\n"));
    ck_assert_ptr_nonnull(b = strstr(text, "batch_size: 64\n"));
    ck_assert_ptr_nonnull(e = strstr(text, "train: {epochs: 5}"));
    snprintf(out, sizeof(path[0]), "%s/%s.yaml", harness_tmpdir(), name);
    ck_assert_ptr_nonnull(f = fopen(out, "w"));
    fprintf(f,
            "%.*sstrategy: %s\n%.*sbatch_size: %d\n%.*strain: {epochs: %d, "
            "steps_per_execution: 20}\n",
            (int)(s - text), text, strategy, (int)(b - s - strlen("strategy: one_device\n")),
            s + strlen("strategy: one_device\n"), batch, (int)(e - b - strlen("batch_size: 64\n")),
            b + strlen("batch_size: 64\n"), epochs);
    fclose(f);
    free(text);
    return out;
}

static int tessera(char *const *args, char **out)
{
    char *argv[12] = {(char *)harness_program("tessera")};
    for (int i = 0; args[i] != NULL && i < 10; i++)
        argv[i + 1] = args[i];
    return harness_run(argv, NULL, NULL, 600000, out);
}

START_TEST(sync_fashion_mnist_mlp_reaches_86_percent_on_two_workers)
{
    cluster_t c;
    char *out = NULL;
    int rc;

    start_cluster(&c);
    rc = tessera((char *[]){"submit", (char *)mlp_job("mwms5", "multi_worker_mirrored", 32, 5),
                            c.chief_flag, "--watch", NULL},
                 &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    printf("multi_worker_mirrored, 2 workers, 5 epochs: test accuracy %.4f\n", test_accuracy(out));
    ck_assert_msg(strstr(out, "training on 2 workers (multi_worker_mirrored") != NULL, "%s", out);
    ck_assert_msg(test_accuracy(out) >= 0.86, "%s", out);
    free(out);
    stop_cluster(&c);
}
END_TEST

/* Each step's global batch is one_device's, split between the workers: an epoch ends where one
 * device ends, to the printed digits. */
START_TEST(sync_epoch_ends_where_one_device_does)
{
    cluster_t c;
    char *out = NULL, *one = NULL;
    int rc;

    rc = tessera((char *[]){"train", (char *)mlp_job("one1", "one_device", 64, 1), NULL}, &one);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, one);
    start_cluster(&c);
    rc = tessera((char *[]){"submit", (char *)mlp_job("mwms1", "multi_worker_mirrored", 32, 1),
                            c.chief_flag, "--watch", NULL},
                 &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    printf("one epoch: one_device test accuracy %.4f, multi_worker_mirrored %.4f\n",
           test_accuracy(one), test_accuracy(out));
    ck_assert_double_eq_tol(test_accuracy(one), test_accuracy(out), 0.002);
    free(out);
    free(one);
    stop_cluster(&c);
}
END_TEST

/* A worker killed mid-job: the other goes back to where the failed closure started, takes the
 * lost worker's slice of every batch too, and the job ends at the numbers of an undisturbed run
 * (the same global batches, the same sums). */
START_TEST(sync_worker_killed_the_job_finishes_on_the_other_at_the_same_numbers)
{
    cluster_t c;
    char *calm = NULL, *out = NULL, *id, *p;
    const char *job = mlp_job("mwms-kill", "multi_worker_mirrored", 32, 4);
    int rc;

    start_cluster(&c);
    rc = tessera((char *[]){"submit", (char *)job, c.chief_flag, "--watch", NULL}, &calm);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, calm);
    rc = tessera((char *[]){"submit", (char *)job, c.chief_flag, NULL}, &out);
    ck_assert_msg(rc == 0 && (p = strstr(out, "submitted ")) != NULL, "exit %d: %s", rc, out);
    id = strndup(p + strlen("submitted "), strcspn(p + strlen("submitted "), " \n"));
    free(out);
    usleep(1500 * 1000);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    rc = tessera((char *[]){"watch", id, c.chief_flag, NULL}, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "worker 1 (") != NULL && strstr(out, "lost") != NULL &&
                      strstr(out, "3752 steps") != NULL,
                  "%s", out);
    printf("worker killed: test accuracy %.4f, undisturbed %.4f\n", test_accuracy(out),
           test_accuracy(calm));
    ck_assert_double_eq_tol(test_accuracy(out), test_accuracy(calm), 0.002);
    free(out);
    free(calm);
    free(id);
    stop_cluster(&c);
}
END_TEST

/* Killed, then started again at its address (as systemd or Kubernetes would): the worker joins
 * the ring again between closures, takes the others' values and optimizer state, and the job
 * ends on both workers at the numbers of an undisturbed run. */
START_TEST(sync_worker_restarted_rejoins_the_ring)
{
    cluster_t c;
    char *calm = NULL, *out = NULL, *id, *p, listen[300];
    const char *job = mlp_job("mwms-back", "multi_worker_mirrored", 32, 6);
    int rc;

    start_cluster(&c);
    rc = tessera((char *[]){"submit", (char *)job, c.chief_flag, "--watch", NULL}, &calm);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, calm);
    rc = tessera((char *[]){"submit", (char *)job, c.chief_flag, NULL}, &out);
    ck_assert_msg(rc == 0 && (p = strstr(out, "submitted ")) != NULL, "exit %d: %s", rc, out);
    id = strndup(p + strlen("submitted "), strcspn(p + strlen("submitted "), " \n"));
    free(out);
    usleep(1000 * 1000);
    snprintf(listen, sizeof(listen), "--listen=%s", c.worker[1].listen);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    harness_start(&c.worker[1], "tessera-worker", "sync-w1-again", "--task-index=1", listen, NULL);
    rc = tessera((char *[]){"watch", id, c.chief_flag, NULL}, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "lost") != NULL && strstr(out, "is back") != NULL &&
                      strstr(out, "5628 steps") != NULL,
                  "%s", out);
    printf("worker restarted: test accuracy %.4f, undisturbed %.4f\n", test_accuracy(out),
           test_accuracy(calm));
    ck_assert_double_eq_tol(test_accuracy(out), test_accuracy(calm), 0.002);
    free(out);
    free(calm);
    free(id);
    stop_cluster(&c);
}
END_TEST

/* A worker stopped with SIGSTOP (hung: its connections stay open, nothing answers): the chief's
 * health checks notice it within --worker-timeout, cancel its call, and the other goes on as
 * for a killed one; woken, it answers again and rejoins; the job ends at the undisturbed
 * numbers. */
START_TEST(sync_worker_hung_is_noticed_and_taken_back)
{
    cluster_t c;
    char *calm = NULL, *out = NULL, *id, *p, log[700];
    const char *job = mlp_job("mwms-hung", "multi_worker_mirrored", 32, 8);
    double t0;
    int rc;

    start_cluster_with(&c, "--worker-timeout=3s");
    rc = tessera((char *[]){"submit", (char *)job, c.chief_flag, "--watch", NULL}, &calm);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, calm);
    rc = tessera((char *[]){"submit", (char *)job, c.chief_flag, NULL}, &out);
    ck_assert_msg(rc == 0 && (p = strstr(out, "submitted ")) != NULL, "exit %d: %s", rc, out);
    id = strndup(p + strlen("submitted "), strcspn(p + strlen("submitted "), " \n"));
    free(out);
    usleep(1000 * 1000);
    ck_assert_int_eq(kill(c.worker[1].pid, SIGSTOP), 0);
    t0 = clock_now_s();
    snprintf(log, sizeof(log), "%s/sync-chief.log", harness_tmpdir());
    while (!harness_file_contains(log, "lost: ")) {
        ck_assert_msg(clock_now_s() - t0 < 30, "a stopped worker not noticed in 30 s");
        usleep(50000);
    }
    printf("stopped worker left the ring after %.1f s (--worker-timeout=3s)\n", clock_now_s() - t0);
    ck_assert_msg(clock_now_s() - t0 < 9, "noticed after %.1f s", clock_now_s() - t0);
    ck_assert_int_eq(kill(c.worker[1].pid, SIGCONT), 0);
    rc = tessera((char *[]){"watch", id, c.chief_flag, NULL}, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "lost") != NULL && strstr(out, "is back") != NULL, "%s", out);
    printf("worker stopped and woken: test accuracy %.4f, undisturbed %.4f\n", test_accuracy(out),
           test_accuracy(calm));
    ck_assert_double_eq_tol(test_accuracy(out), test_accuracy(calm), 0.002);
    free(out);
    free(calm);
    free(id);
    stop_cluster(&c);
}
END_TEST

/* A loss that is not finite fails the job at once as the application's fault: the worker that
 * saw it breaks the ring, so its neighbours do not wait for the ring's timeout. */
START_TEST(sync_nan_loss_fails_the_job_at_once_as_the_applications)
{
    cluster_t c;
    char *out = NULL, path[600], *text = NULL, *opt;
    const char *job = mlp_job("mwms-nan", "multi_worker_mirrored", 32, 1);
    size_t len = 0;
    FILE *f = fopen(job, "r");
    double t0;
    int rc;

    ck_assert_ptr_nonnull(f);
    ck_assert(getdelim(&text, &len, '\0', f) > 0);
    fclose(f);
    snprintf(path, sizeof(path), "%s/mwms-nan2.yaml", harness_tmpdir());
    ck_assert_ptr_nonnull(opt = strstr(text, "optimizer: {adam: {learning_rate: 0.001}}"));
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fprintf(f, "%.*soptimizer: {sgd: {learning_rate: 1.0e+30}}%s", (int)(opt - text), text,
            opt + strlen("optimizer: {adam: {learning_rate: 0.001}}"));
    fclose(f);
    free(text);
    start_cluster(&c);
    t0 = clock_now_s();
    rc = tessera((char *[]){"submit", path, c.chief_flag, "--watch", NULL}, &out);
    printf("NaN loss: the job failed after %.1f s\n", clock_now_s() - t0);
    ck_assert_msg(rc != 0 && (strstr(out, "NaN") != NULL || strstr(out, "infinite") != NULL) &&
                      strstr(out, "fault: application") != NULL,
                  "exit %d: %s", rc, out);
    ck_assert_msg(clock_now_s() - t0 < 8, "%.1f s: the ring waited for its timeout",
                  clock_now_s() - t0);
    free(out);
    stop_cluster(&c);
}
END_TEST

static Suite *sync_suite(void)
{
    Suite *s = suite_create("sync");
    TCase *tc = tcase_create("sync");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sync_fashion_mnist_mlp_reaches_86_percent_on_two_workers);
    tcase_add_test(tc, sync_epoch_ends_where_one_device_does);
    tcase_add_test(tc, sync_worker_killed_the_job_finishes_on_the_other_at_the_same_numbers);
    tcase_add_test(tc, sync_worker_restarted_rejoins_the_ring);
    tcase_add_test(tc, sync_worker_hung_is_noticed_and_taken_back);
    tcase_add_test(tc, sync_nan_loss_fails_the_job_at_once_as_the_applications);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(sync_suite(), CK_FORK);
}
