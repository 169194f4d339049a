/* The layer table (layers.h) and the model it assembles: adding layers with their defaults,
 * and the checks that finish a model whichever format it was written in. */
#define _POSIX_C_SOURCE 200809L
#include "job/layers.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/internal.h"

/* ---- what each kind reads ---- */

const char *const job_constraint_names[4] = {"non_neg", "max_norm", "unit_norm", "min_max_norm"};
const char *const job_constraint_classes[4] = {"NonNeg", "MaxNorm", "UnitNorm", "MinMaxNorm"};

void job_constraint_default(job_constraint_t *c)
{
    c->min_value = 0;
    c->max_value = c->kind == JOB_CONSTRAINT_MAX_NORM ? 2.0 : 1.0;
    c->rate = 1.0;
    c->axes = 1u; /* axis 0 */
}

bool job_constraint_valid(const job_constraint_t *c, const char **ret_bad)
{
    *ret_bad = NULL;
    if (!(c->max_value >= 0) || !isfinite((float)c->max_value))
        *ret_bad = "max_value";
    else if (!(c->min_value >= 0) || !(c->min_value <= c->max_value))
        *ret_bad = "min_value";
    else if (!(c->rate >= 0 && c->rate <= 1))
        *ret_bad = "rate";
    else if (c->axes == 0 || c->axes >= (1u << JOB_MAX_RANK))
        *ret_bad = "axis";
    return *ret_bad == NULL;
}

/* A norm constraint's desired norm for a slice of norm `norm`, in T (float as Keras computes
 * it; double where float overflows). */
#define DESIRED_NORM(T, c, norm)                                                                   \
    ((c)->kind == JOB_CONSTRAINT_UNIT_NORM ? (T)1                                                  \
     : (c)->kind == JOB_CONSTRAINT_MAX_NORM                                                        \
         ? ((norm) < (T)(c)->max_value ? (norm) : (T)(c)->max_value)                               \
         : (T)(c)->rate * ((norm) < (T)(c)->min_value                                              \
                               ? (T)(c)->min_value                                                 \
                               : ((norm) > (T)(c)->max_value ? (T)(c)->max_value : (norm))) +      \
               ((T)1 - (T)(c)->rate) * (norm))

/* One constraint on a weight of `shape`: the norm ones scale each slice along c->axes (Keras's
 * w * desired / (epsilon + norm), epsilon 1e-7, norms summed in double, the rest in float as
 * Keras does; in double where float would overflow — a norm past float's range, a scale up to a
 * huge min_value — so that finite values stay finite). */
void job_constraint_apply(const job_constraint_t *c, float *v, const int *shape, int rank, size_t n)
{
    size_t outer = 1, stride[JOB_MAX_RANK];
    double *sq;

    if (rank < 0 || rank > JOB_MAX_RANK)
        return; /* no weight has more dimensions; the wire refuses them (constraint_from_proto) */
    if (c->kind == JOB_CONSTRAINT_NON_NEG) {
        for (size_t i = 0; i < n; i++)
            v[i] = v[i] > 0.0f ? v[i] : 0.0f;
        return;
    }
    /* the slot of element i: its coordinates on the other axes, in row-major order */
    for (int d = rank - 1; d >= 0; d--) {
        stride[d] = (c->axes >> d) & 1 ? 0 : outer;
        outer *= (c->axes >> d) & 1 ? 1 : (size_t)shape[d];
    }
    if ((sq = calloc(outer + 1, sizeof(*sq))) == NULL)
        return; /* out of memory: the values stay as the update left them */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++) {
            size_t rest = i, slot = 0;
            for (int d = rank - 1; d >= 0; d--) {
                slot += (rest % (size_t)shape[d]) * stride[d];
                rest /= (size_t)shape[d];
            }
            if (pass == 0) {
                sq[slot] += (double)v[i] * v[i];
            } else {
                float norm = (float)sqrt(sq[slot]),
                      scale = DESIRED_NORM(float, c, norm) / (1e-7f + norm);
                if (isfinite(norm) && isfinite(scale)) {
                    v[i] = v[i] * scale;
                } else {
                    double dn = sqrt(sq[slot]);
                    v[i] = (float)((double)v[i] * (DESIRED_NORM(double, c, dn) / (1e-7 + dn)));
                }
            }
        }
    free(sq);
}

/* activation, use_bias, and the initializer, regularizer and constraint of the kernel (named
 * by `kernel`: "kernel", or "depthwise" for the depthwise convolutions) and of the bias. */
static status_t read_weights_of(job_layer_reader_t *r, job_layer_t *l, const char *kernel)
{
    char key[64];

    STATUS_CHECK(r->ops->get_activation(r, "activation", false, &l->activation));
    STATUS_CHECK(r->ops->get_bool(r, "use_bias", &l->use_bias));
    snprintf(key, sizeof(key), "%s_initializer", kernel);
    STATUS_CHECK(r->ops->get_init(r, key, &l->kernel_init));
    STATUS_CHECK(r->ops->get_init(r, "bias_initializer", &l->bias_init));
    snprintf(key, sizeof(key), "%s_regularizer", kernel);
    STATUS_CHECK(r->ops->get_regularizer(r, key, &l->kernel_reg));
    STATUS_CHECK(r->ops->get_regularizer(r, "bias_regularizer", &l->bias_reg));
    snprintf(key, sizeof(key), "%s_constraint", kernel);
    STATUS_CHECK(r->ops->get_constraint(r, key, &l->kernel_constraint));
    return r->ops->get_constraint(r, "bias_constraint", &l->bias_constraint);
}

/* Dense's and the convolutions' weights. */
static status_t read_weights(job_layer_reader_t *r, job_layer_t *l)
{
    return read_weights_of(r, l, "kernel");
}

static status_t read_dense(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->use_bias = true;
    STATUS_CHECK(r->ops->get_int(r, "units", true, 1, &l->units));
    return read_weights(r, l);
}

/* A 2D convolution's window: kernel_size, strides (1 by default) and padding. */
static status_t read_window(job_layer_reader_t *r, job_layer_t *l)
{
    l->strides[0] = l->strides[1] = 1;
    STATUS_CHECK(r->ops->get_pair(r, "kernel_size", true, l->kernel_size));
    STATUS_CHECK(r->ops->get_pair(r, "strides", false, l->strides));
    return r->ops->get_padding(r, "padding", &l->padding_same);
}

