/* NumPy arrays as a dataset (data.h): inputs [n, ...] (one array a model input) and labels
 * [n, ...] (one array a model output's) from .npy files (memory-mapped) or members of an .npz
 * archive, converted to float rows. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "data_internal.h"
#include "files/npy.h"

/* Array `i` of the inputs (-1 - j: output j's labels). */
static const char *array_name(const job_source_t *src, int i)
{
    return i < 0 ? src->y[-1 - i] : src->x[i];
}

static status_t load_array(const job_source_t *src, int i, uint64_t max_bytes, npy_array_t *a,
                           status_msg_t *err)
{
    if (src->format == JOB_DATA_NPZ)
        return npz_load(src->archive, array_name(src, i), max_bytes, a, err);
    return npy_load(array_name(src, i), a, err);
}

/* How errors name array i (as load_array's): its file, or the archive and the member. */
static void name_of(const job_source_t *src, int i, char *buf, size_t len)
{
    if (src->format == JOB_DATA_NPZ)
        snprintf(buf, len, "%s (%s)", src->archive, array_name(src, i));
    else
        snprintf(buf, len, "%s", array_name(src, i));
}

static status_t check_inputs(const job_source_t *src, int i, const npy_array_t *x,
                             const npy_array_t *first, status_msg_t *err)
{
    char name[600];
    name_of(src, i, name, sizeof(name));
    if (x->h.rank < 1 || x->h.rank > JOB_MAX_RANK + 1 || x->h.shape[0] == 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: the inputs must be [examples, ...] with at most %d more "
                           "dimensions and at least one example",
                           name, JOB_MAX_RANK);
    for (int d = 1; d < x->h.rank; d++)
        if (x->h.shape[d] == 0 || x->h.shape[d] > INT32_MAX)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "%s: dimension %d of the inputs is %llu", name, d,
                               (unsigned long long)x->h.shape[d]);
    if (x->h.shape[0] != first->h.shape[0])
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: %llu examples, the first inputs %llu: every input needs one "
                           "value for each example",
                           name, (unsigned long long)x->h.shape[0],
                           (unsigned long long)first->h.shape[0]);
    return STATUS_OK;
}

static status_t check_labels(const job_source_t *src, int j, const npy_array_t *x,
                             const npy_array_t *y, status_msg_t *err)
{
    char name[600];

    name_of(src, -1 - j, name, sizeof(name));
    if (y->h.rank < 1)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: the labels must be an array of one row per example", name);
    if (y->h.shape[0] != x->h.shape[0])
        return status_fail(err, STATUS_INVALID_ARGUMENT, "%s: %llu labels for %llu inputs", name,
                           (unsigned long long)y->h.shape[0], (unsigned long long)x->h.shape[0]);
    return STATUS_OK;
}

/* Each example's values of every input, one input after the other (a model of several inputs
 * takes them so), into ds->features [n, len]. */
static void interleave(const npy_array_t *x, const size_t *lens, size_t n_x, size_t n, size_t len,
                       double scale, float *out)
{
    if (n_x == 1) {
        npy_to_float(&x[0].h, x[0].data, out, n * len, scale);
        return;
    }
    for (size_t e = 0; e < n; e++) {
        float *row = out + e * len;
        for (size_t i = 0; i < n_x; i++) {
            npy_to_float(&x[i].h, x[i].data + e * lens[i] * x[i].h.itemsize, row, lens[i], scale);
            row += lens[i];
        }
    }
}

