/* The parts of the chief's coordinator, shared between its files:
 *   jobs.c       the job table: jobs, their states and events, what a client may queue
 *   fanout.c     one call to many tasks at once (fanout.h)
 *   placement.c  the variables' shards: planned, created on the PS tasks, dropped (placement.h)
 *   dispatch.c   the closure queue of an epoch: per-worker dispatchers, retry, staleness bound
 *   runner.c     running a job: configure the workers, place, train epochs, evaluate
 *   handlers.c   the Coordinator service's unary calls
 *   watch.c      WatchJob streams, woken by job changes
 * One mutex (coordinator.mu) guards the table, the jobs and the watchers. */
#ifndef TESSERA_CHIEF_INTERNAL_H
#define TESSERA_CHIEF_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "coordinator.h"
#include "daemon/metrics.h"
#include "files/pb.h"
#include "job/job.h"
#include "rpc/client.h"
#include "rpc/server.h"
#include "tessera/v1/coordinator.pb-c.h"

#define CHIEF_MAX_EVENTS  64   /* kept per job */
#define CHIEF_MAX_QUEUED  1024 /* the most --max-queued-jobs may allow */
#define CONFIGURE_TIMEOUT 600000
#define CLOSURE_TIMEOUT   600000
#define CONTROL_TIMEOUT   30000

typedef struct job_file_copy {
    char *path;
    uint8_t *data;
    size_t len;
} job_file_copy_t;

typedef struct chief_job {
    struct chief_job *next;
    char id[160];
    char name[128];
    /* what the workers are configured with; released when the job ends */
    char *spec, *path;
    job_file_copy_t *files;
    size_t n_files;
    job_t job;
    /* the optimizer's updates before this job's first step: those of a Keras archive it goes
     * on from (job.init_optimizer), kept in each checkpoint's iterations beyond its step */
    int64_t updates_from;
    Tessera__V1__JobState state;
    char reason[512];
    char failed_task[32]; /* a failed job's: "worker:1", "ps:0", "chief:0" */
    int fault;            /* Tessera__V1__Fault */
    Tessera__V1__JobProgress progress;
    /* progress's metrics and test_metrics point here (chief_job_metrics_init) */
    Tessera__V1__MetricValue metric_values[2][JOB_MAX_METRICS];
    Tessera__V1__MetricValue *metric_ptrs[2][JOB_MAX_METRICS];
    char metric_names[JOB_MAX_METRICS][64];
    double submitted_at, started_at, finished_at;
    _Atomic bool cancel;
    char *events[CHIEF_MAX_EVENTS];
    double event_times[CHIEF_MAX_EVENTS];
    size_t n_events;  /* total ever; the last CHIEF_MAX_EVENTS are kept */
    int holds;        /* WatchJob streams and handlers using it unlocked: not pruned */
    bool recovered;   /* it ran when the chief stopped or crashed: it goes on from a checkpoint */
    bool user_cancel; /* cancelled by a client, not by the chief stopping */
    /* Checkpoint calls: set ckpt_wanted and wait for ckpt_done to move (runner.c) */
    _Atomic bool ckpt_wanted;
    uint64_t ckpt_done; /* checkpoints taken (or failed) so far */
    status_t ckpt_rc;   /* of the last */
    int64_t ckpt_step;
    char ckpt_error[512];
} chief_job_t;

typedef struct watcher watcher_t;

struct coordinator {
    daemon_t *daemon;
    chief_opts_t *opts;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the job queue changed, a closure came back, a job is cancelled */
    chief_job_t *jobs, *last;
    unsigned next_id;
    bool stopping;
    pthread_t runner;
    bool runner_started;
    rpc_channel_t **ps, **workers; /* workers: room for cap_workers */
    size_t n_ps, n_workers, cap_workers;
    /* workers that announced themselves (RegisterWorker), taken into the cluster by the runner
     * between jobs and by the running job's watchdog (chief_adopt_workers), under mu */
    char **joining;
    size_t n_joining;
    /* metrics.c: the failures and recoveries of the tasks, and the running job's closures */
    metric_t *m_closures, *m_retried, *m_running, *m_queued, *m_workers_alive;
    metric_t *m_ps_recoveries, *m_worker_rejoins, *m_worker_joins;
    metric_t **m_worker_failures, **m_ps_failures; /* per task */
    metric_t **m_worker_seen; /* per worker: wall time of its last answered health check */
    /* journal.c: the job table on the disk (--state-dir), or NULL */
    struct journal *journal;
    uint64_t journal_compact; /* its size when last rewritten */
    /* watch.c */
    pthread_cond_t watch_cv; /* a job changed (changes counts them) or a watcher ended */
    uint64_t changes;
    watcher_t *watchers;
    size_t n_watchers;
    pthread_t watch_thread;
    bool watch_started;
};

/* ---- coordinator.c ------------------------------------------------------------------------ */

/* A worker announcing itself at address (c->mu held): its index (known already, or the one it
 * will have), *added when it is new. Errors: a bad address, no room left. */
status_t chief_register_worker(coordinator_t *c, const char *address, size_t *ret_index,
                               bool *ret_added, status_msg_t *err);
/* The runner between jobs, or the running job's watchdog, with c->mu held: the announced
 * workers join the cluster (their channels are opened; c->workers never moves). */