static status_t read_conv2d(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->use_bias = true;
    STATUS_CHECK(r->ops->get_int(r, "filters", true, 1, &l->filters));
    STATUS_CHECK(read_window(r, l));
    return read_weights(r, l);
}

/* DepthwiseConv2D and SeparableConv2D: Conv2D's window, depth_multiplier, the depthwise kernel's
 * options (in kernel_init and kernel_reg) and, separable, the pointwise kernel's and filters. */
static status_t read_depthwise(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->use_bias = true;
    l->depth_multiplier = 1;
    if (l->kind == JOB_LAYER_SEPARABLE_CONV2D) {
        STATUS_CHECK(r->ops->get_int(r, "filters", true, 1, &l->filters));
        STATUS_CHECK(r->ops->get_init(r, "pointwise_initializer", &l->pointwise_init));
        STATUS_CHECK(r->ops->get_regularizer(r, "pointwise_regularizer", &l->pointwise_reg));
        STATUS_CHECK(r->ops->get_constraint(r, "pointwise_constraint", &l->pointwise_constraint));
    }
    STATUS_CHECK(r->ops->get_int(r, "depth_multiplier", false, 1, &l->depth_multiplier));
    STATUS_CHECK(read_window(r, l));
    return read_weights_of(r, l, "depthwise");
}

/* Conv1D: a Conv2D of height 1 (kernel_size [1, k], strides [1, s]). */
static status_t read_conv1d(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->use_bias = true;
    l->kernel_size[0] = l->strides[0] = l->strides[1] = 1;
    STATUS_CHECK(r->ops->get_int(r, "filters", true, 1, &l->filters));
    STATUS_CHECK(r->ops->get_length(r, "kernel_size", true, &l->kernel_size[1]));
    STATUS_CHECK(r->ops->get_length(r, "strides", false, &l->strides[1]));
    STATUS_CHECK(r->ops->get_padding(r, "padding", &l->padding_same));
    return read_weights(r, l);
}

/* MaxPooling1D and AveragePooling1D: Keras's defaults, a window of 2, strides equal to it. */
static status_t read_pooling1d(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->pool_size[0] = l->strides[0] = 1;
    l->pool_size[1] = 2;
    STATUS_CHECK(r->ops->get_length(r, "pool_size", false, &l->pool_size[1]));
    l->strides[1] = l->pool_size[1];
    STATUS_CHECK(r->ops->get_length(r, "strides", false, &l->strides[1]));
    return r->ops->get_padding(r, "padding", &l->padding_same);
}

/* Keras's defaults: a 2x2 window, strides equal to the window. */
static status_t read_pooling2d(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->pool_size[0] = l->pool_size[1] = 2;
    STATUS_CHECK(r->ops->get_pair(r, "pool_size", false, l->pool_size));
    l->strides[0] = l->pool_size[0];
    l->strides[1] = l->pool_size[1];
    STATUS_CHECK(r->ops->get_pair(r, "strides", false, l->strides));
    return r->ops->get_padding(r, "padding", &l->padding_same);
}

static status_t read_reshape(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    return r->ops->get_shape(r, "target_shape", l->target_shape, &l->target_rank);
}

static status_t read_dropout(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    STATUS_CHECK(r->ops->get_number(r, "rate", true, &l->rate));
    if (!(l->rate >= 0 && l->rate < 1))
        return r->ops->invalid(r, "rate", "a number from 0 up to (not) 1");
    return r->ops->get_seed(r, "seed", &l->dropout_seed);
}

static status_t read_embedding(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    STATUS_CHECK(r->ops->get_bool(r, "mask_zero", &l->mask_zero));
    STATUS_CHECK(r->ops->get_int(r, "input_dim", true, 1, &l->input_dim));
    STATUS_CHECK(r->ops->get_int(r, "output_dim", true, 1, &l->output_dim));
    STATUS_CHECK(r->ops->get_init(r, "embeddings_initializer", &l->kernel_init));
    return r->ops->get_int(r, "input_length", false, 1, ret_input_length);
}

static status_t read_activation(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    return r->ops->get_activation(r, "activation", true, &l->activation);
}

static status_t read_rescaling(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->offset = 0;
    STATUS_CHECK(r->ops->get_number(r, "scale", true, &l->scale));
    STATUS_CHECK(r->ops->get_number(r, "offset", false, &l->offset));
    if (!isfinite((float)l->scale) || !isfinite((float)l->offset))
        return r->ops->invalid(r, "scale", "finite float32 numbers (scale and offset)");
    return STATUS_OK;
}

/* LayerNormalization over the last axis: Keras's defaults epsilon 0.001, center and scale. */
static status_t read_layer_normalization(job_layer_reader_t *r, job_layer_t *l,
                                         int *ret_input_length)
{
    (void)ret_input_length;
    l->epsilon = 1e-3;
    l->center = l->scale_gamma = true;
    STATUS_CHECK(r->ops->get_number(r, "epsilon", false, &l->epsilon));
    if (!(l->epsilon > 0) || !isfinite((float)l->epsilon) || (float)l->epsilon == 0)
        return r->ops->invalid(r, "epsilon", "a positive float32 number");
    STATUS_CHECK(r->ops->get_bool(r, "center", &l->center));
    STATUS_CHECK(r->ops->get_bool(r, "scale", &l->scale_gamma));
    STATUS_CHECK(r->ops->get_init(r, "gamma_initializer", &l->kernel_init));
    STATUS_CHECK(r->ops->get_init(r, "beta_initializer", &l->bias_init));
    /* gamma and beta are the layer's kernel and bias: their regularizers and constraints */
    STATUS_CHECK(r->ops->get_regularizer(r, "gamma_regularizer", &l->kernel_reg));
    STATUS_CHECK(r->ops->get_regularizer(r, "beta_regularizer", &l->bias_reg));
    STATUS_CHECK(r->ops->get_constraint(r, "gamma_constraint", &l->kernel_constraint));
    return r->ops->get_constraint(r, "beta_constraint", &l->bias_constraint);
}

