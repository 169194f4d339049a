/* A training job as the user wrote it (README: "Training on one machine"): YAML or JSON, with the
 * model as Keras-style layers or a Keras `model.to_json()` file. Parsing is strict: a misspelt key,
 * an unknown layer, activation, loss or optimizer, a Keras option Tessera does not implement, or a
 * value of the wrong type is an error that names the file and the key path
 * ("job.yaml: model[1].dense.unit: unknown key (did you mean 'units'?)"). Shapes are checked by
 * the model builder, not here. */
#ifndef TESSERA_JOB_H
#define TESSERA_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "job/model.h"
#include "job/partitioner.h"
#include "optim/optimizer.h"

typedef enum {
    JOB_LOSS_MSE,
    JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
    JOB_LOSS_BINARY_CROSSENTROPY,
    /* a value's loss against its label, as mse: */
    JOB_LOSS_MAE,
    JOB_LOSS_HUBER, /* job_t.huber_delta */
    JOB_LOSS_LOG_COSH,
    JOB_LOSS_HINGE, /* labels -1 or 1 (0 is taken as -1, as Keras does) */
    JOB_LOSS_SQUARED_HINGE,
    JOB_LOSS_POISSON,
    /* Keras's categorical cross-entropy of one-hot labels: the data's class ids, one-hot as
     * keras.utils.to_categorical makes them, or the data's rows of class probabilities
     * (job_t.label_smoothing) */
    JOB_LOSS_CATEGORICAL_CROSSENTROPY,
    JOB_LOSS_KL_DIVERGENCE, /* of the labels' distribution from the output's */
} job_loss_kind_t;

/* Whether the loss has an accuracy (the cross-entropies). */
bool job_loss_has_accuracy(job_loss_kind_t loss);

/* The loss's name in a job file ("mean_squared_error"), for messages. */
const char *job_loss_name(job_loss_kind_t loss);

typedef enum {
    JOB_DATA_IDX,       /* images + labels IDX files, gzipped or not */
    JOB_DATA_SYNTHETIC, /* generated: see job_synthetic_t */
    JOB_DATA_TFRECORD,  /* TFRecord files of tf.train.Example, plain or GZIP */
    JOB_DATA_NPY,       /* two NumPy .npy files: inputs and labels */
    JOB_DATA_NPZ,       /* two arrays of a NumPy .npz archive */
    JOB_DATA_CSV,       /* CSV files with a header row, the label column named */
} job_data_format_t;

/* One feature of a tf.train.Example as the job maps it. */
typedef enum {
    JOB_FEATURE_FLOAT_LIST,
    JOB_FEATURE_INT64_LIST,
    JOB_FEATURE_BYTES_LIST, /* one string of raw uint8 values */
} job_feature_kind_t;

typedef struct job_feature {
    char *name;
    job_feature_kind_t kind;
    int shape[JOB_MAX_RANK]; /* of one example's values, row-major */
    int rank;
} job_feature_t;

/* The most values one example's label may hold (a TFRecord label feature's shape). */
#define JOB_MAX_LABEL_VALUES (1 << 24)

typedef enum {
    JOB_SYNTHETIC_CLASSIFICATION, /* dense features, labels from a fixed random teacher */
    JOB_SYNTHETIC_TEXT,           /* integer token sequences, binary labels from token weights */
} job_synthetic_kind_t;

typedef struct job_synthetic {
    job_synthetic_kind_t kind;
    int64_t examples;
    int shape[JOB_MAX_RANK]; /* feature shape (text: [sequence_length]) */
    int rank;
    int classes;    /* classification */
    int vocabulary; /* text */
    uint64_t seed;
} job_synthetic_t;

typedef struct job_source {
    bool present;
    job_data_format_t format;
    char *images; /* IDX paths, resolved against the job file's directory */
    char *labels;
    job_synthetic_t synthetic;
    /* tfrecord: paths or glob patterns (resolved), read in sorted order; the model's inputs
     * (several: one a model input, named as the model names it and put in its order) and the
     * labels: one feature an output, in the model's order (each one value, or as many as its
     * output has; at most JOB_MAX_LABEL_VALUES in all). csv: the label columns' names. */
    char **files;
    size_t n_files;
    job_feature_t inputs[JOB_MAX_MODEL_INPUTS], label[JOB_MAX_OUTPUTS];
    int n_inputs, n_label;
    /* npy: the inputs' and labels' files (resolved); npz: the archive (resolved) and the
     * arrays' names in it. x: n_x of them, one a model input in the model's order (a list in
     * the job for a model of several inputs); y: n_y, one an output's labels likewise */
    char **x, **y, *archive;
    size_t n_x, n_y;
    char delimiter; /* csv: ',' unless the job says otherwise (files and label names as above) */
} job_source_t;

