/* TFRecord input end to end: `tessera convert` writes Fashion-MNIST as TFRecord files of
 * tf.train.Example, and `tessera train` trains on them to exactly the numbers it reaches on the
 * IDX files (same examples, same order, same seed), from raw uint8 bytes or float lists, plain
 * or GZIP, one file or shards found by a glob; damaged files and a job that maps features the
 * files do not have fail naming the file, the record's byte offset and the feature. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "harness.h"

#define FM "/usr/share/datasets/fashion-mnist/"

static int run(char **argv, char **out)
{
    return harness_run(argv, NULL, NULL, 240000, out);
}

static void convert(const char *images, const char *labels, const char *out, const char *extra)
{
    char *argv[] = {(char *)harness_program("tessera"),
                    "convert",
                    "--images",
                    (char *)images,
                    "--labels",
                    (char *)labels,
                    "--out",
                    (char *)out,
                    (char *)extra,
                    NULL};
    char *text = NULL;
    int rc = run(argv, &text);

    ck_assert_msg(rc == 0, "convert exit %d: %s", rc, text);
    free(text);
}

static const char *tmp(const char *name)
{
    static char path[8][512];
    static int next;
    char *p = path[next++ % 8];

    snprintf(p, sizeof(path[0]), "%s/%s", harness_tmpdir(), name);
    return p;
}

/* A job training a small MLP on `train` and evaluating on `test` (data source mappings). */
static const char *job(const char *name, const char *train, const char *test)
{
    const char *path = tmp(name);
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "name: tf\nmodel:\n  - {dense: {units: 32, activation: relu}, input_shape: [784]}\n"
            "  - {dense: {units: 10}}\n"
            "loss: {sparse_categorical_crossentropy: {from_logits: true}}\nmetrics: [accuracy]\n"
            "optimizer: {adam: {learning_rate: 0.001}}\n"
            "data:\n  scale: 0.00392156862745098\n  batch_size: 64\n  shuffle_buffer: 10000\n"
            "  train: %s\n  test: %s\ntrain: {epochs: 1}\n",
            train, test);
    fclose(f);
    return path;
}

static int train(const char *job_path, char **out)
{
    char *argv[] = {(char *)harness_program("tessera"), "train", (char *)job_path, NULL};
    return run(argv, out);
}

/* The part of the result line that timing does not change. */
static char *result_of(const char *out)
{
    const char *p = strstr(out, "examples/s); loss ");

    ck_assert_msg(p != NULL, "no result line in: %s", out);
    return strndup(p, strcspn(p, "\n"));
}

static char *train_result(const char *job_path)
{
    char *out = NULL, *r;
    int rc = train(job_path, &out);

    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    r = result_of(out);
    free(out);
    return r;
}

#define IDX_TRAIN                                                                                  \
    "{format: idx, images: " FM "train-images-idx3-ubyte.gz, labels: " FM                          \
    "train-labels-idx1-ubyte.gz}"
#define IDX_TEST                                                                                   \
    "{format: idx, images: " FM "t10k-images-idx3-ubyte.gz, labels: " FM                           \
    "t10k-labels-idx1-ubyte.gz}"
#define BYTES  "features: {image: {bytes_list: [784]}, label: {int64_list: [1]}}"
#define FLOATS "features: {image: {float_list: [784]}, label: {int64_list: [1]}}"