/* The ReLU layer: Keras's relu(x, negative_slope, max_value, threshold), no cap by default. */
static status_t read_relu(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->max_value = NAN;
    STATUS_CHECK(r->ops->get_number(r, "max_value", false, &l->max_value));
    STATUS_CHECK(r->ops->get_number(r, "negative_slope", false, &l->negative_slope));
    STATUS_CHECK(r->ops->get_number(r, "threshold", false, &l->threshold));
    if (!isnan(l->max_value) && !(l->max_value >= 0 && isfinite((float)l->max_value)))
        return r->ops->invalid(r, "max_value", "a float32 number >= 0, or null");
    if (!(l->negative_slope >= 0) || !isfinite((float)l->negative_slope))
        return r->ops->invalid(r, "negative_slope", "a float32 number >= 0");
    if (!isfinite((float)l->threshold))
        return r->ops->invalid(r, "threshold", "a float32 number");
    return STATUS_OK;
}

/* Keras 3's negative_slope, or Keras 2's alpha (the same number). */
static status_t read_leaky_relu(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->negative_slope = 0.3;
    l->max_value = NAN;
    STATUS_CHECK(r->ops->get_number(r, "alpha", false, &l->negative_slope));
    STATUS_CHECK(r->ops->get_number(r, "negative_slope", false, &l->negative_slope));
    if (!(l->negative_slope >= 0) || !isfinite((float)l->negative_slope))
        return r->ops->invalid(r, "negative_slope", "a float32 number >= 0");
    return STATUS_OK;
}

static status_t read_elu(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->alpha = 1.0;
    STATUS_CHECK(r->ops->get_number(r, "alpha", false, &l->alpha));
    if (!isfinite((float)l->alpha))
        return r->ops->invalid(r, "alpha", "a float32 number");
    return STATUS_OK;
}

/* The Softmax layer is the softmax activation over the last axis. */
static status_t read_softmax(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)r, (void)ret_input_length;
    l->activation = JOB_ACT_SOFTMAX;
    return STATUS_OK;
}

static status_t read_zero_padding(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->margins[0] = l->margins[1] = l->margins[2] = l->margins[3] = 1;
    return r->ops->get_margins(r, "padding", l->margins);
}

static status_t read_cropping(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    return r->ops->get_margins(r, "cropping", l->margins);
}

static status_t read_up_sampling(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    static const char *const interpolations[] = {"nearest", "bilinear"};
    int i = 0;

    (void)ret_input_length;
    l->size[0] = l->size[1] = 2;
    STATUS_CHECK(r->ops->get_pair(r, "size", false, l->size));
    STATUS_CHECK(r->ops->get_choice(r, "interpolation", interpolations, 2, &i));
    l->bilinear = i == 1;
    return STATUS_OK;
}

/* dims must be a permutation of 1..rank; the rank is checked when the model is built. */
static status_t read_permute(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    int seen = 0;

    (void)ret_input_length;
    STATUS_CHECK(r->ops->get_shape(r, "dims", l->dims, &l->n_dims));
    for (int i = 0; i < l->n_dims; i++) {
        if (l->dims[i] < 1 || l->dims[i] > l->n_dims || (seen & (1 << l->dims[i])))
            return r->ops->invalid(r, "dims", "a permutation of 1 .. its length");
        seen |= 1 << l->dims[i];
    }
    return STATUS_OK;
}

static status_t read_repeat(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    return r->ops->get_int(r, "n", true, 1, &l->repeat);
}

/* PReLU: alpha per value of an example, one per group along the shared axes. */
static status_t read_prelu(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    int axes[JOB_MAX_RANK], n = 0;

    (void)ret_input_length;
    STATUS_CHECK(r->ops->get_init(r, "alpha_initializer", &l->kernel_init));
    STATUS_CHECK(r->ops->get_axes(r, "shared_axes", axes, &n));
    for (int i = 0; i < n; i++) {
        if (axes[i] > JOB_MAX_RANK)
            return r->ops->invalid(r, "shared_axes", "axes 1 to 4 (1: the first after the batch)");
        l->shared_axes |= 1u << axes[i];
    }
    return STATUS_OK;
}

static status_t read_gaussian_noise(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    STATUS_CHECK(r->ops->get_number(r, "stddev", true, &l->stddev));
    if (!(l->stddev >= 0) || !isfinite((float)l->stddev))
        return r->ops->invalid(r, "stddev", "a float32 number >= 0");
    return r->ops->get_seed(r, "seed", &l->dropout_seed);
}

static status_t read_nothing(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)r, (void)l, (void)ret_input_length;
    return STATUS_OK;
}

static status_t read_concatenate(job_layer_reader_t *r, job_layer_t *l, int *ret_input_length)
{
    (void)ret_input_length;
    l->axis = -1;
    return r->ops->get_axis(r, "axis", &l->axis);
}

/* BatchNormalization over the last axis (the engine checks that `axis` names it). */
static status_t read_batch_normalization(job_layer_reader_t *r, job_layer_t *l,
                                         int *ret_input_length)
{
    l->axis = -1;
    l->momentum = 0.99;
    l->moving_mean_init.kind = JOB_INIT_ZEROS;
    l->moving_variance_init.kind = JOB_INIT_ONES;
    STATUS_CHECK(r->ops->get_axis(r, "axis", &l->axis));
    STATUS_CHECK(r->ops->get_number(r, "momentum", false, &l->momentum));
    if (!(l->momentum >= 0 && l->momentum <= 1))
        return r->ops->invalid(r, "momentum", "a number from 0 to 1");
    STATUS_CHECK(r->ops->get_bool(r, "synchronized", &l->synchronized));
    STATUS_CHECK(read_layer_normalization(r, l, ret_input_length));
    STATUS_CHECK(r->ops->get_init(r, "moving_mean_initializer", &l->moving_mean_init));
    return r->ops->get_init(r, "moving_variance_initializer", &l->moving_variance_init);
}

status_t job_layer_read_common(job_layer_reader_t *r, job_layer_t *l)
{
    return r->ops->get_regularizer(r, "activity_regularizer", &l->activity_reg);
}

/* ---- the table ---- */

#define KEYS(a) a, sizeof(a) / sizeof((a)[0])

static const char *const dense_keys[] = {"units",
                                         "activation",
                                         "use_bias",
                                         "kernel_initializer",
                                         "bias_initializer",
                                         "kernel_regularizer",
                                         "bias_regularizer",
                                         "kernel_constraint",
                                         "bias_constraint"};
static const char *const conv_keys[] = {"filters",
                                        "kernel_size",
                                        "strides",
                                        "padding",
                                        "activation",
                                        "use_bias",
                                        "kernel_initializer",
                                        "bias_initializer",
                                        "kernel_regularizer",
                                        "bias_regularizer",
                                        "kernel_constraint",
                                        "bias_constraint"};