typedef struct job_data {
    job_source_t train, test;
    double scale;           /* features are multiplied by this (e.g. 1/255); default 1 */
    int batch_size;         /* per replica */
    int global_batch_size;  /* as Keras users size it: split over the replicas by
                             * job_set_replicas into batch_size; 0: batch_size given */
    int64_t shuffle_buffer; /* 0 = no shuffle */
    uint64_t seed;
    bool drop_remainder; /* drop the last partial batch (default false) */
    int prefetch;        /* batches read ahead on the pipeline's thread (default 2) */
} job_data_t;

typedef enum {
    JOB_STRATEGY_ONE_DEVICE,
    JOB_STRATEGY_PARAMETER_SERVER,
    JOB_STRATEGY_MIRRORED,
    JOB_STRATEGY_MULTI_WORKER_MIRRORED,
    JOB_STRATEGY_CENTRAL_STORAGE,
} job_strategy_t;

/* Where a job computes: `device: cpu | cuda | cuda:N`. */
typedef struct job_device {
    bool cuda;
    int ordinal; /* cuda:N's N; -1: a bare cuda (device 0, or a worker's own --device cuda:N) */
} job_device_t;

#define JOB_MAX_CUDA_ORDINAL 63

/* The most batches one update may accumulate (train.accumulate_steps, Keras's
 * gradient_accumulation_steps): a parameter server takes a window's push as that many moving
 * averages' updates, each a multiplication. */
#define JOB_MAX_ACCUMULATE_STEPS 65536

/* Parses "cpu", "cuda" or "cuda:N" (N from 0 to JOB_MAX_CUDA_ORDINAL); fails with
 * STATUS_BAD_CONFIG naming the text. */
status_t job_device_parse(const char *text, job_device_t *ret, status_msg_t *err);
/* "cpu", "cuda" or "cuda:N", in buf */
const char *job_device_str(const job_device_t *device, char *buf, size_t len);

/* The metrics beyond loss and accuracy (metrics.c). Each keeps sums, which add up across
 * batches, replicas and workers (the confusion counts of AUC, precision and recall, never
 * ratios); a result is computed from the sums at the end (an epoch, an evaluation). */
typedef enum {
    JOB_METRIC_TOP_K,     /* sparse_top_k_categorical_accuracy: [hits, examples] */
    JOB_METRIC_AUC,       /* [positives by bucket..., negatives by bucket...] */
    JOB_METRIC_PRECISION, /* [true positives, false positives, false negatives] */
    JOB_METRIC_RECALL,    /* the same */
    JOB_METRIC_MAE,       /* mean_absolute_error: [sum |y - p|, values] */
    JOB_METRIC_MSE,       /* mean_squared_error: [sum (y - p)^2, values] */
    JOB_METRIC_RMSE,      /* root_mean_squared_error: the same */
    /* a model of several outputs: output class_id's own loss, unweighted, as Keras reports it
     * ("NAME_loss"), added by the job for each output, never named in one: [sum, examples] */
    JOB_METRIC_OUTPUT_LOSS,
    /* a model of several outputs: output `output`'s accuracy (its loss's, as `accuracy` is for a
     * model of one; binary's at `threshold`): [right, examples] */
    JOB_METRIC_OUTPUT_ACCURACY,
} job_metric_kind_t;

typedef enum {
    JOB_AUC_ROC,
    JOB_AUC_PR,
    JOB_AUC_PRGAIN,
} job_auc_curve_t;

typedef enum {
    JOB_AUC_INTERPOLATION,
    JOB_AUC_MINORING,
    JOB_AUC_MAJORING,
} job_auc_summation_t;

#define JOB_MAX_METRICS        16
#define JOB_MAX_AUC_THRESHOLDS 10000
#define JOB_MAX_LABEL_WEIGHTS  65536
/* The most sums a job's metrics keep, all of them (AUC keeps 2 x num_thresholds x num_labels):
 * 8 MiB of doubles, what a checkpoint's manifest holds (CKPT_MAX_METRIC_SUMS). */
#define JOB_MAX_METRIC_SUMS (1 << 20)

