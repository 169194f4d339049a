/* The job's metrics: what `metrics:` names, and each metric's result from its sums.
 *
 * Accuracy (under its Keras names) is the one every model of a classification loss has; the
 * others are job_metric_t entries whose sums the engine adds up (engine/metrics.c). Their results
 * follow Keras 3's metric classes: AUC from the confusion counts at num_thresholds evenly spaced
 * thresholds (Riemann sums, or for PR the interpolation of Davis and Goadrich), precision and
 * recall at one threshold, top-k with ties counted in, means of absolute and squared errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "tree.h"

/* Every name `metrics:` takes; the kinds of those beyond accuracy and loss in metric_kinds. */
static const char *const metric_names[] = {"accuracy",
                                           "loss",
                                           "acc",
                                           "sparse_categorical_accuracy",
                                           "binary_accuracy",
                                           "categorical_accuracy",
                                           "sparse_top_k_categorical_accuracy",
                                           "top_k_categorical_accuracy",
                                           "auc",
                                           "precision",
                                           "recall",
                                           "mae",
                                           "mean_absolute_error",
                                           "mse",
                                           "mean_squared_error",
                                           "rmse",
                                           "root_mean_squared_error"};
#define FIRST_OTHER 6 /* metric_names[FIRST_OTHER...] are job_metric_t */
static const job_metric_kind_t metric_kinds[] = {
    JOB_METRIC_TOP_K,  JOB_METRIC_TOP_K, JOB_METRIC_AUC, JOB_METRIC_PRECISION,
    JOB_METRIC_RECALL, JOB_METRIC_MAE,   JOB_METRIC_MAE, JOB_METRIC_MSE,
    JOB_METRIC_MSE,    JOB_METRIC_RMSE,  JOB_METRIC_RMSE};
/* The names they report under (Keras's default names). */
static const char *const metric_reported[] = {"sparse_top_k_categorical_accuracy",
                                              "top_k_categorical_accuracy",
                                              "auc",
                                              "precision",
                                              "recall",
                                              "mean_absolute_error",
                                              "mean_absolute_error",
                                              "mean_squared_error",
                                              "mean_squared_error",
                                              "root_mean_squared_error",
                                              "root_mean_squared_error"};

static const char *const auc_curves[] = {"ROC", "PR", "PRGAIN"};
static const char *const auc_summations[] = {"interpolation", "minoring", "majoring"};

/* A name from names[], in any case (Keras takes "roc" and "ROC"). */
static status_t get_choice_nocase(job_ctx_t *c, const job_node_t *opts, const char *key,
                                  const char *const *names, size_t n, int *ret)
{
    const char *s = NULL;

    STATUS_CHECK(job_tree_get_string(c, opts, key, false, &s));
    if (s == NULL)
        return STATUS_OK;
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(s, names[i]) == 0) {
            *ret = (int)i;
            return STATUS_OK;
        }
    size_t old = job_tree_push_key(c, key);
    job_node_t node = {
        .kind = JOB_NODE_SCALAR, .line = job_tree_child(opts, key)->line, .text = (char *)s};
    status_t rc = job_tree_name(c, &node, key, names, n, ret);
    job_tree_pop(c, old);
    return rc;
}

/* Whether a kind's output keeps its (first) input's last axis: values one by one, the
 * normalizations and dropouts, poolings and paddings over the other axes, merges but
 * Concatenate. */
static bool keeps_last_axis(job_layer_kind_t k)
{
    switch (k) {
    case JOB_LAYER_DROPOUT:
    case JOB_LAYER_ACTIVATION:
    case JOB_LAYER_RESCALING:
    case JOB_LAYER_LAYER_NORMALIZATION:
    case JOB_LAYER_BATCH_NORMALIZATION:
    case JOB_LAYER_MAX_POOLING1D:
    case JOB_LAYER_AVERAGE_POOLING1D:
    case JOB_LAYER_MAX_POOLING2D:
    case JOB_LAYER_AVERAGE_POOLING2D:
    case JOB_LAYER_GLOBAL_AVERAGE_POOLING1D:
    case JOB_LAYER_GLOBAL_AVERAGE_POOLING2D:
    case JOB_LAYER_GLOBAL_MAX_POOLING1D:
    case JOB_LAYER_GLOBAL_MAX_POOLING2D:
    case JOB_LAYER_RELU:
    case JOB_LAYER_LEAKY_RELU:
    case JOB_LAYER_ELU:
    case JOB_LAYER_SOFTMAX:
    case JOB_LAYER_PRELU:
    case JOB_LAYER_ZERO_PADDING2D:
    case JOB_LAYER_CROPPING2D:
    case JOB_LAYER_UP_SAMPLING2D:
    case JOB_LAYER_REPEAT_VECTOR:
    case JOB_LAYER_SPATIAL_DROPOUT1D:
    case JOB_LAYER_SPATIAL_DROPOUT2D:
    case JOB_LAYER_GAUSSIAN_NOISE:
        return true;
    default:
        return job_layer_is_merge(k) && k != JOB_LAYER_CONCATENATE;
    }
}

