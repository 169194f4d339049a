/* The trainer shared by `tessera train` and tessera-worker: building model and data, the checks
 * of data against the model, sharding, local optimizer steps, evaluation and its hook. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "job/job.h"
#include "trainer.h"

#define DATA(classes, test)                                                                        \
    "data: {batch_size: 10, train: {format: synthetic, examples: 200, shape: [8], "                \
    "classes: " #classes "}" test "}\n"
#define TEST_SPLIT ", test: {format: synthetic, examples: 50, shape: [8], classes: 4, seed: 2}"

static void parse(job_t *job, const char *model, const char *data, const char *optimizer)
{
    char text[2048];
    status_msg_t err = {0};

    snprintf(text, sizeof(text),
             "model: %s\nloss: {sparse_categorical_crossentropy: {from_logits: true}}\noptimizer: "
             "%s\n%s",
             model, optimizer, data);
    ck_assert_msg(job_parse(text, strlen(text), "t.yaml", job, &err) == STATUS_OK, "%s", err.text);
}

#define MLP4 "[{dense: {units: 16, activation: relu}, input_shape: [8]}, {dense: {units: 4}}]"

static trainer_t *make(const job_t *job, const trainer_opts_t *o)
{
    trainer_t *t = NULL;
    status_msg_t err = {0};
    ck_assert_msg(trainer_new(job, o, &t, &err) == STATUS_OK, "%s", err.text);
    return t;
}

static void expect_refused(const job_t *job, const trainer_opts_t *o, status_t code,
                           const char *text)
{
    trainer_t *t = NULL;
    status_msg_t err = {0};
    ck_assert_int_eq(trainer_new(job, o, &t, &err), code);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err.text, text) != NULL, "error: %s", err.text);
}

/* Labels past the model's classes are refused before any step, on every shard: tessera-worker
 * once built its model and data without this check. */
START_TEST(labels_past_the_models_classes_are_refused)
{
    job_t job = {0};
    trainer_opts_t o = {.shard_index = 1, .num_shards = 3, .epochs = -1};

    parse(&job, MLP4, DATA(6, ""), "sgd");
    expect_refused(&job, &o, STATUS_BAD_CONFIG, "training labels go up to 5");
    ck_assert_ptr_nonnull(strstr(job.path, "t.yaml"));
    job_done(&job);

    parse(&job, MLP4, DATA(4, ", test: {format: synthetic, examples: 50, shape: [8], classes: 9}"),
          "sgd");
    expect_refused(&job, &o, STATUS_BAD_CONFIG, "test labels go up to 8");
    job_done(&job);
}
END_TEST

START_TEST(data_of_another_width_is_refused)
{
    job_t job = {0};
    trainer_opts_t o = {.num_shards = 1, .epochs = 1};

    parse(&job, "[{dense: {units: 4}, input_shape: [6]}]", DATA(4, ""), "sgd");
    expect_refused(&job, &o, STATUS_BAD_CONFIG, "8 values per example but the model's input");
    job_done(&job);
}
END_TEST

START_TEST(model_and_data_past_the_budget_are_refused)
{
    job_t job = {0};
    trainer_opts_t o = {.num_shards = 1, .epochs = 1, .max_bytes = 4096};

    parse(&job, MLP4, DATA(4, ""), "sgd");
    expect_refused(&job, &o, STATUS_RESOURCE_EXHAUSTED, "");
    job_done(&job);
}
END_TEST

/* Shards split the training data: each example is in exactly one. */
START_TEST(shards_split_the_examples)
{
    job_t job = {0};
    size_t total = 0;

    parse(&job, MLP4, DATA(4, TEST_SPLIT), "sgd");
    for (int i = 0; i < 3; i++) {
        trainer_opts_t o = {.shard_index = i, .num_shards = 3, .epochs = 1};
        trainer_t *t = make(&job, &o);
        data_batch_t b;
        size_t seen = 0;
        while (trainer_next(t, &b))
            seen += (size_t)b.size;
        ck_assert_uint_eq(seen, trainer_train_examples(t));
        ck_assert_uint_eq(trainer_test_examples(t), 50);
        total += seen;
        trainer_free(t);
    }
    ck_assert_uint_eq(total, 200);
    job_done(&job);
}
END_TEST

/* A fingerprint of a batch: its size and the sums of its features and labels. */
static double batch_print(const data_batch_t *b, size_t width)
{
    double sum = b->size * 1e6;
    for (size_t i = 0; i < (size_t)b->size * width; i++)
        sum += b->features[i] * (double)(i % 7 + 1);
    for (int i = 0; i < b->size; i++)
        sum += b->labels[i] * 1000.0 * (i + 1);
    return sum;
}

