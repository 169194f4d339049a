/* The variable store. Layout: store -> jobs (array, creation order) -> variables (array in
 * creation order, with an open-addressing hash index by name) -> the shards of the variable held
 * here (array sorted by shard index). Values and slots of a shard are two exact-size arrays;
 * nothing is allocated ahead of need except those small index arrays.
 *
 * Create runs in three steps so that initializing a large variable does not stop pulls and
 * pushes of other jobs: plan under the read lock, allocate and initialize outside any lock, then
 * plan again and commit under the write lock. Every allocation the commit needs is made before
 * the first change, so a create either happens whole or not at all. */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np: writer-preferring locks */
#include "store_internal.h"
#include "store_stats.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

status_t store_fail(store_err_t *err, status_t st, const char *culprit, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL)
        return st;
    err->msg.status = st;
    va_start(ap, fmt);
    vsnprintf(err->msg.text, sizeof(err->msg.text), fmt, ap);
    va_end(ap);
    snprintf(err->culprit, sizeof(err->culprit), "%s", culprit ? culprit : "");
    return st;
}

uint64_t store_hash(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001B3ull;
    return h;
}

void store_rwlock_init(pthread_rwlock_t *l)
{
    pthread_rwlockattr_t a;

    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(l, &a);
    pthread_rwlockattr_destroy(&a);
}

/* "[2, 3]" into buf. */
const char *store_shape_str(const int64_t *shape, size_t rank, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "[");
    for (size_t i = 0; i < rank && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
    return buf;
}

bool store_same_dims(const int64_t *a, const int64_t *b, size_t n)
{
    return n == 0 || memcmp(a, b, n * sizeof(*a)) == 0;
}

status_t store_check_name(const char *name, const char *what, store_err_t *err)
{
    size_t len;

    if (name == NULL || name[0] == '\0')
        return store_fail(err, STATUS_INVALID_ARGUMENT, what, "the %s name is empty", what);
    len = strnlen(name, STORE_MAX_NAME + 1);
    if (len > STORE_MAX_NAME)
        return store_fail(err, STATUS_INVALID_ARGUMENT, what, "the %s name is longer than %d bytes",
                          what, STORE_MAX_NAME);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f)
            return store_fail(err, STATUS_INVALID_ARGUMENT, what,
                              "the %s name holds control character 0x%02x at byte %zu", what, c, i);
    }
    return STATUS_OK;
}

/* ---- lookups (store lock held) ------------------------------------------------------------ */

sjob_t *store_find_job(const store_t *s, const char *name, size_t *ret_pos)
{
    for (size_t i = 0; i < s->n_jobs; i++)
        if (strcmp(s->jobs[i]->name, name) == 0) {
            if (ret_pos)
                *ret_pos = i;
            return s->jobs[i];
        }
    return NULL;
}

var_t *store_find_var(const sjob_t *j, const char *name)
{
    size_t mask = j->index_cap - 1;

    if (j->index_cap == 0)
        return NULL;
    for (size_t h = store_hash(0xCBF29CE484222325ull, name) & mask;; h = (h + 1) & mask) {
        size_t e = j->index[h];
        if (e == 0)
            return NULL;
        if (strcmp(j->vars[e - 1]->name, name) == 0)
            return j->vars[e - 1];
    }
}

shard_t *store_find_shard(const var_t *v, int index)
{
    size_t lo = 0, hi = v->n_shards;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->shards[mid]->index == index)
            return v->shards[mid];
        if (v->shards[mid]->index < index)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

status_t store_lookup_job(const store_t *s, const char *job, sjob_t **ret, store_err_t *err)
{
    STATUS_CHECK(store_check_name(job, "job", err));
    *ret = store_find_job(s, job, NULL);
    if (*ret == NULL)
        return store_fail(err, STATUS_NOT_FOUND, job,
                          "job '%s' has no variables on this parameter server", job);
    return STATUS_OK;
}

