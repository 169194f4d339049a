/* Mutual TLS and authorization by role, with real daemons, certificates made by `tessera certs`
 * and an independent client (Debian's python3-grpcio, tests/integration/grpc_probe.py) and
 * OpenSSL's s_client: what is refused, how, and that a whole job trains the same over mTLS. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "check_run.h"
#include "harness.h"

static char pki[400], other[400];

static int tessera(char *const *args, char **out)
{
    char *argv[16] = {(char *)harness_program("tessera")};
    for (int i = 0; args[i] != NULL && i < 14; i++)
        argv[i + 1] = args[i];
    return harness_run(argv, NULL, NULL, 240000, out);
}

/* DIR/ca + one certificate per identity, made once for the whole program. */
static void make_pki(void)
{
    static const char *const ids[][2] = {
        {"ps", "0"}, {"worker", "0"}, {"worker", "1"}, {"chief", "0"}, {"client", "alice"}};
    char *out = NULL;

    if (pki[0] != '\0')
        return;
    snprintf(pki, sizeof(pki), "%s/pki", harness_tmpdir());
    snprintf(other, sizeof(other), "%s/other-pki", harness_tmpdir());
    ck_assert_int_eq(tessera((char *[]){"certs", "init", "--dir", pki, NULL}, &out), 0);
    free(out);
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        ck_assert_msg(
            tessera((char *[]){"certs", "issue", "--dir", pki, (char *)ids[i][0], (char *)ids[i][1],
                               "--host", "127.0.0.1", "--host", "localhost", NULL},
                    &out) == 0,
            "%s", out);
        free(out);
    }
    /* Another CA, and a client it vouches for. */
    ck_assert_int_eq(tessera((char *[]){"certs", "init", "--dir", other, NULL}, &out), 0);
    free(out);
    ck_assert_int_eq(
        tessera((char *[]){"certs", "issue", "--dir", other, "client", "mallory", NULL}, &out), 0);
    free(out);
}

/* "--tls-cert=PKI/ID.crt" and friends for identity id ("ps-0"), in static buffers. */
typedef struct tls_flags {
    char cert[600], key[600], ca[600];
} tls_flags_t;

static tls_flags_t tls_of(const char *dir, const char *id)
{
    tls_flags_t f;
    snprintf(f.cert, sizeof(f.cert), "--tls-cert=%s/%s.crt", dir, id);
    snprintf(f.key, sizeof(f.key), "--tls-key=%s/%s.key", dir, id);
    snprintf(f.ca, sizeof(f.ca), "--tls-ca=%s/ca.crt", dir);
    return f;
}

/* The probe's "CODE: details" for one call; cert_id NULL = no client certificate, ca_dir NULL
 * = plaintext. */
static char *probe(const char *target, const char *method, const char *ca_dir, const char *dir,
                   const char *cert_id)
{
    char ca[600], cert[600], key[600], *out = NULL;
    char *argv[12] = {"/usr/bin/python3", (char *)harness_source("tests/integration/grpc_probe.py"),
                      (char *)target, (char *)method};
    int a = 4, rc;

    if (ca_dir != NULL) {
        snprintf(ca, sizeof(ca), "%s/ca.crt", ca_dir);
        argv[a++] = "--ca";
        argv[a++] = ca;
    }
    if (cert_id != NULL) {
        snprintf(cert, sizeof(cert), "%s/%s.crt", dir, cert_id);
        snprintf(key, sizeof(key), "%s/%s.key", dir, cert_id);
        argv[a++] = "--cert";
        argv[a++] = cert;
        argv[a++] = "--key";
        argv[a++] = key;
    }
    rc = harness_run(argv, NULL, NULL, 30000, &out);
    ck_assert_msg(rc == 0, "grpc_probe.py exit %d: %s", rc, out);
    return out;
}

static void assert_probe(const char *target, const char *method, const char *ca_dir,
                         const char *dir, const char *cert_id, const char *expect)
{
    char *out = probe(target, method, ca_dir, dir, cert_id);
    ck_assert_msg(strncmp(out, expect, strlen(expect)) == 0,
                  "%s with %s via %s: expected \"%s...\", got: %s", method,
                  cert_id ? cert_id : "no certificate", ca_dir ? "TLS" : "plaintext", expect, out);
    free(out);
}

static bool python_grpc_present(void)
{
    char *argv[] = {"/usr/bin/python3", "-c", "import grpc", NULL}, *out = NULL;
    int rc = harness_run(argv, NULL, NULL, 30000, &out);
    free(out);
    return rc == 0;
}

