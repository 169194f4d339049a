/* bench-files: Tessera's side of bench/files/run.sh.
 *
 *   bench-files ckpt JOB.yaml ROUNDS      checkpoint write (fsynced) and cold restore of the
 *                                         job's model with its optimizer slots
 *   bench-files tfrecord JOB.yaml ROUNDS  loading the job's TFRecord training data: framing,
 *                                         both CRCs, Example decoding into float rows
 *
 * Prints one "key value" line per figure (medians over the rounds), for bench.py. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "bench_util.h"
#include "checkpoint.h"
#include "data.h"
#include "job/job.h"
#include "trainer.h"

static uint64_t file_bytes(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

/* Drops the file's pages from the page cache, so the next read comes from the disk. */
static void evict(const char *path)
{
    int fd = open(path, O_RDONLY);

    if (fd >= 0) {
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

static int fail(const char *what, const status_msg_t *err)
{
    fprintf(stderr, "bench-files: %s: %s\n", what, err->text);
    return 1;
}

static int bench_ckpt(const job_t *job, int rounds)
{
    trainer_opts_t to = {.num_shards = 1, .epochs = 1, .optimizer = true};
    samples_t w = {0}, r = {0};
    status_msg_t err = {0};
    trainer_t *t;
    uint64_t bytes = 0;
    char shard[4096];

    if (trainer_new(job, &to, &t, &err) != STATUS_OK)
        return fail("trainer", &err);
    for (int i = 1; i <= rounds; i++) {
        train_position_t pos = {.step = i};
        ckpt_manifest_t m;
        char *path;
        double t0 = clock_now_s();
        if (train_ckpt_save(t, job, &pos, &err) != STATUS_OK)
            return fail("save", &err);
        double t1 = clock_now_s();
        snprintf(shard, sizeof(shard), "%s/ckpt-%d/%s", job->checkpoint_dir, i, TRAIN_CKPT_FILE);
        bytes = file_bytes(shard);
        samples_add(&w, (double)bytes / (t1 - t0));
        evict(shard);
        t0 = clock_now_s();
        if (ckpt_open_any(job->checkpoint_dir, &path, &m, &err) != STATUS_OK ||
            train_ckpt_restore(t, path, &m, &err) != STATUS_OK)
            return fail("restore", &err);
        samples_add(&r, (double)bytes / (clock_now_s() - t0));
        ckpt_manifest_free(&m);
        free(path);
    }
    printf("ckpt_bytes %llu\nckpt_write_bytes_per_s %.0f\nckpt_restore_bytes_per_s %.0f\n",
           (unsigned long long)bytes, samples_quantile(&w, 0.5), samples_quantile(&r, 0.5));
    samples_free(&w);
    samples_free(&r);
    trainer_free(t);
    return 0;
}

static int bench_tfrecord(const job_t *job, int rounds)
{
    samples_t s = {0};
    status_msg_t err = {0};
    uint64_t bytes = 0;
    size_t examples = 0;
    glob_t g;

    for (size_t i = 0; i < job->data.train.n_files; i++)
        if (glob(job->data.train.files[i], i ? GLOB_APPEND : 0, NULL, &g) != 0)
            return fprintf(stderr, "bench-files: no file %s\n", job->data.train.files[i]), 1;
    for (size_t i = 0; i < g.gl_pathc; i++)
        bytes += file_bytes(g.gl_pathv[i]);
    globfree(&g);
    for (int i = 0; i < rounds; i++) {
        dataset_t *ds;
        double t0 = clock_now_s();
        if (dataset_load(&job->data.train, job->data.scale, 0, &ds, &err) != STATUS_OK)
            return fail("load", &err);
        samples_add(&s, (double)bytes / (clock_now_s() - t0));
        examples = ds->n;
        dataset_free(ds);
    }
    printf("tfrecord_bytes %llu\ntfrecord_examples %zu\ntfrecord_bytes_per_s %.0f\n",
           (unsigned long long)bytes, examples, samples_quantile(&s, 0.5));
    samples_free(&s);
    return 0;
}

int main(int argc, char **argv)
{
    job_t job;
    status_msg_t err = {0};
    int rc;

    if (argc != 4 || (strcmp(argv[1], "ckpt") != 0 && strcmp(argv[1], "tfrecord") != 0)) {
        fprintf(stderr, "usage: bench-files ckpt|tfrecord JOB.yaml ROUNDS\n");
        return 2;
    }
    if (job_load_file(argv[2], &job, &err) != STATUS_OK)
        return fail(argv[2], &err);
    rc = strcmp(argv[1], "ckpt") == 0 ? bench_ckpt(&job, atoi(argv[3]))
                                      : bench_tfrecord(&job, atoi(argv[3]));
    job_done(&job);
    return rc;
}
