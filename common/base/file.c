#define _POSIX_C_SOURCE 200809L
#include "base/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

status_t file_read_all(const char *path, const char *what, size_t max, char **ret_text,
                       size_t *ret_len, status_msg_t *err)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0;
    int saved;

    if (f == NULL) {
        saved = errno;
        return status_fail(err, status_from_errno(saved), "cannot read %s '%s': %s", what, path,
                           strerror(saved));
    }
    for (;;) {
        size_t got;
        if (len + 1 >= cap) {
            /* Grow by doubling, but never past max + 2: one byte beyond max shows it is too big,
             * one more holds the terminator. */
            size_t want = cap == 0 ? 8192 : cap * 2;
            char *grown;
            if (want > max + 2)
                want = max + 2;
            grown = want > cap ? realloc(text, want) : NULL;
            if (grown == NULL) {
                fclose(f);
                free(text);
                if (want > cap)
                    return status_fail(err, STATUS_NO_MEMORY, "cannot read %s '%s': out of memory",
                                       what, path);
                return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                                   "%s '%s' is larger than %zu bytes", what, path, max);
            }
            text = grown;
            cap = want;
        }
        got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    saved = ferror(f) ? errno : 0;
    fclose(f);
    if (saved != 0) {
        free(text);
        return status_fail(err, STATUS_IO, "cannot read %s '%s': %s", what, path, strerror(saved));
    }
    text[len] = '\0';
    *ret_text = text;
    *ret_len = len;
    return STATUS_OK;
}
