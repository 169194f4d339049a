/* grpc.health.v1.Health for Tessera's daemons, and the client check the CLI and chief use.
 *
 * Check: "" (the whole server) and every service in the method table that the daemon serves
 * answer SERVING or NOT_SERVING; any other name answers status NOT_FOUND.
 * Watch (server-streaming): the current status at once, then one message per change; an unknown
 * service gets SERVICE_UNKNOWN and the stream stays open. A watch ends when the client cancels
 * it or the server shuts down (after its grace period); at most 1024 are open at once. */
#ifndef TESSERA_HEALTH_H
#define TESSERA_HEALTH_H

#include <stdbool.h>

#include "rpc/server.h"

typedef struct health health_t;

/* Serves Check and Watch on s for the services listed (NULL-terminated, besides ""); the list
 * must outlive h. Before rpc_server_start. */
health_t *health_new(rpc_server_t *s, const char *const *services);

/* Frees h; after rpc_server_shutdown, which ends every watch. NULL-safe. */
void health_free(health_t *h);

/* Sets every service SERVING (true) or NOT_SERVING (false) and tells the watchers when that is
 * a change. Thread-safe. */
void health_set_serving(health_t *h, bool serving);

typedef enum {
    HEALTH_UNKNOWN = 0,
    HEALTH_SERVING = 1,
    HEALTH_NOT_SERVING = 2,
    HEALTH_UNREACHABLE = 3,
} health_state_t;

/* Asks target whether `service` is SERVING, within timeout_ms; a refused connection is tried
 * again every 100 ms until then. Unreachable peers, errors and timeouts give HEALTH_UNREACHABLE
 * with the reason in err. */
health_state_t health_check(const char *target, const char *service, int64_t timeout_ms,
                            rpc_error_t *err);

const char *health_state_name(health_state_t s);

/* Checks n targets at once (one thread each, at most 64 at a time), each within timeout_ms.
 * ret_states[i], ret_errs[i] (may be NULL) and ret_seconds[i] (may be NULL) describe targets[i].
 * A NULL target is reported unreachable. */
void health_check_many(const char *const *targets, size_t n, int64_t timeout_ms,
                       health_state_t *ret_states, rpc_error_t *ret_errs, double *ret_seconds);

#endif
