/* Checkpoints of tessera train, end to end: killed with SIGKILL at random moments many times, the
 * writer always leaves a complete checkpoint that loads (never an older one than before); the
 * resumed run ends at exactly the numbers of an uninterrupted one; the files are what the
 * manifest says; and damaged or foreign checkpoints are refused naming the file, with nothing
 * overwritten. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zip.h>

#include "check_run.h"
#include "files/checkpoint.h"
#include "files/safetensors.h"
#include "harness.h"

extern char **environ;

#define STEPS_PER_EPOCH 250 /* 8000 examples in batches of 32 */

static const char *train_line = "{epochs: 10}"; /* the job's train section */

static const char *write_job(const char *name, const char *dir, const char *model_extra)
{
    static char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", harness_tmpdir(), name);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "name: ck\n"
            "model:\n"
            "  - {dense: {units: %s, activation: relu}, input_shape: [200]}\n"
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
            "checkpoint: {dir: %s, every_steps: 10, keep: 2}\n",
            model_extra, train_line, dir);
    fclose(f);
    return path;
}

static int train(const char *job, const char *flag, char **out)
{
    char *argv[] = {(char *)harness_program("tessera"), "train", (char *)job, (char *)flag, NULL};
    return harness_run(argv, NULL, NULL, 240000, out);
}

/* "trained ck: 750 steps, 3 epochs in 1.2 s (...); loss L, accuracy A; test loss TL, test
 * accuracy TA": the part from "; loss" on, which timing does not change. */
static char *result_of(const char *out)
{
    const char *p = strstr(out, "examples/s); loss ");

    ck_assert_msg(p != NULL, "no result line in: %s", out);
    return strndup(p + strlen("examples/s)"), strcspn(p, "\n") - strlen("examples/s)"));
}

/* The newest complete checkpoint loads: its manifest parses, every file it names opens and
 * every tensor reads. Returns its step. */
static int64_t check_loadable(const char *dir)
{
    int64_t step = -1;
    char *path = NULL, file[1024];
    ckpt_manifest_t m;
    status_msg_t err = {0};

    ck_assert_msg(ckpt_latest(dir, &step, &path, &err) == STATUS_OK, "%s", err.text);
    ck_assert_msg(ckpt_read_manifest(path, &m, &err) == STATUS_OK, "%s", err.text);
    ck_assert_int_eq(m.step, step);
    ck_assert_uint_eq(m.n_vars, 4);
    for (size_t i = 0; i < m.n_files; i++) {
        st_file_t *f;
        snprintf(file, sizeof(file), "%s/%s", path, m.files[i]);
        ck_assert_msg(st_open(file, &f, &err) == STATUS_OK, "%s", err.text);
        ck_assert_uint_eq(st_count(f), 4 * 3); /* values, Adam's momentum and velocity */
        for (size_t k = 0; k < st_count(f); k++) {
            const st_info_t *t = st_info(f, k);
            void *buf = malloc(t->end - t->begin + 1);
            ck_assert_msg(st_read(f, t, buf, &err) == STATUS_OK, "%s", err.text);
            free(buf);
        }
        st_close(f);
    }
    ckpt_manifest_free(&m);
    free(path);
    return step;
}

/* Starts `tessera train JOB --resume`, lets it run ms milliseconds, and kills it with SIGKILL;
 * returns whether it had already finished. */
static bool run_and_kill(const char *job, int ms)
{
    char *argv[] = {(char *)harness_program("tessera"), "train", (char *)job, "--resume", NULL};
    posix_spawn_file_actions_t fa;
    pid_t pid;
    int status;

    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    usleep((useconds_t)ms * 1000);
    kill(pid, SIGKILL);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status);
}

/* Runs the job whole, then kills it at random moments (tries times) and resumes it to the end:
 * the numbers are the whole run's. Every checkpoint before the last step is at a multiple of
 * `every`. */
