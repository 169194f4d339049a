/* Fuzz target: the first stage of reading a `.keras` archive (common/files/keras_archive.h):
 * libzip finds model.weights.h5 in the archive and extracts it (keras_archive_extract_h5), in
 * this process, where the product does it in the child that then reads the HDF5 file (the
 * keras_h5 target covers that stage, keras_archive the two together in the child).
 *
 * Input: the archive. Whatever it holds, the stage answers 0 with a file of at most
 * KERAS_MAX_WEIGHTS bytes, or -1 with a reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files/keras_archive.h"
#include "fuzz_common.h"

static fuzz_file_t file;
static char h5_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    fuzz_file_open(&file, "tessera-fuzz-zip.keras");
    snprintf(h5_path, sizeof(h5_path), "/tmp/tessera-fuzz-zip-%d.h5", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[512] = "";
    struct stat st;
    int rc;

    fuzz_file_set(&file, data, size);
    rc = keras_archive_extract_h5(file.path, h5_path, why, sizeof(why));
    if (rc == 0) {
        if (stat(h5_path, &st) != 0 || (uint64_t)st.st_size > KERAS_MAX_WEIGHTS)
            fuzz_fail("keras_zip", "an extraction that succeeded left no file of a legal size");
    } else if (rc != -1 || why[0] == '\0') {
        fuzz_fail("keras_zip", "a failed extraction (%d) says no reason", rc);
    }
    unlink(h5_path);
    /* the archive's config.json, read in this process for the job parser */
    {
        status_msg_t err = {0};
        char *text = NULL;
        size_t len = 0;
        status_t s = keras_archive_read_config(file.path, 1u << 20, &text, &len, &err);
        if (s == STATUS_OK && (text == NULL || strlen(text) > len || len > (1u << 20)))
            fuzz_fail("keras_zip", "config.json of %zu bytes read wrong", len);
        if (s != STATUS_OK && (text != NULL || err.text[0] == '\0'))
            fuzz_fail("keras_zip", "a failed config.json read says no reason");
        free(text);
    }
    return 0;
}