static const char *const pool_keys[] = {"pool_size", "strides", "padding"};
static const char *const reshape_keys[] = {"target_shape"};
static const char *const dropout_keys[] = {"rate", "seed"};
static const char *const embedding_keys[] = {"input_dim", "output_dim", "embeddings_initializer",
                                             "input_length", "mask_zero"};
static const char *const activation_keys[] = {"activation"};
static const char *const rescaling_keys[] = {"scale", "offset"};
static const char *const relu_keys[] = {"max_value", "negative_slope", "threshold"};
static const char *const leaky_relu_keys[] = {"negative_slope", "alpha"};
static const char *const prelu_keys[] = {"alpha_initializer", "shared_axes"};
static const job_keras_key_t prelu_fixed[] = {{"alpha_regularizer", JOB_KERAS_NULL},
                                              {"alpha_constraint", JOB_KERAS_NULL}};
static const char *const gaussian_noise_keys[] = {"stddev", "seed"};
static const char *const elu_keys[] = {"alpha"};
static const job_keras_key_t softmax_fixed[] = {{"axis", JOB_KERAS_LAST_AXIS}};
static const char *const depthwise_keys[] = {"depth_multiplier",
                                             "kernel_size",
                                             "strides",
                                             "padding",
                                             "activation",
                                             "use_bias",
                                             "depthwise_initializer",
                                             "bias_initializer",
                                             "depthwise_regularizer",
                                             "bias_regularizer",
                                             "depthwise_constraint",
                                             "bias_constraint"};
static const char *const separable_keys[] = {"filters",
                                             "depth_multiplier",
                                             "kernel_size",
                                             "strides",
                                             "padding",
                                             "activation",
                                             "use_bias",
                                             "depthwise_initializer",
                                             "pointwise_initializer",
                                             "bias_initializer",
                                             "depthwise_regularizer",
                                             "pointwise_regularizer",
                                             "bias_regularizer",
                                             "depthwise_constraint",
                                             "pointwise_constraint",
                                             "bias_constraint"};
static const job_keras_key_t depthwise_fixed[] = {{"data_format", JOB_KERAS_CHANNELS_LAST},
                                                  {"dilation_rate", JOB_KERAS_ONES}};
static const char *const zero_padding_keys[] = {"padding"};
static const char *const cropping_keys[] = {"cropping"};
static const char *const up_sampling_keys[] = {"size", "interpolation"};
static const char *const permute_keys[] = {"dims"};
static const char *const repeat_keys[] = {"n"};
static const char *const concatenate_keys[] = {"axis"};
static const char *const batch_norm_keys[] = {"axis",
                                              "momentum",
                                              "synchronized",
                                              "epsilon",
                                              "center",
                                              "scale",
                                              "gamma_initializer",
                                              "beta_initializer",
                                              "moving_mean_initializer",
                                              "moving_variance_initializer",
                                              "gamma_regularizer",
                                              "beta_regularizer",
                                              "gamma_constraint",
                                              "beta_constraint"};
static const job_keras_key_t batch_norm_fixed[] = {
    {"renorm", JOB_KERAS_FALSE},
    {"renorm_clipping", JOB_KERAS_NULL},
    {"renorm_momentum", JOB_KERAS_IGNORED},
    {"virtual_batch_size", JOB_KERAS_NULL},
    {"adjustment", JOB_KERAS_NULL},
    {"fused", JOB_KERAS_IGNORED},
};
static const char *const layer_norm_keys[] = {
    "epsilon",           "center",           "scale",
    "gamma_initializer", "beta_initializer", "gamma_regularizer",
    "beta_regularizer",  "gamma_constraint", "beta_constraint"};

/* Keras options of Dense and Conv2D that must stay off. */
#define WEIGHTS_OFF                                                                                \
    {"lora_rank", JOB_KERAS_NULL}, {"lora_alpha", JOB_KERAS_IGNORED},                              \
    {                                                                                              \
        "quantization_config", JOB_KERAS_NULL                                                      \
    }

static const job_keras_key_t dense_fixed[] = {WEIGHTS_OFF};
static const job_keras_key_t conv_fixed[] = {
    {"data_format", JOB_KERAS_CHANNELS_LAST},
    {"dilation_rate", JOB_KERAS_ONES},
    {"groups", JOB_KERAS_ONES},
    WEIGHTS_OFF,
};
static const job_keras_key_t channels_last[] = {{"data_format", JOB_KERAS_CHANNELS_LAST}};
static const job_keras_key_t dropout_fixed[] = {{"noise_shape", JOB_KERAS_NULL}};
static const job_keras_key_t spatial_dropout2d_fixed[] = {{"noise_shape", JOB_KERAS_NULL},
                                                          {"data_format", JOB_KERAS_CHANNELS_LAST}};
static const job_keras_key_t embedding_fixed[] = {
    {"embeddings_regularizer", JOB_KERAS_NULL},
    {"embeddings_constraint", JOB_KERAS_NULL},
    {"sparse", JOB_KERAS_FALSE},
    {"lora_rank", JOB_KERAS_NULL},
    {"lora_alpha", JOB_KERAS_IGNORED},
    {"quantization_config", JOB_KERAS_NULL},
};
static const job_keras_key_t global_pool_fixed[] = {
    {"data_format", JOB_KERAS_CHANNELS_LAST},
    {"keepdims", JOB_KERAS_FALSE},
};

static const job_keras_key_t layer_norm_fixed[] = {
    {"axis", JOB_KERAS_LAST_AXIS},
    {"rms_scaling", JOB_KERAS_FALSE},
};

