/* Fuzz target: RPC requests, decoded by the project's codec as a server decodes them
 * (rpc_decode) and handed to what the server does with them.
 *
 * Input: [1 selector byte][request bytes]. The selector picks the method, selector %
 * RPC_METHOD_COUNT_ in the method table (common/rpc/methods.h), and how the bytes arrive:
 * selector / RPC_METHOD_COUNT_ = 0 as one slice, k > 0 in slices of 2^(k-1) bytes (gRPC hands
 * a message over in slices; the codec walks across them).
 *
 * - Parameter server, health Check, diagnostics Echo and Sink: the real handlers (ps-server/
 *   service.c over a real store) on an offline daemon (daemon_offline_new, rpc_offline_call),
 *   with small limits: 1 MiB messages, 8 MiB of variables, 5 jobs of at most 1024 shards. It
 *   starts with the jobs of the seed corpus (create-* of rpc_seeds.c), so that pulls and pushes
 *   find variables at once; a new ps_opts_t field needs a value in ps_start, or creating them
 *   fails loudly. The store lives across inputs, so that an input can use what an earlier one
 *   created; it starts afresh every RESET_EVERY inputs (TESSERA_FUZZ_RPC_RESET=N; 1 runs every
 *   input on a fresh store, to reproduce a crash from one input).
 * - Worker ConfigureJob and Cancel: the real handlers (worker/service.c) on an offline worker
 *   whose jobs may take 64 MiB (--max-memory-bytes): ConfigureJob parses the job with its
 *   files, loads the data, builds the model and describes its variables, or (with a placement)
 *   connects the job to its parameter servers (channels only: nothing is sent offline).
 * - Chief SubmitJob, GetJob, ListJobs, CancelJob and GetCluster: the real handlers
 *   (chief/coordinator.c, cluster_service.c) on an offline chief whose parameter server and
 *   worker are unix sockets that do not exist, so that the jobs it accepts fail at once on its
 *   runner thread.
 * - Nothing reads the disk while a worker or chief handler runs (fuzz_block_files: the job
 *   parser's files and the worker's IDX data fail with ENOENT); jobs use synthetic data.
 * - RunClosure (its answer is deferred to the executor, which pulls from parameter servers),
 *   the streams, Checkpoint and Export (not served yet): decoded only.
 *
 * Oracles: a reply must decode on the client (rpc_decode) and its values lie inside its payload
 * and be finite; a failure must carry an error detail that decodes, holds UTF-8 strings only and
 * gives the client the server's status (rpc_error_fill); no handler fails with INTERNAL.
 * Every RESET_EVERY inputs all three daemons start afresh. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "../../chief/chief.h"
#include "../../ps-server/service.h"
#include "../../worker/service.h"
#include "daemon/daemon.h"
#include "base/bf16.h"
#include "fuzz_common.h"
#include "rpc/internal.h"
#include "rpc/offline.h"
#include "rpc_seeds.h"
#include "tessera/v1/common.pb-c.h"

#define RESET_EVERY      1000
#define MAX_MESSAGE      (1 << 20)
#define MAX_MEMORY_BYTES (8 << 20)
#define MAX_SLICE_SHIFT  10
#define WORKER_MEMORY    (64 << 20)

static ps_opts_t ps_opts;
static worker_opts_t worker_opts;
static chief_opts_t chief_opts;
static char *chief_ps[] = {"unix:/nonexistent/tessera-fuzz-ps"},
            *chief_workers[] = {"unix:/nonexistent/tessera-fuzz-worker"};
static daemon_t *ps, *worker, *chief;
static rpc_seed_t *seeds;
static size_t n_seeds;
static long reset_every = RESET_EVERY, runs;

static void ps_start(void)
{
    status_msg_t err = {0};

    ps_opts = (ps_opts_t){
        .common = {.task_index = 0, .threads = 1, .max_message_bytes = MAX_MESSAGE},
        .max_memory_bytes = MAX_MEMORY_BYTES,
        .max_jobs = 5,
        .max_variables_per_job = 64,
        .max_shards_per_job = 1024,
    };
    if (daemon_offline_new(&ps_daemon_spec, &ps_opts, &ps, &err) != STATUS_OK)
        fuzz_fail("rpc", "cannot start the offline parameter server: %s", err.text);
    /* The jobs of the seed corpus exist from the start. */
    for (size_t i = 0; i < n_seeds; i++) {
        if (seeds[i].id != RPC_PS_CREATE_VARIABLES)
            continue;
        grpc_slice s = grpc_slice_from_static_buffer(seeds[i].bytes, seeds[i].len);
        grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
        rpc_offline_result_t r;
        if (rpc_offline_call(daemon_rpc(ps), RPC_PS_CREATE_VARIABLES, bb, &r) != STATUS_OK)
            fuzz_fail("rpc", "the seed %s fails: %s", seeds[i].name, r.text);
        rpc_offline_result_done(&r);
        grpc_byte_buffer_destroy(bb);
    }
}

