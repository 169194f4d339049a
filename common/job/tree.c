/* The job file's document tree: YAML (or JSON, which libyaml reads as YAML) turned into nodes
 * that keep their line numbers, and the strict readers job.c checks it with. Every reader
 * names the file, the line and the key path in its message ("job.yaml:7: data.batch_size must
 * be a positive integer, got 'abc'"). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "base/parse.h"
#include "job/internal.h"
#include "job/tree.h"

/* Deeper nesting than any job needs; a bound keeps hostile input off the C stack. */
#define MAX_DEPTH 32

/* ---- the document tree ---- */

void job_node_free(job_node_t *n)
{
    if (n == NULL)
        return;
    free(n->text);
    for (size_t i = 0; n->kind == JOB_NODE_SEQ && i < n->n; i++)
        job_node_free(n->items[i]);
    for (size_t i = 0; n->kind == JOB_NODE_MAP && i < n->n; i++) {
        free(n->entries[i].key);
        job_node_free(n->entries[i].value);
    }
    free(n->items);
    free(n->entries);
    free(n);
}

typedef struct tree_reader {
    yaml_parser_t parser;
    const char *file;
    status_msg_t *err;
} tree_reader_t;

static status_t tree_fail(tree_reader_t *r, int line, const char *msg)
{
    return status_fail(r->err, STATUS_BAD_CONFIG, "%s:%d: %s", r->file, line, msg);
}

static status_t next_event(tree_reader_t *r, yaml_event_t *ev)
{
    yaml_parser_t *p = &r->parser;

    if (yaml_parser_parse(p, ev))
        return STATUS_OK;
    if (p->error == YAML_MEMORY_ERROR)
        return status_fail(r->err, STATUS_NO_MEMORY, "%s: out of memory", r->file);
    return status_fail(r->err, STATUS_BAD_CONFIG, "%s:%zu: invalid YAML: %s%s%s", r->file,
                       p->problem_mark.line + 1, p->problem ? p->problem : "syntax error",
                       p->context ? " " : "", p->context ? p->context : "");
}

static bool plain_null(const char *s)
{
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

static status_t read_node(tree_reader_t *r, yaml_event_t *ev, int depth, job_node_t **ret);

/* Makes room for `want` elements of `size` bytes in *arrayp, doubling its capacity *cap. */
static bool grow(void *arrayp, size_t *cap, size_t want, size_t size)
{
    void **array = arrayp, *grown;
    size_t new_cap;

    if (want <= *cap)
        return true;
    new_cap = *cap < 8 ? 8 : *cap * 2;
    if (new_cap < want || new_cap > SIZE_MAX / size)
        return false;
    grown = realloc(*array, new_cap * size);
    if (grown == NULL)
        return false;
    *array = grown;
    *cap = new_cap;
    return true;
}

static status_t read_seq(tree_reader_t *r, job_node_t *n, int depth)
{
    size_t cap = 0;

    for (;;) {
        yaml_event_t ev;
        job_node_t *item;

        STATUS_CHECK(next_event(r, &ev));
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return STATUS_OK;
        }
        STATUS_CHECK(read_node(r, &ev, depth + 1, &item));
        if (!grow(&n->items, &cap, n->n + 1, sizeof(*n->items))) {
            job_node_free(item);
            return status_fail(r->err, STATUS_NO_MEMORY, "%s: out of memory", r->file);
        }
        n->items[n->n++] = item;
    }
}

static int entry_cmp(const void *pa, const void *pb)
{
    const job_node_entry_t *a = *(const job_node_entry_t *const *)pa;
    const job_node_entry_t *b = *(const job_node_entry_t *const *)pb;
    int c = strcmp(a->key, b->key);

    return c != 0 ? c : (a > b) - (a < b);
}

/* Fails on a key given twice, naming the repeat that comes first in the file. Sorting makes it
 * O(n log n): a hostile mapping of a million keys costs a second, not hours. */
