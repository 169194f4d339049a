/* Job files (README: "Training on one machine"): YAML or JSON read with libyaml into a small tree
 * that keeps line numbers, then checked key by key against the tables below. Every map is checked
 * for unknown keys before its values are read, so a typo is reported as such (with the closest
 * allowed key) rather than as a missing value. */
#define _POSIX_C_SOURCE 200809L
#include "job/job.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "job/internal.h"
#include "job/tree.h"

/* A list of n strings and the list. */
static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void source_done(job_source_t *s)
{
    free(s->images);
    free(s->labels);
    free_names(s->files, s->n_files);
    for (int i = 0; i < s->n_inputs; i++)
        free(s->inputs[i].name);
    for (int i = 0; i < JOB_MAX_OUTPUTS; i++) /* a failed parse may leave them out of order */
        free(s->label[i].name);
    free_names(s->x, s->n_x);
    free_names(s->y, s->n_y);
    free(s->archive);
}

void job_done(job_t *job)
{
    if (job == NULL)
        return;
    free(job->name);
    free(job->path);
    job_model_done(&job->model);
    source_done(&job->data.train);
    source_done(&job->data.test);
    free(job->checkpoint_dir);
    free(job->tensorboard_logdir);
    free(job->init_from);
    for (int i = 0; i < JOB_MAX_METRICS; i++) { /* a metric refused after them too */
        free(job->metrics[i].label_weights);
        free(job->metrics[i].threshold_list);
    }
    memset(job, 0, sizeof(*job));
}

/* ---- loss, metrics, optimizer ---- */

static const char *const loss_names[] = {"mse",
                                         "mean_squared_error",
                                         "sparse_categorical_crossentropy",
                                         "binary_crossentropy",
                                         "mae",
                                         "mean_absolute_error",
                                         "huber",
                                         "log_cosh",
                                         "logcosh",
                                         "hinge",
                                         "squared_hinge",
                                         "poisson",
                                         "categorical_crossentropy",
                                         "kl_divergence",
                                         "kld",
                                         "kullback_leibler_divergence"};
static const job_loss_kind_t loss_kinds[] = {JOB_LOSS_MSE,
                                             JOB_LOSS_MSE,
                                             JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                             JOB_LOSS_BINARY_CROSSENTROPY,
                                             JOB_LOSS_MAE,
                                             JOB_LOSS_MAE,
                                             JOB_LOSS_HUBER,
                                             JOB_LOSS_LOG_COSH,
                                             JOB_LOSS_LOG_COSH,
                                             JOB_LOSS_HINGE,
                                             JOB_LOSS_SQUARED_HINGE,
                                             JOB_LOSS_POISSON,
                                             JOB_LOSS_CATEGORICAL_CROSSENTROPY,
                                             JOB_LOSS_KL_DIVERGENCE,
                                             JOB_LOSS_KL_DIVERGENCE,
                                             JOB_LOSS_KL_DIVERGENCE};

const char *job_loss_name(job_loss_kind_t loss)
{
    static const char *const names[] = {
        [JOB_LOSS_MSE] = "mean_squared_error",
        [JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY] = "sparse_categorical_crossentropy",
        [JOB_LOSS_BINARY_CROSSENTROPY] = "binary_crossentropy",
        [JOB_LOSS_MAE] = "mean_absolute_error",
        [JOB_LOSS_HUBER] = "huber",
        [JOB_LOSS_LOG_COSH] = "log_cosh",
        [JOB_LOSS_HINGE] = "hinge",
        [JOB_LOSS_SQUARED_HINGE] = "squared_hinge",
        [JOB_LOSS_POISSON] = "poisson",
        [JOB_LOSS_CATEGORICAL_CROSSENTROPY] = "categorical_crossentropy",
        [JOB_LOSS_KL_DIVERGENCE] = "kl_divergence",
    };
    return (size_t)loss < JOB_N_OF(names) && names[loss] != NULL ? names[loss] : "loss";
}

bool job_loss_has_accuracy(job_loss_kind_t loss)
{
    return loss == JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ||
           loss == JOB_LOSS_BINARY_CROSSENTROPY || loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY;
}

bool job_reports_accuracy(const job_t *job)
{
    return job_loss_has_accuracy(job->loss) && job->n_outputs <= 1;
}

/* Keras's reduction of a batch's losses: the mean over the examples (sum_over_batch_size, mean,
 * mean_with_sample_weight without sample weights), their sum, or none (null in YAML too): the
 * losses apart, which Keras's fit trains on as their sum and reports as their mean. */
static status_t parse_reduction(job_ctx_t *c, const job_node_t *opts, job_t *job)
{
    static const char *const means[] = {"sum_over_batch_size", "mean", "mean_with_sample_weight"};
    const job_node_t *r = job_tree_child(opts, "reduction");
    const char *v = NULL;

    job->loss_sum = job->loss_unreduced = false;
    if (r != NULL && !job_tree_given(r)) {
        job->loss_unreduced = true;
        return STATUS_OK;
    }
    STATUS_CHECK(job_tree_get_string(c, opts, "reduction", false, &v));
    if (v == NULL)
        return STATUS_OK;
    for (size_t i = 0; i < JOB_N_OF(means); i++)
        if (strcmp(v, means[i]) == 0)
            return STATUS_OK;
    if (strcmp(v, "sum") == 0 || strcmp(v, "none") == 0) {
        job->loss_sum = v[0] == 's';
        job->loss_unreduced = v[0] == 'n';
        return STATUS_OK;
    }
    return job_tree_fail(c, STATUS_BAD_CONFIG, r->line,
                         "%s.reduction: '%s' is not supported: sum_over_batch_size (the default, "
                         "also mean and mean_with_sample_weight, the same without sample "
                         "weights), sum or none",
                         c->path, v);
}

static status_t parse_loss(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    /* every loss: reduction; from_logits for every cross-entropy; label_smoothing for the
     * categorical and binary ones (Keras's SparseCategoricalCrossentropy has none) */
    static const char *const logit_keys[] = {"reduction", "from_logits", "label_smoothing"};
    static const char *const huber_keys[] = {"reduction", "delta"};
    size_t old = c->path_len;
    const job_node_t *opts;
    int i;
    status_t rc;

    STATUS_CHECK(job_tree_variant(c, n, "loss", loss_names, JOB_N_OF(loss_names), true, &i, &opts));
    job->loss = loss_kinds[i];
    job->huber_delta = 1.0;
    if (job->loss == JOB_LOSS_HUBER) {
        rc = job_tree_check_map(c, opts, huber_keys, 2, true);
        if (rc == STATUS_OK)
            rc = job_tree_get_double(c, opts, "delta", false, &job->huber_delta);
        if (rc == STATUS_OK && !(job->huber_delta > 0))
            rc = job_tree_fail(c, STATUS_BAD_CONFIG, opts->line, "%s: delta must be > 0, got %g",
                               c->path, job->huber_delta);
    } else {
        size_t keys = job->loss == JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY ? 2
                      : job_loss_has_accuracy(job->loss)                    ? 3
                                                                            : 1;
        rc = job_tree_check_map(c, opts, logit_keys, keys, true);
    }
    if (rc == STATUS_OK)
        rc = parse_reduction(c, opts, job);
    if (rc == STATUS_OK)
        rc = job_tree_get_bool(c, opts, "from_logits", &job->from_logits);
    job->label_smoothing = 0;
    if (rc == STATUS_OK)
        rc = job_tree_get_double(c, opts, "label_smoothing", false, &job->label_smoothing);
    if (rc == STATUS_OK && !(job->label_smoothing >= 0 && job->label_smoothing <= 1))
        rc = job_tree_fail(c, STATUS_BAD_CONFIG, opts->line,
                           "%s: label_smoothing must be from 0 to 1, got %g", c->path,
                           job->label_smoothing);
    job_tree_pop(c, old);
    return rc;
}

/* An output's loss as parse_loss leaves it in the job's fields. */
static job_output_t output_of(const job_t *j)
{
    return (job_output_t){.loss = j->loss,
                          .from_logits = j->from_logits,
                          .huber_delta = j->huber_delta,
                          .label_smoothing = j->label_smoothing,
                          .weight = 1.0};
}

/* The index of the model's output named `name`, or -1. */
static int output_named(const job_model_t *m, const char *name)
{
    for (int k = 0; k < job_model_outputs(m); k++)
        if (m->output_names[k][0] != '\0' && strcmp(m->output_names[k], name) == 0)
            return k;
    return -1;
}

/* One output's loss entry, parsed as `loss:` is, into job->outputs[k]; its reduction must be the
 * first output's. */
static status_t parse_output_loss(job_ctx_t *c, const job_node_t *n, job_t *job, int k)
{
    job_t one = {0};
    status_t rc = parse_loss(c, n, &one);

    if (rc != STATUS_OK)
        return rc;
    if (k > 0 && (one.loss_sum != job->loss_sum || one.loss_unreduced != job->loss_unreduced))
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                             "%s: every output's loss needs the same reduction", c->path);
    job->loss_sum = one.loss_sum;
    job->loss_unreduced = one.loss_unreduced;
    job->outputs[k] = output_of(&one);
    return STATUS_OK;
}

