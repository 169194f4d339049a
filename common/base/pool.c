/* The pool of pool.h. Jobs live on their callers' stacks, in a queue under the pool's mutex;
 * a part is claimed and counted finished under the mutex too (parts are large: an update of a
 * quarter megabyte or more), so a job is never touched after its caller has seen it done. */
#include "base/pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct pool_job {
    pool_fn fn;
    void *arg;
    size_t n, next, done;
    struct pool_job *link;
} pool_job_t;

struct pool {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a job was queued, or stop */
    pthread_cond_t done; /* some job's last part finished */
    pool_job_t *head;
    bool stop;
    unsigned n_threads;
    pthread_t *tids;
};

/* Takes job j out of the queue if it is still there (mu held). */
static void unlink_job(pool_t *p, pool_job_t *j)
{
    for (pool_job_t **at = &p->head; *at != NULL; at = &(*at)->link)
        if (*at == j) {
            *at = j->link;
            return;
        }
}

/* Runs parts of j until none is left to claim (mu held on entry and exit). */
static void run_parts(pool_t *p, pool_job_t *j)
{
    while (j->next < j->n) {
        size_t part = j->next++;
        if (j->next == j->n) /* nothing more to claim: later threads skip it */
            unlink_job(p, j);
        pthread_mutex_unlock(&p->mu);
        j->fn(j->arg, part);
        pthread_mutex_lock(&p->mu);
        if (++j->done == j->n)
            pthread_cond_broadcast(&p->done);
    }
}

static void *pool_main(void *arg)
{
    pool_t *p = arg;
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->head == NULL && !p->stop)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->stop)
            break;
        run_parts(p, p->head);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

status_t pool_new(unsigned threads, pool_t **ret, status_msg_t *err)
{
    pool_t *p = calloc(1, sizeof(*p));

    if (p == NULL || (threads > 0 && (p->tids = calloc(threads, sizeof(*p->tids))) == NULL)) {
        free(p);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory for a pool of %u threads",
                           threads);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (; p->n_threads < threads; p->n_threads++)
        if (pthread_create(&p->tids[p->n_threads], NULL, pool_main, p) != 0) {
            pool_free(p);
            return status_fail(err, STATUS_SYSTEM, "cannot start thread %u of a pool of %u",
                               p->n_threads + 1, threads);
        }
    *ret = p;
    return STATUS_OK;
}

void pool_free(pool_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n_threads; i++)
        pthread_join(p->tids[i], NULL);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->tids);
    free(p);
}

unsigned pool_threads(const pool_t *p)
{
    return p != NULL ? p->n_threads : 0;
}

void pool_run(pool_t *p, size_t n, pool_fn fn, void *arg)
{
    pool_job_t j = {.fn = fn, .arg = arg, .n = n};
    pool_job_t **tail;

    if (p == NULL || p->n_threads == 0 || n <= 1) {
        for (size_t i = 0; i < n; i++)
            fn(arg, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    for (tail = &p->head; *tail != NULL; tail = &(*tail)->link)
        ;
    *tail = &j;
    pthread_cond_broadcast(&p->work);
    run_parts(p, &j);
    while (j.done < j.n)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
