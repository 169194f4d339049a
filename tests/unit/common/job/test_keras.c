/* Unit tests for common/job/keras.c: the Keras model files that real Keras 2 (TensorFlow 2.15) and
 * Keras 3 wrote (tests/fixtures/keras/, made by make_fixtures.py there) parse to the layers
 * they describe, and every option Tessera does not implement is rejected by name. Fixtures are
 * found under $TESSERA_SOURCE_DIR (default: the current directory). */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_run.h"
#include "job/job.h"
#include "job/layers.h"

static const char *const generations[] = {"keras2", "keras3"};

/* Reads tests/fixtures/keras/<name>.json; the caller frees it. */
static char *fixture_text(const char *name)
{
    const char *root = getenv("TESSERA_SOURCE_DIR");
    char path[1024];
    FILE *f;
    char *text;
    long len;

    snprintf(path, sizeof(path), "%s/tests/fixtures/keras/%s.json", root != NULL ? root : ".",
             name);
    f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open fixture %s (set TESSERA_SOURCE_DIR)", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    len = ftell(f);
    ck_assert_int_ge(len, 0);
    rewind(f);
    text = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(fread(text, 1, (size_t)len, f), (size_t)len);
    text[len] = '\0';
    fclose(f);
    return text;
}

/* Parses fixture <generation>_<model> and requires success. */
static void parse_fixture(int generation, const char *model, job_model_t *m)
{
    char name[64];
    char *text;
    status_msg_t err = {0};
    status_t rc;

    snprintf(name, sizeof(name), "%s_%s", generations[generation], model);
    text = fixture_text(name);
    rc = job_parse_keras_json(text, strlen(text), name, m, &err);
    ck_assert_msg(rc == STATUS_OK, "%s: %s", name, err.text);
    ck_assert_str_eq(m->keras_json, text);
    free(text);
}

/* The fixture with config[key] of config.layers[index] (the InputLayer counts) replaced by the
 * JSON `value`, or removed when value is NULL; the caller frees it. */
static char *mutated(const char *fixture, int index, const char *key, const char *value)
{
    char *text = fixture_text(fixture), *out;
    cJSON *root = cJSON_Parse(text);
    cJSON *layers, *cfg;

    ck_assert_ptr_nonnull(root);
    layers = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "config"), "layers");
    cfg = cJSON_GetObjectItem(cJSON_GetArrayItem(layers, index), "config");
    ck_assert_ptr_nonnull(cfg);
    cJSON_DeleteItemFromObject(cfg, key);
    if (value != NULL) {
        cJSON *v = cJSON_Parse(value);
        ck_assert_ptr_nonnull(v);
        cJSON_AddItemToObject(cfg, key, v);
    }
    out = cJSON_PrintUnformatted(root);
    ck_assert_ptr_nonnull(out);
    cJSON_Delete(root);
    free(text);
    return out;
}

/* Parses text, requires failure with a message containing each of the NULL-terminated
 * fragments, and checks that the output model was left empty. */
static void assert_rejected(const char *text, const char *path, ...)
{
    job_model_t m;
    status_msg_t err = {0};
    va_list ap;
    const char *want;

    memset(&m, 0x5a, sizeof(m));
    ck_assert_int_eq(job_parse_keras_json(text, strlen(text), path, &m, &err), STATUS_BAD_CONFIG);
    ck_assert_int_eq(err.status, STATUS_BAD_CONFIG);
    ck_assert_ptr_null(m.layers);
    ck_assert_ptr_null(m.keras_json);
    ck_assert_uint_eq(m.n_layers, 0);
    va_start(ap, path);
    while ((want = va_arg(ap, const char *)) != NULL)
        ck_assert_msg(strstr(err.text, want) != NULL, "message '%s' lacks '%s'", err.text, want);
    va_end(ap);
}

/* Mutates a fixture, parses it, and requires a rejection naming the fragments. */
static void assert_mutation_rejected(const char *fixture, int index, const char *key,
                                     const char *value, const char *want1, const char *want2)
{
    char *text = mutated(fixture, index, key, value);

    assert_rejected(text, "model.json", want1, want2, NULL);
    cJSON_free(text);
}

static void assert_init(const job_init_t *i, job_init_kind_t kind, double a, double b,
                        bool has_seed, uint64_t seed)
{
    ck_assert_int_eq(i->kind, kind);
    ck_assert_double_eq_tol(i->a, a, 1e-12);
    ck_assert_double_eq_tol(i->b, b, 1e-12);
    ck_assert_int_eq(i->has_seed, has_seed);
    if (has_seed)
        ck_assert_uint_eq(i->seed, seed);
}

static void assert_dense(const job_layer_t *l, const char *name, int units, job_activation_t act)
{
    ck_assert_int_eq(l->kind, JOB_LAYER_DENSE);
    ck_assert_str_eq(l->name, name);
    ck_assert_int_eq(l->units, units);
    ck_assert_int_eq(l->activation, act);
}

START_TEST(mlp_fixture_is_784_dense128_relu_dense10_softmax)
{
    job_model_t m;

    parse_fixture(_i, "mlp", &m);
    ck_assert_int_eq(m.input_rank, 1);
    ck_assert_int_eq(m.input_shape[0], 784);
    ck_assert(!m.input_is_int);
    ck_assert_uint_eq(m.n_layers, 2);
    assert_dense(&m.layers[0], "dense", 128, JOB_ACT_RELU);
    assert_dense(&m.layers[1], "dense_1", 10, JOB_ACT_SOFTMAX);
    for (size_t i = 0; i < 2; i++) {
        ck_assert(m.layers[i].use_bias);
        assert_init(&m.layers[i].kernel_init, JOB_INIT_GLOROT_UNIFORM, 0, 0, false, 0);
        assert_init(&m.layers[i].bias_init, JOB_INIT_ZEROS, 0, 0, false, 0);
    }
    job_model_done(&m);
}
END_TEST

START_TEST(cnn_fixture_has_conv_pool_blocks_on_28x28x1)
{
    static const job_layer_kind_t kinds[] = {
        JOB_LAYER_CONV2D,  JOB_LAYER_MAX_POOLING2D, JOB_LAYER_CONV2D, JOB_LAYER_MAX_POOLING2D,
        JOB_LAYER_FLATTEN, JOB_LAYER_DENSE,         JOB_LAYER_DENSE};
    job_model_t m;

    parse_fixture(_i, "cnn", &m);
    ck_assert_int_eq(m.input_rank, 3);
    ck_assert_int_eq(m.input_shape[0], 28);
    ck_assert_int_eq(m.input_shape[1], 28);
    ck_assert_int_eq(m.input_shape[2], 1);
    ck_assert_uint_eq(m.n_layers, 7);
    for (size_t i = 0; i < 7; i++)
        ck_assert_int_eq(m.layers[i].kind, kinds[i]);
    for (size_t i = 0; i < 3; i += 2) {
        const job_layer_t *conv = &m.layers[i], *pool = &m.layers[i + 1];
        ck_assert_int_eq(conv->filters, i == 0 ? 32 : 64);
        ck_assert_int_eq(conv->kernel_size[0], 3);
        ck_assert_int_eq(conv->kernel_size[1], 3);
        ck_assert_int_eq(conv->strides[0], 1);
        ck_assert_int_eq(conv->strides[1], 1);
        ck_assert(!conv->padding_same);
        ck_assert_int_eq(conv->activation, JOB_ACT_RELU);
        assert_init(&conv->kernel_init, JOB_INIT_GLOROT_UNIFORM, 0, 0, false, 0);
        ck_assert_int_eq(pool->pool_size[0], 2);
        ck_assert_int_eq(pool->pool_size[1], 2);
        ck_assert_int_eq(pool->strides[0], 2);
        ck_assert_int_eq(pool->strides[1], 2);
    }
    ck_assert_str_eq(m.layers[2].name, "conv2d_1");
    assert_dense(&m.layers[5], "dense", 64, JOB_ACT_RELU);
    assert_dense(&m.layers[6], "dense_1", 10, JOB_ACT_LINEAR);
    job_model_done(&m);
}
END_TEST

START_TEST(text_fixture_takes_integer_ids_into_an_embedding)
{
    job_model_t m;

    parse_fixture(_i, "text", &m);
    ck_assert_int_eq(m.input_rank, 1);
    ck_assert_int_eq(m.input_shape[0], 100);
    ck_assert(m.input_is_int);
    ck_assert_uint_eq(m.n_layers, 4);
    ck_assert_int_eq(m.layers[0].kind, JOB_LAYER_EMBEDDING);
    ck_assert_int_eq(m.layers[0].input_dim, 10000);
    ck_assert_int_eq(m.layers[0].output_dim, 16);
    assert_init(&m.layers[0].kernel_init, JOB_INIT_RANDOM_UNIFORM, -0.05, 0.05, false, 0);
    ck_assert_int_eq(m.layers[1].kind, JOB_LAYER_GLOBAL_AVERAGE_POOLING1D);
    assert_dense(&m.layers[2], "dense", 16, JOB_ACT_RELU);
    assert_dense(&m.layers[3], "dense_1", 1, JOB_ACT_LINEAR);
    job_model_done(&m);
}
END_TEST

