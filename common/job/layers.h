/* The layer kinds as job files and Keras JSON write them, in one table: per job_layer_kind_t the
 * job-file name, the Keras class, the options Tessera reads, the Keras options it accepts only at
 * one fixed value, and one reader of the options that both formats drive through
 * job_layer_reader_t. A new kind is a row here and a file in engine/layers/. Internal to job/. */
#ifndef TESSERA_JOB_LAYERS_H
#define TESSERA_JOB_LAYERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job/job.h"

/* What a Keras config key must hold. */
typedef enum {
    JOB_KERAS_VALUE,         /* read by the layer's reader */
    JOB_KERAS_NULL,          /* an option Tessera does not implement: null (or absent) only */
    JOB_KERAS_TRUE,          /* true only (trainable) */
    JOB_KERAS_FALSE,         /* false only (mask_zero, sparse, keepdims ...) */
    JOB_KERAS_CHANNELS_LAST, /* "channels_last" or null */
    JOB_KERAS_ONES,          /* 1 or a list of 1s (dilation_rate, groups) */
    JOB_KERAS_DTYPE,         /* a float32 dtype policy */
    JOB_KERAS_IGNORED,       /* accepted whatever it holds (lora_alpha without lora_rank) */
    JOB_KERAS_LAST_AXIS,     /* -1 or [-1]: the last axis (normalization layers) */

} job_keras_rule_t;

typedef struct job_keras_key {
    const char *key;
    job_keras_rule_t rule;
} job_keras_key_t;

/* One format's view of a layer's options. Each getter reads option `key`: absent (or null) leaves
 * *ret as it is unless `required`; a value of the wrong kind fails with a message naming the
 * file, the layer and the key. get_shape reads a list of 1 to JOB_MAX_RANK positive dimensions
 * (one -1 allowed) and is always required; get_seed a non-negative integer. `invalid` fails
 * for a value that was read but is out of range ("KEY must be EXPECTED, got VALUE"). */
typedef struct job_layer_reader job_layer_reader_t;
typedef struct job_layer_reader_ops {
    status_t (*get_int)(job_layer_reader_t *r, const char *key, bool required, int lo, int *ret);
    status_t (*get_seed)(job_layer_reader_t *r, const char *key, uint64_t *ret);
    status_t (*get_number)(job_layer_reader_t *r, const char *key, bool required, double *ret);
    status_t (*get_bool)(job_layer_reader_t *r, const char *key, bool *ret);
    status_t (*get_pair)(job_layer_reader_t *r, const char *key, bool required, int ret[2]);
    status_t (*get_shape)(job_layer_reader_t *r, const char *key, int *ret, int *ret_rank);
    status_t (*get_activation)(job_layer_reader_t *r, const char *key, bool required,
                               job_activation_t *ret);
    status_t (*get_padding)(job_layer_reader_t *r, const char *key, bool *ret_same);
    status_t (*get_init)(job_layer_reader_t *r, const char *key, job_init_t *ret);
    status_t (*get_regularizer)(job_layer_reader_t *r, const char *key, job_regularizer_t *ret);
    status_t (*invalid)(job_layer_reader_t *r, const char *key, const char *expected);
    /* a 1D window's size or stride: a positive integer or a list of one */
    status_t (*get_length)(job_layer_reader_t *r, const char *key, bool required, int *ret);
    /* margins of an image: N (all four), [H, W] or [[top, bottom], [left, right]], each >= 0,
     * into ret = {top, bottom, left, right} */
    status_t (*get_margins)(job_layer_reader_t *r, const char *key, int ret[4]);
    /* an optional list of 1 to JOB_MAX_RANK positive integers (or one): *ret_n 0 when absent */
    status_t (*get_axes)(job_layer_reader_t *r, const char *key, int *ret, int *ret_n);
    status_t (*get_constraint)(job_layer_reader_t *r, const char *key, job_constraint_t *ret);
    /* an axis counted with the batch's (-1: the last): a nonzero integer from -4 to 4, or (as
     * Keras 2 writes a normalization's) a list of one; left alone when absent */
    status_t (*get_axis)(job_layer_reader_t *r, const char *key, int *ret);
    /* one of n names (*ret: its index); left alone when absent */
    status_t (*get_choice)(job_layer_reader_t *r, const char *key, const char *const *names, int n,
                           int *ret);
} job_layer_reader_ops_t;

/* Embedded first in each format's reader, which holds its own context after it. */
struct job_layer_reader {
    const job_layer_reader_ops_t *ops;
};

/* The most options one kind reads (besides name). */
#define JOB_LAYER_MAX_KEYS 16

typedef struct job_layer_info {
    const char *name;        /* in job files: "dense" */
    const char *keras_class; /* in Keras JSON: "Dense" */
    const char *const *keys; /* the options `read` reads, besides name */
    size_t n_keys;
    const job_keras_key_t *keras_fixed; /* Keras options accepted only at one value */
    size_t n_keras_fixed;
    /* Sets the kind's defaults on l (a layer fresh from job_model_add_layer) and reads its
     * options; *ret_input_length gets Embedding's input_length (left alone when absent). */
    status_t (*read)(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length);
} job_layer_info_t;

/* The row of `kind`, or NULL when it is not a kind. */
const job_layer_info_t *job_layer_info(job_layer_kind_t kind);

/* Writes the job-file names (or, when keras, the Keras class names) of every kind into
 * names[0..JOB_LAYER_KINDS), in job_layer_kind_t order, for lookups and messages. */
void job_layer_names(const char *names[JOB_LAYER_KINDS], bool keras);

/* Reads what any layer may have beside its kind's options: Keras's activity_regularizer. */
status_t job_layer_read_common(job_layer_reader_t *r, job_layer_t *l);

#endif