static const job_layer_info_t table[] = {
    [JOB_LAYER_DENSE] = {"dense", "Dense", KEYS(dense_keys), KEYS(dense_fixed), read_dense},
    [JOB_LAYER_CONV2D] = {"conv2d", "Conv2D", KEYS(conv_keys), KEYS(conv_fixed), read_conv2d},
    [JOB_LAYER_MAX_POOLING2D] = {"max_pooling2d", "MaxPooling2D", KEYS(pool_keys),
                                 KEYS(channels_last), read_pooling2d},
    [JOB_LAYER_AVERAGE_POOLING2D] = {"average_pooling2d", "AveragePooling2D", KEYS(pool_keys),
                                     KEYS(channels_last), read_pooling2d},
    [JOB_LAYER_FLATTEN] = {"flatten", "Flatten", NULL, 0, KEYS(channels_last), read_nothing},
    [JOB_LAYER_RESHAPE] = {"reshape", "Reshape", KEYS(reshape_keys), NULL, 0, read_reshape},
    [JOB_LAYER_DROPOUT] = {"dropout", "Dropout", KEYS(dropout_keys), KEYS(dropout_fixed),
                           read_dropout},
    [JOB_LAYER_EMBEDDING] = {"embedding", "Embedding", KEYS(embedding_keys), KEYS(embedding_fixed),
                             read_embedding},
    [JOB_LAYER_GLOBAL_AVERAGE_POOLING1D] = {"global_average_pooling1d", "GlobalAveragePooling1D",
                                            NULL, 0, KEYS(global_pool_fixed), read_nothing},
    [JOB_LAYER_GLOBAL_AVERAGE_POOLING2D] = {"global_average_pooling2d", "GlobalAveragePooling2D",
                                            NULL, 0, KEYS(global_pool_fixed), read_nothing},
    [JOB_LAYER_ACTIVATION] = {"activation", "Activation", KEYS(activation_keys), NULL, 0,
                              read_activation},
    [JOB_LAYER_RESCALING] = {"rescaling", "Rescaling", KEYS(rescaling_keys), NULL, 0,
                             read_rescaling},
    [JOB_LAYER_LAYER_NORMALIZATION] = {"layer_normalization", "LayerNormalization",
                                       KEYS(layer_norm_keys), KEYS(layer_norm_fixed),
                                       read_layer_normalization},
    [JOB_LAYER_CONV1D] = {"conv1d", "Conv1D", KEYS(conv_keys), KEYS(conv_fixed), read_conv1d},
    [JOB_LAYER_MAX_POOLING1D] = {"max_pooling1d", "MaxPooling1D", KEYS(pool_keys),
                                 KEYS(channels_last), read_pooling1d},
    [JOB_LAYER_AVERAGE_POOLING1D] = {"average_pooling1d", "AveragePooling1D", KEYS(pool_keys),
                                     KEYS(channels_last), read_pooling1d},
    [JOB_LAYER_GLOBAL_MAX_POOLING1D] = {"global_max_pooling1d", "GlobalMaxPooling1D", NULL, 0,
                                        KEYS(global_pool_fixed), read_nothing},
    [JOB_LAYER_GLOBAL_MAX_POOLING2D] = {"global_max_pooling2d", "GlobalMaxPooling2D", NULL, 0,
                                        KEYS(global_pool_fixed), read_nothing},
    [JOB_LAYER_RELU] = {"relu", "ReLU", KEYS(relu_keys), NULL, 0, read_relu},
    [JOB_LAYER_LEAKY_RELU] = {"leaky_relu", "LeakyReLU", KEYS(leaky_relu_keys), NULL, 0,
                              read_leaky_relu},
    [JOB_LAYER_ELU] = {"elu", "ELU", KEYS(elu_keys), NULL, 0, read_elu},
    [JOB_LAYER_SOFTMAX] = {"softmax", "Softmax", NULL, 0, KEYS(softmax_fixed), read_softmax},
    [JOB_LAYER_ZERO_PADDING2D] = {"zero_padding2d", "ZeroPadding2D", KEYS(zero_padding_keys),
                                  KEYS(channels_last), read_zero_padding},
    [JOB_LAYER_CROPPING2D] = {"cropping2d", "Cropping2D", KEYS(cropping_keys), KEYS(channels_last),
                              read_cropping},
    [JOB_LAYER_UP_SAMPLING2D] = {"up_sampling2d", "UpSampling2D", KEYS(up_sampling_keys),
                                 KEYS(channels_last), read_up_sampling},
    [JOB_LAYER_PERMUTE] = {"permute", "Permute", KEYS(permute_keys), NULL, 0, read_permute},
    [JOB_LAYER_REPEAT_VECTOR] = {"repeat_vector", "RepeatVector", KEYS(repeat_keys), NULL, 0,
                                 read_repeat},
    [JOB_LAYER_PRELU] = {"prelu", "PReLU", KEYS(prelu_keys), KEYS(prelu_fixed), read_prelu},
    [JOB_LAYER_SPATIAL_DROPOUT1D] = {"spatial_dropout1d", "SpatialDropout1D", KEYS(dropout_keys),
                                     KEYS(dropout_fixed), read_dropout},
    [JOB_LAYER_SPATIAL_DROPOUT2D] = {"spatial_dropout2d", "SpatialDropout2D", KEYS(dropout_keys),
                                     KEYS(spatial_dropout2d_fixed), read_dropout},
    [JOB_LAYER_GAUSSIAN_NOISE] = {"gaussian_noise", "GaussianNoise", KEYS(gaussian_noise_keys),
                                  NULL, 0, read_gaussian_noise},
    [JOB_LAYER_DEPTHWISE_CONV2D] = {"depthwise_conv2d", "DepthwiseConv2D", KEYS(depthwise_keys),
                                    KEYS(depthwise_fixed), read_depthwise},
    [JOB_LAYER_SEPARABLE_CONV2D] = {"separable_conv2d", "SeparableConv2D", KEYS(separable_keys),
                                    KEYS(depthwise_fixed), read_depthwise},
    [JOB_LAYER_ADD] = {"add", "Add", NULL, 0, NULL, 0, read_nothing},
    [JOB_LAYER_SUBTRACT] = {"subtract", "Subtract", NULL, 0, NULL, 0, read_nothing},
    [JOB_LAYER_MULTIPLY] = {"multiply", "Multiply", NULL, 0, NULL, 0, read_nothing},
    [JOB_LAYER_AVERAGE] = {"average", "Average", NULL, 0, NULL, 0, read_nothing},
    [JOB_LAYER_MAXIMUM] = {"maximum", "Maximum", NULL, 0, NULL, 0, read_nothing},
    [JOB_LAYER_MINIMUM] = {"minimum", "Minimum", NULL, 0, NULL, 0, read_nothing},
    [JOB_LAYER_CONCATENATE] = {"concatenate", "Concatenate", KEYS(concatenate_keys), NULL, 0,
                               read_concatenate},
    [JOB_LAYER_BATCH_NORMALIZATION] = {"batch_normalization", "BatchNormalization",
                                       KEYS(batch_norm_keys), KEYS(batch_norm_fixed),
                                       read_batch_normalization},
};