/* Another worker's shard, read for it (a lost worker's, on the parameter-server cluster): from
 * any place, the same batches in the same order as its own trainer gives, across the end of an
 * epoch too; and the trainer's own shard goes on where it stood. */
START_TEST(another_shard_reads_as_its_own_trainer_would)
{
    job_t job = {0};
    status_msg_t err = {0};
    double own[14];
    data_batch_t b;
    int64_t e, n;

    parse(&job, MLP4,
          "data: {batch_size: 10, shuffle_buffer: 1000, train: {format: synthetic, "
          "examples: 200, shape: [8], classes: 4}}\n",
          "sgd");
    trainer_opts_t o1 = {.shard_index = 1, .num_shards = 3, .epochs = -1};
    trainer_opts_t o0 = {.shard_index = 0, .num_shards = 3, .epochs = -1};
    trainer_t *owner = make(&job, &o1), *helper = make(&job, &o0);
    for (int i = 0; i < 14; i++) { /* 7 batches an epoch: two epochs */
        ck_assert(trainer_next(owner, &b));
        own[i] = batch_print(&b, 8);
    }
    ck_assert_msg(trainer_seek(helper, 1, 0, 0, &err) == STATUS_OK, "%s", err.text);
    for (int i = 0; i < 4; i++) {
        ck_assert(trainer_next_of(helper, 1, &b));
        ck_assert_double_eq(batch_print(&b, 8), own[i]);
    }
    trainer_position(helper, 1, &e, &n);
    ck_assert(e == 0 && n == 4);
    /* where it stands: no new reader; elsewhere (another worker read some meanwhile): a new one */
    ck_assert_msg(trainer_seek(helper, 1, 0, 4, &err) == STATUS_OK, "%s", err.text);
    ck_assert(trainer_next_of(helper, 1, &b));
    ck_assert_double_eq(batch_print(&b, 8), own[4]);
    ck_assert_msg(trainer_seek(helper, 1, 1, 2, &err) == STATUS_OK, "%s", err.text);
    for (int i = 9; i < 14; i++) {
        ck_assert(trainer_next_of(helper, 1, &b));
        ck_assert_double_eq(batch_print(&b, 8), own[i]);
    }
    trainer_position(helper, 1, &e, &n);
    ck_assert(e == 2 && n == 0);
    /* its own shard was not moved by any of it */
    trainer_position(helper, 0, &e, &n);
    ck_assert(e == 0 && n == 0);
    ck_assert_int_eq(trainer_seek(helper, 3, 0, 0, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_int_eq(trainer_seek(helper, 1, 0, 7, &err), STATUS_INVALID_ARGUMENT);
    {
        int64_t sizes[3];
        trainer_shard_examples(helper, sizes);
        ck_assert(sizes[0] == 67 && sizes[1] == 67 && sizes[2] == 66);
    }
    trainer_free(owner);
    trainer_free(helper);
    job_done(&job);
}
END_TEST

static double mean_loss(trainer_t *t)
{
    model_stats_t st;
    status_msg_t err = {0};
    ck_assert_msg(trainer_evaluate(t, NULL, NULL, &st, NULL, &err) == STATUS_OK, "%s", err.text);
    ck_assert_int_eq(st.examples, 50);
    return st.loss_sum / st.examples;
}

/* With its own optimizer the trainer learns: the test loss falls. Without one, trainer_apply is
 * refused: the gradients are meant for a parameter server. */
START_TEST(local_steps_lower_the_loss)
{
    job_t job = {0};
    trainer_opts_t o = {.num_shards = 1, .epochs = 20, .optimizer = true};
    trainer_t *t;
    data_batch_t b;
    status_msg_t err = {0};
    double before, after;
    int steps = 0;

    parse(&job, MLP4, DATA(4, TEST_SPLIT), "{adam: {learning_rate: 0.01}}");
    t = make(&job, &o);
    before = mean_loss(t);
    while (trainer_next(t, &b)) {
        model_stats_t st;
        ck_assert_msg(trainer_step(t, &b, &st, &err) == STATUS_OK, "%s", err.text);
        ck_assert_int_eq(st.examples, b.size);
        ck_assert_msg(trainer_apply(t, &err) == STATUS_OK, "%s", err.text);
        steps++;
    }
    after = mean_loss(t);
    ck_assert_int_eq(steps, 20 * 20);
    ck_assert_msg(after < 0.8 * before, "test loss %g -> %g", before, after);
    ck_assert_double_eq_tol(trainer_learning_rate(t, 5), 0.01, 1e-12);
    trainer_free(t);

    o.optimizer = false;
    t = make(&job, &o);
    ck_assert(trainer_next(t, &b));
    ck_assert_int_eq(trainer_step(t, &b, &(model_stats_t){0}, &err), STATUS_OK);
    ck_assert_int_eq(trainer_apply(t, &err), STATUS_INVALID_USAGE);
    trainer_free(t);
    job_done(&job);
}
END_TEST

START_TEST(a_loss_that_is_not_finite_names_the_step)
{
    job_t job = {0};
    trainer_opts_t o = {.num_shards = 1, .epochs = -1, .optimizer = true};
    trainer_t *t;
    data_batch_t b;
    status_msg_t err = {0};
    status_t rc = STATUS_OK;
    int steps = 0;

    parse(&job, MLP4, DATA(4, ""), "{sgd: {learning_rate: 1.0e+30}}");
    t = make(&job, &o);
    while (rc == STATUS_OK && steps < 100 && trainer_next(t, &b)) {
        model_stats_t st;
        rc = trainer_step(t, &b, &st, &err);
        if (rc == STATUS_OK)
            rc = trainer_apply(t, &err);
        steps++;
    }
    ck_assert_int_eq(rc, STATUS_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.text, "the loss became") && strstr(err.text, "at step"), "%s",
                  err.text);
    trainer_free(t);
    job_done(&job);
}
END_TEST

typedef struct hook_state {
    int calls, fail_at;
} hook_state_t;

static status_t count_batches(void *arg, const data_batch_t *b, status_msg_t *err)
{
    hook_state_t *h = arg;
    ck_assert_int_gt(b->size, 0);
    if (++h->calls == h->fail_at)
        return status_fail(err, STATUS_CANCELLED, "stopped at batch %d", h->calls);
    return STATUS_OK;
}

/* The hook runs before every test batch (a worker pulls the variables there) and its failure
 * ends the evaluation with its error. A job without a test split cannot be evaluated. */
START_TEST(evaluation_runs_the_hook_before_each_batch)
{
    job_t job = {0};
    trainer_opts_t o = {.num_shards = 1, .epochs = 1};
    trainer_t *t;
    hook_state_t h = {0};
    model_stats_t st;
    status_msg_t err = {0};

    parse(&job, MLP4, DATA(4, TEST_SPLIT), "sgd");
    t = make(&job, &o);
    ck_assert_int_eq(trainer_evaluate(t, count_batches, &h, &st, NULL, &err), STATUS_OK);
    ck_assert_int_eq(h.calls, 5);
    ck_assert_int_eq(st.examples, 50);
    h = (hook_state_t){.fail_at = 3};
    ck_assert_int_eq(trainer_evaluate(t, count_batches, &h, &st, NULL, &err), STATUS_CANCELLED);
    ck_assert_str_eq(err.text, "stopped at batch 3");
    ck_assert_int_eq(st.examples, 20);
    trainer_free(t);
    job_done(&job);

    parse(&job, MLP4, DATA(4, ""), "sgd");
    t = make(&job, &o);
    ck_assert_int_eq(trainer_evaluate(t, NULL, NULL, &st, NULL, &err), STATUS_INVALID_USAGE);
    ck_assert_msg(strstr(err.text, "no test split") != NULL, "%s", err.text);
    trainer_free(t);
    job_done(&job);
}
END_TEST

/* Runs `steps` steps (or three whole epochs, steps 0) of a job parsed from text, with `replicas`;
 * returns the trainer. */
static trainer_t *run_steps(job_t *job, const char *text, int replicas, int steps, int *ret_steps)
{
    trainer_opts_t o = {.num_shards = 1, .epochs = 3, .optimizer = true, .replicas = replicas};
    status_msg_t err = {0};
    trainer_t *t;
    data_batch_t b;
    int done = 0;

    ck_assert_msg(job_parse(text, strlen(text), "t.yaml", job, &err) == STATUS_OK, "%s", err.text);
    ck_assert_msg(job_set_replicas(job, replicas > 1 ? replicas : 1, &err) == STATUS_OK, "%s",
                  err.text);
    t = make(job, &o);
    ck_assert_int_eq(trainer_replicas(t), replicas > 1 ? replicas : 1);
    while ((steps == 0 || done < steps) && trainer_next(t, &b)) {
        model_stats_t st;
        ck_assert_msg(trainer_step(t, &b, &st, &err) == STATUS_OK, "%s", err.text);
        ck_assert_int_eq(st.examples, b.size);
        ck_assert_msg(trainer_apply(t, &err) == STATUS_OK, "%s", err.text);
        done++;
    }
    *ret_steps = done;
    return t;
}

/* The largest difference between the two models' values, relative to the largest value. */
static double max_rel_diff(trainer_t *a, trainer_t *b)
{
    model_t *ma = trainer_model(a), *mb = trainer_model(b);
    double diff = 0, scale = 0;

    ck_assert_uint_eq(model_param_count(ma), model_param_count(mb));
    for (size_t i = 0; i < model_param_count(ma); i++)
        for (size_t k = 0; k < model_param(ma, i)->n; k++) {
            double x = model_param(ma, i)->value[k], y = model_param(mb, i)->value[k];
            diff = fmax(diff, fabs(x - y));
            scale = fmax(scale, fabs(x));
        }
    return diff / scale;
}

#define SYNC_JOB_OPT(strategy, batch_key, batch, optimizer)                                        \
    "strategy: " strategy "\nmodel: " MLP4                                                         \
    "\nloss: {sparse_categorical_crossentropy: {from_logits: true}}\noptimizer: " optimizer "\n"   \
    "data: {" batch_key ": " #batch ", shuffle_buffer: 1000, train: {format: synthetic, "          \
    "examples: 200, shape: [8], classes: 4}}\n"
#define SYNC_JOB_OF(strategy, batch_key, batch)                                                    \
    SYNC_JOB_OPT(strategy, batch_key, batch, "{adam: {learning_rate: 0.01}}")
#define SYNC_JOB(strategy, batch) SYNC_JOB_OF(strategy, "batch_size", batch)
/* A bag-of-embeddings text model: the Embedding's gradients are rows */
#define TEXT_JOB_OPT(strategy, batch, optimizer)                                                   \
    "strategy: " strategy "\nmodel: [{embedding: {input_dim: 50, output_dim: 4}, input_shape: "    \
    "[6]}, global_average_pooling1d, {dense: {units: 1}}]\nloss: {binary_crossentropy: "           \
    "{from_logits: true}}\noptimizer: " optimizer "\ndata: {batch_size: " #batch                   \
    ", shuffle_buffer: 1000, train: {format: synthetic, kind: text, examples: 200, shape: [6], "   \
    "vocabulary: 50}}\n"
#define TEXT_JOB(strategy, batch) TEXT_JOB_OPT(strategy, batch, "{adam: {learning_rate: 0.01}}")
/* clipping that binds on every step, on the gradient the replicas summed */
#define CLIP_GLOBAL "{adamw: {learning_rate: 0.01, global_clipnorm: 0.05}}"
#define CLIP_NORM   "{nadam: {learning_rate: 0.01, clipnorm: 0.01}}"
#define CLIP_VALUE  "{lion: {learning_rate: 0.001, clipvalue: 0.001}}"

/* mirrored and central_storage split each global batch over their replicas and sum the
 * gradients: with the same seed and global batch they end where one device does, a partial last
 * batch (replicas with fewer examples, or none) included. */
START_TEST(replicas_step_as_one_device_does)
{
    static const struct {
        const char *one, *sync;
        int replicas, steps;
    } cases[] = {
        {SYNC_JOB("one_device", 20), SYNC_JOB("{mirrored: {replicas: 2}}", 10), 2, 20},
        {SYNC_JOB("one_device", 21), SYNC_JOB("{central_storage: {replicas: 3}}", 7), 3, 0},
        /* data.global_batch_size, as Keras users size it: 10 per replica */
        {SYNC_JOB("one_device", 20),
         SYNC_JOB_OF("{mirrored: {replicas: 2}}", "global_batch_size", 20), 2, 20},
        /* an Embedding: every replica's rows go to the optimizer, which sums an id's */
        {TEXT_JOB("one_device", 20), TEXT_JOB("{mirrored: {replicas: 2}}", 10), 2, 20},
        /* the optimizer's clipping sees the summed gradient, as one device's: by the global
         * norm, by each variable's norm (an Embedding's over its summed rows), by value */
        {SYNC_JOB_OPT("one_device", "batch_size", 20, CLIP_GLOBAL),
         SYNC_JOB_OPT("{mirrored: {replicas: 2}}", "batch_size", 10, CLIP_GLOBAL), 2, 20},
        {TEXT_JOB_OPT("one_device", 20, CLIP_NORM),
         TEXT_JOB_OPT("{mirrored: {replicas: 2}}", 10, CLIP_NORM), 2, 20},
        {TEXT_JOB_OPT("one_device", 21, CLIP_VALUE),
         TEXT_JOB_OPT("{central_storage: {replicas: 3}}", 7, CLIP_VALUE), 3, 20},
    };

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        job_t j1 = {0}, j2 = {0};
        int n1, n2;
        trainer_t *one = run_steps(&j1, cases[c].one, 1, cases[c].steps, &n1);
        trainer_t *sync = run_steps(&j2, cases[c].sync, cases[c].replicas, cases[c].steps, &n2);
        double d = max_rel_diff(one, sync);
        printf("%s over %d replicas%s: %d steps, relative difference %.3g\n",
               j2.strategy == JOB_STRATEGY_MIRRORED ? "mirrored" : "central_storage",
               cases[c].replicas, j2.data.global_batch_size ? " (global_batch_size)" : "", n2, d);
        ck_assert_int_eq(n1, n2);
        ck_assert_int_eq(n1, cases[c].steps ? cases[c].steps : 30); /* 200 = 9 * 21 + 11 */
        ck_assert_msg(d <= 1e-5, "case %zu: relative difference %g", c, d);
        /* (Lion's steps are signs, which the split's rounding does not flip) */
        ck_assert_msg(d > 0 || c == 0 || c == 6,
                      "case %zu: bit-identical: the split did not happen?", c);
        trainer_free(one);
        trainer_free(sync);
        job_done(&j1);
        job_done(&j2);
    }
}
END_TEST

