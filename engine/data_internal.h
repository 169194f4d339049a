/* What the dataset loaders share (data.c, data_tfrecord.c). */
#ifndef TESSERA_DATA_INTERNAL_H
#define TESSERA_DATA_INTERNAL_H

#include <stdint.h>

#include "data.h"

#define DATA_ALIGN      64
#define DATA_HUGE_PAGE  (2u << 20)
#define DATA_HUGE_BYTES (8u << 20) /* from this size, buffers are advised into huge pages */

/* bytes rounded up to DATA_ALIGN (to a huge page from DATA_HUGE_BYTES, with madvise's
 * MADV_HUGEPAGE), aligned to it; free() it. NULL when out of memory. */
void *data_alloc_aligned(size_t bytes);

/* Bytes a dataset of n examples of feature_len values takes (features and labels), saturating. */
uint64_t data_bytes_of(uint64_t n, uint64_t feature_len);

/* Fails with RESOURCE_EXHAUSTED, naming `what`, when `bytes` pass max_bytes (0: no limit). */
status_t data_check_budget(const char *what, uint64_t bytes, uint64_t max_bytes, status_msg_t *err);

#endif
