/* tessera.v1.Worker: configures a job (model, data shard, placement of the variables on the
 * parameter servers) and runs the chief's closures: each training step pulls the variables it
 * needs from every PS in parallel (only the embedding rows the batch touches), computes the
 * gradients and pushes them to every shard in parallel, where the PS applies them at once.
 *
 * Closures run on one executor thread per worker, so the gRPC handler threads stay free for
 * Cancel and health checks while a closure computes; the reply is deferred until the closure
 * ends. */
#define _POSIX_C_SOURCE 200809L
#include "service.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/cpus.h"
#include "base/log.h"
#include "job/paths.h"
#include "base/memory.h"
#include "announce.h"
#include "blas.h"
#include "checkpoint.h"
#include "train.h"
#include "files/pb.h"
#include "ps_client.h"
#include "sync.h"
#include "rpc/initializer_proto.h"
#include "rpc/server.h"
#include "trainer.h"

typedef struct closure_task {
    struct closure_task *next;
    rpc_ctx_t *ctx;
    uint64_t closure_id;
    int kind;
    int steps;
    int data_shard; /* 1 + the shard to read from (data_epoch, data_batch); 0: its own */
    int64_t data_epoch, data_batch;
    int64_t epoch;                  /* a histograms closure's */
    Tessera__V1__TrainPosition pos; /* a checkpoint closure's; its lists in values */
    char job[128];
    double values[];
} closure_task_t;

/* A parameter-server training step's phases on the training thread, which add up to the step:
 * the batch from the input pipeline, waiting for a pull, forward with the loss, backward (the
 * packs of gradients leaving as it goes), and waiting for the pushes still under way. */
enum { PHASE_INPUT, PHASE_PULL, PHASE_FORWARD, PHASE_BACKWARD, PHASE_PUSH, STEP_PHASES };
static const char *const phase_names[STEP_PHASES] = {"input", "pull", "forward", "backward",
                                                     "push"};

typedef struct wjob {
    char id[128];
    job_t job;
    double *metric_sums; /* a closure's sums of the job's metrics (RunClosureResponse) */
    trainer_t *trainer;  /* model and data */
    model_t *model;      /* the trainer's */
    ps_client_t *ps;     /* NULL until placement arrives */
    sync_t *sync;        /* multi_worker_mirrored: the ring and its gradients; else NULL */
    int ring_port;       /* where sync's ring listens */
    int worker_index, num_workers;
    uint64_t seed;    /* the model's: initializers without a seed of their own derive one from it */
    uint64_t *rng;    /* the dropout streams, as a closure's reply carries them */
    pb_buf_t resumed; /* multi_worker_mirrored: the manifest of the checkpoint restored, or empty */
    tb_run_t *tb;     /* multi_worker_mirrored with histogram_freq: the histograms' run */
    _Atomic bool cancelled;
    /* parameter_server: the training steps' seconds by phase, summed (logged at the end) */
    int64_t timed_steps;
    double phase_s[STEP_PHASES];
    double ps_call_s, ps_values_s;
} wjob_t;

typedef struct worker_service {
    daemon_t *daemon;
    uint64_t max_bytes;  /* of one job's model and data (--max-memory-bytes) */
    int compute_threads; /* --compute-threads, 0 resolved */
    job_device_t device; /* --device */
    bool device_given;
    pthread_mutex_t mu; /* guards job, queue, stopping */
    pthread_cond_t cv;
    wjob_t *job;
    bool busy; /* the executor runs a closure of `job` */
    closure_task_t *head, *tail;
    bool stopping;
    pthread_t executor;
    bool executor_started;
    /* Prometheus */
    metric_t *steps, *examples, *compute_seconds, *wait_seconds, *push_requests, *push_early;
    metric_t *allreduces, *allreduce_early, *threads_gauge;
    metric_t *phase_seconds[STEP_PHASES], *ps_call_seconds, *ps_values_seconds;
    announcer_t *announcer; /* --chief */
} worker_service_t;

/* ---- jobs --------------------------------------------------------------------------------- */

/* "job X: N steps here, per step: input a ms, ..." for a job that trained with a PS. */
static void log_step_phases(const wjob_t *j)
{
    char line[512];
    double sum = 0, n = (double)j->timed_steps;
    size_t used = 0;

    if (j->timed_steps == 0)
        return;
    for (int p = 0; p < STEP_PHASES; p++) {
        used += (size_t)snprintf(line + used, sizeof(line) - used, "%s%s %.2f ms", p ? ", " : "",
                                 phase_names[p], j->phase_s[p] / n * 1e3);
        sum += j->phase_s[p];
    }
    LOG_INFO(WORKER,
             "job %s: %lld training steps here; per step %.2f ms: %s; beside them, in calls to "
             "the parameter servers %.2f ms and copying their values in %.2f ms",
             j->id, (long long)j->timed_steps, sum / n * 1e3, line, j->ps_call_s / n * 1e3,
             j->ps_values_s / n * 1e3);
}

static void wjob_free(wjob_t *j)
{
    if (j == NULL)
        return;
    log_step_phases(j);
    ps_client_free(j->ps);
    sync_free(j->sync);
    tb_close(j->tb, NULL);
    trainer_free(j->trainer);
    job_done(&j->job);
    free(j->rng);
    free(j->metric_sums);
    pb_buf_free(&j->resumed);
    free(j);
}

/* multi_worker_mirrored with resume: the newest checkpoint under the job's checkpoint.dir that
 * this worker sees, restored (variables, optimizer slots, updates, data position), its manifest
 * kept for the chief; none is no error (the chief hears an empty manifest). */
