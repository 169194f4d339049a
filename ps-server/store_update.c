/* Pulls (reading values, whole shards or rows) and pushes (applying gradients with the job's
 * optimizer), each under its shards' locks. A push is checked whole before any shard changes. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "rpc/types.h"
#include "store_internal.h"

static status_t check_rows(const sjob_t *j, const shard_t *sh, const int64_t *rows, size_t n,
                           store_err_t *err)
{
    const char *v = sh->var->name;

    if (sh->rank == 0)
        return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                          "variable '%s' of job '%s' is a scalar: it has no rows to select", v,
                          j->name);
    for (size_t i = 0; i < n; i++)
        if (rows[i] < 0 || (uint64_t)rows[i] >= sh->n_rows)
            return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                              "variable '%s' shard %d: row index %" PRId64
                              " (position %zu of %zu) is "
                              "outside [0, %zu)",
                              v, sh->index, rows[i], i, n, sh->n_rows);
    return STATUS_OK;
}

/* Bytes a read of the shard (or of n rows) returns, added to *total within the reply limit. */
static status_t add_reply(const store_t *s, const shard_t *sh, bool has_rows, size_t n_rows,
                          size_t *ret_bytes, size_t *total, store_err_t *err)
{
    size_t bytes = has_rows ? n_rows * sh->row_len * sizeof(float) : sh->n * sizeof(float);

    if (has_rows && n_rows > SIZE_MAX / sizeof(float) / (sh->row_len ? sh->row_len : 1))
        bytes = SIZE_MAX;
    if (bytes > s->limits.max_reply_bytes || *total > s->limits.max_reply_bytes - bytes)
        return store_fail(err, STATUS_RESOURCE_EXHAUSTED, sh->var->name,
                          "the reply would exceed %" PRIu64
                          " bytes at variable '%s' shard %d; ask for "
                          "fewer shards or rows per call",
                          s->limits.max_reply_bytes, sh->var->name, sh->index);
    *ret_bytes = bytes;
    *total += bytes;
    return STATUS_OK;
}

/* Describes the value a read of the shard (or of n_rows rows) returns (shard lock held). */
static void describe_value(const shard_t *sh, bool has_rows, size_t n_rows, store_value_t *ret)
{
    ret->version = sh->version;
    ret->rank = sh->rank;
    memcpy(ret->shape, sh->shape, sh->rank * sizeof(int64_t));
    if (has_rows)
        ret->shape[0] = (int64_t)n_rows;
}

/* Copies the shard, or the rows, to dst (shard lock held) and describes the value. */
static void read_value(const shard_t *sh, bool has_rows, const int64_t *rows, size_t n_rows,
                       char *dst, store_value_t *ret)
{
    size_t row_bytes = sh->row_len * sizeof(float);

    describe_value(sh, has_rows, n_rows, ret);
    if (!has_rows) {
        memcpy(dst, sh->values, sh->n * sizeof(float));
        return;
    }
    for (size_t r = 0; r < n_rows; r++)
        memcpy(dst + r * row_bytes, sh->values + (size_t)rows[r] * sh->row_len, row_bytes);
}

/* ---- work spread over the pool ------------------------------------------------------------- */

/* Dense work is split into parts of at least this many elements (a quarter megabyte of values:
 * more parts cost more in handing out than they gain), one per thread at most, cut at 64-byte
 * boundaries so that no two threads write one cache line. */
#define PART_MIN_ELEMS ((size_t)1 << 16)
#define PART_ALIGN     16
#define MAX_PARTS      64

static size_t part_size(const store_t *s, size_t n, size_t *ret_parts)
{
    size_t parts = (size_t)pool_threads(s->pool) + 1, size;

    if (parts > MAX_PARTS)
        parts = MAX_PARTS;
    if (parts > n / PART_MIN_ELEMS)
        parts = n / PART_MIN_ELEMS > 0 ? n / PART_MIN_ELEMS : 1;
    size = (n + parts - 1) / parts;
    size = (size + PART_ALIGN - 1) / PART_ALIGN * PART_ALIGN;
    *ret_parts = size > 0 ? (n + size - 1) / size : 1;
    return size > 0 ? size : 1;
}

