/* model: {keras: PATH} with no optimizer in the job: the archive's optimizer goes on where it
 * stood, as Keras's load_model restores it. Its variables (files/init_weights.h) are the
 * iteration count, the learning rate unless a schedule sets it, Keras's gradient accumulators
 * when it accumulated, then the slots in Keras's order (optimizer_keras_order) and Nadam's
 * u_product (a function of the step, not read). tessera train reads the slots into its trainer,
 * the chief into the shards it creates on the parameter servers. */
#ifndef TESSERA_JOB_INIT_OPTIMIZER_H
#define TESSERA_JOB_INIT_OPTIMIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "files/init_weights.h"
#include "optim/optimizer.h"

/* Where each slot of the model's variables is in the archive. */
typedef struct init_optimizer {
    int64_t updates; /* the optimizer's updates so far: Keras's iterations / accumulate */
    size_t n;        /* slots to read; 0 when the optimizer starts anew (Keras never built it) */
    size_t *param;   /* entry j: slot slot[j] of variable param[j] is optimizer variable at[j] */
    size_t *slot;
    size_t *at;
} init_optimizer_t;

/* Matches w's optimizer variables to the model's variables vars[0..n) (moving[i]: a moving
 * statistic, which no optimizer trains) for optimizer o, with Keras's
 * gradient_accumulation_steps `accumulate` (1: none). STATUS_BAD_CONFIG names the archive and
 * what differs: the optimizer of another model, a count that is not one. Warns of a learning
 * rate that differs from o's, and of an accumulation window in progress (it is dropped). */
status_t init_optimizer_plan(const init_weights_t *w, const optimizer_config_t *o,
                             const st_tensor_t *vars, const bool *moving, size_t n, int accumulate,
                             init_optimizer_t *ret, status_msg_t *err);

/* Reads entry j into out (the variable's elements), refusing NaN, infinities and a negative
 * value in a slot that is a sum of squares (DATA_LOSS naming the archive and the variable). */
status_t init_optimizer_read(const init_weights_t *w, const optimizer_config_t *o,
                             const init_optimizer_t *p, size_t j, float *out, status_msg_t *err);

void init_optimizer_done(init_optimizer_t *p); /* safe on a zeroed one */

#endif