/* A shared layer (keras3_shared.json: one Dense called three times): every replica computes
 * each call with replica 0's weights, so replicas step as one device does. */
START_TEST(shared_layers_step_over_replicas_as_one_device_does)
{
    static const char *const strategies[] = {"one_device", "{mirrored: {replicas: 2}}",
                                             "{central_storage: {replicas: 3}}"};
    const char *root = getenv("TESSERA_SOURCE_DIR");
    char text[3][1024];
    trainer_t *t[3];
    job_t j[3] = {{0}};
    int n[3];

    for (int c = 0; c < 3; c++) {
        snprintf(text[c], sizeof(text[c]),
                 "strategy: %s\nmodel: {keras_json: %s/tests/fixtures/keras/keras3_shared.json}\n"
                 "loss: {sparse_categorical_crossentropy: {from_logits: true}}\noptimizer: "
                 "{adam: {learning_rate: 0.01}}\ndata: {%s: 12, shuffle_buffer: 1000, train: "
                 "{format: synthetic, examples: 200, shape: [12], classes: 3}}\n",
                 strategies[c], root != NULL ? root : ".",
                 c == 0 ? "batch_size" : "global_batch_size");
        t[c] = run_steps(&j[c], text[c], c == 0 ? 1 : c + 1, 20, &n[c]);
    }
    for (int c = 1; c < 3; c++) {
        double d = max_rel_diff(t[0], t[c]);
        printf("shared layer, %s: relative difference %.3g\n", strategies[c], d);
        ck_assert_int_eq(n[c], 20);
        ck_assert_msg(d <= 1e-5 && d > 0, "%s: relative difference %g", strategies[c], d);
    }
    for (int c = 0; c < 3; c++) {
        trainer_free(t[c]);
        job_done(&j[c]);
    }
}
END_TEST