START_TEST(layers_fixture_reads_every_other_layer_and_initializer)
{
    job_model_t m;
    const job_layer_t *l;

    parse_fixture(_i, "layers", &m);
    ck_assert_int_eq(m.input_rank, 1);
    ck_assert_int_eq(m.input_shape[0], 784);
    ck_assert_uint_eq(m.n_layers, 8);
    l = &m.layers[0];
    ck_assert_int_eq(l->kind, JOB_LAYER_RESHAPE);
    ck_assert_int_eq(l->target_rank, 3);
    ck_assert_int_eq(l->target_shape[0], 28);
    ck_assert_int_eq(l->target_shape[1], 28);
    ck_assert_int_eq(l->target_shape[2], 1);
    l = &m.layers[1];
    ck_assert_int_eq(l->kind, JOB_LAYER_CONV2D);
    ck_assert_int_eq(l->filters, 8);
    ck_assert_int_eq(l->kernel_size[0], 5);
    ck_assert_int_eq(l->kernel_size[1], 3);
    ck_assert_int_eq(l->strides[0], 1);
    ck_assert_int_eq(l->strides[1], 2);
    ck_assert(l->padding_same);
    ck_assert(!l->use_bias);
    assert_init(&l->kernel_init, JOB_INIT_HE_NORMAL, 0, 0, true, 7);
    l = &m.layers[2];
    ck_assert_int_eq(l->kind, JOB_LAYER_ACTIVATION);
    ck_assert_int_eq(l->activation, JOB_ACT_TANH);
    l = &m.layers[3];
    ck_assert_int_eq(l->kind, JOB_LAYER_AVERAGE_POOLING2D);
    ck_assert_int_eq(l->pool_size[0], 2);
    ck_assert_int_eq(l->strides[0], 1);
    ck_assert_int_eq(l->strides[1], 1);
    ck_assert(!l->padding_same);
    l = &m.layers[4];
    ck_assert_int_eq(l->kind, JOB_LAYER_DROPOUT);
    ck_assert_double_eq_tol(l->rate, 0.25, 1e-12);
    ck_assert_uint_eq(l->dropout_seed, 3);
    ck_assert_int_eq(m.layers[5].kind, JOB_LAYER_GLOBAL_AVERAGE_POOLING2D);
    l = &m.layers[6];
    assert_dense(l, "dense", 10, JOB_ACT_SIGMOID);
    assert_init(&l->kernel_init, JOB_INIT_RANDOM_NORMAL, 0.0, 0.02, true, 11);
    assert_init(&l->bias_init, JOB_INIT_CONSTANT, 0.1, 0, false, 0);
    l = &m.layers[7];
    assert_dense(l, "dense_1", 4, JOB_ACT_LINEAR);
    assert_init(&l->kernel_init, JOB_INIT_RANDOM_UNIFORM, -0.1, 0.2, false, 0);
    assert_init(&l->bias_init, JOB_INIT_ONES, 0, 0, false, 0);
    job_model_done(&m);
}
END_TEST

/* Both formats read a layer's options through one table: the same model written as a job file
 * and as Keras JSON gives the same layers, field for field, for every kind. */
static void assert_same_model(const char *yaml_layers, const char *keras_layers)
{
    char yaml[4096], json[4096];
    job_t job;
    job_model_t m;
    status_msg_t err = {0};

    snprintf(yaml, sizeof(yaml),
             "loss: mse\ndata: {batch_size: 8, train: {format: synthetic, examples: 10, "
             "shape: [4], classes: 2}}\nmodel:\n%s",
             yaml_layers);
    snprintf(json, sizeof(json), "{\"class_name\": \"Sequential\", \"config\": {\"layers\": [%s]}}",
             keras_layers);
    ck_assert_msg(job_parse(yaml, strlen(yaml), "job.yaml", &job, &err) == STATUS_OK, "%s",
                  err.text);
    ck_assert_msg(job_parse_keras_json(json, strlen(json), "m.json", &m, &err) == STATUS_OK, "%s",
                  err.text);
    ck_assert_uint_eq(job.model.n_layers, m.n_layers);
    ck_assert_int_eq(job.model.input_rank, m.input_rank);
    ck_assert_int_eq(memcmp(job.model.input_shape, m.input_shape, sizeof(m.input_shape)), 0);
    for (size_t i = 0; i < m.n_layers; i++)
        ck_assert_msg(memcmp(&job.model.layers[i], &m.layers[i], sizeof(m.layers[i])) == 0,
                      "layer %zu (%s) differs", i, m.layers[i].name);
    job_done(&job);
    job_model_done(&m);
}

START_TEST(job_files_and_keras_json_read_every_layer_kind_alike)
{
    assert_same_model(
        "  - {conv2d: {filters: 2, kernel_size: [3, 2], strides: 2, padding: same, activation: "
        "relu, use_bias: false, kernel_initializer: he_normal}, input_shape: [8, 8, 2]}\n"
        "  - {max_pooling2d: {pool_size: 3}}\n"
        "  - {average_pooling2d: {pool_size: [2, 1], strides: 1, padding: same}}\n"
        "  - global_average_pooling2d\n"
        "  - {reshape: {target_shape: [-1, 1]}}\n"
        "  - global_average_pooling1d\n"
        "  - {dropout: {rate: 0.25, seed: 7}}\n"
        "  - flatten\n"
        "  - {dense: {units: 3, bias_initializer: {constant: {value: 0.5}}, kernel_initializer: "
        "{random_uniform: {minval: -1, maxval: 1, seed: 3}}}}\n"
        "  - {activation: {activation: tanh, name: last}}\n",
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 8, 8, 2]}},"
        "{\"class_name\": \"Conv2D\", \"config\": {\"filters\": 2, \"kernel_size\": [3, 2], "
        "\"strides\": [2, 2], \"padding\": \"same\", \"activation\": \"relu\", \"use_bias\": "
        "false, \"kernel_initializer\": {\"class_name\": \"HeNormal\", \"config\": {\"seed\": "
        "null}}}},"
        "{\"class_name\": \"MaxPooling2D\", \"config\": {\"pool_size\": [3, 3]}},"
        "{\"class_name\": \"AveragePooling2D\", \"config\": {\"pool_size\": [2, 1], \"strides\": "
        "1, \"padding\": \"same\"}},"
        "{\"class_name\": \"GlobalAveragePooling2D\", \"config\": {\"keepdims\": false}},"
        "{\"class_name\": \"Reshape\", \"config\": {\"target_shape\": [-1, 1]}},"
        "{\"class_name\": \"GlobalAveragePooling1D\", \"config\": {}},"
        "{\"class_name\": \"Dropout\", \"config\": {\"rate\": 0.25, \"seed\": 7}},"
        "{\"class_name\": \"Flatten\", \"config\": {\"data_format\": \"channels_last\"}},"
        "{\"class_name\": \"Dense\", \"config\": {\"units\": 3, \"bias_initializer\": "
        "{\"class_name\": \"Constant\", \"config\": {\"value\": 0.5}}, \"kernel_initializer\": "
        "{\"class_name\": \"RandomUniform\", \"config\": {\"minval\": -1, \"maxval\": 1, "
        "\"seed\": 3}}}},"
        "{\"class_name\": \"Activation\", \"config\": {\"activation\": \"tanh\", \"name\": "
        "\"last\"}}");
    assert_same_model("  - {embedding: {input_dim: 50, output_dim: 4, input_length: 6, "
                      "embeddings_initializer: zeros}}\n"
                      "  - global_average_pooling1d\n",
                      "{\"class_name\": \"Embedding\", \"config\": {\"input_dim\": 50, "
                      "\"output_dim\": 4, \"input_length\": 6, \"embeddings_initializer\": "
                      "\"zeros\"}},"
                      "{\"class_name\": \"GlobalAveragePooling1D\", \"config\": {}}");
}
END_TEST

/* A Sequential of an input of `shape` and one layer, {"class_name": LAYER}, named 'c', is refused
 * with `why`. */
static void assert_layer_refused(const char *shape, const char *layer, const char *why)
{
    char json[1024];

    snprintf(json, sizeof(json),
             "{\"class_name\": \"Sequential\", \"config\": {\"layers\": [{\"class_name\": "
             "\"InputLayer\", \"config\": {\"batch_shape\": [null, %s]}}, {\"class_name\": %s}]}}",
             shape, layer);
    assert_rejected(json, "m.json", "layer 'c'", why, NULL);
}

/* The 1D layers as Keras 3 writes them (windows as lists of one) and as job files do; a window of
 * two numbers and causal padding are refused by name. */
START_TEST(one_d_layers_are_read_from_both_formats)
{
    static const char *const refused[][2] = {
        {"\"Conv1D\", \"config\": {\"name\": \"c\", \"filters\": 2, \"kernel_size\": [3, 3]}",
         "kernel_size must be a positive integer or a list of one"},
        {"\"Conv1D\", \"config\": {\"name\": \"c\", \"filters\": 2, \"kernel_size\": 3, "
         "\"padding\": \"causal\"}",
         "padding"},
        {"\"MaxPooling1D\", \"config\": {\"name\": \"c\", \"pool_size\": [0]}", "pool_size"},
    };

    assert_same_model(
        "  - {conv1d: {filters: 2, kernel_size: 3, strides: 2, padding: same}, input_shape: [9, "
        "2]}\n"
        "  - {max_pooling1d: {pool_size: 2}}\n"
        "  - {average_pooling1d: {pool_size: [3], strides: 1}}\n"
        "  - global_max_pooling1d\n",
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 9, 2]}},"
        "{\"class_name\": \"Conv1D\", \"config\": {\"filters\": 2, \"kernel_size\": [3], "
        "\"strides\": [2], \"padding\": \"same\", \"data_format\": \"channels_last\", "
        "\"dilation_rate\": [1], \"groups\": 1}},"
        "{\"class_name\": \"MaxPooling1D\", \"config\": {\"pool_size\": [2], \"strides\": [2]}},"
        "{\"class_name\": \"AveragePooling1D\", \"config\": {\"pool_size\": 3, \"strides\": "
        "1}},"
        "{\"class_name\": \"GlobalMaxPooling1D\", \"config\": {\"keepdims\": false}}");
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        assert_layer_refused("9, 2", refused[i][0], refused[i][1]);
}
END_TEST

