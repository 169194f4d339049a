/* Hostile requests to tessera-ps as a real process: each gets the right status and names its
 * culprit, and the server keeps serving the same values. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "check_run.h"
#include "harness.h"
#include "optim/optimizer.h"
#include "rpc/health.h"
#include "ps_requests.h"

/* ---- hostile requests --------------------------------------------------------------------- */

typedef struct fixture {
    launch_proc_t ps;
    rpc_channel_t *ch;
    float *w, *emb; /* the values every rejected request must leave */
} fixture_t;

static void fixture_up(fixture_t *f)
{
    opt_desc_t opt;
    var_desc_t vars[2];
    rpc_error_t err;

    harness_start(&f->ps, "tessera-ps", "ps-hostile", NULL);
    f->ch = harness_channel(&f->ps);
    ps_opt_desc(&opt, true, 0.01);
    ps_var_desc(&vars[0], "w", 4, 3, 0, 1, 0.0, 3);
    ps_var_desc(&vars[1], "emb", 10, 4, 0, 1, 0.0, 4);
    ck_assert_int_eq(ps_create(f->ch, "h", &opt, vars, 2, NULL, &err), STATUS_OK);
    f->w = ps_pull(f->ch, "h", "w", 0, NULL, 0, NULL, NULL);
    f->emb = ps_pull(f->ch, "h", "emb", 0, NULL, 0, NULL, NULL);
}

/* The server still answers, with the values it had. */
static void assert_intact(fixture_t *f, const char *after)
{
    uint64_t vw, ve;
    float *w = ps_pull(f->ch, "h", "w", 0, NULL, 0, NULL, &vw);
    float *emb = ps_pull(f->ch, "h", "emb", 0, NULL, 0, NULL, &ve);
    ck_assert_msg(vw == 0 && ve == 0, "after %s: versions %llu and %llu", after,
                  (unsigned long long)vw, (unsigned long long)ve);
    ck_assert_msg(memcmp(w, f->w, 12 * sizeof(float)) == 0, "after %s: w changed", after);
    ck_assert_msg(memcmp(emb, f->emb, 40 * sizeof(float)) == 0, "after %s: emb changed", after);
    free(w);
    free(emb);
}

static void expect(fixture_t *f, status_t got, status_t want, const rpc_error_t *err,
                   const char *culprit, const char *needle, const char *what)
{
    ck_assert_msg(got == want, "%s: got %s (%s), want %s", what, status_name(got), err->message,
                  status_name(want));
    if (culprit != NULL)
        ck_assert_msg(strcmp(err->culprit, culprit) == 0, "%s: culprit '%s', want '%s' (%s)", what,
                      err->culprit, culprit, err->message);
    if (needle != NULL)
        ck_assert_msg(strstr(err->message, needle) != NULL, "%s: '%s' not in: %s", what, needle,
                      err->message);
    assert_intact(f, what);
}

