/* The CUDA backend: cuBLAS for the matrix products, the kernels of cuda_kernels.cu for the rest.
 *
 * Memory is CUDA managed memory from a caching allocator, never more than fits on the device
 * (managed memory past it would page, and can stall the GPU): the layers that have no kernel of
 * the backend yet (BatchNormalization, the loss, the optimizer, ...) run their C loops on the host
 * over the same buffers, and the driver moves the pages to whichever side touches them. Each
 * entry therefore waits for its kernels before it returns, so that host code after it sees the
 * results. That is correct everywhere and slow where host loops sit between device kernels:
 * moving those layers onto the device, and dropping the waits, is what makes this backend fast.
 *
 * One device per process (backend_cuda's ordinal). Each host thread that calls in works on its
 * own default stream (the build's per-thread default stream), with a cuBLAS handle of its own
 * once it multiplies. A failed CUDA call is kept, the first one per thread, and reported (and
 * forgotten) by that thread's next check(): the step that met it fails with it. An error that
 * breaks the device's context comes back from every later call anyway. */
#define _POSIX_C_SOURCE 200809L
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend/cuda_kernels.h"
#include "base/log.h"

/* A block of device memory, live or kept for reuse. */
typedef struct cuda_block {
    void *p;
    size_t bytes;
    struct cuda_block *next;
} cuda_block_t;

/* What a host thread computes with: its cuBLAS handle (made on its first product) and a scratch
 * buffer for the host's ids and the column sums' partials. */
typedef struct cuda_thread {
    cublasHandle_t blas;
    void *scratch;
    size_t scratch_bytes;
} cuda_thread_t;

/* The cached blocks past this many bytes go back to the driver when they are freed. */
#define CUDA_CACHE_MAX ((size_t)512 << 20)

static struct {
    pthread_mutex_t lock;
    int ordinal;                 /* the device; -1 until backend_cuda chose one; set before ready */
    atomic_bool ready;           /* init succeeded */
    cuda_block_t *live, *cached; /* the allocator's blocks */
    size_t cached_bytes;
    size_t managed_bytes; /* live and cached */
    pthread_key_t key;    /* a thread's cuda_thread_t, freed when it exits */
    bool have_key;
} cuda = {.lock = PTHREAD_MUTEX_INITIALIZER, .ordinal = -1};

/* cuBLAS, loaded when the backend starts (load_cublas): a CUDA build that computes on the CPU
 * maps none of its hundreds of megabytes. */
static struct {
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const float *, const float *, int, const float *, int, const float *,
                            float *, int);
} cublas;

static _Thread_local cuda_thread_t *self;
/* the calling thread's first failure since its last check() */
static _Thread_local bool failed;
static _Thread_local char error[192];

static void fail(const char *what, const char *why)
{
    if (!failed) {
        failed = true;
        snprintf(error, sizeof(error), "%s: %s", what, why);
    }
}

static bool ok(cudaError_t rc, const char *what)
{
    if (rc == cudaSuccess)
        return true;
    cudaGetLastError(); /* forgets an error that leaves the context working */
    fail(what, cudaGetErrorString(rc));
    return false;
}

/* Waits for the calling thread's stream: the host may read what the kernels wrote. */
static void finish(int launch_rc, const char *what)
{
    if (ok((cudaError_t)launch_rc, what))
        ok(cudaStreamSynchronize(cudaStreamPerThread), what);
}

static void thread_free(void *arg)
{
    cuda_thread_t *t = arg;

    if (t == self)
        self = NULL;
    if (t->blas != NULL)
        cublas.destroy(t->blas);
    if (t->scratch != NULL)
        cudaFree(t->scratch);
    free(t);
}

/* The calling thread's state, made on its first call with the device bound. NULL (the failure
 * kept) when that cannot be made. */