/* The shape and activation layers as Keras 3 writes them and as job files do; what Tessera does
 * not build is refused by name. */
START_TEST(shape_and_activation_layers_are_read_from_both_formats)
{
    static const char *const refused[][2] = {
        {"\"UpSampling2D\", \"config\": {\"name\": \"c\", \"interpolation\": \"bicubic\"}",
         "unknown interpolation 'bicubic'"},
        {"\"Permute\", \"config\": {\"name\": \"c\", \"dims\": [1, 1, 2]}",
         "dims must be a permutation of 1 .. its length"},
        {"\"ZeroPadding2D\", \"config\": {\"name\": \"c\", \"padding\": [[1, 2, 3], [0, 0]]}",
         "padding must be a non-negative integer, a list of two, or two lists of two"},
        {"\"Softmax\", \"config\": {\"name\": \"c\", \"axis\": 1}",
         "axis other than -1 (the last axis) is not supported"},
        {"\"ReLU\", \"config\": {\"name\": \"c\", \"max_value\": -1}",
         "max_value must be a float32 number >= 0, or null"},
    };

    assert_same_model(
        "  - {zero_padding2d: {padding: [[1, 2], [0, 1]]}, input_shape: [5, 5, 2]}\n"
        "  - {cropping2d: {cropping: [1, 2]}}\n"
        "  - {up_sampling2d: {size: [2, 3]}}\n"
        "  - {permute: {dims: [2, 1, 3]}}\n"
        "  - relu\n"
        "  - {relu: {max_value: 6, negative_slope: 0.1, threshold: 0.5}}\n"
        "  - {leaky_relu: {negative_slope: 0.2}}\n"
        "  - {elu: {alpha: 0.5}}\n"
        "  - softmax\n"
        "  - global_max_pooling2d\n"
        "  - {repeat_vector: {n: 3}}\n",
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 5, 5, 2]}},"
        "{\"class_name\": \"ZeroPadding2D\", \"config\": {\"padding\": [[1, 2], [0, 1]], "
        "\"data_format\": \"channels_last\"}},"
        "{\"class_name\": \"Cropping2D\", \"config\": {\"cropping\": [[1, 1], [2, 2]]}},"
        "{\"class_name\": \"UpSampling2D\", \"config\": {\"size\": [2, 3], \"interpolation\": "
        "\"nearest\"}},"
        "{\"class_name\": \"Permute\", \"config\": {\"dims\": [2, 1, 3]}},"
        "{\"class_name\": \"ReLU\", \"config\": {\"name\": \"relu\", \"max_value\": null, "
        "\"negative_slope\": 0.0, \"threshold\": 0.0}},"
        "{\"class_name\": \"ReLU\", \"config\": {\"max_value\": 6.0, \"negative_slope\": 0.1, "
        "\"threshold\": 0.5}},"
        "{\"class_name\": \"LeakyReLU\", \"config\": {\"negative_slope\": 0.2}},"
        "{\"class_name\": \"ELU\", \"config\": {\"alpha\": 0.5}},"
        "{\"class_name\": \"Softmax\", \"config\": {\"axis\": -1}},"
        "{\"class_name\": \"GlobalMaxPooling2D\", \"config\": {}},"
        "{\"class_name\": \"RepeatVector\", \"config\": {\"n\": 3}}");
    assert_same_model(
        "  - {prelu: {shared_axes: [1, 2], alpha_initializer: zeros}, input_shape: [5, 5, 2]}\n"
        "  - {spatial_dropout2d: {rate: 0.25, seed: 3}}\n"
        "  - {gaussian_noise: {stddev: 0.1}}\n"
        "  - {reshape: {target_shape: [25, 2]}}\n"
        "  - {spatial_dropout1d: {rate: 0.5}}\n"
        "  - {leaky_relu: {negative_slope: 0.25}}\n",
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 5, 5, "
        "2]}},"
        "{\"class_name\": \"PReLU\", \"config\": {\"alpha_initializer\": {\"class_name\": "
        "\"Zeros\", \"config\": {}}, \"alpha_regularizer\": null, \"alpha_constraint\": "
        "null, \"shared_axes\": [1, 2]}},"
        "{\"class_name\": \"SpatialDropout2D\", \"config\": {\"rate\": 0.25, \"seed\": 3, "
        "\"data_format\": \"channels_last\"}},"
        "{\"class_name\": \"GaussianNoise\", \"config\": {\"stddev\": 0.1, \"seed\": "
        "null}},"
        "{\"class_name\": \"Reshape\", \"config\": {\"target_shape\": [25, 2]}},"
        "{\"class_name\": \"SpatialDropout1D\", \"config\": {\"rate\": 0.5}},"
        "{\"class_name\": \"LeakyReLU\", \"config\": {\"alpha\": 0.25}}");
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        assert_layer_refused("5, 5, 2", refused[i][0], refused[i][1]);
}
END_TEST

/* DepthwiseConv2D and SeparableConv2D as Keras 3 writes them and as job files do. */
START_TEST(depthwise_and_separable_convolutions_are_read_from_both_formats)
{
    assert_same_model(
        "  - {depthwise_conv2d: {kernel_size: 3, depth_multiplier: 2, strides: 2, padding: same, "
        "depthwise_regularizer: {l2: 0.01}}, input_shape: [8, 8, 2]}\n"
        "  - {separable_conv2d: {filters: 4, kernel_size: [2, 3], activation: relu, "
        "pointwise_regularizer: {l1: 0.5}, use_bias: false}}\n",
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 8, 8, 2]}},"
        "{\"class_name\": \"DepthwiseConv2D\", \"config\": {\"depth_multiplier\": 2, "
        "\"kernel_size\": [3, 3], \"strides\": [2, 2], \"padding\": \"same\", \"data_format\": "
        "\"channels_last\", \"dilation_rate\": [1, 1], \"depthwise_regularizer\": "
        "{\"class_name\": \"L2\", \"config\": {\"l2\": 0.01}}, \"depthwise_constraint\": "
        "null}},"
        "{\"class_name\": \"SeparableConv2D\", \"config\": {\"filters\": 4, \"kernel_size\": "
        "[2, 3], \"activation\": \"relu\", \"use_bias\": false, \"pointwise_regularizer\": "
        "{\"class_name\": \"L1\", \"config\": {\"l1\": 0.5}}, \"pointwise_constraint\": "
        "null}}");
    assert_layer_refused("8, 8, 2",
                         "\"DepthwiseConv2D\", \"config\": {\"name\": \"c\", \"kernel_size\": 3, "
                         "\"dilation_rate\": [2, 2]}",
                         "dilation_rate other than 1 is not supported");
}
END_TEST

/* Keras's weight constraints as Keras 3 writes them and as job files do; one Tessera does not
 * know, and a parameter of another constraint, are refused by name. */
START_TEST(constraints_are_read_from_both_formats)
{
    assert_same_model(
        "  - {dense: {units: 4, kernel_constraint: {max_norm: {max_value: 3, axis: [0, 1]}}, "
        "bias_constraint: non_neg}, input_shape: [3]}\n"
        "  - {dense: {units: 2, kernel_constraint: {min_max_norm: {min_value: 0.5, rate: 0.5}}, "
        "bias_constraint: unit_norm}}\n"
        "  - {reshape: {target_shape: [1, 1, 2]}}\n"
        "  - {separable_conv2d: {filters: 3, kernel_size: 1, pointwise_constraint: {max_norm: "
        "{max_value: 1.5, axis: [0, 1, 2]}}}}\n",
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 3]}},"
        "{\"class_name\": \"Dense\", \"config\": {\"units\": 4, \"kernel_constraint\": "
        "{\"module\": \"keras.constraints\", \"class_name\": \"MaxNorm\", \"config\": "
        "{\"max_value\": 3, \"axis\": [0, 1]}, \"registered_name\": null}, \"bias_constraint\": "
        "{\"class_name\": \"NonNeg\", \"config\": {}}}},"
        "{\"class_name\": \"Dense\", \"config\": {\"units\": 2, \"kernel_constraint\": "
        "{\"class_name\": \"MinMaxNorm\", \"config\": {\"min_value\": 0.5, \"max_value\": 1.0, "
        "\"rate\": 0.5, \"axis\": 0}}, \"bias_constraint\": \"unit_norm\"}},"
        "{\"class_name\": \"Reshape\", \"config\": {\"target_shape\": [1, 1, 2]}},"
        "{\"class_name\": \"SeparableConv2D\", \"config\": {\"filters\": 3, \"kernel_size\": "
        "1, \"pointwise_constraint\": {\"class_name\": \"MaxNorm\", \"config\": {\"max_value\": "
        "1.5, \"axis\": [0, 1, 2]}}}}");
    assert_layer_refused("3",
                         "\"Dense\", \"config\": {\"name\": \"c\", \"units\": 2, "
                         "\"kernel_constraint\": {\"class_name\": \"RadialConstraint\", "
                         "\"config\": {}}}",
                         "constraint RadialConstraint is not supported");
    assert_layer_refused("3",
                         "\"Dense\", \"config\": {\"name\": \"c\", \"units\": 2, "
                         "\"kernel_constraint\": {\"class_name\": \"NonNeg\", \"config\": "
                         "{\"max_value\": 2}}}",
                         "unknown NonNeg parameter 'max_value'");
}
END_TEST

/* Every row of the layer table reads at most JOB_LAYER_MAX_KEYS options (the readers size their
 * key lists by it), and every kind has its names. */
