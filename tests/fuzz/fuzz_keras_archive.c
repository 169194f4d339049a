/* Fuzz target: reading the weights of a Keras `.keras` archive (common/files/keras_archive.h),
 * as `init_from:` does with a user's file: libzip finds model.weights.h5, libhdf5 reads it in a
 * child process, and only the safetensors file the child leaves is trusted.
 *
 * Input: the archive. Whatever it holds, the parent gets a status (a crash or a hang of the
 * child included) and any file it accepts passes the safetensors reader's checks. The seed
 * corpus holds archives tessera export wrote; mutations mostly break their zip framing, so the
 * dictionary carries the zip and HDF5 signatures. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "files/keras_archive.h"
#include "files/safetensors.h"
#include "fuzz_common.h"

static fuzz_file_t file;
static char out_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    fuzz_file_open(&file, "tessera-fuzz.keras");
    snprintf(out_path, sizeof(out_path), "/tmp/tessera-fuzz-keras-%d.safetensors", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    status_msg_t err = {0};
    st_file_t *f = NULL;
    status_t rc;

    fuzz_file_set(&file, data, size);
    rc = keras_archive_read_weights(file.path, out_path, &err);
    if (rc == STATUS_OK) {
        rc = st_open(out_path, &f, &err);
        if (rc != STATUS_OK)
            fuzz_fail("keras_archive", "the child left a file that does not read: %s", err.text);
        st_close(f);
        unlink(out_path);
    }
    fuzz_check_error("keras_archive", rc, &err);
    return 0;
}