static cuda_thread_t *thread_ctx(void)
{
    cuda_thread_t *t;

    if (self != NULL)
        return self;
    if (!atomic_load(&cuda.ready)) {
        fail("cuda backend", "used before its init");
        return NULL;
    }
    if (!ok(cudaSetDevice(cuda.ordinal), "cudaSetDevice"))
        return NULL;
    if ((t = calloc(1, sizeof(*t))) == NULL) {
        fail("cuda backend", "out of host memory");
        return NULL;
    }
    pthread_setspecific(cuda.key, t);
    self = t;
    return t;
}

/* The thread's cuBLAS handle on its default stream, made on its first product; NULL (the failure
 * kept) when cuBLAS cannot start. */
static cublasHandle_t blas_handle(cuda_thread_t *t)
{
    if (t->blas != NULL)
        return t->blas;
    if (cublas.create(&t->blas) != CUBLAS_STATUS_SUCCESS) {
        t->blas = NULL;
        fail("cublasCreate", "cuBLAS could not start on this device");
        return NULL;
    }
    /* float32 products as the CPU's (no TF32 rounding of the inputs) */
    if (cublas.set_stream(t->blas, cudaStreamPerThread) != CUBLAS_STATUS_SUCCESS ||
        cublas.set_math_mode(t->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
        fail("cublasSetStream", "cuBLAS refused the thread's stream or float32 math");
        cublas.destroy(t->blas);
        t->blas = NULL;
        return NULL;
    }
    return t->blas;
}

/* The thread's scratch, at least `bytes` long. */
static void *scratch(cuda_thread_t *t, size_t bytes)
{
    if (bytes <= t->scratch_bytes)
        return t->scratch;
    if (t->scratch != NULL)
        cudaFree(t->scratch);
    t->scratch = NULL;
    t->scratch_bytes = 0;
    if (!ok(cudaMalloc(&t->scratch, bytes), "cudaMalloc (scratch)")) {
        t->scratch = NULL;
        return NULL;
    }
    t->scratch_bytes = bytes;
    return t->scratch;
}

/* ---- the device ---------------------------------------------------------------------------- */

#define STR_(x)       #x
#define STR(x)        STR_(x)
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)

/* Loads cuBLAS: from the loader's path, else the toolkit's directory this build found. Called
 * under the lock. */
static status_t load_cublas(status_msg_t *err)
{
    static const char *const names[] = {CUBLAS_SONAME, TESSERA_CUDA_LIBDIR "/" CUBLAS_SONAME};
    char first[200] = "";
    void *h = NULL;

    if (cublas.sgemm != NULL)
        return STATUS_OK;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && h == NULL; i++)
        if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) == NULL && i == 0)
            snprintf(first, sizeof(first), "%s", dlerror()); /* the loader path's reason */
    if (h == NULL)
        return status_fail(err, STATUS_CUDA,
                           "cannot load cuBLAS (%s): %s; put the CUDA toolkit's library directory "
                           "on LD_LIBRARY_PATH",
                           CUBLAS_SONAME, first);
    /* POSIX guarantees dlsym's result converts to a function pointer; ISO C needs the detour */
    *(void **)&cublas.create = dlsym(h, "cublasCreate_v2");
    *(void **)&cublas.destroy = dlsym(h, "cublasDestroy_v2");
    *(void **)&cublas.set_stream = dlsym(h, "cublasSetStream_v2");
    *(void **)&cublas.set_math_mode = dlsym(h, "cublasSetMathMode");
    *(void **)&cublas.sgemm = dlsym(h, "cublasSgemm_v2");
    if (cublas.create == NULL || cublas.destroy == NULL || cublas.set_stream == NULL ||
        cublas.set_math_mode == NULL || cublas.sgemm == NULL) {
        cublas.sgemm = NULL;
        dlclose(h);
        return status_fail(err, STATUS_CUDA, "%s lacks the functions this backend calls",
                           CUBLAS_SONAME);
    }
    return STATUS_OK;
}

