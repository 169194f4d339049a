/* Internals shared by the files of the model (model.c, layers.c, loss.c). */
#ifndef TESSERA_MODEL_INTERNAL_H
#define TESSERA_MODEL_INTERNAL_H

#include "model.h"

typedef struct layer {
    job_layer_t spec;
    int in_shape[JOB_MAX_RANK], in_rank;
    int out_shape[JOB_MAX_RANK], out_rank;
    size_t in_len, out_len; /* per example */
    model_param_t *w, *b;
    float *out;      /* [max_batch, out_len]; NULL when alias */
    bool alias;      /* Flatten, Reshape: the output is the input */
    const float *in; /* input of the last forward pass */
    /* Conv2D and pooling geometry */
    int oh, ow, pad_t, pad_l, sh, sw;
    float *cols;          /* Conv2D im2col buffer */
    int32_t *argmax;      /* MaxPooling2D: input offset of each output's maximum */
    float *mask;          /* Dropout: kept (scale) or dropped (0) */
    uint64_t rng;         /* Dropout */
    int32_t *slot_of_row; /* Embedding: row -> slot in rows_index during backward */
} layer_t;

struct model {
    layer_t *layers;
    size_t n_layers;
    model_param_t *params;
    size_t n_params;
    int max_batch;
    size_t in_len, out_len;
    job_loss_kind_t loss;
    bool from_logits;
    bool fused;             /* the last softmax/sigmoid is folded into the loss */
    float *grad_a, *grad_b; /* gradient ping-pong buffers */
    float *probs;           /* outputs after the folded activation */
    model_backward_fn on_backward;
    void *on_backward_arg;
    /* memory: every buffer is counted against max_bytes (model_alloc in model.c) */
    size_t max_bytes, bytes;
    status_t alloc_rc;               /* the first refused buffer: RESOURCE_EXHAUSTED or NO_MEMORY */
    size_t alloc_bytes, alloc_count; /* its size */
};

uint64_t model_rng_next(uint64_t *s);

/* Decides how the last activation meets the loss; rejects combinations that make no sense. */
status_t model_check_loss(model_t *m, status_msg_t *err);

/* Forward pass of layer l on `batch` examples (l->in set by the caller). */
status_t layer_forward(layer_t *l, int batch, bool training, bool skip_activation,
                       status_msg_t *err);

/* Backward pass, in two halves. layer_backward_params: dy holds the gradient of the loss for
 * l's output; it becomes the gradient before the activation, and the gradients of l's params
 * are computed from it. layer_backward_input then puts the gradient for l's input in dx unless
 * dx is NULL, and returns the buffer that holds it (dy itself for layers that pass gradients
 * through). Only the second half reads l's param values. */
void layer_backward_params(layer_t *l, int batch, float *dy, bool skip_activation);
float *layer_backward_input(layer_t *l, int batch, float *dy, float *dx);

/* Loss of the last layer's output against labels y, with the gradient into dy; NaN-safe. */
status_t model_loss(model_t *m, const float *y, int batch, float *dy, model_stats_t *stats,
                    status_msg_t *err);

#endif
