/* Keras initializers (keras.initializers), seeded and reproducible, shared by the training
 * engine (whole variables) and the parameter servers (one shard of a variable at a time).
 *
 * Values come from one splitmix64 stream per variable, drawn in row-major element order, so a
 * shard filled with initializer_fill_at() at its element offset holds exactly the elements the
 * whole variable would hold there: a variable sharded over PS tasks starts with the same values
 * as the same variable trained on one device. */
#ifndef TESSERA_INITIALIZER_H
#define TESSERA_INITIALIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef enum {
    JOB_INIT_DEFAULT, /* the layer's Keras default */
    JOB_INIT_ZEROS,
    JOB_INIT_ONES,
    JOB_INIT_CONSTANT, /* value */
    JOB_INIT_GLOROT_UNIFORM,
    JOB_INIT_GLOROT_NORMAL,
    JOB_INIT_HE_UNIFORM,
    JOB_INIT_HE_NORMAL,
    JOB_INIT_RANDOM_UNIFORM, /* minval, maxval */
    JOB_INIT_RANDOM_NORMAL,  /* mean, stddev */
} job_init_kind_t;

typedef struct job_init {
    job_init_kind_t kind;
    double a, b; /* value | minval, maxval | mean, stddev */
    bool has_seed;
    uint64_t seed;
} job_init_t;

/* Fills v[0..n) with init (its kind JOB_INIT_DEFAULT replaced by dflt) as Keras would:
 * zeros, ones, constant a, Glorot/He uniform (limit sqrt(6 / (fan_in + fan_out)) or
 * sqrt(6 / fan_in)), Glorot/He normal (truncated at two standard deviations, stddev scaled by
 * 1/0.8796...), random uniform in [a, b), random normal (mean a, stddev b). `seed` is the
 * stream seed used when init has no seed of its own (init->has_seed false). Thread-safe. */
void initializer_fill(const job_init_t *init, job_init_kind_t dflt, float *v, size_t n,
                      double fan_in, double fan_out, uint64_t seed);

/* As initializer_fill, for elements [offset, offset + n) of the variable in row-major order.
 * Uniform and normal draws skip ahead in constant time; the truncated normals (Glorot and He
 * normal) redraw a variable number of times and replay the stream up to offset, which costs
 * about as much as filling the elements before it. */
void initializer_fill_at(const job_init_t *init, job_init_kind_t dflt, float *v, size_t n,
                         uint64_t offset, double fan_in, double fan_out, uint64_t seed);

/* Keras's compute_fans for a variable of shape (rank dims): rank 0: 1, 1; rank 1: d0, d0;
 * rank 2: d0, d1; higher: the receptive field (all dims but the last two) times d[-2], d[-1]. */
void initializer_fans(const int64_t *shape, size_t rank, double *ret_fan_in, double *ret_fan_out);

/* Box-Muller draws from 53-bit uniforms never reach 8.6 standard deviations from the mean. */
#define NORMAL_MAX_SIGMA 8.6

/* Checks that every value init can produce is a finite float32 (a constant within FLT_MAX,
 * uniform bounds within it and ordered, a normal whose mean plus NORMAL_MAX_SIGMA deviations is);
 * the sentence names the parameter. The fans of the variance-scaling kinds come from shapes and
 * are always safe. */
status_t initializer_check(const job_init_t *init, status_msg_t *err);

#endif
