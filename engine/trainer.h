/* The trainer: what `tessera train` and tessera-worker share to train a job's model on its data.
 *
 * trainer_new loads the job's data (the training split, and the test split when there is one),
 * builds the model, checks that both splits fit it (values per example, and the labels of a
 * sparse categorical loss against the model's classes), and starts the pipeline over this
 * trainer's shard of the training data, shuffled from the job's data seed (each shard its own
 * way). Every buffer counts against one memory budget. Then
 * the caller loops: trainer_next, trainer_step, and either trainer_apply (the job's optimizer,
 * here) or sends the gradients elsewhere (a parameter server). trainer_evaluate runs the model
 * over the test split. Not thread-safe: one thread drives a trainer. */
#ifndef TESSERA_TRAINER_H
#define TESSERA_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "data.h"
#include "job/job.h"
#include "model.h"
#include "optim/optimizer.h"

typedef struct trainer_opts {
    int shard_index, num_shards;      /* which examples of the training split: i % num == index */
    uint64_t seed;                    /* of the model's initial values; 0: the job's seed */
    int64_t epochs;                   /* passes over the training data; -1: endless */
    uint64_t max_bytes;               /* data, model and batches together; 0: physical memory */
    bool optimizer;                   /* keep optimizer slots here, for trainer_apply */
    int64_t start_epoch, start_batch; /* where the pipeline begins (a resumed run) */
    /* mirrored, central_storage: replicas of the model on threads, each taking the job's
     * data.batch_size examples of every global batch (replicas.h); 0 or 1: one */
    int replicas;
    /* multi_worker_mirrored: this process is replica slice_index of slice_count: it reads the
     * whole training split in global batches of slice_count * data.batch_size and steps on its
     * slice of each, leaving gradients that sum over the processes (all-reduce) to the global
     * batch's; 0 or 1: off */
    int slice_index, slice_count;
    /* what the model computes on (backend_open of the job's device); NULL: the CPU */
    const backend_t *backend;
} trainer_opts_t;

#define TRAINER_MAX_REPLICAS 1024

typedef struct trainer trainer_t;

/* Fails with an error naming the job file (or "job") and what does not fit. */
status_t trainer_new(const job_t *job, const trainer_opts_t *opts, trainer_t **ret,
                     status_msg_t *err);
void trainer_free(trainer_t *t); /* NULL-safe */

model_t *trainer_model(const trainer_t *t); /* replica 0's, where the variables are */
int trainer_replicas(const trainer_t *t);
/* The examples of one step: data.batch_size times the replicas and the slices. */
int trainer_global_batch(const trainer_t *t);
/* The replicas a mirrored or central_storage job runs on this host: the job's, or `threads`
 * (one per compute thread). */
int trainer_local_replicas(const job_t *job, int threads);
const data_pipeline_t *trainer_pipeline(const trainer_t *t);
size_t trainer_train_examples(const trainer_t *t); /* in this trainer's shard */
size_t trainer_test_examples(const trainer_t *t);  /* 0 without a test split */

/* The next training batch, valid until the following call; false when the epochs are done. */
bool trainer_next(trainer_t *t, data_batch_t *ret_batch);

/* Other shards (a parameter-server worker reading for one that is away): trainer_seek puts the
 * reader of `shard` (0 <= shard < num_shards, this trainer's own included) at batch `batch` of
 * epoch `epoch`, where it gives the batches the trainer of that shard would, in the same order;
 * another shard's reader is made on first use (loading that shard's files when the data is
 * sharded by file), and made again only when asked for a place where it does not stand.
 * trainer_next_of reads from it (false: no reader, or its epochs are done); trainer_position
 * says where a reader stands (the next batch). */
status_t trainer_seek(trainer_t *t, int shard, int64_t epoch, int64_t batch, status_msg_t *err);
bool trainer_next_of(trainer_t *t, int shard, data_batch_t *ret_batch);
void trainer_position(const trainer_t *t, int shard, int64_t *ret_epoch, int64_t *ret_batch);

/* Examples in every shard, ret[num_shards]: all of them when the examples are sharded one by
 * one (every trainer holds the whole split), else this trainer's own and -1 for the others
 * (their files are not read here). */