START_TEST(every_layer_kind_fits_the_readers)
{
    for (int k = 0; k < JOB_LAYER_KINDS; k++) {
        const job_layer_info_t *info = job_layer_info((job_layer_kind_t)k);
        ck_assert_ptr_nonnull(info);
        ck_assert_msg(info->n_keys <= JOB_LAYER_MAX_KEYS, "%s reads %zu options", info->name,
                      info->n_keys);
        ck_assert(info->name != NULL && info->keras_class != NULL && info->read != NULL);
    }
}
END_TEST

/* LayerNormalization as Keras 3 writes it (axis [-1], rms_scaling false, its initializers, its
 * gamma's and beta's regularizers and constraints) and as a job file does; another axis or RMS
 * scaling are refused by name. */
START_TEST(layer_normalization_is_read_from_both_formats)
{
    static const char *const refused[][2] = {
        {"\"axis\": [1]", "axis other than -1 (the last axis) is not supported"},
        {"\"axis\": [-1], \"rms_scaling\": true", "rms_scaling true is not supported"},
        {"\"gamma_regularizer\": {\"class_name\": \"L3\", \"config\": {\"l2\": 0.1}}",
         "gamma_regularizer"},
        {"\"epsilon\": 0", "epsilon must be a positive float32 number"},
    };

    assert_same_model(
        "  - {dense: {units: 4}, input_shape: [3]}\n"
        "  - {layer_normalization: {epsilon: 0.01, center: false, gamma_initializer: zeros, "
        "gamma_regularizer: {l2: 0.1}, gamma_constraint: non_neg}}\n"
        "  - layer_normalization\n",
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 3]}},"
        "{\"class_name\": \"Dense\", \"config\": {\"units\": 4}},"
        "{\"class_name\": \"LayerNormalization\", \"config\": {\"axis\": [-1], \"epsilon\": "
        "0.01, \"center\": false, \"scale\": true, \"rms_scaling\": false, "
        "\"gamma_initializer\": {\"class_name\": \"Zeros\", \"config\": {}}, "
        "\"gamma_regularizer\": {\"class_name\": \"L2\", \"config\": {\"l2\": 0.1}}, "
        "\"beta_regularizer\": null, \"gamma_constraint\": {\"class_name\": \"NonNeg\", "
        "\"config\": {}}}},"
        "{\"class_name\": \"LayerNormalization\", \"config\": {\"axis\": -1}}");
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        char layer[512];
        snprintf(layer, sizeof(layer), "\"LayerNormalization\", \"config\": {\"name\": \"c\", %s}",
                 refused[i][0]);
        assert_layer_refused("3", layer, refused[i][1]);
    }
}
END_TEST

/* The seeds' Dense(..., kernel_regularizer=L2(1e-4)), as Keras 2 and 3 write it, is read; a
 * regularizer Tessera does not build is refused by name. */
START_TEST(kernel_regularizer_is_read_as_keras_wrote_it)
{
    char name[64];
    char *text, *bad;
    job_model_t m = {0};
    status_msg_t err = {0};
    const job_layer_t *dense = NULL;

    snprintf(name, sizeof(name), "%s_regularizer", generations[_i]);
    text = fixture_text(name);
    ck_assert_msg(job_parse_keras_json(text, strlen(text), "reg.json", &m, &err) == STATUS_OK, "%s",
                  err.text);
    for (size_t i = 0; i < m.n_layers; i++)
        if (strcmp(m.layers[i].name, "dense") == 0)
            dense = &m.layers[i];
    ck_assert_ptr_nonnull(dense);
    ck_assert_double_eq_tol(dense->kernel_reg.l2, 1e-4, 1e-11);
    ck_assert_double_eq(dense->kernel_reg.l1, 0);
    ck_assert_double_eq(dense->bias_reg.l1 + dense->bias_reg.l2, 0);
    job_model_done(&m);
    bad = strstr(text, "\"L2\"");
    ck_assert_ptr_nonnull(bad);
    memcpy(bad, "\"L3\"", 4);
    assert_rejected(text, "reg.json", "reg.json: ",
                    "kernel_regularizer: regularizer L3 is not "
                    "supported (L1, L2 and L1L2 are)",
                    NULL);
    free(text);
}
END_TEST

/* Keras's activity_regularizer, on any layer, as its regularizers are written. */
START_TEST(activity_regularizers_are_read)
{
    char *text = mutated("keras3_cnn", 7, "activity_regularizer",
                         "{\"module\": \"keras.regularizers\", \"class_name\": \"L1L2\", "
                         "\"config\": {\"l1\": 0.01, \"l2\": 0.02}, \"registered_name\": null}");
    job_model_t m;
    status_msg_t err = {0};

    ck_assert_msg(job_parse_keras_json(text, strlen(text), "m.json", &m, &err) == STATUS_OK, "%s",
                  err.text);
    ck_assert_double_eq_tol(m.layers[6].activity_reg.l1, 0.01, 1e-12);
    ck_assert_double_eq_tol(m.layers[6].activity_reg.l2, 0.02, 1e-12);
    ck_assert_double_eq(m.layers[5].activity_reg.l1, 0);
    job_model_done(&m);
    cJSON_free(text);
}
END_TEST

START_TEST(options_tessera_does_not_implement_are_rejected_by_name)
{
    const char *fx = _i == 0 ? "keras2_cnn" : "keras3_cnn";

    /* config.layers[1] is the first Conv2D, [3] the second, [7] the last Dense. */
    assert_mutation_rejected(fx, 1, "data_format", "\"channels_first\"", "layer 'conv2d'",
                             "data_format channels_first is not supported");
    assert_mutation_rejected(fx, 1, "dilation_rate", "[2, 2]", "layer 'conv2d'", "dilation_rate");
    assert_mutation_rejected(fx, 3, "groups", "2", "layer 'conv2d_1'", "groups");
    assert_mutation_rejected(fx, 7, "trainable", "false", "layer 'dense_1'",
                             "trainable false is not supported");
    assert_mutation_rejected(fx, 7, "bias_constraint",
                             "{\"class_name\": \"RadialConstraint\", \"config\": {}}",
                             "layer 'dense_1'", "constraint RadialConstraint is not supported");
    assert_mutation_rejected(fx, 7, "activity_regularizer",
                             "{\"class_name\": \"Orthogonal\", \"config\": {\"factor\": 0.01}}",
                             "layer 'dense_1'", "activity_regularizer");
    assert_mutation_rejected(fx, 7, "lora_rank", "4", "layer 'dense_1'", "lora_rank");
    assert_mutation_rejected(fx, 7, "dtype", "\"mixed_float16\"", "layer 'dense_1'",
                             "dtype \"mixed_float16\" is not supported");
    assert_mutation_rejected(fx, 7, "activation", "\"gelu_approximate\"", "layer 'dense_1'",
                             "gelu_approximate is not a Keras activation");
    assert_mutation_rejected(fx, 7, "activation", "\"gelu_new\"", "unknown activation 'gelu_new'",
                             "known activations: linear, relu, sigmoid, tanh, softmax, gelu");
    assert_mutation_rejected(fx, 7, "kernel_initializer",
                             "{\"class_name\": \"Orthogonal\", \"config\": {\"gain\": 1.0}}",
                             "kernel_initializer", "unknown initializer 'Orthogonal'");
    assert_mutation_rejected(fx, 7, "units", "0", "layer 'dense_1'",
                             "units must be a positive integer, got 0");
    assert_mutation_rejected(fx, 7, "units", "2.5", "layer 'dense_1'", "units");
    assert_mutation_rejected(fx, 7, "units", NULL, "layer 'dense_1'", "units is missing");
}
END_TEST

START_TEST(unknown_config_key_is_rejected_with_the_keys_tessera_reads)
{
    char *text = mutated("keras3_mlp", 1, "kernel_quantizer", "null");

    assert_rejected(text, "m.json", "layer 'dense'", "unknown Dense option 'kernel_quantizer'",
                    "units, activation, use_bias", NULL);
    cJSON_free(text);
}
END_TEST

/* Keras 2's and 3's text fixtures with mask_zero true: read (the engine masks the average
 * pooling, test_model and compat_layers check it). */
START_TEST(embedding_with_mask_zero_is_read)
{
    char *text = mutated(_i == 0 ? "keras2_text" : "keras3_text", 1, "mask_zero", "true");
    job_model_t m = {0};
    status_msg_t err = {0};

    ck_assert_msg(job_parse_keras_json(text, strlen(text), "t.json", &m, &err) == STATUS_OK, "%s",
                  err.text);
    ck_assert_int_eq(m.layers[0].kind, JOB_LAYER_EMBEDDING);
    ck_assert(m.layers[0].mask_zero);
    job_model_done(&m);
    cJSON_free(text);
}
END_TEST

START_TEST(unknown_layer_class_is_rejected_with_the_known_ones)
{
    const char *text =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 8, 4]}},"
        "{\"class_name\": \"LSTM\", \"config\": {\"name\": \"lstm\", \"units\": 4}}]}}";

    assert_rejected(text, "m.json", "layer 'lstm'", "unknown layer class 'LSTM'", "Dense, Conv2D",
                    NULL);
}
END_TEST

