/* Optimizer kernels and learning-rate schedules.
 *
 * The update rules are those of Keras 3, read from keras-team/keras:
 *   keras/src/optimizers/sgd.py       SGD (momentum, nesterov)
 *   keras/src/optimizers/adam.py      Adam (amsgrad)
 *   keras/src/optimizers/adagrad.py   Adagrad
 *   keras/src/optimizers/rmsprop.py   RMSprop (centered, momentum)
 *   keras/src/optimizers/adamw.py, nadam.py, adamax.py, lion.py, ftrl.py
 *   keras/src/optimizers/base_optimizer.py's _apply_weight_decay, _clip_gradients,
 *                                                   clip_by_global_norm
 *   keras/src/optimizers/base_optimizer.py          the schedule sees `iterations` before the
 *                                                   update; Adam's bias correction uses + 1
 *   keras/src/optimizers/schedules/learning_rate_schedule.py   ExponentialDecay,
 *                                                   PiecewiseConstantDecay, CosineDecay's warmup
 * The element-wise loops are in kernels.c, in float like a Keras float32 variable; here the
 * per-call scalar factors (the learning rate, Adam's bias correction) are computed in double and
 * rounded once, into a plan naming one kernel.
 *
 * Speed: kernels.c is built for each instruction set the compiler can target (the baseline,
 * AVX2, AVX-512) and the widest the CPU runs is chosen when the process starts; every build
 * gives the same bits. The loops that take square roots vectorize only under -fno-math-errno
 * (otherwise GCC keeps a branch per element to set errno for negative inputs), about 5-10x
 * faster for Adam, Adagrad and RMSprop; nothing here reads errno. */
#include "optim/optimizer.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/kernels.h"

typedef optim_plan_t plan_t;

/* ---- instruction sets --------------------------------------------------------------------------
 */

static bool cpu_has_base(void)
{
    return true;
}

#ifdef OPTIM_HAVE_AVX2
static bool cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}
#endif

#ifdef OPTIM_HAVE_AVX512
/* What kernels.c's AVX-512 build is compiled for (meson.build): F, BW, DQ and VL. */
static bool cpu_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}
#endif

/* The kernels' builds, widest first; the first the CPU runs is taken when the process starts. */
static const struct isa_choice {
    const optim_isa_table_t *table;
    bool (*supported)(void);
} isa_choices[] = {
#ifdef OPTIM_HAVE_AVX512
    {&optim_isa_avx512, cpu_has_avx512},
#endif
#ifdef OPTIM_HAVE_AVX2
    {&optim_isa_avx2, cpu_has_avx2},
#endif
    {&optim_isa_base, cpu_has_base},
};

static _Atomic(const optim_isa_table_t *) isa_current;

static const optim_isa_table_t *isa(void)
{
    const optim_isa_table_t *t = atomic_load_explicit(&isa_current, memory_order_acquire);

    if (t != NULL)
        return t;
    for (size_t i = 0; i < sizeof(isa_choices) / sizeof(isa_choices[0]); i++)
        if (isa_choices[i].supported()) {
            t = isa_choices[i].table;
            break;
        }
    atomic_store_explicit(&isa_current, t, memory_order_release);
    return t;
}

const char *optimizer_isa(void)
{
    return isa()->name;
}

status_t optimizer_set_isa(const char *name, status_msg_t *err)
{
    char known[128] = "";

    for (size_t i = 0; i < sizeof(isa_choices) / sizeof(isa_choices[0]); i++) {
        const struct isa_choice *c = &isa_choices[i];
        size_t used = strlen(known);
        snprintf(known + used, sizeof(known) - used, "%s%s", used ? ", " : "", c->table->name);
        if (strcmp(name, c->table->name) != 0)
            continue;
        if (!c->supported())
            return status_fail(err, STATUS_INVALID_USAGE,
                               "this CPU cannot run the optimizer kernels built for %s", name);
        atomic_store_explicit(&isa_current, c->table, memory_order_release);
        return STATUS_OK;
    }
    return status_fail(err, STATUS_INVALID_ARGUMENT,
                       "no optimizer kernels were built for '%s' (built: %s)", name, known);
}

size_t optimizer_isa_list(const char **names, size_t cap)
{
    size_t n = 0;

    for (size_t i = 0; i < sizeof(isa_choices) / sizeof(isa_choices[0]); i++)
        if (isa_choices[i].supported() && n < cap)
            names[n++] = isa_choices[i].table->name;
    return n;
}

/* Runs plan k's kernel. */
static inline void run_kernel(const plan_t *k, float *params, const unaligned_float_t *grad,
                              float *slots, size_t stride, size_t n, float *out)
{
    isa()->kernels[k->kernel](k, params, grad, slots, stride, n, out);
}

/* ---- plans -------------------------------------------------------------------------------------
 */

