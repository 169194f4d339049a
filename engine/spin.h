/* Waiting a few microseconds for another thread without a futex round trip: spin on an atomic
 * for up to SPIN_NS, then the caller blocks on its condition variable (blas.c's compute pool,
 * replicas.c's replicas). Waking a sleeping thread costs about as much as a small GEMM (a futex
 * wake, and on a virtual machine an idle vCPU to rouse), which training steps tens of
 * microseconds apart cannot afford; a thread that waits longer sleeps and costs nothing. */
#ifndef TESSERA_SPIN_H
#define TESSERA_SPIN_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/clock.h"

/* The hand-offs through these atomics order the threads' work, which Helgrind (valgrind's race
 * detector) cannot see in C11 atomics: it is told with its client requests, a few instructions
 * that do nothing outside valgrind. SPIN_HAPPENS_BEFORE(p) goes before the store that publishes
 * (a generation moved on, a count dropped), SPIN_HAPPENS_AFTER(p) after the load that sees it. */
#if defined(__has_include)
#if __has_include(<valgrind/helgrind.h>)
#include <valgrind/helgrind.h>
#define SPIN_HAPPENS_BEFORE(p) ANNOTATE_HAPPENS_BEFORE(p)
#define SPIN_HAPPENS_AFTER(p)  ANNOTATE_HAPPENS_AFTER(p)
#endif
#endif
#ifndef SPIN_HAPPENS_BEFORE
#define SPIN_HAPPENS_BEFORE(p) ((void)(p))
#define SPIN_HAPPENS_AFTER(p)  ((void)(p))
#endif

#define SPIN_NS 200000 /* how long a waiting thread spins before it sleeps */

/* One turn of a spin loop; every 64th also lets another thread have the CPU, so that more
 * threads than free cores do not spin away the time slice the awaited one needs. */
static inline void spin_relax(unsigned turn)
{
#if defined(__SSE2__)
    _mm_pause();
#endif
    if (turn % 64 == 0)
        sched_yield();
}

/* Spins for up to SPIN_NS until *v differs from `from`; returns whether it did. */
static inline bool spin_while_equal(_Atomic uint64_t *v, uint64_t from)
{
    int64_t start = clock_now_ns();
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(v, memory_order_acquire) != from)
            return true;
        spin_relax(i);
        if (i % 64 == 0 && clock_now_ns() - start > SPIN_NS)
            return false;
    }
}

/* Spins for up to SPIN_NS until *v is 0; returns whether it became 0. */
static inline bool spin_until_zero(_Atomic int *v)
{
    int64_t start = clock_now_ns();
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(v, memory_order_acquire) == 0)
            return true;
        spin_relax(i);
        if (i % 64 == 0 && clock_now_ns() - start > SPIN_NS)
            return false;
    }
}

#endif
