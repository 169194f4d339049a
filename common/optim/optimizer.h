/* Optimizer kernels and learning-rate schedules, shared by one_device training (the worker) and
 * the parameter servers, which apply pushed gradients with exactly these functions.
 *
 * Semantics follow Keras 3 (keras.optimizers.*) so a model trained here and in Keras take the
 * same steps: SGD with momentum and Nesterov, Adam (optionally AMSGrad) and AdamW, Adagrad,
 * RMSprop (optionally centered and with momentum), Nadam, Adamax, Lion and Ftrl; every kind
 * takes Keras's decoupled `weight_decay` and its gradient clipping (clipnorm, global_clipnorm,
 * clipvalue: optimizer_clip). Row updates (sparse embedding gradients) are lazy:
 * only the touched rows and their slots change, as in LazyAdam / PyTorch's SparseAdam;
 * duplicate row indices are summed first. All kernels are single-threaded and lock-free, and
 * allocate nothing unless optimizer_apply_rows() is given no scratch; callers serialize updates
 * of one tensor. */
#ifndef TESSERA_OPTIMIZER_H
#define TESSERA_OPTIMIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/pieces.h"
#include "base/status.h"
#include "optim/schedule.h"

typedef enum {
    OPTIMIZER_SGD,
    OPTIMIZER_ADAM,
    OPTIMIZER_ADAGRAD,
    OPTIMIZER_RMSPROP,
    OPTIMIZER_ADAMW, /* Adam with weight_decay (Keras's default 0.004) */
    OPTIMIZER_NADAM,
    OPTIMIZER_ADAMAX,
    OPTIMIZER_LION,
    OPTIMIZER_FTRL,
    OPTIMIZER_KINDS
} optimizer_kind_t;

typedef struct optimizer_config {
    optimizer_kind_t kind;
    lr_schedule_t schedule;
    double lr_scale; /* linear scaling rule: multiply the schedule's rate (1 = off) */
    /* SGD */
    double momentum; /* also RMSprop's momentum */
    bool nesterov;
    /* Adam, AdamW, Nadam, Adamax, Lion */
    double beta_1, beta_2;
    bool amsgrad; /* Adam, AdamW */
    /* Adam, AdamW, Adagrad, RMSprop, Nadam, Adamax */
    double epsilon;
    /* Adagrad, Ftrl */
    double initial_accumulator_value;
    /* RMSprop */
    double rho;
    bool centered;
    /* Ftrl */
    double learning_rate_power; /* <= 0 */
    double l1, l2, l2_shrinkage, beta;
    /* Every kind: decoupled weight decay, w -= w * weight_decay * lr before the update (0: none) */
    double weight_decay;
    /* Every kind, on the gradients before the update (0: off; at most one is set): each
     * gradient tensor scaled to an L2 norm of at most clipnorm; all of a step's gradients
     * scaled together to a global norm of at most global_clipnorm; each element clipped to
     * [-clipvalue, clipvalue]. */
    double clipnorm, global_clipnorm, clipvalue;
} optimizer_config_t;

/* Fills c with Keras's defaults for kind (learning rate 0.01 for SGD and 0.001 for the others,
 * Adam beta_1 0.9, beta_2 0.999, epsilon 1e-7, Adagrad initial accumulator 0.1, RMSprop rho
 * 0.9, AdamW weight decay 0.004, Lion beta_2 0.99, Ftrl learning_rate_power -0.5), constant
 * schedule, lr_scale 1, no clipping. */
void optimizer_config_default(optimizer_kind_t kind, optimizer_config_t *c);

/* Checks ranges (rates > 0, betas in [0, 1), epsilon >= 0, increasing piecewise boundaries ...);
 * err names the offending field. */
status_t optimizer_config_validate(const optimizer_config_t *c, status_msg_t *err);

/* The learning rate for the update that follows `step` completed steps (step 0 = first update),
 * lr_scale applied. */
double optimizer_learning_rate(const optimizer_config_t *c, int64_t step);

/* Slot arrays the optimizer keeps per parameter (0 for plain SGD, 1 for momentum/Adagrad/Lion,
 * 2 for Adam/AdamW/Nadam/Adamax/Ftrl, 3 for AMSGrad; RMSprop 1 + momentum + centered). */
size_t optimizer_slot_count(const optimizer_config_t *c);

/* Initializes the slots of n parameters: slots is slot_count arrays of n floats laid end to end
 * (slot k of parameter i at slots[k * n + i]). */
void optimizer_slots_init(const optimizer_config_t *c, float *slots, size_t n);

/* Applies one update to n parameters with gradient grad. `step` counts the updates already
 * applied to this tensor (0 for the first): Adam's bias correction uses step + 1. */
