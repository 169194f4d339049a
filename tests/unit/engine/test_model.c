/* Finite-difference gradient checks for every layer, activation and loss, and the model's
 * shape and input validation. */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "backend.h"
#include "model.h"
#include "model_internal.h"

static job_layer_t dense(int units, job_activation_t act)
{
    job_layer_t l = {.kind = JOB_LAYER_DENSE, .units = units, .activation = act, .use_bias = true};
    return l;
}

static job_layer_t conv(int filters, int k, int stride, bool same, job_activation_t act)
{
    job_layer_t l = {.kind = JOB_LAYER_CONV2D,
                     .filters = filters,
                     .kernel_size = {k, k},
                     .strides = {stride, stride},
                     .padding_same = same,
                     .activation = act,
                     .use_bias = true};
    return l;
}

static job_layer_t plain(job_layer_kind_t kind)
{
    job_layer_t l = {.kind = kind};
    return l;
}

static job_layer_t pool(job_layer_kind_t kind, int p, int s, bool same)
{
    job_layer_t l = {.kind = kind, .pool_size = {p, p}, .strides = {s, s}, .padding_same = same};
    return l;
}

typedef struct fixture {
    job_model_t spec;
    job_layer_t layers[8];
    model_t *m;
    float *x, *y;
    int batch;
} fixture_t;

/* The model of f->spec, and a batch of inputs and labels for it. */
static void build_spec(fixture_t *f, job_loss_kind_t loss, bool logits, int batch)
{
    status_msg_t err = {0};

    f->batch = batch;
    ck_assert_msg(model_new(&f->spec, loss, logits, batch, 42, 0, &f->m, &err) == STATUS_OK, "%s",
                  err.text);
    f->x = calloc((size_t)batch * model_input_len(f->m), sizeof(float));
    f->y = calloc((size_t)batch, sizeof(float));
    uint64_t s = 7;
    for (size_t i = 0; i < (size_t)batch * model_input_len(f->m); i++)
        f->x[i] = (float)((layer_rng_next(&s) >> 40) % 2000) / 1000.0f - 1.0f;
    for (int b = 0; b < batch; b++) {
        size_t k = model_output_len(f->m);
        f->y[b] = loss == JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ||
                          loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY
                      ? (float)(b % (int)k)
                  : loss == JOB_LOSS_BINARY_CROSSENTROPY ? (float)(b % 2)
                                                         : 0.3f * (float)b - 0.5f;
    }
}

static void build(fixture_t *f, const int *shape, int rank, job_loss_kind_t loss, bool logits,
                  int batch, const job_layer_t *layers, int n)
{
    memset(f, 0, sizeof(*f));
    memcpy(f->layers, layers, (size_t)n * sizeof(*layers));
    f->spec.layers = f->layers;
    f->spec.n_layers = (size_t)n;
    f->spec.input_rank = rank;
    memcpy(f->spec.input_shape, shape, (size_t)rank * sizeof(int));
    build_spec(f, loss, logits, batch);
}

/* A model of two inputs, a [3] and a [2, 2]: f->x holds each example's 3 + 4 values. */
static void build_two_inputs(fixture_t *f, job_loss_kind_t loss, int batch,
                             const job_layer_t *layers, int n)
{
    memset(f, 0, sizeof(*f));
    memcpy(f->layers, layers, (size_t)n * sizeof(*layers));
    f->spec.layers = f->layers;
    f->spec.n_layers = (size_t)n;
    f->spec.n_inputs = 2;
    f->spec.inputs[0] = (job_model_input_t){.name = "a", .shape = {3}, .rank = 1};
    f->spec.inputs[1] = (job_model_input_t){.name = "b", .shape = {2, 2}, .rank = 2};
    f->spec.input_rank = 1;
    f->spec.input_shape[0] = 3;
    build_spec(f, loss, false, batch);
}

static void teardown(fixture_t *f)
{
    model_free(f->m);
    free(f->x);
    free(f->y);
}

/* Dropout layers must draw the same mask for every evaluation of one check. */
static void save_rng(model_t *m, uint64_t *saved)
{
    for (size_t i = 0; i < m->n_layers; i++)
        saved[i] = m->layers[i].rng;
}

static void restore_rng(model_t *m, const uint64_t *saved)
{
    for (size_t i = 0; i < m->n_layers; i++)
        m->layers[i].rng = saved[i];
}

static double loss_at(fixture_t *f, const uint64_t *rng)
{
    model_stats_t st;
    status_msg_t err;
    restore_rng(f->m, rng);
    ck_assert_int_eq(model_train_step(f->m, f->x, f->y, f->batch, &st, &err), STATUS_OK);
    return st.loss_sum / f->batch;
}

static float analytic(const model_param_t *p, size_t i)
{
    if (!p->sparse)
        return p->grad[i];
    size_t dim = (size_t)p->shape[1], row = i / dim;
    for (size_t j = 0; j < p->n_rows; j++)
        if ((size_t)p->rows_index[j] == row)
            return p->rows_grad[j * dim + i % dim];
    return 0.0f;
}

/* Compares every parameter's gradient with central differences of the loss. */
static void check_gradients_eps(fixture_t *f, float eps)
{
    uint64_t rng[8];
    model_t *m = f->m;
    size_t checked = 0;

    save_rng(m, rng);
    for (size_t k = 0; k < model_param_count(m); k++) {
        model_param_t *p = model_param(m, k);
        float *grad;
        if (p->moving) /* a moving statistic: no gradient of the loss */
            continue;
        grad = malloc(p->n * sizeof(float));
        loss_at(f, rng);
        for (size_t i = 0; i < p->n; i++)
            grad[i] = analytic(p, i);
        for (size_t i = 0; i < p->n; i++) {
            float v = p->value[i];
            double up, down, fd;
            p->value[i] = v + eps;
            up = loss_at(f, rng);
            p->value[i] = v - eps;
            down = loss_at(f, rng);
            p->value[i] = v;
            fd = (up - down) / (2.0 * eps);
            ck_assert_msg(fabs(fd - grad[i]) <= 2e-3 + 2e-2 * fabs(fd),
                          "%s[%zu]: analytic %.6f, finite difference %.6f", p->name, i,
                          (double)grad[i], fd);
            checked++;
        }
        free(grad);
    }
    ck_assert_uint_gt(checked, 0);
}

static void check_gradients(fixture_t *f)
{
    check_gradients_eps(f, 1e-2f);
}

/* A merge layer reading the layers `...` (indices, JOB_INPUT_MODEL for the input), -2 ends. */
static job_layer_t merge(job_layer_kind_t kind, ...)
{
    job_layer_t l = plain(kind);
    va_list ap;

    va_start(ap, kind);
    for (int src = va_arg(ap, int); src != -2; src = va_arg(ap, int))
        l.inputs[l.n_inputs++] = src;
    va_end(ap);
    l.axis = -1;
    return l;
}

static job_layer_t reads(job_layer_t l, int src)
{
    l.inputs[0] = src;
    l.n_inputs = 1;
    return l;
}

START_TEST(model_graph_of_merges_gradients_match)
{
    fixture_t f;
    /* two branches of the input, merged every way, one merge read by two others */
    job_layer_t l[] = {
        reads(dense(4, JOB_ACT_TANH), JOB_INPUT_MODEL),
        reads(dense(4, JOB_ACT_LINEAR), JOB_INPUT_MODEL),
        merge(JOB_LAYER_MULTIPLY, 0, 1, 1, -2),
        merge(JOB_LAYER_MAXIMUM, 0, 1, -2), /* of a kink only where the branches meet */
        merge(JOB_LAYER_SUBTRACT, 3, 1, -2),
        merge(JOB_LAYER_AVERAGE, 2, 4, 0, -2),
        merge(JOB_LAYER_CONCATENATE, 2, 5, 3, -2),
        dense(1, JOB_ACT_LINEAR),
    };
    build(&f, (int[]){3}, 1, JOB_LOSS_MSE, false, 4, l, 8);
    ck_assert(f.m->graph);
    ck_assert_uint_eq(f.m->layers[6].out_len, 12);
    check_gradients(&f);
    teardown(&f);
}
END_TEST

START_TEST(model_graph_concatenates_an_inner_axis)
{
    fixture_t f;
    job_layer_t l[] = {
        reads(dense(2, JOB_ACT_TANH), JOB_INPUT_MODEL), /* (3, 2) */
        merge(JOB_LAYER_CONCATENATE, JOB_INPUT_MODEL, 0, -2),
        plain(JOB_LAYER_FLATTEN),
        dense(1, JOB_ACT_LINEAR),
    };
    l[1].axis = 1; /* the steps: (3, 2) and (3, 2) make (6, 2) */
    build(&f, (int[]){3, 2}, 2, JOB_LOSS_MSE, false, 2, l, 4);
    ck_assert_int_eq(f.m->layers[1].out_shape[0], 6);
    ck_assert_int_eq(f.m->layers[1].out_shape[1], 2);
    {
        model_stats_t st;
        status_msg_t err;
        ck_assert_int_eq(model_train_step(f.m, f.x, f.y, f.batch, &st, &err), STATUS_OK);
        /* example 1's first three steps are its input, the next three the dense layer's */
        const float *out = f.m->layers[1].out + 12;
        for (int k = 0; k < 6; k++)
            ck_assert_float_eq(out[k], f.x[6 + k]);
        for (int k = 0; k < 6; k++)
            ck_assert_float_eq(out[6 + k], f.m->layers[0].out[6 + k]);
    }
    check_gradients(&f);
    teardown(&f);
}
END_TEST