/* What `openssl s_client` says offering only `version` with a client certificate; for TLS 1.2,
 * with a cipher suite both sides have, so that only the version can be what is refused. */
static char *s_client(const char *addr, const char *version, char *cert, char *key, char *ca)
{
    bool v12 = strcmp(version, "-tls1_2") == 0;
    char *argv[] = {"/usr/bin/openssl",
                    "s_client",
                    "-connect",
                    (char *)addr,
                    (char *)version,
                    "-cert",
                    cert,
                    "-key",
                    key,
                    "-CAfile",
                    ca,
                    "-alpn",
                    "h2",
                    v12 ? "-cipher" : NULL,
                    "ECDHE-ECDSA-AES128-GCM-SHA256",
                    NULL};
    char *out = NULL;

    harness_run(argv, NULL, "", 30000, &out);
    return out;
}

START_TEST(mtls_refuses_the_unauthenticated_and_the_wrong_roles)
{
    tls_flags_t ps, chief;
    char health[64], health_flag[80], *out = NULL;
    launch_proc_t p, c;

    make_pki();
    ps = tls_of(pki, "ps-0");
    chief = tls_of(pki, "chief-0");
    if (!python_grpc_present()) {
        fprintf(stderr, "python3-grpcio is missing: install it (apt-get install python3-grpcio)\n");
        ck_abort_msg("the independent client (Debian's python3-grpcio) is not installed");
    }
    snprintf(health, sizeof(health), "127.0.0.1:%d", harness_free_port());
    snprintf(health_flag, sizeof(health_flag), "--health-listen=%s", health);
    harness_start(&p, "tessera-ps", "sec-ps", ps.cert, ps.key, ps.ca, health_flag, NULL);
    harness_start(&c, "tessera-chief", "sec-chief", chief.cert, chief.key, chief.ca, NULL);

    /* The plaintext health port answers health checks, and nothing else. */
    assert_probe(health, "/grpc.health.v1.Health/Check", NULL, NULL, NULL, "OK: ");
    assert_probe(health, "/tessera.v1.ParameterServer/Push", NULL, NULL, NULL,
                 "UNAUTHENTICATED: /tessera.v1.ParameterServer/Push needs mutual TLS");
    /* The main port: no plaintext, no TLS without a certificate, no certificate of another CA. */
    assert_probe(p.listen, "/grpc.health.v1.Health/Check", NULL, NULL, NULL, "UNAVAILABLE: ");
    assert_probe(p.listen, "/grpc.health.v1.Health/Check", pki, NULL, NULL, "UNAVAILABLE: ");
    assert_probe(p.listen, "/grpc.health.v1.Health/Check", pki, other, "client-mallory",
                 "UNAVAILABLE: ");
    /* Roles: a client may read a PS's stats but not push; a worker may push (the call reaches
     * the handler, which finds the empty request wanting); a worker may not submit jobs, a
     * client may (the chief, started without workers, then turns the job down). */
    assert_probe(p.listen, "/tessera.v1.ParameterServer/Stats", pki, pki, "client-alice", "OK: ");
    assert_probe(p.listen, "/tessera.v1.ParameterServer/Push", pki, pki, "client-alice",
                 "PERMISSION_DENIED: spiffe://tessera/client/alice may not call "
                 "/tessera.v1.ParameterServer/Push (allowed: chief, worker)");
    assert_probe(p.listen, "/tessera.v1.ParameterServer/Push", pki, pki, "worker-0",
                 "INVALID_ARGUMENT: ");
    assert_probe(c.listen, "/tessera.v1.Coordinator/SubmitJob", pki, pki, "worker-0",
                 "PERMISSION_DENIED: spiffe://tessera/worker/0 may not call "
                 "/tessera.v1.Coordinator/SubmitJob (allowed: client)");
    assert_probe(c.listen, "/tessera.v1.Coordinator/SubmitJob", pki, pki, "client-alice",
                 "FAILED_PRECONDITION: this chief has no workers");
    assert_probe(c.listen, "/tessera.v1.Coordinator/ListJobs", pki, pki, "worker-0", "OK: ");

    /* /metrics counts the refusals: one denied Push, one over the health port, three failed
     * handshakes (plaintext, no certificate, another CA). */
    ck_assert_double_eq(
        harness_metric(&p, "tessera_ps_rpc_denied_total{method=\"/tessera.v1.ParameterServer/"
                           "Push\"}"),
        2);
    ck_assert_double_ge(harness_metric(&p, "tessera_ps_tls_handshake_failures_total"), 3);

    /* TLS 1.2 is refused (with a cipher suite both sides have, so only the version differs);
     * 1.3 with the same certificate is taken. */
    {
        char cert[600], key[600], ca[600];
        snprintf(cert, sizeof(cert), "%s/client-alice.crt", pki);
        snprintf(key, sizeof(key), "%s/client-alice.key", pki);
        snprintf(ca, sizeof(ca), "%s/ca.crt", pki);
        out = s_client(p.listen, "-tls1_2", cert, key, ca);
        ck_assert_msg(strstr(out, "Cipher is (NONE)") != NULL && strstr(out, "TLSv1.2,") == NULL,
                      "TLS 1.2 was not refused: %s", out);
        free(out);
        out = s_client(p.listen, "-tls1_3", cert, key, ca);
        ck_assert_msg(strstr(out, "New, TLSv1.3") != NULL, "TLS 1.3 was refused: %s", out);
        free(out);
    }
    harness_stop(&c);
    harness_stop(&p);
}
END_TEST