/* Resolves the kind, its options and the scalar factors for the update after `step` steps. */
static void plan_init(const optimizer_config_t *c, int64_t step, plan_t *k)
{
    double lr = optimizer_learning_rate(c, step);

    k->lr = (float)lr;
    k->momentum = (float)c->momentum;
    k->one_minus_beta_1 = (float)(1.0 - c->beta_1);
    k->one_minus_beta_2 = (float)(1.0 - c->beta_2);
    k->epsilon = (float)c->epsilon;
    k->rho = (float)c->rho;
    k->one_minus_rho = (float)(1.0 - c->rho);
    k->alpha = 0.0f;
    k->decay = (float)(c->weight_decay * lr);
    k->beta_1 = (float)c->beta_1;
    k->beta_2 = (float)c->beta_2;
    k->nadam_m = k->nadam_g = k->bias = 0.0f;
    k->lr_power = (float)-c->learning_rate_power;
    k->l1 = (float)c->l1;
    k->l2_twice = (float)(2.0 * (c->l2 + c->beta / (2.0 * lr)));
    k->shrink_twice = (float)(2.0 * c->l2_shrinkage);
    switch (c->kind) {
    case OPTIMIZER_SGD:
        /* Keras keeps no velocity, and ignores nesterov, when momentum is 0. */
        if (c->momentum == 0.0)
            k->kernel = OPTIM_KERNEL_SGD;
        else
            k->kernel = c->nesterov ? OPTIM_KERNEL_SGD_NESTEROV : OPTIM_KERNEL_SGD_MOMENTUM;
        break;
    case OPTIMIZER_ADAM:
    case OPTIMIZER_ADAMW: {
        double t = (double)(step < 0 ? 0 : step) + 1.0;
        k->alpha = (float)(lr * sqrt(1.0 - pow(c->beta_2, t)) / (1.0 - pow(c->beta_1, t)));
        k->kernel = c->amsgrad ? OPTIM_KERNEL_AMSGRAD : OPTIM_KERNEL_ADAM;
        break;
    }
    case OPTIMIZER_NADAM: {
        double t = (double)(step < 0 ? 0 : step) + 1.0;
        double u_t = c->beta_1 * (1.0 - 0.5 * pow(0.96, t));
        double u_next = c->beta_1 * (1.0 - 0.5 * pow(0.96, t + 1.0));
        double prod = optimizer_nadam_u_product(c, step);
        k->nadam_m = (float)(u_next / (1.0 - prod * u_next));
        k->nadam_g = (float)((1.0 - u_t) / (1.0 - prod));
        k->bias = (float)(1.0 - pow(c->beta_2, t));
        k->kernel = OPTIM_KERNEL_NADAM;
        break;
    }
    case OPTIMIZER_ADAMAX:
        k->bias = (float)(1.0 - pow(c->beta_1, (double)(step < 0 ? 0 : step) + 1.0));
        k->kernel = OPTIM_KERNEL_ADAMAX;
        break;
    case OPTIMIZER_LION:
        k->kernel = OPTIM_KERNEL_LION;
        break;
    case OPTIMIZER_FTRL:
        k->kernel = c->learning_rate_power == -0.5 ? OPTIM_KERNEL_FTRL_SQRT : OPTIM_KERNEL_FTRL;
        break;
    case OPTIMIZER_ADAGRAD:
        k->kernel = OPTIM_KERNEL_ADAGRAD;
        break;
    case OPTIMIZER_RMSPROP:
    case OPTIMIZER_KINDS:
    default:
        if (c->centered)
            k->kernel = c->momentum > 0 ? OPTIM_KERNEL_RMSPROP_CENTERED_MOMENTUM
                                        : OPTIM_KERNEL_RMSPROP_CENTERED;
        else
            k->kernel = c->momentum > 0 ? OPTIM_KERNEL_RMSPROP_MOMENTUM : OPTIM_KERNEL_RMSPROP;
        break;
    }
}

void optimizer_apply_dense(const optimizer_config_t *c, int64_t step, float *params,
                           const float *grad, float *slots, size_t n)
{
    optimizer_apply_dense_part(c, step, params, grad, slots, n, 0, n, NULL);
}

void optimizer_apply_dense_part(const optimizer_config_t *c, int64_t step, float *params,
                                const float *grad, float *slots, size_t n, size_t first,
                                size_t count, float *out)
{
    if (count == 0 || first >= n || count > n - first)
        return;
    optimizer_apply_dense_at(c, step, params + first, grad + first,
                             slots != NULL ? slots + first : NULL, n, count,
                             out != NULL ? out + first : NULL);
}

void optimizer_apply_dense_at(const optimizer_config_t *c, int64_t step, float *params,
                              const unaligned_float_t *grad, float *slots, size_t stride,
                              size_t count, float *out)
{
    plan_t k;

    if (count == 0)
        return;
    plan_init(c, step, &k);
    run_kernel(&k, params, grad, slots, stride, count, out);
}

void optimizer_apply_dense_pieces(const optimizer_config_t *c, int64_t step, float *params,
                                  const pieces_t *grad, size_t at, float *slots, size_t stride,
                                  size_t count, float *out)
{
    pieces_walk_t w;
    const void *g;
    size_t n, off = 0;
    plan_t k;

    if (count == 0)
        return;
    plan_init(c, step, &k);
    for (pieces_walk_init(&w, grad, at, sizeof(float), count); pieces_walk_next(&w, &g, &n);
         off += n)
        run_kernel(&k, params + off, g, slots != NULL ? slots + off : NULL, stride, n,
                   out != NULL ? out + off : NULL);
}

/* ---- checks before an update -------------------------------------------------------------------
 */

/* The most slot arrays any kernel keeps (AMSGrad; centered RMSprop with momentum). */
#define MAX_SLOTS OPTIMIZER_MAX_SLOTS
/* Elements a dry run computes at a time, on copies that stay in L1. */
#define TRIAL 256

size_t optimizer_first_non_finite(const unaligned_float_t *v, size_t n)
{
    uint32_t bad = 0;

    /* A branch-free pass that vectorizes; the search runs only when something is there. */
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &v[i], sizeof(b));
        bad |= (uint32_t)((b & 0x7f800000u) == 0x7f800000u);
    }
    for (size_t i = 0; bad && i < n; i++)
        if (!isfinite(v[i]))
            return i;
    return n;
}

static bool all_finite(const float *v, size_t n)
{
    return optimizer_first_non_finite(v, n) == n;
}

/* Runs the kernel on copies of params[0..n) and their slots (slot k at slots[k * stride]) and
 * returns the index of the first element whose parameter or slot would stop being finite, or n.
 * The copies go through the very kernel the update uses, so the verdict is the update's own. */
static size_t trial(const plan_t *k, size_t n_slots, const float *params,
                    const unaligned_float_t *grad, const float *slots, size_t stride, size_t n)
{
    float p[TRIAL], sl[MAX_SLOTS * TRIAL];
    bool ok;

    for (size_t b = 0; b < n; b += TRIAL) {
        size_t m = n - b < TRIAL ? n - b : TRIAL;
        memcpy(p, params + b, m * sizeof(float));
        for (size_t j = 0; j < n_slots; j++)
            memcpy(sl + j * TRIAL, slots + j * stride + b, m * sizeof(float));
        run_kernel(k, p, grad + b, sl, TRIAL, m, NULL);
        ok = all_finite(p, m);
        for (size_t j = 0; ok && j < n_slots; j++)
            ok = all_finite(sl + j * TRIAL, m);
        if (ok)
            continue;
        for (size_t i = 0; i < m; i++) {
            ok = isfinite(p[i]);
            for (size_t j = 0; ok && j < n_slots; j++)
                ok = isfinite(sl[j * TRIAL + i]);
            if (!ok)
                return b + i;
        }
    }
    return n;
}