/* The last axis of output k of the model, where its layers say it: a Dense's units, a
 * convolution's filters, or the input's last axis, through the layers that keep it (an
 * Activation or Dropout after the Dense, a global pooling after the Conv2D); 0 where only
 * building the model would tell. The engine checks it is all the output gives an example. */
static int output_units(const job_model_t *model, int k)
{
    int at = job_model_output(model, k);

    for (size_t steps = 0; steps <= model->n_layers; steps++) {
        if (at < 0) { /* a model input */
            int rank;
            const int *shape = job_model_input_shape(model, job_input_index(at), &rank);
            return at >= JOB_INPUT_OF(job_model_inputs(model) - 1) && rank > 0 ? shape[rank - 1]
                                                                               : 0;
        }
        if ((size_t)at >= model->n_layers)
            return 0;
        const job_layer_t *l = &model->layers[at];
        if (l->kind == JOB_LAYER_DENSE)
            return l->units;
        if (l->kind == JOB_LAYER_CONV1D || l->kind == JOB_LAYER_CONV2D ||
            l->kind == JOB_LAYER_SEPARABLE_CONV2D)
            return l->filters;
        if (!keeps_last_axis(l->kind))
            return 0;
        at = job_layer_input(model, (size_t)at, 0);
    }
    return 0;
}

/* auc's label_weights: a list of non-negative numbers, one an output, not all 0 (their mean
 * would divide by nothing). */
static status_t parse_label_weights(job_ctx_t *c, const job_node_t *opts, job_metric_t *m)
{
    const job_node_t *n = job_tree_child(opts, "label_weights");
    size_t old;
    double sum = 0;
    status_t rc = STATUS_OK;

    if (!job_tree_given(n))
        return STATUS_OK;
    old = job_tree_push_key(c, "label_weights");
    if (n->kind != JOB_NODE_SEQ || n->n == 0 || n->n > JOB_MAX_LABEL_WEIGHTS)
        rc = job_tree_type_error(c, n, "a list of 1 to 65536 non-negative numbers");
    if (rc == STATUS_OK && (m->label_weights = calloc(n->n, sizeof(double))) == NULL)
        rc = status_fail(c->err, STATUS_NO_MEMORY, "%s: out of memory", c->file);
    for (size_t i = 0; rc == STATUS_OK && i < n->n; i++) {
        size_t at = job_tree_push_index(c, i);
        rc = job_tree_double(c, n->items[i], &m->label_weights[i]);
        if (rc == STATUS_OK && m->label_weights[i] < 0)
            rc = job_tree_type_error(c, n->items[i], "a non-negative number");
        sum += rc == STATUS_OK ? m->label_weights[i] : 0;
        job_tree_pop(c, at);
    }
    if (rc == STATUS_OK && !(sum > 0))
        rc = job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                           "%s: label_weights are all 0: no label would count", c->path);
    job_tree_pop(c, old);
    m->n_label_weights = rc == STATUS_OK ? (int)n->n : 0;
    if (rc != STATUS_OK) {
        free(m->label_weights);
        m->label_weights = NULL;
    }
    return rc;
}

