/* Job files (../shared/DESIGN.md §2): YAML or JSON read with libyaml into a small tree that
 * keeps line numbers, then checked key by key against the tables below. Every map is checked
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

#include "job/initializer.h"
#include "job/internal.h"

/* ---- shared tables and helpers (job_internal.h) ---- */

const char *const job_activation_names[5] = {"linear", "relu", "sigmoid", "tanh", "softmax"};

static const char *const layer_names[] = {
    "dense",
    "conv2d",
    "max_pooling2d",
    "average_pooling2d",
    "flatten",
    "reshape",
    "dropout",
    "embedding",
    "global_average_pooling1d",
    "global_average_pooling2d",
    "activation",
};

static const job_init_info_t inits[] = {
    {"zeros", "Zeros", JOB_INIT_ZEROS, NULL, NULL, 0, 0, false},
    {"ones", "Ones", JOB_INIT_ONES, NULL, NULL, 0, 0, false},
    {"constant", "Constant", JOB_INIT_CONSTANT, "value", NULL, 0, 0, false},
    {"glorot_uniform", "GlorotUniform", JOB_INIT_GLOROT_UNIFORM, NULL, NULL, 0, 0, true},
    {"glorot_normal", "GlorotNormal", JOB_INIT_GLOROT_NORMAL, NULL, NULL, 0, 0, true},
    {"he_uniform", "HeUniform", JOB_INIT_HE_UNIFORM, NULL, NULL, 0, 0, true},
    {"he_normal", "HeNormal", JOB_INIT_HE_NORMAL, NULL, NULL, 0, 0, true},
    {"random_uniform", "RandomUniform", JOB_INIT_RANDOM_UNIFORM, "minval", "maxval", -0.05, 0.05,
     true},
    {"random_normal", "RandomNormal", JOB_INIT_RANDOM_NORMAL, "mean", "stddev", 0, 0.05, true},
    /* Keras's short aliases; "uniform" is Embedding's default. */
    {"uniform", "RandomUniform", JOB_INIT_RANDOM_UNIFORM, "minval", "maxval", -0.05, 0.05, true},
    {"normal", "RandomNormal", JOB_INIT_RANDOM_NORMAL, "mean", "stddev", 0, 0.05, true},
};

static const char *const init_names[] = {
    "zeros",     "ones",           "constant",      "glorot_uniform", "glorot_normal", "he_uniform",
    "he_normal", "random_uniform", "random_normal", "uniform",        "normal",
};

const job_init_info_t *job_init_find(const char *name)
{
    for (size_t i = 0; i < JOB_N_OF(inits); i++)
        if (strcmp(name, inits[i].name) == 0 || strcmp(name, inits[i].class_name) == 0)
            return &inits[i];
    return NULL;
}

const char *const *job_init_names(size_t *ret_n)
{
    *ret_n = JOB_N_OF(init_names);
    return init_names;
}

int job_name_index(const char *s, const char *const *names, size_t n)
{
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return (int)i;
    return -1;
}

/* Optimal string alignment distance (Levenshtein plus adjacent transpositions), capped: words
 * longer than 63 characters are never close to anything. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t d[64][64];

    if (la >= 64 || lb >= 64)
        return SIZE_MAX;
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best)
                best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

const char *job_suggest(const char *s, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = 3;

    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(s, names[i]);
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best;
}

void job_join_names(char *buf, size_t size, const char *const *names, size_t n)
{
    size_t len = strlen(buf);

    for (size_t i = 0; i < n && len < size; i++) {
        int w = snprintf(buf + len, size - len, "%s%s", i > 0 ? ", " : "", names[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

void job_unknown_name(char *buf, size_t size, const char *what, const char *s,
                      const char *const *names, size_t n)
{
    const char *close = job_suggest(s, names, n);
    const char *plural = what[strlen(what) - 1] == 's' ? "es" : "s"; /* "losses", "layers" */

    if (close != NULL)
        snprintf(buf, size, "unknown %s '%s' (did you mean '%s'?); known %s%s: ", what, s, close,
                 what, plural);
    else
        snprintf(buf, size, "unknown %s '%s'; known %s%s: ", what, s, what, plural);
    job_join_names(buf, size, names, n);
}

bool job_activation_parse(const char *s, job_activation_t *ret)
{
    int i = job_name_index(s, job_activation_names, JOB_N_OF(job_activation_names));

    if (i < 0)
        return false;
    *ret = (job_activation_t)i;
    return true;
}

const char *job_layer_kind_name(job_layer_kind_t k)
{
    return (size_t)k < JOB_N_OF(layer_names) ? layer_names[k] : "unknown";
}

