/* Pulls (reading values, whole shards or rows) and pushes (applying gradients with the job's
 * optimizer), block by block under each block's lock (store_internal.h). A push is checked
 * whole before any block changes; its blocks are then updated on the store's pool, each in one
 * pass that also writes the values a pull after the push returns. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
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

/* Bytes a read of `elems` elements of `esize` bytes returns, added to *total within the reply
 * limit. */
static status_t add_reply(const store_t *s, const shard_t *sh, size_t elems, size_t esize,
                          size_t *ret_bytes, size_t *total, store_err_t *err)
{
    size_t bytes = elems > SIZE_MAX / esize ? SIZE_MAX : elems * esize;

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

/* Elements a read returns: the rows asked for, else the shard (or a chunk's rows). */
static size_t reply_elems(const shard_t *sh, bool has_rows, size_t n_rows)
{
    if (has_rows)
        return n_rows > SIZE_MAX / (sh->row_len ? sh->row_len : 1) ? SIZE_MAX
                                                                   : n_rows * sh->row_len;
    return sh->n;
}

/* Describes the value a read returns: the shard's shape (with n_rows first for rows), at
 * `version`. */
static void describe_value(const shard_t *sh, bool has_rows, size_t n_rows, uint64_t version,
                           store_value_t *ret)
{
    ret->version = version;
    ret->rank = sh->rank;
    memcpy(ret->shape, sh->shape, sh->rank * sizeof(int64_t));
    if (has_rows)
        ret->shape[0] = (int64_t)n_rows;
}

static void lock_blocks(shard_t *sh)
{
    for (size_t b = 0; b < sh->n_blocks; b++)
        pthread_mutex_lock(&sh->blocks[b].mu);
}

static void unlock_blocks(shard_t *sh)
{
    for (size_t b = sh->n_blocks; b-- > 0;)
        pthread_mutex_unlock(&sh->blocks[b].mu);
}

/* Copies the shard (block by block, each under its lock), or the rows (every block locked, in
 * order), to dst and describes the value. */
static void read_value(shard_t *sh, bool has_rows, const int64_t *rows, size_t n_rows, char *dst,
                       store_value_t *ret)
{
    size_t row_bytes = sh->row_len * sizeof(float);

    describe_value(sh, has_rows, n_rows, store_shard_version(sh), ret);
    if (!has_rows) {
        for (size_t b = 0; b < sh->n_blocks; b++) {
            size_t first = block_first_row(sh, b) * sh->row_len;
            pthread_mutex_lock(&sh->blocks[b].mu);
            memcpy(dst + first * sizeof(float), sh->values + first,
                   block_n_rows(sh, b) * row_bytes);
            pthread_mutex_unlock(&sh->blocks[b].mu);
        }
        return;
    }
    lock_blocks(sh);
    for (size_t r = 0; r < n_rows; r++)
        memcpy(dst + r * row_bytes, sh->values + (size_t)rows[r] * sh->row_len, row_bytes);
    unlock_blocks(sh);
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
        ret_values[i].chunk_offset = 0;
        ret_values[i].bf16 = false;
        STATUS_CHECK_GOTO(add_reply(s, shards[i], reply_elems(shards[i], it->has_rows, it->n_rows),
                                    sizeof(float), &ret_values[i].bytes, &total, err),
                          rc, out);
    }
    if (total > 0 && (buf = rpc_buffer_alloc(total)) == NULL) {
        rc = store_fail(err, STATUS_NO_MEMORY, NULL, "out of memory for a %zu-byte reply", total);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        shard_t *sh = shards[i];
        read_value(sh, items[i].has_rows, items[i].rows, items[i].n_rows,
                   buf != NULL ? buf + ret_values[i].offset : NULL, &ret_values[i]);
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

/* ---- pushes: checking the request --------------------------------------------------------- */

static bool item_bf16(const store_push_item_t *it)
{
    return it->grad_pieces != NULL ? it->grad_pieces_bf16 : it->grad_bf16 != NULL;
}

/* The rows [first, end) of its shard that an item updates: all of them, or its chunk's. */
static void item_span(const shard_t *sh, const store_push_item_t *it, size_t *first, size_t *end)
{
    *first = it->has_chunk ? it->chunk_row : 0;
    *end = it->has_chunk ? it->chunk_row + it->chunk_rows : sh->n_rows;
}

/* A gradient in pieces must hold every element of its span from grad_at: the service sizes it
 * from the shape before it gets here, and the store does not take that on trust. After
 * check_gradient, which makes the span valid. */
static status_t check_pieces(const shard_t *sh, const store_push_item_t *it, store_err_t *err)
{
    size_t first, end, esize = item_bf16(it) ? sizeof(uint16_t) : sizeof(float);

    if (it->grad_pieces == NULL)
        return STATUS_OK;
    item_span(sh, it, &first, &end);
    size_t bytes = (end - first) * sh->row_len * esize;
    if (it->grad_at > it->grad_pieces->len || bytes > it->grad_pieces->len - it->grad_at)
        return store_fail(err, STATUS_INVALID_ARGUMENT, sh->var->name,
                          "variable '%s' shard %d: the gradient needs %zu bytes from byte %zu of "
                          "a payload of %zu",
                          sh->var->name, sh->index, bytes, it->grad_at, it->grad_pieces->len);
    return STATUS_OK;
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
    if (it->has_rows && (it->grad == NULL || it->grad_bf16 != NULL || it->grad_pieces != NULL))
        return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                          "variable '%s' shard %d: a row gradient is float32, in one array", v,
                          sh->index);
    if (!it->has_chunk)
        return STATUS_OK;
    if (it->has_rows || sh->rank == 0)
        return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                          "variable '%s' shard %d: only a dense gradient of rows may come in "
                          "chunks",
                          v, sh->index);
    if (it->chunk_rows == 0 || it->chunk_row >= sh->n_rows ||
        it->chunk_rows > sh->n_rows - it->chunk_row)
        return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                          "variable '%s' shard %d: the chunk of rows [%zu, +%zu) is outside the "
                          "shard's %zu rows",
                          v, sh->index, it->chunk_row, it->chunk_rows, sh->n_rows);
    if (it->chunk_row % sh->block_rows != 0 ||
        ((it->chunk_row + it->chunk_rows) % sh->block_rows != 0 &&
         it->chunk_row + it->chunk_rows != sh->n_rows))
        return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                          "variable '%s' shard %d: the chunk of rows [%zu, +%zu) is not whole "
                          "blocks of %zu rows",
                          v, sh->index, it->chunk_row, it->chunk_rows, sh->block_rows);
    return STATUS_OK;
}