/* A request compressed with gzip (grpc-encoding) reaches the codec inflated by gRPC's server,
 * payload and all: the codec reads bodies as they arrive and never inflates one itself. */
START_TEST(a_gzip_compressed_request_arrives_whole)
{
    launch_proc_t p;
    char *argv[] = {"/usr/bin/python3",
                    (char *)harness_source("tests/integration/grpc_probe.py"),
                    NULL,
                    "/tessera.v1.Diagnostics/Echo",
                    "--gzip-payload",
                    "100000",
                    NULL},
         *out = NULL;
    int rc;

    if (!python_grpc_present())
        ck_abort_msg("the independent client (Debian's python3-grpcio) is not installed");
    harness_start(&p, "tessera-ps", "gzip-ps", NULL);
    argv[2] = p.listen;
    rc = harness_run(argv, NULL, NULL, 30000, &out);
    ck_assert_msg(rc == 0 && strncmp(out, "OK: ", 4) == 0, "grpc_probe.py exit %d: %s", rc, out);
    free(out);
    harness_stop(&p);
}
END_TEST

/* --metrics-tls: /metrics over HTTPS with the daemon's certificate, TLS 1.3 only. */
START_TEST(metrics_are_served_over_tls_1_3)
{
    tls_flags_t ps;
    char url[300], ca[600], *out = NULL;
    launch_proc_t p;

    make_pki();
    ps = tls_of(pki, "ps-0");
    harness_start(&p, "tessera-ps", "sec-metrics", ps.cert, ps.key, ps.ca, "--metrics-tls", NULL);
    snprintf(url, sizeof(url), "https://%s/metrics", p.metrics);
    snprintf(ca, sizeof(ca), "%s/ca.crt", pki);
    char *probe_py = (char *)harness_source("tests/integration/grpc_probe.py");
    char *v13[] = {"/usr/bin/python3", probe_py, "--https", url, "--ca", ca, NULL};
    char *v12[] = {"/usr/bin/python3", probe_py, "--https", url, "--ca", ca, "--tls12", NULL};
    ck_assert_int_eq(harness_run(v13, NULL, NULL, 30000, &out), 0);
    ck_assert_msg(strncmp(out, "OK: # HELP", 10) == 0, "%s", out);
    free(out);
    ck_assert_int_eq(harness_run(v12, NULL, NULL, 30000, &out), 0);
    ck_assert_msg(strncmp(out, "ERROR: ", 7) == 0, "TLS 1.2 was served: %s", out);
    free(out);
    /* and no plain HTTP */
    {
        char *headers = NULL;
        ck_assert_int_ne(harness_http_get(p.metrics, "/metrics", &headers, &out), 200);
        free(headers);
        free(out);
    }
    harness_stop(&p);
}
END_TEST

/* Starts program with args and expects it to refuse them at start-up with a message holding
 * `expect` and no PEM content. */
