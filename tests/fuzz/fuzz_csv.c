/* Fuzz target: the CSV reader (common/files/csv.h), as the csv data source reads a user's
 * files. Input: the file (through a memfd). Every field returned must lie in the reader's row
 * buffer and be NUL-terminated at its length. */
#include <string.h>

#include "files/csv.h"
#include "fuzz_common.h"

static fuzz_file_t file;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    fuzz_file_open(&file, "tessera-fuzz.csv");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    csv_reader_t *r = NULL;
    const csv_field_t *f;
    status_msg_t err = {0};
    size_t n, rows = 0;
    status_t rc;

    fuzz_file_set(&file, data, size);
    rc = csv_open(file.path, size > 0 && data[0] == ';' ? ';' : ',', &r, &err);
    while (rc == STATUS_OK && (rc = csv_next(r, &f, &n, &err)) == STATUS_OK && n > 0) {
        for (size_t i = 0; i < n; i++)
            if (f[i].text[f[i].len] != '\0' || strlen(f[i].text) != f[i].len)
                fuzz_fail("csv", "field %zu of row %zu is not NUL-terminated at its length", i,
                          rows);
        if (++rows > size + 1)
            fuzz_fail("csv", "more rows than bytes");
    }
    fuzz_check_error("csv", rc, &err);
    csv_close(r);
    return 0;
}