/* Orders the dense items' spans by shard, then first row, to find overlaps. */
typedef struct span {
    const shard_t *sh;
    size_t first, end, item;
} span_t;

static int span_cmp(const void *pa, const void *pb)
{
    const span_t *a = pa, *b = pb;
    if (a->sh != b->sh)
        return (uintptr_t)a->sh < (uintptr_t)b->sh ? -1 : 1;
    return a->first < b->first ? -1 : a->first > b->first;
}

/* Two dense items of one request may not update the same rows: a duplicated or overlapping
 * chunk (or a chunk beside its whole shard) is refused with the whole request. */
static status_t check_overlaps(shard_t **shards, const store_push_item_t *items, size_t n,
                               store_err_t *err)
{
    span_t *sp = malloc((n ? n : 1) * sizeof(*sp));
    size_t m = 0;
    status_t rc = STATUS_OK;

    if (sp == NULL)
        return store_fail(err, STATUS_NO_MEMORY, NULL, "out of memory for %zu push items", n);
    for (size_t i = 0; i < n; i++) {
        if (items[i].has_rows)
            continue;
        sp[m] = (span_t){.sh = shards[i], .item = i};
        item_span(shards[i], &items[i], &sp[m].first, &sp[m].end);
        m++;
    }
    qsort(sp, m, sizeof(*sp), span_cmp);
    for (size_t i = 1; i < m && rc == STATUS_OK; i++)
        if (sp[i].sh == sp[i - 1].sh && sp[i].first < sp[i - 1].end)
            rc = store_fail(err, STATUS_INVALID_ARGUMENT, sp[i].sh->var->name,
                            "variable '%s' shard %d: items %zu and %zu both update rows [%zu, "
                            "%zu); nothing was applied",
                            sp[i].sh->var->name, sp[i].sh->index, sp[i - 1].item, sp[i].item,
                            sp[i].first, sp[i].end < sp[i - 1].end ? sp[i].end : sp[i - 1].end);
    free(sp);
    return rc;
}

