/* The training data pipeline, like tf.data: a source read into memory once, then per epoch a
 * shard (worker i of n), a seeded shuffle buffer, batches (the last partial one kept or
 * dropped), repeat, and prefetch on its own thread.
 *
 * Features are float32 rows of `feature_len` values (images scaled as the job says; token ids of
 * text stored as floats), labels float32 rows of `label_len` values: one (a class index, a 0/1
 * or a regression target), or as many as the model's output has (one-hot or soft classes,
 * several 0/1 targets, a vector or an image to regress).
 * Images read as raw bytes (IDX files, a TFRecord bytes_list) stay bytes in memory, a quarter
 * of the floats, and become floats a batch at a time, computed as the loaders computed them
 * before: the numbers are the same either way. */
#ifndef TESSERA_DATA_H
#define TESSERA_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job/job.h"
#include "base/status.h"

typedef struct dataset {
    float *features;   /* [n, feature_len], 64-byte aligned; NULL when held as bytes */
    uint8_t *bytes;    /* [n, feature_len] raw uint8 values, or NULL */
    double byte_scale; /* with bytes: byte v is (float)(v * byte_scale) (dataset_set_byte_scale) */
    float *labels;     /* [n, label_len] */
    size_t n;
    size_t feature_len;
    size_t label_len;        /* >= 1 */
    int shape[JOB_MAX_RANK]; /* feature shape without the batch dimension */
    int rank;
    int classes; /* number of label classes (max label + 1); 0 for regression targets, and for
                  * labels of several values */
    /* NumPy sources: the arrays of inputs, one a model input, whose values lie one after the
     * other in each row, and each one's values per example (0: a source of one feature) */
    int n_parts;
    size_t part_len[JOB_MAX_MODEL_INPUTS];
    /* NumPy sources: the arrays of labels, one a model output's, whose values lie one after the
     * other in each label row, and each one's values per example (0: labels of one array) */
    int n_label_parts;
    size_t label_part_len[JOB_MAX_OUTPUTS];
} dataset_t;

/* One worker's share of a job's data: part `index` of `count`. */
typedef struct data_part {
    int index, count;
} data_part_t;

/* Loads an IDX image file (magic 0x00000803, uint8 [n, rows, cols]; or any uint8 IDX of rank
 * >= 1) and an IDX label file (0x00000801, uint8 [n]), gzipped or not (detected by content),
 * scaling pixels by `scale`. A missing or truncated file, a wrong magic, or differing counts fail
 * with an error naming the file.
 *
 * Every loader takes max_bytes, the most the dataset may take in memory (features and labels;
 * 0: no limit), and fails with STATUS_RESOURCE_EXHAUSTED before allocating more. */
status_t dataset_load_idx(const char *images, const char *labels, double scale, uint64_t max_bytes,
                          dataset_t **ret_ds, status_msg_t *err);

/* Generates a synthetic dataset, deterministic in spec->seed. Classification: features uniform
 * in [0, 1) times scale, labels argmax of a fixed random linear teacher (learnable). Text:
 * token ids uniform in [1, vocabulary), label 1 when the mean of fixed random per-token weights
 * is positive (learnable with Embedding + pooling). */
status_t dataset_synthetic(const job_synthetic_t *spec, double scale, uint64_t max_bytes,
                           dataset_t **ret_ds, status_msg_t *err);

/* Loads TFRecord files of tf.train.Example (plain or GZIP, detected by content): the files the
 * source names, globs expanded, in sorted order; from each Example the input feature (its
 * values, or a bytes_list's raw uint8 values, times `scale`) and the label. A file that does
 * not exist, a glob that matches nothing, a record with a bad CRC or cut short (DATA_LOSS), an
 * Example without the feature or with another number of values fail with an error naming the
 * file and the record's byte offset. */
status_t dataset_load_tfrecord(const job_source_t *src, double scale, uint64_t max_bytes,
                               const data_part_t *part, dataset_t **ret_ds, bool *ret_by_file,
                               status_msg_t *err);

