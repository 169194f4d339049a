/* multi_worker_mirrored with real daemons on loopback: a chief (with no parameter server) and
 * two workers whose gradients meet in the ring all-reduce. The Fashion-MNIST MLP reaches 86%;
 * an epoch of it ends at the test accuracy `tessera train` reaches on one device with the same
 * global batch (the same examples in each step, split between the workers); a worker killed
 * mid-job leaves the job finishing on the other, at the numbers of an undisturbed run. */
#define _GNU_SOURCE
#include <check.h>
#include <glob.h>
#include <sys/stat.h>
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

/* What a test changes in the MLP example beyond the strategy, batch and epochs. */
typedef struct mlp_more {
    const char *optimizer; /* NULL: the example's */
    int accumulate;        /* train.accumulate_steps; 0: none */
    bool global;           /* the batch is data.global_batch_size */
    int bytes_per_pack;    /* train.bytes_per_pack; 0: automatic */
    const char *extra;     /* more top-level keys, or NULL */
    bool dropout;          /* a Dropout layer (rate 0.3) before the last Dense */
    int batch_norm;        /* a BatchNormalization before the last Dense: 1 synchronized, -1 not */
    int steps;             /* train.steps in place of the epochs; 0: the epochs */
} mlp_more_t;

/* The MLP example with `strategy`, `batch` (per worker), `epochs` and `more`, in the test's
 * dir. */
static const char *mlp_job_of(const char *name, const char *strategy, int batch, int epochs,
                              mlp_more_t more)
{
    const char *optimizer = more.optimizer;
    int accumulate = more.accumulate;
    static const char *const was[] = {"strategy: one_device", "  - {dense: {units: 10}}",
                                      "optimizer: {adam: {learning_rate: "
                                      "0.001}}",
                                      "batch_size: 64", "train: {epochs: 5}"};
    static char path[4][600];
    static int next;
    char *text = NULL, *out = path[next++ % 4], now[5][200];
    const char *at = NULL;
    size_t len = 0;
    FILE *f = fopen(harness_source("examples/fashion-mnist-mlp.yaml"), "r");

    ck_assert_ptr_nonnull(f);
    ck_assert(getdelim(&text, &len, '\0', f) > 0);
    fclose(f);
    snprintf(now[0], sizeof(now[0]), "strategy: %s", strategy);
    snprintf(now[1], sizeof(now[1]), "%s%s%s", more.dropout ? "  - {dropout: {rate: 0.3}}\n" : "",
             more.batch_norm > 0   ? "  - {batch_normalization: {synchronized: true}}\n"
             : more.batch_norm < 0 ? "  - {batch_normalization: {}}\n"
                                   : "",
             was[1]);
    snprintf(now[2], sizeof(now[2]), "%s", optimizer ? optimizer : was[2]);
    snprintf(now[3], sizeof(now[3]), "%sbatch_size: %d", more.global ? "global_" : "", batch);
    snprintf(now[4], sizeof(now[4]), "train: {%s: %d, steps_per_execution: 20%s%.0d%s%.0d}",
             more.steps > 0 ? "steps" : "epochs", more.steps > 0 ? more.steps : epochs,
             accumulate ? ", accumulate_steps: " : "", accumulate,
             more.bytes_per_pack ? ", bytes_per_pack: " : "", more.bytes_per_pack);
    snprintf(out, sizeof(path[0]), "%s/%s.yaml", harness_tmpdir(), name);
    ck_assert_ptr_nonnull(f = fopen(out, "w"));
    at = text;
    for (int k = 0; k < 5; k++) { /* in the order the example has them */
        const char *p = strstr(at, was[k]);
        ck_assert_msg(p != NULL, "the example has no '%s' after the earlier ones", was[k]);
        fprintf(f, "%.*s%s", (int)(p - at), at, now[k]);
        at = p + strlen(was[k]);
    }
    fprintf(f, "%s%s", at, more.extra ? more.extra : "");
    fclose(f);
    free(text);
    return out;
}

static const char *mlp_job(const char *name, const char *strategy, int batch, int epochs,
                           const char *optimizer)
{
    return mlp_job_of(name, strategy, batch, epochs, (mlp_more_t){.optimizer = optimizer});
}

static int tessera(char *const *args, char **out)
{
    char *argv[12] = {(char *)harness_program("tessera")};
    for (int i = 0; args[i] != NULL && i < 10; i++)
        argv[i + 1] = args[i];
    return harness_run(argv, NULL, NULL, 600000, out);
}

