/* Files that appear whole or not at all: written under a temporary name in the same directory,
 * fsynced, then renamed over the final name. A crash at any moment leaves either the old file
 * (or none) or the complete new one, never a part; the temporary is removed on failure, and one
 * left by a killed writer carries the writer's pid (".NAME.tmp-PID-N") and is never read.
 *
 * The rename itself is durable once the directory is fsynced: callers writing several files in
 * one directory fsync it once, after the last (files_fsync_dir). */
#ifndef TESSERA_FILES_ATOMIC_H
#define TESSERA_FILES_ATOMIC_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct atomic_file {
    int fd;
    char *path; /* the final name */
    char *tmp;  /* the name written */
    uint64_t written;
    uint64_t flushed; /* buffered: writeback started up to here */
    char *stage;      /* direct I/O: the staging buffer (NULL: buffered) */
    size_t staged;
} atomic_file_t;

/* Creates the temporary file for path. Errors name path (STATUS_IO). */
status_t atomic_file_open(const char *path, atomic_file_t *f, status_msg_t *err);

/* For a big file, before the first write: writes bypass the page cache (O_DIRECT through a
 * staging buffer) where the filesystem allows it, buffered otherwise. */
void atomic_file_stream(atomic_file_t *f);

/* Appends len bytes; a short write (a full disk) fails naming path and errno's reason. */
status_t atomic_file_write(atomic_file_t *f, const void *data, size_t len, status_msg_t *err);

/* fsync, close and rename over the final name; on failure the temporary is removed. Either way
 * f is done with. */
status_t atomic_file_commit(atomic_file_t *f, status_msg_t *err);

/* Closes and removes the temporary. NULL-safe, and safe on a file already committed. */
void atomic_file_abort(atomic_file_t *f);

/* Writes a whole file atomically, and fsyncs its directory. */
status_t atomic_file_put(const char *path, const void *data, size_t len, status_msg_t *err);

/* fsyncs a directory, making the renames and creations in it durable. */
status_t files_fsync_dir(const char *dir, status_msg_t *err);

/* mkdir -p (mode 0755). Errors name the directory that could not be made. */
status_t files_mkdirs(const char *dir, status_msg_t *err);

/* mkdir -p of the directory path is in (nothing for a bare name). */
status_t files_mkdirs_for(const char *path, status_msg_t *err);

#endif