static job_layer_t batch_norm(bool center, bool scale)
{
    job_layer_t l = plain(JOB_LAYER_BATCH_NORMALIZATION);
    l.axis = -1;
    l.momentum = 0.9;
    l.epsilon = 1e-3;
    l.center = center;
    l.scale_gamma = scale;
    l.moving_mean_init.kind = JOB_INIT_ZEROS;
    l.moving_variance_init.kind = JOB_INIT_ONES;
    return l;
}

START_TEST(model_batch_normalization_gradients_match)
{
    fixture_t f;
    job_layer_t l[] = {conv(3, 2, 1, false, JOB_ACT_LINEAR),
                       batch_norm(true, true),
                       plain(JOB_LAYER_FLATTEN),
                       dense(4, JOB_ACT_TANH),
                       batch_norm(false, true),
                       dense(1, JOB_ACT_LINEAR)};
    build(&f, (int[]){4, 4, 2}, 3, JOB_LOSS_MSE, false, 6, l, 6);
    /* gamma, beta, moving mean and variance; gamma alone and the statistics */
    ck_assert_uint_eq(f.m->layers[1].n_params, 4);
    ck_assert_uint_eq(f.m->layers[4].n_params, 3);
    ck_assert(f.m->layers[1].params[2].moving && f.m->layers[1].params[3].moving);
    ck_assert_str_eq(f.m->layers[1].params[3].name, "batch_normalization_1/moving_variance");
    /* normalizing over a few rows bends the loss sharply: small steps (Keras's own gradients
     * are compared in the compat suite) */
    check_gradients_eps(&f, 2e-3f);
    teardown(&f);
}
END_TEST

/* A training pass hands the batch's statistics over as the moving statistics' gradient;
 * inference normalizes by the moving statistics: set to the batch's, it gives training's
 * output. */
START_TEST(model_batch_normalization_infers_with_the_moving_statistics)
{
    fixture_t f;
    job_layer_t l[] = {dense(3, JOB_ACT_LINEAR), batch_norm(true, true), dense(1, JOB_ACT_LINEAR)};
    model_stats_t st;
    status_msg_t err;
    float trained[8];
    model_param_t *mean, *var;

    build(&f, (int[]){5}, 1, JOB_LOSS_MSE, false, 8, l, 3);
    mean = &f.m->layers[1].params[2];
    var = &f.m->layers[1].params[3];
    ck_assert_int_eq(model_train_step(f.m, f.x, f.y, 8, &st, &err), STATUS_OK);
    memcpy(trained, model_output(f.m), sizeof(trained));
    for (int c = 0; c < 3; c++) { /* the statistics of dense's outputs over the batch */
        double sum = 0, sq = 0;
        for (int b = 0; b < 8; b++)
            sum += f.m->layers[0].out[b * 3 + c];
        for (int b = 0; b < 8; b++)
            sq += pow(f.m->layers[0].out[b * 3 + c] - sum / 8, 2);
        ck_assert_float_eq_tol(mean->grad[c], sum / 8, 1e-6);
        ck_assert_float_eq_tol(var->grad[c], sq / 8, 1e-6);
        ck_assert_float_eq(mean->value[c], 0.0f); /* the update is the trainer's */
        ck_assert_float_eq(var->value[c], 1.0f);
    }
    memcpy(mean->value, mean->grad, 3 * sizeof(float));
    memcpy(var->value, var->grad, 3 * sizeof(float));
    ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, 8, &st, &err), STATUS_OK);
    for (int b = 0; b < 8; b++)
        ck_assert_float_eq_tol(model_output(f.m)[b], trained[b], 1e-5);
    teardown(&f);
}
END_TEST

START_TEST(model_batch_normalization_on_another_axis_is_refused)
{
    job_layer_t l[] = {batch_norm(true, true), plain(JOB_LAYER_FLATTEN), dense(1, JOB_ACT_LINEAR)};
    job_model_t spec = {.layers = l, .n_layers = 3, .input_rank = 2, .input_shape = {3, 4}};
    status_msg_t err = {0};
    model_t *m = NULL;

    l[0].axis = 1;
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "axis 1 is not the last axis"), "%s", err.text);
    l[0].axis = 2; /* Keras 2 names the last axis by its number */
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err), STATUS_OK);
    model_free(m);
}
END_TEST

START_TEST(model_graph_merges_of_other_shapes_are_refused)
{
    job_layer_t l[] = {
        reads(dense(4, JOB_ACT_TANH), JOB_INPUT_MODEL),
        reads(dense(3, JOB_ACT_TANH), JOB_INPUT_MODEL),
        merge(JOB_LAYER_ADD, 0, 1, -2),
        dense(1, JOB_ACT_LINEAR),
    };
    job_model_t spec = {.layers = l, .n_layers = 4, .input_rank = 1, .input_shape = {3}};
    status_msg_t err = {0};
    model_t *m = NULL;

    snprintf(l[2].name, sizeof(l[2].name), "sum");
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "sum") && strstr(err.text, "(batch, 4) and (batch, 3) differ"),
                  "%s", err.text);
    l[2] = merge(JOB_LAYER_CONCATENATE, 0, 1, -2);
    l[2].axis = 1;
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err), STATUS_OK);
    ck_assert_uint_eq(m->layers[2].out_len, 7);
    model_free(m);
    l[2].axis = 2;
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "axis 2 is not an axis"), "%s", err.text);
}
END_TEST

/* Layer `first`'s later call, reading src. */
static job_layer_t call_of(const job_layer_t *layers, int first, int src)
{
    job_layer_t l = reads(layers[first], src);

    l.shares = first + 1;
    return l;
}

typedef struct ready_log {
    size_t first[8];
    int n;
} ready_log_t;

static void log_ready(void *arg, model_backward_event_t ev, size_t first)
{
    ready_log_t *log = arg;

    if (ev == MODEL_GRADS_READY && log->n < 8)
        log->first[log->n++] = first;
}

/* A Dense called three times (on a layer, on its own output, on the Add of both): its weights
 * are the model's once, its gradient the sum over the calls, its L2 term counted once, and the
 * step tells the gradients ready once, at its first call, after the later ones. */
START_TEST(model_graph_shared_layer_gradients_match)
{
    fixture_t f;
    job_layer_t l[6] = {reads(dense(4, JOB_ACT_TANH), JOB_INPUT_MODEL),
                        reads(dense(4, JOB_ACT_SIGMOID), 0)};

    l[1].kernel_reg.l2 = 0.05;
    l[2] = call_of(l, 1, 1);
    l[3] = merge(JOB_LAYER_ADD, 1, 2, -2);
    l[4] = call_of(l, 1, 3);
    l[5] = dense(1, JOB_ACT_LINEAR);
    build(&f, (int[]){3}, 1, JOB_LOSS_MSE, false, 4, l, 6);
    ck_assert_uint_eq(model_param_count(f.m), 6);
    ck_assert_ptr_eq(f.m->layers[4].w->value, f.m->layers[1].w->value);
    ck_assert_ptr_ne(f.m->layers[4].w->grad, f.m->layers[1].w->grad);
    check_gradients(&f);
    ready_log_t log = {0};
    model_on_backward(f.m, log_ready, &log);
    loss_at(&f, (uint64_t[8]){0});
    ck_assert_int_eq(log.n, 3); /* the output layer's, the shared layer's once, the first's */
    ck_assert_uint_eq(log.first[0], 4);
    ck_assert_uint_eq(log.first[1], 2);
    ck_assert_uint_eq(log.first[2], 0);
    teardown(&f);
}
END_TEST

/* A shared layer's later call gives its parameters' slots back to the layers after it: they
 * start clean, without the call's constraint or a BatchNormalization's moving flags; a shared
 * BatchNormalization's K calls move its statistics as K batches (momentum^K stays) with weights
 * by the order Keras runs the calls (run_rank) that sum to 1. */
START_TEST(model_graph_shared_layer_slots_start_clean)
{
    job_layer_t l[5] = {reads(dense(4, JOB_ACT_TANH), JOB_INPUT_MODEL)};
    job_model_t spec = {.layers = l, .n_layers = 5, .input_rank = 1, .input_shape = {4}};
    status_msg_t err = {0};
    model_t *m = NULL;

    l[0].kernel_constraint = (job_constraint_t){.kind = JOB_CONSTRAINT_NON_NEG};
    l[1] = reads(plain(JOB_LAYER_BATCH_NORMALIZATION), 0);
    l[1].axis = -1;
    l[1].momentum = 0.5;
    l[1].epsilon = 1e-3;
    l[2] = call_of(l, 0, 1);
    l[3] = call_of(l, 1, 2);
    l[3].run_rank = 0; /* Keras would run it first */
    l[1].run_rank = 1;
    l[4] = dense(2, JOB_ACT_LINEAR);
    ck_assert_msg(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err) == STATUS_OK, "%s",
                  err.text);
    ck_assert_uint_eq(model_param_count(m), 6);
    for (size_t i = 0; i < model_param_count(m); i++) {
        const model_param_t *p = model_param(m, i);
        bool kernel0 = i == 0, stat = i == 2 || i == 3;
        ck_assert_int_eq(p->constraint.kind,
                         kernel0 ? JOB_CONSTRAINT_NON_NEG : JOB_CONSTRAINT_NONE);
        ck_assert_int_eq(p->moving, stat);
        if (stat) {
            ck_assert_float_eq(p->momentum, 0.25f);
            ck_assert_float_eq(p->rest, 0.75f);
        }
    }
    /* the first call runs last: (1 - 0.5) / 0.75; the second first: 0.5 * 0.5 / 0.75 */
    ck_assert_float_eq_tol(m->layers[1].stat_weight, 2.0f / 3, 1e-7f);
    ck_assert_float_eq_tol(m->layers[3].stat_weight, 1.0f / 3, 1e-7f);
    model_free(m);
}
END_TEST