static status_t check_unique_keys(tree_reader_t *r, const job_node_t *n)
{
    const job_node_entry_t **sorted, *dup = NULL, *first = NULL;

    if (n->n < 2)
        return STATUS_OK;
    sorted = malloc(n->n * sizeof(*sorted));
    if (sorted == NULL)
        return status_fail(r->err, STATUS_NO_MEMORY, "%s: out of memory", r->file);
    for (size_t i = 0; i < n->n; i++)
        sorted[i] = &n->entries[i];
    qsort(sorted, n->n, sizeof(*sorted), entry_cmp);
    /* Equal keys sort in file order: a run's first entry is the key's first occurrence and its
     * second the first repeat. */
    for (size_t i = 1, run = 0; i < n->n; i++) {
        if (strcmp(sorted[run]->key, sorted[i]->key) != 0) {
            run = i;
            continue;
        }
        if (i == run + 1 && (dup == NULL || sorted[i] < dup)) {
            dup = sorted[i];
            first = sorted[run];
        }
    }
    free(sorted);
    if (dup == NULL)
        return STATUS_OK;
    return status_fail(r->err, STATUS_BAD_CONFIG,
                       "%s:%d: duplicate key '%s' (first given on line %d)", r->file, dup->line,
                       dup->key, first->line);
}

static status_t read_map(tree_reader_t *r, job_node_t *n, int depth)
{
    size_t cap = 0;

    for (;;) {
        yaml_event_t ev;
        job_node_entry_t e = {0};
        status_t rc;

        STATUS_CHECK(next_event(r, &ev));
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return check_unique_keys(r, n);
        }
        e.line = (int)ev.start_mark.line + 1;
        if (ev.type != YAML_SCALAR_EVENT) {
            yaml_event_delete(&ev);
            return tree_fail(r, e.line, "keys must be plain words, not lists or mappings");
        }
        e.key = strdup((const char *)ev.data.scalar.value);
        yaml_event_delete(&ev);
        if (e.key == NULL)
            return status_fail(r->err, STATUS_NO_MEMORY, "%s: out of memory", r->file);
        rc = next_event(r, &ev);
        if (rc == STATUS_OK)
            rc = read_node(r, &ev, depth + 1, &e.value);
        if (rc == STATUS_OK && !grow(&n->entries, &cap, n->n + 1, sizeof(*n->entries)))
            rc = status_fail(r->err, STATUS_NO_MEMORY, "%s: out of memory", r->file);
        if (rc != STATUS_OK) {
            free(e.key);
            job_node_free(e.value);
            return rc;
        }
        n->entries[n->n++] = e;
    }
}

/* Builds the node that starts with *ev, which it consumes. */
static status_t read_node(tree_reader_t *r, yaml_event_t *ev, int depth, job_node_t **ret)
{
    int line = (int)ev->start_mark.line + 1;
    yaml_event_type_t type = ev->type;
    job_node_t *n;
    status_t rc = STATUS_OK;

    if (depth > MAX_DEPTH || type == YAML_ALIAS_EVENT ||
        (type != YAML_SCALAR_EVENT && type != YAML_SEQUENCE_START_EVENT &&
         type != YAML_MAPPING_START_EVENT)) {
        yaml_event_delete(ev);
        return tree_fail(r, line,
                         depth > MAX_DEPTH ? "nested too deeply"
                         : type == YAML_ALIAS_EVENT
                             ? "aliases (*name) are not supported: write the value out"
                             : "unexpected YAML event");
    }
    n = calloc(1, sizeof(*n));
    if (n == NULL) {
        yaml_event_delete(ev);
        return status_fail(r->err, STATUS_NO_MEMORY, "%s: out of memory", r->file);
    }
    n->line = line;
    if (type == YAML_SCALAR_EVENT) {
        const char *text = (const char *)ev->data.scalar.value;
        n->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        n->kind = !n->quoted && plain_null(text) ? JOB_NODE_NULL : JOB_NODE_SCALAR;
        n->text = strdup(text);
        if (n->text == NULL)
            rc = status_fail(r->err, STATUS_NO_MEMORY, "%s: out of memory", r->file);
    }
    yaml_event_delete(ev);
    if (type == YAML_SEQUENCE_START_EVENT) {
        n->kind = JOB_NODE_SEQ;
        rc = read_seq(r, n, depth);
    } else if (type == YAML_MAPPING_START_EVENT) {
        n->kind = JOB_NODE_MAP;
        rc = read_map(r, n, depth);
    }
    if (rc != STATUS_OK) {
        job_node_free(n);
        return rc;
    }
    *ret = n;
    return STATUS_OK;
}

