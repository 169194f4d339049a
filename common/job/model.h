/* A model as a job file or a Keras JSON document describes it: the input shape and a list of
 * layers with their options (job/layers.c reads them from both formats). Shapes are checked by
 * the engine's model builder, not here. */
#ifndef TESSERA_JOB_MODEL_H
#define TESSERA_JOB_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "job/initializer.h"

#define JOB_MAX_RANK 4
/* The most inputs one merge layer takes. */
#define JOB_MAX_INPUTS 16
/* In job_layer_t.inputs: the model's input, not a layer; JOB_INPUT_OF(k) its input k (of a
 * Functional model with several), job_input_index the way back. */
#define JOB_INPUT_MODEL      (-1)
#define JOB_INPUT_OF(k)      (JOB_INPUT_MODEL - (k))
#define JOB_MAX_MODEL_INPUTS 8
/* The most outputs a Functional model may have (each with its loss). */
#define JOB_MAX_OUTPUTS 8
static inline int job_input_index(int src)
{
    return JOB_INPUT_MODEL - src;
}

typedef enum {
    JOB_LAYER_DENSE,
    JOB_LAYER_CONV2D,
    JOB_LAYER_MAX_POOLING2D,
    JOB_LAYER_AVERAGE_POOLING2D,
    JOB_LAYER_FLATTEN,
    JOB_LAYER_RESHAPE,
    JOB_LAYER_DROPOUT,
    JOB_LAYER_EMBEDDING,
    JOB_LAYER_GLOBAL_AVERAGE_POOLING1D,
    JOB_LAYER_GLOBAL_AVERAGE_POOLING2D,
    JOB_LAYER_ACTIVATION,
    JOB_LAYER_RESCALING,
    JOB_LAYER_LAYER_NORMALIZATION,
    JOB_LAYER_CONV1D,
    JOB_LAYER_MAX_POOLING1D,
    JOB_LAYER_AVERAGE_POOLING1D,
    JOB_LAYER_GLOBAL_MAX_POOLING1D,
    JOB_LAYER_GLOBAL_MAX_POOLING2D,
    JOB_LAYER_RELU,       /* the ReLU layer: max_value, negative_slope, threshold */
    JOB_LAYER_LEAKY_RELU, /* negative_slope (Keras: 0.3) */
    JOB_LAYER_ELU,        /* alpha (Keras: 1) */
    JOB_LAYER_SOFTMAX,    /* over the last axis */
    JOB_LAYER_ZERO_PADDING2D,
    JOB_LAYER_CROPPING2D,
    JOB_LAYER_UP_SAMPLING2D,
    JOB_LAYER_PERMUTE,
    JOB_LAYER_REPEAT_VECTOR,
    JOB_LAYER_PRELU,
    JOB_LAYER_SPATIAL_DROPOUT1D,
    JOB_LAYER_SPATIAL_DROPOUT2D,
    JOB_LAYER_GAUSSIAN_NOISE,
    JOB_LAYER_DEPTHWISE_CONV2D,
    JOB_LAYER_SEPARABLE_CONV2D,
    /* the merge layers of Functional models: two or more inputs of one shape (Subtract: two),
     * or joined along an axis (Concatenate) */
    JOB_LAYER_ADD,
    JOB_LAYER_SUBTRACT,
    JOB_LAYER_MULTIPLY,
    JOB_LAYER_AVERAGE,
    JOB_LAYER_MAXIMUM,
    JOB_LAYER_MINIMUM,
    JOB_LAYER_CONCATENATE,
    JOB_LAYER_BATCH_NORMALIZATION,
    JOB_LAYER_KINDS /* how many there are */
} job_layer_kind_t;

