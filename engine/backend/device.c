/* The backend of a job's device. */
#include "backend.h"

status_t backend_open(const job_device_t *device, const backend_t **ret, status_msg_t *err)
{
    if (!device->cuda) {
        *ret = backend_cpu();
        return (*ret)->init(err);
    }
#if TESSERA_HAVE_CUDA
    return backend_cuda(device->ordinal < 0 ? 0 : device->ordinal, ret, err);
#else
    char name[16];
    return status_fail(err, STATUS_UNIMPLEMENTED,
                       "device %s: this build of Tessera has no CUDA backend (nvcc and cuBLAS "
                       "were not found when it was built): build it where the CUDA toolkit is "
                       "installed, or train on the cpu",
                       job_device_str(device, name, sizeof(name)));
#endif
}
