#define _POSIX_C_SOURCE 200809L
#include "export.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "files/atomic.h"
#include "files/keras_archive.h"
#include "files/safetensors.h"
#include "optim/optimizer.h"

/* ---- config.json ------------------------------------------------------------------------------
 */

/* (gelu_approximate has none: export_model refuses it) */
static const char *const keras_activation[JOB_ACT_COUNT_] = {
    [JOB_ACT_LINEAR] = "linear",
    [JOB_ACT_RELU] = "relu",
    [JOB_ACT_SIGMOID] = "sigmoid",
    [JOB_ACT_TANH] = "tanh",
    [JOB_ACT_SOFTMAX] = "softmax",
    [JOB_ACT_GELU] = "gelu",
    [JOB_ACT_ELU] = "elu",
    [JOB_ACT_SELU] = "selu",
    [JOB_ACT_SOFTPLUS] = "softplus",
    [JOB_ACT_SOFTSIGN] = "softsign",
    [JOB_ACT_SWISH] = "silu",
    [JOB_ACT_LEAKY_RELU] = "leaky_relu",
    [JOB_ACT_RELU6] = "relu6",
    [JOB_ACT_HARD_SIGMOID] = "hard_sigmoid",
    [JOB_ACT_HARD_SWISH] = "hard_silu",
    [JOB_ACT_EXPONENTIAL] = "exponential",
    [JOB_ACT_MISH] = "mish",
    [JOB_ACT_LOG_SOFTMAX] = "log_softmax",
};

static cJSON *ints(const int *v, int n, bool batch)
{
    cJSON *a = cJSON_CreateArray();

    if (batch)
        cJSON_AddItemToArray(a, cJSON_CreateNull());
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* {"module": MODULE, "class_name": CLASS, "config": config, "registered_name": null} */
static cJSON *object(const char *module, const char *class_name, cJSON *config)
{
    cJSON *o = cJSON_CreateObject();

    cJSON_AddStringToObject(o, "module", module);
    cJSON_AddStringToObject(o, "class_name", class_name);
    cJSON_AddItemToObject(o, "config", config);
    cJSON_AddNullToObject(o, "registered_name");
    return o;
}

/* A 1D layer's window: the width of [1, width]. */
static bool one_d(const job_layer_t *l)
{
    return l->kind == JOB_LAYER_CONV1D || l->kind == JOB_LAYER_MAX_POOLING1D ||
           l->kind == JOB_LAYER_AVERAGE_POOLING1D;
}

static void add_window(cJSON *c, const job_layer_t *l)
{
    cJSON_AddItemToObject(c, "strides", ints(l->strides + one_d(l), one_d(l) ? 1 : 2, false));
    cJSON_AddStringToObject(c, "padding", l->padding_same ? "same" : "valid");
    cJSON_AddStringToObject(c, "data_format", "channels_last");
}

/* A constraint as Keras 3 serializes it (null when there is none). */
static cJSON *constraint(const job_constraint_t *k)
{
    cJSON *o, *c, *axes;

    if (k->kind == JOB_CONSTRAINT_NONE)
        return cJSON_CreateNull();
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "module", "keras.constraints");
    cJSON_AddStringToObject(o, "class_name", job_constraint_classes[k->kind - 1]);
    c = cJSON_AddObjectToObject(o, "config");
    if (k->kind != JOB_CONSTRAINT_NON_NEG) {
        if (k->kind != JOB_CONSTRAINT_UNIT_NORM)
            cJSON_AddNumberToObject(c, "max_value", k->max_value);
        if (k->kind == JOB_CONSTRAINT_MIN_MAX_NORM) {
            cJSON_AddNumberToObject(c, "min_value", k->min_value);
            cJSON_AddNumberToObject(c, "rate", k->rate);
        }
        axes = cJSON_AddArrayToObject(c, "axis");
        for (int d = 0; d < JOB_MAX_RANK; d++)
            if ((k->axes >> d) & 1)
                cJSON_AddItemToArray(axes, cJSON_CreateNumber(d));
    }
    cJSON_AddNullToObject(o, "registered_name");
    return o;
}

/* A regularizer as Keras 3 serializes it (null when there is none). */
static cJSON *regularizer(const job_regularizer_t *r)
{
    cJSON *o, *c;
    const char *cls = r->l1 > 0 && r->l2 > 0 ? "L1L2" : r->l1 > 0 ? "L1" : "L2";

    if (r->l1 == 0 && r->l2 == 0)
        return cJSON_CreateNull();
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "module", "keras.regularizers");
    cJSON_AddStringToObject(o, "class_name", cls);
    c = cJSON_AddObjectToObject(o, "config");
    if (r->l1 > 0)
        cJSON_AddNumberToObject(c, "l1", r->l1);
    if (r->l2 > 0)
        cJSON_AddNumberToObject(c, "l2", r->l2);
    cJSON_AddNullToObject(o, "registered_name");
    return o;
}

/* A weighted layer's activation, use_bias, and its kernel's ("kernel" or "depthwise") and bias's
 * regularizers and constraints, by Keras's names. */
static void add_weights(cJSON *c, const job_layer_t *l, const char *kernel)
{
    char key[40];

    cJSON_AddStringToObject(c, "activation", keras_activation[l->activation]);
    cJSON_AddBoolToObject(c, "use_bias", l->use_bias);
    snprintf(key, sizeof(key), "%s_regularizer", kernel);
    cJSON_AddItemToObject(c, key, regularizer(&l->kernel_reg));
    cJSON_AddItemToObject(c, "bias_regularizer", regularizer(&l->bias_reg));
    snprintf(key, sizeof(key), "%s_constraint", kernel);
    cJSON_AddItemToObject(c, key, constraint(&l->kernel_constraint));
    cJSON_AddItemToObject(c, "bias_constraint", constraint(&l->bias_constraint));
}

