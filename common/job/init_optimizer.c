#include "job/init_optimizer.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "files/checkpoint.h"

void init_optimizer_done(init_optimizer_t *p)
{
    free(p->param);
    free(p->slot);
    free(p->at);
    *p = (init_optimizer_t){0};
}

/* The iteration count (variable 0), checked. */
static status_t read_iterations(const init_weights_t *w, int64_t *ret, status_msg_t *err)
{
    const st_info_t *v = init_weights_optimizer_info(w, 0);

    if (v->dtype != ST_I64 || v->rank != 0)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: optimizer variable 0 is not an iteration count (an integer)",
                           w->path);
    STATUS_CHECK(init_weights_optimizer_read(w, 0, ret, err));
    if (*ret < 0 || *ret > OPTIMIZER_MAX_ITERATIONS)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: the optimizer's iteration count is %lld (from 0 to 2^53)", w->path,
                           (long long)*ret);
    return STATUS_OK;
}

/* The learning rate Keras keeps beside a constant one (variable 1): the compile config's, which
 * o already has (Keras writes the variable's value there); one that differs is named. */
static status_t check_learning_rate(const init_weights_t *w, const optimizer_config_t *o,
                                    status_msg_t *err)
{
    const st_info_t *v = init_weights_optimizer_info(w, 1);
    float lr = 0;

    if (v == NULL || v->dtype != ST_F32 || v->rank != 0)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: optimizer variable 1 is not a learning rate (a float32 "
                           "scalar), as a Keras optimizer without a schedule keeps",
                           w->path);
    STATUS_CHECK(init_weights_optimizer_read(w, 1, &lr, err));
    if (lr != (float)o->schedule.lr)
        LOG_WARNING(TRAIN,
                    "%s: the optimizer's learning rate variable is %g, its compile config says "
                    "%g: training goes on at the compile config's",
                    w->path, (double)lr, o->schedule.lr);
    return STATUS_OK;
}

static status_t check_var(const init_weights_t *w, size_t i, const st_tensor_t *var,
                          const char *what, status_msg_t *err)
{
    return init_weights_optimizer_check(w, i, var->shape, var->rank, what, var->name, err);
}

status_t init_optimizer_plan(const init_weights_t *w, const optimizer_config_t *o,
                             const st_tensor_t *vars, const bool *moving, size_t n, int accumulate,
                             init_optimizer_t *ret, status_msg_t *err)
{
    size_t have = init_weights_optimizer_count(w), next = 1, trainable = 0, count, expect;
    size_t cap = n * OPTIMIZER_MAX_SLOTS + 1;
    int k = accumulate > 1 ? accumulate : 1;
    int64_t iterations = 0;
    status_t rc = STATUS_OK;

    *ret = (init_optimizer_t){0};
    if (init_weights_optimizer_unread(w) != NULL)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: its optimizer's state cannot be read (%s): name an optimizer in "
                           "the job to start a new one",
                           w->path, init_weights_optimizer_unread(w));
    if (have == 0)
        return STATUS_OK;
    STATUS_CHECK(read_iterations(w, &iterations, err));
    if (o->schedule.kind == LR_CONSTANT) { /* else a schedule, which Keras keeps no variable of */
        STATUS_CHECK(check_learning_rate(w, o, err));
        next++;
    }
    for (size_t i = 0; i < n; i++)
        trainable += !moving[i];
    ret->param = calloc(cap, sizeof(*ret->param));
    ret->slot = calloc(cap, sizeof(*ret->slot));
    ret->at = calloc(cap, sizeof(*ret->at));
    if (ret->param == NULL || ret->slot == NULL || ret->at == NULL) {
        init_optimizer_done(ret);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    count = optimizer_keras_order(o, moving, n, ret->param, ret->slot);
    expect = (k > 1 ? trainable : 0) + count + (o->kind == OPTIMIZER_NADAM);
    if (have - next != expect && (have - next != 0 || (iterations > 0 && expect > 0)))
        rc = status_fail(err, STATUS_BAD_CONFIG,
                         "%s: its optimizer holds %zu variables after the iteration count%s, "
                         "%s over this model keeps %zu: the optimizer of another model (name an "
                         "optimizer in the job to start a new one)",
                         w->path, have - next, next > 1 ? " and learning rate" : "",
                         optimizer_keras_name(o->kind), expect);
    if (rc == STATUS_OK && have - next == expect) {
        /* Keras's gradient accumulators come first: the window in progress is dropped */
        for (size_t i = 0, j = 0; k > 1 && i < n && rc == STATUS_OK; i++)
            if (!moving[i])
                rc = check_var(w, next + j++, &vars[i], "gradient accumulator", err);
        if (k > 1)
            next += trainable;
        if (rc == STATUS_OK && k > 1 && iterations % k != 0)
            LOG_WARNING(TRAIN,
                        "%s: %lld batches of a window of gradient_accumulation_steps %d were "
                        "accumulated when it was saved; training starts a new window",
                        w->path, (long long)(iterations % k), k);
        for (size_t j = 0; j < count && rc == STATUS_OK; j++) {
            ret->at[j] = next + j;
            rc = check_var(w, ret->at[j], &vars[ret->param[j]], "optimizer slot", err);
        }
        ret->n = count;
    }
    ret->updates = iterations / k;
    if (rc != STATUS_OK)
        init_optimizer_done(ret);
    return rc;
}

status_t init_optimizer_read(const init_weights_t *w, const optimizer_config_t *o,
                             const init_optimizer_t *p, size_t j, float *out, status_msg_t *err)
{
    const st_info_t *v = init_weights_optimizer_info(w, p->at[j]);
    const char *slot = optimizer_slot_name(o, p->slot[j]);
    char name[96];

    STATUS_CHECK(init_weights_optimizer_read(w, p->at[j], out, err));
    snprintf(name, sizeof(name), "optimizer variable %zu (%s)", p->at[j], slot);
    return ckpt_check_floats(w->path, name, out, (size_t)v->elements, ckpt_slot_nonnegative(slot),
                             err);
}
