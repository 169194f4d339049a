/* bfloat16 conversions, as parameter-server jobs with train.wire_dtype: bfloat16 send gradients
 * and values: round to nearest, ties to even; NaN stays NaN; widening exact; error feedback
 * loses nothing for good. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/bf16.h"
#include "check_run.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

START_TEST(narrowing_rounds_to_nearest_even)
{
    ck_assert_uint_eq(bf16_from_float(1.0f), 0x3f80);
    ck_assert_uint_eq(bf16_from_float(-2.0f), 0xc000);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even one, 1 */
    ck_assert_uint_eq(bf16_from_float(from_bits(0x3f808000u)), 0x3f80);
    /* 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to the even one, up */
    ck_assert_uint_eq(bf16_from_float(from_bits(0x3f818000u)), 0x3f82);
    /* just above halfway: up; just below: down */
    ck_assert_uint_eq(bf16_from_float(from_bits(0x3f808001u)), 0x3f81);
    ck_assert_uint_eq(bf16_from_float(from_bits(0x3f807fffu)), 0x3f80);
    /* the largest finite float rounds to infinity, as a cast does */
    ck_assert_uint_eq(bf16_from_float(from_bits(0x7f7fffffu)), 0x7f80);
    ck_assert_uint_eq(bf16_from_float(INFINITY), 0x7f80);
    ck_assert_uint_eq(bf16_from_float(-INFINITY), 0xff80);
    ck_assert_uint_eq(bf16_from_float(0.0f), 0x0000);
    ck_assert_uint_eq(bf16_from_float(-0.0f), 0x8000);
}
END_TEST

START_TEST(nan_stays_nan_and_widening_is_exact)
{
    /* a NaN whose mantissa lies only in the low bits would become infinity if truncated */
    ck_assert(isnan(bf16_to_float(bf16_from_float(from_bits(0x7f800001u)))));
    ck_assert(isnan(bf16_to_float(bf16_from_float(NAN))));
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = bf16_to_float((uint16_t)h);
        if (!isnan(f))
            ck_assert_uint_eq(bf16_from_float(f), h); /* every bfloat16 round-trips */
    }
}
END_TEST

START_TEST(array_loops_match_the_scalar_conversions)
{
    enum { N = 1031 };
    float src[N], back[N];
    uint16_t h[N];

    for (size_t i = 0; i < N; i++)
        src[i] = (float)sin((double)i) * ldexpf(1.0f, (int)(i % 40) - 20);
    bf16_from_floats(h, src, N);
    bf16_to_floats(back, h, N);
    for (size_t i = 0; i < N; i++) {
        ck_assert_uint_eq(h[i], bf16_from_float(src[i]));
        ck_assert(back[i] == bf16_to_float(h[i]));
        ck_assert(fabsf(back[i] - src[i]) <= fabsf(src[i]) * 0x1p-8f);
    }
}
END_TEST

/* With error feedback the values sent add up to the gradients given, but for the residual left:
 * nothing rounding drops is lost for good. */
START_TEST(error_feedback_carries_what_rounding_dropped)
{
    enum { N = 64, STEPS = 100 };
    float g[N], residual[N] = {0};
    double sent[N] = {0}, given[N] = {0};
    uint16_t h[N];

    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < N; i++) {
            g[i] = 1.0f + (float)(i + 1) * 0x1p-12f; /* bits bfloat16 cannot hold */
            given[i] += g[i];
        }
        bf16_from_floats_feedback(h, g, residual, N);
        for (size_t i = 0; i < N; i++)
            sent[i] += bf16_to_float(h[i]);
    }
    for (size_t i = 0; i < N; i++)
        ck_assert_msg(fabs(sent[i] + residual[i] - given[i]) < 1e-3, "element %zu: %g + %g != %g",
                      i, sent[i], (double)residual[i], given[i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bf16");
    TCase *tc = tcase_create("bf16");

    tcase_add_test(tc, narrowing_rounds_to_nearest_even);
    tcase_add_test(tc, nan_stays_nan_and_widening_is_exact);
    tcase_add_test(tc, array_loops_match_the_scalar_conversions);
    tcase_add_test(tc, error_feedback_carries_what_rounding_dropped);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
