/* multi_worker_mirrored on a worker (sync.h). */
#define _POSIX_C_SOURCE 200809L
#include "sync.h"

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "optim/optimizer.h"
#include "ring.h"

/* Gradient bytes per bucket when the job leaves train.bytes_per_pack automatic (0). */
#define SYNC_AUTO_BYTES_PER_PACK (4u << 20)

struct sync {
    trainer_t *t;
    int rank, size;
    int listen_fd;
    ring_t *ring;
    float *pack; /* every gradient, in the model's order */
    size_t n_pack;
    /* where the last closure started: values, optimizer slots, updates applied, data position,
     * dropout streams; a ring that lost a worker goes back there */
    float *snap_values, *snap_slots;
    size_t n_slots;
    int64_t snap_iterations, snap_epoch, snap_batch;
    bool has_snap;
    int ring_rank, ring_size; /* this worker's place in the ring now, and the ring's size */
    /* Buckets: the gradients go into the ring in buckets of at least bytes_per_pack bytes, the
     * last layers' first, each as soon as backward has made it (model_on_backward) while
     * backward goes on through the layers before; the comm thread all-reduces them in that
     * order (the same on every worker) and writes the sums back into the gradients. Only while
     * each step is one slice of backward (no window of accumulate_steps, no lost worker's
     * slices): otherwise the whole pack goes after backward. */
    size_t n_buckets;
    size_t *bucket_lo, *bucket_hi; /* bucket -> its params [lo, hi) */
    size_t *param_off;             /* param -> its offset in pack */
    pthread_t comm;
    bool comm_started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t published, reduced; /* buckets of this step handed to the comm thread, and done */
    status_t comm_rc;          /* the step's first failure in the comm thread */
    status_msg_t comm_err;
    sync_counts_t counts; /* since sync_take_counts */
    /* Embedding tables: their gradient rows go round the ring densified (the table's shape,
     * zeros where this worker has no row) with a mask of the rows touched after every gradient
     * (n_mask floats, one per table row), and come back as the rows any worker touched, summed:
     * the optimizer then updates those rows only, as one device would. n_mask 0: no Embedding. */
    size_t n_mask;
    int64_t **rows_index; /* per param: the rows of the sum */
    float **rows_grad;
    size_t *n_rows;
    int64_t **own_index; /* the model's own row buffers, while the sum's stand in */
    float **own_grad;
    /* synchronized BatchNormalization: its sums go round the ring inside forward and backward
     * (bn_sum), on the trainer's thread, so no bucket may be in the ring then: such a model's
     * gradients go after backward. bn_rc: the closure's first failed sum, and why. */
    layer_sync_t bn;
    float *bn_buf;
    size_t bn_width;
    status_t bn_rc;
    status_msg_t bn_err;
};

static status_t make_rows(sync_t *s);

/* A double as four 16-bit limbs, each exact in a float. */
#define BN_LIMBS 4

/* synchronized BatchNormalization's sums over the workers (model.h): an all-gather made of the
 * ring's all-reduce (each worker's doubles as limbs in its own place, zeros elsewhere: the sum of
 * a limb and zeros is the limb, exactly), then each value summed in ring order, so that every
 * worker gets the same double, as exact as one device's. */
static bool bn_sum(layer_sync_t *base, int rank, double *vals, size_t len)
{
    sync_t *s = (sync_t *)((char *)base - offsetof(sync_t, bn));
    size_t per = len * BN_LIMBS, n = per * (size_t)s->ring_size;

    (void)rank; /* one replica a worker */
    if (s->bn_rc != STATUS_OK || len > s->bn_width)
        return false;
    memset(s->bn_buf, 0, n * sizeof(float));
    for (size_t i = 0; i < len; i++) {
        uint64_t bits;
        memcpy(&bits, &vals[i], sizeof(bits));
        for (int k = 0; k < BN_LIMBS; k++)
            s->bn_buf[(size_t)s->ring_rank * per + i * BN_LIMBS + (size_t)k] =
                (float)((bits >> (16 * k)) & 0xffff);
    }
    if ((s->bn_rc = ring_allreduce(s->ring, s->bn_buf, n, &s->bn_err)) != STATUS_OK)
        return false;
    for (size_t i = 0; i < len; i++) {
        double sum = 0;
        for (int q = 0; q < s->ring_size; q++) {
            const float *limb = s->bn_buf + (size_t)q * per + i * BN_LIMBS;
            uint64_t bits = 0;
            double v;
            for (int k = 0; k < BN_LIMBS; k++)
                bits |= (uint64_t)limb[k] << (16 * k);
            memcpy(&v, &bits, sizeof(v));
            sum += v;
        }
        vals[i] = sum;
    }
    return true;
}