static int compare_floats(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* auc's thresholds as a list: 1 to JOB_MAX_AUC_THRESHOLDS - 2 numbers from 0 to 1, kept sorted
 * (Keras sorts them); num_thresholds becomes their count + 2, Keras's, and a num_thresholds given
 * beside them must say the same. */
static status_t parse_auc_thresholds(job_ctx_t *c, const job_node_t *opts, job_metric_t *m)
{
    const job_node_t *n = job_tree_child(opts, "thresholds");
    size_t old;
    status_t rc = STATUS_OK;

    if (!job_tree_given(n))
        return STATUS_OK;
    old = job_tree_push_key(c, "thresholds");
    if (n->kind != JOB_NODE_SEQ || n->n == 0 || n->n > JOB_MAX_AUC_THRESHOLDS - 2)
        rc = job_tree_type_error(c, n, "a list of 1 to 9998 numbers from 0 to 1");
    if (rc == STATUS_OK && (m->threshold_list = calloc(n->n, sizeof(float))) == NULL)
        rc = status_fail(c->err, STATUS_NO_MEMORY, "%s: out of memory", c->file);
    for (size_t i = 0; rc == STATUS_OK && i < n->n; i++) {
        size_t at = job_tree_push_index(c, i);
        double v = 0;
        rc = job_tree_double(c, n->items[i], &v);
        if (rc == STATUS_OK && !(v >= 0 && v <= 1))
            rc = job_tree_type_error(c, n->items[i], "a number from 0 to 1");
        m->threshold_list[i] = (float)v;
        job_tree_pop(c, at);
    }
    if (rc == STATUS_OK && job_tree_given(job_tree_child(opts, "num_thresholds")) &&
        m->thresholds != (int)n->n + 2)
        rc = job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                           "%s: num_thresholds %d beside %zu thresholds: it is their count + 2 "
                           "(give one of the two)",
                           c->path, m->thresholds, n->n);
    job_tree_pop(c, old);
    if (rc != STATUS_OK) {
        free(m->threshold_list);
        m->threshold_list = NULL;
        return rc;
    }
    qsort(m->threshold_list, n->n, sizeof(float), compare_floats);
    m->thresholds = (int)n->n + 2;
    return STATUS_OK;
}

/* precision's and recall's thresholds: one number from 0 to 1, or a list of 1 to
 * JOB_MAX_METRICS of them (*ret_n: their count; 0 when absent). */
static status_t parse_pr_thresholds(job_ctx_t *c, const job_node_t *opts, double *ret, int *ret_n)
{
    const job_node_t *n = job_tree_child(opts, "thresholds");
    size_t old;
    status_t rc = STATUS_OK;

    *ret_n = 0;
    if (!job_tree_given(n))
        return STATUS_OK;
    old = job_tree_push_key(c, "thresholds");
    if (n->kind != JOB_NODE_SEQ) {
        rc = job_tree_double(c, n, &ret[0]);
        *ret_n = 1;
    } else if (n->n == 0 || n->n > JOB_MAX_METRICS) {
        rc = job_tree_type_error(c, n, "a number from 0 to 1, or a list of 1 to 16 of them");
    } else {
        for (size_t i = 0; rc == STATUS_OK && i < n->n; i++) {
            size_t at = job_tree_push_index(c, i);
            rc = job_tree_double(c, n->items[i], &ret[i]);
            job_tree_pop(c, at);
        }
        *ret_n = (int)n->n;
    }
    for (int i = 0; rc == STATUS_OK && i < *ret_n; i++)
        if (!(ret[i] >= 0 && ret[i] <= 1))
            rc = job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                               "%s: thresholds must be numbers from 0 to 1, got %g", c->path,
                               ret[i]);
    job_tree_pop(c, old);
    return rc;
}

/* The options of one metric beyond accuracy (m->kind and m->name set); precision and recall at
 * several thresholds leave them in ret_list[*ret_n] (*ret_n 0 otherwise; parse_one makes a
 * metric of each). */
