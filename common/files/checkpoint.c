#define _POSIX_C_SOURCE 200809L
#include "files/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "files/atomic.h"
#include "files/json.h"

#define MAX_MANIFEST (64u << 20)

/* ---- the manifest, written ---------------------------------------------------------------- */

static void put_strings(pb_buf_t *b, char *const *s, size_t n)
{
    pb_put_raw(b, "[", 1);
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            pb_put_raw(b, ",", 1);
        json_put_string(b, s[i]);
    }
    pb_put_raw(b, "]", 1);
}

static void put_var(pb_buf_t *b, const ckpt_var_t *v)
{
    json_put_string(b, v->name);
    json_printf(b, ":{\"shape\":[");
    for (int d = 0; d < v->rank; d++)
        json_printf(b, "%s%" PRIu64, d ? "," : "", v->shape[d]);
    json_printf(b, "],\"parts\":[");
    for (size_t k = 0; k < v->n_parts; k++) {
        json_printf(b, "%s{\"file\":", k ? "," : "");
        json_put_string(b, v->parts[k].file);
        json_printf(b, ",\"tensor\":");
        json_put_string(b, v->parts[k].tensor);
        json_printf(b, ",\"row\":%" PRIu64 "}", v->parts[k].row);
    }
    json_printf(b, "]}");
}

/* Random states as strings: JSON readers other than ours round integers past 2^53. */
static void put_u64_strings(pb_buf_t *b, const uint64_t *v, size_t n)
{
    pb_put_raw(b, "[", 1);
    for (size_t i = 0; i < n; i++)
        json_printf(b, "%s\"%" PRIu64 "\"", i ? ", " : "", v[i]);
    pb_put_raw(b, "]", 1);
}

/* A list of numbers; one that is not finite (a metric's NaN) as 0. */
static void put_doubles(pb_buf_t *b, const double *v, size_t n)
{
    pb_put_raw(b, "[", 1);
    for (size_t i = 0; i < n; i++)
        json_printf(b, "%s%.17g", i ? ", " : "", isfinite(v[i]) ? v[i] : 0.0);
    pb_put_raw(b, "]", 1);
}

void ckpt_manifest_encode(const ckpt_manifest_t *m, pb_buf_t *b)
{
    json_printf(b, "{\n  \"format\": \"%s\",\n  \"step\": %" PRId64 ",\n  \"job\": ", CKPT_FORMAT,
                m->step);
    json_put_string(b, m->job ? m->job : "");
    json_printf(b, ",\n  \"job_hash\": \"%016" PRIx64 "\",\n  \"wall_time\": %.6f,\n", m->job_hash,
                m->wall_time);
    json_printf(b, "  \"optimizer\": {\"name\": ");
    json_put_string(b, m->optimizer ? m->optimizer : "");
    json_printf(b, ", \"iterations\": %" PRId64 ", \"learning_rate\": %.17g, \"slots\": ",
                m->iterations, m->learning_rate);
    put_strings(b, m->slots, m->n_slots);
    json_printf(b, "},\n  \"files\": ");
    put_strings(b, m->files, m->n_files);
    json_printf(b, ",\n  \"variables\": {");
    for (size_t i = 0; i < m->n_vars; i++) {
        json_printf(b, "%s\n    ", i ? "," : "");
        put_var(b, &m->vars[i]);
    }
    json_printf(b, "\n  },\n  \"data\": [");
    for (size_t i = 0; i < m->n_data; i++) {
        json_printf(b, "%s{\"worker\": %" PRId64 ", \"epoch\": %" PRId64 ", \"batch\": %" PRId64,
                    i ? ", " : "", m->data[i].worker, m->data[i].epoch, m->data[i].batch);
        if (m->data[i].end > 0)
            json_printf(b, ", \"end\": %" PRId64, m->data[i].end);
        if (m->data[i].n_rng > 0) {
            json_printf(b, ", \"rng\": ");
            put_u64_strings(b, m->data[i].rng, m->data[i].n_rng);
        }
        pb_put_raw(b, "}", 1);
    }
    json_printf(b, "],\n  \"rng\": ");
    put_u64_strings(b, m->rng, m->n_rng);
    if (m->n_writers > 0) {
        json_printf(b, ",\n  \"writers\": [");
        for (size_t i = 0; i < m->n_writers; i++) {
            json_printf(b, "%s{\"file\": ", i ? ", " : "");
            json_put_string(b, m->writers[i].file);
            json_printf(b, ", \"task\": ");
            json_put_string(b, m->writers[i].task);
            json_printf(b, ", \"address\": ");
            json_put_string(b, m->writers[i].address);
            pb_put_raw(b, "}", 1);
        }
        pb_put_raw(b, "]", 1);
    }
    json_printf(b, ",\n  \"epoch_sums\": [%.17g, %.17g, %.17g]", m->epoch_sums[0], m->epoch_sums[1],
                m->epoch_sums[2]);
    if (m->n_metric_sums > 0 || m->n_last_metrics > 0)
        json_printf(b, ",\n  \"metric_signature\": \"%016" PRIx64 "\"", m->metric_signature);
    if (m->n_metric_sums > 0) {
        json_printf(b, ",\n  \"epoch_metric_sums\": ");
        put_doubles(b, m->metric_sums, m->n_metric_sums);
    }
    if (m->has_last_epoch) {
        json_printf(b, ",\n  \"last_epoch\": {\"loss\": %.17g, \"accuracy\": %.17g", m->last_loss,
                    m->last_accuracy);
        if (m->n_last_metrics > 0) {
            json_printf(b, ", \"metrics\": ");
            put_doubles(b, m->last_metrics, m->n_last_metrics);
        }
        pb_put_raw(b, "}", 1);
    }
    json_printf(b, "\n}\n");
}

