/* Example rows that grow as a loader reads them (data_internal.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"

status_t data_expand_files(const job_source_t *src, glob_t *g, status_msg_t *err)
{
    memset(g, 0, sizeof(*g));
    for (size_t i = 0; i < src->n_files; i++) {
        size_t before = g->gl_pathc;
        int rc = glob(src->files[i], GLOB_ERR | (i > 0 ? GLOB_APPEND : 0), NULL, g);
        if (rc == GLOB_NOSPACE)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory expanding %s", src->files[i]);
        if (rc != 0 || g->gl_pathc == before)
            return status_fail(err, STATUS_NOT_FOUND, "%s: no such file (or no file matches)",
                               src->files[i]);
    }
    return STATUS_OK;
}

bool data_file_mine(size_t i, size_t n, const data_part_t *part, bool *ret_by_file)
{
    bool by_file = part != NULL && part->count > 1 && n >= (size_t)part->count;

    if (ret_by_file != NULL)
        *ret_by_file = by_file;
    return !by_file || i % (size_t)part->count == (size_t)part->index;
}

static size_t elem(const data_rows_t *r)
{
    return r->bytes ? 1 : sizeof(float);
}

static size_t labels_of(const data_rows_t *r)
{
    return r->label_len > 0 ? r->label_len : 1;
}

/* Room for cap examples (the n read so far copied over). */
static status_t resize(data_rows_t *r, const char *what, size_t cap, status_msg_t *err)
{
    void *f = data_alloc_aligned(cap * r->len * elem(r));
    float *y = data_alloc_aligned(cap * labels_of(r) * sizeof(float));

    if (f == NULL || y == NULL) {
        free(f);
        free(y);
        return status_fail(err, STATUS_NO_MEMORY, "%s: no memory for %zu examples of %zu values",
                           what, cap, r->len);
    }
    if (r->n > 0) {
        memcpy(f, r->features, r->n * r->len * elem(r));
        memcpy(y, r->labels, r->n * labels_of(r) * sizeof(float));
    }
    free(r->features);
    free(r->labels);
    r->features = f;
    r->labels = y;
    r->cap = cap;
    return STATUS_OK;
}

static status_t make_room(data_rows_t *r, const char *what, size_t hint, status_msg_t *err)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 1024;
        if (r->cap == 0 && hint + 1 > cap)
            cap = hint + 1;
        /* Past the budget, grow only as far as it allows. */
        if (r->max_bytes > 0 &&
            data_bytes_elem(cap, r->len, elem(r), labels_of(r)) > r->max_bytes) {
            STATUS_CHECK(data_check_budget(
                what, data_bytes_elem(r->n + 1, r->len, elem(r), labels_of(r)), r->max_bytes, err));
            cap = (size_t)(r->max_bytes / (r->len * elem(r) + labels_of(r) * sizeof(float)));
        }
        STATUS_CHECK(resize(r, what, cap, err));
    }
    return STATUS_OK;
}

status_t data_rows_next(data_rows_t *r, const char *what, size_t hint, float **ret_row,
                        float **ret_labels, status_msg_t *err)
{
    STATUS_CHECK(make_room(r, what, hint, err));
    *ret_row = (float *)r->features + r->n * r->len;
    *ret_labels = r->labels + r->n * labels_of(r);
    return STATUS_OK;
}

status_t data_rows_next_bytes(data_rows_t *r, const char *what, size_t hint, uint8_t **ret_row,
                              float **ret_labels, status_msg_t *err)
{
    STATUS_CHECK(make_room(r, what, hint, err));
    *ret_row = (uint8_t *)r->features + r->n * r->len;
    *ret_labels = r->labels + r->n * labels_of(r);
    return STATUS_OK;
}

void data_rows_add(data_rows_t *r)
{
    r->n++;
}

int data_classes(const float *labels, size_t n, size_t label_len)
{
    float max = 0;

    if (label_len != 1)
        return 0;
    for (size_t i = 0; i < n; i++) {
        float y = labels[i];
        if (!(y >= 0 && y == floorf(y) && y < 1e7f))
            return 0; /* not class indices: regression targets */
        max = y > max ? y : max;
    }
    return (int)max + 1;
}

status_t data_rows_finish(data_rows_t *r, const char *what, const int *shape, int rank,
                          dataset_t **ret, status_msg_t *err)
{
    dataset_t *ds;

    *ret = NULL;
    if (r->n == 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "%s: no examples", what);
    if (r->cap > r->n + r->n / 4) /* give back what doubling left unused */
        STATUS_CHECK(resize(r, what, r->n, err));
    if ((ds = calloc(1, sizeof(*ds))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    if (r->bytes) {
        ds->bytes = r->features;
        dataset_set_byte_scale(ds, r->byte_scale);
    } else {
        ds->features = r->features;
    }
    ds->labels = r->labels;
    ds->n = r->n;
    ds->feature_len = r->len;
    ds->label_len = labels_of(r);
    ds->rank = rank;
    memcpy(ds->shape, shape, (size_t)rank * sizeof(int));
    ds->classes = data_classes(ds->labels, ds->n, ds->label_len);
    r->features = NULL;
    r->labels = NULL;
    *ret = ds;
    return STATUS_OK;
}

void data_rows_free(data_rows_t *r)
{
    free(r->features);
    free(r->labels);
    r->features = NULL;
    r->labels = NULL;
}
