#define _POSIX_C_SOURCE 200809L
#include "base/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"

static const struct {
    const char *name;
    status_group_t group;
    int grpc;
    const char *text;
} statuses[] = {
#define STATUS_ROW_(name, group, grpc, text) {#name, STATUS_GROUP_##group, grpc, text},
    STATUS_LIST(STATUS_ROW_)
#undef STATUS_ROW_
};

static int status_valid(status_t s)
{
    return (int)s >= 0 && s < STATUS_COUNT_;
}

const char *status_name(status_t s)
{
    return status_valid(s) ? statuses[s].name : "UNKNOWN_STATUS";
}

const char *status_str(status_t s)
{
    return status_valid(s) ? statuses[s].text
                           : "unknown status: a bug in Tessera, please report it";
}

status_group_t status_group(status_t s)
{
    return status_valid(s) ? statuses[s].group : STATUS_GROUP_INTERNAL;
}

int status_to_grpc(status_t s)
{
    return status_valid(s) ? statuses[s].grpc : 13;
}

status_t status_from_grpc(int code)
{
    switch (code) {
    case 0:
        return STATUS_OK;
    case 1:
        return STATUS_CANCELLED;
    case 3:
        return STATUS_INVALID_ARGUMENT;
    case 4:
        return STATUS_TIMEOUT;
    case 5:
        return STATUS_NOT_FOUND;
    case 6:
        return STATUS_ALREADY_EXISTS;
    case 7:
        return STATUS_PERMISSION_DENIED;
    case 8:
        return STATUS_RESOURCE_EXHAUSTED;
    case 9:
        return STATUS_INVALID_USAGE; /* FAILED_PRECONDITION */
    case 10:
        return STATUS_ABORTED;
    case 11:
        return STATUS_OUT_OF_RANGE;
    case 12:
        return STATUS_UNIMPLEMENTED;
    case 14:
        return STATUS_UNAVAILABLE;
    case 15:
        return STATUS_DATA_LOSS;
    case 16:
        return STATUS_UNAUTHENTICATED;
    case 2:  /* UNKNOWN */
    case 13: /* INTERNAL */
    default:
        return STATUS_REMOTE;
    }
}

status_t status_from_errno(int err)
{
    switch (err) {
    case 0:
        return STATUS_OK;
    case ENOMEM:
        return STATUS_NO_MEMORY;
    case EADDRINUSE:
        return STATUS_ADDRESS_IN_USE;
    case ENOENT:
        return STATUS_NOT_FOUND;
    case EEXIST:
        return STATUS_ALREADY_EXISTS;
    case EINVAL:
        return STATUS_INVALID_ARGUMENT;
    case ETIMEDOUT:
        return STATUS_TIMEOUT;
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
        return STATUS_UNAVAILABLE;
    case EIO:
    case ENOSPC:
    case EROFS:
    case EACCES:
    case EPERM:
        return STATUS_IO;
    case EMFILE:
    case ENFILE:
        return STATUS_RESOURCE_EXHAUSTED;
    default:
        return STATUS_SYSTEM;
    }
}

size_t utf8_sequence_len(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned char lo = 0x80, hi = 0xbf;
    size_t n;

    if (len == 0)
        return 0;
    if (u[0] < 0x80)
        return 1;
    if (u[0] < 0xc2 || u[0] > 0xf4) /* continuation bytes, overlong 2-byte leads, past U+10FFFF */
        return 0;
    n = u[0] < 0xe0 ? 2 : u[0] < 0xf0 ? 3 : 4;
    if (u[0] == 0xe0)
        lo = 0xa0; /* overlong */
    else if (u[0] == 0xed)
        hi = 0x9f; /* surrogates */
    else if (u[0] == 0xf0)
        lo = 0x90; /* overlong */
    else if (u[0] == 0xf4)
        hi = 0x8f; /* past U+10FFFF */
    if (len < n || u[1] < lo || u[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (u[i] < 0x80 || u[i] > 0xbf)
            return 0;
    return n;
}

bool utf8_valid_text(const char *s, size_t len)
{
    for (size_t i = 0, n; i < len; i += n)
        if (s[i] == '\0' || (n = utf8_sequence_len(s + i, len - i)) == 0)
            return false;
    return true;
}

char *utf8_escape(char *dst, size_t size, const char *src, size_t len)
{
    size_t out = 0;

    if (size == 0)
        return dst;
    for (size_t i = 0, n; i < len; i += n) {
        unsigned char c = (unsigned char)src[i];
        n = utf8_sequence_len(src + i, len - i);
        if (n == 0 || c < 0x20 || c == 0x7f) {
            if (out + 4 >= size)
                break;
            snprintf(dst + out, 5, "\\x%02x", c);
            out += 4;
            n = 1;
            continue;
        }
        if (out + n >= size)
            break;
        memcpy(dst + out, src + i, n);
        out += n;
    }
    dst[out] = '\0';
    return dst;
}

status_t status_fail(status_msg_t *ret_msg, status_t s, const char *fmt, ...)
{
    va_list ap;
    size_t len, end = 0;

    if (ret_msg == NULL)
        return s;
    ret_msg->status = s;
    va_start(ap, fmt);
    vsnprintf(ret_msg->text, sizeof(ret_msg->text), fmt, ap);
    va_end(ap);
    /* A sentence cut at the buffer's end may end inside a character: drop the partial one. */
    len = strlen(ret_msg->text);
    while (end < len) {
        size_t n = utf8_sequence_len(ret_msg->text + end, len - end);
        if (n == 0 && len - end < 4 && (unsigned char)ret_msg->text[end] >= 0xc2) {
            ret_msg->text[end] = '\0';
            break;
        }
        end += n ? n : 1;
    }
    return s;
}

void status_trace(status_t s, const char *expr, const char *file, int line)
{
    LOG_DEBUG(MAIN, "%s:%d: %s returned %s", file, line, expr, status_name(s));
}