size_t optimizer_check_dense(const optimizer_config_t *c, int64_t step, const float *params,
                             const float *grad, const float *slots, size_t n)
{
    return optimizer_check_dense_at(c, step, params, grad, slots, n, n);
}

size_t optimizer_check_dense_at(const optimizer_config_t *c, int64_t step, const float *params,
                                const unaligned_float_t *grad, const float *slots, size_t stride,
                                size_t count)
{
    plan_t k;

    if (count == 0)
        return count;
    plan_init(c, step, &k);
    return trial(&k, optimizer_slot_count(c), params, grad, slots, stride, count);
}

size_t optimizer_check_dense_pieces(const optimizer_config_t *c, int64_t step, const float *params,
                                    const pieces_t *grad, size_t at, const float *slots,
                                    size_t stride, size_t count)
{
    pieces_walk_t w;
    const void *g;
    size_t n, off = 0, bad, n_slots = optimizer_slot_count(c);
    plan_t k;

    if (count == 0)
        return count;
    plan_init(c, step, &k);
    for (pieces_walk_init(&w, grad, at, sizeof(float), count); pieces_walk_next(&w, &g, &n);
         off += n)
        if ((bad = trial(&k, n_slots, params + off, g, slots != NULL ? slots + off : NULL, stride,
                         n)) < n)
            return off + bad;
    return count;
}

/* ---- bounds: proving an update safe without a dry run ------------------------------------------
 */

/* Every bound, and every intermediate the kernels compute, must stay below this: a factor of 4
 * under FLT_MAX covers the rounding of the few float operations between bound and result. */
#define BOUND_LIMIT ((double)FLT_MAX / 4)

double optimizer_max_abs(const unaligned_float_t *v, size_t n)
{
    int32_t m = isa()->max_abs_bits(v, n);
    float f;

    if (m >= 0x7f800000)
        return INFINITY;
    memcpy(&f, &m, sizeof(f));
    return f;
}

void optimizer_bounds_measure(const optimizer_config_t *c, const float *params, const float *slots,
                              size_t n, optimizer_bounds_t *ret)
{
    optimizer_bounds_measure_part(c, params, slots, n, 0, n, ret);
}

void optimizer_bounds_measure_part(const optimizer_config_t *c, const float *params,
                                   const float *slots, size_t n, size_t first, size_t count,
                                   optimizer_bounds_t *ret)
{
    size_t n_slots = optimizer_slot_count(c);

    *ret = (optimizer_bounds_t){.value = optimizer_max_abs(params + first, count)};
    for (size_t k = 0; k < n_slots && k < OPTIMIZER_MAX_SLOTS; k++)
        ret->slot[k] = optimizer_max_abs(slots + k * n + first, count);
}

/* The bounds after an Adam or AMSGrad step: m stays a convex mix of m and g, v of v and g^2, and
 * the step is at most alpha * |m| / eps. next->value holds the value's bound after the weight
 * decay; the step is added to it. */
static bool adam_bounds(const plan_t *k, bool ams, double G, const optimizer_bounds_t *b,
                        optimizer_bounds_t *next)
{
    double M = fmax(b->slot[0], G), V = fmax(b->slot[1], G * G);

    if (!(k->epsilon > 0) || G + b->slot[0] > BOUND_LIMIT || G * G + b->slot[1] > BOUND_LIMIT)
        return false;
    next->slot[0] = M;
    next->slot[1] = V;
    if (ams)
        next->slot[2] = fmax(b->slot[2], V);
    next->value += M * fabs((double)k->alpha) / k->epsilon;
    return M * fabs((double)k->alpha) <= BOUND_LIMIT;
}

/* Nadam and Adamax: m a convex mix of m and g; Nadam's v of v and g^2, Adamax's u at most
 * max(u, |g|). Nadam's step is at most (|nadam_m| M + |nadam_g| G) lr / eps (the square root is
 * not negative), Adamax's lr M / (bias eps). */
static bool adamax_nadam_bounds(const optimizer_config_t *c, const plan_t *k, double G,
                                const optimizer_bounds_t *b, optimizer_bounds_t *next)
{
    double M = fmax(b->slot[0], G), lr = fabs((double)k->lr), step;

    double numerator;

    if (!(k->epsilon > 0) || G + b->slot[0] > BOUND_LIMIT || G * G + b->slot[1] > BOUND_LIMIT)
        return false;
    next->slot[0] = M;
    /* the kernels' products before the division must stay finite too: Nadam's (m_hat * lr),
     * Adamax's lr * m */
    if (c->kind == OPTIMIZER_NADAM) {
        next->slot[1] = fmax(b->slot[1], G * G);
        numerator = (fabs((double)k->nadam_m) * M + fabs((double)k->nadam_g) * G) * lr;
        step = numerator / k->epsilon;
    } else {
        next->slot[1] = fmax(b->slot[1], G);
        if (!(k->bias > 0))
            return false;
        numerator = lr * M;
        step = numerator / ((double)k->bias * k->epsilon);
    }
    next->value += step;
    return numerator <= BOUND_LIMIT && step <= BOUND_LIMIT;
}

/* Adagrad and RMSprop without centering: the accumulator grows by at most g^2 (RMSprop keeps a
 * convex mix), the step is at most lr * |g| / sqrt(eps). */
static bool square_bounds(const optimizer_config_t *c, const plan_t *k, double G,
                          const optimizer_bounds_t *b, optimizer_bounds_t *next)
{
    double step = (double)k->lr * G / sqrt((double)k->epsilon);

    if (!(k->epsilon > 0) || G * G > BOUND_LIMIT || (double)k->lr * G > BOUND_LIMIT)
        return false;
    next->slot[0] = c->kind == OPTIMIZER_ADAGRAD ? b->slot[0] + G * G : fmax(b->slot[0], G * G);
    if (c->kind == OPTIMIZER_RMSPROP && c->momentum > 0) {
        next->slot[1] = (double)k->momentum * b->slot[1] + step;
        step = next->slot[1];
    }
    next->value += step;
    return next->slot[0] <= BOUND_LIMIT;
}