static status_t cuda_init(status_msg_t *err)
{
    struct cudaDeviceProp prop;
    int count = 0, managed = 0;
    cudaError_t rc;
    status_t st = STATUS_OK;

    pthread_mutex_lock(&cuda.lock);
    if (atomic_load(&cuda.ready))
        goto out;
    if (cuda.ordinal < 0) {
        st = status_fail(err, STATUS_INTERNAL, "the cuda backend's device was never chosen");
        goto out;
    }
    rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count == 0) {
        st = status_fail(err, STATUS_CUDA, "cuda:%d: no CUDA device is visible (%s)", cuda.ordinal,
                         rc == cudaErrorInsufficientDriver
                             ? "no NVIDIA driver for this CUDA runtime is loaded"
                         : rc != cudaSuccess ? cudaGetErrorString(rc)
                                             : "the driver lists none");
        goto out;
    }
    if (cuda.ordinal >= count) {
        st = status_fail(err, STATUS_CUDA, "cuda:%d: this host has %d CUDA device%s, from cuda:0",
                         cuda.ordinal, count, count == 1 ? "" : "s");
        goto out;
    }
    if ((rc = cudaSetDevice(cuda.ordinal)) != cudaSuccess ||
        (rc = cudaGetDeviceProperties(&prop, cuda.ordinal)) != cudaSuccess ||
        (rc = cudaDeviceGetAttribute(&managed, cudaDevAttrConcurrentManagedAccess, cuda.ordinal)) !=
            cudaSuccess) {
        st = status_fail(err, STATUS_CUDA, "cuda:%d: %s", cuda.ordinal, cudaGetErrorString(rc));
        goto out;
    }
    /* the host's loops read the buffers while other threads' kernels run */
    if (!managed) {
        st = status_fail(err, STATUS_CUDA,
                         "cuda:%d (%s): the device cannot share managed memory with the host "
                         "while it computes (concurrentManagedAccess is 0), which this backend "
                         "needs",
                         cuda.ordinal, prop.name);
        goto out;
    }
    if ((st = load_cublas(err)) != STATUS_OK)
        goto out;
    if (!cuda.have_key && pthread_key_create(&cuda.key, thread_free) != 0) {
        st = status_fail(err, STATUS_SYSTEM, "pthread_key_create failed");
        goto out;
    }
    cuda.have_key = true;
    atomic_store(&cuda.ready, true);
    LOG_INFO(TRAIN, "computing on cuda:%d (%s, compute capability %d.%d, %.1f GiB)", cuda.ordinal,
             prop.name, prop.major, prop.minor, (double)prop.totalGlobalMem / (1 << 30));
out:
    pthread_mutex_unlock(&cuda.lock);
    return st;
}

static status_t cuda_set_threads(int threads, status_msg_t *err)
{
    (void)threads; /* the device's parallelism is its own */
    (void)err;
    return STATUS_OK;
}

static status_t cuda_check(status_msg_t *err)
{
    if (!failed)
        return STATUS_OK;
    failed = false;
    return status_fail(err, STATUS_CUDA, "cuda:%d: %s", cuda.ordinal, error);
}

/* ---- memory: a caching allocator over managed memory --------------------------------------- */

#define CUDA_ALIGN 512

/* A cached block at least `bytes` long and at most twice that (the smallest such), unlinked;
 * NULL when there is none. Called under the lock. */
static cuda_block_t *take_cached(size_t bytes)
{
    cuda_block_t **best = NULL;

    for (cuda_block_t **b = &cuda.cached; *b != NULL; b = &(*b)->next)
        if ((*b)->bytes >= bytes && (*b)->bytes / 2 <= bytes &&
            (best == NULL || (*b)->bytes < (*best)->bytes))
            best = b;
    if (best == NULL)
        return NULL;
    cuda_block_t *found = *best;
    *best = found->next;
    cuda.cached_bytes -= found->bytes;
    found->next = NULL;
    return found;
}

/* Leaves this much of the device's memory to the CUDA context, cuBLAS's workspaces and the
 * scratch buffers. */
#define CUDA_HEADROOM ((size_t)256 << 20)