START_TEST(model_graph_shared_layer_on_another_shape_is_refused)
{
    job_layer_t l[4] = {reads(dense(4, JOB_ACT_TANH), JOB_INPUT_MODEL)};
    job_model_t spec = {.layers = l, .n_layers = 4, .input_rank = 1, .input_shape = {3}};
    status_msg_t err = {0};
    model_t *m = NULL;

    l[1] = reads(dense(2, JOB_ACT_TANH), JOB_INPUT_MODEL);
    l[2] = call_of(l, 0, 1); /* reads 2 values: the kernel takes 3 */
    l[3] = merge(JOB_LAYER_ADD, 0, 2, -2);
    snprintf(l[0].name, sizeof(l[0].name), "s");
    snprintf(l[2].name, sizeof(l[2].name), "s");
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "layer s is called on (batch, 2) after (batch, 3)"), "%s",
                  err.text);
}
END_TEST

/* Two inputs joined as they come equal one input of their values one after the other: each
 * example's features are split between the inputs exactly. */
START_TEST(model_two_inputs_take_their_part_of_each_example)
{
    fixture_t two, one;
    job_layer_t l[3] = {reads(plain(JOB_LAYER_FLATTEN), JOB_INPUT_OF(1)),
                        merge(JOB_LAYER_CONCATENATE, JOB_INPUT_OF(0), 0, -2),
                        dense(1, JOB_ACT_TANH)};
    job_layer_t flat[1] = {dense(1, JOB_ACT_TANH)};
    status_msg_t err = {0};
    model_stats_t st;

    build_two_inputs(&two, JOB_LOSS_MSE, 4, l, 3);
    ck_assert_uint_eq(model_input_len(two.m), 7);
    build(&one, (int[]){7}, 1, JOB_LOSS_MSE, false, 4, flat, 1);
    memcpy(model_param(one.m, 0)->value, model_param(two.m, 0)->value, 7 * sizeof(float));
    memcpy(model_param(one.m, 1)->value, model_param(two.m, 1)->value, 1 * sizeof(float));
    ck_assert_int_eq(model_evaluate(two.m, two.x, two.y, 4, &st, &err), STATUS_OK);
    ck_assert_int_eq(model_evaluate(one.m, two.x, two.y, 4, &st, &err), STATUS_OK);
    for (int k = 0; k < 4; k++)
        ck_assert_float_eq(model_output(two.m)[k], model_output(one.m)[k]);
    teardown(&one);
    /* and gradients through both inputs' branches */
    teardown(&two);
    job_layer_t g[6] = {reads(dense(3, JOB_ACT_TANH), JOB_INPUT_OF(0)),
                        reads(plain(JOB_LAYER_FLATTEN), JOB_INPUT_OF(1)),
                        reads(dense(3, JOB_ACT_SIGMOID), 1),
                        merge(JOB_LAYER_MULTIPLY, 0, 2, -2),
                        merge(JOB_LAYER_CONCATENATE, 3, 1, JOB_INPUT_OF(0), -2),
                        dense(1, JOB_ACT_LINEAR)};
    build_two_inputs(&two, JOB_LOSS_MSE, 4, g, 6);
    check_gradients(&two);
    teardown(&two);
}
END_TEST

/* A pooling that Keras's JSON calls with the mask of input `ids` takes the mask_zero mask of an
 * Embedding reading that input, not another's. */
START_TEST(model_mask_of_another_input_is_refused)
{
    job_layer_t l[4] = {{.kind = JOB_LAYER_EMBEDDING,
                         .input_dim = 9,
                         .output_dim = 2,
                         .mask_zero = true,
                         .inputs = {JOB_INPUT_OF(1)},
                         .n_inputs = 1},
                        {.kind = JOB_LAYER_GLOBAL_AVERAGE_POOLING1D,
                         .masked = true,
                         .mask_of = "other",
                         .inputs = {0},
                         .n_inputs = 1},
                        reads(plain(JOB_LAYER_FLATTEN), JOB_INPUT_OF(0))};
    job_model_t spec = {
        .layers = l, .n_layers = 4, .n_inputs = 2, .input_rank = 1, .input_shape = {3}};
    status_msg_t err = {0};
    model_t *m = NULL;

    l[3] = merge(JOB_LAYER_CONCATENATE, 1, 2, -2);
    spec.inputs[0] = (job_model_input_t){.name = "other", .shape = {3}, .rank = 1};
    spec.inputs[1] = (job_model_input_t){.name = "ids", .shape = {5}, .rank = 1, .is_int = true};
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "of input 'other', which no Embedding"), "%s", err.text);
    snprintf(l[1].mask_of, sizeof(l[1].mask_of), "ids");
    ck_assert_msg(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err) == STATUS_OK, "%s",
                  err.text); /* wired and masked */
    model_free(m);
}
END_TEST

/* An Embedding reading the second of two inputs finds its ids there: the parameter servers'
 * client pulls the rows of those values alone (model_param_ids). */
START_TEST(model_embedding_of_a_second_input_names_where_its_ids_are)
{
    fixture_t f;
    job_layer_t l[5] = {reads(plain(JOB_LAYER_FLATTEN), JOB_INPUT_OF(0)),
                        {.kind = JOB_LAYER_EMBEDDING, .input_dim = 9, .output_dim = 2}};
    size_t at[JOB_MAX_MODEL_INPUTS] = {0}, len[JOB_MAX_MODEL_INPUTS] = {0};

    l[1].inputs[0] = JOB_INPUT_OF(1);
    l[1].n_inputs = 1;
    l[2] = reads(plain(JOB_LAYER_FLATTEN), 1);
    l[3] = merge(JOB_LAYER_CONCATENATE, 0, 2, -2);
    l[4] = dense(1, JOB_ACT_LINEAR);
    memset(&f, 0, sizeof(f));
    memcpy(f.layers, l, sizeof(l));
    f.spec = (job_model_t){
        .layers = f.layers, .n_layers = 5, .n_inputs = 2, .input_rank = 1, .input_shape = {3}};
    f.spec.inputs[0] = (job_model_input_t){.name = "values", .shape = {3}, .rank = 1};
    f.spec.inputs[1] = (job_model_input_t){.name = "ids", .shape = {5}, .rank = 1, .is_int = true};
    build_spec(&f, JOB_LOSS_MSE, false, 2);
    ck_assert(model_param(f.m, 0)->sparse);
    ck_assert_uint_eq(model_param_ids(f.m, 0, at, len), 1);
    ck_assert_uint_eq(at[0], 3);
    ck_assert_uint_eq(len[0], 5);
    teardown(&f);
}
END_TEST

START_TEST(model_dense_relu_softmax_crossentropy_gradients_match)
{
    fixture_t f;
    job_layer_t l[] = {dense(5, JOB_ACT_RELU), dense(3, JOB_ACT_SOFTMAX)};
    build(&f, (int[]){4}, 1, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, false, 3, l, 2);
    ck_assert(f.m->heads[0].fused);
    check_gradients(&f);
    teardown(&f);
}
END_TEST

START_TEST(model_smoothed_crossentropies_gradients_match)
{
    job_t job = {.huber_delta = 1, .label_smoothing = 0.2};
    for (int k = 0; k < 3; k++) { /* softmax folded, from logits, binary from logits */
        fixture_t f;
        job_layer_t l[] = {dense(5, JOB_ACT_TANH),
                           dense(k == 2 ? 1 : 3, k == 0 ? JOB_ACT_SOFTMAX : JOB_ACT_LINEAR)};
        model_stats_t st;
        status_msg_t err;
        build(&f, (int[]){4}, 1,
              k == 2 ? JOB_LOSS_BINARY_CROSSENTROPY : JOB_LOSS_CATEGORICAL_CROSSENTROPY, k > 0, 4,
              l, 2);
        job.loss = k == 2 ? JOB_LOSS_BINARY_CROSSENTROPY : JOB_LOSS_CATEGORICAL_CROSSENTROPY;
        job.from_logits = k > 0;
        ck_assert_int_eq(model_set_loss_options(f.m, &job, &err), STATUS_OK);
        check_gradients(&f);
        /* the smoothed targets' loss is above the plain one's minimum: never 0 */
        ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, f.batch, &st, &err), STATUS_OK);
        ck_assert(st.loss_sum > 0);
        teardown(&f);
    }
}
END_TEST