const char *job_activation_name(job_activation_t a)
{
    return (size_t)a < JOB_N_OF(job_activation_names) ? job_activation_names[a] : "unknown";
}

status_t job_model_add_layer(job_model_t *m, job_layer_kind_t kind, const char *where,
                             job_layer_t **ret_layer, status_msg_t *err)
{
    job_layer_t *layers, *l;

    if (m->n_layers >= JOB_MAX_LAYERS)
        return status_fail(err, STATUS_RESOURCE_EXHAUSTED, "%s: more than %d layers", where,
                           JOB_MAX_LAYERS);
    layers = realloc(m->layers, (m->n_layers + 1) * sizeof(*layers));
    if (layers == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", where);
    m->layers = layers;
    l = &layers[m->n_layers++];
    memset(l, 0, sizeof(*l));
    l->kind = kind;
    l->activation = JOB_ACT_LINEAR;
    l->use_bias = kind == JOB_LAYER_DENSE || kind == JOB_LAYER_CONV2D;
    if (kind == JOB_LAYER_CONV2D)
        l->strides[0] = l->strides[1] = 1;
    if (kind == JOB_LAYER_MAX_POOLING2D || kind == JOB_LAYER_AVERAGE_POOLING2D)
        l->pool_size[0] = l->pool_size[1] = l->strides[0] = l->strides[1] = 2;
    *ret_layer = l;
    return STATUS_OK;
}

static bool layer_name_taken(const job_model_t *m, const job_layer_t *self)
{
    for (size_t i = 0; i < m->n_layers; i++)
        if (&m->layers[i] != self && strcmp(m->layers[i].name, self->name) == 0)
            return true;
    return false;
}

/* Names an unnamed layer the way Keras does: the kind, then kind_1, kind_2 ... skipping names
 * already used. */
/* TensorFlow's rule for the names of operations and variables, without its scope separators
 * ('/', '>'): the worker names a layer's variables "<layer>/kernel". Empty: named later. */
static bool layer_name_valid(const char *name)
{
    for (size_t i = 0; name[i] != '\0'; i++) {
        char ch = name[i];
        bool alnum =
            (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!alnum && ch != '.' && (i == 0 || (ch != '_' && ch != '-')))
            return false;
    }
    return true;
}

static void name_layer(job_model_t *m, job_layer_t *l)
{
    const char *base = job_layer_kind_name(l->kind);

    snprintf(l->name, sizeof(l->name), "%s", base);
    for (int k = 1; layer_name_taken(m, l); k++)
        snprintf(l->name, sizeof(l->name), "%s_%d", base, k);
}

status_t job_model_finish(job_model_t *m, const char *where, status_msg_t *err)
{
    if (m->n_layers == 0)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: the model has no layers", where);
    if (m->input_rank == 0)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: the model has no input shape: give input_shape on the first "
                           "layer (for example input_shape: [784])",
                           where);
    for (size_t i = 1; i < m->n_layers; i++)
        if (m->layers[i].kind == JOB_LAYER_EMBEDDING)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: layer %zu: embedding must be the first layer (its input is "
                               "integer ids)",
                               where, i);
    m->input_is_int = m->layers[0].kind == JOB_LAYER_EMBEDDING;
    for (size_t i = 0; i < m->n_layers; i++)
        if (!layer_name_valid(m->layers[i].name)) {
            char shown[4 * sizeof(m->layers[i].name)];
            utf8_escape(shown, sizeof(shown), m->layers[i].name, strlen(m->layers[i].name));
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: layer %zu: the name '%s' may hold only letters, digits, '_', "
                               "'.' and '-', and begin with a letter, a digit or '.' (it names "
                               "the layer's variables, as in TensorFlow)",
                               where, i, shown);
        }
    for (size_t i = 0; i < m->n_layers; i++) {
        for (size_t j = 0; j < i && m->layers[i].name[0] != '\0'; j++)
            if (strcmp(m->layers[i].name, m->layers[j].name) == 0)
                return status_fail(err, STATUS_BAD_CONFIG,
                                   "%s: two layers are named '%s' (layers %zu and %zu)", where,
                                   m->layers[i].name, j, i);
    }
    for (size_t i = 0; i < m->n_layers; i++)
        if (m->layers[i].name[0] == '\0')
            name_layer(m, &m->layers[i]);
    return STATUS_OK;
}

void job_model_done(job_model_t *m)
{
    if (m == NULL)
        return;
    free(m->layers);
    free(m->keras_json);
    free(m->keras_json_path);
    memset(m, 0, sizeof(*m));
}

static void source_done(job_source_t *s)
{
    free(s->images);
    free(s->labels);
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
    memset(job, 0, sizeof(*job));
}