/* The clipping binds: the same jobs without it end elsewhere. */
/* A BatchNormalization between two Dense layers. */
#define BN_JOB(strategy, batch, synchronized)                                                      \
    "strategy: " strategy "\nmodel: [{dense: {units: 16, activation: relu, use_bias: false}, "     \
    "input_shape: [8]}, "                                                                          \
    "{batch_normalization: {synchronized: " synchronized "}}, {dense: {units: 4}}]\n"              \
    "loss: {sparse_categorical_crossentropy: {from_logits: true}}\noptimizer: {adam: "             \
    "{learning_rate: 0.01}}\ndata: {batch_size: " #batch ", shuffle_buffer: 1000, train: "         \
    "{format: synthetic, examples: 200, shape: [8], classes: 4}}\n"

/* synchronized BatchNormalization normalizes every replica's slice by the global batch's
 * statistics (and back-propagates through them): replicas then step as one device does with
 * that batch, the last partial batch (7 + 4 + 0 examples) included; unsynchronized, each
 * replica's statistics are its slice's, and they do not. */
START_TEST(synchronized_batch_normalization_steps_as_one_device_does)
{
    job_t j1 = {0}, j2 = {0}, j3 = {0};
    int n1, n2, n3;
    trainer_t *one = run_steps(&j1, BN_JOB("one_device", 21, "true"), 1, 0, &n1);
    trainer_t *synced = run_steps(&j2, BN_JOB("{mirrored: {replicas: 3}}", 7, "true"), 3, 0, &n2);
    trainer_t *apart = run_steps(&j3, BN_JOB("{mirrored: {replicas: 3}}", 7, "false"), 3, 0, &n3);
    double d = max_rel_diff(one, synced), d_apart = max_rel_diff(one, apart);

    printf("BatchNormalization over 3 replicas: relative difference %.3g synchronized, %.3g "
           "not\n",
           d, d_apart);
    ck_assert_int_eq(n1, 30);
    ck_assert_int_eq(n2, 30);
    ck_assert_msg(d <= 1e-5, "synchronized: relative difference %g", d);
    ck_assert_msg(d_apart > 100 * d && d_apart > 1e-4, "not synchronized: %g", d_apart);
    trainer_free(one);
    trainer_free(synced);
    trainer_free(apart);
    job_done(&j1);
    job_done(&j2);
    job_done(&j3);
}
END_TEST