/* Whether `bytes` more of managed memory fit on the device beside all it holds already (live
 * and cached, wherever its pages are now: the host loops pull some to the host, which
 * cudaMemGetInfo then counts as free) and what the device has free: managed memory past the
 * device's size would page, and can stall the GPU rather than fail. Called under the lock. */
static bool fits_on_device(size_t bytes)
{
    size_t free_bytes = 0, total = 0;

    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return total > CUDA_HEADROOM && cuda.managed_bytes <= total - CUDA_HEADROOM &&
           bytes <= total - CUDA_HEADROOM - cuda.managed_bytes && free_bytes > CUDA_HEADROOM &&
           bytes <= free_bytes - CUDA_HEADROOM;
}

/* A new block of managed memory, or NULL where it would not fit on the device. Called under the
 * lock. */
static cuda_block_t *new_block(size_t bytes)
{
    cuda_block_t *b = calloc(1, sizeof(*b));

    if (b == NULL)
        return NULL;
    b->bytes = bytes;
    if (fits_on_device(bytes) &&
        cudaMallocManaged(&b->p, bytes, cudaMemAttachGlobal) == cudaSuccess) {
        cuda.managed_bytes += bytes;
        return b;
    }
    cudaGetLastError(); /* not sticky: the caller reports the buffer that did not fit */
    free(b);
    return NULL;
}

/* The cached blocks, taken out of the cache for give_back. Called under the lock. */
static cuda_block_t *take_all_cached(void)
{
    cuda_block_t *all = cuda.cached;

    cuda.managed_bytes -= cuda.cached_bytes;
    cuda.cached = NULL;
    cuda.cached_bytes = 0;
    return all;
}

/* Gives blocks back to the driver, outside the lock: cudaFree waits for the whole device. */
static void give_back(cuda_block_t *b)
{
    if (b != NULL) /* the device's, whatever thread frees */
        cudaSetDevice(cuda.ordinal);
    while (b != NULL) {
        cuda_block_t *next = b->next;
        cudaFree(b->p);
        free(b);
        b = next;
    }
    cudaGetLastError();
}

static void *cuda_alloc(size_t bytes)
{
    size_t rounded =
        bytes < CUDA_ALIGN ? CUDA_ALIGN : (bytes + CUDA_ALIGN - 1) / CUDA_ALIGN * CUDA_ALIGN;
    cuda_thread_t *t = thread_ctx();
    cuda_block_t *b, *doomed = NULL;

    if (t == NULL || bytes > SIZE_MAX - CUDA_ALIGN)
        return NULL;
    pthread_mutex_lock(&cuda.lock);
    if ((b = take_cached(rounded)) == NULL && (b = new_block(rounded)) == NULL)
        doomed = take_all_cached();
    pthread_mutex_unlock(&cuda.lock);
    if (doomed != NULL) { /* once more, with the cache given back */
        give_back(doomed);
        pthread_mutex_lock(&cuda.lock);
        b = new_block(rounded);
        pthread_mutex_unlock(&cuda.lock);
    }
    if (b == NULL)
        return NULL; /* the caller names the buffer that did not fit */
    pthread_mutex_lock(&cuda.lock);
    b->next = cuda.live;
    cuda.live = b;
    pthread_mutex_unlock(&cuda.lock);
    finish(cudaMemsetAsync(b->p, 0, rounded, cudaStreamPerThread), "cudaMemsetAsync");
    return b->p;
}

static void cuda_free(void *p)
{
    cuda_block_t **at, *b = NULL, *doomed = NULL;

    if (p == NULL)
        return;
    pthread_mutex_lock(&cuda.lock);
    for (at = &cuda.live; *at != NULL && (*at)->p != p; at = &(*at)->next)
        ;
    if (*at != NULL) {
        b = *at;
        *at = b->next;
        b->next = NULL;
        if (cuda.cached_bytes + b->bytes <= CUDA_CACHE_MAX) {
            b->next = cuda.cached;
            cuda.cached = b;
            cuda.cached_bytes += b->bytes;
        } else {
            cuda.managed_bytes -= b->bytes;
            doomed = b;
        }
    }
    pthread_mutex_unlock(&cuda.lock);
    give_back(doomed);
    if (b == NULL) /* a bug of the caller's, not the device's */
        LOG_ERR(TRAIN, "cuda backend: free of %p, which it did not allocate", p);
}