/* The comm thread: all-reduces each published bucket, in order, into the gradients. */
static void *comm_main(void *arg)
{
    sync_t *s = arg;
    model_t *m = trainer_model(s->t);

    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->reduced == s->published)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop)
            break;
        size_t b = s->reduced;
        bool failed = s->comm_rc != STATUS_OK;
        pthread_mutex_unlock(&s->mu);
        status_t rc = STATUS_OK;
        status_msg_t err = {0};
        if (!failed) { /* after a failure the ring is broken: the rest are only counted */
            float *buf = s->pack + s->param_off[s->bucket_lo[b]];
            size_t n = 0;
            for (size_t i = s->bucket_lo[b]; i < s->bucket_hi[b]; i++) {
                model_param_t *p = model_param(m, i);
                memcpy(buf + n, p->grad, p->n * sizeof(float));
                n += p->n;
            }
            rc = ring_allreduce(s->ring, buf, n, &err);
            for (size_t i = s->bucket_lo[b], off = 0; rc == STATUS_OK && i < s->bucket_hi[b]; i++) {
                model_param_t *p = model_param(m, i);
                memcpy(p->grad, buf + off, p->n * sizeof(float));
                off += p->n;
            }
        }
        pthread_mutex_lock(&s->mu);
        if (rc != STATUS_OK && s->comm_rc == STATUS_OK) {
            s->comm_rc = rc;
            s->comm_err = err;
        }
        s->reduced++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Hands the comm thread every bucket whose params backward has finished (from `first` on). */
static void publish(sync_t *s, size_t first)
{
    pthread_mutex_lock(&s->mu);
    while (s->published < s->n_buckets && s->bucket_lo[s->published] >= first)
        s->published++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void on_backward(void *arg, model_backward_event_t ev, size_t first)
{
    if (ev == MODEL_GRADS_READY)
        publish(arg, first);
}

/* Cuts the gradients into buckets of at least `bytes` bytes, from the last param back. */
static status_t plan_buckets(sync_t *s, size_t bytes, status_msg_t *err)
{
    model_t *m = trainer_model(s->t);
    size_t np = model_param_count(m), off = 0, hi = np, size = 0;

    s->param_off = calloc(np + 1, sizeof(size_t));
    s->bucket_lo = calloc(np + 1, sizeof(size_t));
    s->bucket_hi = calloc(np + 1, sizeof(size_t));
    if (s->param_off == NULL || s->bucket_lo == NULL || s->bucket_hi == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < np; i++) {
        s->param_off[i] = off;
        off += model_param(m, i)->n;
    }
    for (size_t i = np; i-- > 0;) {
        size += model_param(m, i)->n * sizeof(float);
        if (size >= bytes || i == 0) {
            s->bucket_lo[s->n_buckets] = i;
            s->bucket_hi[s->n_buckets++] = hi;
            hi = i;
            size = 0;
        }
    }
    return STATUS_OK;
}

static status_t start_comm(sync_t *s, status_msg_t *err)
{
    sigset_t all, old;
    int rc;

    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    sigfillset(&all); /* signals belong to the daemon's main thread */
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&s->comm, NULL, comm_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return status_fail(err, STATUS_SYSTEM, "cannot start the all-reduce thread");
    s->comm_started = true;
    return STATUS_OK;
}

void sync_free(sync_t *s)
{
    if (s == NULL)
        return;
    if (s->comm_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->comm, NULL);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        model_on_backward(trainer_model(s->t), NULL, NULL);
    }
    if (s->bn_buf != NULL)
        model_set_sync(trainer_model(s->t), NULL, 0);
    free(s->bn_buf);
    free(s->param_off);
    free(s->bucket_lo);
    free(s->bucket_hi);
    for (size_t i = 0; s->rows_index != NULL && i < model_param_count(trainer_model(s->t)); i++) {
        free(s->rows_index[i]);
        free(s->rows_grad[i]);
    }
    free(s->rows_index);
    free(s->rows_grad);
    free(s->n_rows);
    free(s->own_index);
    free(s->own_grad);
    ring_free(s->ring);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    free(s->pack);
    free(s->snap_values);
    free(s->snap_slots);
    free(s);
}