/* ---- pushes: one task per block ------------------------------------------------------------ */

/* Marks a block not checked yet: versions count updates and never get there. */
#define NOT_CHECKED UINT64_MAX

/* One block of one item: where its gradient rows are, what its check found (the version it was
 * made at, the gradient's largest magnitude, whether the block's bounds proved the update safe
 * and then the bounds after it), and its version after the update. */
typedef struct task {
    size_t item;
    shard_t *sh;
    size_t block;
    /* The block's rows of the gradient (dense), or the item's rows, from byte src_at of src:
     * where gRPC received them, or one piece (flat) over a gradient in memory. A bfloat16 one is
     * widened into wide first, which src then covers. */
    pieces_t src;
    size_t src_at;
    bool src_bf16;
    pieces_part_t flat;
    float *wide;
    float *out;         /* the block's rows of the reply (dense push-pull), or NULL */
    uint16_t *out_bf16; /* the same in bfloat16 (STORE_PULL_BFLOAT16) */
    void *scratch;      /* a row update's own (optimizer_rows_scratch_size) */
    uint64_t version;   /* checked at; NOT_CHECKED */
    double gmax;        /* < 0: not measured yet */
    bool proven;
    optimizer_bounds_t next;
    bool applied;
    uint64_t after;
} task_t;

typedef struct push_run {
    const store_push_item_t *items;
    const optimizer_config_t *opt;
    task_t *tasks;
    char *scratch; /* the row updates', one piece each */
    bool pull_after, pull_bf16;
    char *buf;
    store_value_t *values;
    pthread_mutex_t err_mu;
    store_err_t *err;
    bool failed;
} push_run_t;

/* Records the first failure of a push's tasks (any thread). */
static void task_fail(push_run_t *r, status_t st, const shard_t *sh, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void task_fail(push_run_t *r, status_t st, const shard_t *sh, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&r->err_mu);
    if (!r->failed && r->err != NULL) {
        va_start(ap, fmt);
        vsnprintf(r->err->msg.text, sizeof(r->err->msg.text), fmt, ap);
        va_end(ap);
        r->err->msg.status = st;
        snprintf(r->err->culprit, sizeof(r->err->culprit), "%s", sh->var->name);
    }
    r->failed = true;
    pthread_mutex_unlock(&r->err_mu);
}

/* Elements of task t's rows, and the first of them in the shard. */
static size_t task_elems(const push_run_t *r, const task_t *t, size_t *ret_first)
{
    const store_push_item_t *it = &r->items[t->item];

    *ret_first = block_first_row(t->sh, t->block) * t->sh->row_len;
    if (it->has_rows)
        return it->n_rows * t->sh->row_len;
    return block_n_rows(t->sh, t->block) * t->sh->row_len;
}

/* A bfloat16 gradient's block widened to float32 (once per task); false when out of memory. */
static bool task_grad(push_run_t *r, task_t *t, size_t n)
{
    pieces_walk_t w;
    const void *run;
    size_t count, done = 0;

    if (!t->src_bf16)
        return true;
    if ((t->wide = malloc((n ? n : 1) * sizeof(float))) == NULL) {
        task_fail(r, STATUS_NO_MEMORY, t->sh,
                  "out of memory widening a bfloat16 gradient of %zu elements", n);
        return false;
    }
    for (pieces_walk_init(&w, &t->src, t->src_at, sizeof(uint16_t), n);
         pieces_walk_next(&w, &run, &count); done += count)
        bf16_to_floats(t->wide + done, run, count);
    t->src = pieces_flat(&t->flat, t->wide, n * sizeof(float));
    t->src_at = 0;
    t->src_bf16 = false;
    return true;
}

