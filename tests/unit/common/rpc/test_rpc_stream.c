/* Server streaming through the RPC runtime, in one process: a server on 127.0.0.1:0 whose
 * WatchJob handler hands the call to a producer thread, and the client stream API reading it.
 * The request's id picks what the producer does. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc.h>

#include "check_run.h"
#include "rpc/health.h"
#include "rpc/server.h"
#include "rpc/client.h"
#include "base/clock.h"

#define N_ORDERED 300

/* What the producer of the current test saw; reset by each test. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t producer;
    bool have_producer;
    int done_calls;     /* on_done callbacks run */
    int accepted;       /* messages the server queue took */
    status_t refused;   /* what stopped the producer */
    bool saw_cancelled; /* rpc_ctx_cancelled was true after the call ended */
    int released;       /* release callbacks of refused payloads */
    bool producer_over; /* the producer called rpc_ctx_stream_finish */
    status_t misuse[3]; /* respond on a stream, send with a payload, send of the wrong type */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

typedef struct job {
    rpc_ctx_t *ctx;
    char mode[64];
} job_t;

static void reset(void)
{
    pthread_mutex_lock(&g.mu);
    g.have_producer = false;
    g.done_calls = g.accepted = g.released = 0;
    g.refused = STATUS_OK;
    g.saw_cancelled = g.producer_over = false;
    pthread_mutex_unlock(&g.mu);
}

static void join_producer(void)
{
    pthread_mutex_lock(&g.mu);
    while (!g.have_producer)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    pthread_join(g.producer, NULL);
}

/* The text of message i: its length and letters depend on i, so order and content show. */
static char *text_of(int i, size_t len)
{
    char *t = malloc(len + 1);
    for (size_t k = 0; k < len; k++)
        t[k] = (char)('a' + (k + (size_t)i) % 26);
    t[len] = '\0';
    return t;
}

static size_t len_of(int i)
{
    return (size_t)(i * 7919) % 70000;
}

static status_t send_update(rpc_ctx_t *ctx, int i, size_t len)
{
    Tessera__V1__WatchJobUpdate up = TESSERA__V1__WATCH_JOB_UPDATE__INIT;
    Tessera__V1__JobInfo job = TESSERA__V1__JOB_INFO__INIT;
    Tessera__V1__JobEvent ev = TESSERA__V1__JOB_EVENT__INIT, *evs[1] = {&ev};
    char id[32];
    status_t rc;

    snprintf(id, sizeof(id), "job-%d", i);
    job.id = id;
    up.job = &job;
    ev.wall_time = i;
    ev.message = text_of(i, len);
    up.n_events = 1;
    up.events = evs;
    rc = rpc_ctx_stream_send(ctx, &up.base, NULL, 0);
    free(ev.message);
    return rc;
}

static void on_done(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.mu);
    g.done_calls++;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
}

static void wait_done(void)
{
    pthread_mutex_lock(&g.mu);
    while (g.done_calls == 0)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
}

static void count_release(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.mu);
    g.released++;
    pthread_mutex_unlock(&g.mu);
}

static void *producer_main(void *arg)
{
    job_t *j = arg;
    rpc_ctx_t *ctx = j->ctx;
    status_t rc = STATUS_OK;
    int n = 0;

    if (strcmp(j->mode, "ordered") == 0) {
        /* A fast producer that backs off when the reader lags. */
        while (n < N_ORDERED) {
            rc = send_update(ctx, n, len_of(n));
            if (rc == STATUS_RESOURCE_EXHAUSTED) {
                nanosleep(&(struct timespec){0, 1000000}, NULL);
                continue;
            }
            if (rc != STATUS_OK) /* the test sees accepted < N_ORDERED */
                break;
            n++;
        }
        rpc_ctx_stream_finish(ctx, STATUS_OK, NULL);
    } else if (strncmp(j->mode, "flood", 5) == 0) {
        /* Never waits: the queue cap must stop it. "flood-big" sends 3 MiB messages. */
        size_t len = strcmp(j->mode, "flood-big") == 0 ? 3u << 20 : 256u << 10;
        while (n < 1000 && (rc = send_update(ctx, n, len)) == STATUS_OK)
            n++;
        rpc_ctx_stream_finish(ctx, rc, "the reader is too slow after %d messages", n);
    } else { /* "wait": one message, then wait for the end of the call */
        n = send_update(ctx, 0, 10) == STATUS_OK;
        wait_done();
        pthread_mutex_lock(&g.mu);
        g.saw_cancelled = rpc_ctx_cancelled(ctx);
        pthread_mutex_unlock(&g.mu);
        rc = send_update(ctx, 1, 10);
        rpc_ctx_stream_finish(ctx, STATUS_INTERNAL, "not sent: the call is over");
    }
    pthread_mutex_lock(&g.mu);
    g.accepted = n;
    g.refused = rc;
    g.producer_over = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    free(j);
    return NULL;
}

