#define _POSIX_C_SOURCE 200809L
#include "daemon/config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "base/log.h"
#include "base/net.h"
#include "base/parse.h"

/* Help text in --help and in the sample is wrapped to this many columns of text. */
#define WRAP_WIDTH 76

/* Room for "path/to/file.yaml:123: key" in error messages; longer paths are cut. */
#define WHERE_LEN 384

/* A flag seen on the command line, applied after the file has been read so that flags win. */
typedef struct pending_flag {
    const config_option_t *opt;
    const char *value; /* points into argv, or a literal for --key / --no-key */
    bool negated;      /* given as --no-key */
} pending_flag_t;

/* The libyaml parser and the one event it currently holds, so every exit path frees both. */
typedef struct yaml_reader {
    const config_table_t *t;
    void *opts;
    const char *path;
    yaml_parser_t parser;
    yaml_event_t ev;
    bool have_ev;
    size_t *first_line; /* per option: line where the file set it, 0 = not yet */
    status_msg_t *err;
} yaml_reader_t;

static void *field(void *opts, const config_option_t *o)
{
    return (char *)opts + o->offset;
}

static const config_option_t *find_option(const config_table_t *t, const char *key, size_t len)
{
    for (size_t i = 0; i < t->n_options; i++) {
        const config_option_t *o = &t->options[i];
        if (strlen(o->key) == len && memcmp(o->key, key, len) == 0)
            return o;
    }
    return NULL;
}

/* A table row that leaves min and max at zero has no bounds: any int64 for integers, any
 * non-negative value for durations. */
static void option_bounds(const config_option_t *o, int64_t *ret_lo, int64_t *ret_hi)
{
    if (o->min == 0 && o->max == 0) {
        *ret_lo = o->type == CONFIG_DURATION_MS ? 0 : INT64_MIN;
        *ret_hi = INT64_MAX;
    } else {
        *ret_lo = o->min;
        *ret_hi = o->max;
    }
}

static int parse_bool_text(const char *s, bool *ret)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *ret = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *ret = false;
            return 0;
        }
    }
    return EINVAL;
}

static status_t check_address(const char *addr, const char *where, status_msg_t *err)
{
    char host[256];
    status_msg_t why;
    int port;

    if (net_split_hostport(addr, host, sizeof(host), &port, &why) != STATUS_OK)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: %s", where, why.text);
    return STATUS_OK;
}

void config_list_done(config_list_t *l)
{
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

/* Appends a checked address to the list; the list owns the copy. */
/* Adds an item to a list: an address (checked) to CONFIG_ADDRESS_LIST, a non-empty path
 * without control characters to CONFIG_PATH_LIST. */
static status_t list_append(config_type_t type, config_list_t *l, const char *addr, size_t len,
                            const char *where, status_msg_t *err)
{
    char **items;
    char *copy = strndup(addr, len);

    if (copy == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", where);
    if (type == CONFIG_PATH_LIST) {
        bool bad = copy[0] == '\0';
        for (const char *p = copy; *p; p++)
            bad |= (unsigned char)*p < 0x20;
        if (bad) {
            free(copy);
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: a path must be non-empty without control characters", where);
        }
    } else if (check_address(copy, where, err) != STATUS_OK) {
        free(copy);
        return STATUS_BAD_CONFIG;
    }
    items = realloc(l->items, (l->n + 1) * sizeof(*items));
    if (items == NULL) {
        free(copy);
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", where);
    }
    items[l->n++] = copy;
    l->items = items;
    return STATUS_OK;
}

/* "a:1,b:2" into a new list; "" is the empty list. Spaces around items are ignored. */
static status_t parse_list_text(const char *text, const char *where, config_list_t *ret_list,
                                status_msg_t *err)
{
    config_list_t l = {0};
    const char *p = text;
    status_t rc = STATUS_OK;

    while (*p == ' ')
        p++;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        size_t trimmed = len;
        while (trimmed > 0 && p[trimmed - 1] == ' ')
            trimmed--;
        if (trimmed == 0) {
            rc = status_fail(err, STATUS_BAD_CONFIG, "%s: empty address in list \"%s\"", where,
                             text);
            goto out;
        }
        STATUS_CHECK_GOTO(list_append(CONFIG_ADDRESS_LIST, &l, p, trimmed, where, err), rc, out);
        p += len;
        if (*p == ',') {
            p++;
            while (*p == ' ')
                p++;
            if (*p == '\0') {
                rc = status_fail(err, STATUS_BAD_CONFIG, "%s: empty address in list \"%s\"", where,
                                 text);
                goto out;
            }
        }
    }
    *ret_list = l;
    l = (config_list_t){0};
out:
    config_list_done(&l);
    return rc;
}

static status_t fail_int(const config_option_t *o, const char *text, int why, const char *where,
                         status_msg_t *err)
{
    int64_t lo, hi;
    bool dur = o->type == CONFIG_DURATION_MS;

    option_bounds(o, &lo, &hi);
    if (why == EINVAL && dur)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: \"%s\" is not a duration (use a whole number with ms, s, m or h, "
                           "e.g. 250ms, 2s, 1m; a bare number is milliseconds)",
                           where, text);
    if (why == EINVAL)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: \"%s\" is not a whole number", where, text);
    return status_fail(err, STATUS_OUT_OF_RANGE,
                       "%s: %s is out of range (allowed: %" PRId64 "%s to %" PRId64 "%s)", where,
                       text, lo, dur ? "ms" : "", hi, dur ? "ms" : "");
}