START_TEST(training_on_tfrecords_matches_training_on_idx)
{
    char train_src[1024], test_src[1024], sharded[1024];
    char *idx, *bytes, *floats, *shards;

    convert(FM "train-images-idx3-ubyte.gz", FM "train-labels-idx1-ubyte.gz", tmp("train.tfrecord"),
            NULL);
    convert(FM "t10k-images-idx3-ubyte.gz", FM "t10k-labels-idx1-ubyte.gz", tmp("test.tfrecord"),
            NULL);
    convert(FM "t10k-images-idx3-ubyte.gz", FM "t10k-labels-idx1-ubyte.gz",
            tmp("test-f.tfrecord.gz"), "--floats");
    convert(FM "train-images-idx3-ubyte.gz", FM "train-labels-idx1-ubyte.gz", tmp("sh.tfrecord.gz"),
            "--shards=3");

    idx = train_result(job("idx.yaml", IDX_TRAIN, IDX_TEST));
    snprintf(train_src, sizeof(train_src), "{format: tfrecord, files: %s, " BYTES "}",
             tmp("train.tfrecord"));
    snprintf(test_src, sizeof(test_src), "{format: tfrecord, files: [%s], " BYTES "}",
             tmp("test.tfrecord"));
    bytes = train_result(job("bytes.yaml", train_src, test_src));
    ck_assert_msg(strcmp(idx, bytes) == 0, "IDX: %s\nTFRecord: %s", idx, bytes);

    /* The test split as GZIP float lists: the same values, the same evaluation. */
    snprintf(test_src, sizeof(test_src), "{format: tfrecord, files: %s, " FLOATS "}",
             tmp("test-f.tfrecord.gz"));
    floats = train_result(job("floats.yaml", train_src, test_src));
    ck_assert_msg(strcmp(idx, floats) == 0, "IDX: %s\nfloats: %s", idx, floats);

    /* Three GZIP shards through a glob: the examples in another order, so other numbers, but
     * all 60000 of them and a model that learns. */
    snprintf(sharded, sizeof(sharded), "{format: tfrecord, files: '%s', " BYTES "}",
             tmp("sh-*-of-00003.tfrecord.gz"));
    shards = train_result(job("shards.yaml", sharded, test_src));
    const char *acc = strstr(shards, "test accuracy ");
    ck_assert_ptr_nonnull(acc);
    ck_assert_msg(strtod(acc + 14, NULL) > 0.80, "%s", shards);
    free(idx);
    free(bytes);
    free(floats);
    free(shards);
}
END_TEST

static void expect_failure(const char *job_path, const char *a, const char *b)
{
    char *out = NULL;
    int rc = train(job_path, &out);

    ck_assert_msg(rc == 1, "exit %d (want 1): %s", rc, out);
    ck_assert_msg(strstr(out, a) != NULL && (b == NULL || strstr(out, b) != NULL),
                  "expected \"%s\" and \"%s\" in: %s", a, b ? b : "", out);
    free(out);
}

START_TEST(damaged_files_and_wrong_mappings_name_the_culprit)
{
    char src[1024];
    const char *bad = tmp("bad.tfrecord");
    FILE *f;

    convert(FM "t10k-images-idx3-ubyte.gz", FM "t10k-labels-idx1-ubyte.gz", bad, NULL);
    /* One byte of the 11th record's payload (records are 838 bytes here). */
    f = fopen(bad, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 838 * 10 + 400, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
    snprintf(src, sizeof(src), "{format: tfrecord, files: %s, " BYTES "}", bad);
    expect_failure(job("crc.yaml", src, IDX_TEST), bad, "byte 8380");

    convert(FM "t10k-images-idx3-ubyte.gz", FM "t10k-labels-idx1-ubyte.gz", tmp("ok.tfrecord"),
            NULL);
    snprintf(src, sizeof(src),
             "{format: tfrecord, files: %s, features: {pixels: {bytes_list: [784]}, label: "
             "{int64_list: [1]}}}",
             tmp("ok.tfrecord"));
    expect_failure(job("name.yaml", src, IDX_TEST), "feature 'pixels' is missing", "byte 0");
    snprintf(src, sizeof(src), "{format: tfrecord, files: %s, " FLOATS "}", tmp("ok.tfrecord"));
    expect_failure(job("kind.yaml", src, IDX_TEST), "feature 'image' is of another kind", NULL);
    snprintf(src, sizeof(src),
             "{format: tfrecord, files: %s, features: {image: {bytes_list: [28, 27]}, label: "
             "{int64_list: [1]}}}",
             tmp("ok.tfrecord"));
    expect_failure(job("count.yaml", src, IDX_TEST), "not one string of 756 bytes", NULL);
    snprintf(src, sizeof(src), "{format: tfrecord, files: '%s', " BYTES "}",
             tmp("none-*.tfrecord"));
    expect_failure(job("glob.yaml", src, IDX_TEST), "none-*.tfrecord", "no file matches");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tfrecord_input");
    TCase *tc = tcase_create("tfrecord_input");

    tcase_set_timeout(tc, 280);
    tcase_add_test(tc, training_on_tfrecords_matches_training_on_idx);
    tcase_add_test(tc, damaged_files_and_wrong_mappings_name_the_culprit);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
