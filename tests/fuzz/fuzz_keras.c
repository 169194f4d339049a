/* Fuzz target: Keras model.to_json() documents (common/job/keras.c, job_parse_keras_json). The
 * input is the document as is, not NUL-terminated. A model that parses is built by the engine
 * (model_new, within 8 MiB) and trains one step on a batch of two zero examples: the shapes,
 * the graph's wiring and the layers' plans meet whatever the document says. The same input is
 * then the config.json of a .keras archive in a job (model: {keras: PATH}, sent with the job):
 * its compile config becomes the job's loss, optimizer and metrics (keras_compile.c) and meets
 * the job parser. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "job/job.h"
#include "model.h"

/* Builds the model (mean squared error, which takes any output: a label for each of its values,
 * of every output) and runs one step. */
static void build_and_step(const job_model_t *spec)
{
    status_msg_t err = {0};
    model_t *m = NULL;
    model_stats_t st;
    status_t rc;
    float *x, *y;

    rc = model_new(spec, JOB_LOSS_MSE, false, 2, 1, 8u << 20, &m, &err);
    fuzz_check_error("keras model", rc, &err);
    if (rc != STATUS_OK)
        return;
    x = calloc(2 * model_input_len(m) + 1, sizeof(float));
    y = calloc(2 * model_label_len(m) + 1, sizeof(float));
    if (x != NULL && y != NULL) {
        rc = model_train_step(m, x, y, 2, &st, &err);
        fuzz_check_error("keras step", rc, &err);
    }
    free(x);
    free(y);
    model_free(m);
}

/* The input as an archive's config.json, with the job's sections beyond the model. */
static void archive_job(const uint8_t *data, size_t size)
{
    static const char text[] = "model: {keras: m.keras}\n"
                               "data: {batch_size: 2, train: {format: synthetic, examples: 4, "
                               "shape: [2], classes: 2}}\n";
    job_file_t file = {.path = "m.keras", .data = (const char *)data, .len = size};
    status_msg_t err = {0};
    job_t job;
    status_t rc = job_parse_with_files(text, sizeof(text) - 1, "job.yaml", &file, 1, &job, &err);

    fuzz_check_error("keras archive job", rc, &err);
    if (rc != STATUS_OK)
        return;
    if (job.n_metrics < 0 || job.n_metrics > JOB_MAX_METRICS)
        fuzz_fail("keras archive job", "%d metrics", job.n_metrics);
    for (int i = 0; i < job.n_metrics; i++)
        if (job.metrics[i].offset + job.metrics[i].width > job.metric_width)
            fuzz_fail("keras archive job", "metric %d's sums past the state", i);
    job_done(&job);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    status_msg_t err = {0};
    job_model_t m;
    status_t rc;

    rc = job_parse_keras_json((const char *)data, size, "model.json", &m, &err);
    fuzz_check_error("keras", rc, &err);
    if (rc == STATUS_OK) {
        if (m.n_layers > 0 && m.layers == NULL)
            fuzz_fail("keras", "%zu layers but no layer array", m.n_layers);
        if (m.input_rank < 0 || m.input_rank > JOB_MAX_RANK)
            fuzz_fail("keras", "input rank %d", m.input_rank);
        if (m.n_inputs < 0 || m.n_inputs > JOB_MAX_MODEL_INPUTS)
            fuzz_fail("keras", "%d inputs", m.n_inputs);
        for (int k = 0; k < m.n_inputs; k++)
            if (m.inputs[k].rank < 1 || m.inputs[k].rank > JOB_MAX_RANK)
                fuzz_fail("keras", "input %d of rank %d", k, m.inputs[k].rank);
        if (m.n_outputs == 1 || m.n_outputs < 0 || m.n_outputs > JOB_MAX_OUTPUTS)
            fuzz_fail("keras", "%d outputs", m.n_outputs);
        for (int k = 0; k < m.n_outputs; k++)
            if (m.outputs[k] < 0 || (size_t)m.outputs[k] >= m.n_layers ||
                memchr(m.output_names[k], '\0', sizeof(m.output_names[k])) == NULL)
                fuzz_fail("keras", "output %d is layer %d", k, m.outputs[k]);
        for (size_t i = 0; i < m.n_layers; i++) {
            if (memchr(m.layers[i].name, '\0', sizeof(m.layers[i].name)) == NULL)
                fuzz_fail("keras", "layer %zu: name not NUL-terminated", i);
            if (m.layers[i].n_inputs < 0 || m.layers[i].n_inputs > JOB_MAX_INPUTS)
                fuzz_fail("keras", "layer %zu: %d inputs", i, m.layers[i].n_inputs);
            for (int k = 0; k < m.layers[i].n_inputs; k++)
                if (m.layers[i].inputs[k] < JOB_INPUT_OF(job_model_inputs(&m) - 1) ||
                    m.layers[i].inputs[k] >= (int)i)
                    fuzz_fail("keras", "layer %zu reads %d", i, m.layers[i].inputs[k]);
            if (m.layers[i].shares != 0 && !job_layer_shareable(&m, i))
                fuzz_fail("keras", "layer %zu shares %d", i, m.layers[i].shares);
        }
        build_and_step(&m);
    }
    job_model_done(&m);
    archive_job(data, size);
    return 0;
}