bool optimizer_bounds_step(const optimizer_config_t *c, int64_t step, double gmax,
                           const optimizer_bounds_t *b, optimizer_bounds_t *ret_next)
{
    optimizer_bounds_t next = *b;
    double lr_g;
    plan_t k;
    bool ok;

    if (!(gmax <= BOUND_LIMIT))
        return false;
    plan_init(c, step, &k);
    if (!isfinite(k.lr) || !isfinite(k.alpha))
        return false;
    lr_g = (double)k.lr * gmax;
    /* The weight decay first: |w - w d| <= |w| max(1, |1 - d|). */
    next.value = b->value * fmax(1.0, fabs(1.0 - (double)k.decay));
    switch (c->kind) {
    case OPTIMIZER_SGD:
        /* velocity = mu * velocity - lr * g; w += velocity (Nesterov: + mu * velocity - lr * g) */
        if (c->momentum != 0.0) {
            next.slot[0] = (double)k.momentum * b->slot[0] + lr_g;
            next.value += next.slot[0] + (c->nesterov ? lr_g : 0);
        } else {
            next.value += lr_g;
        }
        ok = lr_g <= BOUND_LIMIT && next.slot[0] <= BOUND_LIMIT;
        break;
    case OPTIMIZER_ADAM:
    case OPTIMIZER_ADAMW:
        ok = adam_bounds(&k, c->amsgrad, gmax, b, &next);
        break;
    case OPTIMIZER_NADAM:
    case OPTIMIZER_ADAMAX:
        ok = adamax_nadam_bounds(c, &k, gmax, b, &next);
        break;
    case OPTIMIZER_LION:
        /* the step is lr, the momentum a convex mix of momentum and gradient */
        next.slot[0] = fmax(b->slot[0], gmax);
        next.value += fabs((double)k.lr);
        ok = true;
        break;
    case OPTIMIZER_FTRL:
        ok = false; /* the new value is a quotient no simple bound covers: the dry run decides */
        break;
    case OPTIMIZER_ADAGRAD:
        ok = square_bounds(c, &k, gmax, b, &next);
        break;
    case OPTIMIZER_RMSPROP:
    case OPTIMIZER_KINDS:
    default:
        /* Centered RMSprop takes the square root of velocity - average^2, which rounding can
         * make negative: no bound proves it, the dry run decides. */
        ok = !c->centered && square_bounds(c, &k, gmax, b, &next);
        break;
    }
    if (!ok || !(next.value <= BOUND_LIMIT))
        return false;
    *ret_next = next;
    return true;
}

/* ---- row updates -------------------------------------------------------------------------------
 */

typedef struct {
    int64_t row;
    size_t pos; /* which gradient row */
} row_ref_t;

static int row_ref_cmp(const void *a, const void *b)
{
    const row_ref_t *x = a, *y = b;

    if (x->row != y->row)
        return x->row < y->row ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

size_t optimizer_rows_scratch_size(size_t n_idx, size_t row_len)
{
    if (n_idx > SIZE_MAX / sizeof(row_ref_t) || row_len > SIZE_MAX / sizeof(float) ||
        n_idx * sizeof(row_ref_t) > SIZE_MAX - row_len * sizeof(float))
        return SIZE_MAX;
    return n_idx * sizeof(row_ref_t) + row_len * sizeof(float);
}

/* sum = the gradient rows refs[0..n_refs) added in order. */
static void sum_rows(float *restrict sum, const float *restrict grads, const row_ref_t *refs,
                     size_t n_refs, size_t row_len)
{
    const float *first = grads + refs[0].pos * row_len;

    for (size_t i = 0; i < row_len; i++)
        sum[i] = first[i];
    for (size_t r = 1; r < n_refs; r++) {
        const float *g = grads + refs[r].pos * row_len;
        for (size_t i = 0; i < row_len; i++)
            sum[i] += g[i];
    }
}

/* Checks the indices and sorts them into scratch (allocating it when NULL: *ret_owned then
 * holds what to free). */
static status_t rows_prepare(size_t n_rows, size_t row_len, const int64_t *indices, size_t n_idx,
                             void **scratch, void **ret_owned, status_msg_t *err)
{
    size_t bytes;
    row_ref_t *refs;

    *ret_owned = NULL;
    /* Every index is checked before anything is touched, so a bad push changes nothing. */
    for (size_t j = 0; j < n_idx; j++)
        if (indices[j] < 0 || (uint64_t)indices[j] >= (uint64_t)n_rows)
            return status_fail(err, STATUS_OUT_OF_RANGE,
                               "optimizer: row index %" PRId64 " (position %zu of %zu) is "
                               "outside [0, %zu)",
                               indices[j], j, n_idx, n_rows);
    if (n_idx == 0 || row_len == 0)
        return STATUS_OK;
    if (n_rows > SIZE_MAX / row_len)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "optimizer: %zu rows of %zu floats overflow size_t", n_rows, row_len);
    bytes = optimizer_rows_scratch_size(n_idx, row_len);
    if (*scratch == NULL) {
        if (bytes == SIZE_MAX || (*ret_owned = malloc(bytes)) == NULL)
            return status_fail(err, STATUS_NO_MEMORY,
                               "optimizer: no memory for the scratch of %zu row indices", n_idx);
        *scratch = *ret_owned;
    }
    /* Sorting groups the duplicates (summed in the order they came, since pos breaks ties) and
     * walks the tensor in address order. */
    refs = *scratch;
    for (size_t j = 0; j < n_idx; j++)
        refs[j] = (row_ref_t){indices[j], j};
    qsort(refs, n_idx, sizeof(refs[0]), row_ref_cmp);
    return STATUS_OK;
}

/* Updates each touched row once (dry: tries it on copies, and returns the first element, counted
 * in gradient-row order, that would not stay finite; else n_idx * row_len). */
