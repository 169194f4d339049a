/* Keras `model.to_json()` documents for Sequential and Functional models, as Keras 2 (tf.keras up
 * to TensorFlow 2.15) and Keras 3 write them. Every config key a supported layer may carry is
 * listed in the tables below with what Tessera requires of it; a key outside the tables, a layer
 * class Tessera does not build, or an option it does not implement (a regularizer, a constraint,
 * channels_first, dilation, LoRA, quantization, masking, a frozen layer) is an error naming the
 * layer, so a model never trains differently from what its file says. */
#define _POSIX_C_SOURCE 200809L

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/initializer.h"
#include "job/internal.h"
#include "job/layers.h"

/* Keys every layer may carry. batch_input_shape is the Keras 2 way to give the input shape on
 * the first layer. */
static const job_keras_key_t common_keys[] = {
    {"name", JOB_KERAS_VALUE},
    {"trainable", JOB_KERAS_TRUE},
    {"dtype", JOB_KERAS_DTYPE},
    {"batch_input_shape", JOB_KERAS_VALUE},
    {"activity_regularizer", JOB_KERAS_VALUE},
};

/* Parsing state: the file for messages and the layer being read. */
typedef struct kctx {
    const char *file;
    char layer[96]; /* "layer 'dense_1'" or "layers[3]" */
    status_msg_t *err;
} kctx_t;

/* obj[key] when obj is an object, else NULL: no caller ever looks a key up in a list. */
static const cJSON *kget(const cJSON *obj, const char *key)
{
    return cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}

static status_t __attribute__((format(printf, 2, 3))) kfail(kctx_t *k, const char *fmt, ...)
{
    va_list ap;
    int w;

    if (k->err == NULL)
        return STATUS_BAD_CONFIG;
    k->err->status = STATUS_BAD_CONFIG;
    w = snprintf(k->err->text, sizeof(k->err->text), "%s: %s%s", k->file, k->layer,
                 k->layer[0] != '\0' ? ": " : "");
    if (w < 0 || (size_t)w >= sizeof(k->err->text))
        return STATUS_BAD_CONFIG;
    va_start(ap, fmt);
    vsnprintf(k->err->text + w, sizeof(k->err->text) - (size_t)w, fmt, ap);
    va_end(ap);
    return STATUS_BAD_CONFIG;
}

/* A JSON value as a message shows it (cut at 60 characters). */
static const char *shown(const cJSON *v, char *buf, size_t size)
{
    char *printed = v != NULL ? cJSON_PrintUnformatted(v) : NULL;

    if (printed == NULL)
        return "nothing";
    snprintf(buf, size, "%.60s%s", printed, strlen(printed) > 60 ? "..." : "");
    cJSON_free(printed);
    return buf;
}

static status_t type_error(kctx_t *k, const char *key, const cJSON *v, const char *expected)
{
    char buf[80];

    return kfail(k, "%s must be %s, got %s", key, expected, shown(v, buf, sizeof(buf)));
}

static bool is_int(const cJSON *v, double lo, double hi)
{
    return cJSON_IsNumber(v) && floor(v->valuedouble) == v->valuedouble && v->valuedouble >= lo &&
           v->valuedouble <= hi;
}

static status_t get_int(kctx_t *k, const cJSON *cfg, const char *key, bool required, int lo,
                        int *ret)
{
    const cJSON *v = kget(cfg, key);

    if (v == NULL || cJSON_IsNull(v))
        return required ? kfail(k, "%s is missing", key) : STATUS_OK;
    if (!is_int(v, lo, INT_MAX))
        return type_error(k, key, v, lo > 0 ? "a positive integer" : "a non-negative integer");
    *ret = (int)v->valuedouble;
    return STATUS_OK;
}

/* An integer or a list of two, as Keras stores kernel_size, strides and pool_size. */
static status_t get_pair(kctx_t *k, const cJSON *cfg, const char *key, bool required, int ret[2])
{
    const cJSON *v = kget(cfg, key);

    if (v == NULL || cJSON_IsNull(v))
        return required ? kfail(k, "%s is missing", key) : STATUS_OK;
    if (is_int(v, 1, INT_MAX)) {
        ret[0] = ret[1] = (int)v->valuedouble;
        return STATUS_OK;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 ||
        !is_int(cJSON_GetArrayItem(v, 0), 1, INT_MAX) ||
        !is_int(cJSON_GetArrayItem(v, 1), 1, INT_MAX))
        return type_error(k, key, v, "a positive integer or a list of two");
    ret[0] = (int)cJSON_GetArrayItem(v, 0)->valuedouble;
    ret[1] = (int)cJSON_GetArrayItem(v, 1)->valuedouble;
    return STATUS_OK;
}

/* Margins: N, [H, W] or [[top, bottom], [left, right]], non-negative integers. */
static status_t get_margins(kctx_t *k, const cJSON *cfg, const char *key, int ret[4])
{
    const cJSON *v = kget(cfg, key), *a, *b;
    const char *expected = "a non-negative integer, a list of two, or two lists of two";

    if (v == NULL || cJSON_IsNull(v))
        return STATUS_OK;
    if (is_int(v, 0, INT_MAX)) {
        ret[0] = ret[1] = ret[2] = ret[3] = (int)v->valuedouble;
        return STATUS_OK;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return type_error(k, key, v, expected);
    a = cJSON_GetArrayItem(v, 0), b = cJSON_GetArrayItem(v, 1);
    if (is_int(a, 0, INT_MAX) && is_int(b, 0, INT_MAX)) {
        ret[0] = ret[1] = (int)a->valuedouble;
        ret[2] = ret[3] = (int)b->valuedouble;
        return STATUS_OK;
    }
    for (int i = 0; i < 2; i++) {
        const cJSON *p = i == 0 ? a : b;
        if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 2 ||
            !is_int(cJSON_GetArrayItem(p, 0), 0, INT_MAX) ||
            !is_int(cJSON_GetArrayItem(p, 1), 0, INT_MAX))
            return type_error(k, key, v, expected);
        ret[2 * i] = (int)cJSON_GetArrayItem(p, 0)->valuedouble;
        ret[2 * i + 1] = (int)cJSON_GetArrayItem(p, 1)->valuedouble;
    }
    return STATUS_OK;
}

/* A 1D window's size: a positive integer or a list of one (Keras writes [3]). */
static status_t get_length(kctx_t *k, const cJSON *cfg, const char *key, bool required, int *ret)
{
    const cJSON *v = kget(cfg, key);

    if (v == NULL || cJSON_IsNull(v))
        return required ? kfail(k, "%s is missing", key) : STATUS_OK;
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1)
        v = cJSON_GetArrayItem(v, 0);
    if (!is_int(v, 1, INT_MAX))
        return type_error(k, key, kget(cfg, key), "a positive integer or a list of one");
    *ret = (int)v->valuedouble;
    return STATUS_OK;
}

static status_t get_bool(kctx_t *k, const cJSON *cfg, const char *key, bool *ret)
{
    const cJSON *v = kget(cfg, key);

    if (v == NULL || cJSON_IsNull(v))
        return STATUS_OK;
    if (!cJSON_IsBool(v))
        return type_error(k, key, v, "true or false");
    *ret = cJSON_IsTrue(v);
    return STATUS_OK;
}

/* A shape: [batch, d1, ...] when with_batch (the batch may be null or a number), else [d1, ...];
 * every dimension a positive integer, or -1 once when allow_minus_one (Reshape). */
static status_t parse_shape(kctx_t *k, const char *key, const cJSON *v, bool with_batch,
                            bool allow_minus_one, int *ret, int *ret_rank)
{
    int n = cJSON_GetArraySize(v), first = with_batch ? 1 : 0, minus_ones = 0;

    if (!cJSON_IsArray(v) || n - first < 1 || n - first > JOB_MAX_RANK)
        return type_error(k, key, v,
                          with_batch ? "[null, d1, ...] with 1 to 4 dimensions"
                                     : "a list of 1 to 4 dimensions");
    if (with_batch) {
        const cJSON *b = cJSON_GetArrayItem(v, 0);
        if (!cJSON_IsNull(b) && !is_int(b, 1, INT_MAX))
            return type_error(k, key, v, "a shape whose batch dimension is null or positive");
    }
    for (int i = first; i < n; i++) {
        const cJSON *d = cJSON_GetArrayItem(v, i);
        if (allow_minus_one && is_int(d, -1, -1) && ++minus_ones == 1) {
            ret[i - first] = -1;
            continue;
        }
        if (!is_int(d, 1, INT_MAX))
            return type_error(k, key, v,
                              cJSON_IsNull(d) ? "a shape with fixed dimensions (no null past the "
                                                "batch)"
                                              : "a shape of positive integers");
        ret[i - first] = (int)d->valuedouble;
    }
    *ret_rank = n - first;
    return STATUS_OK;
}