typedef struct job_metric {
    job_metric_kind_t kind;
    char name[64];   /* as reported: Keras's default name, or the job's `name` */
    int k;           /* top-k */
    int top_k;       /* precision, recall: only an example's top_k highest predictions may
                      * count as positive (0: any) */
    int class_id;    /* precision, recall: the one class they count; -1: every output */
    int output;      /* a model of several outputs: the output it measures (its name prefixes
                      * the metric's: "cls_accuracy"); 0 for a model of one */
    float threshold; /* precision, recall: a prediction above it is positive */
    int thresholds;  /* auc: num_thresholds */
    /* auc's thresholds as a list: num_thresholds - 2 of them, ascending, from 0 to 1 (Keras adds
     * -epsilon and 1 + epsilon around them); NULL: num_thresholds evenly spaced; owned by the job
     */
    float *threshold_list;
    int num_labels; /* auc with multi_label: one curve an output, num_labels of them, averaged;
                     * 0: every output's predictions in one curve */
    /* auc's label_weights (NULL: none), one an output: with multi_label the curves' weights in
     * their mean, without it each output's weight in the one curve's counts (Keras's); owned
     * by the job */
    double *label_weights;
    int n_label_weights;
    job_auc_curve_t curve;
    job_auc_summation_t summation;
    /* precision, recall with a list of thresholds (Keras's one metric of a vector of values):
     * one metric a threshold, "NAME_T" each, list_len of them one after the other, this one
     * list_at among them; list_name is NAME, the Keras metric's (0 list_len: a metric of one) */
    int list_at, list_len;
    char list_name[64];
    size_t offset, width; /* its sums in the job's metric state (job_t.metric_width) */
} job_metric_t;

/* The loss of one output of a model of several (job_t.outputs). */
typedef struct job_output {
    job_loss_kind_t loss;
    bool from_logits;
    double huber_delta, label_smoothing; /* as job_t's */
    double weight;                       /* Keras's loss_weights: the total is the weighted sum */
} job_output_t;

typedef struct job {
    char *name;
    char *path; /* the job file, for messages */
    job_strategy_t strategy;
    int replicas;        /* mirrored, central_storage: {NAME: {replicas: N}}; 0: every core */
    job_device_t device; /* default: cpu */
    job_model_t model;
    /* Each output's loss, in the model's order of outputs (job_model_outputs of them; one for a
     * model of one output). The loss fields below are output 0's; the reduction is every
     * output's. */
    job_output_t outputs[JOB_MAX_OUTPUTS];
    int n_outputs;
    job_loss_kind_t loss;
    bool from_logits;
    double huber_delta; /* huber: where the loss turns linear (Keras's delta, 1.0) */
    /* Keras's reduction "sum": a batch's loss is the sum of its examples' (its gradient too),
     * not their mean ("sum_over_batch_size", "mean", the default). "none" (loss_unreduced):
     * what Keras's fit does with the unreduced losses, the gradient of their sum, while the
     * loss it reports is their mean */
    bool loss_sum, loss_unreduced;
    /* categorical and binary cross-entropy: Keras's label_smoothing (0: none), the labels
     * taken as t (1 - s) + s / classes (binary: classes 2) */
    double label_smoothing;
    bool metric_accuracy;                  /* metrics: [accuracy] ("loss" is always reported) */
    float accuracy_threshold;              /* binary accuracy: a prediction above it is class 1 */
    job_metric_t metrics[JOB_MAX_METRICS]; /* the others, in the job's order */
    int n_metrics;
    size_t metric_width;          /* the sums of all of them */
    optimizer_config_t optimizer; /* lr_scale 0 = scale_learning_rate: true, i.e. multiply by
                                   * the number of replicas, which the runtime fills in */
    job_data_t data;
    int64_t epochs; /* train: {epochs: N} or {steps: N}; one of them is > 0 */
    int64_t steps;
    int steps_per_execution;  /* default 1 */
    int accumulate_steps;     /* the optimizer applies the mean gradient of this many batches
                               * (Keras 3's gradient_accumulation_steps); 0 or 1: every batch;
                               * at most JOB_MAX_ACCUMULATE_STEPS */
    int64_t max_staleness;    /* parameter_server: 0 = off */
    int64_t bytes_per_pack;   /* parameter_server: gradients go to the PS in packs of at least
                               * this many bytes, each as soon as backward has made it; 0 =
                               * automatic */
    bool wire_bf16;           /* parameter_server: train.wire_dtype bfloat16: dense gradients
                               * and the values pulled back travel as bfloat16 */
    bool wire_error_feedback; /* with wire_bf16: each worker adds what rounding dropped from its
                               * last gradient to the next (train.wire_error_feedback) */
    bool evaluate; /* evaluate on the test split after each epoch (default: when a test split is
                      given) */
    job_partitioner_t partitioner;
    char *checkpoint_dir;             /* NULL: no checkpoints */
    int64_t checkpoint_every_steps;   /* 0: not by steps */
    int64_t checkpoint_every_seconds; /* 0: not by time */
    int checkpoint_keep;              /* the newest this many are kept (default 3) */
    bool resume;                      /* start from the newest checkpoint in checkpoint_dir */
    char *init_from; /* starting weights (.keras or .safetensors); NULL: the initializers */
    /* model: {keras: PATH} starting from the archive's weights with the archive's optimizer:
     * the optimizer's state is restored too (its iterations, slots and learning rate), as
     * Keras's load_model restores it; keras_accumulate is that optimizer's
     * gradient_accumulation_steps (0: none), by which Keras counts iterations in batches */
    bool init_optimizer;
    int keras_accumulate;
    uint64_t source_hash;               /* FNV-1a of the job file's bytes, for checkpoints */
    char *tensorboard_logdir;           /* NULL: no TensorBoard events */
    int64_t tensorboard_update_freq;    /* steps between batch summaries; 0: per epoch */
    int64_t tensorboard_histogram_freq; /* epochs between weight histograms; 0: none */
    uint64_t seed;                      /* model initialization; default: data.seed */
} job_t;

