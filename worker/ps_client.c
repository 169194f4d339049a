#define _POSIX_C_SOURCE 200809L
#include "ps_client.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bf16.h"
#include "base/clock.h"
#include "base/log.h"
#include "model.h"
#include "rpc/client.h"
#include "rpc/initializer_proto.h"

#define PS_CALL_TIMEOUT_MS 60000
#define ALL_PACKS          SIZE_MAX

typedef struct shard_ref {
    int ps;
    int shard;
    int64_t row_offset, rows;
    /* sparse: this step's rows of the shard (shard-local) and where they sit in rows_grad */
    int64_t *local;
    int32_t *slot; /* index into the param's rows_index/rows_grad */
    size_t n_local;
    float *values; /* push: the rows' gradients gathered contiguously */
} shard_ref_t;

typedef struct var_ref {
    model_param_t *p;
    size_t row_len;
    shard_ref_t *shards;
    int n_shards;
    int32_t *mark; /* sparse: id -> slot in `ids` this step, -1 otherwise */
    int64_t *ids;  /* sparse: the step's distinct ids */
    size_t n_ids;
    /* sparse: where an example's features hold its ids (a shared table's calls: several) */
    size_t ids_at[JOB_MAX_MODEL_INPUTS], ids_len[JOB_MAX_MODEL_INPUTS], n_id_spans, ids_per;
    float *residual; /* bfloat16 on the wire with error feedback: what rounding dropped */
} var_ref_t;

/* What a push sends as one item: a dense shard's chunk of whole blocks (rpc/types.h), a whole
 * small dense shard, or an embedding shard's rows of the step. */
typedef struct piece {
    var_ref_t *v;
    shard_ref_t *s;
    int ps;
    size_t row, rows; /* shard-local rows of a dense chunk: all of them for embeddings */
    size_t pack;
    size_t key; /* its shard's item in its PS's lanes (lane_t.keys) */
} piece_t;

typedef enum { OP_PULL, OP_PUSH } lane_op_t;

/* One connection to a parameter server, on its own thread, and the requests it builds. A PS has
 * PS_CONNECTIONS of them when the gradients go out in several packs, so that the packs of one
 * step are on the wire, and applied on the PS, at once. */
typedef struct lane {
    struct ps_client *c;
    int index; /* the PS */
    int conn;  /* which of its connections */
    rpc_channel_t *ch;
    char address[256];
    /* per shard placed on this PS: what a pull asks for */
    size_t n_items;
    shard_ref_t **shard_of; /* item -> shard */
    var_ref_t **var_of;     /* item -> variable */
    piece_t *whole;         /* item -> the whole shard, as a pull returns it */
    /* per piece placed on this PS, in order: what pushes send */
    size_t n_pieces;
    piece_t **piece_of;
    piece_t **sent; /* the pieces of the request in flight, in item order */
    Tessera__V1__PullItem *pull_items;
    Tessera__V1__PullItem **pull_ptrs;
    Tessera__V1__PushItem *push_items;
    Tessera__V1__PushItem **push_ptrs;
    Tessera__V1__ShardKey *keys;
    Tessera__V1__TensorRef *refs_a, *refs_b;
    Tessera__V1__RowSlices *slices;
    int64_t *shapes;  /* 4 per item */
    rpc_iov_t *iov;   /* up to 2 per item */
    size_t cap_items; /* of the arrays above: the larger of n_items and n_pieces */
    void *recv_buf;
    size_t recv_cap;
    uint16_t *stage; /* bfloat16 on the wire: the pack's gradients, cast */
    /* thread handoff */
    pthread_t tid;
    bool has_thread, has_work, stop;
    lane_op_t op;
    bool made_request; /* the last lane_push made a request */
    status_t rc;
    status_msg_t err;
    /* seconds in calls to the PS, and copying the values they brought into the model, since
     * ps_client_take_times (written by the lane's runner only) */
    double call_s, values_s;
} lane_t;

/* Connections per PS when the gradients go out in several packs. Measured with the wide MLP
 * of bench/ps (784-2048-2048-10, 1 PS, 1 worker, 2 cores, loopback), medians of 3 runs: 1, 2,
 * 3, 4, 6 and 8 connections gave 32, 38, 40, 41, 42 and 40 steps/s. */
#define PS_CONNECTIONS 4

/* Per PS: the packs of this step its connections have taken, and finished. */
typedef struct ps_progress {
    size_t next_pack, packs_done;
} ps_progress_t;

struct ps_client {
    char job[128];
    model_t *model;
    var_ref_t *vars;
    size_t n_vars;
    lane_t *lanes; /* PS-major: lane i is connection i % per_ps of PS i / per_ps */
    size_t n_lanes, n_ps, per_ps;
    ps_progress_t *progress; /* per PS */
    piece_t *pieces;
    size_t n_pieces;
    const float *features;
    int batch;
    size_t feature_len;
    bool push_pull;           /* every variable dense: each push brings the updated values back */
    bool bf16, feedback;      /* train.wire_dtype bfloat16, train.wire_error_feedback */
    bool fresh;               /* the model holds what the last push-pull brought */
    _Atomic uint32_t batches; /* the batches the step's push stands for (ps_client_push) */
    _Atomic int lost_ps;      /* the PS whose call failed unreachable (UNAVAILABLE, TIMEOUT); -1 */
    /* The gradients go out in packs, the last layers' first: each as soon as backward has made
     * it, while backward goes on through the layers before (model_on_backward). The values a
     * push-pull brings back wait until backward no longer reads the old ones. With one pack, the
     * push waits for the end of backward and runs lane 0 on the caller's thread. */
    size_t n_packs;
    bool early;          /* packs leave during backward (else all after it) */
    size_t *pack_first;  /* pack -> its lowest var index: ready once backward has done that var */
    size_t packs_ready;  /* packs of this step handed to the lanes */
    size_t values_free;  /* vars from this index on may take new values */
    size_t ps_through;   /* PS tasks all of whose packs of this step are done */
    bool backward_done;  /* ps_client_push has been called for this step */
    ps_push_info_t info; /* this step's */
    /* The optimizer's gradient clipping (clips), done here as packs are published: vars from
     * clipped_from on are clipped this step; clip_grads and clip_lens are its arguments. */
    optimizer_config_t clip;
    bool clips;
    size_t clipped_from;
    float **clip_grads;
    size_t *clip_lens;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv, values_cv;
    int pending;
};