START_TEST(clipping_changes_the_updates)
{
    static const char *const pairs[][2] = {
        {SYNC_JOB_OPT("one_device", "batch_size", 20, CLIP_GLOBAL),
         SYNC_JOB_OPT("one_device", "batch_size", 20, "{adamw: {learning_rate: 0.01}}")},
        {TEXT_JOB_OPT("one_device", 20, CLIP_NORM),
         TEXT_JOB_OPT("one_device", 20, "{nadam: {learning_rate: 0.01}}")},
        {TEXT_JOB_OPT("one_device", 20, CLIP_VALUE),
         TEXT_JOB_OPT("one_device", 20, "{lion: {learning_rate: 0.001}}")},
    };

    for (size_t c = 0; c < sizeof(pairs) / sizeof(pairs[0]); c++) {
        job_t j1 = {0}, j2 = {0};
        int n1, n2;
        trainer_t *clipped = run_steps(&j1, pairs[c][0], 1, 20, &n1);
        trainer_t *plain = run_steps(&j2, pairs[c][1], 1, 20, &n2);
        double d = max_rel_diff(clipped, plain);
        ck_assert_msg(d > 1e-3, "case %zu: clipping changed the values by %g only", c, d);
        trainer_free(clipped);
        trainer_free(plain);
        job_done(&j1);
        job_done(&j2);
    }
}
END_TEST

