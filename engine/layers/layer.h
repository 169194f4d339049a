/* Layer kinds behind one table. Each kind lives in its own file (dense.c, conv2d.c, ...) and
 * exports one layer_ops_t: how it plans its output shape, parameters and buffers, and its
 * forward and backward passes, written against the model's backend (backend.h). layer.c holds
 * the table, indexed by job_layer_kind_t, and the dispatch the model calls. Adding a kind is a
 * file here and a row in that table (and its name and keys in the job parser's table). */
#ifndef TESSERA_LAYER_H
#define TESSERA_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "model.h"

/* synchronized BatchNormalization's sums over the replicas of a step (model.h) */
static inline bool layer_sync_sum(layer_sync_t *s, int rank, double *vals, size_t len)
{
    return s->sum(s, rank, vals, len);
}

typedef struct layer {
    job_layer_t spec;
    const backend_t *be;
    int in_shape[JOB_MAX_RANK], in_rank;
    int out_shape[JOB_MAX_RANK], out_rank;
    size_t in_len, out_len; /* per example */
    model_param_t *w, *b;
    model_param_t *w2;    /* SeparableConv2D: the pointwise kernel (between w and b) */
    float *out;           /* [max_batch, out_len]; the input itself when the kind is an alias */
    float *pre;           /* the activation's input, for one whose gradient needs it */
    const float *in;      /* input of the last forward pass */
    backend_window_t win; /* Conv2D and pooling geometry */
    float *cols;          /* Conv2D: im2col buffer */
    /* Conv2D without columns (backend conv_fits): the zero-padded input, from forward to the
     * kernel's gradient, then the input's padded gradient; and the kernel transposed */
    float *pad, *wt;
    int32_t *argmax;   /* MaxPooling2D: input offset of each output's maximum */
    float *mask;       /* Dropout: kept (scale) or dropped (0) */
    uint64_t rng;      /* Dropout: its seed, or its stream until draws are keyed */
    uint64_t draw_key; /* model_set_draw_key: this pass's key */
    bool draw_keyed;
    int32_t *slot_of_row; /* Embedding: row -> slot in rows_index during backward */
    size_t rows_cap;      /* Embedding: the rows its param's rows_* hold at most */
    int64_t *ids;         /* Embedding: the batch's ids */
    int32_t *slots;       /* Embedding: each id's slot in rows_index */
    float *xhat;          /* LayerNormalization: the normalized input, [max_batch, in_len] */
    float *inv_std;       /* LayerNormalization: 1 / sqrt(variance + epsilon) of each row */
    float *mid, *dmid;    /* SeparableConv2D: the depthwise step's output and its gradient */
    /* GlobalAveragePooling1D: the mask of the steps (1 kept, 0 masked) that an Embedding with
     * mask_zero makes (its `mask`), when it reaches this layer; NULL: none */
    const float *seq_mask;
    /* What the layer reads: src[k] is a layer's index or JOB_INPUT_MODEL, n_ins of them (1 but
     * for merges); a merge's inputs' values (ins[0] is `in`) and shapes; Concatenate's run of
     * values of each input per step of the axes before the joined one, and how many steps */
    int src[JOB_MAX_INPUTS], n_ins;
    /* the layer's parameters, in the model's list (layer_plan) */
    model_param_t *params;
    size_t n_params;
    /* A shared layer's later call (spec.shares): params is `own`, its parameters with the first
     * call's values and gradient buffers of its own, which backward adds into the first call's
     * (the model's list holds those once). next_call: 1 + the index of the layer's next call,
     * 0 for the last (set on every call). */
    model_param_t *own;
    int next_call;
    /* BatchNormalization: the batch's statistics per channel; share: the slice's part of the
     * whole batch in this training step (model_train_slice), the weight of those statistics */
    float *batch_mean, *batch_var;
    double *sums; /* BatchNormalization: per-channel sums and factors, 3 a channel */
    float share;
    /* BatchNormalization: the weight of this call's statistics in the moving update (1 but for
     * a shared layer's calls: layer_batch_norm_share) */
    float stat_weight;
    /* synchronized BatchNormalization: the replicas' exchange (NULL: this replica's batch
     * alone), this replica's rank in it, and the rows of the step's global batch (set by the
     * forward pass) */
    layer_sync_t *sync;
    int sync_rank;
    double sync_rows;
    const float *ins[JOB_MAX_INPUTS];
    int ins_shape[JOB_MAX_INPUTS][JOB_MAX_RANK], ins_rank[JOB_MAX_INPUTS];
    size_t part[JOB_MAX_INPUTS], outer;
} layer_t;

/* Where a layer is being planned: for its buffers and its errors. */
typedef struct layer_plan {
    model_t *m;
    int max_batch;    /* the model's buffers hold this many examples */
    int index;        /* in the model */
    const char *name; /* the layer's name */
    char in_s[96];    /* its input shape, "(batch, 28, 28, 1)" */
    uint64_t seed;    /* of its initial values */
} layer_plan_t;

