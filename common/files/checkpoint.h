/* Checkpoints on disk: DIR/ckpt-<step>/ holds one safetensors file per writer (tessera train:
 * one; a parameter-server job: one per PS task) and manifest.json, written last; a checkpoint
 * without its manifest is incomplete and never read. DIR/checkpoint names the newest in
 * TensorFlow's text form (model_checkpoint_path: "ckpt-<step>") for people and tools.
 *
 * In a shard file, a variable's values are the tensor the manifest names (the variable's own
 * name when whole, "NAME/part_K" for a part), and each optimizer slot of it is
 * "optimizer/TENSOR/SLOT" with the slot names of Keras (momentum, velocity, velocity_hat,
 * accumulator, average_gradient).
 *
 * Atomic: shard files are written under temporary names, fsynced and renamed; the manifest the
 * same way after them, and the directories are fsynced in between. Killed at any moment, the
 * writer leaves the previous checkpoint complete. */
#ifndef TESSERA_FILES_CHECKPOINT_H
#define TESSERA_FILES_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "files/pb.h"
#include "files/safetensors.h"

#define CKPT_MANIFEST "manifest.json"
#define CKPT_FORMAT   "tessera-checkpoint-1"

/* One stored piece of a variable: rows [row, row + rows of the tensor) of the whole. */
typedef struct ckpt_part {
    char *file;   /* shard file, relative to the checkpoint's directory */
    char *tensor; /* the values' name in that file */
    uint64_t row; /* first row of the variable it holds */
} ckpt_part_t;

typedef struct ckpt_var {
    char *name;
    int rank;
    uint64_t shape[ST_MAX_RANK];
    ckpt_part_t *parts;
    size_t n_parts;
} ckpt_var_t;

/* Where one worker's data pipeline stands: the next batch to read; and, in a parameter-server
 * job, the worker's dropout streams (one-device training keeps them in ckpt_manifest_t.rng). */
typedef struct ckpt_data_pos {
    int64_t worker, epoch, batch;
    int64_t end; /* the epoch's unread batches end before this one (others read the rest); 0: all */
    uint64_t *rng;
    size_t n_rng;
} ckpt_data_pos_t;

/* Who wrote a shard file (a parameter-server job): where to find it when each PS wrote to its
 * own disk. */
typedef struct ckpt_writer {
    char *file, *task, *address;
} ckpt_writer_t;

#define CKPT_MAX_METRIC_SUMS ((size_t)1 << 20) /* what a manifest may hold */

typedef struct ckpt_manifest {
    int64_t step;
    char *job;
    uint64_t job_hash; /* of the job file's bytes */
    double wall_time;  /* seconds since the epoch when it was written */
    char *optimizer;   /* optimizer_kind_name() */
    int64_t iterations;
    double learning_rate; /* for the next step */
    char **slots;         /* slot names, in the optimizer's order */
    size_t n_slots;
    ckpt_var_t *vars;
    size_t n_vars;
    char **files; /* every shard file */
    size_t n_files;
    ckpt_data_pos_t *data;
    size_t n_data;
    uint64_t *rng; /* random streams to continue (dropout), in model order */
    size_t n_rng;
    double epoch_sums[3]; /* loss, correct, examples of the epoch so far */
    bool has_last_epoch;  /* an epoch has ended: its mean loss and accuracy */
    double last_loss, last_accuracy;
    /* the job's other metrics: their sums over the epoch so far, and the last epoch's values
     * (optional: absent in a job without them) */
    double *metric_sums, *last_metrics;
    size_t n_metric_sums, n_last_metrics;
    uint64_t metric_signature; /* of the metrics they are (job_metrics_signature) */
    ckpt_writer_t *writers;    /* optional */
    size_t n_writers;
} ckpt_manifest_t;

/* The manifest as JSON. */
void ckpt_manifest_encode(const ckpt_manifest_t *m, pb_buf_t *out);

/* Reads a manifest; `path` names it in errors (STATUS_DATA_LOSS: what is missing or wrong). File
 * and tensor names that could leave the checkpoint's directory ("/", "..") are refused. */
status_t ckpt_manifest_decode(const char *text, size_t len, const char *path, ckpt_manifest_t *ret,
                              status_msg_t *err);
void ckpt_manifest_free(ckpt_manifest_t *m);

/* Makes DIR/ckpt-<step>/ (and DIR) for a new checkpoint, emptying an incomplete one of that
 * step; *ret_path is the directory (free it). A complete checkpoint of that step is left alone:
 * STATUS_ALREADY_EXISTS. */
status_t ckpt_begin(const char *dir, int64_t step, char **ret_path, status_msg_t *err);

/* Completes DIR/ckpt-<step>/: fsyncs it, writes the manifest, fsyncs DIR, names it in
 * DIR/checkpoint, then removes every complete checkpoint but the newest `keep` and the
 * incomplete ones older than this one. */
status_t ckpt_commit(const char *dir, int64_t step, const void *manifest, size_t len, int keep,
                     status_msg_t *err);

/* The newest complete checkpoint under dir: its step and directory (free it). STATUS_NOT_FOUND
 * when there is none (or no dir). */
status_t ckpt_latest(const char *dir, int64_t *ret_step, char **ret_path, status_msg_t *err);

/* The steps of every complete checkpoint under dir, newest first (free *ret). */
status_t ckpt_complete_steps(const char *dir, int64_t **ret, size_t *ret_n, status_msg_t *err);

/* A parameter server's pruning of its own files: removes DIR/ckpt-<n>/FILE for every n < step
 * not in keep[] whose directory holds no manifest (one with a manifest is complete, and the
 * chief's to prune), and the directory when that empties it. Errors are ignored: what stays is
 * removed at the next call. */
void ckpt_prune_file(const char *dir, const char *file, int64_t step, const int64_t *keep,
                     size_t n_keep);

/* Reads DIR/manifest.json of a checkpoint directory. */
status_t ckpt_read_manifest(const char *ckpt_path, ckpt_manifest_t *ret, status_msg_t *err);

/* "optimizer/TENSOR/SLOT" into buf: the name of a slot's tensor in a shard file. */
const char *ckpt_slot_tensor(char *buf, size_t len, const char *tensor, const char *slot);

/* The name of part `part` of a variable stored in n_parts pieces: the variable's own name when
 * whole, "NAME/part_K" otherwise (TensorFlow's name for a partitioned variable's pieces). */
const char *ckpt_part_tensor(char *buf, size_t len, const char *variable, int part, int n_parts);

/* Whether the checkpoint at path was written by the job's optimizer (optimizer_kind_name() and
 * slot count): STATUS_BAD_CONFIG naming what differs. */
status_t ckpt_check_optimizer(const char *path, const ckpt_manifest_t *m, const char *optimizer,
                              size_t n_slots, status_msg_t *err);

/* Whether the slot named so (Keras's names) holds only values >= 0: a sum or average of squares,
 * of which the update takes a square root. */
bool ckpt_slot_nonnegative(const char *slot);

/* STATUS_DATA_LOSS naming file and tensor when v[0..n) holds a NaN or an infinity, or (with
 * nonnegative: ckpt_slot_nonnegative) a negative value. */
status_t ckpt_check_floats(const char *file, const char *tensor, const float *v, size_t n,
                           bool nonnegative, status_msg_t *err);

/* A parameter server's shard file also holds, for each part, the updates applied to it so far
 * (its optimizer step: Adam's bias correction, the learning-rate schedule) as an int64 scalar
 * "optimizer/TENSOR/iterations". */
#define CKPT_ITERATIONS "iterations"

#endif
