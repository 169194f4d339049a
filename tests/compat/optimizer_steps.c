/* Runs Tessera's optimizers on given gradients, for tests/compat/check_keras_optimizers.py,
 * which runs Keras's on the same ones and compares:
 *
 *   optimizer_steps DIR KIND STEPS N [ROW_LEN K] [key=value ...]
 *
 * DIR/params.f32 holds N float32 values (little-endian, as numpy's tofile writes them). Dense
 * (no ROW_LEN): DIR/grads.f32 holds STEPS gradients of N floats. Rows: the params are a table
 * of N / ROW_LEN rows, and each step's gradient is K rows (DIR/grads.f32, STEPS x K x ROW_LEN)
 * at the row indices of DIR/indices.i64 (STEPS x K int64). Each step clips the gradient as the
 * optimizer's options say (optimizer_clip, the one tensor) and applies it; DIR/out.f32 gets the
 * params after every step (STEPS x N). The options are the job file's keys of that optimizer;
 * learning_rate is a constant rate. */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "job/model.h"
#include "optim/optimizer.h"

/* DIR/name, which must hold exactly `bytes` bytes. */
static void *read_file(const char *dir, const char *name, size_t bytes)
{
    char path[4096], *buf;
    size_t len = 0;
    status_msg_t err;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (file_read_all(path, "input", bytes, &buf, &len, &err) != STATUS_OK) {
        fprintf(stderr, "optimizer_steps: %s\n", err.text);
        exit(2);
    }
    if (len != bytes) {
        fprintf(stderr, "optimizer_steps: %s holds %zu bytes, want %zu\n", path, len, bytes);
        exit(2);
    }
    return buf;
}

/* The weight's constraint (applied after each update, as Keras): constraint=KIND with
 * constraint_max, constraint_min, constraint_rate and constraint_axis (0 or 1: the [rows,
 * row_len] variable's axis). */
static job_constraint_t constraint;

static bool set_constraint(const char *arg)
{
    const char *eq = strchr(arg, '=');
    double v = eq != NULL ? strtod(eq + 1, NULL) : 0;

    if (strncmp(arg, "constraint=", 11) == 0) {
        for (int i = 0; i < 4; i++)
            if (strcmp(arg + 11, job_constraint_names[i]) == 0)
                constraint.kind = (job_constraint_kind_t)(JOB_CONSTRAINT_NON_NEG + i);
        job_constraint_default(&constraint);
        return true;
    }
    if (strncmp(arg, "constraint_max=", 15) == 0)
        constraint.max_value = v;
    else if (strncmp(arg, "constraint_min=", 15) == 0)
        constraint.min_value = v;
    else if (strncmp(arg, "constraint_rate=", 16) == 0)
        constraint.rate = v;
    else if (strncmp(arg, "constraint_axis=", 16) == 0)
        constraint.axes = 1u << (int)v;
    else
        return false;
    return true;
}

/* key=value into c; exits naming an unknown key. */
static void set_option(optimizer_config_t *c, const char *arg)
{
    static const struct {
        const char *key;
        size_t offset;
    } keys[] = {
        {"momentum", offsetof(optimizer_config_t, momentum)},
        {"beta_1", offsetof(optimizer_config_t, beta_1)},
        {"beta_2", offsetof(optimizer_config_t, beta_2)},
        {"epsilon", offsetof(optimizer_config_t, epsilon)},
        {"initial_accumulator_value", offsetof(optimizer_config_t, initial_accumulator_value)},
        {"rho", offsetof(optimizer_config_t, rho)},
        {"learning_rate_power", offsetof(optimizer_config_t, learning_rate_power)},
        {"l1_regularization_strength", offsetof(optimizer_config_t, l1)},
        {"l2_regularization_strength", offsetof(optimizer_config_t, l2)},
        {"l2_shrinkage_regularization_strength", offsetof(optimizer_config_t, l2_shrinkage)},
        {"beta", offsetof(optimizer_config_t, beta)},
        {"weight_decay", offsetof(optimizer_config_t, weight_decay)},
        {"clipnorm", offsetof(optimizer_config_t, clipnorm)},
        {"global_clipnorm", offsetof(optimizer_config_t, global_clipnorm)},
        {"clipvalue", offsetof(optimizer_config_t, clipvalue)},
    };
    const char *eq = strchr(arg, '=');
    size_t len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
    double v = eq != NULL ? strtod(eq + 1, NULL) : 0;

    if (strncmp(arg, "learning_rate", len) == 0 && len == strlen("learning_rate")) {
        c->schedule.lr = v;
        return;
    }
    if (strncmp(arg, "nesterov", len) == 0 || strncmp(arg, "amsgrad", len) == 0 ||
        strncmp(arg, "centered", len) == 0) {
        bool on = eq != NULL && strcmp(eq + 1, "true") == 0;
        if (arg[0] == 'n')
            c->nesterov = on;
        else if (arg[0] == 'a')
            c->amsgrad = on;
        else
            c->centered = on;
        return;
    }
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strncmp(arg, keys[i].key, len) == 0 && len == strlen(keys[i].key)) {
            *(double *)((char *)c + keys[i].offset) = v;
            return;
        }
    fprintf(stderr, "optimizer_steps: unknown option %s\n", arg);
    exit(2);
}