void trainer_shard_examples(const trainer_t *t, int64_t *ret);
/* The examples in one shard, loading its files when the data is sharded by file and they are
 * another shard's (as trainer_seek would, which then reuses them). */
status_t trainer_size_shard(trainer_t *t, int shard, int64_t *ret, status_msg_t *err);

/* Forward, loss and backward on b: afterwards the model's parameters hold the gradients. A loss
 * that is not finite fails with STATUS_INVALID_ARGUMENT naming this trainer's step and the
 * epoch, and no gradient is computed. */
status_t trainer_step(trainer_t *t, const data_batch_t *b, model_stats_t *ret_stats,
                      status_msg_t *err);

/* multi_worker_mirrored after workers were lost: this process now steps on slices first,
 * first + stride, ... of each global batch (the global batch stays what it was). */
status_t trainer_set_slices(trainer_t *t, int first, int stride, status_msg_t *err);

/* The last step's gradient of an Embedding table (param), its rows over every slice this
 * process stepped on, added into g (the table's shape); mask[row] becomes 1 for each row that
 * has one. */
void trainer_rows_into(const trainer_t *t, size_t param, float *g, float *mask);

/* train.accumulate_steps k: adds the last step's gradients to the window, each batch's weighted
 * by its examples, and says whether the window is complete: then the model's gradients hold the
 * mean of its k batches', as one batch k times larger would give, and the window starts again.
 * Without accumulation: true, the gradients as they are. Wherever the optimizer runs (here, a
 * parameter server, after an all-reduce). */
bool trainer_accumulate(trainer_t *t);
/* Completes a window that holds fewer than k batches (the end of a closure): its mean into the
 * model's gradients, true; false when the window is empty. */
bool trainer_close_window(trainer_t *t);
/* Forgets the window's gradients (a closure rolled back). */
void trainer_drop_window(trainer_t *t);
/* The batches in the window so far. */
int trainer_window_batches(const trainer_t *t);
/* The batches the window that closed last held (1 without accumulation): what the gradients
 * stand for, and how many updates a moving statistic's pushed value is worth. */
int trainer_window_closed(const trainer_t *t);

/* Applies the model's gradients with the job's optimizer now (opts.optimizer must be set). */
status_t trainer_update(trainer_t *t, status_msg_t *err);
/* trainer_accumulate, then trainer_update when the window is complete. */
status_t trainer_apply(trainer_t *t, status_msg_t *err);

/* The optimizer as this trainer applies it, and param i's slot arrays (optimizer_slot_count of
 * them, laid end to end; NULL without opts.optimizer). */
const optimizer_config_t *trainer_optimizer(const trainer_t *t);
float *trainer_slots(trainer_t *t, size_t param);
bool trainer_keeps_optimizer(const trainer_t *t); /* opts.optimizer was set */

/* Updates applied so far (Adam's bias correction counts them); a restored checkpoint sets it. */
int64_t trainer_iterations(const trainer_t *t);
void trainer_set_iterations(trainer_t *t, int64_t n);
/* The updates alone (an optimizer's state from elsewhere): the steps counted here stay. */
void trainer_set_updates(trainer_t *t, int64_t n);

/* The job optimizer's learning rate at step `step` (0-based). */
double trainer_learning_rate(const trainer_t *t, int64_t step);

/* Called before each test batch is evaluated: may fetch the variables it reads, or fail to
 * stop the evaluation (a cancelled job). */
typedef status_t (*trainer_batch_fn)(void *arg, const data_batch_t *b, status_msg_t *err);

/* Runs the model over the whole test split, summing the batches' stats into ret_sum and adding
 * the sums of the job's other metrics into ret_metrics (job_t.metric_width of them; NULL: not
 * computed). Fails with STATUS_INVALID_USAGE when the job has no test split. */
status_t trainer_evaluate(trainer_t *t, trainer_batch_fn before, void *arg, model_stats_t *ret_sum,
                          double *ret_metrics, status_msg_t *err);

/* Adds the sums of the job's other metrics over the training steps since the last call (every
 * replica's and slice's) into into[job_t.metric_width], and starts them again. */
void trainer_take_metrics(trainer_t *t, double *into);

#endif