static status_t set_number(const config_option_t *o, void *opts, const char *text,
                           const char *where, status_msg_t *err)
{
    int64_t v, lo, hi;
    int rc;

    option_bounds(o, &lo, &hi);
    rc = o->type == CONFIG_DURATION_MS ? parse_duration_ms(text, &v) : parse_int(text, lo, hi, &v);
    if (rc == 0 && (v < lo || v > hi))
        rc = ERANGE;
    if (rc != 0)
        return fail_int(o, text, rc, where, err);
    *(int64_t *)field(opts, o) = v;
    return STATUS_OK;
}

static status_t set_string(const config_option_t *o, void *opts, const char *text,
                           const char *where, status_msg_t *err)
{
    char **slot = field(opts, o);
    char *copy;

    if (o->type == CONFIG_ADDRESS)
        STATUS_CHECK(check_address(text, where, err));
    copy = strdup(text);
    if (copy == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", where);
    free(*slot);
    *slot = copy;
    return STATUS_OK;
}

/* Replaces the list option with l (taken over, also on failure it is the caller's to free). */
static void set_list(const config_option_t *o, void *opts, config_list_t *l)
{
    config_list_t *slot = field(opts, o);
    config_list_done(slot);
    *slot = *l;
    *l = (config_list_t){0};
}

/* Sets an option from text; on failure the option keeps its previous value. */
static status_t set_text(const config_option_t *o, void *opts, const char *text, const char *where,
                         status_msg_t *err)
{
    config_list_t l;
    log_level_t level;
    bool b;

    switch (o->type) {
    case CONFIG_STRING:
    case CONFIG_ADDRESS:
        return set_string(o, opts, text, where, err);
    case CONFIG_INT:
    case CONFIG_DURATION_MS:
        return set_number(o, opts, text, where, err);
    case CONFIG_BOOL:
        if (parse_bool_text(text, &b) != 0)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: \"%s\" is not a boolean (use true or false)", where, text);
        *(bool *)field(opts, o) = b;
        return STATUS_OK;
    case CONFIG_ADDRESS_LIST:
        STATUS_CHECK(parse_list_text(text, where, &l, err));
        set_list(o, opts, &l);
        return STATUS_OK;
    case CONFIG_PATH_LIST: /* each occurrence adds one */
        return list_append(o->type, field(opts, o), text, strlen(text), where, err);
    case CONFIG_LOG_LEVEL:
        if (log_level_parse(text, &level) != STATUS_OK)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: \"%s\" is not a log level (use err, warning, notice, info or "
                               "debug)",
                               where, text);
        *(int *)field(opts, o) = (int)level;
        return STATUS_OK;
    }
    return status_fail(err, STATUS_INTERNAL, "%s: option has unknown type %d", where, (int)o->type);
}

/* A YAML null ("key:" with nothing after it) unsets a string, address or list, like a NULL
 * default. Numbers and booleans have no unset state that respects their bounds, so it is an
 * error for them. */
