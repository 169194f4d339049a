/* Keras 3's native model file, `.keras`: a zip archive of stored (not deflated) entries, in this
 * order: metadata.json ({"keras_version", "date_saved"}), config.json (the model's config with
 * its build and compile configs: the caller's text), and model.weights.h5, HDF5 laid out as
 * keras.saving writes it:
 *
 *   layers/<layer>/vars/      group with attribute name="<layer>", datasets 0, 1, ... (the
 *                             layer's variables in the order it creates them), for every layer
 *   optimizer/vars/           attribute name="<optimizer>": 0 iterations (int64 scalar),
 *                             1 learning_rate (float32 scalar), then the slot variables
 *   vars/                     attribute name="<model>", empty
 *
 * Written through libzip and libhdf5; the archive appears whole or not at all (libzip writes a
 * temporary file and renames it). */
#ifndef TESSERA_FILES_KERAS_ARCHIVE_H
#define TESSERA_FILES_KERAS_ARCHIVE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define KERAS_ARCHIVE_VERSION "3.15.1" /* the Keras version whose layout this follows */
#define KERAS_MAX_RANK        8

typedef struct keras_tensor {
    int rank;
    uint64_t shape[KERAS_MAX_RANK];
    const float *data;
} keras_tensor_t;

typedef struct keras_layer_vars {
    const char *name;
    const keras_tensor_t *vars;
    size_t n;
} keras_layer_vars_t;

typedef struct keras_archive {
    const char *config_json;          /* config.json's text */
    const char *model_name;           /* the model's own vars group: "sequential" */
    const keras_layer_vars_t *layers; /* every layer of the config, in its order */
    size_t n_layers;
    const char *optimizer; /* NULL: no optimizer group (an uncompiled model) */
    int64_t iterations;
    float learning_rate;
    const keras_tensor_t *optimizer_vars; /* in the optimizer's order */
    size_t n_optimizer_vars;
} keras_archive_t;

/* Writes the archive to path. Errors name the file (STATUS_IO). */
status_t keras_archive_write(const char *path, const keras_archive_t *a, status_msg_t *err);

#define KERAS_OPTIMIZER_PREFIX "optimizer/vars"
/* The metadata key that says why the optimizer's variables were left out. */
#define KERAS_OPTIMIZER_UNREAD "optimizer_unread"

/* The most bytes of model.weights.h5 read from an archive. */
#define KERAS_MAX_WEIGHTS (8ull << 30)

/* Reads every layer variable of a .keras archive (layers/<layer>/vars/<i>, float32 or float64
 * datasets) into a safetensors file at out_path, named "<layer>/<i>" in layer and index order,
 * and the optimizer's variables (optimizer/vars/<i>: the iteration count as int64, then float
 * datasets) as KERAS_OPTIMIZER_PREFIX "/<i>", a name no layer variable has (a layer's index is
 * a number); when one of those cannot be read they are all left out, the reason in the file's
 * metadata under KERAS_OPTIMIZER_UNREAD, and the weights alone are read.
 *
 * The reading happens in a child process under a memory and time limit, and only the
 * safetensors file it leaves is trusted (after files/safetensors.h's checks): libhdf5 is not
 * made for hostile files, and a file that crashes or hangs it becomes an error naming it
 * (STATUS_DATA_LOSS), not a crash of the trainer. A missing or non-zip file, an archive
 * without model.weights.h5, or weights of another type are errors naming the file. */
status_t keras_archive_read_weights(const char *path, const char *out_path, status_msg_t *err);

/* config.json of a .keras archive (the model's config, with its compile config): its text,
 * NUL-terminated (free it), of at most max_len bytes. A file that is not a zip archive, has no
 * config.json or a larger one, is an error naming the file (STATUS_BAD_CONFIG; STATUS_IO when
 * it cannot be read). Read in this process: libzip only, never libhdf5. */
status_t keras_archive_read_config(const char *path, size_t max_len, char **ret, size_t *ret_len,
                                   status_msg_t *err);

/* The two halves of the child's work, in the calling process, for the fuzz targets only (a
 * crash inside libzip or libhdf5 here is the caller's): keras_archive_extract_h5 writes the
 * archive's model.weights.h5 to h5_path; keras_archive_h5_to_safetensors reads an HDF5 file's
 * layer variables into out_path. Both return 0, or -1 with the reason in why. */
int keras_archive_extract_h5(const char *path, const char *h5_path, char *why, size_t why_len);
int keras_archive_h5_to_safetensors(const char *h5_path, const char *out_path, char *why,
                                    size_t why_len);

#endif