static status_t resume_newest(wjob_t *j, status_msg_t *err)
{
    ckpt_manifest_t m;
    char *path = NULL;
    status_t rc = train_ckpt_find(&j->job, &path, &m, err);

    if (rc == STATUS_NOT_FOUND)
        return STATUS_OK;
    STATUS_CHECK(rc);
    rc = train_ckpt_restore(j->trainer, path, &m, err);
    if (rc == STATUS_OK && m.n_data > 0)
        rc = trainer_seek(j->trainer, 0, m.data[0].epoch, m.data[0].batch, err);
    if (rc == STATUS_OK) {
        ckpt_manifest_encode(&m, &j->resumed);
        if (j->resumed.failed)
            rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        else
            LOG_INFO(WORKER, "job %s: restored %s (step %lld)", j->id, path, (long long)m.step);
    }
    ckpt_manifest_free(&m);
    free(path);
    return rc;
}

/* The backend of the job's device on this worker: its --device picks the GPU of a cuda job,
 * and --device cpu refuses one. */
static status_t wjob_backend(const job_t *job, const worker_service_t *w, const backend_t **ret,
                             status_msg_t *err)
{
    job_device_t d = job->device;
    char name[16];

    if (d.cuda && w->device_given && !w->device.cuda)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "the job computes on device %s, and this worker was started with "
                           "--device cpu",
                           job_device_str(&d, name, sizeof(name)));
    if (d.cuda && w->device_given && w->device.ordinal >= 0)
        d.ordinal = w->device.ordinal;
    /* the host's share of the work, with a GPU too; the pool only grows, so once is enough */
    STATUS_CHECK(backend_cpu()->set_threads(w->compute_threads, err));
    return backend_open(&d, ret, err);
}