/* loss: for a model of several outputs, one loss for every output, a list of them in the model's
 * order of outputs, or a mapping of the outputs' names to theirs (as Keras's compile takes). */
static status_t parse_losses(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    const job_model_t *m = &job->model;
    int outputs = job_model_outputs(m);
    /* (a Functional model's one output by its name too, unless that is a loss's: Keras's
     * dict of one output) */
    bool by_name = n->kind == JOB_NODE_MAP;

    for (size_t i = 0; by_name && i < n->n; i++)
        by_name = output_named(m, n->entries[i].key) >= 0 &&
                  (m->n_outputs > 1 ||
                   job_name_index(n->entries[i].key, loss_names, JOB_N_OF(loss_names)) < 0);
    if (n->kind == JOB_NODE_SEQ && (int)n->n != outputs)
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                             "%s: %zu losses for a model of %d output%s (a list gives one for "
                             "each output, in the model's order)",
                             c->path, n->n, outputs, outputs == 1 ? "" : "s");
    if (by_name && (int)n->n != outputs)
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                             "%s: %zu losses for a model of %d outputs: name each output once",
                             c->path, n->n, outputs);
    for (int k = 0; k < outputs; k++) {
        size_t old;
        status_t rc;
        if (n->kind == JOB_NODE_SEQ) {
            old = job_tree_push_index(c, (size_t)k);
            rc = parse_output_loss(c, n->items[k], job, k);
        } else if (by_name) {
            old = job_tree_push_key(c, m->output_names[k]);
            rc = parse_output_loss(c, job_tree_child(n, m->output_names[k]), job, k);
        } else { /* one loss, every output's */
            old = c->path_len;
            rc = parse_output_loss(c, n, job, k);
        }
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
    }
    /* output 0's in the job's own fields, which a model of one output reads */
    job->n_outputs = outputs;
    job->loss = job->outputs[0].loss;
    job->from_logits = job->outputs[0].from_logits;
    job->huber_delta = job->outputs[0].huber_delta;
    job->label_smoothing = job->outputs[0].label_smoothing;
    return STATUS_OK;
}

/* loss_weights: a list of one weight for each output, or a mapping of the outputs' names to
 * theirs (1 for those it leaves out); the total loss is the weighted sum. */
static status_t parse_loss_weights(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    const job_model_t *m = &job->model;

    if (m->n_outputs < 2)
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                             "%s: loss_weights weigh the losses of a model of several outputs; "
                             "this one has one",
                             c->path);
    if (n->kind == JOB_NODE_SEQ && (int)n->n != m->n_outputs)
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                             "%s: %zu weights for a model of %d outputs", c->path, n->n,
                             m->n_outputs);
    if (n->kind != JOB_NODE_SEQ && n->kind != JOB_NODE_MAP)
        return job_tree_type_error(c, n, "a list of weights, or a mapping of output names to them");
    for (size_t i = 0; i < n->n; i++) {
        const job_node_t *v = n->kind == JOB_NODE_SEQ ? n->items[i] : n->entries[i].value;
        int k = n->kind == JOB_NODE_SEQ ? (int)i : output_named(m, n->entries[i].key);
        size_t old = n->kind == JOB_NODE_SEQ ? job_tree_push_index(c, i)
                                             : job_tree_push_key(c, n->entries[i].key);
        double w = 0;
        status_t rc = k < 0 ? job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                                            "%s: the model has no output of that name", c->path)
                            : job_tree_double(c, v, &w);
        if (rc == STATUS_OK && !(w >= 0 && isfinite(w)))
            rc = job_tree_fail(c, STATUS_BAD_CONFIG, v->line, "%s: a weight is >= 0, got %g",
                               c->path, w);
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
        job->outputs[k].weight = w;
    }
    return STATUS_OK;
}

static const char *const schedule_names[] = {"constant", "linear_warmup", "exponential_decay",
                                             "piecewise_constant"};

static status_t parse_piecewise(job_ctx_t *c, const job_node_t *opts, lr_schedule_t *s)
{
    const job_node_t *b = job_tree_child(opts, "boundaries"), *v = job_tree_child(opts, "values");
    size_t old;
    status_t rc = STATUS_OK;

    if (!job_tree_given(b))
        return job_tree_missing(c, opts, "boundaries");
    if (!job_tree_given(v))
        return job_tree_missing(c, opts, "values");
    old = job_tree_push_key(c, "boundaries");
    if (b->kind != JOB_NODE_SEQ || b->n == 0 || b->n > LR_MAX_PIECES)
        rc = job_tree_type_error(c, b, "a list of 1 to 16 step counts");
    for (size_t i = 0; rc == STATUS_OK && i < b->n; i++) {
        size_t o = job_tree_push_index(c, i);
        rc = job_tree_int(c, b->items[i], 0, INT64_MAX, &s->boundaries[i]);
        job_tree_pop(c, o);
    }
    job_tree_pop(c, old);
    STATUS_CHECK(rc);
    s->n_boundaries = b->n;
    old = job_tree_push_key(c, "values");
    if (v->kind != JOB_NODE_SEQ || v->n != b->n + 1)
        rc = job_tree_type_error(c, v, "a list with one more value than boundaries");
    for (size_t i = 0; rc == STATUS_OK && i < v->n; i++) {
        size_t o = job_tree_push_index(c, i);
        rc = job_tree_double(c, v->items[i], &s->values[i]);
        job_tree_pop(c, o);
    }
    job_tree_pop(c, old);
    return rc;
}

/* learning_rate: a number, or {SCHEDULE: {parameters}}. */
static status_t parse_learning_rate(job_ctx_t *c, const job_node_t *n, lr_schedule_t *s)
{
    static const char *const constant_keys[] = {"learning_rate"};
    static const char *const warmup_keys[] = {"learning_rate", "warmup_steps",
                                              "initial_learning_rate"};
    static const char *const decay_keys[] = {"initial_learning_rate", "decay_steps", "decay_rate",
                                             "staircase"};
    static const char *const piecewise_keys[] = {"boundaries", "values"};
    size_t old = c->path_len;
    const job_node_t *opts;
    job_node_t empty = {.kind = JOB_NODE_MAP, .line = n->line};
    int i;
    status_t rc;

    if (n->kind == JOB_NODE_SCALAR) {
        s->kind = LR_CONSTANT;
        return job_tree_double(c, n, &s->lr);
    }
    STATUS_CHECK(job_tree_variant(c, n, "learning-rate schedule", schedule_names,
                                  JOB_N_OF(schedule_names), false, &i, &opts));
    opts = job_tree_given(opts) ? opts : &empty;
    s->kind = (lr_kind_t)i;
    switch (s->kind) {
    case LR_CONSTANT:
        rc = job_tree_check_map(c, opts, constant_keys, JOB_N_OF(constant_keys), false);
        if (rc == STATUS_OK)
            rc = job_tree_get_double(c, opts, "learning_rate", true, &s->lr);
        break;
    case LR_LINEAR_WARMUP:
        s->initial_lr = 0;
        rc = job_tree_check_map(c, opts, warmup_keys, JOB_N_OF(warmup_keys), false);
        if (rc == STATUS_OK)
            rc = job_tree_get_double(c, opts, "learning_rate", true, &s->lr);
        if (rc == STATUS_OK)
            rc = job_tree_get_i64(c, opts, "warmup_steps", true, 1, &s->warmup_steps);
        if (rc == STATUS_OK)
            rc = job_tree_get_double(c, opts, "initial_learning_rate", false, &s->initial_lr);
        break;
    case LR_EXPONENTIAL_DECAY:
        rc = job_tree_check_map(c, opts, decay_keys, JOB_N_OF(decay_keys), false);
        if (rc == STATUS_OK)
            rc = job_tree_get_double(c, opts, "initial_learning_rate", true, &s->initial_lr);
        if (rc == STATUS_OK)
            rc = job_tree_get_i64(c, opts, "decay_steps", true, 1, &s->decay_steps);
        if (rc == STATUS_OK)
            rc = job_tree_get_double(c, opts, "decay_rate", true, &s->decay_rate);
        if (rc == STATUS_OK)
            rc = job_tree_get_bool(c, opts, "staircase", &s->staircase);
        break;
    default:
        rc = job_tree_check_map(c, opts, piecewise_keys, JOB_N_OF(piecewise_keys), false);
        if (rc == STATUS_OK)
            rc = parse_piecewise(c, opts, s);
        break;
    }
    job_tree_pop(c, old);
    return rc;
}

/* In optimizer_kind_t order. */
static const char *const optimizer_names[] = {"sgd",   "adam",   "adagrad", "rmsprop", "adamw",
                                              "nadam", "adamax", "lion",    "ftrl"};

