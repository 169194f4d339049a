/* Optimizer kernels against values worked out by hand from the Keras 3 formulas
 * (keras/src/optimizers/{sgd,adam,adagrad,rmsprop}.py).
 * Most cases use parameters p = [1, 2] and gradient g = [0.5, -1] so the steps can be followed in
 * the comments. */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "optim/optimizer.h"
#include "optim_check.h"

#define MAX_SLOTS 3

static void assert_params(const float *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(close_enough(got[i], want[i]), "params[%zu] = %.10g, want %.10g", i,
                      (double)got[i], want[i]);
}

/* Runs `steps` dense updates of p = [1, 2] with g = [0.5, -1]; slots start as slots_init makes
 * them. */
static void run_two_params(const optimizer_config_t *c, int steps, float p[2], float *slots)
{
    static const float g[2] = {0.5f, -1.0f};
    p[0] = 1.0f;
    p[1] = 2.0f;
    optimizer_slots_init(c, slots, 2);
    for (int s = 0; s < steps; s++)
        optimizer_apply_dense(c, s, p, g, slots, 2);
}

/* ---- defaults, slots, names ---------------------------------------------------------------------
 */

START_TEST(defaults_match_keras_for_every_kind)
{
    optimizer_config_t c;
    status_msg_t err;

    optimizer_config_default(OPTIMIZER_SGD, &c);
    ck_assert_int_eq(c.kind, OPTIMIZER_SGD);
    ck_assert_int_eq(c.schedule.kind, LR_CONSTANT);
    ASSERT_CLOSE(c.schedule.lr, 0.01);
    ASSERT_CLOSE(c.lr_scale, 1.0);
    ck_assert(c.momentum == 0.0 && !c.nesterov);
    ck_assert_int_eq(optimizer_config_validate(&c, &err), STATUS_OK);

    optimizer_config_default(OPTIMIZER_ADAM, &c);
    ASSERT_CLOSE(c.schedule.lr, 0.001);
    ASSERT_CLOSE(c.beta_1, 0.9);
    ASSERT_CLOSE(c.beta_2, 0.999);
    ASSERT_CLOSE(c.epsilon, 1e-7);
    ck_assert(!c.amsgrad);
    ck_assert_int_eq(optimizer_config_validate(&c, &err), STATUS_OK);

    optimizer_config_default(OPTIMIZER_ADAGRAD, &c);
    ASSERT_CLOSE(c.schedule.lr, 0.001);
    ASSERT_CLOSE(c.initial_accumulator_value, 0.1);
    ASSERT_CLOSE(c.epsilon, 1e-7);
    ck_assert_int_eq(optimizer_config_validate(&c, &err), STATUS_OK);

    optimizer_config_default(OPTIMIZER_RMSPROP, &c);
    ASSERT_CLOSE(c.schedule.lr, 0.001);
    ASSERT_CLOSE(c.rho, 0.9);
    ASSERT_CLOSE(c.epsilon, 1e-7);
    ck_assert(c.momentum == 0.0 && !c.centered);
    ASSERT_CLOSE(c.lr_scale, 1.0);
    ck_assert_int_eq(optimizer_config_validate(&c, &err), STATUS_OK);
}
END_TEST

START_TEST(slot_count_follows_kind_and_options)
{
    optimizer_config_t c;

    optimizer_config_default(OPTIMIZER_SGD, &c);
    ck_assert_uint_eq(optimizer_slot_count(&c), 0);
    c.nesterov = true; /* without momentum Keras keeps no velocity */
    ck_assert_uint_eq(optimizer_slot_count(&c), 0);
    c.momentum = 0.9;
    ck_assert_uint_eq(optimizer_slot_count(&c), 1);

    optimizer_config_default(OPTIMIZER_ADAM, &c);
    ck_assert_uint_eq(optimizer_slot_count(&c), 2);
    c.amsgrad = true;
    ck_assert_uint_eq(optimizer_slot_count(&c), 3);

    optimizer_config_default(OPTIMIZER_ADAGRAD, &c);
    ck_assert_uint_eq(optimizer_slot_count(&c), 1);

    optimizer_config_default(OPTIMIZER_RMSPROP, &c);
    ck_assert_uint_eq(optimizer_slot_count(&c), 1);
    c.momentum = 0.5;
    ck_assert_uint_eq(optimizer_slot_count(&c), 2);
    c.centered = true;
    ck_assert_uint_eq(optimizer_slot_count(&c), 3);
    c.momentum = 0.0;
    ck_assert_uint_eq(optimizer_slot_count(&c), 2);
}
END_TEST

START_TEST(slots_start_at_zero_except_adagrad_accumulator)
{
    optimizer_config_t c;
    float slots[3 * 4];

    optimizer_config_default(OPTIMIZER_ADAM, &c);
    c.amsgrad = true;
    for (size_t i = 0; i < 12; i++)
        slots[i] = 7.0f;
    optimizer_slots_init(&c, slots, 4);
    for (size_t i = 0; i < 12; i++)
        ck_assert(slots[i] == 0.0f);

    optimizer_config_default(OPTIMIZER_ADAGRAD, &c);
    c.initial_accumulator_value = 0.25;
    slots[4] = 7.0f;
    optimizer_slots_init(&c, slots, 4);
    for (size_t i = 0; i < 4; i++)
        ck_assert(slots[i] == 0.25f);
    ck_assert(slots[4] == 7.0f); /* one slot array only: nothing written past it */
}
END_TEST

START_TEST(kind_names_are_the_job_file_keys)
{
    ck_assert_str_eq(optimizer_kind_name(OPTIMIZER_SGD), "sgd");
    ck_assert_str_eq(optimizer_kind_name(OPTIMIZER_ADAM), "adam");
    ck_assert_str_eq(optimizer_kind_name(OPTIMIZER_ADAGRAD), "adagrad");
    ck_assert_str_eq(optimizer_kind_name(OPTIMIZER_RMSPROP), "rmsprop");
    ck_assert_str_eq(optimizer_kind_name((optimizer_kind_t)42), "unknown");
}
END_TEST

/* ---- SGD ----------------------------------------------------------------------------------------
 */

START_TEST(sgd_subtracts_lr_times_gradient)
{
    /* w -= lr * g with lr 0.1: step 1 [1 - 0.05, 2 + 0.1] = [0.95, 2.1]; step 2 [0.9, 2.2]. */
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 0.1);
    float p[2], slots[1];

    run_two_params(&c, 1, p, slots);
    assert_params(p, (double[]){0.95, 2.1}, 2);
    run_two_params(&c, 2, p, slots);
    assert_params(p, (double[]){0.9, 2.2}, 2);
}
END_TEST

START_TEST(sgd_momentum_accumulates_velocity)
{
    /* velocity = 0.9 * velocity - 0.1 * g; w += velocity.
     * step 1: v = [-0.05, 0.1]                                   w = [0.95, 2.1]
     * step 2: v = [-0.045 - 0.05, 0.09 + 0.1] = [-0.095, 0.19]    w = [0.855, 2.29]
     * step 3: v = [-0.0855 - 0.05, 0.171 + 0.1] = [-0.1355, 0.271] w = [0.7195, 2.561] */
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 0.1);
    float p[2], slots[2];

    c.momentum = 0.9;
    run_two_params(&c, 2, p, slots);
    assert_params(p, (double[]){0.855, 2.29}, 2);
    ASSERT_CLOSE(slots[0], -0.095);
    ASSERT_CLOSE(slots[1], 0.19);
    run_two_params(&c, 3, p, slots);
    assert_params(p, (double[]){0.7195, 2.561}, 2);
}
END_TEST

START_TEST(sgd_nesterov_steps_with_the_look_ahead_velocity)
{
    /* velocity = 0.9 * velocity - 0.1 * g; w += 0.9 * velocity - 0.1 * g.
     * step 1: v = [-0.05, 0.1]; w += [-0.045 - 0.05, 0.09 + 0.1]      w = [0.905, 2.19]
     * step 2: v = [-0.095, 0.19]; w += [-0.0855 - 0.05, 0.171 + 0.1]  w = [0.7695, 2.461] */
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 0.1);
    float p[2], slots[2];

    c.momentum = 0.9;
    c.nesterov = true;
    run_two_params(&c, 1, p, slots);
    assert_params(p, (double[]){0.905, 2.19}, 2);
    run_two_params(&c, 2, p, slots);
    assert_params(p, (double[]){0.7695, 2.461}, 2);
    ASSERT_CLOSE(slots[0], -0.095);
}
END_TEST