/* A normalization's gamma and beta regularizers and constraints (its kernel's and bias's). */
static void add_gamma_beta(cJSON *c, const job_layer_t *l)
{
    cJSON_AddItemToObject(c, "gamma_regularizer", regularizer(&l->kernel_reg));
    cJSON_AddItemToObject(c, "beta_regularizer", regularizer(&l->bias_reg));
    cJSON_AddItemToObject(c, "gamma_constraint", constraint(&l->kernel_constraint));
    cJSON_AddItemToObject(c, "beta_constraint", constraint(&l->bias_constraint));
}

/* One layer's config: the options Tessera trained it with (initializers are left to Keras's
 * defaults: they do not matter once the weights are loaded). */
static cJSON *layer_config(const job_layer_t *l)
{
    cJSON *c = cJSON_CreateObject();

    cJSON_AddStringToObject(c, "name", l->name);
    /* Keras's SpatialDropout1D/2D take no `trainable` (their configs have none) */
    if (l->kind != JOB_LAYER_SPATIAL_DROPOUT1D && l->kind != JOB_LAYER_SPATIAL_DROPOUT2D)
        cJSON_AddBoolToObject(c, "trainable", true);
    if (l->activity_reg.l1 != 0 || l->activity_reg.l2 != 0) /* Keras writes it when set */
        cJSON_AddItemToObject(c, "activity_regularizer", regularizer(&l->activity_reg));
    switch (l->kind) {
    case JOB_LAYER_DENSE:
        cJSON_AddNumberToObject(c, "units", l->units);
        add_weights(c, l, "kernel");
        break;
    case JOB_LAYER_CONV2D:
    case JOB_LAYER_CONV1D:
        cJSON_AddNumberToObject(c, "filters", l->filters);
        cJSON_AddItemToObject(c, "kernel_size",
                              ints(l->kernel_size + one_d(l), one_d(l) ? 1 : 2, false));
        add_window(c, l);
        add_weights(c, l, "kernel");
        break;
    case JOB_LAYER_MAX_POOLING2D:
    case JOB_LAYER_AVERAGE_POOLING2D:
    case JOB_LAYER_MAX_POOLING1D:
    case JOB_LAYER_AVERAGE_POOLING1D:
        cJSON_AddItemToObject(c, "pool_size",
                              ints(l->pool_size + one_d(l), one_d(l) ? 1 : 2, false));
        add_window(c, l);
        break;
    case JOB_LAYER_RESHAPE:
        cJSON_AddItemToObject(c, "target_shape", ints(l->target_shape, l->target_rank, false));
        break;
    case JOB_LAYER_DEPTHWISE_CONV2D:
    case JOB_LAYER_SEPARABLE_CONV2D:
        if (l->kind == JOB_LAYER_SEPARABLE_CONV2D)
            cJSON_AddNumberToObject(c, "filters", l->filters);
        cJSON_AddNumberToObject(c, "depth_multiplier", l->depth_multiplier);
        cJSON_AddItemToObject(c, "kernel_size", ints(l->kernel_size, 2, false));
        add_window(c, l);
        add_weights(c, l, "depthwise");
        if (l->kind == JOB_LAYER_SEPARABLE_CONV2D) {
            cJSON_AddItemToObject(c, "pointwise_regularizer", regularizer(&l->pointwise_reg));
            cJSON_AddItemToObject(c, "pointwise_constraint", constraint(&l->pointwise_constraint));
        }
        break;
    case JOB_LAYER_PRELU: {
        cJSON *axes = cJSON_CreateArray();
        for (int i = 1; i <= JOB_MAX_RANK; i++)
            if ((l->shared_axes >> i) & 1)
                cJSON_AddItemToArray(axes, cJSON_CreateNumber(i));
        if (cJSON_GetArraySize(axes) == 0) {
            cJSON_Delete(axes);
            cJSON_AddNullToObject(c, "shared_axes");
        } else {
            cJSON_AddItemToObject(c, "shared_axes", axes);
        }
        break;
    }
    case JOB_LAYER_GAUSSIAN_NOISE:
        cJSON_AddNumberToObject(c, "stddev", l->stddev);
        if (l->dropout_seed != 0)
            cJSON_AddNumberToObject(c, "seed", (double)l->dropout_seed);
        break;
    case JOB_LAYER_DROPOUT:
    case JOB_LAYER_SPATIAL_DROPOUT1D:
    case JOB_LAYER_SPATIAL_DROPOUT2D:
        cJSON_AddNumberToObject(c, "rate", l->rate);
        if (l->dropout_seed != 0)
            cJSON_AddNumberToObject(c, "seed", (double)l->dropout_seed);
        break;
    case JOB_LAYER_EMBEDDING:
        cJSON_AddNumberToObject(c, "input_dim", l->input_dim);
        cJSON_AddNumberToObject(c, "output_dim", l->output_dim);
        cJSON_AddBoolToObject(c, "mask_zero", l->mask_zero);
        break;
    case JOB_LAYER_ACTIVATION:
        cJSON_AddStringToObject(c, "activation", keras_activation[l->activation]);
        break;
    case JOB_LAYER_RESCALING:
        cJSON_AddNumberToObject(c, "scale", l->scale);
        cJSON_AddNumberToObject(c, "offset", l->offset);
        break;
    case JOB_LAYER_LAYER_NORMALIZATION:
        cJSON_AddItemToObject(c, "axis", ints((const int[]){-1}, 1, false));
        cJSON_AddNumberToObject(c, "epsilon", l->epsilon);
        cJSON_AddBoolToObject(c, "center", l->center);
        cJSON_AddBoolToObject(c, "scale", l->scale_gamma);
        cJSON_AddBoolToObject(c, "rms_scaling", false);
        add_gamma_beta(c, l);
        break;
    case JOB_LAYER_BATCH_NORMALIZATION:
        cJSON_AddNumberToObject(c, "axis", -1);
        cJSON_AddNumberToObject(c, "momentum", l->momentum);
        cJSON_AddNumberToObject(c, "epsilon", l->epsilon);
        cJSON_AddBoolToObject(c, "center", l->center);
        cJSON_AddBoolToObject(c, "scale", l->scale_gamma);
        cJSON_AddBoolToObject(c, "synchronized", l->synchronized);
        add_gamma_beta(c, l);
        break;
    case JOB_LAYER_RELU:
        if (isnan(l->max_value))
            cJSON_AddNullToObject(c, "max_value");
        else
            cJSON_AddNumberToObject(c, "max_value", l->max_value);
        cJSON_AddNumberToObject(c, "negative_slope", l->negative_slope);
        cJSON_AddNumberToObject(c, "threshold", l->threshold);
        break;
    case JOB_LAYER_LEAKY_RELU:
        cJSON_AddNumberToObject(c, "negative_slope", l->negative_slope);
        break;
    case JOB_LAYER_ELU:
        cJSON_AddNumberToObject(c, "alpha", l->alpha);
        break;
    case JOB_LAYER_SOFTMAX:
        cJSON_AddNumberToObject(c, "axis", -1);
        break;
    case JOB_LAYER_ZERO_PADDING2D:
    case JOB_LAYER_CROPPING2D: {
        cJSON *m =
            cJSON_AddArrayToObject(c, l->kind == JOB_LAYER_ZERO_PADDING2D ? "padding" : "cropping");
        cJSON_AddItemToArray(m, ints(l->margins, 2, false));
        cJSON_AddItemToArray(m, ints(l->margins + 2, 2, false));
        cJSON_AddStringToObject(c, "data_format", "channels_last");
        break;
    }
    case JOB_LAYER_UP_SAMPLING2D:
        cJSON_AddItemToObject(c, "size", ints(l->size, 2, false));
        cJSON_AddStringToObject(c, "data_format", "channels_last");
        cJSON_AddStringToObject(c, "interpolation", l->bilinear ? "bilinear" : "nearest");
        break;
    case JOB_LAYER_PERMUTE:
        cJSON_AddItemToObject(c, "dims", ints(l->dims, l->n_dims, false));
        break;
    case JOB_LAYER_REPEAT_VECTOR:
        cJSON_AddNumberToObject(c, "n", l->repeat);
        break;
    case JOB_LAYER_CONCATENATE:
        cJSON_AddNumberToObject(c, "axis", l->axis);
        break;
    case JOB_LAYER_ADD:
    case JOB_LAYER_SUBTRACT:
    case JOB_LAYER_MULTIPLY:
    case JOB_LAYER_AVERAGE:
    case JOB_LAYER_MAXIMUM:
    case JOB_LAYER_MINIMUM:
    case JOB_LAYER_FLATTEN:
    case JOB_LAYER_GLOBAL_AVERAGE_POOLING1D:
    case JOB_LAYER_GLOBAL_AVERAGE_POOLING2D:
    case JOB_LAYER_GLOBAL_MAX_POOLING1D:
    case JOB_LAYER_GLOBAL_MAX_POOLING2D:
    case JOB_LAYER_KINDS:
        break;
    }
    return object("keras.layers", job_layer_keras_class(l->kind), c);
}