/* Option keys per optimizer, in optimizer_kind_t order; every kind also takes common_keys. */
static const char *const sgd_keys[] = {"momentum", "nesterov"};
static const char *const adam_keys[] = {"beta_1", "beta_2", "epsilon", "amsgrad"};
static const char *const adagrad_keys[] = {"initial_accumulator_value", "epsilon"};
static const char *const rmsprop_keys[] = {"rho", "momentum", "epsilon", "centered"};
static const char *const adamw_keys[] = {"beta_1", "beta_2", "epsilon", "amsgrad"};
static const char *const nadam_keys[] = {"beta_1", "beta_2", "epsilon"};
static const char *const adamax_keys[] = {"beta_1", "beta_2", "epsilon"};
static const char *const lion_keys[] = {"beta_1", "beta_2"};
static const char *const ftrl_keys[] = {"learning_rate_power",
                                        "initial_accumulator_value",
                                        "l1_regularization_strength",
                                        "l2_regularization_strength",
                                        "l2_shrinkage_regularization_strength",
                                        "beta"};
static const char *const common_keys[] = {"learning_rate", "scale_learning_rate", "weight_decay",
                                          "clipnorm",      "global_clipnorm",     "clipvalue"};

static const struct {
    const char *const *keys;
    size_t n;
} optimizer_keys[] = {
    {sgd_keys, JOB_N_OF(sgd_keys)},         {adam_keys, JOB_N_OF(adam_keys)},
    {adagrad_keys, JOB_N_OF(adagrad_keys)}, {rmsprop_keys, JOB_N_OF(rmsprop_keys)},
    {adamw_keys, JOB_N_OF(adamw_keys)},     {nadam_keys, JOB_N_OF(nadam_keys)},
    {adamax_keys, JOB_N_OF(adamax_keys)},   {lion_keys, JOB_N_OF(lion_keys)},
    {ftrl_keys, JOB_N_OF(ftrl_keys)},
};
_Static_assert(JOB_N_OF(optimizer_names) == OPTIMIZER_KINDS &&
                   JOB_N_OF(optimizer_keys) == OPTIMIZER_KINDS,
               "a name and a key table for every optimizer kind");

static status_t optimizer_options(job_ctx_t *c, const job_node_t *opts, optimizer_config_t *o)
{
    const job_node_t *lr = job_tree_child(opts, "learning_rate");
    bool scale = false;

    const char *keys[JOB_N_OF(common_keys) + JOB_N_OF(ftrl_keys)];
    size_t n_keys = JOB_N_OF(common_keys);

    memcpy(keys, common_keys, sizeof(common_keys));
    for (size_t k = 0; k < optimizer_keys[o->kind].n; k++)
        keys[n_keys++] = optimizer_keys[o->kind].keys[k];
    STATUS_CHECK(job_tree_check_map(c, opts, keys, n_keys, true));
    if (job_tree_given(lr)) {
        size_t old = job_tree_push_key(c, "learning_rate");
        status_t rc = parse_learning_rate(c, lr, &o->schedule);
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
    }
    STATUS_CHECK(job_tree_get_bool(c, opts, "scale_learning_rate", &scale));
    o->lr_scale = scale ? 0 : 1;
    STATUS_CHECK(job_tree_get_double(c, opts, "momentum", false, &o->momentum));
    STATUS_CHECK(job_tree_get_bool(c, opts, "nesterov", &o->nesterov));
    STATUS_CHECK(job_tree_get_double(c, opts, "beta_1", false, &o->beta_1));
    STATUS_CHECK(job_tree_get_double(c, opts, "beta_2", false, &o->beta_2));
    STATUS_CHECK(job_tree_get_double(c, opts, "epsilon", false, &o->epsilon));
    STATUS_CHECK(job_tree_get_bool(c, opts, "amsgrad", &o->amsgrad));
    STATUS_CHECK(job_tree_get_double(c, opts, "initial_accumulator_value", false,
                                     &o->initial_accumulator_value));
    STATUS_CHECK(job_tree_get_double(c, opts, "rho", false, &o->rho));
    STATUS_CHECK(job_tree_get_bool(c, opts, "centered", &o->centered));
    STATUS_CHECK(
        job_tree_get_double(c, opts, "learning_rate_power", false, &o->learning_rate_power));
    STATUS_CHECK(job_tree_get_double(c, opts, "l1_regularization_strength", false, &o->l1));
    STATUS_CHECK(job_tree_get_double(c, opts, "l2_regularization_strength", false, &o->l2));
    STATUS_CHECK(job_tree_get_double(c, opts, "l2_shrinkage_regularization_strength", false,
                                     &o->l2_shrinkage));
    STATUS_CHECK(job_tree_get_double(c, opts, "beta", false, &o->beta));
    STATUS_CHECK(job_tree_get_double(c, opts, "weight_decay", false, &o->weight_decay));
    STATUS_CHECK(job_tree_get_double(c, opts, "clipnorm", false, &o->clipnorm));
    STATUS_CHECK(job_tree_get_double(c, opts, "global_clipnorm", false, &o->global_clipnorm));
    return job_tree_get_double(c, opts, "clipvalue", false, &o->clipvalue);
}

static status_t parse_optimizer(job_ctx_t *c, const job_node_t *n, optimizer_config_t *ret)
{
    size_t old = c->path_len;
    const job_node_t *opts;
    optimizer_config_t o, check;
    status_msg_t why;
    int i;
    status_t rc;

    STATUS_CHECK(job_tree_variant(c, n, "optimizer", optimizer_names, JOB_N_OF(optimizer_names),
                                  true, &i, &opts));
    optimizer_config_default((optimizer_kind_t)i, &o);
    rc = optimizer_options(c, opts, &o);
    job_tree_pop(c, old);
    STATUS_CHECK(rc);
    /* lr_scale 0 ("scale by the replicas") is resolved at run time; check the rest as if 1. */
    check = o;
    check.lr_scale = 1;
    rc = optimizer_config_validate(&check, &why);
    if (rc != STATUS_OK)
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line, "%s", why.text); /* names the field */
    *ret = o;
    return STATUS_OK;
}

/* strategy: NAME, or {NAME: {replicas: N}} for the strategies with local replicas. */
/* In job_strategy_t order */
static const char *const strategies[] = {"one_device", "parameter_server", "mirrored",
                                         "multi_worker_mirrored", "central_storage"};

static status_t parse_strategy(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    static const char *const replica_keys[] = {"replicas"};
    size_t old = job_tree_push_key(c, "strategy");
    const job_node_t *opts = NULL;
    int s = 0;
    status_t rc =
        job_tree_variant(c, n, "strategy", strategies, JOB_N_OF(strategies), true, &s, &opts);

    job->strategy = (job_strategy_t)s;
    /* options only where there are local replicas to count */
    if (rc == STATUS_OK && opts != NULL)
        rc = job_tree_check_map(c, opts, replica_keys,
                                s == JOB_STRATEGY_MIRRORED || s == JOB_STRATEGY_CENTRAL_STORAGE
                                    ? JOB_N_OF(replica_keys)
                                    : 0,
                                false);
    if (rc == STATUS_OK && opts != NULL)
        rc = job_tree_get_int(c, opts, "replicas", false, 1, &job->replicas);
    job_tree_pop(c, old);
    return rc;
}

status_t job_device_parse(const char *text, job_device_t *ret, status_msg_t *err)
{
    char *end = NULL;
    long ordinal;

    *ret = (job_device_t){.ordinal = -1};
    if (strcmp(text, "cpu") == 0)
        return STATUS_OK;
    ret->cuda = true;
    if (strcmp(text, "cuda") == 0)
        return STATUS_OK;
    if (strncmp(text, "cuda:", 5) == 0 && text[5] >= '0' && text[5] <= '9') {
        errno = 0;
        ordinal = strtol(text + 5, &end, 10);
        if (errno == 0 && *end == '\0' && ordinal <= JOB_MAX_CUDA_ORDINAL) {
            ret->ordinal = (int)ordinal;
            return STATUS_OK;
        }
    }
    *ret = (job_device_t){.ordinal = -1};
    return status_fail(err, STATUS_BAD_CONFIG,
                       "device '%.64s': expected cpu, cuda or cuda:N (N from 0 to %d)", text,
                       JOB_MAX_CUDA_ORDINAL);
}

const char *job_device_str(const job_device_t *device, char *buf, size_t len)
{
    if (!device->cuda)
        snprintf(buf, len, "cpu");
    else if (device->ordinal < 0)
        snprintf(buf, len, "cuda");
    else
        snprintf(buf, len, "cuda:%d", device->ordinal);
    return buf;
}

