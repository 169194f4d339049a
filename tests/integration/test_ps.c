/* tessera-ps as a real process: variables created, pulled and pushed over gRPC against the
 * optimizer kernels run here, a large variable split by TensorFlow's min_size partitioner over
 * two parameter servers with round-robin placement, and resident memory at rest near what the
 * variables and slots need. Hostile requests: test_ps_hostile.c. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc.h>

#include "check_run.h"
#include "harness.h"
#include "job/initializer.h"
#include "job/partitioner.h"
#include "optim/optimizer.h"
#include "ps_requests.h"

/* ---- correctness -------------------------------------------------------------------------- */

START_TEST(ps_applies_pushes_with_the_optimizer_and_serves_the_values)
{
    launch_proc_t ps;
    rpc_channel_t *ch;
    rpc_error_t err;
    opt_desc_t sgd, adam;
    var_desc_t vars[2];
    float g[12], *v, *rows_back = NULL;
    int64_t rows[2] = {7, 2};
    float rg[8] = {1, 2, 3, 4, -1, -2, -3, -4};
    uint64_t version;
    size_t n;
    int created = -1;

    harness_start(&ps, "tessera-ps", "ps-roundtrip", NULL);
    ch = harness_channel(&ps);
    ps_opt_desc(&sgd, false, 0.5);
    ps_var_desc(&vars[0], "w", 4, 3, 0, 1, 1.0, 0);
    ps_var_desc(&vars[1], "emb", 10, 4, 0, 1, 0.0, 0);
    vars[1].msg.sparse = true;
    ck_assert_msg(ps_create(ch, "j", &sgd, vars, 2, &created, &err) == STATUS_OK, "%s",
                  err.message);
    ck_assert_int_eq(created, 2);
    ck_assert_int_eq(ps_create(ch, "j", &sgd, vars, 2, &created, &err), STATUS_OK);
    ck_assert_int_eq(created, 0); /* idempotent */

    v = ps_pull(ch, "j", "w", 0, NULL, 0, &n, &version);
    ck_assert_uint_eq(n, 12);
    ck_assert_uint_eq(version, 0);
    for (size_t i = 0; i < n; i++)
        ck_assert(v[i] == 1.0f);
    free(v);

    for (int i = 0; i < 12; i++)
        g[i] = (float)i;
    {
        push_spec_t p = ps_dense("j", "w", 0, 4, 3, g);
        ck_assert_msg(ps_push_raw(ch, &p, &err) == STATUS_OK, "%s", err.message);
    }
    v = ps_pull(ch, "j", "w", 0, NULL, 0, &n, &version);
    ck_assert_uint_eq(version, 1);
    for (int i = 0; i < 12; i++)
        ck_assert(v[i] == 1.0f - 0.5f * (float)i);
    free(v);

    /* PushPull answers with the values after its own update. */
    {
        Tessera__V1__PushRequest req = TESSERA__V1__PUSH_REQUEST__INIT;
        Tessera__V1__PushResponse *resp = NULL;
        Tessera__V1__PushItem item = TESSERA__V1__PUSH_ITEM__INIT, *items[1] = {&item};
        Tessera__V1__ShardKey key = TESSERA__V1__SHARD_KEY__INIT;
        Tessera__V1__TensorRef ref;
        int64_t shape[2] = {4, 3};
        rpc_iov_t iov = {g, sizeof(g), NULL, NULL};
        rpc_call_opts_t opts = {.payload = &iov, .n_payload = 1};
        rpc_payload_t payload = {0};
        const float *got;

        key.variable = "w";
        item.key = &key;
        ps_tensor_ref(&ref, TESSERA__V1__DTYPE__DTYPE_FLOAT32, shape, 2, 0, sizeof(g));
        item.gradient_case = TESSERA__V1__PUSH_ITEM__GRADIENT_DENSE;
        item.dense = &ref;
        req.job = "j";
        req.n_items = 1;
        req.items = items;
        ck_assert_int_eq(rpc_ps_push_pull(ch, &req, &opts, &resp, &payload, &err), STATUS_OK);
        ck_assert_uint_eq(resp->n_versions, 1);
        ck_assert_uint_eq(resp->versions[0], 2);
        ck_assert_uint_eq(resp->n_values, 1);
        ck_assert_uint_eq(resp->values[0]->version, 2);
        ck_assert_uint_eq(payload.len, sizeof(g));
        got = payload.data;
        for (int i = 0; i < 12; i++)
            ck_assert(got[i] == 1.0f - 0.5f * (float)i - 0.5f * (float)i);
        rpc_payload_done(&payload);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }

    /* Rows: only rows 7 and 2 move; the values come back through pull_after. */
    ck_assert_msg(ps_push_rows(ch, "j", "emb", rows, 2, rg, 4, true, &rows_back, &err) == STATUS_OK,
                  "%s", err.message);
    for (int i = 0; i < 8; i++)
        ck_assert(rows_back[i] == -0.5f * rg[i]);
    free(rows_back);
    v = ps_pull(ch, "j", "emb", 0, rows, 2, &n, NULL);
    ck_assert_uint_eq(n, 8);
    for (int i = 0; i < 8; i++)
        ck_assert(v[i] == -0.5f * rg[i]);
    free(v);
    v = ps_pull(ch, "j", "emb", 0, NULL, 0, &n, NULL);
    for (int r = 0; r < 10; r++)
        for (int c = 0; c < 4; c++)
            ck_assert(v[r * 4 + c] == (r == 7 ? -0.5f * rg[c] : r == 2 ? -0.5f * rg[4 + c] : 0.0f));
    free(v);

    /* Adam on another job, step by step against the kernel run here. */
    ps_opt_desc(&adam, true, 0.01);
    ps_var_desc(&vars[0], "k", 3, 2, 0, 1, 0.0, 17);
    ck_assert_int_eq(ps_create(ch, "a", &adam, vars, 1, &created, &err), STATUS_OK);
    {
        optimizer_config_t c;
        float slots[12] = {0}, gk[6], *want = ps_pull(ch, "a", "k", 0, NULL, 0, NULL, NULL);
        optimizer_config_default(OPTIMIZER_ADAM, &c);
        c.schedule.lr = 0.01;
        for (int step = 0; step < 3; step++) {
            push_spec_t p;
            for (int i = 0; i < 6; i++)
                gk[i] = (float)(i - 3) * 0.25f + (float)step;
            p = ps_dense("a", "k", 0, 3, 2, gk);
            ck_assert_int_eq(ps_push_raw(ch, &p, &err), STATUS_OK);
            optimizer_apply_dense(&c, step, want, gk, slots, 6);
        }
        v = ps_pull(ch, "a", "k", 0, NULL, 0, NULL, &version);
        ck_assert_uint_eq(version, 3);
        assert_floats_eq(v, want, 6);
        free(v);
        free(want);
    }

    /* Stats and DropJob. */
    {
        Tessera__V1__PsStatsRequest sreq = TESSERA__V1__PS_STATS_REQUEST__INIT;
        Tessera__V1__PsStatsResponse *sresp = NULL;
        Tessera__V1__DropJobRequest dreq = TESSERA__V1__DROP_JOB_REQUEST__INIT;
        Tessera__V1__DropJobResponse *dresp = NULL;

        sreq.job = "j";
        ck_assert_int_eq(rpc_ps_stats(ch, &sreq, NULL, &sresp, NULL, &err), STATUS_OK);
        ck_assert_uint_eq(sresp->n_shards, 2);
        ck_assert_str_eq(sresp->shards[1]->key->variable, "emb");
        ck_assert_uint_eq(sresp->shards[1]->pushes, 1);
        ck_assert_uint_eq(sresp->shards[1]->bytes_pushed, 2 * 8 + 8 * 4);
        ck_assert_uint_eq(sresp->shards[1]->bytes_pulled, 8 * 4 + 8 * 4 + 40 * 4);
        ck_assert_uint_eq(sresp->shards[0]->value_bytes, 48);
        protobuf_c_message_free_unpacked(&sresp->base, NULL);

        dreq.job = "a";
        ck_assert_int_eq(rpc_ps_drop_job(ch, &dreq, NULL, &dresp, NULL, &err), STATUS_OK);
        ck_assert_int_eq(dresp->shards, 1);
        protobuf_c_message_free_unpacked(&dresp->base, NULL);
        ck_assert_int_eq(rpc_ps_drop_job(ch, &dreq, NULL, &dresp, NULL, &err), STATUS_NOT_FOUND);
        sreq.job = "";
        ck_assert_int_eq(rpc_ps_stats(ch, &sreq, NULL, &sresp, NULL, &err), STATUS_OK);
        ck_assert_uint_eq(sresp->n_shards, 2); /* only job j is left */
        protobuf_c_message_free_unpacked(&sresp->base, NULL);
    }

    /* The metrics moved. */
    {
        char *headers, *body;
        ck_assert_int_eq(harness_http_get(ps.metrics, "/metrics", &headers, &body), 200);
        ck_assert_ptr_nonnull(strstr(body, "tessera_ps_push_requests_total 6"));
        ck_assert_ptr_nonnull(strstr(body, "tessera_ps_param_bytes 208"));
        ck_assert_ptr_nonnull(strstr(body, "tessera_ps_variables 2"));
        ck_assert_ptr_nonnull(strstr(body, "tessera_ps_apply_duration_seconds_count 6"));
        ck_assert_ptr_nonnull(strstr(body, "tessera_ps_pulled_bytes_total"));
        free(headers);
        free(body);
    }
    rpc_channel_free(ch);
    harness_stop(&ps);
}
END_TEST