_Static_assert(sizeof(table) / sizeof(table[0]) == JOB_LAYER_KINDS, "one row per job_layer_kind_t");

/* Keras's naming.to_snake_case of a class name: "_" before a capital that starts a lowercase
 * run (not at the start), then between a lowercase letter and a capital; lowercased
 * ("MaxPooling2D" -> "max_pooling2d", "PReLU" -> "p_re_lu"). */
static void snake_case(const char *cls, char *out, size_t cap)
{
    char mid[128];
    size_t n = strlen(cls), m = 0, o = 0;

    for (size_t i = 0; i < n && m + 3 < sizeof(mid);) {
        if (i + 2 < n && isupper((unsigned char)cls[i + 1]) && islower((unsigned char)cls[i + 2])) {
            mid[m++] = cls[i++];
            mid[m++] = '_';
            mid[m++] = cls[i++];
            while (i < n && islower((unsigned char)cls[i]) && m + 1 < sizeof(mid))
                mid[m++] = cls[i++];
        } else {
            mid[m++] = cls[i++];
        }
    }
    for (size_t i = 0; i < m && o + 3 < cap; i++) {
        out[o++] = (char)tolower((unsigned char)mid[i]);
        if (islower((unsigned char)mid[i]) && i + 1 < m && isupper((unsigned char)mid[i + 1]))
            out[o++] = '_';
    }
    out[o] = '\0';
}

void job_keras_paths(const job_layer_t *layers, size_t n, char (*paths)[96])
{
    for (size_t l = 0; l < n; l++) {
        int same = 0;
        char base[80];
        if (layers[l].shares > 0 && (size_t)layers[l].shares <= l) {
            memcpy(paths[l], paths[layers[l].shares - 1], sizeof(paths[l]));
            continue;
        }
        snake_case(table[layers[l].kind].keras_class, base, sizeof(base));
        for (size_t k = 0; k < l; k++)
            same += layers[k].kind == layers[l].kind && layers[k].shares == 0;
        if (same == 0)
            snprintf(paths[l], sizeof(paths[l]), "%s", base);
        else
            snprintf(paths[l], sizeof(paths[l]), "%s_%d", base, same);
    }
}

const job_layer_info_t *job_layer_info(job_layer_kind_t kind)
{
    return (size_t)kind < JOB_LAYER_KINDS ? &table[kind] : NULL;
}

void job_layer_names(const char *names[JOB_LAYER_KINDS], bool keras)
{
    for (size_t i = 0; i < JOB_LAYER_KINDS; i++)
        names[i] = keras ? table[i].keras_class : table[i].name;
}

const char *job_layer_keras_class(job_layer_kind_t k)
{
    return (size_t)k < JOB_LAYER_KINDS ? table[k].keras_class : "unknown";
}

const char *job_layer_kind_name(job_layer_kind_t k)
{
    return (size_t)k < JOB_LAYER_KINDS ? table[k].name : "unknown";
}

/* ---- the model ---- */

