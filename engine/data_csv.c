/* CSV files with a header row as a dataset (data.h): every column but the labels (one, or one
 * an output of a model of several) is an input value, every field a number. Files are read one
 * after another (globs expanded and sorted); each must have the same header. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"
#include "data_internal.h"
#include "files/csv.h"

typedef struct csv_loader {
    const job_source_t *src;
    double scale;
    data_rows_t rows;
    size_t columns;                /* the header's column count */
    size_t label[JOB_MAX_OUTPUTS]; /* the label columns' indexes, in the source's order */
    char *header;                  /* the first file's header, to compare the others with */
    uint64_t total_bytes;
    status_msg_t *err;
} csv_loader_t;

/* A field as a number: all of it, surrounding spaces allowed. */
static bool number(const csv_field_t *f, double *ret)
{
    char *end;
    const char *p = f->text;

    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '\0')
        return false;
    errno = 0;
    *ret = strtod(p, &end);
    while (*end == ' ' || *end == '\t')
        end++;
    return *end == '\0' && errno == 0 && isfinite(*ret);
}

/* Checks the header: the first file's sets the columns; the others must repeat it. */
static status_t header(csv_loader_t *l, csv_reader_t *r, const csv_field_t *f, size_t n)
{
    size_t total = 0, at = 0;
    char *joined;

    for (size_t i = 0; i < n; i++)
        total += f[i].len + 1;
    if ((joined = malloc(total + 1)) == NULL)
        return status_fail(l->err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) {
        memcpy(joined + at, f[i].text, f[i].len);
        at += f[i].len;
        joined[at++] = '\n';
    }
    joined[at] = '\0';
    if (l->header != NULL) {
        bool same = strcmp(joined, l->header) == 0;
        free(joined);
        return same ? STATUS_OK
                    : status_fail(l->err, STATUS_INVALID_ARGUMENT,
                                  "%s: its header differs from the first file's", csv_path(r));
    }
    l->header = joined;
    l->columns = n;
    for (int k = 0; k < l->src->n_label; k++) {
        size_t i = 0;
        while (i < n && strcmp(f[i].text, l->src->label[k].name) != 0)
            i++;
        if (i == n)
            return status_fail(l->err, STATUS_INVALID_ARGUMENT,
                               "%s: no column '%s' in the header (its first column is '%.40s'); "
                               "name the label column with label: NAME",
                               csv_path(r), l->src->label[k].name, f[0].text);
        l->label[k] = i;
    }
    if (n < (size_t)l->src->n_label + 1)
        return status_fail(l->err, STATUS_INVALID_ARGUMENT, "%s: no column besides the label%s",
                           csv_path(r), l->src->n_label > 1 ? "s" : "");
    l->rows.len = n - (size_t)l->src->n_label;
    l->rows.label_len = (size_t)l->src->n_label;
    return STATUS_OK;
}

static status_t row(csv_loader_t *l, csv_reader_t *r, const csv_field_t *f, size_t n, size_t hint)
{
    float *out, *y;
    double v;
    size_t k = 0;

    if (n != l->columns)
        return status_fail(l->err, STATUS_DATA_LOSS, "%s:%llu: %zu fields, the header has %zu",
                           csv_path(r), (unsigned long long)csv_line(r), n, l->columns);
    STATUS_CHECK(data_rows_next(&l->rows, csv_path(r), hint, &out, &y, l->err));
    for (size_t i = 0; i < n; i++) {
        int at = 0;
        if (!number(&f[i], &v))
            return status_fail(l->err, STATUS_DATA_LOSS,
                               "%s:%llu: column %zu: '%.40s' is not a number", csv_path(r),
                               (unsigned long long)csv_line(r), i + 1, f[i].text);
        while (at < l->src->n_label && l->label[at] != i)
            at++;
        if (at < l->src->n_label)
            y[at] = (float)v;
        else
            out[k++] = (float)(v * l->scale);
    }
    data_rows_add(&l->rows);
    return STATUS_OK;
}

static status_t load_file(csv_loader_t *l, const char *path)
{
    csv_reader_t *r;
    const csv_field_t *f;
    size_t n, hint = 0;
    bool first = true;
    status_t rc;

    STATUS_CHECK(csv_open(path, l->src->delimiter, &r, l->err));
    while ((rc = csv_next(r, &f, &n, l->err)) == STATUS_OK && n > 0) {
        if (first) {
            rc = header(l, r, f, n);
            first = false;
        } else {
            if (hint == 0) /* rows of about the first's length */
                for (size_t i = 0; i < n; i++)
                    hint += f[i].len + 1;
            rc = row(l, r, f, n, (size_t)(l->total_bytes / (hint ? hint : 1)));
        }
        if (rc != STATUS_OK)
            break;
    }
    csv_close(r);
    if (rc == STATUS_OK && first)
        rc = status_fail(l->err, STATUS_INVALID_ARGUMENT, "%s: empty, not even a header", path);
    return rc;
}

status_t dataset_load_csv(const job_source_t *src, double scale, uint64_t max_bytes,
                          const data_part_t *part, dataset_t **ret_ds, bool *ret_by_file,
                          status_msg_t *err)
{
    csv_loader_t l = {.src = src, .scale = scale, .rows = {.max_bytes = max_bytes}, .err = err};
    glob_t g;
    status_t rc = STATUS_OK;
    int shape[1];

    *ret_ds = NULL;
    rc = data_expand_files(src, &g, err);
    for (size_t i = 0; rc == STATUS_OK && i < g.gl_pathc; i++) {
        struct stat sb;
        if (data_file_mine(i, g.gl_pathc, part, ret_by_file) && stat(g.gl_pathv[i], &sb) == 0)
            l.total_bytes += (uint64_t)sb.st_size;
    }
    for (size_t i = 0; rc == STATUS_OK && i < g.gl_pathc; i++)
        if (data_file_mine(i, g.gl_pathc, part, NULL))
            rc = load_file(&l, g.gl_pathv[i]);
    globfree(&g);
    shape[0] = (int)l.rows.len;
    if (rc == STATUS_OK)
        rc = data_rows_finish(&l.rows, src->files[0], shape, 1, ret_ds, err);
    if (rc == STATUS_OK && src->n_label > 1) { /* a column for each of several outputs */
        (*ret_ds)->n_label_parts = src->n_label;
        for (int k = 0; k < src->n_label; k++)
            (*ret_ds)->label_part_len[k] = 1;
    }
    data_rows_free(&l.rows);
    free(l.header);
    return rc;
}