typedef struct dense_update {
    const optimizer_config_t *opt;
    int64_t step;
    float *values, *slots, *out;
    const float *grad;
    size_t n, part;
} dense_update_t;

static void update_part(void *arg, size_t i)
{
    const dense_update_t *u = arg;
    size_t first = i * u->part, count = u->n - first < u->part ? u->n - first : u->part;

    optimizer_apply_dense_part(u->opt, u->step, u->values, u->grad, u->slots, u->n, first, count,
                               u->out);
}

/* One dense update of the whole shard (its write lock held), in one pass over values, slots and
 * gradient per element, spread over the pool; out (may be NULL) gets the new values as they are
 * written. */
static void update_dense(const store_t *s, const optimizer_config_t *opt, shard_t *sh,
                         const float *grad, float *out)
{
    dense_update_t u = {.opt = opt,
                        .step = (int64_t)sh->version,
                        .values = sh->values,
                        .slots = sh->slots,
                        .out = out,
                        .grad = grad,
                        .n = sh->n};
    size_t parts;

    u.part = part_size(s, sh->n, &parts);
    pool_run(s->pool, parts, update_part, &u);
}

typedef struct max_abs_job {
    const float *v;
    size_t n, part;
    double max[MAX_PARTS];
} max_abs_job_t;

static void max_abs_part(void *arg, size_t i)
{
    max_abs_job_t *m = arg;
    size_t first = i * m->part, count = m->n - first < m->part ? m->n - first : m->part;

    m->max[i] = optimizer_max_abs(m->v + first, count);
}

/* optimizer_max_abs over the pool. */
static double max_abs(const store_t *s, const float *v, size_t n)
{
    max_abs_job_t m = {.v = v, .n = n};
    size_t parts;
    double best = 0;

    m.part = part_size(s, n, &parts);
    pool_run(s->pool, parts, max_abs_part, &m);
    for (size_t i = 0; i < parts; i++)
        best = m.max[i] > best ? m.max[i] : best;
    return best;
}

status_t store_pull(store_t *s, const char *job, const store_pull_item_t *items, size_t n,
                    store_value_t *ret_values, void **ret_buf, size_t *ret_len, store_err_t *err)
{
    shard_t **shards = malloc((n ? n : 1) * sizeof(*shards));
    size_t total = 0;
    char *buf = NULL;
    sjob_t *j;
    status_t rc;

    if (shards == NULL)
        return store_fail(err, STATUS_NO_MEMORY, NULL, "out of memory for %zu pull items", n);
    pthread_rwlock_rdlock(&s->lock);
    STATUS_CHECK_GOTO(store_lookup_job(s, job, &j, err), rc, out);
    for (size_t i = 0; i < n; i++) {
        const store_pull_item_t *it = &items[i];
        STATUS_CHECK_GOTO(store_lookup_shard(j, &it->key, &shards[i], err), rc, out);
        if (it->has_rows)
            STATUS_CHECK_GOTO(check_rows(j, shards[i], it->rows, it->n_rows, err), rc, out);
        ret_values[i].offset = total;
        STATUS_CHECK_GOTO(
            add_reply(s, shards[i], it->has_rows, it->n_rows, &ret_values[i].bytes, &total, err),
            rc, out);
    }
    if (total > 0 && (buf = rpc_buffer_alloc(total)) == NULL) {
        rc = store_fail(err, STATUS_NO_MEMORY, NULL, "out of memory for a %zu-byte reply", total);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        shard_t *sh = shards[i];
        pthread_rwlock_rdlock(&sh->lock);
        read_value(sh, items[i].has_rows, items[i].rows, items[i].n_rows,
                   buf != NULL ? buf + ret_values[i].offset : NULL, &ret_values[i]);
        pthread_rwlock_unlock(&sh->lock);
        atomic_fetch_add_explicit(&sh->pulls, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&sh->bytes_pulled, ret_values[i].bytes, memory_order_relaxed);
    }
    *ret_buf = buf;
    *ret_len = total;
    buf = NULL;
    rc = STATUS_OK;
out:
    pthread_rwlock_unlock(&s->lock);
    free(buf);
    free(shards);
    return rc;
}

