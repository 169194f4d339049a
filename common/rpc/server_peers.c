/* Calls in flight per peer host, for rpc_server_opts_t.max_calls_per_peer (server_internal.h). */
#define _POSIX_C_SOURCE 200809L
#include "rpc/server_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/support/alloc.h>

#define PEERS_MAX 4096 /* distinct hosts with calls in flight */

/* "ipv4:10.0.0.1:5000" -> "10.0.0.1", "ipv6:[::1]:5000" -> "::1", "unix:/x" -> "unix:/x". */
static void peer_host(grpc_call *call, char *out, size_t len)
{
    char *peer = grpc_call_get_peer(call);
    const char *p = peer ? peer : "unknown";
    size_t n;

    if (strncmp(p, "ipv4:", 5) == 0 || strncmp(p, "ipv6:", 5) == 0) {
        const char *colon;
        p += 5;
        colon = strrchr(p, ':');
        n = colon ? (size_t)(colon - p) : strlen(p);
        if (n >= 2 && p[0] == '[' && p[n - 1] == ']') {
            p++;
            n -= 2;
        }
    } else {
        n = strlen(p);
    }
    snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), p);
    gpr_free(peer);
}

bool server_peer_enter(rpc_ctx_t *c)
{
    rpc_server_t *s = c->server;
    server_peers_t *t = &s->peers;
    char host[sizeof(t->slots[0].host)];
    bool ok = true;
    size_t i, free_slot = (size_t)-1;

    c->peer_slot = -1;
    if (s->max_calls_per_peer <= 0)
        return true;
    peer_host(c->call, host, sizeof(host));
    pthread_mutex_lock(&t->mu);
    for (i = 0; i < t->n; i++) {
        if (t->slots[i].calls == 0 && free_slot == (size_t)-1)
            free_slot = i;
        if (t->slots[i].calls > 0 && strcmp(t->slots[i].host, host) == 0)
            break;
    }
    if (i == t->n) { /* a host without calls in flight */
        if (free_slot == (size_t)-1 && t->n < PEERS_MAX) {
            if (t->n == t->cap) {
                size_t cap = t->cap ? 2 * t->cap : 16;
                void *p = realloc(t->slots, cap * sizeof(*t->slots));
                if (p != NULL) {
                    t->slots = p;
                    t->cap = cap;
                }
            }
            if (t->n < t->cap) {
                free_slot = t->n++;
                t->slots[free_slot].calls = 0;
            }
        }
        i = free_slot;
        if (i != (size_t)-1)
            snprintf(t->slots[i].host, sizeof(t->slots[i].host), "%s", host);
    }
    if (i == (size_t)-1) {
        ok = false;
        rpc_ctx_fail(c, STATUS_RESOURCE_EXHAUSTED, NULL,
                     "%d hosts have calls in flight on this server: try again later", PEERS_MAX);
    } else if (t->slots[i].calls >= s->max_calls_per_peer) {
        ok = false;
        rpc_ctx_fail(c, STATUS_RESOURCE_EXHAUSTED, host,
                     "%s has %d calls in flight on this server (--max-calls-per-peer %d): wait "
                     "for some to finish",
                     host, t->slots[i].calls, s->max_calls_per_peer);
    } else {
        t->slots[i].calls++;
        c->peer_slot = (int)i;
    }
    pthread_mutex_unlock(&t->mu);
    return ok;
}

void server_peer_leave(rpc_ctx_t *c)
{
    server_peers_t *t = &c->server->peers;

    if (c->peer_slot < 0)
        return;
    pthread_mutex_lock(&t->mu);
    t->slots[c->peer_slot].calls--;
    pthread_mutex_unlock(&t->mu);
    c->peer_slot = -1;
}

void server_peers_done(server_peers_t *t)
{
    free(t->slots);
    t->slots = NULL;
    t->n = t->cap = 0;
}
