#define _POSIX_C_SOURCE 200809L
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

status_t atomic_file_write(atomic_file_t *f, const void *data, size_t len, status_msg_t *err)
{
    const char *p = data;

    while (len > 0) {
        ssize_t n = write(f->fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return status_fail(err, STATUS_IO, "cannot write %s after %llu bytes: %s", f->path,
                               (unsigned long long)f->written,
                               n == 0 ? "no progress" : strerror(errno));
        p += n;
        len -= (size_t)n;
        f->written += (uint64_t)n;
    }
    return STATUS_OK;
}

status_t atomic_file_commit(atomic_file_t *f, status_msg_t *err)
{
    status_t rc = STATUS_OK;

    if (fsync(f->fd) != 0)
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
    f->fd = -1;
    f->tmp = f->path = NULL;
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