static size_t rows_walk(const plan_t *k, size_t n_slots, bool dry, float *params, size_t n_rows,
                        size_t row_len, const float *grads, size_t n_idx, float *slots,
                        void *scratch)
{
    row_ref_t *refs = scratch;
    float *sum = (float *)(refs + n_idx);
    size_t stride = n_rows * row_len;

    for (size_t j = 0, end; j < n_idx; j = end) {
        const float *g = grads + refs[j].pos * row_len;
        size_t off = (size_t)refs[j].row * row_len, bad;

        for (end = j + 1; end < n_idx && refs[end].row == refs[j].row; end++)
            ;
        if (end - j > 1) {
            sum_rows(sum, grads, refs + j, end - j, row_len);
            g = sum;
        }
        if (!dry) {
            run_kernel(k, params + off, g, slots == NULL ? NULL : slots + off, stride, row_len,
                       NULL);
            continue;
        }
        bad =
            trial(k, n_slots, params + off, g, slots == NULL ? NULL : slots + off, stride, row_len);
        if (bad < row_len)
            return refs[j].pos * row_len + bad;
    }
    return n_idx * row_len;
}

/* Prepares the indices and walks the rows, for real or dry; *ret_bad as rows_walk's result. */
static status_t rows_run(const optimizer_config_t *c, int64_t step, bool dry, float *params,
                         size_t n_rows, size_t row_len, const int64_t *indices, const float *grads,
                         size_t n_idx, float *slots, void *scratch, size_t *ret_bad,
                         status_msg_t *err)
{
    void *owned;
    plan_t k;

    *ret_bad = n_idx * row_len;
    STATUS_CHECK(rows_prepare(n_rows, row_len, indices, n_idx, &scratch, &owned, err));
    if (n_idx == 0 || row_len == 0)
        return STATUS_OK;
    plan_init(c, step, &k);
    *ret_bad = rows_walk(&k, dry ? optimizer_slot_count(c) : 0, dry, params, n_rows, row_len, grads,
                         n_idx, slots, scratch);
    free(owned);
    return STATUS_OK;
}

status_t optimizer_apply_rows(const optimizer_config_t *c, int64_t step, float *params,
                              size_t n_rows, size_t row_len, const int64_t *indices,
                              const float *grads, size_t n_idx, float *slots, void *scratch,
                              status_msg_t *err)
{
    size_t bad;

    return rows_run(c, step, false, params, n_rows, row_len, indices, grads, n_idx, slots, scratch,
                    &bad, err);
}

status_t optimizer_check_rows(const optimizer_config_t *c, int64_t step, const float *params,
                              size_t n_rows, size_t row_len, const int64_t *indices,
                              const float *grads, size_t n_idx, const float *slots, void *scratch,
                              size_t *ret_bad, status_msg_t *err)
{
    /* A dry walk only reads params and slots. */
    return rows_run(c, step, true, (float *)params, n_rows, row_len, indices, grads, n_idx,
                    (float *)slots, scratch, ret_bad, err);
}

/* ---- slots -------------------------------------------------------------------------------------
 */

size_t optimizer_slot_count(const optimizer_config_t *c)
{
    switch (c->kind) {
    case OPTIMIZER_SGD:
        return c->momentum != 0.0 ? 1 : 0;
    case OPTIMIZER_ADAM:
    case OPTIMIZER_ADAMW:
        return c->amsgrad ? 3 : 2;
    case OPTIMIZER_ADAGRAD:
    case OPTIMIZER_LION:
        return 1;
    case OPTIMIZER_RMSPROP:
        return 1 + (c->momentum > 0 ? 1 : 0) + (c->centered ? 1 : 0);
    case OPTIMIZER_NADAM:
    case OPTIMIZER_ADAMAX:
    case OPTIMIZER_FTRL:
        return 2;
    case OPTIMIZER_KINDS:
        break;
    }
    return 0;
}

void optimizer_slots_init(const optimizer_config_t *c, float *slots, size_t n)
{
    size_t total = optimizer_slot_count(c) * n;
    /* Keras starts every slot at zero except Adagrad's and Ftrl's accumulators (Ftrl's first
     * slot; its linear slot starts at zero). */
    bool acc = c->kind == OPTIMIZER_ADAGRAD || c->kind == OPTIMIZER_FTRL;
    float v = acc ? (float)c->initial_accumulator_value : 0.0f;

    for (size_t i = 0; i < total; i++)
        slots[i] = c->kind == OPTIMIZER_FTRL && i >= n ? 0.0f : v;
}

/* ---- learning rate -----------------------------------------------------------------------------
 */

static double schedule_rate(const lr_schedule_t *s, int64_t step)
{
    switch (s->kind) {
    case LR_CONSTANT:
        return s->lr;
    case LR_LINEAR_WARMUP:
        /* CosineDecay's _warmup_function: (target - initial) * step / warmup_steps + initial
         * while step < warmup_steps. */
        if (step < s->warmup_steps)
            return (s->lr - s->initial_lr) * ((double)step / (double)s->warmup_steps) +
                   s->initial_lr;
        return s->lr;
    case LR_EXPONENTIAL_DECAY: {
        /* ExponentialDecay: initial * rate ^ (step / decay_steps), the exponent floored when
         * staircase. */
        double p = (double)step / (double)s->decay_steps;
        if (s->staircase)
            p = floor(p);
        return s->initial_lr * pow(s->decay_rate, p);
    }
    case LR_PIECEWISE_CONSTANT: {
        /* PiecewiseConstantDecay: values[0] while step <= boundaries[0], values[i] while
         * boundaries[i-1] < step <= boundaries[i], the last value after the last boundary. */
        size_t i = 0;
        while (i < s->n_boundaries && step > s->boundaries[i])
            i++;
        return s->values[i];
    }
    }
    return s->lr;
}

double optimizer_learning_rate(const optimizer_config_t *c, int64_t step)
{
    return schedule_rate(&c->schedule, step < 0 ? 0 : step) * c->lr_scale;
}

/* ---- configuration -----------------------------------------------------------------------------
 */