static status_t check_gradient(const sjob_t *j, const shard_t *sh, const store_push_item_t *it,
                               store_err_t *err)
{
    const char *v = sh->var->name;
    int64_t want[STORE_MAX_RANK];
    char a[160], b[160];

    memcpy(want, sh->shape, sh->rank * sizeof(int64_t));
    if (it->has_rows) {
        STATUS_CHECK(check_rows(j, sh, it->rows, it->n_rows, err));
        want[0] = (int64_t)it->n_rows;
    }
    if (it->rank != sh->rank || !store_same_dims(it->shape, want, sh->rank))
        return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                          "variable '%s' shard %d: the gradient's shape %s is not %s", v, sh->index,
                          store_shape_str(it->shape, it->rank, a, sizeof(a)),
                          store_shape_str(want, sh->rank, b, sizeof(b)));
    return STATUS_OK;
}

/* What a push item's check found: the version it was made at, the largest gradient magnitude,
 * and whether the shard's bounds proved the update safe (then `next` are the bounds after it). */
typedef struct check {
    uint64_t version;
    double gmax;
    bool proven;
    optimizer_bounds_t next;
} check_t;

/* Marks an update not checked yet: versions count pushes and never get there. */
#define NOT_CHECKED UINT64_MAX

/* Whether the update of it would keep every value and slot of sh finite in float32: proven from
 * the shard's bounds and the gradient's largest magnitude (c->gmax) when they allow, else by a
 * dry run of the optimizer on copies (optimizer_check_*). A NaN or infinite gradient fails it too
 * (every kernel carries the gradient into the value), and only then is the gradient scanned to say
 * so. Caller holds sh's lock, either kind. */
static status_t check_update(const optimizer_config_t *opt, const shard_t *sh,
                             const store_push_item_t *it, check_t *c, store_err_t *err)
{
    size_t bad, nan_at, n = it->has_rows ? it->n_rows * sh->row_len : sh->n;
    status_msg_t m;

    c->version = sh->version;
    c->proven = optimizer_bounds_step(opt, (int64_t)sh->version, c->gmax, &sh->bounds, &c->next);
    if (c->proven)
        return STATUS_OK;
    if (it->has_rows) {
        status_t rc =
            optimizer_check_rows(opt, (int64_t)sh->version, sh->values, sh->n_rows, sh->row_len,
                                 it->rows, it->grad, it->n_rows, sh->slots, NULL, &bad, &m);
        if (rc != STATUS_OK)
            return store_fail(err, rc, sh->var->name, "variable '%s' shard %d: %s", sh->var->name,
                              sh->index, m.text);
    } else {
        bad = optimizer_check_dense(opt, (int64_t)sh->version, sh->values, it->grad, sh->slots,
                                    sh->n);
    }
    if (bad < n && (nan_at = optimizer_first_non_finite(it->grad, n)) < n)
        return store_fail(err, STATUS_INVALID_ARGUMENT, sh->var->name,
                          "variable '%s' shard %d: the gradient holds %g at element %zu",
                          sh->var->name, sh->index, (double)it->grad[nan_at], nan_at);
    if (bad < n)
        return store_fail(
            err, STATUS_INVALID_ARGUMENT, sh->var->name,
            "variable '%s' shard %d: gradient element %zu (%g) at learning rate %g would "
            "make the variable or its optimizer slots overflow float32 or turn NaN",
            sh->var->name, sh->index, bad, (double)it->grad[bad],
            optimizer_learning_rate(opt, (int64_t)sh->version));
    return STATUS_OK;
}

