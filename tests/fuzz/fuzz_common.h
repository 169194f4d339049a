/* Helpers shared by the libFuzzer targets of tests/fuzz/ (see README.md there). */
#ifndef TESSERA_FUZZ_COMMON_H
#define TESSERA_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

/* The libFuzzer entry points every target defines. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Logs only errors (TESSERA_FUZZ_LOG_LEVEL=debug etc. for more while reproducing a crash);
 * with TESSERA_FUZZ_VERBOSE set, fuzz_check_error prints every decoder's verdict. */
void fuzz_quiet_logs(void);

/* Whether TESSERA_FUZZ_VERBOSE was set (after fuzz_quiet_logs). */
bool fuzz_verbose(void);

/* One piece of an input cut by fuzz_split. */
typedef struct fuzz_part {
    const uint8_t *data;
    size_t len;
} fuzz_part_t;

/* Cuts data at each occurrence of sep into at most max parts (the last part keeps any further
 * separators) and returns how many: always at least 1. */
size_t fuzz_split(const uint8_t *data, size_t size, const char *sep, fuzz_part_t *ret_parts,
                  size_t max);

/* A malloc'd copy of exactly len bytes (at least 1 allocated), so that ASan catches a read past
 * the end of an input that is not NUL-terminated. Aborts when out of memory. */
char *fuzz_copy(const void *data, size_t len);

/* A malloc'd NUL-terminated copy. Aborts when out of memory. */
char *fuzz_strndup(const void *data, size_t len);

/* An anonymous in-memory file and the path that opens it (/proc/self/fd/N), for decoders that
 * take a path. Aborts on failure. */
typedef struct fuzz_file {
    int fd;
    char path[64];
} fuzz_file_t;
void fuzz_file_open(fuzz_file_t *f, const char *name);
/* Replaces the file's whole content. Aborts on failure. */
void fuzz_file_set(fuzz_file_t *f, const void *data, size_t len);

/* While blocked, every fopen() and open() for reading fails with ENOENT: the job parser reads
 * files the job names (keras_json) from the disk when they did not come with it, a worker
 * loads the IDX data a job names, and an input must not make the fuzzer read /dev/zero or a
 * terminal. The targets link with --wrap=fopen,--wrap=fopen64,--wrap=open,--wrap=open64. */
void fuzz_block_files(bool blocked);
FILE *__wrap_fopen(const char *path, const char *mode);
FILE *__wrap_fopen64(const char *path, const char *mode);
int __wrap_open(const char *path, int flags, ...);
int __wrap_open64(const char *path, int flags, ...);

/* Aborts, naming `what`, when a decoder's failure breaks the error contract: a failing status
 * comes with a sentence (err->text non-empty and NUL-terminated) and err->status equals it. */
void fuzz_check_error(const char *what, status_t rc, const status_msg_t *err);

/* Prints "fuzz: <target>: <message>" to stderr and aborts: an oracle of the target failed. */
void fuzz_fail(const char *target, const char *fmt, ...) __attribute__((format(printf, 2, 3)))
__attribute__((noreturn));

#endif