static status_t parse_other(job_ctx_t *c, const job_node_t *opts, const job_t *job, int output,
                            job_metric_t *m, double *ret_list, int *ret_n)
{
    static const char *const topk_keys[] = {"name", "k"};
    static const char *const auc_keys[] = {
        "name",        "num_thresholds", "curve",         "summation_method",
        "multi_label", "num_labels",     "label_weights", "thresholds"};
    static const char *const pr_keys[] = {"name", "thresholds", "class_id", "top_k"};
    static const char *const name_keys[] = {"name"};
    const char *name = NULL;
    double threshold = 0.5;

    *ret_n = 0;
    m->k = 5;
    m->class_id = -1;
    m->thresholds = 200;
    switch (m->kind) {
    case JOB_METRIC_TOP_K:
        STATUS_CHECK(job_tree_check_map(c, opts, topk_keys, JOB_N_OF(topk_keys), true));
        STATUS_CHECK(job_tree_get_int(c, opts, "k", false, 1, &m->k));
        break;
    case JOB_METRIC_AUC: {
        int curve = JOB_AUC_ROC, summation = JOB_AUC_INTERPOLATION;
        STATUS_CHECK(job_tree_check_map(c, opts, auc_keys, JOB_N_OF(auc_keys), true));
        STATUS_CHECK(job_tree_get_int(c, opts, "num_thresholds", false, 2, &m->thresholds));
        if (m->thresholds > JOB_MAX_AUC_THRESHOLDS)
            return job_tree_fail(c, STATUS_BAD_CONFIG, opts->line,
                                 "%s: num_thresholds may be at most %d, got %d", c->path,
                                 JOB_MAX_AUC_THRESHOLDS, m->thresholds);
        STATUS_CHECK(get_choice_nocase(c, opts, "curve", auc_curves, JOB_N_OF(auc_curves), &curve));
        STATUS_CHECK(get_choice_nocase(c, opts, "summation_method", auc_summations,
                                       JOB_N_OF(auc_summations), &summation));
        m->curve = (job_auc_curve_t)curve;
        m->summation = (job_auc_summation_t)summation;
        bool multi_label = false;
        STATUS_CHECK(job_tree_get_bool(c, opts, "multi_label", &multi_label));
        STATUS_CHECK(job_tree_get_int(c, opts, "num_labels", false, 1, &m->num_labels));
        /* the sums' room is fixed before the model is built: num_labels, or the output's
         * width where its Dense layer says it (Keras infers it from the first batch) */
        if (multi_label && m->num_labels == 0)
            m->num_labels = output_units(&job->model, output);
        if (multi_label != (m->num_labels > 0))
            return job_tree_fail(c, STATUS_BAD_CONFIG, opts->line, "%s: %s", c->path,
                                 multi_label ? "auc with multi_label: true needs num_labels (the "
                                               "output's values, one curve each) where its "
                                               "layers do not say it (a Dense's units, a "
                                               "convolution's filters)"
                                             : "num_labels is for auc with multi_label: true");
        STATUS_CHECK(parse_label_weights(c, opts, m));
        STATUS_CHECK(parse_auc_thresholds(c, opts, m));
        if (multi_label && m->label_weights != NULL && m->n_label_weights != m->num_labels)
            return job_tree_fail(c, STATUS_BAD_CONFIG, opts->line,
                                 "%s: label_weights has %d weights for multi_label's %d labels",
                                 c->path, m->n_label_weights, m->num_labels);
        if ((uint64_t)m->thresholds * (uint64_t)(multi_label ? m->num_labels : 1) * 2 >
            JOB_MAX_METRIC_SUMS)
            return job_tree_fail(c, STATUS_BAD_CONFIG, opts->line,
                                 "%s: auc keeps 2 x num_thresholds x num_labels sums, at most %d",
                                 c->path, JOB_MAX_METRIC_SUMS);
        break;
    }
    case JOB_METRIC_PRECISION:
    case JOB_METRIC_RECALL:
        STATUS_CHECK(job_tree_check_map(c, opts, pr_keys, JOB_N_OF(pr_keys), true));
        STATUS_CHECK(parse_pr_thresholds(c, opts, ret_list, ret_n));
        if (*ret_n == 1) /* one, in a list or not: Keras's metric of one value */
            threshold = ret_list[0];
        *ret_n = *ret_n > 1 ? *ret_n : 0;
        STATUS_CHECK(job_tree_get_int(c, opts, "class_id", false, 0, &m->class_id));
        /* top_k: only an example's k highest predictions may count as positive, whatever
         * their values unless thresholds is given too (Keras's default threshold is then
         * -inf, not 0.5) */
        STATUS_CHECK(job_tree_get_int(c, opts, "top_k", false, 1, &m->top_k));
        if (m->top_k > 0 && !job_tree_given(job_tree_child(opts, "thresholds")))
            threshold = -INFINITY;
        break;
    default:
        STATUS_CHECK(job_tree_check_map(c, opts, name_keys, JOB_N_OF(name_keys), true));
        break;
    }
    m->threshold = (float)threshold;
    STATUS_CHECK(job_tree_get_string(c, opts, "name", false, &name));
    if (name != NULL) {
        if (name[0] == '\0' || strlen(name) >= sizeof(m->name))
            return job_tree_fail(c, STATUS_BAD_CONFIG, opts->line,
                                 "%s: name must be 1 to %zu characters", c->path,
                                 sizeof(m->name) - 1);
        snprintf(m->name, sizeof(m->name), "%s", name);
    }
    switch (m->kind) {
    case JOB_METRIC_TOP_K:
    case JOB_METRIC_MAE:
    case JOB_METRIC_MSE:
    case JOB_METRIC_RMSE:
    case JOB_METRIC_OUTPUT_LOSS:
    case JOB_METRIC_OUTPUT_ACCURACY:
        m->width = 2;
        break;
    case JOB_METRIC_AUC:
        m->width = 2 * (size_t)m->thresholds * (size_t)(m->num_labels > 0 ? m->num_labels : 1);
        break;
    case JOB_METRIC_PRECISION:
    case JOB_METRIC_RECALL:
        m->width = 3;
        break;
    }
    return STATUS_OK;
}