static void assert_refused(const char *program, char **args, const char *expect)
{
    char log[600];
    launch_proc_t p;
    int rc = harness_try_start(&p, program, "sec-refused", args, log, sizeof(log));
    char *text = NULL;
    size_t len = 0;
    FILE *f;

    ck_assert_msg(rc != 0, "%s started with bad TLS settings (expected: %s)", program, expect);
    ck_assert_ptr_nonnull(f = fopen(log, "r"));
    ck_assert(getdelim(&text, &len, '\0', f) >= 0);
    fclose(f);
    ck_assert_msg(strstr(text, expect) != NULL, "expected \"%s\" in: %s", expect, text);
    ck_assert_msg(strstr(text, "BEGIN") == NULL && strstr(text, "MII") == NULL,
                  "the error echoes file contents: %s", text);
    free(text);
}

START_TEST(bad_tls_settings_are_refused_by_name)
{
    tls_flags_t ps, foreign;
    char wrong_key[600], not_pem[600], path[500];

    make_pki();
    ps = tls_of(pki, "ps-0");
    foreign = tls_of(other, "client-mallory");
    assert_refused("tessera-ps", (char *[]){ps.cert, ps.ca, NULL}, "missing --tls-key");
    snprintf(wrong_key, sizeof(wrong_key), "--tls-key=%s/worker-0.key", pki);
    assert_refused("tessera-ps", (char *[]){ps.cert, wrong_key, ps.ca, NULL},
                   "is not the key of the certificate");
    /* A certificate of the other CA with this cluster's CA. */
    assert_refused("tessera-worker", (char *[]){foreign.cert, foreign.key, ps.ca, NULL},
                   "does not verify against --tls-ca");
    snprintf(path, sizeof(path), "%s/not-a-cert", harness_tmpdir());
    FILE *f = fopen(path, "w");
    fputs("root:x:0:0:secret-looking-content\n", f);
    fclose(f);
    snprintf(not_pem, sizeof(not_pem), "--tls-ca=%s", path);
    assert_refused("tessera-chief", (char *[]){ps.cert, ps.key, not_pem, NULL},
                   "is not a PEM file");
    assert_refused("tessera-ps", (char *[]){"--health-listen=127.0.0.1:0", NULL},
                   "--health-listen 127.0.0.1:0 needs mutual TLS");
}
END_TEST

/* Trains the MLP for an epoch with `strategy` on a chief and its tasks (parameter_server: one
 * PS and one worker; multi_worker_mirrored: two workers), all over mTLS or all over plaintext,
 * submitted and watched with a client certificate; returns the result line. */
static char *train_job(bool tls, const char *name, const char *strategy)
{
    bool ps_job = strcmp(strategy, "parameter_server") == 0;
    tls_flags_t ps = tls_of(pki, "ps-0"), ch = tls_of(pki, "chief-0"),
                cl = tls_of(pki, "client-alice");
    tls_flags_t w[2] = {tls_of(pki, "worker-0"), tls_of(pki, "worker-1")};
    char job[600], ps_flag[200], worker_flag[400], chief_flag[200], pname[3][80];
    char *out = NULL, *res;
    launch_proc_t p, wk[2], c;
    int rc, n_workers = ps_job ? 1 : 2;

    snprintf(job, sizeof(job), "%s/%s.yaml", harness_tmpdir(), name);
    {
        FILE *f = fopen(job, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f,
                "name: %s\nstrategy: %s\n"
                "model:\n  - {dense: {units: 64, activation: relu}, input_shape: [784]}\n"
                "  - {dense: {units: 10}}\n"
                "loss: {sparse_categorical_crossentropy: {from_logits: true}}\n"
                "metrics: [accuracy]\noptimizer: {adam: {learning_rate: 0.001}}\n"
                "data:\n  train: {format: idx, images: "
                "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz, labels: "
                "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz}\n"
                "  test: {format: idx, images: "
                "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz, labels: "
                "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz}\n"
                "  scale: 0.00392156862745098\n  batch_size: 64\n  seed: 1\n"
                "train: {epochs: 1, steps_per_execution: 20}\n",
                name, strategy);
        fclose(f);
    }
    for (int i = 0; i < 3; i++)
        snprintf(pname[i], sizeof(pname[i]), "%s-%s", name, i == 0 ? "ps" : i == 1 ? "w0" : "w1");
    if (ps_job && tls)
        harness_start(&p, "tessera-ps", pname[0], ps.cert, ps.key, ps.ca, NULL);
    else if (ps_job)
        harness_start(&p, "tessera-ps", pname[0], NULL);
    for (int i = 0; i < n_workers; i++) {
        char index[32];
        snprintf(index, sizeof(index), "--task-index=%d", i);
        if (tls)
            harness_start(&wk[i], "tessera-worker", pname[1 + i], index, w[i].cert, w[i].key,
                          w[i].ca, NULL);
        else
            harness_start(&wk[i], "tessera-worker", pname[1 + i], index, NULL);
    }
    if (ps_job)
        snprintf(ps_flag, sizeof(ps_flag), "--ps=%s", p.listen);
    else
        snprintf(ps_flag, sizeof(ps_flag), "--log-level=info");
    snprintf(worker_flag, sizeof(worker_flag), "--worker=%s%s%s", wk[0].listen,
             n_workers > 1 ? "," : "", n_workers > 1 ? wk[1].listen : "");
    if (tls)
        harness_start(&c, "tessera-chief", "sec-train-chief", ps_flag, worker_flag, ch.cert, ch.key,
                      ch.ca, NULL);
    else
        harness_start(&c, "tessera-chief", "plain-train-chief", ps_flag, worker_flag, NULL);
    snprintf(chief_flag, sizeof(chief_flag), "--chief=%s", c.listen);
    if (tls) {
        /* Without a certificate the CLI gets nowhere, and says what to give. */
        rc = tessera((char *[]){"list", chief_flag, NULL}, &out);
        ck_assert_msg(rc != 0 && strstr(out, "give --tls-cert, --tls-key and --tls-ca"),
                      "exit %d: %s", rc, out);
        free(out);
        rc = tessera((char *[]){"submit", job, chief_flag, "--watch", cl.cert, cl.key, cl.ca, NULL},
                     &out);
    } else {
        rc = tessera((char *[]){"submit", job, chief_flag, "--watch", NULL}, &out);
    }
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    res = harness_result(out);
    free(out);
    harness_stop(&c);
    for (int i = n_workers - 1; i >= 0; i--)
        harness_stop(&wk[i]);
    if (ps_job)
        harness_stop(&p);
    return res;
}

