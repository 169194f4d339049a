/* Fuzz target: Keras model.to_json() documents (common/job/keras.c, job_parse_keras_json). The
 * input is the document as is, not NUL-terminated. */
#include <string.h>

#include "fuzz_common.h"
#include "job/job.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    status_msg_t err = {0};
    job_model_t m;
    status_t rc;

    rc = job_parse_keras_json((const char *)data, size, "model.json", &m, &err);
    fuzz_check_error("keras", rc, &err);
    if (rc == STATUS_OK) {
        if (m.n_layers > 0 && m.layers == NULL)
            fuzz_fail("keras", "%zu layers but no layer array", m.n_layers);
        if (m.input_rank < 0 || m.input_rank > JOB_MAX_RANK)
            fuzz_fail("keras", "input rank %d", m.input_rank);
        for (size_t i = 0; i < m.n_layers; i++)
            if (memchr(m.layers[i].name, '\0', sizeof(m.layers[i].name)) == NULL)
                fuzz_fail("keras", "layer %zu: name not NUL-terminated", i);
    }
    job_model_done(&m);
    return 0;
}
