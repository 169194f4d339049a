#define _GNU_SOURCE
#include "files/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "files/atomic.h"

struct journal {
    char *path;
    int fd, lock_fd;
    uint64_t size;
    bool broken; /* a failed append could not be undone: no more appends */
};

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

status_t journal_scan(const uint8_t *buf, size_t len, const char *name, journal_record_fn fn,
                      void *arg, size_t *ret_valid, status_msg_t *err)
{
    size_t off = JOURNAL_HEADER_LEN;

    *ret_valid = 0;
    if (len < JOURNAL_HEADER_LEN) { /* empty, or a header cut by a crash */
        if (memcmp(buf, JOURNAL_MAGIC, len) == 0)
            return STATUS_OK;
        return status_fail(err, STATUS_DATA_LOSS, "%s is not a Tessera journal", name);
    }
    if (memcmp(buf, JOURNAL_MAGIC, JOURNAL_HEADER_LEN) != 0)
        return status_fail(err, STATUS_DATA_LOSS,
                           "%s is not a Tessera journal (its first 8 bytes are not \"TSJRNL\")",
                           name);
    while (off < len) {
        uint32_t rl, crc;
        if (len - off < 8)
            break; /* a cut record header: the tail of an interrupted append */
        rl = le32(buf + off);
        crc = crc32c_unmask(le32(buf + off + 4));
        if (rl > len - off - 8)
            break; /* runs past the end: an interrupted append */
        if (crc32c(buf + off + 8, rl) != crc) {
            if (off + 8 + rl == len)
                break; /* the last record, half written */
            return status_fail(err, STATUS_DATA_LOSS,
                               "%s: the record at byte %zu is damaged (its checksum does not "
                               "match) and more follow it: move the file away to start without it",
                               name, off);
        }
        if (rl > JOURNAL_MAX_RECORD)
            return status_fail(err, STATUS_DATA_LOSS,
                               "%s: the record at byte %zu is %u bytes, more than a journal's "
                               "records can be",
                               name, off, rl);
        STATUS_CHECK(fn(arg, buf + off + 8, rl, err));
        off += 8 + (size_t)rl;
    }
    *ret_valid = off;
    return STATUS_OK;
}

static status_t read_all(int fd, const char *path, uint8_t **ret, size_t *ret_len,
                         status_msg_t *err)
{
    struct stat st;
    uint8_t *buf;
    size_t got = 0;

    *ret = NULL;
    *ret_len = 0;
    if (fstat(fd, &st) != 0)
        return status_fail(err, STATUS_IO, "cannot read %s: %s", path, strerror(errno));
    if ((buf = malloc((size_t)st.st_size + 1)) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "no memory to read %s (%lld bytes)", path,
                           (long long)st.st_size);
    while (got < (size_t)st.st_size) {
        ssize_t n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            free(buf);
            return status_fail(err, STATUS_IO, "cannot read %s: %s", path, strerror(e));
        }
        got += (size_t)n;
    }
    *ret = buf;
    *ret_len = got;
    return STATUS_OK;
}

static status_t write_all(int fd, const void *data, size_t len, const char *path, status_msg_t *err)
{
    const uint8_t *p = data;

    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return status_fail(err, STATUS_IO, "cannot write %s: %s", path, strerror(errno));
        p += n;
        len -= (size_t)n;
    }
    return STATUS_OK;
}