/* Expects `want` next; anything else is reported as `msg`. */
static status_t expect_event(tree_reader_t *r, yaml_event_type_t want, const char *msg)
{
    yaml_event_t ev;
    int line;
    bool ok;

    STATUS_CHECK(next_event(r, &ev));
    ok = ev.type == want;
    line = (int)ev.start_mark.line + 1;
    yaml_event_delete(&ev);
    return ok ? STATUS_OK : tree_fail(r, line, msg);
}

/* Parses one YAML (or JSON) document into *ret_root; an empty document gives a NULL root. */
status_t job_tree_parse(const char *text, size_t len, const char *file, job_node_t **ret_root,
                        status_msg_t *err)
{
    tree_reader_t r = {.file = file, .err = err};
    yaml_event_t ev;
    job_node_t *root = NULL;
    status_t rc;

    if (!yaml_parser_initialize(&r.parser))
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", file);
    yaml_parser_set_input_string(&r.parser, (const unsigned char *)text, len);
    rc = expect_event(&r, YAML_STREAM_START_EVENT, "not a YAML stream");
    if (rc == STATUS_OK)
        rc = next_event(&r, &ev);
    if (rc == STATUS_OK && ev.type == YAML_DOCUMENT_START_EVENT) {
        yaml_event_delete(&ev);
        rc = next_event(&r, &ev);
        if (rc == STATUS_OK)
            rc = read_node(&r, &ev, 0, &root);
        if (rc == STATUS_OK)
            rc = expect_event(&r, YAML_DOCUMENT_END_EVENT, "expected the end of the document");
        if (rc == STATUS_OK)
            rc = expect_event(&r, YAML_STREAM_END_EVENT,
                              "a job file holds one YAML document; remove the second");
    } else if (rc == STATUS_OK) {
        yaml_event_delete(&ev); /* the stream's end: an empty file */
    }
    yaml_parser_delete(&r.parser);
    if (rc != STATUS_OK) {
        job_node_free(root);
        return rc;
    }
    *ret_root = root;
    return STATUS_OK;
}

/* ---- reading the tree: key paths, messages and typed values ---- */

size_t job_tree_push_key(job_ctx_t *c, const char *key)
{
    size_t old = c->path_len;
    int w = snprintf(c->path + old, sizeof(c->path) - old, "%s%s", old > 0 ? "." : "", key);

    c->path_len = w < 0 ? old : strlen(c->path);
    return old;
}

size_t job_tree_push_index(job_ctx_t *c, size_t i)
{
    size_t old = c->path_len;
    int w = snprintf(c->path + old, sizeof(c->path) - old, "[%zu]", i);

    c->path_len = w < 0 ? old : strlen(c->path);
    return old;
}

void job_tree_pop(job_ctx_t *c, size_t old)
{
    c->path_len = old;
    c->path[old] = '\0';
}

/* "file:line: " then the message; the path is the caller's to include. */
status_t job_tree_fail(job_ctx_t *c, status_t s, int line, const char *fmt, ...)
{
    va_list ap;
    int w;

    if (c->err == NULL)
        return s;
    c->err->status = s;
    w = snprintf(c->err->text, sizeof(c->err->text), "%s:%d: ", c->file, line);
    if (w < 0 || (size_t)w >= sizeof(c->err->text))
        return s;
    va_start(ap, fmt);
    vsnprintf(c->err->text + w, sizeof(c->err->text) - (size_t)w, fmt, ap);
    va_end(ap);
    return s;
}