/* A Keras float option that is None when off (0). */
static void add_or_null(cJSON *c, const char *key, double v)
{
    if (v != 0)
        cJSON_AddNumberToObject(c, key, v);
    else
        cJSON_AddNullToObject(c, key);
}

static cJSON *optimizer_config(const optimizer_config_t *o, int64_t iterations)
{
    cJSON *c = cJSON_CreateObject();

    cJSON_AddStringToObject(c, "name", optimizer_keras_name(o->kind));
    /* The rate the next step would take: a schedule is not carried over. */
    cJSON_AddNumberToObject(c, "learning_rate", optimizer_learning_rate(o, iterations));
    add_or_null(c, "weight_decay", o->weight_decay);
    add_or_null(c, "clipnorm", o->clipnorm);
    add_or_null(c, "global_clipnorm", o->global_clipnorm);
    add_or_null(c, "clipvalue", o->clipvalue);
    switch (o->kind) {
    case OPTIMIZER_SGD:
        cJSON_AddNumberToObject(c, "momentum", o->momentum);
        cJSON_AddBoolToObject(c, "nesterov", o->nesterov);
        break;
    case OPTIMIZER_ADAM:
    case OPTIMIZER_ADAMW:
    case OPTIMIZER_NADAM:
    case OPTIMIZER_ADAMAX:
        cJSON_AddNumberToObject(c, "beta_1", o->beta_1);
        cJSON_AddNumberToObject(c, "beta_2", o->beta_2);
        cJSON_AddNumberToObject(c, "epsilon", o->epsilon);
        if (o->kind == OPTIMIZER_ADAM || o->kind == OPTIMIZER_ADAMW)
            cJSON_AddBoolToObject(c, "amsgrad", o->amsgrad);
        break;
    case OPTIMIZER_ADAGRAD:
        cJSON_AddNumberToObject(c, "initial_accumulator_value", o->initial_accumulator_value);
        cJSON_AddNumberToObject(c, "epsilon", o->epsilon);
        break;
    case OPTIMIZER_RMSPROP:
        cJSON_AddNumberToObject(c, "rho", o->rho);
        cJSON_AddNumberToObject(c, "momentum", o->momentum);
        cJSON_AddNumberToObject(c, "epsilon", o->epsilon);
        cJSON_AddBoolToObject(c, "centered", o->centered);
        break;
    case OPTIMIZER_LION:
        cJSON_AddNumberToObject(c, "beta_1", o->beta_1);
        cJSON_AddNumberToObject(c, "beta_2", o->beta_2);
        break;
    case OPTIMIZER_FTRL:
        cJSON_AddNumberToObject(c, "learning_rate_power", o->learning_rate_power);
        cJSON_AddNumberToObject(c, "initial_accumulator_value", o->initial_accumulator_value);
        cJSON_AddNumberToObject(c, "l1_regularization_strength", o->l1);
        cJSON_AddNumberToObject(c, "l2_regularization_strength", o->l2);
        cJSON_AddNumberToObject(c, "l2_shrinkage_regularization_strength", o->l2_shrinkage);
        cJSON_AddNumberToObject(c, "beta", o->beta);
        break;
    case OPTIMIZER_KINDS:
        break;
    }
    return object("keras.optimizers", optimizer_keras_class(o->kind), c);
}

