/* The three daemons as real processes on loopback: health, metrics, signals, systemd
 * notification, port clashes, bad configuration, tensors over the wire, hostile requests. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "check_run.h"
#include "base/crc32c.h"
#include "harness.h"
#include "rpc/health.h"
#include "job/job.h"
#include "rpc/client.h"
#include "base/clock.h"
#include "base/cpus.h"

START_TEST(daemons_report_serving_for_themselves_and_their_services)
{
    launch_proc_t ps, worker, chief;
    char ps_flag[200], worker_flag[200];
    rpc_error_t err;

    harness_start(&ps, "tessera-ps", "ps-health", NULL);
    harness_start(&worker, "tessera-worker", "worker-health", NULL);
    snprintf(ps_flag, sizeof(ps_flag), "--ps=%s", ps.listen);
    snprintf(worker_flag, sizeof(worker_flag), "--worker=%s", worker.listen);
    harness_start(&chief, "tessera-chief", "chief-health", ps_flag, worker_flag, NULL);

    ck_assert_int_eq(health_check(ps.listen, "", 2000, &err), HEALTH_SERVING);
    ck_assert_int_eq(health_check(worker.listen, "", 2000, &err), HEALTH_SERVING);
    ck_assert_int_eq(health_check(chief.listen, "", 2000, &err), HEALTH_SERVING);
    ck_assert_int_eq(health_check(ps.listen, "tessera.v1.ParameterServer", 2000, &err),
                     HEALTH_SERVING);
    ck_assert_int_eq(health_check(worker.listen, "tessera.v1.Worker", 2000, &err), HEALTH_SERVING);
    ck_assert_int_eq(health_check(chief.listen, "tessera.v1.Coordinator", 2000, &err),
                     HEALTH_SERVING);
    /* A service the task does not serve, or a name nobody serves: NOT_FOUND. */
    ck_assert_int_eq(health_check(worker.listen, "tessera.v1.ParameterServer", 2000, &err),
                     HEALTH_UNREACHABLE);
    ck_assert_int_eq(err.grpc_code, 5);
    ck_assert_int_eq(health_check(ps.listen, "no.such.Service", 2000, &err), HEALTH_UNREACHABLE);
    ck_assert_int_eq(err.grpc_code, 5);
    ck_assert_ptr_nonnull(strstr(err.message, "no.such.Service"));

    harness_stop(&chief);
    harness_stop(&worker);
    harness_stop(&ps);
}
END_TEST

static void check_metrics(const launch_proc_t *p, const char *family)
{
    char *headers, *body, *out = NULL;
    char *promtool[] = {"/usr/bin/promtool", "check", "metrics", NULL};
    int status;

    status = harness_http_get(p->metrics, "/metrics", &headers, &body);
    ck_assert_int_eq(status, 200);
    ck_assert_msg(strstr(headers, "Content-Type: text/plain; version=0.0.4; charset=utf-8"),
                  "wrong content type in %s", headers);
    ck_assert_msg(strstr(body, family) != NULL, "%s missing from %s's metrics", family, p->name);
    ck_assert_ptr_nonnull(strstr(body, "process_resident_memory_bytes"));
    ck_assert_ptr_nonnull(strstr(body, "# TYPE process_cpu_seconds_total counter"));
    ck_assert_msg(access(promtool[0], X_OK) == 0, "promtool is missing (Debian: prometheus)");
    status = harness_run(promtool, NULL, body, 30000, &out);
    ck_assert_msg(status == 0, "promtool check metrics failed (%d) for %s: %s", status, p->name,
                  out);
    free(out);
    free(headers);
    free(body);
    status = harness_http_get(p->metrics, "/other", &headers, &body);
    ck_assert_int_eq(status, 404);
    free(headers);
    free(body);
}

START_TEST(daemons_metrics_pass_promtool)
{
    launch_proc_t ps, worker, chief;
    rpc_error_t err;

    harness_start(&ps, "tessera-ps", "ps-metrics", NULL);
    harness_start(&worker, "tessera-worker", "worker-metrics", NULL);
    harness_start(&chief, "tessera-chief", "chief-metrics", NULL);
    /* Some traffic, so the per-method counters have moved. */
    ck_assert_int_eq(health_check(ps.listen, "", 2000, &err), HEALTH_SERVING);
    check_metrics(&ps, "tessera_ps_rpc_requests_total{method=\"/grpc.health.v1.Health/Check\"} 1");
    check_metrics(&worker, "tessera_worker_rpc_requests_total");
    check_metrics(&chief, "tessera_chief_rpc_requests_total");
    harness_stop(&chief);
    harness_stop(&worker);
    harness_stop(&ps);
}
END_TEST

