/* A Keras 3 model's compile config (config.json of a .keras archive: what model.compile() was
 * given) in the job file's form, so that the job parser checks it as it checks a job file's
 * loss, optimizer and metrics sections. Keras's serialized objects ({"class_name": "Adam",
 * "config": {...}}) become {adam: {...}}: the options keep Keras's names, which are the job
 * file's; options that must keep their Keras defaults here (reduction, use_ema, ignore_class,
 * ...) are checked and dropped, anything else is passed on and refused by name if the job file
 * has no such option. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "internal.h"
#include "job/job.h"

typedef struct kc {
    const char *file;
    status_msg_t *err;
} kc_t;

#define KC_FAIL(k, ...) status_fail((k)->err, STATUS_BAD_CONFIG, __VA_ARGS__)

/* A class of Keras's and the job file's name for it. */
typedef struct class_map {
    const char *keras, *job;
} class_map_t;

static const class_map_t loss_classes[] = {
    {"SparseCategoricalCrossentropy", "sparse_categorical_crossentropy"},
    {"CategoricalCrossentropy", "categorical_crossentropy"},
    {"BinaryCrossentropy", "binary_crossentropy"},
    {"MeanSquaredError", "mean_squared_error"},
    {"MeanAbsoluteError", "mean_absolute_error"},
    {"Huber", "huber"},
    {"LogCosh", "log_cosh"},
    {"Hinge", "hinge"},
    {"SquaredHinge", "squared_hinge"},
    {"Poisson", "poisson"},
    {"KLDivergence", "kl_divergence"},
};

static const class_map_t optimizer_classes[] = {
    {"SGD", "sgd"},         {"Adam", "adam"},   {"Adagrad", "adagrad"},
    {"RMSprop", "rmsprop"}, {"AdamW", "adamw"}, {"Nadam", "nadam"},
    {"Adamax", "adamax"},   {"Lion", "lion"},   {"Ftrl", "ftrl"},
};

/* (keras.metrics.Accuracy is not here: it counts exact equality) */
static const class_map_t metric_classes[] = {
    {"SparseCategoricalAccuracy", "sparse_categorical_accuracy"},
    {"CategoricalAccuracy", "categorical_accuracy"},
    {"BinaryAccuracy", "binary_accuracy"},
    {"SparseTopKCategoricalAccuracy", "sparse_top_k_categorical_accuracy"},
    {"TopKCategoricalAccuracy", "top_k_categorical_accuracy"},
    {"AUC", "auc"},
    {"Precision", "precision"},
    {"Recall", "recall"},
    {"MeanAbsoluteError", "mae"},
    {"MeanSquaredError", "mse"},
    {"RootMeanSquaredError", "rmse"},
};

static const char *job_name_of(const class_map_t *map, size_t n, const char *keras)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(map[i].keras, keras) == 0)
            return map[i].job;
    return NULL;
}

/* Options a Keras object may carry with these values only (NULL: null or absent): checked and
 * dropped from its config. */
typedef struct fixed {
    const char *key;
    const char *value; /* a string value, "false", "null" or "-1" */
} fixed_t;

static bool has_value(const cJSON *v, const char *want)
{
    if (v == NULL) /* absent: Keras's default */
        return true;
    if (cJSON_IsNull(v))
        return strcmp(want, "null") == 0;
    if (cJSON_IsBool(v))
        return strcmp(want, cJSON_IsTrue(v) ? "true" : "false") == 0;
    if (cJSON_IsString(v))
        return strcmp(want, v->valuestring) == 0;
    if (cJSON_IsNumber(v))
        return strcmp(want, "-1") == 0 && v->valuedouble == -1;
    return false;
}

