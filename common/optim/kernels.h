/* The optimizers' element-wise loops, inside the optim layer only. kernels.c is compiled once per
 * instruction set the build can target (the baseline, AVX2, AVX-512) and optimizer.c picks the
 * widest the CPU has when the process starts. Every build of it computes the same float
 * operations in the same order, without contraction into fused multiply-adds, so all of them
 * give the same bits (tests/unit/common/optim/test_optimizer.c checks each against the
 * baseline). */
#ifndef TESSERA_OPTIM_KERNELS_H
#define TESSERA_OPTIM_KERNELS_H

#include <stddef.h>

#include "base/pieces.h"

/* The per-call factors of one update, resolved by optimizer.c. */
typedef struct optim_plan {
    int kernel; /* optim_kernel_t */
    float lr;
    float momentum;
    float one_minus_beta_1, one_minus_beta_2;
    float alpha; /* Adam's bias-corrected step size */
    float epsilon;
    float rho, one_minus_rho;
    float decay; /* weight_decay * lr: w -= w * decay first (0: no decay) */
    float beta_1, beta_2;
    float nadam_m, nadam_g;           /* Nadam: m_hat = m * nadam_m + g * nadam_g */
    float bias;                       /* Nadam: 1 - beta_2^t; Adamax: 1 - beta_1^t */
    float lr_power;                   /* Ftrl: -learning_rate_power */
    float l1, l2_twice, shrink_twice; /* Ftrl: l1, 2 * (l2 + beta / (2 lr)), 2 * l2_shrinkage */
} optim_plan_t;

typedef enum {
    OPTIM_KERNEL_SGD,
    OPTIM_KERNEL_SGD_MOMENTUM,
    OPTIM_KERNEL_SGD_NESTEROV,
    OPTIM_KERNEL_ADAM,
    OPTIM_KERNEL_AMSGRAD,
    OPTIM_KERNEL_ADAGRAD,
    OPTIM_KERNEL_RMSPROP,
    OPTIM_KERNEL_RMSPROP_MOMENTUM,
    OPTIM_KERNEL_RMSPROP_CENTERED,
    OPTIM_KERNEL_RMSPROP_CENTERED_MOMENTUM,
    OPTIM_KERNEL_NADAM,
    OPTIM_KERNEL_ADAMAX,
    OPTIM_KERNEL_LION,
    OPTIM_KERNEL_FTRL,      /* any learning_rate_power, with powf */
    OPTIM_KERNEL_FTRL_SQRT, /* learning_rate_power -0.5 (the default), with square roots */
    OPTIM_KERNEL_COUNT
} optim_kernel_t;

/* Updates n parameters; slot k of parameter i is at slots[k * stride + i]. When out is not NULL
 * it receives each updated parameter too, in the same pass (a pull that follows the push). The
 * gradient may sit at any byte address: the parameter server reads it where gRPC received it. */
typedef void (*optim_kernel_fn)(const optim_plan_t *k, float *params, const unaligned_float_t *grad,
                                float *slots, size_t stride, size_t n, float *out);

/* One build's kernels, and its largest |v[i]| as the bits of a non-negative int32 (NaN and
 * infinity order above every finite value). */
typedef struct optim_isa_table {
    const char *name;
    optim_kernel_fn kernels[OPTIM_KERNEL_COUNT];
    int (*max_abs_bits)(const unaligned_float_t *v, size_t n);
} optim_isa_table_t;

extern const optim_isa_table_t optim_isa_base;
#ifdef OPTIM_HAVE_AVX2
extern const optim_isa_table_t optim_isa_avx2;
#endif
#ifdef OPTIM_HAVE_AVX512
extern const optim_isa_table_t optim_isa_avx512;
#endif

#endif
