/* NumPy arrays as a dataset (data.h): inputs [n, ...] and labels [n] or [n, 1] from two .npy
 * files (memory-mapped) or two members of an .npz archive, converted to float rows. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "data_internal.h"
#include "files/npy.h"

static status_t load_array(const job_source_t *src, bool labels, uint64_t max_bytes, npy_array_t *a,
                           status_msg_t *err)
{
    const char *name = labels ? src->y : src->x;

    if (src->format == JOB_DATA_NPZ)
        return npz_load(src->archive, name, max_bytes, a, err);
    return npy_load(name, a, err);
}

static const char *name_of(const job_source_t *src, bool labels)
{
    return src->format == JOB_DATA_NPZ ? src->archive : labels ? src->y : src->x;
}

static status_t check_shapes(const job_source_t *src, const npy_array_t *x, const npy_array_t *y,
                             status_msg_t *err)
{
    if (x->h.rank < 1 || x->h.rank > JOB_MAX_RANK + 1 || x->h.shape[0] == 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: the inputs must be [examples, ...] with at most %d more "
                           "dimensions and at least one example",
                           name_of(src, false), JOB_MAX_RANK);
    for (int i = 1; i < x->h.rank; i++)
        if (x->h.shape[i] == 0 || x->h.shape[i] > INT32_MAX)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "%s: dimension %d of the inputs is %llu", name_of(src, false), i,
                               (unsigned long long)x->h.shape[i]);
    if (!(y->h.rank == 1 || (y->h.rank == 2 && y->h.shape[1] == 1)))
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "%s: the labels must be [examples] or [examples, 1]",
                           name_of(src, true));
    if (y->h.shape[0] != x->h.shape[0])
        return status_fail(err, STATUS_INVALID_ARGUMENT, "%s: %llu labels for %llu inputs",
                           name_of(src, true), (unsigned long long)y->h.shape[0],
                           (unsigned long long)x->h.shape[0]);
    return STATUS_OK;
}

status_t dataset_load_numpy(const job_source_t *src, double scale, uint64_t max_bytes,
                            dataset_t **ret_ds, status_msg_t *err)
{
    npy_array_t x, y;
    dataset_t *ds = NULL;
    size_t n, len = 1;
    status_t rc;

    *ret_ds = NULL;
    memset(&y, 0, sizeof(y));
    STATUS_CHECK(load_array(src, false, max_bytes, &x, err));
    rc = load_array(src, true, max_bytes, &y, err);
    if (rc == STATUS_OK)
        rc = check_shapes(src, &x, &y, err);
    if (rc != STATUS_OK)
        goto out;
    n = (size_t)x.h.shape[0];
    for (int i = 1; i < x.h.rank; i++)
        len *= (size_t)x.h.shape[i];
    rc = data_check_budget(name_of(src, false), data_bytes_of(n, len), max_bytes, err);
    if (rc == STATUS_OK && (ds = calloc(1, sizeof(*ds))) != NULL) {
        ds->features = data_alloc_aligned(n * len * sizeof(float));
        ds->labels = data_alloc_aligned(n * sizeof(float));
    }
    if (rc == STATUS_OK && (ds == NULL || ds->features == NULL || ds->labels == NULL))
        rc = status_fail(err, STATUS_NO_MEMORY, "%s: no memory for %zu examples of %zu floats",
                         name_of(src, false), n, len);
    if (rc != STATUS_OK)
        goto out;
    ds->n = n;
    ds->feature_len = len;
    ds->rank = x.h.rank > 1 ? x.h.rank - 1 : 1;
    ds->shape[0] = 1;
    for (int i = 1; i < x.h.rank; i++)
        ds->shape[i - 1] = (int)x.h.shape[i];
    npy_to_float(&x.h, x.data, ds->features, n * len, scale);
    npy_to_float(&y.h, y.data, ds->labels, n, 1.0);
    for (size_t i = 0; i < n && rc == STATUS_OK; i++)
        if (!isfinite(ds->labels[i]))
            rc = status_fail(err, STATUS_DATA_LOSS, "%s: label %zu is not a finite number",
                             name_of(src, true), i);
    ds->classes = data_classes(ds->labels, n);
out:
    npy_release(&x);
    npy_release(&y);
    if (rc != STATUS_OK) {
        dataset_free(ds);
        return rc;
    }
    *ret_ds = ds;
    return STATUS_OK;
}
