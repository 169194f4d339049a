/* tessera.v1.ParameterServer: turns requests into store calls and store results into replies.
 *
 * Every request is checked here for what the wire can get wrong (missing fields, tensors that
 * point outside the payload or disagree with their own dtype, shape and length, payload bytes
 * nobody refers to) and by the store for what the variables can (unknown names, shapes, row
 * indices, non-finite gradients). A rejected request changes nothing. Reply values are copied
 * under the shard locks into one malloc'd buffer that gRPC frees when it has sent it, so a
 * concurrent push never tears a value on the wire. */
#include "service.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job/initializer.h"
#include "rpc/initializer_proto.h"
#include "base/log.h"
#include "base/clock.h"
#include "base/cpus.h"
#include "base/memory.h"
#include "files/atomic.h"
#include "files/checkpoint.h"
#include "rpc/optimizer_proto.h"
#include "store.h"
#include "store_stats.h"
#include "tessera/v1/ps.pb-c.h"
#include "rpc/server.h"

/* Room left in a message for the fields beside the payload. */
#define REPLY_HEADROOM (64u << 10)

/* What Push and PushPull calls took, summed: their RPC phases and the store's updates. */
typedef struct push_totals {
    uint64_t calls;
    double receive, decode, handle, total, apply;
} push_totals_t;

typedef struct ps_service {
    rpc_server_t *srv;
    pthread_mutex_t mark_mu;
    push_totals_t mark; /* at the last DropJob: its log line tells what came since */
    store_t *store;
    pool_t *pool;         /* the updates' threads beside the handlers' (--apply-threads) */
    const roots_t *roots; /* where checkpoints may go (--data-root) */
    int64_t max_message_bytes;
    metric_t *push_requests, *pull_requests, *pushed_bytes, *pulled_bytes, *push_copied_bytes;
    metric_t *param_bytes, *slot_bytes, *variables, *apply_seconds;
} ps_service_t;

/* Aligned copies of request tensors that are misaligned or cut between gRPC's slices (all but
 * dense gradients, which the store reads in place), freed when the call ends. The copies may not
 * add up to more than the payload itself: tensors of an honest request do not overlap, and
 * many references to one misaligned region must not multiply the memory a request takes. */
typedef struct scratch {
    void **bufs;
    size_t n, cap;
    size_t budget;
    size_t copied; /* bytes */
} scratch_t;

static void scratch_done(scratch_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->bufs[i]);
    free(s->bufs);
}

static void *scratch_copy(scratch_t *s, const pieces_t *pl, size_t at, size_t len)
{
    void *p;

    if (len > s->budget)
        return NULL;
    s->budget -= len;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        void **b = realloc(s->bufs, cap * sizeof(*b));
        if (b == NULL)
            return NULL;
        s->bufs = b;
        s->cap = cap;
    }
    p = malloc(len ? len : 1);
    if (p != NULL) {
        pieces_read(pl, at, p, len);
        s->bufs[s->n++] = p;
        s->copied += len;
    }
    return p;
}

/* The request payload, owned by the handler from here on (read in place for Push and PushPull):
 * releasing it when the call is done keeps a handler thread from holding on to a buffer as
 * large as the largest push it ever received, which would count against the memory the
 * variables may use. */
static pieces_t take_payload(rpc_ctx_t *ctx, rpc_payload_t *ret)
{
    rpc_ctx_take_payload_pieces(ctx, ret);
    return rpc_payload_pieces(ret);
}

static status_t fail_store(rpc_ctx_t *ctx, const store_err_t *err)
{
    return rpc_ctx_fail(ctx, err->msg.status, err->culprit[0] ? err->culprit : NULL, "%s",
                        err->msg.text);
}

static const char *dtype_name(int d)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&tessera__v1__dtype__descriptor, d);
    return v ? v->name : "an unknown dtype";
}

/* Updates the memory gauges after a create or drop. */
static void update_gauges(ps_service_t *st)
{
    store_totals_t t;

    store_totals(st->store, &t);
    metric_set(st->param_bytes, (double)t.param_bytes);
    metric_set(st->slot_bytes, (double)t.slot_bytes);
    metric_set(st->variables, (double)t.variables);
}

/* ---- request tensors ---------------------------------------------------------------------- */

/* Where a tensor of the request is, for messages: "variable 'emb' shard 1, rows.indices". */
typedef struct where {
    const char *variable;
    int shard;
    const char *field;
} where_t;

/* A checked view of a request tensor: its dtype is `want`, its shape has at most
 * STORE_MAX_RANK non-negative dimensions whose product times the element size is byte_length,
 * it is whole (chunk_offset 0), or with chunk_ok (a dense gradient) a chunk of whole elements
 * inside it, and lies inside the payload, from byte `at`. A dense gradient is left where it is
 * (data NULL: the store reads the pieces in place); other data is aligned for its type and in
 * one piece (copied to scratch when it is not). *end_max grows to the tensor's end. */
typedef struct view {
    const void *data;
    size_t at;
    size_t count; /* elements sent */
    size_t rank;
    const int64_t *shape;
    size_t full;        /* elements of the whole tensor */
    size_t chunk_first; /* the element the chunk starts at (0 when whole) */
    bool chunk;
} view_t;