/* One update of one shard, and the read-back of push-pull, under the shard's write lock. The
 * update was checked at version c->version (or NOT_CHECKED); if another push got there first, it
 * is checked now and, should it not be safe, not applied (false). Afterwards the shard's bounds
 * are the proven ones, or, after a dry run, measured anew. */
static bool apply_one(store_t *s, const optimizer_config_t *opt, shard_t *sh,
                      const store_push_item_t *it, check_t *c, void *scratch, bool pull_after,
                      char *dst, store_value_t *val, uint64_t *ret_version, store_err_t *err)
{
    uint64_t wire;
    double t0;

    pthread_rwlock_wrlock(&sh->lock);
    if (sh->version != c->version && check_update(opt, sh, it, c, err) != STATUS_OK) {
        pthread_rwlock_unlock(&sh->lock);
        return false;
    }
    t0 = clock_now_s();
    if (it->has_rows) /* indices were checked: it cannot fail */
        optimizer_apply_rows(opt, (int64_t)sh->version, sh->values, sh->n_rows, sh->row_len,
                             it->rows, it->grad, it->n_rows, sh->slots, scratch, NULL);
    else /* the values a pull after the push returns are written as they are updated */
        update_dense(s, opt, sh, it->grad, pull_after ? (float *)dst : NULL);
    sh->version++;
    if (c->proven)
        sh->bounds = c->next;
    else
        optimizer_bounds_measure(opt, sh->values, sh->slots, sh->n, &sh->bounds);
    t0 = clock_now_s() - t0;
    metric_observe(s->apply_seconds, t0);
    atomic_fetch_add_explicit(&s->apply_micros, (uint64_t)(t0 * 1e6), memory_order_relaxed);
    *ret_version = sh->version;
    if (pull_after && it->has_rows)
        read_value(sh, true, it->rows, it->n_rows, dst, val);
    else if (pull_after)
        describe_value(sh, false, 0, val);
    pthread_rwlock_unlock(&sh->lock);

    wire = it->has_rows ? it->n_rows * (sizeof(int64_t) + sh->row_len * sizeof(float))
                        : sh->n * sizeof(float);
    atomic_fetch_add_explicit(&sh->pushes, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->bytes_pushed, wire, memory_order_relaxed);
    if (pull_after) {
        atomic_fetch_add_explicit(&sh->pulls, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&sh->bytes_pulled, val->bytes, memory_order_relaxed);
    }
    return true;
}