static void cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes > 0 && thread_ctx() != NULL)
        finish(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamPerThread),
               "cudaMemcpyAsync");
}

static void cuda_zero(void *dst, size_t bytes)
{
    if (bytes > 0 && thread_ctx() != NULL)
        finish(cudaMemsetAsync(dst, 0, bytes, cudaStreamPerThread), "cudaMemsetAsync");
}

/* ---- kernels ------------------------------------------------------------------------------- */

static void cuda_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    cuda_thread_t *t = thread_ctx();
    cublasHandle_t h = t != NULL ? blas_handle(t) : NULL;

    if (h == NULL)
        return;
    /* cuBLAS is column-major: the row-major C is C^T there, and C^T = op(B)^T op(A)^T */
    if (cublas.sgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n,
                     m, k, &alpha, b, ldb, a, lda, &beta, c, ldc) != CUBLAS_STATUS_SUCCESS) {
        fail("cublasSgemm", "the product failed");
        return;
    }
    finish(cudaSuccess, "cublasSgemm");
}

static void cuda_fill_rows_(float *out, size_t rows, const float *row, size_t width)
{
    if (thread_ctx() != NULL)
        finish(cuda_fill_rows(out, rows, row, width), "fill_rows");
}

static void cuda_column_sums_(const float *x, size_t rows, size_t width, float *ret)
{
    cuda_thread_t *t = thread_ctx();
    float *partial;

    if (t == NULL)
        return;
    partial = scratch(t, cuda_column_sums_scratch(rows, width) * sizeof(float) + 1);
    if (partial != NULL)
        finish(cuda_column_sums(x, rows, width, partial, ret), "column_sums");
}

static void cuda_mul_(const float *a, const float *b, float *out, size_t n)
{
    if (thread_ctx() != NULL)
        finish(cuda_mul(a, b, out, n), "mul");
}

static void cuda_activate_(job_activation_t act, float *v, size_t n, size_t width)
{
    if (thread_ctx() != NULL)
        finish(cuda_activate((int)act, v, n, width), "activate");
}

static void cuda_activate_backward_(job_activation_t act, const float *x, const float *y, float *dy,
                                    size_t n, size_t width)
{
    if (thread_ctx() != NULL)
        finish(cuda_activate_backward((int)act, x, y, dy, n, width), "activate_backward");
}

static void cuda_im2col_(const backend_window_t *g, const float *in, int batch, float *cols)
{
    if (thread_ctx() != NULL)
        finish(cuda_im2col(g, in, batch, cols), "im2col");
}

static void cuda_col2im_(const backend_window_t *g, const float *cols, int batch, float *dx)
{
    if (thread_ctx() != NULL)
        finish(cuda_col2im(g, cols, batch, dx), "col2im");
}

static void cuda_max_pool_(const backend_window_t *g, const float *in, int batch, float *out,
                           int32_t *argmax)
{
    if (thread_ctx() != NULL)
        finish(cuda_max_pool(g, in, batch, out, argmax), "max_pool");
}

static void cuda_max_pool_backward_(const backend_window_t *g, const int32_t *argmax,
                                    const float *dy, int batch, float *dx)
{
    size_t bytes = (size_t)batch * g->h * g->w * g->c * sizeof(float);

    if (thread_ctx() == NULL)
        return;
    if (ok(cudaMemsetAsync(dx, 0, bytes, cudaStreamPerThread), "max_pool_backward"))
        finish(cuda_max_pool_backward(g, argmax, dy, batch, dx), "max_pool_backward");
}

static void cuda_average_pool_(const backend_window_t *g, const float *in, int batch, float *out)
{
    if (thread_ctx() != NULL)
        finish(cuda_average_pool(g, in, batch, out), "average_pool");
}