/* "float32", or a DTypePolicy / FloatDTypePolicy (Keras 3) or Policy (Keras 2 mixed precision)
 * object whose name is float32. */
static status_t check_dtype(kctx_t *k, const char *key, const cJSON *v)
{
    const cJSON *name = v;

    if (cJSON_IsObject(v)) {
        const char *cls = cJSON_GetStringValue(kget(v, "class_name"));
        if (cls == NULL || (strcmp(cls, "DTypePolicy") != 0 &&
                            strcmp(cls, "FloatDTypePolicy") != 0 && strcmp(cls, "Policy") != 0))
            return type_error(k, key, v, "a float32 dtype policy");
        name = kget(kget(v, "config"), "name");
    }
    if (v == NULL || cJSON_IsNull(v))
        return STATUS_OK;
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "float32") != 0) {
        char buf[80];
        return kfail(k, "%s %s is not supported (Tessera computes in float32)", key,
                     shown(name, buf, sizeof(buf)));
    }
    return STATUS_OK;
}

static bool all_ones(const cJSON *v)
{
    const cJSON *item;

    if (is_int(v, 1, 1))
        return true;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return false;
    cJSON_ArrayForEach(item, v) if (!is_int(item, 1, 1)) return false;
    return true;
}

/* obj must be an object whose keys all name keys[0..n) (n <= 64), each at most once: Keras
 * writes every key once, and a second one would be read differently by Python's json. */
static status_t check_keys(kctx_t *k, const cJSON *obj, const char *what, const char *const *keys,
                           size_t n)
{
    uint64_t seen = 0;
    const cJSON *v;

    if (!cJSON_IsObject(obj))
        return type_error(k, what, obj, "an object");
    cJSON_ArrayForEach(v, obj)
    {
        int i = job_name_index(v->string, keys, n);
        if (i < 0)
            return kfail(k, "unknown %s key '%s'", what, v->string);
        if (seen & (UINT64_C(1) << i))
            return kfail(k, "%s key '%s' is given twice", what, v->string);
        seen |= UINT64_C(1) << i;
    }
    return STATUS_OK;
}

/* Checks one config key against its rule. */
static status_t check_rule(kctx_t *k, const cJSON *v, job_keras_rule_t rule)
{
    const char *key = v->string;

    switch (rule) {
    case JOB_KERAS_NULL:
        if (cJSON_IsNull(v) || (strcmp(key, "lora_rank") == 0 && is_int(v, 0, 0)))
            return STATUS_OK;
        return kfail(k, "%s is not supported", key);
    case JOB_KERAS_TRUE:
        if (cJSON_IsTrue(v))
            return STATUS_OK;
        return cJSON_IsFalse(v) ? kfail(k, "%s false is not supported (every layer trains)", key)
                                : type_error(k, key, v, "true");
    case JOB_KERAS_FALSE:
        if (cJSON_IsFalse(v))
            return STATUS_OK;
        return cJSON_IsTrue(v) ? kfail(k, "%s true is not supported", key)
                               : type_error(k, key, v, "false");
    case JOB_KERAS_CHANNELS_LAST:
        if (cJSON_IsNull(v) || (cJSON_IsString(v) && strcmp(v->valuestring, "channels_last") == 0))
            return STATUS_OK;
        return kfail(k, "%s %s is not supported (Tessera is channels_last)", key,
                     cJSON_IsString(v) ? v->valuestring : "of this kind");
    case JOB_KERAS_ONES:
        return all_ones(v) ? STATUS_OK : kfail(k, "%s other than 1 is not supported", key);
    case JOB_KERAS_DTYPE:
        return check_dtype(k, key, v);
    case JOB_KERAS_LAST_AXIS:
        if (is_int(v, -1, -1) ||
            (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && is_int(v->child, -1, -1)))
            return STATUS_OK;
        return kfail(k, "%s other than -1 (the last axis) is not supported", key);
    default:
        return STATUS_OK;
    }
}

/* The rule for config key `key` of a layer of `info`'s kind, or NULL when it has none; *ret_at
 * gets a number unique to the key within the layer (for spotting repeats). */
static const job_keras_key_t *find_rule(const job_layer_info_t *info, const char *key,
                                        size_t *ret_at)
{
    static const job_keras_key_t read = {NULL, JOB_KERAS_VALUE};
    size_t at = 0;

    for (size_t i = 0; i < JOB_N_OF(common_keys); i++, at++)
        if (strcmp(key, common_keys[i].key) == 0)
            return *ret_at = at, &common_keys[i];
    for (size_t i = 0; i < info->n_keys; i++, at++)
        if (strcmp(key, info->keys[i]) == 0)
            return *ret_at = at, &read;
    for (size_t i = 0; i < info->n_keras_fixed; i++, at++)
        if (strcmp(key, info->keras_fixed[i].key) == 0)
            return *ret_at = at, &info->keras_fixed[i];
    return NULL;
}

/* Every key of cfg must be a common key, one the kind reads or one it fixes; each is checked by
 * its rule, and none may repeat. */
static status_t check_config(kctx_t *k, const job_layer_info_t *info, const cJSON *cfg)
{
    uint64_t seen = 0;
    const cJSON *v;

    cJSON_ArrayForEach(v, cfg)
    {
        size_t at = 0;
        const job_keras_key_t *rule = find_rule(info, v->string, &at);
        if (rule == NULL) {
            char allowed[300] = "";
            job_join_names(allowed, sizeof(allowed), info->keys, info->n_keys);
            for (size_t i = 0; i < info->n_keras_fixed; i++) {
                size_t len = strlen(allowed);
                snprintf(allowed + len, sizeof(allowed) - len, "%s%s", len > 0 ? ", " : "",
                         info->keras_fixed[i].key);
            }
            return kfail(k, "unknown %s option '%s' (Tessera reads: name, trainable, dtype%s%s)",
                         info->keras_class, v->string, allowed[0] != '\0' ? ", " : "", allowed);
        }
        if (seen & (UINT64_C(1) << at))
            return kfail(k, "option '%s' is given twice", v->string);
        seen |= UINT64_C(1) << at;
        STATUS_CHECK(check_rule(k, v, rule->rule));
    }
    return STATUS_OK;
}

static status_t get_activation(kctx_t *k, const cJSON *cfg, const char *key, bool required,
                               job_activation_t *ret)
{
    const cJSON *v = kget(cfg, key);
    char msg[300];

    if (v == NULL || cJSON_IsNull(v)) {
        if (required)
            return kfail(k, "%s is missing", key);
        *ret = JOB_ACT_LINEAR;
        return STATUS_OK;
    }
    if (!cJSON_IsString(v))
        return type_error(k, key, v, "an activation name");
    if (job_activation_parse(v->valuestring, ret) && *ret != JOB_ACT_GELU_APPROXIMATE)
        return STATUS_OK;
    if (strcmp(v->valuestring, "gelu_approximate") == 0) /* a job file's name, not Keras's */
        return kfail(k,
                     "%s: gelu_approximate is not a Keras activation (Keras's JSON names only "
                     "the exact gelu); a job file's model may use it",
                     key);
    job_unknown_name(msg, sizeof(msg), "activation", v->valuestring, job_activation_names,
                     JOB_N_OF(job_activation_names));
    return kfail(k, "%s", msg);
}

static status_t get_padding(kctx_t *k, const cJSON *cfg, const char *key, bool *ret_same)
{
    const cJSON *v = kget(cfg, key);

    if (v == NULL || cJSON_IsNull(v))
        return STATUS_OK;
    if (cJSON_IsString(v) && strcmp(v->valuestring, "valid") == 0)
        *ret_same = false;
    else if (cJSON_IsString(v) && strcmp(v->valuestring, "same") == 0)
        *ret_same = true;
    else
        return type_error(k, key, v, "\"valid\" or \"same\"");
    return STATUS_OK;
}

/* A number parameter of an initializer's config, keeping *ret (the default) when absent. */
static status_t init_param(kctx_t *k, const char *key, const cJSON *cfg, const char *param,
                           double *ret)
{
    const cJSON *v = kget(cfg, param);
    char what[96];

    if (v == NULL || cJSON_IsNull(v))
        return STATUS_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        snprintf(what, sizeof(what), "%s.%s", key, param);
        return type_error(k, what, v, "a number");
    }
    *ret = v->valuedouble;
    return STATUS_OK;
}

/* A serialized Keras object v (of key): {"class_name": NAME, "config": {...}} with or without
 * module and registered_name, or a name string. *ret_name gets NAME (NULL when v is neither)
 * and *ret_cfg the config (NULL for a name or a null config); `what` names the kind of object
 * in errors ("an initializer"). */