/* ---- the manifest, read ------------------------------------------------------------------- */

typedef struct reader {
    const json_doc_t *doc;
    const char *path;
    status_msg_t *err;
} reader_t;

static status_t bad(reader_t *r, const char *key, const char *what)
{
    return status_fail(r->err, STATUS_DATA_LOSS, "%s: %s %s", r->path, key, what);
}

static const json_node_t *need(reader_t *r, const json_node_t *obj, const char *key,
                               json_kind_t kind)
{
    const json_node_t *n = json_get(r->doc, obj, key);

    return n != NULL && n->kind == kind ? n : NULL;
}

static status_t get_i64(reader_t *r, const json_node_t *obj, const char *key, int64_t *ret)
{
    if (!json_i64(r->doc, json_get(r->doc, obj, key), ret))
        return bad(r, key, "is missing or not an integer");
    return STATUS_OK;
}

static status_t get_double(reader_t *r, const json_node_t *obj, const char *key, double *ret)
{
    if (!json_double(r->doc, json_get(r->doc, obj, key), ret))
        return bad(r, key, "is missing or not a number");
    return STATUS_OK;
}

/* A string copy; with `relative`, one that names a file inside the checkpoint's directory. */
static status_t get_string(reader_t *r, const json_node_t *n, const char *key, bool relative,
                           char **ret)
{
    size_t len;
    const char *s = json_string(r->doc, n, &len);

    if (s == NULL || strlen(s) != len || (relative && len == 0))
        return bad(r, key, "is missing or not a string");
    if (relative && (strchr(s, '/') != NULL || strcmp(s, "..") == 0 || strcmp(s, ".") == 0))
        return bad(r, key, "names a file outside the checkpoint");
    if ((*ret = strdup(s)) == NULL)
        return status_fail(r->err, STATUS_NO_MEMORY, "out of memory");
    return STATUS_OK;
}

static status_t get_strings(reader_t *r, const json_node_t *n, const char *key, bool relative,
                            char ***ret, size_t *ret_n)
{
    size_t i = 0;

    if (n == NULL || n->kind != JSON_ARRAY)
        return bad(r, key, "is missing or not a list");
    if ((*ret = calloc(n->n + 1, sizeof(**ret))) == NULL)
        return status_fail(r->err, STATUS_NO_MEMORY, "out of memory");
    for (const json_node_t *v = json_first(r->doc, n); v != NULL; v = json_next(r->doc, v)) {
        STATUS_CHECK(get_string(r, v, key, relative, &(*ret)[i]));
        *ret_n = ++i;
    }
    return STATUS_OK;
}

