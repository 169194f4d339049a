/* tessera train end to end: the shipped examples reach the accuracy PyTorch reaches with the
 * same settings on Fashion-MNIST, and bad jobs or data fail with a clear message. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "harness.h"

static double final_test_accuracy(const char *out)
{
    const char *p = strstr(out, "test accuracy ");
    return p ? strtod(p + strlen("test accuracy "), NULL) : -1;
}

static int train(const char *job, const char *extra, char **out)
{
    char *argv[6] = {(char *)harness_program("tessera"), "train", (char *)job, NULL, NULL, NULL};
    if (extra != NULL)
        argv[3] = (char *)extra;
    return harness_run(argv, NULL, NULL, 240000, out);
}

START_TEST(train_fashion_mnist_mlp_reaches_86_percent_in_5_epochs)
{
    char *out = NULL;
    int rc = train(harness_source("examples/fashion-mnist-mlp.yaml"), NULL, &out);
    double acc = final_test_accuracy(out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(acc >= 0.86, "test accuracy %.4f < 0.86: %s", acc, out);
    ck_assert_ptr_nonnull(strstr(out, "epoch 5/5"));
    free(out);
}
END_TEST

START_TEST(train_fashion_mnist_cnn_reaches_87_percent_in_2_epochs)
{
    char *out = NULL;
    int rc = train(harness_source("examples/fashion-mnist-cnn.yaml"), NULL, &out);
    double acc = final_test_accuracy(out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(acc >= 0.87, "test accuracy %.4f < 0.87: %s", acc, out);
    free(out);
}
END_TEST

/* A Keras Functional model (a residual block, a head joining two branches) from its JSON. */
START_TEST(train_fashion_mnist_functional_resnet_reaches_87_percent_in_2_epochs)
{
    char *out = NULL;
    int rc = train(harness_source("examples/fashion-mnist-resnet.yaml"), NULL, &out);
    double acc = final_test_accuracy(out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(acc >= 0.87, "test accuracy %.4f < 0.87: %s", acc, out);
    free(out);
}
END_TEST

START_TEST(train_synthetic_text_model_learns_with_sparse_embedding_updates)
{
    char *out = NULL;
    int rc = train(harness_source("examples/text-synthetic.yaml"), NULL, &out);
    double acc = final_test_accuracy(out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(acc >= 0.75, "test accuracy %.4f: the text model did not learn: %s", acc, out);
    free(out);
}
END_TEST

/* The MLP example as mirrored over 2 replicas of batch 32 (global 64, as the example's
 * one_device batch): an epoch of it ends where one_device's does, to the printed digits. */
START_TEST(train_fashion_mnist_mlp_mirrored_ends_where_one_device_does)
{
    char *text = NULL, *out1 = NULL, *out2 = NULL, path[600], *strategy, *batch;
    size_t len = 0;
    FILE *f = fopen(harness_source("examples/fashion-mnist-mlp.yaml"), "r");
    int rc;

    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(getdelim(&text, &len, '\0', f) > 0, 1);
    fclose(f);
    ck_assert_ptr_nonnull(strategy = strstr(text, "strategy: one_device\n"));
    ck_assert_ptr_nonnull(batch = strstr(text, "batch_size: 64\n"));
    ck_assert(strategy < batch);
    snprintf(path, sizeof(path), "%s/mirrored.yaml", harness_tmpdir());
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fprintf(f, "%.*sstrategy: {mirrored: {replicas: 2}}\n%.*sbatch_size: 32\n%s",
            (int)(strategy - text), text,
            (int)(batch - strategy - strlen("strategy: one_device\n")),
            strategy + strlen("strategy: one_device\n"), batch + strlen("batch_size: 64\n"));
    fclose(f);
    free(text);
    rc = train(harness_source("examples/fashion-mnist-mlp.yaml"), "--epochs=1", &out1);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out1);
    rc = train(path, "--epochs=1", &out2);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out2);
    printf("one_device: test accuracy %.4f; mirrored: %.4f\n", final_test_accuracy(out1),
           final_test_accuracy(out2));
    ck_assert_double_eq_tol(final_test_accuracy(out1), final_test_accuracy(out2), 0.002);
    ck_assert_msg(final_test_accuracy(out2) >= 0.82, "%s", out2);
    free(out1);
    free(out2);
}
END_TEST