static status_t set_null(const config_option_t *o, void *opts, const char *where, status_msg_t *err)
{
    char **slot;

    switch (o->type) {
    case CONFIG_STRING:
    case CONFIG_ADDRESS:
        slot = field(opts, o);
        free(*slot);
        *slot = NULL;
        return STATUS_OK;
    case CONFIG_ADDRESS_LIST:
    case CONFIG_PATH_LIST:
        config_list_done(field(opts, o));
        return STATUS_OK;
    default:
        return status_fail(err, STATUS_BAD_CONFIG, "%s: needs a value", where);
    }
}

status_t config_set(const config_table_t *t, void *opts, const char *key, const char *value,
                    const char *source, status_msg_t *err)
{
    const config_option_t *o = find_option(t, key, strlen(key));
    char where[256];

    if (o == NULL)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: unknown key \"%s\"", source, key);
    /* "flag --listen" already names the key; "TF_CONFIG" and "file:3" need it added. */
    if (strncmp(source, "flag ", 5) == 0)
        snprintf(where, sizeof(where), "%s", source);
    else
        snprintf(where, sizeof(where), "%s: %s", source, key);
    if (value == NULL)
        return set_null(o, opts, where, err);
    return set_text(o, opts, value, where, err);
}

void config_done(const config_table_t *t, void *opts)
{
    for (size_t i = 0; i < t->n_options; i++) {
        const config_option_t *o = &t->options[i];
        if (o->type == CONFIG_STRING || o->type == CONFIG_ADDRESS) {
            char **slot = field(opts, o);
            free(*slot);
            *slot = NULL;
        } else if (o->type == CONFIG_ADDRESS_LIST || o->type == CONFIG_PATH_LIST) {
            config_list_done(field(opts, o));
        }
    }
}

/* ---- command line ---- */

static status_t fail_positional(const config_table_t *t, const char *arg, status_msg_t *err)
{
    return status_fail(err, STATUS_BAD_CONFIG,
                       "unexpected argument \"%s\": %s takes only flags (see %s --help)", arg,
                       t->program, t->program);
}

/* Takes the value of a flag: after '=' or the next argument, which must not be another flag. */
static status_t flag_value(int argc, char **argv, int *i, const char *eq, const char *flag,
                           const char **ret_value, status_msg_t *err)
{
    if (eq != NULL) {
        *ret_value = eq + 1;
        return STATUS_OK;
    }
    if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0)
        return status_fail(err, STATUS_BAD_CONFIG, "flag --%s needs a value", flag);
    *ret_value = argv[++*i];
    return STATUS_OK;
}

/* Looks up a flag name (without the dashes) as an option, or as --no-<bool option>. */
static status_t lookup_flag(const config_table_t *t, const char *name, size_t len,
                            pending_flag_t *ret, status_msg_t *err)
{
    const config_option_t *o = find_option(t, name, len);

    ret->negated = false;
    if (o == NULL && len > 3 && strncmp(name, "no-", 3) == 0) {
        o = find_option(t, name + 3, len - 3);
        if (o != NULL && o->type != CONFIG_BOOL)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "flag --%.*s: --%s is not a boolean, so it has no --no- form",
                               (int)len, name, o->key);
        ret->negated = o != NULL;
    }
    if (o == NULL)
        return status_fail(err, STATUS_BAD_CONFIG, "unknown flag --%.*s (see %s --help)", (int)len,
                           name, t->program);
    ret->opt = o;
    return STATUS_OK;
}

/* Parses one "--..." argument at argv[*i] into a pending flag, or --config into *config_path. */
static status_t scan_flag(const config_table_t *t, int argc, char **argv, int *i,
                          pending_flag_t *ret, bool *ret_is_flag, const char **config_path,
                          status_msg_t *err)
{
    const char *name = argv[*i] + 2, *eq = strchr(name, '=');
    size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);

    *ret_is_flag = false;
    if (len == 6 && strncmp(name, "config", 6) == 0) {
        if (*config_path != NULL)
            return status_fail(err, STATUS_BAD_CONFIG, "flag --config is given twice");
        STATUS_CHECK(flag_value(argc, argv, i, eq, "config", config_path, err));
        if (**config_path == '\0')
            return status_fail(err, STATUS_BAD_CONFIG, "flag --config needs a file name");
        return STATUS_OK;
    }
    STATUS_CHECK(lookup_flag(t, name, len, ret, err));
    if (ret->negated) {
        if (eq != NULL)
            return status_fail(err, STATUS_BAD_CONFIG, "flag --%.*s takes no value", (int)len,
                               name);
        ret->value = "false";
    } else if (ret->opt->type == CONFIG_BOOL && eq == NULL) {
        ret->value = "true";
    } else {
        STATUS_CHECK(flag_value(argc, argv, i, eq, ret->opt->key, &ret->value, err));
    }
    *ret_is_flag = true;
    return STATUS_OK;
}

