/* TFRecord files of tf.train.Example as a dataset (data.h): the files read one after another
 * through files/tfrecord.h (both CRCs checked, plain or GZIP), each Example's input and label
 * features decoded by files/example.h into rows that grow with what is read, never with what a
 * header claims. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "data_internal.h"
#include "files/example.h"
#include "files/tfrecord.h"

/* A record may hold the input as float32 or int64 values (10 bytes each at most) plus framing. */
#define RECORD_SLACK (1u << 16)

typedef struct loader {
    const job_source_t *src;
    double scale;
    data_rows_t rows;     /* bytes for a bytes_list input, scaled as IDX pixels are */
    uint8_t *scratch;     /* several inputs: a bytes_list's values before they become floats */
    uint64_t total_bytes; /* of every file's records (uncompressed), for the first allocation */
    status_msg_t *err;
} loader_t;

static status_t bad_record(loader_t *l, const char *path, uint64_t offset, const char *what,
                           const job_feature_t *feature)
{
    return status_fail(l->err, STATUS_DATA_LOSS, "%s: the record at byte %llu: feature '%s' %s",
                       path, (unsigned long long)offset, feature->name, what);
}

/* The feature's values into out[0..n): floats, or for a bytes_list the raw bytes. */
static status_t decode(loader_t *l, const char *path, uint64_t offset, const uint8_t *rec,
                       size_t rec_len, const job_feature_t *feature, void *out, size_t n)
{
    static const example_kind_t kinds[] = {EXAMPLE_FLOAT_LIST, EXAMPLE_INT64_LIST,
                                           EXAMPLE_BYTES_LIST};
    example_feature_t f;
    int found = example_find(rec, rec_len, feature->name, &f);
    char what[128];

    if (found < 0)
        return status_fail(l->err, STATUS_DATA_LOSS,
                           "%s: the record at byte %llu is not a tf.train.Example", path,
                           (unsigned long long)offset);
    if (found == 0)
        return bad_record(l, path, offset, "is missing", feature);
    if (f.kind != kinds[feature->kind])
        return bad_record(l, path, offset, "is of another kind than the job says", feature);
    if (feature->kind != JOB_FEATURE_BYTES_LIST) {
        if (example_floats(&f, out, n) == 0)
            return STATUS_OK;
        snprintf(what, sizeof(what), "holds %lld values, the job says %zu",
                 (long long)example_count(&f), n);
        return bad_record(l, path, offset, what, feature);
    }
    const uint8_t *bytes;
    size_t len;
    if (example_bytes(&f, &bytes, &len) != 1 || len != n) {
        snprintf(what, sizeof(what), "is not one string of %zu bytes (raw uint8 values)", n);
        return bad_record(l, path, offset, what, feature);
    }
    memcpy(out, bytes, n);
    return STATUS_OK;
}

/* Several input features: each one's values after the one before's, as floats (a bytes_list's
 * through `scratch`, scaled with the rest). */
static status_t decode_inputs(loader_t *l, const char *path, uint64_t offset, const uint8_t *rec,
                              size_t len, float *row)
{
    for (int k = 0; k < l->src->n_inputs; k++) {
        const job_feature_t *f = &l->src->inputs[k];
        size_t n = job_shape_len(f->shape, f->rank);
        if (f->kind == JOB_FEATURE_BYTES_LIST) {
            STATUS_CHECK(decode(l, path, offset, rec, len, f, l->scratch, n));
            for (size_t i = 0; i < n; i++)
                row[i] = (float)l->scratch[i];
        } else {
            STATUS_CHECK(decode(l, path, offset, rec, len, f, row, n));
        }
        row += n;
    }
    return STATUS_OK;
}

static status_t add_record(loader_t *l, const char *path, uint64_t offset, const uint8_t *rec,
                           size_t len)
{
    size_t n = l->rows.len, hint = (size_t)(l->total_bytes / (len + 16));
    float *row = NULL, *y;
    uint8_t *bytes = NULL;

    if (l->rows.bytes)
        STATUS_CHECK(data_rows_next_bytes(&l->rows, path, hint, &bytes, &y, l->err));
    else
        STATUS_CHECK(data_rows_next(&l->rows, path, hint, &row, &y, l->err));
    if (l->src->n_inputs > 1)
        STATUS_CHECK(decode_inputs(l, path, offset, rec, len, row));
    else
        STATUS_CHECK(decode(l, path, offset, rec, len, &l->src->inputs[0],
                            bytes != NULL ? (void *)bytes : (void *)row, n));
    for (int k = 0; k < l->src->n_label; k++) { /* one an output, end to end */
        const job_feature_t *f = &l->src->label[k];
        size_t m = job_shape_len(f->shape, f->rank);
        STATUS_CHECK(decode(l, path, offset, rec, len, f, y, m));
        for (size_t i = 0; i < m; i++)
            if (!isfinite(y[i]))
                return bad_record(l, path, offset, "is not a finite number", f);
        y += m;
    }
    if (l->scale != 1 && row != NULL) /* bytes: scaled as they become floats */
        for (size_t i = 0; i < n; i++)
            row[i] = (float)(row[i] * l->scale);
    data_rows_add(&l->rows);
    return STATUS_OK;
}