static void cuda_average_pool_backward_(const backend_window_t *g, const float *dy, int batch,
                                        float *dx)
{
    if (thread_ctx() != NULL)
        finish(cuda_average_pool_backward(g, dy, batch, dx), "average_pool_backward");
}

static void cuda_mean_steps_(const float *x, int batch, size_t steps, size_t channels, float *out)
{
    if (thread_ctx() != NULL)
        finish(cuda_mean_steps(x, batch, steps, channels, out), "mean_steps");
}

static void cuda_mean_steps_backward_(const float *dy, int batch, size_t steps, size_t channels,
                                      float *dx)
{
    if (thread_ctx() != NULL)
        finish(cuda_mean_steps_backward(dy, batch, steps, channels, dx), "mean_steps_backward");
}

/* The host's ids (or slots) in the thread's scratch, on the device; NULL on failure. */
static void *ids_on_device(cuda_thread_t *t, const void *ids, size_t bytes)
{
    void *d = scratch(t, bytes + 1);
    if (d == NULL ||
        !ok(cudaMemcpyAsync(d, ids, bytes, cudaMemcpyDefault, cudaStreamPerThread), "ids"))
        return NULL;
    return d;
}

static void cuda_gather_rows_(const float *table, size_t dim, const int64_t *ids, size_t n,
                              float *out)
{
    cuda_thread_t *t = thread_ctx();
    const int64_t *d;

    if (t != NULL && n > 0 && (d = ids_on_device(t, ids, n * sizeof(*ids))) != NULL)
        finish(cuda_gather_rows(table, dim, d, n, out), "gather_rows");
}

static void cuda_scatter_add_rows_(const float *dy, size_t dim, const int32_t *slot, size_t n,
                                   float *rows)
{
    cuda_thread_t *t = thread_ctx();
    const int32_t *d;

    if (t != NULL && n > 0 && (d = ids_on_device(t, slot, n * sizeof(*slot))) != NULL)
        finish(cuda_scatter_add_rows(dy, dim, d, n, rows), "scatter_add_rows");
}

static const backend_t cuda_backend = {
    .name = "cuda",
    .device_memory = true,
    .init = cuda_init,
    .set_threads = cuda_set_threads,
    .check = cuda_check,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .gemm = cuda_gemm,
    .fill_rows = cuda_fill_rows_,
    .column_sums = cuda_column_sums_,
    .mul = cuda_mul_,
    .activate = cuda_activate_,
    .activate_backward = cuda_activate_backward_,
    .im2col = cuda_im2col_,
    .col2im = cuda_col2im_,
    .max_pool = cuda_max_pool_,
    .max_pool_backward = cuda_max_pool_backward_,
    .average_pool = cuda_average_pool_,
    .average_pool_backward = cuda_average_pool_backward_,
    .mean_steps = cuda_mean_steps_,
    .mean_steps_backward = cuda_mean_steps_backward_,
    .gather_rows = cuda_gather_rows_,
    .scatter_add_rows = cuda_scatter_add_rows_,
};

status_t backend_cuda(int ordinal, const backend_t **ret, status_msg_t *err)
{
    status_t st = STATUS_OK;

    pthread_mutex_lock(&cuda.lock);
    if (cuda.ordinal >= 0 && cuda.ordinal != ordinal)
        st = status_fail(err, STATUS_INVALID_USAGE,
                         "cuda:%d: this process already computes on cuda:%d (one device a "
                         "process)",
                         ordinal, cuda.ordinal);
    else
        cuda.ordinal = ordinal;
    pthread_mutex_unlock(&cuda.lock);
    STATUS_CHECK(st);
    st = cuda_init(err);
    if (st != STATUS_OK) { /* another device may be asked for next */
        pthread_mutex_lock(&cuda.lock);
        if (!atomic_load(&cuda.ready))
            cuda.ordinal = -1;
        pthread_mutex_unlock(&cuda.lock);
        return st;
    }
    *ret = &cuda_backend;
    return STATUS_OK;
}