static status_t unwrap(kctx_t *k, const cJSON *v, const char *key, const char *what,
                       const char **ret_name, const cJSON **ret_cfg)
{
    static const char *const wrapper_keys[] = {"class_name", "config", "module", "registered_name"};
    char expected[96];

    *ret_cfg = NULL;
    if (!cJSON_IsObject(v)) {
        *ret_name = cJSON_GetStringValue(v);
        return STATUS_OK;
    }
    STATUS_CHECK(check_keys(k, v, key, wrapper_keys, JOB_N_OF(wrapper_keys)));
    *ret_name = cJSON_GetStringValue(kget(v, "class_name"));
    *ret_cfg = kget(v, "config");
    if (*ret_cfg != NULL && !cJSON_IsObject(*ret_cfg) && !cJSON_IsNull(*ret_cfg)) {
        snprintf(expected, sizeof(expected), "%s whose config is an object", what);
        return type_error(k, key, v, expected);
    }
    return STATUS_OK;
}

/* An initializer: {"class_name": "GlorotUniform", "config": {"seed": null}} with or without
 * module and registered_name, or a name string ("glorot_uniform"). */
static status_t get_init(kctx_t *k, const cJSON *cfg, const char *key, job_init_t *ret)
{
    const cJSON *v = kget(cfg, key), *icfg = NULL, *item;
    const job_init_info_t *info;
    const char *name;
    job_init_t init = {0};
    status_msg_t why;
    char msg[400];

    if (v == NULL || cJSON_IsNull(v))
        return STATUS_OK;
    STATUS_CHECK(unwrap(k, v, key, "an initializer", &name, &icfg));
    info = name != NULL ? job_init_find(name) : NULL;
    if (info == NULL) {
        size_t n;
        const char *const *names = job_init_names(&n);
        if (name == NULL)
            return type_error(k, key, v, "an initializer");
        job_unknown_name(msg, sizeof(msg), "initializer", name, names, n);
        return kfail(k, "%s: %s", key, msg);
    }
    init.kind = info->kind;
    init.a = info->a_default;
    init.b = info->b_default;
    cJSON_ArrayForEach(item, icfg)
    {
        const char *p = item->string;
        /* Five names are allowed, so a repeat shows up within the first six keys. */
        for (const cJSON *e = icfg->child; e != item; e = e->next)
            if (strcmp(e->string, p) == 0)
                return kfail(k, "%s: parameter '%s' is given twice", key, p);
        bool known = (info->a_key != NULL && strcmp(p, info->a_key) == 0) ||
                     (info->b_key != NULL && strcmp(p, info->b_key) == 0) ||
                     (info->seeded && strcmp(p, "seed") == 0);
        /* Keras 3.12+ writes input_axes/output_axes on variance-scaling initializers; null means
         * the usual fan computation. */
        bool axes = info->seeded && info->a_key == NULL &&
                    (strcmp(p, "input_axes") == 0 || strcmp(p, "output_axes") == 0);
        if (axes && !cJSON_IsNull(item))
            return kfail(k, "%s: %s is not supported", key, p);
        if (!known && !axes)
            return kfail(k, "%s: unknown %s parameter '%s'", key, info->class_name, p);
    }
    if (info->a_key != NULL)
        STATUS_CHECK(init_param(k, key, icfg, info->a_key, &init.a));
    if (info->b_key != NULL)
        STATUS_CHECK(init_param(k, key, icfg, info->b_key, &init.b));
    item = kget(icfg, "seed");
    if (info->seeded && item != NULL && !cJSON_IsNull(item)) {
        if (!is_int(item, 0, 9007199254740992.0))
            return type_error(k, "seed", item, "a non-negative integer or null");
        init.has_seed = true;
        init.seed = (uint64_t)item->valuedouble;
    }
    if (initializer_check(&init, &why) != STATUS_OK)
        return kfail(k, "%s: %s", key, why.text);
    *ret = init;
    return STATUS_OK;
}

/* ---- a layer's options in a Keras config (job_layer_reader_t) ---- */

typedef struct json_reader {
    job_layer_reader_t base;
    kctx_t *k;
    const cJSON *cfg;
} json_reader_t;

static json_reader_t *json_reader(job_layer_reader_t *r)
{
    return (json_reader_t *)r;
}

static status_t json_get_int(job_layer_reader_t *r, const char *key, bool required, int lo,
                             int *ret)
{
    json_reader_t *j = json_reader(r);
    return get_int(j->k, j->cfg, key, required, lo, ret);
}

/* A seed: null, or an integer a double holds exactly. */
static status_t json_get_seed(job_layer_reader_t *r, const char *key, uint64_t *ret)
{
    json_reader_t *j = json_reader(r);
    const cJSON *v = kget(j->cfg, key);

    if (v == NULL || cJSON_IsNull(v))
        return STATUS_OK;
    if (!is_int(v, 0, 9007199254740992.0))
        return type_error(j->k, key, v, "a non-negative integer or null");
    *ret = (uint64_t)v->valuedouble;
    return STATUS_OK;
}

static status_t json_get_number(job_layer_reader_t *r, const char *key, bool required, double *ret)
{
    json_reader_t *j = json_reader(r);
    const cJSON *v = kget(j->cfg, key);

    if (v == NULL || cJSON_IsNull(v))
        return required ? kfail(j->k, "%s is missing", key) : STATUS_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return type_error(j->k, key, v, "a number");
    *ret = v->valuedouble;
    return STATUS_OK;
}

static status_t json_get_bool(job_layer_reader_t *r, const char *key, bool *ret)
{
    json_reader_t *j = json_reader(r);
    return get_bool(j->k, j->cfg, key, ret);
}

static status_t json_get_pair(job_layer_reader_t *r, const char *key, bool required, int ret[2])
{
    json_reader_t *j = json_reader(r);
    return get_pair(j->k, j->cfg, key, required, ret);
}

static status_t json_get_shape(job_layer_reader_t *r, const char *key, int *ret, int *ret_rank)
{
    json_reader_t *j = json_reader(r);
    const cJSON *v = kget(j->cfg, key);

    if (v == NULL || cJSON_IsNull(v))
        return kfail(j->k, "%s is missing", key);
    return parse_shape(j->k, key, v, false, true, ret, ret_rank);
}

static status_t json_get_activation(job_layer_reader_t *r, const char *key, bool required,
                                    job_activation_t *ret)
{
    json_reader_t *j = json_reader(r);
    return get_activation(j->k, j->cfg, key, required, ret);
}

static status_t json_get_padding(job_layer_reader_t *r, const char *key, bool *ret_same)
{
    json_reader_t *j = json_reader(r);
    return get_padding(j->k, j->cfg, key, ret_same);
}

static status_t json_get_init(job_layer_reader_t *r, const char *key, job_init_t *ret)
{
    json_reader_t *j = json_reader(r);
    return get_init(j->k, j->cfg, key, ret);
}

/* A regularizer as Keras serializes it: {"class_name": "L1" | "L2" | "L1L2", "config": {"l1":
 * X, "l2": Y}} with or without module and registered_name, or a name string ("l1", "l2",
 * "l1_l2": Keras's defaults, 0.01). */
static status_t json_get_regularizer(job_layer_reader_t *r, const char *key, job_regularizer_t *ret)
{
    json_reader_t *j = json_reader(r);
    kctx_t *k = j->k;
    const cJSON *v = kget(j->cfg, key), *cfg = NULL, *item;
    job_regularizer_t reg = {0};
    const char *name;
    bool has_l1, has_l2;

    if (v == NULL || cJSON_IsNull(v))
        return STATUS_OK;
    STATUS_CHECK(unwrap(k, v, key, "a regularizer", &name, &cfg));
    if (!cJSON_IsObject(v)) { /* Keras's names for its default regularizers */
        if (name != NULL && strcmp(name, "l1") == 0)
            name = "L1";
        else if (name != NULL && strcmp(name, "l2") == 0)
            name = "L2";
        else if (name != NULL && strcmp(name, "l1_l2") == 0)
            name = "L1L2";
    }
    if (name == NULL)
        return type_error(k, key, v, "a regularizer");
    has_l1 = strcmp(name, "L1") == 0 || strcmp(name, "L1L2") == 0;
    has_l2 = strcmp(name, "L2") == 0 || strcmp(name, "L1L2") == 0;
    if (!has_l1 && !has_l2)
        return kfail(k, "%s: regularizer %.60s is not supported (L1, L2 and L1L2 are)", key, name);
    /* Keras's defaults: 0.01 for L1 and L2 alone, 0 for L1L2's */
    reg.l1 = strcmp(name, "L1") == 0 ? 0.01 : 0;
    reg.l2 = strcmp(name, "L2") == 0 ? 0.01 : 0;
    cJSON_ArrayForEach(item, cfg)
    {
        if (!((has_l1 && strcmp(item->string, "l1") == 0) ||
              (has_l2 && strcmp(item->string, "l2") == 0)))
            return kfail(k, "%s: unknown %s parameter '%.40s'", key, name, item->string);
    }
    if (has_l1)
        STATUS_CHECK(init_param(k, key, cfg, "l1", &reg.l1));
    if (has_l2)
        STATUS_CHECK(init_param(k, key, cfg, "l2", &reg.l2));
    if (!(reg.l1 >= 0) || !(reg.l2 >= 0))
        return kfail(k, "%s: l1 and l2 must be >= 0, got %g and %g", key, reg.l1, reg.l2);
    *ret = reg;
    return STATUS_OK;
}

