/* The closure queue of an epoch, like TensorFlow's ClusterCoordinator: one dispatcher thread per
 * worker takes closures of steps_per_execution steps from the epoch's remaining steps and runs
 * them on its worker. A worker that is gone (UNAVAILABLE or a timeout) is marked dead and its
 * closure goes back on the queue for the others; the epoch fails only when every worker is gone,
 * or on any other error. A lost worker's dispatcher waits while the others work: set alive[w]
 * again (with the mutex held, broadcasting the condition variable) and it takes closures. With
 * a staleness bound, a worker more than max_staleness steps ahead of the slowest live one waits.
 * The caller's mutex guards the state; its condition variable is broadcast at every hand-off. */
#ifndef TESSERA_CHIEF_DISPATCH_H
#define TESSERA_CHIEF_DISPATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "daemon/metrics.h"
#include "job/job.h"
#include "tessera/v1/coordinator.pb-c.h"

typedef struct dispatch_closure {
    uint64_t id;
    int steps;
    int64_t global_step, epoch;
    int shard;                      /* the shard to read (by_shard), from pos[shard]; -1: own */
    int64_t data_epoch, data_batch; /* with shard >= 0: where the closure starts reading it */
    bool tail;                      /* it reads the last unread batches of the shard */
} dispatch_closure_t;

typedef struct dispatch_result {
    int steps; /* fewer than asked: the worker ran out of data */
    int64_t examples;
    double loss_sum, correct;
    int64_t data_epoch, data_batch; /* where the shard it read stands after it */
    uint64_t *rng;                  /* its dropout streams (malloc'd; the dispatch takes them) */
    size_t n_rng;
    double *metric_sums; /* of the job's other metrics (malloc'd; the dispatch frees them) */
    size_t n_metric_sums;
} dispatch_result_t;

/* Where shard w of the data stands, for checkpoints (the next batch read from it, and where the
 * unread part of its epoch ends when other workers have read its last batches), and worker w's
 * dropout streams (NULL before its first closure). */
typedef struct dispatch_pos {
    int64_t epoch, batch;
    int64_t end; /* the unread batches of epoch `epoch` end before this one; 0: the shard's end */
    uint64_t *rng;
    size_t n_rng;
} dispatch_pos_t;

/* Runs a training closure on `worker`, without the mutex held. */
typedef status_t (*dispatch_call_fn)(void *arg, size_t worker, const dispatch_closure_t *cl,
                                     dispatch_result_t *ret, status_msg_t *err);
/* A worker is gone (called with the mutex held). */
typedef void (*dispatch_lost_fn)(void *arg, size_t worker, const char *why);

