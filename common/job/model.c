/* The model section of a job file: a list of layers (with the first layer's input_shape), or
 * {layers, input_shape}, or {keras_json: PATH} naming a Keras model.to_json() document (read from
 * the files supplied with the job first, then from disk). Each layer's options are read through
 * the layer table (layers.h). */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "files/keras_archive.h"
#include "job/paths.h"
#include "job/initializer.h"
#include "job/internal.h"
#include "job/tree.h"
#include "job/layers.h"

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

static status_t get_padding(job_ctx_t *c, const job_node_t *map, const char *key, bool *ret_same)
{
    static const char *const paddings[] = {"valid", "same"};
    const job_node_t *n = job_tree_child(map, key);
    size_t old;
    int i;
    status_t rc;

    if (!job_tree_given(n))
        return STATUS_OK;
    old = job_tree_push_key(c, key);
    rc = job_tree_name(c, n, "padding", paddings, JOB_N_OF(paddings), &i);
    job_tree_pop(c, old);
    if (rc == STATUS_OK)
        *ret_same = i == 1;
    return rc;
}

/* ---- a layer's options in the job tree (job_layer_reader_t) ---- */

typedef struct tree_reader {
    job_layer_reader_t base;
    job_ctx_t *c;
    const job_node_t *opts;
} tree_reader_t;

static tree_reader_t *tree_reader(job_layer_reader_t *r)
{
    return (tree_reader_t *)r;
}

static status_t tree_get_int(job_layer_reader_t *r, const char *key, bool required, int lo,
                             int *ret)
{
    tree_reader_t *t = tree_reader(r);
    return job_tree_get_int(t->c, t->opts, key, required, lo, ret);
}

static status_t tree_get_seed(job_layer_reader_t *r, const char *key, uint64_t *ret)
{
    tree_reader_t *t = tree_reader(r);
    int64_t seed = -1;

    STATUS_CHECK(job_tree_get_i64(t->c, t->opts, key, false, 0, &seed));
    if (seed >= 0)
        *ret = (uint64_t)seed;
    return STATUS_OK;
}

static status_t tree_get_number(job_layer_reader_t *r, const char *key, bool required, double *ret)
{
    tree_reader_t *t = tree_reader(r);
    return job_tree_get_double(t->c, t->opts, key, required, ret);
}

static status_t tree_get_bool(job_layer_reader_t *r, const char *key, bool *ret)
{
    tree_reader_t *t = tree_reader(r);
    return job_tree_get_bool(t->c, t->opts, key, ret);
}

static status_t tree_get_pair(job_layer_reader_t *r, const char *key, bool required, int ret[2])
{
    tree_reader_t *t = tree_reader(r);
    return job_tree_get_pair(t->c, t->opts, key, required, ret);
}

static status_t tree_get_shape(job_layer_reader_t *r, const char *key, int *ret, int *ret_rank)
{
    tree_reader_t *t = tree_reader(r);
    size_t old;
    const job_node_t *n = job_tree_enter(t->c, t->opts, key, &old);
    status_t rc;

    if (n == NULL)
        return job_tree_missing(t->c, t->opts, key);
    rc = job_tree_ints(t->c, n, JOB_MAX_RANK, 1, true, ret, ret_rank);
    job_tree_pop(t->c, old);
    return rc;
}

static status_t tree_get_activation(job_layer_reader_t *r, const char *key, bool required,
                                    job_activation_t *ret)
{
    tree_reader_t *t = tree_reader(r);
    return get_activation(t->c, t->opts, key, required, ret);
}

static status_t tree_get_padding(job_layer_reader_t *r, const char *key, bool *ret_same)
{
    tree_reader_t *t = tree_reader(r);
    return get_padding(t->c, t->opts, key, ret_same);
}

static status_t tree_get_init(job_layer_reader_t *r, const char *key, job_init_t *ret)
{
    tree_reader_t *t = tree_reader(r);
    return get_init(t->c, t->opts, key, ret);
}