status_t sync_new(trainer_t *t, int rank, int size, int64_t bytes_per_pack, bool accumulating,
                  sync_t **ret, int *ret_port, status_msg_t *err)
{
    model_t *m = trainer_model(t);
    sync_t *s;
    status_t rc;

    *ret = NULL;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    *s = (sync_t){.t = t, .rank = rank, .size = size, .listen_fd = -1};
    for (size_t i = 0; i < model_param_count(m); i++) {
        model_param_t *p = model_param(m, i);
        s->n_pack += p->n;
        if (p->sparse && size > 1)
            s->n_mask += (size_t)p->shape[0];
    }
    s->n_slots = optimizer_slot_count(trainer_optimizer(t)) * s->n_pack;
    s->pack = malloc((s->n_pack + s->n_mask + 1) * sizeof(float));
    if (s->pack != NULL && s->n_mask > 0 && make_rows(s) != STATUS_OK) {
        sync_free(s);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory for the Embedding rows");
    }
    s->snap_values = malloc((s->n_pack + 1) * sizeof(float));
    s->snap_slots = malloc((s->n_slots + 1) * sizeof(float));
    if (s->pack == NULL || s->snap_values == NULL || s->snap_slots == NULL) {
        sync_free(s);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    if (size > 1 && (s->bn_width = model_sync_width(m)) > 0) {
        s->bn_buf = calloc(s->bn_width * BN_LIMBS * (size_t)size, sizeof(float));
        if (s->bn_buf == NULL) {
            sync_free(s);
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
        }
        s->bn.sum = bn_sum;
        model_set_sync(m, &s->bn, 0);
    }
    rc = plan_buckets(s, bytes_per_pack > 0 ? (size_t)bytes_per_pack : SYNC_AUTO_BYTES_PER_PACK,
                      err);
    /* buckets during backward: dense gradients only (an Embedding's rows come after it), and
     * not while synchronized BatchNormalization needs the ring inside backward */
    if (rc == STATUS_OK && s->n_buckets > 1 && !accumulating && size > 1 && s->n_mask == 0 &&
        s->bn_buf == NULL)
        rc = start_comm(s, err);
    if (rc == STATUS_OK)
        rc = ring_listen(":0", &s->listen_fd, ret_port, err);
    if (rc != STATUS_OK) {
        sync_free(s);
        return rc;
    }
    *ret = s;
    return STATUS_OK;
}

status_t sync_connect(sync_t *s, char *const *ring, size_t n, int rank, uint64_t token,
                      int timeout_ms, status_msg_t *err)
{
    ring_opts_t o = {.rank = rank,
                     .size = (int)n,
                     .listen_fd = s->listen_fd,
                     .token = token,
                     .timeout_ms = timeout_ms};

    if (n < 1 || n > (size_t)s->size || rank < 0 || (size_t)rank >= n)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "rank %d of a ring of %zu for a job of %d workers", rank, n, s->size);
    ring_free(s->ring);
    s->ring = NULL;
    /* the survivors of a smaller ring share the slices of the workers it lost (a mirrored
     * job's worker has no slices: its replicas split each batch) */
    if (s->size > 1)
        STATUS_CHECK(trainer_set_slices(s->t, rank, (int)n, err));
    s->ring_rank = rank;
    s->ring_size = (int)n;
    s->bn_rc = STATUS_OK;
    o.next_address = ring[(size_t)(rank + 1) % n];
    return ring_connect(&o, &s->ring, err);
}

