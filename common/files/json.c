#define _POSIX_C_SOURCE 200809L
#include "files/json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reading ---------------------------------------------------------------------------------
 */

typedef struct parser {
    const char *s;
    size_t len, pos;
    const char *what;
    json_doc_t *doc;
    status_msg_t *err;
} parser_t;

static status_t fail(parser_t *p, const char *msg)
{
    return status_fail(p->err, STATUS_DATA_LOSS, "%s: byte %zu: %s", p->what, p->pos, msg);
}

static status_t no_memory(parser_t *p)
{
    return status_fail(p->err, STATUS_NO_MEMORY, "%s: out of memory parsing JSON", p->what);
}

static void skip_space(parser_t *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            return;
        p->pos++;
    }
}

/* A new node (index in *ret); the node array may move. */
static status_t new_node(parser_t *p, json_kind_t kind, int32_t *ret)
{
    json_doc_t *d = p->doc;

    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 16;
        json_node_t *nodes;
        if (cap > INT32_MAX || (nodes = realloc(d->nodes, cap * sizeof(*nodes))) == NULL)
            return no_memory(p);
        d->nodes = nodes;
        d->cap = cap;
    }
    d->nodes[d->n] = (json_node_t){.kind = kind, .first = -1, .next = -1};
    *ret = (int32_t)d->n++;
    return STATUS_OK;
}

static status_t pool_put(parser_t *p, const void *data, size_t len)
{
    json_doc_t *d = p->doc;

    if (d->pool_cap - d->pool_len < len + 1) {
        size_t cap = d->pool_cap ? d->pool_cap : 256;
        char *pool;
        while (cap - d->pool_len < len + 1)
            cap *= 2;
        if ((pool = realloc(d->pool, cap)) == NULL)
            return no_memory(p);
        d->pool = pool;
        d->pool_cap = cap;
    }
    memcpy(d->pool + d->pool_len, data, len);
    d->pool_len += len;
    d->pool[d->pool_len] = '\0';
    return STATUS_OK;
}

/* Length of the UTF-8 sequence at s[0..avail), or 0 when it is not valid UTF-8 (overlong forms,
 * surrogates and code points past U+10FFFF included). */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
    size_t n;
    uint32_t cp, min;

    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xe0) == 0xc0)
        n = 2, cp = s[0] & 0x1f, min = 0x80;
    else if ((s[0] & 0xf0) == 0xe0)
        n = 3, cp = s[0] & 0x0f, min = 0x800;
    else if ((s[0] & 0xf8) == 0xf0)
        n = 4, cp = s[0] & 0x07, min = 0x10000;
    else
        return 0;
    if (n > avail)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static size_t utf8_put(char out[4], uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static bool hex4(parser_t *p, uint32_t *ret)
{
    uint32_t v = 0;

    if (p->len - p->pos < 4)
        return false;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint32_t)d;
    }
    *ret = v;
    return true;
}

/* \uXXXX, with a surrogate pair when the first is a high surrogate; p->pos is after the 'u'. */
static status_t unicode_escape(parser_t *p, uint32_t *ret)
{
    uint32_t hi, lo;

    if (!hex4(p, &hi))
        return fail(p, "\\u needs four hex digits");
    if (hi >= 0xdc00 && hi <= 0xdfff)
        return fail(p, "lone low surrogate in \\u escape");
    if (hi < 0xd800 || hi > 0xdbff) {
        *ret = hi;
        return STATUS_OK;
    }
    if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
        return fail(p, "high surrogate not followed by a low one");
    p->pos += 2;
    if (!hex4(p, &lo) || lo < 0xdc00 || lo > 0xdfff)
        return fail(p, "high surrogate not followed by a low one");
    *ret = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
    return STATUS_OK;
}

static status_t escape(parser_t *p, char out[4], size_t *ret_n)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *hit;
    uint32_t cp = 0;

    if (p->pos >= p->len)
        return fail(p, "unterminated string");
    char c = p->s[p->pos++];
    if (c == 'u') {
        STATUS_CHECK(unicode_escape(p, &cp));
        *ret_n = utf8_put(out, cp);
        return STATUS_OK;
    }
    if (c == '\0' || (hit = strchr(from, c)) == NULL) {
        p->pos--;
        return fail(p, "invalid escape in string");
    }
    out[0] = to[hit - from];
    *ret_n = 1;
    return STATUS_OK;
}