/* A regularizer: {l1: X}, {l2: X} or {l1: X, l2: Y}, each a number >= 0. */
static status_t tree_get_regularizer(job_layer_reader_t *r, const char *key, job_regularizer_t *ret)
{
    static const char *const keys[] = {"l1", "l2"};
    tree_reader_t *t = tree_reader(r);
    size_t old;
    const job_node_t *n = job_tree_enter(t->c, t->opts, key, &old);
    job_regularizer_t reg = {0};
    status_t rc;

    if (n == NULL)
        return STATUS_OK;
    rc = job_tree_check_map(t->c, n, keys, 2, false);
    if (rc == STATUS_OK)
        rc = job_tree_get_double(t->c, n, "l1", false, &reg.l1);
    if (rc == STATUS_OK)
        rc = job_tree_get_double(t->c, n, "l2", false, &reg.l2);
    if (rc == STATUS_OK && (!(reg.l1 >= 0) || !(reg.l2 >= 0)))
        rc = job_tree_fail(t->c, STATUS_BAD_CONFIG, n->line,
                           "%s: l1 and l2 must be numbers >= 0, got %g and %g", t->c->path, reg.l1,
                           reg.l2);
    job_tree_pop(t->c, old);
    if (rc == STATUS_OK)
        *ret = reg;
    return rc;
}

static status_t tree_invalid(job_layer_reader_t *r, const char *key, const char *expected)
{
    tree_reader_t *t = tree_reader(r);
    size_t old = job_tree_push_key(t->c, key);
    status_t rc = job_tree_type_error(t->c, job_tree_child(t->opts, key), expected);

    job_tree_pop(t->c, old);
    return rc;
}

static status_t tree_get_length(job_layer_reader_t *r, const char *key, bool required, int *ret)
{
    tree_reader_t *t = tree_reader(r);
    return job_tree_get_length(t->c, t->opts, key, required, ret);
}

static status_t tree_get_margins(job_layer_reader_t *r, const char *key, int ret[4])
{
    tree_reader_t *t = tree_reader(r);
    return job_tree_get_margins(t->c, t->opts, key, ret);
}

static status_t tree_get_axes(job_layer_reader_t *r, const char *key, int *ret, int *ret_n)
{
    tree_reader_t *t = tree_reader(r);
    const job_node_t *n = job_tree_child(t->opts, key);
    size_t old;
    status_t rc;
    int64_t v;

    *ret_n = 0;
    if (!job_tree_given(n))
        return STATUS_OK;
    old = job_tree_push_key(t->c, key);
    if (n->kind == JOB_NODE_SEQ) {
        rc = job_tree_ints(t->c, n, JOB_MAX_RANK, 1, false, ret, ret_n);
    } else {
        rc = job_tree_int(t->c, n, 1, INT_MAX, &v);
        if (rc == STATUS_OK) {
            ret[0] = (int)v;
            *ret_n = 1;
        }
    }
    job_tree_pop(t->c, old);
    return rc;
}

static status_t tree_get_axis(job_layer_reader_t *r, const char *key, int *ret)
{
    tree_reader_t *t = tree_reader(r);
    const job_node_t *n = job_tree_child(t->opts, key);
    size_t old;
    status_t rc;
    int64_t v = 0;

    if (!job_tree_given(n))
        return STATUS_OK;
    old = job_tree_push_key(t->c, key);
    rc = job_tree_int(t->c, n, -JOB_MAX_RANK, JOB_MAX_RANK, &v);
    if (rc == STATUS_OK && v == 0)
        rc = job_tree_type_error(t->c, n, "an axis other than the batch's: 1 to 4, or -1 to -4");
    job_tree_pop(t->c, old);
    if (rc == STATUS_OK)
        *ret = (int)v;
    return rc;
}

static status_t tree_get_choice(job_layer_reader_t *r, const char *key, const char *const *names,
                                int n, int *ret)
{
    tree_reader_t *t = tree_reader(r);
    const job_node_t *v = job_tree_child(t->opts, key);
    size_t old;
    status_t rc;

    if (!job_tree_given(v))
        return STATUS_OK;
    old = job_tree_push_key(t->c, key);
    rc = job_tree_name(t->c, v, key, names, (size_t)n, ret);
    job_tree_pop(t->c, old);
    return rc;
}

/* A constraint: a bare name (non_neg, max_norm, unit_norm, min_max_norm) or {NAME: {max_value,
 * min_value, rate, axis}} as Keras names them (axis: an axis or a list of axes of the weight). */
