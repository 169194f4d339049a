/* bench-optim: the optimizer update the parameter server applies to a pushed gradient, beside a
 * memcpy that moves as many bytes, for each instruction set the kernels were built for and on 1
 * and on every online CPU's thread.
 *
 * An update is memory-bound: Adam reads the gradient, reads and writes the value and its two
 * slots, and (for a push that pulls) writes the new value out: 32 bytes a parameter. The figure
 * that says whether the kernel is as fast as it can be is its time against memcpy of the same
 * traffic (half read, half written) on as many threads: 1.0x is the memory's speed. Each figure
 * is the median of --reps runs on --params parameters (default 16 Mi: 64 MiB of values, well
 * past the caches), the parts spread over the threads as tessera-ps spreads them
 * (--apply-threads).
 *
 *   bench/optim/run.sh [--params=N] [--reps=N] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/parse.h"
#include "base/pool.h"
#include "bench_util.h"
#include "optim/optimizer.h"

#define PART_ELEMS ((size_t)1 << 20) /* one part per thread at most, as the PS cuts them */

typedef struct kind {
    const char *name;
    optimizer_kind_t kind;
    double momentum;
    bool amsgrad, centered;
} kind_t;

static const kind_t kinds[] = {
    {"sgd", OPTIMIZER_SGD, 0, false, false},
    {"sgd+momentum", OPTIMIZER_SGD, 0.9, false, false},
    {"adam", OPTIMIZER_ADAM, 0, false, false},
    {"adam amsgrad", OPTIMIZER_ADAM, 0, true, false},
    {"adagrad", OPTIMIZER_ADAGRAD, 0, false, false},
    {"rmsprop", OPTIMIZER_RMSPROP, 0, false, false},
    {"adamw", OPTIMIZER_ADAMW, 0, false, false},
    {"nadam", OPTIMIZER_NADAM, 0, false, false},
    {"adamax", OPTIMIZER_ADAMAX, 0, false, false},
    {"lion", OPTIMIZER_LION, 0, false, false},
    {"ftrl", OPTIMIZER_FTRL, 0, false, false},
};

typedef struct run {
    const optimizer_config_t *c;
    int64_t step;
    float *p, *g, *s, *out;
    size_t n, part;
    /* memcpy */
    char *dst;
    const char *src;
    size_t bytes, copy_part;
} run_t;

static void apply_part(void *arg, size_t i)
{
    run_t *r = arg;
    size_t first = i * r->part, count = r->n - first < r->part ? r->n - first : r->part;
    optimizer_apply_dense_part(r->c, r->step, r->p, r->g, r->s, r->n, first, count, r->out);
}

static void copy_part(void *arg, size_t i)
{
    run_t *r = arg;
    size_t first = i * r->copy_part;
    size_t count = r->bytes - first < r->copy_part ? r->bytes - first : r->copy_part;
    memcpy(r->dst + first, r->src + first, count);
}

static size_t parts_of(size_t n, unsigned threads, size_t *ret_part)
{
    size_t parts = threads, part = (n + parts - 1) / parts;
    part = (part + 15) / 16 * 16;
    *ret_part = part;
    return (n + part - 1) / part;
}

/* The median seconds of reps calls of fn over parts. */
static double time_parts(pool_t *pool, size_t parts, pool_fn fn, run_t *r, int64_t reps)
{
    samples_t s = {0};
    double med;

    pool_run(pool, parts, fn, r); /* warm: pages touched, caches as in steady state */
    for (int64_t i = 0; i < reps; i++) {
        double t0 = clock_now_s();
        pool_run(pool, parts, fn, r);
        samples_add(&s, clock_now_s() - t0);
        r->step++;
    }
    med = samples_quantile(&s, 0.5);
    samples_free(&s);
    return med;
}

static size_t round_up(size_t bytes)
{
    return (bytes + 63) / 64 * 64;
}

/* "--name=N" into *ret (N a positive integer, the project's strict parse); false when a is
 * another option. */
static bool parse_option(const char *a, const char *name, int64_t *ret)
{
    size_t len = strlen(name);
    if (strncmp(a, name, len) != 0 || a[len] != '=')
        return false;
    if (parse_int(a + len + 1, 1, INT64_MAX, ret) != 0) {
        fprintf(stderr, "bench-optim: %s wants a positive integer\n", name);
        exit(2);
    }
    return true;
}

