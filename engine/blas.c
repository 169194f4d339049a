#define _GNU_SOURCE
#include "blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__SSE__)
#include <immintrin.h>
#endif

#include "base/log.h"
#include "base/clock.h"
#include "conv_direct.h"
#include "gemm_narrow.h"
#include "spin.h"

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
    const char *best = best_coretype();
    void *h = NULL;

    /* Tessera's own kernels go by what the CPU runs, whatever OpenBLAS is told */
    gemm_narrow_select(best == NULL ? 0 : strcmp(best, "SkylakeX") == 0 ? 2 : 1);
    conv_direct_select(best == NULL ? 0 : strcmp(best, "SkylakeX") == 0 ? 2 : 1);
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

/* ---- the compute pool ---------------------------------------------------------------------
 *
 * Helpers wait for a generation counter to move; the caller publishes a job, takes part itself,
 * and waits for the helpers to finish. A training step runs a few GEMMs tens of microseconds
 * apart, and waking a sleeping thread costs about as much as half of such a GEMM (a futex wake,
 * and on a virtual machine an idle vCPU to rouse), which made two threads slower than one on
 * small models. So both sides spin for up to SPIN_NS before they block on a condition variable,
 * as OpenMP runtimes do (spin.h); a pool that sits idle longer sleeps and costs nothing.
 *
 * Lost wake-ups are ruled out the Dekker way, with sequentially consistent atomics: a helper
 * counts itself in `sleepers` before it checks the generation one last time, and the caller
 * bumps the generation before it reads `sleepers`; likewise `caller_sleeps` against `pending`.
 * The job itself is read only after the generation is seen (acquire), and the caller rewrites it
 * only after every helper has finished (pending 0), so it needs no lock. */

#define POOL_MAX           BLAS_MAX_THREADS
#define PARALLEL_MIN_FLOPS (1 << 20) /* smaller products are not worth splitting */
#define PARALLEL_MIN_WORK  (1 << 16) /* nor smaller loops (floats moved) */

typedef struct gemm_job {
    bool trans_a, trans_b;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
    bool by_rows;
    bool narrow; /* gemm_narrow's product, not OpenBLAS's */
    int parts;
    unsigned fp_mode; /* the caller's floating-point control word, which the helpers adopt */
    blas_part_fn fn;  /* blas_parallel's work instead of a product, when set */
    void *arg;
} gemm_job_t;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    pthread_t tids[POOL_MAX];
    int threads; /* including the caller; read and written by the caller only */
    _Atomic uint64_t generation;
    _Atomic int pending;        /* helpers still working on the current job */
    _Atomic int sleepers;       /* helpers blocked, or about to block, on work_cv */
    _Atomic bool caller_sleeps; /* the caller is blocked, or about to block, on done_cv */
    uint64_t born[POOL_MAX];    /* the generation when helper i started: jobs before are not its */
    gemm_job_t job;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
          .work_cv = PTHREAD_COND_INITIALIZER,
          .done_cv = PTHREAD_COND_INITIALIZER,
          .threads = 1};

static unsigned fp_mode_get(void)
{
#if defined(__SSE__)
    return _mm_getcsr();
#else
    return 0;
#endif
}

static void fp_mode_set(unsigned mode)
{
#if defined(__SSE__)
    if (_mm_getcsr() != mode)
        _mm_setcsr(mode);
#else
    (void)mode;
#endif
}

/* Runs part `part` of the job's parts: a block of C's rows, or of its columns (or the part of
 * blas_parallel's work). */