/* ---- model ---- */

/* An initializer: a name ("he_normal") or {name: {parameters}}. */
static status_t node_init(job_ctx_t *c, const job_node_t *n, job_init_t *ret)
{
    size_t n_names, old = c->path_len;
    const char *const *names = job_init_names(&n_names);
    const job_init_info_t *info;
    const job_node_t *opts;
    const char *keys[3];
    size_t n_keys = 0;
    job_init_t init = {0};
    int64_t seed = -1;
    int index;
    status_msg_t why;
    status_t rc;

    STATUS_CHECK(job_tree_variant(c, n, "initializer", names, n_names, true, &index, &opts));
    info = job_init_find(names[index]);
    init.kind = info->kind;
    init.a = info->a_default;
    init.b = info->b_default;
    if (info->seeded)
        keys[n_keys++] = "seed";
    if (info->a_key != NULL)
        keys[n_keys++] = info->a_key;
    if (info->b_key != NULL)
        keys[n_keys++] = info->b_key;
    rc = job_tree_check_map(c, opts, keys, n_keys, true);
    if (rc == STATUS_OK && info->a_key != NULL)
        rc = job_tree_get_double(c, opts, info->a_key, info->kind == JOB_INIT_CONSTANT, &init.a);
    if (rc == STATUS_OK && info->b_key != NULL)
        rc = job_tree_get_double(c, opts, info->b_key, false, &init.b);
    if (rc == STATUS_OK && info->seeded)
        rc = job_tree_get_i64(c, opts, "seed", false, 0, &seed);
    job_tree_pop(c, old);
    STATUS_CHECK(rc);
    init.has_seed = seed >= 0;
    init.seed = init.has_seed ? (uint64_t)seed : 0;
    if (initializer_check(&init, &why) != STATUS_OK)
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line, "%s: %s", c->path, why.text);
    *ret = init;
    return STATUS_OK;
}

static status_t get_init(job_ctx_t *c, const job_node_t *map, const char *key, job_init_t *ret)
{
    size_t old;
    const job_node_t *n = job_tree_enter(c, map, key, &old);
    status_t rc;

    if (n == NULL)
        return STATUS_OK;
    rc = node_init(c, n, ret);
    job_tree_pop(c, old);
    return rc;
}

static status_t node_activation(job_ctx_t *c, const job_node_t *n, job_activation_t *ret)
{
    int i;

    STATUS_CHECK(job_tree_name(c, n, "activation", job_activation_names,
                               JOB_N_OF(job_activation_names), &i));
    *ret = (job_activation_t)i;
    return STATUS_OK;
}

static status_t get_activation(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                               job_activation_t *ret)
{
    size_t old;
    const job_node_t *n = job_tree_enter(c, map, key, &old);
    status_t rc;

    if (n == NULL)
        return required ? job_tree_missing(c, map, key) : STATUS_OK;
    rc = node_activation(c, n, ret);
    job_tree_pop(c, old);
    return rc;
}

static status_t get_padding(job_ctx_t *c, const job_node_t *map, bool *ret_same)
{
    static const char *const paddings[] = {"valid", "same"};
    const job_node_t *n = job_tree_child(map, "padding");
    size_t old;
    int i;
    status_t rc;

    if (!job_tree_given(n))
        return STATUS_OK;
    old = job_tree_push_key(c, "padding");
    rc = job_tree_name(c, n, "padding", paddings, JOB_N_OF(paddings), &i);
    job_tree_pop(c, old);
    if (rc == STATUS_OK)
        *ret_same = i == 1;
    return rc;
}

/* Option keys per layer kind, in job_layer_kind_t order. */
static const char *const dense_keys[] = {
    "units", "activation", "use_bias", "kernel_initializer", "bias_initializer", "name"};
static const char *const conv_keys[] = {
    "filters",  "kernel_size",        "strides",          "padding", "activation",
    "use_bias", "kernel_initializer", "bias_initializer", "name"};
static const char *const pool_keys[] = {"pool_size", "strides", "padding", "name"};
static const char *const name_keys[] = {"name"};
static const char *const reshape_keys[] = {"target_shape", "name"};
static const char *const dropout_keys[] = {"rate", "seed", "name"};
static const char *const embedding_keys[] = {"input_dim", "output_dim", "embeddings_initializer",
                                             "input_length", "name"};
static const char *const activation_keys[] = {"activation", "name"};