/* First pass over argv: finds --help/--version (which win over everything after them), the
 * config file and the flags to apply last. Nothing is applied yet. */
static status_t scan_args(const config_table_t *t, int argc, char **argv, pending_flag_t *flags,
                          size_t *ret_n, const char **ret_config, config_action_t *ret_action,
                          status_msg_t *err)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool is_flag;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            *ret_action = CONFIG_HELP;
            return STATUS_OK;
        }
        if (strcmp(a, "--version") == 0) {
            *ret_action = CONFIG_VERSION;
            return STATUS_OK;
        }
        if (strcmp(a, "--") == 0) {
            if (i + 1 < argc)
                return fail_positional(t, argv[i + 1], err);
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            return fail_positional(t, a, err);
        if (a[1] != '-' || a[2] == '=' || a[2] == '\0')
            return status_fail(err, STATUS_BAD_CONFIG, "unknown flag %s (see %s --help)", a,
                               t->program);
        STATUS_CHECK(scan_flag(t, argc, argv, &i, &flags[*ret_n], &is_flag, ret_config, err));
        if (is_flag)
            (*ret_n)++;
    }
    return STATUS_OK;
}

static status_t apply_flags(const config_table_t *t, void *opts, const pending_flag_t *flags,
                            size_t n, status_msg_t *err)
{
    char source[128];

    for (size_t i = 0; i < n; i++) {
        snprintf(source, sizeof(source), "flag --%s%s", flags[i].negated ? "no-" : "",
                 flags[i].opt->key);
        STATUS_CHECK(config_set(t, opts, flags[i].opt->key, flags[i].value, source, err));
    }
    return STATUS_OK;
}

/* ---- defaults and TF_CONFIG ---- */

static status_t apply_defaults(const config_table_t *t, void *opts, status_msg_t *err)
{
    char source[128];

    for (size_t i = 0; i < t->n_options; i++) {
        const config_option_t *o = &t->options[i];
        if (o->default_value == NULL)
            continue;
        snprintf(source, sizeof(source), "built-in default of %s", t->program);
        /* A default that does not parse is a bug in the program's table, not in the input. */
        if (config_set(t, opts, o->key, o->default_value, source, err) != STATUS_OK) {
            if (err != NULL)
                err->status = STATUS_INTERNAL;
            return STATUS_INTERNAL;
        }
    }
    return STATUS_OK;
}

status_t config_defaults(const config_table_t *t, void *opts, status_msg_t *err)
{
    return apply_defaults(t, opts, err);
}

static status_t apply_tf_config(const config_table_t *t, void *opts, status_msg_t *err)
{
    cluster_spec_t spec;
    bool present = false;
    status_t rc;

    if (t->tf_config_cb == NULL)
        return STATUS_OK;
    STATUS_CHECK(cluster_spec_from_env(&spec, &present, err));
    if (present && spec.other_jobs != NULL)
        LOG_NOTICE(CONFIG, "TF_CONFIG: cluster jobs %s are not ones Tessera runs: ignored",
                   spec.other_jobs);
    rc = present ? t->tf_config_cb(t, opts, &spec, err) : STATUS_OK;
    cluster_spec_done(&spec);
    return rc;
}

/* ---- YAML file ---- */

static size_t event_line(const yaml_event_t *ev)
{
    return ev->start_mark.line + 1;
}

/* Frees the event held and parses the next one into r->ev. */
static status_t next_event(yaml_reader_t *r)
{
    if (r->have_ev)
        yaml_event_delete(&r->ev);
    r->have_ev = false;
    if (!yaml_parser_parse(&r->parser, &r->ev)) {
        if (r->parser.error == YAML_MEMORY_ERROR)
            return status_fail(r->err, STATUS_NO_MEMORY, "%s: out of memory", r->path);
        if (r->parser.error == YAML_READER_ERROR)
            return status_fail(r->err, STATUS_BAD_CONFIG, "%s: byte %zu: cannot read YAML: %s",
                               r->path, r->parser.problem_offset,
                               r->parser.problem ? r->parser.problem : "input error");
        return status_fail(
            r->err, STATUS_BAD_CONFIG, "%s:%zu: invalid YAML: %s%s%s", r->path,
            r->parser.problem_mark.line + 1, r->parser.problem ? r->parser.problem : "parse error",
            r->parser.context ? " " : "", r->parser.context ? r->parser.context : "");
    }
    r->have_ev = true;
    return STATUS_OK;
}

