/* Internals shared by the job/ files: the name tables and "did you mean" suggestions (names.c),
 * the model assembly that both formats finish with (layers.c). The job file's document tree
 * and its readers are in tree.h. Not for use outside common/job/. */
#ifndef TESSERA_JOB_INTERNAL_H
#define TESSERA_JOB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job/job.h"

#define JOB_N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The most layers a model may have. */
#define JOB_MAX_LAYERS 1024

/* An initializer as both formats name it: snake_case in job files and Keras strings
 * ("glorot_uniform"), the class name in Keras JSON ("GlorotUniform"). a_key and b_key name the
 * parameters stored in job_init_t.a and .b (NULL when the kind has fewer), with Keras's
 * defaults; `seeded` says whether a `seed` parameter is accepted. */
typedef struct job_init_info {
    const char *name;
    const char *class_name;
    job_init_kind_t kind;
    const char *a_key, *b_key;
    double a_default, b_default;
    bool seeded;
} job_init_info_t;

/* The initializer called `name` (either spelling), or NULL. */
const job_init_info_t *job_init_find(const char *name);

/* The snake_case initializer names, for messages; *ret_n gets their count. */
const char *const *job_init_names(size_t *ret_n);

/* The index of s in names[0..n), or -1. */
int job_name_index(const char *s, const char *const *names, size_t n);

/* The name in names[0..n) closest to s when it is within edit distance 2 (a transposition
 * counts as one edit), else NULL. */
const char *job_suggest(const char *s, const char *const *names, size_t n);

/* Writes "unknown WHAT 'S' (did you mean 'X'?); known WHATs: a, b, c" into buf. */
void job_unknown_name(char *buf, size_t size, const char *what, const char *s,
                      const char *const *names, size_t n);

/* Parses an activation name ("relu"; "linear" also for Keras's None); false when unknown. */
bool job_activation_parse(const char *s, job_activation_t *ret);

/* The activation names, in job_activation_t order. */
extern const char *const job_activation_names[JOB_ACT_COUNT_];

/* Appends a layer of `kind` with Keras's defaults (bias on for dense and conv2d, stride 1 for
 * conv2d, 2x2 pools with stride 2, linear, default initializers) to m and returns it in *ret_layer.
 * Fails with STATUS_NO_MEMORY or STATUS_RESOURCE_EXHAUSTED past JOB_MAX_LAYERS; `where` prefixes
 * the message. */
status_t job_model_add_layer(job_model_t *m, job_layer_kind_t kind, const char *where,
                             job_layer_t **ret_layer, status_msg_t *err);

/* Finishes a parsed model: requires layers and an input shape, allows Embedding only first
 * (and then marks the input as integer ids), names unnamed layers as Keras does ("dense",
 * "dense_1") and rejects duplicate names. `where` prefixes messages ("job.yaml:4: model"). */
status_t job_model_finish(job_model_t *m, const char *where, status_msg_t *err);

/* Appends "a, b, c" to the string in buf, cutting at the buffer's end. */
void job_join_names(char *buf, size_t size, const char *const *names, size_t n);

/* The loss a compile config's metrics are for (the archive's, or the job file's). */
typedef struct job_keras_loss {
    bool binary;  /* binary_crossentropy, or one output of a regression loss */
    bool logits;  /* from_logits */
    bool one_hot; /* categorical_crossentropy: Keras's labels are one-hot */
} job_keras_loss_t;

/* Which sections of the compile config to translate: those the job file leaves out. */
typedef struct job_keras_want {
    bool loss, optimizer, metrics;
    job_keras_loss_t for_loss; /* with metrics */
    /* a model of several outputs: each one's name and loss, for a mapping of metrics by output */
    int n_outputs;
    const char (*output_names)[64];
    job_keras_loss_t for_outputs[JOB_MAX_OUTPUTS];
} job_keras_want_t;

/* A Keras 3 config.json's compile_config in the job file's form (keras_compile.c): JSON text
 * with the wanted sections it has of loss, optimizer and metrics (free it; "{}" for an
 * uncompiled model), for the job parser to read as a job file's; *ret_accumulate gets the
 * translated optimizer's gradient_accumulation_steps (0: none). Errors name `file` and what is
 * not supported. */
status_t job_keras_compile_text(const char *text, size_t len, const char *file,
                                const job_keras_want_t *want, char **ret_json, int *ret_accumulate,
                                status_msg_t *err);

#endif
