/* Fuzz target: the HDF5 half of reading a `.keras` archive's weights
 * (keras_archive_h5_to_safetensors, common/files/keras_archive.h), in this process.
 *
 * Input: model.weights.h5 as it would come out of the archive. The keras_archive target goes
 * through the zip, whose CRC turns almost every mutation of the HDF5 bytes into "cannot be
 * extracted"; this one reaches the HDF5 walk directly, and fast (no child per input). In the
 * product the walk runs in a child process, because libhdf5 is not made for hostile files: a
 * crash found here inside libhdf5 is one the sandbox turns into an error (long campaigns run
 * with -fork and -ignore_crashes and sort the crashes by where they are); one in our walk is a
 * bug. Any file it accepts passes the safetensors reader's checks, and every failure says why. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "files/keras_archive.h"
#include "files/safetensors.h"
#include "fuzz_common.h"

static char in_path[64], out_path[64];

static void remove_input(void)
{
    unlink(in_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    atexit(remove_input);
    setenv("HDF5_USE_FILE_LOCKING", "FALSE", 1);
    /* a real file: libhdf5 does not open a memfd's /proc/self/fd path */
    snprintf(in_path, sizeof(in_path), "/dev/shm/tessera-fuzz-h5-%d.h5", (int)getpid());
    snprintf(out_path, sizeof(out_path), "/tmp/tessera-fuzz-h5-%d.safetensors", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    status_msg_t err = {0};
    char why[512] = {0};
    st_file_t *f = NULL;

    FILE *in = fopen(in_path, "wb");
    if (in == NULL || fwrite(data, 1, size, in) != size || fclose(in) != 0)
        fuzz_fail("keras_h5", "cannot write %s", in_path);
    if (keras_archive_h5_to_safetensors(in_path, out_path, why, sizeof(why)) != 0) {
        if (why[0] == '\0')
            fuzz_fail("keras_h5", "a failure without a reason");
        if (fuzz_verbose())
            fprintf(stderr, "keras_h5: %s\n", why);
        unlink(out_path);
        return 0;
    }
    if (st_open(out_path, &f, &err) != STATUS_OK)
        fuzz_fail("keras_h5", "the walk left a file that does not read: %s", err.text);
    st_close(f);
    unlink(out_path);
    return 0;
}
