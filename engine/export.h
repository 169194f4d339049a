/* Exports a trained model for Keras and everything else: `model.keras` (Keras 3's own archive:
 * the Sequential config with the job's loss, metrics and optimizer, the layers' weights and the
 * optimizer's state, files/keras_archive.h), which keras.saving.load_model opens ready to
 * evaluate, predict or train on; and `model.safetensors` (every variable whole, no optimizer
 * slots). */
#ifndef TESSERA_ENGINE_EXPORT_H
#define TESSERA_ENGINE_EXPORT_H

#include <stdint.h>

#include "base/status.h"
#include "files/safetensors.h"
#include "job/job.h"
#include "model.h"

typedef struct export_state {
    model_t *model;
    float *const *slots; /* per param, optimizer_slot_count arrays; NULL: no optimizer state */
    int64_t iterations;
} export_state_t;

/* The model's variables as safetensors tensors (names, shapes, values: the params'), in the
 * model's order; free the array. NULL when out of memory. */
st_tensor_t *export_tensors(model_t *m);

/* The model's Keras config (Sequential, with build_config and compile_config) as JSON; free
 * it. NULL when out of memory. */
char *export_keras_config(const job_t *job, int64_t iterations);

/* Writes DIR/model.keras and DIR/model.safetensors (DIR is made when missing). */
status_t export_model(const job_t *job, const export_state_t *st, const char *dir,
                      status_msg_t *err);

#endif