static bool is_null_scalar(const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;

    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

static status_t fail_structure(yaml_reader_t *r, const config_option_t *o, const char *what)
{
    return status_fail(r->err, STATUS_BAD_CONFIG, "%s:%zu: %s: %s", r->path, event_line(&r->ev),
                       o->key, what);
}

/* Reads a YAML sequence of addresses (the start event is held) and replaces the option's list. */
static status_t read_sequence(yaml_reader_t *r, const config_option_t *o)
{
    config_list_t l = {0};
    char where[WHERE_LEN];
    status_t rc;

    for (;;) {
        STATUS_CHECK_GOTO(next_event(r), rc, out);
        if (r->ev.type == YAML_SEQUENCE_END_EVENT)
            break;
        if (r->ev.type != YAML_SCALAR_EVENT) {
            rc = fail_structure(r, o,
                                o->type == CONFIG_PATH_LIST
                                    ? "list items must be plain path strings"
                                    : "list items must be plain \"host:port\" strings");
            goto out;
        }
        snprintf(where, sizeof(where), "%s:%zu: %s", r->path, event_line(&r->ev), o->key);
        STATUS_CHECK_GOTO(list_append(o->type, &l, (const char *)r->ev.data.scalar.value,
                                      r->ev.data.scalar.length, where, r->err),
                          rc, out);
    }
    set_list(o, r->opts, &l);
    rc = STATUS_OK;
out:
    config_list_done(&l);
    return rc;
}

/* Reads the value event of option o and sets it. */
static status_t read_value(yaml_reader_t *r, const config_option_t *o)
{
    char where[WHERE_LEN];

    STATUS_CHECK(next_event(r));
    snprintf(where, sizeof(where), "%s:%zu: %s", r->path, event_line(&r->ev), o->key);
    switch (r->ev.type) {
    case YAML_SCALAR_EVENT:
        if (is_null_scalar(&r->ev))
            return set_null(o, r->opts, where, r->err);
        if (strlen((const char *)r->ev.data.scalar.value) != r->ev.data.scalar.length)
            return fail_structure(r, o, "the value contains a NUL character");
        return set_text(o, r->opts, (const char *)r->ev.data.scalar.value, where, r->err);
    case YAML_SEQUENCE_START_EVENT:
        if (o->type != CONFIG_ADDRESS_LIST && o->type != CONFIG_PATH_LIST)
            return fail_structure(r, o, "takes a single value, not a list");
        return read_sequence(r, o);
    case YAML_MAPPING_START_EVENT:
        return fail_structure(r, o,
                              "nested maps are not supported; the file is a flat list of "
                              "key: value lines");
    case YAML_ALIAS_EVENT:
        return fail_structure(r, o, "YAML aliases are not supported");
    default:
        return fail_structure(r, o, "unexpected YAML structure");
    }
}

/* Reads key: value pairs until the end of the top-level mapping (its start event is held). */
static status_t read_mapping(yaml_reader_t *r)
{
    for (;;) {
        const config_option_t *o;
        size_t line, idx;
        const char *key;

        STATUS_CHECK(next_event(r));
        if (r->ev.type == YAML_MAPPING_END_EVENT)
            return STATUS_OK;
        line = event_line(&r->ev);
        if (r->ev.type != YAML_SCALAR_EVENT)
            return status_fail(r->err, STATUS_BAD_CONFIG,
                               "%s:%zu: keys must be option names, not lists or maps", r->path,
                               line);
        key = (const char *)r->ev.data.scalar.value;
        o = find_option(r->t, key, r->ev.data.scalar.length);
        if (o == NULL)
            return status_fail(r->err, STATUS_BAD_CONFIG,
                               "%s:%zu: unknown key \"%s\" (see %s --help)", r->path, line, key,
                               r->t->program);
        idx = (size_t)(o - r->t->options);
        if (r->first_line[idx] != 0)
            return status_fail(r->err, STATUS_BAD_CONFIG,
                               "%s:%zu: key \"%s\" appears twice (first at line %zu)", r->path,
                               line, o->key, r->first_line[idx]);
        r->first_line[idx] = line;
        STATUS_CHECK(read_value(r, o));
    }
}

/* Reads the single document of the stream: a mapping, or nothing at all. */
static status_t read_document(yaml_reader_t *r)
{
    STATUS_CHECK(next_event(r)); /* stream start */
    STATUS_CHECK(next_event(r));
    if (r->ev.type == YAML_STREAM_END_EVENT)
        return STATUS_OK; /* empty file, or only comments */
    if (r->ev.type != YAML_DOCUMENT_START_EVENT)
        return status_fail(r->err, STATUS_INTERNAL, "%s: unexpected YAML event", r->path);
    STATUS_CHECK(next_event(r));
    if (r->ev.type == YAML_MAPPING_START_EVENT)
        STATUS_CHECK(read_mapping(r));
    else if (r->ev.type != YAML_SCALAR_EVENT || !is_null_scalar(&r->ev))
        return status_fail(r->err, STATUS_BAD_CONFIG,
                           "%s:%zu: expected key: value lines at the top level", r->path,
                           event_line(&r->ev));
    STATUS_CHECK(next_event(r)); /* document end */
    STATUS_CHECK(next_event(r));
    if (r->ev.type != YAML_STREAM_END_EVENT)
        return status_fail(r->err, STATUS_BAD_CONFIG,
                           "%s:%zu: only one YAML document is allowed in a config file", r->path,
                           event_line(&r->ev));
    return STATUS_OK;
}

static status_t load_file(const config_table_t *t, void *opts, const char *path, status_msg_t *err)
{
    yaml_reader_t r = {.t = t, .opts = opts, .path = path, .err = err};
    struct stat sb;
    status_t rc;
    FILE *f;

    f = fopen(path, "re");
    if (f == NULL) {
        int e = errno;
        return status_fail(err, status_from_errno(e), "cannot read config file %s: %s", path,
                           strerror(e));
    }
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        rc = status_fail(err, STATUS_BAD_CONFIG, "config file %s is a directory", path);
        goto fail_parser;
    }
    r.first_line = calloc(t->n_options + 1, sizeof(*r.first_line));
    if (r.first_line == NULL) {
        rc = status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", path);
        goto fail_parser;
    }
    if (!yaml_parser_initialize(&r.parser)) {
        rc = status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", path);
        goto fail_lines;
    }
    yaml_parser_set_input_file(&r.parser, f);
    rc = read_document(&r);
    if (r.have_ev)
        yaml_event_delete(&r.ev);
    yaml_parser_delete(&r.parser);
fail_lines:
    free(r.first_line);
fail_parser:
    fclose(f);
    return rc;
}