static void kill_and_resume(const char *name, int tries, int64_t every)
{
    char whole_dir[512], cut_dir[512], *out = NULL, *expected, *got;
    const char *whole, *cut;
    int64_t last = -1;
    int kills = 0;

    snprintf(whole_dir, sizeof(whole_dir), "%s/whole-%s", harness_tmpdir(), name);
    snprintf(cut_dir, sizeof(cut_dir), "%s/cut-%s", harness_tmpdir(), name);
    whole = write_job("whole.yaml", whole_dir, "1024");
    ck_assert_int_eq(train(whole, NULL, &out), 0);
    expected = result_of(out);
    ck_assert_msg(strstr(expected, ", auc 0.") != NULL &&
                      strstr(expected, "test precision 0.") != NULL,
                  "no metrics in: %s", expected);
    free(out);
    ck_assert_int_eq(check_loadable(whole_dir), 10 * STEPS_PER_EPOCH);

    cut = strdup(write_job("cut.yaml", cut_dir, "1024"));
    srand((unsigned)time(NULL));
    for (int i = 0; i < tries; i++) {
        if (run_and_kill(cut, 50 + rand() % 300))
            break; /* it finished before the kill */
        kills++;
        if (last < 0 && !harness_has_checkpoint(cut_dir))
            continue; /* killed before its first checkpoint */
        int64_t step = check_loadable(cut_dir);
        ck_assert_msg(step >= last, "the newest checkpoint went back from %lld to %lld",
                      (long long)last, (long long)step);
        ck_assert_msg(step % every == 0 || step == 10 * STEPS_PER_EPOCH,
                      "a checkpoint at step %lld", (long long)step);
        last = step;
    }
    printf("%s: %d runs killed, the last at a checkpoint of step %lld\n", name, kills,
           (long long)last);
    ck_assert_msg(kills >= tries / 5 && last > 0, "only %d runs were killed mid-training", kills);
    ck_assert_int_eq(train(cut, "--resume", &out), 0);
    got = result_of(out);
    ck_assert_msg(strcmp(got, expected) == 0, "resumed: %s\nuninterrupted: %s\n%s", got, expected,
                  out);
    free(out);
    free(got);
    free(expected);
    free((char *)cut);
}

START_TEST(killed_at_random_moments_resumes_to_identical_numbers)
{
    train_line = "{epochs: 10}";
    kill_and_resume("plain", 25, 10);
}
END_TEST

/* With accumulate_steps 3 a checkpoint due every 10 steps waits for the end of its window (one
 * holds no gradients): at steps 12, 21, 30, ..., and the resumed run is the whole one. */
START_TEST(killed_with_accumulated_gradients_resumes_at_window_ends)
{
    train_line = "{epochs: 10, accumulate_steps: 3}";
    kill_and_resume("acc", 10, 3);
}
END_TEST

/* Under accumulate_steps a checkpoint's learning rate is the schedule's at the optimizer's updates
 * (its iterations, a window of batches each), not at the batches. */
START_TEST(a_checkpoints_learning_rate_goes_by_the_optimizers_updates)
{
    char dir[512], path[512], *out = NULL, *ckpt = NULL;
    int64_t step = -1;
    ckpt_manifest_t m;
    status_msg_t err = {0};
    FILE *f;

    snprintf(dir, sizeof(dir), "%s/lr", harness_tmpdir());
    snprintf(path, sizeof(path), "%s/lr.yaml", harness_tmpdir());
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "name: lr\nmodel: [{dense: {units: 10}, input_shape: [20]}]\n"
            "loss: {sparse_categorical_crossentropy: {from_logits: true}}\n"
            "optimizer: {sgd: {learning_rate: {exponential_decay: {initial_learning_rate: 0.1, "
            "decay_steps: 10, decay_rate: 0.5}}}}\n"
            "data: {batch_size: 8, train: {format: synthetic, examples: 160, shape: [20], "
            "classes: 10}}\n"
            "train: {epochs: 1, accumulate_steps: 2}\ncheckpoint: {dir: %s}\n",
            dir);
    fclose(f);
    ck_assert_int_eq(train(path, NULL, &out), 0);
    ck_assert_msg(ckpt_latest(dir, &step, &ckpt, &err) == STATUS_OK, "%s: %s", err.text, out);
    ck_assert_msg(ckpt_read_manifest(ckpt, &m, &err) == STATUS_OK, "%s", err.text);
    ck_assert_int_eq(m.step, 20);
    ck_assert_int_eq(m.iterations, 10);
    ck_assert_msg(fabs(m.learning_rate - 0.05) < 1e-7, "learning rate %.9g at %lld updates",
                  m.learning_rate, (long long)m.iterations);
    ckpt_manifest_free(&m);
    free(ckpt);
    free(out);
}
END_TEST

