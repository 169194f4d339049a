/* Fuzz target: the error detail a client decodes from a failed call's trailing metadata
 * (common/rpc/client.c, rpc_error_fill; Tessera__V1__ErrorDetail under "tessera-error-bin").
 *
 * Input: [1 byte: gRPC status code][the metadata value]. The status message is fixed. */
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "fuzz_common.h"
#include "rpc/internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    grpc_init();
    return 0;
}

static void check_terminated(const char *field, const char *s, size_t size)
{
    if (memchr(s, '\0', size) == NULL)
        fuzz_fail("error_detail", "rpc_error_t.%s is not NUL-terminated", field);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grpc_metadata md[2];
    grpc_metadata_array trailing = {.count = 2, .capacity = 2, .metadata = md};
    rpc_error_t err;
    char *value;

    if (size < 1)
        return 0;
    value = fuzz_copy(data + 1, size - 1);
    /* A key that is not the detail's comes first: it must be skipped. */
    md[0] = (grpc_metadata){.key = grpc_slice_from_static_string("grpc-other-bin"),
                            .value = grpc_slice_from_static_string("x")};
    md[1] = (grpc_metadata){.key = grpc_slice_from_static_string(RPC_ERROR_DETAIL_KEY),
                            .value = grpc_slice_new(value, size - 1, free)};
    rpc_error_fill(&err, (grpc_status_code)(data[0] % 17),
                   grpc_slice_from_static_string("the server's message"), NULL, &trailing,
                   "127.0.0.1:1", "/tessera.v1.Fuzz/Detail");
    grpc_slice_unref(md[1].value);
    if ((int)err.status < 0 || err.status >= STATUS_COUNT_)
        fuzz_fail("error_detail", "status %d out of range", (int)err.status);
    check_terminated("message", err.message, sizeof(err.message));
    check_terminated("task", err.task, sizeof(err.task));
    check_terminated("culprit", err.culprit, sizeof(err.culprit));
    return 0;
}