START_TEST(keras2_batch_input_shape_on_the_first_layer_gives_the_input)
{
    /* Older tf.keras writes no InputLayer: the shape rides on the first layer's config. */
    const char *text =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3, "
        "\"batch_input_shape\": [null, 5], \"activation\": \"tanh\"}}]}, "
        "\"keras_version\": \"2.4.0\", \"backend\": \"tensorflow\"}";
    job_model_t m;
    status_msg_t err = {0};

    ck_assert_int_eq(job_parse_keras_json(text, strlen(text), "m.json", &m, &err), STATUS_OK);
    ck_assert_int_eq(m.input_rank, 1);
    ck_assert_int_eq(m.input_shape[0], 5);
    ck_assert_uint_eq(m.n_layers, 1);
    assert_dense(&m.layers[0], "d", 3, JOB_ACT_TANH);
    assert_init(&m.layers[0].kernel_init, JOB_INIT_DEFAULT, 0, 0, false, 0);
    job_model_done(&m);
}
END_TEST

START_TEST(first_layer_shape_must_agree_with_the_input_layer)
{
    char *text = mutated("keras2_mlp", 1, "batch_input_shape", "[null, 785]");

    assert_rejected(text, "m.json", "batch_input_shape disagrees", NULL);
    cJSON_free(text);
}
END_TEST

START_TEST(variable_input_dimensions_are_rejected)
{
    char *text = mutated("keras3_cnn", 0, "batch_shape", "[null, null, 28, 1]");

    assert_rejected(text, "m.json", "batch_shape must be a shape with fixed dimensions", NULL);
    cJSON_free(text);
}
END_TEST

START_TEST(model_without_input_shape_is_rejected)
{
    const char *text =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}}]}}";

    assert_rejected(text, "m.json", "no input shape", NULL);
}
END_TEST

START_TEST(embedding_after_the_first_layer_is_rejected)
{
    const char *text =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"s\", \"layers\": ["
        "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 8]}},"
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"d\", \"units\": 3}},"
        "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"e\", \"input_dim\": 9, "
        "\"output_dim\": 2}}]}}";

    assert_rejected(text, "m.json", "embedding must be the first layer", NULL);
}
END_TEST

START_TEST(duplicate_layer_names_are_rejected)
{
    char *text = mutated("keras3_mlp", 2, "name", "\"dense\"");

    assert_rejected(text, "m.json", "two layers are named 'dense'", NULL);
    cJSON_free(text);
}
END_TEST

/* A residual block and two poolings joined, as tf_keras 2.21 and Keras 3.15 write it. */
START_TEST(functional_models_parse_into_a_graph)
{
    static const job_layer_kind_t kinds[] = {JOB_LAYER_CONV2D,
                                             JOB_LAYER_CONV2D,
                                             JOB_LAYER_RELU,
                                             JOB_LAYER_CONV2D,
                                             JOB_LAYER_ADD,
                                             JOB_LAYER_RELU,
                                             JOB_LAYER_MAX_POOLING2D,
                                             JOB_LAYER_GLOBAL_AVERAGE_POOLING2D,
                                             JOB_LAYER_GLOBAL_MAX_POOLING2D,
                                             JOB_LAYER_CONCATENATE,
                                             JOB_LAYER_DENSE};
    job_model_t m;

    for (int g = 0; g < 2; g++) {
        parse_fixture(g, "resnet", &m);
        ck_assert_uint_eq(m.n_layers, 11);
        for (size_t i = 0; i < m.n_layers; i++)
            ck_assert_int_eq(m.layers[i].kind, kinds[i]);
        ck_assert(job_model_is_graph(&m));
        ck_assert_int_eq(m.input_rank, 3);
        ck_assert_int_eq(m.input_shape[0], 28);
        ck_assert_int_eq(job_layer_input(&m, 0, 0), JOB_INPUT_MODEL);
        ck_assert_int_eq(job_layer_input(&m, 1, 0), 0);
        ck_assert_int_eq(m.layers[4].n_inputs, 2);
        ck_assert_int_eq(job_layer_input(&m, 4, 0), 0); /* the skip */
        ck_assert_int_eq(job_layer_input(&m, 4, 1), 3);
        ck_assert_int_eq(job_layer_input(&m, 7, 0), 6);
        ck_assert_int_eq(job_layer_input(&m, 8, 0), 6);
        ck_assert_int_eq(job_layer_input(&m, 9, 0), 7);
        ck_assert_int_eq(job_layer_input(&m, 9, 1), 8);
        ck_assert_int_eq(m.layers[9].axis, -1);
        ck_assert_str_eq(m.layers[4].name, "add");
        job_model_done(&m);
    }
}
END_TEST

/* BatchNormalization as tf_keras 2.21 (axis [3]) and Keras 3.15 (axis -1) write it. */
START_TEST(batch_normalization_parses_in_both_generations)
{
    job_model_t m;

    for (int g = 0; g < 2; g++) {
        parse_fixture(g, "batchnorm", &m);
        ck_assert_int_eq(m.layers[1].kind, JOB_LAYER_BATCH_NORMALIZATION);
        ck_assert_int_eq(m.layers[1].axis, g == 0 ? 3 : -1);
        ck_assert_double_eq_tol(m.layers[1].momentum, 0.99, 1e-12);
        ck_assert_double_eq_tol(m.layers[1].epsilon, 1e-3, 1e-12);
        ck_assert(m.layers[1].center && m.layers[1].scale_gamma);
        ck_assert_int_eq(m.layers[1].moving_variance_init.kind, JOB_INIT_ONES);
        ck_assert_int_eq(m.layers[4].kind, JOB_LAYER_BATCH_NORMALIZATION);
        ck_assert_double_eq_tol(m.layers[4].momentum, 0.9, 1e-12);
        ck_assert_double_eq_tol(m.layers[4].epsilon, 1e-5, 1e-12);
        ck_assert(!m.layers[4].center && m.layers[4].scale_gamma);
        ck_assert(m.layers[9].center && !m.layers[9].scale_gamma);
        job_model_done(&m);
    }
    assert_mutation_rejected("keras3_batchnorm", 2, "renorm", "true",
                             "renorm true is not supported", NULL);
    assert_mutation_rejected("keras3_batchnorm", 2, "momentum", "1.5", "momentum", "0 to 1");
    assert_mutation_rejected("keras3_batchnorm", 2, "axis", "0", "axis", "other than the batch");
    assert_mutation_rejected("keras3_batchnorm", 2, "renorm_clipping", "{\"rmax\": 3}",
                             "renorm_clipping", NULL);
}
END_TEST

/* A Functional model in Keras 2's form: LAYERS are the entries after the InputLayer "x" (8
 * values); IN and OUT are input_layers and output_layers. */
static char *functional(const char *layers, const char *in, const char *out)
{
    static char text[4096];

    snprintf(text, sizeof(text),
             "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
             "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8], "
             "\"name\": \"x\"}, \"name\": \"x\", \"inbound_nodes\": []}, %s], "
             "\"input_layers\": %s, \"output_layers\": %s}}",
             layers, in, out);
    return text;
}

#define DENSE(name, from)                                                                          \
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"" name "\", \"units\": 3}, "             \
    "\"name\": \"" name "\", \"inbound_nodes\": [[[\"" from "\", 0, 0, {}]]]}"
#define MERGE(cls, name, inputs)                                                                   \
    "{\"class_name\": \"" cls "\", \"config\": {\"name\": \"" name "\"}, \"name\": \"" name        \
    "\", \"inbound_nodes\": [[" inputs "]]}"

