/* The optimizers' element-wise loops (kernels.h), one build per instruction set: meson compiles
 * this file with -DOPTIM_ISA=base, and again with -mavx2 or -mavx512* and OPTIM_ISA=avx2 or
 * avx512 where the compiler can. The update rules are those of Keras 3, read from
 * keras-team/keras (keras/src/optimizers/sgd.py, adam.py, adagrad.py, rmsprop.py, nadam.py,
 * adamax.py, lion.py, ftrl.py; the weight decay of base_optimizer.py); each loop names its
 * formula. Element-wise work is in float, like a Keras float32 variable.
 *
 * Each loop is a plain pass over restrict-qualified arrays that the compiler vectorizes for the
 * build's instructions: the update, and the copy of the new value for a pull that follows
 * (`out`), are one pass over memory. Square roots vectorize only under -fno-math-errno, which
 * the project sets. Every build is compiled with -ffp-contract=off, so that no build fuses a
 * multiply and an add that another rounds twice: all give the same bits. */
#include "optim/kernels.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifndef OPTIM_ISA
#error "compile kernels.c with -DOPTIM_ISA=base, avx2 or avx512"
#endif

#define PASTE_(a, b) a##b
#define PASTE(a, b)  PASTE_(a, b)
#define STR_(a)      #a
#define STR(a)       STR_(a)

/* Each loop below is written once, with `has_out` and `has_decay` constants after inlining: the
 * kernels call it with and without the copy and the weight decay, and the compiler makes four
 * branch-free loops. */
#define KERNEL_WITH_OUT_(call)                                                                     \
    do {                                                                                           \
        if (out != NULL) {                                                                         \
            const bool has_out = true;                                                             \
            call;                                                                                  \
        } else {                                                                                   \
            const bool has_out = false;                                                            \
            call;                                                                                  \
        }                                                                                          \
    } while (0)
#define KERNEL_WITH_OUT(call)                                                                      \
    do {                                                                                           \
        if (k->decay != 0.0f) {                                                                    \
            const bool has_decay = true;                                                           \
            KERNEL_WITH_OUT_(call);                                                                \
        } else {                                                                                   \
            const bool has_decay = false;                                                          \
            KERNEL_WITH_OUT_(call);                                                                \
        }                                                                                          \
    } while (0)

/* Keras's decoupled weight decay, before the update: w -= w * weight_decay * lr. */
#define DECAY(i)                                                                                   \
    do {                                                                                           \
        if (has_decay)                                                                             \
            p[i] -= p[i] * dec;                                                                    \
    } while (0)

/* ---- SGD (sgd.py) -----------------------------------------------------------------------------
 */

/* w -= lr * g */
static inline void sgd_loop(float lr, float *restrict p, const unaligned_float_t *restrict g,
                            float *restrict out, bool has_out, float dec, bool has_decay, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        DECAY(i);
        p[i] -= g[i] * lr;
        if (has_out)
            out[i] = p[i];
    }
}

/* velocity = momentum * velocity - lr * g; w += velocity */
static inline void sgd_momentum_loop(float lr, float mu, float *restrict p,
                                     const unaligned_float_t *restrict g, float *restrict m,
                                     float *restrict out, bool has_out, float dec, bool has_decay,
                                     size_t n)
{
    for (size_t i = 0; i < n; i++) {
        DECAY(i);
        m[i] = m[i] * mu - g[i] * lr;
        p[i] += m[i];
        if (has_out)
            out[i] = p[i];
    }
}

/* velocity = momentum * velocity - lr * g; w += momentum * velocity - lr * g */
static inline void sgd_nesterov_loop(float lr, float mu, float *restrict p,
                                     const unaligned_float_t *restrict g, float *restrict m,
                                     float *restrict out, bool has_out, float dec, bool has_decay,
                                     size_t n)
{
    for (size_t i = 0; i < n; i++) {
        DECAY(i);
        m[i] = m[i] * mu - g[i] * lr;
        p[i] += m[i] * mu - g[i] * lr;
        if (has_out)
            out[i] = p[i];
    }
}

static void sgd_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g, float *s,
                       size_t stride, size_t n, float *out)
{
    (void)s;
    (void)stride;
    KERNEL_WITH_OUT(sgd_loop(k->lr, p, g, out, has_out, k->decay, has_decay, n));
}