static status_t json_invalid(job_layer_reader_t *r, const char *key, const char *expected)
{
    json_reader_t *j = json_reader(r);
    return type_error(j->k, key, kget(j->cfg, key), expected);
}

static status_t json_get_length(job_layer_reader_t *r, const char *key, bool required, int *ret)
{
    json_reader_t *j = json_reader(r);
    return get_length(j->k, j->cfg, key, required, ret);
}

static status_t json_get_margins(job_layer_reader_t *r, const char *key, int ret[4])
{
    json_reader_t *j = json_reader(r);
    return get_margins(j->k, j->cfg, key, ret);
}

static status_t json_get_axes(job_layer_reader_t *r, const char *key, int *ret, int *ret_n)
{
    json_reader_t *j = json_reader(r);
    const cJSON *v = kget(j->cfg, key), *item;
    int n = 0;

    *ret_n = 0;
    if (v == NULL || cJSON_IsNull(v))
        return STATUS_OK;
    if (is_int(v, 1, INT_MAX)) {
        ret[0] = (int)v->valuedouble;
        *ret_n = 1;
        return STATUS_OK;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1 || cJSON_GetArraySize(v) > JOB_MAX_RANK)
        return type_error(j->k, key, v, "a list of 1 to 4 positive integers");
    cJSON_ArrayForEach(item, v)
    {
        if (!is_int(item, 1, INT_MAX))
            return type_error(j->k, key, v, "a list of 1 to 4 positive integers");
        ret[n++] = (int)item->valuedouble;
    }
    *ret_n = n;
    return STATUS_OK;
}

/* A constraint as Keras serializes it: {"class_name": "MaxNorm", "config": {"max_value": 2,
 * "axis": 0}} (module and registered_name allowed), or a name ("non_neg", "max_norm", ...). */
static status_t json_get_constraint(job_layer_reader_t *r, const char *key, job_constraint_t *ret)
{
    static const char *const names[] = {"non_neg", "max_norm", "unit_norm", "min_max_norm"};
    json_reader_t *j = json_reader(r);
    kctx_t *k = j->k;
    const cJSON *v = kget(j->cfg, key), *cfg = NULL, *item, *axis;
    job_constraint_t c = {0};
    const char *name, *bad;
    int kind = -1;

    if (v == NULL || cJSON_IsNull(v))
        return STATUS_OK;
    STATUS_CHECK(unwrap(k, v, key, "a constraint", &name, &cfg));
    if (name == NULL)
        return type_error(k, key, v, "a constraint");
    for (int i = 0; i < 4; i++)
        if (strcmp(name, job_constraint_classes[i]) == 0 || strcmp(name, names[i]) == 0)
            kind = i;
    if (kind < 0)
        return kfail(k,
                     "%s: constraint %.60s is not supported (NonNeg, MaxNorm, UnitNorm and "
                     "MinMaxNorm are)",
                     key, name);
    c.kind = (job_constraint_kind_t)(JOB_CONSTRAINT_NON_NEG + kind);
    job_constraint_default(&c);
    cJSON_ArrayForEach(item, cfg)
    {
        const char *p = item->string;
        bool known = (strcmp(p, "axis") == 0 && c.kind != JOB_CONSTRAINT_NON_NEG) ||
                     (strcmp(p, "max_value") == 0 && (c.kind == JOB_CONSTRAINT_MAX_NORM ||
                                                      c.kind == JOB_CONSTRAINT_MIN_MAX_NORM)) ||
                     ((strcmp(p, "min_value") == 0 || strcmp(p, "rate") == 0) &&
                      c.kind == JOB_CONSTRAINT_MIN_MAX_NORM);
        if (!known)
            return kfail(k, "%s: unknown %s parameter '%.40s'", key, name, p);
    }
    STATUS_CHECK(init_param(k, key, cfg, "max_value", &c.max_value));
    STATUS_CHECK(init_param(k, key, cfg, "min_value", &c.min_value));
    STATUS_CHECK(init_param(k, key, cfg, "rate", &c.rate));
    axis = cfg != NULL ? kget(cfg, "axis") : NULL;
    if (axis != NULL && !cJSON_IsNull(axis)) {
        c.axes = 0;
        if (is_int(axis, 0, JOB_MAX_RANK - 1)) {
            c.axes = 1u << (int)axis->valuedouble;
        } else if (cJSON_IsArray(axis) && cJSON_GetArraySize(axis) >= 1) {
            cJSON_ArrayForEach(item, axis)
            {
                if (!is_int(item, 0, JOB_MAX_RANK - 1))
                    return type_error(k, key, axis, "an axis 0 to 3, or a list of them");
                c.axes |= 1u << (int)item->valuedouble;
            }
        } else {
            return type_error(k, key, axis, "an axis 0 to 3, or a list of them");
        }
    }
    if (!job_constraint_valid(&c, &bad))
        return kfail(k, "%s: %s %s is out of range", key, name, bad);
    *ret = c;
    return STATUS_OK;
}

static status_t json_get_axis(job_layer_reader_t *r, const char *key, int *ret)
{
    json_reader_t *j = json_reader(r);
    const cJSON *v = kget(j->cfg, key);

    if (v == NULL)
        return STATUS_OK;
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1)
        v = v->child;
    if (!is_int(v, -JOB_MAX_RANK, JOB_MAX_RANK) || v->valuedouble == 0)
        return type_error(j->k, key, kget(j->cfg, key),
                          "an axis other than the batch's: 1 to 4, or -1 to -4");
    *ret = (int)v->valuedouble;
    return STATUS_OK;
}

static status_t json_get_choice(job_layer_reader_t *r, const char *key, const char *const *names,
                                int n, int *ret)
{
    json_reader_t *j = json_reader(r);
    const cJSON *v = kget(j->cfg, key);
    char msg[400];
    int i;

    if (v == NULL || cJSON_IsNull(v))
        return STATUS_OK;
    if (!cJSON_IsString(v))
        return type_error(j->k, key, v, "a string");
    if ((i = job_name_index(v->valuestring, names, (size_t)n)) < 0) {
        job_unknown_name(msg, sizeof(msg), key, v->valuestring, names, (size_t)n);
        return kfail(j->k, "%s", msg);
    }
    *ret = i;
    return STATUS_OK;
}

static const job_layer_reader_ops_t json_reader_ops = {
    json_get_int,   json_get_seed,       json_get_number,  json_get_bool, json_get_pair,
    json_get_shape, json_get_activation, json_get_padding, json_get_init, json_get_regularizer,
    json_invalid,   json_get_length,     json_get_margins, json_get_axes, json_get_constraint,
    json_get_axis,  json_get_choice,
};

/* Sets the model's input shape from a batch shape, or checks it against the one already set
 * (TF 2.15 writes it both on the InputLayer and on the first layer). */
static status_t set_input_shape(kctx_t *k, job_model_t *m, const char *key, const cJSON *v)
{
    int shape[JOB_MAX_RANK] = {0}, rank;

    STATUS_CHECK(parse_shape(k, key, v, true, false, shape, &rank));
    if (m->input_rank == 0) {
        memcpy(m->input_shape, shape, sizeof(shape));
        m->input_rank = rank;
        return STATUS_OK;
    }
    if (rank != m->input_rank || memcmp(shape, m->input_shape, (size_t)rank * sizeof(int)) != 0)
        return kfail(k, "%s disagrees with the model's input shape", key);
    return STATUS_OK;
}

/* {"class_name": "InputLayer", "config": {"batch_input_shape" | "batch_shape": [null, ...],
 * "dtype", "sparse", "ragged", "name", "optional"}}: the model's input, not a layer. Sets the
 * model's input shape (the first InputLayer's: a Functional model's inputs are put in
 * input_layers' order later) and, for a Functional model, adds it to m->inputs. */