static status_t on_watch_job(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__WatchJobRequest *req = (const void *)msg;
    Tessera__V1__WatchJobUpdate up = TESSERA__V1__WATCH_JOB_UPDATE__INIT;
    Tessera__V1__EchoResponse wrong = TESSERA__V1__ECHO_RESPONSE__INIT;
    char byte = 'x';
    rpc_iov_t iov = {&byte, 1, count_release, NULL};
    job_t *j;

    (void)user;
    if (strcmp(req->id, "missing") == 0)
        return rpc_ctx_fail(ctx, STATUS_NOT_FOUND, req->id, "no job \"%s\"", req->id);
    /* Misuse is refused, and a refused payload is still handed over (released once). */
    g.misuse[0] = rpc_ctx_respond(ctx, &up.base, NULL, 0);
    rpc_ctx_defer(ctx);
    g.misuse[1] = rpc_ctx_stream_send(ctx, &up.base, &iov, 1);
    g.misuse[2] = rpc_ctx_stream_send(ctx, &wrong.base, NULL, 0);
    rpc_ctx_on_done(ctx, on_done, NULL);
    j = calloc(1, sizeof(*j));
    j->ctx = ctx;
    snprintf(j->mode, sizeof(j->mode), "%s", req->id);
    pthread_mutex_lock(&g.mu);
    ck_assert_int_eq(pthread_create(&g.producer, NULL, producer_main, j), 0);
    g.have_producer = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    return STATUS_OK;
}

typedef struct fixture {
    rpc_server_t *server;
    health_t *health;
    rpc_channel_t *ch;
} fixture_t;

static const char *const services[] = {"tessera.v1.Coordinator", NULL};

static void fixture_up(fixture_t *f)
{
    rpc_server_opts_t o = {.listen = "127.0.0.1:0", .threads = 2, .max_message_bytes = 16 << 20};
    status_msg_t err;
    char target[64];

    reset();
    ck_assert_int_eq(rpc_server_new(&o, &f->server, &err), STATUS_OK);
    rpc_server_handle(f->server, RPC_COORD_WATCH_JOB, on_watch_job, NULL);
    f->health = health_new(f->server, services);
    ck_assert_int_eq(rpc_server_start(f->server, &err), STATUS_OK);
    health_set_serving(f->health, true);
    snprintf(target, sizeof(target), "127.0.0.1:%d", rpc_server_port(f->server));
    ck_assert_int_eq(rpc_channel_new(target, NULL, &f->ch, &err), STATUS_OK);
}

static void fixture_down(fixture_t *f)
{
    rpc_channel_free(f->ch);
    rpc_server_shutdown(f->server, 1000);
    health_free(f->health);
}

static rpc_stream_t *watch_job(fixture_t *f, const char *mode, int64_t timeout_ms)
{
    Tessera__V1__WatchJobRequest req = TESSERA__V1__WATCH_JOB_REQUEST__INIT;
    rpc_stream_t *s = NULL;
    rpc_error_t err;

    req.id = (char *)mode;
    ck_assert_int_eq(rpc_coord_watch_job_open(f->ch, &req, timeout_ms, &s, &err), STATUS_OK);
    return s;
}

