/* Keras initializers: ranges, seeding, slices that match the whole variable, Keras's fans and
 * the conversion from the wire form. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "job/initializer.h"
#include "rpc/initializer_proto.h"
#include "tessera/v1/ps.pb-c.h"

#define N 1000

/* Filling [offset, offset + n) equals the same elements of the whole variable. */
static void assert_slices_match(const job_init_t *init, double fan_in, double fan_out)
{
    static float whole[N], part[N];
    static const size_t cuts[] = {0, 1, 7, 333, 500, 999};

    initializer_fill(init, JOB_INIT_ZEROS, whole, N, fan_in, fan_out, 1234);
    for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
        size_t off = cuts[c];
        initializer_fill_at(init, JOB_INIT_ZEROS, part, N - off, off, fan_in, fan_out, 1234);
        ck_assert_msg(memcmp(part, whole + off, (N - off) * sizeof(float)) == 0,
                      "kind %d: the slice at %zu differs from the whole", (int)init->kind, off);
    }
}

START_TEST(initializer_slices_equal_the_whole_variable)
{
    job_init_t kinds[] = {
        {.kind = JOB_INIT_GLOROT_UNIFORM},
        {.kind = JOB_INIT_HE_UNIFORM},
        {.kind = JOB_INIT_GLOROT_NORMAL},
        {.kind = JOB_INIT_HE_NORMAL},
        {.kind = JOB_INIT_RANDOM_UNIFORM, .a = -2, .b = 3},
        {.kind = JOB_INIT_RANDOM_NORMAL, .a = 1, .b = 0.5},
        {.kind = JOB_INIT_CONSTANT, .a = 0.25},
        {.kind = JOB_INIT_ONES},
        {.kind = JOB_INIT_ZEROS},
        {.kind = JOB_INIT_GLOROT_UNIFORM, .has_seed = true, .seed = 99},
    };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        assert_slices_match(&kinds[i], 30, 20);
}
END_TEST

START_TEST(initializer_glorot_uniform_stays_within_its_limit)
{
    float v[N];
    job_init_t init = {.kind = JOB_INIT_DEFAULT};
    double limit = sqrt(6.0 / (784 + 128)), lo = 0, hi = 0;

    initializer_fill(&init, JOB_INIT_GLOROT_UNIFORM, v, N, 784, 128, 7);
    for (size_t i = 0; i < N; i++) {
        ck_assert(fabs(v[i]) <= limit);
        lo = fmin(lo, v[i]);
        hi = fmax(hi, v[i]);
    }
    ck_assert(lo < -0.9 * limit && hi > 0.9 * limit); /* spread over the range */
}
END_TEST

START_TEST(initializer_truncated_normal_stays_within_two_deviations)
{
    float v[N];
    job_init_t init = {.kind = JOB_INIT_HE_NORMAL};
    double stddev = sqrt(2.0 / 50) / 0.87962566103423978;

    initializer_fill(&init, JOB_INIT_ZEROS, v, N, 50, 0, 3);
    for (size_t i = 0; i < N; i++)
        ck_assert(fabs(v[i]) <= 2 * stddev + 1e-6);
}
END_TEST

START_TEST(initializer_own_seed_overrides_the_stream_seed)
{
    float a[16], b[16], c[16];
    job_init_t seeded = {
        .kind = JOB_INIT_RANDOM_UNIFORM, .a = 0, .b = 1, .has_seed = true, .seed = 5};
    job_init_t plain = {.kind = JOB_INIT_RANDOM_UNIFORM, .a = 0, .b = 1};

    initializer_fill(&seeded, JOB_INIT_ZEROS, a, 16, 1, 1, 100);
    initializer_fill(&seeded, JOB_INIT_ZEROS, b, 16, 1, 1, 200);
    initializer_fill(&plain, JOB_INIT_ZEROS, c, 16, 1, 1, 100);
    ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
    ck_assert_int_ne(memcmp(a, c, sizeof(a)), 0);
}
END_TEST

START_TEST(initializer_fans_follow_keras_compute_fans)
{
    int64_t dense[2] = {784, 128}, bias[1] = {10}, conv[4] = {3, 3, 16, 32};
    double in, out;

    initializer_fans(NULL, 0, &in, &out);
    ck_assert(in == 1 && out == 1);
    initializer_fans(bias, 1, &in, &out);
    ck_assert(in == 10 && out == 10);
    initializer_fans(dense, 2, &in, &out);
    ck_assert(in == 784 && out == 128);
    initializer_fans(conv, 4, &in, &out);
    ck_assert(in == 3 * 3 * 16 && out == 3 * 3 * 32);
}
END_TEST