/* A resumed run with nothing left to train reports the checkpoint's model and writes nothing. */
START_TEST(resuming_a_finished_run_trains_nothing)
{
    char dir[512], *out = NULL, *first, *again;
    const char *job;

    snprintf(dir, sizeof(dir), "%s/done", harness_tmpdir());
    job = write_job("done.yaml", dir, "1024");
    ck_assert_int_eq(train(job, NULL, &out), 0);
    first = result_of(out);
    free(out);
    ck_assert_int_eq(train(job, "--resume", &out), 0);
    ck_assert_msg(strstr(out, "resumed ck at step 2500") != NULL, "%s", out);
    again = result_of(out);
    ck_assert_msg(strstr(again, "test accuracy") != NULL, "%s", again);
    ck_assert_str_eq(strstr(first, "test"), strstr(again, "test"));
    free(out);
    free(first);
    free(again);
}
END_TEST

static void expect_refused(const char *job, const char *needle)
{
    char *out = NULL;
    int rc = train(job, "--resume", &out);

    ck_assert_msg(rc != 0 && rc != -1, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, needle) != NULL, "expected \"%s\" in: %s", needle, out);
    free(out);
}

static void corrupt_file(const char *path, long offset, const char *bytes)
{
    FILE *f = fopen(path, "r+b");

    ck_assert_ptr_nonnull(f);
    if (offset < 0)
        ck_assert_int_eq(ftruncate(fileno(f), -offset), 0);
    else {
        fseek(f, offset, SEEK_SET);
        fputs(bytes, f);
    }
    fclose(f);
}

START_TEST(damaged_or_foreign_checkpoints_are_refused_by_name)
{
    char dir[512], shard[1024], manifest[1024], *out = NULL;
    const char *job;

    snprintf(dir, sizeof(dir), "%s/bad", harness_tmpdir());
    job = strdup(write_job("bad.yaml", dir, "1024"));
    char *argv[] = {
        (char *)harness_program("tessera"), "train", (char *)job, "--steps", "30", NULL};
    ck_assert_int_eq(harness_run(argv, NULL, NULL, 120000, &out), 0);
    free(out);
    snprintf(shard, sizeof(shard), "%s/ckpt-30/train-0.safetensors", dir);
    snprintf(manifest, sizeof(manifest), "%s/ckpt-30/manifest.json", dir);

    /* A model with another output layer: a checkpoint of a different model. */
    expect_refused(write_job("other.yaml", dir, "512"), "a checkpoint of a different model");
    /* A cut shard. */
    corrupt_file(shard, -1000, NULL);
    expect_refused(job, shard);
    /* A shard that is gone. */
    ck_assert_int_eq(unlink(shard), 0);
    expect_refused(job, "which is missing");
    /* A manifest that is not one. */
    corrupt_file(manifest, 0, "[");
    expect_refused(job, manifest);
    /* Nothing was overwritten: the damaged checkpoint is still the newest, still damaged. */
    ck_assert(harness_file_contains(manifest, "tessera-checkpoint-1"));
    free((char *)job);
}
END_TEST