/* Whether the job has an accuracy to show beside its loss: one output, under a cross-entropy
 * (a regression has none; a model of several outputs shows each one's loss and metrics). */
bool job_reports_accuracy(const job_t *job);

/* The value of each of the job's metrics (ret[n_metrics]) from their sums (state[metric_width],
 * added up over any batches, replicas and workers); a metric that has seen nothing is 0, as
 * Keras's is. */
void job_metrics_result(const job_t *job, const double *state, double *ret);

/* A hash of what the job's metrics are (kinds, names, options, layout): sums kept for one list
 * of metrics (a checkpoint's) are the job's when the signatures are equal. */
uint64_t job_metrics_signature(const job_t *job);

/* The name Keras reports metric i under among its output's metrics: a list of thresholds'
 * list_name (one Keras metric), else the name without its output's prefix ("accuracy" for
 * "cls_accuracy"). */
const char *job_metric_keras_name(const job_t *job, int i);

/* Reads and parses a job file (YAML, or JSON by content). Relative paths inside it (data files,
 * keras_json) are resolved against the file's directory. On failure *job is left empty. */
status_t job_load_file(const char *path, job_t *ret_job, status_msg_t *err);

/* Parses job text; `path` names it in messages and anchors relative paths (may be NULL: the
 * current directory). */
status_t job_parse(const char *text, size_t len, const char *path, job_t *ret_job,
                   status_msg_t *err);

/* A file a job refers to, supplied with the job instead of read from disk: how a job submitted
 * from a client machine reaches the chief and workers with its Keras JSON. `path` is the path as
 * resolved against the job file (job_model_t.keras_json_path). */
typedef struct job_file {
    const char *path;
    const char *data;
    size_t len;
} job_file_t;

/* The most bytes a job file, or a file it references, may hold, and the most files a job may
 * bring along (job_parse_with_files): anything bigger is refused before it is parsed. */
#define JOB_MAX_FILE_BYTES (16u << 20)
#define JOB_MAX_FILES      16

/* job_parse, taking referenced files from `files` when their resolved path matches and from
 * the disk otherwise. Text or files over the limits above fail with STATUS_RESOURCE_EXHAUSTED
 * before any parsing. */
status_t job_parse_with_files(const char *text, size_t len, const char *path,
                              const job_file_t *files, size_t n_files, job_t *ret_job,
                              status_msg_t *err);

void job_done(job_t *job);

/* data.global_batch_size: makes data.batch_size its share for each of `replicas` replicas
 * (tessera train's, or multi_worker_mirrored's workers), failing with an error that names the
 * key when it does not split evenly. Without it, nothing. */
status_t job_set_replicas(job_t *job, int replicas, status_msg_t *err);

/* The synchronous strategies: every replica applies the same update (multi_worker_mirrored
 * over workers; mirrored and central_storage over one host's replicas). */
bool job_is_synchronous(const job_t *job);

/* The steps of one closure on a cluster: steps_per_execution, rounded up to whole windows of
 * accumulate_steps (a window's gradients never span closures, which may run on other workers or
 * run again). */
int job_closure_steps(const job_t *job);

/* The batches of one optimizer update: accumulate_steps, at least 1. */
int job_window(const job_t *job);
#endif