/* Drops `name`, `dtype` (float32) and the fixed options from config (a copy), checking each. */
static status_t drop_fixed(kc_t *k, const char *what, cJSON *config, const fixed_t *fixed, size_t n)
{
    cJSON *dtype = cJSON_GetObjectItemCaseSensitive(config, "dtype");

    if (dtype != NULL && !cJSON_IsNull(dtype) &&
        !(cJSON_IsString(dtype) && strcmp(dtype->valuestring, "float32") == 0))
        return KC_FAIL(k,
                       "%s: compile_config: %s has dtype other than float32, which is not "
                       "supported",
                       k->file, what);
    cJSON_DeleteItemFromObjectCaseSensitive(config, "dtype");
    cJSON_DeleteItemFromObjectCaseSensitive(config, "name");
    for (size_t i = 0; i < n; i++) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(config, fixed[i].key);
        if (!has_value(v, fixed[i].value))
            return KC_FAIL(k, "%s: compile_config: %s's %s other than %s is not supported", k->file,
                           what, fixed[i].key, fixed[i].value);
        cJSON_DeleteItemFromObjectCaseSensitive(config, fixed[i].key);
    }
    /* null options are Keras's defaults: left out, the job parser's defaults are the same */
    for (cJSON *v = config->child, *next; v != NULL; v = next) {
        next = v->next;
        if (cJSON_IsNull(v)) {
            cJSON_Delete(cJSON_DetachItemViaPointer(config, v));
            continue;
        }
        /* what Python would read otherwise: the last of two equal keys; a number past float */
        for (const cJSON *w = v->next; w != NULL; w = w->next)
            if (strcmp(w->string, v->string) == 0)
                return KC_FAIL(k, "%s: compile_config: %s gives %.60s twice", k->file, what,
                               v->string);
        if (cJSON_IsNumber(v) && !isfinite(v->valuedouble))
            return KC_FAIL(k, "%s: compile_config: %s's %.60s is not a finite number", k->file,
                           what, v->string);
        if (strcmp(v->string, "scale_learning_rate") == 0) /* a job file's, not Keras's */
            return KC_FAIL(k, "%s: compile_config: %s's scale_learning_rate is not Keras's",
                           k->file, what);
    }
    return STATUS_OK;
}

/* A serialized Keras object {"class_name", "config"}: its class and a copy of its config. */
static status_t object_of(kc_t *k, const char *what, const cJSON *o, const char **ret_class,
                          cJSON **ret_config)
{
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(o, "class_name");
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(o, "config");

    if (!cJSON_IsString(cls) ||
        (config != NULL && !cJSON_IsObject(config) && !cJSON_IsNull(config)))
        return KC_FAIL(k, "%s: compile_config: %s is not a Keras object (class_name, config)",
                       k->file, what);
    *ret_class = cls->valuestring;
    *ret_config = config != NULL && cJSON_IsObject(config) ? cJSON_Duplicate(config, true)
                                                           : cJSON_CreateObject();
    return *ret_config != NULL
               ? STATUS_OK
               : status_fail(k->err, STATUS_NO_MEMORY, "%s: out of memory", k->file);
}

/* {job_name: config}, taking config. */
static cJSON *variant(const char *job_name, cJSON *config)
{
    cJSON *v = cJSON_CreateObject();

    if (v == NULL || config == NULL) {
        cJSON_Delete(v);
        cJSON_Delete(config);
        return NULL;
    }
    cJSON_AddItemToObject(v, job_name, config);
    return v;
}

/* *ret = item, or STATUS_NO_MEMORY when making it failed. */
static status_t made(kc_t *k, cJSON *item, cJSON **ret)
{
    *ret = item;
    return item != NULL ? STATUS_OK
                        : status_fail(k->err, STATUS_NO_MEMORY, "%s: out of memory", k->file);
}

/* The job file's name of Keras class cls in map, or NULL after refusing it (config freed). */
static const char *class_of(kc_t *k, const char *what, const class_map_t *map, size_t n,
                            const char *cls, cJSON *config)
{
    const char *name = job_name_of(map, n, cls);

    if (name == NULL) {
        cJSON_Delete(config);
        KC_FAIL(k, "%s: compile_config: %s %.60s is not supported", k->file, what, cls);
    }
    return name;
}

