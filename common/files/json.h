/* JSON (RFC 8259) for the files Tessera writes and reads back: safetensors headers and checkpoint
 * manifests. A strict reader into a tree of nodes, and the escaping a writer needs.
 *
 * The reader takes exactly one value with optional surrounding whitespace. It rejects what
 * RFC 8259 does not allow (trailing commas, comments, leading zeros, control characters in
 * strings, lone surrogates, invalid UTF-8), duplicate keys within an object, and nesting deeper
 * than JSON_MAX_DEPTH; errors name the document and the byte offset. Numbers keep their text, so
 * integers read back exactly up to 2^64 - 1. */
#ifndef TESSERA_FILES_JSON_H
#define TESSERA_FILES_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "files/pb.h"

#define JSON_MAX_DEPTH 64

typedef enum {
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
} json_kind_t;

typedef struct json_node {
    json_kind_t kind;
    uint32_t n;            /* members of an array or object */
    int32_t first;         /* index of the first member, -1 when none */
    int32_t next;          /* index of the next member of the parent, -1 at the end */
    size_t key, key_len;   /* object members: the key, in the document's pool */
    size_t text, text_len; /* strings (decoded) and numbers (as written), in the pool */
} json_node_t;

typedef struct json_doc {
    json_node_t *nodes; /* nodes[0] is the root */
    size_t n, cap;
    char *pool; /* NUL-terminated keys and strings */
    size_t pool_len, pool_cap;
} json_doc_t;

/* Parses text[0..len) into doc (zeroed by the call; free with json_free even on failure). `what`
 * names the document in errors: "WHAT: byte N: ...", STATUS_DATA_LOSS. */
status_t json_parse(const char *text, size_t len, const char *what, json_doc_t *doc,
                    status_msg_t *err);
void json_free(json_doc_t *doc);

const json_node_t *json_root(const json_doc_t *doc);

/* The member of an object named key, or NULL (also when obj is not an object). */
const json_node_t *json_get(const json_doc_t *doc, const json_node_t *obj, const char *key);

/* Members in order: json_first, then json_next until NULL. */
const json_node_t *json_first(const json_doc_t *doc, const json_node_t *node);
const json_node_t *json_next(const json_doc_t *doc, const json_node_t *node);

/* An object member's key. */
const char *json_key(const json_doc_t *doc, const json_node_t *member);

/* A string's value (NUL-terminated; it may hold NULs, see len), or NULL when node is not a
 * string. */
const char *json_string(const json_doc_t *doc, const json_node_t *node, size_t *ret_len);

/* Whether node is a number that is an integer in range, written without fraction or exponent;
 * json_double, whether it is a number that fits a double (1e999 does not). */
bool json_u64(const json_doc_t *doc, const json_node_t *node, uint64_t *ret);
bool json_i64(const json_doc_t *doc, const json_node_t *node, int64_t *ret);
bool json_double(const json_doc_t *doc, const json_node_t *node, double *ret);

/* Appends s as a JSON string, quotes included. */
void json_put_string(pb_buf_t *b, const char *s);

/* Appends printf-formatted text. */
void json_printf(pb_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