static status_t read_part(reader_t *r, const json_node_t *n, ckpt_part_t *p)
{
    if (n->kind != JSON_OBJECT)
        return bad(r, "variables", "has a part that is not an object");
    STATUS_CHECK(get_string(r, json_get(r->doc, n, "file"), "a part's file", true, &p->file));
    STATUS_CHECK(
        get_string(r, json_get(r->doc, n, "tensor"), "a part's tensor", false, &p->tensor));
    if (!json_u64(r->doc, json_get(r->doc, n, "row"), &p->row))
        return bad(r, "a part's row", "is missing or not an unsigned integer");
    return STATUS_OK;
}

static status_t read_var(reader_t *r, const json_node_t *n, ckpt_var_t *v)
{
    const json_node_t *shape = need(r, n, "shape", JSON_ARRAY);
    const json_node_t *parts = need(r, n, "parts", JSON_ARRAY);

    if ((v->name = strdup(json_key(r->doc, n))) == NULL)
        return status_fail(r->err, STATUS_NO_MEMORY, "out of memory");
    if (shape == NULL || parts == NULL || shape->n > ST_MAX_RANK || parts->n == 0)
        return bad(r, v->name, "needs a shape of at most 8 dimensions and parts");
    for (const json_node_t *d = json_first(r->doc, shape); d != NULL; d = json_next(r->doc, d))
        if (!json_u64(r->doc, d, &v->shape[v->rank++]))
            return bad(r, v->name, "has a dimension that is not an unsigned integer");
    if ((v->parts = calloc(parts->n, sizeof(*v->parts))) == NULL)
        return status_fail(r->err, STATUS_NO_MEMORY, "out of memory");
    for (const json_node_t *p = json_first(r->doc, parts); p != NULL; p = json_next(r->doc, p))
        STATUS_CHECK(read_part(r, p, &v->parts[v->n_parts++]));
    return STATUS_OK;
}

static status_t read_optimizer(reader_t *r, const json_node_t *root, ckpt_manifest_t *m)
{
    const json_node_t *o = need(r, root, "optimizer", JSON_OBJECT);

    if (o == NULL)
        return bad(r, "optimizer", "is missing or not an object");
    STATUS_CHECK(
        get_string(r, json_get(r->doc, o, "name"), "optimizer.name", false, &m->optimizer));
    STATUS_CHECK(get_i64(r, o, "iterations", &m->iterations));
    STATUS_CHECK(get_double(r, o, "learning_rate", &m->learning_rate));
    return get_strings(r, json_get(r->doc, o, "slots"), "optimizer.slots", false, &m->slots,
                       &m->n_slots);
}

/* A list of decimal strings (random states). */
static status_t get_u64_strings(reader_t *r, const json_node_t *n, const char *key, uint64_t **ret,
                                size_t *ret_n)
{
    if (n == NULL || n->kind != JSON_ARRAY)
        return bad(r, key, "is missing or not a list");
    if ((*ret = calloc(n->n + 1, sizeof(**ret))) == NULL)
        return status_fail(r->err, STATUS_NO_MEMORY, "out of memory");
    for (const json_node_t *v = json_first(r->doc, n); v != NULL; v = json_next(r->doc, v)) {
        const char *s = json_string(r->doc, v, NULL);
        char *end;
        errno = 0;
        if (s == NULL || s[0] < '0' || s[0] > '9' ||
            ((*ret)[(*ret_n)++] = strtoull(s, &end, 10), errno != 0 || *end != '\0'))
            return bad(r, key, "holds something other than a decimal string");
    }
    return STATUS_OK;
}