/* The loops below walk a task's n-element float32 gradient a run at a time: a run lies in one
 * of gRPC's slices, at any alignment, or is one element that a slice boundary cut. The
 * optimizers work element by element, so the runs give the bits one pass over the whole would. */
static void grad_walk(pieces_walk_t *w, const task_t *t, size_t n)
{
    pieces_walk_init(w, &t->src, t->src_at, sizeof(float), n);
}

/* Element k of t's float32 gradient. */
static float grad_elem(const task_t *t, size_t k)
{
    float f;

    pieces_read(&t->src, t->src_at + k * sizeof(float), &f, sizeof(f));
    return f;
}

static size_t grad_first_non_finite(const task_t *t, size_t n)
{
    pieces_walk_t w;
    const void *g;
    size_t count, off = 0, k;

    for (grad_walk(&w, t, n); pieces_walk_next(&w, &g, &count); off += count)
        if ((k = optimizer_first_non_finite(g, count)) < count)
            return off + k;
    return n;
}

static double grad_max_abs(const task_t *t, size_t n)
{
    pieces_walk_t w;
    const void *g;
    size_t count;
    double m = 0;

    for (grad_walk(&w, t, n); pieces_walk_next(&w, &g, &count);) {
        double a = optimizer_max_abs(g, count);
        m = a > m ? a : m;
    }
    return m;
}

/* A moving statistic's n values from `first`: their average with the pushed ones, run by run,
 * the reply's copy written in the same pass. */
static void grad_average(const push_run_t *r, const task_t *t, size_t first, size_t n)
{
    const store_push_item_t *it = &r->items[t->item];
    shard_t *sh = t->sh;
    float m = sh->var->momentum, rest = sh->var->rest;
    pieces_walk_t w;
    const void *run;
    size_t count, off = 0;

    if (it->batches > 1) { /* a window's: that many updates at once */
        m = optimizer_momentum_power(m, it->batches);
        rest = 1 - m;
    }
    for (grad_walk(&w, t, n); pieces_walk_next(&w, &run, &count); off += count) {
        const unaligned_float_t *g = run;
        float *v = sh->values + first + off, *out = t->out != NULL ? t->out + off : NULL;
        for (size_t k = 0; k < count; k++) {
            v[k] = v[k] * m + g[k] * rest;
            if (out != NULL)
                out[k] = v[k];
        }
    }
}

/* Whether t's update keeps every value and slot of its block finite in float32: proven from
 * the block's bounds and the gradient's largest magnitude when they allow, else by a dry run of
 * the optimizer on copies. A NaN or infinite gradient fails it too (every kernel carries the
 * gradient into the value), and only then is the gradient scanned to say so. Block lock held. */