/* Checks every item and sizes the scratch and reply (store lock held). */
static status_t validate_push(const store_t *s, const sjob_t *j, const store_push_item_t *items,
                              size_t n, bool pull_after, shard_t **shards, check_t *checks,
                              store_value_t *ret_values, size_t *ret_total, size_t *ret_scratch,
                              store_err_t *err)
{
    size_t total = 0, scratch = 0;

    for (size_t i = 0; i < n; i++) {
        const store_push_item_t *it = &items[i];
        status_t rc;
        STATUS_CHECK(store_lookup_shard(j, &it->key, &shards[i], err));
        STATUS_CHECK(check_gradient(j, shards[i], it, err));
        /* One item is checked under its write lock, just before it is applied: checked once,
         * even while other pushes hold the shard. Several are all checked first, so that one
         * that would fail leaves the others unapplied. */
        checks[i].version = NOT_CHECKED;
        /* Summed duplicate rows are at most as large as all of them together. */
        checks[i].gmax =
            max_abs(s, it->grad, it->has_rows ? it->n_rows * shards[i]->row_len : shards[i]->n) *
            (it->has_rows ? (double)it->n_rows : 1.0);
        if (n > 1) {
            pthread_rwlock_rdlock(&shards[i]->lock);
            rc = check_update(&j->opt, shards[i], it, &checks[i], err);
            pthread_rwlock_unlock(&shards[i]->lock);
            if (rc != STATUS_OK && err != NULL) {
                size_t used = strlen(err->msg.text);
                snprintf(err->msg.text + used, sizeof(err->msg.text) - used,
                         "; nothing was applied");
            }
            STATUS_CHECK(rc);
        }
        if (it->has_rows) {
            size_t need = optimizer_rows_scratch_size(it->n_rows, shards[i]->row_len);
            if (need == SIZE_MAX)
                return store_fail(err, STATUS_RESOURCE_EXHAUSTED, it->key.variable,
                                  "variable '%s': %zu rows are too many for one push",
                                  it->key.variable, it->n_rows);
            scratch = need > scratch ? need : scratch;
        }
        if (pull_after) {
            ret_values[i].offset = total;
            STATUS_CHECK(add_reply(s, shards[i], it->has_rows, it->n_rows, &ret_values[i].bytes,
                                   &total, err));
        }
    }
    *ret_total = total;
    *ret_scratch = scratch;
    return STATUS_OK;
}

status_t store_push(store_t *s, const char *job, const store_push_item_t *items, size_t n,
                    bool pull_after, uint64_t *ret_versions, store_value_t *ret_values,
                    void **ret_buf, size_t *ret_len, store_err_t *err)
{
    shard_t **shards = malloc((n ? n : 1) * sizeof(*shards));
    check_t *checks = malloc((n ? n : 1) * sizeof(*checks));
    size_t total = 0, scratch_len = 0, applied = 0;
    char *buf = NULL;
    void *scratch = NULL;
    sjob_t *j;
    status_t rc;

    if (shards == NULL || checks == NULL) {
        free(shards);
        free(checks);
        return store_fail(err, STATUS_NO_MEMORY, NULL, "out of memory for %zu push items", n);
    }
    pthread_rwlock_rdlock(&s->lock);
    STATUS_CHECK_GOTO(store_lookup_job(s, job, &j, err), rc, out);
    STATUS_CHECK_GOTO(validate_push(s, j, items, n, pull_after, shards, checks, ret_values, &total,
                                    &scratch_len, err),
                      rc, out);
    if ((scratch_len > 0 && (scratch = malloc(scratch_len)) == NULL) ||
        (total > 0 && (buf = rpc_buffer_alloc(total)) == NULL)) {
        rc = store_fail(err, STATUS_NO_MEMORY, NULL, "out of memory for a push of %zu items", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        applied += apply_one(s, &j->opt, shards[i], &items[i], &checks[i], scratch, pull_after,
                             pull_after && buf != NULL ? buf + ret_values[i].offset : NULL,
                             pull_after ? &ret_values[i] : NULL, &ret_versions[i], err);
    if (applied < n) {
        /* A single item checked at its update, or (rarely) one that a concurrent push changed
         * between the check of all items and its update. */
        rc = err != NULL ? err->msg.status : STATUS_INVALID_ARGUMENT;
        if (err != NULL) {
            size_t used = strlen(err->msg.text);
            if (applied == 0)
                snprintf(err->msg.text + used, sizeof(err->msg.text) - used,
                         "; nothing was applied");
            else
                snprintf(err->msg.text + used, sizeof(err->msg.text) - used,
                         " (after a concurrent push; %zu of the %zu items were applied)", applied,
                         n);
        }
        goto out;
    }
    if (pull_after) {
        *ret_buf = buf;
        *ret_len = total;
        buf = NULL;
    }
    rc = STATUS_OK;
out:
    pthread_rwlock_unlock(&s->lock);
    free(scratch);
    free(buf);
    free(shards);
    free(checks);
    return rc;
}

/* ---- drop, stats, totals ------------------------------------------------------------------ */
