#include "rpc/optimizer_proto.h"

#include <string.h>

void optimizer_to_proto(const optimizer_config_t *o, double scale, optimizer_msg_t *ret)
{
    Tessera__V1__OptimizerConfig *p = &ret->msg;
    Tessera__V1__LearningRateSchedule *s = &ret->schedule;
    void *sub = &ret->sub, *sched_sub = &ret->schedule_sub;

    tessera__v1__optimizer_config__init(p);
    tessera__v1__learning_rate_schedule__init(s);
    p->learning_rate = s;
    p->scale = scale;
    switch (o->schedule.kind) {
    case LR_CONSTANT: {
        Tessera__V1__LearningRateSchedule__Constant *x = sched_sub;
        tessera__v1__learning_rate_schedule__constant__init(x);
        x->learning_rate = o->schedule.lr;
        s->kind_case = TESSERA__V1__LEARNING_RATE_SCHEDULE__KIND_CONSTANT;
        s->constant = x;
        break;
    }
    case LR_LINEAR_WARMUP: {
        Tessera__V1__LearningRateSchedule__LinearWarmup *x = sched_sub;
        tessera__v1__learning_rate_schedule__linear_warmup__init(x);
        x->learning_rate = o->schedule.lr;
        x->warmup_steps = o->schedule.warmup_steps;
        x->initial_learning_rate = o->schedule.initial_lr;
        s->kind_case = TESSERA__V1__LEARNING_RATE_SCHEDULE__KIND_LINEAR_WARMUP;
        s->linear_warmup = x;
        break;
    }
    case LR_EXPONENTIAL_DECAY: {
        Tessera__V1__LearningRateSchedule__ExponentialDecay *x = sched_sub;
        tessera__v1__learning_rate_schedule__exponential_decay__init(x);
        x->initial_learning_rate = o->schedule.initial_lr;
        x->decay_steps = o->schedule.decay_steps;
        x->decay_rate = o->schedule.decay_rate;
        x->staircase = o->schedule.staircase;
        s->kind_case = TESSERA__V1__LEARNING_RATE_SCHEDULE__KIND_EXPONENTIAL_DECAY;
        s->exponential_decay = x;
        break;
    }
    case LR_PIECEWISE_CONSTANT: {
        Tessera__V1__LearningRateSchedule__PiecewiseConstant *x = sched_sub;
        tessera__v1__learning_rate_schedule__piecewise_constant__init(x);
        x->n_boundaries = o->schedule.n_boundaries;
        x->boundaries = (int64_t *)o->schedule.boundaries;
        x->n_values = o->schedule.n_boundaries + 1;
        x->values = (double *)o->schedule.values;
        s->kind_case = TESSERA__V1__LEARNING_RATE_SCHEDULE__KIND_PIECEWISE_CONSTANT;
        s->piecewise_constant = x;
        break;
    }
    }
    p->weight_decay = o->weight_decay;
    switch (o->kind) {
    case OPTIMIZER_SGD: {
        Tessera__V1__OptimizerConfig__Sgd *x = sub;
        tessera__v1__optimizer_config__sgd__init(x);
        x->momentum = o->momentum;
        x->nesterov = o->nesterov;
        p->kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_SGD;
        p->sgd = x;
        break;
    }
    case OPTIMIZER_ADAM:
    case OPTIMIZER_ADAMW:
    case OPTIMIZER_ADAMAX: {
        Tessera__V1__OptimizerConfig__Adam *x = sub;
        tessera__v1__optimizer_config__adam__init(x);
        x->beta_1 = o->beta_1;
        x->beta_2 = o->beta_2;
        x->epsilon = o->epsilon;
        x->amsgrad = o->amsgrad;
        if (o->kind == OPTIMIZER_ADAM) {
            p->kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_ADAM;
            p->adam = x;
        } else if (o->kind == OPTIMIZER_ADAMW) {
            p->kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_ADAMW;
            p->adamw = x;
        } else {
            p->kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_ADAMAX;
            p->adamax = x;
        }
        break;
    }
    case OPTIMIZER_ADAGRAD: {
        Tessera__V1__OptimizerConfig__Adagrad *x = sub;
        tessera__v1__optimizer_config__adagrad__init(x);
        x->initial_accumulator_value = o->initial_accumulator_value;
        x->epsilon = o->epsilon;
        p->kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_ADAGRAD;
        p->adagrad = x;
        break;
    }
    case OPTIMIZER_RMSPROP: {
        Tessera__V1__OptimizerConfig__RmsProp *x = sub;
        tessera__v1__optimizer_config__rms_prop__init(x);
        x->rho = o->rho;
        x->momentum = o->momentum;
        x->epsilon = o->epsilon;
        x->centered = o->centered;
        p->kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_RMSPROP;
        p->rmsprop = x;
        break;
    }
    case OPTIMIZER_NADAM: {
        Tessera__V1__OptimizerConfig__Nadam *x = sub;
        tessera__v1__optimizer_config__nadam__init(x);
        x->beta_1 = o->beta_1;
        x->beta_2 = o->beta_2;
        x->epsilon = o->epsilon;
        p->kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_NADAM;
        p->nadam = x;
        break;
    }
    case OPTIMIZER_LION: {
        Tessera__V1__OptimizerConfig__Lion *x = sub;
        tessera__v1__optimizer_config__lion__init(x);
        x->beta_1 = o->beta_1;
        x->beta_2 = o->beta_2;
        p->kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_LION;
        p->lion = x;
        break;
    }
    case OPTIMIZER_FTRL: {
        Tessera__V1__OptimizerConfig__Ftrl *x = sub;
        tessera__v1__optimizer_config__ftrl__init(x);
        x->learning_rate_power = o->learning_rate_power;
        x->initial_accumulator_value = o->initial_accumulator_value;
        x->l1_regularization_strength = o->l1;
        x->l2_regularization_strength = o->l2;
        x->l2_shrinkage_regularization_strength = o->l2_shrinkage;
        x->beta = o->beta;
        p->kind_case = TESSERA__V1__OPTIMIZER_CONFIG__KIND_FTRL;
        p->ftrl = x;
        break;
    }
    case OPTIMIZER_KINDS:
        break;
    }
}