/* The worker's tessera_worker_compute_threads. */
static int compute_threads(const launch_proc_t *worker)
{
    return (int)harness_metric(worker, "tessera_worker_compute_threads");
}

START_TEST(worker_computes_on_the_cpus_it_may_use_or_as_told)
{
    launch_proc_t w;
    cpu_set_t all, one;
    int first = 0;

    /* told */
    harness_start(&w, "tessera-worker", "worker-threads-3", "--compute-threads=3", NULL);
    ck_assert_int_eq(compute_threads(&w), 3);
    harness_stop(&w);
    /* by default the CPUs it may use: all of this test's, then one (taskset's way: the mask
     * a child inherits) */
    harness_start(&w, "tessera-worker", "worker-threads-all", "--compute-threads=0", NULL);
    ck_assert_int_eq(compute_threads(&w), cpus_available() < 64 ? cpus_available() : 64);
    harness_stop(&w);
    ck_assert_int_eq(sched_getaffinity(0, sizeof(all), &all), 0);
    while (!CPU_ISSET(first, &all))
        first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
    harness_start(&w, "tessera-worker", "worker-threads-one", "--compute-threads=0", NULL);
    ck_assert_int_eq(sched_setaffinity(0, sizeof(all), &all), 0);
    ck_assert_int_eq(compute_threads(&w), 1);
    harness_stop(&w);
}
END_TEST

static void check_sigterm(const char *program, const char *name)
{
    launch_proc_t p;
    double t0;
    int st = 0;

    harness_start(&p, program, name, NULL); /* returns once READY=1 arrived */
    t0 = clock_now_s();
    kill(p.pid, SIGTERM);
    ck_assert_msg(launch_wait_notify(&p, "STOPPING=1", 2000) == STATUS_OK, "%s sent no STOPPING=1",
                  name);
    ck_assert_int_eq(launch_wait_exit(&p, 2000, &st), STATUS_OK);
    ck_assert_msg(clock_now_s() - t0 < 2.0, "%s took %.2f s to stop", name, clock_now_s() - t0);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    launch_stop(&p, SIGKILL, 0, NULL);
}

START_TEST(daemons_notify_ready_and_stopping_and_exit_zero_on_sigterm)
{
    check_sigterm("tessera-ps", "ps-sigterm");
    check_sigterm("tessera-worker", "worker-sigterm");
    check_sigterm("tessera-chief", "chief-sigterm");
}
END_TEST

