/* Checkpoints of parameter-server jobs with real daemons on loopback: the PS tasks write their
 * shards, the chief commits the manifest. A chief or PS killed with SIGKILL at random moments
 * many times always leaves a complete checkpoint that loads (never an older one than before),
 * and the job resumed with one worker ends at exactly the numbers of an uninterrupted run;
 * `tessera checkpoint` takes one on demand; a checkpoint of another layout or a damaged shard
 * file is refused naming it; the Save and Restore calls refuse paths that could leave the
 * checkpoint's directory; a job starts from weights a user brings (init_from), cut into shards
 * over the PS tasks, and another model's weights are refused naming a variable. */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "base/clock.h"
#include "check_run.h"
#include "files/checkpoint.h"
#include "files/safetensors.h"
#include "harness.h"
#include "rpc/client.h"

#define STEPS 3000 /* 12 epochs of 8000 examples in batches of 32 */

typedef struct cluster {
    launch_proc_t ps[2], worker[2], chief;
    int n_ps, n_workers;
    char chief_flag[300];
} cluster_t;

static void start_cluster_of(cluster_t *c, int n_ps, int n_workers)
{
    char ps_flag[400], worker_flag[400];

    c->n_ps = n_ps;
    c->n_workers = n_workers;
    harness_start(&c->ps[0], "tessera-ps", "pck-ps0", "--task-index=0", NULL);
    if (n_ps > 1)
        harness_start(&c->ps[1], "tessera-ps", "pck-ps1", "--task-index=1", NULL);
    harness_start(&c->worker[0], "tessera-worker", "pck-w0", "--task-index=0", NULL);
    if (n_workers > 1)
        harness_start(&c->worker[1], "tessera-worker", "pck-w1", "--task-index=1", NULL);
    snprintf(ps_flag, sizeof(ps_flag), "--ps=%s%s%s", c->ps[0].listen, n_ps > 1 ? "," : "",
             n_ps > 1 ? c->ps[1].listen : "");
    snprintf(worker_flag, sizeof(worker_flag), "--worker=%s%s%s", c->worker[0].listen,
             n_workers > 1 ? "," : "", n_workers > 1 ? c->worker[1].listen : "");
    harness_start(&c->chief, "tessera-chief", "pck-chief", ps_flag, worker_flag, NULL);
    snprintf(c->chief_flag, sizeof(c->chief_flag), "--chief=%s", c->chief.listen);
}

/* n_ps PS tasks and one worker. */
static void start_cluster(cluster_t *c, int n_ps)
{
    start_cluster_of(c, n_ps, 1);
}

static void stop_cluster(cluster_t *c)
{
    harness_stop(&c->chief);
    for (int w = c->n_workers - 1; w >= 0; w--)
        harness_stop(&c->worker[w]);
    for (int p = c->n_ps - 1; p >= 0; p--)
        harness_stop(&c->ps[p]);
}

/* SIGKILL to every daemon, `first` (may be NULL) before the others. */
static void kill_cluster(cluster_t *c, launch_proc_t *first)
{
    launch_proc_t *all[] = {&c->chief, &c->ps[0], c->n_ps > 1 ? &c->ps[1] : NULL, &c->worker[0],
                            c->n_workers > 1 ? &c->worker[1] : NULL};

    if (first != NULL)
        launch_stop(first, SIGKILL, 5000, NULL);
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i] != NULL && all[i] != first)
            launch_stop(all[i], SIGKILL, 5000, NULL);
}

static int tessera(char *const *args, char **out)
{
    char *argv[12] = {(char *)harness_program("tessera")};
    for (int i = 0; args[i] != NULL && i < 10; i++)
        argv[i + 1] = args[i];
    return harness_run(argv, NULL, NULL, 240000, out);
}

