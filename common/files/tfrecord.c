#define _POSIX_C_SOURCE 200809L
#include "files/tfrecord.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/crc32c.h"

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void tfrecord_header(uint8_t out[12], size_t len)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)len >> (8 * i));
    put_le32(out + 8, crc32c_mask(crc32c(out, 8)));
}

void tfrecord_footer(uint8_t out[4], const void *data, size_t len)
{
    put_le32(out, crc32c_mask(crc32c(data, len)));
}

status_t tfrecord_write(FILE *f, const char *path, const void *data, size_t len, status_msg_t *err)
{
    uint8_t head[12], foot[4];

    tfrecord_header(head, len);
    tfrecord_footer(foot, data, len);
    if (fwrite(head, 1, sizeof(head), f) != sizeof(head) ||
        (len > 0 && fwrite(data, 1, len, f) != len) || fwrite(foot, 1, sizeof(foot), f) != 4)
        return status_fail(err, STATUS_IO, "%s: cannot write: %s", path, strerror(errno));
    return STATUS_OK;
}

struct tfrecord_reader {
    gzFile gz;
    char *path;
    size_t max_record;
    uint64_t offset; /* of the next record */
    uint8_t *buf;
    size_t cap;
};

status_t tfrecord_open(const char *path, size_t max_record, tfrecord_reader_t **ret,
                       status_msg_t *err)
{
    tfrecord_reader_t *r = calloc(1, sizeof(*r));

    *ret = NULL;
    if (r == NULL || (r->path = strdup(path)) == NULL) {
        free(r);
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", path);
    }
    r->max_record = max_record;
    r->gz = gzopen(path, "rb");
    if (r->gz == NULL) {
        int e = errno;
        tfrecord_close(r);
        return status_fail(err, e == ENOENT ? STATUS_NOT_FOUND : STATUS_IO, "%s: cannot open: %s",
                           path, e ? strerror(e) : "out of memory");
    }
    gzbuffer(r->gz, 256 * 1024);
    *ret = r;
    return STATUS_OK;
}

/* Reads exactly len bytes; returns how many it got before the end or an error. */
static size_t read_full(tfrecord_reader_t *r, void *dst, size_t len, int *ret_zerr)
{
    size_t got = 0;

    *ret_zerr = Z_OK;
    while (got < len) {
        unsigned chunk = len - got > (1u << 30) ? (1u << 30) : (unsigned)(len - got);
        int n = gzread(r->gz, (uint8_t *)dst + got, chunk);
        if (n <= 0) {
            if (n < 0)
                (void)gzerror(r->gz, ret_zerr);
            break;
        }
        got += (size_t)n;
    }
    return got;
}

static status_t cut(tfrecord_reader_t *r, int zerr, const char *what, status_msg_t *err)
{
    if (zerr != Z_OK && zerr != Z_BUF_ERROR)
        return status_fail(err, STATUS_DATA_LOSS, "%s: the record at byte %llu: %s (%s)", r->path,
                           (unsigned long long)r->offset, what, gzerror(r->gz, &zerr));
    return status_fail(err, STATUS_DATA_LOSS, "%s: the record at byte %llu is cut short: %s",
                       r->path, (unsigned long long)r->offset, what);
}

/* Reads the payload of len bytes into r->buf. The buffer doubles only when the bytes read so far
 * fill it: a length that claims more than the file holds costs at most twice what arrived. */
static status_t read_payload(tfrecord_reader_t *r, size_t len, status_msg_t *err)
{
    size_t got = 0;
    int zerr;

    while (got < len) {
        size_t want, n;
        if (r->cap <= got) {
            size_t cap = r->cap < 4096 ? 4096 : r->cap * 2;
            uint8_t *p;
            if (cap > len)
                cap = len;
            if ((p = realloc(r->buf, cap)) == NULL)
                return status_fail(err, STATUS_NO_MEMORY,
                                   "%s: the record at byte %llu: out of memory for %zu bytes",
                                   r->path, (unsigned long long)r->offset, cap);
            r->buf = p;
            r->cap = cap;
        }
        want = (len < r->cap ? len : r->cap) - got;
        n = read_full(r, r->buf + got, want, &zerr);
        got += n;
        if (n < want)
            return cut(r, zerr, "the payload ends early", err);
    }
    return STATUS_OK;
}

status_t tfrecord_next(tfrecord_reader_t *r, const uint8_t **ret_data, size_t *ret_len,
                       status_msg_t *err)
{
    uint8_t head[12], foot[4];
    uint64_t len = 0;
    size_t n;
    int zerr;

    *ret_data = NULL;
    *ret_len = 0;
    n = read_full(r, head, sizeof(head), &zerr);
    if (n == 0 && zerr == Z_OK)
        return STATUS_OK; /* the end */
    if (n < sizeof(head))
        return cut(r, zerr, "the 12-byte header ends early", err);
    for (int i = 0; i < 8; i++)
        len |= (uint64_t)head[i] << (8 * i);
    if (crc32c_mask(crc32c(head, 8)) != get_le32(head + 8))
        return status_fail(err, STATUS_DATA_LOSS,
                           "%s: the record at byte %llu: the length's CRC does not match", r->path,
                           (unsigned long long)r->offset);
    if (len > r->max_record)
        return status_fail(err, STATUS_DATA_LOSS,
                           "%s: the record at byte %llu claims %llu bytes, over the limit of %zu",
                           r->path, (unsigned long long)r->offset, (unsigned long long)len,
                           r->max_record);
    STATUS_CHECK(read_payload(r, (size_t)len, err));
    if (read_full(r, foot, sizeof(foot), &zerr) < sizeof(foot))
        return cut(r, zerr, "the payload's CRC ends early", err);
    if (crc32c_mask(crc32c(r->buf, (size_t)len)) != get_le32(foot))
        return status_fail(err, STATUS_DATA_LOSS,
                           "%s: the record at byte %llu: the payload's CRC does not match", r->path,
                           (unsigned long long)r->offset);
    r->offset += 16 + len;
    *ret_data = len ? r->buf : (const uint8_t *)"";
    *ret_len = (size_t)len;
    return STATUS_OK;
}

uint64_t tfrecord_offset(const tfrecord_reader_t *r)
{
    return r->offset;
}

void tfrecord_close(tfrecord_reader_t *r)
{
    if (r == NULL)
        return;
    if (r->gz != NULL)
        gzclose(r->gz);
    free(r->buf);
    free(r->path);
    free(r);
}