START_TEST(stream_delivers_every_message_in_order_then_a_clean_end)
{
    fixture_t f;
    rpc_stream_t *s;
    Tessera__V1__WatchJobUpdate *up;
    rpc_error_t err;

    fixture_up(&f);
    s = watch_job(&f, "ordered", 30000);
    for (int i = 0; i < N_ORDERED; i++) {
        char id[32], *want;
        ck_assert_int_eq(rpc_coord_watch_job_next(s, &up, NULL, 10000, &err), STATUS_OK);
        ck_assert_ptr_nonnull(up);
        snprintf(id, sizeof(id), "job-%d", i);
        ck_assert_str_eq(up->job->id, id);
        ck_assert_uint_eq(up->n_events, 1);
        want = text_of(i, len_of(i));
        ck_assert_msg(strcmp(up->events[0]->message, want) == 0, "message %d differs", i);
        free(want);
        protobuf_c_message_free_unpacked(&up->base, NULL);
        if (i % 50 == 0) /* a reader slower than the producer now and then */
            nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    ck_assert_int_eq(rpc_coord_watch_job_next(s, &up, NULL, 10000, &err), STATUS_OK);
    ck_assert_ptr_null(up);
    ck_assert(rpc_stream_done(s));
    /* The end stays the end. */
    ck_assert_int_eq(rpc_coord_watch_job_next(s, &up, NULL, 0, &err), STATUS_OK);
    ck_assert_ptr_null(up);
    rpc_stream_free(s);
    join_producer();
    ck_assert_int_eq(g.accepted, N_ORDERED);
    ck_assert_int_eq(g.done_calls, 1);
    ck_assert(!g.saw_cancelled);
    ck_assert_int_eq(g.misuse[0], STATUS_INVALID_USAGE);
    ck_assert_int_eq(g.misuse[1], STATUS_INVALID_USAGE);
    ck_assert_int_eq(g.misuse[2], STATUS_INVALID_USAGE);
    ck_assert_int_eq(g.released, 1);
    fixture_down(&f);
}
END_TEST

static void check_flood(const char *mode, int min_accepted, int max_accepted)
{
    fixture_t f;
    rpc_stream_t *s;
    Tessera__V1__WatchJobUpdate *up;
    rpc_error_t err;
    int got = 0;
    status_t rc;

    fixture_up(&f);
    s = watch_job(&f, mode, 60000);
    /* Do not read until the producer has run into the cap. */
    pthread_mutex_lock(&g.mu);
    while (!g.producer_over)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    ck_assert_int_eq(g.refused, STATUS_RESOURCE_EXHAUSTED);
    ck_assert_msg(g.accepted >= min_accepted && g.accepted <= max_accepted,
                  "%s: %d messages accepted", mode, g.accepted);
    /* Everything accepted still arrives, in order, and then the producer's error. */
    while ((rc = rpc_coord_watch_job_next(s, &up, NULL, 20000, &err)) == STATUS_OK && up != NULL) {
        char id[32];
        snprintf(id, sizeof(id), "job-%d", got++);
        ck_assert_str_eq(up->job->id, id);
        protobuf_c_message_free_unpacked(&up->base, NULL);
    }
    ck_assert_int_eq(rc, STATUS_RESOURCE_EXHAUSTED);
    ck_assert(rpc_stream_done(s));
    ck_assert_int_eq(got, g.accepted);
    ck_assert_ptr_nonnull(strstr(err.message, "too slow"));
    rpc_stream_free(s);
    join_producer();
    fixture_down(&f);
}

START_TEST(stream_slow_reader_hits_the_message_cap)
{
    /* One message in flight plus the queue, and whatever gRPC took meanwhile. */
    check_flood("flood", RPC_STREAM_QUEUE_MAX + 1, 999);
}
END_TEST

START_TEST(stream_slow_reader_hits_the_byte_cap)
{
    /* 3 MiB messages: the 64 MiB cap stops the producer before 64 messages. */
    check_flood("flood-big", (int)(RPC_STREAM_QUEUE_MAX_BYTES / (3u << 20)),
                RPC_STREAM_QUEUE_MAX - 1);
}
END_TEST

START_TEST(stream_client_cancel_reaches_the_producer)
{
    fixture_t f;
    rpc_stream_t *s;
    Tessera__V1__WatchJobUpdate *up;
    rpc_error_t err;

    fixture_up(&f);
    s = watch_job(&f, "wait", 0);
    ck_assert_int_eq(rpc_coord_watch_job_next(s, &up, NULL, 10000, &err), STATUS_OK);
    ck_assert_str_eq(up->job->id, "job-0");
    protobuf_c_message_free_unpacked(&up->base, NULL);
    /* Open and quiet: a short wait times out without ending it. */
    ck_assert_int_eq(rpc_coord_watch_job_next(s, &up, NULL, 50, &err), STATUS_TIMEOUT);
    ck_assert(!rpc_stream_done(s));
    rpc_stream_cancel(s);
    ck_assert_int_eq(rpc_coord_watch_job_next(s, &up, NULL, 10000, &err), STATUS_CANCELLED);
    ck_assert(rpc_stream_done(s));
    join_producer();
    ck_assert_int_eq(g.done_calls, 1);
    ck_assert(g.saw_cancelled);
    ck_assert_int_eq(g.refused, STATUS_CANCELLED);
    rpc_stream_free(s);
    fixture_down(&f);
}
END_TEST

START_TEST(stream_deadline_ends_an_open_stream)
{
    fixture_t f;
    rpc_stream_t *s;
    Tessera__V1__WatchJobUpdate *up;
    rpc_error_t err;

    fixture_up(&f);
    s = watch_job(&f, "wait", 300);
    ck_assert_int_eq(rpc_coord_watch_job_next(s, &up, NULL, 10000, &err), STATUS_OK);
    protobuf_c_message_free_unpacked(&up->base, NULL);
    ck_assert_int_eq(rpc_coord_watch_job_next(s, &up, NULL, -1, &err), STATUS_TIMEOUT);
    ck_assert(rpc_stream_done(s));
    ck_assert_int_eq(err.grpc_code, 4);
    join_producer();
    ck_assert(g.saw_cancelled);
    rpc_stream_free(s);
    fixture_down(&f);
}
END_TEST

START_TEST(stream_handler_error_ends_the_stream_with_its_status)
{
    fixture_t f;
    rpc_stream_t *s;
    Tessera__V1__WatchJobUpdate *up;
    rpc_error_t err;

    fixture_up(&f);
    s = watch_job(&f, "missing", 10000);
    ck_assert_int_eq(rpc_coord_watch_job_next(s, &up, NULL, 10000, &err), STATUS_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(err.message, "no job \"missing\""));
    ck_assert_str_eq(err.culprit, "missing");
    rpc_stream_free(s);
    fixture_down(&f);
}
END_TEST

START_TEST(stream_open_refuses_methods_that_do_not_stream)
{
    fixture_t f;
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    rpc_stream_t *s = NULL;
    rpc_error_t err;

    fixture_up(&f);
    ck_assert_int_eq(rpc_stream_open(f.ch, RPC_HEALTH_CHECK, &req.base, 0, &s, &err),
                     STATUS_INVALID_USAGE);
    ck_assert_int_eq(rpc_stream_open(f.ch, RPC_COORD_WATCH_JOB, &req.base, 0, &s, &err),
                     STATUS_INVALID_USAGE);
    ck_assert_ptr_null(s);
    rpc_stream_free(NULL);
    fixture_down(&f);
}
END_TEST

START_TEST(stream_server_shutdown_ends_open_streams)
{
    fixture_t f;
    rpc_stream_t *s;
    Tessera__V1__WatchJobUpdate *up;
    rpc_error_t err;
    double secs;
    status_t rc;

    fixture_up(&f);
    s = watch_job(&f, "wait", 0);
    ck_assert_int_eq(rpc_coord_watch_job_next(s, &up, NULL, 10000, &err), STATUS_OK);
    protobuf_c_message_free_unpacked(&up->base, NULL);
    secs = clock_now_s();
    rpc_server_shutdown(f.server, 200);
    secs = clock_now_s() - secs;
    ck_assert_msg(secs < 1.5, "shutdown took %.2f s", secs);
    join_producer();
    ck_assert(g.saw_cancelled);
    ck_assert_int_eq(g.refused, STATUS_CANCELLED);
    rc = rpc_coord_watch_job_next(s, &up, NULL, 10000, &err);
    ck_assert_msg(rc == STATUS_UNAVAILABLE || rc == STATUS_CANCELLED, "ended with %s: %s",
                  status_name(rc), err.message);
    rpc_stream_free(s);
    rpc_channel_free(f.ch);
    health_free(f.health);
}
END_TEST

static Grpc__Health__V1__HealthCheckResponse__ServingStatus next_health(rpc_stream_t *s)
{
    Grpc__Health__V1__HealthCheckResponse *resp;
    Grpc__Health__V1__HealthCheckResponse__ServingStatus st;
    rpc_error_t err;

    ck_assert_int_eq(rpc_health_watch_next(s, &resp, NULL, 10000, &err), STATUS_OK);
    ck_assert_ptr_nonnull(resp);
    st = resp->status;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return st;
}

START_TEST(health_watch_reports_each_change_and_unknown_services)
{
    fixture_t f;
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    Grpc__Health__V1__HealthCheckResponse *resp;
    rpc_stream_t *all, *svc, *unknown;
    rpc_error_t err;

    fixture_up(&f);
    req.service = "";
    ck_assert_int_eq(rpc_health_watch_open(f.ch, &req, 0, &all, &err), STATUS_OK);
    req.service = "tessera.v1.Coordinator";
    ck_assert_int_eq(rpc_health_watch_open(f.ch, &req, 0, &svc, &err), STATUS_OK);
    req.service = "no.such.Service";
    ck_assert_int_eq(rpc_health_watch_open(f.ch, &req, 0, &unknown, &err), STATUS_OK);
    ck_assert_int_eq(next_health(all),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    ck_assert_int_eq(next_health(svc),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    ck_assert_int_eq(next_health(unknown),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN);
    /* No change, no message. */
    health_set_serving(f.health, true);
    ck_assert_int_eq(rpc_health_watch_next(all, &resp, NULL, 100, &err), STATUS_TIMEOUT);
    health_set_serving(f.health, false);
    health_set_serving(f.health, true);
    ck_assert_int_eq(next_health(all),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
    ck_assert_int_eq(next_health(all),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    ck_assert_int_eq(next_health(svc),
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
    /* The unknown service's stream stays open and quiet. */
    ck_assert_int_eq(rpc_health_watch_next(unknown, &resp, NULL, 100, &err), STATUS_TIMEOUT);
    ck_assert(!rpc_stream_done(unknown));
    rpc_stream_free(all);
    rpc_stream_free(svc);
    rpc_stream_free(unknown);
    fixture_down(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rpc_stream");
    TCase *tc = tcase_create("rpc_stream");

    grpc_init();
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, stream_delivers_every_message_in_order_then_a_clean_end);
    tcase_add_test(tc, stream_slow_reader_hits_the_message_cap);
    tcase_add_test(tc, stream_slow_reader_hits_the_byte_cap);
    tcase_add_test(tc, stream_client_cancel_reaches_the_producer);
    tcase_add_test(tc, stream_deadline_ends_an_open_stream);
    tcase_add_test(tc, stream_handler_error_ends_the_stream_with_its_status);
    tcase_add_test(tc, stream_open_refuses_methods_that_do_not_stream);
    tcase_add_test(tc, stream_server_shutdown_ends_open_streams);
    tcase_add_test(tc, health_watch_reports_each_change_and_unknown_services);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
