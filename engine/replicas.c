/* Local replicas on threads (replicas.h). */
#define _POSIX_C_SOURCE 200809L
#include "replicas.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"

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
    status_t rc;
    status_msg_t err;
} replica_t;

struct replicas {
    model_t *first;
    int n, per;
    replica_t *reps; /* [0]: first, run by the caller */
    size_t bytes;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t generation; /* steps handed out */
    int pending;         /* replicas of this step still running */
    bool quit;
};

static void take_values(model_t *dst, model_t *src)
{
    for (size_t i = 0; i < model_param_count(src); i++)
        memcpy(model_param(dst, i)->value, model_param(src, i)->value,
               model_param(src, i)->n * sizeof(float));
}

static void run_slice(replica_t *p)
{
    p->st = (model_stats_t){0};
    p->rc = STATUS_OK;
    if (p->n == 0)
        return;
    if (p->index > 0) /* replica 0's values: restored, loaded or updated since the last step */
        take_values(p->model, p->set->first);
    p->rc = model_train_step(p->model, p->x, p->y, p->n, &p->st, &p->err);
}

static void *replica_main(void *arg)
{
    replica_t *p = arg;
    replicas_t *r = p->set;
    uint64_t seen = 0;

    blas_flush_denormals(); /* as the training thread does (blas.h) */
    blas_thread_serial(true);
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->quit && r->generation == seen)
            pthread_cond_wait(&r->go, &r->mu);
        if (r->quit)
            break;
        seen = r->generation;
        pthread_mutex_unlock(&r->mu);
        run_slice(p);
        pthread_mutex_lock(&r->mu);
        if (--r->pending == 0)
            pthread_cond_signal(&r->done);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

void replicas_free(replicas_t *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    r->quit = true;
    pthread_cond_broadcast(&r->go);
    pthread_mutex_unlock(&r->mu);
    for (int i = 1; r->reps != NULL && i < r->n; i++) {
        if (r->reps[i].started)
            pthread_join(r->reps[i].tid, NULL);
        model_free(r->reps[i].model);
    }
    free(r->reps);
    pthread_cond_destroy(&r->go);
    pthread_cond_destroy(&r->done);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

status_t replicas_new(const job_t *job, model_t *first, int n, int per_replica, uint64_t max_bytes,
                      replicas_t **ret, status_msg_t *err)
{
    replicas_t *r;
    sigset_t all, old;
    status_t rc = STATUS_OK;

    *ret = NULL;
    for (size_t i = 0; i < model_param_count(first); i++)
        if (model_param(first, i)->sparse)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: %s is an Embedding table: its gradients are rows, which the "
                               "replicas of a mirrored or central_storage job do not sum yet",
                               job->path ? job->path : "job", model_param(first, i)->name);
    if ((r = calloc(1, sizeof(*r))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->go, NULL);
    pthread_cond_init(&r->done, NULL);
    r->first = first;
    r->n = n;
    r->per = per_replica;
    if ((r->reps = calloc((size_t)n, sizeof(*r->reps))) == NULL) {
        replicas_free(r);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < n; i++)
        r->reps[i] = (replica_t){.set = r, .index = i, .model = i == 0 ? first : NULL};
    /* the copies' initial values do not matter (each step starts from replica 0's); their own
     * seeds give each its own dropout streams */
    for (int i = 1; i < n && rc == STATUS_OK; i++) {
        rc = model_new(&job->model, job->loss, job->from_logits, per_replica,
                       job->seed + (uint64_t)i * 0x9E3779B97F4A7C15ull,
                       max_bytes > r->bytes ? max_bytes - r->bytes : 1, &r->reps[i].model, err);
        if (rc == STATUS_OK)
            r->bytes += model_bytes(r->reps[i].model);
    }
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

/* first's gradients = the sum of every replica's, each weighted by its share of the m examples. */
static void reduce(replicas_t *r, int m)
{
    for (size_t i = 0; i < model_param_count(r->first); i++) {
        model_param_t *p = model_param(r->first, i);
        float w0 = (float)r->reps[0].n / (float)m;
        for (size_t k = 0; k < p->n; k++)
            p->grad[k] *= w0;
        for (int q = 1; q < r->n; q++) {
            const float *g = model_param(r->reps[q].model, i)->grad;
            float w = (float)r->reps[q].n / (float)m;
            if (r->reps[q].n == 0)
                continue;
            for (size_t k = 0; k < p->n; k++)
                p->grad[k] += w * g[k];
        }
    }
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
        r->reps[q].y = b->labels + (lo < m ? lo : 0);
    }
    pthread_mutex_lock(&r->mu);
    r->pending = r->n - 1;
    r->generation++;
    pthread_cond_broadcast(&r->go);
    pthread_mutex_unlock(&r->mu);
    blas_thread_serial(true); /* the pool serves one caller: every replica's GEMMs run alone */
    run_slice(&r->reps[0]);
    blas_thread_serial(false);
    pthread_mutex_lock(&r->mu);
    while (r->pending > 0)
        pthread_cond_wait(&r->done, &r->mu);
    pthread_mutex_unlock(&r->mu);
    for (int q = 0; q < r->n; q++) {
        ret_stats->loss_sum += r->reps[q].st.loss_sum;
        ret_stats->correct += r->reps[q].st.correct;
        ret_stats->examples += r->reps[q].st.examples;
    }
    for (int q = 0; q < r->n; q++)
        if (r->reps[q].rc != STATUS_OK)
            return status_fail(err, r->reps[q].rc, "replica %d: %s", q, r->reps[q].err.text);
    reduce(r, m);
    return STATUS_OK;
}