typedef enum {
    JOB_ACT_LINEAR,
    JOB_ACT_RELU,
    JOB_ACT_SIGMOID,
    JOB_ACT_TANH,
    JOB_ACT_SOFTMAX,
    /* Keras 3's, by the names its to_json writes (keras.activations) */
    JOB_ACT_GELU, /* exact: x * Phi(x) */
    JOB_ACT_ELU,  /* alpha 1 */
    JOB_ACT_SELU,
    JOB_ACT_SOFTPLUS,
    JOB_ACT_SOFTSIGN,
    JOB_ACT_SWISH,      /* also "silu" */
    JOB_ACT_LEAKY_RELU, /* negative_slope 0.2 */
    JOB_ACT_RELU6,
    JOB_ACT_HARD_SIGMOID, /* relu6(x + 3) / 6 */
    JOB_ACT_HARD_SWISH,   /* x * hard_sigmoid(x); also "hard_silu" */
    JOB_ACT_EXPONENTIAL,
    JOB_ACT_MISH,
    JOB_ACT_LOG_SOFTMAX,
    /* job files only: Keras's gelu(x, approximate=True), 0.5 x (1 + tanh(sqrt(2 / pi) (x +
     * 0.044715 x^3))), which Keras's JSON cannot name (its "gelu" is the exact one) */
    JOB_ACT_GELU_APPROXIMATE,
    JOB_ACT_COUNT_
} job_activation_t;

/* Whether act's gradient needs its input, not only its output (the layer keeps the input). */
bool job_activation_needs_input(job_activation_t act);

/* Keras's weight regularizers: l1 * sum|w| + l2 * sum w^2 joins the loss. */
typedef struct job_regularizer {
    double l1, l2;
} job_regularizer_t;

/* Keras's weight constraints, applied to a weight after each update: non_neg max(w, 0); the norm
 * ones scale each slice of the weight along `axes` (bit d: axis d of the weight; Keras's `axis`,
 * 0 by default) to norm at most max_value (max_norm), 1 (unit_norm), or rate * clip(norm,
 * min_value, max_value) + (1 - rate) * norm (min_max_norm), dividing by epsilon 1e-7 + norm. */
typedef enum {
    JOB_CONSTRAINT_NONE,
    JOB_CONSTRAINT_NON_NEG,
    JOB_CONSTRAINT_MAX_NORM,
    JOB_CONSTRAINT_UNIT_NORM,
    JOB_CONSTRAINT_MIN_MAX_NORM,
} job_constraint_kind_t;

typedef struct job_constraint {
    job_constraint_kind_t kind;
    double min_value, max_value, rate;
    unsigned axes;
} job_constraint_t;

/* The constraint names of job files ("non_neg", "max_norm", "unit_norm", "min_max_norm"), by
 * job_constraint_kind_t from JOB_CONSTRAINT_NON_NEG on, and Keras's classes ("NonNeg" ...). */
extern const char *const job_constraint_names[4], *const job_constraint_classes[4];

/* Fills c's defaults for its kind (Keras's: max_value 2 for max_norm, min 0 max 1 rate 1 for
 * min_max_norm, axis 0) and checks the values read into it; *ret_bad names a bad field. */
void job_constraint_default(job_constraint_t *c);
bool job_constraint_valid(const job_constraint_t *c, const char **ret_bad);

/* Applies c to the n values of a weight of `shape` (rank dims), Keras's formula: the norm kinds
 * scale each slice along c->axes by desired / (1e-7 + norm), norms summed in double; out of
 * memory leaves the values as they are. */
void job_constraint_apply(const job_constraint_t *c, float *v, const int *shape, int rank,
                          size_t n);