START_TEST(model_activity_regularizers_gradients_match)
{
    fixture_t f;
    job_layer_t l[] = {dense(5, JOB_ACT_TANH), plain(JOB_LAYER_FLATTEN), dense(3, JOB_ACT_RELU),
                       dense(1, JOB_ACT_LINEAR)};
    model_stats_t st, plain_st;
    status_msg_t err;

    l[0].activity_reg = (job_regularizer_t){.l1 = 0.05, .l2 = 0.1};
    l[1].activity_reg = (job_regularizer_t){.l2 = 0.2}; /* on a layer passing gradients through */
    l[2].activity_reg = (job_regularizer_t){.l1 = 0.3};
    build(&f, (int[]){4}, 1, JOB_LOSS_MSE, false, 4, l, 4);
    check_gradients(&f);
    /* the loss holds the terms over the batch's size */
    ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, f.batch, &st, &err), STATUS_OK);
    for (int i = 0; i < 3; i++)
        f.m->layers[i].spec.activity_reg = (job_regularizer_t){0};
    ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, f.batch, &plain_st, &err), STATUS_OK);
    {
        double want = 0;
        for (int i = 0; i < 4 * 5; i++)
            want += 0.05 * fabs(f.m->layers[0].out[i]) + /* the Flatten's output is the same */
                    (0.1 + 0.2) * f.m->layers[0].out[i] * f.m->layers[0].out[i];
        for (int i = 0; i < 4 * 3; i++)
            want += 0.3 * fabs(f.m->layers[2].out[i]);
        ck_assert_double_eq_tol(st.loss_sum - plain_st.loss_sum, want, 1e-4);
    }
    teardown(&f);
}
END_TEST

START_TEST(model_sigmoid_tanh_linear_mse_gradients_match)
{
    fixture_t f;
    job_layer_t l[] = {dense(4, JOB_ACT_SIGMOID), dense(3, JOB_ACT_TANH), dense(1, JOB_ACT_LINEAR)};
    build(&f, (int[]){3}, 1, JOB_LOSS_MSE, false, 4, l, 3);
    check_gradients(&f);
    teardown(&f);
}
END_TEST

/* Keras 3's activations (keras.activations), in double precision. */
static double keras_act(job_activation_t a, double x)
{
    double sp = x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)), r6 = fmin(fmax(x + 3, 0), 6);
    switch (a) {
    case JOB_ACT_GELU:
        return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case JOB_ACT_ELU:
        return x > 0 ? x : expm1(x);
    case JOB_ACT_SELU:
        return 1.0507009873554804934193349852946 *
               (x > 0 ? x : 1.6732632423543772848170429916717 * expm1(x));
    case JOB_ACT_SOFTPLUS:
        return sp;
    case JOB_ACT_SOFTSIGN:
        return x / (fabs(x) + 1);
    case JOB_ACT_SWISH:
        return x / (1 + exp(-x));
    case JOB_ACT_LEAKY_RELU:
        return x > 0 ? x : 0.2 * x;
    case JOB_ACT_RELU6:
        return fmin(fmax(x, 0), 6);
    case JOB_ACT_HARD_SIGMOID:
        return r6 / 6;
    case JOB_ACT_HARD_SWISH:
        return x * r6 / 6;
    case JOB_ACT_EXPONENTIAL:
        return exp(x);
    case JOB_ACT_MISH:
        return x * tanh(sp);
    case JOB_ACT_GELU_APPROXIMATE:
        return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    default:
        return NAN;
    }
}

/* Every activation beyond the first five: its values are Keras's formula's, and its gradient
 * (through the output, or the input it keeps) matches central differences inside a model. */
START_TEST(model_keras_activations_compute_and_differentiate)
{
    const backend_t *be = backend_cpu();
    float v[41], row[4] = {1.0f, -2.0f, 0.5f, 3.0f};

    for (int a = JOB_ACT_GELU; a < JOB_ACT_COUNT_; a++) {
        const job_activation_t act = (job_activation_t)a;
        if (act != JOB_ACT_LOG_SOFTMAX) {
            for (int i = 0; i < 41; i++)
                v[i] = -8.0f + 0.4f * (float)i;
            be->activate(act, v, 41, 41);
            for (int i = 0; i < 41; i++) {
                double x = -8.0 + 0.4 * i, want = keras_act(act, x);
                ck_assert_msg(fabs(v[i] - want) <= 2e-6 * fmax(1.0, fabs(want)),
                              "%s(%g) = %.9g, Keras gives %.9g", job_activation_name(act), x, v[i],
                              want);
            }
        } else { /* x - log(sum(exp(x))) along the row */
            float r[4];
            memcpy(r, row, sizeof(r));
            be->activate(act, r, 4, 4);
            double lse = log(exp(1.0) + exp(-2.0) + exp(0.5) + exp(3.0));
            for (int i = 0; i < 4; i++)
                ck_assert_double_eq_tol(r[i], row[i] - lse, 1e-6);
        }
        fixture_t f;
        job_layer_t l[] = {dense(5, act), dense(1, JOB_ACT_LINEAR)};
        build(&f, (int[]){3}, 1, JOB_LOSS_MSE, false, 4, l, 2);
        check_gradients(&f);
        teardown(&f);
    }
}
END_TEST

/* Keras's L1/L2 regularizers: the loss gains l1 * sum|w| + l2 * sum w^2 of each regularized
 * weight, and the gradients match it (central differences); a slice of a batch adds its share of
 * the term's gradient only, so that the slices' sum holds it once. */
START_TEST(model_regularizers_join_the_loss_and_its_gradient)
{
    fixture_t f;
    job_layer_t l[] = {dense(4, JOB_ACT_TANH), dense(1, JOB_ACT_LINEAR)};
    model_stats_t plain, reg;
    status_msg_t err;
    double want = 0;

    l[0].kernel_reg = (job_regularizer_t){.l1 = 0.01, .l2 = 0.02};
    l[1].bias_reg = (job_regularizer_t){.l2 = 0.5};
    build(&f, (int[]){3}, 1, JOB_LOSS_MSE, false, 4, l, 2);
    model_param(f.m, 3)->value[0] = 0.25f; /* a bias away from 0 */
    for (size_t k = 0; k < model_param(f.m, 0)->n; k++) {
        double w = model_param(f.m, 0)->value[k];
        want += 0.01 * fabs(w) + 0.02 * w * w;
    }
    for (size_t k = 0; k < model_param(f.m, 3)->n; k++)
        want += 0.5 * (double)model_param(f.m, 3)->value[k] * model_param(f.m, 3)->value[k];
    ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, f.batch, &reg, &err), STATUS_OK);
    f.m->layers[0].spec.kernel_reg = (job_regularizer_t){0};
    f.m->layers[1].spec.bias_reg = (job_regularizer_t){0};
    ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, f.batch, &plain, &err), STATUS_OK);
    ck_assert_double_eq_tol((reg.loss_sum - plain.loss_sum) / f.batch, want, 1e-6);
    f.m->layers[0].spec.kernel_reg = (job_regularizer_t){.l1 = 0.01, .l2 = 0.02};
    f.m->layers[1].spec.bias_reg = (job_regularizer_t){.l2 = 0.5};
    check_gradients(&f);
    teardown(&f);
}
END_TEST

/* Keras 3's pointwise losses (keras.losses): each example's value from the formula, in double,
 * and gradients against central differences. */
static double keras_loss(job_loss_kind_t loss, double p, double t)
{
    double d = p - t, s = t == 1 ? 1 : -1, h = fmax(1 - s * p, 0);
    switch (loss) {
    case JOB_LOSS_MAE:
        return fabs(d);
    case JOB_LOSS_HUBER:
        return fabs(d) <= 1 ? 0.5 * d * d : fabs(d) - 0.5;
    case JOB_LOSS_LOG_COSH:
        return log(cosh(d));
    case JOB_LOSS_HINGE:
        return h;
    case JOB_LOSS_SQUARED_HINGE:
        return h * h;
    case JOB_LOSS_POISSON:
        return p - t * log(p + 1e-7);
    default:
        return d * d;
    }
}

START_TEST(model_pointwise_losses_compute_and_differentiate)
{
    static const job_loss_kind_t losses[] = {JOB_LOSS_MAE,           JOB_LOSS_HUBER,
                                             JOB_LOSS_LOG_COSH,      JOB_LOSS_HINGE,
                                             JOB_LOSS_SQUARED_HINGE, JOB_LOSS_POISSON};

    for (size_t k = 0; k < sizeof(losses) / sizeof(losses[0]); k++) {
        job_loss_kind_t loss = losses[k];
        fixture_t f;
        /* Poisson predicts a rate: an exponential output keeps it positive */
        job_layer_t l[] = {
            dense(4, JOB_ACT_TANH),
            dense(1, loss == JOB_LOSS_POISSON ? JOB_ACT_EXPONENTIAL : JOB_ACT_LINEAR)};
        model_stats_t st;
        status_msg_t err;
        double want = 0;
        build(&f, (int[]){3}, 1, loss, false, 6, l, 2);
        for (int b = 0; b < f.batch; b++) /* hinge: -1, 0 (as -1) and 1; else counts/values */
            f.y[b] = loss == JOB_LOSS_HINGE || loss == JOB_LOSS_SQUARED_HINGE ? (float)(b % 3 - 1)
                     : loss == JOB_LOSS_POISSON                               ? (float)(b % 4)
                                                : 2.0f * (float)b - 3.0f;
        ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, f.batch, &st, &err), STATUS_OK);
        for (int b = 0; b < f.batch; b++)
            want += keras_loss(loss, model_output(f.m)[b], f.y[b]);
        ck_assert_msg(fabs(st.loss_sum - want) <= 1e-5 * fmax(1, fabs(want)),
                      "loss %d: %.9g, Keras's formula %.9g", (int)loss, st.loss_sum, want);
        check_gradients(&f);
        teardown(&f);
    }
}
END_TEST