/* Output k's loss (job_t.outputs; a job of one output may leave them empty: its fields). */
static job_output_t output_loss(const job_t *job, int k)
{
    if (job->n_outputs > 0)
        return job->outputs[k];
    return (job_output_t){.loss = job->loss,
                          .from_logits = job->from_logits,
                          .huber_delta = job->huber_delta,
                          .label_smoothing = job->label_smoothing,
                          .weight = 1.0};
}

static cJSON *loss_config(const job_t *job, const job_output_t *o)
{
    static const char *const classes[] = {
        [JOB_LOSS_MSE] = "MeanSquaredError",
        [JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY] = "SparseCategoricalCrossentropy",
        [JOB_LOSS_BINARY_CROSSENTROPY] = "BinaryCrossentropy",
        [JOB_LOSS_MAE] = "MeanAbsoluteError",
        [JOB_LOSS_HUBER] = "Huber",
        [JOB_LOSS_LOG_COSH] = "LogCosh",
        [JOB_LOSS_HINGE] = "Hinge",
        [JOB_LOSS_SQUARED_HINGE] = "SquaredHinge",
        [JOB_LOSS_POISSON] = "Poisson",
        [JOB_LOSS_CATEGORICAL_CROSSENTROPY] = "CategoricalCrossentropy",
        [JOB_LOSS_KL_DIVERGENCE] = "KLDivergence",
    };
    cJSON *c = cJSON_CreateObject();

    /* Keras's default names are the job's, but for Huber's */
    cJSON_AddStringToObject(c, "name",
                            o->loss == JOB_LOSS_HUBER ? "huber_loss" : job_loss_name(o->loss));
    if (job->loss_unreduced) /* Keras's None */
        cJSON_AddNullToObject(c, "reduction");
    else
        cJSON_AddStringToObject(c, "reduction", job->loss_sum ? "sum" : "sum_over_batch_size");
    if (job_loss_has_accuracy(o->loss))
        cJSON_AddBoolToObject(c, "from_logits", o->from_logits);
    if (o->loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY || o->loss == JOB_LOSS_BINARY_CROSSENTROPY)
        cJSON_AddNumberToObject(c, "label_smoothing", o->label_smoothing);
    if (o->loss == JOB_LOSS_HUBER)
        cJSON_AddNumberToObject(c, "delta", o->huber_delta);
    return object("keras.losses", classes[o->loss], c);
}

/* A threshold on probabilities as Keras must apply it to this model's outputs: a binary
 * model's logits (from_logits) are above logit(t) where their sigmoid is above t. */
static double output_threshold(const job_output_t *o, double t)
{
    if (!o->from_logits)
        return t;
    return t <= 0 ? -1e30 : t >= 1 ? 1e30 : log(t / (1 - t));
}

/* The Keras metric that computes what Tessera's does on the exported model's outputs, or NULL
 * (with a warning naming it) where Keras has none: AUC, precision and recall of several classes
 * need Keras's one-hot labels (a categorical_crossentropy model) and probabilities (no
 * from_logits: Keras would take each logit's sigmoid, not their softmax). Precision or recall
 * at several thresholds is one Keras metric of them all, written by the first of its metrics
 * (m[0 .. list_len) in the job's list); the others are NULL. */