typedef struct job_layer {
    job_layer_kind_t kind;
    char name[64];
    job_activation_t activation;    /* dense, conv2d, activation */
    bool use_bias;                  /* dense, conv2d (default true) */
    int units;                      /* dense */
    int filters;                    /* conv2d */
    int kernel_size[2];             /* conv2d; conv1d: [1, width] */
    int strides[2];                 /* conv2d, pooling (pooling default = pool_size); 1D: [1, s] */
    bool padding_same;              /* conv2d, pooling: "same" (true) or "valid" */
    int pool_size[2];               /* pooling; 1D: [1, width] */
    int target_shape[JOB_MAX_RANK]; /* reshape (without the batch dimension) */
    int target_rank;
    double rate;               /* dropout, spatial_dropout1d/2d */
    double scale, offset;      /* rescaling: x * scale + offset */
    uint64_t dropout_seed;     /* dropout, spatial dropout, gaussian_noise: 0 = the job seed */
    int input_dim, output_dim; /* embedding */
    job_init_t kernel_init, bias_init;      /* dense, conv2d; embedding uses kernel_init;
                                             * the normalizations: gamma's, beta's */
    job_regularizer_t kernel_reg, bias_reg; /* dense, conv2d (Keras's L1, L2, L1L2) */
    /* any layer: Keras's activity_regularizer, on its output, divided by the batch's size */
    job_regularizer_t activity_reg;
    double epsilon;                   /* the normalizations (Keras: 0.001) */
    bool center, scale_gamma;         /* the normalizations: beta, gamma (Keras: both) */
    double negative_slope, threshold; /* relu, leaky_relu */
    double max_value;                 /* relu: NaN for none */
    double alpha;                     /* elu */
    int margins[4];                   /* zero_padding2d, cropping2d: top, bottom, left, right */
    int size[2];                      /* up_sampling2d (Keras: 2, 2) */
    bool bilinear;                    /* up_sampling2d: interpolation "bilinear", not "nearest" */
    int dims[JOB_MAX_RANK];           /* permute: 1-based axes, a permutation */
    int n_dims;
    int repeat; /* repeat_vector: n */
    /* prelu: bit i set when axis i (1 = the first after the batch) shares one alpha */
    unsigned shared_axes;
    double stddev; /* gaussian_noise */
    /* depthwise_conv2d, separable_conv2d (which read kernel_* as depthwise_*): channels per
     * input channel (Keras: 1); separable's pointwise kernel */
    int depth_multiplier;
    bool mask_zero; /* embedding: id 0 is padding, masked in GlobalAveragePooling1D */
    /* global_average_pooling1d: Keras 3's JSON calls it with that mask, of the input named
     * mask_of (the engine checks that the mask_zero of an Embedding reading that input brings it
     * one) */
    bool masked;
    char mask_of[64];
    /* dense, conv1d/2d (kernel, bias), depthwise_conv2d (depthwise kernel, bias) */
    job_constraint_t kernel_constraint, bias_constraint;
    job_init_t pointwise_init; /* separable_conv2d's pointwise kernel */
    job_regularizer_t pointwise_reg;
    job_constraint_t pointwise_constraint;
    int axis;        /* concatenate, batch_normalization: Keras's axis, the batch's counted */
    double momentum; /* batch_normalization: of the moving statistics (Keras: 0.99) */
    /* batch_normalization: the statistics of the whole global batch, over every replica
     * (Keras's synchronized); one replica's batch is the whole one elsewhere */
    bool synchronized;
    job_init_t moving_mean_init, moving_variance_init; /* batch_normalization */
    /* What the layer reads, in a Functional model's graph: inputs[k] is an earlier layer's index
     * or JOB_INPUT_MODEL. n_inputs 0: the layer before it, or the model's input for the first
     * (a Sequential model). */
    int inputs[JOB_MAX_INPUTS];
    int n_inputs;
    /* A shared layer (a Functional model's layer called more than once) is one entry per call,
     * in the graph's order; a later call holds 1 + the index of the layer's first call, whose
     * weights it uses (0: a first or only call). */
    int shares;
    /* The place of this call among its layer's calls in the order Keras runs the graph (0: the
     * first run; job_model_finish): a shared BatchNormalization moves its statistics in it. */
    int run_rank;
} job_layer_t;