/* Rewrites the file with the first `from` replaced by `to`. */
static void replace_in_file(const char *path, const char *from, const char *to)
{
    char text[4096], *at;
    size_t n;
    FILE *f = fopen(path, "r");

    ck_assert_ptr_nonnull(f);
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    ck_assert_ptr_nonnull(at = strstr(text, from));
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fprintf(f, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    fclose(f);
}

static int export_job(const char *job, const char *out_dir, const char *extra, char **out)
{
    char *argv[] = {(char *)harness_program("tessera"),
                    "export",
                    (char *)job,
                    "--out",
                    (char *)out_dir,
                    (char *)extra,
                    NULL};
    return harness_run(argv, NULL, NULL, 60000, out);
}

/* tessera export writes model.keras and model.safetensors from the newest checkpoint (Keras
 * loading them is the compat suite's check_keras.py), and refuses what it cannot export. */
START_TEST(export_writes_both_files_or_says_why_not)
{
    char dir[512], out_dir[512], path[1024], flag[600], *out = NULL;
    const char *job;
    FILE *f;

    snprintf(dir, sizeof(dir), "%s/exp", harness_tmpdir());
    snprintf(out_dir, sizeof(out_dir), "%s/exported", harness_tmpdir());
    job = strdup(write_job("exp.yaml", dir, "64"));
    char *argv[] = {
        (char *)harness_program("tessera"), "train", (char *)job, "--steps", "20", NULL};
    ck_assert_int_eq(harness_run(argv, NULL, NULL, 120000, &out), 0);
    free(out);
    ck_assert_msg(export_job(job, out_dir, NULL, &out) == 0, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "step 20"));
    free(out);
    snprintf(path, sizeof(path), "%s/model.keras", out_dir);
    ck_assert_ptr_nonnull(f = fopen(path, "rb"));
    ck_assert_int_eq(fgetc(f), 'P'); /* a zip archive */
    fclose(f);
    snprintf(path, sizeof(path), "%s/model.safetensors", out_dir);
    ck_assert_ptr_nonnull(f = fopen(path, "rb"));
    char head[512] = {0};
    ck_assert_uint_gt(fread(head, 1, sizeof(head) - 1, f), 8);
    fclose(f);
    ck_assert_ptr_nonnull(memmem(head + 8, sizeof(head) - 9, "\"dense/kernel\"", 14));
    /* A checkpoint of another model; a directory without checkpoints. */
    ck_assert_int_ne(export_job(write_job("exp2.yaml", dir, "32"), out_dir, NULL, &out), 0);
    ck_assert_msg(strstr(out, "a checkpoint of a different model") != NULL, "%s", out);
    free(out);
    snprintf(flag, sizeof(flag), "--checkpoint=%s", harness_tmpdir());
    ck_assert_int_ne(export_job(job, out_dir, flag, &out), 0);
    ck_assert_msg(strstr(out, "no complete checkpoint") != NULL, "%s", out);
    free(out);
    free((char *)job);
    /* an activation Keras's JSON cannot name (a job file's gelu_approximate): refused, with
     * nothing written */
    snprintf(dir, sizeof(dir), "%s/expg", harness_tmpdir());
    snprintf(out_dir, sizeof(out_dir), "%s/exported-gelu", harness_tmpdir());
    job = strdup(write_job("expg.yaml", dir, "64"));
    replace_in_file(job, "activation: relu", "activation: gelu_approximate");
    char *again[] = {
        (char *)harness_program("tessera"), "train", (char *)job, "--steps", "10", NULL};
    ck_assert_int_eq(harness_run(again, NULL, NULL, 120000, &out), 0);
    free(out);
    ck_assert_int_ne(export_job(job, out_dir, NULL, &out), 0);
    ck_assert_msg(strstr(out, "layer 'dense': its gelu_approximate has no name") != NULL, "%s",
                  out);
    free(out);
    snprintf(path, sizeof(path), "%s/model.keras", out_dir);
    ck_assert_int_ne(access(path, F_OK), 0);
    free((char *)job);
}
END_TEST

/* A zip archive holding one member of the given bytes. */
static void zip_with(const char *path, const char *member, const void *data, size_t len)
{
    int e = 0;
    zip_t *z = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &e);

    ck_assert_ptr_nonnull(z);
    ck_assert_int_ge(zip_file_add(z, member, zip_source_buffer(z, data, len, 0), 0), 0);
    ck_assert_int_eq(zip_close(z), 0);
}

static void expect_init_refused(const char *job, const char *file, const char *needle)
{
    char *out = NULL, flag[700];
    int rc;

    snprintf(flag, sizeof(flag), "--init-from=%s", file);
    char *argv[] = {
        (char *)harness_program("tessera"), "train", (char *)job, flag, "--evaluate", NULL};
    rc = harness_run(argv, NULL, NULL, 60000, &out);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, file) != NULL && strstr(out, needle) != NULL,
                  "expected %s and \"%s\" in: %s", file, needle, out);
    free(out);
}

/* init_from: tessera export's files load back and evaluate as the checkpoint did; damaged or
 * foreign .keras and safetensors files are refused naming the file, whatever libhdf5 makes of
 * them (it reads in a child process). */
