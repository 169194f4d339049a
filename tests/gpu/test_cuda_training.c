/* Training on the CUDA backend against the CPU backend: every layer kind's gradients after one
 * step (1e-4), the loss curve of 50 steps with the same seed (1e-3), and the Fashion-MNIST
 * examples reaching the accuracy they reach on the CPU. Skips (77) without a GPU. */
#include <check.h>
#include <string.h>

#include "check_run.h"
#include "gpu_test.h"
#include "train.h"
#include "trainer.h"

static const backend_t *gpu;
static job_device_t gpu_device;

/* Models that between them hold every layer kind the CUDA backend computes (on its kernels or
 * the host's loops over its memory); each takes synthetic data of its input shape. */
static const struct {
    const char *name, *model, *data, *loss;
} models[] = {
    {"mlp",
     "[{dense: {units: 32, activation: gelu}, input_shape: [64]}, {dense: {units: 32, activation: "
     "swish}}, {dense: {units: 16, activation: tanh}}, layer_normalization, {dropout: {rate: "
     "0.3}}, {dense: {units: 16, activation: mish}}, {dense: {units: 4, activation: softmax}}]",
     "{format: synthetic, examples: 256, shape: [64], classes: 4}",
     "sparse_categorical_crossentropy"},
    {"cnn",
     "[{conv2d: {filters: 8, kernel_size: 3, padding: same, activation: relu}, input_shape: [12, "
     "12, 2]}, batch_normalization, {max_pooling2d: {pool_size: 2}}, {depthwise_conv2d: "
     "{kernel_size: 3, padding: same}}, {separable_conv2d: {filters: 6, kernel_size: 3, strides: "
     "2}}, {zero_padding2d: {padding: 1}}, {average_pooling2d: {pool_size: 2}}, {up_sampling2d: "
     "{size: 2}}, prelu, {spatial_dropout2d: {rate: 0.2}}, global_average_pooling2d, {dense: "
     "{units: 4}}]",
     "{format: synthetic, examples: 256, shape: [12, 12, 2], classes: 4}",
     "{sparse_categorical_crossentropy: {from_logits: true}}"},
    {"sequence",
     "[{conv1d: {filters: 8, kernel_size: 3, activation: elu}, input_shape: [20, 3]}, "
     "{max_pooling1d: {pool_size: 2}}, leaky_relu, {average_pooling1d: {pool_size: 3, strides: "
     "1, padding: same}}, {relu: {max_value: 6.0}}, global_max_pooling1d, {dense: {units: 4}}]",
     "{format: synthetic, examples: 256, shape: [20, 3], classes: 4}",
     "{sparse_categorical_crossentropy: {from_logits: true}}"},
    {"text",
     "[{embedding: {input_dim: 200, output_dim: 8}, input_shape: [12]}, "
     "global_average_pooling1d, {dense: {units: 8, activation: relu}}, {dense: {units: 1}}]",
     "{format: synthetic, kind: text, examples: 256, shape: [12], vocabulary: 200}",
     "{binary_crossentropy: {from_logits: true}}"},
};

static void parse(job_t *job, int i)
{
    char text[4096];
    status_msg_t err = {0};

    snprintf(text, sizeof(text),
             "model: %s\nloss: %s\noptimizer: {adam: {learning_rate: 0.003}}\n"
             "data: {batch_size: 32, seed: 3, shuffle_buffer: 256, train: %s}\n",
             models[i].model, models[i].loss, models[i].data);
    ck_assert_msg(job_parse(text, strlen(text), models[i].name, job, &err) == STATUS_OK, "%s: %s",
                  models[i].name, err.text);
}

static trainer_t *make(const job_t *job, const backend_t *be)
{
    trainer_opts_t o = {.num_shards = 1, .epochs = -1, .optimizer = true, .backend = be};
    trainer_t *t = NULL;
    status_msg_t err = {0};

    ck_assert_msg(trainer_new(job, &o, &t, &err) == STATUS_OK, "%s: %s", job->path, err.text);
    return t;
}

static double step(trainer_t *t, bool apply)
{
    data_batch_t b;
    model_stats_t st;
    status_msg_t err = {0};

    ck_assert(trainer_next(t, &b));
    ck_assert_msg(trainer_step(t, &b, &st, &err) == STATUS_OK, "%s", err.text);
    if (apply)
        ck_assert_msg(trainer_apply(t, &err) == STATUS_OK, "%s", err.text);
    return st.loss_sum / st.examples;
}