START_TEST(ps_rejects_hostile_requests_and_keeps_serving_the_same_values)
{
    fixture_t f;
    rpc_error_t err;
    float g[16] = {0}, nan_g[12] = {0};
    double g64[12] = {0};
    int64_t bad_rows[2] = {1, 10}, neg_rows[2] = {-1, 0};
    float rg[8] = {0};
    push_spec_t p;

    fixture_up(&f);

    p = ps_dense("h", "w", 0, 3, 4, g); /* the right byte count, the wrong shape */
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "[3, 4]",
           "wrong shape");

    p = ps_dense("h", "nope", 0, 4, 3, g);
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_NOT_FOUND, &err, "nope", "'nope'",
           "unknown variable");
    p = ps_dense("h", "w", 5, 4, 3, g);
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_NOT_FOUND, &err, "w", "shard 5",
           "unknown shard");
    p = ps_dense("nojob", "w", 0, 4, 3, g);
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_NOT_FOUND, &err, "nojob", NULL, "unknown job");
    p = ps_dense("", "w", 0, 4, 3, g);
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "job", NULL,
           "empty job name");

    expect(&f, ps_push_rows(f.ch, "h", "emb", bad_rows, 2, rg, 4, false, NULL, &err),
           STATUS_INVALID_ARGUMENT, &err, "emb", "row index 10", "row out of range");
    expect(&f, ps_push_rows(f.ch, "h", "emb", neg_rows, 2, rg, 4, false, NULL, &err),
           STATUS_INVALID_ARGUMENT, &err, "emb", "row index -1", "negative row");

    p = ps_dense("h", "w", 0, 4, 3, NULL);
    p.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT64;
    p.byte_length = p.payload_len = sizeof(g64);
    p.payload = g64;
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "DTYPE_FLOAT64",
           "float64 gradient");

    nan_g[5] = NAN;
    p = ps_dense("h", "w", 0, 4, 3, nan_g);
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "nan",
           "NaN gradient");

    p = ps_dense("h", "w", 0, 4, 3, g);
    p.offset = UINT64_MAX - 8; /* offset + length wraps around */
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "payload",
           "huge offset");

    p = ps_dense("h", "w", 0, 4, 3, g);
    p.payload_len = 40; /* 48 declared */
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "payload",
           "short payload");

    p = ps_dense("h", "w", 0, 4, 3, g);
    p.payload_len = 64; /* 16 bytes nobody refers to */
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "payload", NULL,
           "long payload");

    p = ps_dense("h", "w", 0, 4, 3, g);
    p.byte_length = 44; /* disagrees with the shape */
    p.payload_len = 44;
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "44",
           "byte_length against shape");

    p = ps_dense("h", "w", 0, 4, 3, g);
    p.shape[0] = -4;
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", NULL,
           "negative dimension");

    p = ps_dense("h", "w", 0, 4, 3, g);
    p.chunk_offset = 16;
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "chunk", "chunk");

    p = ps_dense("h", "w", 0, 4, 3, g);
    p.offset = 2; /* misaligned and then too short */
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", NULL,
           "misaligned and short");

    /* Empty bodies: an empty PushRequest names no job; an empty CreateVariables neither. */
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/Push", "", 0, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, "job", NULL, "empty Push body");
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/PushPull", "", 0, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, "job", NULL, "empty PushPull body");
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/Pull", "", 0, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, "job", NULL, "empty Pull body");
    expect(&f,
           rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/CreateVariables", "", 0, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, "job", NULL, "empty CreateVariables body");
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/DropJob", "", 0, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, "job", NULL, "empty DropJob body");

    /* Garbage that does not parse, and random bytes that may. */
    {
        static const char garbage[] = "\x22\xff\xff\xff\xff\x0f\x01\x02";
        expect(&f,
               rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/Push", garbage, sizeof(garbage) - 1,
                             5000, &err),
               STATUS_INVALID_ARGUMENT, &err, NULL, "does not parse", "garbage");
        for (int round = 0; round < 30; round++) {
            uint8_t junk[512];
            uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(round + 1);
            status_t rc;
            for (size_t i = 0; i < sizeof(junk); i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                junk[i] = (uint8_t)x;
            }
            rc = rpc_unary_raw(f.ch,
                               round % 3 == 0   ? "/tessera.v1.ParameterServer/Push"
                               : round % 3 == 1 ? "/tessera.v1.ParameterServer/Pull"
                                                : "/tessera.v1.ParameterServer/CreateVariables",
                               junk, (size_t)(round * 17) % sizeof(junk), 5000, &err);
            ck_assert_msg(rc != STATUS_UNAVAILABLE && rc != STATUS_TIMEOUT && rc != STATUS_RPC,
                          "round %d: %s", round, err.message);
        }
        assert_intact(&f, "random bytes");
    }

    /* Creation with a float64 dtype, or a conflicting shape, changes nothing. */
    {
        opt_desc_t opt;
        var_desc_t bad;
        ps_opt_desc(&opt, true, 0.01);
        ps_var_desc(&bad, "d", 4, 0, 0, 1, 0.0, 0);
        bad.msg.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT64;
        expect(&f, ps_create(f.ch, "h", &opt, &bad, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err,
               "d", "DTYPE_FLOAT64", "float64 variable");
        ps_var_desc(&bad, "w", 5, 3, 0, 1, 0.0, 0);
        expect(&f, ps_create(f.ch, "h", &opt, &bad, 1, NULL, &err), STATUS_ALREADY_EXISTS, &err,
               "w", NULL, "another shape");
    }
    /* A checkpoint needs a directory to write to (test_ps_checkpoint.c tries the others). */
    {
        Tessera__V1__SaveRequest sreq = TESSERA__V1__SAVE_REQUEST__INIT;
        Tessera__V1__SaveResponse *sresp = NULL;
        sreq.job = "h";
        expect(&f, rpc_ps_save(f.ch, &sreq, NULL, &sresp, NULL, &err), STATUS_INVALID_ARGUMENT,
               &err, "directory", "absolute path", "Save without a directory");
    }
    {
        health_state_t h = health_check(f.ps.listen, "tessera.v1.ParameterServer", 2000, &err);
        ck_assert_int_eq(h, HEALTH_SERVING);
    }
    /* A tensor at an odd payload offset is legal: the server copies it to aligned memory and
     * applies it like any other. */
    {
        uint8_t odd[1 + 12 * sizeof(float)];
        float ones[12], slots[24] = {0}, *w;
        optimizer_config_t c;
        uint64_t version;
        for (int i = 0; i < 12; i++)
            ones[i] = 1.0f;
        odd[0] = 0xAA;
        memcpy(odd + 1, ones, sizeof(ones));
        p = ps_dense("h", "w", 0, 4, 3, NULL);
        p.payload = odd;
        p.payload_len = sizeof(odd);
        p.offset = 1;
        ck_assert_msg(ps_push_raw(f.ch, &p, &err) == STATUS_OK, "%s", err.message);
        optimizer_config_default(OPTIMIZER_ADAM, &c);
        c.schedule.lr = 0.01;
        optimizer_apply_dense(&c, 0, f.w, ones, slots, 12);
        w = ps_pull(f.ch, "h", "w", 0, NULL, 0, NULL, &version);
        ck_assert_uint_eq(version, 1);
        assert_floats_eq(w, f.w, 12);
        free(w);
    }
    free(f.w);
    free(f.emb);
    rpc_channel_free(f.ch);
    harness_stop(&f.ps);
}
END_TEST