static void sgd_momentum_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g,
                                float *s, size_t stride, size_t n, float *out)
{
    (void)stride;
    KERNEL_WITH_OUT(
        sgd_momentum_loop(k->lr, k->momentum, p, g, s, out, has_out, k->decay, has_decay, n));
}

static void sgd_nesterov_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g,
                                float *s, size_t stride, size_t n, float *out)
{
    (void)stride;
    KERNEL_WITH_OUT(
        sgd_nesterov_loop(k->lr, k->momentum, p, g, s, out, has_out, k->decay, has_decay, n));
}

/* ---- Adam (adam.py) ---------------------------------------------------------------------------
 */

/* m += (g - m) * (1 - beta_1); v += (g^2 - v) * (1 - beta_2); w -= m * alpha / (sqrt(v) + eps),
 * with alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) computed per call. */
static inline void adam_loop(const optim_plan_t *k, float *restrict p,
                             const unaligned_float_t *restrict g, float *restrict m,
                             float *restrict v, float *restrict out, bool has_out, float dec,
                             bool has_decay, size_t n)
{
    const float b1c = k->one_minus_beta_1, b2c = k->one_minus_beta_2;
    const float alpha = k->alpha, eps = k->epsilon;

    for (size_t i = 0; i < n; i++) {
        DECAY(i);
        m[i] += (g[i] - m[i]) * b1c;
        v[i] += (g[i] * g[i] - v[i]) * b2c;
        p[i] -= (m[i] * alpha) / (sqrtf(v[i]) + eps);
        if (has_out)
            out[i] = p[i];
    }
}

/* As Adam, with v_hat = max(v_hat, v) in the denominator instead of v (AMSGrad). */
static inline void amsgrad_loop(const optim_plan_t *k, float *restrict p,
                                const unaligned_float_t *restrict g, float *restrict m,
                                float *restrict v, float *restrict vh, float *restrict out,
                                bool has_out, float dec, bool has_decay, size_t n)
{
    const float b1c = k->one_minus_beta_1, b2c = k->one_minus_beta_2;
    const float alpha = k->alpha, eps = k->epsilon;

    for (size_t i = 0; i < n; i++) {
        DECAY(i);
        m[i] += (g[i] - m[i]) * b1c;
        v[i] += (g[i] * g[i] - v[i]) * b2c;
        vh[i] = v[i] > vh[i] ? v[i] : vh[i];
        p[i] -= (m[i] * alpha) / (sqrtf(vh[i]) + eps);
        if (has_out)
            out[i] = p[i];
    }
}

static void adam_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g, float *s,
                        size_t stride, size_t n, float *out)
{
    KERNEL_WITH_OUT(adam_loop(k, p, g, s, s + stride, out, has_out, k->decay, has_decay, n));
}

static void amsgrad_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g, float *s,
                           size_t stride, size_t n, float *out)
{
    KERNEL_WITH_OUT(
        amsgrad_loop(k, p, g, s, s + stride, s + 2 * stride, out, has_out, k->decay, has_decay, n));
}

/* ---- Adagrad (adagrad.py) ---------------------------------------------------------------------
 */

/* acc += g^2; w -= lr * g / sqrt(acc + eps)   (epsilon inside the square root, as Keras 3) */
static inline void adagrad_loop(const optim_plan_t *k, float *restrict p,
                                const unaligned_float_t *restrict g, float *restrict acc,
                                float *restrict out, bool has_out, float dec, bool has_decay,
                                size_t n)
{
    const float lr = k->lr, eps = k->epsilon;

    for (size_t i = 0; i < n; i++) {
        DECAY(i);
        acc[i] += g[i] * g[i];
        p[i] -= (lr * g[i]) / sqrtf(acc[i] + eps);
        if (has_out)
            out[i] = p[i];
    }
}

static void adagrad_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g, float *s,
                           size_t stride, size_t n, float *out)
{
    (void)stride;
    KERNEL_WITH_OUT(adagrad_loop(k, p, g, s, out, has_out, k->decay, has_decay, n));
}

/* ---- RMSprop (rmsprop.py) ---------------------------------------------------------------------
 */