START_TEST(every_layer_kind_computes_the_cpus_gradients)
{
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        job_t job = {0};
        trainer_t *c, *g;
        double lc, lg;

        parse(&job, (int)i);
        c = make(&job, backend_cpu());
        g = make(&job, gpu);
        /* two steps: the second from weights the first one's update moved */
        for (int s = 0; s < 2; s++) {
            lc = step(c, s == 0);
            lg = step(g, s == 0);
            ck_assert_msg(fabs(lg - lc) <= 1e-4 * fmax(1, fabs(lc)),
                          "%s step %d: loss %.9g on the GPU, %.9g on the CPU", models[i].name, s,
                          lg, lc);
        }
        for (size_t p = 0; p < model_param_count(trainer_model(c)); p++) {
            model_param_t *pc = model_param(trainer_model(c), p),
                          *pg = model_param(trainer_model(g), p);
            size_t at;
            double e;
            if (pc->grad == NULL) /* a sparse table: its rows' gradients */
                continue;
            e = gpu_test_error(pg->grad, pc->grad, pc->n, &at);
            ck_assert_msg(e <= 1e-4, "%s: %s's gradient %zu is %.9g on the GPU, %.9g on the CPU",
                          models[i].name, pc->name, at, pg->grad[at], pc->grad[at]);
        }
        trainer_free(c);
        trainer_free(g);
        job_done(&job);
    }
}
END_TEST

START_TEST(fifty_steps_follow_the_cpus_loss_curve)
{
    for (size_t i = 0; i < 2; i++) { /* the MLP and the CNN */
        job_t job = {0};
        trainer_t *c, *g;

        parse(&job, (int)i);
        c = make(&job, backend_cpu());
        g = make(&job, gpu);
        for (int s = 0; s < 50; s++) {
            double lc = step(c, true), lg = step(g, true);
            ck_assert_msg(fabs(lg - lc) <= 1e-3 * fmax(1, fabs(lc)),
                          "%s step %d: loss %.6f on the GPU, %.6f on the CPU", models[i].name, s,
                          lg, lc);
        }
        trainer_free(c);
        trainer_free(g);
        job_done(&job);
    }
}
END_TEST

/* The shipped examples on the GPU, as tessera train --device runs them (the dataset where
 * Debian's dataset-fashion-mnist puts it: carry it to a GPU host without Debian's packages). */
#define FASHION_MNIST "/usr/share/datasets/fashion-mnist/"

static void expect_example_reaches(const char *example, double target)
{
    char path[1024];
    const char *src = getenv("TESSERA_SOURCE_DIR");
    job_t job = {0};
    train_opts_t o = {.threads = 1, .device = &gpu_device};
    train_result_t res;
    status_msg_t err = {0};

    ck_assert_msg(access(FASHION_MNIST "train-images-idx3-ubyte.gz", R_OK) == 0,
                  "Fashion-MNIST is not in " FASHION_MNIST ": install Debian's "
                  "dataset-fashion-mnist, or copy its four files there (a GPU machine without "
                  "Debian's packages: carry them)");
    snprintf(path, sizeof(path), "%s/examples/%s", src != NULL ? src : ".", example);
    ck_assert_msg(job_load_file(path, &job, &err) == STATUS_OK, "%s", err.text);
    ck_assert_msg(train_run(&job, &o, NULL, NULL, &res, &err) == STATUS_OK, "%s: %s", example,
                  err.text);
    printf("%s on %s: test accuracy %.4f, %.0f examples/s\n", example, gpu->name, res.test_accuracy,
           res.examples_per_second);
    ck_assert_msg(res.test_accuracy >= target, "%s: test accuracy %.4f < %.2f", example,
                  res.test_accuracy, target);
    job_done(&job);
}

START_TEST(fashion_mnist_examples_reach_their_cpu_targets)
{
    expect_example_reaches("fashion-mnist-mlp.yaml", 0.86);
    expect_example_reaches("fashion-mnist-cnn.yaml", 0.87);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cuda_training");
    TCase *tc = tcase_create("training");

    gpu = gpu_test_backend(&gpu_device);
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, every_layer_kind_computes_the_cpus_gradients);
    tcase_add_test(tc, fifty_steps_follow_the_cpus_loss_curve);
    tcase_add_test(tc, fashion_mnist_examples_reach_their_cpu_targets);
    suite_add_tcase(s, tc);
    return check_run(s, CK_NOFORK); /* a CUDA context does not survive fork() */
}