/* Labels of one value for each output value (label_len == out_len): a row of targets to
 * regress, several 0/1 targets, soft classes, a distribution; each example's loss is the mean
 * over its values (the categorical losses and KL divergence sum over the classes), and the
 * gradients match central differences. */
START_TEST(model_label_rows_compute_and_differentiate)
{
    static const struct {
        job_loss_kind_t loss;
        job_activation_t act;
        bool logits;
    } cases[] = {
        {JOB_LOSS_MSE, JOB_ACT_LINEAR, false},
        {JOB_LOSS_MAE, JOB_ACT_LINEAR, false},
        {JOB_LOSS_HUBER, JOB_ACT_LINEAR, false},
        {JOB_LOSS_POISSON, JOB_ACT_EXPONENTIAL, false},
        {JOB_LOSS_BINARY_CROSSENTROPY, JOB_ACT_SIGMOID, false},
        {JOB_LOSS_BINARY_CROSSENTROPY, JOB_ACT_LINEAR, true},
        {JOB_LOSS_CATEGORICAL_CROSSENTROPY, JOB_ACT_SOFTMAX, false},
        {JOB_LOSS_CATEGORICAL_CROSSENTROPY, JOB_ACT_LINEAR, true},
        {JOB_LOSS_KL_DIVERGENCE, JOB_ACT_SOFTMAX, false},
    };

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        job_loss_kind_t loss = cases[c].loss;
        job_layer_t l[] = {dense(4, JOB_ACT_TANH), dense(3, cases[c].act)};
        fixture_t f;
        model_stats_t st;
        status_msg_t err;
        double want = 0;
        build(&f, (int[]){3}, 1, loss, cases[c].logits, 6, l, 2);
        free(f.y);
        f.y = calloc(6 * 3, sizeof(float));
        ck_assert_int_eq(model_set_labels(f.m, (size_t[]){3}, 1, &err), STATUS_OK);
        for (int v = 0; v < 6 * 3; v++) /* soft rows summing to 1; counts; 0/1; targets */
            f.y[v] = loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY || loss == JOB_LOSS_KL_DIVERGENCE
                         ? (v % 3 == v / 3 % 3 ? 0.5f : 0.25f)
                     : loss == JOB_LOSS_POISSON             ? (float)(v % 4)
                     : loss == JOB_LOSS_BINARY_CROSSENTROPY ? (float)(v % 2)
                                                            : 0.3f * (float)v - 2.0f;
        ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, 6, &st, &err), STATUS_OK);
        for (int b = 0; b < 6; b++) {
            const float *p = model_output(f.m) + b * 3, *t = f.y + b * 3;
            double e = 0, sum = 0;
            for (int j = 0; j < 3; j++) {
                double q = cases[c].logits && loss == JOB_LOSS_BINARY_CROSSENTROPY
                               ? 1 / (1 + exp(-(double)p[j]))
                               : p[j];
                if (loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY && cases[c].logits)
                    sum += exp((double)p[j]);
                else if (loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY)
                    e -= t[j] * log(q);
                else if (loss == JOB_LOSS_KL_DIVERGENCE)
                    e += t[j] * log(t[j] / q);
                else if (loss == JOB_LOSS_BINARY_CROSSENTROPY)
                    e -= (t[j] * log(q) + (1 - t[j]) * log(1 - q)) / 3;
                else
                    e += keras_loss(loss, q, t[j]) / 3;
            }
            for (int j = 0; sum > 0 && j < 3; j++) /* -sum t log softmax */
                e -= t[j] * ((double)p[j] - log(sum));
            want += e;
        }
        ck_assert_msg(fabs(st.loss_sum - want) <= 1e-5 * fmax(1, fabs(want)),
                      "case %zu: loss %.9g, the formula's %.9g", c, st.loss_sum, want);
        check_gradients(&f);
        teardown(&f);
    }
}
END_TEST

/* An elementwise loss of an output of several axes ([3, 2]) is the mean over the last axis;
 * reduction sum adds the places along the others up, the default averages them. */
START_TEST(model_label_rows_of_an_output_of_several_axes)
{
    job_layer_t l[] = {dense(6, JOB_ACT_LINEAR),
                       {.kind = JOB_LAYER_RESHAPE, .target_shape = {3, 2}, .target_rank = 2}};
    fixture_t f;
    model_stats_t mean, sum;
    status_msg_t err;

    build(&f, (int[]){3}, 1, JOB_LOSS_MSE, false, 4, l, 2);
    ck_assert_int_eq(model_label_len(f.m), 6);
    free(f.y);
    f.y = calloc(4 * 6, sizeof(float));
    for (int v = 0; v < 4 * 6; v++)
        f.y[v] = 0.1f * (float)v - 1.0f;
    ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, 4, &mean, &err), STATUS_OK);
    check_gradients(&f);
    f.m->loss_sum = true;
    ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, 4, &sum, &err), STATUS_OK);
    /* the batch's sum, counted once per example: 3 places times the mean, times 4 */
    ck_assert_double_eq_tol(sum.loss_sum, mean.loss_sum * 3 * 4, 1e-6 * sum.loss_sum);
    check_gradients(&f);
    teardown(&f);
}
END_TEST

/* A model of two outputs: each output's loss (class ids under sparse categorical cross-entropy,
 * two targets under mse) weighted and added up, the labels of both one after the other in each
 * row; gradients match central differences, whether the classes' softmax is read by another
 * layer (kept) or only by its loss (folded). */
START_TEST(model_of_two_outputs_adds_their_weighted_losses)
{
    for (int read = 0; read < 2; read++) {
        job_layer_t l[] = {
            reads(dense(4, JOB_ACT_TANH), JOB_INPUT_MODEL),
            reads(dense(3, JOB_ACT_SOFTMAX), 0),
            read ? merge(JOB_LAYER_CONCATENATE, 1, 0, -2) : reads(dense(5, JOB_ACT_RELU), 0),
            reads(dense(2, JOB_ACT_LINEAR), 2),
        };
        job_t job = {.n_outputs = 2,
                     .outputs = {{.loss = JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, .weight = 0.5},
                                 {.loss = JOB_LOSS_MSE, .huber_delta = 1, .weight = 2.0}},
                     .accuracy_threshold = 0.5f};
        fixture_t f;
        model_stats_t st;
        status_msg_t err;
        double want = 0;

        memset(&f, 0, sizeof(f));
        memcpy(f.layers, l, sizeof(l));
        f.spec.layers = f.layers;
        f.spec.n_layers = 4;
        f.spec.input_rank = 1;
        f.spec.input_shape[0] = 3;
        f.spec.n_outputs = 2;
        f.spec.outputs[0] = 1;
        f.spec.outputs[1] = 3;
        build_spec(&f, JOB_LOSS_MSE, false, 6);
        ck_assert_int_eq(model_set_loss_options(f.m, &job, &err), STATUS_OK);
        ck_assert_int_eq(model_outputs(f.m), 2);
        ck_assert(f.m->heads[0].fused == (read == 0));
        ck_assert_int_eq(model_set_labels(f.m, (size_t[]){1, 2}, 2, &err), STATUS_OK);
        ck_assert_uint_eq(model_label_len(f.m), 3);
        free(f.y);
        f.y = calloc(6 * 3, sizeof(float));
        for (int b = 0; b < 6; b++) {
            f.y[b * 3] = (float)(b % 3);
            f.y[b * 3 + 1] = 0.5f * (float)b - 1.0f;
            f.y[b * 3 + 2] = 1.0f - 0.25f * (float)b;
        }
        ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, 6, &st, &err), STATUS_OK);
        for (int b = 0; b < 6; b++) {
            const float *p = model_output_of(f.m, 0) + b * 3, *q = model_output_of(f.m, 1) + b * 2;
            double d0 = q[0] - f.y[b * 3 + 1], d1 = q[1] - f.y[b * 3 + 2];
            want += 0.5 * -log((double)p[b % 3]) + 2.0 * (d0 * d0 + d1 * d1) / 2;
        }
        ck_assert_msg(fabs(st.loss_sum - want) <= 1e-5 * fmax(1, fabs(want)),
                      "loss %.9g, the weighted sum %.9g", st.loss_sum, want);
        check_gradients(&f);
        /* labels the outputs cannot take: named */
        ck_assert_int_eq(model_set_labels(f.m, (size_t[]){3}, 1, &err), STATUS_BAD_CONFIG);
        ck_assert_int_eq(model_set_labels(f.m, (size_t[]){2, 2}, 2, &err), STATUS_BAD_CONFIG);
        ck_assert_msg(strstr(err.text, "sparse_categorical_crossentropy takes one class index"),
                      "%s", err.text);
        teardown(&f);
    }
}
END_TEST