static const struct {
    const char *const *keys;
    size_t n;
} layer_keys[] = {
    {dense_keys, JOB_N_OF(dense_keys)},
    {conv_keys, JOB_N_OF(conv_keys)},
    {pool_keys, JOB_N_OF(pool_keys)},
    {pool_keys, JOB_N_OF(pool_keys)},
    {name_keys, JOB_N_OF(name_keys)},
    {reshape_keys, JOB_N_OF(reshape_keys)},
    {dropout_keys, JOB_N_OF(dropout_keys)},
    {embedding_keys, JOB_N_OF(embedding_keys)},
    {name_keys, JOB_N_OF(name_keys)},
    {name_keys, JOB_N_OF(name_keys)},
    {activation_keys, JOB_N_OF(activation_keys)},
};

static status_t layer_name_option(job_ctx_t *c, const job_node_t *opts, job_layer_t *l)
{
    const char *name = NULL;

    STATUS_CHECK(job_tree_get_string(c, opts, "name", false, &name));
    if (name == NULL)
        return STATUS_OK;
    if (strlen(name) >= sizeof(l->name)) {
        size_t old = job_tree_push_key(c, "name");
        status_t rc =
            job_tree_type_error(c, job_tree_child(opts, "name"), "a name of at most 63 characters");
        job_tree_pop(c, old);
        return rc;
    }
    strcpy(l->name, name);
    return STATUS_OK;
}

/* Reads the options of one layer; *ret_input_length gets Embedding's input_length (0: none). */
static status_t layer_options(job_ctx_t *c, const job_node_t *opts, job_layer_t *l,
                              int *ret_input_length)
{
    int64_t seed = 0;

    STATUS_CHECK(
        job_tree_check_map(c, opts, layer_keys[l->kind].keys, layer_keys[l->kind].n, true));
    STATUS_CHECK(layer_name_option(c, opts, l));
    switch (l->kind) {
    case JOB_LAYER_DENSE:
    case JOB_LAYER_CONV2D:
        if (l->kind == JOB_LAYER_DENSE) {
            STATUS_CHECK(job_tree_get_int(c, opts, "units", true, 1, &l->units));
        } else {
            STATUS_CHECK(job_tree_get_int(c, opts, "filters", true, 1, &l->filters));
            STATUS_CHECK(job_tree_get_pair(c, opts, "kernel_size", true, l->kernel_size));
            STATUS_CHECK(job_tree_get_pair(c, opts, "strides", false, l->strides));
            STATUS_CHECK(get_padding(c, opts, &l->padding_same));
        }
        STATUS_CHECK(get_activation(c, opts, "activation", false, &l->activation));
        STATUS_CHECK(job_tree_get_bool(c, opts, "use_bias", &l->use_bias));
        STATUS_CHECK(get_init(c, opts, "kernel_initializer", &l->kernel_init));
        return get_init(c, opts, "bias_initializer", &l->bias_init);
    case JOB_LAYER_MAX_POOLING2D:
    case JOB_LAYER_AVERAGE_POOLING2D:
        STATUS_CHECK(job_tree_get_pair(c, opts, "pool_size", false, l->pool_size));
        l->strides[0] = l->pool_size[0];
        l->strides[1] = l->pool_size[1];
        STATUS_CHECK(job_tree_get_pair(c, opts, "strides", false, l->strides));
        return get_padding(c, opts, &l->padding_same);
    case JOB_LAYER_RESHAPE: {
        size_t old;
        const job_node_t *n = job_tree_enter(c, opts, "target_shape", &old);
        status_t rc;
        if (n == NULL)
            return job_tree_missing(c, opts, "target_shape");
        rc = job_tree_ints(c, n, JOB_MAX_RANK, 1, true, l->target_shape, &l->target_rank);
        job_tree_pop(c, old);
        return rc;
    }
    case JOB_LAYER_DROPOUT:
        STATUS_CHECK(job_tree_get_double(c, opts, "rate", true, &l->rate));
        if (l->rate < 0 || l->rate >= 1) {
            size_t old = job_tree_push_key(c, "rate");
            status_t rc = job_tree_type_error(c, job_tree_child(opts, "rate"),
                                              "a number from 0 up to (not) 1");
            job_tree_pop(c, old);
            return rc;
        }
        STATUS_CHECK(job_tree_get_i64(c, opts, "seed", false, 0, &seed));
        l->dropout_seed = (uint64_t)seed;
        return STATUS_OK;
    case JOB_LAYER_EMBEDDING:
        STATUS_CHECK(job_tree_get_int(c, opts, "input_dim", true, 1, &l->input_dim));
        STATUS_CHECK(job_tree_get_int(c, opts, "output_dim", true, 1, &l->output_dim));
        STATUS_CHECK(get_init(c, opts, "embeddings_initializer", &l->kernel_init));
        return job_tree_get_int(c, opts, "input_length", false, 1, ret_input_length);
    case JOB_LAYER_ACTIVATION:
        return get_activation(c, opts, "activation", true, &l->activation);
    default:
        return STATUS_OK;
    }
}