START_TEST(init_from_loads_exports_and_refuses_damaged_files)
{
    char dir[512], out_dir[512], keras[1024], st[1024], bad[1024], *out = NULL;
    const char *job;
    char *data;
    size_t len;
    FILE *f;

    snprintf(dir, sizeof(dir), "%s/init", harness_tmpdir());
    snprintf(out_dir, sizeof(out_dir), "%s/init-export", harness_tmpdir());
    job = strdup(write_job("init.yaml", dir, "64"));
    char *argv[] = {
        (char *)harness_program("tessera"), "train", (char *)job, "--steps", "40", NULL};
    ck_assert_int_eq(harness_run(argv, NULL, NULL, 120000, &out), 0);
    char *trained = strstr(out, "test loss");
    ck_assert_ptr_nonnull(trained);
    trained = strndup(trained, strcspn(trained, "\n"));
    free(out);
    ck_assert_int_eq(export_job(job, out_dir, NULL, &out), 0);
    free(out);
    snprintf(keras, sizeof(keras), "%s/model.keras", out_dir);
    snprintf(st, sizeof(st), "%s/model.safetensors", out_dir);
    for (int i = 0; i < 2; i++) {
        char flag[1100];
        snprintf(flag, sizeof(flag), "--init-from=%s", i ? st : keras);
        char *eval[] = {
            (char *)harness_program("tessera"), "train", (char *)job, flag, "--evaluate", NULL};
        ck_assert_int_eq(harness_run(eval, NULL, NULL, 60000, &out), 0);
        ck_assert_msg(strstr(out, trained) != NULL, "%s\nafter training: %s", out, trained);
        free(out);
    }
    /* another model's weights */
    expect_init_refused(write_job("init2.yaml", dir, "32"), keras, "the weights of another model");
    /* not a zip; a zip without weights; garbage where the HDF5 file should be; a cut archive */
    snprintf(bad, sizeof(bad), "%s/junk.keras", harness_tmpdir());
    ck_assert_ptr_nonnull(f = fopen(bad, "wb"));
    fputs("PK\3\4 this is no zip archive at all, only its magic", f);
    fclose(f);
    expect_init_refused(job, bad, "not a zip archive");
    zip_with(bad, "config.json", "{}", 2);
    expect_init_refused(job, bad, "no model.weights.h5");
    static const char garbage[] = "\x89HDF\r\n\x1a\n garbage after the signature";
    zip_with(bad, "model.weights.h5", garbage, sizeof(garbage) - 1);
    expect_init_refused(job, bad, "is not an HDF5 file");
    ck_assert_ptr_nonnull(f = fopen(keras, "rb"));
    data = malloc(1 << 22);
    len = fread(data, 1, 1 << 22, f);
    fclose(f);
    ck_assert_ptr_nonnull(f = fopen(bad, "wb"));
    fwrite(data, 1, len / 2, f);
    fclose(f);
    expect_init_refused(job, bad, "");
    /* an HDF5 file cut in half inside a valid zip */
    {
        int e = 0;
        zip_t *z = zip_open(keras, ZIP_RDONLY, &e);
        zip_stat_t zs;
        ck_assert_int_eq(zip_stat(z, "model.weights.h5", 0, &zs), 0);
        char *h5 = malloc(zs.size + 1);
        zip_file_t *zf = zip_fopen(z, "model.weights.h5", 0);
        ck_assert_int_eq(zip_fread(zf, h5, zs.size), (zip_int64_t)zs.size);
        zip_fclose(zf);
        zip_discard(z);
        zip_with(bad, "model.weights.h5", h5, zs.size / 2);
        expect_init_refused(job, bad, "");
        free(h5);
    }
    /* an HDF5 file that makes libhdf5 1.10.8 write through a NULL pointer (found by the keras_h5
     * fuzz target): the child dies, the trainer says so */
    expect_init_refused(job,
                        harness_source("tests/fuzz/regressions/keras_archive/libhdf5-segv-1.keras"),
                        "crashed libhdf5 (signal 11)");
    free(data);
    free(trained);
    free((char *)job);
}
END_TEST

