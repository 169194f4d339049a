#include "base/parse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int parse_int_prefix(const char *s, int64_t *ret, const char **ret_end)
{
    const char *digits = s[0] == '-' ? s + 1 : s;
    char *end;
    long long v;

    if (*digits < '0' || *digits > '9')
        return EINVAL;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno == ERANGE)
        return ERANGE;
    *ret = (int64_t)v;
    *ret_end = end;
    return 0;
}

int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *ret)
{
    const char *end;
    int64_t v;
    int rc = parse_int_prefix(s, &v, &end);

    if (rc != 0)
        return rc;
    if (*end != '\0')
        return EINVAL;
    if (v < lo || v > hi)
        return ERANGE;
    *ret = v;
    return 0;
}

int parse_duration_ms(const char *s, int64_t *ret_ms)
{
    static const struct {
        const char *suffix;
        int64_t ms;
    } units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000}};
    const char *end;
    int64_t v;
    int rc = parse_int_prefix(s, &v, &end);

    if (rc != 0)
        return rc;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].suffix) != 0)
            continue;
        if (v > INT64_MAX / units[i].ms || v < INT64_MIN / units[i].ms)
            return ERANGE;
        *ret_ms = v * units[i].ms;
        return 0;
    }
    return EINVAL;
}
