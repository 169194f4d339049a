#define _POSIX_C_SOURCE 200809L
#include "files/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

static status_t bad(status_msg_t *err, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static status_t bad(status_msg_t *err, const char *what, const char *fmt, ...)
{
    char msg[200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return status_fail(err, STATUS_DATA_LOSS, "%s: %s", what, msg);
}

/* ---- the header's dict literal ------------------------------------------------------------ */

typedef struct cursor {
    const char *p, *end;
} cursor_t;

static void skip_space(cursor_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

static bool take(cursor_t *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string (single or double quotes, no escapes) into out[0..len). */
static bool string(cursor_t *c, char *out, size_t len)
{
    char q;
    size_t n = 0;

    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return false;
    q = *c->p++;
    while (c->p < c->end && *c->p != q && *c->p != '\\') {
        if (n + 1 < len)
            out[n++] = *c->p;
        c->p++;
    }
    out[n] = '\0';
    return c->p < c->end && *c->p++ == q;
}

static bool word(cursor_t *c, const char *w)
{
    size_t n = strlen(w);

    skip_space(c);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

/* (d0, d1, ...) with an optional trailing comma; () is a scalar. */
static bool shape(cursor_t *c, npy_header_t *h)
{
    if (!take(c, '('))
        return false;
    h->rank = 0;
    for (;;) {
        uint64_t v = 0;
        int digits = 0;
        skip_space(c);
        if (take(c, ')'))
            return true;
        if (h->rank == NPY_MAX_RANK)
            return false;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (UINT64_MAX - 9) / 10)
                return false;
            v = v * 10 + (uint64_t)(*c->p++ - '0');
            digits++;
        }
        if (digits == 0)
            return false;
        h->shape[h->rank++] = v;
        if (take(c, ','))
            continue;
        return take(c, ')');
    }
}

static status_t dtype(const char *descr, npy_header_t *h, const char *what, status_msg_t *err)
{
    static const struct {
        const char *descr;
        npy_dtype_t dtype;
        size_t size;
    } known[] = {
        {"<f4", NPY_F4, 4}, {"<f8", NPY_F8, 8}, {"|u1", NPY_U1, 1},
        {"<u1", NPY_U1, 1}, {"<i4", NPY_I4, 4}, {"<i8", NPY_I8, 8},
    };

    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(descr, known[i].descr) == 0) {
            h->dtype = known[i].dtype;
            h->itemsize = known[i].size;
            return STATUS_OK;
        }
    return bad(err, what,
               "dtype '%.20s' is not one Tessera reads (float32, float64, uint8, int32, int64, "
               "little-endian: '<f4', '<f8', '|u1', '<i4', '<i8')",
               descr);
}

static status_t parse_dict(cursor_t *c, const char *what, npy_header_t *h, status_msg_t *err)
{
    bool seen[3] = {false, false, false};
    char key[32], descr[32];

    if (!take(c, '{'))
        return bad(err, what, "the header is not a dict");
    while (!take(c, '}')) {
        if (!string(c, key, sizeof(key)) || !take(c, ':'))
            return bad(err, what, "the header's dict does not parse");
        if (strcmp(key, "descr") == 0 && !seen[0]) {
            if (!string(c, descr, sizeof(descr)))
                return bad(err, what, "descr is not a string");
            STATUS_CHECK(dtype(descr, h, what, err));
            seen[0] = true;
        } else if (strcmp(key, "fortran_order") == 0 && !seen[1]) {
            if (word(c, "True"))
                return bad(err, what, "the array is in Fortran order; save it in C order");
            if (!word(c, "False"))
                return bad(err, what, "fortran_order is neither True nor False");
            seen[1] = true;
        } else if (strcmp(key, "shape") == 0 && !seen[2]) {
            if (!shape(c, h))
                return bad(err, what, "shape is not a tuple of at most %d sizes", NPY_MAX_RANK);
            seen[2] = true;
        } else {
            return bad(err, what, "the header has key '%.20s' twice or one NumPy does not write",
                       key);
        }
        if (!take(c, ',')) {
            if (!take(c, '}'))
                return bad(err, what, "the header's dict does not parse");
            break;
        }
    }
    if (!seen[0] || !seen[1] || !seen[2])
        return bad(err, what, "the header lacks descr, fortran_order or shape");
    skip_space(c);
    if (c->p != c->end)
        return bad(err, what, "the header holds more than its dict");
    return STATUS_OK;
}

status_t npy_parse(const uint8_t *buf, size_t len, uint64_t file_len, const char *what,
                   npy_header_t *h, status_msg_t *err)
{
    size_t prefix, hlen;
    uint64_t bytes;
    cursor_t c;

    memset(h, 0, sizeof(*h));
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return bad(err, what, "not a .npy file (no \\x93NUMPY magic)");
    if (buf[6] == 1) {
        prefix = 10;
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
    } else if ((buf[6] == 2 || buf[6] == 3) && len >= 12) {
        prefix = 12;
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    } else {
        return bad(err, what, "format version %u.%u is not 1.0, 2.0 or 3.0", buf[6], buf[7]);
    }
    if (hlen > NPY_MAX_HEADER || prefix + hlen > len || prefix + hlen > file_len)
        return bad(err, what, "a header of %zu bytes is over the limit or past the end", hlen);
    if (hlen == 0 || buf[prefix + hlen - 1] != '\n')
        return bad(err, what, "the header does not end with a newline");
    c = (cursor_t){(const char *)buf + prefix, (const char *)buf + prefix + hlen - 1};
    STATUS_CHECK(parse_dict(&c, what, h, err));
    h->count = 1;
    for (int i = 0; i < h->rank; i++) {
        if (h->shape[i] != 0 && h->count > UINT64_MAX / h->itemsize / h->shape[i])
            return bad(err, what, "its shape overflows");
        h->count *= h->shape[i];
    }
    h->data_offset = prefix + hlen;
    bytes = h->count * h->itemsize;
    if (file_len - h->data_offset != bytes)
        return bad(err, what, "the shape needs %llu bytes of data but the file holds %llu",
                   (unsigned long long)bytes, (unsigned long long)(file_len - h->data_offset));
    return STATUS_OK;
}

void npy_to_float(const npy_header_t *h, const void *data, float *out, size_t n, double scale)
{
    const uint8_t *p = data;

    /* memcpy per element: the data need not be aligned (an .npz member, a v1 header) */
    for (size_t i = 0; i < n; i++, p += h->itemsize) {
        double v;
        switch (h->dtype) {
        case NPY_F4: {
            float f;
            memcpy(&f, p, 4);
            v = f;
            break;
        }
        case NPY_F8:
            memcpy(&v, p, 8);
            break;
        case NPY_U1:
            v = *p;
            break;
        case NPY_I4: {
            int32_t x;
            memcpy(&x, p, 4);
            v = x;
            break;
        }
        default: {
            int64_t x;
            memcpy(&x, p, 8);
            v = (double)x;
            break;
        }
        }
        out[i] = (float)(v * scale);
    }
}

/* ---- files -------------------------------------------------------------------------------- */

status_t npy_load(const char *path, npy_array_t *a, status_msg_t *err)
{
    struct stat sb;
    int fd;
    status_t rc;

    memset(a, 0, sizeof(*a));
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return status_fail(err, errno == ENOENT ? STATUS_NOT_FOUND : STATUS_IO,
                           "cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 10) {
        close(fd);
        return bad(err, path, "not a .npy file (too short, or not a regular file)");
    }
    a->base_len = (size_t)sb.st_size;
    a->base = mmap(NULL, a->base_len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (a->base == MAP_FAILED) {
        a->base = NULL;
        return status_fail(err, STATUS_IO, "cannot map %s: %s", path, strerror(errno));
    }
    a->mapped = 1;
    rc = npy_parse(a->base, a->base_len, a->base_len, path, &a->h, err);
    if (rc != STATUS_OK) {
        npy_release(a);
        return rc;
    }
    a->data = (const uint8_t *)a->base + a->h.data_offset;
    return STATUS_OK;
}

status_t npz_load(const char *path, const char *name, uint64_t max_bytes, npy_array_t *a,
                  status_msg_t *err)
{
    char member[300], what[700];
    int zerr = 0;
    zip_t *z;
    zip_stat_t st;
    zip_file_t *zf = NULL;
    status_t rc = STATUS_OK;

    memset(a, 0, sizeof(*a));
    snprintf(member, sizeof(member), "%s%s", name,
             strlen(name) > 4 && strcmp(name + strlen(name) - 4, ".npy") == 0 ? "" : ".npy");
    snprintf(what, sizeof(what), "%s:%s", path, member);
    if ((z = zip_open(path, ZIP_RDONLY, &zerr)) == NULL)
        return zerr == ZIP_ER_NOENT || zerr == ZIP_ER_OPEN
                   ? status_fail(err, STATUS_NOT_FOUND, "cannot open %s", path)
                   : bad(err, path, "not an .npz (zip) archive");
    if (zip_stat(z, member, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
        zip_discard(z);
        return bad(err, path, "no member %s in the archive", member);
    }
    if (max_bytes > 0 && st.size > max_bytes) {
        zip_discard(z);
        return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                           "%s: %llu bytes pass the memory limit of %llu bytes", what,
                           (unsigned long long)st.size, (unsigned long long)max_bytes);
    }
    a->base_len = (size_t)st.size;
    if ((a->base = malloc(a->base_len + 1)) == NULL)
        rc = status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", what);
    else if ((zf = zip_fopen(z, member, 0)) == NULL ||
             zip_fread(zf, a->base, st.size) != (zip_int64_t)st.size)
        rc = bad(err, what, "cannot be read from the archive (corrupt?)");
    if (zf != NULL)
        zip_fclose(zf);
    zip_discard(z);
    if (rc == STATUS_OK)
        rc = npy_parse(a->base, a->base_len, a->base_len, what, &a->h, err);
    if (rc != STATUS_OK) {
        npy_release(a);
        return rc;
    }
    a->data = (const uint8_t *)a->base + a->h.data_offset;
    return STATUS_OK;
}

void npy_release(npy_array_t *a)
{
    if (a == NULL || a->base == NULL)
        return;
    if (a->mapped)
        munmap(a->base, a->base_len);
    else
        free(a->base);
    memset(a, 0, sizeof(*a));
}