static bool check_task(push_run_t *r, task_t *t)
{
    const store_push_item_t *it = &r->items[t->item];
    shard_t *sh = t->sh;
    block_t *bl = &sh->blocks[t->block];
    size_t first, n = task_elems(r, t, &first), bad, nan_at;
    int64_t step = (int64_t)atomic_load(&bl->version);
    status_msg_t m;

    if (!task_grad(r, t, n))
        return false;
    if (sh->var->moving) { /* a convex mix of two finite values stays finite */
        t->version = (uint64_t)step;
        t->proven = false;
        if ((nan_at = grad_first_non_finite(t, n)) == n)
            return true;
        task_fail(r, STATUS_INVALID_ARGUMENT, sh,
                  "variable '%s' shard %d: the statistic holds %g at element %zu", sh->var->name,
                  sh->index, (double)grad_elem(t, nan_at), first + nan_at);
        return false;
    }
    if (t->gmax < 0) /* summed duplicate rows are at most as large as all of them together */
        t->gmax = grad_max_abs(t, n) * (it->has_rows ? (double)it->n_rows : 1.0);
    t->version = (uint64_t)step;
    t->proven = optimizer_bounds_step(r->opt, step, t->gmax, &bl->bounds, &t->next);
    if (t->proven)
        return true;
    if (it->has_rows) {
        status_t rc =
            optimizer_check_rows(r->opt, step, sh->values, sh->n_rows, sh->row_len, it->rows,
                                 it->grad, it->n_rows, sh->slots, NULL, &bad, &m);
        if (rc != STATUS_OK) {
            task_fail(r, rc, sh, "variable '%s' shard %d: %s", sh->var->name, sh->index, m.text);
            return false;
        }
    } else {
        bad = optimizer_check_dense_pieces(r->opt, step, sh->values + first, &t->src, t->src_at,
                                           sh->slots != NULL ? sh->slots + first : NULL, sh->n, n);
    }
    if (bad >= n)
        return true;
    if ((nan_at = grad_first_non_finite(t, n)) < n)
        task_fail(r, STATUS_INVALID_ARGUMENT, sh,
                  "variable '%s' shard %d: the gradient holds %g at element %zu", sh->var->name,
                  sh->index, (double)grad_elem(t, nan_at), (it->has_rows ? 0 : first) + nan_at);
    else
        task_fail(r, STATUS_INVALID_ARGUMENT, sh,
                  "variable '%s' shard %d: gradient element %zu (%g) at learning rate %g would "
                  "make the variable or its optimizer slots overflow float32 or turn NaN",
                  sh->var->name, sh->index, (it->has_rows ? 0 : first) + bad,
                  (double)grad_elem(t, bad), optimizer_learning_rate(r->opt, step));
    return false;
}

/* Pool part: checks one task under its block's lock, before any block changes. */
static void check_part(void *arg, size_t i)
{
    push_run_t *r = arg;
    task_t *t = &r->tasks[i];
    block_t *bl = &t->sh->blocks[t->block];

    pthread_mutex_lock(&bl->mu);
    check_task(r, t);
    pthread_mutex_unlock(&bl->mu);
}

/* Keras's constraint after the update, on the block's n values from first (the whole shard,
 * the whole variable, when its norms span rows: then the shard is one block), and the reply's
 * copy of them again. */
static void constrain(const shard_t *sh, size_t first, size_t n, float *out)
{
    int shape[STORE_MAX_RANK];
    const var_t *v = sh->var;

    for (size_t d = 0; d < v->rank; d++)
        shape[d] = d == 0 ? (int)(n / sh->row_len) : (int)v->full_shape[d];
    job_constraint_apply(&v->constraint, sh->values + first, shape, (int)v->rank, n);
    if (out != NULL)
        memcpy(out, sh->values + first, n * sizeof(float));
}

/* Pool part: one task's update under its block's lock, the reply's rows written in the same
 * pass. Checked again first if another push updated the block since its check (or it was not
 * checked: a push of one block is checked only here); if that check fails it is not applied. */