/* velocity = rho * velocity + (1 - rho) * g^2; w -= lr * g / sqrt(velocity + eps) */
static inline void rmsprop_loop(const optim_plan_t *k, float *restrict p,
                                const unaligned_float_t *restrict g, float *restrict vel,
                                float *restrict out, bool has_out, float dec, bool has_decay,
                                size_t n)
{
    const float lr = k->lr, eps = k->epsilon, rho = k->rho, rho_c = k->one_minus_rho;

    for (size_t i = 0; i < n; i++) {
        DECAY(i);
        vel[i] = rho * vel[i] + rho_c * (g[i] * g[i]);
        p[i] -= (lr * g[i]) / sqrtf(vel[i] + eps);
        if (has_out)
            out[i] = p[i];
    }
}

/* As above, then momentum = mu * momentum + increment; w -= momentum. */
static inline void rmsprop_momentum_loop(const optim_plan_t *k, float *restrict p,
                                         const unaligned_float_t *restrict g, float *restrict vel,
                                         float *restrict mom, float *restrict out, bool has_out,
                                         float dec, bool has_decay, size_t n)
{
    const float lr = k->lr, eps = k->epsilon, rho = k->rho, rho_c = k->one_minus_rho;
    const float mu = k->momentum;

    for (size_t i = 0; i < n; i++) {
        DECAY(i);
        vel[i] = rho * vel[i] + rho_c * (g[i] * g[i]);
        mom[i] = mu * mom[i] + (lr * g[i]) / sqrtf(vel[i] + eps);
        p[i] -= mom[i];
        if (has_out)
            out[i] = p[i];
    }
}

/* Centered: average_grad = rho * average_grad + (1 - rho) * g; the denominator is
 * sqrt(velocity - average_grad^2 + eps). */
static inline void rmsprop_centered_loop(const optim_plan_t *k, float *restrict p,
                                         const unaligned_float_t *restrict g, float *restrict vel,
                                         float *restrict avg, float *restrict out, bool has_out,
                                         float dec, bool has_decay, size_t n)
{
    const float lr = k->lr, eps = k->epsilon, rho = k->rho, rho_c = k->one_minus_rho;

    for (size_t i = 0; i < n; i++) {
        DECAY(i);
        vel[i] = rho * vel[i] + rho_c * (g[i] * g[i]);
        avg[i] = rho * avg[i] + rho_c * g[i];
        p[i] -= (lr * g[i]) / sqrtf(vel[i] - avg[i] * avg[i] + eps);
        if (has_out)
            out[i] = p[i];
    }
}

static inline void rmsprop_centered_momentum_loop(const optim_plan_t *k, float *restrict p,
                                                  const unaligned_float_t *restrict g,
                                                  float *restrict vel, float *restrict mom,
                                                  float *restrict avg, float *restrict out,
                                                  bool has_out, float dec, bool has_decay, size_t n)
{
    const float lr = k->lr, eps = k->epsilon, rho = k->rho, rho_c = k->one_minus_rho;
    const float mu = k->momentum;

    for (size_t i = 0; i < n; i++) {
        DECAY(i);
        vel[i] = rho * vel[i] + rho_c * (g[i] * g[i]);
        avg[i] = rho * avg[i] + rho_c * g[i];
        mom[i] = mu * mom[i] + (lr * g[i]) / sqrtf(vel[i] - avg[i] * avg[i] + eps);
        p[i] -= mom[i];
        if (has_out)
            out[i] = p[i];
    }
}

/* Slot order follows Keras's build(): velocity, then momentum (if any), then average_gradient
 * (if centered). */
static void rmsprop_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g, float *s,
                           size_t stride, size_t n, float *out)
{
    (void)stride;
    KERNEL_WITH_OUT(rmsprop_loop(k, p, g, s, out, has_out, k->decay, has_decay, n));
}

static void rmsprop_momentum_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g,
                                    float *s, size_t stride, size_t n, float *out)
{
    KERNEL_WITH_OUT(
        rmsprop_momentum_loop(k, p, g, s, s + stride, out, has_out, k->decay, has_decay, n));
}

static void rmsprop_centered_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g,
                                    float *s, size_t stride, size_t n, float *out)
{
    KERNEL_WITH_OUT(
        rmsprop_centered_loop(k, p, g, s, s + stride, out, has_out, k->decay, has_decay, n));
}

