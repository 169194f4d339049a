#define _POSIX_C_SOURCE 200809L
#include "base/net.h"

#include <string.h>

#include "base/parse.h"

status_t net_split_hostport(const char *addr, char *ret_host, size_t host_len, int *ret_port,
                            status_msg_t *err)
{
    const char *colon, *host = addr;
    size_t hlen;
    int64_t port;

    if (addr == NULL || *addr == '\0')
        return status_fail(err, STATUS_INVALID_ARGUMENT, "empty address (expected HOST:PORT)");
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (close == NULL || close[1] != ':')
            return status_fail(err, STATUS_INVALID_ARGUMENT, "address '%s': expected [IPv6]:PORT",
                               addr);
        host = addr + 1;
        hlen = (size_t)(close - host);
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (colon == NULL)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "address '%s' has no port (expected HOST:PORT)", addr);
        hlen = (size_t)(colon - addr);
        if (memchr(addr, ':', hlen) != NULL)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "address '%s': put an IPv6 host in brackets, [HOST]:PORT", addr);
    }
    if (hlen >= host_len)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "address '%s': host name too long", addr);
    if (parse_int(colon + 1, 0, 65535, &port) != 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "address '%s': port must be a number from 0 to 65535", addr);
    memcpy(ret_host, host, hlen);
    ret_host[hlen] = '\0';
    *ret_port = (int)port;
    return STATUS_OK;
}

int net_hostport_valid(const char *addr)
{
    char host[256];
    int port;
    return net_split_hostport(addr, host, sizeof(host), &port, NULL) == STATUS_OK;
}
