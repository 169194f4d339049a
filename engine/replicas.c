/* Local replicas on threads (replicas.h). */
#define _POSIX_C_SOURCE 200809L
#include "replicas.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "model_internal.h"
#include "spin.h"

/* synchronized BatchNormalization's exchange (model.h) between local replicas: each replica with
 * examples writes its sums in its row, all wait, each adds the rows up in replica order, all
 * wait again (so that no row is written before every replica has read it). A replica that fails
 * its step aborts it: the others return false instead of waiting for sums that never come. */
typedef struct local_sync {
    layer_sync_t base; /* first: the layers' pointer is this one's */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int parties; /* this step's replicas with examples */
    int arrived;
    unsigned generation;
    bool aborted;
    double *rows; /* a row of width doubles per replica */
    size_t width;
} local_sync_t;

static bool sync_wait(local_sync_t *s)
{
    bool ok;

    pthread_mutex_lock(&s->mu);
    unsigned g = s->generation;
    if (s->aborted) {
        ok = false;
    } else if (++s->arrived == s->parties) {
        s->arrived = 0;
        s->generation++;
        pthread_cond_broadcast(&s->cv);
        ok = true;
    } else {
        while (s->generation == g && !s->aborted)
            pthread_cond_wait(&s->cv, &s->mu);
        ok = s->generation != g;
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static bool local_sum(layer_sync_t *base, int rank, double *vals, size_t len)
{
    local_sync_t *s = (local_sync_t *)base;

    if (len > s->width)
        return false;
    memcpy(s->rows + (size_t)rank * s->width, vals, len * sizeof(double));
    if (!sync_wait(s))
        return false;
    for (size_t i = 0; i < len; i++) {
        double sum = 0;
        for (int q = 0; q < s->parties; q++) /* the replicas with examples come first */
            sum += s->rows[(size_t)q * s->width + i];
        vals[i] = sum;
    }
    return sync_wait(s);
}

static void sync_abort(local_sync_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->aborted = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

typedef struct replica {
    struct replicas *set;
    model_t *model;
    int index;
    pthread_t tid;
    bool started;
    /* this step's slice of the batch, and what came of it */
    const float *x, *y;
    int n;
    model_stats_t st;
    double *metrics; /* replicas 1...: their metric sums of the step */
    status_t rc;
    status_msg_t err;
} replica_t;

struct replicas {
    model_t *first;
    int n, per;
    size_t width;    /* of the metric sums */
    replica_t *reps; /* [0]: first, run by the caller */
    size_t bytes;
    /* Hand-offs spin first and then block (spin.h); lost wake-ups are ruled out the Dekker way,
     * as in blas.c: a waiter counts itself asleep before it looks one last time, the other side
     * moves the counter before it looks for sleepers, all with sequentially consistent atomics.
     * The task is written before the generation moves and read after it is seen. */
    pthread_mutex_t mu;
    pthread_cond_t go, done, sliced;
    _Atomic uint64_t generation;  /* tasks handed out */
    _Atomic int pending;          /* replicas of this task still running, replica 0 not counted */
    _Atomic int slicing;          /* replicas of this step still in forward and backward */
    _Atomic int sleepers;         /* replicas blocked on go */
    _Atomic int barrier_sleepers; /* replicas blocked on sliced */
    _Atomic bool caller_sleeps;   /* the caller blocked on done */
    _Atomic bool quit;
    int m; /* this step's examples */
    /* per param: the sparse gradient rows of every replica, an id's summed (NULL: a dense
     * param); cat_* and refs: every replica's rows end to end, and their order by id, as
     * gather_rows merges them (room for the largest table's) */
    int64_t **rows_index;
    float **rows_grad;
    size_t *n_rows;
    int64_t *cat_index;
    float *cat_grad;
    struct row_ref *refs;
    local_sync_t *sync; /* synchronized BatchNormalization's; NULL: none in the model */
    /* the task: a step (fn NULL), or fn(arg, q, n) on every replica q */
    replicas_fn fn;
    void *arg;
};

/* The replicas read replica 0's values where they are: nothing writes them while a step
 * computes (the updates run between steps, replicas_parallel), so every replica starts each step
 * from replica 0's values without a copy. (Replicas on devices of their own will need copies.) */
static void share_values(model_t *dst, model_t *src)
{
    model_use_values(dst, src);
}

void replicas_part(int q, int n, size_t len, size_t *ret_lo, size_t *ret_hi)
{
    *ret_lo = len * (size_t)q / (size_t)n;
    *ret_hi = len * (size_t)(q + 1) / (size_t)n;
}

/* Replica p's part of every gradient, summed over the replicas into replica 0's: each
 * replica's gradients are of its slice's loss divided by the whole batch's examples, so the
 * sum is the gradient of the mean loss over the batch. */
static void reduce_part(replica_t *p)
{
    replicas_t *r = p->set;

    for (size_t i = 0; i < model_param_count(r->first); i++) {
        model_param_t *dst = model_param(r->first, i);
        size_t lo, hi;
        if (dst->sparse)
            continue; /* gathered by replicas_rows */
        replicas_part(p->index, r->n, dst->n, &lo, &hi);
        for (int q = 1; q < r->n; q++) {
            const float *g = model_param(r->reps[q].model, i)->grad;
            if (r->reps[q].n == 0)
                continue;
            for (size_t k = lo; k < hi; k++)
                dst->grad[k] += g[k];
        }
    }
}

/* A step on one replica: forward and backward on its slice, then (once every replica is
 * through) its part of the sum, unless one failed. Called with r->mu not held. */
static void run_slice(replica_t *p)
{
    replicas_t *r = p->set;
    bool ok = true;

    p->st = (model_stats_t){0};
    p->rc = STATUS_OK;
    if (p->n > 0) {
        p->rc = model_train_slice(p->model, p->x, p->y, p->n, r->m, &p->st, &p->err);
        if (p->rc != STATUS_OK && r->sync != NULL) /* nobody waits for its sums */
            sync_abort(r->sync);
    }
    /* the barrier: every replica's gradients are made before any is summed */
    SPIN_HAPPENS_BEFORE(&r->slicing);
    if (atomic_fetch_sub(&r->slicing, 1) == 1) {
        if (atomic_load(&r->barrier_sleepers) > 0) {
            pthread_mutex_lock(&r->mu);
            pthread_cond_broadcast(&r->sliced);
            pthread_mutex_unlock(&r->mu);
        }
    } else if (!spin_until_zero(&r->slicing)) {
        pthread_mutex_lock(&r->mu);
        atomic_fetch_add(&r->barrier_sleepers, 1);
        while (atomic_load(&r->slicing) > 0)
            pthread_cond_wait(&r->sliced, &r->mu);
        atomic_fetch_sub(&r->barrier_sleepers, 1);
        pthread_mutex_unlock(&r->mu);
    }
    SPIN_HAPPENS_AFTER(&r->slicing);
    for (int q = 0; q < r->n; q++)
        ok &= r->reps[q].rc == STATUS_OK;
    if (ok)
        reduce_part(p);
}

static void run_task(replica_t *p)
{
    if (p->set->fn != NULL)
        p->set->fn(p->set->arg, p->index, p->set->n);
    else
        run_slice(p);
}

static void *replica_main(void *arg)
{
    replica_t *p = arg;
    replicas_t *r = p->set;
    uint64_t seen = 0;

    blas_flush_denormals(); /* as the training thread does (blas.h) */
    blas_thread_serial(true);
    for (;;) {
        if (!spin_while_equal(&r->generation, seen)) {
            pthread_mutex_lock(&r->mu);
            atomic_fetch_add(&r->sleepers, 1);
            while (atomic_load(&r->generation) == seen)
                pthread_cond_wait(&r->go, &r->mu);
            atomic_fetch_sub(&r->sleepers, 1);
            pthread_mutex_unlock(&r->mu);
        }
        seen = atomic_load(&r->generation);
        SPIN_HAPPENS_AFTER(&r->generation);
        if (atomic_load(&r->quit))
            break;
        run_task(p);
        SPIN_HAPPENS_BEFORE(&r->pending);
        if (atomic_fetch_sub(&r->pending, 1) == 1 && atomic_load(&r->caller_sleeps)) {
            pthread_mutex_lock(&r->mu);
            pthread_cond_signal(&r->done);
            pthread_mutex_unlock(&r->mu);
        }
    }
    return NULL;
}

void replicas_free(replicas_t *r)
{
    if (r == NULL)
        return;
    atomic_store(&r->quit, true);
    pthread_mutex_lock(&r->mu);
    atomic_fetch_add(&r->generation, 1);
    pthread_cond_broadcast(&r->go);
    pthread_mutex_unlock(&r->mu);
    for (int i = 1; r->reps != NULL && i < r->n; i++) {
        if (r->reps[i].started)
            pthread_join(r->reps[i].tid, NULL);
        model_free(r->reps[i].model);
        free(r->reps[i].metrics);
    }
    free(r->reps);
    for (size_t i = 0; r->rows_index != NULL && i < model_param_count(r->first); i++) {
        free(r->rows_index[i]);
        free(r->rows_grad[i]);
    }
    free(r->rows_index);
    free(r->rows_grad);
    free(r->n_rows);
    free(r->cat_index);
    free(r->cat_grad);
    free(r->refs);
    if (r->sync != NULL) {
        model_set_sync(r->first, NULL, 0); /* replica 0 outlives the set */
        pthread_mutex_destroy(&r->sync->mu);
        pthread_cond_destroy(&r->sync->cv);
        free(r->sync->rows);
        free(r->sync);
    }
    pthread_cond_destroy(&r->go);
    pthread_cond_destroy(&r->done);
    pthread_cond_destroy(&r->sliced);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

typedef struct row_ref {
    int64_t id;
    size_t pos; /* in cat_index */
} row_ref_t;

static int row_ref_cmp(const void *a, const void *b)
{
    const row_ref_t *x = a, *y = b;

    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Room for every replica's sparse gradient rows of each Embedding table: a replica's batch
 * gives at most per * ids-per-example rows. */
static status_t make_rows(replicas_t *r, status_msg_t *err)
{
    size_t np = model_param_count(r->first), most = 0, most_rows = 0;

    r->rows_index = calloc(np + 1, sizeof(*r->rows_index));
    r->rows_grad = calloc(np + 1, sizeof(*r->rows_grad));
    r->n_rows = calloc(np + 1, sizeof(*r->n_rows));
    if (r->rows_index == NULL || r->rows_grad == NULL || r->n_rows == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < np; i++) {
        model_param_t *p = model_param(r->first, i);
        size_t at[JOB_MAX_MODEL_INPUTS], lens[JOB_MAX_MODEL_INPUTS], ids = 0, rows, len, n;
        /* the ids an example holds for this table: its layer's inputs (model_param_ids) */
        if (!p->sparse || (n = model_param_ids(r->first, i, at, lens)) == 0)
            continue;
        for (size_t k = 0; k < n; k++)
            ids += lens[k];
        rows = (size_t)r->n * (size_t)r->per * ids;
        len = p->n / (size_t)p->shape[0];
        r->rows_index[i] = malloc((rows + 1) * sizeof(int64_t));
        r->rows_grad[i] = malloc((rows * len + 1) * sizeof(float));
        if (r->rows_index[i] == NULL || r->rows_grad[i] == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory for the gradient rows");
        r->bytes += rows * (sizeof(int64_t) + len * sizeof(float));
        most = rows * len > most ? rows * len : most;
        most_rows = rows > most_rows ? rows : most_rows;
    }
    if (most == 0)
        return STATUS_OK;
    r->cat_index = malloc((most_rows + 1) * sizeof(int64_t));
    r->cat_grad = malloc((most + 1) * sizeof(float));
    r->refs = malloc((most_rows + 1) * sizeof(row_ref_t));
    if (r->cat_index == NULL || r->cat_grad == NULL || r->refs == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory for the gradient rows");
    r->bytes += most_rows * (sizeof(int64_t) + sizeof(row_ref_t)) + most * sizeof(float);
    return STATUS_OK;
}

/* Every replica's sparse gradient rows of each Embedding table, one row per id, the rows of an
 * id several replicas touched summed in replica order (as the optimizer would sum them, to the
 * same bits): the gradient one device's model makes, whose norm a clipping measures. */
static void gather_rows(replicas_t *r)
{
    for (size_t i = 0; i < model_param_count(r->first); i++) {
        model_param_t *p0 = model_param(r->first, i);
        size_t len, n = 0, out = 0;
        if (!p0->sparse)
            continue;
        len = p0->n / (size_t)p0->shape[0];
        for (int q = 0; q < r->n; q++) {
            const model_param_t *p = model_param(r->reps[q].model, i);
            if (r->reps[q].n == 0)
                continue;
            memcpy(r->cat_index + n, p->rows_index, p->n_rows * sizeof(int64_t));
            memcpy(r->cat_grad + n * len, p->rows_grad, p->n_rows * len * sizeof(float));
            n += p->n_rows;
        }
        for (size_t j = 0; j < n; j++)
            r->refs[j] = (row_ref_t){r->cat_index[j], j};
        qsort(r->refs, n, sizeof(r->refs[0]), row_ref_cmp);
        for (size_t j = 0; j < n; out++) {
            float *dst = r->rows_grad[i] + out * len;
            const row_ref_t *first = &r->refs[j];
            memcpy(dst, r->cat_grad + first->pos * len, len * sizeof(float));
            r->rows_index[i][out] = first->id;
            for (j++; j < n && r->refs[j].id == first->id; j++) {
                const float *g = r->cat_grad + r->refs[j].pos * len;
                for (size_t k = 0; k < len; k++)
                    dst[k] += g[k];
            }
        }
        r->n_rows[i] = out;
    }
}

bool replicas_rows(const replicas_t *r, size_t param, const int64_t **ret_index, float **ret_grad,
                   size_t *ret_n)
{
    if (r->rows_index[param] == NULL)
        return false;
    *ret_index = r->rows_index[param];
    *ret_grad = r->rows_grad[param];
    *ret_n = r->n_rows[param];
    return true;
}

/* The exchange of synchronized BatchNormalization, every replica's layers pointed at it. */
static status_t make_sync(replicas_t *r, size_t width, status_msg_t *err)
{
    local_sync_t *s = calloc(1, sizeof(*s));

    if (s == NULL || (s->rows = calloc((size_t)r->n * width, sizeof(double))) == NULL) {
        free(s);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->base.sum = local_sum;
    s->width = width;
    r->sync = s;
    for (int q = 0; q < r->n; q++)
        model_set_sync(r->reps[q].model, &s->base, q);
    return STATUS_OK;
}

status_t replicas_new(const job_t *job, model_t *first, int n, int per_replica, uint64_t max_bytes,
                      replicas_t **ret, status_msg_t *err)
{
    replicas_t *r;
    sigset_t all, old;
    status_t rc = STATUS_OK;

    *ret = NULL;
    if ((r = calloc(1, sizeof(*r))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->go, NULL);
    pthread_cond_init(&r->done, NULL);
    pthread_cond_init(&r->sliced, NULL);
    r->first = first;
    r->n = n;
    r->per = per_replica;
    if ((r->reps = calloc((size_t)n, sizeof(*r->reps))) == NULL) {
        replicas_free(r);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < n; i++)
        r->reps[i] = (replica_t){.set = r, .index = i, .model = i == 0 ? first : NULL};
    r->width = job->metric_width;
    if ((rc = make_rows(r, err)) != STATUS_OK) {
        replicas_free(r);
        return rc;
    }
    /* the copies' own values go unused: they read replica 0's (share_values) */
    for (int i = 1; i < n && rc == STATUS_OK; i++) {
        rc = model_new(&job->model, job->loss, job->from_logits, per_replica,
                       job->seed + (uint64_t)i * 0x9E3779B97F4A7C15ull,
                       max_bytes > r->bytes ? max_bytes - r->bytes : 1, &r->reps[i].model, err);
        if (rc == STATUS_OK) {
            r->bytes += model_bytes(r->reps[i].model);
            share_values(r->reps[i].model, first);
            rc = model_set_loss_options(r->reps[i].model, job, err);
            /* the labels the data gives, checked on the first */
            for (int k = 0; rc == STATUS_OK && k < first->n_heads; k++) {
                r->reps[i].model->heads[k].label_at = first->heads[k].label_at;
                r->reps[i].model->heads[k].label_len = first->heads[k].label_len;
            }
            r->reps[i].model->label_len = first->label_len;
            if (job->metric_width > 0) {
                r->reps[i].metrics = calloc(job->metric_width, sizeof(double));
                if (r->reps[i].metrics == NULL)
                    rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
                model_metrics_into(r->reps[i].model, r->reps[i].metrics);
            }
        }
    }
    if (rc == STATUS_OK && model_sync_width(first) > 0)
        rc = make_sync(r, model_sync_width(first), err);
    sigfillset(&all); /* signals belong to the main thread */
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (int i = 1; i < n && rc == STATUS_OK; i++) {
        r->reps[i].started = pthread_create(&r->reps[i].tid, NULL, replica_main, &r->reps[i]) == 0;
        if (!r->reps[i].started)
            rc = status_fail(err, STATUS_SYSTEM, "cannot start the thread of replica %d", i);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != STATUS_OK) {
        replicas_free(r);
        return rc;
    }
    *ret = r;
    return STATUS_OK;
}

int replicas_count(const replicas_t *r)
{
    return r->n;
}

size_t replicas_bytes(const replicas_t *r)
{
    return r->bytes;
}

/* Hands the task (r->fn, r->arg) to every replica, runs replica 0's here, and waits for all. */
static void run_all(replicas_t *r)
{
    atomic_store(&r->pending, r->n - 1);
    SPIN_HAPPENS_BEFORE(&r->generation);
    atomic_fetch_add(&r->generation, 1);
    if (atomic_load(&r->sleepers) > 0) {
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->go);
        pthread_mutex_unlock(&r->mu);
    }
    blas_thread_serial(true); /* the pool serves one caller: every replica's GEMMs run alone */
    run_task(&r->reps[0]);
    blas_thread_serial(false);
    if (!spin_until_zero(&r->pending)) {
        pthread_mutex_lock(&r->mu);
        atomic_store(&r->caller_sleeps, true);
        while (atomic_load(&r->pending) > 0)
            pthread_cond_wait(&r->done, &r->mu);
        atomic_store(&r->caller_sleeps, false);
        pthread_mutex_unlock(&r->mu);
    }
    SPIN_HAPPENS_AFTER(&r->pending);
}

void replicas_parallel(replicas_t *r, replicas_fn fn, void *arg)
{
    r->fn = fn;
    r->arg = arg;
    run_all(r);
    r->fn = NULL;
    r->arg = NULL;
}

status_t replicas_step(replicas_t *r, const data_batch_t *b, model_stats_t *ret_stats,
                       status_msg_t *err)
{
    size_t in = model_input_len(r->first);
    int m = b->size;

    *ret_stats = (model_stats_t){0};
    if (m < 1 || m > r->n * r->per)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "a batch of %d examples for %d replicas of at most %d", m, r->n, r->per);
    /* contiguous slices: replica q takes examples [q * per, (q + 1) * per) of the batch */
    for (int q = 0; q < r->n; q++) {
        int lo = q * r->per, hi = lo + r->per < m ? lo + r->per : m;
        r->reps[q].n = hi > lo ? hi - lo : 0;
        r->reps[q].x = b->features + (size_t)(lo < m ? lo : 0) * in;
        r->reps[q].y = b->labels + (size_t)(lo < m ? lo : 0) * r->first->label_len;
        /* replica q's slice of this batch: its own draws, the same on every run */
        model_set_draw_key(r->reps[q].model, model_draw_key(b->epoch, b->index, q));
    }
    r->m = m;
    if (r->sync != NULL) { /* nobody waits in it between steps */
        r->sync->parties = 0;
        for (int q = 0; q < r->n; q++)
            r->sync->parties += r->reps[q].n > 0;
        r->sync->arrived = 0;
        r->sync->aborted = false;
    }
    atomic_store(&r->slicing, r->n);
    run_all(r);
    for (int q = 0; q < r->n; q++) {
        double *sink = model_metrics_sink(r->first), *own = r->reps[q].metrics;
        ret_stats->loss_sum += r->reps[q].st.loss_sum;
        ret_stats->correct += r->reps[q].st.correct;
        ret_stats->examples += r->reps[q].st.examples;
        for (size_t k = 0; own != NULL && k < r->width; k++) {
            if (sink != NULL)
                sink[k] += own[k];
            own[k] = 0;
        }
    }
    /* the first failure by replica order, not one that only says another replica failed */
    for (int pass = 0; pass < 2; pass++)
        for (int q = 0; q < r->n; q++)
            if (r->reps[q].rc != STATUS_OK && (pass == 1 || r->reps[q].rc != STATUS_CANCELLED))
                return status_fail(err, r->reps[q].rc, "replica %d: %s", q, r->reps[q].err.text);
    gather_rows(r);
    return STATUS_OK;
}