static status_t lock_journal(journal_t *j, status_msg_t *err)
{
    size_t n = strlen(j->path) + sizeof(".lock");
    char *lock = malloc(n);

    if (lock == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    snprintf(lock, n, "%s.lock", j->path);
    j->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (j->lock_fd < 0) {
        status_fail(err, STATUS_IO, "cannot create %s: %s", lock, strerror(errno));
        free(lock);
        return err->status;
    }
    free(lock);
    if (flock(j->lock_fd, LOCK_EX | LOCK_NB) != 0)
        return status_fail(err, errno == EWOULDBLOCK ? STATUS_UNAVAILABLE : STATUS_IO,
                           "%s is in use by another process (a second chief on the same "
                           "--state-dir?)",
                           j->path);
    return STATUS_OK;
}

/* Cuts a torn tail off (or writes the header of a new journal) and makes that durable. */
static status_t repair(journal_t *j, size_t valid, size_t len, status_msg_t *err)
{
    if (valid == len && len >= JOURNAL_HEADER_LEN)
        return STATUS_OK;
    if (ftruncate(j->fd, (off_t)valid) != 0)
        return status_fail(err, STATUS_IO, "cannot truncate %s: %s", j->path, strerror(errno));
    if (valid < JOURNAL_HEADER_LEN) {
        if (lseek(j->fd, 0, SEEK_SET) != 0 || ftruncate(j->fd, 0) != 0)
            return status_fail(err, STATUS_IO, "cannot write %s: %s", j->path, strerror(errno));
        STATUS_CHECK(write_all(j->fd, JOURNAL_MAGIC, JOURNAL_HEADER_LEN, j->path, err));
        valid = JOURNAL_HEADER_LEN;
    }
    if (fsync(j->fd) != 0)
        return status_fail(err, STATUS_IO, "cannot sync %s: %s", j->path, strerror(errno));
    j->size = valid;
    return STATUS_OK;
}

status_t journal_open(const char *path, journal_record_fn fn, void *arg, journal_t **ret,
                      uint64_t *ret_dropped, status_msg_t *err)
{
    journal_t *j = calloc(1, sizeof(*j));
    uint8_t *buf = NULL;
    size_t len = 0, valid = 0;
    status_t rc;

    *ret = NULL;
    *ret_dropped = 0;
    if (j == NULL || (j->path = strdup(path)) == NULL) {
        free(j);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    j->fd = j->lock_fd = -1;
    rc = files_mkdirs_for(path, err);
    if (rc == STATUS_OK)
        rc = lock_journal(j, err);
    if (rc == STATUS_OK && (j->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
        rc = status_fail(err, STATUS_IO, "cannot open %s: %s", path, strerror(errno));
    if (rc == STATUS_OK)
        rc = read_all(j->fd, path, &buf, &len, err);
    if (rc == STATUS_OK)
        rc = journal_scan(buf, len, path, fn, arg, &valid, err);
    free(buf);
    j->size = len;
    if (rc == STATUS_OK)
        rc = repair(j, valid, len, err);
    if (rc == STATUS_OK && lseek(j->fd, (off_t)j->size, SEEK_SET) < 0)
        rc = status_fail(err, STATUS_IO, "cannot seek in %s: %s", path, strerror(errno));
    if (rc != STATUS_OK) {
        journal_close(j);
        return rc;
    }
    *ret_dropped = len > valid && valid >= JOURNAL_HEADER_LEN ? len - valid : 0;
    *ret = j;
    return STATUS_OK;
}

void journal_frame(pb_buf_t *out, const void *rec, size_t len)
{
    uint8_t head[8];

    put_le32(head, (uint32_t)len);
    put_le32(head + 4, crc32c_mask(crc32c(rec, len)));
    pb_put_raw(out, head, sizeof(head));
    pb_put_raw(out, rec, len);
}

status_t journal_append(journal_t *j, const void *rec, size_t len, status_msg_t *err)
{
    pb_buf_t b = {0};
    status_t rc;

    if (j->broken)
        return status_fail(err, STATUS_IO,
                           "%s cannot be written since an earlier write failed half-way", j->path);
    if (len > JOURNAL_MAX_RECORD)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "a record of %zu bytes is more than %s may hold", len, j->path);
    journal_frame(&b, rec, len);
    if (b.failed) {
        pb_buf_free(&b);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    rc = write_all(j->fd, b.data, b.len, j->path, err);
    if (rc == STATUS_OK && fdatasync(j->fd) != 0)
        rc = status_fail(err, STATUS_IO, "cannot sync %s: %s", j->path, strerror(errno));
    if (rc == STATUS_OK) {
        j->size += b.len;
    } else if (ftruncate(j->fd, (off_t)j->size) != 0 ||
               lseek(j->fd, (off_t)j->size, SEEK_SET) < 0) {
        j->broken = true; /* a half record in the middle would stop the next start */
    }
    pb_buf_free(&b);
    return rc;
}

status_t journal_replace(journal_t *j, const pb_buf_t *records, status_msg_t *err)
{
    pb_buf_t b = {0};
    int fd;
    status_t rc;

    pb_put_raw(&b, JOURNAL_MAGIC, JOURNAL_HEADER_LEN);
    pb_put_raw(&b, records->data, records->len);
    if (b.failed || records->failed) {
        pb_buf_free(&b);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    rc = atomic_file_put(j->path, b.data, b.len, err);
    if (rc == STATUS_OK && (fd = open(j->path, O_RDWR | O_CLOEXEC)) < 0)
        rc = status_fail(err, STATUS_IO, "cannot open %s: %s", j->path, strerror(errno));
    if (rc == STATUS_OK) {
        close(j->fd);
        j->fd = fd;
        j->size = b.len;
        j->broken = false;
        if (lseek(fd, (off_t)j->size, SEEK_SET) < 0)
            rc = status_fail(err, STATUS_IO, "cannot seek in %s: %s", j->path, strerror(errno));
    }
    pb_buf_free(&b);
    return rc;
}

uint64_t journal_size(const journal_t *j)
{
    return j->size;
}

const char *journal_path(const journal_t *j)
{
    return j->path;
}

void journal_close(journal_t *j)
{
    if (j == NULL)
        return;
    if (j->fd >= 0)
        close(j->fd);
    if (j->lock_fd >= 0)
        close(j->lock_fd); /* releases the lock */
    free(j->path);
    free(j);
}
