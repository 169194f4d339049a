/* bench-gpu: the training step of the GPU benchmark's models on one device, through the engine
 * alone (no daemons): forward, loss, backward and the Adam update of each step, on synthetic
 * data of each model's shape. Prints one line a case:
 *
 *   CASE examples_per_s=N step_ms=N tflops=N
 *
 * tflops counts the products' multiply-adds, twice: three times the forward pass's (forward,
 * and backward's two products each) but the first layer's input gradient, which nobody needs.
 *
 *   bench-gpu [--device cuda|cuda:N|cpu] [--steps N] [--warmup N] [CASE...]
 *
 * Cases: mlp64 mlp1024 cnn64 cnn256 wide1024 (all without names). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "trainer.h"

static const char mlp[] = "[{dense: {units: 128, activation: relu}, input_shape: [784]}, "
                          "{dense: {units: 10}}]";
static const char cnn[] =
    "[{conv2d: {filters: 32, kernel_size: 3, activation: relu}, input_shape: [28, 28, 1]}, "
    "{max_pooling2d: {pool_size: 2}}, {conv2d: {filters: 64, kernel_size: 3, activation: relu}}, "
    "{max_pooling2d: {pool_size: 2}}, flatten, {dense: {units: 64, activation: relu}}, "
    "{dense: {units: 10}}]";
static const char wide[] = "[{dense: {units: 2048, activation: relu}, input_shape: [784]}, "
                           "{dense: {units: 2048, activation: relu}}, {dense: {units: 10}}]";

/* Forward flops an example (twice the multiply-adds), and the first layer's. */
#define MLP_FIRST  (2.0 * 784 * 128)
#define MLP_FLOPS  (MLP_FIRST + 2.0 * 128 * 10)
#define CNN_FIRST  (2.0 * 26 * 26 * 9 * 32)
#define CNN_FLOPS  (CNN_FIRST + 2.0 * (11 * 11 * 9 * 32 * 64 + 1600 * 64 + 64 * 10))
#define WIDE_FIRST (2.0 * 784 * 2048)
#define WIDE_FLOPS (WIDE_FIRST + 2.0 * (2048 * 2048 + 2048 * 10))

static const struct bench_case {
    const char *name, *model, *shape;
    int batch;
    double flops, first;
} cases[] = {
    {"mlp64", mlp, "[784]", 64, MLP_FLOPS, MLP_FIRST},
    {"mlp1024", mlp, "[784]", 1024, MLP_FLOPS, MLP_FIRST},
    {"cnn64", cnn, "[28, 28, 1]", 64, CNN_FLOPS, CNN_FIRST},
    {"cnn256", cnn, "[28, 28, 1]", 256, CNN_FLOPS, CNN_FIRST},
    {"wide1024", wide, "[784]", 1024, WIDE_FLOPS, WIDE_FIRST},
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int step(trainer_t *t, status_msg_t *err)
{
    data_batch_t b;
    model_stats_t st;

    if (!trainer_next(t, &b)) {
        snprintf(err->text, sizeof(err->text), "the data ran out");
        return -1;
    }
    if (trainer_step(t, &b, &st, err) != STATUS_OK || trainer_apply(t, err) != STATUS_OK)
        return -1;
    return 0;
}

static int run_case(const struct bench_case *c, const backend_t *be, int steps, int warmup)
{
    char text[2048];
    job_t job = {0};
    trainer_t *t = NULL;
    trainer_opts_t o = {.num_shards = 1, .epochs = -1, .optimizer = true, .backend = be};
    status_msg_t err = {0};
    double t0, secs;
    int rc = -1;

    /* 16 batches of synthetic examples, the epochs going round */
    snprintf(text, sizeof(text),
             "model: %s\nloss: {sparse_categorical_crossentropy: {from_logits: true}}\n"
             "optimizer: {adam: {learning_rate: 0.001}}\n"
             "data: {batch_size: %d, train: {format: synthetic, examples: %d, shape: %s, "
             "classes: 10}}\n",
             c->model, c->batch, 16 * c->batch, c->shape);
    if (job_parse(text, strlen(text), c->name, &job, &err) != STATUS_OK ||
        trainer_new(&job, &o, &t, &err) != STATUS_OK)
        goto out;
    for (int i = 0; i < warmup; i++)
        if (step(t, &err) != 0)
            goto out;
    t0 = now_s();
    for (int i = 0; i < steps; i++)
        if (step(t, &err) != 0)
            goto out;
    secs = now_s() - t0;
    printf("%s examples_per_s=%.0f step_ms=%.3f tflops=%.3f\n", c->name,
           (double)steps * c->batch / secs, 1e3 * secs / steps,
           (3.0 * c->flops - c->first) * c->batch * steps / secs / 1e12);
    fflush(stdout);
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "bench-gpu: %s: %s\n", c->name, err.text);
    trainer_free(t);
    job_done(&job);
    return rc;
}

int main(int argc, char **argv)
{
    const char *device_name = "cuda";
    int steps = 200, warmup = 20, status = 0, picked = 0;
    job_device_t device;
    const backend_t *be;
    status_msg_t err = {0};

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            device_name = argv[++i];
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: bench-gpu [--device D] [--steps N] [--warmup N] [CASE...]\n");
            return 2;
        }
    }
    if (steps < 1 || warmup < 0) {
        fprintf(stderr, "bench-gpu: --steps must be >= 1 and --warmup >= 0\n");
        return 2;
    }
    if (job_device_parse(device_name, &device, &err) != STATUS_OK ||
        backend_open(&device, &be, &err) != STATUS_OK) {
        fprintf(stderr, "bench-gpu: %s\n", err.text);
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') {
            i++; /* an option's value */
            continue;
        }
        size_t k = 0;
        while (k < sizeof(cases) / sizeof(cases[0]) && strcmp(cases[k].name, argv[i]) != 0)
            k++;
        if (k == sizeof(cases) / sizeof(cases[0])) {
            fprintf(stderr, "bench-gpu: no case %s\n", argv[i]);
            return 2;
        }
        picked++;
        status |= run_case(&cases[k], be, steps, warmup) != 0;
    }
    for (size_t k = 0; picked == 0 && k < sizeof(cases) / sizeof(cases[0]); k++)
        status |= run_case(&cases[k], be, steps, warmup) != 0;
    return status;
}