int main(int argc, char **argv)
{
    const char *dir, *kind;
    optimizer_config_t c;
    status_msg_t err;
    size_t steps, n, row_len = 0, k = 0, opt = 5;
    float *params, *grads, *slots, *out;
    int64_t *indices = NULL;
    bool found = false;
    FILE *f;
    char path[4096];

    if (argc < 5) {
        fprintf(stderr, "usage: optimizer_steps DIR KIND STEPS N [ROW_LEN K] [key=value ...]\n");
        return 2;
    }
    dir = argv[1];
    kind = argv[2];
    steps = strtoul(argv[3], NULL, 10);
    n = strtoul(argv[4], NULL, 10);
    if (argc > 6 && strchr(argv[5], '=') == NULL) {
        row_len = strtoul(argv[5], NULL, 10);
        k = strtoul(argv[6], NULL, 10);
        opt = 7;
    }
    for (int i = 0; i < OPTIMIZER_KINDS; i++)
        if (strcmp(optimizer_kind_name((optimizer_kind_t)i), kind) == 0) {
            optimizer_config_default((optimizer_kind_t)i, &c);
            found = true;
        }
    if (!found) {
        fprintf(stderr, "optimizer_steps: unknown optimizer %s\n", kind);
        return 2;
    }
    for (int i = (int)opt; i < argc; i++)
        if (!set_constraint(argv[i]))
            set_option(&c, argv[i]);
    if (optimizer_config_validate(&c, &err) != STATUS_OK) {
        fprintf(stderr, "optimizer_steps: %s\n", err.text);
        return 2;
    }
    params = read_file(dir, "params.f32", n * sizeof(float));
    grads = read_file(dir, "grads.f32", steps * (row_len ? k * row_len : n) * sizeof(float));
    if (row_len)
        indices = read_file(dir, "indices.i64", steps * k * sizeof(int64_t));
    slots = malloc((optimizer_slot_count(&c) * n + 1) * sizeof(float));
    out = malloc((steps * n + 1) * sizeof(float));
    if (slots == NULL || out == NULL)
        return 2;
    optimizer_slots_init(&c, slots, n);
    for (size_t s = 0; s < steps; s++) {
        float *g = grads + s * (row_len ? k * row_len : n);
        size_t len = row_len ? k * row_len : n;
        optimizer_clip(&c, &g, &len, 1);
        if (row_len == 0)
            optimizer_apply_dense(&c, (int64_t)s, params, g, slots, n);
        else if (optimizer_apply_rows(&c, (int64_t)s, params, n / row_len, row_len, indices + s * k,
                                      g, k, slots, NULL, &err) != STATUS_OK) {
            fprintf(stderr, "optimizer_steps: %s\n", err.text);
            return 1;
        }
        if (constraint.kind != JOB_CONSTRAINT_NONE) {
            int shape[2] = {row_len ? (int)(n / row_len) : 6, row_len ? (int)row_len : (int)n / 6};
            job_constraint_apply(&constraint, params, shape, 2, n);
        }
        memcpy(out + s * n, params, n * sizeof(float));
    }
    snprintf(path, sizeof(path), "%s/out.f32", dir);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(out, sizeof(float), steps * n, f) != steps * n || fclose(f) != 0) {
        fprintf(stderr, "optimizer_steps: cannot write %s\n", path);
        return 2;
    }
    free(params);
    free(grads);
    free(indices);
    free(slots);
    free(out);
    return 0;
}
