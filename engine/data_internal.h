/* What the dataset loaders share (data.c, data_tfrecord.c). */
#ifndef TESSERA_DATA_INTERNAL_H
#define TESSERA_DATA_INTERNAL_H

#include <stdbool.h>
#include <glob.h>
#include <stdint.h>

#include "data.h"

#define DATA_ALIGN      64
#define DATA_HUGE_PAGE  (2u << 20)
#define DATA_HUGE_BYTES (8u << 20) /* from this size, buffers are advised into huge pages */

/* bytes rounded up to DATA_ALIGN (to a huge page from DATA_HUGE_BYTES, with madvise's
 * MADV_HUGEPAGE), aligned to it; free() it. NULL when out of memory. */
void *data_alloc_aligned(size_t bytes);

/* Bytes a dataset of n examples of feature_len values takes (features of elem bytes each, 4 or
 * 1, and label_len float labels), saturating. */
uint64_t data_bytes_of(uint64_t n, uint64_t feature_len, uint64_t label_len);
uint64_t data_bytes_elem(uint64_t n, uint64_t feature_len, uint64_t elem, uint64_t label_len);

/* Fails with RESOURCE_EXHAUSTED, naming `what`, when `bytes` pass max_bytes (0: no limit). */
status_t data_check_budget(const char *what, uint64_t bytes, uint64_t max_bytes, status_msg_t *err);

/* The files a source names (paths and globs, each glob's matches sorted), in *g (globfree it):
 * STATUS_NOT_FOUND naming a path or glob that matches nothing. */
status_t data_expand_files(const job_source_t *src, glob_t *g, status_msg_t *err);

/* Whether file i of n is this part's: with at least as many files as parts, files are dealt
 * round robin (*ret_by_file set); with fewer, every file is every part's. */
bool data_file_mine(size_t i, size_t n, const data_part_t *part, bool *ret_by_file);

/* Example rows that grow as a loader reads them (data_rows.c). */
typedef struct data_rows {
    size_t len;         /* values per example */
    size_t label_len;   /* labels per example (0: 1) */
    uint64_t max_bytes; /* the memory budget (0: none) */
    bool bytes;         /* raw uint8 values (set before the first row) */
    double byte_scale;  /* with bytes: what a byte is multiplied by (data.h) */
    void *features;     /* [cap, len] floats or bytes, aligned as data_alloc_aligned */
    float *labels;
    size_t n, cap;
} data_rows_t;

/* Room for the next example: *ret_row is its len values (floats, or bytes for
 * data_rows_next_bytes), and *ret_labels its label_len labels; data_rows_add then adds it. The
 * first allocation is for `hint` examples when that is more than 1024 (the loader's estimate of
 * what the files hold, so that they are read without a copy); after it the room doubles, within the
 * budget (RESOURCE_EXHAUSTED naming `what` past it). */
status_t data_rows_next(data_rows_t *r, const char *what, size_t hint, float **ret_row,
                        float **ret_labels, status_msg_t *err);
status_t data_rows_next_bytes(data_rows_t *r, const char *what, size_t hint, uint8_t **ret_row,
                              float **ret_labels, status_msg_t *err);
void data_rows_add(data_rows_t *r);

/* The number of classes n labels of label_len values each name: with one value, the largest + 1
 * when every one is a whole number >= 0 (a class index); else 0 (regression targets, or labels
 * of several values). */
int data_classes(const float *labels, size_t n, size_t label_len);

/* The rows as a dataset of the given example shape (the rows are handed over), its classes
 * from data_classes. No examples is an error. */
status_t data_rows_finish(data_rows_t *r, const char *what, const int *shape, int rank,
                          dataset_t **ret, status_msg_t *err);
void data_rows_free(data_rows_t *r);

#endif
