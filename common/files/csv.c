#define _POSIX_C_SOURCE 200809L
#include "files/csv.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct csv_reader {
    char *path;
    FILE *f;
    char delim;
    uint8_t block[1 << 16]; /* read ahead from the file */
    size_t pos, len;
    bool eof;
    uint64_t line, row_line;
    char *row; /* the current row's fields, unquoted, each NUL-terminated */
    size_t row_len, row_cap;
    size_t *starts; /* field i begins at row + starts[i] */
    csv_field_t *fields;
    size_t n, cap;
};

status_t csv_open(const char *path, char delimiter, csv_reader_t **ret, status_msg_t *err)
{
    csv_reader_t *r = calloc(1, sizeof(*r));

    *ret = NULL;
    if (r == NULL || (r->path = strdup(path)) == NULL) {
        free(r);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    if ((r->f = fopen(path, "rb")) == NULL) {
        status_t rc = status_fail(err, errno == ENOENT ? STATUS_NOT_FOUND : STATUS_IO,
                                  "cannot open %s: %s", path, strerror(errno));
        csv_close(r);
        return rc;
    }
    r->delim = delimiter;
    r->line = 1;
    *ret = r;
    return STATUS_OK;
}

void csv_close(csv_reader_t *r)
{
    if (r == NULL)
        return;
    if (r->f != NULL)
        fclose(r->f);
    free(r->row);
    free(r->starts);
    free(r->fields);
    free(r->path);
    free(r);
}

uint64_t csv_line(const csv_reader_t *r)
{
    return r->row_line;
}

const char *csv_path(const csv_reader_t *r)
{
    return r->path;
}

/* The next byte, or -1 at the end of the file (or on a read error, reported as the end:
 * ferror is checked by the caller). */
static int next_byte(csv_reader_t *r)
{
    if (r->pos == r->len) {
        if (r->eof)
            return -1;
        r->len = fread(r->block, 1, sizeof(r->block), r->f);
        r->pos = 0;
        if (r->len == 0) {
            r->eof = true;
            return -1;
        }
    }
    return r->block[r->pos++];
}

static status_t fail(csv_reader_t *r, status_msg_t *err, const char *what)
{
    return status_fail(err, STATUS_DATA_LOSS, "%s:%llu: %s", r->path,
                       (unsigned long long)r->row_line, what); /* the line its row began on */
}

static status_t put(csv_reader_t *r, char c, status_msg_t *err)
{
    if (r->row_len == r->row_cap) {
        size_t cap = r->row_cap ? r->row_cap * 2 : 4096;
        char *row;
        if (r->row_len >= CSV_MAX_ROW)
            return fail(r, err, "a row of more than 16 MiB");
        if ((row = realloc(r->row, cap)) == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
        r->row = row;
        r->row_cap = cap;
    }
    r->row[r->row_len++] = c;
    return STATUS_OK;
}

/* Ends the current field (NUL) and starts the next. */
static status_t new_field(csv_reader_t *r, bool first, status_msg_t *err)
{
    if (!first)
        STATUS_CHECK(put(r, '\0', err));
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        size_t *starts = realloc(r->starts, cap * sizeof(*starts));
        if (starts == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
        r->starts = starts;
        r->cap = cap;
    }
    r->starts[r->n++] = r->row_len;
    return STATUS_OK;
}

/* A quoted field's contents, after its opening quote. */
static status_t quoted(csv_reader_t *r, status_msg_t *err)
{
    for (;;) {
        int c = next_byte(r);
        if (c < 0)
            return fail(r, err, "a quoted field is not closed");
        if (c == '"') {
            int d = next_byte(r);
            if (d == '"') {
                STATUS_CHECK(put(r, '"', err));
                continue;
            }
            if (d >= 0)
                r->pos--; /* the delimiter or the end of the row, read by the caller */
            return STATUS_OK;
        }
        if (c == '\0')
            return fail(r, err, "a NUL byte");
        if (c == '\n')
            r->line++;
        STATUS_CHECK(put(r, (char)c, err));
    }
}

/* Reads one row into r->row; *ret_more is false at the end of the file. */
static status_t read_row(csv_reader_t *r, bool *ret_more, status_msg_t *err)
{
    bool field_start = true, after_quote = false;
    int c;

    r->row_len = 0;
    r->n = 0;
    r->row_line = r->line;
    STATUS_CHECK(new_field(r, true, err));
    for (;;) {
        c = next_byte(r);
        if (c < 0 || c == '\n') {
            if (r->row_len > 0 && r->row[r->row_len - 1] == '\r' && !after_quote)
                r->row_len--; /* CRLF */
            break;
        }
        if (c == '\r' && after_quote) { /* "...",CRLF */
            c = next_byte(r);
            if (c == '\n' || c < 0)
                break;
            return fail(r, err, "a character after a closing quote");
        }
        if (c == r->delim) {
            STATUS_CHECK(new_field(r, false, err));
            field_start = true;
            after_quote = false;
            continue;
        }
        if (after_quote)
            return fail(r, err, "a character after a closing quote");
        if (c == '\0')
            return fail(r, err, "a NUL byte");
        if (c == '"' && field_start) {
            STATUS_CHECK(quoted(r, err));
            after_quote = true;
            field_start = false;
            continue;
        }
        field_start = false;
        STATUS_CHECK(put(r, (char)c, err));
    }
    if (ferror(r->f))
        return status_fail(err, STATUS_IO, "cannot read %s: %s", r->path, strerror(errno));
    if (c == '\n')
        r->line++;
    STATUS_CHECK(put(r, '\0', err));
    *ret_more = c >= 0 || r->row_len > 1 || r->n > 1;
    return STATUS_OK;
}

status_t csv_next(csv_reader_t *r, const csv_field_t **ret_fields, size_t *ret_n, status_msg_t *err)
{
    bool more = true;
    csv_field_t *fields;

    *ret_n = 0;
    do {
        STATUS_CHECK(read_row(r, &more, err));
    } while (more && r->n == 1 && r->row_len == 1); /* an empty line */
    if (!more || (r->n == 1 && r->row_len == 1))
        return STATUS_OK;
    /* the fields array follows starts' capacity */
    if ((fields = realloc(r->fields, r->cap * sizeof(*fields))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    r->fields = fields;
    for (size_t i = 0; i < r->n; i++) {
        size_t end = i + 1 < r->n ? r->starts[i + 1] - 1 : r->row_len - 1;
        fields[i] = (csv_field_t){r->row + r->starts[i], end - r->starts[i]};
    }
    *ret_fields = fields;
    *ret_n = r->n;
    return STATUS_OK;
}