static status_t read_writers(reader_t *r, const json_node_t *root, ckpt_manifest_t *m)
{
    const json_node_t *w = json_get(r->doc, root, "writers");

    if (w == NULL)
        return STATUS_OK;
    if (w->kind != JSON_ARRAY)
        return bad(r, "writers", "is not a list");
    if ((m->writers = calloc(w->n + 1, sizeof(*m->writers))) == NULL)
        return status_fail(r->err, STATUS_NO_MEMORY, "out of memory");
    for (const json_node_t *e = json_first(r->doc, w); e != NULL; e = json_next(r->doc, e)) {
        ckpt_writer_t *x = &m->writers[m->n_writers++];
        if (e->kind != JSON_OBJECT)
            return bad(r, "writers", "holds something other than objects");
        STATUS_CHECK(get_string(r, json_get(r->doc, e, "file"), "writers.file", true, &x->file));
        STATUS_CHECK(get_string(r, json_get(r->doc, e, "task"), "writers.task", false, &x->task));
        STATUS_CHECK(
            get_string(r, json_get(r->doc, e, "address"), "writers.address", false, &x->address));
    }
    return STATUS_OK;
}

static status_t read_data(reader_t *r, const json_node_t *root, ckpt_manifest_t *m)
{
    const json_node_t *data = need(r, root, "data", JSON_ARRAY);

    if (data == NULL)
        return bad(r, "data", "is missing or not a list");
    if ((m->data = calloc(data->n + 1, sizeof(*m->data))) == NULL)
        return status_fail(r->err, STATUS_NO_MEMORY, "out of memory");
    for (const json_node_t *d = json_first(r->doc, data); d != NULL; d = json_next(r->doc, d)) {
        ckpt_data_pos_t *p = &m->data[m->n_data++];
        STATUS_CHECK(get_i64(r, d, "worker", &p->worker));
        STATUS_CHECK(get_i64(r, d, "epoch", &p->epoch));
        STATUS_CHECK(get_i64(r, d, "batch", &p->batch));
        if (json_get(r->doc, d, "end") != NULL)
            STATUS_CHECK(get_i64(r, d, "end", &p->end));
        if (p->epoch < 0 || p->batch < 0 || p->end < 0)
            return bad(r, "data", "holds a negative position");
        if (json_get(r->doc, d, "rng") != NULL)
            STATUS_CHECK(
                get_u64_strings(r, json_get(r->doc, d, "rng"), "data.rng", &p->rng, &p->n_rng));
    }
    return STATUS_OK;
}

/* An optional list of numbers (absent: none); at most CKPT_MAX_METRIC_SUMS. */
static status_t get_doubles(reader_t *r, const json_node_t *list, const char *key, double **ret,
                            size_t *ret_n)
{
    size_t k = 0;

    if (list == NULL)
        return STATUS_OK;
    if (list->kind != JSON_ARRAY || list->n > CKPT_MAX_METRIC_SUMS)
        return bad(r, key, "is not a list of at most 1048576 numbers");
    if (list->n == 0)
        return STATUS_OK;
    if ((*ret = calloc(list->n, sizeof(double))) == NULL)
        return status_fail(r->err, STATUS_NO_MEMORY, "out of memory");
    *ret_n = list->n;
    for (const json_node_t *v = json_first(r->doc, list); v != NULL; v = json_next(r->doc, v))
        if (k >= list->n || !json_double(r->doc, v, &(*ret)[k++]))
            return bad(r, key, "holds something other than a number");
    return STATUS_OK;
}