/* Parses the job with the files that came with it and builds model and data. */
static status_t wjob_build(const Tessera__V1__ConfigureJobRequest *req, const worker_service_t *w,
                           wjob_t **ret, status_msg_t *err)
{
    uint64_t max_bytes = w->max_bytes;
    const roots_t *roots = daemon_roots(w->daemon);
    const backend_t *be = NULL;
    wjob_t *j = calloc(1, sizeof(*j));
    job_file_t *files = calloc(req->n_files + 1, sizeof(*files));
    status_t rc;

    if (j == NULL || files == NULL) {
        free(j);
        free(files);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    snprintf(j->id, sizeof(j->id), "%s", req->job);
    j->worker_index = req->worker_index;
    j->num_workers = req->num_workers > 0 ? req->num_workers : 1;
    for (size_t i = 0; i < req->n_files; i++)
        files[i] = (job_file_t){req->files[i]->key, (const char *)req->files[i]->value.data,
                                req->files[i]->value.len};
    rc = job_parse_with_files(req->job_spec, strlen(req->job_spec),
                              req->job_path[0] ? req->job_path : NULL, files, req->n_files, &j->job,
                              err);
    free(files);
    j->seed = req->seed ? req->seed : j->job.seed;
    if (rc == STATUS_OK)
        rc = wjob_backend(&j->job, w, &be, err);
    if (rc == STATUS_OK) {
        bool mwms = j->job.strategy == JOB_STRATEGY_MULTI_WORKER_MIRRORED,
             sync = job_is_synchronous(&j->job), local = sync && !mwms;
        /* mirrored, central_storage: this worker alone, its replicas on its compute threads */
        int replicas = local ? trainer_local_replicas(&j->job, w->compute_threads) : 1;
        /* multi_worker_mirrored: every worker reads the whole split, a slice of each batch */
        trainer_opts_t to = {.shard_index = sync ? 0 : j->worker_index,
                             .num_shards = sync ? 1 : j->num_workers,
                             .slice_index = mwms ? j->worker_index : 0,
                             .slice_count = mwms ? j->num_workers : 0,
                             .replicas = replicas,
                             .optimizer = sync,
                             .seed = j->seed,
                             .epochs = -1, /* the chief counts the steps */
                             .max_bytes = max_bytes,
                             .start_epoch = req->start_epoch,
                             .start_batch = req->start_batch,
                             .backend = be};
        /* what this worker reads (data, starting weights) and, synchronous, writes */
        rc = job_paths_check(
            &j->job,
            JOB_PATHS_DATA | JOB_PATHS_INIT | (sync ? JOB_PATHS_CHECKPOINT : 0) |
                (sync && j->job.tensorboard_histogram_freq > 0 ? JOB_PATHS_TENSORBOARD : 0),
            roots, err);
        if (rc == STATUS_OK)
            rc = job_set_replicas(&j->job, mwms ? j->num_workers : replicas, err);
        if (rc == STATUS_OK && (req->start_epoch < 0 || req->start_batch < 0))
            rc = status_fail(err, STATUS_INVALID_ARGUMENT,
                             "start_epoch and start_batch must be >= 0, got %lld and %lld",
                             (long long)req->start_epoch, (long long)req->start_batch);
        else if (rc == STATUS_OK)
            rc = trainer_new(&j->job, &to, &j->trainer, err);
        /* the synchronous machinery; a mirrored job's ring is this worker alone */
        if (rc == STATUS_OK && sync)
            rc = sync_new(j->trainer, mwms ? j->worker_index : 0, mwms ? j->num_workers : 1,
                          j->job.bytes_per_pack, j->job.accumulate_steps > 1, &j->sync,
                          &j->ring_port, err);
        if (rc == STATUS_OK && sync && req->resume && j->job.checkpoint_dir != NULL)
            rc = resume_newest(j, err);
        /* starting weights, unless a checkpoint's were restored; every worker reads the file */
        if (rc == STATUS_OK && sync && j->job.init_from != NULL && j->resumed.len == 0) {
            rc = train_init_weights(j->trainer, &j->job, j->job.init_from, err);
            if (rc == STATUS_OK)
                LOG_INFO(WORKER, "job %s: starting from the weights in %s", j->id,
                         j->job.init_from);
        }
    }
    if (rc == STATUS_OK &&
        ((j->rng = calloc(model_rng_count(trainer_model(j->trainer)) + 1, sizeof(*j->rng))) ==
             NULL ||
         (j->metric_sums = calloc(j->job.metric_width + 1, sizeof(double))) == NULL))
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    if (rc == STATUS_OK && req->n_rng > 0) {
        model_t *m = trainer_model(j->trainer);
        if (req->n_rng != model_rng_count(m))
            rc = status_fail(err, STATUS_INVALID_ARGUMENT,
                             "%zu dropout streams to restore, but the model has %zu", req->n_rng,
                             model_rng_count(m));
        for (size_t i = 0; rc == STATUS_OK && i < req->n_rng; i++)
            *model_rng_state(m, i) = req->rng[i];
    }
    if (rc != STATUS_OK) {
        wjob_free(j);
        return rc;
    }
    j->model = trainer_model(j->trainer);
    *ret = j;
    return STATUS_OK;
}

/* ---- handlers ----------------------------------------------------------------------------- */

static status_t describe_variables(worker_service_t *w, rpc_ctx_t *ctx, wjob_t *j)
{
    size_t n = model_param_count(j->model);
    Tessera__V1__ConfigureJobResponse resp = TESSERA__V1__CONFIGURE_JOB_RESPONSE__INIT;
    Tessera__V1__VariableShard *vars = calloc(n + 1, sizeof(*vars));
    Tessera__V1__VariableShard **ptrs = calloc(n + 1, sizeof(*ptrs));
    initializer_msg_t *inits = calloc(n + 1, sizeof(*inits));
    Tessera__V1__Constraint *constraints = calloc(n + 1, sizeof(*constraints));
    int64_t *shapes = calloc(4 * n + 1, sizeof(*shapes));
    int64_t *shard_examples = calloc((size_t)j->num_workers + 1, sizeof(*shard_examples));
    status_t rc;

    (void)w;
    if (!vars || !ptrs || !inits || !constraints || !shapes || !shard_examples) {
        rc = rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        model_param_t *p = model_param(j->model, i);
        tessera__v1__variable_shard__init(&vars[i]);
        vars[i].variable = p->name;
        vars[i].num_shards = 1;
        vars[i].dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
        for (int d = 0; d < p->rank; d++)
            shapes[4 * i + (size_t)d] = p->shape[d];
        vars[i].n_shape = vars[i].n_full_shape = (size_t)p->rank;
        vars[i].shape = vars[i].full_shape = &shapes[4 * i];
        vars[i].sparse = p->sparse;
        /* BatchNormalization's moving statistics: the PS averages in what workers push */
        vars[i].moving = p->moving;
        vars[i].momentum = p->moving ? 1.0 - (double)p->rest : 0;
        /* Keras's constraint, which the PS applies after each update */
        vars[i].constraint = constraint_to_proto(&p->constraint, &constraints[i]);
        /* The PS derives the fans from the variable's full shape, as Keras does. */
        initializer_to_proto(&p->init, p->init_default, &inits[i]);
        /* The PS draws the initial values from the job's seed, so that the same job file starts
         * from the same values each time it runs (Initializer.seed 0 means none). */
        if (inits[i].msg.seed == 0)
            inits[i].msg.seed = (j->seed + 1) * 0x9E3779B97F4A7C15ull + i + 1;
        vars[i].initializer = &inits[i].msg;
        ptrs[i] = &vars[i];
    }
    resp.train_examples = (int64_t)trainer_train_examples(j->trainer);
    resp.test_examples = (int64_t)trainer_test_examples(j->trainer);
    trainer_shard_examples(j->trainer, shard_examples);
    resp.n_shard_examples = (size_t)j->num_workers;
    resp.shard_examples = shard_examples;
    resp.ring_port = j->ring_port;
    resp.resume_manifest = (ProtobufCBinaryData){j->resumed.len, j->resumed.data};
    resp.global_batch = trainer_global_batch(j->trainer);
    resp.n_variables = n;
    resp.variables = ptrs;
    rc = rpc_ctx_respond(ctx, &resp.base, NULL, 0);
out:
    free(vars);
    free(ptrs);
    free(inits);
    free(constraints);
    free(shapes);
    free(shard_examples);
    return rc;
}

/* Waits until the executor is not running a closure; call with w->mu held. */
static void wait_idle(worker_service_t *w)
{
    while (w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
}

/* The sizes of the shards the chief asks for (size_shards), -1 for the others, in *ret (NULL
 * when none is asked). */
static status_t size_shards(wjob_t *j, const Tessera__V1__ConfigureJobRequest *req, int64_t **ret,
                            status_msg_t *err)
{
    int64_t *sizes;

    *ret = NULL;
    if (req->n_size_shards == 0)
        return STATUS_OK;
    if ((sizes = malloc((size_t)j->num_workers * sizeof(*sizes))) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (int s = 0; s < j->num_workers; s++)
        sizes[s] = -1;
    for (size_t i = 0; i < req->n_size_shards; i++) {
        int s = req->size_shards[i];
        status_msg_t why;
        if (s < 0 || s >= j->num_workers) {
            free(sizes);
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "size_shards names shard %d; the job has %d", s, j->num_workers);
        }
        /* one that cannot be loaded here (memory, a file missing) stays unknown: not read */
        if (trainer_size_shard(j->trainer, s, &sizes[s], &why) != STATUS_OK) {
            LOG_WARNING(WORKER, "job %s: shard %d of the training data cannot be read here: %s",
                        j->id, s, why.text);
            sizes[s] = -1;
        }
    }
    *ret = sizes;
    return STATUS_OK;
}

static status_t on_configure(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__ConfigureJobRequest *req = (const void *)msg;
    worker_service_t *w = user;
    status_msg_t err = {0};
    wjob_t *j = NULL, *old = NULL;
    int64_t *sizes = NULL;
    status_t rc;

    if (req->job[0] == '\0')
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "job", "ConfigureJob names no job");
    if (req->n_placement > 0 || req->n_ring > 0) {
        pthread_mutex_lock(&w->mu);
        wait_idle(w);
        j = w->job;
        if (j == NULL || strcmp(j->id, req->job) != 0) {
            pthread_mutex_unlock(&w->mu);
            return rpc_ctx_fail(ctx, STATUS_NOT_FOUND, req->job,
                                "job %s is not configured on this worker", req->job);
        }
        if (req->n_ring > 0) { /* multi_worker_mirrored: the ring, no parameter server */
            rc = j->sync != NULL ? STATUS_OK
                                 : status_fail(&err, STATUS_INVALID_ARGUMENT,
                                               "job %s is not multi_worker_mirrored", req->job);
            if (rc == STATUS_OK && req->ring_rollback)
                rc = sync_rollback(j->sync, &err);
            if (rc == STATUS_OK)
                rc = sync_connect(j->sync, req->ring, req->n_ring, req->ring_rank, req->ring_token,
                                  req->ring_timeout_ms > 0 ? req->ring_timeout_ms : 30000, &err);
            if (rc == STATUS_OK && req->ring_broadcast)
                rc = sync_broadcast(j->sync, req->ring_root, &err);
            if (rc == STATUS_OK && req->ring_broadcast && req->ring_seek)
                rc = trainer_seek(j->trainer, 0, req->start_epoch, req->start_batch, &err);
            if (rc == STATUS_OK)
                LOG_INFO(WORKER,
                         "job %s: ring of %zu workers connected, gradients all-reduced in %zu "
                         "bucket%s",
                         j->id, req->n_ring, sync_buckets(j->sync),
                         sync_buckets(j->sync) == 1 ? "" : "s");
            pthread_mutex_unlock(&w->mu);
            if (rc != STATUS_OK)
                return rpc_ctx_fail(ctx, rc, NULL, "%s", err.text);
            Tessera__V1__ConfigureJobResponse resp = TESSERA__V1__CONFIGURE_JOB_RESPONSE__INIT;
            return rpc_ctx_respond(ctx, &resp.base, NULL, 0);
        }
        ps_client_free(j->ps);
        j->ps = NULL;
        ps_client_opts_t po = {.bytes_per_pack = j->job.bytes_per_pack,
                               .during_backward = j->job.accumulate_steps <= 1,
                               .wire_bf16 = j->job.wire_bf16,
                               .error_feedback = j->job.wire_error_feedback,
                               .clip = &j->job.optimizer};
        rc = ps_client_new(j->model, req, &po, &j->ps, &err);
        if (rc == STATUS_OK)
            LOG_INFO(WORKER, "job %s: %zu parameter servers, gradients pushed in %zu pack%s", j->id,
                     req->n_ps, ps_client_packs(j->ps), ps_client_packs(j->ps) == 1 ? "" : "s");
        rc = rc == STATUS_OK ? size_shards(j, req, &sizes, &err) : rc;
        pthread_mutex_unlock(&w->mu);
        if (rc != STATUS_OK) {
            free(sizes);
            return rpc_ctx_fail(ctx, rc, NULL, "%s", err.text);
        }
        {
            Tessera__V1__ConfigureJobResponse resp = TESSERA__V1__CONFIGURE_JOB_RESPONSE__INIT;
            resp.n_shard_examples = sizes != NULL ? (size_t)j->num_workers : 0;
            resp.shard_examples = sizes;
            rc = rpc_ctx_respond(ctx, &resp.base, NULL, 0);
            free(sizes);
            return rc;
        }
    }
    if (req->num_workers > RPC_MAX_WORKERS)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "num_workers",
                            "num_workers %d is more than the %d a job may have", req->num_workers,
                            RPC_MAX_WORKERS);
    if (req->num_workers < 1 || req->worker_index < 0 || req->worker_index >= req->num_workers)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "worker_index",
                            "worker_index %d is not in [0, num_workers %d)", req->worker_index,
                            req->num_workers);
    rc = wjob_build(req, w, &j, &err);
    if (rc != STATUS_OK)
        return rpc_ctx_fail(ctx,
                            rc == STATUS_NO_MEMORY || rc == STATUS_RESOURCE_EXHAUSTED
                                ? rc
                                : STATUS_INVALID_ARGUMENT,
                            req->job, "job %s: %s", req->job, err.text);
    pthread_mutex_lock(&w->mu);
    if (w->job != NULL)
        atomic_store(&w->job->cancelled, true);
    wait_idle(w);
    old = w->job;
    w->job = j;
    pthread_mutex_unlock(&w->mu);
    wjob_free(old);
    LOG_INFO(WORKER, "job %s configured: %zu training examples in this shard, %zu variables", j->id,
             trainer_train_examples(j->trainer), model_param_count(j->model));
    return describe_variables(w, ctx, j);
}

