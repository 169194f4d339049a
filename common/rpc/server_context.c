/* A call's context on the server: its lifetime and references, batches, method counters, and
 * the accessors handlers use. */
#define _POSIX_C_SOURCE 200809L
#include "rpc/server_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "base/log.h"
#include "base/clock.h"

/* ---- context lifetime --------------------------------------------------------------------- */

rpc_ctx_t *server_ctx_new(rpc_server_t *s, server_thread_t *t)
{
    rpc_ctx_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->server = s;
    c->thread = t;
    c->t_accept = (tag_t){TAG_ACCEPT, c};
    c->t_recv = (tag_t){TAG_RECV, c};
    c->t_send = (tag_t){TAG_SEND, c};
    c->t_stream = (tag_t){TAG_STREAM, c};
    c->t_close = (tag_t){TAG_CLOSE, c};
    atomic_init(&c->refs, 1);
    c->peer_slot = -1;
    pthread_mutex_init(&c->mu, NULL);
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    return c;
}

void server_count_call(rpc_ctx_t *c)
{
    method_counters_t *mc;

    if (c->method == NULL || atomic_exchange(&c->counted, true))
        return;
    mc = &c->server->counters[c->method->id];
    atomic_fetch_add(&mc->calls, 1);
    atomic_fetch_add(&mc->bytes_in, c->bytes_in);
    atomic_fetch_add(&mc->bytes_out, c->bytes_out);
    if (c->fail_status != STATUS_OK)
        atomic_fetch_add(&mc->errors, 1);
}

void server_ctx_free(rpc_ctx_t *c)
{
    server_peer_leave(c);
    if (c->method != NULL) {
        server_count_call(c);
        atomic_fetch_add(&c->server->counters[c->method->id].micros,
                         (uint64_t)((clock_now_s() - c->started) * 1e6));
    }
    if (c->call != NULL)
        grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->recv_bb != NULL)
        grpc_byte_buffer_destroy(c->recv_bb);
    if (c->send_bb != NULL)
        grpc_byte_buffer_destroy(c->send_bb);
    if (c->have_details)
        grpc_slice_unref(c->status_details);
    for (size_t i = 0; i < c->st.count; i++) /* only when the call never ran */
        grpc_byte_buffer_destroy(c->st.queue[(c->st.head + i) % RPC_STREAM_QUEUE_MAX]);
    rpc_payload_done(&c->payload);
    pthread_mutex_destroy(&c->mu);
    free(c->detail_buf);
    free(c);
}

void server_ctx_ref(rpc_ctx_t *c)
{
    atomic_fetch_add(&c->refs, 1);
}

void server_ctx_unref(rpc_ctx_t *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        server_ctx_free(c);
}

bool server_start_batch(rpc_ctx_t *c, const grpc_op *ops, size_t n, tag_t *tag)
{
    rpc_server_t *s = c->server;
    grpc_call_error e = GRPC_CALL_ERROR;
    bool closed;

    server_ctx_ref(c);
    pthread_mutex_lock(&s->defer_mu);
    closed = s->queues_closed;
    if (!closed)
        e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
    pthread_mutex_unlock(&s->defer_mu);
    if (e != GRPC_CALL_OK) {
        if (!closed)
            LOG_ERR(RPC, "%s: grpc_call_start_batch failed (%d)",
                    c->method ? c->method->path : "call", (int)e);
        server_ctx_unref(c);
        return false;
    }
    return true;
}

const void *rpc_ctx_payload(const rpc_ctx_t *c, size_t *ret_len)
{
    *ret_len = c->payload.len;
    return c->payload.data;
}

void *rpc_ctx_take_payload(rpc_ctx_t *c, size_t *ret_len)
{
    void *p = c->payload.data;
    *ret_len = c->payload.len;
    if (p == NULL)
        return NULL;
    if (!c->payload.owned) { /* the thread's buffer: hand it over, the thread makes a new one */
        c->thread->recv_buf = NULL;
        c->thread->recv_cap = 0;
    }
    c->payload = (rpc_payload_t){0};
    return p;
}

void rpc_ctx_take_payload_pieces(rpc_ctx_t *c, rpc_payload_t *ret)
{
    *ret = c->payload;
    if (ret->data != NULL && !ret->owned) { /* the thread's buffer: as rpc_ctx_take_payload */
        c->thread->recv_buf = NULL;
        c->thread->recv_cap = 0;
        ret->owned = true;
    }
    c->payload = (rpc_payload_t){0};
}

const rpc_method_t *rpc_ctx_method(const rpc_ctx_t *c)
{
    return c->method;
}

int64_t rpc_ctx_remaining_ms(const rpc_ctx_t *c)
{
    gpr_timespec d = gpr_convert_clock_type(c->details.deadline, GPR_CLOCK_MONOTONIC);
    gpr_timespec left;
    if (gpr_time_cmp(d, gpr_inf_future(GPR_CLOCK_MONOTONIC)) == 0)
        return INT64_MAX;
    left = gpr_time_sub(d, gpr_now(GPR_CLOCK_MONOTONIC));
    return gpr_time_to_millis(left);
}

bool rpc_ctx_cancelled(const rpc_ctx_t *c)
{
    return atomic_load(&c->closed) && c->cancelled;
}
