/* NumPy's .npy format: "\x93NUMPY", a version (1.0: uint16 LE header length; 2.0 and 3.0:
 * uint32 LE), a header that is a Python dict literal ({'descr': '<f4', 'fortran_order': False,
 * 'shape': (60000, 28, 28), }) padded with spaces and ended by '\n', then the array's bytes in
 * C order. `.npz` files are zip archives of .npy files ("x_train.npy"), read with libzip.
 *
 * Tessera reads float32, float64, uint8, int32 and int64 arrays in C order, little-endian (or
 * byte-sized); anything else is an error that names the file and what it holds. Headers are
 * limited to 10,000 bytes, as NumPy limits untrusted ones. */
#ifndef TESSERA_FILES_NPY_H
#define TESSERA_FILES_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define NPY_MAX_RANK   8
#define NPY_MAX_HEADER 10000

typedef enum { NPY_F4, NPY_F8, NPY_U1, NPY_I4, NPY_I8 } npy_dtype_t;

typedef struct npy_header {
    npy_dtype_t dtype;
    size_t itemsize;
    int rank;
    uint64_t shape[NPY_MAX_RANK];
    uint64_t count;     /* elements: the product of shape */
    size_t data_offset; /* where the array's bytes begin */
} npy_header_t;

/* Parses the header at the start of buf[0..len) (len may extend past it); `what` names the
 * array in errors (STATUS_DATA_LOSS). data_len, the bytes the file holds after the header, must
 * be exactly the array's size. */
status_t npy_parse(const uint8_t *buf, size_t len, uint64_t file_len, const char *what,
                   npy_header_t *ret, status_msg_t *err);

/* Converts n elements at data (the array's bytes, in its dtype) to float, times scale. */
void npy_to_float(const npy_header_t *h, const void *data, float *out, size_t n, double scale);

/* An array read whole into memory: from a .npy file, or member NAME.npy of a .npz archive. */
typedef struct npy_array {
    npy_header_t h;
    const uint8_t *data; /* h.count * h.itemsize bytes */
    void *base;          /* what to release: a mapping (npy) or a buffer (npz) */
    size_t base_len;
    int mapped;
} npy_array_t;

/* Opens path (memory-mapped); a missing file is STATUS_NOT_FOUND naming it. */
status_t npy_load(const char *path, npy_array_t *ret, status_msg_t *err);

/* Reads member `name` (with ".npy" appended when absent) of the .npz archive at path, refusing
 * members over max_bytes before reading them. */
status_t npz_load(const char *path, const char *name, uint64_t max_bytes, npy_array_t *ret,
                  status_msg_t *err);

void npy_release(npy_array_t *a); /* safe on a zeroed one */

#endif