/* Sets the model's input shape from `n` (a shape list), which must be the only source of it. */
static status_t set_input_shape(job_ctx_t *c, job_model_t *m, const job_node_t *n)
{
    size_t old = job_tree_push_key(c, "input_shape");
    status_t rc = STATUS_OK;

    if (m->input_rank > 0)
        rc = job_tree_fail(c, STATUS_BAD_CONFIG, n->line, "%s: the input shape is given twice",
                           c->path);
    if (rc == STATUS_OK)
        rc = job_tree_ints(c, n, JOB_MAX_RANK, 1, false, m->input_shape, &m->input_rank);
    job_tree_pop(c, old);
    return rc;
}

/* One list item: `flatten`, or {LAYER: {options}} with input_shape beside it on the first. */
static status_t parse_layer(job_ctx_t *c, const job_node_t *item, size_t index, job_model_t *m)
{
    static const char *const item_keys[] = {"input_shape"};
    const job_node_t *opts = NULL, *shape = NULL;
    const job_node_entry_t *layer_entry = NULL;
    job_node_t empty = {.kind = JOB_NODE_MAP, .line = item->line};
    job_layer_t *l;
    int kind = 0, input_length = 0;

    if (item->kind == JOB_NODE_SCALAR) {
        STATUS_CHECK(job_tree_name(c, item, "layer", layer_names, JOB_N_OF(layer_names), &kind));
    } else if (item->kind == JOB_NODE_MAP) {
        for (size_t i = 0; i < item->n; i++) {
            const job_node_entry_t *e = &item->entries[i];
            job_node_t key = {.kind = JOB_NODE_SCALAR, .line = e->line, .text = e->key};
            if (strcmp(e->key, item_keys[0]) == 0) {
                shape = e->value;
                continue;
            }
            if (job_suggest(e->key, item_keys, 1) != NULL)
                return job_tree_fail(c, STATUS_BAD_CONFIG, e->line,
                                     "%s: unknown key '%s' (did you mean 'input_shape'?)", c->path,
                                     e->key);
            if (layer_entry != NULL)
                return job_tree_fail(c, STATUS_BAD_CONFIG, e->line,
                                     "%s: one layer per list item, got '%s' and '%s'", c->path,
                                     layer_entry->key, e->key);
            STATUS_CHECK(
                job_tree_name(c, &key, "layer", layer_names, JOB_N_OF(layer_names), &kind));
            layer_entry = e;
        }
        if (layer_entry == NULL)
            return job_tree_fail(c, STATUS_BAD_CONFIG, item->line, "%s: no layer named", c->path);
        opts = layer_entry->value;
    } else {
        return job_tree_type_error(c, item,
                                   "a layer: {dense: {units: 10}} or a bare name like flatten");
    }
    if (job_tree_given(shape) && index > 0)
        return job_tree_fail(c, STATUS_BAD_CONFIG, item->line,
                             "%s: input_shape belongs on the first layer only", c->path);
    if (job_tree_given(shape))
        STATUS_CHECK(set_input_shape(c, m, shape));
    STATUS_CHECK(job_model_add_layer(m, (job_layer_kind_t)kind, c->file, &l, c->err));
    {
        size_t old = job_tree_push_key(c, layer_names[kind]);
        status_t rc = layer_options(c, job_tree_given(opts) ? opts : &empty, l, &input_length);
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
    }
    if (input_length > 0 && index == 0) {
        if (m->input_rank > 0 && (m->input_rank != 1 || m->input_shape[0] != input_length))
            return job_tree_fail(c, STATUS_BAD_CONFIG, item->line,
                                 "%s: embedding.input_length %d disagrees with input_shape",
                                 c->path, input_length);
        m->input_rank = 1;
        m->input_shape[0] = input_length;
    }
    return STATUS_OK;
}

static status_t parse_layers(job_ctx_t *c, const job_node_t *list, job_model_t *m)
{
    if (list->kind != JOB_NODE_SEQ)
        return job_tree_type_error(c, list, "a list of layers");
    for (size_t i = 0; i < list->n; i++) {
        size_t old = job_tree_push_index(c, i);
        status_t rc = parse_layer(c, list->items[i], i, m);
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
    }
    return STATUS_OK;
}

