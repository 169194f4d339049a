/* Whole files read into memory: job files, Keras JSON, cluster specs. */
#ifndef TESSERA_FILE_H
#define TESSERA_FILE_H

#include <stddef.h>

#include "base/status.h"

/* Reads the file at `path` into *ret_text (NUL-terminated; free it) and its length into
 * *ret_len. Reads by streaming, so pipes and /proc files work. A file of more than max bytes is
 * refused with STATUS_RESOURCE_EXHAUSTED before more than max + 1 bytes are held; messages name
 * it as "WHAT 'PATH'". */
status_t file_read_all(const char *path, const char *what, size_t max, char **ret_text,
                       size_t *ret_len, status_msg_t *err);

#endif