START_TEST(functional_models_outside_what_is_built_are_rejected)
{
#define TWO DENSE("a", "x") ", " DENSE("b", "a")
    const char *in = "[[\"x\", 0, 0]]", *two = TWO;
    job_model_t m;
    status_msg_t err = {0};
    const char *ok = functional(two, in, "[[\"b\", 0, 0]]");

    ck_assert_int_eq(job_parse_keras_json(ok, strlen(ok), "f.json", &m, &err), STATUS_OK);
    ck_assert(!job_model_is_graph(&m)); /* a chain, as a Sequential model would be */
    job_model_done(&m);

    /* two outputs, one read by the other: a graph whose outputs are both layers, in order */
    ok = functional(two, in, "[[\"b\", 0, 0], [\"a\", 0, 0]]");
    ck_assert_int_eq(job_parse_keras_json(ok, strlen(ok), "f.json", &m, &err), STATUS_OK);
    ck_assert(job_model_is_graph(&m));
    ck_assert_int_eq(job_model_outputs(&m), 2);
    ck_assert_int_eq(job_model_output(&m, 0), 1);
    ck_assert_int_eq(job_model_output(&m, 1), 0);
    ck_assert_str_eq(m.output_names[1], "a");
    job_model_done(&m);
    assert_rejected(functional(two, in, "[[\"a\", 0, 0], [\"a\", 0, 0]]"), "f.json",
                    "output_layers names 'a' call 0 twice", NULL);
    assert_rejected(functional(two, in, "[[\"a\", 0, 0], [\"c\", 0, 0]]"), "f.json",
                    "output_layers names 'c' call 0, which the model does not make", NULL);
    /* a dict of outputs: its keys name them, in sorted order, and must be names */
    ok = functional(two, in, "{\"z\": [\"a\", 0, 0], \"y\": [\"b\", 0, 0]}");
    ck_assert_int_eq(job_parse_keras_json(ok, strlen(ok), "f.json", &m, &err), STATUS_OK);
    ck_assert_str_eq(m.output_names[0], "y");
    ck_assert_int_eq(job_model_output(&m, 0), 1);
    job_model_done(&m);
    assert_rejected(functional(two, in, "{\"a b\": [\"a\", 0, 0], \"y\": [\"b\", 0, 0]}"), "f.json",
                    "output 0: its name may hold only letters", NULL);
    assert_rejected(functional(two, in, "[\"a\", 0, 0]"), "f.json",
                    "output_layers names 'a' call 0, not the last call made", NULL);
    assert_rejected(functional(two, "[[\"b\", 0, 0]]", "[\"b\", 0, 0]"), "f.json",
                    "input_layers names 'b', which is not an InputLayer", NULL);
    assert_rejected(functional(two, "[\"b\", 0, 0]", "[\"b\", 0, 0]"), "f.json",
                    "input_layers names 'b', not the InputLayer", NULL);
    assert_rejected(
        functional(DENSE("a", "x") ", " DENSE("b", "x") ", " DENSE("c", "a"), in, "[\"c\", 0, 0]"),
        "f.json", "nothing reads the output of layer 'b'", NULL);
    assert_rejected(functional(DENSE("a", "zz"), in, "[\"a\", 0, 0]"), "f.json",
                    "layer 'a': reads 'zz', which is not a layer of the model", NULL);
    assert_rejected(functional(DENSE("a", "x") ", " DENSE("b", "b"), in, "[\"b\", 0, 0]"), "f.json",
                    "layer 'b': call 0 reads a tensor that no call before it makes (a cycle)",
                    NULL);
    assert_rejected(functional(TWO ", " MERGE("Add", "s", "[\"a\", 0, 0, {}], [\"b\", 1, 0, {}]"),
                               in, "[\"s\", 0, 0]"),
                    "f.json", "layer 's': reads call 1 of 'b', which is called 1 time", NULL);
    assert_rejected(functional("{\"class_name\": \"Dense\", \"config\": {\"name\": \"a\", "
                               "\"units\": 3}, \"name\": \"a\", \"inbound_nodes\": "
                               "[[[\"x\", 0, 0, {\"training\": true}]]]}",
                               in, "[\"a\", 0, 0]"),
                    "f.json", "call argument 'training' (kwargs) is not supported", NULL);
    assert_rejected(functional("{\"class_name\": \"Dense\", \"config\": {\"name\": \"a\", "
                               "\"units\": 3}, \"name\": \"a\", \"inbound_nodes\": [{\"args\": "
                               "[{\"class_name\": \"__keras_tensor__\", \"config\": "
                               "{\"keras_history\": [\"x\", 0, 0]}}], \"kwargs\": {\"mask\": 1}}]}",
                               in, "[\"a\", 0, 0]"),
                    "f.json", "is called with a mask other than not_equal(input, 0)", NULL);
    assert_rejected(functional(TWO ", " MERGE("Subtract", "s",
                                              "[\"a\", 0, 0, {}], [\"b\", 0, 0, {}], "
                                              "[\"b\", 0, 0, {}]"),
                               in, "[\"s\", 0, 0]"),
                    "f.json", "layer 's' (subtract) takes exactly two inputs", NULL);
    assert_rejected(functional(DENSE("a", "x") ", {\"class_name\": \"Dense\", \"config\": "
                                               "{\"name\": \"d\", \"units\": 3}, \"name\": \"d\", "
                                               "\"inbound_nodes\": [[[\"a\", 0, 0, {}], "
                                               "[\"x\", 0, 0, {}]]]}",
                               in, "[\"d\", 0, 0]"),
                    "f.json", "takes one input", NULL);
    assert_rejected(functional(DENSE("a", "x") ", " MERGE("Add", "s", "[\"a\", 0, 0, {}]"), in,
                               "[\"s\", 0, 0]"),
                    "f.json", "layer 's' (add) merges two or more inputs", NULL);
    assert_rejected(functional("{\"class_name\": \"InputLayer\", \"config\": "
                               "{\"batch_input_shape\": [null, 8], \"name\": \"y\"}, \"name\": "
                               "\"y\", \"inbound_nodes\": []}, " DENSE("a", "x"),
                               in, "[\"a\", 0, 0]"),
                    "f.json", "input_layers names 1 of the 2 InputLayers", NULL);
    /* a merge in a Sequential model has nothing to merge */
    assert_rejected("{\"class_name\": \"Sequential\", \"config\": {\"layers\": ["
                    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_shape\": [null, 8]}},"
                    "{\"class_name\": \"Add\", \"config\": {\"name\": \"s\"}}]}}",
                    "m.json", "layer 's' (add) merges two or more inputs", NULL);
#undef TWO
}
END_TEST

/* A shared layer as Keras 3.15 writes it (keras3_shared.json: "shared" called on h1, on h2, and
 * on the Add of those two calls, which Keras lists after it): one entry a call, in an order
 * where each comes after what it reads, the later calls naming the first. */
START_TEST(shared_layers_parse_into_one_entry_a_call)
{
    static const char *const names[] = {"h1", "h2", "shared", "shared", "add", "shared", "out"};
    job_model_t m;
    char paths[7][96];

    parse_fixture(1, "shared", &m);
    ck_assert_uint_eq(m.n_layers, 7);
    for (size_t i = 0; i < m.n_layers; i++)
        ck_assert_str_eq(m.layers[i].name, names[i]);
    ck_assert_int_eq(m.layers[2].shares, 0);
    ck_assert_int_eq(m.layers[3].shares, 3); /* 1 + the first call's index */
    ck_assert_int_eq(m.layers[5].shares, 3);
    ck_assert_int_eq(m.layers[5].activation, JOB_ACT_RELU);
    ck_assert_int_eq(job_layer_input(&m, 2, 0), 0);
    ck_assert_int_eq(job_layer_input(&m, 3, 0), 1);
    ck_assert_int_eq(job_layer_input(&m, 4, 0), 2);
    ck_assert_int_eq(job_layer_input(&m, 4, 1), 3);
    ck_assert_int_eq(job_layer_input(&m, 5, 0), 4);
    ck_assert_int_eq(job_layer_input(&m, 6, 0), 5);
    ck_assert_int_eq(job_layer_call(&m, 2), 0);
    ck_assert_int_eq(job_layer_call(&m, 3), 1);
    ck_assert_int_eq(job_layer_call(&m, 5), 2);
    ck_assert(job_model_is_graph(&m));
    job_keras_paths(m.layers, m.n_layers, paths); /* the layer once, as Keras saves it */
    ck_assert_str_eq(paths[2], "dense_2");
    ck_assert_str_eq(paths[3], "dense_2");
    ck_assert_str_eq(paths[5], "dense_2");
    ck_assert_str_eq(paths[6], "dense_3");
    job_model_done(&m);
}
END_TEST

/* Two inputs as Keras 3.15 writes them (keras3_two_inputs.json: InputLayer b listed before a,
 * the model called on [a, b]): the inputs in the model's order, each layer reading its own. */
START_TEST(several_inputs_parse_in_the_models_order)
{
    job_model_t m;

    parse_fixture(1, "two_inputs", &m);
    ck_assert_int_eq(m.n_inputs, 2);
    ck_assert_int_eq(job_model_inputs(&m), 2);
    ck_assert_str_eq(m.inputs[0].name, "a");
    ck_assert_int_eq(m.inputs[0].rank, 1);
    ck_assert_int_eq(m.inputs[0].shape[0], 4);
    ck_assert_str_eq(m.inputs[1].name, "b");
    ck_assert_int_eq(m.inputs[1].rank, 2);
    ck_assert_int_eq(m.inputs[1].shape[1], 3);
    ck_assert_int_eq(m.input_rank, 1); /* the first input's */
    ck_assert(job_model_is_graph(&m));
    ck_assert_str_eq(m.layers[0].name, "fb");
    ck_assert_int_eq(job_layer_input(&m, 0, 0), JOB_INPUT_OF(1));
    ck_assert_str_eq(m.layers[1].name, "ha");
    ck_assert_int_eq(job_layer_input(&m, 1, 0), JOB_INPUT_OF(0));
    ck_assert_int_eq(job_input_index(JOB_INPUT_OF(1)), 1);
    job_model_done(&m);
}
END_TEST

/* input_layers as a dict (a model called on {key: input}), whose inputs Keras orders by key, and
 * what several inputs may not be. */
START_TEST(several_inputs_outside_what_is_built_are_rejected)
{
#define INPUT2                                                                                     \
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 2], "             \
    "\"name\": \"y\"}, \"name\": \"y\", \"inbound_nodes\": []}, "
    const char *layers = INPUT2 DENSE("a", "x") ", " DENSE("b", "y") ", " MERGE(
        "Add", "s", "[\"a\", 0, 0, {}], [\"b\", 0, 0, {}]");
    const char *ok = functional(layers, "{\"second\": [\"x\", 0, 0], \"first\": [\"y\", 0, 0]}",
                                "[\"s\", 0, 0]");
    job_model_t m;
    status_msg_t err = {0};

    ck_assert_int_eq(job_parse_keras_json(ok, strlen(ok), "f.json", &m, &err), STATUS_OK);
    ck_assert_str_eq(m.inputs[0].name, "y");
    ck_assert_int_eq(m.input_shape[0], 2);
    ck_assert_str_eq(m.inputs[1].name, "x");
    ck_assert_int_eq(job_layer_input(&m, 0, 0), JOB_INPUT_OF(1)); /* a reads x, now second */
    job_model_done(&m);
    assert_rejected(functional(layers, "[[\"x\", 0, 0], [\"x\", 0, 0]]", "[\"s\", 0, 0]"), "f.json",
                    "input_layers names 'x' twice", NULL);
    assert_rejected(
        functional(INPUT2 DENSE("a", "x"), "[[\"x\", 0, 0], [\"y\", 0, 0]]", "[\"a\", 0, 0]"),
        "f.json", "no layer reads the model's input 'y'", NULL);
    assert_rejected(
        functional(INPUT2 DENSE("y", "x"), "[[\"x\", 0, 0], [\"y\", 0, 0]]", "[\"y\", 0, 0]"),
        "f.json", "layer 'y': has an InputLayer's name", NULL);
    /* ids and values: an Embedding reads input y, which then holds ids for embeddings alone */