void optimizer_config_default(optimizer_kind_t kind, optimizer_config_t *c)
{
    *c = (optimizer_config_t){
        .kind = kind,
        .schedule = {.kind = LR_CONSTANT, .lr = kind == OPTIMIZER_SGD ? 0.01 : 0.001},
        .lr_scale = 1.0,
        .momentum = 0.0,
        .nesterov = false,
        .beta_1 = 0.9,
        .beta_2 = 0.999,
        .amsgrad = false,
        .epsilon = 1e-7,
        .initial_accumulator_value = 0.1,
        .rho = 0.9,
        .centered = false,
        .learning_rate_power = -0.5,
        .weight_decay = kind == OPTIMIZER_ADAMW ? 0.004 : 0.0,
    };
    if (kind == OPTIMIZER_LION)
        c->beta_2 = 0.99;
}

/* The comparisons are written so that NaN fails them. The kernels compute in float32, so a
 * value is checked in the type that uses it: finite means at most FLT_MAX, and a positive value
 * that float32 would round to 0 or a subnormal is refused too. */
static status_t need_positive(double v, const char *field, status_msg_t *err)
{
    if (!(v >= FLT_MIN) || !(v <= FLT_MAX))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "optimizer.%s must be > 0, got %g (float32, which the kernels use, "
                           "holds %g to %g)",
                           field, v, (double)FLT_MIN, (double)FLT_MAX);
    return STATUS_OK;
}

static status_t need_non_negative(double v, const char *field, status_msg_t *err)
{
    if (!(v >= 0.0) || !(v <= FLT_MAX))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "optimizer.%s must be >= 0, got %g (float32, which the kernels use, "
                           "holds at most %g)",
                           field, v, (double)FLT_MAX);
    return STATUS_OK;
}

/* Epsilon is added in float32: a positive value too small for it would silently become 0 (and
 * 0/0 in Adam's first step), so it must be 0 or a normal float32. */
static status_t need_epsilon(double v, status_msg_t *err)
{
    STATUS_CHECK(need_non_negative(v, "epsilon", err));
    if (v > 0 && v < FLT_MIN)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "optimizer.epsilon %g is below float32's smallest normal number %g, "
                           "which the kernels use: give 0 or at least that",
                           v, (double)FLT_MIN);
    return STATUS_OK;
}

/* v in [0, 1], or [0, 1) when open. */
static status_t need_fraction(double v, bool open, const char *field, status_msg_t *err)
{
    if (!(v >= 0.0) || (open ? !(v < 1.0) : !(v <= 1.0)))
        return status_fail(err, STATUS_BAD_CONFIG, "optimizer.%s must be in [0, 1%s, got %g", field,
                           open ? ")" : "]", v);
    return STATUS_OK;
}

static status_t need_steps(int64_t v, const char *field, status_msg_t *err)
{
    if (v <= 0)
        return status_fail(err, STATUS_BAD_CONFIG, "optimizer.%s must be > 0, got %" PRId64, field,
                           v);
    return STATUS_OK;
}

static status_t validate_piecewise(const lr_schedule_t *s, status_msg_t *err)
{
    char field[64];

    if (s->n_boundaries < 1 || s->n_boundaries > LR_MAX_PIECES)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "optimizer.schedule.n_boundaries must be in [1, %d], got %zu",
                           LR_MAX_PIECES, s->n_boundaries);
    for (size_t i = 0; i < s->n_boundaries; i++) {
        if (i == 0 && s->boundaries[0] < 0)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "optimizer.schedule.boundaries[0] must be >= 0, got %" PRId64,
                               s->boundaries[0]);
        if (i > 0 && s->boundaries[i] <= s->boundaries[i - 1])
            return status_fail(err, STATUS_BAD_CONFIG,
                               "optimizer.schedule.boundaries must be strictly increasing, got "
                               "boundaries[%zu] = %" PRId64 " after %" PRId64,
                               i, s->boundaries[i], s->boundaries[i - 1]);
    }
    for (size_t i = 0; i <= s->n_boundaries; i++) {
        snprintf(field, sizeof(field), "schedule.values[%zu]", i);
        STATUS_CHECK(need_positive(s->values[i], field, err));
    }
    return STATUS_OK;
}

static status_t validate_schedule(const lr_schedule_t *s, status_msg_t *err)
{
    switch (s->kind) {
    case LR_CONSTANT:
        return need_positive(s->lr, "schedule.lr", err);
    case LR_LINEAR_WARMUP:
        STATUS_CHECK(need_positive(s->lr, "schedule.lr", err));
        STATUS_CHECK(need_non_negative(s->initial_lr, "schedule.initial_lr", err));
        return need_steps(s->warmup_steps, "schedule.warmup_steps", err);
    case LR_EXPONENTIAL_DECAY:
        STATUS_CHECK(need_positive(s->initial_lr, "schedule.initial_lr", err));
        STATUS_CHECK(need_steps(s->decay_steps, "schedule.decay_steps", err));
        STATUS_CHECK(need_positive(s->decay_rate, "schedule.decay_rate", err));
        /* A rate above 1 grows the learning rate without bound, past float32 in time. */
        if (s->decay_rate > 1.0)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "optimizer.schedule.decay_rate must be at most 1 (a decay), got %g",
                               s->decay_rate);
        return STATUS_OK;
    case LR_PIECEWISE_CONSTANT:
        return validate_piecewise(s, err);
    }
    return status_fail(err, STATUS_BAD_CONFIG, "optimizer.schedule.kind: unknown kind %d",
                       (int)s->kind);
}

/* The largest rate the schedule reaches, with lr_scale, must be a float32 too. */
static status_t check_peak_rate(const optimizer_config_t *c, status_msg_t *err)
{
    const lr_schedule_t *s = &c->schedule;
    double peak = s->lr > s->initial_lr ? s->lr : s->initial_lr;

    if (s->kind == LR_EXPONENTIAL_DECAY)
        peak = s->initial_lr;
    for (size_t i = 0; s->kind == LR_PIECEWISE_CONSTANT && i <= s->n_boundaries; i++)
        peak = i == 0 || s->values[i] > peak ? s->values[i] : peak;
    if (!(peak * c->lr_scale <= FLT_MAX))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "optimizer: the learning rate reaches %g, beyond float32's %g",
                           peak * c->lr_scale, (double)FLT_MAX);
    return STATUS_OK;
}

