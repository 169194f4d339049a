/* Tessera's metrics on given predictions, for tests/compat/check_metrics.py, which has Keras's
 * metric classes compute the same and compares:
 *
 *   metric_values JOB OUTPUTS PARTS PRED Y
 *
 * JOB is a job file whose metrics section is under test. PRED holds N * OUTPUTS float32
 * predictions (probabilities, as the engine hands them over) and Y the N labels (class ids with
 * OUTPUTS >= 2, values with one) or N * OUTPUTS (one-hot or multi-label rows). The examples are
 * split into PARTS uneven pieces, each summed on its own, as workers and replicas do, and their
 * sums added up; then each metric's result is printed as "NAME VALUE" (%.9g). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "job/job.h"
#include "metrics.h"

static float *read_floats(const char *path, size_t *ret_n)
{
    char *buf;
    size_t len;
    status_msg_t err;

    if (file_read_all(path, "input", (size_t)1 << 30, &buf, &len, &err) != STATUS_OK) {
        fprintf(stderr, "metric_values: %s\n", err.text);
        exit(2);
    }
    *ret_n = len / sizeof(float);
    return (float *)buf;
}

int main(int argc, char **argv)
{
    job_t job;
    status_msg_t err;
    size_t n_pred, n_y, outputs, n, label_len;
    int parts;
    float *pred, *y;
    double *sums, *part, values[JOB_MAX_METRICS];

    if (argc != 6) {
        fprintf(stderr, "usage: metric_values JOB OUTPUTS PARTS PRED Y\n");
        return 2;
    }
    outputs = strtoul(argv[2], NULL, 10);
    parts = atoi(argv[3]);
    if (job_load_file(argv[1], &job, &err) != STATUS_OK) {
        fprintf(stderr, "metric_values: %s\n", err.text);
        return 2;
    }
    pred = read_floats(argv[4], &n_pred);
    y = read_floats(argv[5], &n_y);
    sums = calloc(job.metric_width + 1, sizeof(double));
    part = calloc(job.metric_width + 1, sizeof(double));
    n = outputs > 0 ? n_pred / outputs : 0;
    label_len = n > 0 ? n_y / n : 0;
    if (outputs == 0 || parts < 1 || n == 0 || n_pred != n * outputs ||
        (label_len != 1 && label_len != outputs) || n_y != n * label_len || sums == NULL ||
        part == NULL) {
        fprintf(stderr, "metric_values: %zu predictions for %zu labels of %zu outputs\n", n_pred,
                n_y, outputs);
        return 2;
    }
    if (metrics_check(job.metrics, job.n_metrics, outputs, label_len, &err) != STATUS_OK) {
        printf("refused: %s\n", err.text);
        job_done(&job);
        return 3;
    }
    /* piece p: examples [lo, hi), the pieces growing with p */
    for (int p = 0, lo = 0; p < parts; p++) {
        size_t size = n * 2 * (size_t)(p + 1) / ((size_t)parts * (size_t)(parts + 1));
        int hi = p + 1 == parts ? (int)n : lo + (int)size;
        memset(part, 0, job.metric_width * sizeof(double));
        const float *at = pred + (size_t)lo * outputs;
        metrics_update(job.metrics, job.n_metrics, at, at, outputs, y + (size_t)lo * label_len,
                       label_len, label_len, hi - lo, part);
        for (size_t k = 0; k < job.metric_width; k++)
            sums[k] += part[k];
        lo = hi;
    }
    job_metrics_result(&job, sums, values);
    for (int i = 0; i < job.n_metrics; i++)
        printf("%s %.9g\n", job.metrics[i].name, values[i]);
    free(sums);
    free(part);
    free(pred);
    free(y);
    job_done(&job);
    return 0;
}