/* The value as a message shows it: 'abc' for plain text, "abc" for quoted text. */
static const char *shown(const job_node_t *n, char *buf, size_t size)
{
    if (n == NULL || n->kind == JOB_NODE_NULL)
        return "nothing";
    if (n->kind == JOB_NODE_SEQ)
        return "a list";
    if (n->kind == JOB_NODE_MAP)
        return "a mapping";
    snprintf(buf, size, n->quoted ? "\"%.60s%s\"" : "'%.60s%s'", n->text,
             strlen(n->text) > 60 ? "..." : "");
    return buf;
}

status_t job_tree_type_error(job_ctx_t *c, const job_node_t *n, const char *expected)
{
    char buf[80];

    return job_tree_fail(c, STATUS_BAD_CONFIG, n->line, "%s must be %s, got %s", c->path, expected,
                         shown(n, buf, sizeof(buf)));
}

const job_node_t *job_tree_child(const job_node_t *map, const char *key)
{
    for (size_t i = 0; map != NULL && map->kind == JOB_NODE_MAP && i < map->n; i++)
        if (strcmp(map->entries[i].key, key) == 0)
            return map->entries[i].value;
    return NULL;
}

bool job_tree_given(const job_node_t *n)
{
    return n != NULL && n->kind != JOB_NODE_NULL;
}

status_t job_tree_missing(job_ctx_t *c, const job_node_t *map, const char *key)
{
    if (c->path_len == 0)
        return job_tree_fail(c, STATUS_BAD_CONFIG, map->line, "missing required key '%s'", key);
    return job_tree_fail(c, STATUS_BAD_CONFIG, map->line, "%s: missing required key '%s'", c->path,
                         key);
}

/* Requires a mapping (or nothing, when `null_ok`) whose keys are all in keys[0..n). */
status_t job_tree_check_map(job_ctx_t *c, const job_node_t *map, const char *const *keys, size_t n,
                            bool null_ok)
{
    char allowed[400] = "";

    if (map == NULL || (map->kind == JOB_NODE_NULL && null_ok))
        return STATUS_OK;
    if (map->kind != JOB_NODE_MAP)
        return job_tree_type_error(c, map, "a mapping");
    for (size_t i = 0; i < map->n; i++) {
        const job_node_entry_t *e = &map->entries[i];
        const char *close;

        if (job_name_index(e->key, keys, n) >= 0)
            continue;
        if (n == 0)
            return job_tree_fail(c, STATUS_BAD_CONFIG, e->line,
                                 "%s: unknown key '%s' (%s takes no options)", c->path, e->key,
                                 c->path);
        close = job_suggest(e->key, keys, n);
        if (close == NULL)
            job_join_names(allowed, sizeof(allowed), keys, n);
        return job_tree_fail(c, STATUS_BAD_CONFIG, e->line, "%s%sunknown key '%s' (%s%s%s)",
                             c->path, c->path_len > 0 ? ": " : "", e->key,
                             close != NULL ? "did you mean '" : "allowed: ",
                             close != NULL ? close : allowed, close != NULL ? "'?" : "");
    }
    return STATUS_OK;
}

status_t job_tree_int(job_ctx_t *c, const job_node_t *n, int64_t lo, int64_t hi, int64_t *ret)
{
    char expected[80];

    if (n->kind == JOB_NODE_SCALAR && !n->quoted && parse_int(n->text, lo, hi, ret) == 0)
        return STATUS_OK;
    if (lo == 1 && (hi == INT_MAX || hi == INT64_MAX))
        snprintf(expected, sizeof(expected), "a positive integer");
    else if (lo == 0 && (hi == INT_MAX || hi == INT64_MAX))
        snprintf(expected, sizeof(expected), "a non-negative integer");
    else
        snprintf(expected, sizeof(expected), "an integer from %lld to %lld", (long long)lo,
                 (long long)hi);
    return job_tree_type_error(c, n, expected);
}