static status_t load_file(loader_t *l, const char *path)
{
    tfrecord_reader_t *r;
    const uint8_t *rec;
    size_t len;
    size_t max_record = (l->rows.len + l->rows.label_len) * 10 + RECORD_SLACK;
    status_t rc;

    STATUS_CHECK(tfrecord_open(path, max_record, &r, l->err));
    while ((rc = tfrecord_next(r, &rec, &len, l->err)) == STATUS_OK && rec != NULL) {
        rc = add_record(l, path, tfrecord_offset(r) - 16 - len, rec, len);
        if (rc != STATUS_OK)
            break;
    }
    tfrecord_close(r);
    return rc;
}

/* The bytes of records a file holds: its size, or for a gzip file the uncompressed size its
 * trailer states (modulo 2^32, and only a hint: a file may lie, so no more than 64 times the
 * compressed size is believed; reading grows past a hint that was too small). */
static uint64_t record_bytes(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t magic[2], isize[4];
    uint64_t n = 0;
    long size;

    if (f == NULL)
        return 0;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0) {
        n = (uint64_t)size;
        rewind(f);
        if (size > 18 && fread(magic, 1, 2, f) == 2 && magic[0] == 0x1f && magic[1] == 0x8b &&
            fseek(f, -4, SEEK_END) == 0 && fread(isize, 1, 4, f) == 4)
            n = (uint64_t)isize[0] | (uint64_t)isize[1] << 8 | (uint64_t)isize[2] << 16 |
                (uint64_t)isize[3] << 24;
        if (n > (uint64_t)size * 64)
            n = (uint64_t)size * 64;
    }
    fclose(f);
    return n;
}

status_t dataset_load_tfrecord(const job_source_t *src, double scale, uint64_t max_bytes,
                               const data_part_t *part, dataset_t **ret_ds, bool *ret_by_file,
                               status_msg_t *err)
{
    loader_t l = {
        .src = src, .scale = scale, .rows = {.len = 1, .max_bytes = max_bytes}, .err = err};
    glob_t g;
    status_t rc;

    int shape[JOB_MAX_RANK] = {0}, rank = 1;
    size_t most = 1;

    *ret_ds = NULL;
    if (src->n_inputs < 1)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: no input feature", src->files[0]);
    l.rows.len = 0;
    if (src->n_label < 1)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: no label feature", src->files[0]);
    for (int k = 0; k < src->n_label; k++)
        l.rows.label_len += job_shape_len(src->label[k].shape, src->label[k].rank);
    for (int k = 0; k < src->n_inputs; k++) {
        size_t n = job_shape_len(src->inputs[k].shape, src->inputs[k].rank);
        l.rows.len += n;
        most = n > most ? n : most;
    }
    if (src->n_inputs > 1) { /* rows of floats: the inputs' values one after the other */
        shape[0] = (int)(l.rows.len < INT32_MAX ? l.rows.len : INT32_MAX);
        if ((l.scratch = malloc(most)) == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    } else {
        memcpy(shape, src->inputs[0].shape, sizeof(shape));
        rank = src->inputs[0].rank;
        l.rows.bytes = src->inputs[0].kind == JOB_FEATURE_BYTES_LIST;
    }
    l.rows.byte_scale = scale;
    rc = data_expand_files(src, &g, err);
    for (size_t i = 0; rc == STATUS_OK && i < g.gl_pathc; i++)
        if (data_file_mine(i, g.gl_pathc, part, ret_by_file))
            l.total_bytes += record_bytes(g.gl_pathv[i]);
    for (size_t i = 0; rc == STATUS_OK && i < g.gl_pathc; i++)
        if (data_file_mine(i, g.gl_pathc, part, NULL))
            rc = load_file(&l, g.gl_pathv[i]);
    globfree(&g);
    if (rc == STATUS_OK)
        rc = data_rows_finish(&l.rows, src->files[0], shape, rank, ret_ds, err);
    if (rc == STATUS_OK && src->n_label > 1) { /* labels for several outputs */
        (*ret_ds)->n_label_parts = src->n_label;
        for (int k = 0; k < src->n_label; k++)
            (*ret_ds)->label_part_len[k] = job_shape_len(src->label[k].shape, src->label[k].rank);
    }
    data_rows_free(&l.rows);
    free(l.scratch);
    return rc;
}