/* After rc: the object in the job file's form, NAME or {NAME: config} (config taken either
 * way). */
static status_t job_form(kc_t *k, status_t rc, const char *name, cJSON *config, cJSON **ret)
{
    if (rc != STATUS_OK) {
        cJSON_Delete(config);
        return rc;
    }
    if (config->child != NULL)
        return made(k, variant(name, config), ret);
    cJSON_Delete(config);
    return made(k, cJSON_CreateString(name), ret);
}

static status_t one_loss(kc_t *k, const cJSON *loss, cJSON **ret)
{
    static const fixed_t fixed[] = {{"ignore_class", "null"}, {"axis", "-1"}};
    const char *cls, *name;
    cJSON *config;

    if (cJSON_IsString(loss))
        return made(k, cJSON_CreateString(loss->valuestring), ret);
    if (!cJSON_IsObject(loss))
        return KC_FAIL(k, "%s: compile_config: a loss is a name or a serialized loss", k->file);
    STATUS_CHECK(object_of(k, "the loss", loss, &cls, &config));
    if ((name = class_of(k, "loss", loss_classes, JOB_N_OF(loss_classes), cls, config)) == NULL)
        return STATUS_BAD_CONFIG;
    /* null options are Keras's defaults, but a null reduction is "none" */
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(config, "reduction")) &&
        !cJSON_ReplaceItemInObjectCaseSensitive(config, "reduction", cJSON_CreateString("none"))) {
        cJSON_Delete(config);
        return KC_FAIL(k, "%s: out of memory", k->file);
    }
    return job_form(k, drop_fixed(k, cls, config, fixed, JOB_N_OF(fixed)), name, config, ret);
}

/* The loss: one (every output's), a list of one an output, or a mapping of the outputs' names
 * to theirs (an object without class_name), as the job file takes them. */
static status_t loss_of(kc_t *k, const cJSON *loss, cJSON **ret)
{
    bool by_name = cJSON_IsObject(loss) && !cJSON_HasObjectItem(loss, "class_name");
    cJSON *all;
    const cJSON *v;

    if (!cJSON_IsArray(loss) && !by_name)
        return one_loss(k, loss, ret);
    if ((all = by_name ? cJSON_CreateObject() : cJSON_CreateArray()) == NULL)
        return KC_FAIL(k, "%s: out of memory", k->file);
    cJSON_ArrayForEach(v, loss)
    {
        cJSON *item = NULL;
        status_t rc = one_loss(k, v, &item);
        if (rc == STATUS_OK && !(by_name ? cJSON_AddItemToObject(all, v->string, item)
                                         : cJSON_AddItemToArray(all, item))) {
            cJSON_Delete(item);
            rc = KC_FAIL(k, "%s: out of memory", k->file);
        }
        if (rc != STATUS_OK) {
            cJSON_Delete(all);
            return rc;
        }
    }
    *ret = all;
    return STATUS_OK;
}

/* loss_weights: a list of numbers, or a mapping of the outputs' names to them, as they are. */
static status_t loss_weights_of(kc_t *k, const cJSON *w, cJSON **ret)
{
    const cJSON *v;

    if (!cJSON_IsArray(w) && !cJSON_IsObject(w))
        return KC_FAIL(k, "%s: compile_config: loss_weights is a list or a mapping of numbers",
                       k->file);
    cJSON_ArrayForEach(v, w) if (!cJSON_IsNumber(v)) return KC_FAIL(
        k, "%s: compile_config: loss_weights holds something not a number", k->file);
    return made(k, cJSON_Duplicate(w, true), ret);
}

