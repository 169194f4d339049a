/* One call to many tasks at once: each request on its own thread, all answers awaited. */
#ifndef TESSERA_CHIEF_FANOUT_H
#define TESSERA_CHIEF_FANOUT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "rpc/client.h"

typedef struct fanout {
    rpc_channel_t *ch;
    rpc_method_id_t method;
    const ProtobufCMessage *req;
    ProtobufCMessage *resp;
    int64_t timeout_ms;
    bool skip;            /* no call: rc is STATUS_UNAVAILABLE (a task known to be down) */
    _Atomic bool *cancel; /* may be NULL: set, the call ends (STATUS_CANCELLED) */
    status_t rc;
    rpc_error_t err;
    pthread_t tid;
    bool started;
} fanout_t;

/* Sends every f[i].req at once and waits for all the answers. */
void fanout_run(fanout_t *f, size_t n);
void fanout_done(fanout_t *f, size_t n);

#endif
