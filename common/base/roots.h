/* Confinement of the files jobs name: the directories (--data-root) under which a daemon may
 * read or write what a job file asks for.
 *
 * A path is inside when it resolves, with every symbolic link followed and every ".." taken,
 * to a root or something below one; a symbolic link that leads out of the roots is outside. A
 * path that does not exist yet (a checkpoint directory to make) is judged by its nearest
 * existing ancestor, the rest holding no "..". The check comes before the file is opened: a
 * process that can change links inside a root between the check and the open can still point
 * it elsewhere, so roots should be writable only by the daemon's own user. */
#ifndef TESSERA_BASE_ROOTS_H
#define TESSERA_BASE_ROOTS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

typedef struct roots {
    char **dirs; /* resolved, no trailing '/' except "/" itself */
    size_t n;
    const char *owner; /* "tessera-worker", for messages */
} roots_t;

/* Resolves each directory (which must exist); none = nothing is inside. Errors name the
 * directory. */
status_t roots_init(roots_t *r, const char *owner, char *const *dirs, size_t n, status_msg_t *err);
void roots_done(roots_t *r);

/* STATUS_OK when path is inside a root; else STATUS_PERMISSION_DENIED with a sentence naming
 * `what` ("checkpoint.dir") and the path (never the file's contents), and how to allow it. */
status_t roots_check(const roots_t *r, const char *what, const char *path, status_msg_t *err);

#endif
