/* Helpers shared by the optimizer and schedule suites. */
#ifndef TESSERA_TEST_OPTIM_CHECK_H
#define TESSERA_TEST_OPTIM_CHECK_H

#include <check.h>
#include <math.h>
#include <string.h>

#include "optim/optimizer.h"

static inline int close_enough(double got, double want)
{
    return fabs(got - want) <= 1e-6 * fabs(want) + 1e-12;
}

#define ASSERT_CLOSE(got, want)                                                                    \
    ck_assert_msg(close_enough((got), (want)), "%s = %.10g, want %.10g", #got, (double)(got),      \
                  (double)(want))

/* A config of `kind` with Keras's defaults and learning rate lr. */
static inline optimizer_config_t config_with_lr(optimizer_kind_t kind, double lr)
{
    optimizer_config_t c;
    optimizer_config_default(kind, &c);
    c.schedule.lr = lr;
    return c;
}

/* The config fails validation with a message containing text. */
static inline void assert_rejected(const optimizer_config_t *c, const char *text)
{
    status_msg_t err;

    ck_assert_int_eq(optimizer_config_validate(c, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, text) != NULL, "message \"%s\" lacks \"%s\"", err.text, text);
}

#endif
