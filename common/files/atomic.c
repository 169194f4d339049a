#define _GNU_SOURCE /* sync_file_range */
#include "files/atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_uint tmp_counter;

/* "DIR/.NAME.tmp-PID-N" for "DIR/NAME": hidden, and unique among this process's writers. */
static char *tmp_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    size_t len = strlen(path) + 64;
    char *tmp = malloc(len);

    if (tmp != NULL)
        snprintf(tmp, len, "%.*s.%s.tmp-%ld-%u", (int)dir_len, path, path + dir_len, (long)getpid(),
                 atomic_fetch_add(&tmp_counter, 1));
    return tmp;
}

status_t atomic_file_open(const char *path, atomic_file_t *f, status_msg_t *err)
{
    memset(f, 0, sizeof(*f));
    f->fd = -1;
    f->path = strdup(path);
    f->tmp = tmp_name(path);
    if (f->path == NULL || f->tmp == NULL) {
        atomic_file_abort(f);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        int e = errno;
        atomic_file_abort(f);
        return status_fail(err, STATUS_IO, "cannot create %s: %s", path, strerror(e));
    }
    return STATUS_OK;
}

/* ---- writing: direct I/O through a staging buffer, or the page cache ---------------------- */

/* Big files skip the page cache: copied into an aligned buffer and written with O_DIRECT, a
 * checkpoint goes out at the disk's own speed (buffered writes and fsync reach a third of it
 * on the machines measured, bench/files). Filesystems without O_DIRECT (tmpfs) take the
 * buffered path. */
#define STAGE_BYTES  (8u << 20)
#define DIRECT_ALIGN 4096u

void atomic_file_stream(atomic_file_t *f)
{
    int flags = fcntl(f->fd, F_GETFL);

    if (f->written > 0 || f->stage != NULL || flags < 0 ||
        fcntl(f->fd, F_SETFL, flags | O_DIRECT) != 0)
        return; /* buffered, then */
    f->stage = aligned_alloc(DIRECT_ALIGN, STAGE_BYTES);
    if (f->stage == NULL)
        fcntl(f->fd, F_SETFL, flags);
}