static status_t parse_input_layer(kctx_t *k, const cJSON *cfg, bool functional, job_model_t *m)
{
    static const char *const keys[] = {
        "batch_input_shape", "batch_shape", "dtype", "sparse", "ragged", "name",
        "optional",          "input_shape"};
    static const char *const dtypes[] = {"float32", "float64", "float16", "int32",
                                         "int64",   "uint8",   "int8",    "int16"};
    const cJSON *v, *shape = NULL;

    STATUS_CHECK(check_keys(k, cfg, "InputLayer option", keys, JOB_N_OF(keys)));
    cJSON_ArrayForEach(v, cfg)
    {
        if ((strcmp(v->string, "sparse") == 0 || strcmp(v->string, "ragged") == 0 ||
             strcmp(v->string, "optional") == 0) &&
            !cJSON_IsFalse(v))
            return kfail(k, "%s inputs are not supported", v->string);
        if (strcmp(v->string, "dtype") == 0 &&
            (!cJSON_IsString(v) || job_name_index(v->valuestring, dtypes, JOB_N_OF(dtypes)) < 0))
            return type_error(k, "dtype", v, "a float or integer dtype name");
        if (strcmp(v->string, "batch_input_shape") == 0 || strcmp(v->string, "batch_shape") == 0)
            shape = v;
    }
    if (shape == NULL)
        return kfail(k, "the InputLayer has no batch_shape");
    if (functional) {
        const char *name = cJSON_GetStringValue(kget(cfg, "name"));
        job_model_input_t *in = &m->inputs[m->n_inputs];
        if (name == NULL)
            return kfail(k, "the InputLayer has no name");
        if (strlen(name) >= sizeof(in->name))
            return kfail(k, "the name is longer than 63 characters");
        if (m->n_inputs == JOB_MAX_MODEL_INPUTS)
            return kfail(k, "a model takes at most %d inputs", JOB_MAX_MODEL_INPUTS);
        for (int i = 0; i < m->n_inputs; i++)
            if (strcmp(m->inputs[i].name, name) == 0)
                return kfail(k, "a second InputLayer named '%.60s'", name);
        STATUS_CHECK(parse_shape(k, shape->string, shape, true, false, in->shape, &in->rank));
        snprintf(in->name, sizeof(in->name), "%s", name);
        if (m->n_inputs++ > 0)
            return STATUS_OK;
    }
    return set_input_shape(k, m, shape->string, shape);
}

/* One entry of config.layers (a Functional model's entries also have inbound_nodes, read by
 * parse_inbound). */
static status_t parse_layer(kctx_t *k, const cJSON *entry, size_t index, bool functional,
                            job_model_t *m)
{
    static const char *const entry_keys[] = {"class_name",      "config",       "module",
                                             "registered_name", "build_config", "name",
                                             "inbound_nodes"};
    const char *cls_name = cJSON_GetStringValue(kget(entry, "class_name"));
    const cJSON *cfg = kget(entry, "config"), *v;
    const char *name = cJSON_GetStringValue(kget(cfg, "name"));
    const job_layer_info_t *info = NULL;
    const char *classes[JOB_LAYER_KINDS + 1] = {"InputLayer"};
    json_reader_t reader = {{&json_reader_ops}, k, cfg};
    job_layer_t *l;
    int kind, input_length = 0;
    char msg[400];

    if (name != NULL)
        snprintf(k->layer, sizeof(k->layer), "layer '%.60s'", name);
    else
        snprintf(k->layer, sizeof(k->layer), "layers[%zu]", index);
    if (!cJSON_IsObject(entry) || cls_name == NULL || !cJSON_IsObject(cfg))
        return kfail(k, "a layer is {\"class_name\": ..., \"config\": {...}}");
    STATUS_CHECK(
        check_keys(k, entry, "layer", entry_keys, JOB_N_OF(entry_keys) - (functional ? 0 : 1)));
    if (strcmp(cls_name, "InputLayer") == 0) {
        if (!functional && (m->n_layers > 0 || m->input_rank > 0))
            return kfail(k, "an InputLayer must come first");
        return parse_input_layer(k, cfg, functional, m);
    }
    job_layer_names(classes + 1, true);
    kind = job_name_index(cls_name, classes + 1, JOB_LAYER_KINDS);
    if (kind >= 0)
        info = job_layer_info((job_layer_kind_t)kind);
    if (info == NULL) {
        job_unknown_name(msg, sizeof(msg), "layer class", cls_name, classes, JOB_N_OF(classes));
        return kfail(k, "%s", msg);
    }
    if (name != NULL && strlen(name) >= sizeof(l->name))
        return kfail(k, "the name is longer than 63 characters");
    STATUS_CHECK(check_config(k, info, cfg));
    STATUS_CHECK(job_model_add_layer(m, (job_layer_kind_t)kind, k->file, &l, k->err));
    snprintf(l->name, sizeof(l->name), "%s", name != NULL ? name : "");
    STATUS_CHECK(info->read(&reader.base, l, &input_length));
    STATUS_CHECK(job_layer_read_common(&reader.base, l));
    v = kget(cfg, "batch_input_shape");
    if (v != NULL && !cJSON_IsNull(v)) {
        if (m->n_layers > 1)
            return kfail(k, "batch_input_shape belongs on the first layer only");
        STATUS_CHECK(set_input_shape(k, m, "batch_input_shape", v));
    }
    if (input_length > 0 && m->n_layers == 1) {
        if (m->input_rank == 0) {
            m->input_rank = 1;
            m->input_shape[0] = input_length;
        } else if (m->input_rank != 1 || m->input_shape[0] != input_length) {
            return kfail(k, "input_length %d disagrees with the model's input shape", input_length);
        }
    }
    return STATUS_OK;
}

/* A model's own trainable (true only) and dtype (float32; null in some Functional configs). */
static status_t check_model_options(kctx_t *k, const cJSON *cfg)
{
    const cJSON *v = kget(cfg, "trainable");

    if (v != NULL && !cJSON_IsTrue(v))
        return kfail(k, "trainable must be true (Tessera trains every layer)");
    v = kget(cfg, "dtype");
    if (v != NULL && !cJSON_IsNull(v))
        return check_dtype(k, "dtype", v);
    return STATUS_OK;
}

/* config of the Sequential: name, layers, and in Keras 3 trainable, dtype, build_input_shape. */
static status_t parse_sequential_config(kctx_t *k, const cJSON *cfg, job_model_t *m)
{
    static const char *const config_keys[] = {"name", "layers", "trainable", "dtype",
                                              "build_input_shape"};
    const cJSON *layers = kget(cfg, "layers"), *v;
    size_t i = 0;

    STATUS_CHECK(check_keys(k, cfg, "Sequential config", config_keys, JOB_N_OF(config_keys)));
    STATUS_CHECK(check_model_options(k, cfg));
    if (!cJSON_IsArray(layers))
        return kfail(k, "config.layers must be a list");
    cJSON_ArrayForEach(v, layers) STATUS_CHECK(parse_layer(k, v, i++, false, m));
    k->layer[0] = '\0';
    /* A model built from an input shape but saved without an InputLayer (some Keras 3
     * versions): the shape is in build_input_shape. */
    v = kget(cfg, "build_input_shape");
    if (m->input_rank == 0 && v != NULL && !cJSON_IsNull(v))
        STATUS_CHECK(set_input_shape(k, m, "build_input_shape", v));
    return STATUS_OK;
}

/* ---- Functional models ---- */

/* A Functional model being read: config.layers parsed into m->layers (one entry a layer, the
 * template of its calls), then the graph made of them, one entry a call (job_layer_t.shares),
 * in an order where every call comes after what it reads, as Keras's from_config makes it:
 * sweeps over the layers in their order, each making its calls while their inputs exist. */
typedef struct kgraph {
    char masks[JOB_MAX_MODEL_INPUTS][64];     /* the not_equal(input, 0) operations (masks) */
    char mask_from[JOB_MAX_MODEL_INPUTS][64]; /* the InputLayer each one compares */
    int n_masks;
    const cJSON **calls; /* layer t's inbound_nodes */
    int *n_calls, *made; /* calls it lists, calls made so far */
    /* call c of layer t is slot first[t] + c: node_of[slot] its graph entry once made (-1
     * before), parsed[slot] the layer with what the call reads (read_call's references) */
    int *first, *node_of;
    job_layer_t *parsed;
    job_model_t nodes; /* the graph */
} kgraph_t;

/* A call's keyword arguments: none, Keras 3's "mask": null (a layer that takes a mask, called
 * without one), or for a GlobalAveragePooling1D (l) the mask Keras 3 writes as the operation
 * not_equal(input, 0) (g->masks), which an Embedding's mask_zero brings it (l->masked: the
 * engine checks that one does). Any other mask or argument is refused; l NULL: no mask. */
