/* CSV files (RFC 4180): rows of fields split by a delimiter, a field optionally in double quotes
 * (which may hold the delimiter, newlines and "" for a quote), rows ended by LF or CRLF. The
 * reader streams: one row at a time, in a buffer that grows with the longest row read (up to
 * CSV_MAX_ROW bytes), never with what the file claims. Errors name the file and the line. */
#ifndef TESSERA_FILES_CSV_H
#define TESSERA_FILES_CSV_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define CSV_MAX_ROW (16u << 20)

typedef struct csv_field {
    const char *text; /* unquoted, NUL-terminated */
    size_t len;
} csv_field_t;

typedef struct csv_reader csv_reader_t;

status_t csv_open(const char *path, char delimiter, csv_reader_t **ret, status_msg_t *err);

/* The next row: *ret_fields (valid until the next call) and *ret_n fields; *ret_n is 0 at the
 * end of the file. An unterminated quote, a character after a closing quote, a NUL byte or a
 * row over CSV_MAX_ROW fail with STATUS_DATA_LOSS naming the file and line. Empty lines are
 * skipped. */
status_t csv_next(csv_reader_t *r, const csv_field_t **ret_fields, size_t *ret_n,
                  status_msg_t *err);

/* The line the last row began on (1-based). */
uint64_t csv_line(const csv_reader_t *r);
const char *csv_path(const csv_reader_t *r);

void csv_close(csv_reader_t *r); /* NULL-safe */

#endif