/* Reads a whole file (job or model) into a NUL-terminated buffer. */
static status_t read_file(const char *path, const char *what, char **ret_text, size_t *ret_len,
                          status_msg_t *err)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0;
    int saved;

    if (f == NULL) {
        saved = errno;
        return status_fail(err, status_from_errno(saved), "cannot read %s '%s': %s", what, path,
                           strerror(saved));
    }
    for (;;) {
        char *grown;
        size_t got;
        if (len + 1 >= cap) {
            cap = cap == 0 ? 8192 : cap * 2;
            grown = cap > JOB_MAX_FILE_BYTES + 2 ? NULL : realloc(text, cap);
            if (grown == NULL) {
                fclose(f);
                free(text);
                return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                                   "%s '%s' is larger than %u bytes", what, path,
                                   JOB_MAX_FILE_BYTES);
            }
            text = grown;
        }
        got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    saved = ferror(f) ? errno : 0;
    fclose(f);
    if (saved != 0) {
        free(text);
        return status_fail(err, STATUS_IO, "cannot read %s '%s': %s", what, path, strerror(saved));
    }
    text[len] = '\0';
    *ret_text = text;
    *ret_len = len;
    return STATUS_OK;
}

static status_t parse_keras_file(job_ctx_t *c, const job_node_t *map, job_model_t *m)
{
    char *path = NULL, *text = NULL;
    size_t len = 0, old;
    status_t rc;

    STATUS_CHECK(job_tree_get_path(c, map, "keras_json", true, &path));
    rc = STATUS_NOT_FOUND;
    for (size_t i = 0; i < c->n_files && rc != STATUS_OK; i++) { /* the first of that path */
        if (c->files[i].path == NULL || strcmp(c->files[i].path, path) != 0)
            continue;
        text = malloc(c->files[i].len + 1);
        if (text == NULL) {
            free(path);
            return status_fail(c->err, STATUS_NO_MEMORY, "%s: out of memory", c->file);
        }
        if (c->files[i].len > 0)
            memcpy(text, c->files[i].data, c->files[i].len);
        text[c->files[i].len] = '\0';
        len = c->files[i].len;
        rc = STATUS_OK;
    }
    if (rc != STATUS_OK)
        rc = read_file(path, "keras_json file", &text, &len, c->err);
    if (rc != STATUS_OK) {
        char why[sizeof(c->err->text)];
        old = job_tree_push_key(c, "keras_json");
        snprintf(why, sizeof(why), "%s", c->err != NULL ? c->err->text : "");
        job_tree_fail(c, rc, job_tree_child(map, "keras_json")->line, "%s: %s", c->path, why);
        job_tree_pop(c, old);
    }
    if (rc == STATUS_OK) {
        rc = job_parse_keras_json(text, len, path, m, c->err);
        if (rc == STATUS_OK) {
            m->keras_json_path = path;
            path = NULL;
        }
        if (rc != STATUS_OK && c->err != NULL) {
            char why[sizeof(c->err->text)];
            old = job_tree_push_key(c, "keras_json");
            snprintf(why, sizeof(why), "%s", c->err->text);
            job_tree_fail(c, rc, job_tree_child(map, "keras_json")->line, "%s: %s", c->path, why);
            job_tree_pop(c, old);
        }
    }
    free(text);
    free(path);
    return rc;
}

static status_t parse_model(job_ctx_t *c, const job_node_t *n, job_model_t *m)
{
    static const char *const model_keys[] = {"keras_json", "layers", "input_shape"};
    char where[400];
    const job_node_t *layers, *shape;

    if (n->kind == JOB_NODE_MAP) {
        STATUS_CHECK(job_tree_check_map(c, n, model_keys, JOB_N_OF(model_keys), false));
        if (job_tree_child(n, "keras_json") != NULL) {
            if (n->n > 1)
                return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                                     "%s: keras_json stands alone: the layers and input shape come "
                                     "from the Keras file",
                                     c->path);
            return parse_keras_file(c, n, m);
        }
        layers = job_tree_child(n, "layers");
        if (!job_tree_given(layers))
            return job_tree_missing(c, n, "layers");
        shape = job_tree_child(n, "input_shape");
        if (job_tree_given(shape))
            STATUS_CHECK(set_input_shape(c, m, shape));
        {
            size_t old = job_tree_push_key(c, "layers");
            status_t rc = parse_layers(c, layers, m);
            job_tree_pop(c, old);
            STATUS_CHECK(rc);
        }
    } else if (n->kind == JOB_NODE_SEQ) {
        STATUS_CHECK(parse_layers(c, n, m));
    } else {
        return job_tree_type_error(c, n, "a list of layers or {keras_json: PATH}");
    }
    snprintf(where, sizeof(where), "%s:%d: %s", c->file, n->line, c->path);
    return job_model_finish(m, where, c->err);
}