/* weight_decay and the clipping options, which every kind takes. */
static status_t validate_common(const optimizer_config_t *c, status_msg_t *err)
{
    int clips = (c->clipnorm != 0) + (c->global_clipnorm != 0) + (c->clipvalue != 0);

    STATUS_CHECK(need_non_negative(c->weight_decay, "weight_decay", err));
    STATUS_CHECK(need_non_negative(c->clipnorm, "clipnorm", err));
    STATUS_CHECK(need_non_negative(c->global_clipnorm, "global_clipnorm", err));
    STATUS_CHECK(need_non_negative(c->clipvalue, "clipvalue", err));
    if (clips > 1)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "optimizer: give at most one of clipnorm, global_clipnorm and "
                           "clipvalue (as Keras)");
    return STATUS_OK;
}

static status_t validate_ftrl(const optimizer_config_t *c, status_msg_t *err)
{
    if (!(c->learning_rate_power <= 0.0) || !(c->learning_rate_power >= -FLT_MAX))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "optimizer.learning_rate_power must be <= 0, got %g",
                           c->learning_rate_power);
    STATUS_CHECK(need_non_negative(c->initial_accumulator_value, "initial_accumulator_value", err));
    STATUS_CHECK(need_non_negative(c->l1, "l1_regularization_strength", err));
    STATUS_CHECK(need_non_negative(c->l2, "l2_regularization_strength", err));
    STATUS_CHECK(need_non_negative(c->l2_shrinkage, "l2_shrinkage_regularization_strength", err));
    return need_non_negative(c->beta, "beta", err);
}

status_t optimizer_config_validate(const optimizer_config_t *c, status_msg_t *err)
{
    STATUS_CHECK(validate_schedule(&c->schedule, err));
    STATUS_CHECK(need_positive(c->lr_scale, "lr_scale", err));
    STATUS_CHECK(check_peak_rate(c, err));
    STATUS_CHECK(validate_common(c, err));
    switch (c->kind) {
    case OPTIMIZER_SGD:
        /* Keras's SGD accepts momentum in [0, 1]. */
        return need_fraction(c->momentum, false, "momentum", err);
    case OPTIMIZER_ADAM:
    case OPTIMIZER_ADAMW:
    case OPTIMIZER_NADAM:
    case OPTIMIZER_ADAMAX:
        STATUS_CHECK(need_fraction(c->beta_1, true, "beta_1", err));
        STATUS_CHECK(need_fraction(c->beta_2, true, "beta_2", err));
        return need_epsilon(c->epsilon, err);
    case OPTIMIZER_LION:
        /* Keras refuses beta_1 outside (0, 1] (at 0 Lion is sign SGD) */
        if (!(c->beta_1 > 0.0) || !(c->beta_1 <= 1.0))
            return status_fail(err, STATUS_BAD_CONFIG, "optimizer.beta_1 must be in (0, 1], got %g",
                               c->beta_1);
        return need_fraction(c->beta_2, false, "beta_2", err);
    case OPTIMIZER_FTRL:
        return validate_ftrl(c, err);
    case OPTIMIZER_KINDS:
        break;
    case OPTIMIZER_ADAGRAD:
        STATUS_CHECK(
            need_non_negative(c->initial_accumulator_value, "initial_accumulator_value", err));
        return need_epsilon(c->epsilon, err);
    case OPTIMIZER_RMSPROP:
        STATUS_CHECK(need_fraction(c->rho, true, "rho", err));
        STATUS_CHECK(need_fraction(c->momentum, false, "momentum", err));
        return need_epsilon(c->epsilon, err);
    }
    return status_fail(err, STATUS_BAD_CONFIG, "optimizer.kind: unknown kind %d", (int)c->kind);
}

const char *optimizer_kind_name(optimizer_kind_t kind)
{
    switch (kind) {
    case OPTIMIZER_SGD:
        return "sgd";
    case OPTIMIZER_ADAM:
        return "adam";
    case OPTIMIZER_ADAGRAD:
        return "adagrad";
    case OPTIMIZER_RMSPROP:
        return "rmsprop";
    case OPTIMIZER_ADAMW:
        return "adamw";
    case OPTIMIZER_NADAM:
        return "nadam";
    case OPTIMIZER_ADAMAX:
        return "adamax";
    case OPTIMIZER_LION:
        return "lion";
    case OPTIMIZER_FTRL:
        return "ftrl";
    case OPTIMIZER_KINDS:
        break;
    }
    return "unknown";
}

static const char *const keras_classes[OPTIMIZER_KINDS] = {
    [OPTIMIZER_SGD] = "SGD",         [OPTIMIZER_ADAM] = "Adam",   [OPTIMIZER_ADAGRAD] = "Adagrad",
    [OPTIMIZER_RMSPROP] = "RMSprop", [OPTIMIZER_ADAMW] = "AdamW", [OPTIMIZER_NADAM] = "Nadam",
    [OPTIMIZER_ADAMAX] = "Adamax",   [OPTIMIZER_LION] = "Lion",   [OPTIMIZER_FTRL] = "Ftrl",
};

const char *optimizer_keras_class(optimizer_kind_t kind)
{
    return (unsigned)kind < OPTIMIZER_KINDS ? keras_classes[kind] : "unknown";
}

const char *optimizer_keras_name(optimizer_kind_t kind)
{
    /* Keras names an optimizer after its class in snake case: AdamW is adam_w. */
    return kind == OPTIMIZER_ADAMW ? "adam_w" : optimizer_kind_name(kind);
}