#define EMB_Y                                                                                      \
    "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"e\", \"input_dim\": 5, "             \
    "\"output_dim\": 2}, \"name\": \"e\", \"inbound_nodes\": [[[\"y\", 0, 0, {}]]]}, "             \
    "{\"class_name\": \"Flatten\", \"config\": {\"name\": \"f\"}, \"name\": \"f\", "               \
    "\"inbound_nodes\": [[[\"e\", 0, 0, {}]]]}, "
    ok = functional(INPUT2 EMB_Y MERGE("Concatenate", "s", "[\"x\", 0, 0, {}], [\"f\", 0, 0, {}]"),
                    "[[\"x\", 0, 0], [\"y\", 0, 0]]", "[\"s\", 0, 0]");
    ck_assert_int_eq(job_parse_keras_json(ok, strlen(ok), "f.json", &m, &err), STATUS_OK);
    ck_assert(!m.inputs[0].is_int && m.inputs[1].is_int);
    ck_assert_int_eq(job_layer_input(&m, 0, 0), JOB_INPUT_OF(1));
    job_model_done(&m);
    assert_rejected(functional(INPUT2 EMB_Y DENSE("d", "y") ", " MERGE(
                                   "Concatenate", "s",
                                   "[\"x\", 0, 0, {}], [\"f\", 0, 0, {}], [\"d\", 0, 0, {}]"),
                               "[[\"x\", 0, 0], [\"y\", 0, 0]]", "[\"s\", 0, 0]"),
                    "f.json", "layer 'd' (dense) reads the model's integer input", NULL);
    assert_rejected(
        functional(
            INPUT2 DENSE("a", "y") ", {\"class_name\": \"Embedding\", "
                                   "\"config\": {\"name\": \"e\", \"input_dim\": 5, "
                                   "\"output_dim\": 2}, \"name\": \"e\", "
                                   "\"inbound_nodes\": [[[\"a\", 0, 0, {}]]]}, "
                                   "{\"class_name\": \"Flatten\", \"config\": "
                                   "{\"name\": \"f\"}, \"name\": \"f\", "
                                   "\"inbound_nodes\": [[[\"e\", 0, 0, {}]]]}, " MERGE(
                                       "Concatenate", "s", "[\"x\", 0, 0, {}], [\"f\", 0, 0, {}]"),
            "[[\"x\", 0, 0], [\"y\", 0, 0]]", "[\"s\", 0, 0]"),
        "f.json", "an embedding reads one of the model's inputs", NULL);
#undef EMB_Y
#undef INPUT2
}
END_TEST

/* The fixture with its first `from` replaced by `to` (which must be found); the caller frees. */
static char *replaced(const char *fixture, const char *from, const char *to)
{
    char *text = fixture_text(fixture), *at = strstr(text, from), *out;
    size_t before, n;

    ck_assert_msg(at != NULL, "%s lacks %s", fixture, from);
    before = (size_t)(at - text);
    n = strlen(text) - strlen(from) + strlen(to);
    out = malloc(n + 1);
    ck_assert_ptr_nonnull(out);
    memcpy(out, text, before);
    strcpy(out + before, to);
    strcat(out, at + strlen(from));
    free(text);
    return out;
}

/* Keras 3 writes an Embedding's mask_zero mask as the operation not_equal(input, 0) passed to
 * each GlobalAveragePooling1D (keras3_masked.json): the operation is no layer, the poolings are
 * marked as taking it. */
START_TEST(masks_of_mask_zero_parse_in_functional_models)
{
    static const char *const not_equal = "\"keras_history\": [\"input_layer\", 0, 0]}}, 0]";
    job_model_t m;
    char *text;

    parse_fixture(1, "masked", &m);
    ck_assert_uint_eq(m.n_layers, 6);
    ck_assert_int_eq(m.layers[0].kind, JOB_LAYER_EMBEDDING);
    ck_assert(m.layers[0].mask_zero);
    for (size_t i = 0; i < m.n_layers; i++) {
        bool pooling = m.layers[i].kind == JOB_LAYER_GLOBAL_AVERAGE_POOLING1D;
        ck_assert_int_eq(m.layers[i].masked, pooling);
        ck_assert_str_eq(m.layers[i].mask_of, pooling ? "input_layer" : "");
    }
    ck_assert(m.input_is_int);
    job_model_done(&m);
    text = replaced("keras3_masked", not_equal, "\"keras_history\": [\"input_layer\", 0, 0]}}, 1]");
    assert_rejected(text, "m.json", "only not_equal(input, 0)", NULL);
    free(text);
    text = replaced("keras3_masked", "\"kwargs\": {\"mask\": {", "\"kwargs\": {\"other\": {");
    assert_rejected(text, "m.json", "call argument 'other' (kwargs) is not supported", NULL);
    free(text);
    /* the mask on a layer that takes none */
    text = replaced("keras3_masked", "\"class_name\": \"GlobalAveragePooling1D\"",
                    "\"class_name\": \"GlobalMaxPooling1D\"");
    assert_rejected(text, "m.json", "only GlobalAveragePooling1D uses one", NULL);
    free(text);
}
END_TEST

/* A BatchNormalization called on two branches of different depths and on their sum, read by a
 * Concatenate with its second call first: Keras runs the calls deepest first, those of one depth
 * in the order its backward walk meets them, so the second call runs first (run_rank), then the
 * first, then the third (nodes: da db dt bn bn add bn concat out). */
START_TEST(a_shared_batch_normalization_runs_its_calls_in_keras_order)
{
#define SHARED_BN                                                                                  \
    "{\"class_name\": \"BatchNormalization\", \"config\": {\"name\": \"bn\"}, \"name\": \"bn\", "  \
    "\"inbound_nodes\": [[[\"da\", 0, 0, {}]], [[\"dt\", 0, 0, {}]], [[\"s\", 0, 0, {}]]]}"
#define BN_CALL(k) "[\"bn\", " #k ", 0, {}]"
#define BRANCHES   DENSE("da", "x") ", " DENSE("db", "x") ", " DENSE("dt", "db")
#define MERGES                                                                                     \
    MERGE("Add", "s", BN_CALL(0) ", " BN_CALL(1))                                                  \
    ", " MERGE("Concatenate", "c", BN_CALL(1) ", " BN_CALL(2) ", " BN_CALL(0))
    const char *calls = BRANCHES ", " SHARED_BN ", " MERGES ", " DENSE("o", "c");
    const char *text = functional(calls, "[[\"x\", 0, 0]]", "[\"o\", 0, 0]");
    static const int shares[] = {0, 0, 0, 0, 4, 0, 4, 0, 0}, ranks[] = {0, 0, 0, 1, 0, 0, 2, 0, 0};
    job_model_t m;
    status_msg_t err = {0};

    ck_assert_msg(job_parse_keras_json(text, strlen(text), "f.json", &m, &err) == STATUS_OK, "%s",
                  err.text);
    ck_assert_uint_eq(m.n_layers, 9);
    for (size_t i = 0; i < m.n_layers; i++) {
        ck_assert_int_eq(m.layers[i].shares, shares[i]);
        ck_assert_int_eq(m.layers[i].run_rank, ranks[i]);
    }
    job_model_done(&m);
#undef BN_CALL
#undef SHARED_BN
#undef BRANCHES
#undef MERGES
}
END_TEST

/* Keras 2's form of calls, and what a shared layer may not be. */
START_TEST(shared_layers_outside_what_is_built_are_rejected)
{
    const char *in = "[[\"x\", 0, 0]]";
    /* "a" on x twice, then on the Add of those calls: Keras 2's [[LAYER, CALL, 0, {}]] */
    const char *calls =
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"a\", \"units\": 8}, "
        "\"name\": \"a\", \"inbound_nodes\": [[[\"x\", 0, 0, {}]], [[\"x\", 0, 0, "
        "{}]], [[\"s\", 0, 0, {}]]]}, " MERGE("Add", "s", "[\"a\", 0, 0, {}], [\"a\", 1, 0, {}]");
    const char *ok = functional(calls, in, "[\"a\", 2, 0]");
    job_model_t m;
    status_msg_t err = {0};

    ck_assert_int_eq(job_parse_keras_json(ok, strlen(ok), "f.json", &m, &err), STATUS_OK);
    ck_assert_uint_eq(m.n_layers, 4);
    ck_assert_int_eq(m.layers[3].shares, 1);
    ck_assert_int_eq(job_layer_input(&m, 3, 0), 2);
    job_model_done(&m);

    assert_rejected(functional(calls, in, "[\"a\", 1, 0]"), "f.json",
                    "output_layers names 'a' call 1, not the last call made", NULL);
    assert_rejected(functional(calls, in, "[\"a\", 3, 0]"), "f.json",
                    "output_layers names 'a' call 3, which the model does not make", NULL);
    assert_rejected(
        functional(DENSE("a", "x") ", {\"class_name\": \"Dense\", \"config\": "
                                   "{\"name\": \"b\", \"units\": 3}, \"name\": \"b\", "
                                   "\"inbound_nodes\": [[[\"a\", 0, 0, {}]], [[\"a\", 1, "
                                   "0, {}]]]}",
                   in, "[\"b\", 1, 0]"),
        "f.json", "layer 'b': reads call 1 of 'a', which is called 1 time", NULL);
    assert_rejected(functional("{\"class_name\": \"Dense\", \"config\": {\"name\": \"a\", "
                               "\"units\": 3}, \"name\": \"a\", \"inbound_nodes\": [[[\"x\", 1, 0, "
                               "{}]]]}",
                               in, "[\"a\", 0, 0]"),
                    "f.json", "reads call 1 of the InputLayer 'x'", NULL);
    /* b's first call reads a's second, which reads c, listed after b */
    assert_rejected(
        functional(
            "{\"class_name\": \"Dense\", \"config\": {\"name\": \"a\", "
            "\"units\": 8}, \"name\": \"a\", \"inbound_nodes\": [[[\"x\", 0, 0, "
            "{}]], [[\"c\", 0, 0, {}]]]}, {\"class_name\": \"Dense\", \"config\": {\"name\": "
            "\"b\", \"units\": 3}, \"name\": \"b\", \"inbound_nodes\": "
            "[[[\"a\", 1, 0, {}]]]}, "
            "{\"class_name\": \"Dense\", \"config\": {\"name\": \"c\", \"units\": "
            "8}, \"name\": \"c\", \"inbound_nodes\": [[[\"a\", 0, 0, {}]]]}",
            in, "[\"b\", 0, 0]"),
        "f.json", "layer 'c': is called before 'b', which the model lists before it, is first",
        NULL);
}
END_TEST