/* The shortest text of a float32 that reads back as it ("0.3", not 0.300000012). */
static void float_text(char *buf, size_t size, float v)
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, size, "%.*g", digits, (double)v);
        if ((float)strtod(buf, NULL) == v)
            return;
    }
}

/* One entry of `metrics:`. */
static status_t parse_one(job_ctx_t *c, const job_node_t *n, job_t *job, int output)
{
    static const char *const threshold_keys[] = {"threshold"};
    const job_node_t *opts = NULL;
    size_t old = c->path_len;
    int i;
    status_t rc =
        job_tree_variant(c, n, "metric", metric_names, JOB_N_OF(metric_names), true, &i, &opts);

    if (rc == STATUS_OK && i < FIRST_OTHER) { /* accuracy, under one of its names; or loss */
        job->metric_accuracy |= i != 1;
        rc = job_tree_check_map(c, opts, threshold_keys, i == 4 ? 1 : 0, true);
        double t = 0.5;
        if (rc == STATUS_OK)
            rc = job_tree_get_double(c, opts, "threshold", false, &t);
        if (rc == STATUS_OK && !(t >= 0 && t <= 1))
            rc = job_tree_fail(c, STATUS_BAD_CONFIG, opts->line,
                               "%s: threshold must be from 0 to 1, got %g", c->path, t);
        if (rc == STATUS_OK && opts != NULL)
            job->accuracy_threshold = (float)t;
    } else if (rc == STATUS_OK) {
        job_metric_t *m = &job->metrics[job->n_metrics];
        if (job->n_metrics == JOB_MAX_METRICS)
            rc = job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                               "%s: at most %d metrics besides "
                               "accuracy",
                               c->path, JOB_MAX_METRICS);
        double list[JOB_MAX_METRICS];
        int n_list = 0;
        if (rc == STATUS_OK) {
            *m = (job_metric_t){.kind = metric_kinds[i - FIRST_OTHER]};
            snprintf(m->name, sizeof(m->name), "%s", metric_reported[i - FIRST_OTHER]);
            rc = parse_other(c, opts, job, output, m, list, &n_list);
        }
        /* several thresholds: a metric each, "precision_0.3", after the first */
        if (rc == STATUS_OK && job->n_metrics + n_list > JOB_MAX_METRICS)
            rc = job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                               "%s: its %d thresholds are a metric each, and a job keeps at most "
                               "%d metrics besides accuracy",
                               c->path, n_list, JOB_MAX_METRICS);
        job_metric_t one = rc == STATUS_OK ? *m : (job_metric_t){0}; /* each threshold's start */
        for (int t = 0; rc == STATUS_OK && t < (n_list > 0 ? n_list : 1); t++) {
            job_metric_t *e = &job->metrics[job->n_metrics];
            if (n_list > 0) {
                *e = one;
                snprintf(e->list_name, sizeof(e->list_name), "%s", one.name);
                e->list_at = t;
                e->list_len = n_list;
                e->threshold = (float)list[t];
                char value[32];
                float_text(value, sizeof(value), e->threshold);
                if ((size_t)snprintf(e->name, sizeof(e->name), "%s_%s", one.name, value) >=
                    sizeof(e->name))
                    rc = job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                                       "%s: the name of its threshold %s, %s_%s, is longer than "
                                       "%zu characters",
                                       c->path, value, one.name, value, sizeof(e->name) - 1);
            }
            /* (several outputs: the names are checked once their output's prefixes them) */
            for (int k = 0; rc == STATUS_OK && job->model.n_outputs < 2 && k < job->n_metrics; k++)
                if (strcmp(job->metrics[k].name, e->name) == 0)
                    rc = job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                                       "%s: a second metric named '%s': give one a name of its "
                                       "own ({%s: {name: ...}})%s",
                                       c->path, e->name, metric_names[i],
                                       n_list > 0 ? ", or list each threshold once" : "");
            if (rc == STATUS_OK && job->metric_width + e->width > JOB_MAX_METRIC_SUMS)
                rc = job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                                   "%s: the metrics keep more than %d sums in all (AUC's: 2 x "
                                   "num_thresholds x num_labels each)",
                                   c->path, JOB_MAX_METRIC_SUMS);
            if (rc == STATUS_OK) {
                e->offset = job->metric_width;
                job->metric_width += e->width;
                job->n_metrics++;
            }
        }
    }
    job_tree_pop(c, old);
    return rc;
}