/* The same numbers over mTLS as over plaintext: the parameter-server job (one worker:
 * deterministic), and multi_worker_mirrored, whose ring all-reduce runs in TLS 1.3 too. */
START_TEST(jobs_over_mtls_end_at_the_plaintext_numbers)
{
    static const char *const strategies[] = {"parameter_server", "multi_worker_mirrored"};

    make_pki();
    for (int i = 0; i < 2; i++) {
        char secure_name[64], plain_name[64];
        snprintf(secure_name, sizeof(secure_name), "sec-%d", i);
        snprintf(plain_name, sizeof(plain_name), "plain-%d", i);
        char *secure = train_job(true, secure_name, strategies[i]);
        char *plain = train_job(false, plain_name, strategies[i]);
        ck_assert_msg(strcmp(secure, plain) == 0, "%s over mTLS: %s\nplaintext: %s", strategies[i],
                      secure, plain);
        fprintf(stderr, "%s, mTLS and plaintext: %s\n", strategies[i], secure);
        free(secure);
        free(plain);
    }
}
END_TEST

/* ---- confinement ---------------------------------------------------------------------------- */

/* A multi_worker_mirrored MLP job in dir/jobs/NAME.yaml whose training images are `images`, with
 * `extra` lines appended; returns its path. */
static const char *confined_job(const char *dir, const char *name, const char *images,
                                const char *extra)
{
    static char path[600];
    FILE *f;

    snprintf(path, sizeof(path), "%s/jobs/%s.yaml", dir, name);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fprintf(f,
            "name: %s\nstrategy: multi_worker_mirrored\n"
            "model:\n  - {dense: {units: 10}, input_shape: [784]}\n"
            "loss: {sparse_categorical_crossentropy: {from_logits: true}}\n"
            "optimizer: sgd\n"
            "data:\n  train: {format: idx, images: %s, labels: "
            "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz}\n"
            "  batch_size: 64\n"
            "train: {steps: 5}\n%s",
            name, images, extra ? extra : "");
    fclose(f);
    return path;
}

/* Submits and watches; the output must hold `expect` and nothing of /etc/shadow. */
static void assert_job_refused(const char *chief_flag, const char *job, const char *expect)
{
    char *out = NULL;
    int rc = tessera((char *[]){"submit", (char *)job, (char *)chief_flag, "--watch", NULL}, &out);

    ck_assert_msg(rc != 0 && strstr(out, expect) != NULL, "%s: exit %d, expected \"%s\" in: %s",
                  job, rc, expect, out);
    ck_assert_msg(strstr(out, "root:") == NULL, "the error shows /etc/shadow: %s", out);
    free(out);
}

