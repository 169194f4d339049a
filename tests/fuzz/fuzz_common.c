/* Helpers shared by the libFuzzer targets (fuzz_common.h). */
#define _GNU_SOURCE
#include "fuzz_common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"

static bool verbose;

void fuzz_quiet_logs(void)
{
    const char *want = getenv("TESSERA_FUZZ_LOG_LEVEL");
    log_level_t level = LOG_LEVEL_ERR;

    verbose = getenv("TESSERA_FUZZ_VERBOSE") != NULL;
    if (want != NULL && log_level_parse(want, &level) != STATUS_OK)
        level = LOG_LEVEL_ERR;
    log_set_level(level);
}

bool fuzz_verbose(void)
{
    return verbose;
}

size_t fuzz_split(const uint8_t *data, size_t size, const char *sep, fuzz_part_t *ret_parts,
                  size_t max)
{
    size_t seplen = strlen(sep), n = 0;

    while (n + 1 < max) {
        const uint8_t *at = size > 0 ? memmem(data, size, sep, seplen) : NULL;
        if (at == NULL)
            break;
        ret_parts[n++] = (fuzz_part_t){data, (size_t)(at - data)};
        size -= (size_t)(at - data) + seplen;
        data = at + seplen;
    }
    ret_parts[n++] = (fuzz_part_t){data, size};
    return n;
}

char *fuzz_copy(const void *data, size_t len)
{
    char *p = malloc(len ? len : 1);

    if (p == NULL)
        abort();
    if (len > 0)
        memcpy(p, data, len);
    return p;
}

char *fuzz_strndup(const void *data, size_t len)
{
    char *p = malloc(len + 1);

    if (p == NULL)
        abort();
    if (len > 0)
        memcpy(p, data, len);
    p[len] = '\0';
    return p;
}

void fuzz_file_open(fuzz_file_t *f, const char *name)
{
    f->fd = memfd_create(name, MFD_CLOEXEC);
    if (f->fd < 0) {
        perror("fuzz: memfd_create");
        abort();
    }
    snprintf(f->path, sizeof(f->path), "/proc/self/fd/%d", f->fd);
}

void fuzz_file_set(fuzz_file_t *f, const void *data, size_t len)
{
    const char *p = data;

    if (ftruncate(f->fd, 0) != 0) {
        perror("fuzz: ftruncate");
        abort();
    }
    for (size_t done = 0; done < len;) {
        ssize_t n = pwrite(f->fd, p + done, len - done, (off_t)done);
        if (n <= 0) {
            perror("fuzz: pwrite");
            abort();
        }
        done += (size_t)n;
    }
}

/* ---- fopen and open, blocked on demand (linked with -Wl,--wrap=fopen,...) ---- */

static _Atomic bool files_blocked;

FILE *__real_fopen(const char *path, const char *mode);
FILE *__real_fopen64(const char *path, const char *mode);

void fuzz_block_files(bool blocked)
{
    files_blocked = blocked;
}

/* Only reads are refused: libFuzzer writes a crash's input with fopen, maybe while blocked (a
 * crash inside the job parser), and the decoders under test never write. */
static bool refused(bool reading)
{
    if (files_blocked && reading) {
        errno = ENOENT;
        return true;
    }
    return false;
}

FILE *__wrap_fopen(const char *path, const char *mode)
{
    return refused(mode[0] == 'r') ? NULL : __real_fopen(path, mode);
}

FILE *__wrap_fopen64(const char *path, const char *mode)
{
    return refused(mode[0] == 'r') ? NULL : __real_fopen64(path, mode);
}

int __real_open(const char *path, int flags, ...);
int __real_open64(const char *path, int flags, ...);

/* The mode argument exists only when the flags create a file. */
static mode_t open_mode(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

int __wrap_open(const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;

    if (refused((flags & O_ACCMODE) == O_RDONLY))
        return -1;
    va_start(ap, flags);
    mode = open_mode(flags, ap);
    va_end(ap);
    return __real_open(path, flags, mode);
}

int __wrap_open64(const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;

    if (refused((flags & O_ACCMODE) == O_RDONLY))
        return -1;
    va_start(ap, flags);
    mode = open_mode(flags, ap);
    va_end(ap);
    return __real_open64(path, flags, mode);
}

/* ---- oracles ---- */

void fuzz_fail(const char *target, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "fuzz: %s: ", target);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void fuzz_check_error(const char *what, status_t rc, const status_msg_t *err)
{
    if (verbose)
        fprintf(stderr, "fuzz: %s: %s%s%.*s\n", what, status_name(rc), rc ? ": " : "",
                rc ? (int)sizeof(err->text) : 0, err->text);
    if (rc == STATUS_OK)
        return;
    if (memchr(err->text, '\0', sizeof(err->text)) == NULL)
        fuzz_fail(what, "the error message is not NUL-terminated");
    if (err->text[0] == '\0')
        fuzz_fail(what, "failed with %s but said nothing", status_name(rc));
    if (err->status != rc)
        fuzz_fail(what, "returned %s but the message says %s: %s", status_name(rc),
                  status_name(err->status), err->text);
}