static status_t tensor_view_of(rpc_ctx_t *ctx, const Tessera__V1__TensorRef *t, int want,
                               bool chunk_ok, const where_t *w, const pieces_t *pl, scratch_t *sc,
                               uint64_t *end_max, view_t *ret)
{
    size_t len = pl->len;
    const uint8_t *in_one;
    size_t elem = want == TESSERA__V1__DTYPE__DTYPE_INT64      ? 8
                  : want == TESSERA__V1__DTYPE__DTYPE_BFLOAT16 ? 2
                                                               : 4;
    uint64_t count = 1, bytes;

    if (t == NULL)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w->variable,
                            "variable '%s' shard %d: %s is missing", w->variable, w->shard,
                            w->field);
    if ((int)t->dtype != want)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w->variable,
                            "variable '%s' shard %d: %s has dtype %s (%d), not %s", w->variable,
                            w->shard, w->field, dtype_name((int)t->dtype), (int)t->dtype,
                            dtype_name(want));
    if (t->n_shape > STORE_MAX_RANK)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w->variable,
                            "variable '%s' shard %d: %s has rank %zu, more than %d", w->variable,
                            w->shard, w->field, t->n_shape, STORE_MAX_RANK);
    for (size_t i = 0; i < t->n_shape; i++)
        if (t->shape[i] < 0 || __builtin_mul_overflow(count, (uint64_t)t->shape[i], &count))
            return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w->variable,
                                "variable '%s' shard %d: %s has a negative or overflowing "
                                "dimension %zu (%" PRId64 ")",
                                w->variable, w->shard, w->field, i, t->shape[i]);
    if (__builtin_mul_overflow(count, (uint64_t)elem, &bytes))
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w->variable,
                            "variable '%s' shard %d: %s has %" PRIu64
                            " elements of %zu bytes, more than 2^64 bytes",
                            w->variable, w->shard, w->field, count, elem);
    ret->chunk = t->chunk_offset != 0 || bytes != t->byte_length;
    if (ret->chunk && !chunk_ok && bytes != t->byte_length)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w->variable,
                            "variable '%s' shard %d: %s declares %" PRIu64
                            " bytes, but its shape and dtype make %" PRIu64,
                            w->variable, w->shard, w->field, (uint64_t)t->byte_length, bytes);
    if (ret->chunk && !chunk_ok)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w->variable,
                            "variable '%s' shard %d: %s is a chunk (offset %" PRIu64
                            "); only a dense gradient may come in chunks",
                            w->variable, w->shard, w->field, (uint64_t)t->chunk_offset);
    if (ret->chunk &&
        (t->chunk_offset > bytes || t->byte_length > bytes - t->chunk_offset ||
         t->chunk_offset % elem != 0 || t->byte_length % elem != 0 || t->byte_length == 0))
        return rpc_ctx_fail(
            ctx, STATUS_INVALID_ARGUMENT, w->variable,
            "variable '%s' shard %d: %s is a chunk of bytes [%" PRIu64 ", +%" PRIu64
            ") that is empty, not whole elements or not inside the tensor's %" PRIu64,
            w->variable, w->shard, w->field, (uint64_t)t->chunk_offset, (uint64_t)t->byte_length,
            bytes);
    bytes = t->byte_length;
    if (t->payload_offset > len || t->byte_length > len - t->payload_offset)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w->variable,
                            "variable '%s' shard %d: %s covers payload bytes [%" PRIu64
                            ", +%" PRIu64 ") but the payload holds %zu",
                            w->variable, w->shard, w->field, (uint64_t)t->payload_offset,
                            (uint64_t)t->byte_length, len);
    ret->at = (size_t)t->payload_offset;
    ret->data = NULL;
    if (chunk_ok) {
        /* read in place */
    } else if (pieces_span(pl, ret->at, (size_t)bytes, &in_one) && (uintptr_t)in_one % elem == 0) {
        ret->data = in_one;
    } else {
        if (bytes > sc->budget)
            return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w->variable,
                                "variable '%s' shard %d: %s is misaligned and overlaps other "
                                "misaligned tensors of the request",
                                w->variable, w->shard, w->field);
        if ((ret->data = scratch_copy(sc, pl, ret->at, (size_t)bytes)) == NULL)
            return rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory for a request tensor");
    }
    ret->full = (size_t)count;
    ret->count = (size_t)(bytes / elem);
    ret->chunk_first = (size_t)(t->chunk_offset / elem);
    ret->rank = t->n_shape;
    ret->shape = t->shape;
    if (t->payload_offset + t->byte_length > *end_max)
        *end_max = t->payload_offset + t->byte_length;
    return STATUS_OK;
}

static status_t tensor_view(rpc_ctx_t *ctx, const Tessera__V1__TensorRef *t, int want,
                            const where_t *w, const pieces_t *pl, scratch_t *sc, uint64_t *end_max,
                            view_t *ret)
{
    return tensor_view_of(ctx, t, want, false, w, pl, sc, end_max, ret);
}

/* Row indices: an int64 tensor of rank 1. */
static status_t rows_view(rpc_ctx_t *ctx, const Tessera__V1__TensorRef *t, const where_t *w,
                          const pieces_t *pl, scratch_t *sc, uint64_t *end_max, view_t *ret)
{
    STATUS_CHECK(tensor_view(ctx, t, TESSERA__V1__DTYPE__DTYPE_INT64, w, pl, sc, end_max, ret));
    if (ret->rank != 1)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w->variable,
                            "variable '%s' shard %d: %s must have rank 1, not %zu", w->variable,
                            w->shard, w->field, ret->rank);
    return STATUS_OK;
}

static status_t check_key(rpc_ctx_t *ctx, const Tessera__V1__ShardKey *key, size_t i)
{
    if (key == NULL || key->variable == NULL || key->variable[0] == '\0')
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "key",
                            "items[%zu]: the key names no variable", i);
    return STATUS_OK;
}

static status_t check_job(rpc_ctx_t *ctx, const char *job)
{
    if (job == NULL || job[0] == '\0')
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "job", "the job name is empty");
    return STATUS_OK;
}

/* Payload bytes no tensor refers to mean the sender and this server disagree on the layout. */
static status_t check_payload_used(rpc_ctx_t *ctx, uint64_t end_max, size_t len)
{
    if (end_max != len)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "payload",
                            "the payload holds %zu bytes but the request's tensors end at byte "
                            "%" PRIu64,
                            len, end_max);
    return STATUS_OK;
}

/* ---- replies with values ------------------------------------------------------------------ */

static void release_free(void *arg)
{
    free(arg);
}

