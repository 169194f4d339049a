/* What the gpu suite's programs share: the CUDA backend or a skip, and comparing with the CPU. */
#ifndef TESSERA_GPU_TEST_H
#define TESSERA_GPU_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"

/* meson's exit status for a skipped test */
#define GPU_TEST_SKIP 77

/* Whether this host shows an NVIDIA GPU to its programs at all. */
static inline bool gpu_test_host_has_gpu(void)
{
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
}

/* The CUDA backend on cuda:0 (TESSERA_TEST_DEVICE may name another), or exits with the skip
 * status, saying why, where this build has no CUDA backend or the host no GPU. A GPU that is
 * there and does not start fails the test; TESSERA_REQUIRE_GPU=1 (a run on a GPU machine)
 * fails it where the skip would hide that nothing ran. TESSERA_TEST_DEVICE=cpu compares the CPU
 * backend with itself: a check of the tests. */
static inline const backend_t *gpu_test_backend(job_device_t *ret_device)
{
    const char *name = getenv("TESSERA_TEST_DEVICE"), *require = getenv("TESSERA_REQUIRE_GPU");
    status_msg_t err;
    job_device_t device;
    const backend_t *be;
    status_t rc;

    if (job_device_parse(name != NULL ? name : "cuda:0", &device, &err) != STATUS_OK) {
        fprintf(stderr, "TESSERA_TEST_DEVICE: %s\n", err.text);
        exit(EXIT_FAILURE);
    }
    rc = backend_open(&device, &be, &err);
    if ((rc == STATUS_UNIMPLEMENTED || (rc == STATUS_CUDA && !gpu_test_host_has_gpu())) &&
        (require == NULL || strcmp(require, "1") != 0)) {
        printf("skipped: %s\n", err.text);
        exit(GPU_TEST_SKIP);
    }
    if (rc != STATUS_OK) {
        fprintf(stderr, "%s\n", err.text);
        exit(EXIT_FAILURE);
    }
    if (ret_device != NULL)
        *ret_device = device;
    return be;
}

/* The largest difference between got and want, relative to |want| but no less than 1% of the
 * largest |want| (a sum that cancels to nearly nothing is as exact as its terms): the CUDA
 * backend matches the CPU's within 1e-4 of that. */
static inline double gpu_test_error(const float *got, const float *want, size_t n, size_t *ret_at)
{
    double worst = 0, top = 0;

    *ret_at = 0;
    for (size_t i = 0; i < n; i++)
        top = fabs((double)want[i]) > top ? fabs((double)want[i]) : top;
    for (size_t i = 0; i < n; i++) {
        double scale = fmax(fmax(fabs((double)want[i]), 0.01 * top), 1e-30);
        double e = fabs((double)got[i] - (double)want[i]) / scale;
        if (isnan(e) && !(isnan(got[i]) && isnan(want[i])))
            e = INFINITY;
        if (e > worst) {
            worst = e;
            *ret_at = i;
        }
    }
    return worst;
}

#endif
