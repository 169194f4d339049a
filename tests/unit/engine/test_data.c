#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "check_run.h"
#include "data.h"
#include "base/clock.h"
#include "files/example.h"
#include "files/tfrecord.h"

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

/* ---- helpers ----------------------------------------------------------------------------- */

/* Value i of the dataset's features laid end to end, as the pipeline gives it (dataset_row). */
static float value(const dataset_t *ds, size_t i)
{
    float row[4096];
    ck_assert_uint_le(ds->feature_len, 4096);
    dataset_row(ds, i / ds->feature_len, row);
    return row[i % ds->feature_len];
}

static char tmpdir[64];

static void tmpdir_setup(void)
{
    strcpy(tmpdir, "/tmp/tessera-test-data-XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        exit(EXIT_FAILURE);
    }
}

static void tmpdir_teardown(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *de;
    char path[512];
    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", tmpdir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(tmpdir);
}

static const char *tmp_path(const char *name)
{
    static char paths[4][512];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

/* Writes bytes to name in the temp dir, through gzip when gz; returns the path. */
static const char *write_file(const char *name, const void *bytes, size_t len, bool gz)
{
    const char *path = tmp_path(name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(gzwrite(f, bytes, (unsigned)len), (int)len);
        ck_assert_int_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
        ck_assert_int_eq(fclose(f), 0);
    }
    return path;
}

/* An IDX file of the given magic and dims; data is (i * 7 + 3) mod 256, or `data` when given.
 * Returns its length; the caller frees *ret. */
static size_t idx_make(uint32_t magic, const uint32_t *dims, int rank, const uint8_t *data,
                       uint8_t **ret)
{
    size_t n = 1, len;
    uint8_t *b;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    len = 4 + 4 * (size_t)rank + n;
    b = malloc(len);
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(magic >> (24 - 8 * i));
    for (int r = 0; r < rank; r++)
        for (int i = 0; i < 4; i++)
            b[4 + 4 * r + i] = (uint8_t)(dims[r] >> (24 - 8 * i));
    for (size_t i = 0; i < n; i++)
        b[4 + 4 * rank + i] = data != NULL ? data[i] : (uint8_t)(i * 7 + 3);
    *ret = b;
    return len;
}

/* Writes an IDX file (optionally cut to `cut` bytes, when cut > 0) and returns its path. */
static const char *idx_write(const char *name, uint32_t magic, const uint32_t *dims, int rank,
                             const uint8_t *data, bool gz, size_t cut)
{
    uint8_t *b;
    size_t len = idx_make(magic, dims, rank, data, &b);
    const char *path = write_file(name, b, cut > 0 ? cut : len, gz);
    free(b);
    return path;
}

static const char *labels_write(const char *name, const uint8_t *labels, uint32_t n, bool gz)
{
    return idx_write(name, 0x801, &n, 1, labels, gz, 0);
}

/* ---- IDX --------------------------------------------------------------------------------- */

static void check_small_idx(bool gz)
{
    const uint32_t dims[3] = {3, 2, 2};
    const uint8_t labels[3] = {0, 2, 1};
    const char *im = idx_write(gz ? "im.gz" : "im", 0x803, dims, 3, NULL, gz, 0);
    const char *lb = labels_write(gz ? "lb.gz" : "lb", labels, 3, gz);
    dataset_t *ds = NULL;
    status_msg_t err = {0};

    ck_assert_msg(dataset_load_idx(im, lb, 0.5, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(ds->n, 3);
    ck_assert_uint_eq(ds->feature_len, 4);
    ck_assert_int_eq(ds->rank, 2);
    ck_assert_int_eq(ds->shape[0], 2);
    ck_assert_int_eq(ds->shape[1], 2);
    ck_assert_int_eq(ds->classes, 3);
    /* pixels stay bytes in memory, a quarter of the floats */
    ck_assert_ptr_null(ds->features);
    ck_assert_uint_eq((uintptr_t)ds->bytes % 64, 0);
    ck_assert_uint_eq(dataset_bytes(ds), 3 * 4 + 3 * sizeof(float));
    for (size_t i = 0; i < 12; i++)
        ck_assert_float_eq(value(ds, i), (float)((i * 7 + 3) % 256) * 0.5f);
    for (size_t i = 0; i < 3; i++)
        ck_assert_float_eq(ds->labels[i], labels[i]);
    dataset_free(ds);
}

START_TEST(idx_loads_plain_files_scaled)
{
    check_small_idx(false);
}
END_TEST

START_TEST(idx_loads_gzipped_files_detected_by_content)
{
    check_small_idx(true);
}
END_TEST

START_TEST(idx_accepts_uint8_features_of_rank_1_and_4)
{
    const uint32_t d1[1] = {5}, d4[4] = {2, 3, 2, 2};
    const uint8_t labels[5] = {1, 0, 1, 0, 1};
    dataset_t *ds = NULL;
    status_msg_t err = {0};

    const char *im = idx_write("r1", 0x801, d1, 1, NULL, false, 0);
    const char *lb = labels_write("lb5", labels, 5, false);
    ck_assert_msg(dataset_load_idx(im, lb, 1.0, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(ds->feature_len, 1);
    ck_assert_int_eq(ds->rank, 1);
    ck_assert_int_eq(ds->shape[0], 1);
    ck_assert_float_eq(value(ds, 4), 31.0f);
    ck_assert_int_eq(ds->classes, 2);
    dataset_free(ds);

    im = idx_write("r4", 0x804, d4, 4, NULL, true, 0);
    lb = labels_write("lb2", labels, 2, true);
    ck_assert_msg(dataset_load_idx(im, lb, 1.0, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(ds->feature_len, 12);
    ck_assert_int_eq(ds->rank, 3);
    ck_assert_int_eq(ds->shape[0], 3);
    ck_assert_int_eq(ds->shape[2], 2);
    dataset_free(ds);
}
END_TEST

static void expect_load_error(const char *im, const char *lb, status_t status, const char *name,
                              const char *phrase)
{
    dataset_t *ds = NULL;
    status_msg_t err = {0};
    status_t rc = dataset_load_idx(im, lb, 1.0, 0, &ds, &err);
    ck_assert_msg(rc == status, "got %s (%s), expected %s", status_name(rc), err.text,
                  status_name(status));
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(err.text, name) != NULL, "'%s' does not name %s", err.text, name);
    ck_assert_msg(strstr(err.text, phrase) != NULL, "'%s' does not say '%s'", err.text, phrase);
}

START_TEST(idx_truncated_data_fails_naming_the_file)
{
    const uint32_t dims[3] = {3, 2, 2};
    const uint8_t labels[3] = {0, 1, 2};
    const char *lb = labels_write("lb", labels, 3, false);
    /* 16-byte header + 12 data bytes, cut to 16 + 10. */
    const char *im = idx_write("plain-cut", 0x803, dims, 3, NULL, false, 26);
    expect_load_error(im, lb, STATUS_INVALID_ARGUMENT, im, "truncated");
    im = idx_write("gz-cut", 0x803, dims, 3, NULL, true, 26);
    expect_load_error(im, lb, STATUS_INVALID_ARGUMENT, im, "truncated");
    im = idx_write("header-cut", 0x803, dims, 3, NULL, false, 9);
    expect_load_error(im, lb, STATUS_INVALID_ARGUMENT, im, "truncated");
    lb = idx_write("lb-cut", 0x801, dims, 1, labels, true, 10);
    im = idx_write("im", 0x803, dims, 3, NULL, false, 0);
    expect_load_error(im, lb, STATUS_INVALID_ARGUMENT, lb, "truncated");
}
END_TEST

START_TEST(idx_cut_or_corrupt_gzip_stream_fails)
{
    const uint32_t dims[3] = {50, 8, 8};
    uint8_t labels[50] = {0}, *raw, *gz;
    const char *lb = labels_write("lb", labels, 50, false), *path;
    size_t len = idx_make(0x803, dims, 3, NULL, &raw), gz_len;
    FILE *f;

    path = write_file("full.gz", raw, len, true);
    f = fopen(path, "rb");
    gz = malloc(len + 1024);
    gz_len = fread(gz, 1, len + 1024, f);
    fclose(f);
    /* Cut inside the 8-byte trailer: all data inflates but the stream is incomplete. */
    path = write_file("trailer-cut.gz", gz, gz_len - 3, false);
    expect_load_error(path, lb, STATUS_INVALID_ARGUMENT, path, "truncated");
    /* A wrong CRC-32 in the trailer. */
    gz[gz_len - 8] ^= 0xff;
    path = write_file("bad-crc.gz", gz, gz_len, false);
    expect_load_error(path, lb, STATUS_INVALID_ARGUMENT, path, "corrupt");
    free(gz);
    free(raw);
}
END_TEST

START_TEST(idx_bad_magic_type_or_label_rank_fails)
{
    const uint32_t dims[3] = {3, 2, 2};
    const uint8_t labels[3] = {0, 1, 2};
    const char *lb = labels_write("lb", labels, 3, false);
    const char *im = idx_write("im", 0x803, dims, 3, NULL, false, 0);
    const char *bad = idx_write("magic", 0x01020803, dims, 3, NULL, false, 0);
    expect_load_error(bad, lb, STATUS_INVALID_ARGUMENT, bad, "bad magic");
    bad = idx_write("float", 0x0d03, dims, 3, NULL, false, 0);
    expect_load_error(bad, lb, STATUS_INVALID_ARGUMENT, bad, "not supported");
    bad = idx_write("rank0", 0x0800, dims, 0, NULL, false, 0);
    expect_load_error(bad, lb, STATUS_INVALID_ARGUMENT, bad, "bad magic");
    bad = idx_write("lb-rank2", 0x802, dims, 2, NULL, false, 0);
    expect_load_error(im, bad, STATUS_INVALID_ARGUMENT, bad, "rank 1");
    bad = write_file("text", "hello, world, not an IDX file", 29, true);
    expect_load_error(im, bad, STATUS_INVALID_ARGUMENT, bad, "bad magic");
}
END_TEST

START_TEST(idx_count_mismatch_names_both_files)
{
    const uint32_t dims[3] = {3, 2, 2};
    const uint8_t labels[2] = {0, 1};
    const char *im = idx_write("train-images.gz", 0x803, dims, 3, NULL, true, 0);
    const char *lb = labels_write("train-labels.gz", labels, 2, true);
    char expect[1024];
    snprintf(expect, sizeof(expect), "%s: 2 labels but %s has 3 images", lb, im);
    expect_load_error(im, lb, STATUS_INVALID_ARGUMENT, lb, expect);
}
END_TEST

START_TEST(idx_missing_file_is_not_found)
{
    const uint8_t labels[1] = {0};
    const char *lb = labels_write("lb", labels, 1, false);
    const char *missing = tmp_path("no-such-file.gz");
    expect_load_error(missing, lb, STATUS_NOT_FOUND, missing, "cannot open");
    expect_load_error(lb, missing, STATUS_NOT_FOUND, missing, "cannot open");
}
END_TEST

START_TEST(idx_absurd_dimensions_or_trailing_data_are_refused)
{
    const uint32_t zero[3] = {3, 0, 2}, dims[3] = {3, 2, 2};
    const uint8_t labels[3] = {0, 1, 2};
    /* Only a header of 65536^3 pixels: refused before any allocation or read of the data. */
    const uint8_t huge[16] = {0, 0, 8, 3, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0};
    const char *lb = labels_write("lb", labels, 3, false);
    const char *im = write_file("huge", huge, sizeof(huge), false);
    uint8_t *raw;
    size_t len;
    expect_load_error(im, lb, STATUS_OUT_OF_RANGE, im, "GiB");
    im = idx_write("zero", 0x803, zero, 3, NULL, false, 0);
    expect_load_error(im, lb, STATUS_OUT_OF_RANGE, im, "dimension 1");
    len = idx_make(0x803, dims, 3, NULL, &raw);
    raw = realloc(raw, len + 5);
    memset(raw + len, 0, 5);
    im = write_file("long.gz", raw, len + 5, true);
    free(raw);
    expect_load_error(im, lb, STATUS_INVALID_ARGUMENT, im, "more data");
}
END_TEST

/* A header's claim is checked against the file before anything is allocated for it: 40 bytes
 * that promise 512 MiB of pixels (2 GiB of floats) are refused at once, plain or gzipped (deflate
 * cannot expand 1032-fold). */
START_TEST(idx_claims_beyond_the_file_are_refused_before_allocating)
{
    uint8_t head[40] = {0, 0, 8, 3, 0, 0, 0x20, 0, 0, 0, 1, 0, 0, 0, 1, 0};
    const char *im, *lb;
    uint8_t labels[8192] = {0};

    lb = labels_write("lb-8192", labels, 8192, false);
    im = write_file("liar", head, sizeof(head), false);
    expect_load_error(im, lb, STATUS_INVALID_ARGUMENT, im,
                      "promises 536870912 bytes of data but the file holds 24");
    im = write_file("liar.gz", head, sizeof(head), true);
    expect_load_error(im, lb, STATUS_INVALID_ARGUMENT, im, "more than a gzip file");
}
END_TEST

static bool fashion_present(void)
{
    if (access(FASHION_DIR "/train-images-idx3-ubyte.gz", R_OK) == 0)
        return true;
    fprintf(stderr, "skipped: %s is absent (Debian package dataset-fashion-mnist)\n", FASHION_DIR);
    return false;
}

START_TEST(fashion_mnist_train_loads_60000_images_of_10_classes)
{
    dataset_t *ds = NULL;
    status_msg_t err = {0};
    double sum = 0;
    /* scripts/setup-deps.sh installs it: its absence is a failure, not a pass. */
    ck_assert_msg(fashion_present(),
                  "Fashion-MNIST is missing: apt-get install dataset-fashion-mnist");
    ck_assert_msg(dataset_load_idx(FASHION_DIR "/train-images-idx3-ubyte.gz",
                                   FASHION_DIR "/train-labels-idx1-ubyte.gz", 1.0 / 255, 0, &ds,
                                   &err) == STATUS_OK,
                  "%s", err.text);
    ck_assert_uint_eq(ds->n, 60000);
    ck_assert_uint_eq(ds->feature_len, 784);
    ck_assert_int_eq(ds->rank, 2);
    ck_assert_int_eq(ds->shape[0], 28);
    ck_assert_int_eq(ds->shape[1], 28);
    ck_assert_int_eq(ds->classes, 10);
    /* Values read independently with Python's gzip module. */
    ck_assert_float_eq(ds->labels[0], 9);
    ck_assert_float_eq(ds->labels[1], 0);
    ck_assert_float_eq(ds->labels[3], 3);
    ck_assert_float_eq(ds->labels[59999], 5);
    ck_assert_float_eq_tol(value(ds, 14 * 28 + 14), 217 / 255.0f, 1e-6);
    ck_assert_float_eq_tol(value(ds, 784 + 400), 197 / 255.0f, 1e-6);
    ck_assert_float_eq_tol(value(ds, 59999 * 784 + 500), 180 / 255.0f, 1e-6);
    for (int i = 0; i < 784; i++)
        sum += value(ds, i);
    ck_assert_double_eq_tol(sum, 76247 / 255.0, 1e-3);
    dataset_free(ds);
}
END_TEST

START_TEST(fashion_mnist_test_split_loads_10000_images)
{
    dataset_t *ds = NULL;
    status_msg_t err = {0};
    /* scripts/setup-deps.sh installs it: its absence is a failure, not a pass. */
    ck_assert_msg(fashion_present(),
                  "Fashion-MNIST is missing: apt-get install dataset-fashion-mnist");
    ck_assert_msg(dataset_load_idx(FASHION_DIR "/t10k-images-idx3-ubyte.gz",
                                   FASHION_DIR "/t10k-labels-idx1-ubyte.gz", 1.0, 0, &ds,
                                   &err) == STATUS_OK,
                  "%s", err.text);
    ck_assert_uint_eq(ds->n, 10000);
    ck_assert_uint_eq(ds->feature_len, 784);
    ck_assert_int_eq(ds->classes, 10);
    ck_assert_float_eq(ds->labels[1], 2);
    ck_assert_float_eq(ds->labels[4], 6);
    ck_assert_float_eq(value(ds, 14 * 28 + 14), 110);
    ck_assert_float_eq(value(ds, 9999 * 784 + 500), 63);
    dataset_free(ds);
}
END_TEST

/* ---- synthetic --------------------------------------------------------------------------- */

static job_synthetic_t classification_spec(uint64_t seed)
{
    job_synthetic_t s = {.kind = JOB_SYNTHETIC_CLASSIFICATION,
                         .examples = 3000,
                         .shape = {8},
                         .rank = 1,
                         .classes = 3,
                         .seed = seed};
    return s;
}

static dataset_t *synthetic(const job_synthetic_t *spec, double scale)
{
    dataset_t *ds = NULL;
    status_msg_t err = {0};
    ck_assert_msg(dataset_synthetic(spec, scale, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    return ds;
}

START_TEST(synthetic_classification_is_deterministic_in_the_seed)
{
    job_synthetic_t spec = classification_spec(7);
    dataset_t *a = synthetic(&spec, 2.0), *b = synthetic(&spec, 2.0), *c;
    int count[3] = {0};
    spec.seed = 8;
    c = synthetic(&spec, 2.0);
    ck_assert_int_eq(memcmp(a->features, b->features, 3000 * 8 * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(a->labels, b->labels, 3000 * sizeof(float)), 0);
    ck_assert_int_ne(memcmp(a->features, c->features, 3000 * 8 * sizeof(float)), 0);
    ck_assert_int_eq(a->classes, 3);
    ck_assert_uint_eq((uintptr_t)a->features % 64, 0);
    for (size_t i = 0; i < 3000 * 8; i++) {
        ck_assert_float_ge(a->features[i], 0);
        ck_assert_float_lt(a->features[i], 2.0f);
    }
    for (size_t i = 0; i < 3000; i++) {
        float l = a->labels[i];
        ck_assert(l == 0 || l == 1 || l == 2);
        count[(int)l]++;
    }
    for (int k = 0; k < 3; k++)
        ck_assert_int_gt(count[k], 300);
    dataset_free(a);
    dataset_free(b);
    dataset_free(c);
}
END_TEST

/* A multiclass perceptron trained on one seed's data classifies another seed's data: the
 * labels come from one linear teacher, whatever the seed. */
START_TEST(synthetic_classification_teacher_is_linear_and_shared_across_seeds)
{
    job_synthetic_t spec = classification_spec(1);
    dataset_t *train = synthetic(&spec, 1.0), *test;
    double w[3][9] = {{0}};
    int correct = 0;
    spec.seed = 2;
    test = synthetic(&spec, 1.0);
    for (int epoch = 0; epoch < 30; epoch++) {
        for (size_t e = 0; e < train->n; e++) {
            const float *x = train->features + e * 8;
            int best = 0, y = (int)train->labels[e];
            double score[3];
            for (int c = 0; c < 3; c++) {
                score[c] = w[c][8];
                for (int k = 0; k < 8; k++)
                    score[c] += w[c][k] * x[k];
                if (score[c] > score[best])
                    best = c;
            }
            if (best != y) {
                for (int k = 0; k < 8; k++) {
                    w[y][k] += x[k];
                    w[best][k] -= x[k];
                }
                w[y][8] += 1;
                w[best][8] -= 1;
            }
        }
    }
    for (size_t e = 0; e < test->n; e++) {
        const float *x = test->features + e * 8;
        int best = 0;
        double score[3];
        for (int c = 0; c < 3; c++) {
            score[c] = w[c][8];
            for (int k = 0; k < 8; k++)
                score[c] += w[c][k] * x[k];
            if (score[c] > score[best])
                best = c;
        }
        correct += best == (int)test->labels[e];
    }
    ck_assert_msg(correct > 0.9 * (double)test->n, "accuracy %d / %zu", correct, test->n);
    dataset_free(train);
    dataset_free(test);
}
END_TEST

START_TEST(synthetic_text_has_ids_in_vocabulary_and_balanced_labels)
{
    job_synthetic_t spec = {.kind = JOB_SYNTHETIC_TEXT,
                            .examples = 2000,
                            .shape = {20},
                            .rank = 1,
                            .vocabulary = 1000,
                            .seed = 3};
    dataset_t *a = synthetic(&spec, 1.0 / 255), *b = synthetic(&spec, 5.0);
    size_t ones = 0;
    bool saw_top = false, saw_one = false;
    ck_assert_int_eq(a->classes, 2);
    ck_assert_int_eq(a->rank, 1);
    ck_assert_int_eq(a->shape[0], 20);
    /* Ids are not scaled, and the same seed gives the same data. */
    ck_assert_int_eq(memcmp(a->features, b->features, 2000 * 20 * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(a->labels, b->labels, 2000 * sizeof(float)), 0);
    for (size_t i = 0; i < 2000 * 20; i++) {
        float id = a->features[i];
        ck_assert_float_eq(id, floorf(id));
        ck_assert_float_ge(id, 1);
        ck_assert_float_lt(id, 1000);
        saw_one |= id == 1;
        saw_top |= id == 999;
    }
    ck_assert(saw_one && saw_top);
    for (size_t i = 0; i < 2000; i++) {
        ck_assert(a->labels[i] == 0 || a->labels[i] == 1);
        ones += a->labels[i] == 1;
    }
    ck_assert_uint_gt(ones, 700);
    ck_assert_uint_lt(ones, 1300);
    dataset_free(a);
    dataset_free(b);
}
END_TEST

static void expect_spec_error(const job_synthetic_t *spec, status_t status, const char *phrase)
{
    dataset_t *ds = NULL;
    status_msg_t err = {0};
    status_t rc = dataset_synthetic(spec, 1.0, 0, &ds, &err);
    ck_assert_msg(rc == status, "got %s (%s)", status_name(rc), err.text);
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(err.text, phrase) != NULL, "'%s' does not say '%s'", err.text, phrase);
}

START_TEST(synthetic_rejects_a_bad_spec)
{
    job_synthetic_t s = classification_spec(1);
    s.examples = 0;
    expect_spec_error(&s, STATUS_INVALID_ARGUMENT, "examples");
    s = classification_spec(1);
    s.classes = 1;
    expect_spec_error(&s, STATUS_INVALID_ARGUMENT, "classes");
    s = classification_spec(1);
    s.rank = 0;
    expect_spec_error(&s, STATUS_INVALID_ARGUMENT, "shape");
    s.rank = 5;
    expect_spec_error(&s, STATUS_INVALID_ARGUMENT, "shape");
    s = classification_spec(1);
    s.shape[0] = 0;
    expect_spec_error(&s, STATUS_INVALID_ARGUMENT, "shape[0]");
    s = classification_spec(1);
    s.examples = INT64_C(1) << 40;
    expect_spec_error(&s, STATUS_OUT_OF_RANGE, "GiB");
    s = classification_spec(1);
    s.kind = JOB_SYNTHETIC_TEXT;
    s.vocabulary = 1;
    expect_spec_error(&s, STATUS_INVALID_ARGUMENT, "vocabulary");
}
END_TEST

/* Data past the memory limit is refused before it is allocated, naming what is too large. */
START_TEST(datasets_and_pipelines_respect_the_memory_limit)
{
    const uint32_t dims[3] = {2, 1, 3};
    const uint8_t labels[2] = {4, 1};
    job_synthetic_t s = classification_spec(1);
    dataset_t *ds = NULL;
    data_pipeline_t *p = NULL;
    data_pipeline_opts_t o = {.num_shards = 1, .batch_size = 100, .epochs = 1, .prefetch = 3};
    status_msg_t err = {0};
    const char *im = idx_write("budget-im", 0x803, dims, 3, NULL, false, 0);

    /* 2 examples of 3 bytes and their float labels: 14 bytes */
    ck_assert_int_eq(
        dataset_load_idx(im, labels_write("budget-lb", labels, 2, false), 1.0, 13, &ds, &err),
        STATUS_RESOURCE_EXHAUSTED);
    ck_assert_ptr_nonnull(strstr(err.text, im));
    ck_assert_ptr_null(ds);

    s.examples = 1000; /* 1000 examples of 8 values and a label: 36,000 bytes, and the teacher */
    ck_assert_int_eq(dataset_synthetic(&s, 1.0, 30000, &ds, &err), STATUS_RESOURCE_EXHAUSTED);
    ck_assert_ptr_null(ds);
    ck_assert_ptr_nonnull(strstr(err.text, "synthetic data"));
    ck_assert_ptr_nonnull(strstr(err.text, "memory limit of 30000 bytes"));
    ck_assert_msg(dataset_synthetic(&s, 1.0, 40000, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(dataset_bytes(ds), 1000 * 9 * sizeof(float));

    /* 4 slots of 100 x 9 floats and 3 x 1000 indices */
    o.max_bytes = 20000;
    ck_assert_int_eq(data_pipeline_new(ds, &o, &p, &err), STATUS_RESOURCE_EXHAUSTED);
    ck_assert_ptr_nonnull(strstr(err.text, "data pipeline"));
    o.max_bytes = 64000;
    ck_assert_msg(data_pipeline_new(ds, &o, &p, &err) == STATUS_OK, "%s", err.text);
    data_pipeline_free(p);
    dataset_free(ds);
}
END_TEST

START_TEST(dataset_load_dispatches_on_the_format)
{
    const uint32_t dims[3] = {2, 1, 3};
    const uint8_t labels[2] = {4, 1};
    job_source_t src = {.present = true, .format = JOB_DATA_IDX};
    dataset_t *ds = NULL;
    status_msg_t err = {0};

    src.images = (char *)idx_write("im", 0x803, dims, 3, NULL, false, 0);
    src.labels = (char *)labels_write("lb", labels, 2, false);
    ck_assert_msg(dataset_load(&src, 1.0, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(ds->n, 2);
    ck_assert_int_eq(ds->classes, 5);
    dataset_free(ds);

    src.format = JOB_DATA_SYNTHETIC;
    src.synthetic = classification_spec(1);
    ck_assert_msg(dataset_load(&src, 1.0, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(ds->n, 3000);
    dataset_free(ds);
    ds = NULL;

    src.present = false;
    ck_assert_int_eq(dataset_load(&src, 1.0, 0, &ds, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_null(ds);
}
END_TEST

/* ---- sharding by file ---------------------------------------------------------------------- */

/* tfrecord file i of the test holds 3 Examples {x: [i, i], label: i}; csv file i 2 rows. */
static void write_shard_files(int n)
{
    char path[512];

    for (int i = 0; i < n; i++) {
        example_writer_t w = {0};
        const float x[2] = {(float)i, (float)i};
        const int64_t y = i;
        const uint8_t *ex;
        size_t len;
        FILE *f;
        snprintf(path, sizeof(path), "%s/part-%d.tfrecord", tmpdir, i);
        ck_assert_ptr_nonnull(f = fopen(path, "wb"));
        for (int k = 0; k < 3; k++) {
            example_writer_reset(&w);
            example_add_floats(&w, "x", x, 2);
            example_add_int64s(&w, "label", &y, 1);
            ck_assert_ptr_nonnull(ex = example_finish(&w, &len));
            ck_assert_int_eq(tfrecord_write(f, path, ex, len, NULL), STATUS_OK);
        }
        fclose(f);
        example_writer_free(&w);
        snprintf(path, sizeof(path), "%s/part-%d.csv", tmpdir, i);
        ck_assert_ptr_nonnull(f = fopen(path, "w"));
        fprintf(f, "a,label,b\n%d,%d,%d\n%d,%d,%d\n", i, i, i, i, i, i);
        fclose(f);
    }
}

/* Loads part index of count of the source and checks which files' examples it holds. */
static void expect_part(job_source_t *src, int index, int count, bool by_file, size_t examples,
                        int first_label, int label_step)
{
    data_part_t part = {index, count};
    dataset_t *ds = NULL;
    bool got_by_file = !by_file;
    status_msg_t err = {0};

    ck_assert_msg(dataset_load_part(src, 1.0, 0, &part, &ds, &got_by_file, &err) == STATUS_OK, "%s",
                  err.text);
    ck_assert_int_eq(got_by_file, by_file);
    ck_assert_uint_eq(ds->n, examples);
    for (size_t i = 0; i < ds->n; i++) {
        int per_file = src->format == JOB_DATA_CSV ? 2 : 3;
        ck_assert_int_eq((int)ds->labels[i], first_label + label_step * (int)(i / per_file));
        ck_assert(value(ds, i * ds->feature_len) == ds->labels[i]);
    }
    dataset_free(ds);
}

START_TEST(files_are_dealt_to_workers_when_there_are_enough)
{
    char pattern[512], *files[1] = {pattern};
    job_source_t tf = {
        .present = true,
        .format = JOB_DATA_TFRECORD,
        .files = files,
        .n_files = 1,
        .inputs = {{.name = "x", .kind = JOB_FEATURE_FLOAT_LIST, .shape = {2}, .rank = 1}},
        .n_inputs = 1,
        .label = {{.name = "label", .kind = JOB_FEATURE_INT64_LIST, .shape = {1}, .rank = 1}},
        .n_label = 1};
    job_source_t csv = {.present = true,
                        .format = JOB_DATA_CSV,
                        .files = files,
                        .n_files = 1,
                        .label = {{.name = "label"}},
                        .n_label = 1,
                        .delimiter = ','};

    write_shard_files(4);
    snprintf(pattern, sizeof(pattern), "%s/part-*.tfrecord", tmpdir);
    expect_part(&tf, 1, 2, true, 6, 1, 2);   /* files 1 and 3 */
    expect_part(&tf, 0, 4, true, 3, 0, 1);   /* file 0 */
    expect_part(&tf, 2, 5, false, 12, 0, 1); /* 4 files for 5 workers: all, by example */
    expect_part(&tf, 0, 1, false, 12, 0, 1);
    snprintf(pattern, sizeof(pattern), "%s/part-*.csv", tmpdir);
    expect_part(&csv, 1, 2, true, 4, 1, 2);
    expect_part(&csv, 0, 8, false, 8, 0, 1);
}
END_TEST

/* A float32 .npy file of `rows` rows of `cols` values, v[i] = base + i (format 1.0: a 10-byte
 * preamble, then the header padded with spaces to 118 bytes and ended by a newline). */
static void write_npy(const char *path, int rows, int cols, float base)
{
    char header[118];
    FILE *f = fopen(path, "wb");
    int n = snprintf(header, sizeof(header),
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);

    ck_assert_ptr_nonnull(f);
    ck_assert_int_lt(n, (int)sizeof(header));
    memset(header + n, ' ', sizeof(header) - (size_t)n);
    header[sizeof(header) - 1] = '\n';
    fwrite("\x93NUMPY\x01\x00\x76\x00", 1, 10, f);
    fwrite(header, 1, sizeof(header), f);
    for (int i = 0; i < rows * cols; i++) {
        float v = base + (float)i;
        fwrite(&v, sizeof(v), 1, f);
    }
    fclose(f);
}

/* Overwrites path with one record of two features, "x" and `name`, each the floats {1, 2}. */
static void write_record_of_two(const char *path, const char *name)
{
    example_writer_t w = {0};
    const uint8_t *ex;
    size_t len;
    FILE *f;

    ck_assert_ptr_nonnull(f = fopen(path, "wb"));
    example_add_floats(&w, "x", (const float[]){1.0f, 2.0f}, 2);
    example_add_floats(&w, name, (const float[]){1.0f, 2.0f}, 2);
    ck_assert_ptr_nonnull(ex = example_finish(&w, &len));
    ck_assert_int_eq(tfrecord_write(f, path, ex, len, NULL), STATUS_OK);
    fclose(f);
    example_writer_free(&w);
}

/* Labels of several values an example (one-hot rows, several targets) come from a NumPy array
 * [n, k] or a TFRecord feature of k values, and a batch carries each example's row whole. */
START_TEST(labels_of_several_values_stay_whole_rows)
{
    char x[512], y[512], path[512], *xs[1] = {x}, *ys[1] = {y}, *files[1] = {path};
    job_source_t npy = {
        .present = true, .format = JOB_DATA_NPY, .x = xs, .n_x = 1, .y = ys, .n_y = 1};
    job_source_t tf = {
        .present = true,
        .format = JOB_DATA_TFRECORD,
        .files = files,
        .n_files = 1,
        .inputs = {{.name = "x", .kind = JOB_FEATURE_FLOAT_LIST, .shape = {2}, .rank = 1}},
        .n_inputs = 1,
        .label = {{.name = "y", .kind = JOB_FEATURE_FLOAT_LIST, .shape = {3}, .rank = 1}},
        .n_label = 1};
    data_pipeline_opts_t po = {
        .num_shards = 1, .batch_size = 2, .shuffle_buffer = 8, .seed = 3, .epochs = 1};
    data_pipeline_t *p = NULL;
    data_batch_t b;
    example_writer_t w = {0};
    dataset_t *ds = NULL;
    status_msg_t err = {0};
    const uint8_t *ex;
    size_t len, seen = 0;
    FILE *f;

    snprintf(x, sizeof(x), "%s/x.npy", tmpdir);
    snprintf(y, sizeof(y), "%s/y.npy", tmpdir);
    write_npy(x, 5, 2, 0.0f); /* example e: 2e, 2e + 1 */
    write_npy(y, 5, 3, 0.0f); /* example e: 3e, 3e + 1, 3e + 2 */
    ck_assert_msg(dataset_load(&npy, 1.0, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(ds->label_len, 3);
    ck_assert_int_eq(ds->classes, 0);
    ck_assert_float_eq(ds->labels[13], 13.0f);
    /* shuffled batches: each example's features and its three labels travel together */
    ck_assert_int_eq(data_pipeline_new(ds, &po, &p, &err), STATUS_OK);
    while (data_pipeline_next(p, &b))
        for (int i = 0; i < b.size; i++, seen++) {
            float e = b.features[i * 2] / 2;
            for (int k = 0; k < 3; k++)
                ck_assert_float_eq(b.labels[i * 3 + k], 3 * e + (float)k);
        }
    ck_assert_uint_eq(seen, 5);
    data_pipeline_free(p);
    dataset_free(ds);

    snprintf(path, sizeof(path), "%s/rows.tfrecord", tmpdir);
    ck_assert_ptr_nonnull(f = fopen(path, "wb"));
    for (int e = 0; e < 2; e++) {
        const float xv[2] = {(float)e, 1.0f}, yv[3] = {0.0f, (float)e, 1.0f};
        example_writer_reset(&w);
        example_add_floats(&w, "x", xv, 2);
        example_add_floats(&w, "y", yv, 3);
        ck_assert_ptr_nonnull(ex = example_finish(&w, &len));
        ck_assert_int_eq(tfrecord_write(f, path, ex, len, NULL), STATUS_OK);
    }
    fclose(f);
    ck_assert_msg(dataset_load(&tf, 1.0, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(ds->label_len, 3);
    ck_assert_float_eq(ds->labels[4], 1.0f);
    dataset_free(ds);
    /* a record whose label holds other than the job's three values names itself */
    example_writer_free(&w);
    write_record_of_two(path, "y");
    ck_assert_int_eq(dataset_load(&tf, 1.0, 0, &ds, &err), STATUS_DATA_LOSS);
    ck_assert_msg(strstr(err.text, "feature 'y' holds 2 values, the job says 3"), "%s", err.text);
}
END_TEST

/* A model of several outputs reads one label feature (TFRecord) or column (CSV) for each, named
 * in the model's order: every example's label row holds their values one after the other in
 * that order, whatever order the file keeps them in, and the dataset says where each output's
 * part begins. A record without one of them names it. */
START_TEST(labels_of_several_outputs_come_from_a_feature_or_column_each)
{
    char path[512], csv_path[512], *files[1] = {path}, *csv_files[1] = {csv_path};
    job_source_t tf = {
        .present = true,
        .format = JOB_DATA_TFRECORD,
        .files = files,
        .n_files = 1,
        .inputs = {{.name = "x", .kind = JOB_FEATURE_FLOAT_LIST, .shape = {2}, .rank = 1}},
        .n_inputs = 1,
        .label = {{.name = "box", .kind = JOB_FEATURE_FLOAT_LIST, .shape = {2}, .rank = 1},
                  {.name = "cls", .kind = JOB_FEATURE_INT64_LIST, .shape = {1}, .rank = 1}},
        .n_label = 2};
    job_source_t csv = {.present = true,
                        .format = JOB_DATA_CSV,
                        .files = csv_files,
                        .n_files = 1,
                        .delimiter = ',',
                        .label = {{.name = "z"}, {.name = "y"}},
                        .n_label = 2};
    example_writer_t w = {0};
    dataset_t *ds = NULL;
    status_msg_t err = {0};
    const uint8_t *ex;
    size_t len;
    FILE *f;

    snprintf(path, sizeof(path), "%s/outputs.tfrecord", tmpdir);
    ck_assert_ptr_nonnull(f = fopen(path, "wb"));
    for (int e = 0; e < 3; e++) {
        const int64_t cls = e;
        example_writer_reset(&w);
        example_add_int64s(&w, "cls", &cls, 1); /* before the box: the job's order counts */
        example_add_floats(&w, "x", (const float[]){(float)e, 0.5f}, 2);
        example_add_floats(&w, "box", (const float[]){10.0f * e, 10.0f * e + 1}, 2);
        ck_assert_ptr_nonnull(ex = example_finish(&w, &len));
        ck_assert_int_eq(tfrecord_write(f, path, ex, len, NULL), STATUS_OK);
    }
    fclose(f);
    ck_assert_msg(dataset_load(&tf, 1.0, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(ds->label_len, 3);
    ck_assert_int_eq(ds->n_label_parts, 2);
    ck_assert_uint_eq(ds->label_part_len[0], 2);
    ck_assert_uint_eq(ds->label_part_len[1], 1);
    for (int e = 0; e < 3; e++) {
        ck_assert_float_eq(ds->labels[e * 3], 10.0f * e);
        ck_assert_float_eq(ds->labels[e * 3 + 1], 10.0f * e + 1);
        ck_assert_float_eq(ds->labels[e * 3 + 2], (float)e);
    }
    dataset_free(ds);
    example_writer_free(&w);
    write_record_of_two(path, "box"); /* a record without its class */
    ck_assert_int_eq(dataset_load(&tf, 1.0, 0, &ds, &err), STATUS_DATA_LOSS);
    ck_assert_msg(strstr(err.text, "feature 'cls' is missing"), "%s", err.text);

    snprintf(csv_path, sizeof(csv_path), "%s/outputs.csv", tmpdir);
    ck_assert_ptr_nonnull(f = fopen(csv_path, "w"));
    fprintf(f, "a,y,b,z\n1,2,3,4\n5,6,7,8\n");
    fclose(f);
    ck_assert_msg(dataset_load(&csv, 1.0, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(ds->feature_len, 2);
    ck_assert_uint_eq(ds->label_len, 2);
    ck_assert_int_eq(ds->n_label_parts, 2);
    ck_assert_float_eq(ds->labels[0], 4.0f); /* z, then y */
    ck_assert_float_eq(ds->labels[1], 2.0f);
    ck_assert_float_eq(ds->labels[3], 6.0f);
    ck_assert_float_eq(value(ds, 1), 3.0f); /* a and b are the inputs */
    dataset_free(ds);
}
END_TEST

/* A model of several inputs reads one array or feature for each: every example's row holds
 * their values one after the other, in the order the source lists them (the job puts a
 * TFRecord's features in the model's order by name). */
START_TEST(several_inputs_lie_one_after_the_other_in_each_row)
{
    char a[512], b[512], y[512], path[512], *xs[2] = {a, b}, *ys[1] = {y}, *files[1] = {path};
    job_source_t npy = {
        .present = true, .format = JOB_DATA_NPY, .x = xs, .n_x = 2, .y = ys, .n_y = 1};
    job_source_t tf = {
        .present = true,
        .format = JOB_DATA_TFRECORD,
        .files = files,
        .n_files = 1,
        .inputs = {{.name = "img", .kind = JOB_FEATURE_BYTES_LIST, .shape = {3}, .rank = 1},
                   {.name = "meta", .kind = JOB_FEATURE_FLOAT_LIST, .shape = {2}, .rank = 1}},
        .n_inputs = 2,
        .label = {{.name = "label", .kind = JOB_FEATURE_INT64_LIST, .shape = {1}, .rank = 1}},
        .n_label = 1};
    example_writer_t w = {0};
    const uint8_t img[3] = {2, 4, 6}, *ex;
    const float meta[2] = {-1.0f, 3.0f};
    const int64_t label = 1;
    dataset_t *ds = NULL;
    status_msg_t err = {0};
    size_t len;
    FILE *f;

    snprintf(a, sizeof(a), "%s/a.npy", tmpdir);
    snprintf(b, sizeof(b), "%s/b.npy", tmpdir);
    snprintf(y, sizeof(y), "%s/y.npy", tmpdir);
    write_npy(a, 4, 2, 0.0f);   /* example e: 2e, 2e + 1 */
    write_npy(b, 4, 3, 100.0f); /* example e: 100 + 3e ... */
    write_npy(y, 4, 1, 0.0f);
    ck_assert_msg(dataset_load(&npy, 1.0, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(ds->feature_len, 5);
    ck_assert_int_eq(ds->n_parts, 2);
    ck_assert_uint_eq(ds->part_len[1], 3);
    for (size_t e = 0; e < 4; e++) {
        ck_assert_float_eq(value(ds, e * 5 + 1), (float)(2 * e + 1));
        ck_assert_float_eq(value(ds, e * 5 + 2), (float)(100 + 3 * e));
    }
    dataset_free(ds);
    write_npy(b, 3, 3, 0.0f);
    ck_assert_int_eq(dataset_load(&npy, 1.0, 0, &ds, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.text, "b.npy: 3 examples, the first inputs 4"), "%s", err.text);

    snprintf(path, sizeof(path), "%s/two.tfrecord", tmpdir);
    ck_assert_ptr_nonnull(f = fopen(path, "wb"));
    example_add_floats(&w, "meta", meta, 2);
    example_add_bytes(&w, "img", img, 3);
    example_add_int64s(&w, "label", &label, 1);
    ck_assert_ptr_nonnull(ex = example_finish(&w, &len));
    ck_assert_int_eq(tfrecord_write(f, path, ex, len, NULL), STATUS_OK);
    fclose(f);
    example_writer_free(&w);
    ck_assert_msg(dataset_load(&tf, 0.5, 0, &ds, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(ds->feature_len, 5);
    ck_assert_float_eq(value(ds, 0), 1.0f); /* the bytes scaled, then the floats */
    ck_assert_float_eq(value(ds, 2), 3.0f);
    ck_assert_float_eq(value(ds, 3), -0.5f);
    ck_assert_float_eq(value(ds, 4), 1.5f);
    dataset_free(ds);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("data");
    TCase *idx = tcase_create("idx"), *syn = tcase_create("synthetic");

    /* Unchecked: the directory is made once, in the parent, and removed even when a test fails. */
    tcase_add_unchecked_fixture(idx, tmpdir_setup, tmpdir_teardown);
    tcase_set_timeout(idx, 120);
    tcase_add_test(idx, idx_loads_plain_files_scaled);
    tcase_add_test(idx, idx_loads_gzipped_files_detected_by_content);
    tcase_add_test(idx, idx_accepts_uint8_features_of_rank_1_and_4);
    tcase_add_test(idx, idx_truncated_data_fails_naming_the_file);
    tcase_add_test(idx, idx_cut_or_corrupt_gzip_stream_fails);
    tcase_add_test(idx, idx_bad_magic_type_or_label_rank_fails);
    tcase_add_test(idx, idx_count_mismatch_names_both_files);
    tcase_add_test(idx, idx_missing_file_is_not_found);
    tcase_add_test(idx, idx_absurd_dimensions_or_trailing_data_are_refused);
    tcase_add_test(idx, idx_claims_beyond_the_file_are_refused_before_allocating);
    tcase_add_test(idx, fashion_mnist_train_loads_60000_images_of_10_classes);
    tcase_add_test(idx, fashion_mnist_test_split_loads_10000_images);
    tcase_add_test(idx, dataset_load_dispatches_on_the_format);
    tcase_add_test(idx, datasets_and_pipelines_respect_the_memory_limit);
    tcase_add_test(idx, files_are_dealt_to_workers_when_there_are_enough);
    tcase_add_test(idx, several_inputs_lie_one_after_the_other_in_each_row);
    tcase_add_test(idx, labels_of_several_values_stay_whole_rows);
    tcase_add_test(idx, labels_of_several_outputs_come_from_a_feature_or_column_each);
    suite_add_tcase(s, idx);

    tcase_set_timeout(syn, 60);
    tcase_add_test(syn, synthetic_classification_is_deterministic_in_the_seed);
    tcase_add_test(syn, synthetic_classification_teacher_is_linear_and_shared_across_seeds);
    tcase_add_test(syn, synthetic_text_has_ids_in_vocabulary_and_balanced_labels);
    tcase_add_test(syn, synthetic_rejects_a_bad_spec);
    suite_add_tcase(s, syn);

    return check_run(s, CK_FORK);
}