START_TEST(sgd_nesterov_without_momentum_is_plain_sgd)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 0.1);
    float p[2];

    c.nesterov = true;
    run_two_params(&c, 2, p, NULL);
    assert_params(p, (double[]){0.9, 2.2}, 2);
}
END_TEST

/* ---- Adam ---------------------------------------------------------------------------------------
 */

START_TEST(adam_with_keras_defaults_takes_bias_corrected_steps)
{
    /* lr 0.1, beta_1 0.9, beta_2 0.999, eps 1e-7.
     * step 1 (t = 1): m = 0.1 g = [0.05, -0.1]; v = 0.001 g^2 = [0.00025, 0.001];
     *   alpha = 0.1 * sqrt(0.001) / 0.1 = 0.0316227766;
     *   w0 -= 0.0316227766 * 0.05 / (0.0158113883 + 1e-7) = 0.0999993675 -> 0.9000006325
     *   w1 -= 0.0316227766 * -0.1 / (0.0316227766 + 1e-7) = -0.0999996838 -> 2.0999996838
     * step 2 (t = 2): m = [0.05 + 0.45 * 0.1, -0.1 - 0.9 * 0.1] = [0.095, -0.19];
     *   v = [0.00025 + 0.24975 * 0.001, 0.001 + 0.999 * 0.001] = [0.00049975, 0.001999];
     *   alpha = 0.1 * sqrt(1 - 0.998001) / (1 - 0.81) = 0.0235316725;
     *   w0 -= 0.0235316725 * 0.095 / (0.0223550889 + 1e-7) -> 0.8000010798
     *   w1 -= 0.0235316725 * -0.19 / (0.0447101778 + 1e-7) -> 2.1999994600 */
    optimizer_config_t c = config_with_lr(OPTIMIZER_ADAM, 0.1);
    float p[2], slots[4];

    run_two_params(&c, 1, p, slots);
    assert_params(p, (double[]){0.9000006325, 2.0999996838}, 2);
    ASSERT_CLOSE(slots[0], 0.05);
    ASSERT_CLOSE(slots[1], -0.1);
    ASSERT_CLOSE(slots[2], 0.00025);
    ASSERT_CLOSE(slots[3], 0.001);
    run_two_params(&c, 2, p, slots);
    assert_params(p, (double[]){0.8000010798, 2.19999946}, 2);
    ASSERT_CLOSE(slots[0], 0.095);
    ASSERT_CLOSE(slots[1], -0.19);
    ASSERT_CLOSE(slots[2], 0.00049975);
    ASSERT_CLOSE(slots[3], 0.001999);
}
END_TEST

/* Adam with beta_1 = beta_2 = 0.5, eps 0, lr 0.1: g1 = [0.5, -1], then g2 = [0.1, 0.2].
 * step 1: m = [0.25, -0.5]; v = [0.125, 0.5]; alpha = 0.1 * sqrt(0.5) / 0.5 = 0.1414213562;
 *   w -= [0.1414213562 * 0.25 / 0.3535533906, 0.1414213562 * -0.5 / 0.7071067812] = [0.1, -0.1]
 *   w = [0.9, 2.1]
 * step 2: m = [0.25 - 0.15 * 0.5, -0.5 + 0.7 * 0.5] = [0.175, -0.15];
 *   v = [0.125 - 0.115 * 0.5, 0.5 - 0.46 * 0.5] = [0.0675, 0.27];
 *   alpha = 0.1 * sqrt(0.75) / 0.75 = 0.1154700538.
 *   Adam:    w -= [0.0202072594 / sqrt(0.0675), -0.0173205081 / sqrt(0.27)]
 *                = [0.0777777778, -0.0333333333]       w = [0.8222222222, 2.1333333333]
 *   AMSGrad: v_hat = max(v_hat, v) = [0.125, 0.5] (v went down), so
 *            w -= [0.0202072594 / 0.3535533906, -0.0173205081 / 0.7071067812]
 *                = [0.0571547607, -0.0244948974]       w = [0.8428452393, 2.1244948974] */
static void run_adam_half_betas(bool amsgrad, float p[2], float *slots)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_ADAM, 0.1);
    float g1[2] = {0.5f, -1.0f}, g2[2] = {0.1f, 0.2f};

    c.beta_1 = 0.5;
    c.beta_2 = 0.5;
    c.epsilon = 0.0;
    c.amsgrad = amsgrad;
    p[0] = 1.0f;
    p[1] = 2.0f;
    optimizer_slots_init(&c, slots, 2);
    optimizer_apply_dense(&c, 0, p, g1, slots, 2);
    assert_params(p, (double[]){0.9, 2.1}, 2);
    optimizer_apply_dense(&c, 1, p, g2, slots, 2);
}

START_TEST(adam_divides_by_the_current_second_moment)
{
    float p[2], slots[4];

    run_adam_half_betas(false, p, slots);
    assert_params(p, (double[]){0.8222222222, 2.1333333333}, 2);
    ASSERT_CLOSE(slots[2], 0.0675);
    ASSERT_CLOSE(slots[3], 0.27);
}
END_TEST

START_TEST(amsgrad_divides_by_the_largest_second_moment_seen)
{
    float p[2], slots[6];

    run_adam_half_betas(true, p, slots);
    assert_params(p, (double[]){0.8428452393, 2.1244948974}, 2);
    ASSERT_CLOSE(slots[2], 0.0675); /* v itself still decays */
    ASSERT_CLOSE(slots[3], 0.27);
    ASSERT_CLOSE(slots[4], 0.125); /* v_hat keeps the maximum */
    ASSERT_CLOSE(slots[5], 0.5);
}
END_TEST

START_TEST(adam_adds_epsilon_outside_the_square_root)
{
    /* beta_1 0.5, beta_2 0.75, eps 1, lr 0.1, g = 2: m = 1, v = 0.25 * 4 = 1,
     * alpha = 0.1 * sqrt(0.25) / 0.5 = 0.1; w -= 0.1 * 1 / (sqrt(1) + 1) = 0.05 -> 0.95
     * (with eps under the root it would be 0.1 / sqrt(2) = 0.0707). */
    optimizer_config_t c = config_with_lr(OPTIMIZER_ADAM, 0.1);
    float p = 1.0f, g = 2.0f, slots[2];

    c.beta_1 = 0.5;
    c.beta_2 = 0.75;
    c.epsilon = 1.0;
    optimizer_slots_init(&c, slots, 1);
    optimizer_apply_dense(&c, 0, &p, &g, slots, 1);
    ASSERT_CLOSE(p, 0.95);
}
END_TEST

START_TEST(dense_update_covers_every_element_of_an_odd_length)
{
    /* 37 elements, so vectorized loops run their tail too: each must take Adam step 1 above. */
    optimizer_config_t c = config_with_lr(OPTIMIZER_ADAM, 0.1);
    float p[37], g[37], slots[2 * 37];

    for (size_t i = 0; i < 37; i++) {
        p[i] = 1.0f;
        g[i] = 0.5f;
    }
    optimizer_slots_init(&c, slots, 37);
    optimizer_apply_dense(&c, 0, p, g, slots, 37);
    for (size_t i = 0; i < 37; i++) {
        ck_assert_msg(close_enough(p[i], 0.9000006325), "p[%zu] = %.10g", i, (double)p[i]);
        ck_assert_msg(close_enough(slots[37 + i], 0.00025), "v[%zu] = %.10g", i,
                      (double)slots[37 + i]);
    }
}
END_TEST

/* ---- Adagrad ------------------------------------------------------------------------------------
 */

START_TEST(adagrad_scales_by_the_accumulated_squares)
{
    /* lr 0.1, accumulator starts at 0.1, eps 1e-7.
     * step 1: acc = [0.35, 1.1]; w -= [0.05 / sqrt(0.3500001), -0.1 / sqrt(1.1000001)]
     *   = [0.0845154134, -0.0953462550]                  w = [0.9154845866, 2.0953462550]
     * step 2: acc = [0.6, 2.1]; w -= [0.05 / sqrt(0.6000001), -0.1 / sqrt(2.1000001)]
     *   = [0.0645497171, -0.0690065540]                  w = [0.8509348695, 2.1643528090] */
    optimizer_config_t c = config_with_lr(OPTIMIZER_ADAGRAD, 0.1);
    float p[2], slots[2];

    run_two_params(&c, 1, p, slots);
    assert_params(p, (double[]){0.9154845866, 2.095346255}, 2);
    run_two_params(&c, 2, p, slots);
    assert_params(p, (double[]){0.8509348695, 2.164352809}, 2);
    ASSERT_CLOSE(slots[0], 0.6);
    ASSERT_CLOSE(slots[1], 2.1);
}
END_TEST

