/* multi_worker_mirrored on a worker (sync.h). */
#define _POSIX_C_SOURCE 200809L
#include "sync.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ring.h"

struct sync {
    trainer_t *t;
    int rank, size;
    int listen_fd;
    ring_t *ring;
    float *pack; /* every gradient, in the model's order */
    size_t n_pack;
};

void sync_free(sync_t *s)
{
    if (s == NULL)
        return;
    ring_free(s->ring);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    free(s->pack);
    free(s);
}

status_t sync_new(trainer_t *t, int rank, int size, sync_t **ret, int *ret_port, status_msg_t *err)
{
    model_t *m = trainer_model(t);
    sync_t *s;
    status_t rc;

    *ret = NULL;
    for (size_t i = 0; i < model_param_count(m); i++)
        if (model_param(m, i)->sparse)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s is an Embedding table: its gradients are rows, which "
                               "multi_worker_mirrored does not all-reduce yet",
                               model_param(m, i)->name);
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    *s = (sync_t){.t = t, .rank = rank, .size = size, .listen_fd = -1};
    for (size_t i = 0; i < model_param_count(m); i++)
        s->n_pack += model_param(m, i)->n;
    if ((s->pack = malloc((s->n_pack + 1) * sizeof(float))) == NULL) {
        sync_free(s);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    rc = ring_listen(":0", &s->listen_fd, ret_port, err);
    if (rc != STATUS_OK) {
        sync_free(s);
        return rc;
    }
    *ret = s;
    return STATUS_OK;
}

status_t sync_connect(sync_t *s, char *const *ring, size_t n, uint64_t token, int timeout_ms,
                      status_msg_t *err)
{
    ring_opts_t o = {.rank = s->rank,
                     .size = s->size,
                     .listen_fd = s->listen_fd,
                     .token = token,
                     .timeout_ms = timeout_ms};

    if (n != (size_t)s->size)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "a ring of %zu addresses for a job of %d workers", n, s->size);
    ring_free(s->ring);
    s->ring = NULL;
    o.next_address = ring[(s->rank + 1) % s->size];
    return ring_connect(&o, &s->ring, err);
}

int sync_failed_peer(const sync_t *s)
{
    return s != NULL ? ring_failed_peer(s->ring) : -1;
}

/* The gradients into the pack and back. */
static void pack(sync_t *s, bool out)
{
    model_t *m = trainer_model(s->t);
    size_t off = 0;

    for (size_t i = 0; i < model_param_count(m); i++) {
        model_param_t *p = model_param(m, i);
        if (out)
            memcpy(s->pack + off, p->grad, p->n * sizeof(float));
        else
            memcpy(p->grad, s->pack + off, p->n * sizeof(float));
        off += p->n;
    }
}

status_t sync_steps(sync_t *s, int steps, _Atomic bool *cancelled, model_stats_t *ret,
                    int *ret_steps, status_msg_t *err)
{
    *ret = (model_stats_t){0};
    *ret_steps = 0;
    if (s->ring == NULL)
        return status_fail(err, STATUS_INVALID_USAGE, "the ring of the job is not connected");
    for (int k = 0; k < steps; k++) {
        data_batch_t b;
        model_stats_t st;
        if (atomic_load(cancelled))
            return status_fail(err, STATUS_CANCELLED, "the job was cancelled");
        if (!trainer_next(s->t, &b))
            break;
        STATUS_CHECK(trainer_step(s->t, &b, &st, err));
        pack(s, true);
        STATUS_CHECK(ring_allreduce(s->ring, s->pack, s->n_pack, err));
        pack(s, false);
        STATUS_CHECK(trainer_apply(s->t, err));
        ret->loss_sum += st.loss_sum;
        ret->correct += st.correct;
        ret->examples += st.examples;
        (*ret_steps)++;
    }
    return STATUS_OK;
}