/* Storage of the PulledValue list of a reply. */
typedef struct values_reply {
    Tessera__V1__PulledValue *values, **ptrs;
    Tessera__V1__ShardKey *keys;
    Tessera__V1__TensorRef *refs;
} values_reply_t;

static bool values_init(values_reply_t *r, const store_value_t *vals, const store_key_t *keys,
                        size_t n)
{
    r->values = calloc(n + 1, sizeof(*r->values));
    r->ptrs = calloc(n + 1, sizeof(*r->ptrs));
    r->keys = calloc(n + 1, sizeof(*r->keys));
    r->refs = calloc(n + 1, sizeof(*r->refs));
    if (!r->values || !r->ptrs || !r->keys || !r->refs)
        return false;
    for (size_t i = 0; i < n; i++) {
        tessera__v1__pulled_value__init(&r->values[i]);
        tessera__v1__shard_key__init(&r->keys[i]);
        tessera__v1__tensor_ref__init(&r->refs[i]);
        r->keys[i].variable = (char *)keys[i].variable;
        r->keys[i].shard = keys[i].shard;
        r->refs[i].dtype =
            vals[i].bf16 ? TESSERA__V1__DTYPE__DTYPE_BFLOAT16 : TESSERA__V1__DTYPE__DTYPE_FLOAT32;
        r->refs[i].n_shape = vals[i].rank;
        r->refs[i].shape = (int64_t *)vals[i].shape;
        r->refs[i].payload_offset = vals[i].offset;
        r->refs[i].byte_length = vals[i].bytes;
        r->refs[i].chunk_offset = vals[i].chunk_offset;
        r->values[i].key = &r->keys[i];
        r->values[i].value = &r->refs[i];
        r->values[i].version = vals[i].version;
        r->ptrs[i] = &r->values[i];
    }
    return true;
}

static void values_done(values_reply_t *r)
{
    free(r->values);
    free(r->ptrs);
    free(r->keys);
    free(r->refs);
}

/* Sends resp with buf (len bytes, malloc'd) as its payload; buf is freed in every case. */
static status_t respond_with(rpc_ctx_t *ctx, ps_service_t *st, const ProtobufCMessage *resp,
                             void *buf, size_t len)
{
    rpc_iov_t iov = {buf, len, release_free, buf};
    size_t packed = protobuf_c_message_get_packed_size(resp);
    status_t rc;

    if ((uint64_t)packed + len + 16 > (uint64_t)st->max_message_bytes) {
        free(buf);
        return rpc_ctx_fail(ctx, STATUS_RESOURCE_EXHAUSTED, NULL,
                            "the reply would take %zu bytes, over the message limit of %" PRId64
                            "; ask for fewer shards or rows per call",
                            packed + len, st->max_message_bytes);
    }
    if (len == 0) { /* zero-length segments are never released */
        free(buf);
        return rpc_ctx_respond(ctx, resp, NULL, 0);
    }
    rc = rpc_ctx_respond(ctx, resp, &iov, 1);
    if (rc != STATUS_OK) /* not handed to gRPC */
        free(buf);
    return rc;
}

/* The tail of Pull and PushPull: resp's values list (*ret_n, *ret_values) describes the n values
 * read into buf (none when vals is NULL: a Push without pull_after), then resp goes out with buf
 * as its payload and the bytes count as pulled. buf is freed in every case; vr holds the list
 * until the caller's values_done. */
static status_t respond_values(rpc_ctx_t *ctx, ps_service_t *st, const ProtobufCMessage *resp,
                               size_t *ret_n, Tessera__V1__PulledValue ***ret_values,
                               values_reply_t *vr, const store_value_t *vals,
                               const store_key_t *keys, size_t n, void *buf, size_t len)
{
    status_t rc;

    if (vals != NULL) {
        if (!values_init(vr, vals, keys, n)) {
            free(buf);
            return rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
        }
        *ret_n = n;
        *ret_values = vr->ptrs;
    }
    rc = respond_with(ctx, st, resp, buf, len);
    if (rc == STATUS_OK)
        metric_add(st->pulled_bytes, (double)len);
    return rc;
}

/* ---- CreateVariables ---------------------------------------------------------------------- */

static status_t copy_shape(rpc_ctx_t *ctx, const char *v, const char *field, const int64_t *src,
                           size_t n, int64_t *dst)
{
    if (n > STORE_MAX_RANK)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, v,
                            "variable '%s': %s has rank %zu, more than %d", v, field, n,
                            STORE_MAX_RANK);
    if (n > 0)
        memcpy(dst, src, n * sizeof(*dst));
    return STATUS_OK;
}

static status_t spec_from_proto(rpc_ctx_t *ctx, const Tessera__V1__VariableShard *p, size_t i,
                                store_shard_spec_t *sp)
{
    status_msg_t m;

    if (p->variable == NULL || p->variable[0] == '\0')
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "variable",
                            "shards[%zu]: the variable name is empty", i);
    sp->variable = p->variable;
    sp->shard = p->shard;
    sp->num_shards = p->num_shards;
    sp->dtype = p->dtype;
    sp->rank = p->n_shape;
    sp->full_rank = p->n_full_shape;
    STATUS_CHECK(copy_shape(ctx, p->variable, "shape", p->shape, p->n_shape, sp->shape));
    STATUS_CHECK(
        copy_shape(ctx, p->variable, "full_shape", p->full_shape, p->n_full_shape, sp->full_shape));
    sp->row_offset = p->row_offset;
    sp->sparse = p->sparse;
    sp->moving = p->moving;
    sp->momentum = p->momentum;
    if (p->n_slots > OPTIMIZER_MAX_SLOTS)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, p->variable,
                            "variable '%s': %zu optimizer slots, no optimizer keeps more than %d",
                            p->variable, p->n_slots, OPTIMIZER_MAX_SLOTS);
    for (size_t k = 0; k < p->n_slots; k++) {
        sp->slots[k] = p->slots[k].data;
        sp->slots_len[k] = p->slots[k].len;
    }
    sp->n_slots = p->n_slots;
    sp->updates = p->updates;
    if (constraint_from_proto(p->constraint, (int)p->n_full_shape, &sp->constraint, &m) !=
        STATUS_OK)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, p->variable, "variable '%s': %s",
                            p->variable, m.text);
    if (p->initializer != NULL &&
        p->initializer->kind_case == TESSERA__V1__INITIALIZER__KIND_VALUES) {
        sp->has_values = true;
        sp->values = p->initializer->values->data.data;
        sp->values_len = p->initializer->values->data.len;
        return STATUS_OK;
    }
    if (initializer_from_proto(p->initializer, &sp->init, &sp->fan_in, &sp->fan_out, &m) !=
        STATUS_OK)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, p->variable, "variable '%s': %s",
                            p->variable, m.text);
    return STATUS_OK;
}

