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

/* Where one worker's data pipeline stands: the next batch to read. */
typedef struct ckpt_data_pos {
    int64_t worker, epoch, batch;
} ckpt_data_pos_t;

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

/* Reads DIR/manifest.json of a checkpoint directory. */
status_t ckpt_read_manifest(const char *ckpt_path, ckpt_manifest_t *ret, status_msg_t *err);

/* "optimizer/TENSOR/SLOT" into buf: the name of a slot's tensor in a shard file. */
const char *ckpt_slot_tensor(char *buf, size_t len, const char *tensor, const char *slot);

#endif
