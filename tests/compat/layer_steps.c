/* Runs one training step of a Keras model through Tessera's engine, for
 * tests/compat/check_layers.py, which has Keras compute the same and compares:
 *
 *   layer_steps DIR BATCH
 *
 * DIR/job.yaml is a job whose model and loss are under test (its data section is not read).
 * For each of the model's variables NAME ("dense/kernel"), DIR/NAME.f32 (with '/' as "__") holds
 * its values, float32 little-endian in Keras's layout. DIR/x.f32 holds BATCH inputs and
 * DIR/y.f32 BATCH labels (one float an example, or one for each output value: the file's size
 * says which; a model of several outputs: each example's labels of every output one after the
 * other, DIR/labels.txt giving how many each output takes, and DIR/out_K.f32 is output K's). One
 * step of forward, loss
 * and backward in training mode; written: DIR/out.f32, the model's output [BATCH, outputs],
 * DIR/loss.txt, the mean loss, and DIR/NAME.grad.f32, each variable's gradient of the mean loss;
 * for a moving statistic (BatchNormalization's) DIR/NAME.moved.f32 instead, its value after the
 * step's moving-average update. Before the step, the same batch in inference mode (the moving
 * statistics, no dropout): DIR/out_eval.f32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "job/job.h"
#include "model.h"

static char dir[4096];

static void path_of(const char *name, const char *suffix, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/", dir);
    for (const char *c = name; *c != '\0' && (size_t)n + 3 < len; c++) {
        if (*c == '/') {
            out[n++] = '_';
            out[n++] = '_';
        } else {
            out[n++] = *c;
        }
    }
    snprintf(out + n, len - (size_t)n, "%s", suffix);
}

static void *read_all(const char *path, size_t *ret_len)
{
    char *buf;
    status_msg_t err;

    if (file_read_all(path, "input", (size_t)1 << 30, &buf, ret_len, &err) != STATUS_OK) {
        fprintf(stderr, "layer_steps: %s\n", err.text);
        exit(2);
    }
    return buf;
}

/* Reads exactly n floats from path into dst. */
static void read_floats(const char *path, float *dst, size_t n)
{
    size_t len;
    float *v = read_all(path, &len);

    if (len != n * sizeof(float)) {
        fprintf(stderr, "layer_steps: %s holds %zu bytes, want %zu\n", path, len,
                n * sizeof(float));
        exit(2);
    }
    memcpy(dst, v, len);
    free(v);
}

static void write_floats(const char *path, const float *v, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(v, sizeof(float), n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "layer_steps: cannot write %s\n", path);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    char path[4096 + 128], *text;
    size_t len, in_len, label_len;
    job_t job;
    model_t *m;
    model_stats_t st;
    status_msg_t err;
    float *x, *y;
    int batch;
    FILE *f;

    if (argc != 3) {
        fprintf(stderr, "usage: layer_steps DIR BATCH\n");
        return 2;
    }
    snprintf(dir, sizeof(dir), "%s", argv[1]);
    batch = atoi(argv[2]);
    snprintf(path, sizeof(path), "%s/job.yaml", dir);
    text = read_all(path, &len);
    if (job_parse(text, len, path, &job, &err) != STATUS_OK ||
        model_new(&job.model, job.loss, job.from_logits, batch, 1, 0, &m, &err) != STATUS_OK) {
        fprintf(stderr, "layer_steps: %s\n", err.text);
        return 1;
    }
    free(text);
    if (model_set_loss_options(m, &job, &err) != STATUS_OK) {
        fprintf(stderr, "layer_steps: %s\n", err.text);
        return 1;
    }
    for (size_t i = 0; i < model_param_count(m); i++) {
        model_param_t *p = model_param(m, i);
        path_of(p->name, ".f32", path, sizeof(path));
        read_floats(path, p->value, p->n);
    }
    in_len = model_input_len(m);
    snprintf(path, sizeof(path), "%s/y.f32", dir);
    y = read_all(path, &len);
    label_len = len / sizeof(float) / (size_t)(batch > 0 ? batch : 1);
    /* a model of several outputs: DIR/labels.txt gives each output's label values */
    size_t lens[JOB_MAX_OUTPUTS] = {label_len};
    int parts = 1;
    snprintf(path, sizeof(path), "%s/labels.txt", dir);
    if ((f = fopen(path, "r")) != NULL) {
        for (parts = 0; parts < JOB_MAX_OUTPUTS && fscanf(f, "%zu", &lens[parts]) == 1; parts++)
            ;
        fclose(f);
    }
    if (model_set_labels(m, lens, parts, &err) != STATUS_OK) {
        fprintf(stderr, "layer_steps: %s\n", err.text);
        return 1;
    }
    x = malloc((size_t)batch * in_len * sizeof(float) + 1);
    if (x == NULL)
        return 2;
    snprintf(path, sizeof(path), "%s/x.f32", dir);
    read_floats(path, x, (size_t)batch * in_len);
    if (model_evaluate(m, x, y, batch, &st, &err) != STATUS_OK) {
        fprintf(stderr, "layer_steps: %s\n", err.text);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/out_eval.f32", dir);
    write_floats(path, model_output(m), (size_t)batch * model_output_len(m));
    if (model_train_step(m, x, y, batch, &st, &err) != STATUS_OK) {
        fprintf(stderr, "layer_steps: %s\n", err.text);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/out.f32", dir);
    write_floats(path, model_output(m), (size_t)batch * model_output_len(m));
    for (int k = 1; k < model_outputs(m); k++) {
        snprintf(path, sizeof(path), "%s/out_%d.f32", dir, k);
        write_floats(path, model_output_of(m, k), (size_t)batch * model_output_len_of(m, k));
    }
    for (size_t i = 0; i < model_param_count(m); i++) {
        model_param_t *p = model_param(m, i);
        float *g = p->grad;
        if (p->moving) { /* the trainer's update of a moving statistic, as Keras's */
            for (size_t k = 0; k < p->n; k++)
                p->value[k] = p->value[k] * p->momentum + p->grad[k] * p->rest;
            path_of(p->name, ".moved.f32", path, sizeof(path));
            write_floats(path, p->value, p->n);
            continue;
        }
        path_of(p->name, ".grad.f32", path, sizeof(path));
        if (p->sparse) { /* an Embedding's rows, as the dense gradient Keras's densifies to */
            size_t row = p->n / (size_t)p->shape[0];
            if ((g = calloc(p->n + 1, sizeof(float))) == NULL)
                return 2;
            for (size_t r = 0; r < p->n_rows; r++)
                for (size_t k = 0; k < row; k++)
                    g[(size_t)p->rows_index[r] * row + k] += p->rows_grad[r * row + k];
        }
        write_floats(path, g, p->n);
        if (g != p->grad)
            free(g);
    }
    snprintf(path, sizeof(path), "%s/loss.txt", dir);
    if ((f = fopen(path, "w")) == NULL || fprintf(f, "%.9g\n", st.loss_sum / batch) < 0 ||
        fclose(f) != 0)
        return 2;
    free(x);
    free(y);
    model_free(m);
    job_done(&job);
    return 0;
}
