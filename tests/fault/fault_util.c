/* Helpers of the fault tests (test_fault.c, and the seeded kill schedule of suite slow): a
 * cluster of real daemons on loopback, jobs, and what the chief says about them. */
#define _GNU_SOURCE
#include "fault_util.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
/* A PS, n_workers workers (1 or 2) and a chief with the timeout flags given (NULL: a 3 s
 * worker timeout). */
void start_cluster_with(cluster_t *c, int n_workers, const char *t1, const char *t2)
{
    char ps_flag[400], worker_flag[400];

    c->n_workers = n_workers;
    harness_start(&c->ps, "tessera-ps", "fault-ps", "--task-index=0", NULL);
    harness_start(&c->worker[0], "tessera-worker", "fault-w0", "--task-index=0", NULL);
    if (n_workers > 1)
        harness_start(&c->worker[1], "tessera-worker", "fault-w1", "--task-index=1", NULL);
    snprintf(ps_flag, sizeof(ps_flag), "--ps=%s", c->ps.listen);
    snprintf(worker_flag, sizeof(worker_flag), "--worker=%s%s%s", c->worker[0].listen,
             n_workers > 1 ? "," : "", n_workers > 1 ? c->worker[1].listen : "");
    harness_start(&c->chief, "tessera-chief", "fault-chief", ps_flag, worker_flag,
                  t1 ? t1 : "--worker-timeout=3s", t2, NULL);
    snprintf(c->chief_flag, sizeof(c->chief_flag), "--chief=%s", c->chief.listen);
    snprintf(c->chief_log, sizeof(c->chief_log), "%s/fault-chief.log", harness_tmpdir());
}

void start_cluster_of(cluster_t *c, int n_workers)
{
    start_cluster_with(c, n_workers, NULL, NULL);
}

void start_cluster(cluster_t *c)
{
    start_cluster_of(c, 2);
}

/* The chief and the PS stop cleanly; the workers (one may be dead) are killed. */
void stop_cluster(cluster_t *c)
{
    harness_stop(&c->chief);
    for (int w = 0; w < c->n_workers; w++)
        launch_stop(&c->worker[w], SIGKILL, 5000, NULL);
    harness_stop(&c->ps);
}

int tessera(char *const *args, char **out)
{
    char *argv[12] = {(char *)harness_program("tessera")};
    for (int i = 0; args[i] != NULL && i < 10; i++)
        argv[i + 1] = args[i];
    return harness_run(argv, NULL, NULL, 240000, out);
}

const char *write_job_with(const char *name, const char *optimizer, int examples, const char *train,
                           const char *ckpt)
{
    static char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s.yaml", harness_tmpdir(), name);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fprintf(f,
            "name: %s\nstrategy: parameter_server\n"
            "model:\n"
            "  - {dense: {units: 128, activation: relu}, input_shape: [200]}\n"
            "  - {dense: {units: 10, activation: softmax}}\n"
            "loss: sparse_categorical_crossentropy\n"
            "metrics: [accuracy, {precision: {class_id: 1}}]\n"
            "optimizer: %s\n"
            "data:\n  batch_size: 32\n"
            "  train: {format: synthetic, kind: classification, examples: %d, "
            "shape: [200], classes: 10, seed: 1}\n"
            "  test: {format: synthetic, kind: classification, examples: 1000, "
            "shape: [200], classes: 10, seed: 2}\n"
            "train: %s\n",
            name, optimizer, examples, train);
    if (ckpt != NULL)
        fprintf(f, "checkpoint: {dir: %s/%s, every_steps: 100, keep: 2}\n", harness_tmpdir(), ckpt);
    fclose(f);
    return path;
}

const char *write_job_of(const char *name, const char *ckpt, int epochs)
{
    char train[64];

    snprintf(train, sizeof(train), "{epochs: %d}", epochs);
    return write_job_with(name, "{adam: {learning_rate: 0.001}}", 8000, train, ckpt);
}

const char *write_job_ckpt(const char *name, const char *ckpt)
{
    return write_job_of(name, ckpt, 8);
}

const char *write_job(const char *name)
{
    return write_job_ckpt(name, NULL);
}

char *submitted_id(const char *out)
{
    const char *p = strstr(out, "submitted ");
    ck_assert_msg(p != NULL, "not submitted: %s", out);
    p += strlen("submitted ");
    return strndup(p, strcspn(p, " \n"));
}