START_TEST(unknown_top_level_key_is_rejected)
{
    const char *text = "{\"class_name\": \"Sequential\", \"config\": {\"layers\": []}, "
                       "\"weights\": []}";

    assert_rejected(text, "m.json", "unknown model key 'weights'", NULL);
}
END_TEST

START_TEST(invalid_json_is_rejected_with_its_line)
{
    const char *text = "{\"class_name\": \"Sequential\",\n \"config\": {\"layers\": [,]}}";

    assert_rejected(text, "bad.json", "bad.json:2:24: invalid JSON", NULL);
    assert_rejected("", "empty.json", "empty.json:1:1: invalid JSON", NULL);
    assert_rejected("[1, 2]", "list.json", "list.json: not a Keras model", NULL);
}
END_TEST

/* Hostile shapes of document: every node is checked for its type before use, so a list where an
 * object belongs is an error naming it, never a crash. */
START_TEST(nodes_of_the_wrong_type_are_errors_not_crashes)
{
    static const char *const docs[] = {
        "{\"class_name\":\"Sequential\",\"config\":[1]}",
        "{\"class_name\":\"Sequential\",\"config\":[{\"a\":1}]}",
        "{\"class_name\":\"Sequential\",\"config\":\"x\"}",
        "{\"class_name\":\"Sequential\",\"config\":{\"layers\":[[1]]}}",
        "{\"class_name\":\"Sequential\",\"config\":{\"layers\":[{\"class_name\":\"Dense\","
        "\"config\":[1,2]}]}}",
        "{\"class_name\":\"Sequential\",\"config\":{\"layers\":[{\"class_name\":\"Dense\","
        "\"config\":{\"units\":4,\"kernel_initializer\":{\"class_name\":\"Constant\","
        "\"config\":[5]}}}]}}",
        "{\"class_name\":\"Sequential\",\"config\":{\"layers\":[{\"class_name\":\"Conv2D\","
        "\"config\":{\"filters\":4,\"kernel_size\":{\"a\":3,\"b\":3}}}]}}",
        "{\"class_name\":\"Sequential\",\"config\":{\"layers\":[{\"class_name\":\"Dense\","
        "\"config\":{\"units\":4,\"dtype\":{\"class_name\":\"DTypePolicy\",\"config\":[1]}}}]}}",
        "{\"class_name\":\"Sequential\",\"config\":{\"layers\":[{\"class_name\":\"InputLayer\","
        "\"config\":[1]}]}}",
        "[{\"class_name\":\"Sequential\"}]",
        "{\"class_name\":[\"Sequential\"]}",
    };

    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        job_model_t m;
        status_msg_t err = {0};
        ck_assert_msg(job_parse_keras_json(docs[i], strlen(docs[i]), "m.json", &m, &err) ==
                          STATUS_BAD_CONFIG,
                      "accepted: %s", docs[i]);
        ck_assert_msg(strncmp(err.text, "m.json", 6) == 0, "%s: %s", docs[i], err.text);
    }
}
END_TEST

/* A key given twice would be read by Python's json as the last one and here as the first:
 * neither is silently picked. */
START_TEST(keys_given_twice_are_rejected)
{
    static const char text[] =
        "{\"class_name\":\"Sequential\",\"config\":{\"layers\":[{\"class_name\":\"InputLayer\","
        "\"config\":{\"batch_shape\":[null,4]}},{\"class_name\":\"Dense\",\"config\":"
        "{\"units\":4,\"units\":8}}]}}";
    static const char wrapper[] = "{\"class_name\":\"Sequential\",\"class_name\":\"Sequential\"}";
    job_model_t m;
    status_msg_t err = {0};

    ck_assert_int_eq(job_parse_keras_json(text, strlen(text), "m.json", &m, &err),
                     STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "'units' is given twice") != NULL, "%s", err.text);
    ck_assert_int_eq(job_parse_keras_json(wrapper, strlen(wrapper), "m.json", &m, &err),
                     STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "'class_name' is given twice") != NULL, "%s", err.text);
}
END_TEST

/* Decoders that take a length honour it: the text ends at the last byte of a page that has an
 * unreadable page after it, so a read past the end faults. */
START_TEST(unterminated_text_is_never_read_past_its_length)
{
    static const char *const bodies[] = {"{\"class_name\": \"Seq", "{\"a\": [1, 2, 3",
                                         "{\"class_name\":\"Sequential\",\"config\":{\"layers\":["};
    long page = sysconf(_SC_PAGESIZE);
    char *map =
        mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    ck_assert_ptr_ne(map, MAP_FAILED);
    ck_assert_int_eq(mprotect(map + page, (size_t)page, PROT_NONE), 0);
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        size_t len = strlen(bodies[i]);
        char *text = map + page - len;
        job_model_t m;
        status_msg_t err = {0};
        memcpy(text, bodies[i], len); /* no terminator: the next byte is unreadable */
        ck_assert_int_eq(job_parse_keras_json(text, len, "m.json", &m, &err), STATUS_BAD_CONFIG);
        ck_assert_msg(strstr(err.text, "invalid JSON") != NULL, "%s", err.text);
    }
    munmap(map, (size_t)page * 2);
}
END_TEST

static Suite *keras_suite(void)
{
    Suite *s = suite_create("keras");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 10);
    tcase_add_loop_test(tc, mlp_fixture_is_784_dense128_relu_dense10_softmax, 0, 2);
    tcase_add_loop_test(tc, cnn_fixture_has_conv_pool_blocks_on_28x28x1, 0, 2);
    tcase_add_loop_test(tc, text_fixture_takes_integer_ids_into_an_embedding, 0, 2);
    tcase_add_loop_test(tc, layers_fixture_reads_every_other_layer_and_initializer, 0, 2);
    tcase_add_test(tc, job_files_and_keras_json_read_every_layer_kind_alike);
    tcase_add_test(tc, layer_normalization_is_read_from_both_formats);
    tcase_add_test(tc, every_layer_kind_fits_the_readers);
    tcase_add_test(tc, constraints_are_read_from_both_formats);
    tcase_add_test(tc, depthwise_and_separable_convolutions_are_read_from_both_formats);
    tcase_add_test(tc, one_d_layers_are_read_from_both_formats);
    tcase_add_test(tc, shape_and_activation_layers_are_read_from_both_formats);
    tcase_add_loop_test(tc, kernel_regularizer_is_read_as_keras_wrote_it, 0, 2);
    tcase_add_loop_test(tc, options_tessera_does_not_implement_are_rejected_by_name, 0, 2);
    tcase_add_test(tc, unknown_config_key_is_rejected_with_the_keys_tessera_reads);
    tcase_add_loop_test(tc, embedding_with_mask_zero_is_read, 0, 2);
    tcase_add_test(tc, unknown_layer_class_is_rejected_with_the_known_ones);
    tcase_add_test(tc, keras2_batch_input_shape_on_the_first_layer_gives_the_input);
    tcase_add_test(tc, first_layer_shape_must_agree_with_the_input_layer);
    tcase_add_test(tc, variable_input_dimensions_are_rejected);
    tcase_add_test(tc, model_without_input_shape_is_rejected);
    tcase_add_test(tc, embedding_after_the_first_layer_is_rejected);
    tcase_add_test(tc, duplicate_layer_names_are_rejected);
    tcase_add_test(tc, functional_models_parse_into_a_graph);
    tcase_add_test(tc, activity_regularizers_are_read);
    tcase_add_test(tc, batch_normalization_parses_in_both_generations);
    tcase_add_test(tc, functional_models_outside_what_is_built_are_rejected);
    tcase_add_test(tc, shared_layers_parse_into_one_entry_a_call);
    tcase_add_test(tc, several_inputs_parse_in_the_models_order);
    tcase_add_test(tc, masks_of_mask_zero_parse_in_functional_models);
    tcase_add_test(tc, several_inputs_outside_what_is_built_are_rejected);
    tcase_add_test(tc, shared_layers_outside_what_is_built_are_rejected);
    tcase_add_test(tc, a_shared_batch_normalization_runs_its_calls_in_keras_order);
    tcase_add_test(tc, unknown_top_level_key_is_rejected);
    tcase_add_test(tc, invalid_json_is_rejected_with_its_line);
    tcase_add_test(tc, nodes_of_the_wrong_type_are_errors_not_crashes);
    tcase_add_test(tc, keys_given_twice_are_rejected);
    tcase_add_test(tc, unterminated_text_is_never_read_past_its_length);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(keras_suite(), CK_FORK);
}
