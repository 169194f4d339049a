#define _GNU_SOURCE
#include "blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* CBLAS enum values (cblas.h): row-major 101, no-trans 111, trans 112. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef void (*cblas_sgemm_t)(int, int, int, int, int, int, float, const float *, int,
                              const float *, int, float, float *, int);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static cblas_sgemm_t sgemm_ptr;
static char core_name[64] = "unknown";
static char load_error[400];

/* The best OpenBLAS kernel family this CPU and OS can run. __builtin_cpu_supports checks the
 * CPUID bits and, for AVX and AVX-512, that the OS saves the wider registers. */
static const char *best_coretype(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

static void load(void)
{
    static const char *const libs[] = {"libopenblas.so.0", "libopenblas.so"};
    const char *forced = getenv("TESSERA_BLAS_CORETYPE");
    const char *core = forced != NULL && forced[0] != '\0' ? forced : best_coretype();
    const char *inherited = getenv("OPENBLAS_CORETYPE");
    void *h = NULL;

    if (core != NULL) {
        if (inherited != NULL && strcmp(inherited, core) != 0)
            LOG_INFO(TRAIN, "OPENBLAS_CORETYPE=%s replaced by %s, the best this CPU runs%s",
                     inherited, core, forced ? " (TESSERA_BLAS_CORETYPE)" : "");
        setenv("OPENBLAS_CORETYPE", core, 1);
    }
    /* Tessera's own threads do the parallel work; OpenBLAS threads would fight them. */
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]) && h == NULL; i++)
        h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(load_error, sizeof(load_error),
                 "cannot load OpenBLAS (libopenblas.so.0): %s; install libopenblas0", dlerror());
        return;
    }
    /* POSIX guarantees dlsym's result converts to a function pointer; ISO C needs the detour. */
    *(void **)&sgemm_ptr = dlsym(h, "cblas_sgemm");
    if (sgemm_ptr == NULL) {
        snprintf(load_error, sizeof(load_error), "OpenBLAS has no cblas_sgemm");
        return;
    }
    {
        void (*set_threads)(int);
        char *(*get_core)(void);
        *(void **)&set_threads = dlsym(h, "openblas_set_num_threads");
        *(void **)&get_core = dlsym(h, "openblas_get_corename");
        if (set_threads != NULL)
            set_threads(1);
        if (get_core != NULL)
            snprintf(core_name, sizeof(core_name), "%s", get_core());
    }
    /* The handle stays open for the life of the process, like a linked library. */
}

status_t blas_init(status_msg_t *err)
{
    pthread_once(&once, load);
    if (sgemm_ptr == NULL)
        return status_fail(err, STATUS_SYSTEM, "%s", load_error);
    return STATUS_OK;
}

const char *blas_core_name(void)
{
    return core_name;
}

static void sgemm1(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                   int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    sgemm_ptr(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
              trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ---- the compute pool: helpers wait on a generation counter; the caller takes part ---- */

#define POOL_MAX           64
#define PARALLEL_MIN_FLOPS (1 << 20) /* smaller products are not worth a wake-up */

typedef struct gemm_job {
    bool trans_a, trans_b;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
    bool by_rows;
} gemm_job_t;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    pthread_t tids[POOL_MAX];
    int threads; /* including the caller */
    uint64_t generation;
    int pending;
    gemm_job_t job;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
          .work_cv = PTHREAD_COND_INITIALIZER,
          .done_cv = PTHREAD_COND_INITIALIZER,
          .threads = 1};

/* Runs part `part` of `parts` of the job: a block of C's rows, or of its columns. */
static void gemm_part(const gemm_job_t *j, int part, int parts)
{
    int total = j->by_rows ? j->m : j->n;
    int lo = (int)((int64_t)total * part / parts), hi = (int)((int64_t)total * (part + 1) / parts);
    if (hi <= lo)
        return;
    if (j->by_rows) {
        const float *a = j->trans_a ? j->a + lo : j->a + (size_t)lo * j->lda;
        sgemm1(j->trans_a, j->trans_b, hi - lo, j->n, j->k, j->alpha, a, j->lda, j->b, j->ldb,
               j->beta, j->c + (size_t)lo * j->ldc, j->ldc);
    } else {
        const float *b = j->trans_b ? j->b + (size_t)lo * j->ldb : j->b + lo;
        sgemm1(j->trans_a, j->trans_b, j->m, hi - lo, j->k, j->alpha, j->a, j->lda, b, j->ldb,
               j->beta, j->c + lo, j->ldc);
    }
}

static void *pool_main(void *arg)
{
    int me = (int)(intptr_t)arg;
    uint64_t seen = 0;
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    for (;;) {
        gemm_job_t job;
        int parts;
        pthread_mutex_lock(&pool.mu);
        while (pool.generation == seen)
            pthread_cond_wait(&pool.work_cv, &pool.mu);
        seen = pool.generation;
        job = pool.job;
        parts = pool.threads;
        pthread_mutex_unlock(&pool.mu);
        gemm_part(&job, me, parts);
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done_cv);
        pthread_mutex_unlock(&pool.mu);
    }
    return NULL;
}

status_t blas_set_threads(int threads, status_msg_t *err)
{
    if (threads < 1 || threads > POOL_MAX)
        return status_fail(err, STATUS_OUT_OF_RANGE, "threads must be 1 to %d, got %d", POOL_MAX,
                           threads);
    /* Helpers live for the process, like OpenBLAS's own; only growing is needed. */
    for (int i = pool.threads; i < threads; i++)
        if (pthread_create(&pool.tids[i], NULL, pool_main, (void *)(intptr_t)i) != 0)
            return status_fail(err, STATUS_SYSTEM, "cannot start compute thread %d", i);
    if (threads > pool.threads)
        pool.threads = threads;
    return STATUS_OK;
}

void blas_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    int parts = pool.threads;
    if (parts == 1 || 2.0 * m * n * k < PARALLEL_MIN_FLOPS || (m < 2 * parts && n < 2 * parts)) {
        sgemm1(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    pool.job = (gemm_job_t){trans_a, trans_b, m,    n, k, lda, ldb,
                            ldc,     alpha,   beta, a, b, c,   m >= n || m >= 8 * parts};
    pool.pending = parts - 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.work_cv);
    pthread_mutex_unlock(&pool.mu);
    gemm_part(&pool.job, 0, parts);
    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done_cv, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}
