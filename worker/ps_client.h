/* A worker's connection to the parameter servers of one job: where each shard of each model
 * variable lives, and the parallel pulls and pushes of a training step.
 *
 * Pull fills the model's variables with the current values: whole shards of dense variables,
 * and for embeddings only the rows the batch's token ids touch. Push sends the model's last
 * gradients: dense shards straight from the gradient buffers (no copy), embedding rows as
 * (shard-local index, row) pairs; for a model without embeddings, the push also returns the
 * updated values, which saves the next step's pull. One thread per PS beyond the first makes the
 * calls to all PS tasks at once. Not thread-safe: one step at a time. */
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

/* Pulls what a step on this batch needs into the model's variables; nothing when the last push
 * already brought them back (see ps_client_push) and no ps_client_refresh came since. */
status_t ps_client_pull(ps_client_t *c, const float *features, int batch, status_msg_t *err);

/* Pushes the gradients of the model's last training step. When every variable is dense it is a
 * PushPull: the updated values come back in the same round trip and serve the next step. */
status_t ps_client_push(ps_client_t *c, status_msg_t *err);

/* Makes the next pull fetch the values again: call at the start of a closure, so that what
 * other workers pushed in between is seen. */
void ps_client_refresh(ps_client_t *c);

/* Monotonic seconds. */
double ps_client_now(void);

#endif