static void gemm_part(const gemm_job_t *j, int part)
{
    if (j->fn != NULL) {
        j->fn(j->arg, part, j->parts);
        return;
    }
    int total = j->by_rows ? j->m : j->n;
    int lo = (int)((int64_t)total * part / j->parts),
        hi = (int)((int64_t)total * (part + 1) / j->parts);
    if (hi <= lo)
        return;
    if (j->narrow) {
        const float *a = j->trans_a ? j->a + lo : j->a + (size_t)lo * j->lda;
        gemm_narrow(j->trans_a, hi - lo, j->n, j->k, a, j->lda, j->b, j->ldb, j->beta,
                    j->c + (size_t)lo * j->ldc, j->ldc);
    } else if (j->by_rows) {
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
    uint64_t seen = pool.born[me];
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    for (;;) {
        gemm_job_t job;
        if (!spin_while_equal(&pool.generation, seen)) {
            pthread_mutex_lock(&pool.mu);
            atomic_fetch_add(&pool.sleepers, 1);
            while (atomic_load(&pool.generation) == seen)
                pthread_cond_wait(&pool.work_cv, &pool.mu);
            atomic_fetch_sub(&pool.sleepers, 1);
            pthread_mutex_unlock(&pool.mu);
        }
        seen = atomic_load(&pool.generation);
        SPIN_HAPPENS_AFTER(&pool.generation);
        job = pool.job;
        fp_mode_set(job.fp_mode);
        gemm_part(&job, me);
        SPIN_HAPPENS_BEFORE(&pool.pending);
        if (atomic_fetch_sub(&pool.pending, 1) == 1 && atomic_load(&pool.caller_sleeps)) {
            pthread_mutex_lock(&pool.mu);
            pthread_cond_signal(&pool.done_cv);
            pthread_mutex_unlock(&pool.mu);
        }
    }
    return NULL;
}

status_t blas_set_threads(int threads, status_msg_t *err)
{
    /* Two callers at once (a worker's first two jobs configured together) would each start
     * helpers for the same parts: the lock makes the second find them started. */
    static pthread_mutex_t grow_mu = PTHREAD_MUTEX_INITIALIZER;
    status_t rc = STATUS_OK;

    if (threads < 1 || threads > POOL_MAX)
        return status_fail(err, STATUS_OUT_OF_RANGE, "threads must be 1 to %d, got %d", POOL_MAX,
                           threads);
    pthread_mutex_lock(&grow_mu);
    /* Helpers live for the process, like OpenBLAS's own; only growing is needed. The pool
     * counts those that started, so a later call starts only the missing ones. */
    for (int i = pool.threads; i < threads; i++) {
        pool.born[i] = atomic_load(&pool.generation);
        if (pthread_create(&pool.tids[i], NULL, pool_main, (void *)(intptr_t)i) != 0) {
            rc = status_fail(err, STATUS_SYSTEM, "cannot start compute thread %d", i);
            break;
        }
        pool.threads = i + 1;
    }
    pthread_mutex_unlock(&grow_mu);
    return rc;
}

/* Set on threads that run GEMMs beside each other (a mirrored job's replicas): the pool takes
 * one caller at a time. */
static _Thread_local bool thread_serial;

void blas_thread_serial(bool serial)
{
    thread_serial = serial;
}

static void run_job(gemm_job_t job);

void blas_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float *a,
                int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    int parts = pool.threads;
    /* decided on the whole product: every block of its rows is computed the same way */
    bool narrow = gemm_narrow_fits(trans_a, trans_b, m, n, k, alpha, beta);
    if (parts == 1 || thread_serial || 2.0 * m * n * k < PARALLEL_MIN_FLOPS ||
        (m < 2 * parts && n < 2 * parts)) {
        if (narrow)
            gemm_narrow(trans_a, m, n, k, a, lda, b, ldb, beta, c, ldc);
        else
            sgemm1(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    run_job((gemm_job_t){.trans_a = trans_a,
                         .trans_b = trans_b,
                         .m = m,
                         .n = n,
                         .k = k,
                         .lda = lda,
                         .ldb = ldb,
                         .ldc = ldc,
                         .alpha = alpha,
                         .beta = beta,
                         .a = a,
                         .b = b,
                         .c = c,
                         .by_rows = narrow || m >= n || m >= 8 * parts,
                         .narrow = narrow,
                         .parts = parts,
                         .fp_mode = fp_mode_get()});
}

void blas_parallel(blas_part_fn fn, void *arg, size_t work)
{
    int parts = pool.threads;
    if (parts == 1 || thread_serial || work < PARALLEL_MIN_WORK) {
        fn(arg, 0, 1);
        return;
    }
    run_job((gemm_job_t){.parts = parts, .fp_mode = fp_mode_get(), .fn = fn, .arg = arg});
}

/* Hands the job to the helpers, runs part 0 here and waits for the others. */
static void run_job(gemm_job_t job)
{
    int parts = job.parts;

    pool.job = job;
    atomic_store(&pool.pending, parts - 1);
    SPIN_HAPPENS_BEFORE(&pool.generation);
    atomic_fetch_add(&pool.generation, 1);
    if (atomic_load(&pool.sleepers) > 0) {
        pthread_mutex_lock(&pool.mu);
        pthread_cond_broadcast(&pool.work_cv);
        pthread_mutex_unlock(&pool.mu);
    }
    gemm_part(&pool.job, 0);
    if (!spin_until_zero(&pool.pending)) {
        pthread_mutex_lock(&pool.mu);
        atomic_store(&pool.caller_sleeps, true);
        while (atomic_load(&pool.pending) > 0)
            pthread_cond_wait(&pool.done_cv, &pool.mu);
        atomic_store(&pool.caller_sleeps, false);
        pthread_mutex_unlock(&pool.mu);
    }
    SPIN_HAPPENS_AFTER(&pool.pending);
}

blas_fp_mode_t blas_flush_denormals(void)
{
    blas_fp_mode_t old = fp_mode_get();
#if defined(__SSE__)
    /* FTZ: results too small for a normal float become 0; DAZ: such inputs read as 0. */
    fp_mode_set(old | _MM_FLUSH_ZERO_ON | 0x0040u /* _MM_DENORMALS_ZERO_ON */);
#endif
    return old;
}

void blas_fp_mode_restore(blas_fp_mode_t mode)
{
    fp_mode_set(mode);
}