/* One input of a Functional model with several: its InputLayer's name and shape (without the
 * batch dimension). */
typedef struct job_model_input {
    char name[64];
    int shape[JOB_MAX_RANK];
    int rank;
    bool is_int; /* token ids: Embedding layers read it (job_model_finish) */
} job_model_input_t;

typedef struct job_model {
    int input_shape[JOB_MAX_RANK]; /* without the batch dimension; the first input's */
    int input_rank;
    /* A Functional model's inputs, in input_layers' order (0: a Sequential model, whose input is
     * input_shape). An example's features are the inputs' values one after the other. */
    job_model_input_t inputs[JOB_MAX_MODEL_INPUTS];
    int n_inputs;
    /* A Functional model of several outputs: each one's layer (a call's index) and name (the
     * output's in Keras: its layer's, or its key in a dict of outputs), in Keras's order of
     * outputs (0: one output, the last layer, which is always an output) */
    int outputs[JOB_MAX_OUTPUTS];
    char output_names[JOB_MAX_OUTPUTS][64];
    int n_outputs;
    bool input_is_int; /* embedding input: integer ids */
    job_layer_t *layers;
    size_t n_layers;
    char *keras_json;      /* the model file's text when given by keras_json */
    char *keras_json_path; /* ... and its path, resolved against the job file */
    /* model: {keras: PATH}: keras_json_path is a Keras 3 .keras archive and keras_json its
     * config.json (the model's config with its compile config) */
    bool keras_archive;
} job_model_t;

/* Parses a Keras `model.to_json()` document (Keras 2 / tf.keras or Keras 3; Sequential, or
 * Functional) into ret_model; `path` names it in messages. */
status_t job_parse_keras_json(const char *text, size_t len, const char *path,
                              job_model_t *ret_model, status_msg_t *err);

void job_model_done(job_model_t *m);

/* The path a Keras 3 .keras file keeps each layer's variables at (layers/PATH/vars): its class in
 * snake case made unique by _1, _2 ... in layer order, as Keras's saving_lib addresses a
 * Sequential's layers by class, never by name ("p_re_lu", "dense_1"). paths[i] for
 * layers[0..n); a shared layer's later calls get its first call's path. */
void job_keras_paths(const job_layer_t *layers, size_t n, char (*paths)[96]);

/* Whether a kind is a merge layer (Add ... Concatenate): it reads several inputs. */
bool job_layer_is_merge(job_layer_kind_t k);

/* The index of what layer i reads as its k-th input: an earlier layer, or JOB_INPUT_MODEL. */
int job_layer_input(const job_model_t *m, size_t i, int k);

/* Whether layer i, a later call of a shared layer (shares > 0), may be one: it names an earlier
 * first call of its kind. */
bool job_layer_shareable(const job_model_t *m, size_t i);

/* The values of a shape (a feature's, an input's): the product of its dimensions. */
size_t job_shape_len(const int *shape, int rank);

/* The model's outputs (1 but for a Functional model of several) and output k's layer. */
int job_model_outputs(const job_model_t *m);
int job_model_output(const job_model_t *m, int k);

/* The model's inputs (1 for a Sequential model) and input k's shape. */
int job_model_inputs(const job_model_t *m);
const int *job_model_input_shape(const job_model_t *m, int k, int *ret_rank);

/* Which call of its layer entry i is (0: the first or only; shares). */
int job_layer_call(const job_model_t *m, size_t i);

/* Whether the layers are not one chain, each reading the one before it: a Functional model's
 * graph, with branches and merges. */
bool job_model_is_graph(const job_model_t *m);

/* The Keras class of a kind ("Dense"). */
const char *job_layer_keras_class(job_layer_kind_t k);

/* The job-file name of a kind ("dense") and of an activation ("relu"). */
const char *job_layer_kind_name(job_layer_kind_t k);
const char *job_activation_name(job_activation_t a);

#endif