/* The metrics of output k of a model of several: parsed as a model of one's, each then measuring
 * that output under its name ("cls_accuracy"; accuracy becomes a metric of its own). */
static status_t parse_output_metrics(job_ctx_t *c, const job_node_t *n, job_t *job, int k)
{
    const char *out = job->model.output_names[k];
    const job_node_t *const *items =
        n->kind == JOB_NODE_SEQ ? (const job_node_t *const *)n->items : &n;
    size_t count = n->kind == JOB_NODE_SEQ ? n->n : 1;

    for (size_t i = 0; i < count; i++) {
        size_t old = n->kind == JOB_NODE_SEQ ? job_tree_push_index(c, i) : c->path_len;
        int first = job->n_metrics;
        status_t rc;
        job->metric_accuracy = false;
        job->accuracy_threshold = 0.5f;
        rc = parse_one(c, items[i], job, k);
        if (rc == STATUS_OK && job->metric_accuracy) { /* this output's accuracy */
            if (!job_loss_has_accuracy(job->outputs[k].loss))
                rc = job_tree_fail(c, STATUS_BAD_CONFIG, items[i]->line,
                                   "%s: output %s's accuracy is its cross-entropy's, and its "
                                   "loss %s has none",
                                   c->path, out, job_loss_name(job->outputs[k].loss));
            else if (job->accuracy_threshold != 0.5f &&
                     job->outputs[k].loss != JOB_LOSS_BINARY_CROSSENTROPY)
                rc = job_tree_fail(c, STATUS_BAD_CONFIG, items[i]->line,
                                   "%s: output %s's accuracy takes a threshold under "
                                   "binary_crossentropy only (its loss is %s)",
                                   c->path, out, job_loss_name(job->outputs[k].loss));
            else if (job->n_metrics == JOB_MAX_METRICS)
                rc = job_tree_fail(c, STATUS_BAD_CONFIG, items[i]->line, "%s: at most %d metrics",
                                   c->path, JOB_MAX_METRICS);
            else
                job->metrics[job->n_metrics++] =
                    (job_metric_t){.kind = JOB_METRIC_OUTPUT_ACCURACY,
                                   .name = "accuracy",
                                   .threshold = job->accuracy_threshold,
                                   .offset = job->metric_width,
                                   .width = 2};
            job->metric_width += rc == STATUS_OK ? 2 : 0;
        }
        for (int e = first; rc == STATUS_OK && e < job->n_metrics; e++) {
            job_metric_t *m = &job->metrics[e];
            size_t a = strlen(out), b = strlen(m->name);
            if (a + 1 + b >= sizeof(m->name)) {
                rc = job_tree_fail(c, STATUS_BAD_CONFIG, items[i]->line,
                                   "%s: the metric's name with its output's, %s_%s, is longer "
                                   "than %zu characters",
                                   c->path, out, m->name, sizeof(m->name) - 1);
                break;
            }
            memmove(m->name + a + 1, m->name, b + 1); /* "accuracy" -> "cls_accuracy" */
            memcpy(m->name, out, a);
            m->name[a] = '_';
            m->output = k;
            for (int d = 0; rc == STATUS_OK && d < e; d++)
                if (strcmp(job->metrics[d].name, m->name) == 0)
                    rc = job_tree_fail(c, STATUS_BAD_CONFIG, items[i]->line,
                                       "%s: a second metric named '%s'", c->path, m->name);
        }
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
    }
    job->metric_accuracy = false;
    job->accuracy_threshold = 0.5f;
    return STATUS_OK;
}

const char *job_metric_keras_name(const job_t *job, int i)
{
    const job_metric_t *m = &job->metrics[i];

    if (m->list_len > 0)
        return m->list_name;
    if (job->model.n_outputs > 1) {
        const char *out = job->model.output_names[m->output];
        size_t a = strlen(out);
        if (strncmp(m->name, out, a) == 0 && m->name[a] == '_')
            return m->name + a + 1;
    }
    return m->name;
}

