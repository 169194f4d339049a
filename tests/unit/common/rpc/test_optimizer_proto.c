/* Optimizer configurations survive the trip chief -> wire -> parameter server. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "rpc/optimizer_proto.h"

/* Packs o as the chief would, unpacks the bytes as the PS receives them, and reads them back. */
static optimizer_config_t round_trip(const optimizer_config_t *o, double scale)
{
    optimizer_msg_t m;
    optimizer_config_t back;
    status_msg_t err = {0};
    uint8_t buf[4096];
    size_t n;
    Tessera__V1__OptimizerConfig *wire;

    optimizer_to_proto(o, scale, &m);
    n = tessera__v1__optimizer_config__pack(&m.msg, buf);
    wire = tessera__v1__optimizer_config__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(wire);
    memset(&back, 0, sizeof(back));
    ck_assert_msg(optimizer_from_proto(wire, &back, &err) == STATUS_OK, "%s", err.text);
    tessera__v1__optimizer_config__free_unpacked(wire, NULL);
    return back;
}

START_TEST(optimizer_proto_round_trips_every_kind_and_option)
{
    optimizer_config_t o, b;

    optimizer_config_default(OPTIMIZER_SGD, &o);
    o.momentum = 0.9;
    o.nesterov = true;
    o.schedule.lr = 0.05;
    b = round_trip(&o, 1);
    ck_assert_int_eq(b.kind, OPTIMIZER_SGD);
    ck_assert(b.momentum == 0.9 && b.nesterov && b.schedule.lr == 0.05);

    optimizer_config_default(OPTIMIZER_ADAM, &o);
    o.beta_1 = 0.8;
    o.amsgrad = true;
    b = round_trip(&o, 2);
    ck_assert_int_eq(b.kind, OPTIMIZER_ADAM);
    ck_assert(b.beta_1 == 0.8 && b.beta_2 == 0.999 && b.amsgrad && b.lr_scale == 2);

    optimizer_config_default(OPTIMIZER_ADAGRAD, &o);
    o.initial_accumulator_value = 0.5;
    b = round_trip(&o, 1);
    ck_assert(b.kind == OPTIMIZER_ADAGRAD && b.initial_accumulator_value == 0.5);

    optimizer_config_default(OPTIMIZER_RMSPROP, &o);
    o.rho = 0.8;
    o.momentum = 0.5;
    o.centered = true;
    b = round_trip(&o, 1);
    ck_assert(b.kind == OPTIMIZER_RMSPROP && b.rho == 0.8 && b.momentum == 0.5 && b.centered);
}
END_TEST

/* Every kind with options away from their defaults, zeros included (a zero is a value on the
 * wire, not "the default": Adam's epsilon 0 stays 0), and the weight decay. The clipping stays
 * on the worker and does not travel. */
START_TEST(optimizer_proto_round_trips_the_newer_kinds_and_zeros)
{
    optimizer_config_t o, b;

    for (int k = 0; k < OPTIMIZER_KINDS; k++) {
        optimizer_config_default((optimizer_kind_t)k, &o);
        o.weight_decay = 0.25;
        o.beta_1 = 0.5;
        o.beta_2 = 0.75;
        o.epsilon = 0;
        o.initial_accumulator_value = 0;
        o.learning_rate_power = -0.125;
        o.l1 = 0.5;
        o.l2 = 0.25;
        o.l2_shrinkage = 0.125;
        o.beta = 2;
        o.amsgrad = k == OPTIMIZER_ADAM || k == OPTIMIZER_ADAMW;
        b = round_trip(&o, 1);
        /* what the kind does not read keeps its default on the way back */
        if (k != OPTIMIZER_FTRL) {
            b.learning_rate_power = o.learning_rate_power;
            b.l1 = o.l1, b.l2 = o.l2, b.l2_shrinkage = o.l2_shrinkage, b.beta = o.beta;
        }
        if (k != OPTIMIZER_ADAM && k != OPTIMIZER_ADAMW && k != OPTIMIZER_NADAM &&
            k != OPTIMIZER_ADAMAX && k != OPTIMIZER_LION)
            b.beta_1 = o.beta_1, b.beta_2 = o.beta_2;
        if (k != OPTIMIZER_ADAGRAD && k != OPTIMIZER_FTRL)
            b.initial_accumulator_value = o.initial_accumulator_value;
        if (k == OPTIMIZER_SGD || k == OPTIMIZER_LION || k == OPTIMIZER_FTRL)
            b.epsilon = o.epsilon;
        ck_assert_msg(optimizer_config_equal(&o, &b), "%s changed on the wire",
                      optimizer_kind_name((optimizer_kind_t)k));
    }
}
END_TEST

START_TEST(optimizer_proto_round_trips_every_schedule)
{
    optimizer_config_t o, b;

    optimizer_config_default(OPTIMIZER_ADAM, &o);
    o.schedule.kind = LR_LINEAR_WARMUP;
    o.schedule.lr = 0.01;
    o.schedule.initial_lr = 0.001;
    o.schedule.warmup_steps = 100;
    b = round_trip(&o, 1);
    ck_assert(b.schedule.kind == LR_LINEAR_WARMUP && b.schedule.warmup_steps == 100);
    ck_assert(optimizer_learning_rate(&b, 50) == optimizer_learning_rate(&o, 50));

    o.schedule.kind = LR_EXPONENTIAL_DECAY;
    o.schedule.initial_lr = 0.1;
    o.schedule.decay_steps = 10;
    o.schedule.decay_rate = 0.5;
    o.schedule.staircase = true;
    b = round_trip(&o, 1);
    ck_assert(optimizer_learning_rate(&b, 25) == optimizer_learning_rate(&o, 25));

    o.schedule.kind = LR_PIECEWISE_CONSTANT;
    o.schedule.n_boundaries = 2;
    o.schedule.boundaries[0] = 10, o.schedule.boundaries[1] = 20;
    o.schedule.values[0] = 0.1, o.schedule.values[1] = 0.01, o.schedule.values[2] = 0.001;
    b = round_trip(&o, 1);
    for (int64_t step = 0; step < 30; step += 5)
        ck_assert(optimizer_learning_rate(&b, step) == optimizer_learning_rate(&o, step));
}
END_TEST

START_TEST(optimizer_proto_rejects_a_config_without_a_kind)
{
    Tessera__V1__OptimizerConfig wire = TESSERA__V1__OPTIMIZER_CONFIG__INIT;
    optimizer_config_t c;
    status_msg_t err = {0};
    ck_assert_int_eq(optimizer_from_proto(&wire, &c, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.text, "optimizer"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optimizer_proto");
    TCase *tc = tcase_create("optimizer_proto");

    tcase_add_test(tc, optimizer_proto_round_trips_every_kind_and_option);
    tcase_add_test(tc, optimizer_proto_round_trips_the_newer_kinds_and_zeros);
    tcase_add_test(tc, optimizer_proto_round_trips_every_schedule);
    tcase_add_test(tc, optimizer_proto_rejects_a_config_without_a_kind);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