status_t job_model_add_layer(job_model_t *m, job_layer_kind_t kind, const char *where,
                             job_layer_t **ret_layer, status_msg_t *err)
{
    job_layer_t *layers, *l;

    if (m->n_layers >= JOB_MAX_LAYERS)
        return status_fail(err, STATUS_RESOURCE_EXHAUSTED, "%s: more than %d layers", where,
                           JOB_MAX_LAYERS);
    layers = realloc(m->layers, (m->n_layers + 1) * sizeof(*layers));
    if (layers == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", where);
    m->layers = layers;
    l = &layers[m->n_layers++];
    memset(l, 0, sizeof(*l));
    l->kind = kind;
    l->activation = JOB_ACT_LINEAR;
    *ret_layer = l;
    return STATUS_OK;
}

static bool layer_name_taken(const job_model_t *m, const job_layer_t *self)
{
    for (size_t i = 0; i < m->n_layers; i++)
        if (&m->layers[i] != self && strcmp(m->layers[i].name, self->name) == 0)
            return true;
    for (int i = 0; i < m->n_inputs; i++)
        if (strcmp(m->inputs[i].name, self->name) == 0)
            return true;
    return false;
}

/* TensorFlow's rule for the names of operations and variables, without its scope separators
 * ('/', '>'): the worker names a layer's variables "<layer>/kernel". Empty: named later. */
static bool layer_name_valid(const char *name)
{
    for (size_t i = 0; name[i] != '\0'; i++) {
        char ch = name[i];
        bool alnum =
            (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!alnum && ch != '.' && (i == 0 || (ch != '_' && ch != '-')))
            return false;
    }
    return true;
}

/* Names an unnamed layer the way Keras does: the kind, then kind_1, kind_2 ... skipping names
 * already used. *next is the kind's next suffix to try (0: the bare kind): a name it passed over
 * stays taken, so each kind's search goes on from where the last one stopped. */
static void name_layer(job_model_t *m, job_layer_t *l, int *next)
{
    const char *base = job_layer_kind_name(l->kind);

    for (;; (*next)++) {
        if (*next == 0)
            snprintf(l->name, sizeof(l->name), "%s", base);
        else
            snprintf(l->name, sizeof(l->name), "%s_%d", base, *next);
        if (!layer_name_taken(m, l))
            break;
    }
    (*next)++;
}

bool job_layer_is_merge(job_layer_kind_t k)
{
    return k >= JOB_LAYER_ADD && k <= JOB_LAYER_CONCATENATE;
}

int job_layer_input(const job_model_t *m, size_t i, int k)
{
    const job_layer_t *l = &m->layers[i];

    if (l->n_inputs > 0)
        return k < l->n_inputs ? l->inputs[k] : JOB_INPUT_MODEL;
    return i == 0 ? JOB_INPUT_MODEL : (int)i - 1;
}

bool job_layer_shareable(const job_model_t *m, size_t i)
{
    const job_layer_t *l = &m->layers[i];
    const job_layer_t *first =
        l->shares > 0 && (size_t)l->shares <= i ? &m->layers[l->shares - 1] : NULL;

    return first != NULL && first->shares == 0 && first->kind == l->kind;
}

size_t job_shape_len(const int *shape, int rank)
{
    size_t n = 1;

    for (int i = 0; i < rank; i++)
        n *= (size_t)shape[i];
    return n;
}

int job_model_outputs(const job_model_t *m)
{
    return m->n_outputs > 1 ? m->n_outputs : 1;
}

int job_model_output(const job_model_t *m, int k)
{
    return m->n_outputs > 1 ? m->outputs[k] : (int)m->n_layers - 1;
}

int job_model_inputs(const job_model_t *m)
{
    return m->n_inputs > 1 ? m->n_inputs : 1;
}

const int *job_model_input_shape(const job_model_t *m, int k, int *ret_rank)
{
    if (m->n_inputs > 1 && k >= 0 && k < m->n_inputs) {
        *ret_rank = m->inputs[k].rank;
        return m->inputs[k].shape;
    }
    *ret_rank = m->input_rank;
    return m->input_shape;
}

int job_layer_call(const job_model_t *m, size_t i)
{
    int c = m->layers[i].shares > 0;

    for (size_t j = 0; c > 0 && j < i; j++)
        c += m->layers[j].shares == m->layers[i].shares;
    return c;
}

bool job_model_is_graph(const job_model_t *m)
{
    if (m->n_outputs > 1)
        return true;
    for (size_t i = 0; i < m->n_layers; i++)
        if (m->layers[i].n_inputs > 1 || job_layer_input(m, i, 0) != (int)i - 1 ||
            m->layers[i].shares > 0 || m->n_inputs > 1)
            return true;
    return false;
}

/* The wiring of a graph: merges read two or more earlier layers (Subtract two), other layers one;
 * every layer but the outputs (the last, and the others of a model of several) is read by a later
 * one; an integer input (ids) goes to Embedding layers only. */
static status_t check_graph(job_model_t *m, const char *where, status_msg_t *err)
{
    bool *read = calloc(m->n_layers + 1, sizeof(*read)), input_read[JOB_MAX_MODEL_INPUTS] = {0};
    int inputs = job_model_inputs(m);

    if (read == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", where);
    for (size_t i = 0; i < m->n_layers; i++) {
        const job_layer_t *l = &m->layers[i];
        int n = l->n_inputs > 0 ? l->n_inputs : 1;
        const char *why = NULL;

        if (l->shares > 0 && !job_layer_shareable(m, i))
            why = "is a later call of a layer that is not an earlier first call of its kind";
        else if (job_layer_is_merge(l->kind) && l->kind == JOB_LAYER_SUBTRACT && n != 2)
            why = "takes exactly two inputs";
        else if (job_layer_is_merge(l->kind) && n < 2)
            why = "merges two or more inputs: name them with inputs: [LAYER, ...] beside it "
                  "(or wire them in a Functional model's JSON)";
        else if (!job_layer_is_merge(l->kind) && n > 1)
            why = "takes one input";
        for (int k = 0; why == NULL && k < n; k++) {
            int src = job_layer_input(m, i, k);
            if (src < JOB_INPUT_OF(inputs - 1) || src >= (int)i)
                why = "reads a layer that does not come before it";
            else if (src >= 0)
                read[src] = true;
            else if ((m->n_inputs > 1 ? m->inputs[job_input_index(src)].is_int : m->input_is_int) &&
                     l->kind != JOB_LAYER_EMBEDDING)
                why = "reads the model's integer input, which only an embedding can";
            else
                input_read[job_input_index(src)] = true;
        }
        if (why != NULL) {
            free(read);
            return status_fail(err, STATUS_BAD_CONFIG, "%s: layer '%s' (%s) %s", where, l->name,
                               job_layer_kind_name(l->kind), why);
        }
    }
    for (int k = 0; k < inputs; k++)
        if (!input_read[k]) {
            free(read);
            return status_fail(err, STATUS_BAD_CONFIG, "%s: no layer reads the model's input '%s'",
                               where, m->n_inputs > 1 ? m->inputs[k].name : "");
        }
    for (int k = 0; k < job_model_outputs(m); k++)
        read[job_model_output(m, k)] = true;
    for (size_t i = 0; i + 1 < m->n_layers; i++)
        if (!read[i]) {
            free(read);
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: nothing reads the output of layer '%s': every layer must lead "
                               "to one of the model's outputs",
                               where, m->layers[i].name);
        }
    free(read);
    return STATUS_OK;
}

/* The order Keras runs a graph's calls in (Keras 3's map_graph and _run_through_graph, Keras 2's
 * _map_graph_network and _run_internal_graph): a depth-first walk from the outputs, in their
 * order, lists each call after its inputs (in their order); walking that list backwards, a call's
 * depth is the most of 0 and its readers' depths + 1, raised to the depth of its layer's call seen
 * last (a shared layer's calls run no earlier than one seen before). The calls run deepest first,
 * those of one depth in the order the backward walk first met them (as a reader's input, or as an
 * output). Sets each entry's run_rank: its place among its layer's calls in that order. */
static status_t order_calls(job_model_t *m, const char *where, status_msg_t *err)
{
    size_t n = m->n_layers, n_post = 0, top = 0, seq = 0;
    int *post = calloc(4 * n + 1, sizeof(int)), *depth, *met, *layer_depth;
    struct walk {
        int node, next;
    } *stack = calloc(n + 1, sizeof(*stack));
    bool *done = calloc(n + 1, sizeof(*done));

    if (post == NULL || stack == NULL || done == NULL) {
        free(post);
        free(stack);
        free(done);
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", where);
    }
    depth = post + n;
    met = depth + n;
    layer_depth = met + n;
    for (int k = 0; k < job_model_outputs(m); k++) {
        int out = job_model_output(m, k);
        if (done[out])
            continue;
        done[out] = true; /* on the stack: inputs come before their readers, no cycle */
        stack[top++] = (struct walk){out, 0};
        while (top > 0) {
            struct walk *w = &stack[top - 1];
            const job_layer_t *l = &m->layers[w->node];
            int src;
            if (w->next == (l->n_inputs > 0 ? l->n_inputs : 1)) {
                post[n_post++] = w->node;
                top--;
            } else if ((src = job_layer_input(m, (size_t)w->node, w->next++)) >= 0 && !done[src]) {
                done[src] = true;
                stack[top++] = (struct walk){src, 0};
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        met[i] = -1;
    while (n_post-- > 0) {
        int v = post[n_post], op = m->layers[v].shares > 0 ? m->layers[v].shares - 1 : v;
        const job_layer_t *l = &m->layers[v];
        if (met[v] < 0) { /* an output */
            met[v] = (int)seq++;
            depth[v] = 0;
        }
        if (layer_depth[op] > depth[v])
            depth[v] = layer_depth[op];
        layer_depth[op] = depth[v];
        for (int k = 0; k < (l->n_inputs > 0 ? l->n_inputs : 1); k++) {
            int src = job_layer_input(m, (size_t)v, k);
            if (src < 0)
                continue;
            if (met[src] < 0) {
                met[src] = (int)seq++;
                depth[src] = depth[v] + 1;
            } else if (depth[src] < depth[v] + 1) {
                depth[src] = depth[v] + 1;
            }
        }
    }
    /* each call's rank: the calls of its layer that run before it */
    for (size_t i = 0; i < n; i++) {
        job_layer_t *l = &m->layers[i];
        int op = l->shares > 0 ? l->shares - 1 : (int)i;
        l->run_rank = 0;
        for (size_t j = 0; j < n; j++) {
            int other = m->layers[j].shares > 0 ? m->layers[j].shares - 1 : (int)j;
            if (j != i && other == op &&
                (depth[j] > depth[i] || (depth[j] == depth[i] && met[j] < met[i])))
                l->run_rank++;
        }
    }
    free(post);
    free(stack);
    free(done);
    return STATUS_OK;
}

status_t job_model_finish(job_model_t *m, const char *where, status_msg_t *err)
{
    int next[JOB_LAYER_KINDS] = {0};

    if (m->n_layers == 0)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: the model has no layers", where);
    if (m->input_rank == 0)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: the model has no input shape: give input_shape on the first "
                           "layer (for example input_shape: [784])",
                           where);
    /* several outputs: distinct layers, the last among them (nothing reads it) */
    bool last_out = m->n_outputs == 0;
    if (m->n_outputs == 1 || m->n_outputs < 0 || m->n_outputs > JOB_MAX_OUTPUTS)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: %d outputs (2 to %d, or one)", where,
                           m->n_outputs, JOB_MAX_OUTPUTS);
    for (int k = 0; k < m->n_outputs; k++) {
        if (m->outputs[k] < 0 || (size_t)m->outputs[k] >= m->n_layers)
            return status_fail(err, STATUS_BAD_CONFIG, "%s: output %d is not a layer", where, k);
        for (int e = 0; e < k; e++)
            if (m->outputs[e] == m->outputs[k] ||
                strcmp(m->output_names[e], m->output_names[k]) == 0)
                return status_fail(err, STATUS_BAD_CONFIG,
                                   "%s: outputs %d and %d are one layer, or one name", where, e, k);
        /* it names the output's loss in reports and TensorBoard tags, as a layer's name does */
        if (!layer_name_valid(m->output_names[k]))
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: output %d: its name may hold only letters, digits, '_', '.' "
                               "and '-', and begin with a letter, a digit or '.'",
                               where, k);
        last_out |= (size_t)m->outputs[k] == m->n_layers - 1;
    }
    if (!last_out)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s: nothing reads the last layer, and it is not an output", where);
    /* an Embedding reads token ids, a model input: with several, the one it names (which then
     * holds ids: check_graph), else the first layer reads the model's input, whatever the graph */
    for (size_t i = 0; i < m->n_layers && m->n_inputs > 1; i++)
        if (m->layers[i].kind == JOB_LAYER_EMBEDDING) {
            int src = job_layer_input(m, i, 0);
            if (src >= 0 || src < JOB_INPUT_OF(m->n_inputs - 1))
                return status_fail(err, STATUS_BAD_CONFIG,
                                   "%s: layer '%s': an embedding reads one of the model's inputs "
                                   "(its input is integer ids)",
                                   where, m->layers[i].name);
            m->inputs[job_input_index(src)].is_int = true;
        }
    for (size_t i = 1; i < m->n_layers && m->n_inputs <= 1; i++)
        if (m->layers[i].kind == JOB_LAYER_EMBEDDING)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: layer %zu: embedding must be the first layer (its input is "
                               "integer ids)",
                               where, i);
    m->input_is_int = m->n_inputs <= 1 && m->layers[0].kind == JOB_LAYER_EMBEDDING;
    for (int k = 0; k < m->n_inputs; k++)
        if (!layer_name_valid(m->inputs[k].name) || m->inputs[k].name[0] == '\0') {
            char shown[4 * sizeof(m->inputs[k].name)];
            utf8_escape(shown, sizeof(shown), m->inputs[k].name, strlen(m->inputs[k].name));
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: input %d: the name '%s' may hold only letters, digits, '_', "
                               "'.' and '-', and begin with a letter, a digit or '.'",
                               where, k, shown);
        }
    for (size_t i = 0; i < m->n_layers; i++)
        if (!layer_name_valid(m->layers[i].name)) {
            char shown[4 * sizeof(m->layers[i].name)];
            utf8_escape(shown, sizeof(shown), m->layers[i].name, strlen(m->layers[i].name));
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: layer %zu: the name '%s' may hold only letters, digits, '_', "
                               "'.' and '-', and begin with a letter, a digit or '.' (it names "
                               "the layer's variables, as in TensorFlow)",
                               where, i, shown);
        }
    for (size_t i = 0; i < m->n_layers; i++) {
        for (size_t j = 0; j < i && m->layers[i].name[0] != '\0' && m->layers[i].shares == 0; j++)
            if (strcmp(m->layers[i].name, m->layers[j].name) == 0)
                return status_fail(err, STATUS_BAD_CONFIG,
                                   "%s: two layers are named '%s' (layers %zu and %zu)", where,
                                   m->layers[i].name, j, i);
    }
    for (size_t i = 0; i < m->n_layers; i++)
        if (m->layers[i].name[0] == '\0' && m->layers[i].shares == 0)
            name_layer(m, &m->layers[i], &next[m->layers[i].kind]);
    for (size_t i = 0; i < m->n_layers; i++) /* a shared layer's calls are one layer, one name */
        if (m->layers[i].shares > 0 && (size_t)m->layers[i].shares <= i)
            memcpy(m->layers[i].name, m->layers[m->layers[i].shares - 1].name,
                   sizeof(m->layers[i].name));
    STATUS_CHECK(check_graph(m, where, err));
    return order_calls(m, where, err);
}

void job_model_done(job_model_t *m)
{
    if (m == NULL)
        return;
    free(m->layers);
    free(m->keras_json);
    free(m->keras_json_path);
    memset(m, 0, sizeof(*m));
}