static void others_start(void)
{
    status_msg_t err = {0};

    worker_opts = (worker_opts_t){
        .common = {.task_index = 0, .threads = 1, .max_message_bytes = MAX_MESSAGE},
        .max_memory_bytes = WORKER_MEMORY,
    };
    if (daemon_offline_new(&worker_daemon_spec, &worker_opts, &worker, &err) != STATUS_OK)
        fuzz_fail("rpc", "cannot start the offline worker: %s", err.text);
    chief_opts = (chief_opts_t){
        .common = {.task_index = 0, .threads = 1, .max_message_bytes = MAX_MESSAGE},
        .ps = {.items = chief_ps, .n = 1},
        .worker = {.items = chief_workers, .n = 1},
        .health_timeout_ms = 100,
    };
    if (daemon_offline_new(&chief_daemon_spec, &chief_opts, &chief, &err) != STATUS_OK)
        fuzz_fail("rpc", "cannot start the offline chief: %s", err.text);
}

/* At exit, before LeakSanitizer's check (registered earlier, so it runs later): the chief's runner
 * and the worker's executor stop, with nothing of theirs half-done in another thread's hands. */
static void daemons_free(void)
{
    daemon_offline_free(chief);
    daemon_offline_free(worker);
    daemon_offline_free(ps);
    chief = worker = ps = NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *reset = getenv("TESSERA_FUZZ_RPC_RESET");

    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    grpc_init();
    if (reset != NULL && atol(reset) > 0)
        reset_every = atol(reset);
    n_seeds = rpc_seeds_build(&seeds);
    ps_start();
    others_start();
    atexit(daemons_free);
    return 0;
}

/* The request as gRPC would hand it over: in slices of slice_len bytes (0: one slice), each an
 * exact-size allocation. */
static grpc_byte_buffer *make_buffer(const uint8_t *data, size_t len, size_t slice_len)
{
    grpc_slice slices[64], *s = slices;
    size_t n = slice_len == 0 || len == 0 ? 1 : (len + slice_len - 1) / slice_len;
    grpc_byte_buffer *bb;

    if (slice_len == 0)
        slice_len = len;
    if (n > sizeof(slices) / sizeof(slices[0]) && (s = malloc(n * sizeof(*s))) == NULL)
        abort();
    for (size_t i = 0; i < n; i++) {
        size_t off = i * slice_len, take = len - off < slice_len ? len - off : slice_len;
        s[i] = grpc_slice_new(fuzz_copy(data + off, take), take, free);
    }
    bb = grpc_raw_byte_buffer_create(s, n);
    for (size_t i = 0; i < n; i++)
        grpc_slice_unref(s[i]);
    if (s != slices)
        free(s);
    return bb;
}

/* ---- oracles ------------------------------------------------------------------------------ */

