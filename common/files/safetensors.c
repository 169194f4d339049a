#define _GNU_SOURCE /* O_DIRECT */
#include "files/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files/atomic.h"
#include "files/json.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},           [ST_I8] = {"I8", 1},
    [ST_I16] = {"I16", 2},   [ST_U16] = {"U16", 2},         [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_I32] = {"I32", 4},         [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},   [ST_F64] = {"F64", 8},         [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},   [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1},
};

const char *st_dtype_name(st_dtype_t d)
{
    return (unsigned)d < ST_DTYPE_COUNT ? dtypes[d].name : "?";
}

size_t st_dtype_size(st_dtype_t d)
{
    return (unsigned)d < ST_DTYPE_COUNT ? dtypes[d].size : 0;
}

/* prod(shape) into *ret_elements and times the element size into *ret_bytes; false on overflow. */
static bool tensor_size(st_dtype_t d, int rank, const uint64_t *shape, uint64_t *ret_elements,
                        uint64_t *ret_bytes)
{
    uint64_t n = 1;

    for (int i = 0; i < rank; i++) {
        if (shape[i] != 0 && n > UINT64_MAX / shape[i])
            return false;
        n *= shape[i];
    }
    if (n > UINT64_MAX / st_dtype_size(d))
        return false;
    *ret_elements = n;
    *ret_bytes = n * st_dtype_size(d);
    return true;
}

/* ---- writing ---------------------------------------------------------------------------------
 */

static status_t check_names(const st_tensor_t *t, size_t n, const char *path, status_msg_t *err)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t elements, bytes;
        if (t[i].name == NULL || t[i].name[0] == '\0' || strcmp(t[i].name, "__metadata__") == 0)
            return status_fail(err, STATUS_INVALID_ARGUMENT, "%s: tensor %zu has no usable name",
                               path, i);
        if (!utf8_valid_text(t[i].name, strlen(t[i].name))) { /* the header is UTF-8 JSON */
            char shown[200];
            utf8_escape(shown, sizeof(shown), t[i].name, strlen(t[i].name));
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "%s: tensor %zu's name \"%s\" is not UTF-8 text", path, i, shown);
        }
        if ((unsigned)t[i].dtype >= ST_DTYPE_COUNT || t[i].rank < 0 || t[i].rank > ST_MAX_RANK)
            return status_fail(err, STATUS_INVALID_ARGUMENT, "%s: tensor %s: bad dtype or rank",
                               path, t[i].name);
        if (!tensor_size(t[i].dtype, t[i].rank, t[i].shape, &elements, &bytes) || bytes > SIZE_MAX)
            return status_fail(err, STATUS_INVALID_ARGUMENT, "%s: tensor %s: its shape overflows",
                               path, t[i].name);
        /* Names are few (a model's variables): the quadratic check costs nothing next to the
         * bytes. */
        for (size_t j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return status_fail(err, STATUS_INVALID_ARGUMENT, "%s: tensor %s named twice", path,
                                   t[i].name);
    }
    return STATUS_OK;
}

/* The 8-byte length and the space-padded JSON header. */
static void encode_header(const st_tensor_t *t, size_t n, const st_meta_t *meta, size_t n_meta,
                          pb_buf_t *out)
{
    uint64_t offset = 0, len;
    uint8_t le[8] = {0};

    pb_put_raw(out, le, 8);
    json_printf(out, "{\"__metadata__\":{\"format\":\"%s\"", ST_METADATA_FORMAT);
    for (size_t i = 0; i < n_meta; i++) {
        pb_put_raw(out, ",", 1);
        json_put_string(out, meta[i].key);
        pb_put_raw(out, ":", 1);
        json_put_string(out, meta[i].value);
    }
    pb_put_raw(out, "}", 1);
    for (size_t i = 0; i < n; i++) {
        uint64_t elements = 0, bytes = 0;
        tensor_size(t[i].dtype, t[i].rank, t[i].shape, &elements, &bytes);
        pb_put_raw(out, ",", 1);
        json_put_string(out, t[i].name);
        json_printf(out, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].rank; d++)
            json_printf(out, "%s%" PRIu64, d ? "," : "", t[i].shape[d]);
        json_printf(out, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset, offset + bytes);
        offset += bytes;
    }
    pb_put_raw(out, "}", 1);
    while (out->len % 8 != 0)
        pb_put_raw(out, " ", 1);
    len = out->len - 8;
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(len >> (8 * i));
    if (!out->failed)
        memcpy(out->data, le, 8);
}