static cJSON *metric_config(const job_output_t *o, const job_metric_t *m, const char *name)
{
    static const char *const classes[] = {
        [JOB_METRIC_TOP_K] = "SparseTopKCategoricalAccuracy",
        [JOB_METRIC_AUC] = "AUC",
        [JOB_METRIC_PRECISION] = "Precision",
        [JOB_METRIC_RECALL] = "Recall",
        [JOB_METRIC_MAE] = "MeanAbsoluteError",
        [JOB_METRIC_MSE] = "MeanSquaredError",
        [JOB_METRIC_RMSE] = "RootMeanSquaredError",
        [JOB_METRIC_OUTPUT_LOSS] = NULL, /* Keras reports each output's loss itself */
    };
    static const char *const curves[] = {"ROC", "PR", "PRGAIN"};
    static const char *const sums[] = {"interpolation", "minoring", "majoring"};
    bool classes_one_hot = o->loss == JOB_LOSS_CATEGORICAL_CROSSENTROPY;
    bool binary = o->loss == JOB_LOSS_BINARY_CROSSENTROPY || !job_loss_has_accuracy(o->loss);
    const char *class_name = classes[m->kind];
    cJSON *c;

    if (m->kind == JOB_METRIC_OUTPUT_LOSS || m->kind == JOB_METRIC_OUTPUT_ACCURACY ||
        m->list_at > 0)
        return NULL;
    /* Keras compares logits with thresholds from 0 to 1 only: one past them has no Keras form */
    for (int k = 0;
         (m->kind == JOB_METRIC_PRECISION || m->kind == JOB_METRIC_RECALL) && o->from_logits &&
         !isinf(m->threshold) && k < (m->list_len > 1 ? m->list_len : 1);
         k++) {
        double t = output_threshold(o, m[k].threshold);
        if (!(t >= 0 && t <= 1)) {
            LOG_WARNING(TRAIN,
                        "export: metric %s is left out of the compile config: its threshold %g "
                        "on probabilities is %g on this model's logits, and Keras takes "
                        "thresholds from 0 to 1",
                        name, (double)m[k].threshold, t);
            return NULL;
        }
    }
    if ((m->kind == JOB_METRIC_AUC || m->kind == JOB_METRIC_PRECISION ||
         m->kind == JOB_METRIC_RECALL) &&
        !binary && (!classes_one_hot || o->from_logits)) {
        LOG_WARNING(TRAIN,
                    "export: metric %s is left out of the compile config: Keras computes it on "
                    "one-hot labels and probabilities, and this model's %s",
                    m->name, o->from_logits ? "outputs are logits" : "labels are class ids");
        return NULL;
    }
    if (m->kind == JOB_METRIC_TOP_K && classes_one_hot)
        class_name = "TopKCategoricalAccuracy";
    c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "name", name);
    cJSON_AddStringToObject(c, "dtype", "float32");
    switch (m->kind) {
    case JOB_METRIC_TOP_K:
        cJSON_AddNumberToObject(c, "k", m->k);
        break;
    case JOB_METRIC_AUC:
        cJSON_AddNumberToObject(c, "num_thresholds", m->thresholds);
        if (m->threshold_list != NULL) {
            cJSON *list = cJSON_AddArrayToObject(c, "thresholds");
            for (int k = 0; list != NULL && k < m->thresholds - 2; k++)
                cJSON_AddItemToArray(list, cJSON_CreateNumber(m->threshold_list[k]));
        }
        cJSON_AddStringToObject(c, "curve", curves[m->curve]);
        cJSON_AddStringToObject(c, "summation_method", sums[m->summation]);
        cJSON_AddBoolToObject(c, "multi_label", m->num_labels > 0);
        if (m->num_labels > 0)
            cJSON_AddNumberToObject(c, "num_labels", m->num_labels);
        else
            cJSON_AddNullToObject(c, "num_labels");
        if (m->label_weights != NULL)
            cJSON_AddItemToObject(c, "label_weights",
                                  cJSON_CreateDoubleArray(m->label_weights, m->n_label_weights));
        else
            cJSON_AddNullToObject(c, "label_weights");
        cJSON_AddBoolToObject(c, "from_logits", o->from_logits);
        break;
    case JOB_METRIC_PRECISION:
    case JOB_METRIC_RECALL:
        if (isinf(m->threshold)) { /* top_k alone: Keras's default threshold */
            cJSON_AddNullToObject(c, "thresholds");
        } else if (m->list_len > 1) {
            cJSON *list = cJSON_AddArrayToObject(c, "thresholds");
            for (int k = 0; list != NULL && k < m->list_len; k++)
                cJSON_AddItemToArray(list, cJSON_CreateNumber(output_threshold(o, m[k].threshold)));
        } else
            cJSON_AddNumberToObject(c, "thresholds", output_threshold(o, m->threshold));
        if (m->top_k > 0)
            cJSON_AddNumberToObject(c, "top_k", m->top_k);
        else
            cJSON_AddNullToObject(c, "top_k");
        if (m->class_id >= 0)
            cJSON_AddNumberToObject(c, "class_id", m->class_id);
        else
            cJSON_AddNullToObject(c, "class_id");
        break;
    default:
        break;
    }
    return object("keras.metrics", class_name, c);
}

/* An output's accuracy as Keras computes what Tessera does: binary cross-entropy's at the
 * threshold (of logits under from_logits: a logit above 0 is class 1; and BinaryAccuracy by name,
 * as Keras 3 picks "accuracy" by the outputs' shape: of several 0/1 targets, categorical), else
 * Keras's "accuracy". */
static cJSON *accuracy_config(const job_output_t *o, float threshold)
{
    cJSON *acc;

    if (o->loss != JOB_LOSS_BINARY_CROSSENTROPY)
        return cJSON_CreateString("accuracy");
    acc = cJSON_CreateObject();
    cJSON_AddStringToObject(acc, "name", "accuracy");
    cJSON_AddNumberToObject(acc, "threshold", output_threshold(o, (double)threshold));
    return object("keras.metrics", "BinaryAccuracy", acc);
}