static status_t on_create(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__CreateVariablesRequest *req = (const void *)msg;
    Tessera__V1__CreateVariablesResponse resp = TESSERA__V1__CREATE_VARIABLES_RESPONSE__INIT;
    ps_service_t *st = user;
    store_shard_spec_t *specs = calloc(req->n_shards + 1, sizeof(*specs));
    optimizer_config_t opt;
    store_err_t err;
    status_msg_t m;
    size_t created = 0;
    status_t rc;

    if (specs == NULL)
        return rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
    STATUS_CHECK_GOTO(check_job(ctx, req->job), rc, out);
    if (req->optimizer != NULL && optimizer_from_proto(req->optimizer, &opt, &m) != STATUS_OK) {
        rc = rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "optimizer", "job '%s': %s", req->job,
                          m.text);
        goto out;
    }
    for (size_t i = 0; i < req->n_shards; i++)
        STATUS_CHECK_GOTO(spec_from_proto(ctx, req->shards[i], i, &specs[i]), rc, out);
    rc = store_create(st->store, req->job, req->optimizer ? &opt : NULL, specs, req->n_shards,
                      &created, &err);
    if (rc != STATUS_OK) {
        rc = fail_store(ctx, &err);
        goto out;
    }
    update_gauges(st);
    if (created > 0)
        LOG_INFO(PS, "job '%s': created %zu of %zu shards", req->job, created, req->n_shards);
    resp.created = (int32_t)created;
    rc = rpc_ctx_respond(ctx, &resp.base, NULL, 0);
out:
    free(specs);
    return rc;
}

/* ---- Pull --------------------------------------------------------------------------------- */

static status_t on_pull(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__PullRequest *req = (const void *)msg;
    Tessera__V1__PullResponse resp = TESSERA__V1__PULL_RESPONSE__INIT;
    ps_service_t *st = user;
    size_t n = req->n_items, out_len = 0;
    rpc_payload_t payload;
    pieces_t pl = take_payload(ctx, &payload);
    store_pull_item_t *items = calloc(n + 1, sizeof(*items));
    store_value_t *vals = calloc(n + 1, sizeof(*vals));
    store_key_t *keys = calloc(n + 1, sizeof(*keys));
    values_reply_t vr = {0};
    scratch_t sc = {.budget = pl.len};
    uint64_t end_max = 0;
    void *buf = NULL;
    store_err_t err;
    status_t rc;

    metric_inc(st->pull_requests);
    if (!items || !vals || !keys) {
        rc = rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
        goto out;
    }
    STATUS_CHECK_GOTO(check_job(ctx, req->job), rc, out);
    for (size_t i = 0; i < n; i++) {
        const Tessera__V1__PullItem *it = req->items[i];
        STATUS_CHECK_GOTO(check_key(ctx, it->key, i), rc, out);
        keys[i] = (store_key_t){it->key->variable, it->key->shard};
        items[i].key = keys[i];
        if (it->rows != NULL) {
            where_t w = {it->key->variable, it->key->shard, "rows"};
            view_t v;
            STATUS_CHECK_GOTO(rows_view(ctx, it->rows, &w, &pl, &sc, &end_max, &v), rc, out);
            items[i].has_rows = true;
            items[i].rows = v.data;
            items[i].n_rows = v.count;
        }
    }
    STATUS_CHECK_GOTO(check_payload_used(ctx, end_max, pl.len), rc, out);
    if (store_pull(st->store, req->job, items, n, vals, &buf, &out_len, &err) != STATUS_OK) {
        rc = fail_store(ctx, &err);
        goto out;
    }
    rc = respond_values(ctx, st, &resp.base, &resp.n_values, &resp.values, &vr, vals, keys, n, buf,
                        out_len);
out:
    values_done(&vr);
    scratch_done(&sc);
    rpc_payload_done(&payload);
    free(items);
    free(vals);
    free(keys);
    return rc;
}

/* ---- Push and PushPull -------------------------------------------------------------------- */