/* Writes a job file into the test's temp dir from a template with one substitution. */
static const char *write_job(const char *name, const char *body)
{
    static char path[512];
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s", harness_tmpdir(), name);
    f = fopen(path, "w");
    fputs(body, f);
    fclose(f);
    return path;
}

static const char *const fmnist_data = "data:\n"
                                       "  train: {format: idx, images: %s, labels: %s}\n"
                                       "  batch_size: 64\n";

static void expect_failure(const char *job_path, const char *needle, const char *extra)
{
    char *out = NULL;
    int rc = train(job_path, extra, &out);
    ck_assert_msg(rc != 0 && rc != -1, "exit %d (want a clean failure): %s", rc, out);
    ck_assert_msg(strstr(out, needle) != NULL, "expected \"%s\" in: %s", needle, out);
    ck_assert_msg(strstr(out, "Segmentation") == NULL && strstr(out, "Abort") == NULL, "%s", out);
    free(out);
}

static const char *job_with(const char *name, const char *model, const char *images,
                            const char *labels, const char *optimizer)
{
    char body[4096], data[1024];
    snprintf(data, sizeof(data), fmnist_data, images, labels);
    snprintf(body, sizeof(body),
             "model:\n%s\nloss: {sparse_categorical_crossentropy: {from_logits: true}}\n"
             "optimizer: %s\n%strain: {steps: 50}\n",
             model, optimizer, data);
    return write_job(name, body);
}

#define FM "/usr/share/datasets/fashion-mnist/"
#define MLP                                                                                        \
    "  - {dense: {units: 16, activation: relu}, input_shape: [784]}\n  - {dense: {units: 10}}"

