/* The wire form of optimizer configurations (tessera.v1.OptimizerConfig), both directions: the
 * chief sends a job's optimizer to the parameter servers, which apply it. */
#ifndef TESSERA_OPTIMIZER_PROTO_H
#define TESSERA_OPTIMIZER_PROTO_H

#include "optim/optimizer.h"
#include "base/status.h"
#include "tessera/v1/common.pb-c.h"

/* An OptimizerConfig with storage for its sub-messages. */
typedef struct optimizer_msg {
    Tessera__V1__OptimizerConfig msg;
    Tessera__V1__LearningRateSchedule schedule;
    union {
        Tessera__V1__OptimizerConfig__Sgd sgd;
        Tessera__V1__OptimizerConfig__Adam adam;
        Tessera__V1__OptimizerConfig__Adagrad adagrad;
        Tessera__V1__OptimizerConfig__RmsProp rmsprop;
        Tessera__V1__OptimizerConfig__Nadam nadam;
        Tessera__V1__OptimizerConfig__Lion lion;
        Tessera__V1__OptimizerConfig__Ftrl ftrl;
    } sub;
    union {
        Tessera__V1__LearningRateSchedule__Constant constant;
        Tessera__V1__LearningRateSchedule__LinearWarmup warmup;
        Tessera__V1__LearningRateSchedule__ExponentialDecay decay;
        Tessera__V1__LearningRateSchedule__PiecewiseConstant piecewise;
    } schedule_sub;
} optimizer_msg_t;

/* Writes o into ret->msg with `scale` as the learning-rate scale (the linear scaling rule
 * resolved by the caller). ret->msg points into ret and into o's piecewise arrays: keep both
 * alive while the message is used. */
void optimizer_to_proto(const optimizer_config_t *o, double scale, optimizer_msg_t *ret);

/* Reads an OptimizerConfig: every field is taken as it is (0 included: the sender fills them
 * all), except a learning rate of 0, which means the kind's default, and a scale of 0, which
 * means 1; the result is validated (optimizer_config_validate), and err names what is wrong. */
status_t optimizer_from_proto(const Tessera__V1__OptimizerConfig *p, optimizer_config_t *ret,
                              status_msg_t *err);

#endif