static status_t tree_get_constraint(job_layer_reader_t *r, const char *key, job_constraint_t *ret)
{
    static const char *const keys[] = {"max_value", "min_value", "rate", "axis"};
    tree_reader_t *t = tree_reader(r);
    const job_node_t *n = job_tree_child(t->opts, key), *opts = NULL, *axis;
    size_t old, old2;
    job_constraint_t c = {0};
    const char *bad;
    int kind, axes[JOB_MAX_RANK], n_axes = 0;
    status_t rc;

    if (!job_tree_given(n))
        return STATUS_OK;
    old = job_tree_push_key(t->c, key);
    old2 = t->c->path_len;
    rc = job_tree_variant(t->c, n, "constraint", job_constraint_names, 4, true, &kind, &opts);
    if (rc == STATUS_OK) {
        c.kind = (job_constraint_kind_t)(JOB_CONSTRAINT_NON_NEG + kind);
        job_constraint_default(&c);
        if (opts != NULL)
            rc = job_tree_check_map(t->c, opts, keys, c.kind == JOB_CONSTRAINT_NON_NEG ? 0 : 4,
                                    false);
    }
    if (rc == STATUS_OK && opts != NULL) {
        rc = job_tree_get_double(t->c, opts, "max_value", false, &c.max_value);
        if (rc == STATUS_OK)
            rc = job_tree_get_double(t->c, opts, "min_value", false, &c.min_value);
        if (rc == STATUS_OK)
            rc = job_tree_get_double(t->c, opts, "rate", false, &c.rate);
        axis = job_tree_child(opts, "axis");
        if (rc == STATUS_OK && job_tree_given(axis)) {
            size_t old3 = job_tree_push_key(t->c, "axis");
            int64_t v;
            if (axis->kind == JOB_NODE_SEQ) {
                rc = job_tree_ints(t->c, axis, JOB_MAX_RANK, 0, false, axes, &n_axes);
            } else {
                rc = job_tree_int(t->c, axis, 0, JOB_MAX_RANK - 1, &v);
                axes[0] = (int)v;
                n_axes = 1;
            }
            c.axes = 0;
            for (int i = 0; rc == STATUS_OK && i < n_axes; i++) {
                if (axes[i] >= JOB_MAX_RANK)
                    rc = job_tree_type_error(t->c, axis, "axes 0 to 3");
                else
                    c.axes |= 1u << axes[i];
            }
            job_tree_pop(t->c, old3);
        }
    }
    if (rc == STATUS_OK && !job_constraint_valid(&c, &bad))
        rc = job_tree_fail(t->c, STATUS_BAD_CONFIG, n->line, "%s: %s is out of range", t->c->path,
                           bad);
    job_tree_pop(t->c, old2);
    job_tree_pop(t->c, old);
    if (rc == STATUS_OK)
        *ret = c;
    return rc;
}

static const job_layer_reader_ops_t tree_reader_ops = {
    tree_get_int,   tree_get_seed,       tree_get_number,  tree_get_bool, tree_get_pair,
    tree_get_shape, tree_get_activation, tree_get_padding, tree_get_init, tree_get_regularizer,
    tree_invalid,   tree_get_length,     tree_get_margins, tree_get_axes, tree_get_constraint,
    tree_get_axis,  tree_get_choice,
};

