/* The RPC method table: every method Tessera serves or calls, declared once.
 *
 * Server dispatch (rpc_server_handle), client stubs (rpc_<name>() below) and metrics labels all
 * come from this list, so a method's path, kind and message types cannot disagree between the
 * two sides. Columns: ID, stub name, service, method, kind, callers (the certificate roles that
 * may call it when mutual TLS is on: RPC_CALLERS_*), request type, request descriptor, response
 * type, response descriptor. */
#ifndef TESSERA_RPC_METHODS_H
#define TESSERA_RPC_METHODS_H

#include "grpc/health/v1/health.pb-c.h"
#include "tessera/v1/coordinator.pb-c.h"
#include "tessera/v1/diagnostics.pb-c.h"
#include "tessera/v1/ps.pb-c.h"
#include "tessera/v1/worker.pb-c.h"

#define RPC_SVC_HEALTH "grpc.health.v1.Health"
#define RPC_SVC_PS     "tessera.v1.ParameterServer"
#define RPC_SVC_WORKER "tessera.v1.Worker"
#define RPC_SVC_COORD  "tessera.v1.Coordinator"
#define RPC_SVC_DIAG   "tessera.v1.Diagnostics"

/* Roles a caller's certificate carries (rpc/security.h reads them from its SAN URI
 * spiffe://tessera/ROLE/NAME or its CN ROLE/NAME). */
#define RPC_ROLE_CHIEF  (1u << 0)
#define RPC_ROLE_PS     (1u << 1)
#define RPC_ROLE_WORKER (1u << 2)
#define RPC_ROLE_CLIENT (1u << 3)
#define RPC_ROLE_NONE_  (1u << 4) /* no certificate: a plaintext health port */

/* Who may call a method, as masks of roles. */
#define RPC_CALLERS_ANYONE (RPC_CALLERS_PEERS | RPC_ROLE_NONE_) /* health: also without TLS */
#define RPC_CALLERS_PEERS  (RPC_ROLE_CHIEF | RPC_ROLE_PS | RPC_ROLE_WORKER | RPC_ROLE_CLIENT)
#define RPC_CALLERS_TASKS  (RPC_ROLE_CHIEF | RPC_ROLE_WORKER) /* the PS's data and admin path */
#define RPC_CALLERS_CHIEF  RPC_ROLE_CHIEF
#define RPC_CALLERS_WORKER RPC_ROLE_WORKER
#define RPC_CALLERS_CLIENT RPC_ROLE_CLIENT

#define RPC_T_(x) Tessera__V1__##x
#define RPC_D_(x) tessera__v1__##x##__descriptor

