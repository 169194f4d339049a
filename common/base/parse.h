/* Strict number parsing for text from users: flags, config files, environment variables, job
 * files, addresses. One rule everywhere: an optional '-', decimal digits, nothing else (no
 * spaces, no '+', no hex, no trailing text), so "08", " 8" and "8x" mean what they look like or
 * are refused, never read as something else. */
#ifndef TESSERA_PARSE_H
#define TESSERA_PARSE_H

#include <stdint.h>

/* Reads a decimal integer from the start of s; *ret_end points after its digits. Returns 0,
 * EINVAL (no digits) or ERANGE (beyond int64_t). */
int parse_int_prefix(const char *s, int64_t *ret, const char **ret_end);

/* Reads all of s as a decimal integer in [lo, hi]. Returns 0, EINVAL (not an integer) or
 * ERANGE (outside [lo, hi]). */
int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *ret);

/* Reads a duration in milliseconds: "250ms", "2s", "1m", "1h", or a bare number of ms. Returns
 * 0, EINVAL or ERANGE. */
int parse_duration_ms(const char *s, int64_t *ret_ms);

#endif
