/* The job file's document tree (tree.c): YAML or JSON parsed with libyaml into nodes that keep
 * their line numbers, the key path of what is being read, and strict readers of scalars, lists
 * and names that fail with "file:line: path: ..." messages. Internal to common/job/. */
#ifndef TESSERA_JOB_TREE_H
#define TESSERA_JOB_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job/internal.h"

typedef enum {
    JOB_NODE_NULL, /* "", "~", "null" unquoted, or nothing at all */
    JOB_NODE_SCALAR,
    JOB_NODE_SEQ,
    JOB_NODE_MAP,
} job_node_kind_t;

typedef struct job_node job_node_t;

typedef struct job_node_entry {
    char *key;
    int line;
    job_node_t *value;
} job_node_entry_t;

struct job_node {
    job_node_kind_t kind;
    int line;                  /* 1-based, where the node starts */
    bool quoted;               /* a quoted scalar is a string: never a number, boolean or null */
    char *text;                /* JOB_NODE_SCALAR */
    job_node_t **items;        /* JOB_NODE_SEQ */
    job_node_entry_t *entries; /* JOB_NODE_MAP, in file order, keys unique */
    size_t n;
};

/* Where the reader is: messages name the file, the line and the key path. */
typedef struct job_ctx {
    const char *file; /* names the job in messages */
    char *dir;        /* anchors relative paths; "" for the current directory */
    char path[256];   /* key path of what is being read: "model[1].dense" */
    size_t path_len;
    status_msg_t *err;
    const job_file_t *files; /* files supplied with the job (job_parse_with_files) */
    size_t n_files;
} job_ctx_t;

/* Parses one YAML (or JSON) document into *ret_root (NULL for an empty document), rejecting
 * duplicate keys, aliases, non-scalar keys and a second document. Free with job_node_free. */
status_t job_tree_parse(const char *text, size_t len, const char *file, job_node_t **ret_root,
                        status_msg_t *err);
void job_node_free(job_node_t *n);

/* Key path: push a key or an index, then pop back to the length the push returned. */
size_t job_tree_push_key(job_ctx_t *c, const char *key);
size_t job_tree_push_index(job_ctx_t *c, size_t i);
void job_tree_pop(job_ctx_t *c, size_t old);

/* Fails with s and "file:line: " followed by the message (which includes the path itself). */
status_t job_tree_fail(job_ctx_t *c, status_t s, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* "PATH must be EXPECTED, got 'VALUE'" at n's line. */
status_t job_tree_type_error(job_ctx_t *c, const job_node_t *n, const char *expected);

/* "PATH: missing required key 'KEY'" at the map's line. */
status_t job_tree_missing(job_ctx_t *c, const job_node_t *map, const char *key);

/* map[key] (null values included), or NULL. */
const job_node_t *job_tree_child(const job_node_t *map, const char *key);

/* Whether n holds a value (not absent, not null). */
bool job_tree_given(const job_node_t *n);

/* map[key] with the key pushed on the path (pop with job_tree_pop(c, *ret_old)), or NULL
 * without a push when it is absent or null. */
const job_node_t *job_tree_enter(job_ctx_t *c, const job_node_t *map, const char *key,
                                 size_t *ret_old);

/* Requires a mapping (or null, when null_ok) whose keys are all in keys[0..n): an unknown key
 * is reported with the closest allowed one, or the list of them. */
status_t job_tree_check_map(job_ctx_t *c, const job_node_t *map, const char *const *keys, size_t n,
                            bool null_ok);

/* Scalar readers: strict decimal integers in [lo, hi], finite numbers, true/false, non-empty
 * strings; lists of 1..max integers >= lo (one -1 allowed when allow_minus_one); an integer or
 * a pair; a name from a table (unknown names are listed with the known ones). */
status_t job_tree_int(job_ctx_t *c, const job_node_t *n, int64_t lo, int64_t hi, int64_t *ret);
status_t job_tree_double(job_ctx_t *c, const job_node_t *n, double *ret);
status_t job_tree_bool(job_ctx_t *c, const job_node_t *n, bool *ret);
status_t job_tree_string(job_ctx_t *c, const job_node_t *n, const char **ret);
status_t job_tree_ints(job_ctx_t *c, const job_node_t *n, int max, int lo, bool allow_minus_one,
                       int *ret, int *ret_count);
status_t job_tree_pair(job_ctx_t *c, const job_node_t *n, int ret[2]);
/* Margins: N, [H, W] or [[top, bottom], [left, right]] into {top, bottom, left, right}. */
status_t job_tree_margins(job_ctx_t *c, const job_node_t *n, int ret[4]);
status_t job_tree_get_margins(job_ctx_t *c, const job_node_t *map, const char *key, int ret[4]);
/* A positive integer or a list of one (a 1D window's size). */
status_t job_tree_length(job_ctx_t *c, const job_node_t *n, int *ret);
status_t job_tree_name(job_ctx_t *c, const job_node_t *n, const char *what,
                       const char *const *names, size_t n_names, int *ret_index);

/* A choice written as a bare name (when scalar_ok) or as {NAME: options}; *ret_opts gets the
 * options node (NULL for a bare name) and, for the mapping form, the path gains NAME: the
 * caller pops back to the length it had before the call. */
status_t job_tree_variant(job_ctx_t *c, const job_node_t *n, const char *what,
                          const char *const *names, size_t n_names, bool scalar_ok, int *ret_index,
                          const job_node_t **ret_opts);

/* Getters for map[key]: an absent or null value leaves *ret as it is (the default) unless the
 * key is required. get_path resolves a relative path against c->dir and replaces *ret (freed
 * first). */
status_t job_tree_get_i64(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                          int64_t lo, int64_t *ret);
status_t job_tree_get_int(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                          int lo, int *ret);
status_t job_tree_get_double(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                             double *ret);
status_t job_tree_get_bool(job_ctx_t *c, const job_node_t *map, const char *key, bool *ret);
status_t job_tree_get_string(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                             const char **ret);
status_t job_tree_get_length(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                             int *ret);
status_t job_tree_get_pair(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                           int ret[2]);
status_t job_tree_get_shape(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                            int *ret, int *ret_rank);
status_t job_tree_get_path(job_ctx_t *c, const job_node_t *map, const char *key, bool required,
                           char **ret);

/* rel resolved against the job file's directory (absolute paths as they are), or NULL with
 * c->err set. */
char *job_tree_resolve(job_ctx_t *c, const char *rel);

/* A copy of s, or NULL with c->err set. */
char *job_tree_strdup(job_ctx_t *c, const char *s);

/* Reads the job file's model section n into *m (model.c). */
status_t job_parse_model(job_ctx_t *c, const job_node_t *n, job_model_t *m);
/* `metrics:` (metrics.c). */
status_t job_parse_metrics(job_ctx_t *c, const job_node_t *n, job_t *job);

#endif