static status_t check_call_kwargs(kctx_t *k, const kgraph_t *g, const cJSON *kw, job_layer_t *l)
{
    const cJSON *v;

    if (!cJSON_IsObject(kw))
        return kfail(k, "call arguments (kwargs) must be an object");
    cJSON_ArrayForEach(v, kw)
    {
        const cJSON *hist = kget(kget(v, "config"), "keras_history");
        const char *name = cJSON_GetStringValue(cJSON_GetArrayItem(hist, 0));
        int known = -1;
        if (strcmp(v->string, "mask") != 0)
            return kfail(k, "call argument '%.40s' (kwargs) is not supported", v->string);
        if (cJSON_IsNull(v))
            continue;
        for (int i = 0; name != NULL && i < g->n_masks; i++)
            if (strcmp(g->masks[i], name) == 0)
                known = i;
        if (known < 0 || cJSON_GetArraySize(hist) != 3)
            return kfail(k, "is called with a mask other than not_equal(input, 0), the mask of an "
                            "Embedding's mask_zero: not supported");
        if (l == NULL || l->kind != JOB_LAYER_GLOBAL_AVERAGE_POOLING1D)
            return kfail(k, "is called with a mask: only GlobalAveragePooling1D uses one (an "
                            "Embedding's mask_zero)");
        snprintf(l->mask_of, sizeof(l->mask_of), "%s", g->mask_from[known]);
        l->masked = true;
    }
    return STATUS_OK;
}

/* Keras 3 writes a layer's inputs as tensors that name where they come from: {"class_name":
 * "__keras_tensor__", "config": {"shape", "dtype", "keras_history": [LAYER, NODE, TENSOR]}};
 * Keras 2 as [LAYER, NODE, TENSOR, {kwargs}]. NODE counts the layer's calls. *ret: JOB_INPUT_OF
 * an InputLayer, or the call's slot (g->first[LAYER] + NODE), whose graph entry node_of holds
 * once it is made. */
static status_t resolve_tensor(kctx_t *k, const kgraph_t *g, const job_model_t *m, const cJSON *t,
                               int *ret)
{
    const cJSON *hist = t, *kw;
    const char *name;
    int call;

    if (cJSON_IsObject(t)) {
        const char *cls = cJSON_GetStringValue(kget(t, "class_name"));
        if (cls == NULL || strcmp(cls, "__keras_tensor__") != 0)
            return kfail(k, "an input of inbound_nodes is not a Keras tensor");
        hist = kget(kget(t, "config"), "keras_history");
    }
    if (!cJSON_IsArray(hist) || cJSON_GetArraySize(hist) < 3 || cJSON_GetArraySize(hist) > 4 ||
        (name = cJSON_GetStringValue(cJSON_GetArrayItem(hist, 0))) == NULL ||
        !is_int(cJSON_GetArrayItem(hist, 1), 0, JOB_MAX_LAYERS))
        return kfail(k, "an input of inbound_nodes is not [LAYER, NODE, TENSOR]");
    call = cJSON_GetArrayItem(hist, 1)->valueint;
    if (!is_int(cJSON_GetArrayItem(hist, 2), 0, 0))
        return kfail(k,
                     "reads a second output of '%.60s': layers with several outputs are not "
                     "supported",
                     name);
    kw = cJSON_GetArrayItem(hist, 3);
    if (kw != NULL)
        STATUS_CHECK(check_call_kwargs(k, g, kw, NULL));
    for (int i = 0; i < m->n_inputs; i++) {
        if (strcmp(name, m->inputs[i].name) != 0)
            continue;
        if (call != 0)
            return kfail(k, "reads call %d of the InputLayer '%.60s', which has one output", call,
                         name);
        *ret = JOB_INPUT_OF(i);
        return STATUS_OK;
    }
    for (size_t i = 0; i < m->n_layers; i++) {
        if (strcmp(m->layers[i].name, name) != 0)
            continue;
        if (call >= g->n_calls[i])
            return kfail(k, "reads call %d of '%.60s', which is called %d time%s", call, name,
                         g->n_calls[i], g->n_calls[i] == 1 ? "" : "s");
        *ret = g->first[i] + call;
        return STATUS_OK;
    }
    return kfail(k, "reads '%.60s', which is not a layer of the model", name);
}

/* One call of inbound_nodes: one tensor, or a list of them for a merge. Keras 3: {"args": [TENSOR
 * | [TENSOR...]], "kwargs": {}}; Keras 2: [[LAYER, NODE, 0, {}], ...]. l->inputs get what
 * resolve_tensor returns. */
static status_t read_call(kctx_t *k, const kgraph_t *g, const job_model_t *m, const cJSON *node,
                          job_layer_t *l)
{
    const cJSON *args, *v;

    if (cJSON_IsObject(node)) {
        static const char *const node_keys[] = {"args", "kwargs"};
        const cJSON *kw = kget(node, "kwargs");
        STATUS_CHECK(check_keys(k, node, "inbound node", node_keys, JOB_N_OF(node_keys)));
        if (kw != NULL)
            STATUS_CHECK(check_call_kwargs(k, g, kw, l));
        args = kget(node, "args");
        if (!cJSON_IsArray(args) || cJSON_GetArraySize(args) != 1)
            return kfail(k, "inbound_nodes args must hold one tensor or one list of them");
        args = cJSON_GetArrayItem(args, 0);
        if (!cJSON_IsArray(args)) { /* one tensor */
            l->n_inputs = 1;
            return resolve_tensor(k, g, m, args, &l->inputs[0]);
        }
    } else if (cJSON_IsArray(node)) {
        args = node;
    } else {
        return kfail(k, "an inbound node must be an object or a list");
    }
    if (cJSON_GetArraySize(args) < 1 || cJSON_GetArraySize(args) > JOB_MAX_INPUTS)
        return kfail(k, "reads %d inputs (1 to %d)", cJSON_GetArraySize(args), JOB_MAX_INPUTS);
    l->n_inputs = 0;
    cJSON_ArrayForEach(v, args) STATUS_CHECK(resolve_tensor(k, g, m, v, &l->inputs[l->n_inputs++]));
    return STATUS_OK;
}

static void kname(kctx_t *k, const job_layer_t *l)
{
    snprintf(k->layer, sizeof(k->layer), "layer '%.60s'", l->name);
}

/* Whether every input of call c (read_call's references) is made. */
static bool call_ready(const kgraph_t *g, const job_layer_t *c)
{
    for (int i = 0; i < c->n_inputs; i++)
        if (c->inputs[i] >= 0 && g->node_of[c->inputs[i]] < 0)
            return false;
    return true;
}

/* Makes the graph of m's layers: each call an entry of g->nodes, in sweeps as Keras makes them
 * (each call read once first, so that a sweep only looks its inputs up). A layer's first call
 * must come after the first call of every layer listed before it (a .keras file's paths go by
 * that order). */
static status_t make_graph(kctx_t *k, kgraph_t *g, const job_model_t *m)
{
    size_t n = m->n_layers;
    bool progress = true, left = true;

    for (size_t t = 0; t < n; t++) {
        kname(k, &m->layers[t]);
        for (int c = 0; c < g->n_calls[t]; c++) {
            job_layer_t *call = &g->parsed[g->first[t] + c];
            *call = m->layers[t];
            STATUS_CHECK(read_call(k, g, m, cJSON_GetArrayItem(g->calls[t], c), call));
        }
    }
    while (left && progress) {
        progress = left = false;
        for (size_t t = 0; t < n; t++) {
            kname(k, &m->layers[t]);
            while (g->made[t] < g->n_calls[t]) {
                job_layer_t call, *l;
                if (!call_ready(g, &g->parsed[g->first[t] + g->made[t]]))
                    break;
                call = g->parsed[g->first[t] + g->made[t]];
                if (g->made[t] == 0 && t > 0 && g->made[t - 1] == 0)
                    return kfail(k,
                                 "is called before '%.60s', which the model lists before it, "
                                 "is first called: Tessera keeps Keras's order of the layers",
                                 m->layers[t - 1].name);
                for (int i = 0; i < call.n_inputs; i++)
                    if (call.inputs[i] >= 0)
                        call.inputs[i] = g->node_of[call.inputs[i]];
                call.shares = g->made[t] == 0 ? 0 : 1 + g->node_of[g->first[t]];
                STATUS_CHECK(job_model_add_layer(&g->nodes, call.kind, k->file, &l, k->err));
                *l = call;
                g->node_of[g->first[t] + g->made[t]++] = (int)g->nodes.n_layers - 1;
                progress = true;
            }
            left = left || g->made[t] < g->n_calls[t];
        }
    }
    for (size_t t = 0; t < n; t++)
        if (g->made[t] < g->n_calls[t]) {
            kname(k, &m->layers[t]);
            return kfail(k, "call %d reads a tensor that no call before it makes (a cycle)",
                         g->made[t]);
        }
    k->layer[0] = '\0';
    return STATUS_OK;
}

