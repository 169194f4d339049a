/* Learning-rate schedules against values worked out by hand from Keras 3's formulas
 * (keras/src/optimizers/schedules/learning_rate_schedule.py), and their validation. */
#include <check.h>
#include <stdint.h>

#include "check_run.h"
#include "optim/optimizer.h"
#include "optim_check.h"

START_TEST(constant_rate_is_multiplied_by_lr_scale)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 0.01);

    ASSERT_CLOSE(optimizer_learning_rate(&c, 0), 0.01);
    c.lr_scale = 4.0;
    ASSERT_CLOSE(optimizer_learning_rate(&c, 0), 0.04);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 123456), 0.04);
}
END_TEST

START_TEST(linear_warmup_ramps_to_lr_and_stays)
{
    /* initial 0.1 -> lr 0.5 over 4 steps: 0.1 + 0.4 * step / 4 for step < 4, then 0.5. */
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 0.5);

    c.schedule.kind = LR_LINEAR_WARMUP;
    c.schedule.initial_lr = 0.1;
    c.schedule.warmup_steps = 4;
    ASSERT_CLOSE(optimizer_learning_rate(&c, 0), 0.1);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 1), 0.2);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 2), 0.3);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 3), 0.4);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 4), 0.5);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 1000), 0.5);
    c.lr_scale = 2.0;
    ASSERT_CLOSE(optimizer_learning_rate(&c, 2), 0.6);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 4), 1.0);
}
END_TEST

START_TEST(exponential_decay_is_continuous_unless_staircase)
{
    /* 0.1 * 0.5 ^ (step / 10): step 5 -> 0.1 * 0.5^0.5 = 0.0707106781, step 10 -> 0.05,
     * step 25 -> 0.1 * 0.5^2.5 = 0.0176776695. Staircase floors the exponent: 9 -> 0.1,
     * 10 -> 0.05, 19 -> 0.05, 25 -> 0.025. */
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 1.0);

    c.schedule.kind = LR_EXPONENTIAL_DECAY;
    c.schedule.initial_lr = 0.1;
    c.schedule.decay_rate = 0.5;
    c.schedule.decay_steps = 10;
    ASSERT_CLOSE(optimizer_learning_rate(&c, 0), 0.1);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 5), 0.07071067812);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 10), 0.05);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 25), 0.01767766953);
    c.schedule.staircase = true;
    ASSERT_CLOSE(optimizer_learning_rate(&c, 0), 0.1);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 9), 0.1);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 10), 0.05);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 19), 0.05);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 25), 0.025);
    c.lr_scale = 3.0;
    ASSERT_CLOSE(optimizer_learning_rate(&c, 10), 0.15);
}
END_TEST

START_TEST(piecewise_constant_includes_each_boundary_in_the_piece_before)
{
    /* Keras's docstring example: boundaries [100000, 110000], values [1.0, 0.5, 0.1] is 1.0 for
     * the first 100001 steps (0..100000), 0.5 for the next 10000, 0.1 after. */
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 1.0);

    c.schedule.kind = LR_PIECEWISE_CONSTANT;
    c.schedule.n_boundaries = 2;
    c.schedule.boundaries[0] = 100000;
    c.schedule.boundaries[1] = 110000;
    c.schedule.values[0] = 1.0;
    c.schedule.values[1] = 0.5;
    c.schedule.values[2] = 0.1;
    ASSERT_CLOSE(optimizer_learning_rate(&c, 0), 1.0);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 100000), 1.0);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 100001), 0.5);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 110000), 0.5);
    ASSERT_CLOSE(optimizer_learning_rate(&c, 110001), 0.1);
    ASSERT_CLOSE(optimizer_learning_rate(&c, INT64_MAX), 0.1);
    c.lr_scale = 2.0;
    ASSERT_CLOSE(optimizer_learning_rate(&c, 100001), 1.0);
}
END_TEST

START_TEST(updates_use_the_rate_scheduled_for_their_step)
{
    /* SGD with values [0.1, 0.01] split at boundary 0: step 0 moves w = 1 by 0.1 * 1 to 0.9,
     * step 1 by 0.01 to 0.89. */
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 1.0);
    float p = 1.0f, g = 1.0f;

    c.schedule.kind = LR_PIECEWISE_CONSTANT;
    c.schedule.n_boundaries = 1;
    c.schedule.boundaries[0] = 0;
    c.schedule.values[0] = 0.1;
    c.schedule.values[1] = 0.01;
    optimizer_apply_dense(&c, 0, &p, &g, NULL, 1);
    ASSERT_CLOSE(p, 0.9);
    optimizer_apply_dense(&c, 1, &p, &g, NULL, 1);
    ASSERT_CLOSE(p, 0.89);
}
END_TEST

START_TEST(validate_names_bad_schedules)
{
    optimizer_config_t c = config_with_lr(OPTIMIZER_SGD, 0.1);
    status_msg_t err;

    c.schedule.kind = LR_LINEAR_WARMUP;
    c.schedule.initial_lr = 0.0; /* warming up from zero is the usual case */
    c.schedule.warmup_steps = 0;
    assert_rejected(&c, "optimizer.schedule.warmup_steps must be > 0, got 0");
    c.schedule.warmup_steps = 100;
    ck_assert_int_eq(optimizer_config_validate(&c, &err), STATUS_OK);

    c.schedule.kind = LR_EXPONENTIAL_DECAY;
    c.schedule.initial_lr = 0.1;
    c.schedule.decay_rate = 0.9;
    c.schedule.decay_steps = 0;
    assert_rejected(&c, "optimizer.schedule.decay_steps must be > 0, got 0");
    c.schedule.decay_steps = 1000;
    ck_assert_int_eq(optimizer_config_validate(&c, &err), STATUS_OK);
    c.schedule.decay_rate = 0.0;
    assert_rejected(&c, "optimizer.schedule.decay_rate must be > 0, got 0");

    c.schedule.kind = LR_PIECEWISE_CONSTANT;
    c.schedule.n_boundaries = 2;
    c.schedule.boundaries[0] = 10;
    c.schedule.boundaries[1] = 10;
    c.schedule.values[0] = 0.1;
    c.schedule.values[1] = 0.01;
    c.schedule.values[2] = 0.001;
    assert_rejected(&c, "optimizer.schedule.boundaries must be strictly increasing");
    c.schedule.boundaries[1] = 20;
    ck_assert_int_eq(optimizer_config_validate(&c, &err), STATUS_OK);
    c.schedule.values[1] = 0.0;
    assert_rejected(&c, "optimizer.schedule.values[1] must be > 0, got 0");
    c.schedule.values[1] = 0.01;
    c.schedule.n_boundaries = LR_MAX_PIECES + 1;
    assert_rejected(&c, "optimizer.schedule.n_boundaries must be in [1, 16], got 17");
    c.schedule.n_boundaries = 0;
    assert_rejected(&c, "optimizer.schedule.n_boundaries");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("schedule");
    TCase *tc = tcase_create("schedule");

    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, constant_rate_is_multiplied_by_lr_scale);
    tcase_add_test(tc, linear_warmup_ramps_to_lr_and_stays);
    tcase_add_test(tc, exponential_decay_is_continuous_unless_staircase);
    tcase_add_test(tc, piecewise_constant_includes_each_boundary_in_the_piece_before);
    tcase_add_test(tc, updates_use_the_rate_scheduled_for_their_step);
    tcase_add_test(tc, validate_names_bad_schedules);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