status_t store_lookup_shard(const sjob_t *j, const store_key_t *key, shard_t **ret,
                            store_err_t *err)
{
    var_t *v;

    STATUS_CHECK(store_check_name(key->variable, "variable", err));
    v = store_find_var(j, key->variable);
    if (v == NULL)
        return store_fail(err, STATUS_NOT_FOUND, key->variable, "job '%s' has no variable '%s'",
                          j->name, key->variable);
    *ret = store_find_shard(v, key->shard);
    if (*ret == NULL)
        return store_fail(err, STATUS_NOT_FOUND, key->variable,
                          "variable '%s' of job '%s' has no shard %d on this parameter server "
                          "(it has %d shards in all)",
                          key->variable, j->name, key->shard, v->num_shards);
    return STATUS_OK;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

store_t *store_new(const store_limits_t *limits, metric_t *apply_seconds)
{
    store_t *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->limits = *limits;
    s->apply_seconds = apply_seconds;
    store_rwlock_init(&s->lock);
    return s;
}

void store_set_pool(store_t *s, pool_t *pool)
{
    s->pool = pool;
}

uint64_t store_shard_version(const shard_t *sh)
{
    uint64_t v = atomic_load(&sh->blocks[0].version);

    for (size_t b = 1; b < sh->n_blocks; b++) {
        uint64_t w = atomic_load(&sh->blocks[b].version);
        v = w < v ? w : v;
    }
    return v;
}

double store_apply_seconds(const store_t *s)
{
    return (double)atomic_load(&s->apply_micros) * 1e-6;
}

void store_shard_free(shard_t *sh)
{
    if (sh == NULL)
        return;
    for (size_t b = 0; sh->blocks != NULL && b < sh->n_blocks; b++)
        pthread_mutex_destroy(&sh->blocks[b].mu);
    free(sh->blocks);
    free(sh->values);
    free(sh->slots);
    free(sh);
}

void store_var_free(var_t *v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < v->n_shards; i++)
        store_shard_free(v->shards[i]);
    free(v->shards);
    free(v->name);
    free(v);
}

void store_job_free(sjob_t *j)
{
    if (j == NULL)
        return;
    for (size_t i = 0; i < j->n_vars; i++)
        store_var_free(j->vars[i]);
    free(j->vars);
    free(j->index);
    free(j->name);
    free(j);
}

void store_free(store_t *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n_jobs; i++)
        store_job_free(s->jobs[i]);
    free(s->jobs);
    pthread_rwlock_destroy(&s->lock);
    free(s);
}

/* ---- create: checking one description ----------------------------------------------------- */

status_t store_drop_job(store_t *s, const char *job, size_t *ret_shards, store_err_t *err)
{
    sjob_t *j;
    size_t pos;
    status_t rc;

    STATUS_CHECK(store_check_name(job, "job", err));
    pthread_rwlock_wrlock(&s->lock);
    j = store_find_job(s, job, &pos);
    if (j == NULL) {
        rc = store_fail(err, STATUS_NOT_FOUND, job,
                        "job '%s' has no variables on this parameter server", job);
    } else {
        memmove(&s->jobs[pos], &s->jobs[pos + 1], (s->n_jobs - pos - 1) * sizeof(*s->jobs));
        s->n_jobs--;
        s->param_bytes -= j->param_bytes;
        s->slot_bytes -= j->slot_bytes;
        s->overhead_bytes -= j->overhead_bytes;
        s->n_vars -= j->n_vars;
        s->n_shards -= j->n_shards;
        rc = STATUS_OK;
    }
    pthread_rwlock_unlock(&s->lock);
    if (j != NULL && ret_shards != NULL)
        *ret_shards = j->n_shards;
    store_job_free(j); /* no call can reach it any more: every user held the store lock */
    return rc;
}

static void job_stats(const sjob_t *j, store_stats_cb cb, void *arg)
{
    for (size_t i = 0; i < j->n_vars; i++) {
        const var_t *v = j->vars[i];
        for (size_t k = 0; k < v->n_shards; k++) {
            shard_t *sh = v->shards[k];
            store_shard_stats_t st = {
                .job = j->name,
                .variable = v->name,
                .shard = sh->index,
                .rank = sh->rank,
                .shape = sh->shape,
                .value_bytes = (uint64_t)sh->n * sizeof(float),
                .slot_bytes = (uint64_t)sh->n * sizeof(float) * sh->n_slots,
                .pulls = atomic_load_explicit(&sh->pulls, memory_order_relaxed),
                .pushes = atomic_load_explicit(&sh->pushes, memory_order_relaxed),
                .bytes_pulled = atomic_load_explicit(&sh->bytes_pulled, memory_order_relaxed),
                .bytes_pushed = atomic_load_explicit(&sh->bytes_pushed, memory_order_relaxed),
            };
            st.version = store_shard_version(sh);
            cb(&st, arg);
        }
    }
}

status_t store_stats(store_t *s, const char *job, store_stats_cb cb, void *arg, store_err_t *err)
{
    sjob_t *j = NULL;
    status_t rc = STATUS_OK;

    pthread_rwlock_rdlock(&s->lock);
    if (job != NULL && job[0] != '\0')
        rc = store_lookup_job(s, job, &j, err);
    for (size_t i = 0; rc == STATUS_OK && i < s->n_jobs; i++)
        if (j == NULL || s->jobs[i] == j)
            job_stats(s->jobs[i], cb, arg);
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

void store_totals(store_t *s, store_totals_t *ret)
{
    pthread_rwlock_rdlock(&s->lock);
    ret->param_bytes = s->param_bytes;
    ret->slot_bytes = s->slot_bytes;
    ret->overhead_bytes = s->overhead_bytes;
    ret->jobs = s->n_jobs;
    ret->variables = s->n_vars;
    ret->shards = s->n_shards;
    pthread_rwlock_unlock(&s->lock);
}