static status_t write_all(atomic_file_t *f, const void *data, size_t len, status_msg_t *err)
{
    const char *p = data;

    while (len > 0) {
        ssize_t n = write(f->fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return status_fail(err, STATUS_IO, "cannot write %s after %llu bytes: %s", f->path,
                               (unsigned long long)(f->written - len),
                               n == 0 ? "no progress" : strerror(errno));
        p += n;
        len -= (size_t)n;
    }
    return STATUS_OK;
}

/* Leaves direct I/O for the rest of the file (a filesystem that refused it, or the tail). */
static void end_direct(atomic_file_t *f)
{
    int flags = fcntl(f->fd, F_GETFL);

    if (flags >= 0)
        fcntl(f->fd, F_SETFL, flags & ~O_DIRECT);
}

/* Writes the staged bytes: the whole blocks directly; with `last`, the rest through the cache. */
static status_t flush_stage(atomic_file_t *f, bool last, status_msg_t *err)
{
    size_t whole = f->staged / DIRECT_ALIGN * DIRECT_ALIGN;
    ssize_t n;

    if (whole > 0) {
        while ((n = write(f->fd, f->stage, whole)) < 0 && errno == EINTR)
            ;
        if (n < 0 && errno == EINVAL) { /* no O_DIRECT here after all */
            end_direct(f);
            n = -2;
        }
        if (n == -2)
            STATUS_CHECK(write_all(f, f->stage, whole, err));
        else if (n != (ssize_t)whole)
            return status_fail(err, STATUS_IO, "cannot write %s: %s", f->path,
                               n < 0 ? strerror(errno) : "a short write");
    }
    memmove(f->stage, f->stage + whole, f->staged - whole);
    f->staged -= whole;
    if (last && f->staged > 0) {
        end_direct(f);
        STATUS_CHECK(write_all(f, f->stage, f->staged, err));
        f->staged = 0;
    }
    return STATUS_OK;
}

/* On the buffered path, writeback starts every WRITEBACK_CHUNK bytes and the chunk before the
 * last is waited for, so that fsync does not find the whole file dirty at the end. */
#define WRITEBACK_CHUNK (8u << 20)

static void stream_out(atomic_file_t *f)
{
    uint64_t end = f->written / WRITEBACK_CHUNK * WRITEBACK_CHUNK;

    if (end <= f->flushed)
        return;
    sync_file_range(f->fd, (off_t)f->flushed, (off_t)(end - f->flushed), SYNC_FILE_RANGE_WRITE);
    if (f->flushed >= WRITEBACK_CHUNK)
        sync_file_range(f->fd, (off_t)(f->flushed - WRITEBACK_CHUNK), WRITEBACK_CHUNK,
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                            SYNC_FILE_RANGE_WAIT_AFTER);
    f->flushed = end;
}

status_t atomic_file_write(atomic_file_t *f, const void *data, size_t len, status_msg_t *err)
{
    const char *p = data;

    if (f->stage == NULL) {
        for (size_t done = 0; done < len; done += WRITEBACK_CHUNK) {
            size_t chunk = len - done < WRITEBACK_CHUNK ? len - done : WRITEBACK_CHUNK;
            f->written += chunk;
            STATUS_CHECK(write_all(f, p + done, chunk, err));
            stream_out(f);
        }
        return STATUS_OK;
    }
    while (len > 0) {
        size_t room = STAGE_BYTES - f->staged, n = len < room ? len : room;
        memcpy(f->stage + f->staged, p, n);
        f->staged += n;
        f->written += n;
        p += n;
        len -= n;
        if (f->staged == STAGE_BYTES)
            STATUS_CHECK(flush_stage(f, false, err));
    }
    return STATUS_OK;
}

status_t atomic_file_commit(atomic_file_t *f, status_msg_t *err)
{
    status_t rc = f->stage != NULL ? flush_stage(f, true, err) : STATUS_OK;

    if (rc == STATUS_OK && fsync(f->fd) != 0)
        rc =
            status_fail(err, STATUS_IO, "cannot sync %s to the disk: %s", f->path, strerror(errno));
    if (close(f->fd) != 0 && rc == STATUS_OK)
        rc = status_fail(err, STATUS_IO, "cannot write %s: %s", f->path, strerror(errno));
    f->fd = -1;
    if (rc == STATUS_OK && rename(f->tmp, f->path) != 0)
        rc = status_fail(err, STATUS_IO, "cannot rename %s to %s: %s", f->tmp, f->path,
                         strerror(errno));
    if (rc == STATUS_OK) {
        free(f->tmp);
        f->tmp = NULL; /* nothing left to remove */
    }
    atomic_file_abort(f);
    return rc;
}

void atomic_file_abort(atomic_file_t *f)
{
    if (f == NULL)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp != NULL)
        unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    free(f->stage);
    f->fd = -1;
    f->tmp = f->path = NULL;
    f->stage = NULL;
}

/* The directory part of path ("." when there is none); free it. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');

    if (slash == NULL)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

status_t atomic_file_put(const char *path, const void *data, size_t len, status_msg_t *err)
{
    atomic_file_t f;
    char *dir;
    status_t rc;

    STATUS_CHECK(atomic_file_open(path, &f, err));
    rc = atomic_file_write(&f, data, len, err);
    if (rc != STATUS_OK) {
        atomic_file_abort(&f);
        return rc;
    }
    STATUS_CHECK(atomic_file_commit(&f, err));
    if ((dir = dir_of(path)) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    rc = files_fsync_dir(dir, err);
    free(dir);
    return rc;
}

status_t files_fsync_dir(const char *dir, status_msg_t *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    status_t rc = STATUS_OK;

    if (fd < 0)
        return status_fail(err, STATUS_IO, "cannot open the directory %s: %s", dir,
                           strerror(errno));
    if (fsync(fd) != 0)
        rc = status_fail(err, STATUS_IO, "cannot sync the directory %s: %s", dir, strerror(errno));
    close(fd);
    return rc;
}

status_t files_mkdirs(const char *dir, status_msg_t *err)
{
    char *p = strdup(dir);
    status_t rc = STATUS_OK;

    if (p == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (char *s = p + (p[0] != '\0');; s++) {
        char c = *s;
        if (c != '/' && c != '\0')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            rc = status_fail(err, STATUS_IO, "cannot create the directory %s: %s", p,
                             strerror(errno));
            break;
        }
        *s = c;
        if (c == '\0')
            break;
    }
    free(p);
    return rc;
}

status_t files_mkdirs_for(const char *path, status_msg_t *err)
{
    char *dir = dir_of(path);
    status_t rc;

    if (dir == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    rc = files_mkdirs(dir, err);
    free(dir);
    return rc;
}