static status_t read_rng(reader_t *r, const json_node_t *root, ckpt_manifest_t *m)
{
    const json_node_t *rng = need(r, root, "rng", JSON_ARRAY);
    const json_node_t *sums = need(r, root, "epoch_sums", JSON_ARRAY);
    size_t k = 0;

    if (rng == NULL || sums == NULL || sums->n != 3)
        return bad(r, "rng and epoch_sums", "are missing or not lists of 3 sums");
    STATUS_CHECK(get_u64_strings(r, rng, "rng", &m->rng, &m->n_rng));
    for (const json_node_t *v = json_first(r->doc, sums); v != NULL; v = json_next(r->doc, v))
        if (!json_double(r->doc, v, &m->epoch_sums[k++]))
            return bad(r, "epoch_sums", "holds something other than a number");
    const char *sig = json_string(r->doc, json_get(r->doc, root, "metric_signature"), NULL);
    char *end;
    if (sig != NULL && (m->metric_signature = strtoull(sig, &end, 16), *end != '\0'))
        return bad(r, "metric_signature", "is not hexadecimal");
    STATUS_CHECK(get_doubles(r, json_get(r->doc, root, "epoch_metric_sums"), "epoch_metric_sums",
                             &m->metric_sums, &m->n_metric_sums));
    const json_node_t *last = json_get(r->doc, root, "last_epoch");
    if (last == NULL)
        return STATUS_OK;
    m->has_last_epoch = true;
    STATUS_CHECK(get_double(r, last, "loss", &m->last_loss));
    STATUS_CHECK(get_doubles(r, json_get(r->doc, last, "metrics"), "last_epoch.metrics",
                             &m->last_metrics, &m->n_last_metrics));
    return get_double(r, last, "accuracy", &m->last_accuracy);
}

static status_t read_manifest(reader_t *r, ckpt_manifest_t *m)
{
    const json_node_t *root = json_root(r->doc), *vars;
    const char *format = json_string(r->doc, json_get(r->doc, root, "format"), NULL);
    const char *hash = json_string(r->doc, json_get(r->doc, root, "job_hash"), NULL);
    char *end;

    if (root->kind != JSON_OBJECT || format == NULL || strcmp(format, CKPT_FORMAT) != 0)
        return bad(r, "format", "is not \"" CKPT_FORMAT "\": not a Tessera checkpoint manifest");
    STATUS_CHECK(get_i64(r, root, "step", &m->step));
    if (m->step < 0)
        return bad(r, "step", "is negative");
    STATUS_CHECK(get_string(r, json_get(r->doc, root, "job"), "job", false, &m->job));
    if (hash == NULL || (m->job_hash = strtoull(hash, &end, 16), *end != '\0'))
        return bad(r, "job_hash", "is missing or not hexadecimal");
    STATUS_CHECK(get_double(r, root, "wall_time", &m->wall_time));
    STATUS_CHECK(read_optimizer(r, root, m));
    STATUS_CHECK(
        get_strings(r, json_get(r->doc, root, "files"), "files", true, &m->files, &m->n_files));
    vars = need(r, root, "variables", JSON_OBJECT);
    if (vars == NULL)
        return bad(r, "variables", "is missing or not an object");
    if ((m->vars = calloc(vars->n + 1, sizeof(*m->vars))) == NULL)
        return status_fail(r->err, STATUS_NO_MEMORY, "out of memory");
    for (const json_node_t *v = json_first(r->doc, vars); v != NULL; v = json_next(r->doc, v)) {
        if (v->kind != JSON_OBJECT)
            return bad(r, "variables", "holds something other than objects");
        STATUS_CHECK(read_var(r, v, &m->vars[m->n_vars++]));
    }
    STATUS_CHECK(read_data(r, root, m));
    STATUS_CHECK(read_writers(r, root, m));
    return read_rng(r, root, m);
}

status_t ckpt_manifest_decode(const char *text, size_t len, const char *path, ckpt_manifest_t *ret,
                              status_msg_t *err)
{
    json_doc_t doc;
    reader_t r = {.doc = &doc, .path = path, .err = err};
    status_t rc;

    memset(ret, 0, sizeof(*ret));
    rc = json_parse(text, len, path, &doc, err);
    if (rc == STATUS_OK)
        rc = read_manifest(&r, ret);
    json_free(&doc);
    if (rc != STATUS_OK)
        ckpt_manifest_free(ret);
    return rc;
}