START_TEST(daemons_sigterm_during_a_long_transfer_still_exits_in_time)
{
    /* A call still running at SIGTERM gets the grace period, then is cancelled. */
    launch_proc_t p;
    char *args[] = {"--shutdown-grace=300ms", NULL};
    int st = 0;
    double t0;

    ck_assert_int_eq(harness_try_start(&p, "tessera-ps", "ps-grace", args, NULL, 0), STATUS_OK);
    t0 = clock_now_s();
    kill(p.pid, SIGINT);
    ck_assert_int_eq(launch_wait_exit(&p, 2000, &st), STATUS_OK);
    ck_assert(clock_now_s() - t0 < 2.0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    launch_stop(&p, SIGKILL, 0, NULL);
}
END_TEST

START_TEST(daemons_refuse_a_taken_port_with_a_clear_error)
{
    launch_proc_t first, second;
    char listen[200], metrics[200], log[512];
    char *args_listen[] = {listen, NULL};
    char *args_metrics[] = {metrics, NULL};

    harness_start(&first, "tessera-ps", "ps-first", NULL);
    snprintf(listen, sizeof(listen), "--listen=%s", first.listen);
    ck_assert_int_eq(
        harness_try_start(&second, "tessera-ps", "ps-second", args_listen, log, sizeof(log)),
        STATUS_REMOTE);
    ck_assert(WIFEXITED(second.wait_status) && WEXITSTATUS(second.wait_status) == 1);
    ck_assert_msg(harness_file_contains(log, "in use"), "no clear error in %s", log);
    ck_assert_msg(harness_file_contains(log, first.listen), "the address is not named");

    snprintf(metrics, sizeof(metrics), "--metrics-listen=%s", first.metrics);
    ck_assert_int_eq(harness_try_start(&second, "tessera-worker", "worker-clash", args_metrics, log,
                                       sizeof(log)),
                     STATUS_REMOTE);
    ck_assert_msg(harness_file_contains(log, "in use"), "no clear error in %s", log);
    /* The first daemon was not disturbed. */
    {
        rpc_error_t err;
        ck_assert_int_eq(health_check(first.listen, "", 2000, &err), HEALTH_SERVING);
    }
    harness_stop(&first);
}
END_TEST

static void expect_config_error(char *const argv[], char *const env[], const char *needle)
{
    char *out = NULL;
    int rc = harness_run(argv, env, NULL, 10000, &out);
    ck_assert_msg(rc == 2, "%s: exit %d, expected 2; output: %s", argv[1] ? argv[1] : "", rc, out);
    ck_assert_msg(strstr(out, needle) != NULL, "expected \"%s\" in: %s", needle, out);
    /* One clear line, not a crash dump. */
    ck_assert_msg(strchr(out, '\n') == strrchr(out, '\n'), "more than one line: %s", out);
    free(out);
}

START_TEST(daemons_reject_bad_configuration_with_one_clear_line)
{
    char *ps = (char *)harness_program("tessera-ps");
    char *worker = (char *)harness_program("tessera-worker");
    char *chief = (char *)harness_program("tessera-chief");
    char *bad_file = NULL;
    char path[512];
    FILE *f;

    expect_config_error((char *[]){ps, "--bogus", NULL}, NULL, "unknown flag --bogus");
    expect_config_error((char *[]){ps, "--threads=abc", NULL}, NULL, "threads");
    expect_config_error((char *[]){ps, "--threads=0", NULL}, NULL, "threads");
    expect_config_error((char *[]){worker, "--listen=nohost", NULL}, NULL, "nohost");
    expect_config_error((char *[]){chief, "--config=/nonexistent/chief.yaml", NULL}, NULL,
                        "/nonexistent/chief.yaml");
    expect_config_error((char *[]){ps, "stray", NULL}, NULL, "stray");
    expect_config_error((char *[]){ps, NULL}, (char *[]){"TF_CONFIG={not json", NULL}, "TF_CONFIG");
    expect_config_error(
        (char *[]){ps, NULL},
        (char *[]){"TF_CONFIG={\"cluster\":{\"ps\":[\"a:1\"]},\"task\":{\"type\":\"ps\","
                   "\"index\":4}}",
                   NULL},
        "out of range");
    expect_config_error((char *[]){chief, NULL},
                        (char *[]){"TF_CONFIG={\"cluster\":{\"chief\":[\"a:1\",\"b:2\"],"
                                   "\"ps\":[\"c:3\"]},\"task\":{\"type\":\"chief\",\"index\":0}}",
                                   NULL},
                        "chief");
    expect_config_error(
        (char *[]){worker, NULL},
        (char *[]){"TF_CONFIG={\"cluster\":{\"ps\":[\"a:1\"]},\"task\":{\"type\":\"ps\","
                   "\"index\":0}}",
                   NULL},
        "tessera-worker");
    expect_config_error(
        (char *[]){ps, NULL},
        (char *[]){"TF_CONFIG={\"cluster\":{\"ps\":[\"a:1\"]},\"task\":{\"type\":\"ps\","
                   "\"index\":\"x\"}}",
                   NULL},
        "index");

    snprintf(path, sizeof(path), "%s/bad.yaml", harness_tmpdir());
    f = fopen(path, "w");
    fputs("threads: 2\nlisten_typo: 127.0.0.1:1\n", f);
    fclose(f);
    bad_file = path;
    expect_config_error((char *[]){ps, "--config", bad_file, NULL}, NULL, "listen_typo");
}
END_TEST

START_TEST(daemons_take_their_port_and_index_from_tf_config)
{
    launch_proc_t p;
    char env[512], *out = NULL;
    char *argv[] = {(char *)harness_program("tessera-ps"), "--metrics-listen=127.0.0.1:0", NULL};
    char expect[64];
    int port = harness_free_port(), other = harness_free_port();
    status_msg_t err = {0};

    snprintf(env, sizeof(env),
             "TF_CONFIG={\"cluster\":{\"chief\":[\"127.0.0.1:1\"],\"worker\":[\"127.0.0.1:2\"],"
             "\"ps\":[\"127.0.0.1:%d\",\"127.0.0.1:%d\"]},\"task\":{\"type\":\"ps\","
             "\"index\":\"1\"},\"environment\":\"cloud\"}",
             other, port);
    putenv(env);
    ck_assert_int_eq(launch_start("ps-tfconfig", argv, NULL, 20000, &p, &err), STATUS_OK);
    unsetenv("TF_CONFIG");
    snprintf(expect, sizeof(expect), "127.0.0.1:%d", port);
    ck_assert_str_eq(p.listen, expect);
    harness_stop(&p);
    free(out);
}
END_TEST

START_TEST(daemons_load_the_shipped_sample_configs)
{
    static const char *const programs[] = {"tessera-ps", "tessera-worker", "tessera-chief"};
    for (int i = 0; i < 3; i++) {
        launch_proc_t p;
        char cfg[1024], name[64];
        char *args[] = {"--config", cfg, NULL};
        snprintf(cfg, sizeof(cfg), "%s",
                 harness_source(i == 0   ? "deploy/config/tessera-ps.yaml"
                                : i == 1 ? "deploy/config/tessera-worker.yaml"
                                         : "deploy/config/tessera-chief.yaml"));
        snprintf(name, sizeof(name), "%s-sample", programs[i]);
        /* The flags given after --config override the sample's ports. */
        ck_assert_int_eq(harness_try_start(&p, programs[i], name, args, NULL, 0), STATUS_OK);
        harness_stop(&p);
    }
}
END_TEST

static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *p = malloc(n);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)x;
    }
    return p;
}