status_t dataset_load_numpy(const job_source_t *src, double scale, uint64_t max_bytes,
                            dataset_t **ret_ds, status_msg_t *err)
{
    npy_array_t x[JOB_MAX_MODEL_INPUTS], y[JOB_MAX_OUTPUTS];
    size_t lens[JOB_MAX_MODEL_INPUTS], ylens[JOB_MAX_OUTPUTS], n_x = src->n_x, n_y = src->n_y;
    size_t loaded = 0, loaded_y = 0, n = 0, len = 0, label_len = 0;
    uint64_t held = 0; /* bytes of the archive's arrays read */
    dataset_t *ds = NULL;
    char name[600];
    status_t rc = STATUS_OK;

    *ret_ds = NULL;
    if (n_x < 1 || n_x > JOB_MAX_MODEL_INPUTS || n_y < 1 || n_y > JOB_MAX_OUTPUTS)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "numpy source: %zu input arrays (1 to %d) and %zu label arrays (1 to "
                           "%d)",
                           n_x, JOB_MAX_MODEL_INPUTS, n_y, JOB_MAX_OUTPUTS);
    /* an archive's arrays are read into memory and held together: each gets what the ones
     * before left of the budget (.npy files are mapped) */
    for (size_t i = 0; i < n_x + n_y && rc == STATUS_OK; i++) {
        bool is_x = i < n_x;
        int at = is_x ? (int)i : -1 - (int)(i - n_x);
        npy_array_t *a = is_x ? &x[i] : &y[i - n_x];
        rc = load_array(src, at, max_bytes > 0 ? max_bytes - held : 0, a, err);
        if (rc != STATUS_OK)
            break;
        if (is_x)
            loaded++;
        else
            loaded_y++;
        if (src->format == JOB_DATA_NPZ)
            held += a->h.count * a->h.itemsize;
        if (max_bytes > 0 && held >= max_bytes) {
            name_of(src, at, name, sizeof(name));
            rc = status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                             "%s: the arrays take more than the %llu bytes allowed", name,
                             (unsigned long long)max_bytes);
            break;
        }
        if (is_x) {
            rc = check_inputs(src, (int)i, a, &x[0], err);
            lens[i] = 1;
            for (int d = 1; rc == STATUS_OK && d < a->h.rank; d++)
                lens[i] *= (size_t)a->h.shape[d];
            len += lens[i];
        } else {
            size_t j = i - n_x;
            rc = check_labels(src, (int)j, &x[0], a, err);
            ylens[j] = 1;
            for (int d = 1; rc == STATUS_OK && d < a->h.rank; d++)
                ylens[j] *= (size_t)a->h.shape[d];
            /* no dimension is 0 (else the product is): each at most the array's count */
            if (rc == STATUS_OK && ylens[j] == 0) {
                name_of(src, at, name, sizeof(name));
                rc = status_fail(err, STATUS_INVALID_ARGUMENT, "%s: the labels have no values",
                                 name);
            }
            label_len += ylens[j];
        }
    }
    if (rc != STATUS_OK)
        goto out;
    n = (size_t)x[0].h.shape[0];
    name_of(src, 0, name, sizeof(name));
    rc = data_check_budget(name, data_bytes_of(n, len, label_len), max_bytes, err);
    if (rc == STATUS_OK && (ds = calloc(1, sizeof(*ds))) != NULL) {
        ds->features = data_alloc_aligned(n * len * sizeof(float));
        ds->labels = data_alloc_aligned(n * label_len * sizeof(float));
    }
    if (rc == STATUS_OK && (ds == NULL || ds->features == NULL || ds->labels == NULL))
        rc = status_fail(err, STATUS_NO_MEMORY, "%s: no memory for %zu examples of %zu floats",
                         name, n, len + label_len);
    if (rc != STATUS_OK)
        goto out;
    ds->n = n;
    ds->feature_len = len;
    ds->label_len = label_len;
    if (n_x > 1) { /* the inputs' values one after the other */
        ds->rank = 1;
        ds->shape[0] = (int)(len < INT32_MAX ? len : INT32_MAX);
    } else {
        ds->rank = x[0].h.rank > 1 ? x[0].h.rank - 1 : 1;
        ds->shape[0] = 1;
        for (int d = 1; d < x[0].h.rank; d++)
            ds->shape[d - 1] = (int)x[0].h.shape[d];
    }
    ds->n_parts = (int)n_x;
    memcpy(ds->part_len, lens, n_x * sizeof(*lens));
    interleave(x, lens, n_x, n, len, scale, ds->features);
    ds->n_label_parts = (int)n_y;
    memcpy(ds->label_part_len, ylens, n_y * sizeof(*ylens));
    interleave(y, ylens, n_y, n, label_len, 1.0, ds->labels);
    for (size_t i = 0; i < n * label_len && rc == STATUS_OK; i++)
        if (!isfinite(ds->labels[i])) {
            size_t k = i % label_len, j = 0;
            while (k >= ylens[j]) /* the array it came from */
                k -= ylens[j++];
            name_of(src, -1 - (int)j, name, sizeof(name));
            rc = status_fail(err, STATUS_DATA_LOSS,
                             "%s: the label of example %zu is not a finite number", name,
                             i / label_len);
        }
    ds->classes = data_classes(ds->labels, n, label_len);
out:
    for (size_t i = 0; i < loaded; i++)
        npy_release(&x[i]);
    for (size_t i = 0; i < loaded_y; i++)
        npy_release(&y[i]);
    if (rc != STATUS_OK) {
        dataset_free(ds);
        return rc;
    }
    *ret_ds = ds;
    return STATUS_OK;
}