#define RPC_METHOD_LIST(X)                                                                         \
    X(HEALTH_CHECK, health_check, RPC_SVC_HEALTH, "Check", UNARY, ANYONE,                          \
      Grpc__Health__V1__HealthCheckRequest, grpc__health__v1__health_check_request__descriptor,    \
      Grpc__Health__V1__HealthCheckResponse, grpc__health__v1__health_check_response__descriptor)  \
    X(HEALTH_WATCH, health_watch, RPC_SVC_HEALTH, "Watch", SERVER_STREAM, ANYONE,                  \
      Grpc__Health__V1__HealthCheckRequest, grpc__health__v1__health_check_request__descriptor,    \
      Grpc__Health__V1__HealthCheckResponse, grpc__health__v1__health_check_response__descriptor)  \
    X(PS_CREATE_VARIABLES, ps_create_variables, RPC_SVC_PS, "CreateVariables", UNARY, TASKS,       \
      RPC_T_(CreateVariablesRequest), RPC_D_(create_variables_request),                            \
      RPC_T_(CreateVariablesResponse), RPC_D_(create_variables_response))                          \
    X(PS_PULL, ps_pull, RPC_SVC_PS, "Pull", UNARY, TASKS, RPC_T_(PullRequest),                     \
      RPC_D_(pull_request), RPC_T_(PullResponse), RPC_D_(pull_response))                           \
    X(PS_PUSH, ps_push, RPC_SVC_PS, "Push", UNARY, TASKS, RPC_T_(PushRequest),                     \
      RPC_D_(push_request), RPC_T_(PushResponse), RPC_D_(push_response))                           \
    X(PS_PUSH_PULL, ps_push_pull, RPC_SVC_PS, "PushPull", UNARY, TASKS, RPC_T_(PushRequest),       \
      RPC_D_(push_request), RPC_T_(PushResponse), RPC_D_(push_response))                           \
    X(PS_SAVE, ps_save, RPC_SVC_PS, "Save", UNARY, TASKS, RPC_T_(SaveRequest),                     \
      RPC_D_(save_request), RPC_T_(SaveResponse), RPC_D_(save_response))                           \
    X(PS_RESTORE, ps_restore, RPC_SVC_PS, "Restore", UNARY, TASKS, RPC_T_(RestoreRequest),         \
      RPC_D_(restore_request), RPC_T_(RestoreResponse), RPC_D_(restore_response))                  \
    X(PS_DROP_JOB, ps_drop_job, RPC_SVC_PS, "DropJob", UNARY, TASKS, RPC_T_(DropJobRequest),       \
      RPC_D_(drop_job_request), RPC_T_(DropJobResponse), RPC_D_(drop_job_response))                \
    X(PS_STATS, ps_stats, RPC_SVC_PS, "Stats", UNARY, PEERS, RPC_T_(PsStatsRequest),               \
      RPC_D_(ps_stats_request), RPC_T_(PsStatsResponse), RPC_D_(ps_stats_response))                \
    X(WORKER_CONFIGURE_JOB, worker_configure_job, RPC_SVC_WORKER, "ConfigureJob", UNARY, CHIEF,    \
      RPC_T_(ConfigureJobRequest), RPC_D_(configure_job_request), RPC_T_(ConfigureJobResponse),    \
      RPC_D_(configure_job_response))                                                              \
    X(WORKER_RUN_CLOSURE, worker_run_closure, RPC_SVC_WORKER, "RunClosure", UNARY, CHIEF,          \
      RPC_T_(RunClosureRequest), RPC_D_(run_closure_request), RPC_T_(RunClosureResponse),          \
      RPC_D_(run_closure_response))                                                                \
    X(WORKER_CANCEL, worker_cancel, RPC_SVC_WORKER, "Cancel", UNARY, CHIEF, RPC_T_(CancelRequest), \
      RPC_D_(cancel_request), RPC_T_(CancelResponse), RPC_D_(cancel_response))                     \
    X(WORKER_COLLECTIVE, worker_collective, RPC_SVC_WORKER, "Collective", BIDI_STREAM, WORKER,     \
      RPC_T_(CollectiveChunk), RPC_D_(collective_chunk), RPC_T_(CollectiveAck),                    \
      RPC_D_(collective_ack))                                                                      \
    X(COORD_SUBMIT_JOB, coord_submit_job, RPC_SVC_COORD, "SubmitJob", UNARY, CLIENT,               \
      RPC_T_(SubmitJobRequest), RPC_D_(submit_job_request), RPC_T_(SubmitJobResponse),             \
      RPC_D_(submit_job_response))                                                                 \
    X(COORD_GET_JOB, coord_get_job, RPC_SVC_COORD, "GetJob", UNARY, PEERS, RPC_T_(GetJobRequest),  \
      RPC_D_(get_job_request), RPC_T_(GetJobResponse), RPC_D_(get_job_response))                   \
    X(COORD_LIST_JOBS, coord_list_jobs, RPC_SVC_COORD, "ListJobs", UNARY, PEERS,                   \
      RPC_T_(ListJobsRequest), RPC_D_(list_jobs_request), RPC_T_(ListJobsResponse),                \
      RPC_D_(list_jobs_response))                                                                  \
    X(COORD_CANCEL_JOB, coord_cancel_job, RPC_SVC_COORD, "CancelJob", UNARY, CLIENT,               \
      RPC_T_(CancelJobRequest), RPC_D_(cancel_job_request), RPC_T_(CancelJobResponse),             \
      RPC_D_(cancel_job_response))                                                                 \
    X(COORD_WATCH_JOB, coord_watch_job, RPC_SVC_COORD, "WatchJob", SERVER_STREAM, PEERS,           \
      RPC_T_(WatchJobRequest), RPC_D_(watch_job_request), RPC_T_(WatchJobUpdate),                  \
      RPC_D_(watch_job_update))                                                                    \
    X(COORD_GET_CLUSTER, coord_get_cluster, RPC_SVC_COORD, "GetCluster", UNARY, PEERS,             \
      RPC_T_(GetClusterRequest), RPC_D_(get_cluster_request), RPC_T_(GetClusterResponse),          \
      RPC_D_(get_cluster_response))                                                                \
    X(COORD_CHECKPOINT, coord_checkpoint, RPC_SVC_COORD, "Checkpoint", UNARY, CLIENT,              \
      RPC_T_(CheckpointRequest), RPC_D_(checkpoint_request), RPC_T_(CheckpointResponse),           \
      RPC_D_(checkpoint_response))                                                                 \
    X(COORD_EXPORT, coord_export, RPC_SVC_COORD, "Export", UNARY, CLIENT, RPC_T_(ExportRequest),   \
      RPC_D_(export_request), RPC_T_(ExportResponse), RPC_D_(export_response))                     \
    X(COORD_REGISTER_WORKER, coord_register_worker, RPC_SVC_COORD, "RegisterWorker", UNARY,        \
      WORKER, RPC_T_(RegisterWorkerRequest), RPC_D_(register_worker_request),                      \
      RPC_T_(RegisterWorkerResponse), RPC_D_(register_worker_response))                            \
    X(DIAG_ECHO, diag_echo, RPC_SVC_DIAG, "Echo", UNARY, PEERS, RPC_T_(EchoRequest),               \
      RPC_D_(echo_request), RPC_T_(EchoResponse), RPC_D_(echo_response))                           \
    X(DIAG_SINK, diag_sink, RPC_SVC_DIAG, "Sink", UNARY, PEERS, RPC_T_(SinkRequest),               \
      RPC_D_(sink_request), RPC_T_(SinkResponse), RPC_D_(sink_response))