static status_t push_item(rpc_ctx_t *ctx, const Tessera__V1__PushItem *it, size_t i,
                          const pieces_t *pl, scratch_t *sc, uint64_t *end_max,
                          store_push_item_t *ret)
{
    where_t w;
    view_t g, rows;
    bool bf16 = false;

    STATUS_CHECK(check_key(ctx, it->key, i));
    w = (where_t){it->key->variable, it->key->shard, "dense"};
    ret->key = (store_key_t){it->key->variable, it->key->shard};
    switch (it->gradient_case) {
    case TESSERA__V1__PUSH_ITEM__GRADIENT_DENSE:
        /* float32, or bfloat16 (train.wire_dtype), widened by the store block by block */
        bf16 = it->dense != NULL && it->dense->dtype == TESSERA__V1__DTYPE__DTYPE_BFLOAT16;
        STATUS_CHECK(tensor_view_of(ctx, it->dense,
                                    bf16 ? TESSERA__V1__DTYPE__DTYPE_BFLOAT16
                                         : TESSERA__V1__DTYPE__DTYPE_FLOAT32,
                                    true, &w, pl, sc, end_max, &g));
        if (g.chunk) { /* whole rows of the tensor; the store checks that they are whole blocks */
            size_t row = g.rank > 0 && g.shape[0] > 0 ? g.full / (size_t)g.shape[0] : 0;
            if (row == 0 || g.chunk_first % row != 0 || g.count % row != 0)
                return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w.variable,
                                    "variable '%s' shard %d: dense declares %zu bytes at offset "
                                    "%zu of the %zu its shape makes: a chunk must be whole "
                                    "rows of %zu elements",
                                    w.variable, w.shard, g.count * sizeof(float),
                                    g.chunk_first * sizeof(float), g.full * sizeof(float), row);
            ret->has_chunk = true;
            ret->chunk_row = g.chunk_first / row;
            ret->chunk_rows = g.count / row;
        }
        break;
    case TESSERA__V1__PUSH_ITEM__GRADIENT_ROWS:
        if (it->rows == NULL)
            return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w.variable,
                                "variable '%s' shard %d: rows is missing", w.variable, w.shard);
        w.field = "rows.indices";
        STATUS_CHECK(rows_view(ctx, it->rows->indices, &w, pl, sc, end_max, &rows));
        w.field = "rows.values";
        STATUS_CHECK(tensor_view(ctx, it->rows->values, TESSERA__V1__DTYPE__DTYPE_FLOAT32, &w, pl,
                                 sc, end_max, &g));
        ret->has_rows = true;
        ret->rows = rows.data;
        ret->n_rows = rows.count;
        ret->grad = g.data;
        break;
    default:
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, w.variable,
                            "variable '%s' shard %d: the item carries no gradient", w.variable,
                            w.shard);
    }
    if (!ret->has_rows) { /* where gRPC received it */
        ret->grad_pieces = pl;
        ret->grad_at = g.at;
        ret->grad_pieces_bf16 = bf16;
    }
    ret->rank = g.rank;
    ret->shape = g.shape;
    return STATUS_OK;
}

/* A push of rows (an embedding's) takes its payload in one aligned copy, as other calls do:
 * its index and value tensors are read as arrays, and several items may share one index tensor
 * (scratch copies of each would count against the request's budget). Dense gradients alone are
 * read in place. */
static status_t flatten_for_rows(rpc_ctx_t *ctx, const Tessera__V1__PushRequest *req,
                                 rpc_payload_t *payload, pieces_t *pl)
{
    bool rows = false;
    void *flat;

    for (size_t i = 0; i < req->n_items && !rows; i++)
        rows = req->items[i]->gradient_case == TESSERA__V1__PUSH_ITEM__GRADIENT_ROWS;
    if (!rows || payload->parts == NULL)
        return STATUS_OK;
    if ((flat = rpc_buffer_alloc(pl->len)) == NULL)
        return rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory for a push of %zu bytes",
                            pl->len);
    pieces_read(pl, 0, flat, pl->len);
    rpc_payload_done(payload);
    *payload = (rpc_payload_t){.data = flat, .len = pl->len, .owned = true, .copied = pl->len};
    *pl = rpc_payload_pieces(payload);
    return STATUS_OK;
}

static status_t do_push(rpc_ctx_t *ctx, const Tessera__V1__PushRequest *req, ps_service_t *st,
                        bool pull_after)
{
    Tessera__V1__PushResponse resp = TESSERA__V1__PUSH_RESPONSE__INIT;
    size_t n = req->n_items, out_len = 0;
    rpc_payload_t payload;
    pieces_t pl = take_payload(ctx, &payload);
    store_push_item_t *items = calloc(n + 1, sizeof(*items));
    store_value_t *vals = calloc(n + 1, sizeof(*vals));
    store_key_t *keys = calloc(n + 1, sizeof(*keys));
    uint64_t *versions = calloc(n + 1, sizeof(*versions));
    values_reply_t vr = {0};
    scratch_t sc = {0};
    uint64_t end_max = 0;
    void *buf = NULL;
    store_err_t err;
    status_t rc;

    metric_inc(st->push_requests);
    if (pull_after)
        metric_inc(st->pull_requests);
    if (!items || !vals || !keys || !versions) {
        rc = rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
        goto out;
    }
    STATUS_CHECK_GOTO(check_job(ctx, req->job), rc, out);
    STATUS_CHECK_GOTO(flatten_for_rows(ctx, req, &payload, &pl), rc, out);
    sc.budget = pl.len;
    if (req->batches > STORE_MAX_BATCHES) {
        rc = rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "batches",
                          "job '%s': a push of %" PRIu32 " batches, more than %d", req->job,
                          req->batches, STORE_MAX_BATCHES);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        STATUS_CHECK_GOTO(push_item(ctx, req->items[i], i, &pl, &sc, &end_max, &items[i]), rc, out);
        items[i].batches = req->batches;
        keys[i] = items[i].key;
    }
    STATUS_CHECK_GOTO(check_payload_used(ctx, end_max, pl.len), rc, out);
    if (req->pull_dtype != TESSERA__V1__DTYPE__DTYPE_INVALID &&
        req->pull_dtype != TESSERA__V1__DTYPE__DTYPE_FLOAT32 &&
        req->pull_dtype != TESSERA__V1__DTYPE__DTYPE_BFLOAT16) {
        rc = rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "pull_dtype",
                          "pull_dtype %s (%d): values are pulled as float32 or bfloat16",
                          dtype_name((int)req->pull_dtype), (int)req->pull_dtype);
        goto out;
    }
    if (store_push(st->store, req->job, items, n,
                   !pull_after                                             ? STORE_PUSH_ONLY
                   : req->pull_dtype == TESSERA__V1__DTYPE__DTYPE_BFLOAT16 ? STORE_PULL_BFLOAT16
                                                                           : STORE_PULL_FLOAT32,
                   versions, vals, &buf, &out_len, &err) != STATUS_OK) {
        rc = fail_store(ctx, &err);
        goto out;
    }
    metric_add(st->pushed_bytes, (double)pl.len);
    metric_add(st->push_copied_bytes, (double)(payload.copied + sc.copied));
    resp.n_versions = n;
    resp.versions = versions;
    rc = respond_values(ctx, st, &resp.base, &resp.n_values, &resp.values, &vr,
                        pull_after ? vals : NULL, keys, n, buf, out_len);