/* The learning rate: a number, or Keras's ExponentialDecay or PiecewiseConstantDecay. */
static status_t learning_rate_of(kc_t *k, cJSON *config)
{
    static const class_map_t schedules[] = {{"ExponentialDecay", "exponential_decay"},
                                            {"PiecewiseConstantDecay", "piecewise_constant"}};
    cJSON *lr = cJSON_GetObjectItemCaseSensitive(config, "learning_rate");
    const char *cls, *name;
    cJSON *sc;

    if (lr == NULL || cJSON_IsNumber(lr))
        return STATUS_OK;
    STATUS_CHECK(object_of(k, "the learning rate", lr, &cls, &sc));
    name = job_name_of(schedules, JOB_N_OF(schedules), cls);
    if (name == NULL) {
        cJSON_Delete(sc);
        return KC_FAIL(k,
                       "%s: compile_config: learning-rate schedule %.60s is not supported "
                       "(ExponentialDecay and PiecewiseConstantDecay are)",
                       k->file, cls);
    }
    status_t rc = drop_fixed(k, cls, sc, NULL, 0);
    if (rc != STATUS_OK) {
        cJSON_Delete(sc);
        return rc;
    }
    cJSON *v = variant(name, sc);
    if (v == NULL || !cJSON_ReplaceItemInObjectCaseSensitive(config, "learning_rate", v)) {
        cJSON_Delete(v);
        return status_fail(k->err, STATUS_NO_MEMORY, "%s: out of memory", k->file);
    }
    return STATUS_OK;
}

static status_t optimizer_of(kc_t *k, const cJSON *opt, cJSON **ret, int *ret_accumulate)
{
    static const fixed_t fixed[] = {
        {"use_ema", "false"}, {"ema_overwrite_frequency", "null"}, {"loss_scale_factor", "null"}};
    const char *cls, *name;
    cJSON *config, *acc;
    status_t rc;

    *ret_accumulate = 0;
    if (cJSON_IsString(opt)) /* compile(optimizer="adam") */
        return made(k, cJSON_CreateString(opt->valuestring), ret);
    STATUS_CHECK(object_of(k, "the optimizer", opt, &cls, &config));
    name = class_of(k, "optimizer", optimizer_classes, JOB_N_OF(optimizer_classes), cls, config);
    if (name == NULL)
        return STATUS_BAD_CONFIG;
    /* every config has an ema_momentum; it matters only with use_ema, which must be false */
    cJSON_DeleteItemFromObjectCaseSensitive(config, "ema_momentum");
    acc = cJSON_GetObjectItemCaseSensitive(config, "gradient_accumulation_steps");
    if (acc != NULL && !cJSON_IsNull(acc))
        *ret_accumulate = cJSON_IsNumber(acc) && acc->valuedouble >= 1 &&
                                  acc->valuedouble <= JOB_MAX_ACCUMULATE_STEPS &&
                                  acc->valuedouble == (double)(int)acc->valuedouble
                              ? (int)acc->valuedouble
                              : -1;
    /* Keras's schedules count every batch of a window, Tessera's the updates */
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(config, "learning_rate");
    bool scheduled = lr != NULL && cJSON_IsObject(lr);
    cJSON_DeleteItemFromObjectCaseSensitive(config, "gradient_accumulation_steps");
    rc = drop_fixed(k, cls, config, fixed, JOB_N_OF(fixed));
    if (rc == STATUS_OK && *ret_accumulate < 0)
        rc = KC_FAIL(k,
                     "%s: compile_config: gradient_accumulation_steps must be an integer from "
                     "1 to %d",
                     k->file, JOB_MAX_ACCUMULATE_STEPS);
    if (rc == STATUS_OK && *ret_accumulate > 1 && scheduled)
        rc = KC_FAIL(k,
                     "%s: compile_config: a learning-rate schedule with "
                     "gradient_accumulation_steps is not supported (Keras's schedule counts "
                     "every batch, Tessera's the updates)",
                     k->file);
    if (rc == STATUS_OK)
        rc = learning_rate_of(k, config);
    return job_form(k, rc, name, config, ret);
}

static double sigmoid(double v)
{
    return 1.0 / (1.0 + exp(-v));
}

