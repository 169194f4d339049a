/* One call to many tasks at once: a thread per call. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>

#include "fanout.h"

static void *fanout_main(void *arg)
{
    fanout_t *f = arg;
    rpc_call_opts_t o = {.timeout_ms = f->timeout_ms, .cancel = f->cancel};

    if (f->skip) {
        f->rc = f->err.status = STATUS_UNAVAILABLE;
        return NULL;
    }
    f->rc = rpc_unary(f->ch, f->method, f->req, &o, &f->resp, NULL, &f->err);
    return NULL;
}

void fanout_run(fanout_t *f, size_t n)
{
    sigset_t all, old;

    /* The calling threads inherit a full signal mask: signals belong to the main thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (size_t i = 0; i < n; i++) {
        f[i].started = pthread_create(&f[i].tid, NULL, fanout_main, &f[i]) == 0;
        if (!f[i].started) /* no thread to spare: call from here */
            fanout_main(&f[i]);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    for (size_t i = 0; i < n; i++)
        if (f[i].started)
            pthread_join(f[i].tid, NULL);
}

void fanout_done(fanout_t *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (f[i].resp != NULL) {
            protobuf_c_message_free_unpacked(f[i].resp, NULL);
            f[i].resp = NULL;
        }
}