/* No two metrics of an output are one Keras metric's name (a list of thresholds is one metric
 * under its name in Keras, which export writes), as Keras's compile would rename one. */
static status_t check_keras_names(job_ctx_t *c, const job_node_t *n, const job_t *job)
{
    for (int i = 0; i < job->n_metrics; i++)
        for (int d = 0; d < i; d++) {
            const job_metric_t *a = &job->metrics[d], *b = &job->metrics[i];
            bool one_list = a->list_len > 0 && b->list_len > 0 && i - b->list_at == d - a->list_at;
            if (a->output == b->output && !one_list &&
                strcmp(job_metric_keras_name(job, d), job_metric_keras_name(job, i)) == 0)
                return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                                     "%s: two metrics named '%s' in Keras (a list of thresholds "
                                     "is one metric there): give one a name of its own",
                                     c->path, job_metric_keras_name(job, i));
        }
    return STATUS_OK;
}

static status_t parse_all(job_ctx_t *c, const job_node_t *n, job_t *job);

status_t job_parse_metrics(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    STATUS_CHECK(parse_all(c, n, job));
    return check_keras_names(c, n, job);
}

static status_t parse_all(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    const job_model_t *model = &job->model;

    if (model->n_outputs > 1) { /* one list an output: in their order, or by their names */
        bool by_name = n->kind == JOB_NODE_MAP;
        if (n->kind == JOB_NODE_SEQ && (int)n->n != model->n_outputs)
            return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                                 "%s: a model of %d outputs takes a list of %d lists of metrics "
                                 "(one an output, in their order) or a mapping of its outputs' "
                                 "names to theirs",
                                 c->path, model->n_outputs, model->n_outputs);
        if (!by_name && n->kind != JOB_NODE_SEQ)
            return job_tree_type_error(c, n,
                                       "a list of lists of metrics, or a mapping of the "
                                       "outputs' names to their metrics");
        for (size_t i = 0; i < n->n; i++) {
            int k = (int)i;
            size_t old;
            status_t rc = STATUS_OK;
            if (by_name) {
                for (k = 0;
                     k < model->n_outputs && strcmp(model->output_names[k], n->entries[i].key) != 0;
                     k++)
                    ;
                if (k == model->n_outputs)
                    return job_tree_fail(c, STATUS_BAD_CONFIG, n->entries[i].value->line,
                                         "%s: the model has no output named '%s'", c->path,
                                         n->entries[i].key);
            }
            old = by_name ? job_tree_push_key(c, n->entries[i].key) : job_tree_push_index(c, i);
            if (!by_name && n->items[i]->kind != JOB_NODE_SEQ) /* Keras 3 wants lists too */
                rc = job_tree_type_error(c, n->items[i], "a list of this output's metrics");
            else
                rc = parse_output_metrics(c, by_name ? n->entries[i].value : n->items[i], job, k);
            job_tree_pop(c, old);
            STATUS_CHECK(rc);
        }
        return STATUS_OK;
    }
    if (n->kind != JOB_NODE_SEQ)
        return parse_one(c, n, job, 0);
    for (size_t k = 0; k < n->n; k++) {
        size_t old = job_tree_push_index(c, k);
        status_t rc = parse_one(c, n->items[k], job, 0);
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
    }
    return STATUS_OK;
}

/* x / y, or 0 where y is 0 (Keras's divide_no_nan) */
static double div0(double x, double y)
{
    return y == 0 ? 0 : x / y;
}

/* AUC from the positives and negatives whose predictions fell in each bucket: at threshold i
 * the predictions of bucket i and above count as positive. */