START_TEST(daemons_touch_only_files_under_their_data_roots)
{
    char dir[500], root[600], ckpt_root[600], link[700], sub[700], roots[2][700], chief_root[700],
        worker_flag[200], chief_flag[200], images[800], extra[900], *out = NULL;
    launch_proc_t w, c;

    snprintf(dir, sizeof(dir), "%s/confine", harness_tmpdir());
    snprintf(root, sizeof(root), "%s/root", dir);
    snprintf(ckpt_root, sizeof(ckpt_root), "%s/checkpoints", dir);
    snprintf(sub, sizeof(sub), "%s/jobs", dir);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    ck_assert_int_eq(mkdir(root, 0755), 0);
    ck_assert_int_eq(mkdir(ckpt_root, 0755), 0);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    /* a link inside the root that leads out of it */
    snprintf(link, sizeof(link), "%s/escape", root);
    ck_assert_int_eq(symlink("/etc", link), 0);
    snprintf(roots[0], sizeof(roots[0]), "--data-root=%s", root);
    snprintf(roots[1], sizeof(roots[1]), "--data-root=/usr/share/datasets");
    snprintf(chief_root, sizeof(chief_root), "--data-root=%s", ckpt_root);
    harness_start(&w, "tessera-worker", "confine-w", roots[0], roots[1], NULL);
    snprintf(worker_flag, sizeof(worker_flag), "--worker=%s", w.listen);
    harness_start(&c, "tessera-chief", "confine-chief", worker_flag, chief_root, NULL);
    snprintf(chief_flag, sizeof(chief_flag), "--chief=%s", c.listen);

    /* the worker reads data only under its roots: not /etc/shadow, not ../ out of the job's
     * directory, not through a link that leads out */
    assert_job_refused(chief_flag, confined_job(dir, "shadow", "/etc/shadow", NULL),
                       "data.train file /etc/shadow is outside the directories tessera-worker "
                       "may use");
    snprintf(images, sizeof(images), "../../x");
    assert_job_refused(chief_flag, confined_job(dir, "dotdot", images, NULL),
                       "is outside the directories tessera-worker may use");
    snprintf(images, sizeof(images), "%s/escape/shadow", root);
    assert_job_refused(chief_flag, confined_job(dir, "link", images, NULL),
                       "(it resolves to /etc/shadow)");
    /* the chief writes checkpoints only under its root */
    snprintf(extra, sizeof(extra), "checkpoint: {dir: %s/ckpt, every_steps: 2}\n", root);
    assert_job_refused(chief_flag,
                       confined_job(dir, "ckpt",
                                    "/usr/share/datasets/fashion-mnist/"
                                    "train-images-idx3-ubyte.gz",
                                    extra),
                       "checkpoint.dir");
    /* a Keras model file that is not JSON: no byte of it in the error */
    {
        char path[700];
        FILE *f;
        int rc;
        snprintf(path, sizeof(path), "%s/jobs/keras.yaml", dir);
        ck_assert_ptr_nonnull(f = fopen(path, "w"));
        fprintf(f, "name: keras\nstrategy: multi_worker_mirrored\n"
                   "model: {keras_json: /etc/shadow}\nloss: mse\noptimizer: sgd\n"
                   "data: {train: {format: idx, images: /a, labels: /b}, batch_size: 4}\n");
        fclose(f);
        rc = tessera((char *[]){"submit", path, chief_flag, NULL}, &out);
        ck_assert_msg(rc == 2 && strstr(out, "invalid JSON") != NULL &&
                          strstr(out, "root:") == NULL,
                      "exit %d: %s", rc, out);
        free(out);
    }
    /* and what lies under the roots trains */
    {
        int rc = tessera((char *[]){"submit",
                                    (char *)confined_job(dir, "inside",
                                                         "/usr/share/datasets/fashion-mnist/"
                                                         "train-images-idx3-ubyte.gz",
                                                         NULL),
                                    chief_flag, "--watch", NULL},
                         &out);
        ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
        free(out);
    }
    harness_stop(&c);
    harness_stop(&w);
}
END_TEST

/* ---- limits ---------------------------------------------------------------------------------- */