START_TEST(rpc_64mib_tensor_round_trips_bit_exact)
{
    launch_proc_t ps;
    rpc_channel_t *ch;
    status_msg_t msg;
    rpc_error_t err;
    size_t len = 64u << 20;
    uint8_t *data = pattern(len, 7);
    int64_t shape[2] = {4096, 4096};
    Tessera__V1__EchoRequest req = TESSERA__V1__ECHO_REQUEST__INIT;
    Tessera__V1__TensorRef t = TESSERA__V1__TENSOR_REF__INIT;
    Tessera__V1__EchoResponse *resp = NULL;
    rpc_iov_t iov = {data, len, NULL, NULL};
    rpc_call_opts_t opts = {.timeout_ms = 60000, .payload = &iov, .n_payload = 1};
    rpc_payload_t payload = {0};

    harness_start(&ps, "tessera-ps", "ps-64mib", NULL);
    ck_assert_int_eq(rpc_channel_new(ps.listen, NULL, &ch, &msg), STATUS_OK);
    t.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
    t.n_shape = 2;
    t.shape = shape;
    t.byte_length = len;
    req.tensor = &t;
    ck_assert_msg(rpc_diag_echo(ch, &req, &opts, &resp, &payload, &err) == STATUS_OK, "%s",
                  err.message);
    ck_assert_uint_eq(payload.len, len);
    ck_assert_int_eq(memcmp(payload.data, data, len), 0);
    ck_assert_ptr_nonnull(resp->tensor);
    ck_assert_int_eq(resp->tensor->dtype, TESSERA__V1__DTYPE__DTYPE_FLOAT32);
    ck_assert_int_eq(resp->tensor->n_shape, 2);
    ck_assert_int_eq(resp->tensor->shape[0], 4096);
    ck_assert_int_eq(resp->task->type, TESSERA__V1__TASK_TYPE__TASK_TYPE_PS);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    rpc_payload_done(&payload);

    /* The same through Sink with a checksum computed by the server. */
    {
        Tessera__V1__SinkRequest sreq = TESSERA__V1__SINK_REQUEST__INIT;
        Tessera__V1__SinkResponse *sresp = NULL;
        sreq.checksum = 1;
        ck_assert_int_eq(rpc_diag_sink(ch, &sreq, &opts, &sresp, NULL, &err), STATUS_OK);
        ck_assert_uint_eq(sresp->bytes, len);
        ck_assert_uint_eq(sresp->crc32c, crc32c(data, len));
        protobuf_c_message_free_unpacked(&sresp->base, NULL);
    }
    rpc_channel_free(ch);
    free(data);
    harness_stop(&ps);
}
END_TEST

START_TEST(rpc_message_over_the_limit_is_refused_and_the_daemon_keeps_serving)
{
    launch_proc_t ps;
    rpc_channel_t *ch;
    status_msg_t msg;
    rpc_error_t err;
    size_t len = 2u << 20;
    uint8_t *data = pattern(len, 3);
    char *args[] = {"--max-message-bytes=1048576", NULL};
    Tessera__V1__SinkRequest req = TESSERA__V1__SINK_REQUEST__INIT;
    Tessera__V1__SinkResponse *resp = NULL;
    rpc_iov_t iov = {data, len, NULL, NULL};
    rpc_call_opts_t opts = {.timeout_ms = 10000, .payload = &iov, .n_payload = 1};

    ck_assert_int_eq(harness_try_start(&ps, "tessera-ps", "ps-limit", args, NULL, 0), STATUS_OK);
    ck_assert_int_eq(rpc_channel_new(ps.listen, NULL, &ch, &msg), STATUS_OK);
    ck_assert_int_ne(rpc_diag_sink(ch, &req, &opts, &resp, NULL, &err), STATUS_OK);
    ck_assert_int_eq(err.grpc_code, 8); /* RESOURCE_EXHAUSTED */
    iov.len = 1000;
    ck_assert_int_eq(rpc_diag_sink(ch, &req, &opts, &resp, NULL, &err), STATUS_OK);
    ck_assert_uint_eq(resp->bytes, 1000);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    rpc_channel_free(ch);
    free(data);
    harness_stop(&ps);
}
END_TEST