/* ---- set-up ------------------------------------------------------------------------------- */

static var_ref_t *find_var(ps_client_t *c, const char *name)
{
    for (size_t i = 0; i < c->n_vars; i++)
        if (strcmp(c->vars[i].p->name, name) == 0)
            return &c->vars[i];
    return NULL;
}

static status_t place(ps_client_t *c, const Tessera__V1__ConfigureJobRequest *req,
                      status_msg_t *err)
{
    for (size_t i = 0; i < req->n_placement; i++) {
        const Tessera__V1__ShardPlacement *pl = req->placement[i];
        var_ref_t *v = find_var(c, pl->variable);
        shard_ref_t *s;
        if (v == NULL)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "placement names variable '%s', which the model does not have",
                               pl->variable);
        if (pl->ps_task < 0 || (size_t)pl->ps_task >= c->n_ps)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "placement of %s shard %d: ps task %d of %zu", pl->variable,
                               pl->shard, pl->ps_task, c->n_ps);
        s = realloc(v->shards, (size_t)(v->n_shards + 1) * sizeof(*s));
        if (s == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
        v->shards = s;
        s = &v->shards[v->n_shards++];
        memset(s, 0, sizeof(*s));
        s->ps = pl->ps_task;
        s->shard = pl->shard;
        s->row_offset = pl->row_offset;
        s->rows = pl->rows;
    }
    /* Each variable's shards must tile its first axis. */
    for (size_t i = 0; i < c->n_vars; i++) {
        var_ref_t *v = &c->vars[i];
        int64_t covered = 0;
        for (int k = 0; k < v->n_shards; k++) {
            shard_ref_t *s = &v->shards[k];
            if (s->row_offset != covered || s->rows <= 0)
                return status_fail(err, STATUS_INVALID_ARGUMENT,
                                   "placement of %s: shard %d starts at row %lld, expected %lld",
                                   v->p->name, s->shard, (long long)s->row_offset,
                                   (long long)covered);
            covered += s->rows;
        }
        if (covered != v->p->shape[0])
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "placement of %s covers %lld of its %d rows", v->p->name,
                               (long long)covered, v->p->shape[0]);
        if (v->p->sparse) {
            size_t vocab = (size_t)v->p->shape[0];
            size_t max_ids = (size_t)c->batch * v->ids_per;
            v->mark = malloc(vocab * sizeof(int32_t));
            v->ids = malloc((max_ids + 1) * sizeof(int64_t));
            if (v->mark == NULL || v->ids == NULL)
                return status_fail(err, STATUS_NO_MEMORY, "out of memory");
            for (size_t r = 0; r < vocab; r++)
                v->mark[r] = -1;
            for (int k = 0; k < v->n_shards; k++) {
                shard_ref_t *s = &v->shards[k];
                s->local = malloc((max_ids + 1) * sizeof(int64_t));
                s->slot = malloc((max_ids + 1) * sizeof(int32_t));
                s->values = malloc((max_ids + 1) * v->row_len * sizeof(float));
                if (s->local == NULL || s->slot == NULL || s->values == NULL)
                    return status_fail(err, STATUS_NO_MEMORY, "out of memory");
            }
        }
    }
    return STATUS_OK;
}

/* The push's pieces, variable by variable: each dense shard in chunks of one block, the
 * parameter server's unit of update (rpc/types.h), so that a chunk is applied while the next is
 * on the wire; each embedding shard whole, and each shard whose constraint's norms span rows
 * (the PS keeps it one block). */
static status_t make_pieces(ps_client_t *c, status_msg_t *err)
{
    size_t n = 0;

    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < c->n_vars; i++) {
            var_ref_t *v = &c->vars[i];
            size_t step = rpc_block_rows(v->row_len * sizeof(float));
            /* a constraint whose norms span rows: the PS updates the shard whole */
            bool whole = v->p->sparse || constraint_spans_rows(&v->p->constraint);
            for (int k = 0; k < v->n_shards; k++) {
                shard_ref_t *s = &v->shards[k];
                size_t rows = (size_t)s->rows, each = whole ? rows : step;
                for (size_t r = 0; r < rows; r += each) {
                    if (pass == 1)
                        c->pieces[n] = (piece_t){.v = v,
                                                 .s = s,
                                                 .ps = s->ps,
                                                 .row = r,
                                                 .rows = rows - r < each ? rows - r : each};
                    n++;
                }
            }
        }
        if (pass == 0) {
            c->n_pieces = n;
            n = 0;
            if ((c->pieces = calloc(c->n_pieces + 1, sizeof(*c->pieces))) == NULL)
                return status_fail(err, STATUS_NO_MEMORY, "out of memory");
        }
    }
    return STATUS_OK;
}

/* Packs of at least `cap` gradient bytes, walking back from the last variable's pieces: the
 * last layers' first, as backward makes them. Embedding rows count nothing: how many there are
 * changes by the batch. pack_first[p] is the lowest variable of pack p: backward has made the
 * pack once it is done with that variable. */
