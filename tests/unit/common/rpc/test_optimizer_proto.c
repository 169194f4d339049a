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
    tcase_add_test(tc, optimizer_proto_round_trips_every_schedule);
    tcase_add_test(tc, optimizer_proto_rejects_a_config_without_a_kind);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