static status_t on_run_closure(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__RunClosureRequest *req = (const void *)msg;
    worker_service_t *w = user;
    closure_task_t *t;

    if (req->steps < 1 && req->kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "steps",
                            "a training closure needs steps >= 1, got %d", req->steps);
    if (req->data_shard < 0)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "data_shard",
                            "data_shard %d: 0 for the worker's own, else 1 + a shard",
                            req->data_shard);
    if (req->kind != TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN &&
        req->kind != TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_EVALUATE &&
        req->kind != TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_CHECKPOINT &&
        req->kind != TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_HISTOGRAMS)
        return rpc_ctx_fail(ctx, STATUS_INVALID_ARGUMENT, "kind", "unknown closure kind %d",
                            (int)req->kind);
    /* a checkpoint's metric sums and values live after the task, freed with it */
    size_t n_sums = req->position != NULL ? req->position->n_epoch_metric_sums : 0;
    size_t n_last = req->position != NULL ? req->position->n_last_metrics : 0;
    t = calloc(1, sizeof(*t) + (n_sums + n_last) * sizeof(double));
    if (t == NULL)
        return rpc_ctx_fail(ctx, STATUS_NO_MEMORY, NULL, "out of memory");
    t->ctx = ctx;
    t->closure_id = req->closure_id;
    t->kind = (int)req->kind;
    t->steps = req->steps;
    t->data_shard = req->data_shard;
    t->data_epoch = req->data_epoch;
    t->data_batch = req->data_batch;
    t->epoch = req->epoch;
    if (req->position != NULL) {
        t->pos = *req->position;
        t->pos.epoch_metric_sums = t->values;
        t->pos.last_metrics = t->values + n_sums;
        if (n_sums > 0)
            memcpy(t->values, req->position->epoch_metric_sums, n_sums * sizeof(double));
        if (n_last > 0)
            memcpy(t->values + n_sums, req->position->last_metrics, n_last * sizeof(double));
    }
    snprintf(t->job, sizeof(t->job), "%s", req->job);
    rpc_ctx_defer(ctx);
    pthread_mutex_lock(&w->mu);
    if (w->tail)
        w->tail->next = t;
    else
        w->head = t;
    w->tail = t;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return STATUS_OK;
}