static void apply_part(void *arg, size_t i)
{
    push_run_t *r = arg;
    task_t *t = &r->tasks[i];
    const store_push_item_t *it = &r->items[t->item];
    shard_t *sh = t->sh;
    block_t *bl = &sh->blocks[t->block];
    size_t first, n = task_elems(r, t, &first);
    int64_t step;

    pthread_mutex_lock(&bl->mu);
    if (!task_grad(r, t, n) || (atomic_load(&bl->version) != t->version && !check_task(r, t))) {
        pthread_mutex_unlock(&bl->mu);
        return;
    }
    step = (int64_t)t->version;
    if (sh->var->moving) /* a moving statistic: its average with the pushed one */
        grad_average(r, t, first, n);
    else if (it->has_rows) /* indices were checked: it cannot fail */
        optimizer_apply_rows(r->opt, step, sh->values, sh->n_rows, sh->row_len, it->rows, it->grad,
                             it->n_rows, sh->slots, t->scratch, NULL);
    else /* the reply's values written in the same pass */
        optimizer_apply_dense_pieces(r->opt, step, sh->values + first, &t->src, t->src_at,
                                     sh->slots != NULL ? sh->slots + first : NULL, sh->n, n,
                                     t->out);
    if (sh->var->constraint.kind != JOB_CONSTRAINT_NONE)
        constrain(sh, first, n, t->out);
    if (t->proven && sh->var->constraint.kind == JOB_CONSTRAINT_NONE)
        bl->bounds = t->next;
    else
        optimizer_bounds_measure_part(r->opt, sh->values, sh->slots, sh->n, first,
                                      block_n_rows(sh, t->block) * sh->row_len, &bl->bounds);
    if (t->out_bf16 != NULL) /* the block is in the cache: narrowed in a second pass */
        bf16_from_floats(t->out_bf16, sh->values + first, n);
    t->after = (uint64_t)step + 1;
    atomic_store(&bl->version, t->after);
    if (r->pull_after && it->has_rows) { /* a sparse shard is one block: all of it is locked */
        size_t row_bytes = sh->row_len * sizeof(float);
        char *dst = r->buf + r->values[t->item].offset;
        for (size_t k = 0; k < it->n_rows; k++)
            memcpy(dst + k * row_bytes, sh->values + (size_t)it->rows[k] * sh->row_len, row_bytes);
    }
    t->applied = true;
    pthread_mutex_unlock(&bl->mu);
}

/* ---- pushes ------------------------------------------------------------------------------- */

/* The scratch a row item's update takes, in a piece that keeps the next one aligned. */
static size_t scratch_of(const store_push_item_t *it, const shard_t *sh)
{
    size_t need = optimizer_rows_scratch_size(it->n_rows, sh->row_len);
    return need > SIZE_MAX - 64 ? SIZE_MAX : (need + 63) / 64 * 64;
}

/* Checks every item, sizes the reply and the row scratch, and counts the tasks (store lock
 * held). */
static status_t validate_push(const store_t *s, const sjob_t *j, const store_push_item_t *items,
                              size_t n, store_pull_after_t pull_after, shard_t **shards,
                              store_value_t *ret_values, size_t *ret_total, size_t *ret_scratch,
                              size_t *ret_tasks, store_err_t *err)
{
    size_t total = 0, scratch = 0, tasks = 0;

    for (size_t i = 0; i < n; i++) {
        const store_push_item_t *it = &items[i];
        size_t first, end;
        STATUS_CHECK(store_lookup_shard(j, &it->key, &shards[i], err));
        STATUS_CHECK(check_gradient(j, shards[i], it, err));
        STATUS_CHECK(check_pieces(shards[i], it, err));
        item_span(shards[i], it, &first, &end);
        tasks +=
            it->has_rows ? 1 : (end - first + shards[i]->block_rows - 1) / shards[i]->block_rows;
        if (it->has_rows) {
            size_t need = scratch_of(it, shards[i]);
            if (need == SIZE_MAX || scratch > SIZE_MAX - need)
                return store_fail(err, STATUS_RESOURCE_EXHAUSTED, it->key.variable,
                                  "variable '%s': %zu rows are too many for one push",
                                  it->key.variable, it->n_rows);
            scratch += need;
        }
        if (pull_after != STORE_PUSH_ONLY) {
            size_t esize = pull_after == STORE_PULL_BFLOAT16 ? sizeof(uint16_t) : sizeof(float);
            if (it->has_rows && esize != sizeof(float))
                return store_fail(err, STATUS_INVALID_ARGUMENT, it->key.variable,
                                  "variable '%s': rows are pulled as float32, not bfloat16",
                                  it->key.variable);
            ret_values[i].offset = total;
            ret_values[i].chunk_offset = first * shards[i]->row_len * esize;
            ret_values[i].bf16 = esize != sizeof(float);
            STATUS_CHECK(add_reply(s, shards[i],
                                   it->has_rows ? reply_elems(shards[i], true, it->n_rows)
                                                : (end - first) * shards[i]->row_len,
                                   esize, &ret_values[i].bytes, &total, err));
        }
    }
    STATUS_CHECK(check_overlaps(shards, items, n, err));
    *ret_total = total;
    *ret_scratch = scratch;
    *ret_tasks = tasks;
    return STATUS_OK;
}