static const char *write_job(const char *name, const char *dir, const char *train)
{
    static char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", harness_tmpdir(), name);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "name: pck\nstrategy: parameter_server\n"
            "model:\n"
            "  - {dense: {units: 256, activation: relu}, input_shape: [200]}\n"
            "  - {dropout: {rate: 0.2}}\n"
            "  - {dense: {units: 10, activation: softmax}}\n"
            /* the metrics' sums are in the checkpoints too: resumed numbers match */
            "loss: sparse_categorical_crossentropy\n"
            "metrics: [accuracy, auc, {precision: {class_id: 3}}]\n"
            "optimizer: {adam: {learning_rate: 0.002}}\n"
            "data:\n  batch_size: 32\n  shuffle_buffer: 2000\n"
            "  train: {format: synthetic, kind: classification, examples: 8000, shape: [200], "
            "classes: 10, seed: 1}\n"
            "  test: {format: synthetic, kind: classification, examples: 1000, shape: [200], "
            "classes: 10, seed: 2}\n"
            "train: %s\n"
            "checkpoint: {dir: %s, every_steps: 10, keep: 2}\n"
            "resume: true\n",
            train, dir);
    fclose(f);
    return path;
}

/* The newest complete checkpoint loads: its manifest parses, names both PS files, and every part
 * of every variable is in them with its slots and iterations, and reads. Returns its step. */
static int64_t check_loadable(const char *dir)
{
    int64_t step = -1;
    char *path = NULL, file[1024], name[600];
    ckpt_manifest_t m;
    status_msg_t err = {0};

    ck_assert_msg(ckpt_latest(dir, &step, &path, &err) == STATUS_OK, "%s", err.text);
    ck_assert_msg(ckpt_read_manifest(path, &m, &err) == STATUS_OK, "%s", err.text);
    ck_assert_int_eq(m.step, step);
    ck_assert_uint_eq(m.n_vars, 4);
    ck_assert_uint_eq(m.n_files, 2);
    ck_assert_uint_eq(m.n_data, 1);
    ck_assert_uint_eq(m.data[0].n_rng, 1); /* the worker's dropout stream */
    for (size_t i = 0; i < m.n_vars; i++) {
        const ckpt_part_t *part = &m.vars[i].parts[0];
        st_file_t *f;
        ck_assert_uint_eq(m.vars[i].n_parts, 1);
        snprintf(file, sizeof(file), "%s/%s", path, part->file);
        ck_assert_msg(st_open(file, &f, &err) == STATUS_OK, "%s", err.text);
        const char *names[] = {part->tensor,
                               ckpt_slot_tensor(name, sizeof(name), part->tensor, "momentum"), NULL,
                               NULL};
        char v[600], it[600];
        names[2] = ckpt_slot_tensor(v, sizeof(v), part->tensor, "velocity");
        names[3] = ckpt_slot_tensor(it, sizeof(it), part->tensor, CKPT_ITERATIONS);
        for (int k = 0; k < 4; k++) {
            const st_info_t *t = st_find(f, names[k]);
            ck_assert_msg(t != NULL, "%s has no %s", file, names[k]);
            void *buf = malloc(t->end - t->begin + 1);
            ck_assert_msg(st_read(f, t, buf, &err) == STATUS_OK, "%s", err.text);
            if (k == 3) /* every step updates every shard once */
                ck_assert_int_eq(*(int64_t *)buf, step);
            free(buf);
        }
        st_close(f);
    }
    ckpt_manifest_free(&m);
    free(path);
    return step;
}