bool optimizer_config_equal(const optimizer_config_t *a, const optimizer_config_t *b)
{
    const lr_schedule_t *x = &a->schedule, *y = &b->schedule;

    if (x->kind != y->kind || x->lr != y->lr || x->initial_lr != y->initial_lr ||
        x->warmup_steps != y->warmup_steps || x->decay_steps != y->decay_steps ||
        x->decay_rate != y->decay_rate || x->staircase != y->staircase ||
        x->n_boundaries != y->n_boundaries)
        return false;
    for (size_t i = 0; i < x->n_boundaries && i < LR_MAX_PIECES; i++)
        if (x->boundaries[i] != y->boundaries[i] || x->values[i] != y->values[i] ||
            x->values[i + 1] != y->values[i + 1])
            return false;
    return a->kind == b->kind && a->lr_scale == b->lr_scale && a->momentum == b->momentum &&
           a->nesterov == b->nesterov && a->beta_1 == b->beta_1 && a->beta_2 == b->beta_2 &&
           a->amsgrad == b->amsgrad && a->epsilon == b->epsilon &&
           a->initial_accumulator_value == b->initial_accumulator_value && a->rho == b->rho &&
           a->centered == b->centered && a->learning_rate_power == b->learning_rate_power &&
           a->l1 == b->l1 && a->l2 == b->l2 && a->l2_shrinkage == b->l2_shrinkage &&
           a->beta == b->beta && a->weight_decay == b->weight_decay && a->clipnorm == b->clipnorm &&
           a->global_clipnorm == b->global_clipnorm && a->clipvalue == b->clipvalue;
}

/* ---- clipping ----------------------------------------------------------------------------------
 */

bool optimizer_clips(const optimizer_config_t *c)
{
    return c->clipnorm > 0 || c->global_clipnorm > 0 || c->clipvalue > 0;
}

bool optimizer_clips_globally(const optimizer_config_t *c)
{
    return c->clipnorm == 0 && c->global_clipnorm > 0;
}

static double sum_squares(const float *g, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    return s;
}

static void scale(float *g, size_t n, float f)
{
    for (size_t i = 0; i < n; i++)
        g[i] *= f;
}

void optimizer_clip(const optimizer_config_t *c, float *const *grads, const size_t *lens,
                    size_t count)
{
    /* Keras's order of precedence: clipnorm, then global_clipnorm, then clipvalue. */
    if (c->clipnorm > 0) {
        /* g * clipnorm / max(||g||, clipnorm): unchanged below the norm; an infinite norm
         * makes the finite elements 0 and the others NaN, a NaN norm every element NaN */
        for (size_t t = 0; t < count; t++) {
            double norm = sqrt(sum_squares(grads[t], lens[t]));
            if (!(norm <= c->clipnorm))
                scale(grads[t], lens[t], (float)(c->clipnorm / norm));
        }
    } else if (c->global_clipnorm > 0) {
        /* clip_by_global_norm: scale = clip * min(1 / norm, 1 / clip), NaN for a non-finite
         * norm */
        double sq = 0, norm;
        for (size_t t = 0; t < count; t++)
            sq += sum_squares(grads[t], lens[t]);
        norm = sqrt(sq);
        if (!isfinite(norm))
            for (size_t t = 0; t < count; t++)
                scale(grads[t], lens[t], NAN);
        else if (norm > c->global_clipnorm)
            for (size_t t = 0; t < count; t++)
                scale(grads[t], lens[t], (float)(c->global_clipnorm / norm));
    } else if (c->clipvalue > 0) {
        float v = (float)c->clipvalue;
        for (size_t t = 0; t < count; t++)
            for (size_t i = 0; i < lens[t]; i++) {
                float x = grads[t][i];
                grads[t][i] = x > v ? v : (x < -v ? -v : x);
            }
    }
}

double optimizer_nadam_u_product(const optimizer_config_t *c, int64_t step)
{
    /* prod over i = 1..step+1 of beta_1 (1 - 0.5 * 0.96^i): past i = 1000, 0.96^i is below
     * 1e-17 and each factor is beta_1 in double, so the rest is a power. */
    int64_t t = (step < 0 ? 0 : step) + 1, direct = t < 1000 ? t : 1000;
    double prod = 1.0, d = 1.0;

    for (int64_t i = 1; i <= direct; i++) {
        d *= 0.96;
        prod *= c->beta_1 * (1.0 - 0.5 * d);
    }
    return t > direct ? prod * pow(c->beta_1, (double)(t - direct)) : prod;
}

const char *optimizer_slot_name(const optimizer_config_t *c, size_t k)
{
    static const char *const adam[] = {"momentum", "velocity", "velocity_hat"};

    if (k >= optimizer_slot_count(c))
        return NULL;
    switch (c->kind) {
    case OPTIMIZER_SGD:
        return "momentum";
    case OPTIMIZER_ADAM:
    case OPTIMIZER_ADAMW:
        return adam[k];
    case OPTIMIZER_ADAGRAD:
        return "accumulator";
    case OPTIMIZER_NADAM:
        return k == 0 ? "momentum" : "velocity";
    case OPTIMIZER_ADAMAX:
        return k == 0 ? "momentum" : "norm";
    case OPTIMIZER_LION:
        return "momentum";
    case OPTIMIZER_FTRL:
        return k == 0 ? "accumulator" : "linear";
    case OPTIMIZER_KINDS:
        break;
    case OPTIMIZER_RMSPROP:
        /* velocity, then momentum when there is some, then average_gradient when centered */
        if (k == 0)
            return "velocity";
        return k == 1 && c->momentum > 0 ? "momentum" : "average_gradient";
    }
    return NULL;
}

size_t optimizer_keras_order(const optimizer_config_t *c, const bool *moving, size_t n,
                             size_t *param, size_t *slot)
{
    size_t k = optimizer_slot_count(c), count = 0;
    bool interleave = c->kind == OPTIMIZER_ADAM || c->kind == OPTIMIZER_ADAMW ||
                      c->kind == OPTIMIZER_NADAM || c->kind == OPTIMIZER_ADAMAX ||
                      c->kind == OPTIMIZER_FTRL;

    if (interleave)
        for (size_t i = 0; i < n; i++)
            for (size_t s = 0; s < 2 && !moving[i]; s++, count++) {
                param[count] = i;
                slot[count] = s;
            }
    for (size_t s = interleave ? 2 : 0; s < k; s++)
        for (size_t i = 0; i < n; i++)
            if (!moving[i]) {
                param[count] = i;
                slot[count++] = s;
            }
    return count;
}

float optimizer_momentum_power(float momentum, uint32_t batches)
{
    float r = 1;

    for (uint32_t b = 0; b < batches && r != 0 && momentum != 1; b++)
        r *= momentum;
    return r;
}