START_TEST(adagrad_adds_epsilon_inside_the_square_root)
{
    /* Keras 3 divides by sqrt(acc + eps). acc 0, eps 0.75, lr 0.1, g = 0.5:
     * step 1: acc = 0.25, w -= 0.05 / sqrt(1.0) = 0.05 -> 0.95 (sqrt(acc) + eps would be 1.25)
     * step 2: acc = 0.5, w -= 0.05 / sqrt(1.25) = 0.0447213595 -> 0.9052786405 */
    optimizer_config_t c = config_with_lr(OPTIMIZER_ADAGRAD, 0.1);
    float p = 1.0f, g = 0.5f, acc;

    c.initial_accumulator_value = 0.0;
    c.epsilon = 0.75;
    optimizer_slots_init(&c, &acc, 1);
    optimizer_apply_dense(&c, 0, &p, &g, &acc, 1);
    ASSERT_CLOSE(p, 0.95);
    optimizer_apply_dense(&c, 1, &p, &g, &acc, 1);
    ASSERT_CLOSE(p, 0.9052786405);
    ASSERT_CLOSE(acc, 0.5);
}
END_TEST

/* ---- RMSprop ------------------------------------------------------------------------------------
 */

START_TEST(rmsprop_matches_the_keras_docstring_example)
{
    /* RMSprop(learning_rate=0.1) on loss var^2 / 2 from var = 10 (gradient = var) gives 9.683772:
     * v = 0.1 * 100 = 10; var -= 0.1 * 10 / sqrt(10 + 1e-7) = 0.316227766.
     * A second step: g = 9.683772236, v = 9 + 9.377544466 = 18.377544466,
     * var -= 0.968377224 / sqrt(18.3775446) = 0.225891987 -> 9.457880249. */
    optimizer_config_t c = config_with_lr(OPTIMIZER_RMSPROP, 0.1);
    float var = 10.0f, g, v;

    optimizer_slots_init(&c, &v, 1);
    g = var;
    optimizer_apply_dense(&c, 0, &var, &g, &v, 1);
    ASSERT_CLOSE(var, 9.683772236);
    ASSERT_CLOSE(v, 10.0);
    g = var;
    optimizer_apply_dense(&c, 1, &var, &g, &v, 1);
    ASSERT_CLOSE(var, 9.457880249);
}
END_TEST

/* RMSprop with rho 0.5, eps 0, lr 0.1 on p = [1, 2], g = [0.5, -1] each step.
 * plain:    step 1 v = [0.125, 0.5]; inc = [0.05 / 0.3535533906, -0.1 / 0.7071067812]
 *             = [0.1414213562, -0.1414213562]          w = [0.8585786438, 2.1414213562]
 *           step 2 v = [0.1875, 0.75]; inc = [0.05 / 0.4330127019, -0.1 / 0.8660254038]
 *             = [0.1154700538, -0.1154700538]          w = [0.7431085899, 2.2568914101]
 * momentum 0.5: step 1 as plain (mom = inc);
 *           step 2 mom = [0.0707106781 + 0.1154700538, ...] = [0.1861807319, -0.1861807319]
 *                                                      w = [0.6723979118, 2.3276020882]
 * centered: step 1 avg = [0.25, -0.5]; denominator v - avg^2 = [0.0625, 0.25];
 *             inc = [0.05 / 0.25, -0.1 / 0.5] = [0.2, -0.2]   w = [0.8, 2.2]
 *           step 2 avg = [0.375, -0.75]; v - avg^2 = [0.046875, 0.1875];
 *             inc = [0.05 / 0.2165063509, -0.1 / 0.4330127019] = [0.2309401077, -0.2309401077]
 *                                                      w = [0.5690598923, 2.4309401077]
 * centered + momentum 0.5: step 2 mom = [0.1 + 0.2309401077, ...] = [0.3309401077, ...]
 *                                                      w = [0.4690598923, 2.5309401077] */
static optimizer_config_t rmsprop_half(double momentum, bool centered)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_RMSPROP, 0.1);
    c.rho = 0.5;
    c.epsilon = 0.0;
    c.momentum = momentum;
    c.centered = centered;
    return c;
}

START_TEST(rmsprop_divides_by_the_root_mean_square)
{
    optimizer_config_t c = rmsprop_half(0.0, false);
    float p[2], slots[2];

    run_two_params(&c, 1, p, slots);
    assert_params(p, (double[]){0.8585786438, 2.1414213562}, 2);
    run_two_params(&c, 2, p, slots);
    assert_params(p, (double[]){0.7431085899, 2.2568914101}, 2);
    ASSERT_CLOSE(slots[0], 0.1875);
    ASSERT_CLOSE(slots[1], 0.75);
}
END_TEST

START_TEST(rmsprop_momentum_accumulates_the_increments)
{
    optimizer_config_t c = rmsprop_half(0.5, false);
    float p[2], slots[4];

    run_two_params(&c, 1, p, slots);
    assert_params(p, (double[]){0.8585786438, 2.1414213562}, 2);
    run_two_params(&c, 2, p, slots);
    assert_params(p, (double[]){0.6723979118, 2.3276020882}, 2);
    ASSERT_CLOSE(slots[2], 0.1861807319); /* slot 1 is the momentum */
    ASSERT_CLOSE(slots[3], -0.1861807319);
}
END_TEST

START_TEST(rmsprop_centered_subtracts_the_squared_mean_gradient)
{
    optimizer_config_t c = rmsprop_half(0.0, true);
    float p[2], slots[4];

    run_two_params(&c, 1, p, slots);
    assert_params(p, (double[]){0.8, 2.2}, 2);
    run_two_params(&c, 2, p, slots);
    assert_params(p, (double[]){0.5690598923, 2.4309401077}, 2);
    ASSERT_CLOSE(slots[2], 0.375); /* without momentum, slot 1 is the average gradient */
    ASSERT_CLOSE(slots[3], -0.75);
}
END_TEST

START_TEST(rmsprop_centered_with_momentum_keeps_three_slots)
{
    optimizer_config_t c = rmsprop_half(0.5, true);
    float p[2], slots[6];

    run_two_params(&c, 2, p, slots);
    assert_params(p, (double[]){0.4690598923, 2.5309401077}, 2);
    ASSERT_CLOSE(slots[0], 0.1875);       /* velocity */
    ASSERT_CLOSE(slots[2], 0.3309401077); /* momentum */
    ASSERT_CLOSE(slots[4], 0.375);        /* average gradient */
}
END_TEST

START_TEST(rmsprop_adds_epsilon_inside_the_square_root)
{
    /* rho 0.5, eps 0.875, lr 0.1, g = 0.5: v = 0.125, w -= 0.05 / sqrt(1.0) -> 0.95. */
    optimizer_config_t c = rmsprop_half(0.0, false);
    float p = 1.0f, g = 0.5f, v;

    c.epsilon = 0.875;
    optimizer_slots_init(&c, &v, 1);
    optimizer_apply_dense(&c, 0, &p, &g, &v, 1);
    ASSERT_CLOSE(p, 0.95);
}
END_TEST

/* ---- the optimizers Keras 3 adds, weight decay, clipping -------------------------------------
 */