/* Values, slots, updates and data position as they are now, or back to them. */
static void snapshot(sync_t *s, bool take)
{
    model_t *m = trainer_model(s->t);
    size_t off = 0, soff = 0, per = optimizer_slot_count(trainer_optimizer(s->t));

    for (size_t i = 0; i < model_param_count(m); i++) {
        model_param_t *p = model_param(m, i);
        float *slots = trainer_slots(s->t, i);
        if (take) {
            memcpy(s->snap_values + off, p->value, p->n * sizeof(float));
            if (slots != NULL)
                memcpy(s->snap_slots + soff, slots, per * p->n * sizeof(float));
        } else {
            memcpy(p->value, s->snap_values + off, p->n * sizeof(float));
            if (slots != NULL)
                memcpy(slots, s->snap_slots + soff, per * p->n * sizeof(float));
        }
        off += p->n;
        soff += per * p->n;
    }
    if (take) {
        s->snap_iterations = trainer_iterations(s->t);
        trainer_position(s->t, 0, &s->snap_epoch, &s->snap_batch);
        s->has_snap = true;
    }
}

/* The update count goes round the ring with the values: four 16-bit limbs, each exact in a
 * float, zero on every rank but the root's, so the sum is the root's count. */
#define ITER_LIMBS 4

status_t sync_broadcast(sync_t *s, int root, status_msg_t *err)
{
    model_t *m = trainer_model(s->t);
    size_t per = optimizer_slot_count(trainer_optimizer(s->t)), off = 0, soff = 0;
    size_t n = s->n_pack + s->n_slots;
    float *buf = calloc(n + ITER_LIMBS, sizeof(float)), *limbs = buf + n;
    uint64_t iterations = 0;
    status_t rc;

    if (buf == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    /* the root's values, slots and update count, zeros elsewhere: the sum is the root's, bit
     * for bit */
    for (size_t i = 0; s->ring_rank == root && i < model_param_count(m); i++) {
        model_param_t *p = model_param(m, i);
        memcpy(buf + off, p->value, p->n * sizeof(float));
        if (trainer_slots(s->t, i) != NULL)
            memcpy(buf + s->n_pack + soff, trainer_slots(s->t, i), per * p->n * sizeof(float));
        off += p->n;
        soff += per * p->n;
    }
    for (int k = 0; s->ring_rank == root && k < ITER_LIMBS; k++)
        limbs[k] = (float)(((uint64_t)trainer_iterations(s->t) >> (16 * k)) & 0xffff);
    rc = ring_allreduce(s->ring, buf, n + ITER_LIMBS, err);
    off = soff = 0;
    for (size_t i = 0; rc == STATUS_OK && i < model_param_count(m); i++) {
        model_param_t *p = model_param(m, i);
        memcpy(p->value, buf + off, p->n * sizeof(float));
        if (trainer_slots(s->t, i) != NULL)
            memcpy(trainer_slots(s->t, i), buf + s->n_pack + soff, per * p->n * sizeof(float));
        off += p->n;
        soff += per * p->n;
    }
    for (int k = 0; k < ITER_LIMBS; k++)
        iterations |= (uint64_t)limbs[k] << (16 * k);
    free(buf);
    if (rc == STATUS_OK)
        trainer_set_iterations(s->t, (int64_t)iterations);
    return rc;
}

status_t sync_rollback(sync_t *s, status_msg_t *err)
{
    if (!s->has_snap)
        return STATUS_OK; /* no closure ran: nothing to undo */
    snapshot(s, false);
    trainer_set_iterations(s->t, s->snap_iterations);
    return trainer_seek(s->t, 0, s->snap_epoch, s->snap_batch, err);
}

int sync_failed_peer(const sync_t *s)
{
    return s != NULL ? ring_failed_peer(s->ring) : -1;
}

/* The gradients into the pack and back. */
/* An Embedding table's rows into its dense region of the pack, and its mask. */
static void densify(sync_t *s, size_t i, const model_param_t *p, float *g, float *mask)
{
    memset(g, 0, p->n * sizeof(float));
    memset(mask, 0, (size_t)p->shape[0] * sizeof(float));
    trainer_rows_into(s->t, i, g, mask);
}

/* The summed region back as the rows any worker touched (mask > 0), in id order. */
static void sparsify(sync_t *s, size_t i, const model_param_t *p, const float *g, const float *mask)
{
    size_t rows = (size_t)p->shape[0], dim = p->n / rows, n = 0;

    for (size_t id = 0; id < rows; id++) {
        if (mask[id] <= 0)
            continue;
        s->rows_index[i][n] = (int64_t)id;
        memcpy(s->rows_grad[i] + n * dim, g + id * dim, dim * sizeof(float));
        n++;
    }
    s->n_rows[i] = n;
}

/* The gradients into the pack and back (an Embedding's as rows, into s->rows_*). */
static void pack(sync_t *s, bool out)
{
    model_t *m = trainer_model(s->t);
    size_t off = 0, moff = s->n_pack;

    for (size_t i = 0; i < model_param_count(m); i++) {
        model_param_t *p = model_param(m, i);
        if (p->sparse && out)
            densify(s, i, p, s->pack + off, s->pack + moff);
        else if (p->sparse)
            sparsify(s, i, p, s->pack + off, s->pack + moff);
        else if (out)
            memcpy(s->pack + off, p->grad, p->n * sizeof(float));
        else
            memcpy(p->grad, s->pack + off, p->n * sizeof(float));
        off += p->n;
        moff += p->sparse ? (size_t)p->shape[0] : 0;
    }
}

/* Room for an Embedding table's summed rows: every row at most. */
static status_t make_rows(sync_t *s)
{
    model_t *m = trainer_model(s->t);
    size_t np = model_param_count(m);

    s->rows_index = calloc(np + 1, sizeof(*s->rows_index));
    s->rows_grad = calloc(np + 1, sizeof(*s->rows_grad));
    s->n_rows = calloc(np + 1, sizeof(*s->n_rows));
    s->own_index = calloc(np + 1, sizeof(*s->own_index));
    s->own_grad = calloc(np + 1, sizeof(*s->own_grad));
    if (!s->rows_index || !s->rows_grad || !s->n_rows || !s->own_index || !s->own_grad)
        return STATUS_NO_MEMORY;
    for (size_t i = 0; i < np; i++) {
        model_param_t *p = model_param(m, i);
        if (!p->sparse)
            continue;
        s->rows_index[i] = malloc(((size_t)p->shape[0] + 1) * sizeof(int64_t));
        s->rows_grad[i] = malloc((p->n + 1) * sizeof(float));
        if (s->rows_index[i] == NULL || s->rows_grad[i] == NULL)
            return STATUS_NO_MEMORY;
    }
    return STATUS_OK;
}

/* trainer_update with the summed rows of each Embedding in place of this worker's own. */
static status_t update_with_rows(sync_t *s, status_msg_t *err)
{
    model_t *m = trainer_model(s->t);
    size_t np = model_param_count(m);
    status_t rc;

    for (size_t i = 0; i < np; i++) {
        model_param_t *p = model_param(m, i);
        if (!p->sparse)
            continue;
        s->own_index[i] = p->rows_index;
        s->own_grad[i] = p->rows_grad;
        p->rows_index = s->rows_index[i];
        p->rows_grad = s->rows_grad[i];
        p->n_rows = s->n_rows[i];
    }
    rc = trainer_update(s->t, err);
    for (size_t i = 0; i < np; i++) { /* backward writes the model's own buffers */
        model_param_t *p = model_param(m, i);
        if (!p->sparse)
            continue;
        p->rows_index = s->own_index[i];
        p->rows_grad = s->own_grad[i];
        p->n_rows = 0;
    }
    return rc;
}

/* The gradients summed over the processes, then the update: the same on every process. */
static status_t reduce_and_update(sync_t *s, status_msg_t *err)
{
    if (s->size == 1) /* a mirrored job's worker: its replicas summed already */
        return trainer_update(s->t, err);
    s->counts.allreduces++;
    pack(s, true);
    STATUS_CHECK(ring_allreduce(s->ring, s->pack, s->n_pack + s->n_mask, err));
    pack(s, false);
    return s->n_mask > 0 ? update_with_rows(s, err) : trainer_update(s->t, err);
}

/* A step whose buckets go into the ring while backward runs: once every one is summed (those
 * backward has not announced go after it), the update. */
static status_t overlapped_step(sync_t *s, const data_batch_t *b, model_stats_t *st,
                                status_msg_t *err)
{
    model_t *m = trainer_model(s->t);
    status_t rc;

    pthread_mutex_lock(&s->mu);
    s->published = s->reduced = 0;
    s->comm_rc = STATUS_OK;
    pthread_mutex_unlock(&s->mu);
    model_on_backward(m, on_backward, s);
    rc = trainer_step(s->t, b, st, err);
    model_on_backward(m, NULL, NULL);
    pthread_mutex_lock(&s->mu);
    s->counts.during_backward += s->published;
    pthread_mutex_unlock(&s->mu);
    if (rc != STATUS_OK) /* the others wait for this step's gradients: tell them now */
        ring_abort(s->ring);
    else
        publish(s, 0);
    s->counts.allreduces += s->n_buckets;
    pthread_mutex_lock(&s->mu);
    while (s->reduced < s->published)
        pthread_cond_wait(&s->cv, &s->mu);
    if (rc == STATUS_OK && s->comm_rc != STATUS_OK) {
        rc = s->comm_rc;
        if (err != NULL)
            *err = s->comm_err;
    }
    pthread_mutex_unlock(&s->mu);
    return rc == STATUS_OK ? trainer_update(s->t, err) : rc;
}

status_t sync_steps(sync_t *s, int steps, _Atomic bool *cancelled, model_stats_t *ret,
                    int *ret_steps, status_msg_t *err)
{
    /* buckets during backward while each step is one backward pass: no lost worker's slices */
    bool overlap = s->comm_started && s->ring_size == s->size;

    *ret = (model_stats_t){0};
    *ret_steps = 0;
    if (s->ring == NULL)
        return status_fail(err, STATUS_INVALID_USAGE, "the ring of the job is not connected");
    if (s->bn_rc != STATUS_OK) /* a closure that failed in a sum: the ring is broken */
        return status_fail(err, s->bn_rc, "%s", s->bn_err.text);
    snapshot(s, true);
    trainer_drop_window(s->t);
    for (int k = 0; k < steps; k++) {
        data_batch_t b;
        model_stats_t st;
        if (atomic_load(cancelled))
            return status_fail(err, STATUS_CANCELLED, "the job was cancelled");
        if (!trainer_next(s->t, &b))
            break;
        if (overlap) {
            STATUS_CHECK(overlapped_step(s, &b, &st, err));
        } else {
            status_t rc = trainer_step(s->t, &b, &st, err);
            /* a sum of backward that failed leaves the step "done" with local statistics: the
             * ring is broken all the same, and no gradient may go into it */
            if (rc != STATUS_OK || s->bn_rc != STATUS_OK) {
                ring_abort(s->ring); /* the others wait for this step: tell them now */
                if (s->bn_rc != STATUS_OK && err != NULL) /* the ring failed, not the layer */
                    *err = s->bn_err;
                return s->bn_rc != STATUS_OK ? s->bn_rc : rc;
            }
            if (trainer_accumulate(s->t)) /* once per window of accumulate_steps */
                STATUS_CHECK(reduce_and_update(s, err));
        }
        ret->loss_sum += st.loss_sum;
        ret->correct += st.correct;
        ret->examples += st.examples;
        (*ret_steps)++;
    }
    /* a window never spans closures: every process ran the same batches, so all close it */
    if (trainer_close_window(s->t))
        STATUS_CHECK(reduce_and_update(s, err));
    return STATUS_OK;
}

size_t sync_buckets(const sync_t *s)
{
    return s->comm_started ? s->n_buckets : 1;
}

void sync_take_counts(sync_t *s, sync_counts_t *ret)
{
    *ret = s->counts;
    s->counts = (sync_counts_t){0};
}