void optimizer_apply_dense(const optimizer_config_t *c, int64_t step, float *params,
                           const float *grad, float *slots, size_t n);

/* The same on elements [first, first + count) of the n-element tensor (params, grad and slots
 * are the whole tensor's, slots laid out for n): updates of disjoint parts may run at once, on
 * threads of their own, and together make optimizer_apply_dense's. When out is not NULL (an
 * n-element array) out[first, first + count) receives the updated parameters in the same pass:
 * the values a pull after the push returns, with no second pass over memory. */
void optimizer_apply_dense_part(const optimizer_config_t *c, int64_t step, float *params,
                                const float *grad, float *slots, size_t n, size_t first,
                                size_t count, float *out);

/* The update of `count` elements at params, grad (and out), with slot k of element i at
 * slots[k * stride + i]: a part of a tensor of `stride` elements, given by pointers into it
 * (the gradient of a chunk need not be part of a whole gradient's array, and may sit at any
 * byte address: where gRPC received it). */
void optimizer_apply_dense_at(const optimizer_config_t *c, int64_t step, float *params,
                              const unaligned_float_t *grad, float *slots, size_t stride,
                              size_t count, float *out);

/* optimizer_apply_dense_at with the gradient's `count` float32 elements from byte `at` of
 * pieces (base/pieces.h): where gRPC received them, read in place run by run, with the step's
 * factors resolved once. */
void optimizer_apply_dense_pieces(const optimizer_config_t *c, int64_t step, float *params,
                                  const pieces_t *grad, size_t at, float *slots, size_t stride,
                                  size_t count, float *out);

/* The instruction set the kernels run with ("base", "avx2", "avx512"): the widest that was
 * built and that the CPU has, unless optimizer_set_isa chose another. Every one gives the same
 * bits. */
const char *optimizer_isa(void);

/* Makes every later update run the kernels built for `name` (tests, benchmarks): fails naming
 * the builds when there is none of that name, or when this CPU cannot run it. */
status_t optimizer_set_isa(const char *name, status_msg_t *err);

/* The builds this CPU can run, widest first, into names[0..cap); returns how many there are. */
size_t optimizer_isa_list(const char **names, size_t cap);

/* Bytes of scratch optimizer_apply_rows() needs for n_idx indices of rows of row_len floats;
 * SIZE_MAX if that does not fit in size_t. */
size_t optimizer_rows_scratch_size(size_t n_idx, size_t row_len);

/* Applies a sparse update: rows[indices[j]] of a [n_rows, row_len] tensor get gradient row j of
 * grads [n_idx, row_len]. Slots are laid out as for dense, with n = n_rows * row_len. Indices out
 * of [0, n_rows) fail with STATUS_OUT_OF_RANGE before anything changes; duplicates are summed
 * (in the order they appear) and the sum is applied once. `scratch` holds
 * optimizer_rows_scratch_size(n_idx, row_len) bytes aligned as malloc's; it may be NULL, and then
 * the function allocates (STATUS_NO_MEMORY if it cannot, nothing changed). */
status_t optimizer_apply_rows(const optimizer_config_t *c, int64_t step, float *params,
                              size_t n_rows, size_t row_len, const int64_t *indices,
                              const float *grads, size_t n_idx, float *slots, void *scratch,
                              status_msg_t *err);

/* Dry runs of the two updates: they compute what optimizer_apply_dense / _rows would, on copies,
 * and change nothing. check_dense returns the index of the first parameter whose value or slot
 * would stop being finite (NaN or an overflow of float32), or n when the update is safe to
 * apply; check_rows sets *ret_bad likewise, as an index into grads (n_idx * row_len when safe),
 * and fails as apply_rows does on bad indices. */
size_t optimizer_check_dense(const optimizer_config_t *c, int64_t step, const float *params,
                             const float *grad, const float *slots, size_t n);
/* check_dense on `count` elements whose slot k is at slots[k * stride] (a part of a larger
 * tensor, as optimizer_apply_dense_at takes it): the index of the first element that would
 * break, or count. */
size_t optimizer_check_dense_at(const optimizer_config_t *c, int64_t step, const float *params,
                                const unaligned_float_t *grad, const float *slots, size_t stride,
                                size_t count);
/* check_dense_at with the gradient in pieces, as optimizer_apply_dense_pieces takes it. */
size_t optimizer_check_dense_pieces(const optimizer_config_t *c, int64_t step, const float *params,
                                    const pieces_t *grad, size_t at, const float *slots,
                                    size_t stride, size_t count);
status_t optimizer_check_rows(const optimizer_config_t *c, int64_t step, const float *params,
                              size_t n_rows, size_t row_len, const int64_t *indices,
                              const float *grads, size_t n_idx, const float *slots, void *scratch,
                              size_t *ret_bad, status_msg_t *err);

