/* Logging with levels, a subsystem mask and journald priority prefixes.
 *
 * Lines go to stderr as "<N>role[index] subsystem: message" where <N> is the syslog priority
 * journald reads (systemd strips it); on a terminal the prefix is a word instead. The level and
 * mask are checked before any formatting, so a disabled debug line costs a branch.
 * Thread-safe: each line is written with one write(2). */
#ifndef TESSERA_LOG_H
#define TESSERA_LOG_H

#include <stdarg.h>
#include <stdbool.h>

#include "base/status.h"

/* syslog priorities */
typedef enum {
    LOG_LEVEL_ERR = 3,
    LOG_LEVEL_WARNING = 4,
    LOG_LEVEL_NOTICE = 5,
    LOG_LEVEL_INFO = 6,
    LOG_LEVEL_DEBUG = 7,
} log_level_t;

#define LOG_SUBSYSTEMS(X)                                                                          \
    X(MAIN, "main")                                                                                \
    X(CONFIG, "config")                                                                            \
    X(RPC, "rpc")                                                                                  \
    X(GRPC, "grpc")                                                                                \
    X(METRICS, "metrics")                                                                          \
    X(HEALTH, "health")                                                                            \
    X(PS, "ps")                                                                                    \
    X(WORKER, "worker")                                                                            \
    X(CHIEF, "chief")                                                                              \
    X(CLI, "cli")                                                                                  \
    X(TRAIN, "train")                                                                              \
    X(DATA, "data")

typedef enum {
#define LOG_SUB_ENUM_(name, str) LOG_SUB_##name,
    LOG_SUBSYSTEMS(LOG_SUB_ENUM_)
#undef LOG_SUB_ENUM_
        LOG_SUB_COUNT_
} log_subsystem_t;

extern int log_level_;         /* current level; read through log_enabled() */
extern unsigned log_sub_mask_; /* bit per subsystem */

static inline bool log_enabled(log_level_t level, log_subsystem_t sub)
{
    return (int)level <= log_level_ && (log_sub_mask_ & (1u << sub)) != 0;
}

/* Sets who is logging: role ("ps", "worker", "chief", "tessera") and task index (-1: none). */
void log_set_identity(const char *role, int index);

/* Sets the most verbose level written. */
void log_set_level(log_level_t level);

/* Parses "err", "warning", "notice", "info", "debug" into ret_level. */
status_t log_level_parse(const char *s, log_level_t *ret_level);

/* Parses a comma-separated subsystem list ("rpc,grpc", "all", "-grpc" to remove) into the mask. */
status_t log_subsystems_parse(const char *s, unsigned *ret_mask);
void log_set_subsystems(unsigned mask);

/* Writes one line. Use the LOG_* macros, which skip formatting when disabled. */
void log_write(log_level_t level, log_subsystem_t sub, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void log_vwrite(log_level_t level, log_subsystem_t sub, const char *fmt, va_list ap);

#define LOG_AT_(level, sub, ...)                                                                   \
    do {                                                                                           \
        if (log_enabled((level), LOG_SUB_##sub))                                                   \
            log_write((level), LOG_SUB_##sub, __VA_ARGS__);                                        \
    } while (0)
#define LOG_ERR(sub, ...)     LOG_AT_(LOG_LEVEL_ERR, sub, __VA_ARGS__)
#define LOG_WARNING(sub, ...) LOG_AT_(LOG_LEVEL_WARNING, sub, __VA_ARGS__)
#define LOG_NOTICE(sub, ...)  LOG_AT_(LOG_LEVEL_NOTICE, sub, __VA_ARGS__)
#define LOG_INFO(sub, ...)    LOG_AT_(LOG_LEVEL_INFO, sub, __VA_ARGS__)
#define LOG_DEBUG(sub, ...)   LOG_AT_(LOG_LEVEL_DEBUG, sub, __VA_ARGS__)

#endif