static double auc_result(const job_metric_t *m, const double *pos, const double *neg)
{
    size_t t = (size_t)m->thresholds;
    double tp_next = 0, fp_next = 0, P = 0, N = 0, sum = 0;

    for (size_t i = 0; i < t; i++) {
        P += pos[i];
        N += neg[i];
    }
    /* from the highest threshold down: (tp, fp) at i + 1, then at i */
    for (size_t i = t - 1; i-- > 0;) {
        double tp1 = tp_next + pos[i + 1], fp1 = fp_next + neg[i + 1];
        double tp0 = tp1 + pos[i], fp0 = fp1 + neg[i];
        double x0, x1, y0, y1, h;

        tp_next = tp1;
        fp_next = fp1;
        if (m->curve == JOB_AUC_PR && m->summation == JOB_AUC_INTERPOLATION) {
            double dtp = tp0 - tp1, p0 = tp0 + fp0, p1 = tp1 + fp1;
            double slope = div0(dtp, fmax(p0 - p1, 0)), intercept = tp1 - slope * p1;
            double ratio = p0 > 0 && p1 > 0 ? div0(p0, fmax(p1, 0)) : 1;
            sum += div0(slope * (dtp + intercept * log(ratio)), P); /* tp + fn: P */
            continue;
        }
        if (m->curve == JOB_AUC_ROC) {
            x0 = div0(fp0, N);
            x1 = div0(fp1, N);
            y0 = div0(tp0, P);
            y1 = div0(tp1, P);
        } else if (m->curve == JOB_AUC_PR) {
            x0 = div0(tp0, P);
            x1 = div0(tp1, P);
            y0 = div0(tp0, tp0 + fp0);
            y1 = div0(tp1, tp1 + fp1);
        } else { /* PRGAIN, with Keras's fixes for no true positives and negative gains */
            double s = div0(P, N);
            x0 = tp0 == 0 ? 0 : fmax(1 - s * div0(P - tp0, tp0), 0);
            x1 = tp1 == 0 ? 0 : fmax(1 - s * div0(P - tp1, tp1), 0);
            y0 = tp0 == 0 ? 1 : 1 - s * div0(fp0, tp0);
            y1 = tp1 == 0 ? 1 : 1 - s * div0(fp1, tp1);
        }
        h = m->summation == JOB_AUC_INTERPOLATION ? (y0 + y1) / 2
            : m->summation == JOB_AUC_MINORING    ? fmin(y0, y1)
                                                  : fmax(y0, y1);
        sum += (x0 - x1) * h;
    }
    return sum;
}

void job_metrics_result(const job_t *job, const double *state, double *ret)
{
    for (int i = 0; i < job->n_metrics; i++) {
        const job_metric_t *m = &job->metrics[i];
        const double *s = state + m->offset;
        switch (m->kind) {
        case JOB_METRIC_TOP_K:
        case JOB_METRIC_MAE:
        case JOB_METRIC_MSE:
        case JOB_METRIC_OUTPUT_LOSS:
        case JOB_METRIC_OUTPUT_ACCURACY:
            ret[i] = div0(s[0], s[1]);
            break;
        case JOB_METRIC_RMSE:
            ret[i] = sqrt(div0(s[0], s[1]));
            break;
        case JOB_METRIC_PRECISION:
            ret[i] = div0(s[0], s[0] + s[1]);
            break;
        case JOB_METRIC_RECALL:
            ret[i] = div0(s[0], s[0] + s[2]);
            break;
        case JOB_METRIC_AUC:
            if (m->num_labels > 0) { /* multi_label: the (weighted) mean of the outputs' curves */
                double sum = 0, weights = 0;
                size_t t = (size_t)m->thresholds;
                for (int j = 0; j < m->num_labels; j++) {
                    double w = m->label_weights != NULL ? m->label_weights[j] : 1;
                    sum += w * auc_result(m, s + 2 * t * (size_t)j, s + 2 * t * (size_t)j + t);
                    weights += w;
                }
                ret[i] = sum / weights;
            } else {
                ret[i] = auc_result(m, s, s + m->thresholds);
            }
            break;
        }
    }
}

static uint64_t fnv(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    return h;
}

uint64_t job_metrics_signature(const job_t *job)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);

    for (int i = 0; i < job->n_metrics; i++) {
        const job_metric_t *m = &job->metrics[i];
        int ints[6] = {(int)m->kind,  m->k,          m->class_id,
                       m->thresholds, (int)m->curve, (int)m->summation};
        uint64_t sizes[2] = {m->offset, m->width};
        h = fnv(h, m->name, strlen(m->name) + 1);
        h = fnv(h, ints, sizeof(ints));
        h = fnv(h, &m->threshold, sizeof(m->threshold));
        h = fnv(h, sizes, sizeof(sizes));
        if (m->top_k > 0) /* (none: the signature of the sums kept before top_k existed) */
            h = fnv(h, &m->top_k, sizeof(m->top_k));
        if (m->label_weights != NULL) /* the counts they weighed */
            h = fnv(h, m->label_weights, (size_t)m->n_label_weights * sizeof(double));
        if (m->threshold_list != NULL) /* the buckets they made */
            h = fnv(h, m->threshold_list, (size_t)(m->thresholds - 2) * sizeof(float));
    }
    return h;
}