/* Rescaling between two layers: x * scale + offset forward, the gradient times scale back. */
START_TEST(model_rescaling_gradients_match)
{
    fixture_t f;
    job_layer_t r = {.kind = JOB_LAYER_RESCALING, .scale = -0.75, .offset = 0.2};
    job_layer_t l[] = {dense(4, JOB_ACT_TANH), r, dense(1, JOB_ACT_LINEAR)};
    status_msg_t err;
    model_stats_t st;

    build(&f, (int[]){3}, 1, JOB_LOSS_MSE, false, 4, l, 3);
    ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, f.batch, &st, &err), STATUS_OK);
    for (size_t i = 0; i < 4; i++)
        ck_assert_float_eq_tol(f.m->layers[1].out[i], f.m->layers[0].out[i] * -0.75f + 0.2f, 1e-6f);
    check_gradients(&f);
    teardown(&f);
}
END_TEST

START_TEST(model_crossentropy_from_logits_gradients_match)
{
    fixture_t f;
    job_layer_t l[] = {dense(4, JOB_ACT_TANH), dense(3, JOB_ACT_LINEAR)};
    build(&f, (int[]){3}, 1, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, true, 3, l, 2);
    check_gradients(&f);
    teardown(&f);
}
END_TEST

START_TEST(model_binary_crossentropy_gradients_match_with_and_without_logits)
{
    fixture_t f;
    job_layer_t a[] = {dense(3, JOB_ACT_RELU), dense(1, JOB_ACT_LINEAR)};
    job_layer_t b[] = {dense(3, JOB_ACT_TANH), dense(1, JOB_ACT_SIGMOID)};
    build(&f, (int[]){4}, 1, JOB_LOSS_BINARY_CROSSENTROPY, true, 4, a, 2);
    check_gradients(&f);
    teardown(&f);
    build(&f, (int[]){4}, 1, JOB_LOSS_BINARY_CROSSENTROPY, false, 4, b, 2);
    ck_assert(f.m->heads[0].fused);
    check_gradients(&f);
    teardown(&f);
}
END_TEST

START_TEST(model_softmax_inside_the_network_gradients_match)
{
    fixture_t f;
    job_layer_t l[] = {dense(4, JOB_ACT_SOFTMAX), dense(1, JOB_ACT_LINEAR)};
    build(&f, (int[]){3}, 1, JOB_LOSS_MSE, false, 3, l, 2);
    check_gradients(&f);
    teardown(&f);
}
END_TEST

START_TEST(model_conv_valid_maxpool_flatten_gradients_match)
{
    fixture_t f;
    job_layer_t l[] = {conv(2, 3, 1, false, JOB_ACT_TANH),
                       pool(JOB_LAYER_MAX_POOLING2D, 2, 2, false), plain(JOB_LAYER_FLATTEN),
                       dense(3, JOB_ACT_SOFTMAX)};
    build(&f, (int[]){6, 6, 2}, 3, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, false, 2, l, 4);
    /* A small step, so that no window's maximum changes hands between the two evaluations. */
    check_gradients_eps(&f, 1e-3f);
    teardown(&f);
}
END_TEST

START_TEST(model_conv_same_strided_avgpool_gap2d_gradients_match)
{
    fixture_t f;
    job_layer_t l[] = {conv(3, 3, 2, true, JOB_ACT_TANH),
                       pool(JOB_LAYER_AVERAGE_POOLING2D, 2, 1, true),
                       plain(JOB_LAYER_GLOBAL_AVERAGE_POOLING2D), dense(2, JOB_ACT_LINEAR)};
    build(&f, (int[]){5, 5, 2}, 3, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, true, 2, l, 4);
    check_gradients(&f);
    teardown(&f);
}
END_TEST

START_TEST(model_embedding_gap1d_sparse_gradients_match)
{
    fixture_t f;
    job_layer_t emb = {.kind = JOB_LAYER_EMBEDDING, .input_dim = 7, .output_dim = 3};
    job_layer_t l[] = {emb, plain(JOB_LAYER_GLOBAL_AVERAGE_POOLING1D), dense(2, JOB_ACT_TANH),
                       dense(1, JOB_ACT_LINEAR)};
    build(&f, (int[]){4}, 1, JOB_LOSS_BINARY_CROSSENTROPY, true, 3, l, 4);
    for (int i = 0; i < 12; i++) /* token ids, with repeats within and across examples */
        f.x[i] = (float)((i * 5) % 6 + 1);
    check_gradients(&f);
    ck_assert(model_param(f.m, 0)->sparse);
    ck_assert_uint_le(model_param(f.m, 0)->n_rows, 6); /* only touched rows travel */
    teardown(&f);
}
END_TEST

START_TEST(model_reshape_activation_dropout_gradients_match)
{
    fixture_t f;
    job_layer_t reshape = {.kind = JOB_LAYER_RESHAPE, .target_shape = {2, -1}, .target_rank = 2};
    job_layer_t act = {.kind = JOB_LAYER_ACTIVATION, .activation = JOB_ACT_TANH};
    job_layer_t drop = {.kind = JOB_LAYER_DROPOUT, .rate = 0.4};
    job_layer_t l[] = {dense(6, JOB_ACT_LINEAR), reshape, act, drop, plain(JOB_LAYER_FLATTEN),
                       dense(1, JOB_ACT_LINEAR)};
    build(&f, (int[]){3}, 1, JOB_LOSS_MSE, false, 3, l, 6);
    check_gradients(&f);
    teardown(&f);
}
END_TEST

START_TEST(model_dropout_drops_in_training_only_and_rescales)
{
    fixture_t f;
    job_layer_t drop = {.kind = JOB_LAYER_DROPOUT, .rate = 0.5};
    job_layer_t l[] = {dense(200, JOB_ACT_LINEAR), drop, dense(1, JOB_ACT_LINEAR)};
    model_stats_t st;
    status_msg_t err;
    size_t zeros = 0, n = 4 * 200;
    build(&f, (int[]){3}, 1, JOB_LOSS_MSE, false, 4, l, 3);
    ck_assert_int_eq(model_train_step(f.m, f.x, f.y, 4, &st, &err), STATUS_OK);
    for (size_t i = 0; i < n; i++) {
        float in = f.m->layers[0].out[i], out = f.m->layers[1].out[i];
        zeros += out == 0.0f;
        ck_assert(out == 0.0f || fabsf(out - 2.0f * in) < 1e-6f);
    }
    ck_assert_uint_gt(zeros, n * 4 / 10);
    ck_assert_uint_lt(zeros, n * 6 / 10);
    ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, 4, &st, &err), STATUS_OK);
    ck_assert_int_eq(memcmp(f.m->layers[0].out, f.m->layers[1].out, n * sizeof(float)), 0);
    teardown(&f);
}
END_TEST

/* SpatialDropout2D drops whole channels: every pixel of an example's channel kept (and scaled
 * by 1 / (1 - rate)) or dropped together, about rate of them dropped; outside training the output
 * is the input. Its gradient is the mask's. */
START_TEST(model_spatial_dropout_drops_whole_channels)
{
    fixture_t f;
    job_layer_t drop = {.kind = JOB_LAYER_SPATIAL_DROPOUT2D, .rate = 0.5};
    job_layer_t l[] = {conv(50, 1, 1, false, JOB_ACT_LINEAR), drop, plain(JOB_LAYER_FLATTEN),
                       dense(1, JOB_ACT_LINEAR)};
    model_stats_t st;
    status_msg_t err;
    size_t dropped = 0, channels = 0;

    build(&f, (int[]){3, 3, 2}, 3, JOB_LOSS_MSE, false, 4, l, 4);
    ck_assert_int_eq(model_train_step(f.m, f.x, f.y, 4, &st, &err), STATUS_OK);
    for (int b = 0; b < 4; b++)
        for (int c = 0; c < 50; c++) {
            const float *in = f.m->layers[0].out + (size_t)b * 450 + (size_t)c;
            const float *out = f.m->layers[1].out + (size_t)b * 450 + (size_t)c;
            bool zero = out[0] == 0.0f && in[0] != 0.0f;
            for (int p = 0; p < 9; p++)
                ck_assert(zero ? out[p * 50] == 0.0f
                               : fabsf(out[p * 50] - 2.0f * in[p * 50]) < 1e-6f);
            dropped += zero;
            channels++;
        }
    ck_assert_uint_gt(dropped, channels * 3 / 10);
    ck_assert_uint_lt(dropped, channels * 7 / 10);
    check_gradients(&f);
    ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, 4, &st, &err), STATUS_OK);
    ck_assert_int_eq(memcmp(f.m->layers[0].out, f.m->layers[1].out, 4 * 450 * sizeof(float)), 0);
    teardown(&f);
}
END_TEST

/* GaussianNoise adds N(0, stddev^2) in training only; its gradient passes through. */
START_TEST(model_gaussian_noise_adds_normal_noise_in_training_only)
{
    fixture_t f;
    job_layer_t noise = {.kind = JOB_LAYER_GAUSSIAN_NOISE, .stddev = 0.5};
    job_layer_t l[] = {dense(500, JOB_ACT_LINEAR), noise, dense(1, JOB_ACT_LINEAR)};
    model_stats_t st;
    status_msg_t err;
    double sum = 0, sq = 0, n = 4 * 500;

    build(&f, (int[]){3}, 1, JOB_LOSS_MSE, false, 4, l, 3);
    ck_assert_int_eq(model_train_step(f.m, f.x, f.y, 4, &st, &err), STATUS_OK);
    for (size_t i = 0; i < 4 * 500; i++) {
        double d = (double)f.m->layers[1].out[i] - f.m->layers[0].out[i];
        sum += d;
        sq += d * d;
    }
    ck_assert_msg(fabs(sum / n) < 0.05 && fabs(sqrt(sq / n) - 0.5) < 0.05, "mean %g, stddev %g",
                  sum / n, sqrt(sq / n));
    ck_assert_int_eq(model_evaluate(f.m, f.x, f.y, 4, &st, &err), STATUS_OK);
    ck_assert_int_eq(memcmp(f.m->layers[0].out, f.m->layers[1].out, 4 * 500 * sizeof(float)), 0);
    teardown(&f);
}
END_TEST