void chief_adopt_workers(coordinator_t *c);

/* ---- metrics.c ---------------------------------------------------------------------------- */

/* Registers the chief's metrics (after the channels are open); a metric that cannot be made is
 * NULL, which every update ignores. */
status_t chief_metrics_init(coordinator_t *c, status_msg_t *err);
void chief_metrics_free(coordinator_t *c);
/* The per-task series of worker w, which has just joined (room for cap_workers). */
void chief_metrics_add_worker(coordinator_t *c, size_t w);
/* Sets the live-workers gauge from a job's dispatch (mutex held); 0 when no job runs. */
void chief_metrics_alive(coordinator_t *c, const bool *alive, size_t n);

/* ---- jobs.c ------------------------------------------------------------------------------- */

/* Records an event of a job and wakes the watchers; call with c->mu held. */
void chief_job_event(coordinator_t *c, chief_job_t *j, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The event of epoch `epoch` (from 0) ended, with its numbers (the test split's when
 * `evaluated`; the accuracies when the job has one). Call with c->mu held. */
void chief_epoch_event(coordinator_t *c, chief_job_t *j, int64_t epoch, bool evaluated);

/* Wakes the watchers: j's progress moved. Call with c->mu held. */
void chief_job_changed(coordinator_t *c);

bool chief_job_ended(const chief_job_t *j);

/* Sets an ended state, records the event, releases the files, prunes the table. c->mu held. */
void chief_job_end(coordinator_t *c, chief_job_t *j, Tessera__V1__JobState state, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));

/* Builds a queued job from a SubmitJob request (parsed, files copied). */
status_t chief_job_new(const Tessera__V1__SubmitJobRequest *req, chief_job_t **ret,
                       status_msg_t *err);
void chief_job_free(chief_job_t *j);

/* Appends j to the table with its id; RESOURCE_EXHAUSTED when CHIEF_MAX_QUEUED wait. c->mu
 * held. */
status_t chief_jobs_add(coordinator_t *c, chief_job_t *j, status_msg_t *err);

/* A job by id, or by name (its most recent job); NULL if none. c->mu held. */
chief_job_t *chief_find_job(coordinator_t *c, const char *id);
chief_job_t *chief_next_queued(coordinator_t *c);

/* Fills info from j; the strings point into j. c->mu held. */
void chief_job_info(const chief_job_t *j, Tessera__V1__JobInfo *info, Tessera__V1__JobProgress *pr);

/* Gives j->progress a value for each of the job's metrics beyond loss and accuracy, named as
 * the job names them, all 0 (the test ones once an evaluation sets them). Call with c->mu held,
 * or before the job is shared. */
void chief_job_metrics_init(chief_job_t *j);
/* The same with the names and values of p (a journal's progress of a job whose file is not
 * read again: one that had ended). */
void chief_job_metrics_adopt(chief_job_t *j, const Tessera__V1__JobProgress *p);

/* Links j at the end of the table as it is (no id, no journal record). c->mu held. */
void chief_jobs_link(coordinator_t *c, chief_job_t *j);
/* Frees the job file and its files (kept while the workers may need them). */
void chief_job_release(chief_job_t *j);
/* Drops the oldest ended jobs past CHIEF_MAX_FINISHED that no watcher holds. c->mu held. */
void chief_jobs_prune(coordinator_t *c);

/* ---- journal.c ---------------------------------------------------------------------------- */

/* Opens the journal in opts->state_dir, if any: its jobs join the table (the one that was
 * running queued first, recovered), and it is rewritten compact. Before the runner starts. */
status_t chief_journal_open(coordinator_t *c, status_msg_t *err);
void chief_journal_close(coordinator_t *c);
/* Replays a journal held in memory into the table (name: for errors), as opening does. */
status_t chief_journal_replay(coordinator_t *c, const uint8_t *buf, size_t len, const char *name,
                              status_msg_t *err);
/* The table as framed journal records (without the header), one per job: a rewrite's. */
status_t chief_journal_encode(coordinator_t *c, pb_buf_t *out, status_msg_t *err);
/* Appends (fsynced) a submitted job, with its files; a start; an end. c->mu held; nothing
 * without a journal. A start or an end that cannot be written is logged. */
status_t chief_journal_submitted(coordinator_t *c, chief_job_t *j, status_msg_t *err);
void chief_journal_started(coordinator_t *c, chief_job_t *j);
/* A worker joined the cluster (its address); logged when it cannot be written. */
void chief_journal_worker(coordinator_t *c, const char *address);
void chief_journal_ended(coordinator_t *c, chief_job_t *j);

/* ---- runner.c ----------------------------------------------------------------------------- */

void *chief_runner_main(void *arg);
/* Tells every worker to stop the job's closures now. */
void chief_cancel_workers(coordinator_t *c, chief_job_t *j);

/* ---- handlers.c, watch.c ------------------------------------------------------------------ */

void chief_handlers_register(coordinator_t *c, rpc_server_t *s);
status_t chief_watch_start(coordinator_t *c, rpc_server_t *s, status_msg_t *err);
/* Ends the streams and joins the watch thread (c->stopping set). */
void chief_watch_stop(coordinator_t *c);
void chief_watch_free(coordinator_t *c);

#endif