static status_t on_cancel(rpc_ctx_t *ctx, const ProtobufCMessage *msg, void *user)
{
    const Tessera__V1__CancelRequest *req = (const void *)msg;
    worker_service_t *w = user;
    Tessera__V1__CancelResponse resp = TESSERA__V1__CANCEL_RESPONSE__INIT;
    wjob_t *old = NULL;

    pthread_mutex_lock(&w->mu);
    if (w->job != NULL && (req->job[0] == '\0' || strcmp(w->job->id, req->job) == 0)) {
        atomic_store(&w->job->cancelled, true);
        wait_idle(w);
        old = w->job;
        w->job = NULL;
    }
    pthread_mutex_unlock(&w->mu);
    if (old != NULL)
        LOG_INFO(WORKER, "job %s cancelled", old->id);
    wjob_free(old);
    return rpc_ctx_respond(ctx, &resp.base, NULL, 0);
}

/* ---- closures ----------------------------------------------------------------------------- */

/* Adds seconds to phase p of the step breakdown. */
static void add_phase(worker_service_t *w, wjob_t *j, int p, double seconds)
{
    j->phase_s[p] += seconds;
    metric_add(w->phase_seconds[p], seconds);
}

static status_t push(worker_service_t *w, wjob_t *j, status_msg_t *err)
{
    ps_push_info_t info;
    double t0 = clock_now_s(), waited;
    status_t rc = ps_client_push(j->ps, trainer_window_closed(j->trainer), &info, err);

    waited = clock_now_s() - t0;
    add_phase(w, j, PHASE_PUSH, waited);
    STATUS_CHECK(rc);
    metric_add(w->wait_seconds, waited);
    metric_add(w->push_requests, info.requests);
    metric_add(w->push_early, info.during_backward);
    return STATUS_OK;
}

/* The lanes' seconds since the last step, once they are idle. */
static void take_lane_times(worker_service_t *w, wjob_t *j)
{
    double calls, values;

    ps_client_take_times(j->ps, &calls, &values);
    j->ps_call_s += calls;
    j->ps_values_s += values;
    metric_add(w->ps_call_seconds, calls);
    metric_add(w->ps_values_seconds, values);
}

/* The metric sums of the trainer's steps since the last call: into resp, or dropped. */
static void take_metrics(wjob_t *j, Tessera__V1__RunClosureResponse *resp)
{
    memset(j->metric_sums, 0, j->job.metric_width * sizeof(double));
    trainer_take_metrics(j->trainer, j->metric_sums);
    if (resp != NULL) {
        resp->n_metric_sums = j->job.metric_width;
        resp->metric_sums = j->metric_sums;
    }
}