/* device: cpu | cuda | cuda:N; on a GPU for the strategies whose replicas are one a process */
static status_t parse_device(job_ctx_t *c, const job_node_t *root, job_t *job)
{
    const job_node_t *n = job_tree_child(root, "device");
    const char *text = NULL;
    status_msg_t why;

    STATUS_CHECK(job_tree_get_string(c, root, "device", false, &text));
    if (text == NULL)
        return STATUS_OK;
    if (job_device_parse(text, &job->device, &why) != STATUS_OK)
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line, "%s", why.text);
    if (job->device.cuda && job->strategy != JOB_STRATEGY_ONE_DEVICE &&
        job->strategy != JOB_STRATEGY_PARAMETER_SERVER)
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                             "device: %s under strategy %s is not built yet (its replicas' "
                             "all-reduce across GPUs needs NCCL): train on a GPU with one_device "
                             "or parameter_server, or on the CPU",
                             text, strategies[job->strategy]);
    return STATUS_OK;
}

/* ---- data, train, partitioner, checkpoint ---- */

static status_t parse_synthetic(job_ctx_t *c, const job_node_t *n, job_synthetic_t *s)
{
    static const char *const kinds[] = {"classification", "text"};
    const job_node_t *kind = job_tree_child(n, "kind");
    int k = 0;
    int64_t seed = (int64_t)s->seed;

    if (job_tree_given(kind)) {
        size_t old = job_tree_push_key(c, "kind");
        status_t rc = job_tree_name(c, kind, "synthetic kind", kinds, JOB_N_OF(kinds), &k);
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
    }
    s->kind = (job_synthetic_kind_t)k;
    STATUS_CHECK(job_tree_get_i64(c, n, "examples", true, 1, &s->examples));
    STATUS_CHECK(job_tree_get_shape(c, n, "shape", true, s->shape, &s->rank));
    STATUS_CHECK(job_tree_get_i64(c, n, "seed", false, 0, &seed));
    s->seed = (uint64_t)seed;
    if (s->kind == JOB_SYNTHETIC_TEXT) {
        if (job_tree_given(job_tree_child(n, "classes")))
            return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                                 "%s: classes is for kind classification; text labels are binary",
                                 c->path);
        if (s->rank != 1)
            return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(n, "shape")->line,
                                 "%s.shape must be [sequence_length] for kind text", c->path);
        return job_tree_get_int(c, n, "vocabulary", true, 2, &s->vocabulary);
    }
    if (job_tree_given(job_tree_child(n, "vocabulary")))
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line, "%s: vocabulary is for kind text",
                             c->path);
    return job_tree_get_int(c, n, "classes", true, 2, &s->classes);
}

/* files: a path or glob, or a list of them. */
static status_t parse_files(job_ctx_t *c, const job_node_t *map, job_source_t *s)
{
    size_t old;
    const job_node_t *n = job_tree_enter(c, map, "files", &old);
    const job_node_t *const *items =
        n != NULL && n->kind == JOB_NODE_SEQ ? (const job_node_t *const *)n->items : &n;
    size_t count = n == NULL ? 0 : n->kind == JOB_NODE_SEQ ? n->n : 1;
    status_t rc = STATUS_OK;

    if (n == NULL)
        return job_tree_missing(c, map, "files");
    if (count == 0 || (s->files = calloc(count, sizeof(*s->files))) == NULL)
        rc = count == 0 ? job_tree_type_error(c, n, "a path, a glob or a list of them")
                        : status_fail(c->err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < count && rc == STATUS_OK; i++) {
        if (items[i]->kind != JOB_NODE_SCALAR || items[i]->text[0] == '\0')
            rc = job_tree_type_error(c, items[i], "a path, a glob or a list of them");
        else if ((s->files[i] = job_tree_resolve(c, items[i]->text)) == NULL)
            rc = STATUS_NO_MEMORY;
        else
            s->n_files = i + 1;
    }
    job_tree_pop(c, old);
    return rc;
}

/* x (y): a path (npy) or an archive member's name (npz), or a list of them, one a model input
 * (an output's labels). */
static status_t parse_arrays(job_ctx_t *c, const job_node_t *map, const char *key, bool paths,
                             char ***ret, size_t *ret_n)
{
    size_t old;
    const job_node_t *n = job_tree_enter(c, map, key, &old);
    const job_node_t *const *items =
        n != NULL && n->kind == JOB_NODE_SEQ ? (const job_node_t *const *)n->items : &n;
    size_t count = n == NULL ? 0 : n->kind == JOB_NODE_SEQ ? n->n : 1;
    bool x = key[0] == 'x';
    const char *want = strcmp(key, "label") == 0
                           ? "a name or a list of them (one a model output's labels)"
                       : paths ? (x ? "a .npy path or a list of them (one a model input)"
                                    : "a .npy path or a list of them (one a model output's labels)")
                       : x     ? "an array's name in the archive or a list of them (one a model "
                                 "input)"
                               : "an array's name in the archive or a list of them (one a model "
                                 "output's labels)";
    status_t rc = STATUS_OK;

    if (n == NULL)
        return job_tree_missing(c, map, key);
    if (count == 0 || count > (x ? JOB_MAX_MODEL_INPUTS : JOB_MAX_OUTPUTS))
        rc = job_tree_type_error(c, n, want);
    else if ((*ret = calloc(count, sizeof(**ret))) == NULL)
        rc = status_fail(c->err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < count && rc == STATUS_OK; i++) {
        if (items[i]->kind != JOB_NODE_SCALAR || items[i]->text[0] == '\0')
            rc = job_tree_type_error(c, items[i], want);
        else if (((*ret)[i] = paths ? job_tree_resolve(c, items[i]->text)
                                    : job_tree_strdup(c, items[i]->text)) == NULL)
            rc = STATUS_NO_MEMORY;
        else
            *ret_n = i + 1;
    }
    job_tree_pop(c, old);
    return rc;
}

/* One feature: {float_list: SHAPE}, {int64_list: SHAPE} or {bytes_list: SHAPE}. */
static status_t parse_feature(job_ctx_t *c, const job_node_t *entry_value, const char *name,
                              job_feature_t *f)
{
    static const char *const kinds[] = {"float_list", "int64_list", "bytes_list"};

    if (entry_value->kind != JOB_NODE_MAP || entry_value->n != 1)
        return job_tree_type_error(c, entry_value,
                                   "{float_list: SHAPE}, {int64_list: SHAPE} or {bytes_list: "
                                   "SHAPE} (raw uint8 bytes)");
    STATUS_CHECK(job_tree_check_map(c, entry_value, kinds, JOB_N_OF(kinds), false));
    for (int k = 0; k < (int)JOB_N_OF(kinds); k++)
        if (strcmp(entry_value->entries[0].key, kinds[k]) == 0)
            f->kind = (job_feature_kind_t)k;
    STATUS_CHECK(
        job_tree_get_shape(c, entry_value, entry_value->entries[0].key, true, f->shape, &f->rank));
    return (f->name = job_tree_strdup(c, name)) != NULL ? STATUS_OK : STATUS_NO_MEMORY;
}

/* Whether a label's shape holds at most JOB_MAX_LABEL_VALUES values (each dimension >= 1). */
static bool label_fits(const job_feature_t *f)
{
    uint64_t n = 1;

    for (int i = 0; i < f->rank; i++)
        if ((n *= (uint64_t)f->shape[i]) > JOB_MAX_LABEL_VALUES)
            return false;
    return true;
}

/* label: NAME, or a list of names for a model of several outputs (one an output's labels, in
 * the model's order): into *ret (free each and it), or "label" when the key is absent and not
 * required. The same name twice is refused. */
static status_t label_names(job_ctx_t *c, const job_node_t *map, bool required, char ***ret,
                            size_t *ret_n)
{
    status_t rc;

    *ret = NULL;
    *ret_n = 0;
    if (!required && !job_tree_given(job_tree_child(map, "label"))) {
        if ((*ret = calloc(1, sizeof(**ret))) == NULL || ((*ret)[0] = strdup("label")) == NULL) {
            free(*ret);
            *ret = NULL;
            return status_fail(c->err, STATUS_NO_MEMORY, "out of memory");
        }
        *ret_n = 1;
        return STATUS_OK;
    }
    rc = parse_arrays(c, map, "label", false, ret, ret_n);
    for (size_t i = 0; rc == STATUS_OK && i < *ret_n; i++)
        for (size_t k = 0; k < i; k++)
            if (strcmp((*ret)[i], (*ret)[k]) == 0)
                rc = job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(map, "label")->line,
                                   "%s.label names '%s' twice: each output's labels are their "
                                   "own",
                                   c->path, (*ret)[i]);
    if (rc != STATUS_OK) {
        free_names(*ret, *ret_n);
        *ret = NULL;
        *ret_n = 0;
    }
    return rc;
}

/* features: {NAME: FEATURE, ...}: the labels (named by label:, default "label"; several for a
 * model of several outputs) and the inputs (several for a model of several inputs, matched by
 * name in parse_job). */