/* sigmoid(t): Keras's threshold on a binary model's logits as the probability Tessera compares
 * (logit > t exactly where sigmoid(logit) > sigmoid(t)); an absent one is Keras's 0.5, on the
 * logits; a list, each of its numbers. Anything else is left for the job parser to refuse. */
static void threshold_to_probability(cJSON *config, const char *key)
{
    cJSON *t = cJSON_GetObjectItemCaseSensitive(config, key), *item;

    if (cJSON_IsArray(t)) {
        cJSON_ArrayForEach(item, t)
        {
            if (cJSON_IsNumber(item))
                cJSON_SetNumberValue(item, sigmoid(item->valuedouble));
        }
        return;
    }
    if (t != NULL && !cJSON_IsNumber(t))
        return;
    double v = t != NULL ? t->valuedouble : 0.5;
    cJSON_DeleteItemFromObjectCaseSensitive(config, key);
    cJSON_AddNumberToObject(config, key, sigmoid(v));
}

/* Keras's string metrics as the classes they stand for where a binary model's logits need
 * their thresholds. */
static const class_map_t metric_strings[] = {
    {"accuracy", "BinaryAccuracy"},
    {"acc", "BinaryAccuracy"},
    {"binary_accuracy", "BinaryAccuracy"},
    {"precision", "Precision"},
    {"recall", "Recall"},
    {"auc", "AUC"},
};

static status_t metric_of(kc_t *k, const cJSON *m, const job_keras_loss_t *loss, cJSON **ret)
{
    bool binary_logits = loss->binary && loss->logits;
    const char *cls, *name;
    cJSON *config, *logits;
    status_t rc = STATUS_OK;

    if (cJSON_IsString(m)) {
        /* precision, recall and auc as their classes; the accuracies as BinaryAccuracy where
         * Keras would threshold a binary model's logits */
        const char *as = job_name_of(metric_strings, JOB_N_OF(metric_strings), m->valuestring);
        if (as != NULL && strcmp(as, "BinaryAccuracy") == 0 && !binary_logits)
            as = NULL;
        if (as == NULL)
            return made(k, cJSON_CreateString(m->valuestring), ret);
        cls = as;
        if ((config = cJSON_CreateObject()) == NULL)
            return status_fail(k->err, STATUS_NO_MEMORY, "%s: out of memory", k->file);
    } else {
        STATUS_CHECK(object_of(k, "a metric", m, &cls, &config));
    }
    if ((name = class_of(k, "metric", metric_classes, JOB_N_OF(metric_classes), cls, config)) ==
        NULL)
        return STATUS_BAD_CONFIG;
    bool confusion =
        strcmp(name, "auc") == 0 || strcmp(name, "precision") == 0 || strcmp(name, "recall") == 0;
    /* Tessera's metrics read probabilities. That is Keras's on a binary model on logits where
     * Keras takes their sigmoid (AUC's from_logits) or thresholds them (the others, whose
     * thresholds become probabilities); with several classes Keras's AUC, precision and recall
     * are Tessera's only for one-hot labels and probabilities. */
    logits = cJSON_GetObjectItemCaseSensitive(config, "from_logits");
    if (cJSON_IsTrue(logits) && !binary_logits)
        rc = KC_FAIL(k,
                     "%s: compile_config: metric %s with from_logits on a model whose loss is "
                     "not binary_crossentropy from logits is not supported",
                     k->file, cls);
    else if (strcmp(name, "auc") == 0 && binary_logits && !cJSON_IsTrue(logits))
        rc = KC_FAIL(k,
                     "%s: compile_config: metric AUC without from_logits on a model whose "
                     "outputs are logits is not supported",
                     k->file);
    else if (confusion && !loss->binary && (loss->logits || !loss->one_hot))
        rc = KC_FAIL(k,
                     "%s: compile_config: metric %s of several classes is supported with "
                     "categorical_crossentropy on probabilities (one-hot labels), as Keras "
                     "computes it",
                     k->file, cls);
    cJSON_DeleteItemFromObjectCaseSensitive(config, "from_logits");
    /* keep the name Keras reports it under */
    const cJSON *keras_name = cJSON_GetObjectItemCaseSensitive(config, "name");
    char *reported = cJSON_IsString(keras_name) ? strdup(keras_name->valuestring) : NULL;
    if (rc == STATUS_OK)
        rc = drop_fixed(k, cls, config, NULL, 0);
    if (rc == STATUS_OK && binary_logits && strcmp(name, "binary_accuracy") == 0)
        threshold_to_probability(config, "threshold");
    else if (rc == STATUS_OK && binary_logits &&
             (strcmp(name, "precision") == 0 || strcmp(name, "recall") == 0) &&
             /* top_k without thresholds: Keras's threshold is then -inf, the job parser's too */
             (cJSON_GetObjectItemCaseSensitive(config, "top_k") == NULL ||
              cJSON_GetObjectItemCaseSensitive(config, "thresholds") != NULL))
        threshold_to_probability(config, "thresholds");
    /* reported under Keras's name (auc_1, ...); accuracy is the job's one accuracy, whatever
     * its name */
    bool accuracy = strstr(name, "accuracy") != NULL && strstr(name, "top_k") == NULL;
    if (rc == STATUS_OK && reported != NULL && !accuracy)
        cJSON_AddStringToObject(config, "name", reported);
    free(reported);
    return job_form(k, rc, name, config, ret);
}