static status_t train_closure(worker_service_t *w, wjob_t *j, const closure_task_t *t,
                              Tessera__V1__RunClosureResponse *resp, status_msg_t *err)
{
    double loss = 0, correct = 0;
    int64_t examples = 0;
    int done = 0, steps = t->steps, shard = j->worker_index;

    if (t->data_shard > 0) {
        shard = t->data_shard - 1;
        if (shard >= j->num_workers || t->data_epoch < 0 || t->data_batch < 0)
            return status_fail(err, STATUS_INVALID_ARGUMENT,
                               "shard %d at batch %lld of epoch %lld: the job has %d shards", shard,
                               (long long)t->data_batch, (long long)t->data_epoch, j->num_workers);
        STATUS_CHECK(trainer_seek(j->trainer, shard, t->data_epoch, t->data_batch, err));
    }
    ps_client_begin_closure(j->ps);
    take_metrics(j, NULL); /* what a failed closure left */
    /* a closure's window of accumulate_steps starts empty (a closure run again, or on another
     * worker, adds nothing twice) */
    trainer_drop_window(j->trainer);
    for (; done < steps; done++) {
        data_batch_t b;
        model_stats_t st;
        double t_in = clock_now_s(), t0, t1, t2, fwd, bwd;
        if (atomic_load(&j->cancelled))
            return status_fail(err, STATUS_CANCELLED, "job %s was cancelled", j->id);
        if (!trainer_next_of(j->trainer, shard, &b))
            break;
        t0 = clock_now_s();
        STATUS_CHECK(ps_client_pull(j->ps, b.features, b.size, err));
        t1 = clock_now_s();
        /* Sends gradients while backward runs (ps_client packs); no gradient of a step whose
         * loss is not finite leaves the worker. */
        STATUS_CHECK(trainer_step(j->trainer, &b, &st, err));
        t2 = clock_now_s();
        model_step_seconds(j->model, &fwd, &bwd);
        fwd = fwd < t2 - t1 ? fwd : t2 - t1;
        add_phase(w, j, PHASE_INPUT, t0 - t_in);
        add_phase(w, j, PHASE_PULL, t1 - t0);
        add_phase(w, j, PHASE_FORWARD, fwd);
        add_phase(w, j, PHASE_BACKWARD, t2 - t1 - fwd); /* with the trainer's own work */
        j->timed_steps++;
        metric_inc(w->steps);
        metric_add(w->examples, st.examples);
        metric_add(w->compute_seconds, t2 - t1);
        metric_add(w->wait_seconds, t1 - t0);
        if (trainer_accumulate(j->trainer)) /* the window's mean: the push */
            STATUS_CHECK(push(w, j, err));
        take_lane_times(w, j);
        loss += st.loss_sum;
        correct += st.correct;
        examples += st.examples;
    }
    if (trainer_close_window(j->trainer)) { /* the closure ended inside a window */
        STATUS_CHECK(push(w, j, err));
        take_lane_times(w, j);
    }
    resp->steps = done;
    resp->examples = examples;
    resp->loss_sum = loss;
    resp->correct = correct;
    take_metrics(j, resp);
    trainer_position(j->trainer, shard, &resp->data_epoch, &resp->data_batch);
    resp->n_rng = model_rng_count(j->model);
    resp->rng = j->rng;
    for (size_t i = 0; i < resp->n_rng; i++)
        j->rng[i] = *model_rng_state(j->model, i);
    return STATUS_OK;
}

/* Before each test batch: the variables it reads, unless the job was cancelled. */
static status_t pull_for_eval(void *arg, const data_batch_t *b, status_msg_t *err)
{
    wjob_t *j = arg;
    if (atomic_load(&j->cancelled))
        return status_fail(err, STATUS_CANCELLED, "job %s was cancelled", j->id);
    return ps_client_pull(j->ps, b->features, b->size, err);
}

static status_t eval_closure(wjob_t *j, Tessera__V1__RunClosureResponse *resp, status_msg_t *err)
{
    model_stats_t sum;

    if (j->ps != NULL)
        ps_client_refresh(j->ps);
    memset(j->metric_sums, 0, j->job.metric_width * sizeof(double));
    STATUS_CHECK(trainer_evaluate(j->trainer, j->ps != NULL ? pull_for_eval : NULL, j, &sum,
                                  j->metric_sums, err));
    resp->n_metric_sums = j->job.metric_width;
    resp->metric_sums = j->metric_sums;
    resp->loss_sum = sum.loss_sum;
    resp->correct = sum.correct;
    resp->examples = sum.examples;
    return STATUS_OK;
}

/* multi_worker_mirrored: the closure's steps in lockstep with the other workers. */
static status_t sync_closure(worker_service_t *w, wjob_t *j, const closure_task_t *t,
                             Tessera__V1__RunClosureResponse *resp, status_msg_t *err)
{
    model_stats_t st;
    sync_counts_t counts;
    int done = 0;
    double t0 = clock_now_s();
    status_t rc;

    take_metrics(j, NULL); /* what a failed closure left */
    rc = sync_steps(j->sync, t->steps, &j->cancelled, &st, &done, err);

    sync_take_counts(j->sync, &counts);
    metric_add(w->allreduces, (double)counts.allreduces);
    metric_add(w->allreduce_early, (double)counts.during_backward);
    STATUS_CHECK(rc);
    metric_add(w->steps, done);
    metric_add(w->examples, st.examples);
    metric_add(w->compute_seconds, clock_now_s() - t0);
    resp->steps = done;
    resp->examples = st.examples;
    resp->loss_sum = st.loss_sum;
    resp->correct = st.correct;
    take_metrics(j, resp);
    trainer_position(j->trainer, 0, &resp->data_epoch, &resp->data_batch);
    return STATUS_OK;
}

/* multi_worker_mirrored: this worker's variables, slots and data position, with the chief's
 * account of the job's progress, as a checkpoint under the job's checkpoint.dir. */
