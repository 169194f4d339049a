#define _POSIX_C_SOURCE 200809L
#include "base/log.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int log_level_ = LOG_LEVEL_INFO;
unsigned log_sub_mask_ = ~0u;

static char log_role[32] = "tessera";
static int log_index = -1;
static int log_tty = -1; /* -1: not yet checked */

static const char *const sub_names[] = {
#define LOG_SUB_NAME_(name, str) str,
    LOG_SUBSYSTEMS(LOG_SUB_NAME_)
#undef LOG_SUB_NAME_
};

static const char *const level_names[] = {
    [LOG_LEVEL_ERR] = "err",   [LOG_LEVEL_WARNING] = "warning", [LOG_LEVEL_NOTICE] = "notice",
    [LOG_LEVEL_INFO] = "info", [LOG_LEVEL_DEBUG] = "debug",
};

void log_set_identity(const char *role, int index)
{
    snprintf(log_role, sizeof(log_role), "%s", role);
    log_index = index;
}

void log_set_level(log_level_t level)
{
    log_level_ = (int)level;
}

void log_set_subsystems(unsigned mask)
{
    log_sub_mask_ = mask;
}

status_t log_level_parse(const char *s, log_level_t *ret_level)
{
    for (int l = LOG_LEVEL_ERR; l <= LOG_LEVEL_DEBUG; l++) {
        if (strcasecmp(s, level_names[l]) == 0) {
            *ret_level = (log_level_t)l;
            return STATUS_OK;
        }
    }
    if (strcasecmp(s, "error") == 0) {
        *ret_level = LOG_LEVEL_ERR;
        return STATUS_OK;
    }
    if (strcasecmp(s, "warn") == 0) {
        *ret_level = LOG_LEVEL_WARNING;
        return STATUS_OK;
    }
    return STATUS_INVALID_ARGUMENT;
}

status_t log_subsystems_parse(const char *s, unsigned *ret_mask)
{
    unsigned mask = 0;
    char buf[256], *save = NULL;

    if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf))
        return STATUS_INVALID_ARGUMENT;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int remove = tok[0] == '-';
        unsigned bits = 0;
        if (remove)
            tok++;
        if (strcmp(tok, "all") == 0) {
            bits = ~0u;
        } else {
            int i;
            for (i = 0; i < LOG_SUB_COUNT_; i++)
                if (strcmp(tok, sub_names[i]) == 0)
                    break;
            if (i == LOG_SUB_COUNT_)
                return STATUS_INVALID_ARGUMENT;
            bits = 1u << i;
        }
        if (remove)
            mask = (mask ? mask : ~0u) & ~bits;
        else
            mask |= bits;
    }
    *ret_mask = mask;
    return STATUS_OK;
}

void log_vwrite(log_level_t level, log_subsystem_t sub, const char *fmt, va_list ap)
{
    char line[4096];
    int n;

    if (log_tty < 0)
        log_tty = isatty(STDERR_FILENO);
    if (log_tty)
        n = snprintf(line, sizeof(line), "%s: ", level_names[level]);
    else
        n = snprintf(line, sizeof(line), "<%d>", (int)level);
    if (log_index >= 0)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "%s[%d] %s: ", log_role, log_index,
                      sub_names[sub]);
    else
        n += snprintf(line + n, sizeof(line) - (size_t)n, "%s %s: ", log_role, sub_names[sub]);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    /* One message, one line: journald would split embedded newlines into separate entries
     * without a priority. */
    for (int i = 0; i < n; i++)
        if (line[i] == '\n')
            line[i] = ' ';
    line[n++] = '\n';
    (void)!write(STDERR_FILENO, line, (size_t)n);
}

void log_write(log_level_t level, log_subsystem_t sub, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, sub, fmt, ap);
    va_end(ap);
}
