/* Tessera's one status enum.
 *
 * Every fallible function in the project returns a status_t. The list is grouped by who is
 * at fault, so a caller can decide what to do from the group alone: fix the input, fix the
 * program, retry, or give up. Foreign error codes (errno, grpc_status_code, cudaError_t,
 * ncclResult_t) are converted in status.c and nowhere else. */
#ifndef TESSERA_STATUS_H
#define TESSERA_STATUS_H

#include <stdbool.h>
#include <stddef.h>

/* X(NAME, GROUP, grpc_status_code, what-to-do) */
#define STATUS_LIST(X)                                                                             \
    X(OK, NONE, 0, "success")                                                                      \
    /* The caller's input is wrong: fix the input and try again. */                                \
    X(INVALID_ARGUMENT, INVALID_ARGUMENT, 3, "invalid argument: correct the named value")          \
    X(BAD_CONFIG, INVALID_ARGUMENT, 3, "invalid configuration: fix the named key or flag")         \
    X(BAD_TF_CONFIG, INVALID_ARGUMENT, 3, "invalid TF_CONFIG: fix the environment variable")       \
    X(BAD_MESSAGE, INVALID_ARGUMENT, 3,                                                            \
      "malformed message: the peer sent bytes that do not parse")                                  \
    X(NOT_FOUND, INVALID_ARGUMENT, 5, "not found: check the name")                                 \
    X(ALREADY_EXISTS, INVALID_ARGUMENT, 6, "already exists: use another name or drop the old one") \
    X(OUT_OF_RANGE, INVALID_ARGUMENT, 11, "out of range: use a value inside the stated bounds")    \
    /* The program used an API the wrong way, or asked for what it may not. */                     \
    X(INVALID_USAGE, INVALID_USAGE, 9, "invalid usage: the call is not allowed in this state")     \
    X(UNIMPLEMENTED, INVALID_USAGE, 12, "not implemented by this server: check versions")          \
    X(UNAUTHENTICATED, INVALID_USAGE, 16, "unauthenticated: use the mutual-TLS port")              \
    X(PERMISSION_DENIED, INVALID_USAGE, 7,                                                         \
      "permission denied: the caller's certificate role may not call this method")                 \
    X(CANCELLED, INVALID_USAGE, 1, "cancelled by the caller")                                      \
    /* The operating system refused: look at the named file, port or limit. */                     \
    X(SYSTEM, SYSTEM, 13, "system call failed: see the message for the file or resource")          \
    X(IO, SYSTEM, 13, "I/O error: check the file, its permissions and the disk")                   \
    X(DATA_LOSS, SYSTEM, 15, "data loss: the file is corrupt or cut short; write it again")        \
    X(ADDRESS_IN_USE, SYSTEM, 13, "address in use: stop the other process or pick another port")   \
    /* Memory or a configured limit ran out. */                                                    \
    X(NO_MEMORY, NO_MEMORY, 8, "out of memory: reduce the size or add memory")                     \
    X(RESOURCE_EXHAUSTED, NO_MEMORY, 8, "limit reached: raise the limit or send less")             \
    /* The RPC transport failed: the peer is down, unreachable or speaks another protocol. */      \
    X(UNAVAILABLE, RPC, 14,                                                                        \
      "peer unavailable: check that it runs and the address is right; retry")                      \
    X(RPC, RPC, 13, "RPC failed: see the message; retry if the peer restarted")                    \
    /* A remote task reported an error of its own. */                                              \
    X(REMOTE, REMOTE, 2, "the remote task failed: see its log for the reason")                     \
    X(ABORTED, REMOTE, 10, "aborted by the remote task: retry the operation")                      \
    /* The GPU stack failed. */                                                                    \
    X(CUDA, CUDA, 13, "CUDA error: check the driver and the device")                               \
    X(NCCL, NCCL, 13, "NCCL error: check the peers and NCCL_DEBUG=INFO output")                    \
    /* A deadline passed. */                                                                       \
    X(TIMEOUT, TIMEOUT, 4, "deadline exceeded: the peer is slow or stuck; retry or raise it")      \
    /* A bug in Tessera: please report it. */                                                      \
    X(INTERNAL, INTERNAL, 13, "internal error: a bug in Tessera, please report it")

typedef enum {
#define STATUS_ENUM_(name, group, grpc, text) STATUS_##name,
    STATUS_LIST(STATUS_ENUM_)
#undef STATUS_ENUM_
        STATUS_COUNT_
} status_t;

typedef enum {
    STATUS_GROUP_NONE,
    STATUS_GROUP_INVALID_ARGUMENT,
    STATUS_GROUP_INVALID_USAGE,
    STATUS_GROUP_SYSTEM,
    STATUS_GROUP_NO_MEMORY,
    STATUS_GROUP_RPC,
    STATUS_GROUP_REMOTE,
    STATUS_GROUP_CUDA,
    STATUS_GROUP_NCCL,
    STATUS_GROUP_TIMEOUT,
    STATUS_GROUP_INTERNAL,
} status_group_t;

/* Upper-case name of the status ("INVALID_ARGUMENT"); "UNKNOWN_STATUS" for values out of range. */
const char *status_name(status_t s);

/* A sentence saying what the status means and what to do next. Never NULL. */
const char *status_str(status_t s);

/* The fault group the status belongs to. */
status_group_t status_group(status_t s);

/* gRPC status code (grpc_status_code numbering) to send for s. */
int status_to_grpc(status_t s);

/* The closest status for a gRPC status code received from a peer. */
status_t status_from_grpc(int grpc_code);

/* The closest status for an errno value. */
status_t status_from_errno(int err);

/* A status together with the sentence that explains it, for errors a person will read. The
 * sentence names the culprit (file, key, flag, task) and is complete on its own. */
typedef struct status_msg {
    status_t status;
    char text[512];
} status_msg_t;

/* Formats the explanation into ret_msg (when not NULL) and returns s, so a failure path reads
 * `return status_fail(err, STATUS_BAD_CONFIG, "key %s: ...", key);`. */
status_t status_fail(status_msg_t *ret_msg, status_t s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Bytes in the well-formed UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, nothing
 * past U+10FFFF) that starts s, which has len bytes; 0 when it is not one. */
size_t utf8_sequence_len(const char *s, size_t len);

/* Whether s[0..len) is well-formed UTF-8 with no NUL byte. */
bool utf8_valid_text(const char *s, size_t len);

/* Copies src[0..len) into dst (size bytes, NUL-terminated) as text a person and any proto3 parser
 * can read: well-formed UTF-8 passes, control characters and bytes that are not UTF-8 become
 * "\xNN". Stops before a character or escape that would not fit, so the result is never cut
 * inside one. Returns dst. */
char *utf8_escape(char *dst, size_t size, const char *src, size_t len);

/* Breadcrumb helpers: evaluate an expression returning status_t and propagate a failure,
 * logging the file and line at debug level. */
void status_trace(status_t s, const char *expr, const char *file, int line);

#define STATUS_CHECK(expr)                                                                         \
    do {                                                                                           \
        status_t status_check_rc_ = (expr);                                                        \
        if (status_check_rc_ != STATUS_OK) {                                                       \
            status_trace(status_check_rc_, #expr, __FILE__, __LINE__);                             \
            return status_check_rc_;                                                               \
        }                                                                                          \
    } while (0)

#define STATUS_CHECK_GOTO(expr, rc, label)                                                         \
    do {                                                                                           \
        (rc) = (expr);                                                                             \
        if ((rc) != STATUS_OK) {                                                                   \
            status_trace((rc), #expr, __FILE__, __LINE__);                                         \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

#endif
