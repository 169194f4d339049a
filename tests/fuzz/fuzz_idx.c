/* Fuzz target: IDX data files (engine/data.h, dataset_load_idx), gzipped or not.
 *
 * Input: the images file, "@@LABELS@@", the labels file (without the separator the labels file
 * is empty). Both are written to memfds and loaded by path, as a worker loads a job's data. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fuzz_common.h"

#define LABELS_SEP "@@LABELS@@"
#define SCALE      (1.0 / 255.0)

static fuzz_file_t images, labels;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    fuzz_file_open(&images, "tessera-fuzz-images.idx");
    fuzz_file_open(&labels, "tessera-fuzz-labels.idx");
    return 0;
}

/* What a loaded dataset promises the pipeline and the model. */
static void check_dataset(const dataset_t *ds)
{
    size_t len = 1;

    if (ds->n == 0 || ds->feature_len == 0 || ds->rank < 1 || ds->rank > JOB_MAX_RANK)
        fuzz_fail("idx", "n %zu, feature_len %zu, rank %d", ds->n, ds->feature_len, ds->rank);
    for (int i = 0; i < ds->rank; i++)
        len *= (size_t)ds->shape[i];
    if (len != ds->feature_len)
        fuzz_fail("idx", "shape makes %zu values per example, feature_len is %zu", len,
                  ds->feature_len);
    if (ds->classes < 1 || ds->classes > 256)
        fuzz_fail("idx", "%d classes from uint8 labels", ds->classes);
    for (size_t i = 0; i < ds->n; i++)
        if (!(ds->labels[i] >= 0 && ds->labels[i] < (float)ds->classes))
            fuzz_fail("idx", "label %zu is %g with %d classes", i, ds->labels[i], ds->classes);
    float *row = malloc(ds->feature_len * sizeof(float));
    if (row == NULL)
        fuzz_fail("idx", "no memory for a row of %zu values", ds->feature_len);
    for (size_t e = 0; e < ds->n; e++) {
        dataset_row(ds, e, row); /* as the pipeline reads it */
        for (size_t i = 0; i < ds->feature_len; i++)
            if (!(row[i] >= 0 && row[i] <= 1.0f))
                fuzz_fail("idx", "feature %zu of example %zu is %g, outside [0, 255 * scale]", i, e,
                          row[i]);
    }
    free(row);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_part_t parts[2];
    size_t n = fuzz_split(data, size, LABELS_SEP, parts, 2);
    status_msg_t err = {0};
    dataset_t *ds = NULL;
    status_t rc;

    fuzz_file_set(&images, parts[0].data, parts[0].len);
    fuzz_file_set(&labels, n > 1 ? parts[1].data : NULL, n > 1 ? parts[1].len : 0);
    rc = dataset_load_idx(images.path, labels.path, SCALE, 0, &ds, &err);
    fuzz_check_error("idx", rc, &err);
    if (rc == STATUS_OK)
        check_dataset(ds);
    dataset_free(ds);
    return 0;
}