struct st_writer {
    atomic_file_t f;
    uint64_t expected; /* header + every tensor's bytes */
};

status_t st_write_begin(const char *path, const st_tensor_t *t, size_t n, const st_meta_t *meta,
                        size_t n_meta, st_writer_t **ret, status_msg_t *err)
{
    pb_buf_t header = {0};
    st_writer_t *w;
    status_t rc;

    STATUS_CHECK(check_names(t, n, path, err));
    w = calloc(1, sizeof(*w));
    encode_header(t, n, meta, n_meta, &header);
    if (header.failed || w == NULL) {
        pb_buf_free(&header);
        free(w);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory for the header of %s", path);
    }
    w->expected = header.len;
    for (size_t i = 0; i < n; i++) {
        uint64_t elements = 0, bytes = 0;
        tensor_size(t[i].dtype, t[i].rank, t[i].shape, &elements, &bytes);
        w->expected += bytes;
    }
    rc = atomic_file_open(path, &w->f, err);
    if (rc == STATUS_OK) {
        atomic_file_stream(&w->f);
        rc = atomic_file_write(&w->f, header.data, header.len, err);
        if (rc != STATUS_OK)
            atomic_file_abort(&w->f);
    }
    pb_buf_free(&header);
    if (rc != STATUS_OK) {
        free(w);
        return rc;
    }
    *ret = w;
    return STATUS_OK;
}

status_t st_write_data(st_writer_t *w, const void *data, size_t len, status_msg_t *err)
{
    if (len > w->expected - w->f.written)
        return status_fail(err, STATUS_INVALID_USAGE,
                           "%s: %zu bytes more than its header describes", w->f.path,
                           len - (size_t)(w->expected - w->f.written));
    return atomic_file_write(&w->f, data, len, err);
}

status_t st_write_commit(st_writer_t *w, uint64_t *ret_bytes, status_msg_t *err)
{
    status_t rc;

    if (w->f.written != w->expected) {
        rc = status_fail(err, STATUS_INVALID_USAGE,
                         "%s: %" PRIu64 " bytes of tensors missing from what its header describes",
                         w->f.path, w->expected - w->f.written);
        st_write_abort(w);
        return rc;
    }
    if (ret_bytes != NULL)
        *ret_bytes = w->f.written;
    rc = atomic_file_commit(&w->f, err);
    free(w);
    return rc;
}

void st_write_abort(st_writer_t *w)
{
    if (w == NULL)
        return;
    atomic_file_abort(&w->f);
    free(w);
}

status_t st_write_file(const char *path, const st_tensor_t *t, size_t n, const st_meta_t *meta,
                       size_t n_meta, uint64_t *ret_bytes, status_msg_t *err)
{
    st_writer_t *w;
    status_t rc;

    STATUS_CHECK(st_write_begin(path, t, n, meta, n_meta, &w, err));
    for (size_t i = 0; i < n; i++) {
        uint64_t elements = 0, bytes = 0;
        tensor_size(t[i].dtype, t[i].rank, t[i].shape, &elements, &bytes);
        rc = st_write_data(w, t[i].data, (size_t)bytes, err);
        if (rc != STATUS_OK) {
            st_write_abort(w);
            return rc;
        }
    }
    return st_write_commit(w, ret_bytes, err);
}

/* ---- reading ---------------------------------------------------------------------------------
 */

struct st_file {
    char *path;
    int fd;
    int direct_fd;       /* the file opened with O_DIRECT, for big tensors; -1: none (yet) */
    uint64_t data_start; /* 8 + header length */
    st_info_t *tensors;
    size_t n;
    json_doc_t doc; /* keeps the metadata strings */
    const json_node_t *metadata;
};

