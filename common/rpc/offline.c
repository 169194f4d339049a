/* Calls run through the real handlers and codec without a network (offline.h): the fuzzers
 * and tests drive a server's methods this way. */
#define _POSIX_C_SOURCE 200809L
#include "rpc/server_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "base/log.h"
#include "rpc/offline.h"
#include "base/clock.h"

/* An offline server counts as shut down with its queues closed: nothing is ever accepted, and
 * server_start_batch refuses every batch, so a reply stays encoded in its context (c->send_bb) and
 * an error stays recorded there, for rpc_offline_call to hand back. */
rpc_server_t *rpc_offline_server_new(int task_type, int task_index)
{
    rpc_server_t *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->threads = calloc(1, sizeof(*s->threads));
    if (s->threads == NULL) {
        free(s);
        return NULL;
    }
    s->threads[0].server = s;
    s->n_threads = 1;
    s->task_type = task_type;
    s->task_index = task_index;
    snprintf(s->address, sizeof(s->address), "offline");
    atomic_store(&s->shutting_down, true);
    s->queues_closed = true;
    pthread_mutex_init(&s->defer_mu, NULL);
    pthread_cond_init(&s->defer_cv, NULL);
    return s;
}

void rpc_offline_server_free(rpc_server_t *s)
{
    if (s == NULL)
        return;
    free(s->threads[0].recv_buf);
    pthread_cond_destroy(&s->defer_cv);
    pthread_mutex_destroy(&s->defer_mu);
    free(s->threads);
    free(s);
}

/* What server_on_recv does after the handler, less the sending: the failure that goes out. */
static void offline_finish(rpc_ctx_t *c, status_t rc)
{
    if (atomic_exchange(&c->replied, true))
        return;
    if (rc == STATUS_OK) {
        rpc_ctx_fail(c, STATUS_INTERNAL, NULL, "%s: the handler sent no reply", c->method->path);
    } else {
        if (c->fail_status == STATUS_OK)
            rpc_ctx_fail(c, rc, NULL, "%s", status_str(rc));
        c->fail_status = rc;
    }
}

status_t rpc_offline_call(rpc_server_t *s, rpc_method_id_t id, grpc_byte_buffer *bb,
                          rpc_offline_result_t *ret)
{
    const rpc_method_t *m = rpc_method_get(id);
    ProtobufCMessage *req = NULL;
    status_msg_t why = {0};
    rpc_ctx_t *c;
    grpc_op op;
    status_t rc;

    memset(ret, 0, sizeof(*ret));
    if (m == NULL || m->kind != RPC_KIND_UNARY || s->handlers[id].cb == NULL)
        return ret->status = STATUS_UNIMPLEMENTED;
    c = server_ctx_new(s, &s->threads[0]);
    if (c == NULL)
        return ret->status = STATUS_NO_MEMORY;
    c->method = m;
    c->started = clock_now_s();
    c->details.deadline = gpr_inf_future(GPR_CLOCK_MONOTONIC);
    c->bytes_in = grpc_byte_buffer_length(bb);
    rc = rpc_decode(m->request, bb, NULL, 0, s->handlers[id].in_place, &req, &c->payload, &why);
    if (rc != STATUS_OK) {
        atomic_store(&c->replied, true);
        rpc_ctx_fail(c, rc == STATUS_NO_MEMORY ? rc : STATUS_INVALID_ARGUMENT, NULL,
                     "%s: the request (%zu bytes) is refused: %s", m->path, c->bytes_in, why.text);
    } else {
        rc = s->handlers[id].cb(c, req, s->handlers[id].user);
        protobuf_c_message_free_unpacked(req, NULL);
        if (c->deferred) {
            LOG_ERR(RPC, "%s: an offline call cannot be deferred", m->path);
            server_ctx_unref(c);
            return ret->status = STATUS_INVALID_USAGE;
        }
        offline_finish(c, rc);
    }
    if (c->send_bb != NULL) { /* answered: a later failure would not have been sent */
        ret->reply = c->send_bb;
        c->send_bb = NULL;
    } else {
        server_error_status_op(c, &op);
        ret->status = c->fail_status;
        snprintf(ret->text, sizeof(ret->text), "%s", c->fail_text);
        snprintf(ret->culprit, sizeof(ret->culprit), "%s", c->fail_culprit);
        if (c->detail_buf != NULL) {
            ret->detail_len = GRPC_SLICE_LENGTH(c->trailer.value);
            ret->detail = malloc(ret->detail_len ? ret->detail_len : 1);
            if (ret->detail != NULL)
                memcpy(ret->detail, c->detail_buf, ret->detail_len);
            else
                ret->detail_len = 0;
        }
    }
    server_ctx_unref(c);
    return ret->status;
}

void rpc_offline_result_done(rpc_offline_result_t *r)
{
    if (r == NULL)
        return;
    if (r->reply != NULL)
        grpc_byte_buffer_destroy(r->reply);
    free(r->detail);
    memset(r, 0, sizeof(*r));
}