START_TEST(newer_kinds_take_keras_defaults_and_names)
{
    optimizer_config_t c;
    status_msg_t err;

    optimizer_config_default(OPTIMIZER_ADAMW, &c);
    ASSERT_CLOSE(c.weight_decay, 0.004);
    ASSERT_CLOSE(c.beta_2, 0.999);
    ck_assert_uint_eq(optimizer_slot_count(&c), 2);
    ck_assert_str_eq(optimizer_keras_class(c.kind), "AdamW");
    ck_assert_str_eq(optimizer_keras_name(c.kind), "adam_w");
    ck_assert_int_eq(optimizer_config_validate(&c, &err), STATUS_OK);
    optimizer_config_default(OPTIMIZER_LION, &c);
    ASSERT_CLOSE(c.beta_1, 0.9);
    ASSERT_CLOSE(c.beta_2, 0.99);
    ASSERT_CLOSE(c.weight_decay, 0.0);
    ck_assert_uint_eq(optimizer_slot_count(&c), 1);
    ck_assert_str_eq(optimizer_slot_name(&c, 0), "momentum");
    optimizer_config_default(OPTIMIZER_FTRL, &c);
    ASSERT_CLOSE(c.learning_rate_power, -0.5);
    ASSERT_CLOSE(c.initial_accumulator_value, 0.1);
    ck_assert_str_eq(optimizer_slot_name(&c, 0), "accumulator");
    ck_assert_str_eq(optimizer_slot_name(&c, 1), "linear");
    optimizer_config_default(OPTIMIZER_ADAMAX, &c);
    ck_assert_str_eq(optimizer_slot_name(&c, 1), "norm");
    ck_assert_str_eq(optimizer_kind_name(OPTIMIZER_NADAM), "nadam");
    ck_assert_str_eq(optimizer_keras_name(OPTIMIZER_NADAM), "nadam");
    ck_assert_str_eq(optimizer_keras_class(OPTIMIZER_FTRL), "Ftrl");
}
END_TEST

/* Ftrl's accumulator starts at initial_accumulator_value, its linear slot at zero. */
START_TEST(ftrl_slots_start_at_the_accumulator_value_and_zero)
{
    optimizer_config_t c;
    float slots[6];

    optimizer_config_default(OPTIMIZER_FTRL, &c);
    c.initial_accumulator_value = 0.25;
    optimizer_slots_init(&c, slots, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert(slots[i] == 0.25f);
        ck_assert(slots[3 + i] == 0.0f);
    }
}
END_TEST

/* p = [1, 2], g = [0.5, -1], lr 0.1, weight_decay 0.5: the decay comes first, w -= w * 0.05,
 * then plain SGD: [0.95 - 0.05, 1.9 + 0.1] = [0.9, 2.0]. */
START_TEST(weight_decay_shrinks_the_weights_before_the_update)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 0.1);
    float p[2], none[1];

    c.weight_decay = 0.5;
    run_two_params(&c, 1, p, none);
    assert_params(p, (const double[]){0.9, 2.0}, 2);
}
END_TEST

/* The bounds never prove an update whose products before a division overflow float32: Adamax's
 * lr * m and Nadam's m_hat * lr, with a large epsilon making the step itself look small. */
START_TEST(bounds_check_the_products_before_the_division)
{
    static const optimizer_kind_t kinds[] = {OPTIMIZER_ADAMAX, OPTIMIZER_NADAM};
    enum { LEN = 4 };

    for (size_t k = 0; k < 2; k++) {
        optimizer_config_t c = config_with_lr(kinds[k], 1e22);
        optimizer_bounds_t b, next;
        float p[LEN] = {1, -1, 2, 0}, g[LEN] = {1e18f, -1e18f, 1e17f, 0}, slots[2 * LEN];
        /* the step looks like 1e40 / 1e30, far under the limit; lr * m is 1e39 and more */
        c.epsilon = 1e30;
        optimizer_slots_init(&c, slots, LEN);
        optimizer_bounds_measure(&c, p, slots, LEN, &b);
        if (optimizer_bounds_step(&c, 0, optimizer_max_abs(g, LEN), &b, &next)) {
            optimizer_apply_dense(&c, 0, p, g, slots, LEN);
            for (int i = 0; i < LEN; i++)
                ck_assert_msg(isfinite(p[i]), "%s: proven, yet p[%d] = %g",
                              optimizer_kind_name(kinds[k]), i, (double)p[i]);
        }
        /* the dry run finds what would break */
        optimizer_slots_init(&c, slots, LEN);
        p[0] = 1, p[1] = -1, p[2] = 2, p[3] = 0;
        ck_assert_uint_lt(optimizer_check_dense(&c, 0, p, g, slots, LEN), LEN);
    }
}
END_TEST

/* Lion steps by the learning rate times the sign of the interpolated momentum: from m = 0,
 * sign(0.1 * g) = sign(g); m becomes 0.01 * g. */
START_TEST(lion_steps_by_the_sign_of_the_interpolated_momentum)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_LION, 0.1);
    float p[2], slots[2];

    run_two_params(&c, 1, p, slots);
    assert_params(p, (const double[]){0.9, 2.1}, 2);
    ck_assert(close_enough(slots[0], 0.005) && close_enough(slots[1], -0.01));
}
END_TEST

START_TEST(clipping_follows_keras)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 0.1);
    float a[2] = {3, 4}, b[1] = {12}, *grads[2] = {a, b};
    size_t lens[2] = {2, 1};

    /* clipnorm 1: each tensor by its own norm (5 and 12) */
    c.clipnorm = 1;
    ck_assert(optimizer_clips(&c) && !optimizer_clips_globally(&c));
    optimizer_clip(&c, grads, lens, 2);
    ck_assert(close_enough(a[0], 0.6) && close_enough(a[1], 0.8) && close_enough(b[0], 1));
    /* global_clipnorm 6.5: the norm of (3, 4, 12) is 13, every element halved */
    a[0] = 3, a[1] = 4, b[0] = 12;
    c.clipnorm = 0;
    c.global_clipnorm = 6.5;
    ck_assert(optimizer_clips_globally(&c));
    optimizer_clip(&c, grads, lens, 2);
    ck_assert(close_enough(a[0], 1.5) && close_enough(a[1], 2) && close_enough(b[0], 6));
    /* under the norm: unchanged; a non-finite norm: NaN everywhere, as Keras */
    optimizer_clip(&c, grads, lens, 2);
    ck_assert(close_enough(a[0], 1.5) && close_enough(b[0], 6));
    a[1] = INFINITY;
    optimizer_clip(&c, grads, lens, 2);
    ck_assert(isnan(a[0]) && isnan(b[0]));
    /* clipvalue 2.5: each element */
    a[0] = -3, a[1] = 1, b[0] = 12;
    c.global_clipnorm = 0;
    c.clipvalue = 2.5;
    optimizer_clip(&c, grads, lens, 2);
    ck_assert(a[0] == -2.5f && a[1] == 1.0f && b[0] == 2.5f);
}
END_TEST

START_TEST(validate_names_the_newer_options)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_ADAMW, 0.1);
    status_msg_t err;

    c.weight_decay = 0; /* Keras takes it: AdamW without decay is Adam */
    ck_assert_int_eq(optimizer_config_validate(&c, &err), STATUS_OK);
    c = config_with_lr(OPTIMIZER_SGD, 0.1);
    c.weight_decay = -1;
    assert_rejected(&c, "optimizer.weight_decay must be >= 0, got -1");
    c.weight_decay = 0;
    c.clipnorm = 1;
    c.clipvalue = 1;
    assert_rejected(&c, "at most one of clipnorm, global_clipnorm and clipvalue");
    c.clipvalue = 0;
    c.clipnorm = -1;
    assert_rejected(&c, "optimizer.clipnorm must be >= 0, got -1");
    c = config_with_lr(OPTIMIZER_LION, 0.1);
    c.beta_1 = 0;
    assert_rejected(&c, "optimizer.beta_1 must be in (0, 1], got 0");
    c = config_with_lr(OPTIMIZER_FTRL, 0.1);
    c.learning_rate_power = 0.5;
    assert_rejected(&c, "optimizer.learning_rate_power must be <= 0, got 0.5");
    c.learning_rate_power = -0.5;
    c.l2_shrinkage = -1;
    assert_rejected(&c, "optimizer.l2_shrinkage_regularization_strength must be >= 0, got -1");
}
END_TEST

/* ---- row updates --------------------------------------------------------------------------------
 */

enum { N_ROW_CONFIGS = 17 };

/* Every kernel: SGD, momentum, Nesterov, Adam, AMSGrad, Adagrad, the four RMSprop variants,
 * AdamW, Nadam, Adamax, Lion, Ftrl with square roots and with powf, and a weight decay on
 * SGD with momentum. */