static status_t parse_features(job_ctx_t *c, const job_node_t *map, job_source_t *s)
{
    char **labels;
    size_t old, n_labels;
    const job_node_t *n;
    uint64_t values = 0;
    status_t rc;

    STATUS_CHECK(label_names(c, map, false, &labels, &n_labels));
    if ((n = job_tree_enter(c, map, "features", &old)) == NULL) {
        free_names(labels, n_labels);
        return job_tree_missing(c, map, "features");
    }
    rc = n->kind == JOB_NODE_MAP && n->n >= n_labels + 1 && n->n <= JOB_MAX_MODEL_INPUTS + n_labels
             ? STATUS_OK
             : STATUS_BAD_CONFIG;
    for (size_t k = 0; rc == STATUS_OK && k < n_labels; k++)
        if (job_tree_child(n, labels[k]) == NULL)
            rc = STATUS_BAD_CONFIG;
    if (rc != STATUS_OK)
        rc =
            job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                          "%s must map the label%s '%s'%s and the model's input, or each of its %d "
                          "inputs at most by their names (name the label feature with label: "
                          "NAME, or one an output with label: [NAME, ...])",
                          c->path, n_labels > 1 ? "s" : "", labels[0], n_labels > 1 ? ", ..." : "",
                          JOB_MAX_MODEL_INPUTS);
    for (size_t i = 0; rc == STATUS_OK && i < n->n; i++) {
        const job_node_entry_t *e = &n->entries[i];
        size_t at = job_tree_push_key(c, e->key), k = 0;
        job_feature_t *f;
        while (k < n_labels && strcmp(e->key, labels[k]) != 0)
            k++;
        f = k < n_labels ? &s->label[k] : &s->inputs[s->n_inputs];
        rc = parse_feature(c, e->value, e->key, f);
        if (rc == STATUS_OK && k < n_labels)
            s->n_label++;
        else if (rc == STATUS_OK)
            s->n_inputs++;
        values +=
            rc == STATUS_OK && k < n_labels && label_fits(f) ? job_shape_len(f->shape, f->rank) : 0;
        if (rc == STATUS_OK && k < n_labels &&
            (f->kind == JOB_FEATURE_BYTES_LIST || !label_fits(f) || values > JOB_MAX_LABEL_VALUES))
            rc = job_tree_fail(c, STATUS_BAD_CONFIG, e->line,
                               "%s: a label is numbers: {int64_list: SHAPE} or {float_list: SHAPE} "
                               "(one value, [1], for a class index or a target), of at most %d "
                               "values in all",
                               c->path, JOB_MAX_LABEL_VALUES);
        job_tree_pop(c, at);
    }
    job_tree_pop(c, old);
    free_names(labels, n_labels);
    return rc;
}

static status_t parse_source(job_ctx_t *c, const job_node_t *n, job_source_t *s)
{
    static const char *const formats[] = {"idx", "synthetic", "tfrecord", "npy", "npz", "csv"};
    static const char *const csv_keys[] = {"format", "files", "label", "delimiter"};
    static const char *const tfrecord_keys[] = {"format", "files", "features", "label"};
    static const char *const npy_keys[] = {"format", "x", "y"};
    static const char *const npz_keys[] = {"format", "file", "x", "y"};
    static const char *const idx_keys[] = {"format", "images", "labels"};
    static const char *const synthetic_keys[] = {"format",  "kind", "examples",  "shape",
                                                 "classes", "seed", "vocabulary"};
    const job_node_t *format = job_tree_child(n, "format");
    int f;

    if (n->kind != JOB_NODE_MAP)
        return job_tree_type_error(c, n,
                                   "a mapping with format: idx, synthetic, tfrecord, npy or npz");
    if (!job_tree_given(format))
        return job_tree_missing(c, n, "format");
    {
        size_t old = job_tree_push_key(c, "format");
        status_t rc = job_tree_name(c, format, "data format", formats, JOB_N_OF(formats), &f);
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
    }
    s->present = true;
    s->format = (job_data_format_t)f;
    if (s->format == JOB_DATA_IDX) {
        STATUS_CHECK(job_tree_check_map(c, n, idx_keys, JOB_N_OF(idx_keys), false));
        STATUS_CHECK(job_tree_get_path(c, n, "images", true, &s->images));
        return job_tree_get_path(c, n, "labels", true, &s->labels);
    }
    if (s->format == JOB_DATA_NPY) {
        STATUS_CHECK(job_tree_check_map(c, n, npy_keys, JOB_N_OF(npy_keys), false));
        STATUS_CHECK(parse_arrays(c, n, "x", true, &s->x, &s->n_x));
        return parse_arrays(c, n, "y", true, &s->y, &s->n_y);
    }
    if (s->format == JOB_DATA_NPZ) {
        STATUS_CHECK(job_tree_check_map(c, n, npz_keys, JOB_N_OF(npz_keys), false));
        STATUS_CHECK(job_tree_get_path(c, n, "file", true, &s->archive));
        STATUS_CHECK(parse_arrays(c, n, "x", false, &s->x, &s->n_x));
        return parse_arrays(c, n, "y", false, &s->y, &s->n_y);
    }
    if (s->format == JOB_DATA_CSV) {
        const char *delim = ",";
        char **labels;
        size_t n_labels;
        STATUS_CHECK(job_tree_check_map(c, n, csv_keys, JOB_N_OF(csv_keys), false));
        STATUS_CHECK(parse_files(c, n, s));
        STATUS_CHECK(job_tree_get_string(c, n, "delimiter", false, &delim));
        if (strlen(delim) != 1 || delim[0] == '"' || delim[0] == '\n' || delim[0] == '\r')
            return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(n, "delimiter")->line,
                                 "%s.delimiter must be one character (not a quote or newline)",
                                 c->path);
        s->delimiter = delim[0];
        /* one column an output: the names become the source's */
        STATUS_CHECK(label_names(c, n, true, &labels, &n_labels));
        for (size_t i = 0; i < n_labels; i++)
            s->label[i].name = labels[i];
        s->n_label = (int)n_labels;
        free(labels);
        return STATUS_OK;
    }
    if (s->format == JOB_DATA_TFRECORD) {
        STATUS_CHECK(job_tree_check_map(c, n, tfrecord_keys, JOB_N_OF(tfrecord_keys), false));
        STATUS_CHECK(parse_files(c, n, s));
        return parse_features(c, n, s);
    }
    STATUS_CHECK(job_tree_check_map(c, n, synthetic_keys, JOB_N_OF(synthetic_keys), false));
    return parse_synthetic(c, n, &s->synthetic);
}

static status_t get_source(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                           job_source_t *ret)
{
    size_t old;
    const job_node_t *n = job_tree_enter(c, map, key, &old);
    status_t rc;

    if (n == NULL)
        return required ? job_tree_missing(c, map, key) : STATUS_OK;
    rc = parse_source(c, n, ret);
    job_tree_pop(c, old);
    return rc;
}

static status_t parse_data(job_ctx_t *c, const job_node_t *n, job_data_t *d)
{
    static const char *const data_keys[] = {
        "train", "test",           "scale",          "batch_size", "global_batch_size",
        "seed",  "shuffle_buffer", "drop_remainder", "prefetch"};
    int64_t seed = 0;

    STATUS_CHECK(job_tree_check_map(c, n, data_keys, JOB_N_OF(data_keys), false));
    STATUS_CHECK(job_tree_get_int(c, n, "global_batch_size", false, 1, &d->global_batch_size));
    if (d->global_batch_size > 0 && job_tree_given(job_tree_child(n, "batch_size")))
        return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(n, "batch_size")->line,
                             "data.batch_size (per replica) and data.global_batch_size (split "
                             "over the replicas): give one of them");
    /* until job_set_replicas: one replica */
    d->batch_size = d->global_batch_size;
    STATUS_CHECK(
        job_tree_get_int(c, n, "batch_size", d->global_batch_size == 0, 1, &d->batch_size));
    STATUS_CHECK(job_tree_get_i64(c, n, "seed", false, 0, &seed));
    d->seed = (uint64_t)seed;
    /* Distinct default seeds, so a synthetic test split is not the training split again. */
    d->train.synthetic.seed = d->seed + 1;
    d->test.synthetic.seed = d->seed + 2;
    STATUS_CHECK(get_source(c, n, "train", true, &d->train));
    STATUS_CHECK(get_source(c, n, "test", false, &d->test));
    STATUS_CHECK(job_tree_get_double(c, n, "scale", false, &d->scale));
    /* Features are bytes times scale, in float32. */
    if (!(fabs(d->scale) * 255.0 <= FLT_MAX))
        return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(n, "scale")->line,
                             "data.scale %g times a byte value of 255 overflows float32", d->scale);
    STATUS_CHECK(job_tree_get_i64(c, n, "shuffle_buffer", false, 0, &d->shuffle_buffer));
    STATUS_CHECK(job_tree_get_bool(c, n, "drop_remainder", &d->drop_remainder));
    return job_tree_get_int(c, n, "prefetch", false, 0, &d->prefetch);
}

