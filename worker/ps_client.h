/* A worker's connection to the parameter servers of one job: where each shard of each model
 * variable lives, and the parallel pulls and pushes of a training step.
 *
 * Pull fills the model's variables with the current values: whole shards of dense variables,
 * and for embeddings only the rows the batch's token ids touch. Push sends the model's last
 * gradients: dense shards straight from the gradient buffers (no copy), embedding rows as
 * (shard-local index, row) pairs. One thread per PS beyond the first makes the calls to all PS
 * tasks at once. Not thread-safe: one step at a time. */
#ifndef TESSERA_PS_CLIENT_H
#define TESSERA_PS_CLIENT_H

#include "job.h"
#include "model.h"
#include "rpc.h"

typedef struct ps_client ps_client_t;

/* Connects to req->ps and records req->placement for the variables of model. Every model
 * variable must be placed completely (its shards' rows tile axis 0). */
status_t ps_client_new(model_t *model, const Tessera__V1__ConfigureJobRequest *req,
                       ps_client_t **ret, status_msg_t *err);
void ps_client_free(ps_client_t *c);

/* Pulls what a step on this batch needs into the model's variables. */
status_t ps_client_pull(ps_client_t *c, const float *features, int batch, status_msg_t *err);

/* Pushes the gradients of the model's last training step. */
status_t ps_client_push(ps_client_t *c, status_msg_t *err);

/* Storage for the sub-message of one proto initializer. */
typedef struct ps_init_scratch {
    Tessera__V1__Initializer__Zeros zeros;
    Tessera__V1__Initializer__Ones ones;
    Tessera__V1__Initializer__Constant constant;
    Tessera__V1__Initializer__GlorotUniform glorot_uniform;
    Tessera__V1__Initializer__GlorotNormal glorot_normal;
    Tessera__V1__Initializer__HeUniform he_uniform;
    Tessera__V1__Initializer__HeNormal he_normal;
    Tessera__V1__Initializer__RandomUniform random_uniform;
    Tessera__V1__Initializer__RandomNormal random_normal;
} ps_init_scratch_t;

/* Fills a proto initializer (its sub-message in scratch) for a variable of the given fans;
 * `init` (may be NULL) carries constant values and ranges; embeddings default to Keras's
 * uniform(-0.05, 0.05). */
void ps_client_initializer(job_init_kind_t kind, const job_init_t *init, bool embedding,
                           int64_t fan_in, int64_t fan_out, Tessera__V1__Initializer *ret,
                           ps_init_scratch_t *scratch);

/* Monotonic seconds. */
double ps_client_now(void);

#endif