static optimizer_config_t row_config(int i)
{
    static const optimizer_kind_t kinds[N_ROW_CONFIGS] = {
        OPTIMIZER_SGD,     OPTIMIZER_SGD,     OPTIMIZER_SGD,     OPTIMIZER_ADAM,
        OPTIMIZER_ADAM,    OPTIMIZER_ADAGRAD, OPTIMIZER_RMSPROP, OPTIMIZER_RMSPROP,
        OPTIMIZER_RMSPROP, OPTIMIZER_RMSPROP, OPTIMIZER_ADAMW,   OPTIMIZER_NADAM,
        OPTIMIZER_ADAMAX,  OPTIMIZER_LION,    OPTIMIZER_FTRL,    OPTIMIZER_FTRL,
        OPTIMIZER_SGD,
    };
    optimizer_config_t c = config_with_lr(kinds[i], 0.05);

    c.momentum = (i == 1 || i == 2 || i == 7 || i == 9 || i == 16) ? 0.9 : 0.0;
    c.nesterov = i == 2;
    c.amsgrad = i == 4;
    c.centered = i == 8 || i == 9;
    if (i == 10)
        c.weight_decay = 0.1;
    if (i == 15) {
        c.learning_rate_power = -0.3;
        c.l1 = 0.01;
        c.l2 = 0.02;
        c.l2_shrinkage = 0.03;
        c.beta = 0.1;
    }
    if (i == 16)
        c.weight_decay = 0.2;
    return c;
}

enum { ROWS = 4, ROW_LEN = 5, N = ROWS * ROW_LEN };

static float test_value(size_t i, int salt)
{
    return (float)((int)((i * 7 + (size_t)salt * 13) % 11) - 5) / 4.0f;
}

START_TEST(rows_touching_every_row_once_equal_the_dense_update)
{
    optimizer_config_t c = row_config(_i);
    static const int64_t order[ROWS] = {2, 0, 3, 1};
    float dense_p[N], dense_s[MAX_SLOTS * N], rows_p[N], rows_s[MAX_SLOTS * N];
    float g[N], g_rows[N];
    size_t moved = 0;

    ck_assert_uint_le(optimizer_slot_count(&c), MAX_SLOTS);
    for (size_t i = 0; i < N; i++)
        dense_p[i] = rows_p[i] = test_value(i, 1);
    optimizer_slots_init(&c, dense_s, N);
    optimizer_slots_init(&c, rows_s, N);
    for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < N; i++)
            g[i] = test_value(i, step + 2);
        /* The same gradients, sent as rows in another order. */
        for (size_t j = 0; j < ROWS; j++)
            memcpy(g_rows + j * ROW_LEN, g + order[j] * ROW_LEN, ROW_LEN * sizeof(float));
        optimizer_apply_dense(&c, step, dense_p, g, dense_s, N);
        ck_assert_int_eq(optimizer_apply_rows(&c, step, rows_p, ROWS, ROW_LEN, order, g_rows, ROWS,
                                              rows_s, NULL, NULL),
                         STATUS_OK);
    }
    for (size_t i = 0; i < N; i++) {
        ck_assert_msg(close_enough(rows_p[i], dense_p[i]), "config %d: p[%zu] rows %.9g dense %.9g",
                      _i, i, (double)rows_p[i], (double)dense_p[i]);
        moved += rows_p[i] != test_value(i, 1);
    }
    ck_assert_uint_gt(moved, N / 2); /* the comparison is not between two untouched tensors */
    for (size_t i = 0; i < optimizer_slot_count(&c) * N; i++)
        ck_assert_msg(close_enough(rows_s[i], dense_s[i]),
                      "config %d: slot %zu rows %.9g dense %.9g", _i, i, (double)rows_s[i],
                      (double)dense_s[i]);
}
END_TEST

/* Parts of a tensor updated apart (as the replicas' threads do) make the whole update, bit for
 * bit: values and every slot. */
START_TEST(dense_parts_together_equal_the_whole_update)
{
    optimizer_config_t c = row_config(_i);
    static const size_t cuts[] = {0, 3, 3, 11, N}; /* an empty part too */
    float whole_p[N], whole_s[MAX_SLOTS * N], part_p[N], part_s[MAX_SLOTS * N], g[N];

    for (size_t i = 0; i < N; i++)
        whole_p[i] = part_p[i] = test_value(i, 1);
    optimizer_slots_init(&c, whole_s, N);
    optimizer_slots_init(&c, part_s, N);
    for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < N; i++)
            g[i] = test_value(i, step + 2);
        optimizer_apply_dense(&c, step, whole_p, g, whole_s, N);
        for (size_t k = 0; k + 1 < sizeof(cuts) / sizeof(cuts[0]); k++)
            optimizer_apply_dense_part(&c, step, part_p, g, part_s, N, cuts[k],
                                       cuts[k + 1] - cuts[k], NULL);
    }
    ck_assert_msg(memcmp(part_p, whole_p, sizeof(whole_p)) == 0, "config %d: values differ", _i);
    ck_assert_msg(memcmp(part_s, whole_s, optimizer_slot_count(&c) * N * sizeof(float)) == 0,
                  "config %d: slots differ", _i);
}
END_TEST

/* Long enough for every vector width's main loop and an odd tail. */
enum { WIDE = 1037 };

/* Gradients and values over many magnitudes, both signs. */
static float wide_value(size_t i, int salt)
{
    double m = ldexp(1.0, (int)((i * 5 + (size_t)salt * 3) % 41) - 30);
    return (float)(((i + (size_t)salt) % 3 == 0 ? -m : m) * (1.0 + (double)(i % 97) / 97.0));
}

/* A gradient in pieces as gRPC cuts a payload: `lead` bytes of junk, then the elements, in
 * pieces of odd sizes (many elements split between two pieces), each its own allocation. */
typedef struct cut_grad {
    pieces_part_t parts[WIDE];
    uint8_t *mem[WIDE];
    pieces_t p;
} cut_grad_t;

static void cut_grad(cut_grad_t *cg, const float *g, size_t n, size_t lead)
{
    static const size_t sizes[] = {1, 2, 3, 5, 7, 11, 13, 64, 257};
    size_t total = lead + n * sizeof(float), at = 0, k = 0;
    uint8_t *flat = malloc(total);

    memset(flat, 0xee, lead);
    memcpy(flat + lead, g, n * sizeof(float));
    for (; at < total; k++) {
        size_t take = sizes[k % (sizeof(sizes) / sizeof(sizes[0]))];
        take = take < total - at ? take : total - at;
        cg->mem[k] = malloc(take);
        memcpy(cg->mem[k], flat + at, take);
        cg->parts[k] = (pieces_part_t){cg->mem[k], take, at};
        at += take;
    }
    cg->p = (pieces_t){cg->parts, k, total};
    free(flat);
}

static void cut_grad_free(cut_grad_t *cg)
{
    for (size_t k = 0; k < cg->p.n; k++)
        free(cg->mem[k]);
}

/* Five updates of a WIDE tensor with the kernels of `isa`, the values also copied out as a pull
 * after the push reads them; with cg, each gradient is read from pieces (cut_grad). */
static void run_wide(const optimizer_config_t *c, const char *isa, float *p, float *s, float *out,
                     cut_grad_t *cg)
{
    float g[WIDE];
    status_msg_t err;

    ck_assert_msg(optimizer_set_isa(isa, &err) == STATUS_OK, "%s", err.text);
    for (size_t i = 0; i < WIDE; i++)
        p[i] = wide_value(i, 1);
    optimizer_slots_init(c, s, WIDE);
    for (int step = 0; step < 5; step++) {
        for (size_t i = 0; i < WIDE; i++)
            g[i] = wide_value(i, step + 2);
        if (cg == NULL) {
            optimizer_apply_dense_part(c, step, p, g, s, WIDE, 0, WIDE, out);
            continue;
        }
        cut_grad(cg, g, WIDE, 3);
        optimizer_apply_dense_pieces(c, step, p, &cg->p, 3, s, WIDE, WIDE, out);
        cut_grad_free(cg);
    }
}

/* A run_wide with `isa` left the baseline's values and slots, and copied out what it kept. */
static void assert_baseline_bits(const optimizer_config_t *c, int config, const char *isa,
                                 const float *p, const float *s, const float *out,
                                 const float *base_p, const float *base_s)
{
    ck_assert_msg(memcmp(p, base_p, WIDE * sizeof(float)) == 0, "config %d: %s values differ",
                  config, isa);
    ck_assert_msg(memcmp(s, base_s, optimizer_slot_count(c) * WIDE * sizeof(float)) == 0,
                  "config %d: %s slots differ", config, isa);
    ck_assert_msg(memcmp(out, p, WIDE * sizeof(float)) == 0,
                  "config %d: %s copied out other values", config, isa);
}