/* The index of the first NaN or infinity in v[0..n), or n (v at any byte address). */
size_t optimizer_first_non_finite(const unaligned_float_t *v, size_t n);

/* The most slot arrays any optimizer keeps (AMSGrad; centered RMSprop with momentum). */
#define OPTIMIZER_MAX_SLOTS 3
/* The most updates an optimizer's state may have counted (2^53: exact in a double, and far from
 * overflowing the counters it feeds). */
#define OPTIMIZER_MAX_ITERATIONS (1ll << 53)

/* Upper bounds on the magnitudes a tensor and its slot arrays hold, which a caller keeps across
 * updates so that most updates are proven safe without a dry run. */
typedef struct optimizer_bounds {
    double value;
    double slot[OPTIMIZER_MAX_SLOTS];
} optimizer_bounds_t;

/* The largest |v[i]| of v[0..n) (infinity when one is NaN or infinite; v at any byte address):
 * one pass that vectorizes. */
double optimizer_max_abs(const unaligned_float_t *v, size_t n);

/* The exact bounds of n parameters and their slots (laid out as for optimizer_apply_dense). */
void optimizer_bounds_measure(const optimizer_config_t *c, const float *params, const float *slots,
                              size_t n, optimizer_bounds_t *ret);

/* The same for elements [first, first + count) of n (slots laid out for n). */
void optimizer_bounds_measure_part(const optimizer_config_t *c, const float *params,
                                   const float *slots, size_t n, size_t first, size_t count,
                                   optimizer_bounds_t *ret);

/* Whether the update after `step` steps, with every gradient element (summed, for rows) of
 * magnitude at most gmax, provably keeps every parameter and slot finite given bounds b; then
 * *ret_next gets the bounds after the update. False means "not proven" (the bounds are too
 * loose, or the kind has no bound: centered RMSprop), and the caller runs the dry run. */
bool optimizer_bounds_step(const optimizer_config_t *c, int64_t step, double gmax,
                           const optimizer_bounds_t *b, optimizer_bounds_t *ret_next);

/* Whether a and b describe the same optimizer: kind, schedule and every option. */
bool optimizer_config_equal(const optimizer_config_t *a, const optimizer_config_t *b);

/* The job file's name of a kind ("sgd", "adamw", ...). */
const char *optimizer_kind_name(optimizer_kind_t kind);

/* Keras's class ("AdamW") and its default `name` ("adam_w"), as model.keras files hold them. */
const char *optimizer_keras_class(optimizer_kind_t kind);
const char *optimizer_keras_name(optimizer_kind_t kind);

/* Whether c clips gradients at all, and whether it needs every gradient of a step at once
 * (global_clipnorm) before any may be clipped. */
bool optimizer_clips(const optimizer_config_t *c);
bool optimizer_clips_globally(const optimizer_config_t *c);

/* Clips the gradient tensors grads[0..count) (lens[i] floats each) as Keras's optimizers do
 * before an update: with clipnorm each tensor by its own L2 norm, with global_clipnorm all of
 * them by their global norm (a non-finite norm leaves non-finite gradients, as Keras's does,
 * which the update's checks then refuse), with clipvalue each element. No-op without clipping.
 * The norms are summed in double. */
void optimizer_clip(const optimizer_config_t *c, float *const *grads, const size_t *lens,
                    size_t count);

/* Nadam's product of momentum-cache factors after step + 1 updates, as Keras keeps it in its
 * `u_product` variable (exported with the model). */
double optimizer_nadam_u_product(const optimizer_config_t *c, int64_t step);

/* Keras's name of slot k (momentum, velocity, velocity_hat, accumulator, average_gradient, norm,
 * linear), as checkpoints store it; NULL past optimizer_slot_count(). */
const char *optimizer_slot_name(const optimizer_config_t *c, size_t k);

/* momentum^batches in float32, multiplied out one batch at a time: what is left of a moving
 * average after that many of its updates (BatchNormalization's statistics over a window of
 * accumulated batches), rounded as the updates one by one would round it. */
float optimizer_momentum_power(float momentum, uint32_t batches);

/* The order in which Keras 3 keeps the slots of variables [0, n) (moving[i]: a moving statistic,
 * without slots) among an optimizer's variables, as model.keras files hold them: the Adam family
 * and Ftrl interleave their first two slots per variable, then every other slot runs over all
 * variables. Entry j is slot slot[j] of variable param[j]; param and slot hold
 * n * OPTIMIZER_MAX_SLOTS. Returns the entries. */
size_t optimizer_keras_order(const optimizer_config_t *c, const bool *moving, size_t n,
                             size_t *param, size_t *slot);

#endif