/* A string at p->pos (the opening quote), decoded into the pool at *ret_off, *ret_len. */
static status_t string(parser_t *p, size_t *ret_off, size_t *ret_len)
{
    size_t off = p->doc->pool_len;

    p->pos++;
    for (;;) {
        size_t run = p->pos;
        while (p->pos < p->len && p->s[p->pos] != '"' && p->s[p->pos] != '\\') {
            unsigned char c = (unsigned char)p->s[p->pos];
            size_t n =
                c < 0x20 ? 0 : utf8_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
            if (n == 0)
                return fail(p, c < 0x20 ? "control character in string" : "invalid UTF-8");
            p->pos += n;
        }
        STATUS_CHECK(pool_put(p, p->s + run, p->pos - run));
        if (p->pos >= p->len)
            return fail(p, "unterminated string");
        if (p->s[p->pos++] == '"')
            break;
        char out[4];
        size_t n = 0;
        STATUS_CHECK(escape(p, out, &n));
        STATUS_CHECK(pool_put(p, out, n));
    }
    *ret_off = off;
    *ret_len = p->doc->pool_len - off;
    p->doc->pool_len++; /* keep the NUL pool_put wrote */
    return STATUS_OK;
}

static size_t digits(parser_t *p)
{
    size_t start = p->pos;

    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
        p->pos++;
    return p->pos - start;
}

static status_t number(parser_t *p, json_node_t *n)
{
    size_t start = p->pos;

    if (p->s[p->pos] == '-')
        p->pos++;
    if (p->pos < p->len && p->s[p->pos] == '0')
        p->pos++;
    else if (digits(p) == 0)
        return fail(p, "invalid number");
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        if (digits(p) == 0)
            return fail(p, "invalid number: digits must follow '.'");
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (digits(p) == 0)
            return fail(p, "invalid number: digits must follow the exponent");
    }
    n->text = p->doc->pool_len;
    n->text_len = p->pos - start;
    STATUS_CHECK(pool_put(p, p->s + start, n->text_len));
    p->doc->pool_len++; /* keep the NUL pool_put wrote */
    return STATUS_OK;
}

static status_t value(parser_t *p, int depth, int32_t *ret);

typedef struct key_ref {
    const char *s;
    size_t len;
} key_ref_t;

static int key_cmp(const void *a, const void *b)
{
    const key_ref_t *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);

    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

static status_t check_unique_keys(parser_t *p, int32_t obj)
{
    json_doc_t *d = p->doc;
    uint32_t n = d->nodes[obj].n, i = 0;
    key_ref_t *keys;
    status_t rc = STATUS_OK;

    if (n < 2)
        return STATUS_OK;
    if ((keys = malloc(n * sizeof(*keys))) == NULL)
        return no_memory(p);
    for (int32_t m = d->nodes[obj].first; m >= 0; m = d->nodes[m].next)
        keys[i++] = (key_ref_t){d->pool + d->nodes[m].key, d->nodes[m].key_len};
    qsort(keys, n, sizeof(*keys), key_cmp);
    for (i = 1; i < n && rc == STATUS_OK; i++)
        if (key_cmp(&keys[i - 1], &keys[i]) == 0)
            rc = status_fail(p->err, STATUS_DATA_LOSS, "%s: duplicate key \"%.100s\"", p->what,
                             keys[i].s);
    free(keys);
    return rc;
}