static cJSON *compile_config(const job_t *job, const optimizer_config_t *o, int64_t iterations)
{
    cJSON *c = cJSON_CreateObject(), *metrics = cJSON_CreateArray();

    cJSON_AddItemToObject(c, "optimizer", optimizer_config(o, iterations));
    if (job_model_outputs(&job->model) > 1) { /* a list of losses and their weights */
        cJSON *losses = cJSON_AddArrayToObject(c, "loss");
        cJSON *weights = cJSON_AddArrayToObject(c, "loss_weights");
        for (int k = 0; k < job_model_outputs(&job->model); k++) {
            job_output_t out = output_loss(job, k);
            cJSON_AddItemToArray(losses, loss_config(job, &out));
            cJSON_AddItemToArray(weights, cJSON_CreateNumber(out.weight));
        }
    } else {
        job_output_t out = output_loss(job, 0);
        cJSON_AddItemToObject(c, "loss", loss_config(job, &out));
        cJSON_AddNullToObject(c, "loss_weights");
    }
    if (job_model_outputs(&job->model) > 1) { /* {OUTPUT: [its metrics]}, by Keras's names */
        cJSON_Delete(metrics);
        metrics = cJSON_CreateObject();
        for (int k = 0; k < job->model.n_outputs; k++) {
            const char *out = job->model.output_names[k];
            job_output_t loss = output_loss(job, k);
            cJSON *list = cJSON_AddArrayToObject(metrics, out);
            for (int i = 0; i < job->n_metrics; i++) {
                const job_metric_t *m = &job->metrics[i];
                cJSON *mc;
                if (m->output != k) /* (Keras prefixes the output's name: unprefixed here) */
                    continue;
                mc = m->kind == JOB_METRIC_OUTPUT_ACCURACY
                         ? accuracy_config(&loss, m->threshold)
                         : metric_config(&loss, m, job_metric_keras_name(job, i));
                if (mc != NULL)
                    cJSON_AddItemToArray(list, mc);
            }
        }
    } else {
        job_output_t loss = output_loss(job, 0);
        if (job->metric_accuracy)
            cJSON_AddItemToArray(metrics, accuracy_config(&loss, job->accuracy_threshold));
        for (int i = 0; i < job->n_metrics; i++) {
            cJSON *m = metric_config(&loss, &job->metrics[i], job_metric_keras_name(job, i));
            if (m != NULL)
                cJSON_AddItemToArray(metrics, m);
        }
    }
    cJSON_AddItemToObject(c, "metrics", metrics);
    cJSON_AddNullToObject(c, "weighted_metrics");
    cJSON_AddBoolToObject(c, "run_eagerly", false);
    cJSON_AddNumberToObject(c, "steps_per_execution", 1);
    cJSON_AddBoolToObject(c, "jit_compile", false);
    return c;
}

/* The job's optimizer as one replica applies it. */
static optimizer_config_t job_optimizer(const job_t *job)
{
    optimizer_config_t o = job->optimizer;

    if (o.lr_scale == 0)
        o.lr_scale = 1;
    return o;
}

/* [LAYER, CALL, 0]: the output of a layer's call, as Functional configs name tensors. */
static cJSON *tensor_ref(const char *layer, int call)
{
    cJSON *t = cJSON_CreateArray();

    cJSON_AddItemToArray(t, cJSON_CreateString(layer));
    cJSON_AddItemToArray(t, cJSON_CreateNumber(call));
    cJSON_AddItemToArray(t, cJSON_CreateNumber(0));
    return t;
}

/* A Functional model's entry of the layer whose first call is entry i: its config, its name,
 * and what each call reads (a shared layer's later calls follow), in the form Keras 3 still
 * loads from Keras 2, [[[LAYER, CALL, 0, {}], ...], ...] (no shapes to repeat). */
static cJSON *graph_entry(const job_model_t *m, size_t i, const char *input_name)
{
    cJSON *entry = layer_config(&m->layers[i]), *nodes;

    cJSON_AddStringToObject(entry, "name", m->layers[i].name);
    nodes = cJSON_AddArrayToObject(entry, "inbound_nodes");
    for (size_t c = i; c < m->n_layers; c++) {
        int n = job_layer_is_merge(m->layers[c].kind) ? m->layers[c].n_inputs : 1;
        cJSON *node;
        if (c != i && m->layers[c].shares != (int)i + 1)
            continue;
        node = cJSON_CreateArray();
        cJSON_AddItemToArray(nodes, node);
        for (int k = 0; k < n; k++) {
            int src = job_layer_input(m, c, k);
            cJSON *t = src < 0 ? tensor_ref(m->n_inputs > 1 ? m->inputs[job_input_index(src)].name
                                                            : input_name,
                                            0)
                               : tensor_ref(m->layers[src].name, job_layer_call(m, (size_t)src));
            cJSON_AddItemToArray(t, cJSON_CreateObject());
            cJSON_AddItemToArray(node, t);
        }
    }
    return entry;
}