/* ---- loading ---- */

status_t config_load(const config_table_t *t, void *opts, int argc, char **argv,
                     config_action_t *ret_action, status_msg_t *err)
{
    config_action_t action = CONFIG_RUN;
    const char *config_path = NULL;
    pending_flag_t *flags;
    size_t n_flags = 0;
    status_t rc;

    flags = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*flags));
    if (flags == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory parsing the command line");
    STATUS_CHECK_GOTO(scan_args(t, argc, argv, flags, &n_flags, &config_path, &action, err), rc,
                      out);
    if (action == CONFIG_HELP)
        config_print_usage(t, stdout);
    if (action == CONFIG_RUN) {
        STATUS_CHECK_GOTO(apply_defaults(t, opts, err), rc, out);
        STATUS_CHECK_GOTO(apply_tf_config(t, opts, err), rc, out);
        if (config_path != NULL)
            STATUS_CHECK_GOTO(load_file(t, opts, config_path, err), rc, out);
        STATUS_CHECK_GOTO(apply_flags(t, opts, flags, n_flags, err), rc, out);
    }
    *ret_action = action;
    rc = STATUS_OK;
out:
    free(flags);
    return rc;
}

/* ---- help and sample ---- */

/* Writes text as lines of at most `width` columns after `prefix`; a longer word stays whole. */
static void write_wrapped(FILE *out, const char *prefix, const char *text, size_t width)
{
    const char *p = text;
    size_t col = 0;

    for (;;) {
        size_t len;

        p += strspn(p, " \t\n");
        if (*p == '\0')
            break;
        len = strcspn(p, " \t\n");
        if (col > 0 && col + 1 + len > width) {
            fputc('\n', out);
            col = 0;
        }
        if (col == 0) {
            fputs(prefix, out);
        } else {
            fputc(' ', out);
            col++;
        }
        fwrite(p, 1, len, out);
        col += len;
        p += len;
    }
    if (col > 0)
        fputc('\n', out);
}