static status_t parse_train(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    static const char *const train_keys[] = {
        "epochs",           "steps",      "steps_per_execution", "max_staleness", "bytes_per_pack",
        "accumulate_steps", "wire_dtype", "wire_error_feedback"};
    const char *wire = NULL;

    STATUS_CHECK(job_tree_check_map(c, n, train_keys, JOB_N_OF(train_keys), false));
    if (job_tree_given(job_tree_child(n, "epochs")) == job_tree_given(job_tree_child(n, "steps")))
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                             "%s: give exactly one of epochs and steps", c->path);
    job->epochs = 0;
    STATUS_CHECK(job_tree_get_i64(c, n, "epochs", false, 1, &job->epochs));
    STATUS_CHECK(job_tree_get_i64(c, n, "steps", false, 1, &job->steps));
    STATUS_CHECK(
        job_tree_get_int(c, n, "steps_per_execution", false, 1, &job->steps_per_execution));
    STATUS_CHECK(job_tree_get_i64(c, n, "max_staleness", false, 0, &job->max_staleness));
    STATUS_CHECK(job_tree_get_int(c, n, "accumulate_steps", false, 1, &job->accumulate_steps));
    if (job->accumulate_steps > JOB_MAX_ACCUMULATE_STEPS)
        return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(n, "accumulate_steps")->line,
                             "%s.accumulate_steps: %d is more than %d", c->path,
                             job->accumulate_steps, JOB_MAX_ACCUMULATE_STEPS);
    STATUS_CHECK(job_tree_get_i64(c, n, "bytes_per_pack", false, 0, &job->bytes_per_pack));
    STATUS_CHECK(job_tree_get_string(c, n, "wire_dtype", false, &wire));
    STATUS_CHECK(job_tree_get_bool(c, n, "wire_error_feedback", &job->wire_error_feedback));
    if (wire != NULL && strcmp(wire, "float32") != 0 && strcmp(wire, "bfloat16") != 0)
        return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(n, "wire_dtype")->line,
                             "%s.wire_dtype: '%s' is not float32 or bfloat16", c->path, wire);
    job->wire_bf16 = wire != NULL && strcmp(wire, "bfloat16") == 0;
    /* Only gradients that travel to a parameter server are cast (a chief runs one_device jobs
     * that way too; tessera train refuses the key): elsewhere it would be read and do nothing. */
    if (job->wire_bf16 && job_is_synchronous(job))
        return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(n, "wire_dtype")->line,
                             "%s.wire_dtype: bfloat16 is for parameter_server jobs (gradients "
                             "and values on the wire to the PS)",
                             c->path);
    if (job->wire_error_feedback && !job->wire_bf16)
        return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(n, "wire_error_feedback")->line,
                             "%s.wire_error_feedback: it is for wire_dtype: bfloat16", c->path);
    return STATUS_OK;
}

static status_t parse_partitioner(job_ctx_t *c, const job_node_t *n, job_partitioner_t *p)
{
    static const char *const names[] = {"min_size", "max_size", "fixed"};
    static const char *const min_keys[] = {"min_shard_bytes", "max_shards"};
    static const char *const max_keys[] = {"max_shard_bytes", "max_shards"};
    static const char *const fixed_keys[] = {"num_shards"};
    size_t old = c->path_len;
    const job_node_t *opts;
    job_node_t empty = {.kind = JOB_NODE_MAP, .line = n->line};
    int i;
    status_t rc;

    STATUS_CHECK(job_tree_variant(c, n, "partitioner", names, JOB_N_OF(names), true, &i, &opts));
    opts = job_tree_given(opts) ? opts : &empty;
    p->kind = (job_partitioner_kind_t)(i + 1);
    if (p->kind == JOB_PARTITIONER_MIN_SIZE) {
        p->min_shard_bytes = 256 * 1024;
        p->max_shards = 1;
        rc = job_tree_check_map(c, opts, min_keys, JOB_N_OF(min_keys), false);
        if (rc == STATUS_OK)
            rc = job_tree_get_i64(c, opts, "min_shard_bytes", false, 1, &p->min_shard_bytes);
    } else if (p->kind == JOB_PARTITIONER_MAX_SIZE) {
        p->max_shards = INT_MAX; /* TensorFlow's max_shards=None */
        rc = job_tree_check_map(c, opts, max_keys, JOB_N_OF(max_keys), false);
        if (rc == STATUS_OK)
            rc = job_tree_get_i64(c, opts, "max_shard_bytes", true, 1, &p->max_shard_bytes);
    } else {
        rc = job_tree_check_map(c, opts, fixed_keys, JOB_N_OF(fixed_keys), false);
        if (rc == STATUS_OK)
            rc = job_tree_get_int(c, opts, "num_shards", true, 1, &p->num_shards);
    }
    if (rc == STATUS_OK && p->kind != JOB_PARTITIONER_FIXED)
        rc = job_tree_get_int(c, opts, "max_shards", false, 1, &p->max_shards);
    job_tree_pop(c, old);
    return rc;
}

static status_t parse_checkpoint(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    static const char *const keys[] = {"dir", "every_steps", "every_seconds", "keep"};

    STATUS_CHECK(job_tree_check_map(c, n, keys, JOB_N_OF(keys), false));
    STATUS_CHECK(job_tree_get_path(c, n, "dir", true, &job->checkpoint_dir));
    STATUS_CHECK(job_tree_get_i64(c, n, "every_steps", false, 1, &job->checkpoint_every_steps));
    STATUS_CHECK(job_tree_get_i64(c, n, "every_seconds", false, 1, &job->checkpoint_every_seconds));
    return job_tree_get_int(c, n, "keep", false, 1, &job->checkpoint_keep);
}

/* update_freq: "epoch" (0), "batch" (1) or a number of steps, as Keras's callback takes. */
static status_t parse_update_freq(job_ctx_t *c, const job_node_t *map, int64_t *ret)
{
    size_t old;
    const job_node_t *n = job_tree_enter(c, map, "update_freq", &old);
    status_t rc = STATUS_OK;

    if (n == NULL)
        return STATUS_OK;
    if (n->kind == JOB_NODE_SCALAR && strcmp(n->text, "epoch") == 0)
        *ret = 0;
    else if (n->kind == JOB_NODE_SCALAR && strcmp(n->text, "batch") == 0)
        *ret = 1;
    else if (job_tree_given(n) && job_tree_int(c, n, 1, INT64_MAX, ret) != STATUS_OK)
        rc = job_tree_type_error(c, n, "epoch, batch or a positive number of steps");
    job_tree_pop(c, old);
    return rc;
}

static status_t parse_tensorboard(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    static const char *const keys[] = {"logdir", "update_freq", "histogram_freq"};

    STATUS_CHECK(job_tree_check_map(c, n, keys, JOB_N_OF(keys), false));
    STATUS_CHECK(job_tree_get_path(c, n, "logdir", true, &job->tensorboard_logdir));
    STATUS_CHECK(parse_update_freq(c, n, &job->tensorboard_update_freq));
    return job_tree_get_i64(c, n, "histogram_freq", false, 0, &job->tensorboard_histogram_freq);
}

/* ---- the job ---- */

/* Calls parse(c, root[key], arg) with the path set to key when the key is given, and fails
 * when it is required but absent. */
#define SECTION_IN(ctx, doc, key, required, parse, arg)                                            \
    do {                                                                                           \
        const job_node_t *n_ = job_tree_child(doc, key);                                           \
        size_t old_;                                                                               \
        status_t rc_;                                                                              \
        if (!job_tree_given(n_)) {                                                                 \
            if (required)                                                                          \
                return job_tree_missing(ctx, doc, key);                                            \
            break;                                                                                 \
        }                                                                                          \
        old_ = job_tree_push_key(ctx, key);                                                        \
        rc_ = parse(ctx, n_, arg);                                                                 \
        job_tree_pop(ctx, old_);                                                                   \
        STATUS_CHECK(rc_);                                                                         \
    } while (0)
#define SECTION(key, required, parse, arg) SECTION_IN(c, root, key, required, parse, arg)

/* A section of the job file, or where it leaves it out, of the compile config kroot (read by
 * kc) when that has it. */
#define EITHER(key, required, parse, arg)                                                          \
    do {                                                                                           \
        if (kroot != NULL && !job_tree_given(job_tree_child(root, key)) &&                         \
            job_tree_given(job_tree_child(kroot, key)))                                            \
            SECTION_IN(kc, kroot, key, required, parse, arg);                                      \
        else                                                                                       \
            SECTION_IN(c, root, key, required, parse, arg);                                        \
    } while (0)

static status_t parse_loss_optimizer(job_ctx_t *c, const job_node_t *root, job_ctx_t *kc,
                                     const job_node_t *kroot, job_t *job)
{
    EITHER("loss", true, parse_losses, job);
    EITHER("loss_weights", false, parse_loss_weights, job);
    EITHER("optimizer", false, parse_optimizer, &job->optimizer);
    return STATUS_OK;
}

static status_t parse_metrics_of(job_ctx_t *c, const job_node_t *root, job_ctx_t *kc,
                                 const job_node_t *kroot, job_t *job)
{
    EITHER("metrics", false, job_parse_metrics, job);
    return STATUS_OK;
}
#undef EITHER