/* ---- partitioning over two parameter servers ---------------------------------------------- */

typedef struct planned {
    const char *name;
    int64_t d0, d1;
} planned_t;

typedef struct placed {
    var_desc_t desc;
    int ps;
} placed_t;

START_TEST(ps_large_variable_splits_over_two_ps_round_robin)
{
    /* 512 KiB (> 256 KiB) in 2 shards; a small bias stays whole; 300 KiB in 2 shards. */
    static const planned_t vars[] = {{"big", 256, 512}, {"bias", 512, 0}, {"emb", 300, 256}};
    job_partitioner_t part = {
        .kind = JOB_PARTITIONER_MIN_SIZE, .min_shard_bytes = 256 << 10, .max_shards = 2};
    partitioner_placement_t pl;
    placed_t shards[8];
    size_t n_shards = 0;
    launch_proc_t ps[2];
    rpc_channel_t *ch[2];
    opt_desc_t opt;
    rpc_error_t err;
    status_msg_t msg;

    harness_start(&ps[0], "tessera-ps", "ps-split-0", NULL);
    harness_start(&ps[1], "tessera-ps", "ps-split-1", "--task-index=1", NULL);
    ch[0] = harness_channel(&ps[0]);
    ch[1] = harness_channel(&ps[1]);
    ps_opt_desc(&opt, false, 0.1);

    /* The chief's side: partition, lay out, place. */
    partitioner_placement_init(&pl, 2);
    for (size_t v = 0; v < sizeof(vars) / sizeof(vars[0]); v++) {
        int64_t shape[2] = {vars[v].d0, vars[v].d1};
        int n = 0;
        ck_assert_int_eq(partitioner_num_shards(&part, shape, vars[v].d1 ? 2 : 1, 4, &n, &msg),
                         STATUS_OK);
        ck_assert_int_eq(n, vars[v].d1 ? 2 : 1);
        for (int k = 0; k < n; k++, n_shards++) {
            ps_var_desc(&shards[n_shards].desc, vars[v].name, vars[v].d0, vars[v].d1, k, n, 0.0,
                        1000 + v);
            shards[n_shards].ps = partitioner_placement_next(&pl);
        }
    }
    ck_assert_uint_eq(n_shards, 5);
    /* big/0 -> 0, big/1 -> 1, bias/0 -> 0, emb/0 -> 1, emb/1 -> 0 */
    ck_assert_int_eq(shards[0].ps, 0);
    ck_assert_int_eq(shards[1].ps, 1);
    ck_assert_int_eq(shards[2].ps, 0);
    ck_assert_int_eq(shards[3].ps, 1);
    ck_assert_int_eq(shards[4].ps, 0);
    for (int p = 0; p < 2; p++) {
        var_desc_t mine[8];
        size_t m = 0;
        int created = -1;
        for (size_t i = 0; i < n_shards; i++)
            if (shards[i].ps == p) {
                mine[m] = shards[i].desc;
                mine[m].msg.shape = mine[m].shape; /* re-point into the copy */
                mine[m].msg.full_shape = mine[m].full;
                mine[m].msg.initializer = &mine[m].init;
                mine[m].init.glorot_uniform = &mine[m].glorot;
                m++;
            }
        ck_assert_msg(ps_create(ch[p], "split", &opt, mine, m, &created, &err) == STATUS_OK, "%s",
                      err.message);
        ck_assert_int_eq(created, (int)m);
    }

    /* Each PS reports exactly its shards. */
    for (int p = 0; p < 2; p++) {
        Tessera__V1__PsStatsRequest sreq = TESSERA__V1__PS_STATS_REQUEST__INIT;
        Tessera__V1__PsStatsResponse *sresp = NULL;
        size_t k = 0;
        sreq.job = "split";
        ck_assert_int_eq(rpc_ps_stats(ch[p], &sreq, NULL, &sresp, NULL, &err), STATUS_OK);
        for (size_t i = 0; i < n_shards; i++) {
            const var_desc_t *d = &shards[i].desc;
            const Tessera__V1__ShardStats *st;
            if (shards[i].ps != p)
                continue;
            ck_assert(k < sresp->n_shards);
            st = sresp->shards[k++];
            ck_assert_str_eq(st->key->variable, d->msg.variable);
            ck_assert_int_eq(st->key->shard, d->msg.shard);
            ck_assert_int_eq(st->shape[0], d->shape[0]);
            ck_assert_uint_eq(st->value_bytes, (uint64_t)d->shape[0] *
                                                   (uint64_t)(d->shape[1] ? d->shape[1] : 1) * 4);
        }
        ck_assert_uint_eq(sresp->n_shards, k);
        protobuf_c_message_free_unpacked(&sresp->base, NULL);
    }

    /* The two halves of 'big', from two processes, are the halves of one Glorot variable. */
    {
        static float whole[256 * 512];
        job_init_t init = {.kind = JOB_INIT_GLOROT_UNIFORM, .has_seed = true, .seed = 1000};
        float *a, *b;
        size_t na, nb;
        initializer_fill(&init, JOB_INIT_ZEROS, whole, 256 * 512, 256, 512, 0);
        a = ps_pull(ch[0], "split", "big", 0, NULL, 0, &na, NULL);
        b = ps_pull(ch[1], "split", "big", 1, NULL, 0, &nb, NULL);
        ck_assert_uint_eq(na + nb, 256 * 512);
        assert_floats_eq(a, whole, na);
        assert_floats_eq(b, whole + na, nb);
        free(a);
        free(b);
    }
    /* A shard lives only where it was placed. */
    {
        Tessera__V1__PullRequest req = TESSERA__V1__PULL_REQUEST__INIT;
        Tessera__V1__PullResponse *resp = NULL;
        Tessera__V1__PullItem item = TESSERA__V1__PULL_ITEM__INIT, *items[1] = {&item};
        Tessera__V1__ShardKey key = TESSERA__V1__SHARD_KEY__INIT;
        key.variable = "big";
        key.shard = 1;
        item.key = &key;
        req.job = "split";
        req.n_items = 1;
        req.items = items;
        ck_assert_int_eq(rpc_ps_pull(ch[0], &req, NULL, &resp, NULL, &err), STATUS_NOT_FOUND);
        ck_assert_str_eq(err.culprit, "big");
        ck_assert_ptr_nonnull(strstr(err.task, "ps 0"));
    }
    rpc_channel_free(ch[0]);
    rpc_channel_free(ch[1]);
    harness_stop(&ps[1]);
    harness_stop(&ps[0]);
}
END_TEST

