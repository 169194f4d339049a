/* Server streaming against a real daemon: grpc.health.v1.Health/Watch on tessera-ps through
 * SIGTERM, unknown services and client cancels. */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <grpc/grpc.h>

#include "check_run.h"
#include "harness.h"
#include "rpc/health.h"
#include "rpc/client.h"
#include "base/clock.h"

#define SERVING         GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
#define NOT_SERVING     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
#define SERVICE_UNKNOWN GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN

static rpc_stream_t *watch(rpc_channel_t *ch, const char *service)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    rpc_stream_t *s = NULL;
    rpc_error_t err;

    req.service = (char *)service;
    ck_assert_int_eq(rpc_health_watch_open(ch, &req, 30000, &s, &err), STATUS_OK);
    return s;
}

/* The next status on the stream, which must come within wait_ms. */
static int next_status(rpc_stream_t *s, int64_t wait_ms)
{
    Grpc__Health__V1__HealthCheckResponse *resp = NULL;
    rpc_error_t err;
    status_t rc;
    int st;

    rc = rpc_health_watch_next(s, &resp, NULL, wait_ms, &err);
    ck_assert_msg(rc == STATUS_OK && resp != NULL, "no health message: %s (%s)", status_name(rc),
                  err.message);
    st = (int)resp->status;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return st;
}

START_TEST(health_watch_sees_not_serving_before_the_daemon_stops)
{
    launch_proc_t ps;
    rpc_channel_t *ch;
    rpc_stream_t *s;
    Grpc__Health__V1__HealthCheckResponse *resp = NULL;
    rpc_error_t err;
    status_t rc;
    double t0;
    int st = 0;

    harness_start(&ps, "tessera-ps", "ps-watch-sigterm", "--drain-delay=300ms", NULL);
    ch = harness_channel(&ps);
    s = watch(ch, "");
    ck_assert_int_eq(next_status(s, 5000), SERVING);
    t0 = clock_now_s();
    kill(ps.pid, SIGTERM);
    /* The daemon flips its health before it drains: watchers hear it while it still serves. */
    ck_assert_int_eq(next_status(s, 2000), NOT_SERVING);
    /* Then the shutdown's grace runs out and the stream is cancelled. */
    rc = rpc_health_watch_next(s, &resp, NULL, 5000, &err);
    ck_assert_msg(rc == STATUS_UNAVAILABLE || rc == STATUS_CANCELLED,
                  "the stream ended with %s: %s", status_name(rc), err.message);
    ck_assert_ptr_null(resp);
    ck_assert(rpc_stream_done(s));
    ck_assert_int_eq(launch_wait_exit(&ps, 2000, &st), STATUS_OK);
    ck_assert_msg(clock_now_s() - t0 < 2.0, "the daemon took %.2f s to stop", clock_now_s() - t0);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    launch_stop(&ps, SIGKILL, 0, NULL);
    rpc_stream_free(s);
    rpc_channel_free(ch);
}
END_TEST

START_TEST(health_watch_of_an_unknown_service_says_so_and_stays_open)
{
    launch_proc_t ps;
    rpc_channel_t *ch;
    rpc_stream_t *unknown, *known;
    Grpc__Health__V1__HealthCheckResponse *resp = NULL;
    rpc_error_t err;

    harness_start(&ps, "tessera-ps", "ps-watch-unknown", NULL);
    ch = harness_channel(&ps);
    unknown = watch(ch, "no.such.Service");
    known = watch(ch, "tessera.v1.ParameterServer");
    ck_assert_int_eq(next_status(unknown, 5000), SERVICE_UNKNOWN);
    ck_assert_int_eq(next_status(known, 5000), SERVING);
    ck_assert_int_eq(rpc_health_watch_next(unknown, &resp, NULL, 300, &err), STATUS_TIMEOUT);
    ck_assert(!rpc_stream_done(unknown));
    /* Check keeps its own rule for unknown names: NOT_FOUND. */
    ck_assert_int_eq(health_check(ps.listen, "no.such.Service", 2000, &err), HEALTH_UNREACHABLE);
    ck_assert_int_eq(err.grpc_code, 5);
    rpc_stream_free(unknown);
    rpc_stream_free(known);
    rpc_channel_free(ch);
    harness_stop(&ps);
}
END_TEST

START_TEST(health_watch_cancelled_by_clients_leaves_the_daemon_healthy)
{
    enum { N = 16 };
    launch_proc_t ps;
    rpc_channel_t *ch;
    rpc_stream_t *s[N];
    rpc_error_t err;
    char log[512];
    int st = 0;

    harness_start(&ps, "tessera-ps", "ps-watch-cancel", NULL);
    ch = harness_channel(&ps);
    for (int i = 0; i < N; i++)
        s[i] = watch(ch, i % 2 ? "" : "tessera.v1.ParameterServer");
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(next_status(s[i], 5000), SERVING);
    for (int i = 0; i < N; i++) {
        Grpc__Health__V1__HealthCheckResponse *resp = NULL;
        if (i % 2) { /* half cancel explicitly, half by freeing the open stream */
            rpc_stream_cancel(s[i]);
            ck_assert_int_eq(rpc_health_watch_next(s[i], &resp, NULL, 5000, &err),
                             STATUS_CANCELLED);
        }
        rpc_stream_free(s[i]);
    }
    /* The daemon still answers, on the same channel and on a new one. */
    {
        Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
        Grpc__Health__V1__HealthCheckResponse *resp = NULL;
        req.service = "";
        ck_assert_int_eq(rpc_health_check(ch, &req, NULL, &resp, NULL, &err), STATUS_OK);
        ck_assert_int_eq(resp->status, SERVING);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    ck_assert_int_eq(health_check(ps.listen, "", 2000, &err), HEALTH_SERVING);
    rpc_channel_free(ch);
    /* No call is left open on the server: it stops without waiting out its grace for a stream
     * it missed, and every deferred call was finished (an ASan build also checks for leaks). */
    kill(ps.pid, SIGTERM);
    ck_assert_int_eq(launch_wait_exit(&ps, 5000, &st), STATUS_OK);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    launch_stop(&ps, SIGKILL, 0, NULL);
    snprintf(log, sizeof(log), "%s/ps-watch-cancel.log", harness_tmpdir());
    ck_assert_msg(!harness_file_contains(log, "calls still running"),
                  "a watch outlived its client");
    ck_assert_msg(!harness_file_contains(log, "never answered"), "a watch was never finished");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stream");
    TCase *tc = tcase_create("stream");

    grpc_init();
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, health_watch_sees_not_serving_before_the_daemon_stops);
    tcase_add_test(tc, health_watch_of_an_unknown_service_says_so_and_stays_open);
    tcase_add_test(tc, health_watch_cancelled_by_clients_leaves_the_daemon_healthy);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
