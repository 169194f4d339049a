/* A worker's connection to the parameter servers of one job: where each shard of each model
 * variable lives, and the parallel pulls and pushes of a training step.
 *
 * Pull fills the model's variables with the current values: whole shards of dense variables,
 * and for embeddings only the rows the batch's token ids touch. Push sends the model's last
 * gradients: dense shards straight from the gradient buffers (no copy), embedding rows as
 * (shard-local index, row) pairs; for a model without embeddings, the push also returns the
 * updated values, which saves the next step's pull. Dense shards go in chunks of whole blocks
 * (rpc/types.h: 1 MiB of rows), each applied by the PS as it arrives. One thread per PS beyond
 * the first makes the calls to all PS tasks at once; when the gradients go out in several packs,
 * each PS gets PS_CONNECTIONS connections, each on its own thread, which take the step's packs
 * in turn: several are on the wire, and being applied, at once. Not thread-safe: one step at a
 * time. */
#ifndef TESSERA_PS_CLIENT_H
#define TESSERA_PS_CLIENT_H

#include "job/job.h"
#include "model.h"
#include "optim/optimizer.h"
#include "rpc/types.h"

typedef struct ps_client ps_client_t;

/* Gradient bytes per pack when the job leaves bytes_per_pack automatic (0). */
#define PS_AUTO_BYTES_PER_PACK (1u << 20)

/* Connects to req->ps and records req->placement for the variables of model. Every model
 * variable must be placed completely (its shards' rows tile axis 0). The gradients go out in
 * packs of at least opts->bytes_per_pack bytes, cut between chunks; when there is more
 * than one and during_backward, each is pushed as soon as backward has made it
 * (model_on_backward), while the backward pass goes on, and the values a push-pull returns are
 * taken in once backward is done with the old ones. Without during_backward (gradients that are
 * summed over several steps before they leave) the packs go out together at ps_client_push. */
typedef struct ps_client_opts {
    int64_t bytes_per_pack; /* 0: PS_AUTO_BYTES_PER_PACK */
    bool during_backward;
    /* train.wire_dtype bfloat16: dense gradients are cast to bfloat16 as their pack is written
     * (with error_feedback, what rounding drops is added to the next step's), and push-pulls ask
     * for the values back in bfloat16, widened into the model; embeddings stay float32. */
    bool wire_bf16, error_feedback;
    /* The job's optimizer, for its gradient clipping (optimizer_clip), which happens here, on
     * the worker, before gradients leave (as TensorFlow's optimizer clips in the worker's step
     * function): each variable's as its pack is published, or all of them at once with
     * global_clipnorm, whose packs then wait for the whole of backward. NULL: none. */
    const optimizer_config_t *clip;
} ps_client_opts_t;

status_t ps_client_new(model_t *model, const Tessera__V1__ConfigureJobRequest *req,
                       const ps_client_opts_t *opts, ps_client_t **ret, status_msg_t *err);
void ps_client_free(ps_client_t *c);

/* Pulls what a step on this batch needs into the model's variables; nothing when the model
 * already holds every variable's values from the last pull or push-pull (all-dense models) and no
 * ps_client_refresh came since. */
status_t ps_client_pull(ps_client_t *c, const float *features, int batch, status_msg_t *err);

typedef struct ps_push_info {
    unsigned requests;        /* Push or PushPull requests the step made */
    unsigned during_backward; /* of them, sent while backward was still running */
} ps_push_info_t;

/* Pushes the gradients of the model's last training step, or what of them backward has not
 * already sent, and waits for every push to be done; info (may be NULL) says how it went. When
 * every variable is dense it is a PushPull: the updated values come back in the same round trip
 * and serve the next step. batches: what the gradients stand for (trainer_window_closed: a
 * window of accumulate_steps), which moving statistics take as that many updates. */
status_t ps_client_push(ps_client_t *c, int batches, ps_push_info_t *info, status_msg_t *err);

/* How many packs a step's gradients go out in. */
size_t ps_client_packs(const ps_client_t *c);

/* Makes the next pull fetch the values again (before an evaluation: it sees one snapshot of
 * every variable as it stands now), and forgets the lost PS. */
void ps_client_refresh(ps_client_t *c);

/* A training closure begins. The values the worker's last successful push-pull brought back
 * serve its first step, as they serve every later step of a closure: they miss only what other
 * workers pushed since (with one worker, nothing), so a closure of one step costs one round trip,
 * not two. Anything else (a first closure, a failed call, a new configuration) pulls again. Forgets
 * the lost PS. */
void ps_client_begin_closure(ps_client_t *c);

/* Seconds spent since the last call of this, summed over the PS lanes: in calls to the PS
 * (sending, the PS's work, receiving; pushes overlap backward), and copying the values they
 * brought into the model; then zeroes them. Call between steps, when no lane is busy. */
void ps_client_take_times(ps_client_t *c, double *ret_calls, double *ret_values);

/* The PS a pull or push could not reach since the last refresh or closure start, or -1. */
int ps_client_lost_ps(const ps_client_t *c);

#endif