/* ---- memory ------------------------------------------------------------------------------- */

START_TEST(ps_resident_memory_stays_near_the_variables_and_slots)
{
    enum { ROWS = 2048, COLS = 4096, VARS = 3 };
    static const char *const names[VARS] = {"m0", "m1", "m2"};
    size_t n = (size_t)ROWS * COLS;
    float *g = malloc(n * sizeof(float));
    uint64_t held = (uint64_t)VARS * n * sizeof(float) * 3; /* Adam: values + 2 slots */
    /* The process itself (gRPC, libraries, thread stacks) takes about 25 MiB here. */
    uint64_t rss, limit = held + held / 20 + (40u << 20);
    launch_proc_t ps;
    rpc_channel_t *ch;
    opt_desc_t opt;
    var_desc_t vars[VARS];
    rpc_error_t err;

    for (size_t i = 0; i < n; i++)
        g[i] = (float)(i % 7) * 0.01f;
    harness_start(&ps, "tessera-ps", "ps-memory", NULL);
    ch = harness_channel(&ps);
    ps_opt_desc(&opt, true, 0.001);
    for (int v = 0; v < VARS; v++)
        ps_var_desc(&vars[v], names[v], ROWS, COLS, 0, 1, 0.0, 9);
    ck_assert_int_eq(ps_create(ch, "mem", &opt, vars, VARS, NULL, &err), STATUS_OK);
    for (int round = 0; round < 2; round++)
        for (int v = 0; v < VARS; v++) {
            push_spec_t p = ps_dense("mem", names[v], 0, ROWS, COLS, g);
            ck_assert_msg(ps_push_raw(ch, &p, &err) == STATUS_OK, "%s", err.message);
            free(ps_pull(ch, "mem", names[v], 0, NULL, 0, NULL, NULL));
        }
    /* At rest: the last reply's buffer is freed once gRPC has sent it, and after a second
     * without calls the daemon gives its free heap back (daemon.c's idle trim). */
    for (int tries = 0; (rss = harness_resident_bytes(ps.pid)) > limit && tries < 100; tries++)
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    if (harness_instrumented(ps.pid))
        rss = 0;
    free(g);
    rpc_channel_free(ch);
    harness_stop(&ps);
    if (rss == 0)
        fprintf(stderr, "ps: resident memory not checked: the server is instrumented\n");
    else
        fprintf(stderr, "ps: resident %.1f MiB for %.1f MiB of variables and slots\n",
                (double)rss / (1 << 20), (double)held / (1 << 20));
    ck_assert_msg(rss <= limit,
                  "resident %.1f MiB, over %.1f MiB for %.1f MiB of variables and slots",
                  (double)rss / (1 << 20), (double)limit / (1 << 20), (double)held / (1 << 20));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ps");
    TCase *tc = tcase_create("ps");

    grpc_init();
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ps_applies_pushes_with_the_optimizer_and_serves_the_values);
    tcase_add_test(tc, ps_large_variable_splits_over_two_ps_round_robin);
    tcase_add_test(tc, ps_resident_memory_stays_near_the_variables_and_slots);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