/* item as out[key], or STATUS_NO_MEMORY (item freed). */
/* A list of metrics (or one) read for a loss, into *ret (a list). */
static status_t metric_list(kc_t *k, const cJSON *v, const job_keras_loss_t *loss, cJSON **ret)
{
    cJSON *list = cJSON_CreateArray(), *item;
    const cJSON *m;
    status_t rc = STATUS_OK;

    if (list == NULL)
        return status_fail(k->err, STATUS_NO_MEMORY, "%s: out of memory", k->file);
    if (!cJSON_IsArray(v)) {
        cJSON_Delete(list);
        return KC_FAIL(k,
                       "%s: compile_config: metrics must be a list (or a mapping of outputs "
                       "to lists)",
                       k->file);
    }
    cJSON_ArrayForEach(m, v)
    {
        rc = metric_of(k, m, loss, &item);
        if (rc == STATUS_OK && !cJSON_AddItemToArray(list, item)) {
            cJSON_Delete(item);
            rc = status_fail(k->err, STATUS_NO_MEMORY, "%s: out of memory", k->file);
        }
        if (rc != STATUS_OK)
            break;
    }
    if (rc != STATUS_OK) {
        cJSON_Delete(list);
        return rc;
    }
    *ret = list;
    return STATUS_OK;
}

static status_t add_section(kc_t *k, cJSON *out, const char *key, cJSON *item)
{
    if (item != NULL && cJSON_AddItemToObject(out, key, item))
        return STATUS_OK;
    cJSON_Delete(item);
    return status_fail(k->err, STATUS_NO_MEMORY, "%s: out of memory", k->file);
}

