/* TFRecord files: records laid end to end, each framed as TensorFlow's record writer frames it
 * (uint64 LE length, masked CRC32C of the length, the payload, masked CRC32C of the payload).
 * Reading takes plain and GZIP files alike (zlib detects which) and verifies both CRCs. */
#ifndef TESSERA_FILES_TFRECORD_H
#define TESSERA_FILES_TFRECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

/* The 12 bytes before a payload of len bytes, and the 4 after it. */
void tfrecord_header(uint8_t out[12], size_t len);
void tfrecord_footer(uint8_t out[4], const void *data, size_t len);

/* Appends one record to f; err names path on a failed write. */
status_t tfrecord_write(FILE *f, const char *path, const void *data, size_t len, status_msg_t *err);

typedef struct tfrecord_reader tfrecord_reader_t;

/* Opens path for reading records of at most max_record bytes. */
status_t tfrecord_open(const char *path, size_t max_record, tfrecord_reader_t **ret,
                       status_msg_t *err);

/* Reads the next record into *ret_data (valid until the next call) and *ret_len; *ret_data is
 * NULL at the end of the file. A cut record, a wrong CRC or a record over max_record fails with
 * STATUS_DATA_LOSS naming the file and the record's byte offset (in the uncompressed stream).
 * Memory grows with the bytes actually read, never with what a length claims. */
status_t tfrecord_next(tfrecord_reader_t *r, const uint8_t **ret_data, size_t *ret_len,
                       status_msg_t *err);

/* Offset of the next record in the uncompressed stream. */
uint64_t tfrecord_offset(const tfrecord_reader_t *r);

void tfrecord_close(tfrecord_reader_t *r); /* NULL-safe */

#endif