/* Members of an array or object at p->pos (the opening bracket). */
static status_t container(parser_t *p, int depth, int32_t self, char close)
{
    int32_t last = -1;

    p->pos++;
    skip_space(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return STATUS_OK;
    }
    for (;;) {
        size_t key = 0, key_len = 0;
        int32_t m;
        skip_space(p);
        if (close == '}') {
            if (p->pos >= p->len || p->s[p->pos] != '"')
                return fail(p, "expected a string key");
            STATUS_CHECK(string(p, &key, &key_len));
            skip_space(p);
            if (p->pos >= p->len || p->s[p->pos] != ':')
                return fail(p, "expected ':' after the key");
            p->pos++;
        }
        STATUS_CHECK(value(p, depth + 1, &m));
        p->doc->nodes[m].key = key;
        p->doc->nodes[m].key_len = key_len;
        if (last < 0)
            p->doc->nodes[self].first = m;
        else
            p->doc->nodes[last].next = m;
        last = m;
        p->doc->nodes[self].n++;
        skip_space(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            return close == '}' ? check_unique_keys(p, self) : STATUS_OK;
        }
        return fail(p, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static status_t literal(parser_t *p, const char *word, json_kind_t kind, int32_t *ret)
{
    size_t n = strlen(word);

    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, "unexpected character");
    p->pos += n;
    return new_node(p, kind, ret);
}

static status_t value(parser_t *p, int depth, int32_t *ret)
{
    int32_t self;

    skip_space(p);
    if (depth > JSON_MAX_DEPTH)
        return fail(p, "nested too deeply");
    if (p->pos >= p->len)
        return fail(p, "unexpected end of the document");
    switch (p->s[p->pos]) {
    case '{':
    case '[':
        STATUS_CHECK(new_node(p, p->s[p->pos] == '{' ? JSON_OBJECT : JSON_ARRAY, &self));
        *ret = self;
        return container(p, depth, self, p->s[p->pos] == '{' ? '}' : ']');
    case '"':
        STATUS_CHECK(new_node(p, JSON_STRING, &self));
        *ret = self;
        return string(p, &p->doc->nodes[self].text, &p->doc->nodes[self].text_len);
    case 't':
        return literal(p, "true", JSON_TRUE, ret);
    case 'f':
        return literal(p, "false", JSON_FALSE, ret);
    case 'n':
        return literal(p, "null", JSON_NULL, ret);
    default:
        if (p->s[p->pos] != '-' && (p->s[p->pos] < '0' || p->s[p->pos] > '9'))
            return fail(p, "unexpected character");
        STATUS_CHECK(new_node(p, JSON_NUMBER, &self));
        *ret = self;
        return number(p, &p->doc->nodes[self]);
    }
}

status_t json_parse(const char *text, size_t len, const char *what, json_doc_t *doc,
                    status_msg_t *err)
{
    parser_t p = {.s = text, .len = len, .what = what ? what : "JSON", .doc = doc, .err = err};
    int32_t root;

    memset(doc, 0, sizeof(*doc));
    STATUS_CHECK(pool_put(&p, "", 0)); /* offset 0: the empty key of non-members */
    doc->pool_len++;
    STATUS_CHECK(value(&p, 0, &root));
    skip_space(&p);
    if (p.pos != p.len)
        return fail(&p, "unexpected text after the document");
    return STATUS_OK;
}

void json_free(json_doc_t *doc)
{
    free(doc->nodes);
    free(doc->pool);
    memset(doc, 0, sizeof(*doc));
}

const json_node_t *json_root(const json_doc_t *doc)
{
    return doc->n > 0 ? &doc->nodes[0] : NULL;
}

const json_node_t *json_first(const json_doc_t *doc, const json_node_t *node)
{
    return node != NULL && node->first >= 0 ? &doc->nodes[node->first] : NULL;
}

const json_node_t *json_next(const json_doc_t *doc, const json_node_t *node)
{
    return node != NULL && node->next >= 0 ? &doc->nodes[node->next] : NULL;
}

const json_node_t *json_get(const json_doc_t *doc, const json_node_t *obj, const char *key)
{
    size_t len = strlen(key);

    if (obj == NULL || obj->kind != JSON_OBJECT)
        return NULL;
    for (const json_node_t *m = json_first(doc, obj); m != NULL; m = json_next(doc, m))
        if (m->key_len == len && memcmp(doc->pool + m->key, key, len) == 0)
            return m;
    return NULL;
}

const char *json_key(const json_doc_t *doc, const json_node_t *member)
{
    return doc->pool + member->key;
}

const char *json_string(const json_doc_t *doc, const json_node_t *node, size_t *ret_len)
{
    if (node == NULL || node->kind != JSON_STRING)
        return NULL;
    if (ret_len != NULL)
        *ret_len = node->text_len;
    return doc->pool + node->text;
}

/* An integer as written: digits only after an optional '-'. */
static bool integer_text(const json_doc_t *doc, const json_node_t *node, const char **ret)
{
    if (node == NULL || node->kind != JSON_NUMBER)
        return false;
    *ret = doc->pool + node->text;
    return strcspn(*ret, ".eE") == node->text_len;
}

bool json_u64(const json_doc_t *doc, const json_node_t *node, uint64_t *ret)
{
    const char *t;

    if (!integer_text(doc, node, &t) || t[0] == '-')
        return false;
    errno = 0;
    *ret = strtoull(t, NULL, 10);
    return errno == 0;
}

bool json_i64(const json_doc_t *doc, const json_node_t *node, int64_t *ret)
{
    const char *t;

    if (!integer_text(doc, node, &t))
        return false;
    errno = 0;
    *ret = strtoll(t, NULL, 10);
    return errno == 0;
}

bool json_double(const json_doc_t *doc, const json_node_t *node, double *ret)
{
    if (node == NULL || node->kind != JSON_NUMBER)
        return false;
    *ret = strtod(doc->pool + node->text, NULL);
    return isfinite(*ret); /* 1e999 is valid JSON, but no double */
}

/* ---- writing ---------------------------------------------------------------------------------
 */

void json_put_string(pb_buf_t *b, const char *s)
{
    pb_put_raw(b, "\"", 1);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            pb_put_raw(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            pb_put_raw(b, esc, 6);
        } else {
            pb_put_raw(b, s, 1);
        }
    }
    pb_put_raw(b, "\"", 1);
}

void json_printf(pb_buf_t *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof(small)) {
        pb_put_raw(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (big == NULL) {
        b->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    pb_put_raw(b, big, (size_t)n);
    free(big);
}