static status_t ckpt_closure(wjob_t *j, const closure_task_t *t, status_msg_t *err)
{
    train_position_t pos = {
        .step = t->pos.step,
        .epoch_sums = {t->pos.epoch_loss, t->pos.epoch_correct, t->pos.epoch_examples},
        .has_last_epoch = t->pos.has_last_epoch,
        .last_loss = t->pos.last_loss,
        .last_accuracy = t->pos.last_accuracy,
        .metric_sums = t->pos.n_epoch_metric_sums > 0 ? t->pos.epoch_metric_sums : NULL,
        .last_metrics = t->pos.n_last_metrics > 0 ? t->pos.last_metrics : NULL};

    if (j->sync == NULL || j->job.checkpoint_dir == NULL)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "job %s: checkpoint closures are for multi_worker_mirrored jobs with a "
                           "checkpoint section",
                           j->id);
    if (t->pos.step < 0)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "a checkpoint at step %lld",
                           (long long)t->pos.step);
    if ((t->pos.n_epoch_metric_sums != 0 && t->pos.n_epoch_metric_sums != j->job.metric_width) ||
        (t->pos.n_last_metrics != 0 && t->pos.n_last_metrics != (size_t)j->job.n_metrics))
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "a checkpoint with %zu metric sums and %zu metric values; the job has "
                           "%zu and %d",
                           t->pos.n_epoch_metric_sums, t->pos.n_last_metrics, j->job.metric_width,
                           j->job.n_metrics);
    trainer_position(j->trainer, 0, &pos.epoch, &pos.batch);
    return train_ckpt_save(j->trainer, &j->job, &pos, err);
}

/* multi_worker_mirrored: the weights' histograms after an epoch, into the job's TensorBoard
 * run (its own events file there, beside the chief's). */
static status_t histograms_closure(wjob_t *j, const closure_task_t *t, status_msg_t *err)
{
    tb_opts_t o = {.logdir = j->job.tensorboard_logdir,
                   .job = j->job.name ? j->job.name : "job",
                   .histogram_freq = j->job.tensorboard_histogram_freq,
                   .histograms_only = true};

    if (j->sync == NULL || j->job.tensorboard_logdir == NULL)
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "histograms are written here only for a synchronous job with a "
                           "tensorboard section");
    if (j->tb == NULL)
        STATUS_CHECK(tb_open(&o, &j->tb, err));
    return train_histograms(j->tb, trainer_model(j->trainer), t->epoch, err);
}

static void run_task(worker_service_t *w, closure_task_t *t)
{
    Tessera__V1__RunClosureResponse resp = TESSERA__V1__RUN_CLOSURE_RESPONSE__INIT;
    status_msg_t err = {0};
    wjob_t *j = w->job;
    double t0 = clock_now_s();
    status_t rc;

    if (j == NULL || strcmp(j->id, t->job) != 0) {
        rpc_ctx_fail_now(t->ctx, STATUS_NOT_FOUND, t->job, "job %s is not configured here", t->job);
        return;
    }
    if (j->ps == NULL && j->sync == NULL) {
        rpc_ctx_fail_now(t->ctx, STATUS_INVALID_USAGE, t->job,
                         "job %s has no variable placement yet", t->job);
        return;
    }
    resp.closure_id = t->closure_id;
    if (t->kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_CHECKPOINT)
        rc = ckpt_closure(j, t, &err);
    else if (t->kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_HISTOGRAMS)
        rc = histograms_closure(j, t, &err);
    else if (j->sync != NULL)
        rc = t->kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN
                 ? sync_closure(w, j, t, &resp, &err)
                 : eval_closure(j, &resp, &err);
    else
        rc = t->kind == TESSERA__V1__CLOSURE_KIND__CLOSURE_KIND_TRAIN
                 ? train_closure(w, j, t, &resp, &err)
                 : eval_closure(j, &resp, &err);
    resp.seconds = clock_now_s() - t0;
    if (rc != STATUS_OK) {
        /* A PS that does not answer is the PS's fault, not this worker's: the culprit is
         * "ps:<index>", which the chief tells from this worker being unreachable. */
        int lost = j->ps != NULL ? ps_client_lost_ps(j->ps) : -1;
        int peer = sync_failed_peer(j->sync); /* a ring peer that went away */
        char culprit[32];
        if (lost >= 0)
            snprintf(culprit, sizeof(culprit), "ps:%d", lost);
        else
            snprintf(culprit, sizeof(culprit), "worker:%d", peer);
        rpc_ctx_fail_now(t->ctx, rc, lost >= 0 || peer >= 0 ? culprit : NULL,
                         "closure %llu of job %s: %s", (unsigned long long)t->closure_id, t->job,
                         err.text);
        return;
    }
    rpc_ctx_respond(t->ctx, &resp.base, NULL, 0);
}