static const char *value_placeholder(config_type_t type)
{
    switch (type) {
    case CONFIG_STRING:
        return "VALUE";
    case CONFIG_INT:
        return "N";
    case CONFIG_BOOL:
        return "";
    case CONFIG_DURATION_MS:
        return "DURATION";
    case CONFIG_ADDRESS:
        return "HOST:PORT";
    case CONFIG_ADDRESS_LIST:
        return "HOST:PORT,...";
    case CONFIG_PATH_LIST:
        return "PATH";
    case CONFIG_LOG_LEVEL:
        return "LEVEL";
    }
    return "VALUE";
}

void config_print_usage(const config_table_t *t, FILE *out)
{
    fprintf(out, "Usage: %s [--config FILE] [OPTIONS]\n", t->program);
    if (t->summary != NULL)
        fprintf(out, "%s\n", t->summary);
    fputs("\nOptions:\n  --config FILE\n", out);
    write_wrapped(out, "      ",
                  "Read options from a YAML file of key: value lines. Flags override the file, "
                  "the file overrides TF_CONFIG.",
                  WRAP_WIDTH);
    for (size_t i = 0; i < t->n_options; i++) {
        const config_option_t *o = &t->options[i];
        if (o->type == CONFIG_BOOL)
            fprintf(out, "  --%s, --no-%s\n", o->key, o->key);
        else
            fprintf(out, "  --%s %s\n", o->key, value_placeholder(o->type));
        if (o->help != NULL)
            write_wrapped(out, "      ", o->help, WRAP_WIDTH);
        if (o->default_value != NULL)
            fprintf(out, "      Default: %s\n",
                    o->default_value[0] != '\0' ? o->default_value : "(empty)");
    }
    fputs("  -h, --help\n      Print this help and exit.\n"
          "  --version\n      Print the version and exit.\n",
          out);
}

/* Writes s as a YAML double-quoted scalar, so addresses like [::1]:2222 stay strings. */
static void write_quoted(FILE *out, const char *s, size_t len)
{
    fputc('"', out);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* The default as YAML: quoted strings, a flow sequence for lists, other types verbatim. */
static void write_sample_value(FILE *out, const config_option_t *o)
{
    const char *d = o->default_value;

    if (d == NULL) {
        fputc('\n', out);
        return;
    }
    fputc(' ', out);
    if (o->type == CONFIG_STRING || o->type == CONFIG_ADDRESS) {
        write_quoted(out, d, strlen(d));
    } else if (o->type == CONFIG_ADDRESS_LIST) {
        fputc('[', out);
        for (const char *p = d + strspn(d, " "); *p != '\0';) {
            size_t len = strcspn(p, ","), trimmed = len;
            while (trimmed > 0 && p[trimmed - 1] == ' ')
                trimmed--;
            write_quoted(out, p, trimmed);
            p += len;
            if (*p == ',') {
                fputs(", ", out);
                p += 1 + strspn(p + 1, " ");
            }
        }
        fputc(']', out);
    } else {
        fputs(d, out);
    }
    fputc('\n', out);
}

void config_write_sample(const config_table_t *t, FILE *out)
{
    fprintf(out, "# Sample configuration for %s.\n", t->program);
    if (t->summary != NULL)
        write_wrapped(out, "# ", t->summary, WRAP_WIDTH);
    fprintf(out,
            "#\n"
            "# Every option is listed below with its help and its default, commented out.\n"
            "# Uncomment a line to change the value and load the file with:\n"
            "#   %s --config FILE\n"
            "# Command-line flags override this file; this file overrides TF_CONFIG.\n",
            t->program);
    for (size_t i = 0; i < t->n_options; i++) {
        const config_option_t *o = &t->options[i];
        fputc('\n', out);
        if (o->help != NULL)
            write_wrapped(out, "# ", o->help, WRAP_WIDTH);
        fprintf(out, "# %s:", o->key);
        write_sample_value(out, o);
    }
}