/* Reads a layer's options: its name, what its kind reads, then what every layer may have. */
static status_t layer_options(job_ctx_t *c, const job_node_t *opts, job_layer_t *l,
                              int *ret_input_length)
{
    const job_layer_info_t *info = job_layer_info(l->kind);
    const char *keys[JOB_LAYER_MAX_KEYS + 2], *name = NULL;
    tree_reader_t reader = {{&tree_reader_ops}, c, opts};

    if (info->n_keys > JOB_LAYER_MAX_KEYS) /* a table row past the bound: a bug, never a crash */
        return status_fail(c->err, STATUS_INTERNAL, "layer kind %s reads %zu options, over %d",
                           info->name, info->n_keys, JOB_LAYER_MAX_KEYS);
    for (size_t i = 0; i < info->n_keys; i++)
        keys[i] = info->keys[i];
    keys[info->n_keys] = "name";
    keys[info->n_keys + 1] = "activity_regularizer";
    STATUS_CHECK(job_tree_check_map(c, opts, keys, info->n_keys + 2, true));
    STATUS_CHECK(job_tree_get_string(c, opts, "name", false, &name));
    if (name != NULL && strlen(name) >= sizeof(l->name))
        return tree_invalid(&reader.base, "name", "a name of at most 63 characters");
    if (name != NULL)
        strcpy(l->name, name);
    STATUS_CHECK(info->read(&reader.base, l, ret_input_length));
    return job_layer_read_common(&reader.base, l);
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

/* {call: NAME}: a later call of the earlier layer named NAME (a shared layer), its options and
 * weights that layer's. */
static status_t parse_call(job_ctx_t *c, const job_node_entry_t *e, job_model_t *m)
{
    const char *name = e->value != NULL && e->value->kind == JOB_NODE_SCALAR ? e->value->text : "";
    size_t first = m->n_layers;
    job_layer_t *l;

    for (size_t j = 0; j < m->n_layers && first == m->n_layers; j++)
        if (m->layers[j].shares == 0 && name[0] != '\0' && strcmp(m->layers[j].name, name) == 0)
            first = j;
    if (first == m->n_layers)
        return job_tree_fail(c, STATUS_BAD_CONFIG, e->line,
                             "%s: call: '%s' names no layer before this one (the layer to call "
                             "again needs name: in its options)",
                             c->path, name);
    STATUS_CHECK(job_model_add_layer(m, m->layers[first].kind, c->file, &l, c->err));
    *l = m->layers[first];
    l->shares = (int)first + 1;
    l->n_inputs = 0;
    return STATUS_OK;
}

/* One list item: `flatten`, {LAYER: {options}} with input_shape beside it on the first, or
 * {call: NAME} (a shared layer's later call); inputs: NAME or [NAME, ...] beside it on a layer
 * of a graph (kept in *ret_inputs for wire_inputs). */
static status_t parse_layer(job_ctx_t *c, const job_node_t *item, size_t index, job_model_t *m,
                            const job_node_t **ret_inputs)
{
    static const char *const item_keys[] = {"input_shape", "inputs", "call"};
    const job_node_t *opts = NULL, *shape = NULL;
    const job_node_entry_t *layer_entry = NULL;
    job_node_t empty = {.kind = JOB_NODE_MAP, .line = item->line};
    const char *names[JOB_LAYER_KINDS];
    job_layer_t *l;
    int kind = 0, input_length = 0;

    job_layer_names(names, false);
    if (item->kind == JOB_NODE_SCALAR) {
        STATUS_CHECK(job_tree_name(c, item, "layer", names, JOB_LAYER_KINDS, &kind));
    } else if (item->kind == JOB_NODE_MAP) {
        for (size_t i = 0; i < item->n; i++) {
            const job_node_entry_t *e = &item->entries[i];
            job_node_t key = {.kind = JOB_NODE_SCALAR, .line = e->line, .text = e->key};
            const char *near = job_suggest(e->key, item_keys, JOB_N_OF(item_keys));
            if (strcmp(e->key, item_keys[0]) == 0) {
                shape = e->value;
                continue;
            }
            if (strcmp(e->key, item_keys[1]) == 0) {
                *ret_inputs = e->value;
                continue;
            }
            if (strcmp(e->key, item_keys[2]) == 0 && item->n <= 2 &&
                (item->n == 1 || job_tree_child(item, "inputs") != NULL)) {
                size_t old = job_tree_push_key(c, "call");
                status_t rc = parse_call(c, e, m);
                *ret_inputs = job_tree_child(item, "inputs");
                job_tree_pop(c, old);
                return rc;
            }
            if (strcmp(e->key, item_keys[2]) == 0)
                return job_tree_fail(c, STATUS_BAD_CONFIG, e->line,
                                     "%s: call: NAME takes inputs: beside it, nothing else (the "
                                     "options are the called layer's)",
                                     c->path);
            if (near != NULL)
                return job_tree_fail(c, STATUS_BAD_CONFIG, e->line,
                                     "%s: unknown key '%s' (did you mean '%s'?)", c->path, e->key,
                                     near);
            if (layer_entry != NULL)
                return job_tree_fail(c, STATUS_BAD_CONFIG, e->line,
                                     "%s: one layer per list item, got '%s' and '%s'", c->path,
                                     layer_entry->key, e->key);
            STATUS_CHECK(job_tree_name(c, &key, "layer", names, JOB_LAYER_KINDS, &kind));
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
        size_t old = job_tree_push_key(c, names[kind]);
        status_t rc = layer_options(c, job_tree_given(opts) ? opts : &empty, l, &input_length);
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
    }
    if (input_length > 0 && m->n_inputs > 0)
        return job_tree_fail(c, STATUS_BAD_CONFIG, item->line,
                             "%s: embedding.input_length beside model.inputs: give the ids' "
                             "length as the shape of the input it reads",
                             c->path);
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

/* What NAME (a layer's, or NAME@K: call K of a shared layer, 0 its first) or one of the model's
 * inputs (by its name in `inputs:`, or `input` for a model of one) is, among layers [0, before):
 * a layer's index, JOB_INPUT_OF(k), or INT_MIN when nothing is. */
static int resolve_name(const job_model_t *m, size_t before, const char *text)
{
    char base[64];
    const char *at = strchr(text, '@');
    long call = 0;
    size_t len = at != NULL ? (size_t)(at - text) : strlen(text);

    if (len == 0 || len >= sizeof(base))
        return INT_MIN;
    if (at != NULL) {
        char *end;
        if (!(at[1] >= '0' && at[1] <= '9'))
            return INT_MIN;
        call = strtol(at + 1, &end, 10);
        if (*end != '\0' || call > (long)before)
            return INT_MIN;
    }
    memcpy(base, text, len);
    base[len] = '\0';
    /* a shared layer's calls carry its name, in the order they are made */
    for (size_t j = 0, seen = 0; j < before; j++)
        if (strcmp(m->layers[j].name, base) == 0 && seen++ == (size_t)call)
            return (int)j;
    for (int k = 0; at == NULL && k < m->n_inputs; k++)
        if (strcmp(m->inputs[k].name, base) == 0)
            return JOB_INPUT_OF(k);
    return at == NULL && m->n_inputs <= 1 && strcmp(base, "input") == 0 ? JOB_INPUT_MODEL : INT_MIN;
}

/* Layer i's `inputs:` (a name, or a list of them): the earlier layers of those names (NAME@K:
 * a shared layer's call K), or the model's inputs by their names (`input` for a model of one,
 * unless a layer before it has that name). */
static status_t wire_inputs(job_ctx_t *c, const job_node_t *n, size_t i, job_model_t *m)
{
    const job_node_t *const *items =
        n->kind == JOB_NODE_SEQ ? (const job_node_t *const *)n->items : &n;
    size_t count = n->kind == JOB_NODE_SEQ ? n->n : 1;
    job_layer_t *l = &m->layers[i];

    if (count < 1 || count > JOB_MAX_INPUTS)
        return job_tree_fail(c, STATUS_BAD_CONFIG, n->line, "%s: %zu inputs (1 to %d)", c->path,
                             count, JOB_MAX_INPUTS);
    l->n_inputs = 0;
    for (size_t k = 0; k < count; k++) {
        const char *name = items[k]->kind == JOB_NODE_SCALAR ? items[k]->text : NULL;
        int src;
        if (name == NULL || name[0] == '\0')
            return job_tree_type_error(c, items[k], "a layer's name, or input");
        if ((src = resolve_name(m, i, name)) == INT_MIN)
            return job_tree_fail(c, STATUS_BAD_CONFIG, items[k]->line,
                                 "%s: '%s' is no layer before this one (a layer read by name "
                                 "needs name: in its options, NAME@K is a shared layer's call K; "
                                 "the model's input is `input`, or its name in inputs:)",
                                 c->path, name);
        l->inputs[l->n_inputs++] = src;
    }
    return STATUS_OK;
}

static status_t parse_layers(job_ctx_t *c, const job_node_t *list, job_model_t *m)
{
    const job_node_t **inputs;
    status_t rc = STATUS_OK;

    if (list->kind != JOB_NODE_SEQ)
        return job_tree_type_error(c, list, "a list of layers");
    if ((inputs = calloc(list->n + 1, sizeof(*inputs))) == NULL)
        return status_fail(c->err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < list->n && rc == STATUS_OK; i++) {
        size_t old = job_tree_push_index(c, i);
        rc = parse_layer(c, list->items[i], i, m, &inputs[i]);
        job_tree_pop(c, old);
    }
    /* a graph: layers that name what they read, once every name is known */
    for (size_t i = 0; i < list->n && rc == STATUS_OK; i++) {
        size_t old = job_tree_push_index(c, i), at;
        if (inputs[i] == NULL) {
            job_tree_pop(c, old);
            continue;
        }
        at = job_tree_push_key(c, "inputs");
        rc = wire_inputs(c, inputs[i], i, m);
        job_tree_pop(c, at);
        job_tree_pop(c, old);
    }
    free(inputs);
    return rc;
}

/* model: {keras_json: PATH} (key "keras_json"), the JSON of model.to_json(); or {keras: PATH}
 * (key "keras"), a Keras 3 archive whose config.json holds the model's config. A file sent with
 * the job under that path (tessera submit sends the JSON, or the archive's config.json) is read
 * instead of the disk. */
static status_t parse_keras_file(job_ctx_t *c, const job_node_t *map, const char *key,
                                 job_model_t *m)
{
    bool archive = strcmp(key, "keras") == 0;
    char *path = NULL, *text = NULL, field[32];
    size_t len = 0, old;
    status_t rc;

    snprintf(field, sizeof(field), "model.%s", key);
    STATUS_CHECK(job_tree_get_path(c, map, key, true, &path));
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
    if (rc == STATUS_OK && archive && len >= 2 && text[0] == 'P' && text[1] == 'K')
        rc = status_fail(c->err, STATUS_BAD_CONFIG,
                         "%s: sent as a whole archive; send its config.json (tessera submit "
                         "does)",
                         path);
    else if (rc != STATUS_OK) {
        rc = job_paths_check_read(field, path, c->err);
        if (rc == STATUS_OK && archive)
            rc = keras_archive_read_config(path, JOB_MAX_FILE_BYTES, &text, &len, c->err);
        else if (rc == STATUS_OK)
            rc = file_read_all(path, "keras_json file", JOB_MAX_FILE_BYTES, &text, &len, c->err);
    }
    if (rc != STATUS_OK) {
        char why[sizeof(c->err->text)];
        old = job_tree_push_key(c, key);
        snprintf(why, sizeof(why), "%s", c->err != NULL ? c->err->text : "");
        job_tree_fail(c, rc, job_tree_child(map, key)->line, "%s: %s", c->path, why);
        job_tree_pop(c, old);
    }
    if (rc == STATUS_OK) {
        rc = job_parse_keras_json(text, len, path, m, c->err);
        if (rc == STATUS_OK) {
            m->keras_json_path = path;
            m->keras_archive = archive;
            path = NULL;
        }
        if (rc != STATUS_OK && c->err != NULL) {
            char why[sizeof(c->err->text)];
            old = job_tree_push_key(c, key);
            snprintf(why, sizeof(why), "%s", c->err->text);
            job_tree_fail(c, rc, job_tree_child(map, key)->line, "%s: %s", c->path, why);
            job_tree_pop(c, old);
        }
    }
    free(text);
    free(path);
    return rc;
}

/* model.inputs: {NAME: SHAPE, ...}, a Functional model's inputs in that order (as
 * keras.Model([a, b], ...) takes them); the first one's shape is the model's input_shape. */
static status_t parse_model_inputs(job_ctx_t *c, const job_node_t *n, job_model_t *m)
{
    size_t old = job_tree_push_key(c, "inputs");
    status_t rc = STATUS_OK;

    if (n->kind != JOB_NODE_MAP || n->n == 0 || n->n > JOB_MAX_MODEL_INPUTS)
        rc = job_tree_type_error(c, n, "a mapping of 1 to 8 inputs, NAME: SHAPE");
    for (size_t k = 0; rc == STATUS_OK && k < n->n; k++) {
        const job_node_entry_t *e = &n->entries[k];
        job_model_input_t *in = &m->inputs[k];
        size_t at = job_tree_push_key(c, e->key);
        if (strlen(e->key) >= sizeof(in->name))
            rc = job_tree_fail(c, STATUS_BAD_CONFIG, e->line,
                               "%s: an input's name is at most %zu characters", c->path,
                               sizeof(in->name) - 1);
        if (rc == STATUS_OK)
            rc = job_tree_ints(c, e->value, JOB_MAX_RANK, 1, false, in->shape, &in->rank);
        job_tree_pop(c, at);
        snprintf(in->name, sizeof(in->name), "%s", e->key);
    }
    if (rc == STATUS_OK) {
        m->n_inputs = (int)n->n;
        m->input_rank = m->inputs[0].rank;
        memcpy(m->input_shape, m->inputs[0].shape, sizeof(m->input_shape));
    }
    job_tree_pop(c, old);
    return rc;
}

/* model.outputs: NAME or [NAME, ...] (NAME@K: a shared layer's call K), the model's outputs in
 * that order, each named by its layer; one output is the last layer. */
static status_t parse_model_outputs(job_ctx_t *c, const job_node_t *n, job_model_t *m)
{
    const job_node_t *const *items =
        n->kind == JOB_NODE_SEQ ? (const job_node_t *const *)n->items : &n;
    size_t count = n->kind == JOB_NODE_SEQ ? n->n : 1, old = job_tree_push_key(c, "outputs");
    status_t rc = STATUS_OK;

    if (count < 1 || count > JOB_MAX_OUTPUTS)
        rc = job_tree_fail(c, STATUS_BAD_CONFIG, n->line, "%s: %zu outputs (1 to %d)", c->path,
                           count, JOB_MAX_OUTPUTS);
    for (size_t k = 0; rc == STATUS_OK && k < count; k++) {
        const char *name = items[k]->kind == JOB_NODE_SCALAR ? items[k]->text : "";
        int at = resolve_name(m, m->n_layers, name);
        if (at < 0)
            rc = job_tree_fail(c, STATUS_BAD_CONFIG, items[k]->line,
                               "%s: '%s' names no layer (an output is a layer's name, or "
                               "NAME@K for a shared layer's call K)",
                               c->path, name);
        else if (count == 1 && (size_t)at != m->n_layers - 1)
            rc = job_tree_fail(c, STATUS_BAD_CONFIG, items[k]->line,
                               "%s: the one output '%s' is not the last layer (nothing reads the "
                               "last one)",
                               c->path, name);
        else if (count > 1) {
            m->outputs[k] = at;
            snprintf(m->output_names[k], sizeof(m->output_names[k]), "%s", m->layers[at].name);
        }
    }
    m->n_outputs = rc == STATUS_OK && count > 1 ? (int)count : 0;
    job_tree_pop(c, old);
    return rc;
}

status_t job_parse_model(job_ctx_t *c, const job_node_t *n, job_model_t *m)
{
    static const char *const model_keys[] = {"keras_json",  "keras",  "layers",
                                             "input_shape", "inputs", "outputs"};
    const job_node_t *inputs, *outputs;
    char where[400];
    const job_node_t *layers, *shape;

    if (n->kind == JOB_NODE_MAP) {
        STATUS_CHECK(job_tree_check_map(c, n, model_keys, JOB_N_OF(model_keys), false));
        for (int k = 0; k < 2; k++) {
            const char *key = k == 0 ? "keras_json" : "keras";
            if (job_tree_child(n, key) == NULL)
                continue;
            if (n->n > 1)
                return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                                     "%s: %s stands alone: the layers and input shape come "
                                     "from the Keras file",
                                     c->path, key);
            return parse_keras_file(c, n, key, m);
        }
        layers = job_tree_child(n, "layers");
        if (!job_tree_given(layers))
            return job_tree_missing(c, n, "layers");
        shape = job_tree_child(n, "input_shape");
        inputs = job_tree_child(n, "inputs");
        outputs = job_tree_child(n, "outputs");
        if (job_tree_given(shape) && job_tree_given(inputs))
            return job_tree_fail(c, STATUS_BAD_CONFIG, n->line,
                                 "%s: input_shape or inputs, not both (inputs name the model's "
                                 "inputs and give their shapes)",
                                 c->path);
        if (job_tree_given(shape))
            STATUS_CHECK(set_input_shape(c, m, shape));
        if (job_tree_given(inputs))
            STATUS_CHECK(parse_model_inputs(c, inputs, m));
        {
            size_t old = job_tree_push_key(c, "layers");
            status_t rc = parse_layers(c, layers, m);
            job_tree_pop(c, old);
            STATUS_CHECK(rc);
        }
        for (int k = 0; k < m->n_inputs; k++) /* a name reads one thing (an invalid one: finish) */
            if (strchr(m->inputs[k].name, '@') == NULL &&
                resolve_name(m, m->n_layers, m->inputs[k].name) >= 0)
                return job_tree_fail(c, STATUS_BAD_CONFIG, inputs->line,
                                     "%s: the input '%s' and a layer have one name", c->path,
                                     m->inputs[k].name);
        if (job_tree_given(outputs))
            STATUS_CHECK(parse_model_outputs(c, outputs, m));
    } else if (n->kind == JOB_NODE_SEQ) {
        STATUS_CHECK(parse_layers(c, n, m));
    } else {
        return job_tree_type_error(c, n, "a list of layers, {keras_json: PATH} or {keras: PATH}");
    }
    snprintf(where, sizeof(where), "%s:%d: %s", c->file, n->line, c->path);
    return job_model_finish(m, where, c->err);
}