/* Zero fields take Keras's defaults (the wire has no presence for scalars); a learning rate of
 * 0 means "the optimizer's default" for the same reason. */
static status_t schedule_from_proto(const Tessera__V1__LearningRateSchedule *p, lr_schedule_t *s,
                                    status_msg_t *err)
{
    const Tessera__V1__LearningRateSchedule__PiecewiseConstant *pc;

    switch (p == NULL ? TESSERA__V1__LEARNING_RATE_SCHEDULE__KIND__NOT_SET : p->kind_case) {
    case TESSERA__V1__LEARNING_RATE_SCHEDULE__KIND__NOT_SET:
        return STATUS_OK;
    case TESSERA__V1__LEARNING_RATE_SCHEDULE__KIND_CONSTANT:
        if (p->constant->learning_rate != 0)
            s->lr = p->constant->learning_rate;
        return STATUS_OK;
    case TESSERA__V1__LEARNING_RATE_SCHEDULE__KIND_LINEAR_WARMUP:
        s->kind = LR_LINEAR_WARMUP;
        if (p->linear_warmup->learning_rate != 0)
            s->lr = p->linear_warmup->learning_rate;
        s->warmup_steps = p->linear_warmup->warmup_steps;
        s->initial_lr = p->linear_warmup->initial_learning_rate;
        return STATUS_OK;
    case TESSERA__V1__LEARNING_RATE_SCHEDULE__KIND_EXPONENTIAL_DECAY:
        s->kind = LR_EXPONENTIAL_DECAY;
        s->initial_lr = p->exponential_decay->initial_learning_rate;
        s->decay_steps = p->exponential_decay->decay_steps;
        s->decay_rate = p->exponential_decay->decay_rate;
        s->staircase = p->exponential_decay->staircase;
        return STATUS_OK;
    case TESSERA__V1__LEARNING_RATE_SCHEDULE__KIND_PIECEWISE_CONSTANT:
        pc = p->piecewise_constant;
        if (pc->n_boundaries < 1 || pc->n_boundaries > LR_MAX_PIECES ||
            pc->n_values != pc->n_boundaries + 1)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "optimizer.learning_rate.piecewise_constant needs 1 to %d "
                               "boundaries and one value more, got %zu and %zu",
                               LR_MAX_PIECES, pc->n_boundaries, pc->n_values);
        s->kind = LR_PIECEWISE_CONSTANT;
        s->n_boundaries = pc->n_boundaries;
        memcpy(s->boundaries, pc->boundaries, pc->n_boundaries * sizeof(int64_t));
        memcpy(s->values, pc->values, pc->n_values * sizeof(double));
        return STATUS_OK;
    default:
        return status_fail(err, STATUS_INVALID_ARGUMENT, "optimizer.learning_rate: unknown kind %d",
                           (int)p->kind_case);
    }
}