/* Submits job and watches it (*ret_out: its output); returns the CLI's exit status. */
static int submit_watch(cluster_t *c, const char *job, char **ret_out)
{
    return tessera((char *[]){"submit", (char *)job, c->chief_flag, "--watch", NULL}, ret_out);
}

/* The job succeeds and ends at the test accuracy of `one` (tessera train's output), to the
 * printed digits; returns its output (free it). */
static char *expect_as_one_device(cluster_t *c, const char *job, const char *what, const char *one)
{
    char *out = NULL;
    int rc = submit_watch(c, job, &out);

    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    printf("one epoch: one_device test accuracy %.4f, %s %.4f\n", test_accuracy(one), what,
           test_accuracy(out));
    ck_assert_double_eq_tol(test_accuracy(one), test_accuracy(out), 0.002);
    return out;
}

/* The Functional example's job cut to `steps`, with `strategy` and `batch`, in the test's dir,
 * for the model `json` (a path under the source tree). */
static const char *resnet_job(const char *name, const char *json, const char *strategy, int batch,
                              int steps)
{
    static char path[2][600];
    static int next;
    char *out = path[next++ % 2], cmd[2048];

    snprintf(out, sizeof(path[0]), "%s/%s.yaml", harness_tmpdir(), name);
    snprintf(cmd, sizeof(cmd),
             "sed -e 's/^train: .*/train: {steps: %d, steps_per_execution: 20}/' -e "
             "'s/^strategy: .*/strategy: %s/' -e 's/^  batch_size: .*/  batch_size: %d/' -e "
             "'s#fashion-mnist-resnet.json#%s#' %s > %s",
             steps, strategy, batch, harness_source(json),
             harness_source("examples/fashion-mnist-resnet.yaml"), out);
    ck_assert_int_eq(system(cmd), 0);
    return out;
}

START_TEST(sync_fashion_mnist_mlp_reaches_86_percent_on_two_workers)
{
    cluster_t c;
    char *out = NULL;
    int rc;

    start_cluster(&c);
    rc = submit_watch(&c, mlp_job("mwms5", "multi_worker_mirrored", 32, 5, NULL), &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    printf("multi_worker_mirrored, 2 workers, 5 epochs: test accuracy %.4f\n", test_accuracy(out));
    ck_assert_msg(strstr(out, "training on 2 workers (multi_worker_mirrored") != NULL, "%s", out);
    ck_assert_msg(test_accuracy(out) >= 0.86, "%s", out);
    free(out);
    stop_cluster(&c);
}
END_TEST

/* A Functional model's steps split between two workers are one device's: the graph's gradients
 * (a layer read by two, a merge) sum as the chain's do. With BatchNormalization (the example),
 * each worker normalizes its 32 examples by their own statistics, as each of mirrored's replicas
 * does, and the moving statistics take the mean of the workers' (TensorFlow's MEAN aggregation
 * of a non-trainable variable): two workers end where two local replicas end. */
START_TEST(sync_functional_model_ends_where_one_device_does)
{
    static const char *const plain = "tests/fixtures/keras/keras3_residual.json",
                             *bn = "examples/fashion-mnist-resnet.json";
    cluster_t c;
    char *one = NULL, *mirrored = NULL, *out = NULL;
    int rc;

    rc = tessera(
        (char *[]){"train", (char *)resnet_job("res1", plain, "one_device", 64, 100), NULL}, &one);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, one);
    rc = tessera((char *[]){"train",
                            (char *)resnet_job("bn1", bn, "{mirrored: {replicas: 2}}", 32, 100),
                            NULL},
                 &mirrored);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, mirrored);
    start_cluster(&c);
    free(expect_as_one_device(&c, resnet_job("res2", plain, "multi_worker_mirrored", 32, 100),
                              "functional model, multi_worker_mirrored", one));
    rc = submit_watch(&c, resnet_job("bn2", bn, "multi_worker_mirrored", 32, 100), &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    printf("batch normalization: mirrored, 2 replicas: test accuracy %.4f, multi_worker_mirrored "
           "%.4f\n",
           test_accuracy(mirrored), test_accuracy(out));
    ck_assert_double_eq_tol(test_accuracy(mirrored), test_accuracy(out), 0.002);
    free(out);
    free(mirrored);
    free(one);
    stop_cluster(&c);
}
END_TEST

/* Each step's global batch is one_device's, split between the workers, or accumulated over
 * steps: an epoch ends where one device ends, to the printed digits. */
