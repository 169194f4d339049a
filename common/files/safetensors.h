/* safetensors files (Hugging Face's format): an 8-byte little-endian header length, a JSON header
 * naming each tensor's dtype, shape and byte range, then the tensors' bytes, little-endian and
 * row-major. Readable from Python, Rust and NumPy without Tessera.
 *
 * The writer emits what the reference writer does: the header begins with '{', is padded with
 * spaces to a multiple of 8 bytes, `__metadata__` carries {"format": "pt"} and the caller's
 * strings, and the tensors tile the buffer in the order given. Files are written atomically
 * (files/atomic.h).
 *
 * The reader checks everything the reference reader checks, and says what is wrong naming the
 * file: a header over 100,000,000 bytes or longer than the file, JSON that does not parse,
 * duplicate names, an unknown dtype or key, a byte range that does not match the shape, ranges
 * that leave gaps or overlap, a file longer or shorter than the ranges (STATUS_DATA_LOSS). */
#ifndef TESSERA_FILES_SAFETENSORS_H
#define TESSERA_FILES_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define ST_MAX_RANK        8
#define ST_MAX_HEADER      100000000u
#define ST_METADATA_FORMAT "pt"

typedef enum {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_DTYPE_COUNT
} st_dtype_t;

const char *st_dtype_name(st_dtype_t d);
size_t st_dtype_size(st_dtype_t d); /* bytes per element */

/* One tensor to write: its bytes are prod(shape) * st_dtype_size(dtype), at data. */
typedef struct st_tensor {
    const char *name;
    st_dtype_t dtype;
    int rank;
    uint64_t shape[ST_MAX_RANK];
    const void *data;
} st_tensor_t;

/* One string of `__metadata__`. */
typedef struct st_meta {
    const char *key, *value;
} st_meta_t;

/* Writes the tensors to path atomically (fsynced and renamed; the caller fsyncs the directory).
 * Duplicate or empty names fail with STATUS_INVALID_ARGUMENT before anything is written. */
status_t st_write_file(const char *path, const st_tensor_t *tensors, size_t n,
                       const st_meta_t *meta, size_t n_meta, uint64_t *ret_bytes,
                       status_msg_t *err);

/* The same, streamed: st_write_begin writes the header of the tensors described (their data
 * pointers unused); st_write_data appends their bytes, in order, in pieces of any size;
 * st_write_commit checks that every byte came and commits the file (atomically, as above), or
 * st_write_abort removes it. Commit and abort free the writer. */
typedef struct st_writer st_writer_t;
status_t st_write_begin(const char *path, const st_tensor_t *tensors, size_t n,
                        const st_meta_t *meta, size_t n_meta, st_writer_t **ret, status_msg_t *err);
status_t st_write_data(st_writer_t *w, const void *data, size_t len, status_msg_t *err);
status_t st_write_commit(st_writer_t *w, uint64_t *ret_bytes, status_msg_t *err);
void st_write_abort(st_writer_t *w); /* NULL-safe */

/* What the reader found about one tensor. */
typedef struct st_info {
    char *name;
    st_dtype_t dtype;
    int rank;
    uint64_t shape[ST_MAX_RANK];
    uint64_t elements;
    uint64_t begin, end; /* in the data buffer */
} st_info_t;

typedef struct st_file st_file_t;

/* Opens and checks path's header (the tensors' bytes are read by st_read). */
status_t st_open(const char *path, st_file_t **ret, status_msg_t *err);
void st_close(st_file_t *f); /* NULL-safe */

const char *st_path(const st_file_t *f);
size_t st_count(const st_file_t *f);
const st_info_t *st_info(const st_file_t *f, size_t i); /* in file order */
const st_info_t *st_find(const st_file_t *f, const char *name);

/* A `__metadata__` string, or NULL. */
const char *st_metadata(const st_file_t *f, const char *key);

/* Reads a tensor's bytes into dst, which holds exactly t->end - t->begin bytes. A file cut
 * since st_open fails with STATUS_DATA_LOSS. */
status_t st_read(const st_file_t *f, const st_info_t *t, void *dst, status_msg_t *err);

#endif
