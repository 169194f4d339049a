/* A Keras Sequential model trained on the CPU: layers with forward and backward passes, the
 * loss and its gradient, accuracy, and Keras's default initializers, seeded.
 *
 * Tensors are float32, channels-last (NHWC), batch first; Dense kernels are [in, units] and
 * Conv2D kernels [kh, kw, in, out], as Keras stores them. The model owns every buffer, sized
 * for max_batch examples; a step runs on the calling thread. Not thread-safe. */
#ifndef TESSERA_MODEL_H
#define TESSERA_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "base/status.h"
#include "job/job.h"

/* One variable: a Dense/Conv2D kernel or bias, an Embedding table, or a moving statistic. */
typedef struct model_param {
    char name[96]; /* "dense_1/kernel" */
    float *value;
    float *grad; /* dense gradient (not used for sparse params) */
    size_t n;    /* elements */
    int shape[4];
    int rank;
    bool sparse; /* Embedding: gradients come as rows, see rows_* */
    /* How the values start: the layer's initializer, and the kind used when it says default */
    job_init_t init;
    job_init_kind_t init_default;
    job_constraint_t constraint; /* applied after each update (model_constrain) */
    /* Not trained: a moving average (BatchNormalization's moving statistics). A training pass
     * puts the statistic in grad, weighted as gradients are; the update is
     * value = value * momentum + grad * (1 - momentum), no optimizer, clipping or decay. */
    bool moving;
    float momentum, rest; /* rest: 1 - momentum, computed in double as Keras does */
    /* Sparse gradient of the last step: rows_grad[j] belongs to row rows_index[j]. */
    int64_t *rows_index;
    float *rows_grad;
    size_t n_rows;
} model_param_t;

typedef struct model model_t;

typedef struct model_stats {
    double loss_sum; /* summed over the examples of the batch */
    double correct;  /* examples predicted right (0 when accuracy does not apply) */
    int examples;
} model_stats_t;

/* Builds the model for inputs of spec's input shape, checking that the layer shapes chain;
 * err names the layer that does not fit. Weights are initialized from `seed`. Its buffers
 * (parameters, gradients, activations for max_batch examples) may take at most max_bytes
 * (0: no limit); past it, or for a tensor of more than INT_MAX values, it fails with
 * STATUS_RESOURCE_EXHAUSTED naming the layer, before allocating that buffer. */
status_t model_new(const job_model_t *spec, job_loss_kind_t loss, bool from_logits, int max_batch,
                   uint64_t seed, uint64_t max_bytes, model_t **ret_model, status_msg_t *err);
/* model_new computing on backend `be` (model_new's: the CPU's). */
status_t model_new_on(const backend_t *be, const job_model_t *spec, job_loss_kind_t loss,
                      bool from_logits, int max_batch, uint64_t seed, uint64_t max_bytes,
                      model_t **ret_model, status_msg_t *err);

/* The backend the model computes on. */
const backend_t *model_backend(const model_t *m);

/* Bytes of the model's buffers (what model_new counted against max_bytes). */
size_t model_bytes(const model_t *m);
void model_free(model_t *m);

size_t model_param_count(const model_t *m);
model_param_t *model_param(model_t *m, size_t i);

/* The most examples a batch may have (the model's buffers are sized for it). */
int model_max_batch(const model_t *m);

/* Input values per example and output values per example. */
size_t model_input_len(const model_t *m);
size_t model_output_len(const model_t *m);

/* The data's labels have lens[k] values an example for output k (n: the model's outputs), one
 * after the other in each example's label row: one (a class index for the categorical
 * cross-entropies), or one for each output value (one-hot or soft classes, several 0/1 targets,
 * a vector or an image to regress), which every loss but the categorical ones needs. Checks
 * that each loss and the job's metrics take them (err names the loss or the metric); before it
 * the model takes labels of each loss's default width (1 for the categorical losses, else the
 * output's values). model_label_len: the row's values. */
status_t model_set_labels(model_t *m, const size_t *lens, int n, status_msg_t *err);
size_t model_label_len(const model_t *m);

/* The model's outputs (1 but for a Functional model of several) and output k's values per
 * example. */
int model_outputs(const model_t *m);
size_t model_output_len_of(const model_t *m, int k);

/* Output k's values of the last forward pass, after its activation. */
const float *model_output_of(const model_t *m, int k);

/* Forward, loss and backward on a batch: afterwards every param's grad (or rows) holds the
 * gradient of the mean loss. Fails with STATUS_INVALID_ARGUMENT naming the example when a label
 * is out of range, or an embedding id outside the vocabulary, and when the loss is NaN or
 * infinite: then no gradient is computed (ret_stats still holds the loss). */
status_t model_train_step(model_t *m, const float *x, const float *y, int batch,
                          model_stats_t *ret_stats, status_msg_t *err);
/* The same on a slice of a larger batch of `total` examples: the gradients are of the loss
 * summed over the slice and divided by total, so that the slices' gradients add up to the whole
 * batch's (ret_stats: the slice's own). */
status_t model_train_slice(model_t *m, const float *x, const float *y, int batch, int total,
                           model_stats_t *ret_stats, status_msg_t *err);