START_TEST(sync_epoch_ends_where_one_device_does)
{
    cluster_t c;
    char *out = NULL, *one = NULL, log[600];
    double early, all;
    int rc;

    rc = tessera((char *[]){"train", (char *)mlp_job("one1", "one_device", 64, 1, NULL), NULL},
                 &one);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, one);
    start_cluster(&c);
    free(expect_as_one_device(&c, mlp_job("mwms1", "multi_worker_mirrored", 32, 1, NULL),
                              "multi_worker_mirrored", one));
    /* mirrored on a cluster: worker 0 alone, its 2 replicas taking 32 examples each */
    out = expect_as_one_device(&c, mlp_job("mir", "{mirrored: {replicas: 2}}", 32, 1, NULL),
                               "mirrored on worker 0", one);
    ck_assert_msg(strstr(out, "training on worker 0 (mirrored") != NULL, "%s", out);
    free(out);
    /* two windows of accumulate_steps 2 over batches of 2 x 16: one all-reduce and one update
     * per 64 examples, as one_device's batch of 64 (steps_per_execution 20: whole windows) */
    free(expect_as_one_device(
        &c, mlp_job_of("mwms-acc", "multi_worker_mirrored", 16, 1, (mlp_more_t){.accumulate = 2}),
        "multi_worker_mirrored, accumulate_steps 2 of 2 x 16", one));
    /* buckets of 4 KiB: the gradients of the last layers are all-reduced while backward goes on
     * through the first; the sums are the same */
    free(expect_as_one_device(&c,
                              mlp_job_of("mwms-buckets", "multi_worker_mirrored", 32, 1,
                                         (mlp_more_t){.bytes_per_pack = 4096}),
                              "multi_worker_mirrored, buckets of 4 KiB", one));
    snprintf(log, sizeof(log), "%s/sync-w1.log", harness_tmpdir());
    ck_assert_msg(harness_file_contains(log, "gradients all-reduced in 2 buckets"),
                  "no buckets in %s", log); /* the second layer's, then the first's */
    early = harness_metric(&c.worker[1], "tessera_worker_allreduce_during_backward_total");
    all = harness_metric(&c.worker[1], "tessera_worker_allreduce_total");
    printf("all-reduces: %.0f, %.0f of them during backward\n", all, early);
    /* 938 steps: the second layer's bucket during backward, the first's after it */
    ck_assert_msg(early >= 938 && all >= 2 * 938, "%.0f all-reduces, %.0f during backward", all,
                  early);
    /* data.global_batch_size 64 over the 2 workers: 32 each */
    out = expect_as_one_device(
        &c, mlp_job_of("mwms-global", "multi_worker_mirrored", 64, 1, (mlp_more_t){.global = true}),
        "multi_worker_mirrored, global_batch_size 64", one);
    ck_assert_msg(strstr(out, "global batch 64,") != NULL, "%s", out);
    free(out);
    /* 2 workers cannot split 63 */
    rc = submit_watch(
        &c, mlp_job_of("mwms-odd", "multi_worker_mirrored", 63, 1, (mlp_more_t){.global = true}),
        &out);
    ck_assert_msg(rc != 0 && strstr(out, "data.global_batch_size 63 does not split evenly over 2 "
                                         "replicas") != NULL,
                  "exit %d: %s", rc, out);
    free(out);
    free(one);
    stop_cluster(&c);
}
END_TEST

/* `job` run by `tessera train` (c NULL) or submitted to c: its output (free it). */
static char *run_job(cluster_t *c, const char *job)
{
    char *args[] = {"train", (char *)job, NULL}, *out = NULL;
    int rc = c == NULL ? tessera(args, &out) : submit_watch(c, job, &out);

    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    return out;
}

/* A synchronized BatchNormalization normalizes both workers' slices of 32 by the statistics of
 * the whole global batch, summed over the ring inside forward and backward: 400 steps end where
 * one_device's batch of 64 ends, to the printed digits (unsynchronized, each worker normalizes
 * its own 32: elsewhere). Over a whole epoch such a model amplifies the rounding of sums taken in
 * another order into the printed digits, so the epoch is checked against mirrored's two
 * synchronized replicas of 32 (a unit test holds those to one_device's steps), whose sums go in
 * the same order: its last global batch has 32 examples, all worker 0's, and worker 1 takes its
 * part in the sums with nothing. */