/* One tensor of input_layers or output_layers, [LAYER, NODE, 0]: *ret_name LAYER, *ret_call
 * NODE. */
static status_t endpoint(kctx_t *k, const cJSON *v, const char *key, const char **ret_name,
                         int *ret_call)
{
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 3 ||
        (*ret_name = cJSON_GetStringValue(v->child)) == NULL ||
        !is_int(cJSON_GetArrayItem(v, 1), 0, JOB_MAX_LAYERS) ||
        !is_int(cJSON_GetArrayItem(v, 2), 0, 0))
        return kfail(k, "%s must be [LAYER, NODE, 0] or a list of them", key);
    *ret_call = cJSON_GetArrayItem(v, 1)->valueint;
    return STATUS_OK;
}

/* The item of object `obj` whose key is the j-th in sorted order (by bytes: Python's order of
 * str keys); obj has at most JOB_MAX_MODEL_INPUTS items. */
static const cJSON *sorted_item(const cJSON *obj, int j);

/* output_layers: one [LAYER, NODE, 0] (Keras 3 writes it bare, Keras 2 in a list), a list of
 * them, or {NAME: [LAYER, NODE, 0], ...} (outputs by name, in the keys' sorted order, as Keras
 * flattens a dict): each names a call the graph makes, once; an output's name is its layer's, or
 * its key. With one, it is the last call made (a later one would lead nowhere). */
static status_t read_outputs(kctx_t *k, const cJSON *cfg, const job_model_t *g, job_model_t *m)
{
    const cJSON *v = kget(cfg, "output_layers"), *item;
    int n = cJSON_IsObject(v) || (cJSON_IsArray(v) && cJSON_IsArray(v->child))
                ? cJSON_GetArraySize(v)
                : 1;

    if (n < 1 || n > JOB_MAX_OUTPUTS || (cJSON_IsObject(v) && n > JOB_MAX_MODEL_INPUTS))
        return kfail(k, "output_layers lists %d tensors (1 to %d)", n, JOB_MAX_OUTPUTS);
    for (int i = 0; i < n; i++) {
        const char *name, *key = NULL;
        int call, at = -1;
        if (cJSON_IsObject(v))
            item = sorted_item(v, i);
        else if (cJSON_IsArray(v) && cJSON_IsArray(v->child))
            item = cJSON_GetArrayItem(v, i);
        else
            item = v;
        if (cJSON_IsObject(v))
            key = item->string;
        STATUS_CHECK(endpoint(k, item, "output_layers", &name, &call));
        for (size_t j = 0; j < g->n_layers && at < 0; j++)
            if (strcmp(g->layers[j].name, name) == 0 && job_layer_call(g, j) == call)
                at = (int)j;
        if (at < 0)
            return kfail(k, "output_layers names '%.60s' call %d, which the model does not make",
                         name, call);
        for (int e = 0; e < i; e++)
            if (m->outputs[e] == at)
                return kfail(k, "output_layers names '%.60s' call %d twice", name, call);
        if (key != NULL && strlen(key) >= sizeof(m->output_names[i]))
            return kfail(k, "output_layers: the name '%.60s' is too long", key);
        m->outputs[i] = at;
        snprintf(m->output_names[i], sizeof(m->output_names[i]), "%s", key != NULL ? key : name);
    }
    if (n == 1 && m->outputs[0] != (int)g->n_layers - 1)
        return kfail(k, "output_layers names '%.60s' call %d, not the last call made",
                     m->output_names[0], job_layer_call(g, (size_t)m->outputs[0]));
    m->n_outputs = n > 1 ? n : 0;
    return STATUS_OK;
}

static const cJSON *sorted_item(const cJSON *obj, int j)
{
    const cJSON *items[JOB_MAX_MODEL_INPUTS], *v;
    int n = 0;

    cJSON_ArrayForEach(v, obj)
    {
        int at = n++;
        while (at > 0 && strcmp(items[at - 1]->string, v->string) > 0) {
            items[at] = items[at - 1];
            at--;
        }
        items[at] = v;
    }
    return items[j];
}

/* input_layers: one [LAYER, 0, 0], a list of them (Keras 3 writes one bare), or {NAME: [LAYER,
 * 0, 0], ...} (a model called on a dict, whose inputs Keras orders by their keys): puts
 * m->inputs in that order, each InputLayer named once, and makes the first one's shape the
 * model's input shape. */
static status_t order_inputs(kctx_t *k, const cJSON *cfg, job_model_t *m)
{
    const cJSON *v = kget(cfg, "input_layers"), *t;
    job_model_input_t ordered[JOB_MAX_MODEL_INPUTS];
    bool taken[JOB_MAX_MODEL_INPUTS] = {false};
    int n = 0;

    if (cJSON_IsArray(v) && !cJSON_IsArray(v->child) && !cJSON_IsObject(v->child)) {
        const char *name;
        int call;
        STATUS_CHECK(endpoint(k, v, "input_layers", &name, &call));
        if (m->n_inputs != 1)
            return kfail(k, "input_layers names one tensor, and the model has %d InputLayers",
                         m->n_inputs);
        if (strcmp(name, m->inputs[0].name) != 0 || call != 0)
            return kfail(k, "input_layers names '%.60s', not the InputLayer", name);
        return STATUS_OK;
    }
    if (!cJSON_IsArray(v) && !cJSON_IsObject(v))
        return kfail(k, "input_layers must be [LAYER, NODE, 0] or a list of them");
    if (cJSON_GetArraySize(v) > JOB_MAX_MODEL_INPUTS)
        return kfail(k, "input_layers names more than %d inputs", JOB_MAX_MODEL_INPUTS);
    for (int j = 0; j < cJSON_GetArraySize(v); j++) {
        const char *name;
        int call, i = 0;
        /* a dict: Keras takes the inputs in the order of its sorted keys */
        t = cJSON_IsObject(v) ? sorted_item(v, j) : cJSON_GetArrayItem(v, j);
        STATUS_CHECK(endpoint(k, t, "input_layers", &name, &call));
        while (i < m->n_inputs && strcmp(m->inputs[i].name, name) != 0)
            i++;
        if (i == m->n_inputs || call != 0)
            return kfail(k, "input_layers names '%.60s', which is not an InputLayer", name);
        if (taken[i])
            return kfail(k, "input_layers names '%.60s' twice", name);
        taken[i] = true;
        ordered[n++] = m->inputs[i];
    }
    if (n != m->n_inputs)
        return kfail(k, "input_layers names %d of the %d InputLayers", n, m->n_inputs);
    memcpy(m->inputs, ordered, (size_t)n * sizeof(*ordered));
    memcpy(m->input_shape, m->inputs[0].shape, sizeof(m->input_shape));
    m->input_rank = m->inputs[0].rank;
    return STATUS_OK;
}

/* The operation not_equal(INPUT, 0) that Keras 3 writes for the mask of an Embedding with
 * mask_zero (keras.src.ops.numpy NotEqual): its name into g->masks. Any other comparison is
 * refused. */