#define ACC_JOB(strategy, batch, k)                                                                \
    SYNC_JOB(strategy, batch) "train: {epochs: 3, accumulate_steps: " #k "}\n"

/* train.accumulate_steps k applies the mean gradient of k batches: as one batch k times larger
 * does, on one device and over replicas. */
START_TEST(accumulated_batches_step_as_one_larger_batch)
{
    job_t big = {0}, acc = {0}, mir = {0};
    int n_big, n_acc, n_mir;
    trainer_t *t_big = run_steps(&big, ACC_JOB("one_device", 40, 1), 1, 0, &n_big);
    trainer_t *t_acc = run_steps(&acc, ACC_JOB("one_device", 20, 2), 1, 0, &n_acc);
    trainer_t *t_mir = run_steps(&mir, ACC_JOB("{mirrored: {replicas: 2}}", 10, 2), 2, 0, &n_mir);
    double d1 = max_rel_diff(t_big, t_acc), d2 = max_rel_diff(t_big, t_mir);

    printf("accumulate_steps 2: relative difference %.3g (one device), %.3g (2 replicas)\n", d1,
           d2);
    ck_assert_int_eq(n_big, 15);
    ck_assert_int_eq(n_acc, 30);
    ck_assert_int_eq(n_mir, 30);
    ck_assert_int_eq(trainer_iterations(t_acc), 15); /* updates, not batches */
    ck_assert_msg(d1 <= 1e-5 && d2 <= 1e-5, "%g %g", d1, d2);
    ck_assert_msg(d1 > 0 || d2 > 0, "bit-identical: did the accumulation happen?");
    trainer_free(t_big);
    trainer_free(t_acc);
    trainer_free(t_mir);
    job_done(&big);
    job_done(&acc);
    job_done(&mir);
}
END_TEST

/* multi_worker_mirrored's slices: the gradients of slices 0 and 1 of a global batch, summed (as
 * the ring does), are those of one process that steps on both (a survivor taking a lost
 * worker's slice), and those of one device on the whole batch. */