/* The AVX2 and AVX-512 builds of the kernels give the baseline's bits, values and slots, for
 * every optimizer (the builds that this CPU runs); the value copied out is the value kept. */
START_TEST(every_instruction_set_gives_the_bits_of_the_baseline)
{
    optimizer_config_t c = row_config(_i);
    static float base_p[WIDE], base_s[MAX_SLOTS * WIDE], p[WIDE], s[MAX_SLOTS * WIDE], out[WIDE];
    const char *isas[8];
    const char *was = optimizer_isa();
    size_t n = optimizer_isa_list(isas, 8);
    status_msg_t err;

    ck_assert_uint_ge(n, 1);
    ck_assert_str_eq(isas[n - 1], "base");
    ck_assert_str_eq(isas[0], was); /* the widest is the one chosen */
    run_wide(&c, "base", base_p, base_s, NULL, NULL);
    for (size_t k = 0; k < n; k++) {
        memset(out, 0, sizeof(out));
        run_wide(&c, isas[k], p, s, out, NULL);
        assert_baseline_bits(&c, _i, isas[k], p, s, out, base_p, base_s);
        ck_assert(optimizer_max_abs(p, WIDE) == optimizer_max_abs(base_p, WIDE));
    }
    ck_assert_int_eq(optimizer_set_isa(was, &err), STATUS_OK);
}
END_TEST

/* The update and its dry run read a gradient in pieces (where gRPC received it) as they read it
 * in one array: the baseline's bits, values, slots and the values copied out, on every
 * instruction set; the dry run names the same element. */
START_TEST(dense_in_pieces_equal_the_flat_update)
{
    optimizer_config_t c = row_config(_i);
    static float base_p[WIDE], base_s[MAX_SLOTS * WIDE], p[WIDE], s[MAX_SLOTS * WIDE], out[WIDE],
        g[WIDE];
    const char *isas[8];
    const char *was = optimizer_isa();
    size_t n = optimizer_isa_list(isas, 8);
    cut_grad_t *cg = malloc(sizeof(*cg));
    status_msg_t err;

    run_wide(&c, "base", base_p, base_s, NULL, NULL);
    for (size_t k = 0; k < n; k++) {
        memset(out, 0, sizeof(out));
        run_wide(&c, isas[k], p, s, out, cg);
        assert_baseline_bits(&c, _i, isas[k], p, s, out, base_p, base_s);
        /* a safe step, then one that breaks element 700 */
        for (size_t i = 0; i < WIDE; i++)
            g[i] = wide_value(i, 9);
        for (int bad = 0; bad < 2; bad++) {
            if (bad)
                g[700] = NAN;
            cut_grad(cg, g, WIDE, 3);
            size_t want = optimizer_check_dense_at(&c, 5, p, g, s, WIDE, WIDE);
            ck_assert_uint_eq(optimizer_check_dense_pieces(&c, 5, p, &cg->p, 3, s, WIDE, WIDE),
                              want);
            if (!bad)
                ck_assert_uint_eq(want, WIDE);
            else if (c.kind == OPTIMIZER_SGD)
                ck_assert_uint_eq(want, 700);
            cut_grad_free(cg);
        }
    }
    ck_assert_int_eq(optimizer_set_isa(was, &err), STATUS_OK);
    free(cg);
}
END_TEST

START_TEST(max_abs_is_the_same_on_every_instruction_set)
{
    static float v[WIDE];
    const char *isas[8];
    size_t n = optimizer_isa_list(isas, 8);
    const char *was = optimizer_isa();
    status_msg_t err;

    for (size_t i = 0; i < WIDE; i++)
        v[i] = wide_value(i, 7);
    v[WIDE - 1] = -1e30f; /* in the tail of every vector width */
    for (size_t k = 0; k < n; k++) {
        ck_assert_int_eq(optimizer_set_isa(isas[k], &err), STATUS_OK);
        ck_assert(optimizer_max_abs(v, WIDE) == 1e30f);
        v[WIDE - 2] = NAN;
        ck_assert(isinf(optimizer_max_abs(v, WIDE)));
        v[WIDE - 2] = 0;
    }
    ck_assert_int_eq(optimizer_set_isa(was, &err), STATUS_OK);
}
END_TEST

START_TEST(an_unknown_instruction_set_is_refused_by_name)
{
    status_msg_t err;
    const char *was = optimizer_isa();

    ck_assert_int_eq(optimizer_set_isa("sse9", &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.text, "'sse9'"));
    ck_assert_ptr_nonnull(strstr(err.text, "base"));
    ck_assert_str_eq(optimizer_isa(), was);
}
END_TEST

START_TEST(rows_leave_untouched_rows_and_their_slots_alone)
{
    /* Adam on a [3, 2] tensor after one dense step (so every slot is non-zero); a row update of
     * row 1 with gradient [0.5, -1] changes row 1 exactly as a dense update of that row alone. */
    optimizer_config_t c = config_with_lr(OPTIMIZER_ADAM, 0.1);
    float p[6], s[12], before_p[6], before_s[12], g_all[6] = {1, 1, 1, 1, 1, 1};
    float g_row[2] = {0.5f, -1.0f}, alone_p[2], alone_s[4];
    int64_t idx = 1;

    for (size_t i = 0; i < 6; i++)
        p[i] = (float)i;
    optimizer_slots_init(&c, s, 6);
    optimizer_apply_dense(&c, 0, p, g_all, s, 6);
    memcpy(before_p, p, sizeof(p));
    memcpy(before_s, s, sizeof(s));

    ck_assert_int_eq(optimizer_apply_rows(&c, 1, p, 3, 2, &idx, g_row, 1, s, NULL, NULL),
                     STATUS_OK);
    for (size_t k = 0; k < 2; k++) { /* rows 0 and 2, m and v of rows 0 and 2 */
        for (size_t i = 0; i < 2; i++) {
            ck_assert(p[i] == before_p[i] && p[4 + i] == before_p[4 + i]);
            ck_assert(s[k * 6 + i] == before_s[k * 6 + i]);
            ck_assert(s[k * 6 + 4 + i] == before_s[k * 6 + 4 + i]);
        }
    }
    memcpy(alone_p, before_p + 2, sizeof(alone_p));
    for (size_t k = 0; k < 2; k++)
        memcpy(alone_s + k * 2, before_s + k * 6 + 2, 2 * sizeof(float));
    optimizer_apply_dense(&c, 1, alone_p, g_row, alone_s, 2);
    for (size_t i = 0; i < 2; i++) {
        ck_assert(p[2 + i] != before_p[2 + i]);
        ASSERT_CLOSE(p[2 + i], alone_p[i]);
        ASSERT_CLOSE(s[2 + i], alone_s[i]);
        ASSERT_CLOSE(s[6 + 2 + i], alone_s[2 + i]);
    }
}
END_TEST

START_TEST(rows_sum_duplicate_indices_before_the_update)
{
    /* Adagrad, accumulator 0, eps 0, lr 0.1 on a [3, 2] tensor of ones; indices [2, 0, 2] with
     * gradient rows [1, 2], [3, 4], [5, 6]. Row 2 gets the sum [6, 8] once: acc = [36, 64] and
     * w -= 0.1 * [6 / 6, 8 / 8] = 0.1. (Applied one after the other it would be 0.1 + 0.098.)
     * Row 0 gets [3, 4]: acc = [9, 16], w -= 0.1. Row 1 is not touched. */
    optimizer_config_t c = config_with_lr(OPTIMIZER_ADAGRAD, 0.1);
    float p[6] = {1, 1, 1, 1, 1, 1}, acc[6];
    const float g[6] = {1, 2, 3, 4, 5, 6};
    const int64_t idx[3] = {2, 0, 2};
    max_align_t scratch[16];

    c.initial_accumulator_value = 0.0;
    c.epsilon = 0.0;
    optimizer_slots_init(&c, acc, 6);
    ck_assert_uint_le(optimizer_rows_scratch_size(3, 2), sizeof(scratch));
    ck_assert_int_eq(optimizer_apply_rows(&c, 0, p, 3, 2, idx, g, 3, acc, scratch, NULL),
                     STATUS_OK);
    assert_params(p, (double[]){0.9, 0.9, 1.0, 1.0, 0.9, 0.9}, 6);
    assert_params(acc, (double[]){9, 16, 0, 0, 36, 64}, 6);
}
END_TEST