typedef enum {
#define RPC_ID_ENUM_(id, stub, svc, name, kind, callers, RqT, rqd, RsT, rsd) RPC_##id,
    RPC_METHOD_LIST(RPC_ID_ENUM_)
#undef RPC_ID_ENUM_
        RPC_METHOD_COUNT_
} rpc_method_id_t;

typedef enum {
    RPC_KIND_UNARY,
    RPC_KIND_SERVER_STREAM,
    RPC_KIND_BIDI_STREAM,
} rpc_kind_t;

typedef struct rpc_method {
    rpc_method_id_t id;
    const char *path;    /* "/tessera.v1.ParameterServer/Push" */
    const char *service; /* "tessera.v1.ParameterServer" */
    const char *name;    /* "Push" */
    rpc_kind_t kind;
    unsigned callers; /* RPC_ROLE_* bits allowed to call it under mutual TLS */
    const ProtobufCMessageDescriptor *request;
    const ProtobufCMessageDescriptor *response;
} rpc_method_t;

/* The table row of a method id, or NULL when out of range. */
const rpc_method_t *rpc_method_get(rpc_method_id_t id);

/* Looks a method up by its path (not NUL-terminated: gRPC hands over slices). NULL if unknown. */
const rpc_method_t *rpc_method_find(const char *path, size_t len);

/* True when some method of the table belongs to `service` ("tessera.v1.ParameterServer"). */
int rpc_service_known(const char *service);

#endif