START_TEST(train_rejects_bad_jobs_naming_the_culprit)
{
    expect_failure(job_with("typo.yaml", "  - {dense: {unit: 16}, input_shape: [784]}",
                            FM "train-images-idx3-ubyte.gz", FM "train-labels-idx1-ubyte.gz",
                            "adam"),
                   "did you mean 'units'", NULL);
    expect_failure(job_with("layer.yaml", "  - {densse: {units: 16}, input_shape: [784]}",
                            FM "train-images-idx3-ubyte.gz", FM "train-labels-idx1-ubyte.gz",
                            "adam"),
                   "densse", NULL);
    expect_failure(
        job_with("act.yaml", "  - {dense: {units: 16, activation: relux}, input_shape: [784]}",
                 FM "train-images-idx3-ubyte.gz", FM "train-labels-idx1-ubyte.gz", "adam"),
        "relux", NULL);
    expect_failure(
        job_with("shape.yaml", "  - {conv2d: {filters: 4, kernel_size: 3}, input_shape: [784]}",
                 FM "train-images-idx3-ubyte.gz", FM "train-labels-idx1-ubyte.gz", "adam"),
        "Conv2D needs input", NULL);
    expect_failure(job_with("input.yaml", "  - {dense: {units: 10}, input_shape: [100]}",
                            FM "train-images-idx3-ubyte.gz", FM "train-labels-idx1-ubyte.gz",
                            "adam"),
                   "784", NULL);
    expect_failure(job_with("missing.yaml", MLP, "/nonexistent/images.gz",
                            FM "train-labels-idx1-ubyte.gz", "adam"),
                   "/nonexistent/images.gz", NULL);
    expect_failure(job_with("count.yaml", MLP, FM "train-images-idx3-ubyte.gz",
                            FM "t10k-labels-idx1-ubyte.gz", "adam"),
                   "t10k-labels-idx1-ubyte.gz", NULL);
    expect_failure(
        write_job("loss.yaml", "model:\n" MLP "\nloss: categorical_hinge\ndata: {batch_size: 8}\n"),
        "categorical_hinge", NULL);
    expect_failure("/nonexistent/job.yaml", "/nonexistent/job.yaml", NULL);
    /* A strategy tessera train cannot honour is refused, not run on one device in silence. */
    expect_failure(write_job("mwms.yaml",
                             "strategy: multi_worker_mirrored\nmodel:\n" MLP
                             "\nloss: mse\ndata: {batch_size: 8, train: {format: synthetic, "
                             "examples: 16, shape: [784], classes: 2}}\n"),
                   "strategy multi_worker_mirrored trains on a cluster of workers", NULL);
    /* so is a key that only means something on the wire to a parameter server */
    expect_failure(write_job("wire.yaml",
                             "model:\n" MLP
                             "\nloss: mse\ndata: {batch_size: 8, train: {format: synthetic, "
                             "examples: 16, shape: [784], classes: 2}}\n"
                             "train: {epochs: 1, wire_dtype: bfloat16}\n"),
                   "train.wire_dtype bfloat16 is what gradients and values take on the wire", NULL);
    expect_failure(job_with("flag.yaml", MLP, FM "train-images-idx3-ubyte.gz",
                            FM "train-labels-idx1-ubyte.gz", "adam"),
                   "--bogus", "--bogus");
    /* AUC's label_weights, one for each of the model's values */
    expect_failure(
        write_job("weights.yaml",
                  "model:\n" MLP
                  "\nloss: sparse_categorical_crossentropy\nmetrics: [{auc: {label_weights: [1, 2, "
                  "3]}}]\ndata: {batch_size: 8, train: {format: "
                  "synthetic, examples: 16, shape: [784], classes: 2}}\n"),
        "metric auc: 3 label_weights; the model gives 10 values an example", NULL);
    /* devices: a name that is none, and a GPU where its strategy has no all-reduce there yet */
    expect_failure(write_job("device.yaml",
                             "device: gpu0\nmodel:\n" MLP
                             "\nloss: mse\ndata: {batch_size: 8, train: {format: "
                             "synthetic, examples: 16, shape: [784], classes: 2}}\n"),
                   "device 'gpu0': expected cpu, cuda or cuda:N", NULL);
    expect_failure(job_with("flagdevice.yaml", MLP, FM "train-images-idx3-ubyte.gz",
                            FM "train-labels-idx1-ubyte.gz", "adam"),
                   "--device: device 'cuda:-1'", "--device=cuda:-1");
    expect_failure(write_job("mirroredgpu.yaml",
                             "strategy: mirrored\ndevice: cuda\nmodel:\n" MLP
                             "\nloss: mse\ndata: {batch_size: 8, train: {format: synthetic, "
                             "examples: 16, shape: [784], classes: 2}}\n"),
                   "device: cuda under strategy mirrored is not built yet", NULL);
}
END_TEST

/* A GPU job where there is none (this build without CUDA, or a host without a GPU): a clear
 * error naming the device, before any data is read. On a host with a GPU the gpu suite trains
 * on it instead. */
START_TEST(train_on_cuda_without_a_gpu_names_the_device)
{
    char *out = NULL;
    int rc;

    if (access("/dev/nvidia0", F_OK) == 0 || access("/dev/nvidiactl", F_OK) == 0)
        return;
    rc = train(harness_source("examples/fashion-mnist-mlp.yaml"), "--device=cuda:1", &out);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "cuda:1: no CUDA device is visible") != NULL ||
                      strstr(out, "device cuda:1: this build of Tessera has no CUDA backend") !=
                          NULL,
                  "%s", out);
    ck_assert_msg(strstr(out, "epoch") == NULL, "%s", out);
    free(out);
}
END_TEST

/* A regression has a loss and its metrics but no accuracy: none is printed (Keras prints none
 * either), rather than an accuracy of 0 that means nothing. */