static void rmsprop_centered_momentum_kernel(const optim_plan_t *k, float *p,
                                             const unaligned_float_t *g, float *s, size_t stride,
                                             size_t n, float *out)
{
    KERNEL_WITH_OUT(rmsprop_centered_momentum_loop(k, p, g, s, s + stride, s + 2 * stride, out,
                                                   has_out, k->decay, has_decay, n));
}

/* ---- Nadam (nadam.py) -------------------------------------------------------------------------
 */

/* m += (g - m) * (1 - beta_1); v += (g^2 - v) * (1 - beta_2);
 * m_hat = u_{t+1} m / (1 - prod u_1..u_{t+1}) + (1 - u_t) g / (1 - prod u_1..u_t) (the two
 * factors per call: nadam_m, nadam_g); v_hat = v / (1 - beta_2^t); w -= m_hat lr / (sqrt(v_hat) +
 * eps) */
static inline void nadam_loop(const optim_plan_t *k, float *restrict p,
                              const unaligned_float_t *restrict g, float *restrict m,
                              float *restrict v, float *restrict out, bool has_out, float dec,
                              bool has_decay, size_t n)
{
    const float b1c = k->one_minus_beta_1, b2c = k->one_minus_beta_2, lr = k->lr;
    const float fm = k->nadam_m, fg = k->nadam_g, bias = k->bias, eps = k->epsilon;

    for (size_t i = 0; i < n; i++) {
        DECAY(i);
        m[i] += (g[i] - m[i]) * b1c;
        v[i] += (g[i] * g[i] - v[i]) * b2c;
        p[i] -= ((m[i] * fm + g[i] * fg) * lr) / (sqrtf(v[i] / bias) + eps);
        if (has_out)
            out[i] = p[i];
    }
}

static void nadam_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g, float *s,
                         size_t stride, size_t n, float *out)
{
    KERNEL_WITH_OUT(nadam_loop(k, p, g, s, s + stride, out, has_out, k->decay, has_decay, n));
}

/* ---- Adamax (adamax.py) -----------------------------------------------------------------------
 */

/* m += (g - m) * (1 - beta_1); u = max(beta_2 u, |g|); w -= lr m / ((1 - beta_1^t) (u + eps)) */
static inline void adamax_loop(const optim_plan_t *k, float *restrict p,
                               const unaligned_float_t *restrict g, float *restrict m,
                               float *restrict u, float *restrict out, bool has_out, float dec,
                               bool has_decay, size_t n)
{
    const float b1c = k->one_minus_beta_1, b2 = k->beta_2, lr = k->lr, bias = k->bias;
    const float eps = k->epsilon;

    for (size_t i = 0; i < n; i++) {
        float a = fabsf(g[i]), d = u[i] * b2;
        DECAY(i);
        m[i] += (g[i] - m[i]) * b1c;
        u[i] = d > a ? d : a;
        p[i] -= (lr * m[i]) / (bias * (u[i] + eps));
        if (has_out)
            out[i] = p[i];
    }
}

static void adamax_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g, float *s,
                          size_t stride, size_t n, float *out)
{
    KERNEL_WITH_OUT(adamax_loop(k, p, g, s, s + stride, out, has_out, k->decay, has_decay, n));
}

/* ---- Lion (lion.py) ---------------------------------------------------------------------------
 */

/* w -= lr sign(beta_1 m + (1 - beta_1) g); m = beta_2 m + (1 - beta_2) g */
static inline void lion_loop(const optim_plan_t *k, float *restrict p,
                             const unaligned_float_t *restrict g, float *restrict m,
                             float *restrict out, bool has_out, float dec, bool has_decay, size_t n)
{
    const float b1 = k->beta_1, b1c = k->one_minus_beta_1, b2 = k->beta_2;
    const float b2c = k->one_minus_beta_2, lr = k->lr;

    for (size_t i = 0; i < n; i++) {
        float c = m[i] * b1 + g[i] * b1c;
        float sign = (float)(c > 0.0f) - (float)(c < 0.0f);
        DECAY(i);
        p[i] -= lr * sign;
        m[i] = m[i] * b2 + g[i] * b2c;
        if (has_out)
            out[i] = p[i];
    }
}

static void lion_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g, float *s,
                        size_t stride, size_t n, float *out)
{
    (void)stride;
    KERNEL_WITH_OUT(lion_loop(k, p, g, s, out, has_out, k->decay, has_decay, n));
}