/* The model a Keras archive (tessera export's model.keras) holds trains on with the optimizer's
 * state the archive keeps (model: {keras: PATH}, as Keras's load_model restores it): from the
 * exported checkpoint's iteration, with its Adam slots, exactly as the checkpoint resumed; the
 * same weights without that state (--init-from) end elsewhere. In order, no Dropout: the data
 * of the second epoch are the first's. */
START_TEST(keras_archive_trains_on_with_its_optimizer_state)
{
    char dir[512], out_dir[512], path[600], keras[1100], flag[1200], *out = NULL;
    char *resumed, *from_archive, *weights_only;
    FILE *f;

    snprintf(dir, sizeof(dir), "%s/opt", harness_tmpdir());
    snprintf(out_dir, sizeof(out_dir), "%s/opt-export", harness_tmpdir());
    static const char data[] =
        "data:\n  batch_size: 32\n  shuffle_buffer: 0\n"
        "  train: {format: synthetic, kind: classification, examples: 1280, shape: [200], "
        "classes: 10, seed: 1}\n"
        "  test: {format: synthetic, kind: classification, examples: 500, shape: [200], "
        "classes: 10, seed: 2}\n";
    snprintf(path, sizeof(path), "%s/opt.yaml", harness_tmpdir());
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fprintf(f,
            "model:\n"
            "  - {dense: {units: 64, activation: relu}, input_shape: [200]}\n"
            "  - {dense: {units: 10, activation: softmax}}\n"
            "loss: sparse_categorical_crossentropy\nmetrics: [accuracy]\n"
            "optimizer: {adam: {learning_rate: 0.002}}\n%s"
            "train: {epochs: 1}\ncheckpoint: {dir: %s}\n",
            data, dir);
    fclose(f);
    ck_assert_int_eq(train(path, NULL, &out), 0);
    free(out);
    ck_assert_int_eq(export_job(path, out_dir, NULL, &out), 0);
    free(out);
    /* the checkpoint resumed for a second epoch */
    char *argv[] = {
        (char *)harness_program("tessera"), "train", path, "--resume", "--epochs", "2", NULL};
    ck_assert_int_eq(harness_run(argv, NULL, NULL, 120000, &out), 0);
    ck_assert_msg(strstr(out, "resumed") != NULL, "%s", out);
    resumed = result_of(out);
    free(out);
    /* the exported archive alone, one epoch */
    snprintf(keras, sizeof(keras), "%s/model.keras", out_dir);
    snprintf(path, sizeof(path), "%s/opt-keras.yaml", harness_tmpdir());
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fprintf(f, "model: {keras: %s}\n%strain: {epochs: 1}\n", keras, data);
    fclose(f);
    ck_assert_int_eq(train(path, NULL, &out), 0);
    ck_assert_msg(strstr(out, "its optimizer went on from iteration 40 of") != NULL, "%s", out);
    from_archive = result_of(out);
    free(out);
    snprintf(flag, sizeof(flag), "--init-from=%s", keras);
    ck_assert_int_eq(train(path, flag, &out), 0);
    ck_assert_msg(strstr(out, "its optimizer went on") == NULL, "%s", out);
    weights_only = result_of(out);
    free(out);
    ck_assert_msg(strcmp(from_archive, resumed) == 0, "from the archive: %s\nresumed: %s",
                  from_archive, resumed);
    ck_assert_msg(strcmp(weights_only, resumed) != 0, "a fresh optimizer ends as resumed: %s",
                  weights_only);
    free(resumed);
    free(from_archive);
    free(weights_only);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("checkpoint");

    tcase_set_timeout(tc, 280);
    tcase_add_test(tc, killed_at_random_moments_resumes_to_identical_numbers);
    tcase_add_test(tc, killed_with_accumulated_gradients_resumes_at_window_ends);
    tcase_add_test(tc, a_checkpoints_learning_rate_goes_by_the_optimizers_updates);
    tcase_add_test(tc, resuming_a_finished_run_trains_nothing);
    tcase_add_test(tc, damaged_or_foreign_checkpoints_are_refused_by_name);
    tcase_add_test(tc, export_writes_both_files_or_says_why_not);
    tcase_add_test(tc, init_from_loads_exports_and_refuses_damaged_files);
    tcase_add_test(tc, keras_archive_trains_on_with_its_optimizer_state);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