static void check_values(const rpc_method_t *m, Tessera__V1__PulledValue *const *values, size_t n,
                         const rpc_payload_t *p)
{
    for (size_t i = 0; i < n; i++) {
        const Tessera__V1__TensorRef *t = values[i]->value;
        uint64_t count = 1, esize, sent;
        if (t == NULL)
            fuzz_fail("rpc", "%s: reply value %zu has no tensor", m->path, i);
        if (t->dtype != TESSERA__V1__DTYPE__DTYPE_FLOAT32 &&
            t->dtype != TESSERA__V1__DTYPE__DTYPE_BFLOAT16)
            fuzz_fail("rpc", "%s: reply value %zu has dtype %d", m->path, i, (int)t->dtype);
        esize = t->dtype == TESSERA__V1__DTYPE__DTYPE_BFLOAT16 ? 2 : 4;
        for (size_t d = 0; d < t->n_shape; d++)
            count *= (uint64_t)t->shape[d];
        /* the whole tensor, or a chunk of it (a push-pull of a chunk's rows) */
        if (t->byte_length % esize != 0 || t->chunk_offset % esize != 0 ||
            t->byte_length > count * esize || t->chunk_offset > count * esize - t->byte_length ||
            t->payload_offset > p->len || t->byte_length > p->len - t->payload_offset ||
            t->payload_offset % esize != 0)
            fuzz_fail("rpc",
                      "%s: reply value %zu: %llu bytes at %llu (chunk at %llu) for %llu "
                      "elements of %llu bytes, payload of %zu",
                      m->path, i, (unsigned long long)t->byte_length,
                      (unsigned long long)t->payload_offset, (unsigned long long)t->chunk_offset,
                      (unsigned long long)count, (unsigned long long)esize, p->len);
        sent = t->byte_length / esize;
        for (uint64_t k = 0; k < sent; k++) {
            const uint8_t *at = (const uint8_t *)p->data + t->payload_offset + esize * k;
            float v;
            if (esize == 2) {
                uint16_t h;
                memcpy(&h, at, sizeof(h));
                v = bf16_to_float(h);
            } else {
                memcpy(&v, at, sizeof(v));
            }
            if (!isfinite(v))
                fuzz_fail("rpc", "%s: reply value %zu holds %g at element %llu", m->path, i, v,
                          (unsigned long long)k);
        }
    }
}

/* The reply as the client reads it. */
static void check_reply(const rpc_method_t *m, grpc_byte_buffer *reply)
{
    ProtobufCMessage *msg = NULL;
    rpc_payload_t p = {0};
    status_msg_t why = {0};

    if (reply == NULL)
        fuzz_fail("rpc", "%s: OK without a reply", m->path);
    if (rpc_decode(m->response, reply, NULL, 0, false, &msg, &p, &why) != STATUS_OK)
        fuzz_fail("rpc", "%s: the client cannot decode the reply: %s", m->path, why.text);
    if (m->id == RPC_PS_PULL) {
        const Tessera__V1__PullResponse *r = (const void *)msg;
        check_values(m, r->values, r->n_values, &p);
    } else if (m->id == RPC_PS_PUSH || m->id == RPC_PS_PUSH_PULL) {
        const Tessera__V1__PushResponse *r = (const void *)msg;
        check_values(m, r->values, r->n_values, &p);
    }
    protobuf_c_message_free_unpacked(msg, NULL);
    rpc_payload_done(&p);
}

static void check_string(const rpc_method_t *m, const char *field, const char *s)
{
    if (s != NULL && !utf8_valid_text(s, strlen(s)))
        fuzz_fail("rpc", "%s: the error detail's %s is not UTF-8: \"%s\"", m->path, field, s);
}