static status_t plan_packs(ps_client_t *c, size_t cap, status_msg_t *err)
{
    size_t bytes = 0, pack = 0;

    c->pack_first = calloc(c->n_pieces + 1, sizeof(*c->pack_first));
    if (c->pack_first == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = c->n_pieces; i-- > 0;) {
        piece_t *p = &c->pieces[i];
        size_t size = p->v->p->sparse ? 0 : p->rows * p->v->row_len * sizeof(float);
        /* a whole shard (a constraint's norms over rows) that fills a pack travels alone: beside
         * others, its push-pull's reply could pass the PS's limit, which it may nearly fill */
        if (bytes > 0 && size >= cap && constraint_spans_rows(&p->v->p->constraint)) {
            pack++;
            bytes = 0;
        }
        p->pack = pack;
        c->pack_first[pack] = (size_t)(p->v - c->vars);
        bytes += size;
        if (i > 0 && bytes >= cap && !(p->v->p->sparse && c->pieces[i - 1].v == p->v)) {
            pack++;
            bytes = 0;
        }
    }
    c->n_packs = pack + 1;
    return STATUS_OK;
}

/* bfloat16 on the wire: room for the largest pack's dense gradients on l's PS, cast. */
static status_t lane_stage(ps_client_t *c, lane_t *l, status_msg_t *err)
{
    size_t *elems = calloc(c->n_packs + 1, sizeof(*elems)), most = 0;

    if (elems == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < c->n_pieces; i++) {
        const piece_t *p = &c->pieces[i];
        if (p->ps == l->index && !p->v->p->sparse)
            elems[p->pack] += p->rows * p->v->row_len;
    }
    for (size_t k = 0; k < c->n_packs; k++)
        most = elems[k] > most ? elems[k] : most;
    free(elems);
    if ((l->stage = malloc((most ? most : 1) * sizeof(*l->stage))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory for %zu bfloat16 gradients", most);
    return STATUS_OK;
}

static status_t lane_init(ps_client_t *c, lane_t *l, status_msg_t *err)
{
    size_t n = 0, k = 0, m = 0, cap;
    rpc_channel_opts_t co = {.timeout_ms = PS_CALL_TIMEOUT_MS};

    STATUS_CHECK(rpc_channel_new(l->address, &co, &l->ch, err));
    for (size_t i = 0; i < c->n_vars; i++)
        for (int s = 0; s < c->vars[i].n_shards; s++)
            n += c->vars[i].shards[s].ps == l->index;
    for (size_t i = 0; i < c->n_pieces; i++)
        m += c->pieces[i].ps == l->index;
    l->n_items = n;
    l->n_pieces = m;
    l->cap_items = cap = n > m ? n : m;
    l->shard_of = calloc(n + 1, sizeof(*l->shard_of));
    l->var_of = calloc(n + 1, sizeof(*l->var_of));
    l->piece_of = calloc(m + 1, sizeof(*l->piece_of));
    l->whole = calloc(n + 1, sizeof(*l->whole));
    l->sent = calloc(cap + 1, sizeof(*l->sent));
    l->pull_items = calloc(n + 1, sizeof(*l->pull_items));
    l->pull_ptrs = calloc(n + 1, sizeof(*l->pull_ptrs));
    l->push_items = calloc(cap + 1, sizeof(*l->push_items));
    l->push_ptrs = calloc(cap + 1, sizeof(*l->push_ptrs));
    l->keys = calloc(n + 1, sizeof(*l->keys));
    l->refs_a = calloc(cap + 1, sizeof(*l->refs_a));
    l->refs_b = calloc(cap + 1, sizeof(*l->refs_b));
    l->slices = calloc(cap + 1, sizeof(*l->slices));
    l->shapes = calloc(4 * cap + 4, sizeof(*l->shapes));
    l->iov = calloc(2 * cap + 2, sizeof(*l->iov));
    if (!l->shard_of || !l->var_of || !l->piece_of || !l->whole || !l->sent || !l->pull_items ||
        !l->pull_ptrs || !l->push_items || !l->push_ptrs || !l->keys || !l->refs_a || !l->refs_b ||
        !l->slices || !l->shapes || !l->iov)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < c->n_vars; i++) {
        for (int s = 0; s < c->vars[i].n_shards; s++) {
            shard_ref_t *sh = &c->vars[i].shards[s];
            if (sh->ps != l->index)
                continue;
            l->shard_of[k] = sh;
            l->var_of[k] = &c->vars[i];
            l->whole[k] = (piece_t){
                .v = &c->vars[i], .s = sh, .ps = l->index, .key = k, .rows = (size_t)sh->rows};
            tessera__v1__shard_key__init(&l->keys[k]);
            l->keys[k].variable = c->vars[i].p->name;
            l->keys[k].shard = sh->shard;
            k++;
        }
    }
    m = 0;
    for (size_t i = 0; i < c->n_pieces; i++) {
        piece_t *p = &c->pieces[i];
        if (p->ps != l->index)
            continue;
        l->piece_of[m++] = p;
        for (size_t j = 0; j < n; j++)
            if (l->shard_of[j] == p->s)
                p->key = j;
    }
    return c->bf16 ? lane_stage(c, l, err) : STATUS_OK;
}

static void lane_done(lane_t *l)
{
    rpc_channel_free(l->ch);
    free(l->shard_of);
    free(l->var_of);
    free(l->piece_of);
    free(l->whole);
    free(l->sent);
    free(l->pull_items);
    free(l->pull_ptrs);
    free(l->push_items);
    free(l->push_ptrs);
    free(l->keys);
    free(l->refs_a);
    free(l->refs_b);
    free(l->slices);
    free(l->shapes);
    free(l->iov);
    free(l->recv_buf);
    free(l->stage);
}

/* ---- one PS's part of a step -------------------------------------------------------------- */

static void tensor_ref(Tessera__V1__TensorRef *r, int64_t *shape, int rank, uint64_t offset,
                       uint64_t bytes, Tessera__V1__DType dtype)
{
    tessera__v1__tensor_ref__init(r);
    r->dtype = dtype;
    r->n_shape = (size_t)rank;
    r->shape = shape;
    r->payload_offset = offset;
    r->byte_length = bytes;
}

/* Copies pulled values (whole dense shards, or the requested rows) into the model. */
/* Copies pulled values into the model: value i must be what item i of the request asked for
 * (l->sent[i]): a dense shard or its chunk, whole, or the rows of an embedding shard. */
static status_t apply_values(lane_t *l, Tessera__V1__PulledValue **values, size_t n_values,
                             size_t expected, bool bf16, rpc_payload_t *payload, const char *what,
                             status_msg_t *err)
{
    Tessera__V1__DType dense_dtype =
        bf16 ? TESSERA__V1__DTYPE__DTYPE_BFLOAT16 : TESSERA__V1__DTYPE__DTYPE_FLOAT32;
    status_t rc = STATUS_OK;

    if (n_values != expected)
        rc = status_fail(err, STATUS_RPC, "ps %d (%s) answered a %s with %zu values, not %zu",
                         l->index, l->address, what, n_values, expected);
    for (size_t i = 0; i < n_values && rc == STATUS_OK; i++) {
        const Tessera__V1__PulledValue *v = values[i];
        const piece_t *p = l->sent[i];
        var_ref_t *var = p->v;
        shard_ref_t *s = p->s;
        const Tessera__V1__TensorRef *t = v->value;
        size_t row_bytes = var->row_len * sizeof(float);
        size_t wire_row = var->p->sparse ? row_bytes : var->row_len * (bf16 ? 2 : sizeof(float));
        if (v->key == NULL || v->key->variable == NULL ||
            strcmp(v->key->variable, var->p->name) != 0 || v->key->shard != s->shard || t == NULL ||
            t->payload_offset > payload->len || t->byte_length > payload->len - t->payload_offset ||
            t->chunk_offset != p->row * wire_row ||
            t->dtype != (var->p->sparse ? TESSERA__V1__DTYPE__DTYPE_FLOAT32 : dense_dtype) ||
            (t->payload_offset % (bf16 ? 2 : sizeof(float))) != 0) {
            rc = status_fail(err, STATUS_RPC,
                             "ps %d (%s) answered a %s with a value that "
                             "does not match the request",
                             l->index, l->address, what);
            break;
        }
        const float *src = (const float *)((const char *)payload->data + t->payload_offset);
        if (!var->p->sparse) {
            size_t want = p->rows * wire_row;
            float *dst = var->p->value + ((size_t)s->row_offset + p->row) * var->row_len;
            if (t->byte_length != want) {
                rc = status_fail(err, STATUS_RPC, "ps %d sent %llu bytes for %s shard %d, not %zu",
                                 l->index, (unsigned long long)t->byte_length, var->p->name,
                                 s->shard, want);
                break;
            }
            if (bf16)
                bf16_to_floats(dst, (const uint16_t *)(const void *)src, p->rows * var->row_len);
            else
                memcpy(dst, src, want);
        } else {
            if (t->byte_length != s->n_local * row_bytes) {
                rc = status_fail(err, STATUS_RPC, "ps %d sent the wrong number of rows of %s",
                                 l->index, var->p->name);
                break;
            }
            for (size_t r = 0; r < s->n_local; r++)
                memcpy(var->p->value + (size_t)(s->row_offset + s->local[r]) * var->row_len,
                       src + r * var->row_len, row_bytes);
        }
    }
    if (payload->owned && payload->len <= (64u << 20)) { /* keep the larger buffer for next time */
        free(l->recv_buf);
        l->recv_buf = payload->data;
        l->recv_cap = payload->len;
        payload->owned = false;
    }
    return rc;
}

/* The ids of shard s's rows this step, as the next tensor of l's payload at *off (request item
 * k's tensor and shape slots). */
static Tessera__V1__TensorRef *ids_ref(lane_t *l, const shard_ref_t *s, size_t k, uint64_t *off,
                                       size_t *n_iov)
{
    size_t bytes = s->n_local * sizeof(int64_t);

    l->shapes[4 * k] = (int64_t)s->n_local;
    tensor_ref(&l->refs_a[k], &l->shapes[4 * k], 1, *off, bytes, TESSERA__V1__DTYPE__DTYPE_INT64);
    l->iov[(*n_iov)++] = (rpc_iov_t){s->local, bytes, NULL, NULL};
    *off += bytes;
    return &l->refs_a[k];
}

/* A call sending l's first n_iov payload pieces; values that come back land in l's buffer. */
/* A pull or push to lane l's PS failed: the message names the PS, and one that cannot be reached
 * is remembered (ps_client_lost_ps), and so is one that no longer knows the job: it was
 * restarted (empty) before anyone saw it unreachable, and has lost the job's variables. */
static status_t lane_failed(ps_client_t *c, const lane_t *l, status_t rc, const char *what,
                            const rpc_error_t *rerr, status_msg_t *err)
{
    if (rc == STATUS_UNAVAILABLE || rc == STATUS_TIMEOUT ||
        (rc == STATUS_NOT_FOUND && strcmp(rerr->culprit, c->job) == 0))
        atomic_store(&c->lost_ps, l->index);
    return status_fail(err, rc, "%s to ps %d (%s): %s", what, l->index, l->address, rerr->message);
}

static rpc_call_opts_t lane_call_opts(const lane_t *l, size_t n_iov, bool receives)
{
    rpc_call_opts_t opts = {.payload = l->iov, .n_payload = n_iov};
    if (receives) {
        opts.recv_buf = l->recv_buf;
        opts.recv_cap = l->recv_cap;
    }
    return opts;
}

static status_t lane_pull(ps_client_t *c, lane_t *l, status_msg_t *err)
{
    Tessera__V1__PullRequest req = TESSERA__V1__PULL_REQUEST__INIT;
    Tessera__V1__PullResponse *resp = NULL;
    rpc_call_opts_t opts = {0};
    rpc_payload_t payload = {0};
    rpc_error_t rerr;
    size_t n = 0, n_iov = 0;
    uint64_t off = 0;
    double t0, t1;
    status_t rc;

    for (size_t k = 0; k < l->n_items; k++) {
        shard_ref_t *s = l->shard_of[k];
        Tessera__V1__PullItem *it = &l->pull_items[n];
        tessera__v1__pull_item__init(it);
        it->key = &l->keys[k];
        if (l->var_of[k]->p->sparse) {
            if (s->n_local == 0)
                continue;
            it->rows = ids_ref(l, s, n, &off, &n_iov);
        }
        l->sent[n] = &l->whole[k];
        l->pull_ptrs[n++] = it;
    }
    if (n == 0)
        return STATUS_OK;
    req.job = c->job;
    req.n_items = n;
    req.items = l->pull_ptrs;
    opts = lane_call_opts(l, n_iov, true);
    t0 = clock_now_s();
    rc = rpc_ps_pull(l->ch, &req, &opts, &resp, &payload, &rerr);
    t1 = clock_now_s();
    l->call_s += t1 - t0;
    if (rc != STATUS_OK)
        return lane_failed(c, l, rc, "pull", &rerr, err);
    rc = apply_values(l, resp->values, resp->n_values, n, false, &payload, "pull", err);
    l->values_s += clock_now_s() - t1;
    rpc_payload_done(&payload);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

/* Pushes the items of one pack (or of all with ALL_PACKS) placed on l's PS. */
static status_t lane_push(ps_client_t *c, lane_t *l, size_t pack, status_msg_t *err)
{
    Tessera__V1__PushRequest req = TESSERA__V1__PUSH_REQUEST__INIT;
    Tessera__V1__PushResponse *resp = NULL;
    rpc_call_opts_t opts = {0};
    rpc_payload_t payload = {0};
    rpc_error_t rerr;
    size_t n = 0, n_iov = 0, staged = 0;
    uint64_t off = 0;
    double t0;
    status_t rc;

    l->made_request = false;
    for (size_t k = 0; k < l->n_pieces; k++) {
        piece_t *p = l->piece_of[k];
        shard_ref_t *s = p->s;
        var_ref_t *v = p->v;
        Tessera__V1__PushItem *it = &l->push_items[n];
        if (pack != ALL_PACKS && p->pack != pack)
            continue;
        tessera__v1__push_item__init(it);
        it->key = &l->keys[p->key];
        if (!v->p->sparse) {
            size_t esize = c->bf16 ? 2 : sizeof(float), elems = p->rows * v->row_len;
            size_t at = ((size_t)s->row_offset + p->row) * v->row_len, bytes = elems * esize;
            const void *data = v->p->grad + at;
            if (c->bf16) { /* cast here, on the lane's thread, while backward goes on */
                uint16_t *dst = l->stage + staged;
                if (c->feedback)
                    bf16_from_floats_feedback(dst, v->p->grad + at, v->residual + at, elems);
                else
                    bf16_from_floats(dst, v->p->grad + at, elems);
                data = dst;
                staged += elems;
            }
            /* The shard's own shape: its rows, then the variable's other dimensions; a chunk
             * says which of its bytes it holds. */
            l->shapes[4 * n] = s->rows;
            for (int d = 1; d < v->p->rank; d++)
                l->shapes[4 * n + (size_t)d] = v->p->shape[d];
            tensor_ref(&l->refs_a[n], &l->shapes[4 * n], v->p->rank, off, bytes,
                       c->bf16 ? TESSERA__V1__DTYPE__DTYPE_BFLOAT16
                               : TESSERA__V1__DTYPE__DTYPE_FLOAT32);
            l->refs_a[n].chunk_offset = p->row * v->row_len * esize;
            it->gradient_case = TESSERA__V1__PUSH_ITEM__GRADIENT_DENSE;
            it->dense = &l->refs_a[n];
            l->iov[n_iov++] = (rpc_iov_t){data, bytes, NULL, NULL};
            off += bytes;
        } else {
            size_t vb = s->n_local * v->row_len * sizeof(float);
            if (s->n_local == 0)
                continue;
            for (size_t r = 0; r < s->n_local; r++)
                memcpy(s->values + r * v->row_len,
                       v->p->rows_grad + (size_t)s->slot[r] * v->row_len,
                       v->row_len * sizeof(float));
            tessera__v1__row_slices__init(&l->slices[n]);
            l->slices[n].indices = ids_ref(l, s, n, &off, &n_iov);
            l->shapes[4 * n + 1] = (int64_t)v->row_len;
            tensor_ref(&l->refs_b[n], &l->shapes[4 * n], 2, off, vb,
                       TESSERA__V1__DTYPE__DTYPE_FLOAT32);
            l->slices[n].values = &l->refs_b[n];
            it->gradient_case = TESSERA__V1__PUSH_ITEM__GRADIENT_ROWS;
            it->rows = &l->slices[n];
            l->iov[n_iov++] = (rpc_iov_t){s->values, vb, NULL, NULL};
            off += vb;
        }
        l->sent[n] = p;
        l->push_ptrs[n++] = it;
    }
    if (n == 0)
        return STATUS_OK;
    req.job = c->job;
    req.n_items = n;
    req.items = l->push_ptrs;
    req.batches = atomic_load_explicit(&c->batches, memory_order_relaxed);
    opts = lane_call_opts(l, n_iov, c->push_pull);
    l->made_request = true;
    t0 = clock_now_s();
    if (!c->push_pull) {
        rc = rpc_ps_push(l->ch, &req, &opts, &resp, NULL, &rerr);
        l->call_s += clock_now_s() - t0;
        if (rc != STATUS_OK)
            return lane_failed(c, l, rc, "push", &rerr, err);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return STATUS_OK;
    }
    /* One round trip instead of two: the values come back updated, for the next step. */
    req.pull_after = true;
    if (c->bf16)
        req.pull_dtype = TESSERA__V1__DTYPE__DTYPE_BFLOAT16;
    rc = rpc_ps_push_pull(l->ch, &req, &opts, &resp, &payload, &rerr);
    l->call_s += clock_now_s() - t0;
    if (rc != STATUS_OK)
        return lane_failed(c, l, rc, "push", &rerr, err);
    if (pack != ALL_PACKS) { /* backward may still be reading the old values */
        pthread_mutex_lock(&c->mu);
        while (c->values_free > c->pack_first[pack] && !l->stop)
            pthread_cond_wait(&c->values_cv, &c->mu);
        pthread_mutex_unlock(&c->mu);
    }
    t0 = clock_now_s();
    rc = apply_values(l, resp->values, resp->n_values, n, c->bf16, &payload, "push-pull", err);
    l->values_s += clock_now_s() - t0;
    rpc_payload_done(&payload);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

static status_t lane_run(ps_client_t *c, lane_t *l)
{
    return l->op == OP_PULL ? lane_pull(c, l, &l->err) : lane_push(c, l, ALL_PACKS, &l->err);
}

static void *lane_main(void *arg)
{
    lane_t *l = arg;
    ps_client_t *c = l->c;
    ps_progress_t *pg = &c->progress[l->index];
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!l->has_work && !l->stop && pg->next_pack >= c->packs_ready)
            pthread_cond_wait(&c->work_cv, &c->mu);
        if (l->stop)
            break;
        if (l->has_work) { /* run_all */
            l->has_work = false;
            pthread_mutex_unlock(&c->mu);
            l->rc = lane_run(c, l);
            pthread_mutex_lock(&c->mu);
            if (--c->pending == 0)
                pthread_cond_broadcast(&c->done_cv);
            continue;
        }
        /* The next pack of the step for this PS, whichever of its connections is free; after
         * a failure the rest are passed over. */
        size_t pack = pg->next_pack++;
        bool early = !c->backward_done;
        pthread_mutex_unlock(&c->mu);
        l->made_request = false;
        if (l->rc == STATUS_OK)
            l->rc = lane_push(c, l, pack, &l->err);
        pthread_mutex_lock(&c->mu);
        c->info.requests += l->made_request;
        c->info.during_backward += l->made_request && early;
        if (++pg->packs_done == c->n_packs && ++c->ps_through == c->n_ps)
            pthread_cond_broadcast(&c->done_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Runs op on every PS at once, on each one's first connection: PS 1.. on their threads, PS 0
 * here. */
static status_t run_all(ps_client_t *c, lane_op_t op, status_msg_t *err)
{
    status_t rc;

    pthread_mutex_lock(&c->mu);
    c->pending = (int)c->n_ps - 1;
    for (size_t i = c->per_ps; i < c->n_lanes; i += c->per_ps) {
        c->lanes[i].op = op;
        c->lanes[i].has_work = true;
    }
    pthread_cond_broadcast(&c->work_cv);
    pthread_mutex_unlock(&c->mu);
    c->lanes[0].op = op;
    c->lanes[0].rc = lane_run(c, &c->lanes[0]);
    pthread_mutex_lock(&c->mu);
    while (c->pending > 0)
        pthread_cond_wait(&c->done_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < c->n_lanes; i += c->per_ps) {
        rc = c->lanes[i].rc;
        if (rc != STATUS_OK) {
            if (err != NULL)
                *err = c->lanes[i].err;
            return rc;
        }
    }
    return STATUS_OK;
}

/* Takes id f of sparse variable v into the step's ids, once, and into its shard's rows. */
static void add_id(var_ref_t *v, float f)
{
    int64_t id = (int64_t)f;

    if (!(f >= 0) || id >= v->p->shape[0] || v->mark[id] >= 0)
        return; /* out-of-range ids are reported by the model's forward pass */
    v->mark[id] = (int32_t)v->n_ids;
    v->ids[v->n_ids++] = id;
    for (int s = 0; s < v->n_shards; s++) {
        shard_ref_t *sh = &v->shards[s];
        if (id >= sh->row_offset && id < sh->row_offset + sh->rows) {
            sh->local[sh->n_local++] = id - sh->row_offset;
            return;
        }
    }
}

/* The batch's distinct token ids per sparse variable (each example's values of the model input
 * its layer reads), split by shard. */
static void gather_ids(ps_client_t *c, const float *features, int batch)
{
    for (size_t i = 0; i < c->n_vars; i++) {
        var_ref_t *v = &c->vars[i];
        if (!v->p->sparse)
            continue;
        for (size_t k = 0; k < v->n_ids; k++)
            v->mark[v->ids[k]] = -1;
        v->n_ids = 0;
        for (int s = 0; s < v->n_shards; s++)
            v->shards[s].n_local = 0;
        for (int e = 0; e < batch; e++)
            for (size_t span = 0; span < v->n_id_spans; span++) {
                const float *ids = features + (size_t)e * c->feature_len + v->ids_at[span];
                for (size_t k = 0; k < v->ids_len[span]; k++)
                    add_id(v, ids[k]);
            }
    }
}

status_t ps_client_pull(ps_client_t *c, const float *features, int batch, status_msg_t *err)
{
    status_t rc;

    if (c->fresh)
        return STATUS_OK;
    gather_ids(c, features, batch);
    rc = run_all(c, OP_PULL, err);
    /* All dense: the values serve every batch until a push or ps_client_refresh (an evaluation
     * closure sees one snapshot). Embedding rows differ by batch. */
    c->fresh = rc == STATUS_OK && c->push_pull;
    return rc;
}

void ps_client_refresh(ps_client_t *c)
{
    c->fresh = false;
    atomic_store(&c->lost_ps, -1);
}

void ps_client_begin_closure(ps_client_t *c)
{
    atomic_store(&c->lost_ps, -1);
}

int ps_client_lost_ps(const ps_client_t *c)
{
    return atomic_load(&c->lost_ps);
}

/* The model summed each id's gradient rows; finds each row's shard and slot there. */
static void split_rows(var_ref_t *v)
{
    model_param_t *p = v->p;
    for (int s = 0; s < v->n_shards; s++)
        v->shards[s].n_local = 0;
    for (size_t r = 0; r < p->n_rows; r++) {
        int64_t id = p->rows_index[r];
        for (int s = 0; s < v->n_shards; s++) {
            shard_ref_t *sh = &v->shards[s];
            if (id >= sh->row_offset && id < sh->row_offset + sh->rows) {
                sh->slot[sh->n_local] = (int32_t)r;
                sh->local[sh->n_local++] = id - sh->row_offset;
                break;
            }
        }
    }
}

/* Clips the gradients of vars [lo, c->clipped_from) (optimizer_clip: each by its own norm, or
 * all of them by their global norm when that is the job's clipping, and then lo is 0). */
static void clip_vars(ps_client_t *c, size_t lo)
{
    size_t n = 0;

    if (!c->clips || lo >= c->clipped_from)
        return;
    for (size_t i = lo; i < c->clipped_from; i++, n++) {
        model_param_t *p = c->vars[i].p;
        c->clip_grads[n] = p->sparse ? p->rows_grad : p->grad;
        c->clip_lens[n] = p->sparse   ? p->n_rows * c->vars[i].row_len
                          : p->moving ? 0 /* a moving statistic is no gradient */
                                      : p->n;
    }
    optimizer_clip(&c->clip, c->clip_grads, c->clip_lens, n);
    c->clipped_from = lo;
}

/* Hands the lanes every pack whose variables backward has finished (from `first` on). */
static void publish_packs(ps_client_t *c, size_t first)
{
    size_t ready = c->packs_ready;

    while (ready < c->n_packs && c->pack_first[ready] >= first)
        ready++;
    if (ready == c->packs_ready)
        return;
    clip_vars(c, c->pack_first[ready - 1]);
    /* An embedding's pieces are all in one pack: its rows are found once, before it leaves. */
    for (size_t i = 0; i < c->n_pieces; i++) {
        piece_t *p = &c->pieces[i];
        if (p->v->p->sparse && p->pack >= c->packs_ready && p->pack < ready &&
            (i == 0 || c->pieces[i - 1].v != p->v))
            split_rows(p->v);
    }
    pthread_mutex_lock(&c->mu);
    c->packs_ready = ready;
    pthread_cond_broadcast(&c->work_cv);
    pthread_mutex_unlock(&c->mu);
}

static void set_values_free(ps_client_t *c, size_t first)
{
    pthread_mutex_lock(&c->mu);
    c->values_free = first;
    pthread_cond_broadcast(&c->values_cv);
    pthread_mutex_unlock(&c->mu);
}

static void on_backward(void *arg, model_backward_event_t ev, size_t first)
{
    ps_client_t *c = arg;
    if (ev == MODEL_GRADS_READY) {
        c->fresh = false;
        publish_packs(c, first);
    } else {
        set_values_free(c, first);
    }
}

status_t ps_client_push(ps_client_t *c, int batches, ps_push_info_t *info, status_msg_t *err)
{
    status_t rc = STATUS_OK;

    /* packs sent during backward (no accumulation) stand for one batch, this store never
     * changes: 0 on the wire, or the window's batches */
    atomic_store_explicit(&c->batches, batches > 1 ? (uint32_t)batches : 0, memory_order_relaxed);
    c->fresh = false;
    if (c->n_packs <= 1) {
        clip_vars(c, 0);
        for (size_t i = 0; i < c->n_vars; i++)
            if (c->vars[i].p->sparse)
                split_rows(&c->vars[i]);
        rc = run_all(c, OP_PUSH, err);
        c->info.during_backward = 0;
        c->info.requests = 0;
        for (size_t i = 0; i < c->n_lanes; i++)
            c->info.requests += c->lanes[i].made_request;
    } else {
        pthread_mutex_lock(&c->mu);
        c->backward_done = true;
        pthread_mutex_unlock(&c->mu);
        publish_packs(c, 0);
        set_values_free(c, 0);
        pthread_mutex_lock(&c->mu);
        while (c->ps_through < c->n_ps)
            pthread_cond_wait(&c->done_cv, &c->mu);
        c->ps_through = 0;
        c->packs_ready = 0;
        c->values_free = c->n_vars;
        c->backward_done = false;
        for (size_t i = 0; i < c->n_ps; i++)
            c->progress[i] = (ps_progress_t){0};
        pthread_mutex_unlock(&c->mu);
        for (size_t i = 0; i < c->n_lanes; i++) {
            if (c->lanes[i].rc != STATUS_OK && rc == STATUS_OK) {
                rc = c->lanes[i].rc;
                if (err != NULL)
                    *err = c->lanes[i].err;
            }
            c->lanes[i].rc = STATUS_OK;
        }
    }
    if (info != NULL)
        *info = c->info;
    memset(&c->info, 0, sizeof(c->info));
    c->clipped_from = c->n_vars;
    c->fresh = rc == STATUS_OK && c->push_pull;
    return rc;
}

void ps_client_take_times(ps_client_t *c, double *ret_calls, double *ret_values)
{
    *ret_calls = *ret_values = 0;
    for (size_t i = 0; i < c->n_lanes; i++) {
        *ret_calls += c->lanes[i].call_s;
        *ret_values += c->lanes[i].values_s;
        c->lanes[i].call_s = c->lanes[i].values_s = 0;
    }
}

size_t ps_client_packs(const ps_client_t *c)
{
    return c->n_packs;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

status_t ps_client_new(model_t *model, const Tessera__V1__ConfigureJobRequest *req,
                       const ps_client_opts_t *opts, ps_client_t **ret, status_msg_t *err)
{
    int64_t bytes_per_pack = opts->bytes_per_pack;
    ps_client_t *c = calloc(1, sizeof(*c));
    status_t rc = STATUS_OK;

    if (c == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work_cv, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    pthread_cond_init(&c->values_cv, NULL);
    snprintf(c->job, sizeof(c->job), "%s", req->job);
    c->model = model;
    atomic_init(&c->lost_ps, -1);
    c->batch = model_max_batch(model);
    c->feature_len = model_input_len(model);
    c->n_vars = model_param_count(model);
    c->vars = calloc(c->n_vars + 1, sizeof(*c->vars));
    c->n_ps = req->n_ps;
    c->lanes = calloc(c->n_ps * PS_CONNECTIONS + 1, sizeof(*c->lanes));
    c->progress = calloc(c->n_ps + 1, sizeof(*c->progress));
    if (c->vars == NULL || c->lanes == NULL || c->progress == NULL) {
        ps_client_free(c);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    if (c->n_ps == 0) {
        ps_client_free(c);
        return status_fail(err, STATUS_INVALID_ARGUMENT, "the job names no parameter servers");
    }
    c->push_pull = true;
    c->clips = opts->clip != NULL && optimizer_clips(opts->clip);
    c->clipped_from = c->n_vars;
    if (c->clips) {
        c->clip = *opts->clip;
        c->clip_grads = calloc(c->n_vars + 1, sizeof(*c->clip_grads));
        c->clip_lens = calloc(c->n_vars + 1, sizeof(*c->clip_lens));
        if (c->clip_grads == NULL || c->clip_lens == NULL) {
            ps_client_free(c);
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
        }
    }
    c->bf16 = opts->wire_bf16;
    c->feedback = opts->wire_bf16 && opts->error_feedback;
    for (size_t i = 0; i < c->n_vars; i++) {
        var_ref_t *v = &c->vars[i];
        v->p = model_param(model, i);
        v->row_len = v->p->n / (size_t)v->p->shape[0];
        c->push_pull &= !v->p->sparse; /* the next batch needs other rows */
        if (v->p->sparse && (v->n_id_spans = model_param_ids(model, i, v->ids_at, v->ids_len)) == 0)
            rc = status_fail(err, STATUS_INVALID_ARGUMENT,
                             "%s: an embedding table whose layer reads no model input", v->p->name);
        for (size_t k = 0; k < v->n_id_spans; k++)
            v->ids_per += v->ids_len[k];
        if (c->feedback && !v->p->sparse && (v->residual = calloc(v->p->n, sizeof(float))) == NULL)
            rc = status_fail(err, STATUS_NO_MEMORY, "out of memory for the rounding residuals");
    }
    if (rc != STATUS_OK) {
        ps_client_free(c);
        return rc;
    }
    rc = place(c, req, err);
    c->values_free = c->n_vars;
    if (rc == STATUS_OK)
        rc = make_pieces(c, err);
    if (rc == STATUS_OK)
        rc = plan_packs(c, bytes_per_pack > 0 ? (size_t)bytes_per_pack : PS_AUTO_BYTES_PER_PACK,
                        err);
    /* Several connections per PS when several packs are in flight at once. */
    c->per_ps = c->n_packs > 1 ? PS_CONNECTIONS : 1;
    c->n_lanes = rc == STATUS_OK ? c->n_ps * c->per_ps : 0;
    for (size_t i = 0; i < c->n_lanes; i++) {
        lane_t *l = &c->lanes[i];
        l->c = c;
        l->index = (int)(i / c->per_ps);
        l->conn = (int)(i % c->per_ps);
        snprintf(l->address, sizeof(l->address), "%s", req->ps[l->index]);
    }
    for (size_t i = 0; rc == STATUS_OK && i < c->n_lanes; i++)
        rc = lane_init(c, &c->lanes[i], err);
    /* Lane 0 runs on the caller's thread, except for packs sent while backward goes on. */
    for (size_t i = c->n_packs > 1 ? 0 : 1; rc == STATUS_OK && i < c->n_lanes; i++) {
        if (pthread_create(&c->lanes[i].tid, NULL, lane_main, &c->lanes[i]) != 0)
            rc = status_fail(err, STATUS_SYSTEM, "cannot start a PS thread");
        else
            c->lanes[i].has_thread = true;
    }
    if (rc != STATUS_OK) {
        ps_client_free(c);
        return rc;
    }
    /* A global norm needs every gradient of the step: its packs leave after backward. */
    c->early = c->n_packs > 1 && opts->during_backward &&
               !(c->clips && optimizer_clips_globally(&c->clip));
    if (c->early)
        model_on_backward(model, on_backward, c);
    *ret = c;
    return STATUS_OK;
}

void ps_client_free(ps_client_t *c)
{
    if (c == NULL)
        return;
    if (c->early)
        model_on_backward(c->model, NULL, NULL);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_lanes; i++)
        c->lanes[i].stop = true;
    pthread_cond_broadcast(&c->work_cv);
    pthread_cond_broadcast(&c->values_cv);
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < c->n_lanes; i++) {
        if (c->lanes[i].has_thread)
            pthread_join(c->lanes[i].tid, NULL);
        lane_done(&c->lanes[i]);
    }
    for (size_t i = 0; i < c->n_vars; i++) {
        var_ref_t *v = &c->vars[i];
        for (int s = 0; s < v->n_shards; s++) {
            free(v->shards[s].local);
            free(v->shards[s].slot);
            free(v->shards[s].values);
        }
        free(v->shards);
        free(v->mark);
        free(v->ids);
        free(v->residual);
    }
    free(c->vars);
    free(c->lanes);
    free(c->pieces);
    free(c->progress);
    free(c->pack_first);
    free(c->clip_grads);
    free(c->clip_lens);
    pthread_cond_destroy(&c->work_cv);
    pthread_cond_destroy(&c->done_cv);
    pthread_cond_destroy(&c->values_cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