static status_t read_mask_op(kctx_t *k, const cJSON *entry, size_t index, kgraph_t *g,
                             const job_model_t *m)
{
    static const char *const entry_keys[] = {"class_name",      "config", "module",
                                             "registered_name", "name",   "inbound_nodes"};
    static const char *const config_keys[] = {"name"};
    const cJSON *cfg = kget(entry, "config"), *nodes = kget(entry, "inbound_nodes"), *node, *args;
    const char *name = cJSON_GetStringValue(kget(cfg, "name")), *from;
    const cJSON *hist;
    bool input = false;

    snprintf(k->layer, sizeof(k->layer), "layers[%zu] (NotEqual)", index);
    STATUS_CHECK(check_keys(k, entry, "operation", entry_keys, JOB_N_OF(entry_keys)));
    STATUS_CHECK(check_keys(k, cfg, "NotEqual config", config_keys, JOB_N_OF(config_keys)));
    if (name == NULL || strlen(name) >= sizeof(g->masks[0]))
        return kfail(k, "a NotEqual needs a name of at most 63 characters");
    if (g->n_masks == JOB_MAX_MODEL_INPUTS)
        return kfail(k, "more than %d masks", JOB_MAX_MODEL_INPUTS);
    node = cJSON_GetArrayItem(nodes, 0);
    args = kget(node, "args");
    hist = kget(kget(cJSON_GetArrayItem(args, 0), "config"), "keras_history");
    from = cJSON_GetStringValue(cJSON_GetArrayItem(hist, 0));
    for (int i = 0; from != NULL && i < m->n_inputs; i++)
        if (strcmp(m->inputs[i].name, from) == 0) {
            input = true;
            snprintf(g->mask_from[g->n_masks], sizeof(g->mask_from[0]), "%s", from);
        }
    if (!cJSON_IsArray(nodes) || cJSON_GetArraySize(nodes) != 1 || !cJSON_IsObject(node) ||
        cJSON_GetArraySize(args) != 2 || !input || !is_int(cJSON_GetArrayItem(hist, 1), 0, 0) ||
        !is_int(cJSON_GetArrayItem(hist, 2), 0, 0) || !is_int(cJSON_GetArrayItem(args, 1), 0, 0) ||
        (kget(node, "kwargs") != NULL &&
         (!cJSON_IsObject(kget(node, "kwargs")) || cJSON_GetArraySize(kget(node, "kwargs")) != 0)))
        return kfail(k, "only not_equal(input, 0), the mask of an Embedding's mask_zero, is "
                        "supported as an operation");
    snprintf(g->masks[g->n_masks++], sizeof(g->masks[0]), "%s", name);
    k->layer[0] = '\0';
    return STATUS_OK;
}

/* Reads config.layers into m->layers, one entry a layer, and each one's inbound_nodes into g. */
static status_t read_functional_layers(kctx_t *k, const cJSON *layers, kgraph_t *g, job_model_t *m)
{
    size_t i = 0, calls = 0, n = (size_t)cJSON_GetArraySize(layers);
    const cJSON *v;

    g->calls = calloc(n + 1, sizeof(*g->calls));
    g->n_calls = calloc(n + 1, sizeof(*g->n_calls));
    g->made = calloc(n + 1, sizeof(*g->made));
    g->first = calloc(n + 1, sizeof(*g->first));
    if (g->calls == NULL || g->n_calls == NULL || g->made == NULL || g->first == NULL)
        return kfail(k, "out of memory");
    cJSON_ArrayForEach(v, layers)
    {
        const char *cls = cJSON_GetStringValue(kget(v, "class_name"));
        const cJSON *nodes = kget(v, "inbound_nodes");
        size_t before = m->n_layers;
        if (cls != NULL && strcmp(cls, "NotEqual") == 0) {
            STATUS_CHECK(read_mask_op(k, v, i++, g, m));
            continue;
        }
        STATUS_CHECK(parse_layer(k, v, i++, true, m));
        if (cls != NULL && strcmp(cls, "InputLayer") == 0) {
            if (nodes != NULL && !(cJSON_IsArray(nodes) && cJSON_GetArraySize(nodes) == 0))
                return kfail(k, "an InputLayer reads nothing: inbound_nodes must be empty");
            continue;
        }
        if (m->n_layers == before)
            continue;
        for (size_t j = 0; j < before; j++)
            if (strcmp(m->layers[j].name, m->layers[before].name) == 0)
                return kfail(k, "a second layer of this name");
        if (!cJSON_IsArray(nodes) || cJSON_GetArraySize(nodes) == 0)
            return kfail(k, "inbound_nodes must list the layer's calls");
        g->calls[before] = nodes;
        g->n_calls[before] = cJSON_GetArraySize(nodes);
        g->first[before] = (int)calls;
        calls += (size_t)g->n_calls[before];
        if (calls > JOB_MAX_LAYERS)
            return kfail(k, "the layers are called more than %d times in all", JOB_MAX_LAYERS);
    }
    k->layer[0] = '\0';
    for (size_t t = 0; t < m->n_layers; t++)
        for (int j = 0; j < m->n_inputs; j++)
            if (strcmp(m->layers[t].name, m->inputs[j].name) == 0) {
                kname(k, &m->layers[t]);
                return kfail(k, "has an InputLayer's name");
            }
    k->layer[0] = '\0';
    g->node_of = malloc((calls + 1) * sizeof(*g->node_of));
    g->parsed = calloc(calls + 1, sizeof(*g->parsed));
    if (g->node_of == NULL || g->parsed == NULL)
        return kfail(k, "out of memory");
    for (size_t slot = 0; slot < calls; slot++)
        g->node_of[slot] = -1;
    return STATUS_OK;
}

static void kgraph_done(kgraph_t *g)
{
    free(g->calls);
    free(g->n_calls);
    free(g->made);
    free(g->first);
    free(g->node_of);
    free(g->parsed);
    job_model_done(&g->nodes);
}

/* config of a Functional model (Keras 3 "Functional", Keras 2 "Functional" or "Model"): name,
 * trainable, layers in the order Keras keeps them, each with its calls (inbound_nodes; two or
 * more: a shared layer), input_layers, output_layers. One input and one output, the last call
 * made. m->layers becomes the graph, one entry a call. */
static status_t parse_functional_config(kctx_t *k, const cJSON *cfg, job_model_t *m)
{
    static const char *const config_keys[] = {"name",         "layers",        "trainable",
                                              "input_layers", "output_layers", "dtype"};
    const cJSON *layers = kget(cfg, "layers");
    kgraph_t g = {0};
    status_t rc;

    STATUS_CHECK(check_keys(k, cfg, "Functional config", config_keys, JOB_N_OF(config_keys)));
    STATUS_CHECK(check_model_options(k, cfg));
    if (!cJSON_IsArray(layers))
        return kfail(k, "config.layers must be a list");
    rc = read_functional_layers(k, layers, &g, m);
    if (rc == STATUS_OK && m->n_inputs == 0)
        rc = kfail(k, "a Functional model needs an InputLayer");
    else if (rc == STATUS_OK && m->n_layers == 0)
        rc = kfail(k, "the model has no layers");
    if (rc == STATUS_OK)
        rc = order_inputs(k, cfg, m);
    if (rc == STATUS_OK)
        rc = make_graph(k, &g, m);
    if (rc == STATUS_OK)
        rc = read_outputs(k, cfg, &g.nodes, m);
    if (rc == STATUS_OK) { /* the graph takes the layers' place */
        job_layer_t *templates = m->layers;
        m->layers = g.nodes.layers;
        m->n_layers = g.nodes.n_layers;
        g.nodes.layers = templates;
        g.nodes.n_layers = 0;
    }
    kgraph_done(&g);
    return rc;
}

status_t job_parse_keras_json(const char *text, size_t len, const char *path,
                              job_model_t *ret_model, status_msg_t *err)
{
    static const char *const top_keys[] = {"class_name",   "config",        "keras_version",
                                           "backend",      "module",        "registered_name",
                                           "build_config", "compile_config"};
    kctx_t k = {.file = path != NULL ? path : "model JSON", .err = err};
    job_model_t m = {0};
    cJSON *root;
    const char *cls, *end = NULL;
    status_t rc;

    memset(ret_model, 0, sizeof(*ret_model));
    if (text == NULL)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "%s: no text", k.file);
    root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (root == NULL) {
        size_t at = end != NULL && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        int line = 1;
        size_t col = 1;
        for (size_t i = 0; i < at; i++) {
            line += text[i] == '\n';
            col = text[i] == '\n' ? 1 : col + 1;
        }
        /* The place, never the text: the file may be anything a job names (/etc/shadow). */
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s:%d:%zu: invalid JSON (a Keras model is the JSON of "
                           "model.to_json())",
                           k.file, line, col);
    }
    cls = cJSON_GetStringValue(kget(root, "class_name"));
    if (!cJSON_IsObject(root) || cls == NULL)
        rc = kfail(&k, "not a Keras model: no class_name");
    else if (strcmp(cls, "Sequential") != 0 && strcmp(cls, "Functional") != 0 &&
             strcmp(cls, "Model") != 0)
        rc = kfail(&k, "only Sequential and Functional models are supported, not %.60s", cls);
    else
        rc = check_keys(&k, root, "model", top_keys, JOB_N_OF(top_keys));
    if (rc == STATUS_OK && strcmp(cls, "Sequential") == 0)
        rc = parse_sequential_config(&k, kget(root, "config"), &m);
    else if (rc == STATUS_OK)
        rc = parse_functional_config(&k, kget(root, "config"), &m);
    if (rc == STATUS_OK)
        rc = job_model_finish(&m, k.file, err);
    if (rc == STATUS_OK) {
        m.keras_json = strndup(text, len);
        if (m.keras_json == NULL)
            rc = status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", k.file);
    }
    cJSON_Delete(root);
    if (rc != STATUS_OK) {
        job_model_done(&m);
        return rc;
    }
    *ret_model = m;
    return STATUS_OK;
}