status_t job_tree_double(job_ctx_t *c, const job_node_t *n, double *ret)
{
    char *end;
    double v = 0;
    bool ok = n->kind == JOB_NODE_SCALAR && !n->quoted && n->text[0] != '\0' &&
              strspn(n->text, "0123456789+-.eE") == strlen(n->text);

    if (ok) {
        errno = 0;
        v = strtod(n->text, &end);
        ok = errno == 0 && *end == '\0' && isfinite(v);
    }
    if (!ok)
        return job_tree_type_error(c, n, "a number");
    *ret = v;
    return STATUS_OK;
}

status_t job_tree_bool(job_ctx_t *c, const job_node_t *n, bool *ret)
{
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off"};

    for (size_t i = 0; n->kind == JOB_NODE_SCALAR && !n->quoted && i < JOB_N_OF(yes); i++) {
        if (strcasecmp(n->text, yes[i]) == 0 || strcasecmp(n->text, no[i]) == 0) {
            *ret = strcasecmp(n->text, yes[i]) == 0;
            return STATUS_OK;
        }
    }
    return job_tree_type_error(c, n, "true or false");
}

/* A non-empty string (an unquoted number is taken as its text). */
status_t job_tree_string(job_ctx_t *c, const job_node_t *n, const char **ret)
{
    if (n->kind != JOB_NODE_SCALAR || n->text[0] == '\0')
        return job_tree_type_error(c, n, "a non-empty string");
    *ret = n->text;
    return STATUS_OK;
}

/* A list of 1..max integers in [lo, INT_MAX] (allow_minus_one: one of them may be -1). */
status_t job_tree_ints(job_ctx_t *c, const job_node_t *n, int max, int lo, bool allow_minus_one,
                       int *ret, int *ret_count)
{
    char expected[96];
    int vals[JOB_MAX_RANK], minus_ones = 0;

    snprintf(expected, sizeof(expected), "a list of 1 to %d %s integers%s", max,
             lo > 0 ? "positive" : "non-negative", allow_minus_one ? " (one may be -1)" : "");
    if (n->kind != JOB_NODE_SEQ || n->n == 0 || n->n > (size_t)max)
        return job_tree_type_error(c, n, expected);
    for (size_t i = 0; i < n->n; i++) {
        int64_t v;
        size_t old = job_tree_push_index(c, i);
        status_t rc = job_tree_int(c, n->items[i], allow_minus_one ? -1 : lo, INT_MAX, &v);
        if (rc == STATUS_OK && (v == -1 ? ++minus_ones > 1 : v < lo))
            rc = job_tree_type_error(c, n->items[i], expected);
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
        vals[i] = (int)v;
    }
    memcpy(ret, vals, n->n * sizeof(int));
    *ret_count = (int)n->n;
    return STATUS_OK;
}

/* An integer or a list of two (Keras's kernel_size, strides, pool_size). */
status_t job_tree_pair(job_ctx_t *c, const job_node_t *n, int ret[2])
{
    int64_t v;
    int count;

    if (n->kind == JOB_NODE_SEQ) {
        if (n->n != 2)
            return job_tree_type_error(c, n, "a positive integer or a list of two");
        return job_tree_ints(c, n, 2, 1, false, ret, &count);
    }
    STATUS_CHECK(job_tree_int(c, n, 1, INT_MAX, &v));
    ret[0] = ret[1] = (int)v;
    return STATUS_OK;
}