static void *executor_main(void *arg)
{
    worker_service_t *w = arg;

    pthread_mutex_lock(&w->mu);
    for (;;) {
        closure_task_t *t;
        while (w->head == NULL && !w->stopping)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->head == NULL && w->stopping)
            break;
        t = w->head;
        w->head = t->next;
        if (w->head == NULL)
            w->tail = NULL;
        if (w->stopping) {
            pthread_mutex_unlock(&w->mu);
            rpc_ctx_fail_now(t->ctx, STATUS_UNAVAILABLE, NULL, "the worker is stopping");
            free(t);
            pthread_mutex_lock(&w->mu);
            continue;
        }
        w->busy = true;
        pthread_mutex_unlock(&w->mu);
        run_task(w, t);
        free(t);
        pthread_mutex_lock(&w->mu);
        w->busy = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

static status_t make_metrics(worker_service_t *w, metrics_t *m, status_msg_t *err)
{
    w->steps = metrics_counter(m, "tessera_worker_steps_total", "Training steps run.", NULL);
    w->examples = metrics_counter(m, "tessera_worker_examples_total",
                                  "Examples of the training steps run.", NULL);
    w->compute_seconds = metrics_counter(m, "tessera_worker_compute_seconds_total",
                                         "Forward and backward time of the training steps.", NULL);
    w->wait_seconds = metrics_counter(m, "tessera_worker_ps_wait_seconds_total",
                                      "Time training steps waited for parameter servers: pulls, "
                                      "and pushes still under way when backward ended.",
                                      NULL);
    w->push_requests = metrics_counter(m, "tessera_worker_push_requests_total",
                                       "Push and PushPull requests sent.", NULL);
    w->push_early = metrics_counter(m, "tessera_worker_push_requests_during_backward_total",
                                    "Push and PushPull requests sent while the step's backward "
                                    "pass was still running (train: bytes_per_pack).",
                                    NULL);
    w->threads_gauge =
        metrics_gauge(m, "tessera_worker_compute_threads",
                      "Threads a job's model computes on (--compute-threads).", NULL);
    w->allreduces = metrics_counter(m, "tessera_worker_allreduce_total",
                                    "Gradient all-reduces over the ring (multi_worker_mirrored): "
                                    "one per bucket and step.",
                                    NULL);
    w->allreduce_early = metrics_counter(m, "tessera_worker_allreduce_during_backward_total",
                                         "Gradient all-reduces handed to the ring while the "
                                         "step's backward pass was still running (train: "
                                         "bytes_per_pack).",
                                         NULL);
    for (int p = 0; p < STEP_PHASES; p++)
        if ((w->phase_seconds[p] = metrics_counter(
                 m, "tessera_worker_step_phase_seconds_total",
                 "Seconds of parameter-server training steps on the training thread, by phase: "
                 "input (the next batch), pull (waiting for values), forward (with the loss), "
                 "backward (gradients leaving in packs as it goes), push (waiting for the packs "
                 "still under way). The phases add up to the steps' time.",
                 (const char *[]){"phase", phase_names[p], NULL})) == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "worker: cannot register the metrics");
    w->ps_call_seconds = metrics_counter(
        m, "tessera_worker_ps_call_seconds_total",
        "Seconds in Pull, Push and PushPull calls, summed over the parameter servers' threads: "
        "sending, the server's work, receiving. Pushes overlap backward.",
        NULL);
    w->ps_values_seconds = metrics_counter(m, "tessera_worker_ps_values_seconds_total",
                                           "Seconds copying the values that pulls and push-pulls "
                                           "brought into the model, summed over the threads.",
                                           NULL);
    if (!w->steps || !w->examples || !w->compute_seconds || !w->wait_seconds || !w->push_requests ||
        !w->push_early || !w->allreduces || !w->allreduce_early || !w->ps_call_seconds ||
        !w->ps_values_seconds || !w->threads_gauge)
        return status_fail(err, STATUS_NO_MEMORY, "worker: cannot register the metrics");
    return STATUS_OK;
}

static void worker_service_stop(void *state);
static void worker_service_teardown(void *state);

static status_t worker_service_setup(daemon_t *d, void *opts, void **ret_state, status_msg_t *err)
{
    const worker_opts_t *o = opts;
    worker_service_t *w = calloc(1, sizeof(*w));
    rpc_server_t *s = daemon_rpc(d);
    status_msg_t why;
    status_t rc;

    if (w == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    if (o->device != NULL && job_device_parse(o->device, &w->device, &why) != STATUS_OK) {
        free(w);
        return status_fail(err, STATUS_BAD_CONFIG, "--device: %s", why.text);
    }
    w->device_given = o->device != NULL;
    rc = make_metrics(w, daemon_metrics(d), err);
    if (rc != STATUS_OK) {
        free(w);
        return rc;
    }
    w->daemon = d;
    w->max_bytes =
        o->max_memory_bytes > 0 ? (uint64_t)o->max_memory_bytes : memory_physical_bytes();
    w->compute_threads = o->compute_threads > 0 ? (int)o->compute_threads : cpus_available();
    if (w->compute_threads > BLAS_MAX_THREADS) /* a big host: the pool's most */
        w->compute_threads = BLAS_MAX_THREADS;
    metric_set(w->threads_gauge, w->compute_threads);
    LOG_NOTICE(WORKER, "jobs compute on %d thread%s%s", w->compute_threads,
               w->compute_threads == 1 ? "" : "s",
               o->compute_threads > 0 ? "" : " (the CPUs this worker may use)");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->executor, NULL, executor_main, w) != 0) {
        free(w);
        return status_fail(err, STATUS_SYSTEM, "cannot start the closure executor");
    }
    w->executor_started = true;
    rpc_server_handle(s, RPC_WORKER_CONFIGURE_JOB, on_configure, w);
    rpc_server_handle(s, RPC_WORKER_RUN_CLOSURE, on_run_closure, w);
    rpc_server_handle(s, RPC_WORKER_CANCEL, on_cancel, w);
    if (o->chief != NULL && o->chief[0] != '\0') {
        char address[300];
        announcer_address(o->advertise, daemon_address(d), address, sizeof(address));
        if (announcer_start(o->chief, address, &w->announcer, err) != STATUS_OK) {
            worker_service_stop(w);
            worker_service_teardown(w);
            return err->status;
        }
    }
    *ret_state = w;
    return STATUS_OK;
}

static void worker_service_stop(void *state)
{
    worker_service_t *w = state;
    announcer_stop(w->announcer);
    w->announcer = NULL;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    if (w->job != NULL)
        atomic_store(&w->job->cancelled, true);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (w->executor_started)
        pthread_join(w->executor, NULL);
    w->executor_started = false;
}

static void worker_service_teardown(void *state)
{
    worker_service_t *w = state;
    wjob_free(w->job);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

static const char *const worker_services[] = {RPC_SVC_WORKER, RPC_SVC_DIAG, NULL};

const daemon_spec_t worker_daemon_spec = {
    .program = "tessera-worker",
    .role = "worker",
    .task_type = TESSERA__V1__TASK_TYPE__TASK_TYPE_WORKER,
    .services = worker_services,
    .setup = worker_service_setup,
    .stop = worker_service_stop,
    .teardown = worker_service_teardown,
};
