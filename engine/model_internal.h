/* Internals shared by the files of the model (model.c, step.c, loss.c, layers/). */
#ifndef TESSERA_MODEL_INTERNAL_H
#define TESSERA_MODEL_INTERNAL_H

#include "backend.h"
#include "layers/layer.h"
#include "model.h"

/* One output and its loss: a model of one output has one, the last layer. */
typedef struct model_head {
    int layer; /* the output's layer */
    job_loss_kind_t loss;
    bool from_logits;
    bool fused;         /* its softmax/sigmoid is folded into the loss (nothing else reads it) */
    float smoothing;    /* the cross-entropies' label_smoothing */
    double huber_delta; /* huber's delta (1 by default) */
    float weight;       /* Keras's loss_weights: the total loss is the weighted sum */
    float threshold;    /* binary cross-entropy's accuracy: a value above it predicts 1 */
    size_t out_len;     /* its values per example */
    /* its labels in each example's label row: label_len values from label_at (1, or out_len) */
    size_t label_at, label_len;
    float *probs; /* its outputs after the folded activation */
    float *dy;    /* its output's loss gradient: grad_a for the last layer, else its gbuf */
} model_head_t;

struct model {
    const backend_t *be;
    layer_t *layers;
    size_t n_layers;
    model_param_t *params;
    size_t n_params;
    int max_batch;
    size_t in_len, out_len;
    /* A model of several inputs: an example's features are the inputs' values one after the
     * other, input k's n_in[k] values from in_at[k]; forward copies each into in_buf[k], the
     * [max_batch, n_in[k]] its readers take. n_model_in 1: x itself. */
    int n_model_in;
    size_t in_at[JOB_MAX_MODEL_INPUTS], n_in[JOB_MAX_MODEL_INPUTS];
    float *in_buf[JOB_MAX_MODEL_INPUTS];
    float *x_buf; /* a backend of device_memory: the batch's features, copied for its kernels */
    /* the outputs and their losses (heads[0]: the only one, or the first in Keras's order) */
    model_head_t heads[JOB_MAX_OUTPUTS];
    int n_heads;
    size_t label_len;       /* an example's labels: every head's, one after the other */
    bool loss_sum;          /* reduction "sum" (job_t.loss_sum) */
    bool loss_unreduced;    /* reduction "none" (job_t.loss_unreduced) */
    float *grad_a, *grad_b; /* gradient ping-pong buffers */
    /* A Functional model's graph (not one chain of layers): backward gathers each layer's
     * output gradient in grad_of[i] (its own gbuf[i], or a consumer's buffer it passes on), the
     * last layer's in grad_a; grad_b is the scratch that a second consumer's part lands in. */
    bool graph;
    float **gbuf, **grad_of;
    /* the job's metrics beyond accuracy (model_set_loss_options), their sums added into
     * metric_sink when it is set (model_metrics_into) */
    job_metric_t metrics[JOB_MAX_METRICS];
    int n_metrics;
    double *metric_sink;
    model_backward_fn on_backward;
    void *on_backward_arg;
    double forward_s, backward_s; /* of the last training step (model_step_seconds) */
    /* memory: every buffer is the backend's, counted against max_bytes (layer_alloc) */
    void **buffers; /* to free with the model */
    size_t n_buffers, cap_buffers;
    size_t max_bytes, bytes;
    status_t alloc_rc;               /* the first refused buffer: RESOURCE_EXHAUSTED or NO_MEMORY */
    size_t alloc_bytes, alloc_count; /* its size */
};

/* Decides how each output's activation meets its loss, and its labels' default width (one value
 * an example for the categorical losses, else one for each output value); rejects combinations
 * that make no sense. */
status_t model_check_loss(model_t *m, status_msg_t *err);

/* Whether layer i's softmax/sigmoid is folded into its output's loss. */
bool model_layer_fused(const model_t *m, size_t i);

/* Every output's loss against labels y (rows of label_len), weighted and added up, with each
 * output's gradient into its head's dy: of the loss summed over the batch and divided by
 * `total` (the batch itself, or the global batch this one is a slice of), or none when dy is
 * false; NaN-safe. */
status_t model_loss(model_t *m, const float *y, int batch, int total, bool dy, model_stats_t *stats,
                    status_msg_t *err);

#endif