static void free_strings(char **s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

void ckpt_manifest_free(ckpt_manifest_t *m)
{
    free(m->job);
    free(m->optimizer);
    free_strings(m->slots, m->n_slots);
    free_strings(m->files, m->n_files);
    for (size_t i = 0; i < m->n_vars; i++) {
        for (size_t k = 0; k < m->vars[i].n_parts; k++) {
            free(m->vars[i].parts[k].file);
            free(m->vars[i].parts[k].tensor);
        }
        free(m->vars[i].parts);
        free(m->vars[i].name);
    }
    free(m->vars);
    for (size_t i = 0; i < m->n_data; i++)
        free(m->data[i].rng);
    free(m->data);
    free(m->rng);
    free(m->metric_sums);
    free(m->last_metrics);
    for (size_t i = 0; i < m->n_writers; i++) {
        free(m->writers[i].file);
        free(m->writers[i].task);
        free(m->writers[i].address);
    }
    free(m->writers);
    memset(m, 0, sizeof(*m));
}

const char *ckpt_slot_tensor(char *buf, size_t len, const char *tensor, const char *slot)
{
    snprintf(buf, len, "optimizer/%s/%s", tensor, slot);
    return buf;
}

status_t ckpt_check_optimizer(const char *path, const ckpt_manifest_t *m, const char *optimizer,
                              size_t n_slots, status_msg_t *err)
{
    if (strcmp(m->optimizer, optimizer) != 0)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s was trained with optimizer %s, but the job uses %s", path,
                           m->optimizer, optimizer);
    if (m->n_slots != n_slots)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s keeps %zu optimizer slots per variable, the job's optimizer %zu "
                           "(momentum, amsgrad or centered changed?)",
                           path, m->n_slots, n_slots);
    return STATUS_OK;
}

bool ckpt_slot_nonnegative(const char *slot)
{
    /* running averages and sums of squared gradients */
    return strcmp(slot, "velocity") == 0 || strcmp(slot, "velocity_hat") == 0 ||
           strcmp(slot, "accumulator") == 0;
}

/* Whether v[0..n) holds a NaN or an infinity (exponent all ones) or, with nonnegative, a value
 * below zero (sign set, not -0): integer tests over the bits, which the compiler vectorizes, so
 * that checking a restore costs little beside reading it. */
static bool floats_suspect(const float *v, size_t n, bool nonnegative)
{
    uint32_t inf = 0, neg = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], sizeof(bits));
        inf |= (uint32_t)((bits & 0x7f800000u) == 0x7f800000u);
        neg |= (uint32_t)(bits > 0x80000000u);
    }
    return inf != 0 || (nonnegative && neg != 0);
}

status_t ckpt_check_floats(const char *file, const char *tensor, const float *v, size_t n,
                           bool nonnegative, status_msg_t *err)
{
    if (!floats_suspect(v, n, nonnegative))
        return STATUS_OK;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i]))
            return status_fail(err, STATUS_DATA_LOSS,
                               "%s: tensor %s holds %s at element %zu: the file is damaged", file,
                               tensor, isnan(v[i]) ? "NaN" : "an infinity", i);
        if (nonnegative && v[i] < 0)
            return status_fail(err, STATUS_DATA_LOSS,
                               "%s: tensor %s holds %g at element %zu, but it is a sum of squares: "
                               "the file is damaged",
                               file, tensor, (double)v[i], i);
    }
    return STATUS_OK;
}

const char *ckpt_part_tensor(char *buf, size_t len, const char *variable, int part, int n_parts)
{
    if (n_parts <= 1)
        snprintf(buf, len, "%s", variable);
    else
        snprintf(buf, len, "%s/part_%d", variable, part);
    return buf;
}

/* ---- directories -------------------------------------------------------------------------- */

static char *join(const char *dir, const char *name)
{
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);

    if (p != NULL)
        snprintf(p, len, "%s/%s", dir, name);
    return p;
}

static char *ckpt_dir(const char *dir, int64_t step)
{
    char name[48];

    snprintf(name, sizeof(name), "ckpt-%" PRId64, step);
    return join(dir, name);
}

static bool exists(const char *dir, const char *name)
{
    char *p = join(dir, name);
    struct stat sb;
    bool yes = p != NULL && stat(p, &sb) == 0;

    free(p);
    return yes;
}