out:
    values_done(&vr);
    scratch_done(&sc);
    rpc_payload_done(&payload);
    free(items);
    free(vals);
    free(keys);
    free(versions);
    return rc;
}

static status_t on_push(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__PushRequest *req = (const void *)msg;
    return do_push(ctx, req, user, req->pull_after);
}

static status_t on_push_pull(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    return do_push(ctx, (const void *)msg, user, true);
}

/* ---- DropJob, Stats, Save, Restore -------------------------------------------------------- */

static void push_totals(ps_service_t *st, push_totals_t *t)
{
    static const rpc_method_id_t ids[] = {RPC_PS_PUSH, RPC_PS_PUSH_PULL};

    memset(t, 0, sizeof(*t));
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        rpc_method_stats_t ms;
        rpc_server_stats(st->srv, ids[i], &ms);
        t->calls += ms.calls;
        t->receive += ms.receive_seconds;
        t->decode += ms.decode_seconds;
        t->handle += ms.handle_seconds;
        t->total += ms.seconds;
    }
    t->apply = store_apply_seconds(st->store);
}

/* "job 'X': dropped N shards", and where the time of the pushes since the last drop went: per
 * call, its RPC phases and the optimizer's part of the handler (one job at a time: that job's). */
static void log_pushes(ps_service_t *st, const char *job, size_t shards)
{
    push_totals_t now, d;
    double n;

    pthread_mutex_lock(&st->mark_mu);
    push_totals(st, &now);
    d = (push_totals_t){.calls = now.calls - st->mark.calls,
                        .receive = now.receive - st->mark.receive,
                        .decode = now.decode - st->mark.decode,
                        .handle = now.handle - st->mark.handle,
                        .total = now.total - st->mark.total,
                        .apply = now.apply - st->mark.apply};
    st->mark = now;
    pthread_mutex_unlock(&st->mark_mu);
    if (d.calls == 0) {
        LOG_INFO(PS, "job '%s': dropped %zu shards", job, shards);
        return;
    }
    n = (double)d.calls / 1e3; /* milliseconds per call */
    LOG_INFO(PS,
             "job '%s': dropped %zu shards; since the last drop %" PRIu64
             " pushes, per push %.2f ms: receive %.2f ms, decode %.2f ms, handle %.2f ms (of it "
             "the optimizer's update %.2f ms), reply %.2f ms",
             job, shards, d.calls, d.total / n, d.receive / n, d.decode / n, d.handle / n,
             d.apply / n, (d.total - d.receive - d.decode - d.handle) / n);
}

static status_t on_drop_job(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__DropJobRequest *req = (const void *)msg;
    Tessera__V1__DropJobResponse resp = TESSERA__V1__DROP_JOB_RESPONSE__INIT;
    ps_service_t *st = user;
    store_err_t err;
    size_t shards = 0;

    STATUS_CHECK(check_job(ctx, req->job));
    if (store_drop_job(st->store, req->job, &shards, &err) != STATUS_OK)
        return fail_store(ctx, &err);
    update_gauges(st);
    log_pushes(st, req->job, shards);
    resp.shards = (int32_t)shards;
    return rpc_ctx_respond(ctx, &resp.base, NULL, 0);
}

/* The stats reply, built by store_stats's callback. */
typedef struct stats_acc {
    Tessera__V1__ShardStats **items;
    size_t n, cap;
    bool oom;
} stats_acc_t;

static void stats_item_free(Tessera__V1__ShardStats *s)
{
    if (s == NULL)
        return;
    free(s->job);
    if (s->key)
        free(s->key->variable);
    free(s->key);
    free(s->shape);
    free(s);
}

static void stats_cb(const store_shard_stats_t *in, void *arg)
{
    stats_acc_t *a = arg;
    Tessera__V1__ShardStats *s;

    if (a->oom)
        return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        Tessera__V1__ShardStats **g = realloc(a->items, cap * sizeof(*g));
        if (g == NULL) {
            a->oom = true;
            return;
        }
        a->items = g;
        a->cap = cap;
    }
    s = calloc(1, sizeof(*s));
    if (s != NULL) {
        tessera__v1__shard_stats__init(s);
        s->job = strdup(in->job);
        s->shape = malloc((in->rank + 1) * sizeof(int64_t));
        s->key = malloc(sizeof(*s->key));
        if (s->key != NULL) {
            tessera__v1__shard_key__init(s->key);
            s->key->variable = strdup(in->variable);
        }
    }
    if (s == NULL || s->job == NULL || s->shape == NULL || s->key == NULL ||
        s->key->variable == NULL) {
        stats_item_free(s);
        a->oom = true;
        return;
    }
    s->key->shard = in->shard;
    s->n_shape = in->rank;
    memcpy(s->shape, in->shape, in->rank * sizeof(int64_t));
    s->version = in->version;
    s->value_bytes = in->value_bytes;
    s->slot_bytes = in->slot_bytes;
    s->pulls = in->pulls;
    s->pushes = in->pushes;
    s->bytes_pulled = in->bytes_pulled;
    s->bytes_pushed = in->bytes_pushed;
    a->items[a->n++] = s;
}

