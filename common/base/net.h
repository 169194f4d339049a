/* Network address helpers shared by the RPC layer, the metrics endpoint and the config parser. */
#ifndef TESSERA_NET_H
#define TESSERA_NET_H

#include <stddef.h>

#include "base/status.h"

/* Splits "host:port", "[v6]:port" or ":port" (host empty = all interfaces) into its parts.
 * The host is copied into ret_host (without brackets); port must be 0..65535. Fails with
 * STATUS_INVALID_ARGUMENT and an explanation naming the address. */
status_t net_split_hostport(const char *addr, char *ret_host, size_t host_len, int *ret_port,
                            status_msg_t *err);

/* True when addr is a valid "host:port" for net_split_hostport. */
int net_hostport_valid(const char *addr);

#endif
