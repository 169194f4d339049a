/* Initializers on the wire (rpc/initializer_proto.h). */
#include "rpc/initializer_proto.h"

#include <math.h>
#include <string.h>

#include "job/initializer.h"

static status_t need_fan(int64_t v, const char *field, status_msg_t *err)
{
    if (v < 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "initializer.%s must be >= 0, got %lld",
                           field, (long long)v);
    return STATUS_OK;
}

static status_t need_finite(double v, const char *field, status_msg_t *err)
{
    if (!isfinite(v))
        return status_fail(err, STATUS_INVALID_ARGUMENT, "initializer.%s must be finite, got %g",
                           field, v);
    return STATUS_OK;
}

status_t initializer_from_proto(const Tessera__V1__Initializer *p, job_init_t *ret_init,
                                double *ret_fan_in, double *ret_fan_out, status_msg_t *err)
{
    job_init_t in = {.kind = JOB_INIT_DEFAULT};
    int64_t fan_in = 0, fan_out = 0;

    if (p != NULL) {
        in.has_seed = p->seed != 0;
        in.seed = p->seed;
    }
    switch (p == NULL ? TESSERA__V1__INITIALIZER__KIND__NOT_SET : p->kind_case) {
    case TESSERA__V1__INITIALIZER__KIND__NOT_SET:
        break;
    case TESSERA__V1__INITIALIZER__KIND_ZEROS:
        in.kind = JOB_INIT_ZEROS;
        break;
    case TESSERA__V1__INITIALIZER__KIND_ONES:
        in.kind = JOB_INIT_ONES;
        break;
    case TESSERA__V1__INITIALIZER__KIND_CONSTANT:
        in.kind = JOB_INIT_CONSTANT;
        in.a = p->constant->value;
        STATUS_CHECK(need_finite(in.a, "constant.value", err));
        break;
    case TESSERA__V1__INITIALIZER__KIND_GLOROT_UNIFORM:
        in.kind = JOB_INIT_GLOROT_UNIFORM;
        fan_in = p->glorot_uniform->fan_in;
        fan_out = p->glorot_uniform->fan_out;
        STATUS_CHECK(need_fan(fan_in, "glorot_uniform.fan_in", err));
        STATUS_CHECK(need_fan(fan_out, "glorot_uniform.fan_out", err));
        break;
    case TESSERA__V1__INITIALIZER__KIND_GLOROT_NORMAL:
        in.kind = JOB_INIT_GLOROT_NORMAL;
        fan_in = p->glorot_normal->fan_in;
        fan_out = p->glorot_normal->fan_out;
        STATUS_CHECK(need_fan(fan_in, "glorot_normal.fan_in", err));
        STATUS_CHECK(need_fan(fan_out, "glorot_normal.fan_out", err));
        break;
    case TESSERA__V1__INITIALIZER__KIND_HE_UNIFORM:
        in.kind = JOB_INIT_HE_UNIFORM;
        fan_in = p->he_uniform->fan_in;
        STATUS_CHECK(need_fan(fan_in, "he_uniform.fan_in", err));
        break;
    case TESSERA__V1__INITIALIZER__KIND_HE_NORMAL:
        in.kind = JOB_INIT_HE_NORMAL;
        fan_in = p->he_normal->fan_in;
        STATUS_CHECK(need_fan(fan_in, "he_normal.fan_in", err));
        break;
    case TESSERA__V1__INITIALIZER__KIND_RANDOM_UNIFORM:
        in.kind = JOB_INIT_RANDOM_UNIFORM;
        in.a = p->random_uniform->minval;
        in.b = p->random_uniform->maxval;
        STATUS_CHECK(need_finite(in.a, "random_uniform.minval", err));
        STATUS_CHECK(need_finite(in.b, "random_uniform.maxval", err));
        if (in.a > in.b)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "initializer.random_uniform: minval %g is above maxval %g", in.a,
                               in.b);
        break;
    case TESSERA__V1__INITIALIZER__KIND_RANDOM_NORMAL:
        in.kind = JOB_INIT_RANDOM_NORMAL;
        in.a = p->random_normal->mean;
        in.b = p->random_normal->stddev;
        STATUS_CHECK(need_finite(in.a, "random_normal.mean", err));
        STATUS_CHECK(need_finite(in.b, "random_normal.stddev", err));
        if (in.b < 0)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "initializer.random_normal.stddev must be >= 0, got %g", in.b);
        break;
    case TESSERA__V1__INITIALIZER__KIND_VALUES:
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "initializer.values: a shard's own values are taken only by a "
                           "parameter server's CreateVariables");
    default:
        return status_fail(err, STATUS_INVALID_ARGUMENT, "initializer: unknown kind %d",
                           (int)p->kind_case);
    }
    STATUS_CHECK(initializer_check(&in, err));
    *ret_init = in;
    *ret_fan_in = (double)fan_in;
    *ret_fan_out = (double)fan_out;
    return STATUS_OK;
}