int main(int argc, char **argv)
{
    int64_t params = 16L << 20, reps = 9;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned thread_counts[2] = {1, cpus > 1 ? (unsigned)cpus : 1};
    size_t n_counts = cpus > 1 ? 2 : 1;
    const char *isas[8];
    size_t n_isas = optimizer_isa_list(isas, 8);
    const char *chosen = optimizer_isa();
    status_msg_t err;
    float *p, *g, *s, *out;
    char *copy_dst;
    size_t n;

    for (int i = 1; i < argc; i++)
        if (!parse_option(argv[i], "--params", &params) &&
            !parse_option(argv[i], "--reps", &reps)) {
            fprintf(stderr, "usage: bench-optim [--params=N] [--reps=N]\n");
            return 2;
        }
    n = (size_t)params;
    /* 64-byte aligned, as tessera-ps holds shards and receives payloads */
    p = aligned_alloc(64, round_up(n * sizeof(float)));
    g = aligned_alloc(64, round_up(n * sizeof(float)));
    s = aligned_alloc(64, round_up(3 * n * sizeof(float)));
    out = aligned_alloc(64, round_up(n * sizeof(float)));
    copy_dst = aligned_alloc(64, round_up(8 * n * sizeof(float)));
    if (!p || !g || !s || !out || !copy_dst) {
        fprintf(stderr, "bench-optim: out of memory for %zu parameters\n", n);
        return 1;
    }
    memset(s, 0, 3 * n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)(i % 1000) * 1e-3f - 0.5f;
        g[i] = (float)((i * 7) % 1000) * 1e-4f - 0.05f;
    }
    memset(copy_dst, 1, 8 * n * sizeof(float));

    printf("Optimizer updates as tessera-ps applies them (bench/optim)\n");
    printf("  %s parameters (%s MB of values), median of %ld; kernels built and runnable here:",
           NUM((double)n), NUM((double)n * 4 / MB), (long)reps);
    for (size_t i = 0; i < n_isas; i++)
        printf(" %s%s", isas[i], strcmp(isas[i], chosen) == 0 ? " (chosen)" : "");
    printf("\n  CPU flags:");
    __builtin_cpu_init();
    printf("%s%s%s%s\n", __builtin_cpu_supports("avx2") ? " avx2" : "",
           __builtin_cpu_supports("fma") ? " fma" : "",
           __builtin_cpu_supports("avx512f") ? " avx512f" : "",
           __builtin_cpu_supports("avx512bw") ? " avx512bw" : "");
    printf("  traffic: gradient read, value and slots read and written, new value written out (a "
           "push that pulls)\n\n");
    printf("  %-13s %-7s %7s %10s %10s %12s %8s\n", "optimizer", "isa", "threads", "apply ms",
           "GB/s", "memcpy ms", "ratio");

    for (size_t t = 0; t < n_counts; t++) {
        pool_t *pool = NULL;
        if (thread_counts[t] > 1 && pool_new(thread_counts[t] - 1, &pool, &err) != STATUS_OK) {
            fprintf(stderr, "bench-optim: %s\n", err.text);
            return 1;
        }
        for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
            optimizer_config_t c;
            run_t r = {.c = &c, .p = p, .g = g, .s = s, .out = out, .n = n};
            size_t parts, copy_parts, slots;
            double copy_s;

            optimizer_config_default(kinds[k].kind, &c);
            c.momentum = kinds[k].momentum;
            c.amsgrad = kinds[k].amsgrad;
            slots = optimizer_slot_count(&c);
            optimizer_slots_init(&c, s, n);
            parts = parts_of(n, thread_counts[t], &r.part);
            /* grad + value r/w + slots r/w + out: half of it read, half written */
            r.bytes = n * sizeof(float) * (1 + 2 + 2 * slots + 1) / 2;
            r.src = (const char *)s; /* any memory as large, out of cache */
            r.dst = copy_dst;
            copy_parts = parts_of(r.bytes, thread_counts[t], &r.copy_part);
            copy_s = time_parts(pool, copy_parts, copy_part, &r, reps);
            for (size_t i = 0; i < n_isas; i++) {
                double apply_s;
                if (optimizer_set_isa(isas[i], &err) != STATUS_OK) {
                    fprintf(stderr, "bench-optim: %s\n", err.text);
                    return 1;
                }
                apply_s = time_parts(pool, parts, apply_part, &r, reps);
                printf("  %-13s %-7s %7u %10.3f %10.1f %12.3f %7.2fx\n", kinds[k].name, isas[i],
                       thread_counts[t], apply_s * 1e3, 2.0 * (double)r.bytes / apply_s / 1e9,
                       copy_s * 1e3, apply_s / copy_s);
            }
        }
        pool_free(pool);
    }
    if (optimizer_set_isa(chosen, &err) != STATUS_OK)
        return 1;
    free(p);
    free(g);
    free(s);
    free(out);
    free(copy_dst);
    return 0;
}