/* ---- Ftrl (ftrl.py) ---------------------------------------------------------------------------
 */

/* With power = -learning_rate_power, g' = g + 2 l2_shrinkage w, acc' = acc + g^2:
 * linear += g' - (acc'^power - acc^power) / lr * w; quadratic = acc'^power / lr + 2 (l2 + beta /
 * (2 lr)); w = (clip(linear, -l1, l1) - linear) / quadratic; acc = acc'. `root` chooses square
 * roots for the default power 0.5 (they vectorize; powf does not). */
static inline void ftrl_loop(const optim_plan_t *k, float *restrict p,
                             const unaligned_float_t *restrict g, float *restrict acc,
                             float *restrict lin, float *restrict out, bool has_out, float dec,
                             bool has_decay, bool root, size_t n)
{
    const float lr = k->lr, power = k->lr_power, l1 = k->l1, l2x2 = k->l2_twice;
    const float shrink = k->shrink_twice;

    for (size_t i = 0; i < n; i++) {
        float na, pn, po, l, c;
        DECAY(i);
        na = acc[i] + g[i] * g[i];
        pn = root ? sqrtf(na) : powf(na, power);
        po = root ? sqrtf(acc[i]) : powf(acc[i], power);
        l = lin[i] + ((g[i] + shrink * p[i]) - ((pn - po) / lr) * p[i]);
        c = l < -l1 ? -l1 : (l > l1 ? l1 : l);
        lin[i] = l;
        p[i] = (c - l) / (pn / lr + l2x2);
        acc[i] = na;
        if (has_out)
            out[i] = p[i];
    }
}

static void ftrl_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g, float *s,
                        size_t stride, size_t n, float *out)
{
    KERNEL_WITH_OUT(ftrl_loop(k, p, g, s, s + stride, out, has_out, k->decay, has_decay, false, n));
}

static void ftrl_sqrt_kernel(const optim_plan_t *k, float *p, const unaligned_float_t *g, float *s,
                             size_t stride, size_t n, float *out)
{
    KERNEL_WITH_OUT(ftrl_loop(k, p, g, s, s + stride, out, has_out, k->decay, has_decay, true, n));
}

/* ---- checks -----------------------------------------------------------------------------------
 */

/* Without its sign bit a float's bits order as its magnitude does, as a non-negative int32 (a
 * max that vectorizes), and NaN and infinity order above every finite value. */
static int max_abs_bits(const unaligned_float_t *v, size_t n)
{
    int32_t m = 0;

    for (size_t i = 0; i < n; i++) {
        int32_t b;
        memcpy(&b, &v[i], sizeof(b));
        b &= 0x7fffffff;
        m = b > m ? b : m;
    }
    return m;
}

const optim_isa_table_t PASTE(optim_isa_, OPTIM_ISA) = {
    .name = STR(OPTIM_ISA),
    .kernels =
        {
            [OPTIM_KERNEL_SGD] = sgd_kernel,
            [OPTIM_KERNEL_SGD_MOMENTUM] = sgd_momentum_kernel,
            [OPTIM_KERNEL_SGD_NESTEROV] = sgd_nesterov_kernel,
            [OPTIM_KERNEL_ADAM] = adam_kernel,
            [OPTIM_KERNEL_AMSGRAD] = amsgrad_kernel,
            [OPTIM_KERNEL_ADAGRAD] = adagrad_kernel,
            [OPTIM_KERNEL_RMSPROP] = rmsprop_kernel,
            [OPTIM_KERNEL_RMSPROP_MOMENTUM] = rmsprop_momentum_kernel,
            [OPTIM_KERNEL_RMSPROP_CENTERED] = rmsprop_centered_kernel,
            [OPTIM_KERNEL_RMSPROP_CENTERED_MOMENTUM] = rmsprop_centered_momentum_kernel,
            [OPTIM_KERNEL_NADAM] = nadam_kernel,
            [OPTIM_KERNEL_ADAMAX] = adamax_kernel,
            [OPTIM_KERNEL_LION] = lion_kernel,
            [OPTIM_KERNEL_FTRL] = ftrl_kernel,
            [OPTIM_KERNEL_FTRL_SQRT] = ftrl_sqrt_kernel,
        },
    .max_abs_bits = max_abs_bits,
};