START_TEST(slices_of_a_global_batch_sum_to_the_whole_batch)
{
    job_t job = {0};
    status_msg_t err = {0};
    trainer_opts_t o = {.num_shards = 1, .epochs = 1, .slice_count = 3};
    trainer_t *t[3], *both, *one;
    data_batch_t b[3], bb, b1;
    model_stats_t st;
    const char *text = SYNC_JOB("multi_worker_mirrored", 7);

    ck_assert_msg(job_parse(text, strlen(text), "t.yaml", &job, &err) == STATUS_OK, "%s", err.text);
    for (int k = 0; k < 3; k++) {
        o.slice_index = k;
        t[k] = make(&job, &o);
        ck_assert(trainer_next(t[k], &b[k]));
        ck_assert_int_eq(b[k].size, 21);
        ck_assert_msg(trainer_step(t[k], &b[k], &st, &err) == STATUS_OK, "%s", err.text);
        ck_assert_int_eq(st.examples, 7);
    }
    o.slice_index = 0;
    both = make(&job, &o); /* slices 0 and 2 of 3, with stride 2: a ring of 2 after a loss */
    ck_assert_int_eq(trainer_set_slices(both, 0, 2, &err), STATUS_OK);
    ck_assert(trainer_next(both, &bb));
    ck_assert_int_eq(trainer_step(both, &bb, &st, &err), STATUS_OK);
    ck_assert_int_eq(st.examples, 14);
    ck_assert_int_eq(trainer_set_slices(both, 2, 2, &err), STATUS_INVALID_ARGUMENT);
    o.slice_count = 0; /* one device, batch 7: takes the first slice's examples only */
    one = make(&job, &o);
    ck_assert(trainer_next(one, &b1));
    for (size_t i = 0; i < model_param_count(trainer_model(both)); i++) {
        const model_param_t *p = model_param(trainer_model(both), i);
        for (size_t k = 0; k < p->n; k++) {
            float want = model_param(trainer_model(t[0]), i)->grad[k] +
                         model_param(trainer_model(t[2]), i)->grad[k];
            ck_assert_msg(fabsf(p->grad[k] - want) <= 1e-6f * (1 + fabsf(want)),
                          "param %zu [%zu]: %g, not %g", i, k, p->grad[k], want);
        }
    }
    ck_assert_int_eq(memcmp(b[0].features, b1.features, 7 * 8 * sizeof(float)), 0);
    for (int k = 0; k < 3; k++)
        trainer_free(t[k]);
    trainer_free(both);
    trainer_free(one);
    job_done(&job);
}
END_TEST

/* The metrics' sums of a step are every replica's: a mirrored step of 3 replicas counts each
 * of the global batch's examples once (top-k: one hit or miss each, AUC: each class's prediction
 * in one bucket), with the same counts as one replica stepping on the same batch; an evaluation
 * counts the test split's, and an AUC of an output that is not a class probability is refused
 * by the trainer only when the metric cannot apply (top-k of one output). */