/* The step of a directory entry named ckpt-<step>, or -1. */
static int64_t entry_step(const char *name)
{
    char *end;
    long long v;

    if (strncmp(name, "ckpt-", 5) != 0 || name[5] < '0' || name[5] > '9')
        return -1;
    errno = 0;
    v = strtoll(name + 5, &end, 10);
    return errno == 0 && *end == '\0' ? (int64_t)v : -1;
}

/* Removes a checkpoint directory and the files in it (it holds no subdirectories). */
static void remove_ckpt(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;

    char *f;

    if (d == NULL)
        return;
    /* the manifest first: a directory half removed is incomplete, never half valid */
    if ((f = join(path, CKPT_MANIFEST)) != NULL)
        unlink(f);
    free(f);
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if ((f = join(path, e->d_name)) != NULL)
            unlink(f);
        free(f);
    }
    closedir(d);
    rmdir(path);
}

status_t ckpt_begin(const char *dir, int64_t step, char **ret_path, status_msg_t *err)
{
    char *path;

    *ret_path = NULL;
    STATUS_CHECK(files_mkdirs(dir, err));
    if ((path = ckpt_dir(dir, step)) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    if (exists(path, CKPT_MANIFEST)) {
        free(path);
        return status_fail(err, STATUS_ALREADY_EXISTS, "%s/ckpt-%" PRId64 " is already complete",
                           dir, step);
    }
    remove_ckpt(path);
    if (mkdir(path, 0755) != 0) {
        status_t rc = status_fail(err, STATUS_IO, "cannot create %s: %s", path, strerror(errno));
        free(path);
        return rc;
    }
    *ret_path = path;
    return STATUS_OK;
}

/* Every ckpt-<step> under dir, complete or not, sorted by step, newest first. */
typedef struct found {
    int64_t step;
    bool complete;
} found_t;

static int newest_first(const void *a, const void *b)
{
    const found_t *x = a, *y = b;

    return (x->step < y->step) - (x->step > y->step);
}

static status_t scan(const char *dir, found_t **ret, size_t *ret_n, status_msg_t *err)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t n = 0, cap = 0;
    found_t *all = NULL;

    *ret = NULL;
    *ret_n = 0;
    if (d == NULL)
        return errno == ENOENT ? STATUS_OK
                               : status_fail(err, STATUS_IO, "cannot read the directory %s: %s",
                                             dir, strerror(errno));
    while ((e = readdir(d)) != NULL) {
        int64_t step = entry_step(e->d_name);
        if (step < 0)
            continue;
        if (n == cap) {
            found_t *more = realloc(all, (cap = cap ? 2 * cap : 16) * sizeof(*all));
            if (more == NULL) {
                free(all);
                closedir(d);
                return status_fail(err, STATUS_NO_MEMORY, "out of memory");
            }
            all = more;
        }
        char *path = join(dir, e->d_name);
        all[n++] = (found_t){step, path != NULL && exists(path, CKPT_MANIFEST)};
        free(path);
    }
    closedir(d);
    qsort(all, n, sizeof(*all), newest_first);
    *ret = all;
    *ret_n = n;
    return STATUS_OK;
}

/* DIR/checkpoint in TensorFlow's text form, newest first. */
static status_t write_index(const char *dir, const found_t *all, size_t n, status_msg_t *err)
{
    pb_buf_t b = {0};
    char *path = join(dir, "checkpoint");
    bool first = true;
    status_t rc;

    for (size_t i = 0; i < n; i++) {
        if (!all[i].complete)
            continue;
        if (first)
            json_printf(&b, "model_checkpoint_path: \"ckpt-%" PRId64 "\"\n", all[i].step);
        first = false;
        json_printf(&b, "all_model_checkpoint_paths: \"ckpt-%" PRId64 "\"\n", all[i].step);
    }
    if (path == NULL || b.failed)
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    else
        rc = atomic_file_put(path, b.data, b.len, err);
    free(path);
    pb_buf_free(&b);
    return rc;
}

/* Keeps the newest `keep` complete checkpoints and whatever is newer than `step` (being written
 * by someone else); removes the rest. */