/* A name for the InputLayer that no layer has ("input_layer", as Keras names it, if free). */
static void input_layer_name(const job_model_t *m, char *buf, size_t len)
{
    for (int k = 0;; k++) {
        bool taken = false;
        if (k == 0)
            snprintf(buf, len, "input_layer");
        else
            snprintf(buf, len, "input_layer_%d", k);
        for (size_t i = 0; i < m->n_layers && !taken; i++)
            taken = strcmp(m->layers[i].name, buf) == 0;
        if (!taken)
            return;
    }
}

/* The InputLayer entry of an input of `shape` named `name` (a Functional model's has its name
 * and no calls beside its config). */
static cJSON *input_entry(const char *name, const int *shape, int rank, bool is_int, bool graph)
{
    cJSON *input = cJSON_CreateObject();

    cJSON_AddItemToObject(input, "batch_shape", ints(shape, rank, true));
    cJSON_AddStringToObject(input, "dtype", is_int ? "int32" : "float32");
    cJSON_AddBoolToObject(input, "sparse", false);
    cJSON_AddStringToObject(input, "name", name);
    input = object("keras.layers", "InputLayer", input);
    if (graph) {
        cJSON_AddStringToObject(input, "name", name);
        cJSON_AddArrayToObject(input, "inbound_nodes");
    }
    return input;
}

char *export_keras_config(const job_t *job, int64_t iterations)
{
    const job_model_t *m = &job->model;
    cJSON *config = cJSON_CreateObject(), *layers = cJSON_CreateArray(), *build, *model;
    bool graph = job_model_is_graph(m);
    char input_name[64], *text;

    input_layer_name(m, input_name, sizeof(input_name));
    if (m->n_inputs > 1) /* a Functional model's own names, in input_layers' order */
        for (int k = 0; k < m->n_inputs; k++)
            cJSON_AddItemToArray(layers, input_entry(m->inputs[k].name, m->inputs[k].shape,
                                                     m->inputs[k].rank, m->inputs[k].is_int, true));
    else
        cJSON_AddItemToArray(
            layers, input_entry(input_name, m->input_shape, m->input_rank, m->input_is_int, graph));
    for (size_t i = 0; i < m->n_layers; i++)
        if (m->layers[i].shares == 0)
            cJSON_AddItemToArray(layers, graph ? graph_entry(m, i, input_name)
                                               : layer_config(&m->layers[i]));
    cJSON_AddStringToObject(config, "name", graph ? "functional" : "sequential");
    cJSON_AddBoolToObject(config, "trainable", true);
    cJSON_AddItemToObject(config, "layers", layers);
    if (graph && m->n_inputs > 1) {
        cJSON *ins = cJSON_AddArrayToObject(config, "input_layers");
        for (int k = 0; k < m->n_inputs; k++)
            cJSON_AddItemToArray(ins, tensor_ref(m->inputs[k].name, 0));
    } else if (graph) {
        cJSON_AddItemToObject(config, "input_layers", tensor_ref(input_name, 0));
    }
    if (graph && m->n_outputs > 1) { /* the outputs in their order */
        cJSON *outs = cJSON_AddArrayToObject(config, "output_layers");
        for (int k = 0; k < m->n_outputs; k++)
            cJSON_AddItemToArray(outs, tensor_ref(m->layers[m->outputs[k]].name,
                                                  job_layer_call(m, (size_t)m->outputs[k])));
    } else if (graph) {
        cJSON_AddItemToObject(
            config, "output_layers",
            tensor_ref(m->layers[m->n_layers - 1].name, job_layer_call(m, m->n_layers - 1)));
    }
    if (graph) { /* where Keras 3 keeps the class, as its own saves name it */
        model = object("keras.src.models.functional", "Functional", config);
        cJSON_ReplaceItemInObject(model, "registered_name", cJSON_CreateString("Functional"));
    } else {
        model = object("keras", "Sequential", config);
    }
    build = cJSON_CreateObject();
    if (m->n_inputs > 1) /* as Keras writes a model of several inputs */
        cJSON_AddNullToObject(build, "input_shape");
    else
        cJSON_AddItemToObject(build, "input_shape", ints(m->input_shape, m->input_rank, true));
    cJSON_AddItemToObject(model, "build_config", build);
    optimizer_config_t o = job_optimizer(job);
    cJSON_AddItemToObject(model, "compile_config", compile_config(job, &o, iterations));
    text = cJSON_PrintUnformatted(model);
    cJSON_Delete(model);
    return text;
}

/* ---- the files --------------------------------------------------------------------------------
 */

static keras_tensor_t tensor_of(const model_param_t *p, const float *data)
{
    keras_tensor_t t = {.rank = p->rank, .data = data};

    for (int d = 0; d < p->rank; d++)
        t.shape[d] = (uint64_t)p->shape[d];
    return t;
}

/* Adam, AdamW, Nadam, Adamax and Ftrl keep their first two slots per variable (momentum and
 * velocity, momentum and norm, accumulator and linear), then (AMSGrad) every velocity_hat;
 * RMSprop its velocities, then momentums, then average gradients; SGD, Adagrad and Lion one
 * slot per variable. */
/* The optimizer's variables for model.weights.h5: its slots in Keras's order, then Nadam's
 * u_product. out holds model_param_count * OPTIMIZER_MAX_SLOTS + 1. SIZE_MAX: out of memory. */