START_TEST(sync_synchronized_batch_normalization_ends_where_one_device_does)
{
    cluster_t c;
    mlp_more_t steps = {.batch_norm = 1, .steps = 400}, epoch = {.batch_norm = 1};
    char *out[5], *numbers[5];
    const char *what[5] = {"one_device, 64", "mirrored, 2 x 32", "2 workers, 32", "unsynchronized",
                           "2 workers, epoch"};

    out[0] = run_job(NULL, mlp_job_of("bn-one", "one_device", 64, 1, steps));
    out[1] = run_job(NULL, mlp_job_of("bn-mir", "{mirrored: {replicas: 2}}", 32, 1, epoch));
    start_cluster(&c);
    out[2] = run_job(&c, mlp_job_of("bn-mwms", "multi_worker_mirrored", 32, 1, steps));
    out[3] = run_job(&c, mlp_job_of("bn-apart", "multi_worker_mirrored", 32, 1,
                                    (mlp_more_t){.batch_norm = -1, .steps = 400}));
    out[4] = run_job(&c, mlp_job_of("bn-mwms-epoch", "multi_worker_mirrored", 32, 1, epoch));
    printf("synchronized batch normalization (400 steps; mirrored and the last, one epoch):\n");
    for (int k = 0; k < 5; k++) {
        numbers[k] = harness_result(out[k]);
        printf("  %-18s %s\n", what[k], numbers[k]);
    }
    ck_assert_str_eq(numbers[0], numbers[2]);
    ck_assert_str_ne(numbers[0], numbers[3]);
    ck_assert_str_eq(numbers[1], numbers[4]);
    for (int k = 0; k < 5; k++) {
        free(numbers[k]);
        free(out[k]);
    }
    stop_cluster(&c);
}
END_TEST

/* Runs the job undisturbed to its end (its output in *ret_calm), then submits it again and, once
 * it has run for ms milliseconds, returns its id for the caller to disturb. */
/* Submits job without watching it; returns its id (free it). */
static char *submit(cluster_t *c, const char *job)
{
    char *out = NULL, *id, *p;
    int rc = tessera((char *[]){"submit", (char *)job, c->chief_flag, NULL}, &out);

    ck_assert_msg(rc == 0 && (p = strstr(out, "submitted ")) != NULL, "exit %d: %s", rc, out);
    id = strndup(p + strlen("submitted "), strcspn(p + strlen("submitted "), " \n"));
    free(out);
    return id;
}

/* Runs job undisturbed to its end (*ret_calm: what watch printed), submits it again and returns
 * once the chief has logged the end of its first epoch (after_epoch_1), or after ms
 * milliseconds: the moment to disturb it. */
static char *calm_then_submit(cluster_t *c, const char *job, bool after_epoch_1, int ms,
                              char **ret_calm)
{
    int rc = submit_watch(c, job, ret_calm);
    char *id, log[700], mark[200];
    double t0;

    ck_assert_msg(rc == 0, "exit %d: %s", rc, *ret_calm);
    id = submit(c, job);
    t0 = clock_now_s();
    if (!after_epoch_1) {
        usleep((useconds_t)ms * 1000);
        return id;
    }
    snprintf(log, sizeof(log), "%s/sync-chief.log", harness_tmpdir());
    snprintf(mark, sizeof(mark), "job %s: epoch 1:", id);
    while (!harness_file_contains(log, mark)) {
        ck_assert_msg(clock_now_s() - t0 < 60, "no '%s' in %s after 60 s", mark, log);
        usleep(10000);
    }
    return id;
}

/* Watches the disturbed job to its end: it succeeded, says each of events (NULL-terminated),
 * and ends at the undisturbed run's test accuracy. Frees id and calm. */
static void expect_calm_numbers(cluster_t *c, char *id, char *calm, const char *what,
                                const char *const *events)
{
    char *out = NULL;
    int rc = tessera((char *[]){"watch", id, c->chief_flag, NULL}, &out);

    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    for (size_t k = 0; events[k] != NULL; k++)
        ck_assert_msg(strstr(out, events[k]) != NULL, "no '%s' in: %s", events[k], out);
    printf("%s: test accuracy %.4f, undisturbed %.4f\n", what, test_accuracy(out),
           test_accuracy(calm));
    ck_assert_double_eq_tol(test_accuracy(out), test_accuracy(calm), 1e-9);
    free(out);
    free(calm);
    free(id);
}

/* A worker killed mid-job: the other goes back to where the failed closure started, takes the
 * lost worker's slice of every batch too, and the job ends at the numbers of an undisturbed run
 * (the same global batches, the same sums). */
START_TEST(sync_worker_killed_the_job_finishes_on_the_other_at_the_same_numbers)
{
    cluster_t c;
    char *calm = NULL, *id;

    start_cluster(&c);
    /* with Dropout: the survivor draws the lost worker's slice as it would have */
    id = calm_then_submit(
        &c, mlp_job_of("mwms-kill", "multi_worker_mirrored", 32, 4, (mlp_more_t){.dropout = true}),
        true, 0, &calm);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    expect_calm_numbers(&c, id, calm, "worker killed",
                        (const char *[]){"worker 1 (", "lost", "3752 steps", NULL});
    stop_cluster(&c);
}
END_TEST

