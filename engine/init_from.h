/* init_from: a job's starting weights from a file, instead of its initializers: a Keras 3
 * `.keras` archive (keras.Model.save's, or tessera export's), or a safetensors file whose
 * tensors are named as Tessera names variables ("dense/kernel"; tessera export's
 * model.safetensors). Every variable of the model must be there with its shape, and nothing
 * else: a file of another model is refused naming the first variable that differs. */
#ifndef TESSERA_ENGINE_INIT_FROM_H
#define TESSERA_ENGINE_INIT_FROM_H

#include <stdbool.h>

#include "base/status.h"
#include "files/safetensors.h"
#include "model.h"

typedef struct init_weights {
    const char *path;
    st_file_t *file;
    bool keras;   /* tensors named "<layer>/<index>", as a .keras archive numbers them */
    char *tmpdir; /* where a .keras archive's weights were unpacked; removed on close */
} init_weights_t;

/* Opens the file (a .keras archive is unpacked, see keras_archive_read_weights) before the
 * trainer starts threads. */
status_t init_weights_open(const char *path, init_weights_t *ret, status_msg_t *err);

/* Checks the file against the model, then copies every variable in. */
status_t init_weights_apply(const init_weights_t *w, model_t *m, status_msg_t *err);

void init_weights_close(init_weights_t *w); /* NULL-safe, and safe on a zeroed one */

#endif