START_TEST(rpc_garbage_and_unknown_methods_get_errors_and_the_daemon_keeps_serving)
{
    launch_proc_t ps;
    rpc_channel_t *ch;
    status_msg_t msg;
    rpc_error_t err;
    static const char garbage[] = "\x7a\xff\xff\xff\x0f\x01\x02";
    uint8_t random[4096];

    harness_start(&ps, "tessera-ps", "ps-garbage", NULL);
    ck_assert_int_eq(rpc_channel_new(ps.listen, NULL, &ch, &msg), STATUS_OK);

    ck_assert_int_eq(
        rpc_unary_raw(ch, "/tessera.v1.Diagnostics/Sink", garbage, sizeof(garbage) - 1, 5000, &err),
        STATUS_INVALID_ARGUMENT);
    ck_assert_int_eq(err.grpc_code, 3);
    ck_assert_ptr_nonnull(strstr(err.message, "does not parse"));
    ck_assert_msg(strstr(err.task, "ps 0") != NULL, "error detail names no task: %s", err.task);

    ck_assert_int_eq(rpc_unary_raw(ch, "/tessera.v1.Nope/Call", "", 0, 5000, &err),
                     STATUS_UNIMPLEMENTED);
    ck_assert_int_eq(err.grpc_code, 12);
    /* The coordinator's methods are not served by a PS. */
    ck_assert_int_eq(rpc_unary_raw(ch, "/tessera.v1.Coordinator/GetCluster", "", 0, 5000, &err),
                     STATUS_UNIMPLEMENTED);

    for (int round = 0; round < 20; round++) {
        uint8_t *r = pattern(sizeof(random), 100 + (unsigned)round);
        memcpy(random, r, sizeof(random));
        free(r);
        /* Random bytes may or may not parse; either way the server must answer. */
        status_t rc = rpc_unary_raw(ch, "/grpc.health.v1.Health/Check", random,
                                    (size_t)(round * 97) % sizeof(random), 5000, &err);
        ck_assert(rc == STATUS_OK || rc == STATUS_INVALID_ARGUMENT || rc == STATUS_NOT_FOUND);
    }
    ck_assert_int_eq(health_check(ps.listen, "", 2000, &err), HEALTH_SERVING);
    rpc_channel_free(ch);
    harness_stop(&ps);
}
END_TEST

typedef struct echo_worker {
    const char *target;
    int ok;
} echo_worker_t;