START_TEST(train_regression_prints_no_accuracy)
{
    char body[2048], data[1024], *out = NULL;
    int rc;

    snprintf(data, sizeof(data), fmnist_data, FM "train-images-idx3-ubyte.gz",
             FM "train-labels-idx1-ubyte.gz");
    snprintf(body, sizeof(body),
             "model:\n  - {dense: {units: 16, activation: relu}, input_shape: [784]}\n"
             "  - {dense: {units: 1}}\nloss: mse\nmetrics: [mae]\n%s"
             "  test: {format: idx, images: " FM "t10k-images-idx3-ubyte.gz, labels: " FM
             "t10k-labels-idx1-ubyte.gz}\n  scale: 0.00392156862745098\ntrain: {steps: 100}\n",
             data);
    rc = train(write_job("regression.yaml", body), NULL, &out);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    ck_assert_msg(strstr(out, "accuracy") == NULL, "%s", out);
    ck_assert_msg(strstr(out, "; loss ") != NULL && strstr(out, ", mean_absolute_error ") &&
                      strstr(out, "; test loss ") && strstr(out, ", test mean_absolute_error "),
                  "%s", out);
    free(out);
}
END_TEST

START_TEST(train_rejects_truncated_data_and_out_of_range_labels)
{
    char cmd[1024], trunc[512], labels[512];
    const char *dir = harness_tmpdir();

    /* A gzip stream cut short, and a label file whose labels exceed the model's 10 classes. */
    snprintf(trunc, sizeof(trunc), "%s/trunc-images.gz", dir);
    snprintf(cmd, sizeof(cmd), "head -c 100000 " FM "train-images-idx3-ubyte.gz > %s", trunc);
    ck_assert_int_eq(system(cmd), 0);
    expect_failure(job_with("trunc.yaml", MLP, trunc, FM "train-labels-idx1-ubyte.gz", "adam"),
                   "trunc-images.gz", NULL);

    snprintf(labels, sizeof(labels), "%s/labels-12.idx", dir);
    {
        FILE *f = fopen(labels, "wb");
        unsigned char hdr[8] = {0, 0, 8, 1, 0, 0, 0xea, 0x60}; /* 60000 labels */
        fwrite(hdr, 1, 8, f);
        for (int i = 0; i < 60000; i++)
            fputc(i % 12, f);
        fclose(f);
    }
    expect_failure(job_with("classes.yaml", MLP, FM "train-images-idx3-ubyte.gz", labels, "adam"),
                   "labels go up to 11", NULL);
}
END_TEST

START_TEST(train_stops_on_a_nan_loss_naming_the_step)
{
    expect_failure(job_with("nan.yaml", MLP, FM "train-images-idx3-ubyte.gz",
                            FM "train-labels-idx1-ubyte.gz", "{sgd: {learning_rate: 1.0e+30}}"),
                   "at step", NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("train");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, train_fashion_mnist_mlp_reaches_86_percent_in_5_epochs);
    tcase_add_test(tc, train_fashion_mnist_cnn_reaches_87_percent_in_2_epochs);
    tcase_add_test(tc, train_fashion_mnist_functional_resnet_reaches_87_percent_in_2_epochs);
    tcase_add_test(tc, train_synthetic_text_model_learns_with_sparse_embedding_updates);
    tcase_add_test(tc, train_fashion_mnist_mlp_mirrored_ends_where_one_device_does);
    tcase_add_test(tc, train_rejects_bad_jobs_naming_the_culprit);
    tcase_add_test(tc, train_rejects_truncated_data_and_out_of_range_labels);
    tcase_add_test(tc, train_regression_prints_no_accuracy);
    tcase_add_test(tc, train_stops_on_a_nan_loss_naming_the_step);
    tcase_add_test(tc, train_on_cuda_without_a_gpu_names_the_device);
    suite_add_tcase(s, tc);
    return check_run(s, CK_NOFORK);
}
