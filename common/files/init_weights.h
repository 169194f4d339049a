/* init_from: a job's starting weights from a file, instead of its initializers: a Keras 3
 * `.keras` archive (keras.Model.save's, or tessera export's), or a safetensors file whose
 * tensors are named as Tessera names variables ("dense/kernel"; tessera export's
 * model.safetensors). Every variable of the model must be there with its shape, and nothing
 * else: a file of another model is refused naming the first variable that differs.
 *
 * The model is described by its variables in the model's order (a .keras archive numbers each
 * layer's variables in the order the layer makes them) as safetensors tensors, of which only
 * name (Tessera's: "dense/kernel"), rank and shape are read: tessera train passes its model's,
 * the chief the variables the workers described. */
#ifndef TESSERA_FILES_INIT_WEIGHTS_H
#define TESSERA_FILES_INIT_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "files/safetensors.h"

typedef struct init_weights {
    const char *path;
    st_file_t *file;
    bool keras;   /* tensors named "<layer>/<index>", as a .keras archive numbers them */
    char *tmpdir; /* where a .keras archive's weights were unpacked; removed on close */
    /* init_weights_map_layers: a .keras file's path of each named layer */
    const char *const *layer_names, *const *layer_paths;
    size_t n_layers;
    size_t n_optimizer; /* a .keras archive's optimizer variables (init_weights_optimizer_*) */
} init_weights_t;

/* Opens the file (a .keras archive is unpacked in a child process, see
 * keras_archive_read_weights) before the caller starts threads. */
status_t init_weights_open(const char *path, init_weights_t *ret, status_msg_t *err);

/* A .keras file keeps a layer's variables under a path of its class (job_keras_paths), not its
 * name: variable "<names[i]>/<what>" is looked for under paths[i]. Both arrays stay the
 * caller's, alive while w is used. */
void init_weights_map_layers(init_weights_t *w, const char *const *names, const char *const *paths,
                             size_t n);

/* Checks the file against the model's variables vars[0..n): the same count, each one there
 * as float32 of its shape. */
status_t init_weights_check(const init_weights_t *w, const st_tensor_t *vars, size_t n,
                            status_msg_t *err);

/* Reads variable i of a checked model into out (its elements), refusing NaN and infinities
 * (DATA_LOSS naming the file and tensor: HDF5 keeps no checksums). */
status_t init_weights_read(const init_weights_t *w, const st_tensor_t *vars, size_t n, size_t i,
                           float *out, status_msg_t *err);

/* A .keras archive's optimizer variables, in Keras's order (what its load_model restores): the
 * iteration count (int64 scalar), the learning rate (a float32 scalar, unless a schedule sets
 * it), then the slots (Keras's order, export.h); none for a safetensors file, or an archive of
 * an uncompiled model. init_weights_optimizer_read reads variable i into out as its dtype,
 * refusing NaN and infinities. */
size_t init_weights_optimizer_count(const init_weights_t *w);
/* Why the archive's optimizer variables could not be read (they are then left out), or NULL. */
const char *init_weights_optimizer_unread(const init_weights_t *w);
const st_info_t *init_weights_optimizer_info(const init_weights_t *w, size_t i);
status_t init_weights_optimizer_read(const init_weights_t *w, size_t i, void *out,
                                     status_msg_t *err);
/* Checks that optimizer variable i is float32 of the given shape: the `what` (a slot, an
 * accumulator) of the model's variable `name`; the error names both shapes. */
status_t init_weights_optimizer_check(const init_weights_t *w, size_t i, const uint64_t *shape,
                                      int rank, const char *what, const char *name,
                                      status_msg_t *err);

void init_weights_close(init_weights_t *w); /* NULL-safe, and safe on a zeroed one */

#endif