/* Where task t's gradient starts: element `from` of its item's (0 for rows). */
static void task_source(task_t *t, const store_push_item_t *it, const shard_t *sh, size_t from)
{
    size_t first, end, esize = item_bf16(it) ? sizeof(uint16_t) : sizeof(float);
    size_t elems = it->has_rows ? it->n_rows * sh->row_len : 0;

    t->src_bf16 = item_bf16(it);
    if (it->grad_pieces != NULL) {
        t->src = *it->grad_pieces;
        t->src_at = it->grad_at + from * esize;
        return;
    }
    if (!it->has_rows) {
        item_span(sh, it, &first, &end);
        elems = (end - first) * sh->row_len;
    }
    t->src = pieces_flat(&t->flat, it->grad_bf16 != NULL ? (const void *)it->grad_bf16 : it->grad,
                         elems * esize);
    t->src_at = from * esize;
}

/* The tasks of every item: one per block a dense item covers, one per row item. */
static void make_tasks(push_run_t *r, shard_t **shards, size_t n)
{
    size_t k = 0, scratch = 0;

    for (size_t i = 0; i < n; i++) {
        const store_push_item_t *it = &r->items[i];
        shard_t *sh = shards[i];
        size_t first, end;
        item_span(sh, it, &first, &end);
        for (size_t b = first / sh->block_rows; b * sh->block_rows < end || it->has_rows; b++) {
            size_t from = (block_first_row(sh, b) - first) * sh->row_len;
            task_t *t = &r->tasks[k++];
            *t = (task_t){.item = i,
                          .sh = sh,
                          .block = it->has_rows ? 0 : b,
                          .version = NOT_CHECKED,
                          .gmax = -1};
            task_source(t, it, sh, from);
            if (r->pull_after && !it->has_rows && r->pull_bf16)
                t->out_bf16 = (uint16_t *)(r->buf + r->values[i].offset) + from;
            else if (r->pull_after && !it->has_rows)
                t->out = (float *)(r->buf + r->values[i].offset) + from;
            if (it->has_rows) {
                t->scratch = r->scratch + scratch;
                scratch += scratch_of(it, sh);
                break;
            }
        }
    }
}