START_TEST(rows_with_caller_scratch_match_rows_that_allocate)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_ADAM, 0.1);
    const int64_t idx[5] = {3, 1, 3, 0, 1};
    float g[5 * ROW_LEN], a_p[N], a_s[2 * N], b_p[N], b_s[2 * N];
    size_t bytes = optimizer_rows_scratch_size(5, ROW_LEN);
    void *scratch = malloc(bytes);

    ck_assert_ptr_nonnull(scratch);
    for (size_t i = 0; i < 5 * ROW_LEN; i++)
        g[i] = test_value(i, 3);
    for (size_t i = 0; i < N; i++)
        a_p[i] = b_p[i] = test_value(i, 4);
    optimizer_slots_init(&c, a_s, N);
    optimizer_slots_init(&c, b_s, N);
    ck_assert_int_eq(optimizer_apply_rows(&c, 0, a_p, ROWS, ROW_LEN, idx, g, 5, a_s, scratch, NULL),
                     STATUS_OK);
    ck_assert_int_eq(optimizer_apply_rows(&c, 0, b_p, ROWS, ROW_LEN, idx, g, 5, b_s, NULL, NULL),
                     STATUS_OK);
    ck_assert(memcmp(a_p, b_p, sizeof(a_p)) == 0);
    ck_assert(memcmp(a_s, b_s, sizeof(a_s)) == 0);
    free(scratch);
}
END_TEST

START_TEST(rows_reject_out_of_range_indices_before_changing_anything)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_ADAM, 0.1);
    float p[6] = {1, 2, 3, 4, 5, 6}, s[12], before_p[6], before_s[12];
    const float g[4] = {1, 1, 1, 1};
    const int64_t past_end[2] = {0, 3}, negative[2] = {1, -1};
    status_msg_t err;

    optimizer_slots_init(&c, s, 6);
    memcpy(before_p, p, sizeof(p));
    memcpy(before_s, s, sizeof(s));
    /* Row 0 comes first and is valid, yet must not be updated either. */
    ck_assert_int_eq(optimizer_apply_rows(&c, 0, p, 3, 2, past_end, g, 2, s, NULL, &err),
                     STATUS_OUT_OF_RANGE);
    ck_assert_int_eq(err.status, STATUS_OUT_OF_RANGE);
    ck_assert_ptr_nonnull(strstr(err.text, "row index 3 "));
    ck_assert_ptr_nonnull(strstr(err.text, "[0, 3)"));
    ck_assert(memcmp(p, before_p, sizeof(p)) == 0);
    ck_assert(memcmp(s, before_s, sizeof(s)) == 0);

    ck_assert_int_eq(optimizer_apply_rows(&c, 0, p, 3, 2, negative, g, 2, s, NULL, &err),
                     STATUS_OUT_OF_RANGE);
    ck_assert_ptr_nonnull(strstr(err.text, "row index -1 "));
    ck_assert(memcmp(p, before_p, sizeof(p)) == 0);
    ck_assert(memcmp(s, before_s, sizeof(s)) == 0);
}
END_TEST

START_TEST(rows_with_no_indices_change_nothing)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 0.1);
    float p[2] = {1, 2};

    ck_assert_int_eq(optimizer_apply_rows(&c, 0, p, 1, 2, NULL, NULL, 0, NULL, NULL, NULL),
                     STATUS_OK);
    ck_assert(p[0] == 1.0f && p[1] == 2.0f);
}
END_TEST

/* ---- validation ---------------------------------------------------------------------------------
 */

START_TEST(validate_names_bad_rates_and_factors)
{
    optimizer_config_t c;
    status_msg_t err;

    c = config_with_lr(OPTIMIZER_ADAM, 0.0);
    assert_rejected(&c, "optimizer.schedule.lr must be > 0, got 0");
    c = config_with_lr(OPTIMIZER_ADAM, NAN);
    assert_rejected(&c, "optimizer.schedule.lr must be > 0");
    c = config_with_lr(OPTIMIZER_ADAM, 0.1);
    c.lr_scale = 0.0;
    assert_rejected(&c, "optimizer.lr_scale must be > 0, got 0");

    c = config_with_lr(OPTIMIZER_ADAM, 0.1);
    c.beta_1 = 1.5;
    assert_rejected(&c, "optimizer.beta_1 must be in [0, 1), got 1.5");
    c.beta_1 = 0.0; /* no first moment decay memory at all is allowed */
    ck_assert_int_eq(optimizer_config_validate(&c, &err), STATUS_OK);
    c.beta_2 = 1.0;
    assert_rejected(&c, "optimizer.beta_2 must be in [0, 1), got 1");
    c.beta_2 = 0.999;
    c.epsilon = -1e-7;
    assert_rejected(&c, "optimizer.epsilon must be >= 0, got -1e-07");

    c = config_with_lr(OPTIMIZER_SGD, 0.1);
    c.momentum = -0.1;
    assert_rejected(&c, "optimizer.momentum must be in [0, 1], got -0.1");
    c.momentum = 1.0; /* Keras's SGD accepts [0, 1] */
    ck_assert_int_eq(optimizer_config_validate(&c, &err), STATUS_OK);

    c = config_with_lr(OPTIMIZER_ADAGRAD, 0.1);
    c.initial_accumulator_value = -0.1;
    assert_rejected(&c, "optimizer.initial_accumulator_value must be >= 0, got -0.1");

    c = config_with_lr(OPTIMIZER_RMSPROP, 0.1);
    c.rho = 1.0;
    assert_rejected(&c, "optimizer.rho must be in [0, 1), got 1");
    c.rho = 0.9;
    c.momentum = 2.0;
    assert_rejected(&c, "optimizer.momentum must be in [0, 1], got 2");

    c = config_with_lr(OPTIMIZER_ADAM, 0.1);
    c.kind = (optimizer_kind_t)9;
    assert_rejected(&c, "optimizer.kind");
}
END_TEST

/* The bounds that spare most pushes a dry run are sound: whenever they call an update safe, the
 * update keeps everything finite and within the bounds they predict, for every kind and option,
 * over magnitudes from 1e-3 to 1e36; and they do prove ordinary updates safe. */