static char *submit_id(rpc_channel_t *ch, const char *job, status_t *ret_rc, rpc_error_t *err)
{
    Tessera__V1__SubmitJobRequest req = TESSERA__V1__SUBMIT_JOB_REQUEST__INIT;
    Tessera__V1__SubmitJobResponse *resp = NULL;
    char *text = NULL, *id = NULL;
    size_t len = 0;
    FILE *f = fopen(job, "r");

    ck_assert_ptr_nonnull(f);
    ck_assert(getdelim(&text, &len, '\0', f) > 0);
    fclose(f);
    req.job_spec = text;
    req.job_path = (char *)job;
    *ret_rc = rpc_coord_submit_job(ch, &req, NULL, &resp, NULL, err);
    if (*ret_rc == STATUS_OK) {
        id = strdup(resp->job->id);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    free(text);
    return id;
}

/* Waits up to a minute until job `id` leaves the queue (a busy machine may take a while). */
static void wait_started(rpc_channel_t *ch, const char *id)
{
    Tessera__V1__GetJobRequest req = TESSERA__V1__GET_JOB_REQUEST__INIT;
    Tessera__V1__JobState st = TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED;
    rpc_error_t err;

    req.id = (char *)id;
    for (int tries = 0; st == TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED && tries < 600; tries++) {
        Tessera__V1__GetJobResponse *resp = NULL;
        ck_assert_msg(rpc_coord_get_job(ch, &req, NULL, &resp, NULL, &err) == STATUS_OK, "%s",
                      err.message);
        st = resp->job->state;
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        if (st == TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED)
            nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    ck_assert_int_ne(st, TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED);
}

/* Each limit on what a client controls answers RESOURCE_EXHAUSTED naming the limit. */
START_TEST(limits_answer_resource_exhausted_naming_the_limit)
{
    char dir[500], sub[600], worker_flag[200], *id[3];
    const char *job;
    launch_proc_t w, c;
    rpc_channel_t *ch;
    rpc_error_t err;
    status_t rc;

    snprintf(dir, sizeof(dir), "%s/limits", harness_tmpdir());
    snprintf(sub, sizeof(sub), "%s/jobs", dir);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    harness_start(&w, "tessera-worker", "limits-w", NULL);
    snprintf(worker_flag, sizeof(worker_flag), "--worker=%s", w.listen);
    harness_start(&c, "tessera-chief", "limits-chief", worker_flag, "--max-queued-jobs=1",
                  "--max-finished-jobs=1", "--max-watch-streams=1", "--max-calls-per-peer=2", NULL);
    ch = harness_channel(&c);
    job = confined_job(dir, "long", "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                       NULL);
    {
        /* a long job: replace its 5 steps by many */
        char *text = NULL;
        size_t len = 0;
        FILE *f = fopen(job, "r");
        ck_assert(getdelim(&text, &len, '\0', f) > 0);
        fclose(f);
        char *at = strstr(text, "train: {steps: 5}");
        ck_assert_ptr_nonnull(at);
        ck_assert_ptr_nonnull(f = fopen(job, "w"));
        fprintf(f, "%.*strain: {steps: 10000000}\n", (int)(at - text), text);
        fclose(f);
        free(text);
    }
    /* one running, one queued, the third refused */
    for (int i = 0; i < 2; i++) {
        id[i] = submit_id(ch, job, &rc, &err);
        ck_assert_msg(rc == STATUS_OK, "%s", err.message);
        if (i == 0)
            wait_started(ch, id[0]);
    }
    id[2] = submit_id(ch, job, &rc, &err);
    ck_assert_msg(rc == STATUS_RESOURCE_EXHAUSTED && strstr(err.message, "--max-queued-jobs 1"),
                  "%d: %s", rc, err.message);
    ck_assert_ptr_null(id[2]);

    /* one WatchJob stream at a time; it also holds one of the two calls this host may have in
     * flight, so that with a second stream open nothing else gets through */
    {
        Tessera__V1__WatchJobRequest wreq = TESSERA__V1__WATCH_JOB_REQUEST__INIT;
        Tessera__V1__WatchJobUpdate *u = NULL;
        rpc_stream_t *s1 = NULL, *s2 = NULL;
        wreq.id = id[0];
        ck_assert_int_eq(rpc_coord_watch_job_open(ch, &wreq, 0, &s1, &err), STATUS_OK);
        ck_assert_msg(rpc_coord_watch_job_next(s1, &u, NULL, 10000, &err) == STATUS_OK, "%s",
                      err.message);
        protobuf_c_message_free_unpacked(&u->base, NULL);
        ck_assert_int_eq(rpc_coord_watch_job_open(ch, &wreq, 0, &s2, &err), STATUS_OK);
        rc = rpc_coord_watch_job_next(s2, &u, NULL, 10000, &err);
        ck_assert_msg(rc == STATUS_RESOURCE_EXHAUSTED &&
                          strstr(err.message, "--max-watch-streams 1") != NULL,
                      "%d: %s", rc, err.message);
        rpc_stream_free(s2);
        /* a health Watch stream is this host's second call in flight: a third is refused */
        {
            Grpc__Health__V1__HealthCheckRequest hreq =
                GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
            Grpc__Health__V1__HealthCheckResponse *h = NULL;
            Tessera__V1__GetJobRequest greq = TESSERA__V1__GET_JOB_REQUEST__INIT;
            Tessera__V1__GetJobResponse *g = NULL;
            rpc_stream_t *hs = NULL;
            hreq.service = "";
            ck_assert_int_eq(rpc_health_watch_open(ch, &hreq, 0, &hs, &err), STATUS_OK);
            ck_assert_msg(rpc_health_watch_next(hs, &h, NULL, 10000, &err) == STATUS_OK, "%s",
                          err.message);
            protobuf_c_message_free_unpacked(&h->base, NULL);
            greq.id = id[0];
            rc = rpc_coord_get_job(ch, &greq, NULL, &g, NULL, &err);
            ck_assert_msg(rc == STATUS_RESOURCE_EXHAUSTED &&
                              strstr(err.message, "--max-calls-per-peer 2") != NULL,
                          "%d: %s", rc, err.message);
            rpc_stream_cancel(hs);
            rpc_stream_free(hs);
        }
        /* requests bigger than a method takes (the health stream's slot is free again) */
        {
            static char big[100000];
            memset(big, 'x', sizeof(big));
            /* the cancelled stream's call may take a moment to end on the server */
            for (int tries = 0; tries < 50; tries++) {
                rc = rpc_unary_raw(ch, "/tessera.v1.Coordinator/GetJob", big, sizeof(big), 10000,
                                   &err);
                if (strstr(err.message, "--max-calls-per-peer") == NULL)
                    break;
                usleep(20000);
            }
            ck_assert_msg(rc == STATUS_RESOURCE_EXHAUSTED &&
                              strstr(err.message, "more than the 65536 this method takes"),
                          "%d: %s", rc, err.message);
        }
        rpc_stream_cancel(s1);
        rpc_stream_free(s1);
    }
    /* both jobs cancelled: one ended job is kept, the older forgotten */
    for (int i = 1; i >= 0; i--) {
        Tessera__V1__CancelJobRequest creq = TESSERA__V1__CANCEL_JOB_REQUEST__INIT;
        Tessera__V1__CancelJobResponse *cresp = NULL;
        creq.id = id[i];
        ck_assert_msg(rpc_coord_cancel_job(ch, &creq, NULL, &cresp, NULL, &err) == STATUS_OK, "%s",
                      err.message);
        protobuf_c_message_free_unpacked(&cresp->base, NULL);
    }
    for (int tries = 0;; tries++) {
        Tessera__V1__ListJobsRequest lreq = TESSERA__V1__LIST_JOBS_REQUEST__INIT;
        Tessera__V1__ListJobsResponse *lresp = NULL;
        ck_assert_int_eq(rpc_coord_list_jobs(ch, &lreq, NULL, &lresp, NULL, &err), STATUS_OK);
        size_t n = lresp->n_jobs;
        protobuf_c_message_free_unpacked(&lresp->base, NULL);
        if (n == 1)
            break;
        ck_assert_msg(tries < 100, "%zu jobs listed, not 1 (--max-finished-jobs 1)", n);
        usleep(100000);
    }
    free(id[0]);
    free(id[1]);
    rpc_channel_free(ch);
    harness_stop(&c);
    harness_stop(&w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("security");
    TCase *tc = tcase_create("security");

    grpc_init();
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, mtls_refuses_the_unauthenticated_and_the_wrong_roles);
    tcase_add_test(tc, a_gzip_compressed_request_arrives_whole);
    tcase_add_test(tc, metrics_are_served_over_tls_1_3);
    tcase_add_test(tc, bad_tls_settings_are_refused_by_name);
    tcase_add_test(tc, jobs_over_mtls_end_at_the_plaintext_numbers);
    tcase_add_test(tc, daemons_touch_only_files_under_their_data_roots);
    tcase_add_test(tc, limits_answer_resource_exhausted_naming_the_limit);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