/* The failure as the client reads it. */
static void check_failure(const rpc_method_t *m, const rpc_offline_result_t *r)
{
    Tessera__V1__ErrorDetail *d;
    grpc_metadata md;
    grpc_metadata_array trailing = {.count = 1, .capacity = 1, .metadata = &md};
    rpc_error_t err;

    if (r->status == STATUS_INTERNAL)
        fuzz_fail("rpc", "%s failed with INTERNAL: %s", m->path, r->text);
    if (r->text[0] == '\0')
        fuzz_fail("rpc", "%s failed with %s but said nothing", m->path, status_name(r->status));
    if (r->detail == NULL)
        fuzz_fail("rpc", "%s: a failure without an error detail", m->path);
    d = tessera__v1__error_detail__unpack(NULL, r->detail_len, r->detail);
    if (d == NULL)
        fuzz_fail("rpc", "%s: the error detail does not decode", m->path);
    check_string(m, "status", d->status);
    check_string(m, "reason", d->reason);
    check_string(m, "culprit", d->culprit);
    if (d->task != NULL)
        check_string(m, "task.address", d->task->address);
    tessera__v1__error_detail__free_unpacked(d, NULL);

    md.key = grpc_slice_from_static_string(RPC_ERROR_DETAIL_KEY);
    md.value = grpc_slice_from_static_buffer(r->detail, r->detail_len);
    rpc_error_fill(&err, (grpc_status_code)status_to_grpc(r->status),
                   grpc_slice_from_static_string(r->text), NULL, &trailing, "offline", m->path);
    if (err.status != r->status)
        fuzz_fail("rpc", "%s: the server failed with %s, the client reads %s", m->path,
                  status_name(r->status), status_name(err.status));
}

/* ---- methods ------------------------------------------------------------------------------ */

static void call_served(daemon_t *d, const rpc_method_t *m, grpc_byte_buffer *bb)
{
    rpc_offline_result_t r;

    fuzz_block_files(d != ps);
    rpc_offline_call(daemon_rpc(d), m->id, bb, &r);
    fuzz_block_files(false);
    if (fuzz_verbose())
        fprintf(stderr, "fuzz: %s: %s%s%s\n", m->path, status_name(r.status),
                r.status != STATUS_OK ? ": " : "", r.text);
    if (r.status == STATUS_OK)
        check_reply(m, r.reply);
    else
        check_failure(m, &r);
    rpc_offline_result_done(&r);
}

static void decode_only(const rpc_method_t *m, grpc_byte_buffer *bb)
{
    ProtobufCMessage *msg = NULL;
    rpc_payload_t p = {0};
    status_msg_t why = {0};
    status_t rc;

    rc = rpc_decode(m->request, bb, NULL, 0, false, &msg, &p, &why);
    fuzz_check_error(m->path, rc, &why);
    if (rc == STATUS_OK)
        protobuf_c_message_free_unpacked(msg, NULL);
    rpc_payload_done(&p);
}

/* The daemon whose real handler serves the method, or NULL. */
static daemon_t *served_by(rpc_method_id_t id)
{
    switch (id) {
    case RPC_HEALTH_CHECK:
    case RPC_PS_CREATE_VARIABLES:
    case RPC_PS_PULL:
    case RPC_PS_PUSH:
    case RPC_PS_PUSH_PULL:
    case RPC_PS_SAVE:
    case RPC_PS_RESTORE:
    case RPC_PS_DROP_JOB:
    case RPC_PS_STATS:
    case RPC_DIAG_ECHO:
    case RPC_DIAG_SINK:
        return ps;
    case RPC_WORKER_CONFIGURE_JOB:
    case RPC_WORKER_CANCEL:
        return worker;
    case RPC_COORD_SUBMIT_JOB:
    case RPC_COORD_GET_JOB:
    case RPC_COORD_LIST_JOBS:
    case RPC_COORD_CANCEL_JOB:
    case RPC_COORD_GET_CLUSTER:
        return chief;
    default:
        return NULL;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const rpc_method_t *m;
    grpc_byte_buffer *bb;
    daemon_t *d;
    unsigned shift;

    if (size < 1)
        return 0;
    if (++runs % reset_every == 0) {
        daemon_offline_free(ps);
        daemon_offline_free(worker);
        daemon_offline_free(chief);
        ps_start();
        others_start();
    }
    m = rpc_method_get((rpc_method_id_t)(data[0] % RPC_METHOD_COUNT_));
    shift = (unsigned)(data[0] / RPC_METHOD_COUNT_) % (MAX_SLICE_SHIFT + 1);
    bb = make_buffer(data + 1, size - 1, shift == 0 ? 0 : (size_t)1 << (shift - 1));
    if ((d = served_by(m->id)) != NULL)
        call_served(d, m, bb);
    else
        decode_only(m, bb);
    grpc_byte_buffer_destroy(bb);
    return 0;
}