void initializer_to_proto(const job_init_t *init, job_init_kind_t dflt, initializer_msg_t *ret)
{
    Tessera__V1__Initializer *m = &ret->msg;
    job_init_kind_t kind = init != NULL && init->kind != JOB_INIT_DEFAULT ? init->kind : dflt;
    bool given = init != NULL && init->kind == kind; /* parameters come from init, not defaults */

    tessera__v1__initializer__init(m);
    m->seed = init != NULL && init->has_seed ? init->seed : 0;
    switch (kind) {
    case JOB_INIT_DEFAULT:
    case JOB_INIT_ZEROS:
        tessera__v1__initializer__zeros__init(&ret->sub.zeros);
        m->kind_case = TESSERA__V1__INITIALIZER__KIND_ZEROS;
        m->zeros = &ret->sub.zeros;
        break;
    case JOB_INIT_ONES:
        tessera__v1__initializer__ones__init(&ret->sub.ones);
        m->kind_case = TESSERA__V1__INITIALIZER__KIND_ONES;
        m->ones = &ret->sub.ones;
        break;
    case JOB_INIT_CONSTANT:
        tessera__v1__initializer__constant__init(&ret->sub.constant);
        ret->sub.constant.value = given ? init->a : 0;
        m->kind_case = TESSERA__V1__INITIALIZER__KIND_CONSTANT;
        m->constant = &ret->sub.constant;
        break;
    case JOB_INIT_GLOROT_UNIFORM:
        tessera__v1__initializer__glorot_uniform__init(&ret->sub.glorot_uniform);
        m->kind_case = TESSERA__V1__INITIALIZER__KIND_GLOROT_UNIFORM;
        m->glorot_uniform = &ret->sub.glorot_uniform;
        break;
    case JOB_INIT_GLOROT_NORMAL:
        tessera__v1__initializer__glorot_normal__init(&ret->sub.glorot_normal);
        m->kind_case = TESSERA__V1__INITIALIZER__KIND_GLOROT_NORMAL;
        m->glorot_normal = &ret->sub.glorot_normal;
        break;
    case JOB_INIT_HE_UNIFORM:
        tessera__v1__initializer__he_uniform__init(&ret->sub.he_uniform);
        m->kind_case = TESSERA__V1__INITIALIZER__KIND_HE_UNIFORM;
        m->he_uniform = &ret->sub.he_uniform;
        break;
    case JOB_INIT_HE_NORMAL:
        tessera__v1__initializer__he_normal__init(&ret->sub.he_normal);
        m->kind_case = TESSERA__V1__INITIALIZER__KIND_HE_NORMAL;
        m->he_normal = &ret->sub.he_normal;
        break;
    case JOB_INIT_RANDOM_UNIFORM: /* Keras: RandomUniform(-0.05, 0.05) */
        tessera__v1__initializer__random_uniform__init(&ret->sub.random_uniform);
        ret->sub.random_uniform.minval = given ? init->a : -0.05;
        ret->sub.random_uniform.maxval = given ? init->b : 0.05;
        m->kind_case = TESSERA__V1__INITIALIZER__KIND_RANDOM_UNIFORM;
        m->random_uniform = &ret->sub.random_uniform;
        break;
    case JOB_INIT_RANDOM_NORMAL: /* Keras: RandomNormal(0, 0.05) */
        tessera__v1__initializer__random_normal__init(&ret->sub.random_normal);
        ret->sub.random_normal.mean = given ? init->a : 0;
        ret->sub.random_normal.stddev = given ? init->b : 0.05;
        m->kind_case = TESSERA__V1__INITIALIZER__KIND_RANDOM_NORMAL;
        m->random_normal = &ret->sub.random_normal;
        break;
    }
}

/* ---- constraints -------------------------------------------------------------------------- */

/* The wire's kinds in job_constraint_kind_t's order: the two enums agree by value. */
_Static_assert((int)TESSERA__V1__CONSTRAINT__KIND__KIND_NON_NEG == (int)JOB_CONSTRAINT_NON_NEG &&
                   (int)TESSERA__V1__CONSTRAINT__KIND__KIND_MIN_MAX_NORM ==
                       (int)JOB_CONSTRAINT_MIN_MAX_NORM,
               "ps.proto Constraint.Kind and job_constraint_kind_t differ");

status_t constraint_from_proto(const Tessera__V1__Constraint *p, int rank, job_constraint_t *ret,
                               status_msg_t *err)
{
    job_constraint_t c = {.kind = JOB_CONSTRAINT_NONE};
    const char *bad = NULL;

    if (p == NULL || p->kind == TESSERA__V1__CONSTRAINT__KIND__KIND_NONE) {
        *ret = c;
        return STATUS_OK;
    }
    if ((unsigned)p->kind > (unsigned)JOB_CONSTRAINT_MIN_MAX_NORM)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "constraint.kind: %d is no constraint",
                           (int)p->kind);
    c.kind = (job_constraint_kind_t)p->kind;
    c.min_value = p->min_value;
    c.max_value = p->max_value;
    c.rate = p->rate;
    c.axes = c.kind == JOB_CONSTRAINT_NON_NEG && p->axes == 0 ? 1 : p->axes; /* unused there */
    if (rank > JOB_MAX_RANK)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "constraint on a variable of %d dimensions: weights have at most %d",
                           rank, JOB_MAX_RANK);
    if (!job_constraint_valid(&c, &bad))
        return status_fail(err, STATUS_INVALID_ARGUMENT, "constraint.%s is out of range", bad);
    if (c.kind != JOB_CONSTRAINT_NON_NEG && rank < 32 && (c.axes >> rank) != 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "constraint.axes 0x%x names a dimension past the variable's %d", c.axes,
                           rank);
    *ret = c;
    return STATUS_OK;
}

Tessera__V1__Constraint *constraint_to_proto(const job_constraint_t *c,
                                             Tessera__V1__Constraint *msg)
{
    if (c == NULL || c->kind == JOB_CONSTRAINT_NONE)
        return NULL;
    tessera__v1__constraint__init(msg);
    msg->kind = (Tessera__V1__Constraint__Kind)c->kind;
    msg->min_value = c->min_value;
    msg->max_value = c->max_value;
    msg->rate = c->rate;
    msg->axes = c->axes;
    return msg;
}

bool constraint_spans_rows(const job_constraint_t *c)
{
    return c->kind != JOB_CONSTRAINT_NONE && c->kind != JOB_CONSTRAINT_NON_NEG && (c->axes & 1u);
}
