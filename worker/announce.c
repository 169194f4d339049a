#define _POSIX_C_SOURCE 200809L
#include "announce.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "rpc/client.h"

struct announcer {
    rpc_channel_t *ch;
    char address[300];
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    _Atomic bool cancel; /* set with stop: a call in flight ends at once */
};

static void *announce_main(void *arg)
{
    announcer_t *a = arg;
    Tessera__V1__RegisterWorkerRequest req = TESSERA__V1__REGISTER_WORKER_REQUEST__INIT;
    rpc_call_opts_t o = {.timeout_ms = 5000, .cancel = &a->cancel};
    int last = -1; /* what was logged last: 0 failed, 1 announced */

    req.address = a->address;
    pthread_mutex_lock(&a->mu);
    while (!a->stop) {
        Tessera__V1__RegisterWorkerResponse *resp = NULL;
        rpc_error_t err;
        struct timespec until;
        status_t rc;

        pthread_mutex_unlock(&a->mu);
        rc = rpc_coord_register_worker(a->ch, &req, &o, &resp, NULL, &err);
        if (rc == STATUS_OK && (last != 1 || resp->added))
            LOG_NOTICE(WORKER, "announced to the chief at %s as worker:%d (%s)",
                       rpc_channel_target(a->ch), resp->index,
                       resp->added ? "joined" : "known already");
        else if (rc != STATUS_OK && last != 0 && !atomic_load(&a->cancel))
            LOG_WARNING(WORKER,
                        "cannot announce this worker to the chief at %s: %s (trying "
                        "again every %d s)",
                        rpc_channel_target(a->ch), err.message, ANNOUNCE_PERIOD_S);
        last = rc == STATUS_OK;
        if (resp != NULL)
            protobuf_c_message_free_unpacked(&resp->base, NULL);
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += ANNOUNCE_PERIOD_S;
        pthread_mutex_lock(&a->mu);
        while (!a->stop && pthread_cond_timedwait(&a->cv, &a->mu, &until) == 0)
            ;
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

status_t announcer_start(const char *chief, const char *address, announcer_t **ret,
                         status_msg_t *err)
{
    announcer_t *a = calloc(1, sizeof(*a));
    rpc_channel_opts_t o = {.timeout_ms = 5000};

    *ret = NULL;
    if (a == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    snprintf(a->address, sizeof(a->address), "%s", address);
    if (rpc_channel_new(chief, &o, &a->ch, err) != STATUS_OK) {
        free(a);
        return err->status;
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->tid, NULL, announce_main, a) != 0) {
        rpc_channel_free(a->ch);
        free(a);
        return status_fail(err, STATUS_SYSTEM, "cannot start the announcing thread");
    }
    *ret = a;
    return STATUS_OK;
}

void announcer_stop(announcer_t *a)
{
    if (a == NULL)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    atomic_store(&a->cancel, true);
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->tid, NULL);
    rpc_channel_free(a->ch);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

void announcer_address(const char *advertise, const char *listen, char *out, size_t len)
{
    const char *port = strrchr(listen, ':');
    char host[256];

    if (advertise != NULL && advertise[0] != '\0') {
        snprintf(out, len, "%s", advertise);
    } else if (port != NULL &&
               (strncmp(listen, "0.0.0.0:", 8) == 0 || strncmp(listen, "[::]:", 5) == 0) &&
               gethostname(host, sizeof(host)) == 0) {
        host[sizeof(host) - 1] = '\0';
        snprintf(out, len, "%s%s", host, port);
    } else {
        snprintf(out, len, "%s", listen);
    }
}
