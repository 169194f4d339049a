/* Learning-rate schedules as Keras names them (a constant, linear warmup, ExponentialDecay,
 * PiecewiseConstantDecay): the description a job file gives; optimizer_learning_rate() evaluates
 * it for a step. */
#ifndef TESSERA_SCHEDULE_H
#define TESSERA_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    LR_CONSTANT,          /* lr */
    LR_LINEAR_WARMUP,     /* initial_lr -> lr linearly over warmup_steps, then lr */
    LR_EXPONENTIAL_DECAY, /* initial_lr * decay_rate ^ (step / decay_steps), floored if staircase */
    /* values[i] while step <= boundaries[i] (Keras PiecewiseConstantDecay) */
    LR_PIECEWISE_CONSTANT,
} lr_kind_t;

#define LR_MAX_PIECES 16

typedef struct lr_schedule {
    lr_kind_t kind;
    double lr;         /* constant; the target of warmup */
    double initial_lr; /* warmup start; exponential decay start */
    int64_t warmup_steps;
    int64_t decay_steps;
    double decay_rate;
    bool staircase;
    size_t n_boundaries; /* piecewise: n_boundaries + 1 values */
    int64_t boundaries[LR_MAX_PIECES];
    double values[LR_MAX_PIECES + 1];
} lr_schedule_t;

#endif