status_t job_tree_margins(job_ctx_t *c, const job_node_t *n, int ret[4])
{
    const char *expected = "a non-negative integer, a list of two, or two lists of two";
    int64_t v;
    int count;

    if (n->kind != JOB_NODE_SEQ) {
        STATUS_CHECK(job_tree_int(c, n, 0, INT_MAX, &v));
        ret[0] = ret[1] = ret[2] = ret[3] = (int)v;
        return STATUS_OK;
    }
    if (n->n != 2)
        return job_tree_type_error(c, n, expected);
    if (n->items[0]->kind != JOB_NODE_SEQ && n->items[1]->kind != JOB_NODE_SEQ) {
        int hw[2];
        STATUS_CHECK(job_tree_ints(c, n, 2, 0, false, hw, &count));
        ret[0] = ret[1] = hw[0];
        ret[2] = ret[3] = hw[1];
        return STATUS_OK;
    }
    for (size_t i = 0; i < 2; i++) {
        size_t old = job_tree_push_index(c, i);
        status_t rc = n->items[i]->kind == JOB_NODE_SEQ && n->items[i]->n == 2
                          ? job_tree_ints(c, n->items[i], 2, 0, false, ret + 2 * i, &count)
                          : job_tree_type_error(c, n->items[i], "a list of two");
        job_tree_pop(c, old);
        STATUS_CHECK(rc);
    }
    return STATUS_OK;
}

status_t job_tree_length(job_ctx_t *c, const job_node_t *n, int *ret)
{
    int64_t v;
    int count;

    if (n->kind == JOB_NODE_SEQ) {
        if (n->n != 1)
            return job_tree_type_error(c, n, "a positive integer or a list of one");
        return job_tree_ints(c, n, 1, 1, false, ret, &count);
    }
    STATUS_CHECK(job_tree_int(c, n, 1, INT_MAX, &v));
    *ret = (int)v;
    return STATUS_OK;
}

/* A name from names[0..n): an unknown one is listed with the known ones. */
status_t job_tree_name(job_ctx_t *c, const job_node_t *n, const char *what,
                       const char *const *names, size_t n_names, int *ret_index)
{
    char msg[400];
    int i;

    if (n->kind != JOB_NODE_SCALAR) {
        snprintf(msg, sizeof(msg), "a %s name", what);
        return job_tree_type_error(c, n, msg);
    }
    i = job_name_index(n->text, names, n_names);
    if (i >= 0) {
        *ret_index = i;
        return STATUS_OK;
    }
    job_unknown_name(msg, sizeof(msg), what, n->text, names, n_names);
    return job_tree_fail(c, STATUS_BAD_CONFIG, n->line, "%s: %s", c->path, msg);
}

/* A choice written as a bare name (when scalar_ok) or as a mapping with one key, the name, whose
 * value holds its options ({adam: {learning_rate: 0.001}}). The path gains the name. */
status_t job_tree_variant(job_ctx_t *c, const job_node_t *n, const char *what,
                          const char *const *names, size_t n_names, bool scalar_ok, int *ret_index,
                          const job_node_t **ret_opts)
{
    char expected[300];

    if (n->kind == JOB_NODE_SCALAR && scalar_ok) {
        *ret_opts = NULL;
        return job_tree_name(c, n, what, names, n_names, ret_index);
    }
    if (n->kind == JOB_NODE_MAP && n->n == 1) {
        const job_node_entry_t *e = &n->entries[0];
        job_node_t key = {.kind = JOB_NODE_SCALAR, .line = e->line, .text = e->key};
        STATUS_CHECK(job_tree_name(c, &key, what, names, n_names, ret_index));
        *ret_opts = e->value;
        job_tree_push_key(c, e->key);
        return STATUS_OK;
    }
    snprintf(expected, sizeof(expected), "%sa mapping with one key naming the %s (",
             scalar_ok ? "a name or " : "", what);
    job_join_names(expected, sizeof(expected) - 1, names, n_names);
    strcat(expected, ")");
    return job_tree_type_error(c, n, expected);
}

