/* Keras initializers (keras/src/initializers/random_initializers.py, constant_initializers.py)
 * over a splitmix64 stream. splitmix64's state advances by a constant per draw, so skipping k
 * draws is one multiplication: that is what lets a shard start mid-stream. */
#include "job/initializer.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += GOLDEN);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rng_skip(uint64_t *s, uint64_t draws)
{
    *s += draws * GOLDEN; /* wraps modulo 2^64 like the state itself */
}

static double rng_uniform(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Box-Muller, two draws per value. */
static double rng_normal(uint64_t *s)
{
    double u1 = rng_uniform(s), u2 = rng_uniform(s);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Keras's truncated normal: redraw values beyond two standard deviations. */
static double rng_truncated_normal(uint64_t *s)
{
    double v;
    do {
        v = rng_normal(s);
    } while (fabs(v) > 2.0);
    return v;
}

void initializer_fill(const job_init_t *init, job_init_kind_t dflt, float *v, size_t n,
                      double fan_in, double fan_out, uint64_t seed)
{
    initializer_fill_at(init, dflt, v, n, 0, fan_in, fan_out, seed);
}

static void fill_constant(float *v, size_t n, float c)
{
    for (size_t i = 0; i < n; i++)
        v[i] = c;
}

void initializer_fill_at(const job_init_t *init, job_init_kind_t dflt, float *v, size_t n,
                         uint64_t offset, double fan_in, double fan_out, uint64_t seed)
{
    job_init_kind_t kind = init->kind == JOB_INIT_DEFAULT ? dflt : init->kind;
    uint64_t s = init->has_seed ? init->seed * 0x2545F4914F6CDD1Dull + 1 : seed;
    double limit, stddev;

    switch (kind) {
    case JOB_INIT_ZEROS:
    case JOB_INIT_DEFAULT:
        memset(v, 0, n * sizeof(*v));
        break;
    case JOB_INIT_ONES:
        fill_constant(v, n, 1.0f);
        break;
    case JOB_INIT_CONSTANT:
        fill_constant(v, n, (float)init->a);
        break;
    case JOB_INIT_GLOROT_UNIFORM:
    case JOB_INIT_HE_UNIFORM:
        limit =
            kind == JOB_INIT_GLOROT_UNIFORM ? sqrt(6.0 / (fan_in + fan_out)) : sqrt(6.0 / fan_in);
        rng_skip(&s, offset);
        for (size_t i = 0; i < n; i++)
            v[i] = (float)((rng_uniform(&s) * 2.0 - 1.0) * limit);
        break;
    case JOB_INIT_GLOROT_NORMAL:
    case JOB_INIT_HE_NORMAL:
        /* Keras: truncated normal with stddev scaled by 1/.87962566103423978 */
        stddev =
            (kind == JOB_INIT_GLOROT_NORMAL ? sqrt(2.0 / (fan_in + fan_out)) : sqrt(2.0 / fan_in)) /
            0.87962566103423978;
        for (uint64_t i = 0; i < offset; i++)
            (void)rng_truncated_normal(&s);
        for (size_t i = 0; i < n; i++)
            v[i] = (float)(rng_truncated_normal(&s) * stddev);
        break;
    case JOB_INIT_RANDOM_UNIFORM:
        rng_skip(&s, offset);
        for (size_t i = 0; i < n; i++)
            v[i] = (float)(init->a + rng_uniform(&s) * (init->b - init->a));
        break;
    case JOB_INIT_RANDOM_NORMAL:
        rng_skip(&s, 2 * offset);
        for (size_t i = 0; i < n; i++)
            v[i] = (float)(init->a + rng_normal(&s) * init->b);
        break;
    }
}

void initializer_fans(const int64_t *shape, size_t rank, double *ret_fan_in, double *ret_fan_out)
{
    double receptive = 1;

    if (rank == 0) {
        *ret_fan_in = *ret_fan_out = 1;
        return;
    }
    if (rank == 1) {
        *ret_fan_in = *ret_fan_out = (double)shape[0];
        return;
    }
    for (size_t i = 0; i + 2 < rank; i++)
        receptive *= (double)shape[i];
    *ret_fan_in = (double)shape[rank - 2] * receptive;
    *ret_fan_out = (double)shape[rank - 1] * receptive;
}

status_t initializer_check(const job_init_t *init, status_msg_t *err)
{
    double a = init->a, b = init->b;

    switch (init->kind) {
    case JOB_INIT_CONSTANT:
        if (!(fabs(a) <= FLT_MAX))
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "the constant %g is not a finite float32 (at most %g)", a,
                               (double)FLT_MAX);
        return STATUS_OK;
    case JOB_INIT_RANDOM_UNIFORM:
        if (!(fabs(a) <= FLT_MAX) || !(fabs(b) <= FLT_MAX) || !(a <= b))
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "random_uniform needs finite float32 bounds with minval <= maxval, "
                               "got [%g, %g)",
                               a, b);
        return STATUS_OK;
    case JOB_INIT_RANDOM_NORMAL:
        /* Draws stay within NORMAL_MAX_SIGMA standard deviations of the mean. */
        if (!(fabs(a) <= FLT_MAX) || !(b >= 0) || !(fabs(a) + NORMAL_MAX_SIGMA * b <= FLT_MAX))
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "random_normal with mean %g and stddev %g can draw values beyond "
                               "float32's %g",
                               a, b, (double)FLT_MAX);
        return STATUS_OK;
    default:
        return STATUS_OK;
    }
}