/* ---- loss, metrics, optimizer ---- */

static const char *const loss_names[] = {"mse", "mean_squared_error",
                                         "sparse_categorical_crossentropy", "binary_crossentropy"};
static const job_loss_kind_t loss_kinds[] = {JOB_LOSS_MSE, JOB_LOSS_MSE,
                                             JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                             JOB_LOSS_BINARY_CROSSENTROPY};

static status_t parse_loss(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    static const char *const logit_keys[] = {"from_logits"};
    size_t old = c->path_len;
    const job_node_t *opts;
    int i;
    status_t rc;

    STATUS_CHECK(job_tree_variant(c, n, "loss", loss_names, JOB_N_OF(loss_names), true, &i, &opts));
    job->loss = loss_kinds[i];
    rc = job_tree_check_map(c, opts, logit_keys, job->loss == JOB_LOSS_MSE ? 0 : 1, true);
    if (rc == STATUS_OK)
        rc = job_tree_get_bool(c, opts, "from_logits", &job->from_logits);
    job_tree_pop(c, old);
    return rc;
}

static status_t parse_metrics(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    static const char *const metric_names[] = {"accuracy", "loss", "acc",
                                               "sparse_categorical_accuracy", "binary_accuracy"};
    int i;

    if (n->kind == JOB_NODE_SCALAR) {
        STATUS_CHECK(job_tree_name(c, n, "metric", metric_names, JOB_N_OF(metric_names), &i));
        job->metric_accuracy = i != 1;
        return STATUS_OK;
    }
    if (n->kind != JOB_NODE_SEQ)
        return job_tree_type_error(c, n, "a list of metrics such as [accuracy]");
    for (size_t k = 0; k < n->n; k++) {
        size_t old = job_tree_push_index(c, k);
        status_t rc =
            job_tree_name(c, n->items[k], "metric", metric_names, JOB_N_OF(metric_names), &i);
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
        job->metric_accuracy |= i != 1;
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

static const char *const optimizer_names[] = {"sgd", "adam", "adagrad", "rmsprop"};

/* Option keys per optimizer, in optimizer_kind_t order. */
static const char *const sgd_keys[] = {"learning_rate", "scale_learning_rate", "momentum",
                                       "nesterov"};
static const char *const adam_keys[] = {
    "learning_rate", "scale_learning_rate", "beta_1", "beta_2", "epsilon", "amsgrad"};
static const char *const adagrad_keys[] = {"learning_rate", "scale_learning_rate",
                                           "initial_accumulator_value", "epsilon"};
static const char *const rmsprop_keys[] = {
    "learning_rate", "scale_learning_rate", "rho", "momentum", "epsilon", "centered"};

static const struct {
    const char *const *keys;
    size_t n;
} optimizer_keys[] = {
    {sgd_keys, JOB_N_OF(sgd_keys)},
    {adam_keys, JOB_N_OF(adam_keys)},
    {adagrad_keys, JOB_N_OF(adagrad_keys)},
    {rmsprop_keys, JOB_N_OF(rmsprop_keys)},
};

static status_t optimizer_options(job_ctx_t *c, const job_node_t *opts, optimizer_config_t *o)
{
    const job_node_t *lr = job_tree_child(opts, "learning_rate");
    bool scale = false;

    STATUS_CHECK(
        job_tree_check_map(c, opts, optimizer_keys[o->kind].keys, optimizer_keys[o->kind].n, true));
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
    return job_tree_get_bool(c, opts, "centered", &o->centered);
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

static status_t parse_source(job_ctx_t *c, const job_node_t *n, job_source_t *s)
{
    static const char *const formats[] = {"idx", "synthetic"};
    static const char *const idx_keys[] = {"format", "images", "labels"};
    static const char *const synthetic_keys[] = {"format",  "kind", "examples",  "shape",
                                                 "classes", "seed", "vocabulary"};
    const job_node_t *format = job_tree_child(n, "format");
    int f;

    if (n->kind != JOB_NODE_MAP)
        return job_tree_type_error(c, n, "a mapping with format: idx or synthetic");
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
    static const char *const data_keys[] = {"train",          "test",    "scale",
                                            "batch_size",     "seed",    "shuffle_buffer",
                                            "drop_remainder", "prefetch"};
    int64_t seed = 0;

    STATUS_CHECK(job_tree_check_map(c, n, data_keys, JOB_N_OF(data_keys), false));
    STATUS_CHECK(job_tree_get_int(c, n, "batch_size", true, 1, &d->batch_size));
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
    static const char *const train_keys[] = {"epochs", "steps", "steps_per_execution",
                                             "max_staleness", "bytes_per_pack"};

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
    return job_tree_get_i64(c, n, "bytes_per_pack", false, 0, &job->bytes_per_pack);
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
    static const char *const keys[] = {"dir", "every_steps", "keep"};

    STATUS_CHECK(job_tree_check_map(c, n, keys, JOB_N_OF(keys), false));
    STATUS_CHECK(job_tree_get_path(c, n, "dir", true, &job->checkpoint_dir));
    STATUS_CHECK(job_tree_get_i64(c, n, "every_steps", false, 0, &job->checkpoint_every_steps));
    return job_tree_get_int(c, n, "keep", false, 1, &job->checkpoint_keep);
}

static status_t parse_tensorboard(job_ctx_t *c, const job_node_t *n, job_t *job)
{
    static const char *const keys[] = {"logdir"};

    STATUS_CHECK(job_tree_check_map(c, n, keys, JOB_N_OF(keys), false));
    return job_tree_get_path(c, n, "logdir", true, &job->tensorboard_logdir);
}

/* ---- the job ---- */

/* Calls parse(c, root[key], arg) with the path set to key when the key is given, and fails
 * when it is required but absent. */
#define SECTION(key, required, parse, arg)                                                         \
    do {                                                                                           \
        const job_node_t *n_ = job_tree_child(root, key);                                          \
        size_t old_;                                                                               \
        status_t rc_;                                                                              \
        if (!job_tree_given(n_)) {                                                                 \
            if (required)                                                                          \
                return job_tree_missing(c, root, key);                                             \
            break;                                                                                 \
        }                                                                                          \
        old_ = job_tree_push_key(c, key);                                                          \
        rc_ = parse(c, n_, arg);                                                                   \
        job_tree_pop(c, old_);                                                                     \
        STATUS_CHECK(rc_);                                                                         \
    } while (0)

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
}

static status_t parse_job(job_ctx_t *c, const job_node_t *root, job_t *job)
{
    static const char *const top_keys[] = {
        "name",  "strategy", "model",       "loss",       "metrics",     "optimizer", "data",
        "train", "evaluate", "partitioner", "checkpoint", "tensorboard", "seed"};
    static const char *const strategies[] = {"one_device", "parameter_server", "mirrored",
                                             "multi_worker_mirrored", "central_storage"};
    const char *name = NULL;
    const job_node_t *n;
    int64_t seed = -1;
    int s = 0;

    STATUS_CHECK(job_tree_check_map(c, root, top_keys, JOB_N_OF(top_keys), false));
    STATUS_CHECK(job_tree_get_string(c, root, "name", false, &name));
    if (name != NULL) {
        free(job->name);
        job->name = job_tree_strdup(c, name);
        if (job->name == NULL)
            return STATUS_NO_MEMORY;
    }
    n = job_tree_child(root, "strategy");
    if (job_tree_given(n)) {
        size_t old = job_tree_push_key(c, "strategy");
        status_t rc = job_tree_name(c, n, "strategy", strategies, JOB_N_OF(strategies), &s);
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
        job->strategy = (job_strategy_t)s;
    }
    SECTION("model", true, parse_model, &job->model);
    SECTION("loss", true, parse_loss, job);
    SECTION("metrics", false, parse_metrics, job);
    SECTION("optimizer", false, parse_optimizer, &job->optimizer);
    SECTION("data", true, parse_data, &job->data);
    SECTION("train", false, parse_train, job);
    job->evaluate = job->data.test.present;
    STATUS_CHECK(job_tree_get_bool(c, root, "evaluate", &job->evaluate));
    if (job->evaluate && !job->data.test.present)
        return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(root, "evaluate")->line,
                             "evaluate: true needs a test split in data.test");
    SECTION("partitioner", false, parse_partitioner, &job->partitioner);
    SECTION("checkpoint", false, parse_checkpoint, job);
    SECTION("tensorboard", false, parse_tensorboard, job);
    /* Parsed, so that mistakes in them are named, but not acted on yet: refused, rather than
     * train without the files the user asked for. */
    if (job->checkpoint_dir != NULL)
        return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(root, "checkpoint")->line,
                             "checkpoint: Tessera does not write checkpoints yet; remove the "
                             "section to train without them");
    if (job->tensorboard_logdir != NULL)
        return job_tree_fail(c, STATUS_BAD_CONFIG, job_tree_child(root, "tensorboard")->line,
                             "tensorboard: Tessera does not write TensorBoard events yet; remove "
                             "the section to train without them");
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
    STATUS_CHECK(read_file(path, "job file", &text, &len, err));
    rc = job_parse(text, len, path, ret_job, err);
    free(text);
    return rc;
}