typedef struct dispatch {
    /* set before dispatch_epoch */
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    int steps_per_closure;
    int64_t max_staleness;              /* 0: none */
    _Atomic bool *cancel;               /* the job is being cancelled */
    const bool *stopping;               /* read with mu held */
    Tessera__V1__JobProgress *progress; /* step, epoch read; step, loss, accuracy, rate written */
    dispatch_call_fn call;
    dispatch_lost_fn lost;
    void (*changed)(void *arg); /* progress moved (mutex held); may be NULL */
    void *arg;
    /* pauses (for checkpoints), set with the mutex held; dispatch_run returns at the first */
    int64_t stop_step;   /* hand out no step past this global step; 0: none */
    double stop_time;    /* clock_now_s() after which no closure starts; 0: none */
    _Atomic bool *pause; /* set: no closure starts (may be NULL) */
    /* every worker lost: wait this long for one to come back (dispatch_revive) before the epoch
     * fails; 0: fail at once */
    double lost_grace_s;
    /* the chief's metrics (each may be NULL): closures done, handed back, in flight, queued */
    metric_t *m_done, *m_retried, *m_running, *m_queued;
    /* Epochs by shard: each epoch reads every shard's shard_batches[s] batches exactly once,
     * each worker its own shard from its front, the shard of a lost worker read by the others
     * from where it stands (one closure at a time); a worker with none of those to read (one
     * that joined, or whose shard is done) reads the last unread batches of the shard with most
     * left (one such closure per shard at a time), so that no worker idles while batches are
     * left. Otherwise the steps are a pool and each worker reads its own shard only, as many
     * steps as it takes. */
    bool by_shard;
    int64_t *shard_batches; /* per shard, set by the caller when by_shard */
    /* The workers: n_shards at the start (one shard each), room for cap; workers that join take
     * the next slots (dispatch_revive) and have no shard of their own. */
    size_t n_shards, cap;
    /* state */
    size_t n_workers; /* slots in use: n_shards, and the joined ones */
    bool *alive;
    bool *busy;            /* a closure of the worker is in flight */
    int64_t *worker_steps; /* steps each worker ran, for the staleness bound */
    uint64_t next_closure;
    int64_t steps_left; /* of this epoch, not yet handed out */
    int in_flight;
    int64_t steps_in_flight;
    dispatch_pos_t *pos; /* per shard (= worker) */
    int64_t *left;       /* by_shard: per shard, batches of this epoch not yet handed out */
    int *reader;         /* by_shard: per shard, the worker reading its front now, or -1 */
    int *tail_reader;    /* by_shard: per shard, the worker reading its last batches, or -1 */
    size_t n_threads;    /* dispatchers running (dispatch_run) */
    bool epoch_by_shard; /* by_shard, and the shards' positions add up to this epoch */
    bool failed;
    status_msg_t err;
    size_t failed_worker;  /* the worker whose closure failed the epoch; SIZE_MAX: none */
    double all_lost_at;    /* clock_now_s() when the last live worker was lost; 0: one is alive */
    status_msg_t lost_err; /* what fails the epoch if none comes back */
    double epoch_loss, epoch_correct, epoch_t0;
    int64_t epoch_examples;
    /* the job's other metrics (set before dispatch_init; NULL: none): their sums over the epoch
     * so far (job->metric_width, made by dispatch_init), each closure's added in and
     * progress's values set from them */
    const job_t *job;
    double *epoch_metrics;
} dispatch_t;

/* Sets p's metrics (test: test_metrics, and their count) to the results of the job's metric
 * sums; p's lists must be the job's (chief_job_metrics_init). Call with the mutex held. */
void dispatch_progress_metrics(Tessera__V1__JobProgress *p, const job_t *job, const double *sums,
                               bool test);

/* Adds a closure's metric sums (worker w's) into the epoch's and sets the progress's values
 * from them; a list of another length is left out with a warning. Mutex held. */
void dispatch_add_metrics(dispatch_t *d, const double *sums, size_t n, size_t w);

/* n_workers, every one alive, a shard each; room for cap workers in all (cap >= n_workers). */
status_t dispatch_init(dispatch_t *d, size_t n_workers, size_t cap, status_msg_t *err);
void dispatch_done(dispatch_t *d);

/* Hands out `steps` steps over the live workers and waits for them. STATUS_CANCELLED when the
 * job is cancelled or the chief stops. */
status_t dispatch_epoch(dispatch_t *d, int64_t steps, status_msg_t *err);

/* The same in parts: dispatch_begin starts an epoch of `steps` steps (its sums at zero; by
 * shard, each shard's batches from where it stands, when they add up to `steps`), and
 * dispatch_run hands out what is left of it until it is done, or until a pause is due (stop_step,
 * stop_time, *pause): then it returns STATUS_OK with steps_left > 0 and nothing in flight, every
 * worker's position current, and a later dispatch_run goes on. */
void dispatch_begin(dispatch_t *d, int64_t steps);
status_t dispatch_run(dispatch_t *d, status_msg_t *err);

/* Whether dispatch_run stopped for a pause (with the mutex held or after it returned). */
bool dispatch_paused(const dispatch_t *d);

/* Worker w is configured again and alive (mutex held): its dispatcher takes closures again,
 * its staleness count starts from the slowest live worker's. A w past n_workers (< cap) is a
 * worker that joined: the slots up to it are taken, and a running dispatch_run starts its
 * dispatcher. */
void dispatch_revive(dispatch_t *d, size_t w);

/* Live workers, in index order: the first, or SIZE_MAX when none is left. */
size_t dispatch_first_alive(const dispatch_t *d);

#endif