static status_t on_stats(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__PsStatsRequest *req = (const void *)msg;
    Tessera__V1__PsStatsResponse resp = TESSERA__V1__PS_STATS_RESPONSE__INIT;
    ps_service_t *st = user;
    stats_acc_t a = {0};
    store_err_t err;
    status_t rc;

    if (store_stats(st->store, req->job, stats_cb, &a, &err) != STATUS_OK)
        rc = fail_store(ctx, &err);
    else if (a.oom)
        rc = rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory for the stats");
    else {
        resp.n_shards = a.n;
        resp.shards = a.items;
        rc = respond_with(ctx, st, &resp.base, NULL, 0);
    }
    for (size_t i = 0; i < a.n; i++)
        stats_item_free(a.items[i]);
    free(a.items);
    return rc;
}

/* A path the chief may name for a checkpoint: absolute, without "." or ".." components or
 * control characters, short enough to build on. */
static status_t check_ckpt_path(rpc_ctx_t *ctx, const char *field, const char *path)
{
    size_t len = strlen(path);

    if (path[0] != '/' || len > 3000 || strstr(path, "/../") || strstr(path, "/./") ||
        (len >= 3 && strcmp(path + len - 3, "/..") == 0) ||
        (len >= 2 && strcmp(path + len - 2, "/.") == 0))
        return rpc_ctx_fail(
            ctx, STATUS_INVALID_ARGUMENT, field,
            "%s must be an absolute path without . or .. components, got \"%.200s\"", field, path);
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, field, "%s holds a control character",
                                field);
    return STATUS_OK;
}

/* The PS writes and reads checkpoints only under its --data-root directories. */
static status_t check_root(rpc_ctx_t *ctx, const ps_service_t *st, const char *what,
                           const char *field, const char *path)
{
    status_msg_t why = {0};

    if (roots_check(st->roots, what, path, &why) != STATUS_OK)
        return rpc_ctx_fail(ctx, STATUS_PERMISSION_DENIED, field, "%s", why.text);
    return STATUS_OK;
}

/* A shard file's own name: letters, digits, '.', '_' and '-', not starting with '.', ending in
 * .safetensors. */
static bool shard_file_name(const char *name)
{
    size_t len = strlen(name);

    if (len <= strlen(".safetensors") || len > 200 || name[0] == '.' ||
        strcmp(name + len - strlen(".safetensors"), ".safetensors") != 0)
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            return false;
    return true;
}

static status_t on_save(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__SaveRequest *req = (const void *)msg;
    Tessera__V1__SaveResponse resp = TESSERA__V1__SAVE_RESPONSE__INIT;
    ps_service_t *st = user;
    store_err_t err;
    status_msg_t ferr = {0};
    uint64_t bytes = 0, updates = 0;
    size_t shards = 0;
    char *path = NULL, *parent = NULL, *slash;
    double t0 = clock_now_s();
    status_t rc;

    STATUS_CHECK(check_job(ctx, req->job));
    STATUS_CHECK(check_ckpt_path(ctx, "directory", req->directory));
    STATUS_CHECK(check_root(ctx, st, "checkpoint.dir", "directory", req->directory));
    if (!shard_file_name(req->file))
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "file",
                            "file must be a plain name ending in .safetensors, got \"%.200s\"",
                            req->file);
    path = malloc(strlen(req->directory) + strlen(req->file) + 2);
    parent = strdup(req->directory);
    if (path != NULL)
        sprintf(path, "%s/%s", req->directory, req->file);
    if (path == NULL || parent == NULL) {
        free(path);
        free(parent);
        return rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
    }
    rc = files_mkdirs(req->directory, &ferr);
    if (rc != STATUS_OK) {
        rc = rpc_ctx_fail(ctx, rc, "directory", "%s", ferr.text);
        goto out;
    }
    if (store_save(st->store, req->job, path, &bytes, &shards, &updates, &err) != STATUS_OK) {
        rc = fail_store(ctx, &err);
        goto out;
    }
    if (files_fsync_dir(req->directory, &ferr) != STATUS_OK) {
        rc = rpc_ctx_fail(ctx, ferr.status, "directory", "%s", ferr.text);
        goto out;
    }
    LOG_INFO(PS, "job '%s': saved %zu shards (%" PRIu64 " bytes) to %s in %.2f s", req->job, shards,
             bytes, path, clock_now_s() - t0);
    if ((slash = strrchr(parent, '/')) != NULL && slash != parent) {
        *slash = '\0';
        ckpt_prune_file(parent, req->file, req->step, req->keep_steps, req->n_keep_steps);
    }
    resp.file = path;
    resp.bytes = bytes;
    resp.updates = updates;
    rc = rpc_ctx_respond(ctx, &resp.base, NULL, 0);
out:
    free(path);
    free(parent);
    return rc;
}

static status_t on_restore(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__RestoreRequest *req = (const void *)msg;
    Tessera__V1__RestoreResponse resp = TESSERA__V1__RESTORE_RESPONSE__INIT;
    ps_service_t *st = user;
    store_err_t err;
    size_t shards = 0;
    const char *base;

    STATUS_CHECK(check_job(ctx, req->job));
    STATUS_CHECK(check_ckpt_path(ctx, "file", req->file));
    STATUS_CHECK(check_root(ctx, st, "checkpoint file", "file", req->file));
    base = strrchr(req->file, '/') + 1;
    if (!shard_file_name(base))
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "file",
                            "file must name a .safetensors file, got \"%.200s\"", req->file);
    if (store_restore(st->store, req->job, req->file, &shards, &err) != STATUS_OK)
        return fail_store(ctx, &err);
    LOG_INFO(PS, "job '%s': restored %zu shards from %s", req->job, shards, req->file);
    resp.shards = (int32_t)shards;
    return rpc_ctx_respond(ctx, &resp.base, NULL, 0);
}

/* ---- setup -------------------------------------------------------------------------------- */