START_TEST(bounds_that_prove_an_update_safe_are_never_wrong)
{
    enum { LEN = 64 };
    static const struct {
        optimizer_kind_t kind;
        double momentum;
        bool nesterov, amsgrad, centered;
        double weight_decay;
    } cases[] = {
        {OPTIMIZER_SGD, 0, false, false, false, 0},
        {OPTIMIZER_SGD, 0.9, false, false, false, 0},
        {OPTIMIZER_SGD, 0.9, true, false, false, 0},
        {OPTIMIZER_ADAM, 0, false, false, false, 0},
        {OPTIMIZER_ADAM, 0, false, true, false, 0},
        {OPTIMIZER_ADAGRAD, 0, false, false, false, 0},
        {OPTIMIZER_RMSPROP, 0, false, false, false, 0},
        {OPTIMIZER_RMSPROP, 0.5, false, false, false, 0},
        {OPTIMIZER_RMSPROP, 0, false, false, true, 0},
        {OPTIMIZER_ADAMW, 0, false, false, false, 0.004},
        {OPTIMIZER_NADAM, 0, false, false, false, 0},
        {OPTIMIZER_ADAMAX, 0, false, false, false, 0},
        {OPTIMIZER_LION, 0, false, false, false, 0},
        {OPTIMIZER_SGD, 0.9, false, false, false, 3.0}, /* a decay factor past 1 flips signs */
        {OPTIMIZER_LION, 0, false, false, false, 0.5},
    };
    uint64_t rng = 12345;
    int proven = 0, tried = 0;

    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        for (int trial = 0; trial < 400; trial++) {
            optimizer_config_t c;
            optimizer_bounds_t b, next, after;
            float p[LEN], g[LEN], slots[OPTIMIZER_MAX_SLOTS * LEN];
            double scale_p, scale_g, lr;
            size_t n_slots;
            optimizer_config_default(cases[k].kind, &c);
            c.momentum = cases[k].momentum;
            c.nesterov = cases[k].nesterov;
            c.amsgrad = cases[k].amsgrad;
            c.centered = cases[k].centered;
            c.weight_decay = cases[k].weight_decay;
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            scale_p = pow(10.0, (double)(rng >> 40) / (double)(1ull << 24) * 39 - 3);
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            scale_g = pow(10.0, (double)(rng >> 40) / (double)(1ull << 24) * 39 - 3);
            lr = trial % 3 == 0 ? 1.0 : 0.001;
            c.schedule.lr = lr;
            n_slots = optimizer_slot_count(&c);
            optimizer_slots_init(&c, slots, LEN);
            for (int i = 0; i < LEN; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                p[i] = (float)(scale_p * ((double)(rng >> 40) / (double)(1ull << 23) - 1));
                g[i] = (float)(scale_g * ((double)((rng >> 16) & 0xffffff) / (1 << 23) - 1));
                for (size_t j = 0; j < n_slots; j++)
                    slots[j * LEN + i] = (float)(fabs((double)g[i]) * 0.5 * (double)j);
            }
            optimizer_bounds_measure(&c, p, slots, LEN, &b);
            tried++;
            if (!optimizer_bounds_step(&c, trial, optimizer_max_abs(g, LEN), &b, &next))
                continue;
            proven++;
            optimizer_apply_dense(&c, trial, p, g, slots, LEN);
            optimizer_bounds_measure(&c, p, slots, LEN, &after);
            ck_assert_msg(after.value <= next.value * (1 + 1e-6),
                          "case %zu trial %d: value %g over the bound %g", k, trial, after.value,
                          next.value);
            for (size_t j = 0; j < n_slots; j++)
                ck_assert_msg(after.slot[j] <= next.slot[j] * (1 + 1e-6) + 1e-30,
                              "case %zu trial %d: slot %zu %g over the bound %g", k, trial, j,
                              after.slot[j], next.slot[j]);
        }
    }
    /* Ordinary magnitudes are proven (the dry run stays the exception); centered RMSprop never. */
    ck_assert_msg(proven > tried / 2, "only %d of %d updates proven", proven, tried);
}
END_TEST

/* The dry runs agree with the updates: safe updates pass, and the first element an update would
 * push out of float32 (or to NaN) is named, for every kernel family and for rows. */
START_TEST(checks_find_the_first_element_an_update_would_break)
{
    static const optimizer_kind_t kinds[] = {OPTIMIZER_SGD, OPTIMIZER_ADAM, OPTIMIZER_ADAGRAD,
                                             OPTIMIZER_RMSPROP};
    enum { LEN = 600, ROW = 60 };
    float p[LEN], g[LEN], slots[3 * LEN];
    int64_t rows[3] = {5, 1, 5};

    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        bool sgd = kinds[k] == OPTIMIZER_SGD;
        optimizer_config_t c;
        size_t bad;
        optimizer_config_default(kinds[k], &c);
        c.momentum = sgd ? 0.9 : 0.0;
        for (int i = 0; i < LEN; i++) {
            p[i] = 1.0f;
            g[i] = 0.5f;
        }
        optimizer_slots_init(&c, slots, LEN);
        ck_assert_uint_eq(optimizer_check_dense(&c, 0, p, g, slots, LEN), LEN);
        /* SGD: -3.4e38 - lr * 3e38 overflows; the others square 1e20. */
        p[517] = sgd ? -3.4e38f : 1.0f;
        g[517] = sgd ? 3e38f : 1e20f;
        ck_assert_uint_eq(optimizer_check_dense(&c, 0, p, g, slots, LEN), 517);
        ck_assert_float_eq(p[517], sgd ? -3.4e38f : 1.0f); /* untouched */
        /* Rows: gradient row 1 updates row 1 of the table, whose element 17 breaks. */
        p[517] = 1.0f;
        g[517] = 0.5f;
        p[ROW + 17] = sgd ? -3.4e38f : 1.0f;
        g[ROW + 17] = sgd ? 3e38f : 1e20f;
        ck_assert_int_eq(
            optimizer_check_rows(&c, 0, p, LEN / ROW, ROW, rows, g, 3, slots, NULL, &bad, NULL),
            STATUS_OK);
        ck_assert_uint_eq(bad, ROW + 17);
        g[ROW + 17] = 0.5f;
        ck_assert_int_eq(
            optimizer_check_rows(&c, 0, p, LEN / ROW, ROW, rows, g, 3, slots, NULL, &bad, NULL),
            STATUS_OK);
        ck_assert_uint_eq(bad, 3 * ROW);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optimizer");
    TCase *tc = tcase_create("optimizer");

    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, defaults_match_keras_for_every_kind);
    tcase_add_test(tc, slot_count_follows_kind_and_options);
    tcase_add_test(tc, slots_start_at_zero_except_adagrad_accumulator);
    tcase_add_test(tc, kind_names_are_the_job_file_keys);
    tcase_add_test(tc, sgd_subtracts_lr_times_gradient);
    tcase_add_test(tc, sgd_momentum_accumulates_velocity);
    tcase_add_test(tc, sgd_nesterov_steps_with_the_look_ahead_velocity);
    tcase_add_test(tc, sgd_nesterov_without_momentum_is_plain_sgd);
    tcase_add_test(tc, adam_with_keras_defaults_takes_bias_corrected_steps);
    tcase_add_test(tc, adam_divides_by_the_current_second_moment);
    tcase_add_test(tc, amsgrad_divides_by_the_largest_second_moment_seen);
    tcase_add_test(tc, adam_adds_epsilon_outside_the_square_root);
    tcase_add_test(tc, dense_update_covers_every_element_of_an_odd_length);
    tcase_add_test(tc, adagrad_scales_by_the_accumulated_squares);
    tcase_add_test(tc, adagrad_adds_epsilon_inside_the_square_root);
    tcase_add_test(tc, rmsprop_matches_the_keras_docstring_example);
    tcase_add_test(tc, rmsprop_divides_by_the_root_mean_square);
    tcase_add_test(tc, rmsprop_momentum_accumulates_the_increments);
    tcase_add_test(tc, rmsprop_centered_subtracts_the_squared_mean_gradient);
    tcase_add_test(tc, rmsprop_centered_with_momentum_keeps_three_slots);
    tcase_add_test(tc, rmsprop_adds_epsilon_inside_the_square_root);
    tcase_add_loop_test(tc, rows_touching_every_row_once_equal_the_dense_update, 0, N_ROW_CONFIGS);
    tcase_add_loop_test(tc, dense_parts_together_equal_the_whole_update, 0, N_ROW_CONFIGS);
    tcase_add_loop_test(tc, every_instruction_set_gives_the_bits_of_the_baseline, 0, N_ROW_CONFIGS);
    tcase_add_loop_test(tc, dense_in_pieces_equal_the_flat_update, 0, N_ROW_CONFIGS);
    tcase_add_test(tc, max_abs_is_the_same_on_every_instruction_set);
    tcase_add_test(tc, an_unknown_instruction_set_is_refused_by_name);
    tcase_add_test(tc, rows_leave_untouched_rows_and_their_slots_alone);
    tcase_add_test(tc, rows_sum_duplicate_indices_before_the_update);
    tcase_add_test(tc, rows_with_caller_scratch_match_rows_that_allocate);
    tcase_add_test(tc, rows_reject_out_of_range_indices_before_changing_anything);
    tcase_add_test(tc, rows_with_no_indices_change_nothing);
    tcase_add_test(tc, validate_names_bad_rates_and_factors);
    tcase_add_test(tc, checks_find_the_first_element_an_update_would_break);
    tcase_add_test(tc, bounds_that_prove_an_update_safe_are_never_wrong);
    tcase_add_test(tc, newer_kinds_take_keras_defaults_and_names);
    tcase_add_test(tc, ftrl_slots_start_at_the_accumulator_value_and_zero);
    tcase_add_test(tc, weight_decay_shrinks_the_weights_before_the_update);
    tcase_add_test(tc, lion_steps_by_the_sign_of_the_interpolated_momentum);
    tcase_add_test(tc, clipping_follows_keras);
    tcase_add_test(tc, validate_names_the_newer_options);
    tcase_add_test(tc, bounds_check_the_products_before_the_division);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