/* The Adam message's fields, which AdamW and Adamax share. */
static void adam_from_proto(const Tessera__V1__OptimizerConfig__Adam *a, optimizer_kind_t kind,
                            optimizer_config_t *c)
{
    optimizer_config_default(kind, c);
    c->beta_1 = a->beta_1;
    c->beta_2 = a->beta_2;
    c->epsilon = a->epsilon;
    c->amsgrad = kind != OPTIMIZER_ADAMAX && a->amsgrad;
}

status_t optimizer_from_proto(const Tessera__V1__OptimizerConfig *p, optimizer_config_t *c,
                              status_msg_t *err)
{
    switch (p->kind_case) {
    case TESSERA__V1__OPTIMIZER_CONFIG__KIND_SGD:
        optimizer_config_default(OPTIMIZER_SGD, c);
        c->momentum = p->sgd->momentum;
        c->nesterov = p->sgd->nesterov;
        break;
    case TESSERA__V1__OPTIMIZER_CONFIG__KIND_ADAM:
        adam_from_proto(p->adam, OPTIMIZER_ADAM, c);
        break;
    case TESSERA__V1__OPTIMIZER_CONFIG__KIND_ADAMW:
        adam_from_proto(p->adamw, OPTIMIZER_ADAMW, c);
        break;
    case TESSERA__V1__OPTIMIZER_CONFIG__KIND_ADAMAX:
        adam_from_proto(p->adamax, OPTIMIZER_ADAMAX, c);
        break;
    case TESSERA__V1__OPTIMIZER_CONFIG__KIND_ADAGRAD:
        optimizer_config_default(OPTIMIZER_ADAGRAD, c);
        c->initial_accumulator_value = p->adagrad->initial_accumulator_value;
        c->epsilon = p->adagrad->epsilon;
        break;
    case TESSERA__V1__OPTIMIZER_CONFIG__KIND_RMSPROP:
        optimizer_config_default(OPTIMIZER_RMSPROP, c);
        c->rho = p->rmsprop->rho;
        c->momentum = p->rmsprop->momentum;
        c->epsilon = p->rmsprop->epsilon;
        c->centered = p->rmsprop->centered;
        break;
    case TESSERA__V1__OPTIMIZER_CONFIG__KIND_NADAM:
        optimizer_config_default(OPTIMIZER_NADAM, c);
        c->beta_1 = p->nadam->beta_1;
        c->beta_2 = p->nadam->beta_2;
        c->epsilon = p->nadam->epsilon;
        break;
    case TESSERA__V1__OPTIMIZER_CONFIG__KIND_LION:
        optimizer_config_default(OPTIMIZER_LION, c);
        c->beta_1 = p->lion->beta_1;
        c->beta_2 = p->lion->beta_2;
        break;
    case TESSERA__V1__OPTIMIZER_CONFIG__KIND_FTRL:
        optimizer_config_default(OPTIMIZER_FTRL, c);
        c->learning_rate_power = p->ftrl->learning_rate_power;
        c->initial_accumulator_value = p->ftrl->initial_accumulator_value;
        c->l1 = p->ftrl->l1_regularization_strength;
        c->l2 = p->ftrl->l2_regularization_strength;
        c->l2_shrinkage = p->ftrl->l2_shrinkage_regularization_strength;
        c->beta = p->ftrl->beta;
        break;
    default:
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "optimizer: no kind given (sgd, adam, adagrad, rmsprop, adamw, nadam, "
                           "adamax, lion or ftrl)");
    }
    c->weight_decay = p->weight_decay;
    c->lr_scale = p->scale != 0 ? p->scale : 1.0;
    STATUS_CHECK(schedule_from_proto(p->learning_rate, &c->schedule, err));
    return optimizer_config_validate(c, err);
}