/* What model_train_step's backward pass reports about the params first..model_param_count()-1,
 * layer by layer from the last: MODEL_GRADS_READY once their gradients are final for this step;
 * MODEL_VALUES_FREE once nothing in the step reads their values any more (they may be
 * overwritten). Lets a caller send gradients while backward goes on through the layers before,
 * and take the new values in. */
typedef enum { MODEL_GRADS_READY, MODEL_VALUES_FREE } model_backward_event_t;
typedef void (*model_backward_fn)(void *arg, model_backward_event_t ev, size_t first);

/* Installs fn (NULL removes it). */
void model_on_backward(model_t *m, model_backward_fn fn, void *arg);

/* Seconds the last training step (or slice) spent in forward with the loss, and in backward
 * (with the callbacks of model_on_backward), for a per-step breakdown. */
void model_step_seconds(const model_t *m, double *ret_forward, double *ret_backward);

/* Synchronized BatchNormalization: where the replicas of a training step add up their
 * per-channel sums, so that each normalizes by the statistics of the whole global batch. sum
 * adds vals[0..len) over every replica of the step, in place, the same sums in the same order on
 * each; false when a replica failed the step (its part never comes): the step fails, and vals
 * are not to be used. Local replicas on threads (replicas.c) and the worker processes of a
 * multi_worker_mirrored ring (worker/sync.c) each make one; rank is the replica's place in it. */
typedef struct layer_sync layer_sync_t;
struct layer_sync {
    bool (*sum)(layer_sync_t *s, int rank, double *vals, size_t len);
};

/* The doubles a synchronized BatchNormalization layer of the model exchanges at once at most
 * (0: the model has none), and the exchange its layers use, this model being replica `rank`
 * (NULL: none, each replica's own batch). */
size_t model_sync_width(const model_t *m);
void model_set_sync(model_t *m, layer_sync_t *s, int rank);

/* A training pass without examples, as the exchange sees it: every sum the model's synchronized
 * layers make in a forward and backward pass, in their order, with nothing of its own (zeros),
 * for a replica whose slice of a step is empty while the others' are not. true at once when
 * the model exchanges nothing; false as sum is (or without memory for the zeros). */
bool model_sync_idle(model_t *m);

/* Where a sparse parameter (an Embedding's table) finds its token ids in each example's
 * features: ret_len[k] values from ret_at[k] for each model input its layer's calls read (a
 * shared Embedding's calls read one each), at most JOB_MAX_MODEL_INPUTS of them: how many. 0
 * for any other parameter. */
size_t model_param_ids(const model_t *m, size_t i, size_t *ret_at, size_t *ret_len);

/* Makes dst (a model of src's spec) compute with src's parameter values where they are:
 * every parameter's value buffer, and what a shared layer's later calls read. */
void model_use_values(model_t *dst, model_t *src);

/* Forward and loss without dropout or gradients. */
status_t model_evaluate(model_t *m, const float *x, const float *y, int batch,
                        model_stats_t *ret_stats, status_msg_t *err);

/* The output of the last forward pass, [batch, output_len], after the last activation (the first
 * output's, of a model of several). */
const float *model_output(const model_t *m);

/* The random streams training draws from (each Dropout layer's), in layer order: how many, and
 * the state of stream i, which checkpoints save and restore so a resumed run drops the same
 * values an uninterrupted one would. */
size_t model_rng_count(model_t *m);
uint64_t *model_rng_state(model_t *m, size_t i);

/* The huber loss's delta (job_t.huber_delta) of every output; 1 by default. */
void model_set_huber_delta(model_t *m, double delta);

/* The job's losses (each output's kind, options and weight; model_new took the first output's,
 * the others' mean squared error until this), reduction, accuracy threshold and metrics. The
 * labels go back to each loss's default width: model_set_labels comes after it. Fails (err
 * naming the output's layer) when an output cannot take its loss, or the job's outputs are not the
 * model's. */
status_t model_set_loss_options(model_t *m, const job_t *job, status_msg_t *err);

/* Where training steps and evaluations add the sums of the job's metrics beyond accuracy
 * (job_t.metric_width of them; engine/metrics.h): state, or nowhere when NULL (the default).
 * The caller owns state and zeroes it. */
void model_metrics_into(model_t *m, double *state);
double *model_metrics_sink(const model_t *m);

/* Keys the next training passes' random draws: from now on each Dropout layer draws its values
 * from its seed and `key` alone, not from a stream that moves with every pass. The trainer keys
 * each step by the batch's place (epoch, number in its epoch) and the slice a replica or worker
 * computes, so a run resumed from a checkpoint, a worker that joins again, or a survivor that
 * takes a lost worker's slice draw exactly what the undisturbed run would, with no stream to hand
 * over. Until it is called, the streams move with every pass (model_rng_state). */
void model_set_draw_key(model_t *m, uint64_t key);

/* The key of the batch number `index` of `epoch`, computed as slice `slice` (a replica's or a
 * worker's share of it; a PS worker's shard). */
uint64_t model_draw_key(int64_t epoch, int64_t index, int slice);

/* Applies each variable's constraint (Keras's kernel_constraint, bias_constraint) to its values,
 * as Keras does after every optimizer update. false when no variable has one. */
bool model_constrain(model_t *m);

/* Writes a one-line-per-layer summary (name, output shape, parameters) like Keras's. */
void model_summary(const model_t *m, char *buf, size_t len);

#endif