status_t job_keras_compile_text(const char *text, size_t len, const char *file,
                                const job_keras_want_t *want, char **ret_json, int *ret_accumulate,
                                status_msg_t *err)
{
    static const char *const allowed[] = {
        "optimizer",        "loss",        "loss_weights",        "metrics",
        "weighted_metrics", "run_eagerly", "steps_per_execution", "jit_compile",
        "auto_scale_loss"};
    kc_t k = {.file = file, .err = err};
    cJSON *root = cJSON_ParseWithLength(text, len), *out = cJSON_CreateObject(), *item = NULL;
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(root, "compile_config"), *v;
    status_t rc = STATUS_OK;

    *ret_json = NULL;
    *ret_accumulate = 0;
    if (root == NULL || out == NULL) {
        rc = root == NULL ? status_fail(err, STATUS_BAD_CONFIG, "%s: config.json is not JSON", file)
                          : status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", file);
        goto out;
    }
    if (cc == NULL || cJSON_IsNull(cc))
        goto done; /* an uncompiled model: the job names loss and optimizer */
    if (!cJSON_IsObject(cc)) {
        rc = KC_FAIL(&k, "%s: compile_config is not a mapping", file);
        goto out;
    }
    for (const cJSON *e = cc->child; e != NULL && rc == STATUS_OK; e = e->next) {
        size_t i = 0;
        while (i < JOB_N_OF(allowed) && strcmp(e->string, allowed[i]) != 0)
            i++;
        if (i == JOB_N_OF(allowed))
            rc = KC_FAIL(&k, "%s: compile_config: %.60s is not supported", file, e->string);
        for (const cJSON *f = e->next; rc == STATUS_OK && f != NULL; f = f->next)
            if (strcmp(f->string, e->string) == 0)
                rc = KC_FAIL(&k, "%s: compile_config gives %.60s twice", file, e->string);
    }
    v = cJSON_GetObjectItemCaseSensitive(cc, "loss_weights");
    if (rc == STATUS_OK && want->loss && v != NULL && !cJSON_IsNull(v)) {
        rc = loss_weights_of(&k, v, &item);
        if (rc == STATUS_OK)
            rc = add_section(&k, out, "loss_weights", item);
    }
    v = cJSON_GetObjectItemCaseSensitive(cc, "weighted_metrics");
    if (rc == STATUS_OK && v != NULL && !cJSON_IsNull(v) &&
        !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0))
        rc = KC_FAIL(&k, "%s: compile_config: weighted_metrics (sample weights) is not supported",
                     file);
    v = cJSON_GetObjectItemCaseSensitive(cc, "loss");
    if (rc == STATUS_OK && want->loss && v != NULL && !cJSON_IsNull(v)) {
        rc = loss_of(&k, v, &item);
        if (rc == STATUS_OK)
            rc = add_section(&k, out, "loss", item);
    }
    v = cJSON_GetObjectItemCaseSensitive(cc, "optimizer");
    if (rc == STATUS_OK && want->optimizer && v != NULL && !cJSON_IsNull(v)) {
        rc = optimizer_of(&k, v, &item, ret_accumulate);
        if (rc == STATUS_OK)
            rc = add_section(&k, out, "optimizer", item);
    }
    v = cJSON_GetObjectItemCaseSensitive(cc, "metrics");
    if (rc == STATUS_OK && want->metrics && v != NULL && !cJSON_IsNull(v)) {
        cJSON *list = NULL;
        if (cJSON_IsObject(v)) { /* {OUTPUT: [metrics]}: each read for its output's loss */
            const cJSON *o;
            if ((list = cJSON_CreateObject()) == NULL)
                rc = status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", file);
            cJSON_ArrayForEach(o, v)
            {
                int at = 0;
                cJSON *one = NULL;
                while (at < want->n_outputs && strcmp(want->output_names[at], o->string) != 0)
                    at++;
                if (rc == STATUS_OK && at == want->n_outputs)
                    rc = KC_FAIL(&k, "%s: compile_config: metrics for '%.60s', not an output", file,
                                 o->string);
                if (rc == STATUS_OK)
                    rc = metric_list(&k, o, &want->for_outputs[at], &one);
                if (rc == STATUS_OK && !cJSON_AddItemToObject(list, o->string, one)) {
                    cJSON_Delete(one);
                    rc = status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", file);
                }
                if (rc != STATUS_OK)
                    break;
            }
        } else {
            rc = metric_list(&k, v, &want->for_loss, &list);
        }
        if (rc == STATUS_OK && cJSON_GetArraySize(list) > 0)
            rc = add_section(&k, out, "metrics", list);
        else
            cJSON_Delete(list);
    }
done:
    if (rc == STATUS_OK && (*ret_json = cJSON_PrintUnformatted(out)) == NULL)
        rc = status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", file);
out:
    cJSON_Delete(root);
    cJSON_Delete(out);
    return rc;
}