START_TEST(initializer_from_proto_maps_every_kind)
{
    Tessera__V1__Initializer p = TESSERA__V1__INITIALIZER__INIT;
    Tessera__V1__Initializer__GlorotUniform gu = TESSERA__V1__INITIALIZER__GLOROT_UNIFORM__INIT;
    Tessera__V1__Initializer__HeNormal hn = TESSERA__V1__INITIALIZER__HE_NORMAL__INIT;
    Tessera__V1__Initializer__RandomUniform ru = TESSERA__V1__INITIALIZER__RANDOM_UNIFORM__INIT;
    Tessera__V1__Initializer__Constant k = TESSERA__V1__INITIALIZER__CONSTANT__INIT;
    job_init_t in;
    double fi, fo;
    status_msg_t err;

    ck_assert_int_eq(initializer_from_proto(NULL, &in, &fi, &fo, &err), STATUS_OK);
    ck_assert_int_eq(in.kind, JOB_INIT_DEFAULT);
    ck_assert(!in.has_seed);

    gu.fan_in = 30;
    gu.fan_out = 20;
    p.kind_case = TESSERA__V1__INITIALIZER__KIND_GLOROT_UNIFORM;
    p.glorot_uniform = &gu;
    p.seed = 42;
    ck_assert_int_eq(initializer_from_proto(&p, &in, &fi, &fo, &err), STATUS_OK);
    ck_assert_int_eq(in.kind, JOB_INIT_GLOROT_UNIFORM);
    ck_assert(fi == 30 && fo == 20 && in.has_seed && in.seed == 42);

    hn.fan_in = 9;
    p.kind_case = TESSERA__V1__INITIALIZER__KIND_HE_NORMAL;
    p.he_normal = &hn;
    p.seed = 0;
    ck_assert_int_eq(initializer_from_proto(&p, &in, &fi, &fo, &err), STATUS_OK);
    ck_assert(in.kind == JOB_INIT_HE_NORMAL && fi == 9 && fo == 0 && !in.has_seed);

    ru.minval = -1;
    ru.maxval = 2;
    p.kind_case = TESSERA__V1__INITIALIZER__KIND_RANDOM_UNIFORM;
    p.random_uniform = &ru;
    ck_assert_int_eq(initializer_from_proto(&p, &in, &fi, &fo, &err), STATUS_OK);
    ck_assert(in.kind == JOB_INIT_RANDOM_UNIFORM && in.a == -1 && in.b == 2);

    k.value = 0.5;
    p.kind_case = TESSERA__V1__INITIALIZER__KIND_CONSTANT;
    p.constant = &k;
    ck_assert_int_eq(initializer_from_proto(&p, &in, &fi, &fo, &err), STATUS_OK);
    ck_assert(in.kind == JOB_INIT_CONSTANT && in.a == 0.5);
}
END_TEST

START_TEST(initializer_from_proto_rejects_bad_values_and_names_the_field)
{
    Tessera__V1__Initializer p = TESSERA__V1__INITIALIZER__INIT;
    Tessera__V1__Initializer__GlorotUniform gu = TESSERA__V1__INITIALIZER__GLOROT_UNIFORM__INIT;
    Tessera__V1__Initializer__RandomUniform ru = TESSERA__V1__INITIALIZER__RANDOM_UNIFORM__INIT;
    Tessera__V1__Initializer__RandomNormal rn = TESSERA__V1__INITIALIZER__RANDOM_NORMAL__INIT;
    job_init_t in = {.kind = JOB_INIT_ONES};
    double fi = 5, fo = 5;
    status_msg_t err;

    gu.fan_in = -3;
    p.kind_case = TESSERA__V1__INITIALIZER__KIND_GLOROT_UNIFORM;
    p.glorot_uniform = &gu;
    ck_assert_int_eq(initializer_from_proto(&p, &in, &fi, &fo, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.text, "glorot_uniform.fan_in"));

    ru.minval = 2;
    ru.maxval = 1;
    p.kind_case = TESSERA__V1__INITIALIZER__KIND_RANDOM_UNIFORM;
    p.random_uniform = &ru;
    ck_assert_int_eq(initializer_from_proto(&p, &in, &fi, &fo, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.text, "minval"));

    rn.stddev = NAN;
    p.kind_case = TESSERA__V1__INITIALIZER__KIND_RANDOM_NORMAL;
    p.random_normal = &rn;
    ck_assert_int_eq(initializer_from_proto(&p, &in, &fi, &fo, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.text, "random_normal.stddev"));

    ck_assert_int_eq(in.kind, JOB_INIT_ONES); /* outputs untouched */
    ck_assert(fi == 5 && fo == 5);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("initializer");
    TCase *tc = tcase_create("initializer");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, initializer_slices_equal_the_whole_variable);
    tcase_add_test(tc, initializer_glorot_uniform_stays_within_its_limit);
    tcase_add_test(tc, initializer_truncated_normal_stays_within_two_deviations);
    tcase_add_test(tc, initializer_own_seed_overrides_the_stream_seed);
    tcase_add_test(tc, initializer_fans_follow_keras_compute_fans);
    tcase_add_test(tc, initializer_from_proto_maps_every_kind);
    tcase_add_test(tc, initializer_from_proto_rejects_bad_values_and_names_the_field);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