typedef struct layer_ops {
    /* The parameters a layer of this spec creates (NULL: none). */
    size_t (*param_count)(const job_layer_t *s);
    /* Sets out_shape and out_rank (preset to the input's), creates parameters and buffers other
     * than the output. Errors name the layer (layer_plan_error). NULL: shape unchanged. */
    status_t (*plan)(layer_plan_t *p, layer_t *l, status_msg_t *err);
    status_t (*forward)(layer_t *l, int batch, bool training, status_msg_t *err);
    /* dy: the gradient before the activation; computes the parameters' gradients (NULL: none). */
    void (*backward_params)(layer_t *l, int batch, const float *dy);
    /* Puts the gradient for the input in dx. NULL: the input gradient is dy itself. */
    void (*backward_input)(layer_t *l, int batch, const float *dy, float *dx);
    /* Merges: puts the gradient for input k in dx[k], for each k whose dx[k] is not NULL. */
    void (*backward_inputs)(layer_t *l, int batch, const float *dy, float *const *dx);
    bool alias;         /* the output is the input (Flatten, Reshape) */
    bool activation;    /* the spec's activation applies to the output */
    bool no_input_grad; /* first layer only: nothing flows back (Embedding) */
} layer_ops_t;

extern const layer_ops_t layer_dense, layer_conv2d, layer_max_pooling2d, layer_average_pooling2d,
    layer_flatten, layer_reshape, layer_dropout, layer_embedding, layer_global_average_pooling1d,
    layer_global_average_pooling2d, layer_activation, layer_rescaling, layer_layer_normalization,
    layer_global_max_pooling, layer_relu, layer_leaky_relu, layer_elu, layer_zero_padding2d,
    layer_cropping2d, layer_up_sampling2d, layer_permute, layer_repeat_vector, layer_prelu,
    layer_spatial_dropout, layer_gaussian_noise, layer_depthwise_conv2d, layer_merge,
    layer_concatenate, layer_batch_normalization;

/* Whether a kind draws random numbers in training (Dropout, the spatial dropouts,
 * GaussianNoise): its stream is saved with checkpoints, its draws keyed per batch slice. */
bool layer_draws(job_layer_kind_t kind);

/* The table's row for a kind. */
const layer_ops_t *layer_ops(job_layer_kind_t kind);

/* The activation the layer applies to its output (linear for kinds without one). */
job_activation_t layer_activation_of(const layer_t *l);

/* Plans layer `index` of m, its input shape set: the kind's plan, then its output buffer. */
status_t layer_plan(model_t *m, layer_t *l, int index, uint64_t seed, status_msg_t *err);

/* Forward pass on `batch` examples (l->in set by the caller). */
status_t layer_forward(layer_t *l, int batch, bool training, bool skip_activation,
                       status_msg_t *err);

/* Backward pass, in two halves. layer_backward_params: dy holds the gradient of the loss for
 * l's output; it becomes the gradient before the activation, and the gradients of l's params
 * are computed from it. layer_backward_input then puts the gradient for l's input in dx unless
 * dx is NULL, and returns the buffer that holds it (dy itself for layers that pass gradients
 * through). Only the second half reads l's param values. */
void layer_backward_params(layer_t *l, int batch, float *dy, bool skip_activation);
float *layer_backward_input(layer_t *l, int batch, float *dy, float *dx);

/* ---- for the kinds' plans (plan.c) ---------------------------------------------------------- */

/* Saturating product: a size past what any machine holds stays past every limit. */
size_t layer_mul_sat(size_t a, size_t b);
size_t layer_shape_len(const int *shape, int rank);
void layer_shape_str(const int *shape, int rank, char *buf, size_t len);

/* Output size of a window sliding over `in`, TensorFlow's rule for valid and same padding;
 * *ret_pad gets the padding before the first element (the extra one goes after). */
int layer_window_out(int in, int k, int stride, bool same, int *ret_pad);

/* A buffer of the model's: `count` zeroed elements of `elem` bytes from the backend, counted
 * against the model's memory limit and freed with the model. NULL when refused (see
 * layer_plan_failed). */
void *layer_alloc(model_t *m, size_t count, size_t elem);
float *layer_floats(model_t *m, size_t n);

/* A parameter "NAME/what" with its value (and dense gradient) buffers; `init` and `dflt` are
 * what it records as its initializer (the caller fills the values). NULL when a buffer was
 * refused. */
model_param_t *layer_add_param(layer_plan_t *p, const char *what, const int *shape, int rank,
                               bool sparse, const job_init_t *init, job_init_kind_t dflt);

/* The normalizations' gamma (spec.scale_gamma) and beta (spec.center) of c values, as l->w and
 * l->b, from the spec's initializers (Keras's ones and zeros by default). */
status_t layer_add_gamma_beta(layer_plan_t *p, layer_t *l, int c, status_msg_t *err);

/* STATUS_BAD_CONFIG, "layer INDEX (NAME): " and the message. */
status_t layer_plan_error(const layer_plan_t *p, status_msg_t *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The error for a layer whose buffer layer_alloc refused. */
status_t layer_plan_failed(const layer_plan_t *p, status_msg_t *err);

/* splitmix64 */
static inline uint64_t layer_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A shared BatchNormalization, layers[first] its first call: Keras moves the statistics once a
 * call, in the order it runs the calls (spec.run_rank). K calls move them as K batches of an
 * accumulate_steps window do (trainer_close_window): momentum^K of the average stays, and the
 * statistic the update takes is the calls' mean weighted (1 - momentum) momentum^(K-1-rank)
 * / (1 - momentum^K), each call's weight (stat_weight) applied in its backward pass. Ranks that
 * are not 0 .. K-1 once each (a spec job_model_finish did not order) go by the calls' order. */
void layer_batch_norm_share(layer_t *layers, size_t first);

/* A synchronized BatchNormalization's part in a training pass without examples: the sums its
 * forward (backward: false) or its input gradient (backward: true) makes, with zeros. zeros
 * holds model_sync_width(m) of them. false as layer_sync_sum is. */
bool layer_batch_norm_idle(layer_t *l, bool backward, double *zeros, size_t width);

#endif