/* Killed, then started again at its address (as systemd or Kubernetes would): the worker joins
 * the ring again between closures, takes the others' values and optimizer state, and the job
 * ends on both workers at the numbers of an undisturbed run. */
START_TEST(sync_worker_restarted_rejoins_the_ring)
{
    cluster_t c;
    char *calm = NULL, *id, listen[300];

    start_cluster(&c);
    id = calm_then_submit(
        &c, mlp_job_of("mwms-back", "multi_worker_mirrored", 32, 12, (mlp_more_t){.dropout = true}),
        true, 0, &calm);
    snprintf(listen, sizeof(listen), "--listen=%s", c.worker[1].listen);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    harness_start(&c.worker[1], "tessera-worker", "sync-w1-again", "--task-index=1", listen, NULL);
    expect_calm_numbers(&c, id, calm, "worker restarted",
                        (const char *[]){"lost", "is back", "11256 steps", NULL});
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
    char *calm = NULL, *id, log[700];
    double t0;

    start_cluster_with(&c, "--worker-timeout=3s");
    id = calm_then_submit(&c, mlp_job("mwms-hung", "multi_worker_mirrored", 32, 8, NULL), true, 0,
                          &calm);
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
    expect_calm_numbers(&c, id, calm, "worker stopped and woken",
                        (const char *[]){"lost", "is back", NULL});
    stop_cluster(&c);
}
END_TEST

/* A loss that is not finite fails the job at once as the application's fault: the worker that
 * saw it breaks the ring, so its neighbours do not wait for the ring's timeout. */