static void *echo_main(void *arg)
{
    echo_worker_t *w = arg;
    rpc_channel_t *ch;
    status_msg_t msg;
    rpc_error_t err;
    if (rpc_channel_new(w->target, NULL, &ch, &msg) != STATUS_OK)
        return NULL;
    for (int i = 0; i < 100; i++) {
        uint8_t buf[3000];
        Tessera__V1__EchoRequest req = TESSERA__V1__ECHO_REQUEST__INIT;
        Tessera__V1__EchoResponse *resp = NULL;
        rpc_iov_t iov = {buf, (size_t)(i * 29 % 3000), NULL, NULL};
        rpc_call_opts_t opts = {.timeout_ms = 10000, .payload = &iov, .n_payload = 1};
        rpc_payload_t p = {0};
        for (size_t k = 0; k < sizeof(buf); k++)
            buf[k] = (uint8_t)(k + (size_t)i + (uintptr_t)w);
        if (rpc_diag_echo(ch, &req, &opts, &resp, &p, &err) != STATUS_OK)
            continue;
        if (p.len == iov.len && (p.len == 0 || memcmp(p.data, buf, p.len) == 0))
            w->ok++;
        rpc_payload_done(&p);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    rpc_channel_free(ch);
    return NULL;
}

START_TEST(rpc_many_concurrent_clients_get_their_own_answers)
{
    launch_proc_t ps;
    pthread_t tids[8];
    echo_worker_t workers[8];

    harness_start(&ps, "tessera-ps", "ps-concurrent", "--threads=3", NULL);
    for (int i = 0; i < 8; i++) {
        workers[i] = (echo_worker_t){ps.listen, 0};
        pthread_create(&tids[i], NULL, echo_main, &workers[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(tids[i], NULL);
        ck_assert_int_eq(workers[i].ok, 100);
    }
    harness_stop(&ps);
}
END_TEST

START_TEST(rpc_unreachable_peer_fails_fast_with_unavailable)
{
    rpc_channel_t *ch;
    status_msg_t msg;
    rpc_error_t err;
    char target[64];
    double t0 = clock_now_s();

    snprintf(target, sizeof(target), "127.0.0.1:%d", harness_free_port());
    ck_assert_int_eq(health_check(target, "", 3000, &err), HEALTH_UNREACHABLE);
    ck_assert_int_eq(err.status, STATUS_UNAVAILABLE);
    ck_assert(clock_now_s() - t0 < 3.0);
    ck_assert_int_eq(rpc_channel_new("not an address", NULL, &ch, &msg), STATUS_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(msg.text, "not an address"));
}
END_TEST

/* The hostile-input findings that reach the chief and the workers: a Keras JSON whose config is a
 * list (it used to crash both), a job of 200,000 keys and one over the job-file limit, an IDX file
 * whose header lies about its size, and bytes that are not UTF-8 quoted back in an error. Each
 * gets a clear error and every daemon stays SERVING. */
static status_t submit(rpc_channel_t *ch, const char *spec, const char *file, const void *data,
                       size_t len, rpc_error_t *err)
{
    Tessera__V1__SubmitJobRequest req = TESSERA__V1__SUBMIT_JOB_REQUEST__INIT;
    Tessera__V1__SubmitJobRequest__FilesEntry
        e = TESSERA__V1__SUBMIT_JOB_REQUEST__FILES_ENTRY__INIT,
        *entries[1] = {&e};
    Tessera__V1__SubmitJobResponse *resp = NULL;
    status_t rc;

    req.job_spec = (char *)spec;
    req.job_path = "/jobs/job.yaml";
    if (file != NULL) {
        e.key = (char *)file;
        e.value.data = (uint8_t *)data;
        e.value.len = len;
        req.n_files = 1;
        req.files = entries;
    }
    rc = rpc_coord_submit_job(ch, &req, NULL, &resp, NULL, err);
    if (rc == STATUS_OK)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

static status_t configure(rpc_channel_t *ch, const char *spec, const char *file, const char *data,
                          rpc_error_t *err)
{
    Tessera__V1__ConfigureJobRequest req = TESSERA__V1__CONFIGURE_JOB_REQUEST__INIT;
    Tessera__V1__ConfigureJobRequest__FilesEntry
        e = TESSERA__V1__CONFIGURE_JOB_REQUEST__FILES_ENTRY__INIT,
        *entries[1] = {&e};
    Tessera__V1__ConfigureJobResponse *resp = NULL;
    status_t rc;

    req.job = "hostile-1";
    req.job_spec = (char *)spec;
    req.job_path = "/jobs/job.yaml";
    req.num_workers = 1;
    if (file != NULL) {
        e.key = (char *)file;
        e.value.data = (uint8_t *)data;
        e.value.len = strlen(data);
        req.n_files = 1;
        req.files = entries;
    }
    rc = rpc_worker_configure_job(ch, &req, NULL, &resp, NULL, err);
    if (rc == STATUS_OK)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

static void expect_refused(status_t got, const rpc_error_t *err, const char *needle,
                           const char *what)
{
    ck_assert_msg(status_group(got) == STATUS_GROUP_INVALID_ARGUMENT ||
                      got == STATUS_RESOURCE_EXHAUSTED,
                  "%s: got %s (%s)", what, status_name(got), err->message);
    ck_assert_msg(strstr(err->message, needle) != NULL, "%s: '%s' not in: %s", what, needle,
                  err->message);
    ck_assert_msg(utf8_valid_text(err->message, strlen(err->message)), "%s: not UTF-8: %s", what,
                  err->message);
}

START_TEST(chief_and_worker_refuse_hostile_jobs_and_keep_serving)
{
    static const char crash[] = "{\"class_name\":\"Sequential\",\"config\":[1]}";
    static const char keras_job[] = "model: {keras_json: m.json}\nloss: mse\n"
                                    "data: {train: {format: idx, images: /nonexistent, labels: "
                                    "/nonexistent}}\n";
    static const uint8_t not_utf8[] = {'{', 0xff, 0xfe, 0xc3, '(', 0x80};
    uint8_t liar[40] = {0, 0, 8, 3, 0, 0, 0x20, 0, 0, 0, 1, 0, 0, 0, 1, 0};
    launch_proc_t ps, worker, chief;
    char ps_flag[200], worker_flag[200], job[1024], *big;
    size_t cap = 200000 * 16 + 64, len = 0;
    rpc_channel_t *cch, *wch;
    rpc_error_t err;
    status_msg_t msg;
    FILE *f;

    harness_start(&ps, "tessera-ps", "ps-hostile-jobs", NULL);
    harness_start(&worker, "tessera-worker", "worker-hostile-jobs", "--max-memory-bytes=67108864",
                  NULL);
    snprintf(ps_flag, sizeof(ps_flag), "--ps=%s", ps.listen);
    snprintf(worker_flag, sizeof(worker_flag), "--worker=%s", worker.listen);
    harness_start(&chief, "tessera-chief", "chief-hostile-jobs", ps_flag, worker_flag, NULL);
    ck_assert_int_eq(rpc_channel_new(chief.listen, NULL, &cch, &msg), STATUS_OK);
    ck_assert_int_eq(rpc_channel_new(worker.listen, NULL, &wch, &msg), STATUS_OK);

    /* 1. The Keras JSON that crashed the parser. */
    expect_refused(submit(cch, keras_job, "/jobs/m.json", crash, strlen(crash), &err), &err,
                   "m.json", "SubmitJob with config [1]");
    expect_refused(configure(wch, keras_job, "/jobs/m.json", crash, &err), &err, "m.json",
                   "ConfigureJob with config [1]");

    /* 2. 200,000 keys with a repeat, and a job over the 16 MiB limit. */
    big = malloc(JOB_MAX_FILE_BYTES + 2);
    len += (size_t)snprintf(big + len, cap - len, "{");
    for (int i = 0; i < 200000; i++)
        len += (size_t)snprintf(big + len, cap - len, "\"k%d\": 1, ", i);
    snprintf(big + len, cap - len, "\"k9\": 2}");
    expect_refused(submit(cch, big, NULL, NULL, 0, &err), &err, "duplicate key 'k9'",
                   "200,000 keys");
    memset(big, '#', JOB_MAX_FILE_BYTES + 1);
    big[JOB_MAX_FILE_BYTES + 1] = '\0';
    expect_refused(submit(cch, big, NULL, NULL, 0, &err), &err, "more than the limit",
                   "a 16 MiB + 1 job");
    free(big);

    /* 3 and 8. Bytes that are not UTF-8, in a file that is not JSON: quoted back escaped. */
    expect_refused(submit(cch, keras_job, "/jobs/m.json", not_utf8, sizeof(not_utf8), &err), &err,
                   "invalid JSON", "a non-UTF-8 model file");

    /* 4. An IDX header that promises 512 MiB in a 40-byte file. */
    snprintf(job, sizeof(job), "%s/liar-idx", harness_tmpdir());
    f = fopen(job, "wb");
    ck_assert_uint_eq(fwrite(liar, 1, sizeof(liar), f), sizeof(liar));
    fclose(f);
    snprintf(job, sizeof(job),
             "model: [{dense: {units: 2}, input_shape: [65536]}]\nloss: mse\n"
             "data: {batch_size: 8, train: {format: idx, images: %s/liar-idx, labels: "
             "%s/liar-idx}}\n",
             harness_tmpdir(), harness_tmpdir());
    expect_refused(configure(wch, job, NULL, NULL, &err), &err, "promises 536870912 bytes",
                   "a lying IDX header");

    /* A model or data past the worker's --max-memory-bytes (64 MiB), refused before allocating:
     * a 2048 x 2^19 kernel (4 GiB), and 2^20 synthetic examples of 64 values (272 MiB). */
    expect_refused(configure(wch,
                             "model: [{dense: {units: 524288}, input_shape: [2048]}]\nloss: mse\n"
                             "data: {batch_size: 8, train: {format: synthetic, examples: 100, "
                             "shape: [2048], classes: 2}}\n",
                             NULL, NULL, &err),
                   &err, "layer 0 (dense): a buffer of 4294967296 bytes", "a 4 GiB kernel");
    ck_assert_int_eq(err.status, STATUS_RESOURCE_EXHAUSTED);
    expect_refused(configure(wch,
                             "model: [{dense: {units: 2}, input_shape: [64]}]\nloss: mse\n"
                             "data: {batch_size: 8, train: {format: synthetic, examples: 1048576, "
                             "shape: [64], classes: 2}}\n",
                             NULL, NULL, &err),
                   &err, "memory limit of 67108864 bytes", "272 MiB of data");

    /* A layer name that is not UTF-8 would name variables no peer can decode. */
    expect_refused(configure(wch, keras_job, "/jobs/m.json",
                             "{\"class_name\": \"Sequential\", \"config\": {\"layers\": ["
                             "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\x8d\xa1\", "
                             "\"units\": 1, \"batch_input_shape\": [null, 4]}}]}}",
                             &err),
                   &err, "the name 'd\\x8d\\xa1' may hold only", "a layer name not in UTF-8");

    ck_assert_int_eq(health_check(chief.listen, "", 5000, &err), HEALTH_SERVING);
    ck_assert_int_eq(health_check(worker.listen, "", 5000, &err), HEALTH_SERVING);
    ck_assert_int_eq(health_check(ps.listen, "", 5000, &err), HEALTH_SERVING);
    rpc_channel_free(cch);
    rpc_channel_free(wch);
    harness_stop(&chief);
    harness_stop(&worker);
    harness_stop(&ps);
}
END_TEST

/* The chief's --state-dir: a second chief on it is refused (the journal is locked), and so is a
 * journal damaged before its end or that is not one, each naming the file; the journal is left
 * as it was for the user to look at. */
START_TEST(chief_refuses_a_shared_or_damaged_state_dir)
{
    launch_proc_t first, second;
    char state[400], journal[400], log[600];
    char *args[] = {state, NULL};
    static const uint8_t damaged[] = {'T', 'S', 'J', 'R', 'N', 'L', '\r', '\n', 2, 0,
                                      0,   0,   1,   2,   3,   4,   'x',  'y',  2, 0,
                                      0,   0,   1,   2,   3,   4,   'x',  'y'};
    FILE *f;

    snprintf(state, sizeof(state), "--state-dir=%s/chief-state", harness_tmpdir());
    snprintf(journal, sizeof(journal), "%s/chief-state/journal", harness_tmpdir());
    harness_start(&first, "tessera-chief", "chief-state-first", state, NULL);
    ck_assert_int_eq(
        harness_try_start(&second, "tessera-chief", "chief-state-second", args, log, sizeof(log)),
        STATUS_REMOTE);
    ck_assert_msg(harness_file_contains(log, "in use by another process") &&
                      harness_file_contains(log, journal),
                  "no clear error in %s", log);
    harness_stop(&first);

    ck_assert_ptr_nonnull(f = fopen(journal, "wb"));
    ck_assert_uint_eq(fwrite(damaged, 1, sizeof(damaged), f), sizeof(damaged));
    fclose(f);
    ck_assert_int_eq(
        harness_try_start(&second, "tessera-chief", "chief-state-damaged", args, log, sizeof(log)),
        STATUS_REMOTE);
    ck_assert_msg(harness_file_contains(log, "the record at byte 8 is damaged") &&
                      harness_file_contains(log, journal),
                  "no clear error in %s", log);

    ck_assert_ptr_nonnull(f = fopen(journal, "w"));
    fputs("{\"jobs\": []}\n", f);
    fclose(f);
    ck_assert_int_eq(
        harness_try_start(&second, "tessera-chief", "chief-state-other", args, log, sizeof(log)),
        STATUS_REMOTE);
    ck_assert_msg(harness_file_contains(log, "is not a Tessera journal"), "no clear error in %s",
                  log);
    ck_assert_msg(harness_file_contains(journal, "{\"jobs\": []}"), "the journal was changed");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("daemons");
    TCase *tc = tcase_create("daemons");

    grpc_init();
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, daemons_report_serving_for_themselves_and_their_services);
    tcase_add_test(tc, daemons_metrics_pass_promtool);
    tcase_add_test(tc, worker_computes_on_the_cpus_it_may_use_or_as_told);
    tcase_add_test(tc, daemons_notify_ready_and_stopping_and_exit_zero_on_sigterm);
    tcase_add_test(tc, daemons_sigterm_during_a_long_transfer_still_exits_in_time);
    tcase_add_test(tc, daemons_refuse_a_taken_port_with_a_clear_error);
    tcase_add_test(tc, daemons_reject_bad_configuration_with_one_clear_line);
    tcase_add_test(tc, daemons_take_their_port_and_index_from_tf_config);
    tcase_add_test(tc, daemons_load_the_shipped_sample_configs);
    tcase_add_test(tc, rpc_64mib_tensor_round_trips_bit_exact);
    tcase_add_test(tc, rpc_message_over_the_limit_is_refused_and_the_daemon_keeps_serving);
    tcase_add_test(tc, rpc_garbage_and_unknown_methods_get_errors_and_the_daemon_keeps_serving);
    tcase_add_test(tc, rpc_many_concurrent_clients_get_their_own_answers);
    tcase_add_test(tc, rpc_unreachable_peer_fails_fast_with_unavailable);
    tcase_add_test(tc, chief_and_worker_refuse_hostile_jobs_and_keep_serving);
    tcase_add_test(tc, chief_refuses_a_shared_or_damaged_state_dir);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