status_t store_push(store_t *s, const char *job, const store_push_item_t *items, size_t n,
                    store_pull_after_t pull_after, uint64_t *ret_versions,
                    store_value_t *ret_values, void **ret_buf, size_t *ret_len, store_err_t *err)
{
    shard_t **shards = malloc((n ? n : 1) * sizeof(*shards));
    push_run_t r = {.items = items,
                    .pull_after = pull_after != STORE_PUSH_ONLY,
                    .pull_bf16 = pull_after == STORE_PULL_BFLOAT16,
                    .values = ret_values,
                    .err = err};
    size_t total = 0, scratch_len = 0, n_tasks = 0, applied = 0;
    sjob_t *j;
    status_t rc;
    double t0;

    if (shards == NULL)
        return store_fail(err, STATUS_NO_MEMORY, NULL, "out of memory for %zu push items", n);
    pthread_mutex_init(&r.err_mu, NULL);
    pthread_rwlock_rdlock(&s->lock);
    STATUS_CHECK_GOTO(store_lookup_job(s, job, &j, err), rc, out);
    r.opt = &j->opt;
    STATUS_CHECK_GOTO(validate_push(s, j, items, n, pull_after, shards, ret_values, &total,
                                    &scratch_len, &n_tasks, err),
                      rc, out);
    if ((r.tasks = calloc(n_tasks ? n_tasks : 1, sizeof(*r.tasks))) == NULL ||
        (scratch_len > 0 && (r.scratch = aligned_alloc(64, scratch_len)) == NULL) ||
        (r.pull_after && total > 0 && (r.buf = rpc_buffer_alloc(total)) == NULL)) {
        rc = store_fail(err, STATUS_NO_MEMORY, NULL, "out of memory for a push of %zu items", n);
        goto out;
    }
    make_tasks(&r, shards, n);
    /* One block is checked under its lock just before it is applied: checked once, even while
     * other pushes hold it. Several are all checked first, so that one that would fail leaves
     * the others unapplied. */
    if (n_tasks > 1) {
        pool_run(s->pool, n_tasks, check_part, &r);
        if (r.failed) {
            rc = err != NULL ? err->msg.status : STATUS_INVALID_ARGUMENT;
            if (err != NULL) {
                size_t used = strlen(err->msg.text);
                snprintf(err->msg.text + used, sizeof(err->msg.text) - used,
                         "; nothing was applied");
            }
            goto out;
        }
    }
    t0 = clock_now_s();
    pool_run(s->pool, n_tasks, apply_part, &r);
    t0 = clock_now_s() - t0;
    metric_observe(s->apply_seconds, t0);
    atomic_fetch_add_explicit(&s->apply_micros, (uint64_t)(t0 * 1e6), memory_order_relaxed);
    for (size_t i = 0; i < n; i++)
        ret_versions[i] = UINT64_MAX;
    for (size_t k = 0; k < n_tasks; k++) {
        task_t *t = &r.tasks[k];
        applied += t->applied;
        if (t->applied && t->after < ret_versions[t->item])
            ret_versions[t->item] = t->after;
    }
    for (size_t i = 0; i < n; i++) {
        const store_push_item_t *it = &items[i];
        size_t first, end;
        item_span(shards[i], it, &first, &end);
        if (r.pull_after)
            describe_value(shards[i], it->has_rows, it->n_rows, ret_versions[i], &ret_values[i]);
        atomic_fetch_add_explicit(&shards[i]->pushes, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(
            &shards[i]->bytes_pushed,
            it->has_rows ? it->n_rows * (sizeof(int64_t) + shards[i]->row_len * sizeof(float))
                         : (end - first) * shards[i]->row_len * (item_bf16(it) ? 2 : sizeof(float)),
            memory_order_relaxed);
        if (r.pull_after) {
            atomic_fetch_add_explicit(&shards[i]->pulls, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&shards[i]->bytes_pulled, ret_values[i].bytes,
                                      memory_order_relaxed);
        }
    }
    if (applied < n_tasks) {
        /* A single block checked at its update, or (rarely) one that a concurrent push changed
         * between the check of all blocks and its update. */
        rc = err != NULL ? err->msg.status : STATUS_INVALID_ARGUMENT;
        if (err != NULL) {
            size_t used = strlen(err->msg.text);
            if (applied == 0)
                snprintf(err->msg.text + used, sizeof(err->msg.text) - used,
                         "; nothing was applied");
            else
                snprintf(err->msg.text + used, sizeof(err->msg.text) - used,
                         " (after a concurrent push; %zu of the %zu blocks were applied)", applied,
                         n_tasks);
        }
        goto out;
    }
    if (r.pull_after) {
        *ret_buf = r.buf;
        *ret_len = total;
        r.buf = NULL;
    }
    rc = STATUS_OK;
out:
    pthread_rwlock_unlock(&s->lock);
    pthread_mutex_destroy(&r.err_mu);
    for (size_t k = 0; r.tasks != NULL && k < n_tasks; k++)
        free(r.tasks[k].wide);
    free(r.scratch);
    free(r.buf);
    free(r.tasks);
    free(shards);
    return rc;
}

/* ---- drop, stats, totals ------------------------------------------------------------------ */