const job_node_t *job_tree_enter(job_ctx_t *c, const job_node_t *map, const char *key,
                                 size_t *ret_old)
{
    const job_node_t *n = job_tree_child(map, key);

    if (!job_tree_given(n))
        return NULL;
    *ret_old = job_tree_push_key(c, key);
    return n;
}

/* Typed getters for map[key]: an absent or null value leaves *ret as it is (the default)
 * unless the key is required. */
#define GETTER(fn, ...)                                                                            \
    do {                                                                                           \
        const job_node_t *n_ = job_tree_child(map, key);                                           \
        size_t old_;                                                                               \
        status_t rc_;                                                                              \
        if (!job_tree_given(n_))                                                                   \
            return required ? job_tree_missing(c, map, key) : STATUS_OK;                           \
        old_ = job_tree_push_key(c, key);                                                          \
        rc_ = fn(c, n_, __VA_ARGS__);                                                              \
        job_tree_pop(c, old_);                                                                     \
        return rc_;                                                                                \
    } while (0)

static status_t get_ranged(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                           int64_t lo, int64_t hi, int64_t *ret)
{
    GETTER(job_tree_int, lo, hi, ret);
}

status_t job_tree_get_i64(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                          int64_t lo, int64_t *ret)
{
    return get_ranged(c, map, key, required, lo, INT64_MAX, ret);
}

status_t job_tree_get_int(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                          int lo, int *ret)
{
    int64_t v = *ret;

    STATUS_CHECK(get_ranged(c, map, key, required, lo, INT_MAX, &v));
    *ret = (int)v;
    return STATUS_OK;
}

status_t job_tree_get_double(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                             double *ret)
{
    GETTER(job_tree_double, ret);
}

status_t job_tree_get_bool(job_ctx_t *c, const job_node_t *map, const char *key, bool *ret)
{
    const bool required = false;

    GETTER(job_tree_bool, ret);
}

status_t job_tree_get_string(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                             const char **ret)
{
    GETTER(job_tree_string, ret);
}

status_t job_tree_get_margins(job_ctx_t *c, const job_node_t *map, const char *key, int ret[4])
{
    const bool required = false;
    GETTER(job_tree_margins, ret);
}

status_t job_tree_get_length(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                             int *ret)
{
    GETTER(job_tree_length, ret);
}

status_t job_tree_get_pair(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                           int ret[2])
{
    GETTER(job_tree_pair, ret);
}

status_t job_tree_get_shape(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                            int *ret, int *ret_rank)
{
    GETTER(job_tree_ints, JOB_MAX_RANK, 1, false, ret, ret_rank);
}

/* A copy of str, or NULL with err set. */
char *job_tree_strdup(job_ctx_t *c, const char *s)
{
    char *d = strdup(s);

    if (d == NULL)
        status_fail(c->err, STATUS_NO_MEMORY, "%s: out of memory", c->file);
    return d;
}

char *job_tree_resolve(job_ctx_t *c, const char *rel)
{
    size_t len;
    char *p;

    if (rel[0] == '/' || c->dir[0] == '\0')
        return job_tree_strdup(c, rel);
    bool slash = c->dir[strlen(c->dir) - 1] == '/';
    len = strlen(c->dir) + 1 + strlen(rel) + 1;
    p = malloc(len);
    if (p != NULL)
        snprintf(p, len, "%s%s%s", c->dir, slash ? "" : "/", rel);
    else
        status_fail(c->err, STATUS_NO_MEMORY, "%s: out of memory", c->file);
    return p;
}

/* map[key] as a path resolved against the job file's directory, in *ret (freed first). */
status_t job_tree_get_path(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                           char **ret)
{
    const char *rel = NULL;
    char *p;

    STATUS_CHECK(job_tree_get_string(c, map, key, required, &rel));
    if (rel == NULL)
        return STATUS_OK;
    if ((p = job_tree_resolve(c, rel)) == NULL)
        return STATUS_NO_MEMORY;
    free(*ret);
    *ret = p;
    return STATUS_OK;
}