/* An Embedding with mask_zero: GlobalAveragePooling1D averages the steps whose id is not 0 (its
 * gradient goes to them alone); a mask that reaches the output is refused, and one a layer
 * without masking meets (Flatten) stops there, as in Keras. */
START_TEST(model_mask_zero_masks_the_average_pooling)
{
    fixture_t f;
    job_layer_t emb = {
        .kind = JOB_LAYER_EMBEDDING, .input_dim = 5, .output_dim = 3, .mask_zero = true};
    job_layer_t l[] = {emb, plain(JOB_LAYER_GLOBAL_AVERAGE_POOLING1D), dense(1, JOB_ACT_LINEAR)};
    job_layer_t to_output[] = {emb, dense(1, JOB_ACT_LINEAR)};
    job_layer_t flattened[] = {emb, plain(JOB_LAYER_FLATTEN), dense(1, JOB_ACT_LINEAR)};
    model_stats_t st;
    status_msg_t err;
    job_model_t spec = {.input_rank = 1, .input_shape = {4}, .input_is_int = true};
    model_t *m;

    build(&f, (int[]){4}, 1, JOB_LOSS_MSE, false, 2, l, 3);
    /* example 0: ids 1 0 2 0 (two kept), example 1: 3 3 0 4 (three kept) */
    memcpy(f.x, (float[]){1, 0, 2, 0, 3, 3, 0, 4}, 8 * sizeof(float));
    ck_assert_int_eq(model_train_step(f.m, f.x, f.y, 2, &st, &err), STATUS_OK);
    for (int b = 0; b < 2; b++)
        for (int c = 0; c < 3; c++) {
            const float *table = f.m->layers[0].w->value;
            float want = b == 0 ? (table[1 * 3 + c] + table[2 * 3 + c]) / 2
                                : (2 * table[3 * 3 + c] + table[4 * 3 + c]) / 3;
            ck_assert_msg(fabsf(f.m->layers[1].out[b * 3 + c] - want) < 1e-6f,
                          "example %d channel %d: %g, want %g", b, c,
                          (double)f.m->layers[1].out[b * 3 + c], (double)want);
        }
    for (size_t r = 0; r < f.m->layers[0].w->n_rows; r++) /* padding learns nothing */
        if (f.m->layers[0].w->rows_index[r] == 0)
            for (int c = 0; c < 3; c++)
                ck_assert(f.m->layers[0].w->rows_grad[r * 3 + c] == 0.0f);
    teardown(&f);

    spec.layers = to_output;
    spec.n_layers = 2;
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "reaches the model's output") != NULL, "%s", err.text);
    spec.layers = flattened;
    spec.n_layers = 3;
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err), STATUS_OK);
    model_free(m);
    /* a pooling called with the mask (Keras 3's JSON) that no mask_zero brings */
    l[0].mask_zero = false;
    l[1].masked = true;
    spec.layers = l;
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 2, 1, 0, &m, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "is called with the mask of ids != 0, which no Embedding with "
                                   "mask_zero reading them brings it") != NULL,
                  "%s", err.text);
}
END_TEST

START_TEST(model_rejects_shapes_that_do_not_chain)
{
    job_model_t spec = {0};
    job_layer_t l[2];
    model_t *m = NULL;
    status_msg_t err = {0};

    l[0] = conv(4, 3, 1, false, JOB_ACT_RELU);
    spec.layers = l;
    spec.n_layers = 1;
    spec.input_rank = 1;
    spec.input_shape[0] = 784;
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 8, 1, 0, &m, &err), STATUS_BAD_CONFIG);
    ck_assert_ptr_nonnull(strstr(err.text, "Conv2D needs input"));

    l[0] = conv(4, 5, 1, false, JOB_ACT_RELU);
    spec.input_rank = 3;
    spec.input_shape[0] = 3, spec.input_shape[1] = 3, spec.input_shape[2] = 1;
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 8, 1, 0, &m, &err), STATUS_BAD_CONFIG);
    ck_assert_ptr_nonnull(strstr(err.text, "does not fit"));

    l[0] = (job_layer_t){.kind = JOB_LAYER_RESHAPE, .target_shape = {5, 5}, .target_rank = 2};
    spec.input_rank = 1, spec.input_shape[0] = 24;
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 8, 1, 0, &m, &err), STATUS_BAD_CONFIG);
    ck_assert_ptr_nonnull(strstr(err.text, "reshape"));

    l[0] = dense(10, JOB_ACT_SOFTMAX); /* ten 0/1 targets: ten labels an example */
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_BINARY_CROSSENTROPY, false, 8, 1, 0, &m, &err),
                     STATUS_OK);
    ck_assert_int_eq(model_label_len(m), 10);
    ck_assert_int_eq(model_set_labels(m, (size_t[]){1}, 1, &err), STATUS_BAD_CONFIG);
    ck_assert_ptr_nonnull(strstr(err.text, "binary_crossentropy compares each output value"));
    model_free(m);
    m = NULL;
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_KL_DIVERGENCE, false, 8, 1, 0, &m, &err), STATUS_OK);
    ck_assert_int_eq(model_set_labels(m, (size_t[]){1}, 1, &err), STATUS_BAD_CONFIG);
    model_free(m);
    m = NULL;
    l[0] = dense(1, JOB_ACT_LINEAR);
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_CATEGORICAL_CROSSENTROPY, false, 8, 1, 0, &m, &err),
                     STATUS_BAD_CONFIG);
    ck_assert_ptr_nonnull(strstr(err.text, "classes >= 2"));
    ck_assert_ptr_null(m);
}
END_TEST

/* A model past its memory limit, or with a tensor past INT_MAX values, is refused before the
 * buffer is allocated, naming the layer; it never crashes on a failed allocation. */
START_TEST(model_refuses_buffers_past_its_memory_limit)
{
    job_model_t spec = {.input_rank = 1, .input_shape = {784}};
    job_layer_t l[2] = {dense(128, JOB_ACT_RELU), dense(10, JOB_ACT_SOFTMAX)};
    model_t *m = NULL;
    status_msg_t err = {0};

    spec.layers = l;
    spec.n_layers = 2;
    /* 784 x 128 kernel values and their gradients alone take 800 KB */
    ck_assert_int_eq(
        model_new(&spec, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, false, 32, 1, 500000, &m, &err),
        STATUS_RESOURCE_EXHAUSTED);
    ck_assert_ptr_nonnull(strstr(err.text, "layer 0 (dense_0)"));
    ck_assert_ptr_nonnull(strstr(err.text, "memory limit"));
    ck_assert_ptr_null(m);
    ck_assert_int_eq(
        model_new(&spec, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, false, 32, 1, 2000000, &m, &err),
        STATUS_OK);
    ck_assert_uint_gt(model_bytes(m), 2 * 784 * 128 * sizeof(float));
    ck_assert_uint_le(model_bytes(m), 2000000);
    model_free(m);
    m = NULL;

    /* 2^17 x 2^17 kernel values: more than one tensor may hold, whatever the limit */
    spec.input_shape[0] = 1 << 17;
    l[0] = dense(1 << 17, JOB_ACT_RELU);
    ck_assert_int_eq(
        model_new(&spec, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, false, 32, 1, 0, &m, &err),
        STATUS_RESOURCE_EXHAUSTED);
    ck_assert_ptr_nonnull(strstr(err.text, "one tensor may hold"));

    /* Conv2D buffers whose element count overflows 64 bits saturate, and are refused */
    spec.input_rank = 3;
    spec.input_shape[0] = spec.input_shape[1] = 1 << 20, spec.input_shape[2] = 1;
    l[0] = conv(4, 3, 1, false, JOB_ACT_RELU);
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 1 << 30, 1, 0, &m, &err),
                     STATUS_BAD_CONFIG);
    ck_assert_ptr_nonnull(strstr(err.text, "values per example"));
    spec.input_shape[0] = spec.input_shape[1] = 1 << 14;
    ck_assert_int_eq(model_new(&spec, JOB_LOSS_MSE, false, 1 << 30, 1, 0, &m, &err),
                     STATUS_RESOURCE_EXHAUSTED);
    ck_assert_ptr_null(m);
}
END_TEST