/* The compile config of the model's Keras archive, translated as `want` says, parsed by kc into
 * *ret_root (NULL without an archive). */
static status_t keras_compile_tree(job_ctx_t *kc, const job_t *job, const job_keras_want_t *want,
                                   job_node_t **ret_root, int *ret_accumulate)
{
    char *text = NULL;
    status_t rc;

    *ret_root = NULL;
    *ret_accumulate = 0;
    if (!job->model.keras_archive)
        return STATUS_OK;
    rc = job_keras_compile_text(job->model.keras_json, strlen(job->model.keras_json),
                                job->model.keras_json_path, want, &text, ret_accumulate, kc->err);
    if (rc == STATUS_OK)
        rc = job_tree_parse(text, strlen(text), kc->file, ret_root, kc->err);
    free(text);
    return rc;
}

/* loss, optimizer and metrics: the job file's, and where it leaves one out, the model's Keras
 * archive's compile config (model: {keras: PATH}: what model.compile() was given), its metrics
 * read for the loss the job ends up with. *ret_accumulate gets the archive optimizer's
 * gradient_accumulation_steps when that optimizer is taken (0: none). */
static status_t parse_compile_sections(job_ctx_t *c, const job_node_t *root, job_t *job,
                                       int *ret_accumulate)
{
    char file[600];
    job_ctx_t kc;
    job_node_t *kroot = NULL;
    job_keras_want_t want = {.loss = !job_tree_given(job_tree_child(root, "loss")),
                             .optimizer = !job_tree_given(job_tree_child(root, "optimizer"))};
    int unused;
    status_t rc;

    snprintf(file, sizeof(file), "%s: compile_config",
             job->model.keras_json_path != NULL ? job->model.keras_json_path : "");
    kc = (job_ctx_t){.file = file, .dir = c->dir, .err = c->err};
    rc = keras_compile_tree(&kc, job, &want, &kroot, ret_accumulate);
    if (rc == STATUS_OK)
        rc = parse_loss_optimizer(c, root, &kc, kroot, job);
    job_node_free(kroot);
    kroot = NULL;
    want =
        (job_keras_want_t){.metrics = !job_tree_given(job_tree_child(root, "metrics")),
                           .for_loss = {.binary = job->loss == JOB_LOSS_BINARY_CROSSENTROPY ||
                                                  !job_loss_has_accuracy(job->loss),
                                        .logits = job->from_logits,
                                        .one_hot = job->loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY},
                           .n_outputs = job->model.n_outputs,
                           .output_names = (const char(*)[64])job->model.output_names};
    for (int o = 0; o < job->n_outputs && o < JOB_MAX_OUTPUTS; o++) {
        job_loss_kind_t l = job->outputs[o].loss;
        want.for_outputs[o] = (job_keras_loss_t){.binary = l == JOB_LOSS_BINARY_CROSSENTROPY ||
                                                           !job_loss_has_accuracy(l),
                                                 .logits = job->outputs[o].from_logits,
                                                 .one_hot = l == JOB_LOSS_CATEGORICAL_CROSSENTROPY};
    }
    if (rc == STATUS_OK)
        rc = keras_compile_tree(&kc, job, &want, &kroot, &unused);
    if (rc == STATUS_OK)
        rc = parse_metrics_of(c, root, &kc, kroot, job);
    job_node_free(kroot);
    return rc;
}

/* The file's name without directory and extension: the default job name. */
static char *file_stem(const char *path)
{
    const char *base = path != NULL && strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path;
    const char *dot;

    if (base == NULL || base[0] == '\0')
        return strdup("job");
    dot = strrchr(base, '.');
    return strndup(base, dot != NULL && dot != base ? (size_t)(dot - base) : strlen(base));
}

static void job_defaults(job_t *job)
{
    job->strategy = JOB_STRATEGY_ONE_DEVICE;
    optimizer_config_default(OPTIMIZER_RMSPROP, &job->optimizer); /* Keras compile()'s default */
    job->data.scale = 1;
    job->data.prefetch = 2;
    job->epochs = 1; /* Keras fit()'s default */
    job->steps_per_execution = 1;
    job->checkpoint_keep = 3;
    job->accuracy_threshold = 0.5f;
}

/* A TFRecord source for a model of several inputs: one feature an input, put in the model's
 * order by their names, each holding as many values as its input takes. */
static status_t match_features(job_ctx_t *c, const job_node_t *root, job_t *job, job_source_t *s)
{
    const job_model_t *m = &job->model;
    job_feature_t ordered[JOB_MAX_MODEL_INPUTS];
    int line = job_tree_child(root, "data")->line;

    if (!s->present || s->format != JOB_DATA_TFRECORD || (s->n_inputs < 2 && m->n_inputs < 2))
        return STATUS_OK;
    if (s->n_inputs != m->n_inputs)
        return job_tree_fail(c, STATUS_BAD_CONFIG, line,
                             "data: %d input feature%s for a model of %d input%s: with several, "
                             "each is a model input, named as the model names it",
                             s->n_inputs, s->n_inputs == 1 ? "" : "s", job_model_inputs(m),
                             job_model_inputs(m) == 1 ? "" : "s");
    for (int k = 0; k < m->n_inputs; k++) {
        int i = 0;
        while (i < s->n_inputs && strcmp(s->inputs[i].name, m->inputs[k].name) != 0)
            i++;
        if (i == s->n_inputs)
            return job_tree_fail(c, STATUS_BAD_CONFIG, line,
                                 "data: no feature is named '%s', the model's input %d: with "
                                 "several, each feature is named as the model names its input",
                                 m->inputs[k].name, k);
        if (job_shape_len(s->inputs[i].shape, s->inputs[i].rank) !=
            job_shape_len(m->inputs[k].shape, m->inputs[k].rank))
            return job_tree_fail(c, STATUS_BAD_CONFIG, line,
                                 "data: feature '%s' holds %zu values, the model's input takes %zu",
                                 m->inputs[k].name,
                                 job_shape_len(s->inputs[i].shape, s->inputs[i].rank),
                                 job_shape_len(m->inputs[k].shape, m->inputs[k].rank));
        ordered[k] = s->inputs[i];
    }
    memcpy(s->inputs, ordered, (size_t)m->n_inputs * sizeof(*ordered));
    return STATUS_OK;
}

static bool regularized(const job_layer_t *l)
{
    const job_regularizer_t *r[] = {&l->kernel_reg, &l->bias_reg, &l->pointwise_reg,
                                    &l->activity_reg};

    for (size_t i = 0; i < JOB_N_OF(r); i++)
        if (r[i]->l1 != 0 || r[i]->l2 != 0)
            return true;
    return false;
}

/* What the model and the rest of the job cannot do together: data.scale on token ids (it
 * would scale them too), and reduction none beside a regularizer (Keras's fit refuses a vector
 * of losses plus a regularization term). */
static status_t check_ids_and_losses(job_ctx_t *c, const job_node_t *root, job_t *job)
{
    const job_model_t *m = &job->model;
    const job_node_t *scale = job_tree_child(job_tree_child(root, "data"), "scale"),
                     *loss = job_tree_child(root, "loss");
    bool ids = m->input_is_int;

    for (int k = 0; k < m->n_inputs; k++)
        ids = ids || m->inputs[k].is_int;
    if (ids && job->data.scale != 1)
        return job_tree_fail(c, STATUS_BAD_CONFIG, scale != NULL ? scale->line : root->line,
                             "data.scale: the model reads token ids, which it would scale too: "
                             "scale the other inputs' values in the data itself");
    for (size_t i = 0; job->loss_unreduced && i < m->n_layers; i++)
        if (regularized(&m->layers[i]))
            return job_tree_fail(c, STATUS_BAD_CONFIG, loss != NULL ? loss->line : root->line,
                                 "loss: reduction none beside layer %s's regularizer: Keras "
                                 "cannot add a regularization term to unreduced losses either",
                                 m->layers[i].name);
    return STATUS_OK;
}