static Tessera__V1__JobState job_state(cluster_t *c, const char *id)
{
    Tessera__V1__GetJobRequest req = TESSERA__V1__GET_JOB_REQUEST__INIT;
    Tessera__V1__GetJobResponse *resp;
    rpc_channel_t *ch = harness_channel(&c->chief);
    rpc_error_t err;
    Tessera__V1__JobState st = TESSERA__V1__JOB_STATE__JOB_STATE_UNSPECIFIED;

    req.id = (char *)id;
    if (rpc_coord_get_job(ch, &req, NULL, &resp, NULL, &err) == STATUS_OK) {
        st = resp->job->state;
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    rpc_channel_free(ch);
    return st;
}

/* "submitted ID (queued)": the ID. */
static char *submitted_id(const char *out)
{
    const char *p = strstr(out, "submitted ");
    ck_assert_msg(p != NULL, "not submitted: %s", out);
    p += strlen("submitted ");
    return strndup(p, strcspn(p, " \n"));
}

START_TEST(ps_checkpoint_killed_at_random_moments_resumes_to_identical_numbers)
{
    char whole_dir[512], cut_dir[512], *out = NULL, *expected, *got;
    const char *whole, *cut;
    cluster_t c;
    int64_t last = -1;
    int kills = 0, rc;

    snprintf(whole_dir, sizeof(whole_dir), "%s/ps-whole", harness_tmpdir());
    snprintf(cut_dir, sizeof(cut_dir), "%s/ps-cut", harness_tmpdir());
    whole = write_job("ps-whole.yaml", whole_dir, "{epochs: 12}");
    start_cluster(&c, 2);
    rc = tessera((char *[]){"submit", (char *)whole, c.chief_flag, "--watch", NULL}, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    expected = harness_result(out);
    free(out);
    stop_cluster(&c);
    ck_assert_msg(strstr(expected, ", auc 0.") != NULL &&
                      strstr(expected, "test precision 0.") != NULL,
                  "no metrics in: %s", expected);
    ck_assert_int_eq(check_loadable(whole_dir), STEPS);

    cut = strdup(write_job("ps-cut.yaml", cut_dir, "{epochs: 12}"));
    srand((unsigned)time(NULL));
    for (int i = 0; i < 30 && kills < 8; i++) {
        char *id;
        start_cluster(&c, 2);
        ck_assert_int_eq(tessera((char *[]){"submit", (char *)cut, c.chief_flag, NULL}, &out), 0);
        id = submitted_id(out);
        free(out);
        usleep((useconds_t)(100 + rand() % 500) * 1000);
        bool done = job_state(&c, id) == TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED;
        /* the writers: the chief (manifest) or a PS (its shard file) */
        launch_proc_t *victim = (launch_proc_t *[]){&c.chief, &c.ps[0], &c.ps[1]}[rand() % 3];
        kill_cluster(&c, victim);
        free(id);
        if (done)
            break;
        kills++;
        if (!harness_has_checkpoint(cut_dir))
            continue; /* killed before its first checkpoint */
        int64_t step = check_loadable(cut_dir);
        ck_assert_msg(step >= last, "the newest checkpoint went back from %lld to %lld",
                      (long long)last, (long long)step);
        last = step;
    }
    ck_assert_msg(kills >= 5 && last > 0, "only %d runs were killed mid-training (last step %lld)",
                  kills, (long long)last);
    start_cluster(&c, 2);
    rc = tessera((char *[]){"submit", (char *)cut, c.chief_flag, "--watch", NULL}, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    got = harness_result(out);
    ck_assert_msg(strcmp(got, expected) == 0, "resumed: %s\nuninterrupted: %s\n%s", got, expected,
                  out);
    ck_assert_int_eq(check_loadable(cut_dir), STEPS);
    stop_cluster(&c);
    free(out);
    free(got);
    free(expected);
    free((char *)cut);
}
END_TEST

static void wait_running_past(cluster_t *c, const char *id, int64_t step)
{
    rpc_channel_t *ch = harness_channel(&c->chief);
    double until = clock_now_s() + 60;

    for (;;) {
        Tessera__V1__GetJobRequest req = TESSERA__V1__GET_JOB_REQUEST__INIT;
        Tessera__V1__GetJobResponse *resp;
        rpc_error_t err;
        int64_t now;
        req.id = (char *)id;
        ck_assert_msg(rpc_coord_get_job(ch, &req, NULL, &resp, NULL, &err) == STATUS_OK, "%s",
                      err.message);
        now = resp->job->progress ? resp->job->progress->step : 0;
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        if (now > step)
            break;
        ck_assert_msg(clock_now_s() < until, "job %s is stuck at step %lld", id, (long long)now);
        usleep(20000);
    }
    rpc_channel_free(ch);
}

START_TEST(ps_checkpoint_on_demand_and_refusals_name_the_culprit)
{
    char dir[512], *out = NULL, *id, expect[600], file[700];
    const char *job;
    cluster_t c;
    int rc;

    snprintf(dir, sizeof(dir), "%s/ps-demand", harness_tmpdir());
    job = write_job("ps-demand.yaml", dir, "{epochs: 200}");
    /* every_steps: 10 would checkpoint anyway: per epoch only, so the call makes its own */
    {
        char text[4096];
        FILE *f = fopen(job, "r");
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
        text[n] = '\0';
        char *at = strstr(text, "every_steps: 10, ");
        memmove(at, at + strlen("every_steps: 10, "), strlen(at + strlen("every_steps: 10, ")) + 1);
        f = fopen(job, "w");
        fputs(text, f);
        fclose(f);
    }
    start_cluster(&c, 2);
    ck_assert_int_eq(tessera((char *[]){"submit", (char *)job, c.chief_flag, NULL}, &out), 0);
    id = submitted_id(out);
    free(out);
    wait_running_past(&c, id, 20);
    rc = tessera((char *[]){"checkpoint", id, c.chief_flag, NULL}, &out);
    ck_assert_msg(rc == 0 && strstr(out, "checkpoint at step ") != NULL, "exit %d: %s", rc, out);
    long long step = strtoll(strstr(out, "at step ") + strlen("at step "), NULL, 10);
    snprintf(expect, sizeof(expect), "%s/ckpt-%lld", dir, step);
    ck_assert_msg(step > 20 && strstr(out, expect) != NULL, "%s (expected %s)", out, expect);
    snprintf(file, sizeof(file), "%s/manifest.json", expect);
    ck_assert_msg(access(file, F_OK) == 0, "no %s", file);
    free(out);
    ck_assert_int_eq(tessera((char *[]){"cancel", id, c.chief_flag, NULL}, &out), 0);
    free(out);
    free(id);
    stop_cluster(&c);

    /* One PS now: the checkpoint's shards were placed over two. */
    start_cluster(&c, 1);
    rc = tessera((char *[]){"submit", (char *)job, c.chief_flag, "--watch", NULL}, &out);
    ck_assert_msg(rc != 0 && strstr(out, "placed otherwise") != NULL && strstr(out, expect),
                  "exit %d: %s", rc, out);
    free(out);
    stop_cluster(&c);

    /* A damaged shard file: a value that is not a number. */
    snprintf(file, sizeof(file), "%s/ps-1.safetensors", expect);
    {
        st_file_t *f;
        status_msg_t err = {0};
        ck_assert_msg(st_open(file, &f, &err) == STATUS_OK, "%s", err.text);
        const st_info_t *t = st_find(f, "dense/bias");
        ck_assert_ptr_nonnull(t);
        /* data begins after the 8-byte length and the header */
        FILE *fp = fopen(file, "r+b");
        uint64_t hlen;
        ck_assert_int_eq(fread(&hlen, 8, 1, fp), 1);
        fseek(fp, (long)(8 + hlen + t->begin + 4), SEEK_SET);
        fwrite("\xff\xff\xff\x7f", 1, 4, fp);
        fclose(fp);
        st_close(f);
    }
    start_cluster(&c, 2);
    rc = tessera((char *[]){"submit", (char *)job, c.chief_flag, "--watch", NULL}, &out);
    ck_assert_msg(rc != 0 && strstr(out, "ps:1") != NULL && strstr(out, "dense/bias") != NULL &&
                      strstr(out, "NaN") != NULL,
                  "exit %d: %s", rc, out);
    free(out);

    /* A job without a checkpoint section cannot be checkpointed. */
    rc = tessera((char *[]){"checkpoint", "no-such-job", c.chief_flag, NULL}, &out);
    ck_assert_msg(rc != 0 && strstr(out, "no-such-job") != NULL, "exit %d: %s", rc, out);
    free(out);
    stop_cluster(&c);
}
END_TEST

/* Save and Restore straight to a PS: paths that could leave a checkpoint directory are refused. */
START_TEST(ps_checkpoint_save_and_restore_refuse_paths_by_name)
{
    launch_proc_t ps;
    rpc_channel_t *ch;
    static const char *const bad_dirs[] = {"relative/ckpt-1", "/tmp/../etc/ckpt-1", "/tmp/./x",
                                           "/tmp/x/.."};
    static const char *const bad_files[] = {"../ps-0.safetensors", ".ps-0.safetensors", "ps-0.txt",
                                            "a/b.safetensors", ""};

    harness_start(&ps, "tessera-ps", "pck-lone", NULL);
    ch = harness_channel(&ps);
    for (size_t i = 0; i < sizeof(bad_dirs) / sizeof(bad_dirs[0]); i++) {
        Tessera__V1__SaveRequest req = TESSERA__V1__SAVE_REQUEST__INIT;
        Tessera__V1__SaveResponse *resp = NULL;
        rpc_error_t err;
        req.job = "j";
        req.directory = (char *)bad_dirs[i];
        req.file = "ps-0.safetensors";
        ck_assert_int_eq(rpc_ps_save(ch, &req, NULL, &resp, NULL, &err), STATUS_INVALID_ARGUMENT);
        ck_assert_msg(strstr(err.message, "directory") != NULL, "%s", err.message);
    }
    for (size_t i = 0; i < sizeof(bad_files) / sizeof(bad_files[0]); i++) {
        Tessera__V1__SaveRequest req = TESSERA__V1__SAVE_REQUEST__INIT;
        Tessera__V1__SaveResponse *resp = NULL;
        rpc_error_t err;
        req.job = "j";
        req.directory = (char *)harness_tmpdir();
        req.file = (char *)bad_files[i];
        ck_assert_int_eq(rpc_ps_save(ch, &req, NULL, &resp, NULL, &err), STATUS_INVALID_ARGUMENT);
        ck_assert_msg(strstr(err.message, "file") != NULL, "%s", err.message);
    }
    {
        Tessera__V1__RestoreRequest req = TESSERA__V1__RESTORE_REQUEST__INIT;
        Tessera__V1__RestoreResponse *resp = NULL;
        rpc_error_t err;
        req.job = "j";
        req.file = "/etc/passwd";
        ck_assert_int_eq(rpc_ps_restore(ch, &req, NULL, &resp, NULL, &err),
                         STATUS_INVALID_ARGUMENT);
        req.file = "/nonexistent/ps-0.safetensors";
        ck_assert_int_ne(rpc_ps_restore(ch, &req, NULL, &resp, NULL, &err), STATUS_OK);
        ck_assert_msg(strstr(err.message, "/nonexistent/ps-0.safetensors") != NULL, "%s",
                      err.message);
        /* a job this server does not hold */
        Tessera__V1__SaveRequest sreq = TESSERA__V1__SAVE_REQUEST__INIT;
        Tessera__V1__SaveResponse *sresp = NULL;
        sreq.job = "nobody";
        sreq.directory = (char *)harness_tmpdir();
        sreq.file = "ps-0.safetensors";
        ck_assert_int_eq(rpc_ps_save(ch, &sreq, NULL, &sresp, NULL, &err), STATUS_NOT_FOUND);
    }
    rpc_channel_free(ch);
    harness_stop(&ps);
}
END_TEST

static double test_accuracy(const char *out)
{
    const char *p = NULL; /* the result line's: the last */
    for (const char *at = strstr(out, "test accuracy "); at != NULL;
         at = strstr(at + 1, "test accuracy "))
        p = at;
    ck_assert_msg(p != NULL, "no test accuracy: %s", out);
    return strtod(p + strlen("test accuracy "), NULL);
}

/* Fashion-MNIST's MLP on two workers, stopped after a third of its steps and resumed: the
 * asynchronous order of pushes differs from run to run, but the resumed run lands near one never
 * stopped. The learning rate decays (which the resumed run must take up where it stood), so the
 * runs settle: three pairs measured 0.8499/0.8520, 0.8512/0.8504, 0.8505/0.8532 (uninterrupted/
 * resumed), at most 0.27 points apart; with a constant rate uninterrupted runs alone spread over
 * 1.6 points. The bound here is 0.8 points, for a loaded machine; that the job went on from its
 * step, not from the start, is checked exactly (and the one-worker test above checks the exact
 * numbers). */
START_TEST(ps_checkpoint_two_workers_resume_near_an_uninterrupted_run)
{
    static const char job_text[] =
        "name: pck2\nstrategy: parameter_server\n"
        "model:\n  - {dense: {units: 64, activation: relu}, input_shape: [784]}\n"
        "  - {dense: {units: 10}}\n"
        "loss: {sparse_categorical_crossentropy: {from_logits: true}}\nmetrics: [accuracy]\n"
        "optimizer: {adam: {learning_rate: {exponential_decay: {initial_learning_rate: 0.002, "
        "decay_steps: 938, decay_rate: 0.25}}}}\n"
        "data:\n"
        "  train: {format: idx, images: %s/train-images-idx3-ubyte.gz, labels: "
        "%s/train-labels-idx1-ubyte.gz}\n"
        "  test: {format: idx, images: %s/t10k-images-idx3-ubyte.gz, labels: "
        "%s/t10k-labels-idx1-ubyte.gz}\n"
        "  scale: 0.00392156862745098\n  batch_size: 64\n  seed: 1\n"
        "train: {epochs: 3}\n"
        "checkpoint: {dir: %s, every_steps: 200, keep: 2}\nresume: true\n";
    const char *fm = "/usr/share/datasets/fashion-mnist";
    char path[512], dir[512], *out = NULL, *id;
    double whole, resumed;
    cluster_t c;
    int rc;

    for (int run = 0; run < 2; run++) {
        FILE *f;
        snprintf(dir, sizeof(dir), "%s/ps-two-%d", harness_tmpdir(), run);
        snprintf(path, sizeof(path), "%s/ps-two-%d.yaml", harness_tmpdir(), run);
        f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, job_text, fm, fm, fm, fm, dir);
        fclose(f);
    }
    snprintf(path, sizeof(path), "%s/ps-two-0.yaml", harness_tmpdir());
    start_cluster_of(&c, 2, 2);
    rc = tessera((char *[]){"submit", path, c.chief_flag, "--watch", NULL}, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    whole = test_accuracy(out);
    free(out);

    snprintf(path, sizeof(path), "%s/ps-two-1.yaml", harness_tmpdir());
    snprintf(dir, sizeof(dir), "%s/ps-two-1", harness_tmpdir());
    ck_assert_int_eq(tessera((char *[]){"submit", path, c.chief_flag, NULL}, &out), 0);
    id = submitted_id(out);
    free(out);
    wait_running_past(&c, id, 1000);
    kill_cluster(&c, &c.chief);
    free(id);
    ck_assert(harness_has_checkpoint(dir));
    start_cluster_of(&c, 2, 2);
    rc = tessera((char *[]){"submit", path, c.chief_flag, "--watch", NULL}, &out);
    ck_assert_msg(rc == 0 && strstr(out, "restored from step") != NULL, "exit %d: %s", rc, out);
    /* it went on where it stood: past step 938 (one epoch), the first epoch is not run again */
    long long from = strtoll(strstr(out, "restored from step ") + 19, NULL, 10);
    ck_assert_msg(from >= 1000 && strstr(out, "epoch 1:") == NULL && strstr(out, "epoch 3:"), "%s",
                  out);
    resumed = test_accuracy(out);
    printf("two workers: test accuracy %.4f uninterrupted, %.4f resumed\n", whole, resumed);
    ck_assert_msg(resumed >= whole - 0.008 && resumed <= whole + 0.008,
                  "resumed %.4f, uninterrupted %.4f: %s", resumed, whole, out);
    free(out);
    stop_cluster(&c);
}
END_TEST

/* A cluster job with init_from, its first dense kernel cut in 3 shards over the 2 PS: one step
 * of SGD at a learning rate too small to move anything, so its test numbers are the file's. */
static const char *write_init_job(const char *name, const char *from, int units)
{
    static char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", harness_tmpdir(), name);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fprintf(f,
            "name: pinit\nstrategy: parameter_server\n"
            "model:\n"
            "  - {dense: {units: %d, activation: relu}, input_shape: [200]}\n"
            "  - {dropout: {rate: 0.2}}\n"
            "  - {dense: {units: 10, activation: softmax}}\n"
            "loss: sparse_categorical_crossentropy\nmetrics: [accuracy]\n"
            "optimizer: {sgd: {learning_rate: 1.0e-9}}\n"
            "partitioner: {fixed: {num_shards: 3}}\n"
            "data:\n  batch_size: 32\n"
            "  train: {format: synthetic, kind: classification, examples: 8000, shape: [200], "
            "classes: 10, seed: 1}\n"
            "  test: {format: synthetic, kind: classification, examples: 1000, shape: [200], "
            "classes: 10, seed: 2}\n"
            "train: {steps: 1}\n"
            "init_from: %s\n",
            units, from);
    fclose(f);
    return path;
}

/* tessera train trains and exports a model; a cluster job started from its model.keras (and
 * from its model.safetensors) evaluates as tessera train does from the same file. */
START_TEST(ps_checkpoint_cluster_starts_from_exported_weights)
{
    char dir[512], out_dir[512], keras[1024], st[1024], flag[1100], *out = NULL;
    const char *job;
    double expected;
    cluster_t c;
    int rc;

    snprintf(dir, sizeof(dir), "%s/init-ckpt", harness_tmpdir());
    snprintf(out_dir, sizeof(out_dir), "%s/init-export", harness_tmpdir());
    job = strdup(write_job("init-train.yaml", dir, "{steps: 300}"));
    ck_assert_int_eq(tessera((char *[]){"train", (char *)job, NULL}, &out), 0);
    free(out);
    rc = tessera((char *[]){"export", (char *)job, "--out", out_dir, NULL}, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    free(out);
    snprintf(keras, sizeof(keras), "%s/model.keras", out_dir);
    snprintf(st, sizeof(st), "%s/model.safetensors", out_dir);
    snprintf(flag, sizeof(flag), "--init-from=%s", keras);
    ck_assert_int_eq(tessera((char *[]){"train", (char *)job, flag, "--evaluate", NULL}, &out), 0);
    expected = test_accuracy(out);
    free(out);
    ck_assert_msg(expected > 0.3, "trained to %.4f only: the test would prove nothing", expected);

    start_cluster(&c, 2);
    for (int i = 0; i < 2; i++) {
        const char *path =
            write_init_job(i ? "init-st.yaml" : "init-keras.yaml", i ? st : keras, 256);
        rc = tessera((char *[]){"submit", (char *)path, c.chief_flag, "--watch", NULL}, &out);
        ck_assert_msg(rc == 0 && strstr(out, "starting from the weights in") != NULL, "exit %d: %s",
                      rc, out);
        double got = test_accuracy(out);
        ck_assert_msg(got >= expected - 0.001 && got <= expected + 0.001,
                      "from %s: test accuracy %.4f, tessera train's %.4f: %s", i ? st : keras, got,
                      expected, out);
        free(out);
    }
    /* another model's weights, and no file at all: the job fails naming them */
    rc = tessera((char *[]){"submit", (char *)write_init_job("init-128.yaml", keras, 128),
                            c.chief_flag, "--watch", NULL},
                 &out);
    ck_assert_msg(rc != 0 && strstr(out, "the weights of another model") != NULL &&
                      strstr(out, "[200, 256]") != NULL,
                  "exit %d: %s", rc, out);
    free(out);
    snprintf(flag, sizeof(flag), "%s/no-such.keras", harness_tmpdir());
    rc = tessera((char *[]){"submit", (char *)write_init_job("init-none.yaml", flag, 256),
                            c.chief_flag, "--watch", NULL},
                 &out);
    ck_assert_msg(rc != 0 && strstr(out, "no-such.keras") != NULL, "exit %d: %s", rc, out);
    free(out);
    stop_cluster(&c);
    free((char *)job);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ps_checkpoint");
    TCase *tc = tcase_create("ps_checkpoint");

    grpc_init();
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, ps_checkpoint_save_and_restore_refuse_paths_by_name);
    tcase_add_test(tc, ps_checkpoint_on_demand_and_refusals_name_the_culprit);
    tcase_add_test(tc, ps_checkpoint_killed_at_random_moments_resumes_to_identical_numbers);
    tcase_add_test(tc, ps_checkpoint_two_workers_resume_near_an_uninterrupted_run);
    tcase_add_test(tc, ps_checkpoint_cluster_starts_from_exported_weights);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