START_TEST(model_rejects_labels_and_token_ids_out_of_range)
{
    fixture_t f;
    model_stats_t st;
    status_msg_t err = {0};
    job_layer_t l[] = {dense(3, JOB_ACT_SOFTMAX)};
    job_layer_t emb = {.kind = JOB_LAYER_EMBEDDING, .input_dim = 5, .output_dim = 2};
    job_layer_t t[] = {emb, plain(JOB_LAYER_GLOBAL_AVERAGE_POOLING1D), dense(1, JOB_ACT_LINEAR)};

    build(&f, (int[]){2}, 1, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, false, 2, l, 1);
    f.y[1] = 3;
    ck_assert_int_eq(model_train_step(f.m, f.x, f.y, 2, &st, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.text, "example 1"));
    f.y[1] = 0.5f;
    ck_assert_int_eq(model_train_step(f.m, f.x, f.y, 2, &st, &err), STATUS_INVALID_ARGUMENT);
    teardown(&f);

    build(&f, (int[]){3}, 1, JOB_LOSS_BINARY_CROSSENTROPY, true, 2, t, 3);
    for (int i = 0; i < 6; i++)
        f.x[i] = 1;
    f.x[4] = 5;
    ck_assert_int_eq(model_train_step(f.m, f.x, f.y, 2, &st, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.text, "vocabulary"));
    teardown(&f);
}
END_TEST

/* What a hook sees during backward, for the events contract. */
typedef struct backward_log {
    model_t *m;
    float **final; /* each param's gradient after the step without a hook */
    size_t events, grads_first[8], values_first[8];
    size_t n_grads, n_values;
    bool grads_final; /* at each GRADS_READY, the params from `first` held their final grads */
} backward_log_t;

static void on_backward(void *arg, model_backward_event_t ev, size_t first)
{
    backward_log_t *log = arg;
    size_t n = model_param_count(log->m);
    log->events++;
    if (ev == MODEL_GRADS_READY) {
        log->grads_first[log->n_grads++] = first;
        for (size_t i = first; i < n; i++) {
            model_param_t *p = model_param(log->m, i);
            log->grads_final &= memcmp(p->grad, log->final[i], p->n * sizeof(float)) == 0;
        }
        return;
    }
    /* Nothing may read these values again in this step: poison them. */
    log->values_first[log->n_values++] = first;
    for (size_t i = first; i < n; i++) {
        model_param_t *p = model_param(log->m, i);
        for (size_t k = 0; k < p->n; k++)
            p->value[k] = NAN;
    }
}

START_TEST(model_backward_reports_each_layers_gradients_final_then_its_values_free)
{
    fixture_t f;
    model_stats_t st;
    status_msg_t err = {0};
    job_layer_t l[] = {conv(2, 3, 1, false, JOB_ACT_RELU), plain(JOB_LAYER_FLATTEN),
                       dense(5, JOB_ACT_TANH), dense(3, JOB_ACT_LINEAR)};
    backward_log_t log = {.grads_final = true};
    float *values[6];

    build(&f, (int[]){5, 5, 1}, 3, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, true, 4, l, 4);
    size_t n = model_param_count(f.m);
    ck_assert_uint_eq(n, 6);
    log.m = f.m;
    log.final = calloc(n, sizeof(float *));
    for (size_t i = 0; i < n; i++) {
        model_param_t *p = model_param(f.m, i);
        values[i] = malloc(p->n * sizeof(float));
        memcpy(values[i], p->value, p->n * sizeof(float));
    }
    ck_assert_int_eq(model_train_step(f.m, f.x, f.y, f.batch, &st, &err), STATUS_OK);
    for (size_t i = 0; i < n; i++) {
        model_param_t *p = model_param(f.m, i);
        log.final[i] = malloc(p->n * sizeof(float));
        memcpy(log.final[i], p->grad, p->n * sizeof(float));
        memset(p->grad, 0, p->n * sizeof(float));
    }

    /* The same step with the hook: layers with params, from the last, each reported twice. */
    model_on_backward(f.m, on_backward, &log);
    ck_assert_int_eq(model_train_step(f.m, f.x, f.y, f.batch, &st, &err), STATUS_OK);
    ck_assert_uint_eq(log.events, 6);
    ck_assert_uint_eq(log.n_grads, 3);
    ck_assert_uint_eq(log.n_values, 3);
    for (size_t k = 0; k < 3; k++) {
        ck_assert_uint_eq(log.grads_first[k], 4 - 2 * k);
        ck_assert_uint_eq(log.values_first[k], 4 - 2 * k);
    }
    ck_assert_msg(log.grads_final, "a gradient changed after GRADS_READY");
    /* The poisoned values were never read: every gradient is what it was. */
    for (size_t i = 0; i < n; i++) {
        model_param_t *p = model_param(f.m, i);
        ck_assert_msg(memcmp(p->grad, log.final[i], p->n * sizeof(float)) == 0,
                      "%s: the gradient read a value after MODEL_VALUES_FREE", p->name);
        memcpy(p->value, values[i], p->n * sizeof(float));
        free(values[i]);
        free(log.final[i]);
    }
    free(log.final);

    /* A loss that is not finite fails the step before backward: no event. */
    log.events = 0;
    model_param(f.m, 4)->value[0] = INFINITY;
    ck_assert_int_eq(model_train_step(f.m, f.x, f.y, f.batch, &st, &err), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err.text, "the loss became"));
    ck_assert(!isfinite(st.loss_sum));
    ck_assert_uint_eq(log.events, 0);
    model_on_backward(f.m, NULL, NULL);
    teardown(&f);
}
END_TEST

START_TEST(model_glorot_uniform_kernels_respect_their_limit_and_seed)
{
    fixture_t a, b;
    job_layer_t l[] = {dense(128, JOB_ACT_RELU), dense(10, JOB_ACT_SOFTMAX)};
    build(&a, (int[]){784}, 1, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, false, 2, l, 2);
    build(&b, (int[]){784}, 1, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, false, 2, l, 2);
    model_param_t *k = model_param(a.m, 0), *bias = model_param(a.m, 1);
    double limit = sqrt(6.0 / (784 + 128)), maxabs = 0, mean = 0;
    for (size_t i = 0; i < k->n; i++) {
        maxabs = fmax(maxabs, fabs(k->value[i]));
        mean += k->value[i];
    }
    ck_assert(maxabs <= limit && maxabs > 0.95 * limit);
    ck_assert(fabs(mean / (double)k->n) < 0.01 * limit);
    for (size_t i = 0; i < bias->n; i++)
        ck_assert(bias->value[i] == 0.0f);
    ck_assert_int_eq(memcmp(k->value, model_param(b.m, 0)->value, k->n * sizeof(float)), 0);
    teardown(&a);
    teardown(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, model_dense_relu_softmax_crossentropy_gradients_match);
    tcase_add_test(tc, model_graph_of_merges_gradients_match);
    tcase_add_test(tc, model_graph_concatenates_an_inner_axis);
    tcase_add_test(tc, model_graph_merges_of_other_shapes_are_refused);
    tcase_add_test(tc, model_graph_shared_layer_gradients_match);
    tcase_add_test(tc, model_two_inputs_take_their_part_of_each_example);
    tcase_add_test(tc, model_embedding_of_a_second_input_names_where_its_ids_are);
    tcase_add_test(tc, model_mask_of_another_input_is_refused);
    tcase_add_test(tc, model_graph_shared_layer_on_another_shape_is_refused);
    tcase_add_test(tc, model_graph_shared_layer_slots_start_clean);
    tcase_add_test(tc, model_batch_normalization_gradients_match);
    tcase_add_test(tc, model_batch_normalization_infers_with_the_moving_statistics);
    tcase_add_test(tc, model_batch_normalization_on_another_axis_is_refused);
    tcase_add_test(tc, model_sigmoid_tanh_linear_mse_gradients_match);
    tcase_add_test(tc, model_smoothed_crossentropies_gradients_match);
    tcase_add_test(tc, model_activity_regularizers_gradients_match);
    tcase_add_test(tc, model_keras_activations_compute_and_differentiate);
    tcase_add_test(tc, model_regularizers_join_the_loss_and_its_gradient);
    tcase_add_test(tc, model_pointwise_losses_compute_and_differentiate);
    tcase_add_test(tc, model_label_rows_compute_and_differentiate);
    tcase_add_test(tc, model_label_rows_of_an_output_of_several_axes);
    tcase_add_test(tc, model_of_two_outputs_adds_their_weighted_losses);
    tcase_add_test(tc, model_rescaling_gradients_match);
    tcase_add_test(tc, model_crossentropy_from_logits_gradients_match);
    tcase_add_test(tc, model_binary_crossentropy_gradients_match_with_and_without_logits);
    tcase_add_test(tc, model_softmax_inside_the_network_gradients_match);
    tcase_add_test(tc, model_conv_valid_maxpool_flatten_gradients_match);
    tcase_add_test(tc, model_conv_same_strided_avgpool_gap2d_gradients_match);
    tcase_add_test(tc, model_embedding_gap1d_sparse_gradients_match);
    tcase_add_test(tc, model_reshape_activation_dropout_gradients_match);
    tcase_add_test(tc, model_dropout_drops_in_training_only_and_rescales);
    tcase_add_test(tc, model_spatial_dropout_drops_whole_channels);
    tcase_add_test(tc, model_gaussian_noise_adds_normal_noise_in_training_only);
    tcase_add_test(tc, model_mask_zero_masks_the_average_pooling);
    tcase_add_test(tc, model_rejects_shapes_that_do_not_chain);
    tcase_add_test(tc, model_refuses_buffers_past_its_memory_limit);
    tcase_add_test(tc, model_rejects_labels_and_token_ids_out_of_range);
    tcase_add_test(tc, model_glorot_uniform_kernels_respect_their_limit_and_seed);
    tcase_add_test(tc, model_backward_reports_each_layers_gradients_final_then_its_values_free);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