static status_t parse_job(job_ctx_t *c, const job_node_t *root, job_t *job)
{
    static const char *const top_keys[] = {
        "name",        "strategy", "model",  "loss",      "loss_weights", "metrics",
        "optimizer",   "data",     "train",  "evaluate",  "partitioner",  "checkpoint",
        "tensorboard", "seed",     "resume", "init_from", "device"};
    const char *name = NULL;
    const job_node_t *n;
    int64_t seed = -1;
    int accumulate = 0;

    STATUS_CHECK(job_tree_check_map(c, root, top_keys, JOB_N_OF(top_keys), false));
    STATUS_CHECK(job_tree_get_string(c, root, "name", false, &name));
    if (name != NULL) {
        free(job->name);
        job->name = job_tree_strdup(c, name);
        if (job->name == NULL)
            return STATUS_NO_MEMORY;
    }
    n = job_tree_child(root, "strategy");
    if (job_tree_given(n))
        STATUS_CHECK(parse_strategy(c, n, job));
    STATUS_CHECK(parse_device(c, root, job));
    SECTION("model", true, job_parse_model, &job->model);
    STATUS_CHECK(parse_compile_sections(c, root, job, &accumulate));
    for (int k = 0; job->n_outputs > 1 && k < job->n_outputs; k++) { /* each output's loss */
        job_metric_t *m;
        if (job->n_metrics == JOB_MAX_METRICS)
            return job_tree_fail(c, STATUS_BAD_CONFIG, root->line,
                                 "metrics: at most %d, each output's loss among them (this "
                                 "model's %d outputs leave %d)",
                                 JOB_MAX_METRICS, job->n_outputs, JOB_MAX_METRICS - job->n_outputs);
        m = &job->metrics[job->n_metrics++];
        *m = (job_metric_t){.kind = JOB_METRIC_OUTPUT_LOSS,
                            .class_id = k,
                            .output = k,
                            .offset = job->metric_width,
                            .width = 2};
        snprintf(m->name, sizeof(m->name), "%.58s_loss", job->model.output_names[k]);
        job->metric_width += 2;
        for (int e = 0; e + 1 < job->n_metrics; e++)
            if (strcmp(job->metrics[e].name, m->name) == 0)
                return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(root, "model")->line,
                                     "model: an output's loss and another metric would both be "
                                     "reported as %s: give them names that differ (an output's "
                                     "within its first 58 characters)",
                                     m->name);
    }
    SECTION("data", true, parse_data, &job->data);
    if (job->data.global_batch_size > 0 && job->strategy == JOB_STRATEGY_PARAMETER_SERVER)
        return job_tree_fail(
            c, STATUS_BAD_CONFIG,
            job_tree_child(job_tree_child(root, "data"), "global_batch_size")->line,
            "data.global_batch_size: each step of parameter_server training is one worker's "
            "batch, no global one: give data.batch_size");

    STATUS_CHECK(match_features(c, root, job, &job->data.train));
    STATUS_CHECK(match_features(c, root, job, &job->data.test));
    STATUS_CHECK(check_ids_and_losses(c, root, job));
    SECTION("train", false, parse_train, job);
    job->evaluate = job->data.test.present;
    STATUS_CHECK(job_tree_get_bool(c, root, "evaluate", &job->evaluate));
    if (job->evaluate && !job->data.test.present)
        return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(root, "evaluate")->line,
                             "evaluate: true needs a test split in data.test");
    SECTION("partitioner", false, parse_partitioner, &job->partitioner);
    SECTION("checkpoint", false, parse_checkpoint, job);
    SECTION("tensorboard", false, parse_tensorboard, job);
    STATUS_CHECK(job_tree_get_bool(c, root, "resume", &job->resume));
    STATUS_CHECK(job_tree_get_path(c, root, "init_from", false, &job->init_from));
    /* a Keras archive's model trains on from its weights, with its gradient accumulation,
     * unless the job says otherwise */
    if (job->model.keras_archive && job->init_from == NULL) {
        if ((job->init_from = strdup(job->model.keras_json_path)) == NULL)
            return status_fail(c->err, STATUS_NO_MEMORY, "%s: out of memory", c->file);
        job->init_optimizer = !job_tree_given(job_tree_child(root, "optimizer"));
        job->keras_accumulate = accumulate;
    }
    if (accumulate > 1 &&
        !job_tree_given(job_tree_child(job_tree_child(root, "train"), "accumulate_steps")))
        job->accumulate_steps = accumulate;
    if (job->resume && job->checkpoint_dir == NULL)
        return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(root, "resume")->line,
                             "resume: true needs checkpoint.dir, where the checkpoints are");
    STATUS_CHECK(job_tree_get_i64(c, root, "seed", false, 0, &seed));
    job->seed = seed >= 0 ? (uint64_t)seed : job->data.seed;
    return STATUS_OK;
}

/* The limits of job_parse_with_files, checked before anything is parsed. */
static status_t check_sizes(const char *file, size_t len, const job_file_t *files, size_t n_files,
                            status_msg_t *err)
{
    if (len > JOB_MAX_FILE_BYTES)
        return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                           "%s: the job file holds %zu bytes, more than the limit of %u", file, len,
                           JOB_MAX_FILE_BYTES);
    if (n_files > JOB_MAX_FILES)
        return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                           "%s: the job brings %zu files, more than the limit of %d", file, n_files,
                           JOB_MAX_FILES);
    for (size_t i = 0; i < n_files; i++)
        for (size_t k = 0; k < i; k++) /* at most JOB_MAX_FILES squared */
            if (files[i].path != NULL && files[k].path != NULL &&
                strcmp(files[i].path, files[k].path) == 0)
                return status_fail(err, STATUS_INVALID_ARGUMENT,
                                   "%s: file '%.200s' is supplied twice", file, files[i].path);
    for (size_t i = 0; i < n_files; i++)
        if (files[i].len > JOB_MAX_FILE_BYTES)
            return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                               "%s: file '%.200s' holds %zu bytes, more than the limit of %u", file,
                               files[i].path != NULL ? files[i].path : "", files[i].len,
                               JOB_MAX_FILE_BYTES);
    return STATUS_OK;
}

status_t job_parse(const char *text, size_t len, const char *path, job_t *ret_job,
                   status_msg_t *err)
{
    return job_parse_with_files(text, len, path, NULL, 0, ret_job, err);
}

status_t job_parse_with_files(const char *text, size_t len, const char *path,
                              const job_file_t *files, size_t n_files, job_t *ret_job,
                              status_msg_t *err)
{
    job_ctx_t c = {
        .file = path != NULL ? path : "job", .err = err, .files = files, .n_files = n_files};
    const char *slash = path != NULL ? strrchr(path, '/') : NULL;
    job_node_t *root = NULL;
    job_t job = {0};
    status_t rc;

    memset(ret_job, 0, sizeof(*ret_job));
    if (text == NULL)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "%s: no job text", c.file);
    STATUS_CHECK(check_sizes(c.file, len, files, n_files, err));
    job_defaults(&job);
    job.source_hash = UINT64_C(0xcbf29ce484222325); /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        job.source_hash = (job.source_hash ^ (uint8_t)text[i]) * UINT64_C(0x100000001b3);
    c.dir = slash == NULL ? strdup("") : strndup(path, slash == path ? 1 : (size_t)(slash - path));
    job.name = file_stem(path);
    job.path = path != NULL ? strdup(path) : NULL;
    if (c.dir == NULL || job.name == NULL || (path != NULL && job.path == NULL)) {
        rc = status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", c.file);
        goto out;
    }
    rc = job_tree_parse(text, len, c.file, &root, err);
    if (rc != STATUS_OK)
        goto out;
    if (root == NULL || root->kind == JOB_NODE_NULL) {
        rc = status_fail(err, STATUS_BAD_CONFIG, "%s: the job file is empty", c.file);
        goto out;
    }
    if (root->kind != JOB_NODE_MAP) {
        rc = job_tree_fail(&c, STATUS_BAD_CONFIG, root->line,
                           "a job file is a mapping of keys (name, model, loss, data ...)");
        goto out;
    }
    rc = parse_job(&c, root, &job);
out:
    job_node_free(root);
    free(c.dir);
    if (rc != STATUS_OK) {
        job_done(&job);
        return rc;
    }
    *ret_job = job;
    return STATUS_OK;
}

status_t job_load_file(const char *path, job_t *ret_job, status_msg_t *err)
{
    char *text;
    size_t len;
    status_t rc;

    memset(ret_job, 0, sizeof(*ret_job));
    if (path == NULL)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "no job file named");
    STATUS_CHECK(file_read_all(path, "job file", JOB_MAX_FILE_BYTES, &text, &len, err));
    rc = job_parse(text, len, path, ret_job, err);
    free(text);
    return rc;
}

int job_window(const job_t *job)
{
    return job->accumulate_steps > 1 ? job->accumulate_steps : 1;
}

int job_closure_steps(const job_t *job)
{
    int spe = job->steps_per_execution > 0 ? job->steps_per_execution : 1;
    int k = job_window(job);

    return spe % k == 0 || spe > INT_MAX - k ? spe : (spe / k + 1) * k;
}

status_t job_set_replicas(job_t *job, int replicas, status_msg_t *err)
{
    int global = job->data.global_batch_size;

    if (global == 0)
        return STATUS_OK;
    if (replicas < 1 || global % replicas != 0)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: data.global_batch_size %d does not split evenly over %d "
                           "replicas: make it a multiple of %d, or give data.batch_size",
                           job->path ? job->path : "job", global, replicas, replicas);
    job->data.batch_size = global / replicas;
    return STATUS_OK;
}

bool job_is_synchronous(const job_t *job)
{
    return job->strategy == JOB_STRATEGY_MULTI_WORKER_MIRRORED ||
           job->strategy == JOB_STRATEGY_MIRRORED || job->strategy == JOB_STRATEGY_CENTRAL_STORAGE;
}
