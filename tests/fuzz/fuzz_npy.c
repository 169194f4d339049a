/* Fuzz target: NumPy .npy headers and arrays (common/files/npy.h), and .npz archives read with
 * libzip, as the npy and npz data sources read a user's files.
 *
 * Input: one file. If it starts like a zip archive it is opened as an .npz and its member
 * "x.npy" read; otherwise it is parsed as a .npy and its elements converted. An accepted array
 * must lie inside the input. */
#include <stdlib.h>
#include <string.h>

#include "files/npy.h"
#include "fuzz_common.h"

#define MAX_ELEMENTS (1u << 20)

static fuzz_file_t file;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    fuzz_file_open(&file, "tessera-fuzz.npz");
    return 0;
}

static void convert(const npy_header_t *h, const uint8_t *data, const uint8_t *end)
{
    size_t n = h->count < MAX_ELEMENTS ? (size_t)h->count : MAX_ELEMENTS;
    float *out = malloc(n * sizeof(float) + 1);

    if (data + h->count * h->itemsize != end)
        fuzz_fail("npy", "an array of %llu x %zu bytes that does not end where the file does",
                  (unsigned long long)h->count, h->itemsize);
    npy_to_float(h, data, out, n, 0.5);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    status_msg_t err = {0};
    status_t rc;

    if (size >= 4 && memcmp(data, "PK", 2) == 0) {
        npy_array_t a;
        fuzz_file_set(&file, data, size);
        rc = npz_load(file.path, "x", 1u << 24, &a, &err);
        if (rc == STATUS_OK) {
            convert(&a.h, a.data, (const uint8_t *)a.base + a.base_len);
            npy_release(&a);
        }
        fuzz_check_error("npz", rc, &err);
        return 0;
    }
    uint8_t *copy = (uint8_t *)fuzz_copy(data, size);
    npy_header_t h;
    rc = npy_parse(copy, size, size, "fuzz.npy", &h, &err);
    if (rc == STATUS_OK)
        convert(&h, copy + h.data_offset, copy + size);
    fuzz_check_error("npy", rc, &err);
    free(copy);
    return 0;
}