START_TEST(metric_sums_count_every_replica_once)
{
    const char *text = "strategy: {mirrored: {replicas: 3}}\nmodel: " MLP4
                       "\nloss: {sparse_categorical_crossentropy: {from_logits: true}}\n"
                       "metrics: [{sparse_top_k_categorical_accuracy: {k: 2}}, auc, precision]\n"
                       "optimizer: sgd\n" DATA(4, TEST_SPLIT);
    job_t job = {0}, one = {0};
    trainer_opts_t o = {.num_shards = 1, .epochs = 1, .optimizer = true, .replicas = 3};
    status_msg_t err = {0};
    trainer_t *t, *t1;
    data_batch_t b;
    model_stats_t st;
    double sums[1024] = {0}, sums1[1024] = {0}, pos = 0, neg = 0;

    ck_assert_msg(job_parse(text, strlen(text), "t.yaml", &job, &err) == STATUS_OK, "%s", err.text);
    ck_assert_msg(job_parse(text, strlen(text), "t.yaml", &one, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(job.metric_width, 2 + 400 + 3);
    t = make(&job, &o);
    ck_assert(trainer_next(t, &b));
    ck_assert_int_eq(b.size, 30);
    ck_assert_msg(trainer_step(t, &b, &st, &err) == STATUS_OK, "%s", err.text);
    trainer_take_metrics(t, sums);
    ck_assert_double_eq(sums[1], 30); /* top-k: examples */
    for (int k = 0; k < 200; k++) {
        pos += sums[2 + k];
        neg += sums[2 + 200 + k];
    }
    ck_assert_double_eq(pos, 30);     /* one labelled class per example */
    ck_assert_double_eq(neg, 30 * 3); /* and three others */
    /* taken: the next take adds nothing */
    double again[1024] = {0};
    trainer_take_metrics(t, again);
    ck_assert_double_eq(again[1], 0);

    o.replicas = 1;
    one.data.batch_size = 30;
    t1 = make(&one, &o);
    ck_assert(trainer_next(t1, &b));
    ck_assert_msg(trainer_step(t1, &b, &st, &err) == STATUS_OK, "%s", err.text);
    trainer_take_metrics(t1, sums1);
    ck_assert_double_eq(sums1[0], sums[0]);     /* the same hits */
    ck_assert_double_eq(sums1[402], sums[402]); /* true positives */
    ck_assert_double_eq(sums1[403], sums[403]);

    memset(again, 0, sizeof(again));
    ck_assert_msg(trainer_evaluate(t, NULL, NULL, &st, again, &err) == STATUS_OK, "%s", err.text);
    ck_assert_double_eq(again[1], 50);
    ck_assert_int_eq(st.examples, 50);
    memset(sums, 0, sizeof(sums));
    trainer_take_metrics(t, sums); /* the evaluation's sums went to its own list */
    ck_assert_double_eq(sums[1], 0);
    trainer_free(t);
    trainer_free(t1);
    job_done(&job);
    job_done(&one);

    const char *mlp1 = "model: [{dense: {units: 1}, input_shape: [8]}]\nloss: mse\n"
                       "metrics: [sparse_top_k_categorical_accuracy]\n" DATA(4, "");
    ck_assert_msg(job_parse(mlp1, strlen(mlp1), "t.yaml", &job, &err) == STATUS_OK, "%s", err.text);
    t = NULL;
    ck_assert_int_eq(trainer_new(&job, &o, &t, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "sparse_top_k_categorical_accuracy needs an output of class "
                                   "probabilities") != NULL,
                  "%s", err.text);
    trainer_free(t);
    job_done(&job);
}
END_TEST

/* scale_learning_rate multiplies by the replicas; an Embedding (sparse rows) is refused by name
 * until its rows are summed; replicas is an option of the local strategies only. */
START_TEST(replicas_scale_the_rate_and_refuse_what_they_cannot_do)
{
    job_t job = {0};
    trainer_opts_t o = {.num_shards = 1, .epochs = 1, .optimizer = true, .replicas = 4};
    status_msg_t err = {0};
    trainer_t *t;

    parse(&job, MLP4, DATA(4, ""), "{sgd: {learning_rate: 0.1, scale_learning_rate: true}}");
    t = make(&job, &o);
    ck_assert_double_eq_tol(trainer_learning_rate(t, 0), 0.4, 1e-12);
    trainer_free(t);
    job_done(&job);

    const char *bad = "strategy: {one_device: {replicas: 2}}\nmodel: " MLP4
                      "\nloss: sparse_categorical_crossentropy\n" DATA(4, "");
    ck_assert_int_eq(job_parse(bad, strlen(bad), "t.yaml", &job, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "replicas") != NULL, "%s", err.text);
}
END_TEST

static Suite *trainer_suite(void)
{
    Suite *s = suite_create("trainer");
    TCase *tc = tcase_create("trainer");
    tcase_add_test(tc, labels_past_the_models_classes_are_refused);
    tcase_add_test(tc, data_of_another_width_is_refused);
    tcase_add_test(tc, model_and_data_past_the_budget_are_refused);
    tcase_add_test(tc, shards_split_the_examples);
    tcase_add_test(tc, local_steps_lower_the_loss);
    tcase_add_test(tc, a_loss_that_is_not_finite_names_the_step);
    tcase_add_test(tc, evaluation_runs_the_hook_before_each_batch);
    tcase_add_test(tc, another_shard_reads_as_its_own_trainer_would);
    tcase_add_test(tc, replicas_step_as_one_device_does);
    tcase_add_test(tc, shared_layers_step_over_replicas_as_one_device_does);
    tcase_add_test(tc, synchronized_batch_normalization_steps_as_one_device_does);
    tcase_add_test(tc, clipping_changes_the_updates);
    tcase_add_test(tc, accumulated_batches_step_as_one_larger_batch);
    tcase_add_test(tc, slices_of_a_global_batch_sum_to_the_whole_batch);
    tcase_add_test(tc, replicas_scale_the_rate_and_refuse_what_they_cannot_do);
    tcase_add_test(tc, metric_sums_count_every_replica_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(trainer_suite(), CK_FORK);
}