char *submit(cluster_t *c, const char *path)
{
    char *out = NULL, *id;
    int rc = tessera((char *[]){"submit", (char *)path, c->chief_flag, NULL}, &out);

    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    id = submitted_id(out);
    free(out);
    return id;
}

Tessera__V1__JobInfo *get_job(cluster_t *c, const char *id)
{
    Tessera__V1__GetJobRequest req = TESSERA__V1__GET_JOB_REQUEST__INIT;
    Tessera__V1__GetJobResponse *resp;
    rpc_channel_t *ch = harness_channel(&c->chief);
    Tessera__V1__JobInfo *job;
    rpc_error_t err;

    req.id = (char *)id;
    ck_assert_msg(rpc_coord_get_job(ch, &req, NULL, &resp, NULL, &err) == STATUS_OK, "%s",
                  err.message);
    job = resp->job;
    resp->job = NULL;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    rpc_channel_free(ch);
    return job;
}

void wait_running_past(cluster_t *c, const char *id, int64_t step)
{
    double until = clock_now_s() + 60;

    for (;;) {
        Tessera__V1__JobInfo *job = get_job(c, id);
        int64_t now = job->progress ? job->progress->step : 0;
        protobuf_c_message_free_unpacked(&job->base, NULL);
        if (now > step)
            return;
        ck_assert_msg(clock_now_s() < until, "job %s is stuck at step %lld", id, (long long)now);
        usleep(20000);
    }
}

double test_accuracy(const char *out)
{
    const char *p = NULL; /* the result line's: the last */
    for (const char *at = strstr(out, "test accuracy "); at != NULL;
         at = strstr(at + 1, "test accuracy "))
        p = at;
    ck_assert_msg(p != NULL, "no test accuracy: %s", out);
    return strtod(p + strlen("test accuracy "), NULL);
}

/* Waits for the job to end and checks it succeeded with every step counted; its output (of
 * `tessera watch`) in *ret_out. */
void expect_completed_steps(cluster_t *c, const char *id, int64_t steps, char **ret_out)
{
    Tessera__V1__JobInfo *job;
    int rc = tessera((char *[]){"watch", (char *)id, c->chief_flag, NULL}, ret_out);

    ck_assert_msg(rc == 0, "exit %d: %s", rc, *ret_out);
    job = get_job(c, id);
    ck_assert_int_eq(job->state, TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED);
    ck_assert_msg(job->progress->step == job->progress->total_steps && job->progress->step == steps,
                  "step %lld of %lld", (long long)job->progress->step,
                  (long long)job->progress->total_steps);
    protobuf_c_message_free_unpacked(&job->base, NULL);
}

void expect_completed(cluster_t *c, const char *id, char **ret_out)
{
    expect_completed_steps(c, id, 2000, ret_out);
}

/* Waits up to 30 s for a series of the chief's /metrics to reach value. */
void wait_metric(cluster_t *c, const char *series, double value)
{
    double t0 = clock_now_s();

    while (harness_metric(&c->chief, series) < value) {
        ck_assert_msg(clock_now_s() - t0 < 30, "%s did not reach %g in 30 s", series, value);
        usleep(50000);
    }
}

/* An undisturbed run's test accuracy, measured once. */
double undisturbed(cluster_t *c)
{
    static double acc = -1;
    char *out = NULL;

    if (acc < 0) {
        int rc = tessera(
            (char *[]){"submit", (char *)write_job("calm"), c->chief_flag, "--watch", NULL}, &out);
        ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
        acc = test_accuracy(out);
        printf("undisturbed: test accuracy %.4f\n", acc);
        free(out);
    }
    return acc;
}

void expect_accuracy(const char *what, const char *out, double calm)
{
    double got = test_accuracy(out);

    printf("%s: test accuracy %.4f, undisturbed %.4f\n", what, got, calm);
    /* Two workers push asynchronously: undisturbed runs of the same job end between 0.77 and
     * 0.82, and on a 2-core machine kept busy by other tests one worker's stale pushes have
     * cost 0.10 more (0.68 against 0.78). A job that stopped learning ends near 0.1. */
    ck_assert_msg(got >= calm - 0.13, "%s: test accuracy %.4f, undisturbed %.4f: %s", what, got,
                  calm, out);
}