/* ---- the hostile-input findings ------------------------------------------------------------ */

/* Packs msg, then overwrites the first byte `mark` with NUL: protobuf-c cannot send a NUL inside
 * a string, an attacker's client can. */
static uint8_t *packed_with_nul(const ProtobufCMessage *msg, char mark, size_t *ret_len)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len), *at;

    protobuf_c_message_pack(msg, buf);
    at = memchr(buf, mark, len);
    ck_assert_ptr_nonnull(at);
    *at = '\0';
    *ret_len = len;
    return buf;
}

static void expect_text_is_utf8(const rpc_error_t *err, const char *what)
{
    ck_assert_msg(utf8_valid_text(err->message, strlen(err->message)) &&
                      utf8_valid_text(err->culprit, strlen(err->culprit)),
                  "%s: the error is not UTF-8: %s", what, err->message);
}

START_TEST(ps_hostile_findings_get_clear_errors_and_change_nothing)
{
    fixture_t f;
    rpc_error_t err;
    opt_desc_t opt;
    var_desc_t v;
    Tessera__V1__PullRequest pr = TESSERA__V1__PULL_REQUEST__INIT;
    Tessera__V1__DropJobRequest dr = TESSERA__V1__DROP_JOB_REQUEST__INIT;
    Tessera__V1__Initializer__RandomNormal rn = TESSERA__V1__INITIALIZER__RANDOM_NORMAL__INIT;
    int64_t sq[2] = {INT64_C(1) << 31, INT64_C(1) << 31}, rows3[3] = {2, 2, 2};
    float big[12], huge_rows[12];
    uint8_t *raw;
    size_t len;
    push_spec_t p;

    fixture_up(&f);

    /* 5. float32 overflow: hyper-parameters and initializer arguments checked as float32, and
     * updates that would leave float32 refused whole. */
    ps_opt_desc(&opt, false, 1e39);
    ps_var_desc(&v, "x", 4, 0, 0, 1, 0.0, 0);
    expect(&f, ps_create(f.ch, "f5", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err,
           "optimizer", "schedule.lr", "learning rate 1e39");
    ps_opt_desc(&opt, true, 0.001);
    opt.adam.epsilon = 1e-50;
    expect(&f, ps_create(f.ch, "f5", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err,
           "optimizer", "epsilon", "Adam epsilon 1e-50");
    ps_opt_desc(&opt, false, 0.001);
    opt.msg.scale = 1e300;
    expect(&f, ps_create(f.ch, "f5", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err,
           "optimizer", "float32", "scale 1e300");
    ps_opt_desc(&opt, false, 0.01);
    ps_var_desc(&v, "x", 4, 0, 0, 1, 1e39, 0);
    expect(&f, ps_create(f.ch, "f5", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err, "x",
           "float32", "constant 1e39");
    rn.mean = 0;
    rn.stddev = 1e300;
    v.init.kind_case = TESSERA__V1__INITIALIZER__KIND_RANDOM_NORMAL;
    v.init.random_normal = &rn;
    expect(&f, ps_create(f.ch, "f5", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err, "x",
           "float32", "RandomNormal stddev 1e300");
    for (int i = 0; i < 12; i++)
        huge_rows[i] = 3e38f;
    expect(&f, ps_push_rows(f.ch, "h", "emb", rows3, 3, huge_rows, 4, false, NULL, &err),
           STATUS_INVALID_ARGUMENT, &err, "emb", "float32", "summed duplicate rows of 3e38");
    for (int i = 0; i < 12; i++)
        big[i] = 1e20f; /* finite, but Adam squares it */
    p = ps_dense("h", "w", 0, 4, 3, big);
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w",
           "nothing was applied", "a gradient whose square overflows");

    /* 6. NUL inside names: refused by name, never served from the prefix. */
    pr.job = "hXevil";
    raw = packed_with_nul(&pr.base, 'X', &len);
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/Pull", raw, len, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, NULL, "PullRequest.job", "Pull of job 'h\\0evil'");
    free(raw);
    dr.job = "hXtail";
    raw = packed_with_nul(&dr.base, 'X', &len);
    expect(&f, rpc_unary_raw(f.ch, "/tessera.v1.ParameterServer/DropJob", raw, len, 5000, &err),
           STATUS_INVALID_ARGUMENT, &err, NULL, "DropJobRequest.job", "DropJob of 'h\\0tail'");
    free(raw);

    /* 7. Sizes that wrap are reported as what they are. */
    ps_var_desc(&v, "sq", 1, 1, 0, 1, 0.0, 0);
    v.msg.shape = v.msg.full_shape = sq;
    expect(&f, ps_create(f.ch, "f7", NULL, &v, 1, NULL, &err), STATUS_RESOURCE_EXHAUSTED, &err,
           "sq", "4611686018427387904 elements", "a [2^31, 2^31] variable");
    ck_assert_msg(strstr(err.message, " 0 bytes") == NULL, "%s", err.message);
    p = ps_dense("h", "w", 0, INT64_C(1) << 62, 0, big);
    p.byte_length = p.payload_len = 48;
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "w", "more than 2^64",
           "a [2^62] gradient");
    expect_text_is_utf8(&err, "a [2^62] gradient");

    /* 8. A shard's own values (init_from): the wrong byte count, or a NaN, creates nothing;
     * the right ones are served as sent. */
    float own[12] = {1, -2, 3.5f, 0, 1e-30f, 7, 8, 9, 10, 11, 12, 13}, *got;
    Tessera__V1__Initializer__Values vals = TESSERA__V1__INITIALIZER__VALUES__INIT;
    ps_var_desc(&v, "own", 4, 3, 0, 1, 0.0, 0);
    v.init.kind_case = TESSERA__V1__INITIALIZER__KIND_VALUES;
    v.init.values = &vals;
    vals.data.data = (uint8_t *)own;
    vals.data.len = 11 * sizeof(float);
    expect(&f, ps_create(f.ch, "f8", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err, "own",
           "44 bytes", "values one float short");
    vals.data.len = 12 * sizeof(float);
    own[5] = NAN;
    expect(&f, ps_create(f.ch, "f8", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err, "own",
           "not finite", "values with a NaN");
    own[5] = 7;
    ck_assert_int_eq(ps_create(f.ch, "f8", &opt, &v, 1, NULL, &err), STATUS_OK);
    got = ps_pull(f.ch, "f8", "own", 0, NULL, 0, NULL, NULL);
    assert_floats_eq(got, own, 12);
    free(got);

    /* 9. An optimizer's state (an archive's going on): more slots than any optimizer keeps, a
     * slot of the wrong size, a negative sum of squares, or a count past 2^53 creates nothing;
     * a good one starts the shard at its update count. */
    float m[12] = {0}, vel[12] = {0};
    ProtobufCBinaryData slots[4] = {
        {48, (uint8_t *)m}, {48, (uint8_t *)vel}, {48, (uint8_t *)m}, {48, (uint8_t *)m}};
    uint64_t version = 0;
    ps_opt_desc(&opt, true, 0.001);
    v.msg.slots = slots;
    v.msg.n_slots = 4;
    expect(&f, ps_create(f.ch, "f9", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err, "own",
           "no optimizer keeps more than 3", "4 slots");
    v.msg.n_slots = 2;
    slots[1].len = 44;
    expect(&f, ps_create(f.ch, "f9", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err, "own",
           "its velocity slot is 44 bytes", "a velocity one float short");
    slots[1].len = 48;
    vel[3] = -1;
    expect(&f, ps_create(f.ch, "f9", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err, "own",
           "a sum of squares", "a negative velocity");
    vel[3] = 1;
    v.msg.updates = (UINT64_C(1) << 53) + 1;
    expect(&f, ps_create(f.ch, "f9", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err, "own",
           "more than 2^53", "updates past 2^53");
    v.msg.updates = 77;
    ck_assert_int_eq(ps_create(f.ch, "f9", &opt, &v, 1, NULL, &err), STATUS_OK);
    got = ps_pull(f.ch, "f9", "own", 0, NULL, 0, NULL, &version);
    assert_floats_eq(got, own, 12);
    ck_assert_uint_eq(version, 77);
    free(got);
    /* a constraint of no kind, over a dimension the variable lacks, or out of range */
    Tessera__V1__Constraint con = TESSERA__V1__CONSTRAINT__INIT;
    ps_var_desc(&v, "con", 4, 3, 0, 1, 0.5, 0);
    v.msg.constraint = &con;
    con.kind = 9;
    expect(&f, ps_create(f.ch, "f10", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err,
           "con", "constraint.kind: 9 is no constraint", "an unknown constraint");
    con.kind = TESSERA__V1__CONSTRAINT__KIND__KIND_MAX_NORM;
    con.max_value = 2;
    con.axes = 4;
    expect(&f, ps_create(f.ch, "f10", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err,
           "con", "names a dimension past the variable's 2", "a norm over axis 2 of a matrix");
    con.axes = 1;
    int64_t five[5] = {2, 1, 1, 1, 2};
    v.msg.shape = v.msg.full_shape = five;
    v.msg.n_shape = v.msg.n_full_shape = 5;
    expect(&f, ps_create(f.ch, "f10", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err,
           "con", "weights have at most 4", "a norm over a variable of 5 dimensions");
    ps_var_desc(&v, "con", 4, 3, 0, 1, 0.5, 0);
    v.msg.constraint = &con;
    con.max_value = NAN;
    expect(&f, ps_create(f.ch, "f10", &opt, &v, 1, NULL, &err), STATUS_INVALID_ARGUMENT, &err,
           "con", "constraint.max_value is out of range", "a NaN max_value");
    v.msg.constraint = NULL;

    /* a push that stands for more batches than a window may hold changes nothing */
    p = ps_dense("f9", "own", 0, 4, 3, big);
    p.batches = 65537;
    expect(&f, ps_push_raw(f.ch, &p, &err), STATUS_INVALID_ARGUMENT, &err, "batches",
           "65537 batches, more than 65536", "a window of 65537 batches");
    got = ps_pull(f.ch, "f9", "own", 0, NULL, 0, NULL, &version);
    assert_floats_eq(got, own, 12);
    ck_assert_uint_eq(version, 77);
    free(got);

    ck_assert_int_eq(health_check(f.ps.listen, "", 5000, &err), HEALTH_SERVING);
    free(f.w);
    free(f.emb);
    rpc_channel_free(f.ch);
    harness_stop(&f.ps);
}
END_TEST

/* 9. Many tiny shards pay for their bookkeeping, and a request of a million of them is refused
 * before it is unpacked. */
START_TEST(ps_many_tiny_shards_count_against_the_memory_limit)
{
    enum { TINY = 10000, MILLION = 1000000 };
    Tessera__V1__CreateVariablesRequest req = TESSERA__V1__CREATE_VARIABLES_REQUEST__INIT;
    Tessera__V1__CreateVariablesResponse *resp = NULL;
    Tessera__V1__VariableShard *shards = calloc(TINY, sizeof(*shards)), **ptrs;
    int64_t *dims = calloc(2 * TINY, sizeof(*dims));
    uint8_t *raw = malloc((size_t)MILLION * 5 + 16);
    size_t len = 0;
    uint64_t before, after;
    launch_proc_t ps;
    rpc_channel_t *ch;
    opt_desc_t opt;
    rpc_error_t err;
    status_t rc;

    ptrs = calloc(TINY, sizeof(*ptrs));
    harness_start(&ps, "tessera-ps", "ps-tiny", "--max-memory-bytes=1048576", NULL);
    ch = harness_channel(&ps);
    ps_opt_desc(&opt, false, 0.01);
    for (int i = 0; i < TINY; i++) {
        tessera__v1__variable_shard__init(&shards[i]);
        shards[i].variable = "tiny";
        shards[i].shard = i;
        shards[i].num_shards = TINY;
        shards[i].dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
        dims[2 * i] = 1;
        dims[2 * i + 1] = TINY;
        shards[i].n_shape = shards[i].n_full_shape = 1;
        shards[i].shape = &dims[2 * i];
        shards[i].full_shape = &dims[2 * i + 1];
        shards[i].row_offset = i;
        ptrs[i] = &shards[i];
    }
    req.job = "tiny";
    req.optimizer = &opt.msg;
    req.n_shards = TINY;
    req.shards = ptrs;
    /* 40 KB of values, but 10,000 shards of bookkeeping: over a 1 MiB limit. */
    rc = rpc_ps_create_variables(ch, &req, NULL, &resp, NULL, &err);
    ck_assert_msg(rc == STATUS_RESOURCE_EXHAUSTED, "10,000 tiny shards: %s (%s)", status_name(rc),
                  err.message);
    ck_assert_msg(strstr(err.message, "bookkeeping") != NULL, "%s", err.message);

    /* A million shards in one request: refused while still bytes. */
    raw[len++] = 0x0a; /* job = "big" */
    raw[len++] = 3;
    memcpy(raw + len, "big", 3);
    len += 3;
    for (int i = 0; i < MILLION; i++) {
        static const uint8_t entry[5] = {0x1a, 3, 0x0a, 1, 'v'}; /* shards { variable: "v" } */
        memcpy(raw + len, entry, sizeof(entry));
        len += sizeof(entry);
    }
    before = harness_resident_bytes(ps.pid);
    rc = rpc_unary_raw(ch, "/tessera.v1.ParameterServer/CreateVariables", raw, len, 30000, &err);
    after = harness_resident_bytes(ps.pid);
    ck_assert_msg(rc == STATUS_RESOURCE_EXHAUSTED, "a million shards: %s (%s)", status_name(rc),
                  err.message);
    ck_assert_msg(strstr(err.message, "CreateVariablesRequest.shards") != NULL, "%s", err.message);
    if (!harness_instrumented(ps.pid))
        ck_assert_msg(after < before + (64u << 20), "resident memory grew from %.1f to %.1f MiB",
                      (double)before / (1 << 20), (double)after / (1 << 20));
    ck_assert_int_eq(health_check(ps.listen, "", 5000, &err), HEALTH_SERVING);

    free(raw);
    free(shards);
    free(ptrs);
    free(dims);
    rpc_channel_free(ch);
    harness_stop(&ps);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ps_hostile");
    TCase *tc = tcase_create("ps_hostile");

    grpc_init();
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ps_rejects_hostile_requests_and_keeps_serving_the_same_values);
    tcase_add_test(tc, ps_hostile_findings_get_clear_errors_and_change_nothing);
    tcase_add_test(tc, ps_many_tiny_shards_count_against_the_memory_limit);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