START_TEST(sync_nan_loss_fails_the_job_at_once_as_the_applications)
{
    cluster_t c;
    char *out = NULL;
    const char *job = mlp_job("mwms-nan", "multi_worker_mirrored", 32, 1,
                              "optimizer: {sgd: {learning_rate: 1.0e+30}}");
    double t0;
    int rc;

    start_cluster(&c);
    t0 = clock_now_s();
    rc = submit_watch(&c, job, &out);
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

/* Checkpoints of a multi_worker_mirrored job: written by worker 0 (every 400 steps, on
 * `tessera checkpoint`, at the end), in tessera train's format; a job cancelled after one and
 * submitted again with resume: true goes on from it to the numbers of an uninterrupted run. The
 * chief writes the job's TensorBoard run (compat_tensorboard reads the same writer's files with
 * TensorBoard itself). */
START_TEST(sync_checkpoint_then_resume_ends_at_the_uninterrupted_numbers)
{
    cluster_t c;
    char extra[2][1400], *out = NULL, *whole, *resumed, *id, *p, dir[2][600];
    const char *job;
    int rc;

    start_cluster(&c);
    for (int k = 0; k < 2; k++) {
        snprintf(dir[k], sizeof(dir[k]), "%s/mwms-ck%d", harness_tmpdir(), k);
        snprintf(extra[k], sizeof(extra[k]), "checkpoint: {dir: %s, every_steps: 400}\n", dir[k]);
    }
    snprintf(extra[0] + strlen(extra[0]), sizeof(extra[0]) - strlen(extra[0]),
             "tensorboard: {logdir: %s/mwms-tb, update_freq: 100, histogram_freq: 1}\n",
             harness_tmpdir());
    job = mlp_job_of("ck-whole", "multi_worker_mirrored", 32, 3, (mlp_more_t){.extra = extra[0]});
    rc = submit_watch(&c, job, &out);
    ck_assert_msg(rc == 0 && strstr(out, "checkpoint at step 400") != NULL &&
                      strstr(out, "checkpoint at step 2814") != NULL,
                  "exit %d: %s", rc, out);
    whole = harness_result(out);
    free(out);
    for (int k = 0; k < 2; k++) { /* both runs' event files, with something in them */
        glob_t g;
        struct stat st;
        char pattern[700];
        bool histograms = false;
        snprintf(pattern, sizeof(pattern), "%s/mwms-tb/fashion-mnist-mlp/%s/events.out.tfevents.*",
                 harness_tmpdir(), k ? "validation" : "train");
        /* train: the chief's scalars, and worker 0's weight histograms in a file of its own */
        ck_assert_msg(glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc == (k ? 1u : 2u),
                      "%zu files like %s", g.gl_pathc, pattern);
        for (size_t i = 0; i < g.gl_pathc; i++) {
            ck_assert(stat(g.gl_pathv[i], &st) == 0 && st.st_size > 200);
            histograms |= harness_file_contains(g.gl_pathv[i], "kernel/histogram");
        }
        ck_assert_msg(histograms == (k == 0), "histograms in %s: %d", pattern, histograms);
        globfree(&g);
    }

    /* the same job, cancelled after a checkpoint that tessera checkpoint asked for */
    job = mlp_job_of("ck-cut", "multi_worker_mirrored", 32, 3, (mlp_more_t){.extra = extra[1]});
    id = submit(&c, job);
    usleep(300 * 1000);
    rc = tessera((char *[]){"checkpoint", id, c.chief_flag, "--timeout=60s", NULL}, &out);
    ck_assert_msg(rc == 0 && strstr(out, dir[1]) != NULL, "exit %d: %s", rc, out);
    printf("tessera checkpoint: %s", out);
    free(out);
    rc = tessera((char *[]){"cancel", id, c.chief_flag, NULL}, &out);
    free(out);
    free(id);

    /* submitted again with resume: true */
    snprintf(extra[1] + strlen(extra[1]), sizeof(extra[1]) - strlen(extra[1]), "resume: true\n");
    job = mlp_job_of("ck-cut", "multi_worker_mirrored", 32, 3, (mlp_more_t){.extra = extra[1]});
    rc = submit_watch(&c, job, &out);
    ck_assert_msg(rc == 0 && (p = strstr(out, "resuming at step ")) != NULL, "exit %d: %s", rc,
                  out);
    printf("%.*s\n", (int)strcspn(p, "\n"), p);
    ck_assert_msg(atoll(p + strlen("resuming at step ")) < 2814, "%s", out); /* not the end's */
    resumed = harness_result(out);
    printf("uninterrupted: %s\nresumed:       %s\n", whole, resumed);
    ck_assert_msg(strcmp(whole, resumed) == 0, "uninterrupted: %s\nresumed: %s\n%s", whole, resumed,
                  out);
    free(out);
    free(whole);
    free(resumed);
    stop_cluster(&c);
}
END_TEST

/* A chief killed mid-job and started again with the same --state-dir takes the
 * multi_worker_mirrored job up again from the newest checkpoint the workers wrote, and the job
 * ends at the undisturbed numbers. */
START_TEST(sync_chief_restarted_resumes_from_the_workers_checkpoint)
{
    cluster_t c;
    char state[700], listen[300], workers[700], extra[2][1400], *calm = NULL, *out = NULL, *id;
    char *a, *b;
    const char *job;
    int rc;

    snprintf(state, sizeof(state), "--state-dir=%s/sync-chief-state", harness_tmpdir());
    start_cluster_with(&c, state);
    snprintf(listen, sizeof(listen), "--listen=%s", c.chief.listen);
    snprintf(workers, sizeof(workers), "--worker=%s,%s", c.worker[0].listen, c.worker[1].listen);
    for (int k = 0; k < 2; k++)
        snprintf(extra[k], sizeof(extra[k]), "checkpoint: {dir: %s/chief-ck%d, every_steps: 200}\n",
                 harness_tmpdir(), k);
    job = mlp_job_of("chief-calm", "multi_worker_mirrored", 32, 3, (mlp_more_t){.extra = extra[0]});
    rc = submit_watch(&c, job, &calm);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, calm);
    id = submit(&c, mlp_job_of("chief-cut", "multi_worker_mirrored", 32, 3,
                               (mlp_more_t){.extra = extra[1]}));
    snprintf(extra[1], sizeof(extra[1]), "%s/chief-ck1", harness_tmpdir());
    for (int i = 0; i < 200 && !harness_has_checkpoint(extra[1]); i++)
        usleep(20 * 1000);
    ck_assert_msg(harness_has_checkpoint(extra[1]), "no checkpoint in %s", extra[1]);
    launch_stop(&c.chief, SIGKILL, 5000, NULL);
    harness_start(&c.chief, "tessera-chief", "sync-chief-again", listen, workers, state, NULL);
    rc = tessera((char *[]){"watch", id, c.chief_flag, NULL}, &out);
    ck_assert_msg(rc == 0 && strstr(out, "resuming at step ") != NULL, "exit %d: %s", rc, out);
    a = harness_result(calm);
    b = harness_result(out);
    printf("chief restarted: %s\nundisturbed:     %s\n", b, a);
    ck_assert_msg(strcmp(a, b) == 0, "undisturbed: %s\nchief restarted: %s\n%s", a, b, out);
    free(a);
    free(b);
    free(out);
    /* the job that ended before the restart keeps its numbers, accuracies included (its file
     * is not read again: the journal says it has an accuracy) */
    rc = tessera((char *[]){"list", c.chief_flag, NULL}, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    a = strstr(out, " test_accuracy ");
    ck_assert_msg(a != NULL && strstr(a + 1, " test_accuracy ") != NULL, "%s", out);
    free(out);
    free(calm);
    free(id);
    stop_cluster(&c);
}
END_TEST

/* init_from under multi_worker_mirrored: every worker starts from the file's weights (here
 * tessera train's export); at a learning rate too small to move them, the job's test numbers
 * are the exported model's. */
START_TEST(sync_init_from_starts_every_worker_from_the_file)
{
    cluster_t c;
    char extra[1400], *out = NULL, dir[600];
    const char *job;
    double expected, got;
    int rc;

    snprintf(dir, sizeof(dir), "%s/init-one", harness_tmpdir());
    snprintf(extra, sizeof(extra), "checkpoint: {dir: %s}\n", dir);
    job = mlp_job_of("init-one", "one_device", 64, 1, (mlp_more_t){.extra = extra});
    rc = tessera((char *[]){"train", (char *)job, NULL}, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    expected = test_accuracy(out);
    free(out);
    snprintf(dir, sizeof(dir), "%s/init-export", harness_tmpdir());
    rc = tessera((char *[]){"export", (char *)job, "--out", dir, NULL}, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);

    start_cluster(&c);
    snprintf(extra, sizeof(extra), "init_from: %s/model.safetensors\n", dir);
    job = mlp_job_of(
        "init-mwms", "multi_worker_mirrored", 32, 1,
        (mlp_more_t){.optimizer = "optimizer: {sgd: {learning_rate: 1.0e-9}}", .extra = extra});
    rc = submit_watch(&c, job, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    got = test_accuracy(out);
    printf("init_from under multi_worker_mirrored: test accuracy %.4f, the file's %.4f\n", got,
           expected);
    ck_assert_msg(got >= expected - 0.001 && got <= expected + 0.001, "%s", out);
    free(out);
    /* a file that is not there: the job fails naming it */
    snprintf(extra, sizeof(extra), "init_from: %s/missing.safetensors\n", dir);
    job = mlp_job_of("init-missing", "multi_worker_mirrored", 32, 1, (mlp_more_t){.extra = extra});
    rc = submit_watch(&c, job, &out);
    ck_assert_msg(rc != 0 && strstr(out, "missing.safetensors") != NULL, "exit %d: %s", rc, out);
    free(out);
    stop_cluster(&c);
}
END_TEST

/* The text example with `strategy` and batch `batch` per worker, in the test's dir. */
static const char *text_job(const char *name, const char *strategy, int batch)
{
    static char path[2][600];
    static int next;
    char *text = NULL, *out = path[next++ % 2];
    size_t len = 0;
    FILE *f = fopen(harness_source("examples/text-synthetic.yaml"), "r");
    const char *was[] = {"strategy: one_device", "batch_size: 64"}, *at;

    ck_assert_ptr_nonnull(f);
    ck_assert(getdelim(&text, &len, '\0', f) > 0);
    fclose(f);
    snprintf(out, sizeof(path[0]), "%s/%s.yaml", harness_tmpdir(), name);
    ck_assert_ptr_nonnull(f = fopen(out, "w"));
    at = text;
    for (int k = 0; k < 2; k++) {
        const char *p = strstr(at, was[k]);
        ck_assert_ptr_nonnull(p);
        fprintf(f, "%.*s", (int)(p - at), at);
        if (k == 0)
            fprintf(f, "strategy: %s", strategy);
        else
            fprintf(f, "batch_size: %d", batch);
        at = p + strlen(was[k]);
    }
    fprintf(f, "%s", at);
    fclose(f);
    free(text);
    return out;
}

/* An Embedding under multi_worker_mirrored: the workers' rows go round the ring densified, with
 * a mask of the rows touched, and come back as the rows any worker touched: the text model on 2
 * workers of 32 ends where one_device's batch of 64 does, and where an undisturbed run does
 * when a worker is killed mid-job. */
START_TEST(sync_embedding_rows_sum_over_the_workers)
{
    cluster_t c;
    char *out = NULL, *one = NULL, *a, *b;
    int rc;

    rc = tessera((char *[]){"train", (char *)text_job("text-one", "one_device", 64), NULL}, &one);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, one);
    start_cluster(&c);
    rc = submit_watch(&c, text_job("text-mwms", "multi_worker_mirrored", 32), &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    a = harness_result(one);
    b = harness_result(out);
    printf("text model: one_device   %s\n            2 workers    %s\n", a, b);
    ck_assert_msg(strcmp(a, b) == 0, "one_device: %s\nmulti_worker_mirrored: %s", a, b);
    free(a);
    free(b);
    free(out);
    free(one);
    /* a worker killed mid-job: the other steps on both slices, their rows summed as well */
    char *calm = NULL,
         *id = calm_then_submit(&c, text_job("text-kill", "multi_worker_mirrored", 32), false, 400,
                                &calm);
    launch_stop(&c.worker[1], SIGKILL, 5000, NULL);
    expect_calm_numbers(&c, id, calm, "text model, worker killed",
                        (const char *[]){"worker 1 (", "lost", "939 steps", NULL});
    stop_cluster(&c);
}
END_TEST

/* TF_CONFIG without a chief: worker 0 leads, as in TensorFlow's MultiWorkerMirroredStrategy. It
 * serves the Coordinator beside its Worker service, and `tessera submit` with the same TF_CONFIG
 * (no --chief) finds it there. */
START_TEST(sync_tf_config_without_chief_worker_0_leads)
{
    launch_proc_t w[2];
    int port[2] = {harness_free_port(), harness_free_port()};
    char tf[2][300], listen[2][64], name[2][16], log[600], *out = NULL;
    int rc;

    for (int i = 0; i < 2; i++) {
        snprintf(tf[i], sizeof(tf[i]),
                 "TF_CONFIG={\"cluster\": {\"worker\": [\"127.0.0.1:%d\", \"127.0.0.1:%d\"]}, "
                 "\"task\": {\"type\": \"worker\", \"index\": %d}}",
                 port[0], port[1], i);
        snprintf(listen[i], sizeof(listen[i]), "--listen=127.0.0.1:%d", port[i]);
        snprintf(name[i], sizeof(name[i]), "lead-w%d", i);
        ck_assert_int_eq(putenv(tf[i]), 0); /* the child inherits it */
        harness_start(&w[i], "tessera-worker", name[i], listen[i], NULL);
    }
    unsetenv("TF_CONFIG");
    snprintf(log, sizeof(log), "%s/lead-w0.log", harness_tmpdir());
    ck_assert_msg(harness_file_contains(
                      log, "TF_CONFIG has no chief: worker 0 leads, serving the Coordinator"),
                  "worker 0 does not lead");
    char *argv[] = {(char *)harness_program("tessera"), "submit",
                    (char *)mlp_job("lead", "multi_worker_mirrored", 32, 1, NULL), "--watch", NULL};
    rc = harness_run(argv, (char *[]){tf[1], NULL}, NULL, 600000, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    printf("TF_CONFIG without a chief, worker 0 leads: test accuracy %.4f\n", test_accuracy(out));
    ck_assert_msg(strstr(out, "training on 2 workers (multi_worker_mirrored") != NULL, "%s", out);
    ck_assert_msg(test_accuracy(out) >= 0.80, "%s", out);
    free(out);
    /* worker 1 does not lead: no Coordinator there */
    snprintf(log, sizeof(log), "--chief=127.0.0.1:%d", port[1]);
    rc = harness_run((char *[]){(char *)harness_program("tessera"), "list", log, NULL}, NULL, NULL,
                     20000, &out);
    ck_assert_msg(rc != 0 && strstr(out, "is not served by this worker task") != NULL,
                  "exit %d: %s", rc, out);
    free(out);
    harness_stop(&w[1]);
    harness_stop(&w[0]);
}
END_TEST

static Suite *sync_suite(void)
{
    Suite *s = suite_create("sync");
    TCase *tc = tcase_create("sync");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sync_fashion_mnist_mlp_reaches_86_percent_on_two_workers);
    tcase_add_test(tc, sync_epoch_ends_where_one_device_does);
    tcase_add_test(tc, sync_functional_model_ends_where_one_device_does);
    tcase_add_test(tc, sync_synchronized_batch_normalization_ends_where_one_device_does);
    tcase_add_test(tc, sync_worker_killed_the_job_finishes_on_the_other_at_the_same_numbers);
    tcase_add_test(tc, sync_worker_restarted_rejoins_the_ring);
    tcase_add_test(tc, sync_worker_hung_is_noticed_and_taken_back);
    tcase_add_test(tc, sync_nan_loss_fails_the_job_at_once_as_the_applications);
    tcase_add_test(tc, sync_tf_config_without_chief_worker_0_leads);
    tcase_add_test(tc, sync_checkpoint_then_resume_ends_at_the_uninterrupted_numbers);
    tcase_add_test(tc, sync_init_from_starts_every_worker_from_the_file);
    tcase_add_test(tc, sync_chief_restarted_resumes_from_the_workers_checkpoint);
    tcase_add_test(tc, sync_embedding_rows_sum_over_the_workers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(sync_suite(), CK_FORK);
}