static void prune(const char *dir, found_t *all, size_t n, int64_t step, int keep)
{
    int kept = 0;

    for (size_t i = 0; i < n; i++) {
        bool stays = all[i].step > step || (all[i].complete && kept++ < keep);
        if (stays)
            continue;
        char *path = ckpt_dir(dir, all[i].step);
        if (path != NULL)
            remove_ckpt(path);
        free(path);
        all[i].complete = false;
    }
}

status_t ckpt_commit(const char *dir, int64_t step, const void *manifest, size_t len, int keep,
                     status_msg_t *err)
{
    char *path = ckpt_dir(dir, step), *mpath = path ? join(path, CKPT_MANIFEST) : NULL;
    found_t *all = NULL;
    size_t n = 0;
    status_t rc;

    if (mpath == NULL) {
        free(path);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    rc = files_fsync_dir(path, err); /* the shard files' names first */
    if (rc == STATUS_OK)
        rc = atomic_file_put(mpath, manifest, len, err);
    if (rc == STATUS_OK)
        rc = files_fsync_dir(dir, err);
    if (rc == STATUS_OK)
        rc = scan(dir, &all, &n, err);
    if (rc == STATUS_OK) {
        prune(dir, all, n, step, keep > 0 ? keep : 1);
        rc = write_index(dir, all, n, err);
    }
    free(all);
    free(mpath);
    free(path);
    return rc;
}

status_t ckpt_complete_steps(const char *dir, int64_t **ret, size_t *ret_n, status_msg_t *err)
{
    found_t *all;
    size_t n, k = 0;
    int64_t *steps;

    *ret = NULL;
    *ret_n = 0;
    STATUS_CHECK(scan(dir, &all, &n, err));
    if ((steps = calloc(n + 1, sizeof(*steps))) == NULL) {
        free(all);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        if (all[i].complete)
            steps[k++] = all[i].step;
    free(all);
    *ret = steps;
    *ret_n = k;
    return STATUS_OK;
}

void ckpt_prune_file(const char *dir, const char *file, int64_t step, const int64_t *keep,
                     size_t n_keep)
{
    found_t *all;
    size_t n;
    status_msg_t err;

    if (scan(dir, &all, &n, &err) != STATUS_OK)
        return;
    for (size_t i = 0; i < n; i++) {
        bool stays = all[i].step >= step || all[i].complete;
        for (size_t k = 0; k < n_keep && !stays; k++)
            stays = keep[k] == all[i].step;
        if (stays)
            continue;
        char *path = ckpt_dir(dir, all[i].step), *f = path ? join(path, file) : NULL;
        if (f != NULL && unlink(f) == 0)
            rmdir(path); /* fails, as it should, while other files are in it */
        free(f);
        free(path);
    }
    free(all);
}

status_t ckpt_latest(const char *dir, int64_t *ret_step, char **ret_path, status_msg_t *err)
{
    found_t *all;
    size_t n;

    *ret_path = NULL;
    STATUS_CHECK(scan(dir, &all, &n, err));
    for (size_t i = 0; i < n; i++)
        if (all[i].complete) {
            *ret_step = all[i].step;
            *ret_path = ckpt_dir(dir, all[i].step);
            free(all);
            return *ret_path != NULL ? STATUS_OK
                                     : status_fail(err, STATUS_NO_MEMORY, "out of memory");
        }
    free(all);
    return status_fail(err, STATUS_NOT_FOUND, "no complete checkpoint in %s", dir);
}

status_t ckpt_read_manifest(const char *ckpt_path, ckpt_manifest_t *ret, status_msg_t *err)
{
    char *path = join(ckpt_path, CKPT_MANIFEST), *text = NULL;
    size_t len = 0;
    status_t rc;

    memset(ret, 0, sizeof(*ret));
    if (path == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    rc = file_read_all(path, "checkpoint manifest", MAX_MANIFEST, &text, &len, err);
    if (rc == STATUS_OK)
        rc = ckpt_manifest_decode(text, len, path, ret, err);
    free(text);
    free(path);
    return rc;
}