static status_t corrupt(const st_file_t *f, status_msg_t *err, const char *name, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));

/* STATUS_DATA_LOSS: "PATH: tensor "NAME": WHAT", or "PATH: WHAT" without a name. */
static status_t corrupt(const st_file_t *f, status_msg_t *err, const char *name, const char *fmt,
                        ...)
{
    char what[200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (name != NULL)
        return status_fail(err, STATUS_DATA_LOSS, "%s: tensor \"%.100s\": %s", f->path, name, what);
    return status_fail(err, STATUS_DATA_LOSS, "%s: %s", f->path, what);
}

static status_t read_dtype(st_file_t *f, const json_node_t *node, const char *name, st_dtype_t *ret,
                           status_msg_t *err)
{
    const char *s = json_string(&f->doc, node, NULL);

    if (s == NULL)
        return corrupt(f, err, name, "dtype must be a string");
    for (int d = 0; d < ST_DTYPE_COUNT; d++)
        if (strcmp(s, dtypes[d].name) == 0) {
            *ret = (st_dtype_t)d;
            return STATUS_OK;
        }
    return corrupt(f, err, name, "dtype %.40s is not one safetensors defines", s);
}

/* An array of at most max unsigned integers. */
static status_t read_u64s(st_file_t *f, const json_node_t *node, const char *name, const char *key,
                          uint64_t *out, size_t max, int *ret_n, status_msg_t *err)
{
    int n = 0;

    if (node == NULL || node->kind != JSON_ARRAY || node->n > max)
        return corrupt(f, err, name, "%s is missing, not a list, or too long", key);
    for (const json_node_t *v = json_first(&f->doc, node); v != NULL; v = json_next(&f->doc, v))
        if (!json_u64(&f->doc, v, &out[n++]))
            return corrupt(f, err, name, "%s holds something other than an unsigned integer", key);
    *ret_n = n;
    return STATUS_OK;
}

static status_t read_tensor(st_file_t *f, const json_node_t *m, st_info_t *t, status_msg_t *err)
{
    const char *name = json_key(&f->doc, m);
    uint64_t offsets[2], bytes;
    int n_offsets;

    if (m->kind != JSON_OBJECT || m->n != 3)
        return corrupt(f, err, name, "must be {dtype, shape, data_offsets} and no more");
    if (strlen(name) != m->key_len)
        return corrupt(f, err, NULL, "a tensor name holds a NUL character");
    if ((t->name = strdup(name)) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    STATUS_CHECK(read_dtype(f, json_get(&f->doc, m, "dtype"), name, &t->dtype, err));
    STATUS_CHECK(read_u64s(f, json_get(&f->doc, m, "shape"), name, "shape", t->shape, ST_MAX_RANK,
                           &t->rank, err));
    STATUS_CHECK(read_u64s(f, json_get(&f->doc, m, "data_offsets"), name, "data_offsets", offsets,
                           2, &n_offsets, err));
    if (n_offsets != 2 || offsets[0] > offsets[1])
        return corrupt(f, err, name, "data_offsets must be [begin, end] with begin <= end");
    if (!tensor_size(t->dtype, t->rank, t->shape, &t->elements, &bytes))
        return corrupt(f, err, name, "its shape overflows");
    if (offsets[1] - offsets[0] != bytes)
        return corrupt(f, err, name, "its byte range does not match its dtype and shape");
    t->begin = offsets[0];
    t->end = offsets[1];
    return STATUS_OK;
}

static status_t read_metadata(st_file_t *f, const json_node_t *m, status_msg_t *err)
{
    if (m->kind != JSON_OBJECT)
        return corrupt(f, err, NULL, "__metadata__ must be an object of strings");
    for (const json_node_t *v = json_first(&f->doc, m); v != NULL; v = json_next(&f->doc, v))
        if (v->kind != JSON_STRING)
            return corrupt(f, err, NULL, "__metadata__ must be an object of strings");
    f->metadata = m;
    return STATUS_OK;
}

static int by_begin(const void *a, const void *b)
{
    const st_info_t *x = *(st_info_t *const *)a, *y = *(st_info_t *const *)b;

    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Sorted by offset, the tensors tile the buffer from 0 to its end with no gap or overlap. */
static status_t check_tiling(st_file_t *f, uint64_t buffer_len, status_msg_t *err)
{
    const st_info_t **order = malloc((f->n + 1) * sizeof(*order));
    uint64_t at = 0;
    status_t rc = STATUS_OK;

    if (order == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < f->n; i++)
        order[i] = &f->tensors[i];
    qsort(order, f->n, sizeof(*order), by_begin);
    for (size_t i = 0; i < f->n && rc == STATUS_OK; i++) {
        if (order[i]->begin != at)
            rc = corrupt(f, err, order[i]->name, "its bytes %s",
                         order[i]->begin < at ? "overlap another tensor's"
                                              : "leave a gap after the tensor before them");
        at = order[i]->end;
    }
    free(order);
    if (rc == STATUS_OK && at != buffer_len)
        rc = corrupt(f, err, NULL, "the tensors take %" PRIu64 " bytes but the file holds %" PRIu64,
                     at, buffer_len);
    return rc;
}

static status_t parse_header(st_file_t *f, const char *text, size_t len, uint64_t buffer_len,
                             status_msg_t *err)
{
    const json_node_t *root;
    size_t i = 0;

    if (len == 0 || text[0] != '{')
        return corrupt(f, err, NULL, "the header does not begin with '{'");
    STATUS_CHECK(json_parse(text, len, f->path, &f->doc, err));
    root = json_root(&f->doc);
    if (root->kind != JSON_OBJECT)
        return corrupt(f, err, NULL, "the header is not a JSON object");
    if ((f->tensors = calloc(root->n + 1, sizeof(*f->tensors))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (const json_node_t *m = json_first(&f->doc, root); m != NULL; m = json_next(&f->doc, m)) {
        if (strcmp(json_key(&f->doc, m), "__metadata__") == 0) {
            STATUS_CHECK(read_metadata(f, m, err));
            continue;
        }
        f->n = i + 1; /* freed with the file even when it fails */
        STATUS_CHECK(read_tensor(f, m, &f->tensors[i++], err));
    }
    f->n = i;
    return check_tiling(f, buffer_len, err);
}

static status_t read_exact(st_file_t *f, void *dst, size_t len, uint64_t offset, status_msg_t *err)
{
    char *p = dst;

    while (len > 0) {
        ssize_t n = pread(f->fd, p, len, (off_t)offset);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return status_fail(err, STATUS_IO, "cannot read %s: %s", f->path, strerror(errno));
        if (n == 0)
            return status_fail(err, STATUS_DATA_LOSS, "%s: cut short at byte %" PRIu64, f->path,
                               offset);
        p += n;
        len -= (size_t)n;
        offset += (uint64_t)n;
    }
    return STATUS_OK;
}

static status_t st_load(st_file_t *f, status_msg_t *err)
{
    struct stat sb;
    uint8_t le[8];
    uint64_t header_len = 0;
    char *header;
    status_t rc;

    if ((f->fd = open(f->path, O_RDONLY | O_CLOEXEC)) < 0)
        return status_fail(err, errno == ENOENT ? STATUS_NOT_FOUND : STATUS_IO,
                           "cannot open %s: %s", f->path, strerror(errno));
    if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        return status_fail(err, STATUS_IO, "%s is not a regular file", f->path);
    if (sb.st_size < 8)
        return corrupt(f, err, NULL, "shorter than the 8-byte header length");
    STATUS_CHECK(read_exact(f, le, 8, 0, err));
    for (int i = 0; i < 8; i++)
        header_len |= (uint64_t)le[i] << (8 * i);
    if (header_len > ST_MAX_HEADER || header_len > (uint64_t)sb.st_size - 8)
        return corrupt(f, err, NULL, "the header claims %" PRIu64 " bytes of a %lld-byte file",
                       header_len, (long long)sb.st_size);
    if ((header = malloc(header_len + 1)) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory for the header of %s", f->path);
    rc = read_exact(f, header, header_len, 8, err);
    if (rc == STATUS_OK)
        rc = parse_header(f, header, header_len, (uint64_t)sb.st_size - 8 - header_len, err);
    free(header);
    f->data_start = 8 + header_len;
    return rc;
}

status_t st_open(const char *path, st_file_t **ret, status_msg_t *err)
{
    st_file_t *f = calloc(1, sizeof(*f));
    status_t rc;

    *ret = NULL;
    if (f == NULL || (f->path = strdup(path)) == NULL) {
        free(f);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    f->fd = f->direct_fd = -1;
    rc = st_load(f, err);
    if (rc != STATUS_OK) {
        st_close(f);
        return rc;
    }
    *ret = f;
    return STATUS_OK;
}

void st_close(st_file_t *f)
{
    if (f == NULL)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->direct_fd >= 0)
        close(f->direct_fd);
    for (size_t i = 0; i < f->n; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    json_free(&f->doc);
    free(f->path);
    free(f);
}

const char *st_path(const st_file_t *f)
{
    return f->path;
}

size_t st_count(const st_file_t *f)
{
    return f->n;
}

const st_info_t *st_info(const st_file_t *f, size_t i)
{
    return i < f->n ? &f->tensors[i] : NULL;
}

const st_info_t *st_find(const st_file_t *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *st_metadata(const st_file_t *f, const char *key)
{
    return json_string(&f->doc, json_get(&f->doc, f->metadata, key), NULL);
}

/* Big tensors are read with O_DIRECT through an aligned buffer: on the machines measured
 * (bench/files) cold buffered reads reach a quarter of the disk's speed. */
#define DIRECT_MIN   (1u << 20)
#define DIRECT_ALIGN 4096u
#define DIRECT_CHUNK (8u << 20)

/* Reads [offset, offset + len) directly; false when direct I/O is not to be had (the caller
 * reads through the cache instead), or on an error, set in *rc. */
static bool read_direct(st_file_t *f, char *dst, size_t len, uint64_t offset, status_t *rc,
                        status_msg_t *err)
{
    char *buf;
    bool first = true;

    if (f->direct_fd == -1)
        f->direct_fd = open(f->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (f->direct_fd < 0) {
        f->direct_fd = -2; /* do not try again */
        return false;
    }
    if ((buf = aligned_alloc(DIRECT_ALIGN, DIRECT_CHUNK)) == NULL)
        return false;
    *rc = STATUS_OK;
    while (len > 0) {
        uint64_t start = offset / DIRECT_ALIGN * DIRECT_ALIGN, skip = offset - start;
        size_t want = skip + len > DIRECT_CHUNK ? DIRECT_CHUNK : (size_t)(skip + len);
        size_t aligned = (want + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
        ssize_t n = pread(f->direct_fd, buf, aligned, (off_t)start);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EINVAL && first) { /* the filesystem refuses it */
            free(buf);
            f->direct_fd = -2;
            return false;
        }
        if (n < 0 || (uint64_t)n <= skip) {
            *rc = n < 0
                      ? status_fail(err, STATUS_IO, "cannot read %s: %s", f->path, strerror(errno))
                      : status_fail(err, STATUS_DATA_LOSS, "%s: cut short at byte %" PRIu64,
                                    f->path, offset);
            break;
        }
        size_t got =
            (size_t)n - (size_t)skip < want - skip ? (size_t)n - (size_t)skip : want - (size_t)skip;
        memcpy(dst, buf + skip, got);
        first = false;
        dst += got;
        len -= got;
        offset += got;
    }
    free(buf);
    return true;
}

status_t st_read(const st_file_t *f, const st_info_t *t, void *dst, status_msg_t *err)
{
    st_file_t *w = (st_file_t *)f; /* the lazily opened direct descriptor */
    size_t len = (size_t)(t->end - t->begin);
    status_t rc;

    if (len >= DIRECT_MIN && w->direct_fd != -2 &&
        read_direct(w, dst, len, f->data_start + t->begin, &rc, err))
        return rc;
    return read_exact(w, dst, len, f->data_start + t->begin, err);
}