/* Loads NumPy arrays: inputs [n, ...] (float32, float64, uint8, int32 or int64; times `scale`)
 * and labels [n, ...] (label_len: the values after the first dimension), from two .npy files
 * (memory-mapped) or two members of an .npz archive. Errors name the file and what does not fit. */
status_t dataset_load_numpy(const job_source_t *src, double scale, uint64_t max_bytes,
                            dataset_t **ret_ds, status_msg_t *err);

/* Loads CSV files with a header row: the column the source's label names is the label, every
 * other column an input value (times `scale`); every field must be a number. Errors name the
 * file, the line and the column. */
status_t dataset_load_csv(const job_source_t *src, double scale, uint64_t max_bytes,
                          const data_part_t *part, dataset_t **ret_ds, bool *ret_by_file,
                          status_msg_t *err);

/* Loads the source as the job describes it. */
status_t dataset_load(const job_source_t *src, double scale, uint64_t max_bytes, dataset_t **ret_ds,
                      status_msg_t *err);

/* Loads this part's share of the source: for a source of files (tfrecord, csv) that names at
 * least `count` files, only files index, index + count, ... (in sorted order), and
 * *ret_by_file is set (the caller does not shard the examples again); for any other source,
 * all of it (*ret_by_file false: the pipeline shards by example). part may be NULL: all. */
status_t dataset_load_part(const job_source_t *src, double scale, uint64_t max_bytes,
                           const data_part_t *part, dataset_t **ret_ds, bool *ret_by_file,
                           status_msg_t *err);

/* A dataset held as bytes: byte v stands for (float)(v * scale), as the loaders of floats
 * computed it. */
void dataset_set_byte_scale(dataset_t *ds, double scale);

/* Example e's features as floats into out[feature_len]. */
void dataset_row(const dataset_t *ds, size_t e, float *out);

/* Bytes the dataset holds in memory. NULL-safe. */
size_t dataset_bytes(const dataset_t *ds);

void dataset_free(dataset_t *ds);

typedef struct data_pipeline_opts {
    int shard_index, num_shards; /* this worker's share: examples i with i % num_shards == index */
    int batch_size;
    bool drop_remainder;
    int64_t shuffle_buffer; /* 0 = keep order */
    uint64_t seed;          /* shuffle seed; each epoch reshuffles differently */
    int64_t epochs;         /* epochs to produce; -1 = repeat forever */
    int prefetch;           /* batches produced ahead on the pipeline's thread; 0 = inline */
    uint64_t max_bytes;     /* most bytes of batches and indices (RESOURCE_EXHAUSTED); 0 = any */
    /* Where an earlier run stopped (a resumed job): the pipeline begins with batch start_batch
     * of epoch start_epoch, in the order an uninterrupted run reads them. */
    int64_t start_epoch, start_batch;
} data_pipeline_opts_t;

typedef struct data_batch {
    const float *features; /* [size, feature_len] */
    const float *labels;   /* [size, label_len] */
    int size;
    int64_t epoch; /* 0-based epoch the batch belongs to */
    int64_t index; /* 0-based number of the batch in its epoch (of this shard) */
    int shard;     /* the shard it came from (trainer_next_of); 0 from a pipeline */
    bool last_of_epoch;
} data_batch_t;

typedef struct data_pipeline data_pipeline_t;

/* Starts a pipeline over ds (which must outlive it). */
status_t data_pipeline_new(const dataset_t *ds, const data_pipeline_opts_t *opts,
                           data_pipeline_t **ret_pipe, status_msg_t *err);

/* The next batch, valid until the following call; false when all epochs are done. */
bool data_pipeline_next(data_pipeline_t *p, data_batch_t *ret_batch);

/* Examples in this pipeline's shard. */
size_t data_pipeline_examples(const data_pipeline_t *p);

/* Batches per epoch for this shard. */
int64_t data_pipeline_batches_per_epoch(const data_pipeline_t *p);

/* Stops the thread and frees the pipeline. NULL-safe. */
void data_pipeline_free(data_pipeline_t *p);

#endif
