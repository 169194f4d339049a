/* The directories a daemon may read and write jobs' files under (base/roots.h). */
#define _GNU_SOURCE
#include "base/roots.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

status_t roots_init(roots_t *r, const char *owner, char *const *dirs, size_t n, status_msg_t *err)
{
    memset(r, 0, sizeof(*r));
    r->owner = owner;
    if (n == 0)
        return STATUS_OK;
    r->dirs = calloc(n, sizeof(*r->dirs));
    if (r->dirs == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        char *real = realpath(dirs[i], NULL);
        if (real == NULL || stat(real, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            int e = real == NULL ? errno : ENOTDIR;
            free(real);
            roots_done(r);
            return status_fail(err, STATUS_BAD_CONFIG, "--data-root %s: %s", dirs[i], strerror(e));
        }
        r->dirs[r->n++] = real;
    }
    return STATUS_OK;
}

void roots_done(roots_t *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->dirs[i]);
    free(r->dirs);
    r->dirs = NULL;
    r->n = 0;
}

/* path resolved: realpath of the longest existing prefix, then the components that do not
 * exist yet, which may not be "..". NULL (errno set) when that fails. */
static char *resolve(const char *path)
{
    char *copy = strdup(path), *cut, *real, *out;
    size_t rest_at;

    if (copy == NULL)
        return NULL;
    for (;;) {
        real = realpath(copy, NULL);
        if (real != NULL || errno != ENOENT)
            break;
        cut = strrchr(copy, '/');
        if (cut == NULL || cut == copy) { /* nothing of it exists, not even its first directory */
            free(copy);
            errno = ENOENT;
            return NULL;
        }
        *cut = '\0';
    }
    if (real == NULL) {
        free(copy);
        return NULL;
    }
    rest_at = strlen(copy);
    free(copy);
    for (const char *p = path + rest_at; *p != '\0';) { /* the part that does not exist */
        p += strspn(p, "/");
        size_t len = strcspn(p, "/");
        if (len == 2 && p[0] == '.' && p[1] == '.') {
            free(real);
            errno = EXDEV; /* marks a ".." below what exists */
            return NULL;
        }
        p += len;
    }
    if (asprintf(&out, "%s%s", real, path + rest_at) < 0)
        out = NULL;
    free(real);
    return out;
}

static bool below(const char *dir, const char *path)
{
    size_t n = strlen(dir);

    if (strcmp(dir, "/") == 0)
        return true;
    return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

status_t roots_check(const roots_t *r, const char *what, const char *path, status_msg_t *err)
{
    char *real;
    bool inside = false;

    if (path == NULL)
        return STATUS_OK;
    if (r->n == 0)
        return status_fail(err, STATUS_PERMISSION_DENIED,
                           "%s %s: %s reads and writes no files named by jobs (start it with "
                           "--data-root DIR for the directories jobs may use)",
                           what, path, r->owner);
    if (path[0] != '/')
        return status_fail(err, STATUS_PERMISSION_DENIED, "%s %s: must be an absolute path on %s",
                           what, path, r->owner);
    real = resolve(path);
    for (size_t i = 0; real != NULL && i < r->n && !inside; i++)
        inside = below(r->dirs[i], real);
    if (!inside) {
        char via[PATH_MAX + 32] = "";
        if (real != NULL && strcmp(real, path) != 0)
            snprintf(via, sizeof(via), " (it resolves to %s)", real);
        else if (real == NULL && errno == EXDEV)
            snprintf(via, sizeof(via), " (\"..\" below what exists)");
        status_fail(err, STATUS_PERMISSION_DENIED,
                    "%s %s%s is outside the directories %s may use (--data-root %s%s)", what, path,
                    via, r->owner, r->dirs[0], r->n > 1 ? " and others" : "");
    }
    free(real);
    return inside ? STATUS_OK : STATUS_PERMISSION_DENIED;
}