static status_t make_metrics(ps_service_t *st, metrics_t *m, status_msg_t *err)
{
    static const double bounds[] = {1e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3,
                                    5e-3, 1e-2, 5e-2, 0.1,  0.5,  1.0};

    st->push_requests = metrics_counter(m, "tessera_ps_push_requests_total",
                                        "Push and PushPull requests received.", NULL);
    st->pull_requests = metrics_counter(m, "tessera_ps_pull_requests_total",
                                        "Pull and PushPull requests received.", NULL);
    st->pushed_bytes = metrics_counter(m, "tessera_ps_pushed_bytes_total",
                                       "Payload bytes of gradients received.", NULL);
    st->pulled_bytes = metrics_counter(m, "tessera_ps_pulled_bytes_total",
                                       "Payload bytes of variable values sent.", NULL);
    st->push_copied_bytes = metrics_counter(
        m, "tessera_ps_push_copied_bytes_total",
        "Payload bytes of Push and PushPull requests copied in user space before the update: "
        "0 for dense gradients, which the optimizer reads where gRPC received them; a push of "
        "rows (an embedding's) is copied once, and so is a message gRPC received compressed "
        "or in slices of under 1 KiB on average.",
        NULL);
    st->param_bytes = metrics_gauge(m, "tessera_ps_param_bytes",
                                    "Bytes of variable values held, all jobs.", NULL);
    st->slot_bytes =
        metrics_gauge(m, "tessera_ps_slot_bytes", "Bytes of optimizer slots held, all jobs.", NULL);
    st->variables =
        metrics_gauge(m, "tessera_ps_variables", "Variables with shards held, all jobs.", NULL);
    st->apply_seconds = metrics_histogram(m, "tessera_ps_apply_duration_seconds",
                                          "Time to apply one push: its blocks' optimizer updates, "
                                          "with the values a pull after it returns.",
                                          NULL, bounds, sizeof(bounds) / sizeof(bounds[0]));
    if (!st->push_requests || !st->pull_requests || !st->pushed_bytes || !st->pulled_bytes ||
        !st->push_copied_bytes || !st->param_bytes || !st->slot_bytes || !st->variables ||
        !st->apply_seconds)
        return status_fail(err, STATUS_NO_MEMORY, "ps: cannot register the metrics");
    return STATUS_OK;
}

/* --apply-threads: the pool holds all but the handler's own thread. */
static status_t apply_pool(const ps_opts_t *o, pool_t **ret, status_msg_t *err)
{
    long n = o->apply_threads > 0 ? (long)o->apply_threads : cpus_available();

    *ret = NULL;
    if (n <= 1)
        return STATUS_OK;
    STATUS_CHECK(pool_new((unsigned)(n - 1), ret, err));
    LOG_INFO(PS, "updates of large shards spread over %ld threads; optimizer kernels: %s", n,
             optimizer_isa());
    return STATUS_OK;
}

status_t ps_service_setup(daemon_t *d, void *opts, void **ret_state, status_msg_t *err)
{
    const ps_opts_t *o = opts;
    ps_service_t *st = calloc(1, sizeof(*st));
    rpc_server_t *srv = daemon_rpc(d);
    store_limits_t lim;
    int64_t mm = o->common.max_message_bytes;

    if (st == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    if (make_metrics(st, daemon_metrics(d), err) != STATUS_OK) {
        free(st);
        return err->status;
    }
    st->max_message_bytes = mm;
    st->srv = srv;
    pthread_mutex_init(&st->mark_mu, NULL);
    st->roots = daemon_roots(d);
    lim.max_bytes =
        o->max_memory_bytes > 0 ? (uint64_t)o->max_memory_bytes : memory_physical_bytes();
    /* A whole shard travels in one message: leave room for the fields around it. */
    lim.max_shard_bytes =
        (uint64_t)(mm > 2 * (int64_t)REPLY_HEADROOM ? mm - REPLY_HEADROOM : mm / 2);
    lim.max_reply_bytes = lim.max_shard_bytes;
    lim.max_jobs = (size_t)o->max_jobs;
    lim.max_variables = (size_t)o->max_variables_per_job;
    lim.max_shards = (size_t)o->max_shards_per_job;
    st->store = store_new(&lim, st->apply_seconds);
    if (st->store == NULL) {
        free(st);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    if (apply_pool(o, &st->pool, err) != STATUS_OK) {
        ps_service_teardown(st);
        return err->status;
    }
    store_set_pool(st->store, st->pool);
    rpc_server_handle(srv, RPC_PS_CREATE_VARIABLES, on_create, st);
    rpc_server_handle(srv, RPC_PS_PULL, on_pull, st);
    rpc_server_handle(srv, RPC_PS_PUSH, on_push, st);
    rpc_server_handle(srv, RPC_PS_PUSH_PULL, on_push_pull, st);
    rpc_server_payload_in_place(srv, RPC_PS_PUSH);
    rpc_server_payload_in_place(srv, RPC_PS_PUSH_PULL);
    rpc_server_handle(srv, RPC_PS_DROP_JOB, on_drop_job, st);
    rpc_server_handle(srv, RPC_PS_STATS, on_stats, st);
    rpc_server_handle(srv, RPC_PS_SAVE, on_save, st);
    rpc_server_handle(srv, RPC_PS_RESTORE, on_restore, st);
    LOG_INFO(PS,
             "store limits: %" PRIu64 " bytes of variables and slots, %" PRIu64
             " bytes per shard, %zu jobs, %zu variables and %zu shards per job",
             lim.max_bytes, lim.max_shard_bytes, lim.max_jobs, lim.max_variables, lim.max_shards);
    *ret_state = st;
    return STATUS_OK;
}

void ps_service_teardown(void *state)
{
    ps_service_t *st = state;

    if (st == NULL)
        return;
    store_free(st->store);
    pool_free(st->pool);
    pthread_mutex_destroy(&st->mark_mu);
    free(st);
}

static const char *const ps_services[] = {RPC_SVC_PS, RPC_SVC_DIAG, NULL};

const daemon_spec_t ps_daemon_spec = {
    .program = "tessera-ps",
    .role = "ps",
    .task_type = TESSERA__V1__TASK_TYPE__TASK_TYPE_PS,
    .services = ps_services,
    .setup = ps_service_setup,
    .teardown = ps_service_teardown,
};