static size_t optimizer_vars(const optimizer_config_t *o, model_t *m, float *const *slots,
                             const float *u_product, keras_tensor_t *out)
{
    size_t cap = model_param_count(m) * OPTIMIZER_MAX_SLOTS + 1;
    size_t *param = calloc(cap, sizeof(*param)), *slot = calloc(cap, sizeof(*slot)), count = 0;
    bool *moving = calloc(model_param_count(m) + 1, sizeof(*moving));

    if (param == NULL || slot == NULL || moving == NULL) {
        free(param);
        free(slot);
        free(moving);
        return SIZE_MAX;
    }
    for (size_t i = 0; i < model_param_count(m); i++)
        moving[i] = model_param(m, i)->moving;
    count = optimizer_keras_order(o, moving, model_param_count(m), param, slot);
    free(moving);
    for (size_t j = 0; j < count; j++) {
        const model_param_t *p = model_param(m, param[j]);
        out[j] = tensor_of(p, slots[param[j]] + slot[j] * p->n);
    }
    if (o->kind == OPTIMIZER_NADAM)
        out[count++] = (keras_tensor_t){.rank = 0, .data = u_product};
    free(param);
    free(slot);
    return count;
}

/* Each layer's variables (a shared layer's once): the params named "<layer>/..." in model
 * order, under its Keras path (export_keras_paths). paths holds 96 bytes a layer. Returns the
 * layers written into `layers`. */
static size_t layer_vars(const job_t *job, model_t *m, keras_layer_vars_t *layers,
                         keras_tensor_t *vars, char (*paths)[96])
{
    size_t next = 0, n = 0;

    job_keras_paths(job->model.layers, job->model.n_layers, paths);
    for (size_t l = 0; l < job->model.n_layers; l++) {
        const char *name = job->model.layers[l].name;
        size_t len = strlen(name);
        if (job->model.layers[l].shares > 0)
            continue;
        layers[n] = (keras_layer_vars_t){.name = paths[l], .vars = &vars[next]};
        for (size_t i = 0; i < model_param_count(m); i++) {
            const model_param_t *p = model_param(m, i);
            if (strncmp(p->name, name, len) == 0 && p->name[len] == '/') {
                vars[next++] = tensor_of(p, p->value);
                layers[n].n++;
            }
        }
        n++;
    }
    return n;
}

st_tensor_t *export_tensors(model_t *m)
{
    size_t n = model_param_count(m);
    st_tensor_t *t = calloc(n + 1, sizeof(*t));

    for (size_t i = 0; t != NULL && i < n; i++) {
        const model_param_t *p = model_param(m, i);
        t[i] = (st_tensor_t){.name = p->name, .dtype = ST_F32, .rank = p->rank, .data = p->value};
        for (int d = 0; d < p->rank; d++)
            t[i].shape[d] = (uint64_t)p->shape[d];
    }
    return t;
}

static status_t write_safetensors(model_t *m, const char *path, status_msg_t *err)
{
    st_tensor_t *t = export_tensors(m);
    status_t rc;

    if (t == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    rc = st_write_file(path, t, model_param_count(m), NULL, 0, NULL, err);
    free(t);
    return rc;
}

status_t export_model(const job_t *job, const export_state_t *st, const char *dir,
                      status_msg_t *err)
{
    size_t n = model_param_count(st->model);
    keras_layer_vars_t *layers = calloc(job->model.n_layers + 1, sizeof(*layers));
    char(*paths)[96] = calloc(job->model.n_layers + 1, sizeof(*paths));
    keras_tensor_t *vars = calloc(n + 1, sizeof(*vars));
    keras_tensor_t *opt = calloc(n * OPTIMIZER_MAX_SLOTS + 1, sizeof(*opt));
    char *config = export_keras_config(job, st->iterations), path[4096];
    optimizer_config_t o = job_optimizer(job);
    /* Nadam's u_product after the updates made so far (1 before the first) */
    float u_product =
        st->iterations > 0 ? (float)optimizer_nadam_u_product(&o, st->iterations - 1) : 1.0f;
    status_t rc = STATUS_OK;

    if (layers == NULL || vars == NULL || opt == NULL || config == NULL || paths == NULL)
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t l = 0; rc == STATUS_OK && l < job->model.n_layers; l++)
        if (job->model.layers[l].activation == JOB_ACT_GELU_APPROXIMATE)
            rc = status_fail(err, STATUS_BAD_CONFIG,
                             "layer '%s': its gelu_approximate has no name in Keras's JSON "
                             "(Keras's gelu is the exact one): not exported",
                             job->model.layers[l].name);
    if (rc == STATUS_OK)
        rc = files_mkdirs(dir, err);
    if (rc == STATUS_OK) {
        keras_archive_t a = {.config_json = config,
                             .model_name = "sequential",
                             .layers = layers,
                             .n_layers = 0,
                             .optimizer = optimizer_keras_name(job->optimizer.kind),
                             .iterations = st->iterations,
                             .learning_rate = (float)optimizer_learning_rate(&o, st->iterations)};
        a.n_layers = layer_vars(job, st->model, layers, vars, paths);
        if (st->slots != NULL)
            a.n_optimizer_vars = optimizer_vars(&o, st->model, st->slots, &u_product, opt);
        a.optimizer_vars = opt;
        snprintf(path, sizeof(path), "%s/model.keras", dir);
        rc = a.n_optimizer_vars == SIZE_MAX ? status_fail(err, STATUS_NO_MEMORY, "out of memory")
                                            : keras_archive_write(path, &a, err);
    }
    if (rc == STATUS_OK) {
        snprintf(path, sizeof(path), "%s/model.safetensors", dir);
        rc = write_safetensors(st->model, path, err);
    }
    free(layers);
    free(paths);
    free(vars);
    free(opt);
    free(config);
    return rc;
}
