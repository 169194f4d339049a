/* Unit tests for common/job/job.c: job files in YAML and JSON, the examples in examples/, models
 * given by keras_json, defaults, and the messages a user gets for every kind of mistake. Files
 * of the source tree are found under $TESSERA_SOURCE_DIR (default: the current directory). */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_run.h"
#include "job/job.h"
#include "job_check.h"

/* TAIL's data section alone, for jobs that give their own loss. */
#define DATA_ONLY                                                                                  \
    "data: {batch_size: 8, train: {format: synthetic, examples: 10, shape: [4], classes: 2}}\n"

static void source_path(char *buf, size_t size, const char *rel)
{
    const char *root = getenv("TESSERA_SOURCE_DIR");

    snprintf(buf, size, "%s/%s", root != NULL ? root : ".", rel);
}

/* ---- temporary files ---- */

static char tmp_dir[64];

static void write_file(const char *rel, const char *text)
{
    char path[256];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", tmp_dir, rel);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    fclose(f);
}

static void make_tmp_dir(void)
{
    char sub[128];

    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/test_job.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
    snprintf(sub, sizeof(sub), "%s/models", tmp_dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
}

/* ---- examples ---- */

static void load_example(const char *name, job_t *job)
{
    char path[512];
    status_msg_t err = {0};
    status_t rc;

    source_path(path, sizeof(path), name);
    rc = job_load_file(path, job, &err);
    ck_assert_msg(rc == STATUS_OK, "%s", err.text);
}

static void assert_dense(const job_layer_t *l, int units, job_activation_t act)
{
    ck_assert_int_eq(l->kind, JOB_LAYER_DENSE);
    ck_assert_int_eq(l->units, units);
    ck_assert_int_eq(l->activation, act);
}

static void assert_fashion_data(const job_t *job)
{
    ck_assert(job->data.train.present);
    ck_assert_int_eq(job->data.train.format, JOB_DATA_IDX);
    ck_assert_str_eq(job->data.train.images,
                     "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
    ck_assert_str_eq(job->data.train.labels,
                     "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz");
    ck_assert_str_eq(job->data.test.images,
                     "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz");
    ck_assert_double_eq_tol(job->data.scale, 1.0 / 255.0, 1e-15);
    ck_assert_int_eq(job->data.batch_size, 64);
    ck_assert_int_eq(job->data.shuffle_buffer, 10000);
    ck_assert(job->evaluate);
    ck_assert_int_eq(job->loss, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY);
    ck_assert(job->from_logits);
    ck_assert(job->metric_accuracy);
    ck_assert_int_eq(job->optimizer.kind, OPTIMIZER_ADAM);
    ck_assert_int_eq(job->optimizer.schedule.kind, LR_CONSTANT);
    ck_assert_double_eq_tol(job->optimizer.schedule.lr, 0.001, 1e-15);
}

START_TEST(mlp_example_is_the_keras_tutorial_model)
{
    job_t job;

    load_example("examples/fashion-mnist-mlp.yaml", &job);
    ck_assert_str_eq(job.name, "fashion-mnist-mlp");
    ck_assert_int_eq(job.model.input_rank, 1);
    ck_assert_int_eq(job.model.input_shape[0], 784);
    ck_assert_uint_eq(job.model.n_layers, 2);
    assert_dense(&job.model.layers[0], 128, JOB_ACT_RELU);
    assert_dense(&job.model.layers[1], 10, JOB_ACT_LINEAR);
    assert_fashion_data(&job);
    ck_assert_int_eq(job.epochs, 5);
    ck_assert_int_eq(job.steps, 0);
    job_done(&job);
}
END_TEST

/* The same model on TFRecord shards that `tessera convert` writes (the file says how). */
START_TEST(tfrecord_example_is_the_mlp_on_tfrecord_shards)
{
    job_t job;

    load_example("examples/fashion-mnist-mlp-tfrecord.yaml", &job);
    ck_assert_uint_eq(job.model.n_layers, 2);
    ck_assert_int_eq(job.data.train.format, JOB_DATA_TFRECORD);
    ck_assert_ptr_nonnull(strstr(job.data.train.files[0], "examples/data/fm-train-*-of-00004"));
    ck_assert_int_eq(job.data.train.inputs[0].kind, JOB_FEATURE_BYTES_LIST);
    ck_assert_int_eq(job.data.train.inputs[0].shape[0], 784);
    ck_assert_str_eq(job.data.train.label[0].name, "label");
    ck_assert_int_eq(job.data.test.format, JOB_DATA_TFRECORD);
    ck_assert_ptr_nonnull(strstr(job.checkpoint_dir, "examples/ckpt/"));
    job_done(&job);
}
END_TEST

START_TEST(resnet_example_is_a_functional_graph_beside_it)
{
    static const job_layer_kind_t kinds[] = {JOB_LAYER_CONV2D,
                                             JOB_LAYER_BATCH_NORMALIZATION,
                                             JOB_LAYER_RELU,
                                             JOB_LAYER_CONV2D,
                                             JOB_LAYER_BATCH_NORMALIZATION,
                                             JOB_LAYER_RELU,
                                             JOB_LAYER_CONV2D,
                                             JOB_LAYER_BATCH_NORMALIZATION,
                                             JOB_LAYER_ADD,
                                             JOB_LAYER_RELU,
                                             JOB_LAYER_MAX_POOLING2D,
                                             JOB_LAYER_FLATTEN,
                                             JOB_LAYER_GLOBAL_MAX_POOLING2D,
                                             JOB_LAYER_CONCATENATE,
                                             JOB_LAYER_DENSE};
    job_t job;

    /* keras_json names the model beside the job file */
    load_example("examples/fashion-mnist-resnet.yaml", &job);
    ck_assert_uint_eq(job.model.n_layers, 15);
    for (size_t i = 0; i < 15; i++)
        ck_assert_int_eq(job.model.layers[i].kind, kinds[i]);
    ck_assert(job_model_is_graph(&job.model));
    ck_assert_int_eq(job_layer_input(&job.model, 8, 0), 2); /* the block's skip */
    ck_assert_int_eq(job_layer_input(&job.model, 8, 1), 7);
    ck_assert_int_eq(job_layer_input(&job.model, 11, 0), 10); /* two readers of the pooling */
    ck_assert_int_eq(job_layer_input(&job.model, 12, 0), 10);
    ck_assert_double_eq_tol(job.model.layers[1].momentum, 0.99, 1e-12);
    job_done(&job);
}
END_TEST

START_TEST(cnn_example_is_two_conv_blocks_and_a_dense_head)
{
    static const job_layer_kind_t kinds[] = {
        JOB_LAYER_CONV2D,  JOB_LAYER_MAX_POOLING2D, JOB_LAYER_CONV2D, JOB_LAYER_MAX_POOLING2D,
        JOB_LAYER_FLATTEN, JOB_LAYER_DENSE,         JOB_LAYER_DENSE};
    job_t job;

    load_example("examples/fashion-mnist-cnn.yaml", &job);
    ck_assert_int_eq(job.model.input_rank, 3);
    ck_assert_int_eq(job.model.input_shape[0], 28);
    ck_assert_int_eq(job.model.input_shape[2], 1);
    ck_assert_uint_eq(job.model.n_layers, 7);
    for (size_t i = 0; i < 7; i++)
        ck_assert_int_eq(job.model.layers[i].kind, kinds[i]);
    ck_assert_int_eq(job.model.layers[0].filters, 32);
    ck_assert_int_eq(job.model.layers[0].kernel_size[1], 3);
    ck_assert_int_eq(job.model.layers[1].strides[0], 2);
    ck_assert_int_eq(job.model.layers[2].filters, 64);
    ck_assert_str_eq(job.model.layers[2].name, "conv2d_1");
    assert_dense(&job.model.layers[5], 64, JOB_ACT_RELU);
    assert_dense(&job.model.layers[6], 10, JOB_ACT_LINEAR);
    assert_fashion_data(&job);
    ck_assert_int_eq(job.epochs, 2);
    job_done(&job);
}
END_TEST

START_TEST(text_example_trains_an_embedding_on_synthetic_text)
{
    job_t job;

    load_example("examples/text-synthetic.yaml", &job);
    ck_assert(job.model.input_is_int);
    ck_assert_int_eq(job.model.input_shape[0], 100);
    ck_assert_int_eq(job.model.layers[0].kind, JOB_LAYER_EMBEDDING);
    ck_assert_int_eq(job.model.layers[0].input_dim, 10000);
    ck_assert_int_eq(job.model.layers[0].output_dim, 16);
    ck_assert_int_eq(job.model.layers[1].kind, JOB_LAYER_GLOBAL_AVERAGE_POOLING1D);
    assert_dense(&job.model.layers[2], 16, JOB_ACT_RELU);
    assert_dense(&job.model.layers[3], 1, JOB_ACT_LINEAR);
    ck_assert_int_eq(job.loss, JOB_LOSS_BINARY_CROSSENTROPY);
    ck_assert(job.from_logits);
    ck_assert_int_eq(job.data.train.format, JOB_DATA_SYNTHETIC);
    ck_assert_int_eq(job.data.train.synthetic.kind, JOB_SYNTHETIC_TEXT);
    ck_assert_int_eq(job.data.train.synthetic.vocabulary, 10000);
    ck_assert_int_eq(job.data.train.synthetic.rank, 1);
    ck_assert_int_eq(job.data.train.synthetic.shape[0], 100);
    ck_assert_int_eq(job.data.test.synthetic.seed, 2);
    ck_assert(job.evaluate);
    job_done(&job);
}
END_TEST

/* ---- well-formed jobs ---- */

static const char full_yaml[] =
    "name: every-key\n"
    "strategy: parameter_server\n"
    "seed: 42\n"
    "model:\n"
    "  - {conv2d: {filters: 4, kernel_size: [3, 1], strides: 2, padding: same, use_bias: false,\n"
    "              kernel_initializer: {he_uniform: {seed: 9}}, name: c1},\n"
    "     input_shape: [8, 8, 2]}\n"
    "  - {average_pooling2d: {pool_size: [2, 1], padding: valid}}\n"
    "  - {reshape: {target_shape: [-1, 4]}}\n"
    "  - flatten\n"
    "  - {dropout: {rate: 0.5, seed: 3}}\n"
    "  - {dense: {units: 3, activation: softmax,\n"
    "             kernel_initializer: {random_uniform: {minval: -1, maxval: 1}},\n"
    "             bias_initializer: {constant: {value: 0.5}}}}\n"
    "  - {activation: {activation: sigmoid}}\n"
    "loss: {binary_crossentropy: {from_logits: false}}\n"
    "metrics: [loss, binary_accuracy]\n"
    "optimizer:\n"
    "  sgd:\n"
    "    learning_rate: {exponential_decay: {initial_learning_rate: 0.1, decay_steps: 100,\n"
    "                                        decay_rate: 0.5, staircase: true}}\n"
    "    momentum: 0.9\n"
    "    nesterov: yes\n"
    "    scale_learning_rate: true\n"
    "data:\n"
    "  train: {format: idx, images: data/train-images.gz, labels: /abs/train-labels.gz}\n"
    "  test: {format: synthetic, kind: classification, examples: 100, shape: [8, 8, 2],\n"
    "         classes: 3, seed: 7}\n"
    "  scale: 0.5\n"
    "  batch_size: 32\n"
    "  shuffle_buffer: 1000\n"
    "  seed: 5\n"
    "  drop_remainder: true\n"
    "  prefetch: 0\n"
    "train: {steps: 1000, steps_per_execution: 10, max_staleness: 4, bytes_per_pack: 65536,\n"
    "        wire_dtype: bfloat16, wire_error_feedback: true}\n"
    "evaluate: false\n"
    "partitioner: {max_size: {max_shard_bytes: 1048576, max_shards: 4}}\n";

START_TEST(every_key_of_a_job_is_read)
{
    job_t job;
    const job_layer_t *l;

    parse_ok(full_yaml, "/srv/jobs/every.yaml", &job);
    ck_assert_str_eq(job.name, "every-key");
    ck_assert_str_eq(job.path, "/srv/jobs/every.yaml");
    ck_assert_int_eq(job.strategy, JOB_STRATEGY_PARAMETER_SERVER);
    ck_assert_uint_eq(job.seed, 42);
    ck_assert_uint_eq(job.model.n_layers, 7);
    l = &job.model.layers[0];
    ck_assert_str_eq(l->name, "c1");
    ck_assert_int_eq(l->kernel_size[0], 3);
    ck_assert_int_eq(l->kernel_size[1], 1);
    ck_assert_int_eq(l->strides[0], 2);
    ck_assert_int_eq(l->strides[1], 2);
    ck_assert(l->padding_same);
    ck_assert(!l->use_bias);
    ck_assert_int_eq(l->kernel_init.kind, JOB_INIT_HE_UNIFORM);
    ck_assert(l->kernel_init.has_seed);
    ck_assert_uint_eq(l->kernel_init.seed, 9);
    ck_assert_int_eq(l->bias_init.kind, JOB_INIT_DEFAULT);
    l = &job.model.layers[1];
    ck_assert_int_eq(l->pool_size[0], 2);
    ck_assert_int_eq(l->pool_size[1], 1);
    ck_assert_int_eq(l->strides[0], 2); /* pooling strides default to the pool size */
    ck_assert_int_eq(l->strides[1], 1);
    l = &job.model.layers[2];
    ck_assert_int_eq(l->target_rank, 2);
    ck_assert_int_eq(l->target_shape[0], -1);
    ck_assert_int_eq(job.model.layers[3].kind, JOB_LAYER_FLATTEN);
    ck_assert_double_eq_tol(job.model.layers[4].rate, 0.5, 1e-15);
    ck_assert_uint_eq(job.model.layers[4].dropout_seed, 3);
    l = &job.model.layers[5];
    ck_assert_int_eq(l->kernel_init.kind, JOB_INIT_RANDOM_UNIFORM);
    ck_assert_double_eq_tol(l->kernel_init.a, -1, 1e-15);
    ck_assert_double_eq_tol(l->kernel_init.b, 1, 1e-15);
    ck_assert(!l->kernel_init.has_seed);
    ck_assert_int_eq(l->bias_init.kind, JOB_INIT_CONSTANT);
    ck_assert_double_eq_tol(l->bias_init.a, 0.5, 1e-15);
    ck_assert_int_eq(job.model.layers[6].activation, JOB_ACT_SIGMOID);
    ck_assert_str_eq(job.model.layers[6].name, "activation");
    ck_assert_int_eq(job.loss, JOB_LOSS_BINARY_CROSSENTROPY);
    ck_assert(!job.from_logits);
    ck_assert(job.metric_accuracy);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_SGD);
    ck_assert_int_eq(job.optimizer.schedule.kind, LR_EXPONENTIAL_DECAY);
    ck_assert_double_eq_tol(job.optimizer.schedule.initial_lr, 0.1, 1e-15);
    ck_assert_int_eq(job.optimizer.schedule.decay_steps, 100);
    ck_assert(job.optimizer.schedule.staircase);
    ck_assert_double_eq_tol(job.optimizer.momentum, 0.9, 1e-15);
    ck_assert(job.optimizer.nesterov);
    ck_assert_double_eq(job.optimizer.lr_scale, 0); /* scale by the replicas at run time */
    ck_assert_str_eq(job.data.train.images, "/srv/jobs/data/train-images.gz");
    ck_assert_str_eq(job.data.train.labels, "/abs/train-labels.gz");
    ck_assert_int_eq(job.data.test.format, JOB_DATA_SYNTHETIC);
    ck_assert_int_eq(job.data.test.synthetic.classes, 3);
    ck_assert_int_eq(job.data.test.synthetic.rank, 3);
    ck_assert_uint_eq(job.data.test.synthetic.seed, 7);
    ck_assert_double_eq_tol(job.data.scale, 0.5, 1e-15);
    ck_assert_int_eq(job.data.batch_size, 32);
    ck_assert_int_eq(job.data.shuffle_buffer, 1000);
    ck_assert_uint_eq(job.data.seed, 5);
    ck_assert(job.data.drop_remainder);
    ck_assert_int_eq(job.data.prefetch, 0);
    ck_assert_int_eq(job.steps, 1000);
    ck_assert_int_eq(job.epochs, 0);
    ck_assert_int_eq(job.steps_per_execution, 10);
    ck_assert_int_eq(job.max_staleness, 4);
    ck_assert_int_eq(job.bytes_per_pack, 65536);
    ck_assert(job.wire_bf16 && job.wire_error_feedback);
    ck_assert(!job.evaluate);
    ck_assert_int_eq(job.partitioner.kind, JOB_PARTITIONER_MAX_SIZE);
    ck_assert_int_eq(job.partitioner.max_shard_bytes, 1048576);
    ck_assert_int_eq(job.partitioner.max_shards, 4);
    job_done(&job);
}
END_TEST

START_TEST(json_job_reads_like_yaml)
{
    static const char json[] =
        "{\"name\": \"j\", \"strategy\": \"mirrored\",\n"
        " \"model\": [{\"dense\": {\"units\": 128, \"activation\": \"relu\"}, "
        "\"input_shape\": [784]},\n"
        "           {\"dense\": {\"units\": 10}}],\n"
        " \"loss\": {\"sparse_categorical_crossentropy\": {\"from_logits\": true}},\n"
        " \"metrics\": [\"accuracy\"],\n"
        " \"optimizer\": {\"adam\": {\"learning_rate\": 1e-3, \"beta_1\": 0.8}},\n"
        " \"data\": {\"train\": {\"format\": \"idx\", \"images\": \"a\", \"labels\": \"b\"},\n"
        "          \"batch_size\": 64, \"scale\": 0.00392156862745098},\n"
        " \"train\": {\"epochs\": 5}}\n";
    job_t job;

    parse_ok(json, "jobs/j.json", &job);
    ck_assert_str_eq(job.name, "j");
    ck_assert_int_eq(job.strategy, JOB_STRATEGY_MIRRORED);
    ck_assert_uint_eq(job.model.n_layers, 2);
    assert_dense(&job.model.layers[0], 128, JOB_ACT_RELU);
    ck_assert_int_eq(job.model.input_shape[0], 784);
    ck_assert(job.from_logits);
    ck_assert_double_eq_tol(job.optimizer.schedule.lr, 0.001, 1e-15);
    ck_assert_double_eq_tol(job.optimizer.beta_1, 0.8, 1e-15);
    ck_assert_double_eq_tol(job.optimizer.beta_2, 0.999, 1e-15);
    ck_assert_str_eq(job.data.train.images, "jobs/a");
    ck_assert_int_eq(job.epochs, 5);
    job_done(&job);
}
END_TEST

START_TEST(minimal_job_takes_keras_defaults)
{
    job_t job;

    parse_ok(MODEL TAIL, "dir/my-job.yaml", &job);
    ck_assert_str_eq(job.name, "my-job");
    ck_assert_int_eq(job.strategy, JOB_STRATEGY_ONE_DEVICE);
    ck_assert_int_eq(job.model.layers[0].activation, JOB_ACT_LINEAR);
    ck_assert(job.model.layers[0].use_bias);
    ck_assert_int_eq(job.model.layers[0].kernel_init.kind, JOB_INIT_DEFAULT);
    ck_assert_str_eq(job.model.layers[0].name, "dense");
    ck_assert_ptr_null(job.model.keras_json);
    ck_assert_int_eq(job.loss, JOB_LOSS_MSE);
    ck_assert(!job.metric_accuracy);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_RMSPROP);
    ck_assert_double_eq(job.optimizer.lr_scale, 1);
    ck_assert_int_eq(job.epochs, 1);
    ck_assert_int_eq(job.steps, 0);
    ck_assert_int_eq(job.steps_per_execution, 1);
    ck_assert_int_eq(job.max_staleness, 0);
    ck_assert_int_eq(job.bytes_per_pack, 0);
    ck_assert_double_eq(job.data.scale, 1);
    ck_assert_int_eq(job.data.prefetch, 2);
    ck_assert_int_eq(job.data.shuffle_buffer, 0);
    ck_assert(!job.data.drop_remainder);
    ck_assert(!job.data.test.present);
    ck_assert(!job.evaluate);
    ck_assert_int_eq(job.partitioner.kind, JOB_PARTITIONER_NONE);
    ck_assert_ptr_null(job.checkpoint_dir);
    ck_assert_ptr_null(job.tensorboard_logdir);
    ck_assert_uint_eq(job.seed, 0);
    job_done(&job);
}
END_TEST

START_TEST(model_may_be_a_mapping_with_layers_and_input_shape)
{
    job_t job;

    parse_ok("model: {input_shape: [3, 2], layers: [flatten, {dense: {units: 2}}]}\n" TAIL, NULL,
             &job);
    ck_assert_str_eq(job.name, "job");
    ck_assert_ptr_null(job.path);
    ck_assert_int_eq(job.model.input_rank, 2);
    ck_assert_int_eq(job.model.input_shape[1], 2);
    ck_assert_int_eq(job.model.layers[0].kind, JOB_LAYER_FLATTEN);
    job_done(&job);
}
END_TEST

START_TEST(embedding_input_length_gives_the_input_shape)
{
    job_t job;

    parse_ok("model: [{embedding: {input_dim: 50, output_dim: 4, input_length: 12,\n"
             "                     embeddings_initializer: uniform}},\n"
             "        global_average_pooling1d, {dense: {units: 1}}]\n" TAIL,
             "j.yaml", &job);
    ck_assert(job.model.input_is_int);
    ck_assert_int_eq(job.model.input_rank, 1);
    ck_assert_int_eq(job.model.input_shape[0], 12);
    ck_assert_int_eq(job.model.layers[0].kernel_init.kind, JOB_INIT_RANDOM_UNIFORM);
    ck_assert_double_eq_tol(job.model.layers[0].kernel_init.a, -0.05, 1e-15);
    job_done(&job);
}
END_TEST

START_TEST(learning_rate_schedules_are_read)
{
    job_t job;

    parse_ok(MODEL TAIL "optimizer: {adam: {learning_rate: {constant: {learning_rate: 0.5}}}}\n",
             "j.yaml", &job);
    ck_assert_int_eq(job.optimizer.schedule.kind, LR_CONSTANT);
    ck_assert_double_eq_tol(job.optimizer.schedule.lr, 0.5, 1e-15);
    job_done(&job);

    parse_ok(MODEL TAIL "optimizer: {rmsprop: {centered: true, rho: 0.8, learning_rate:\n"
                        "  {linear_warmup: {learning_rate: 0.1, warmup_steps: 50}}}}\n",
             "j.yaml", &job);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_RMSPROP);
    ck_assert(job.optimizer.centered);
    ck_assert_double_eq_tol(job.optimizer.rho, 0.8, 1e-15);
    ck_assert_int_eq(job.optimizer.schedule.kind, LR_LINEAR_WARMUP);
    ck_assert_double_eq_tol(job.optimizer.schedule.lr, 0.1, 1e-15);
    ck_assert_double_eq(job.optimizer.schedule.initial_lr, 0);
    ck_assert_int_eq(job.optimizer.schedule.warmup_steps, 50);
    job_done(&job);

    parse_ok(MODEL TAIL "optimizer: {adagrad: {learning_rate: {piecewise_constant:\n"
                        "  {boundaries: [100, 200], values: [0.3, 0.2, 0.1]}}}}\n",
             "j.yaml", &job);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_ADAGRAD);
    ck_assert_int_eq(job.optimizer.schedule.kind, LR_PIECEWISE_CONSTANT);
    ck_assert_uint_eq(job.optimizer.schedule.n_boundaries, 2);
    ck_assert_int_eq(job.optimizer.schedule.boundaries[1], 200);
    ck_assert_double_eq_tol(job.optimizer.schedule.values[2], 0.1, 1e-15);
    job_done(&job);

    parse_ok(MODEL TAIL "optimizer: sgd\n", "j.yaml", &job);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_SGD);
    ck_assert_double_eq_tol(job.optimizer.schedule.lr, 0.01, 1e-15);
    job_done(&job);
}
END_TEST

START_TEST(partitioners_take_tensorflow_defaults)
{
    job_t job;

    parse_ok(MODEL TAIL "partitioner: {min_size: {max_shards: 2}}\n", "j.yaml", &job);
    ck_assert_int_eq(job.partitioner.kind, JOB_PARTITIONER_MIN_SIZE);
    ck_assert_int_eq(job.partitioner.min_shard_bytes, 262144);
    ck_assert_int_eq(job.partitioner.max_shards, 2);
    job_done(&job);
    parse_ok(MODEL TAIL "partitioner: min_size\n", "j.yaml", &job);
    ck_assert_int_eq(job.partitioner.max_shards, 1);
    job_done(&job);
    parse_ok(MODEL TAIL "partitioner: {fixed: {num_shards: 3}}\n", "j.yaml", &job);
    ck_assert_int_eq(job.partitioner.kind, JOB_PARTITIONER_FIXED);
    ck_assert_int_eq(job.partitioner.num_shards, 3);
    job_done(&job);
    ASSERT_BAD(MODEL TAIL "partitioner: {fixed: {}}\n",
               "partitioner.fixed: missing required key 'num_shards'");
}
END_TEST

START_TEST(keras_json_is_read_relative_to_the_job_file)
{
    char fixture[512], job_path[256];
    FILE *f;
    char buf[8192];
    size_t n;
    job_t job;
    status_msg_t err = {0};

    make_tmp_dir();
    source_path(fixture, sizeof(fixture), "tests/fixtures/keras/keras3_cnn.json");
    f = fopen(fixture, "r");
    ck_assert_msg(f != NULL, "cannot open %s (set TESSERA_SOURCE_DIR)", fixture);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    write_file("models/cnn.json", buf);
    write_file("job.yaml", "model: {keras_json: models/cnn.json}\n" TAIL);
    snprintf(job_path, sizeof(job_path), "%s/job.yaml", tmp_dir);
    ck_assert_msg(job_load_file(job_path, &job, &err) == STATUS_OK, "%s", err.text);
    ck_assert_uint_eq(job.model.n_layers, 7);
    ck_assert_int_eq(job.model.input_shape[0], 28);
    ck_assert_str_eq(job.model.keras_json, buf);
    job_done(&job);
}
END_TEST

/* ---- mistakes ---- */

START_TEST(misspelt_key_names_file_line_path_and_suggestion)
{
    static const char text[] = "name: typo\n"
                               "loss: mse\n"
                               "data: {batch_size: 8, train: {format: synthetic, examples: 10,\n"
                               "       shape: [4], classes: 2}}\n"
                               "model:\n"
                               "  - {dense: {units: 16}, input_shape: [4]}\n"
                               "  - {dense: {unit: 1}}\n";

    ASSERT_BAD(text, "job.yaml:7: model[1].dense: unknown key 'unit' (did you mean 'units'?)");
    ASSERT_BAD(MODEL TAIL "trian: {epochs: 1}\n",
               "job.yaml:4: unknown key 'trian' (did you mean 'train'?)");
    ASSERT_BAD(MODEL TAIL "colour: red\n", "unknown key 'colour' (allowed: name, strategy, model");
    ASSERT_BAD(MODEL TAIL "optimizer: {adam: {learning_rat: 0.1}}\n",
               "optimizer.adam: unknown key 'learning_rat' (did you mean 'learning_rate'?)");
    ASSERT_BAD("model: [{dense: {units: 1}, input_shap: [4]}]\n" TAIL,
               "model[0]: unknown key 'input_shap' (did you mean 'input_shape'?)");
}
END_TEST

/* Keras 3's other optimizers by their names and keys, weight decay and clipping on any kind;
 * a key of another kind is refused by name. */
START_TEST(newer_optimizers_weight_decay_and_clipping_are_read)
{
    job_t job;

    parse_ok(MODEL TAIL "optimizer: {adamw: {learning_rate: 0.01, weight_decay: 0.05, "
                        "amsgrad: true, global_clipnorm: 1.0}}\n",
             "j.yaml", &job);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_ADAMW);
    ck_assert_double_eq_tol(job.optimizer.weight_decay, 0.05, 1e-15);
    ck_assert_double_eq_tol(job.optimizer.global_clipnorm, 1.0, 1e-15);
    ck_assert(job.optimizer.amsgrad);
    job_done(&job);
    parse_ok(MODEL TAIL "optimizer: {adamw: {}}\n", "j.yaml", &job);
    ck_assert_double_eq_tol(job.optimizer.weight_decay, 0.004, 1e-15); /* Keras's default */
    job_done(&job);
    parse_ok(MODEL TAIL "optimizer: {ftrl: {learning_rate_power: -0.25, "
                        "l1_regularization_strength: 0.01, l2_regularization_strength: 0.02, "
                        "l2_shrinkage_regularization_strength: 0.03, beta: 0.5, "
                        "initial_accumulator_value: 0.2, clipvalue: 3}}\n",
             "j.yaml", &job);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_FTRL);
    ck_assert_double_eq_tol(job.optimizer.learning_rate_power, -0.25, 1e-15);
    ck_assert_double_eq_tol(job.optimizer.l1, 0.01, 1e-15);
    ck_assert_double_eq_tol(job.optimizer.l2, 0.02, 1e-15);
    ck_assert_double_eq_tol(job.optimizer.l2_shrinkage, 0.03, 1e-15);
    ck_assert_double_eq_tol(job.optimizer.beta, 0.5, 1e-15);
    ck_assert_double_eq_tol(job.optimizer.clipvalue, 3, 1e-15);
    job_done(&job);
    parse_ok(MODEL TAIL "optimizer: {lion: {beta_1: 0.95, beta_2: 0.98, weight_decay: 0.1}}\n",
             "j.yaml", &job);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_LION);
    ck_assert_double_eq_tol(job.optimizer.beta_2, 0.98, 1e-15);
    job_done(&job);
    parse_ok(MODEL TAIL "optimizer: {sgd: {momentum: 0.9, clipnorm: 2}}\n", "j.yaml", &job);
    ck_assert_double_eq_tol(job.optimizer.clipnorm, 2, 1e-15);
    job_done(&job);
    ASSERT_BAD(MODEL TAIL "optimizer: {lion: {epsilon: 1e-7}}\n", "epsilon");
    /* label smoothing: the categorical and binary cross-entropies, from 0 to 1 */
    parse_ok(
        MODEL
        "loss: {categorical_crossentropy: {from_logits: true, label_smoothing: 0.1}}\n"
        "data: {batch_size: 8, train: {format: synthetic, examples: 10, shape: [4], classes: 2}}\n",
        "j.yaml", &job);
    ck_assert_int_eq(job.loss, JOB_LOSS_CATEGORICAL_CROSSENTROPY);
    ck_assert(job.from_logits && job_loss_has_accuracy(job.loss));
    ck_assert_double_eq_tol(job.label_smoothing, 0.1, 1e-15);
    job_done(&job);
    ASSERT_BAD(
        MODEL
        "loss: {binary_crossentropy: {label_smoothing: 1.5}}\n"
        "data: {batch_size: 8, train: {format: synthetic, examples: 10, shape: [4], classes: 2}}\n",
        "label_smoothing must be from 0 to 1");
    ASSERT_BAD(
        MODEL
        "loss: {sparse_categorical_crossentropy: {label_smoothing: 0.1}}\n"
        "data: {batch_size: 8, train: {format: synthetic, examples: 10, shape: [4], classes: 2}}\n",
        "label_smoothing");
    ASSERT_BAD(MODEL TAIL "optimizer: {nadam: {amsgrad: true}}\n", "amsgrad");
    /* reduction: sum, the mean by any of its names, or none (null too) */
    parse_ok(MODEL "loss: {mse: {reduction: sum}}\n" DATA_ONLY, "j.yaml", &job);
    ck_assert(job.loss_sum);
    job_done(&job);
    parse_ok(MODEL "loss: {huber: {delta: 2, reduction: mean}}\n" DATA_ONLY, "j.yaml", &job);
    ck_assert(!job.loss_sum);
    job_done(&job);
    for (int k = 0; k < 2; k++) {
        parse_ok(k == 0 ? MODEL "loss: {mse: {reduction: none}}\n" DATA_ONLY
                        : MODEL "loss: {mse: {reduction: ~}}\n" DATA_ONLY,
                 "j.yaml", &job);
        ck_assert(job.loss_unreduced && !job.loss_sum);
        job_done(&job);
    }
    ASSERT_BAD(MODEL "loss: {mse: {reduction: each}}\n" DATA_ONLY, "'each' is not supported",
               "sum or none");
    ASSERT_BAD("model: [{dense: {units: 1, kernel_regularizer: {l2: 0.01}}, input_shape: [4]}]\n"
               "loss: {mse: {reduction: none}}\n" DATA_ONLY,
               "reduction none beside layer dense's regularizer");
    /* token ids are never scaled */
    ASSERT_BAD("model: [{embedding: {input_dim: 10, output_dim: 2}, input_shape: [4]}, flatten, "
               "{dense: {units: 1}}]\nloss: mse\ndata: {batch_size: 8, scale: 0.5, train: "
               "{format: synthetic, kind: text, examples: 10, shape: [4], vocabulary: 10}}\n",
               "data.scale: the model reads token ids");
    ASSERT_BAD(MODEL TAIL "optimizer: {adam: {clipnorm: 1, clipvalue: 1}}\n",
               "at most one of clipnorm, global_clipnorm and clipvalue");
    ASSERT_BAD(MODEL TAIL "optimizer: {adam: {use_ema: true}}\n", "use_ema");
    /* constraints: the parameter servers apply them */
    parse_ok("strategy: parameter_server\nmodel: [{dense: {units: 1, kernel_constraint: "
             "non_neg}, input_shape: [4]}]\n" TAIL,
             "j.yaml", &job);
    ck_assert_int_eq(job.model.layers[0].kernel_constraint.kind, JOB_CONSTRAINT_NON_NEG);
    job_done(&job);
    /* synchronized BatchNormalization: the replicas of mirrored and the workers of
     * multi_worker_mirrored synchronize it */
    for (int k = 0; k < 2; k++) {
        parse_ok(k == 0 ? "strategy: mirrored\nmodel: [{dense: {units: 3}, input_shape: [4]}, "
                          "{batch_normalization: {synchronized: true}}]\n" TAIL
                        : "strategy: multi_worker_mirrored\nmodel: [{dense: {units: 3}, "
                          "input_shape: [4]}, {batch_normalization: {synchronized: true}}]\n" TAIL,
                 "j.yaml", &job);
        ck_assert(job.model.layers[1].synchronized);
        job_done(&job);
    }
    /* an activity regularizer on any layer */
    parse_ok("model: [{dense: {units: 3, activity_regularizer: {l1: 0.01}}, input_shape: [4]}, "
             "{flatten: {activity_regularizer: {l2: 0.5}}}]\n" TAIL,
             "j.yaml", &job);
    ck_assert_double_eq_tol(job.model.layers[0].activity_reg.l1, 0.01, 1e-15);
    ck_assert_double_eq_tol(job.model.layers[1].activity_reg.l2, 0.5, 1e-15);
    job_done(&job);
    /* BatchNormalization in a job file; its moving statistics are not kept by the PS yet */
    parse_ok("model: [{dense: {units: 3}, input_shape: [4]}, {batch_normalization: {momentum: "
             "0.9, epsilon: 0.01, center: false, axis: -1}}, {dense: {units: 1}}]\n" TAIL,
             "j.yaml", &job);
    ck_assert_int_eq(job.model.layers[1].kind, JOB_LAYER_BATCH_NORMALIZATION);
    ck_assert_double_eq_tol(job.model.layers[1].momentum, 0.9, 1e-15);
    ck_assert(!job.model.layers[1].center && job.model.layers[1].scale_gamma);
    job_done(&job);
    ASSERT_BAD("model: [{batch_normalization: {axis: 0}, input_shape: [4]}]\n" TAIL, "axis");
    parse_ok("strategy: parameter_server\nmodel: [{batch_normalization: {}, input_shape: [4]}, "
             "{dense: {units: 1}}]\n" TAIL,
             "j.yaml", &job);
    job_done(&job);
}
END_TEST

START_TEST(unknown_names_are_listed_with_the_known_ones)
{
    ASSERT_BAD("model: [{dence: {units: 1}, input_shape: [4]}]\n" TAIL,
               "job.yaml:1: model[0]: unknown layer 'dence' (did you mean 'dense'?)",
               "known layers: dense, conv2d");
    ASSERT_BAD("model: [{dense: {units: 1, activation: swishy}, input_shape: [4]}]\n" TAIL,
               "model[0].dense.activation: unknown activation 'swishy' (did you mean 'swish'?); "
               "known activations: linear, relu, sigmoid, tanh, softmax, gelu");
    ASSERT_BAD(MODEL "loss: categorical_crossentropi\n",
               "job.yaml:2: loss: unknown loss 'categorical_crossentropi' (did you mean "
               "'categorical_crossentropy'?)",
               "known losses: mse, mean_squared_error, sparse_categorical_crossentropy");
    ASSERT_BAD(MODEL TAIL "optimizer: {adamwx: {}}\n",
               "unknown optimizer 'adamwx' (did you mean 'adamw'?)",
               "sgd, adam, adagrad, rmsprop, adamw, nadam, adamax, lion, ftrl");
    ASSERT_BAD(MODEL TAIL "strategy: tpu\n", "strategy: unknown strategy 'tpu'");
    ASSERT_BAD(MODEL TAIL "metrics: [f1_score]\n", "metrics[0]: unknown metric 'f1_score'");
    ASSERT_BAD(
        "model: [{dense: {units: 1, kernel_initializer: orthogonal}, input_shape: [4]}]\n" TAIL,
        "unknown initializer 'orthogonal'");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 1, train: {format: parquet}}\n",
               "data.train.format: unknown data format 'parquet'",
               "idx, synthetic, tfrecord, npy, npz, csv");
}
END_TEST

START_TEST(train_takes_epochs_or_steps_not_both)
{
    ASSERT_BAD(MODEL TAIL "train: {epochs: 2, steps: 100}\n",
               "job.yaml:4: train: give exactly one of epochs and steps");
    ASSERT_BAD(MODEL TAIL "train: {steps_per_execution: 2}\n", "exactly one of epochs and steps");
    ASSERT_BAD(MODEL TAIL "train: {epochs: 0}\n",
               "train.epochs must be a positive integer, got '0'");
    ASSERT_BAD(MODEL TAIL "train: {epochs: 1, bytes_per_pack: -1}\n",
               "train.bytes_per_pack must be");
    ASSERT_BAD(MODEL TAIL "train: {epochs: 1, wire_dtype: float16}\n",
               "train.wire_dtype: 'float16' is not float32 or bfloat16");
    /* the synchronous strategies send no gradient to a PS */
    ASSERT_BAD("strategy: multi_worker_mirrored\n" MODEL TAIL
               "train: {epochs: 1, wire_dtype: bfloat16}\n",
               "train.wire_dtype: bfloat16 is for parameter_server jobs");
    ASSERT_BAD("strategy: parameter_server\n" MODEL TAIL
               "train: {epochs: 1, wire_error_feedback: true}\n",
               "train.wire_error_feedback: it is for wire_dtype: bfloat16");
}
END_TEST

#define GLOBAL_DATA(key)                                                                           \
    "loss: mse\ndata: {" key ", train: {format: synthetic, examples: 10, shape: [4], classes: "    \
    "2}}\n"

/* data.global_batch_size, as Keras users size batches: split evenly over the replicas */
START_TEST(global_batch_size_splits_over_the_replicas)
{
    job_t job;
    status_msg_t err = {0};

    parse_ok(MODEL GLOBAL_DATA("global_batch_size: 96"), "job.yaml", &job);
    ck_assert_int_eq(job.data.batch_size, 96); /* one replica until told */
    ck_assert_int_eq(job_set_replicas(&job, 3, &err), STATUS_OK);
    ck_assert_int_eq(job.data.batch_size, 32);
    ck_assert_int_eq(job_set_replicas(&job, 1, &err), STATUS_OK);
    ck_assert_int_eq(job.data.batch_size, 96);
    ck_assert_int_eq(job_set_replicas(&job, 5, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "data.global_batch_size 96 does not split evenly over 5 "
                                   "replicas") != NULL,
                  "%s", err.text);
    job_done(&job);
    parse_ok(MODEL TAIL, "job.yaml", &job); /* batch_size: per replica, whatever the replicas */
    ck_assert_int_eq(job_set_replicas(&job, 3, &err), STATUS_OK);
    ck_assert_int_eq(job.data.batch_size, 8);
    job_done(&job);
    ASSERT_BAD(MODEL GLOBAL_DATA("batch_size: 8, global_batch_size: 16"),
               "data.batch_size (per replica) and data.global_batch_size (split over the "
               "replicas): give one of them");
    ASSERT_BAD(MODEL GLOBAL_DATA("global_batch_size: 0"), "data.global_batch_size must be");
    ASSERT_BAD("strategy: parameter_server\n" MODEL GLOBAL_DATA("global_batch_size: 16"),
               "job.yaml:4: data.global_batch_size: each step of parameter_server training is "
               "one worker's batch");
}
END_TEST

START_TEST(missing_required_keys_are_named)
{
    ASSERT_BAD(MODEL "loss: mse\ndata: {train: {format: synthetic, examples: 1, shape: [4], "
                     "classes: 2}}\n",
               "job.yaml:3: data: missing required key 'batch_size'");
    ASSERT_BAD(TAIL, "missing required key 'model'");
    ASSERT_BAD(MODEL "data: {batch_size: 1}\n", "missing required key 'loss'");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 1}\n", "data: missing required key 'train'");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 1, train: {format: idx, images: a}}\n",
               "data.train: missing required key 'labels'");
    ASSERT_BAD("model: [{dense: {activation: relu}, input_shape: [4]}]\n" TAIL,
               "model[0].dense: missing required key 'units'");
    ASSERT_BAD("model: [{dense: {units: 1}}]\n" TAIL, "model: the model has no input shape");
}
END_TEST

START_TEST(bad_numbers_are_rejected_with_the_value)
{
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: abc, train: {format: synthetic, examples: 1, "
                     "shape: [4], classes: 2}}\n",
               "job.yaml:3: data.batch_size must be a positive integer, got 'abc'");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 64x, train: {}}\n",
               "data.batch_size must be a positive integer, got '64x'");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: \"64\", train: {}}\n",
               "data.batch_size must be a positive integer, got \"64\"");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 6.5, train: {}}\n", "got '6.5'");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 99999999999999999999, train: {}}\n",
               "data.batch_size must be a positive integer");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 4294967296, train: {}}\n",
               "data.batch_size must be a positive integer");
    ASSERT_BAD(MODEL TAIL "optimizer: {sgd: {learning_rate: 1e-3x}}\n",
               "optimizer.sgd.learning_rate must be a number, got '1e-3x'");
    ASSERT_BAD(MODEL TAIL "optimizer: {sgd: {learning_rate: .nan}}\n", "must be a number");
    ASSERT_BAD(MODEL TAIL "evaluate: maybe\n", "evaluate must be true or false, got 'maybe'");
    ASSERT_BAD("model: [{dropout: {rate: 1}, input_shape: [4]}]\n" TAIL,
               "model[0].dropout.rate must be a number from 0 up to (not) 1");
    ASSERT_BAD("model: [{dense: {units: 1}, input_shape: [4, 0]}]\n" TAIL,
               "model[0].input_shape[1] must be a positive integer, got '0'");
    ASSERT_BAD("model: [{dense: {units: 1}, input_shape: [1, 2, 3, 4, 5]}]\n" TAIL,
               "model[0].input_shape must be a list of 1 to 4 positive integers, got a list");
}
END_TEST

START_TEST(optimizer_values_are_validated)
{
    ASSERT_BAD(MODEL TAIL "optimizer: {adam: {beta_1: 1.5}}\n", "job.yaml:4: ", "beta_1");
    ASSERT_BAD(MODEL TAIL "optimizer: {sgd: {learning_rate: {piecewise_constant:\n"
                          "  {boundaries: [10, 20], values: [1, 2]}}}}\n",
               "optimizer.sgd.learning_rate.piecewise_constant.values must be a list with one "
               "more value than boundaries");
    ASSERT_BAD(MODEL TAIL "optimizer: {sgd: {beta_1: 0.9}}\n",
               "optimizer.sgd: unknown key 'beta_1' (allowed: learning_rate");
}
END_TEST

START_TEST(duplicate_keys_are_rejected)
{
    ASSERT_BAD(MODEL "loss: mse\nloss: mse\n",
               "job.yaml:3: duplicate key 'loss' (first given on line 2)");
    ASSERT_BAD("{\"model\": 1, \"model\": 2}", "job.yaml:1: duplicate key 'model'");
}
END_TEST

/* Duplicate keys are found by sorting: a mapping of 200,000 keys (quadratic comparison would
 * take minutes) is read and its repeat named, with the first repeat in the file reported. */
START_TEST(duplicate_keys_in_huge_mappings_are_found_fast)
{
    enum { KEYS = 200000 };
    size_t cap = (size_t)KEYS * 16 + 64, len = 0;
    char *text = malloc(cap);
    job_t job;
    status_msg_t err = {0};

    len += (size_t)snprintf(text + len, cap - len, "{");
    for (int i = 0; i < KEYS; i++)
        len += (size_t)snprintf(text + len, cap - len, "\"k%d\": 1, ", i);
    len += (size_t)snprintf(text + len, cap - len, "\"k77\": 2, \"k5\": 3}");
    ck_assert_int_eq(job_parse(text, len, "job.yaml", &job, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "duplicate key 'k77'") != NULL, "%s", err.text);
    free(text);
}
END_TEST

/* Unnamed layers are named as Keras names them, skipping names the file gives: 1024 of them
 * (the most a model may have) in a 12 KB file are named in one pass per kind (a fresh search per
 * layer took seconds). */
START_TEST(many_unnamed_layers_are_named_as_keras_does)
{
    size_t cap = 1024 * 16 + 256, len = 0;
    char *text = malloc(cap);
    job_t job;
    status_msg_t err = {0};

    len += (size_t)snprintf(text + len, cap - len,
                            TAIL "model:\n  - {flatten: {}, input_shape: [4]}\n"
                                 "  - {flatten: {name: flatten_2}}\n");
    for (int i = 2; i < 1024; i++)
        len += (size_t)snprintf(text + len, cap - len, "  - flatten\n");
    ck_assert_msg(job_parse(text, len, "job.yaml", &job, &err) == STATUS_OK, "%s", err.text);
    ck_assert_int_eq(job.model.n_layers, 1024);
    ck_assert_str_eq(job.model.layers[0].name, "flatten");
    ck_assert_str_eq(job.model.layers[1].name, "flatten_2");
    ck_assert_str_eq(job.model.layers[2].name, "flatten_1");
    ck_assert_str_eq(job.model.layers[3].name, "flatten_3");
    ck_assert_str_eq(job.model.layers[1023].name, "flatten_1023");
    job_done(&job);
    free(text);
}
END_TEST

/* Job text and the files that come with it are held to the job-file limit before any parsing,
 * wherever they arrive (the chief and workers take them from RPCs). */
START_TEST(oversized_jobs_and_files_are_refused_before_parsing)
{
    size_t big = JOB_MAX_FILE_BYTES + 1;
    char *text = malloc(big);
    job_file_t files[JOB_MAX_FILES + 1];
    job_t job;
    status_msg_t err = {0};

    memset(text, '#', big); /* a comment: it would parse */
    ck_assert_int_eq(job_parse(text, big, "job.yaml", &job, &err), STATUS_RESOURCE_EXHAUSTED);
    ck_assert_msg(strstr(err.text, "job.yaml: the job file holds 16777217 bytes") != NULL, "%s",
                  err.text);
    for (size_t i = 0; i <= JOB_MAX_FILES; i++)
        files[i] = (job_file_t){"m.json", "{}", 2};
    ck_assert_int_eq(
        job_parse_with_files("a: 1", 4, "job.yaml", files, JOB_MAX_FILES + 1, &job, &err),
        STATUS_RESOURCE_EXHAUSTED);
    ck_assert_msg(strstr(err.text, "17 files") != NULL, "%s", err.text);
    /* Two files of one path (a fuzzer found the first one leaked): refused. */
    ck_assert_int_eq(job_parse_with_files("a: 1", 4, "job.yaml", files, 2, &job, &err),
                     STATUS_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.text, "supplied twice") != NULL, "%s", err.text);
    files[0] = (job_file_t){"m.json", text, big};
    ck_assert_int_eq(job_parse_with_files("a: 1", 4, "job.yaml", files, 1, &job, &err),
                     STATUS_RESOURCE_EXHAUSTED);
    ck_assert_msg(strstr(err.text, "file 'm.json' holds 16777217 bytes") != NULL, "%s", err.text);
    free(text);
}
END_TEST

/* A Keras model of two outputs (a: 3 classes, read by b: 3 values) in m.json. */
static const char two_outputs_json[] =
    "{\"class_name\": \"Functional\", \"config\": {\"name\": \"f\", \"layers\": ["
    "{\"class_name\": \"InputLayer\", \"config\": {\"batch_input_shape\": [null, 8], \"name\": "
    "\"x\"}, \"name\": \"x\", \"inbound_nodes\": []}, "
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"a\", \"units\": 3}, \"name\": \"a\", "
    "\"inbound_nodes\": [[[\"x\", 0, 0, {}]]]}, "
    "{\"class_name\": \"Dense\", \"config\": {\"name\": \"b\", \"units\": 3}, \"name\": \"b\", "
    "\"inbound_nodes\": [[[\"a\", 0, 0, {}]]]}], "
    "\"input_layers\": [[\"x\", 0, 0]], \"output_layers\": [[\"a\", 0, 0], [\"b\", 0, 0]]}}";

static status_t parse_two_outputs(const char *rest, job_t *job, status_msg_t *err)
{
    char text[1024];
    job_file_t file = {"m.json", two_outputs_json, sizeof(two_outputs_json) - 1};

    snprintf(text, sizeof(text),
             "model: {keras_json: m.json}\n%s"
             "data: {batch_size: 8, train: {format: synthetic, examples: 10, shape: [8], "
             "classes: 3}}\n",
             rest);
    return job_parse_with_files(text, strlen(text), "job.yaml", &file, 1, job, err);
}

/* A model of several outputs: one loss for all of them, a list in the outputs' order, or a
 * mapping by their names; loss_weights likewise; each output's loss is reported ("a_loss");
 * metrics, and losses or weights that do not match the outputs, are refused by name. */
START_TEST(several_outputs_take_a_loss_each)
{
    job_t job;
    status_msg_t err = {0};

    ck_assert_int_eq(parse_two_outputs("loss: mse\n", &job, &err), STATUS_OK);
    ck_assert_int_eq(job.n_outputs, 2);
    ck_assert_int_eq(job.outputs[1].loss, JOB_LOSS_MSE);
    ck_assert_double_eq(job.outputs[1].weight, 1.0);
    ck_assert_int_eq(job.n_metrics, 2);
    ck_assert_str_eq(job.metrics[1].name, "b_loss");
    ck_assert_int_eq(job.metrics[1].kind, JOB_METRIC_OUTPUT_LOSS);
    job_done(&job);
    ck_assert_int_eq(parse_two_outputs("loss: [{categorical_crossentropy: {from_logits: true}}, "
                                       "{huber: {delta: 2}}]\nloss_weights: [0.5, 3]\n",
                                       &job, &err),
                     STATUS_OK);
    ck_assert_int_eq(job.outputs[0].loss, JOB_LOSS_CATEGORICAL_CROSSENTROPY);
    ck_assert(job.outputs[0].from_logits);
    ck_assert_double_eq(job.outputs[1].huber_delta, 2.0);
    ck_assert_double_eq(job.outputs[0].weight, 0.5);
    ck_assert_double_eq(job.outputs[1].weight, 3.0);
    job_done(&job);
    ck_assert_int_eq(parse_two_outputs("loss: {b: mae, a: sparse_categorical_crossentropy}\n"
                                       "loss_weights: {b: 0.25}\n",
                                       &job, &err),
                     STATUS_OK);
    ck_assert_int_eq(job.outputs[0].loss, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY);
    ck_assert_int_eq(job.outputs[1].loss, JOB_LOSS_MAE);
    ck_assert_double_eq(job.outputs[0].weight, 1.0);
    ck_assert_double_eq(job.outputs[1].weight, 0.25);
    job_done(&job);
#define REFUSED(rest, want)                                                                        \
    do {                                                                                           \
        ck_assert_int_eq(parse_two_outputs(rest, &job, &err), STATUS_BAD_CONFIG);                  \
        ck_assert_msg(strstr(err.text, want) != NULL, "want '%s' in: %s", want, err.text);         \
    } while (0)
    REFUSED("loss: [mse]\n", "1 losses for a model of 2 outputs");
    REFUSED("loss: {a: mse}\n", "name each output once");
    REFUSED("loss: [mse, {mae: {reduction: sum}}]\n", "the same reduction");
    REFUSED("loss: mse\nloss_weights: [1]\n", "1 weights for a model of 2 outputs");
    REFUSED("loss: mse\nloss_weights: {c: 1}\n", "no output of that name");
    REFUSED("loss: mse\nloss_weights: [1, -1]\n", "a weight is >= 0");
    REFUSED("loss: mse\nmetrics: [mae]\n", "takes a list of 2 lists of metrics");
    REFUSED("loss: mse\nmetrics: {c: [mae]}\n", "no output named 'c'");
    REFUSED("loss: mse\nmetrics: [auc, mae]\n", "a list of this output's metrics");
    REFUSED("loss: mse\nmetrics: {a: [{mae: {name: m0}}, {mae: {name: m1}}, {mae: {name: m2}}, "
            "{mae: {name: m3}}, {mae: {name: m4}}, {mae: {name: m5}}, {mae: {name: m6}}, {mae: "
            "{name: m7}}, {mae: {name: m8}}, {mae: {name: m9}}, {mae: {name: m10}}, {mae: {name: "
            "m11}}, {mae: {name: m12}}, {mae: {name: m13}}, {mae: {name: m14}}]}\n",
            "at most 16, each output's loss among them");
    REFUSED("loss: mse\nmetrics: {a: [accuracy]}\n", "its loss mean_squared_error has none");
    REFUSED("loss: [sparse_categorical_crossentropy, mse]\n"
            "metrics: {a: [{binary_accuracy: {threshold: 0.3}}]}\n",
            "takes a threshold under binary_crossentropy only");
#undef REFUSED
    /* an output's binary accuracy with a threshold of its own, as Keras's BinaryAccuracy */
    ck_assert_int_eq(parse_two_outputs("loss: [binary_crossentropy, mse]\n"
                                       "metrics: {a: [{binary_accuracy: {threshold: 0.3}}]}\n",
                                       &job, &err),
                     STATUS_OK);
    ck_assert_int_eq(job.metrics[0].kind, JOB_METRIC_OUTPUT_ACCURACY);
    ck_assert_float_eq_tol(job.metrics[0].threshold, 0.3f, 1e-7f);
    job_done(&job);
    /* metrics for each output, named after it as Keras names them */
    ck_assert_int_eq(parse_two_outputs("loss: [sparse_categorical_crossentropy, mse]\n"
                                       "metrics: {b: [mae], a: [accuracy, auc]}\n",
                                       &job, &err),
                     STATUS_OK);
    ck_assert_int_eq(job.n_metrics, 5); /* b_mae, a_accuracy, a_auc and the two losses */
    ck_assert_str_eq(job.metrics[0].name, "b_mean_absolute_error");
    ck_assert_int_eq(job.metrics[0].output, 1);
    ck_assert_str_eq(job.metrics[1].name, "a_accuracy");
    ck_assert_int_eq(job.metrics[1].kind, JOB_METRIC_OUTPUT_ACCURACY);
    ck_assert_int_eq(job.metrics[1].output, 0);
    ck_assert_str_eq(job.metrics[2].name, "a_auc");
    ck_assert(!job.metric_accuracy);
    job_done(&job);
    ck_assert_int_eq(parse_two_outputs("loss: mse\nmetrics: [[], [mse]]\n", &job, &err), STATUS_OK);
    ck_assert_str_eq(job.metrics[0].name, "b_mean_squared_error");
    job_done(&job);
    /* a model of one output has no weights to give */
    const char *one = "model: [{dense: {units: 1}, input_shape: [4]}]\nloss: mse\n"
                      "loss_weights: [2]\ndata: {batch_size: 8, train: {format: synthetic, "
                      "examples: 10, shape: [4], classes: 2}}\n";
    ck_assert_int_eq(job_parse(one, strlen(one), "job.yaml", &job, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "this one has one"), "%s", err.text);
}
END_TEST

/* Values the kernels would turn into infinities in float32 are refused in the job file. */
START_TEST(values_beyond_float32_are_rejected)
{
    ASSERT_BAD(MODEL "loss: mse\noptimizer: {sgd: {learning_rate: 1e39}}\n",
               "optimizer.schedule.lr must be > 0, got 1e+39");
    ASSERT_BAD(MODEL "loss: mse\noptimizer: {adam: {epsilon: 1e-50}}\n", "epsilon 1e-50");
    ASSERT_BAD("model:\n  - {dense: {units: 1, kernel_initializer: {constant: {value: 1e39}}}, "
               "input_shape: [4]}\nloss: mse\n",
               "kernel_initializer: the constant 1e+39 is not a finite float32");
    ASSERT_BAD("model:\n  - {dense: {units: 1, kernel_initializer: {random_normal: {stddev: "
               "1e300}}}, input_shape: [4]}\nloss: mse\n",
               "can draw values beyond float32");
}
END_TEST

START_TEST(layer_structure_mistakes_are_explained)
{
    ASSERT_BAD("model: [{dense: {units: 1}, input_shape: [4]}, {dense: {units: 1}, "
               "input_shape: [1]}]\n" TAIL,
               "model[1]: input_shape belongs on the first layer only");
    ASSERT_BAD("model: {input_shape: [4], layers: [{dense: {units: 1}, input_shape: [4]}]}\n" TAIL,
               "model.layers[0].input_shape: the input shape is given twice");
    ASSERT_BAD("model: [{dense: {units: 1}, conv2d: {filters: 1}, input_shape: [4]}]\n" TAIL,
               "model[0]: one layer per list item, got 'dense' and 'conv2d'");
    ASSERT_BAD("model: [{dense: {units: 1}, input_shape: [4]}, {embedding: {input_dim: 2, "
               "output_dim: 2}}]\n" TAIL,
               "embedding must be the first layer");
    ASSERT_BAD("model: [{dense: {units: 1, name: x}, input_shape: [4]}, {dense: {units: 1, "
               "name: x}}]\n" TAIL,
               "two layers are named 'x'");
    /* A layer's name names its variables ("<layer>/kernel"), on the wire as UTF-8 strings. */
    ASSERT_BAD("model: [{dense: {units: 1, name: a/b}, input_shape: [4]}]\n" TAIL,
               "layer 0: the name 'a/b' may hold only letters, digits");
    ASSERT_BAD("model: [{dense: {units: 1, name: _a}, input_shape: [4]}]\n" TAIL,
               "the name '_a' may hold only");
    ASSERT_BAD("model: [{dense: {units: 1, name: \"d\\xe9\"}, input_shape: [4]}]\n" TAIL,
               "the name 'd\u00e9' may hold only");
    {
        job_t job;
        parse_ok("model: [{dense: {units: 1, name: .d_1-x}, input_shape: [4]}]\n" TAIL, "j.yaml",
                 &job);
        ck_assert_str_eq(job.model.layers[0].name, ".d_1-x");
        job_done(&job);
    }
    ASSERT_BAD("model: []\n" TAIL, "the model has no layers");
    ASSERT_BAD("model: {keras_json: m.json, layers: []}\n" TAIL, "keras_json stands alone");
    ASSERT_BAD("model: [{flatten: {name: f}}, {dense: {units: 1, use_bias: 1}}]\n" TAIL,
               "model[1].dense.use_bias must be true or false, got '1'");
    ASSERT_BAD(MODEL "loss: {mse: {from_logits: true}}\n",
               "loss.mse: unknown key 'from_logits' (allowed: reduction)");
    ASSERT_BAD(MODEL TAIL "evaluate: true\n", "evaluate: true needs a test split in data.test");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 1, train: {format: synthetic, kind: text, "
                     "examples: 1, shape: [4], vocabulary: 9, classes: 2}}\n",
               "classes is for kind classification");
}
END_TEST

/* metrics: Keras's names and options; each one's sums laid out one after another. */
START_TEST(metrics_are_read_with_their_options)
{
    job_t job;

    parse_ok(MODEL TAIL "metrics: [acc, {binary_accuracy: {threshold: 0.7}}, auc, "
                        "{auc: {curve: pr, num_thresholds: 50, summation_method: majoring, "
                        "name: pr_auc}}, {precision: {thresholds: 0.25, class_id: 3}}, recall, "
                        "{sparse_top_k_categorical_accuracy: {k: 3}}, mae, rmse, mse]\n",
             "job.yaml", &job);
    ck_assert(job.metric_accuracy);
    ck_assert_float_eq(job.accuracy_threshold, 0.7f);
    ck_assert_int_eq(job.n_metrics, 8);
    ck_assert_str_eq(job.metrics[0].name, "auc");
    ck_assert_int_eq(job.metrics[0].thresholds, 200);
    ck_assert_int_eq(job.metrics[0].curve, JOB_AUC_ROC);
    ck_assert_int_eq(job.metrics[0].width, 400);
    ck_assert_str_eq(job.metrics[1].name, "pr_auc");
    ck_assert_int_eq(job.metrics[1].curve, JOB_AUC_PR);
    ck_assert_int_eq(job.metrics[1].summation, JOB_AUC_MAJORING);
    ck_assert_int_eq(job.metrics[1].offset, 400);
    ck_assert_int_eq(job.metrics[2].kind, JOB_METRIC_PRECISION);
    ck_assert_float_eq(job.metrics[2].threshold, 0.25f);
    ck_assert_int_eq(job.metrics[2].class_id, 3);
    ck_assert_int_eq(job.metrics[3].class_id, -1);
    ck_assert_float_eq(job.metrics[3].threshold, 0.5f);
    ck_assert_int_eq(job.metrics[4].k, 3);
    ck_assert_str_eq(job.metrics[5].name, "mean_absolute_error");
    ck_assert_str_eq(job.metrics[6].name, "root_mean_squared_error");
    ck_assert_str_eq(job.metrics[7].name, "mean_squared_error");
    ck_assert_uint_eq(job.metric_width, 400 + 100 + 3 + 3 + 2 + 2 + 2 + 2);
    job_done(&job);

    ASSERT_BAD(MODEL TAIL "metrics: [auc, auc]\n", "a second metric named 'auc'",
               "give one a name of its own");
    ASSERT_BAD(MODEL TAIL "metrics: [{auc: {curve: lift}}]\n", "unknown curve 'lift'");
    ASSERT_BAD(MODEL TAIL "metrics: [{auc: {num_thresholds: 1}}]\n", "num_thresholds");
    ASSERT_BAD(MODEL TAIL "metrics: [{auc: {num_thresholds: 20000}}]\n",
               "num_thresholds may be at most 10000");
    /* top_k: alone, any of an example's k highest predictions counts (Keras's threshold -inf) */
    parse_ok(MODEL TAIL "metrics: [{precision: {top_k: 2}}, {recall: {top_k: 1, thresholds: "
                        "0.4}}]\n",
             "j.yaml", &job);
    ck_assert_int_eq(job.metrics[0].top_k, 2);
    ck_assert(isinf(job.metrics[0].threshold) && job.metrics[0].threshold < 0);
    ck_assert_int_eq(job.metrics[1].top_k, 1);
    ck_assert_float_eq_tol(job.metrics[1].threshold, 0.4f, 1e-7f);
    job_done(&job);
    ASSERT_BAD(MODEL TAIL "metrics: [{precision: {top_k: 0}}]\n", "top_k");
    /* multi_label: a curve an output, num_labels of them (the sums' room) */
    parse_ok(MODEL TAIL "metrics: [{auc: {multi_label: true, num_labels: 3, num_thresholds: 7}}]\n",
             "j.yaml", &job);
    ck_assert_int_eq(job.metrics[0].num_labels, 3);
    ck_assert_uint_eq(job.metrics[0].width, 2 * 7 * 3);
    job_done(&job);
    /* without num_labels: the output Dense layer's units */
    parse_ok(MODEL TAIL "metrics: [{auc: {multi_label: true}}]\n", "j.yaml", &job);
    ck_assert_int_eq(job.metrics[0].num_labels, job.model.layers[job.model.n_layers - 1].units);
    job_done(&job);
    /* through the layers that keep the last axis: a Dropout and an Activation after the Dense,
     * a global pooling after a convolution */
    parse_ok("model: [{dense: {units: 3}, input_shape: [4]}, {dropout: {rate: 0.1}}, {activation: "
             "{activation: sigmoid}}]\n" TAIL "metrics: [{auc: {multi_label: true}}]\n",
             "j.yaml", &job);
    ck_assert_int_eq(job.metrics[0].num_labels, 3);
    job_done(&job);
    parse_ok("model: [{conv2d: {filters: 5, kernel_size: 3}, input_shape: [6, 6, 2]}, "
             "global_average_pooling2d]\n" TAIL "metrics: [{auc: {multi_label: true}}]\n",
             "j.yaml", &job);
    ck_assert_int_eq(job.metrics[0].num_labels, 5);
    job_done(&job);
    ASSERT_BAD(
        "model: [{conv2d: {filters: 5, kernel_size: 3}, input_shape: [6, 6, 2]}, flatten]\n" TAIL
        "metrics: [{auc: {multi_label: true}}]\n",
        "multi_label: true needs num_labels");
    ASSERT_BAD(MODEL TAIL "metrics: [{auc: {num_labels: 3}}]\n",
               "num_labels is for auc with multi_label: true");
    ASSERT_BAD(MODEL TAIL "metrics: [{auc: {multi_label: true, num_labels: 100000}}]\n",
               "at most 1048576");
    ASSERT_BAD(MODEL TAIL "metrics: [{auc: {num_thresholds: 10000, name: a}}, {auc: "
                          "{num_thresholds: 10000, multi_label: true, num_labels: 52, name: b}}]\n",
               "more than 1048576 sums in all");
    ASSERT_BAD(MODEL TAIL "metrics: [{recall: {thresholds: 2}}]\n",
               "thresholds must be numbers from 0 to 1, got 2");
    ASSERT_BAD(MODEL TAIL "metrics: [{accuracy: {threshold: 0.3}}]\n", "threshold");
    ASSERT_BAD(MODEL TAIL "metrics: [{sparse_top_k_categorical_accuracy: {k: 0}}]\n", "k");
}
END_TEST

/* A graph in a job file: a layer names what it reads with inputs: beside it (earlier layers by
 * their names, the model's input as `input`); one without reads the layer before it. */
START_TEST(job_file_layers_wire_a_graph_by_name)
{
    job_t job;

    parse_ok("model:\n"
             "  - {dense: {units: 3, name: a}, input_shape: [4]}\n"
             "  - {dense: {units: 3, activation: tanh, name: b}, inputs: input}\n"
             "  - {add: {name: sum}, inputs: [a, b]}\n"
             "  - {relu: {name: act}}\n"
             "  - {concatenate: {}, inputs: [act, a, input]}\n"
             "  - {dense: {units: 1}}\n" TAIL,
             "job.yaml", &job);
    ck_assert(job_model_is_graph(&job.model));
    ck_assert_int_eq(job_layer_input(&job.model, 1, 0), JOB_INPUT_MODEL);
    ck_assert_int_eq(job.model.layers[2].n_inputs, 2);
    ck_assert_int_eq(job_layer_input(&job.model, 2, 1), 1);
    ck_assert_int_eq(job_layer_input(&job.model, 3, 0), 2); /* the layer before it */
    ck_assert_int_eq(job_layer_input(&job.model, 4, 0), 3);
    ck_assert_int_eq(job_layer_input(&job.model, 4, 2), JOB_INPUT_MODEL);
    job_done(&job);
    ASSERT_BAD("model:\n  - {dense: {units: 3, name: a}, input_shape: [4]}\n"
               "  - {dense: {units: 3}, inputs: [c]}\n" TAIL,
               "model[1].inputs", "'c' is no layer before this one", "name:");
    ASSERT_BAD("model:\n  - {dense: {units: 3, name: a}, input_shape: [4]}\n"
               "  - {dense: {units: 3}, inputs: b}\n  - {dense: {units: 1, name: b}}\n" TAIL,
               "'b' is no layer before this one");
    ASSERT_BAD("model:\n  - {dense: {units: 3, name: a}, input_shape: [4]}\n"
               "  - {add: {}}\n  - {dense: {units: 1}}\n" TAIL,
               "merges two or more inputs: name them with inputs:");
    ASSERT_BAD("model:\n  - {dense: {units: 3, name: a}, input_shape: [4]}\n"
               "  - {dense: {units: 3}, input: a}\n" TAIL,
               "unknown key 'input' (did you mean 'inputs'?)");
    ASSERT_BAD("model:\n  - {dense: {units: 3, name: a}, input_shape: [4]}\n"
               "  - {dense: {units: 3}, inputs: [{a: 1}]}\n" TAIL,
               "a layer's name, or input");
    ASSERT_BAD("model:\n  - {dense: {units: 3, name: a}, input_shape: [4]}\n"
               "  - {dense: {units: 3}, inputs: input}\n  - {dense: {units: 1}, inputs: a}\n" TAIL,
               "nothing reads the output of layer 'dense'");
}
END_TEST

/* A job file's graph with Keras's Functional features: named inputs (model.inputs), a shared
 * layer's later calls ({call: NAME}, read as NAME@K), several outputs (model.outputs). */
START_TEST(job_file_graphs_take_inputs_outputs_and_shared_layers)
{
#define SIAMESE                                                                                    \
    "model:\n"                                                                                     \
    "  inputs: {left: [4], right: [4]}\n"                                                          \
    "  layers:\n"                                                                                  \
    "    - {dense: {units: 3, name: enc}, inputs: left}\n"                                         \
    "    - {call: enc, inputs: right}\n"                                                           \
    "    - {subtract: {name: diff}, inputs: [enc, enc@1]}\n"                                       \
    "    - {dense: {units: 2, name: cls}}\n"                                                       \
    "    - {dense: {units: 1, name: reg}, inputs: diff}\n"
#define SIAMESE_DATA                                                                               \
    "data: {batch_size: 8, train: {format: synthetic, examples: 10, shape: [8], classes: 2}}\n"
    job_t job;

    parse_ok(SIAMESE "  outputs: [reg, cls]\nloss: mse\n" SIAMESE_DATA, "job.yaml", &job);
    ck_assert_int_eq(job.model.n_inputs, 2);
    ck_assert_str_eq(job.model.inputs[1].name, "right");
    ck_assert_int_eq(job_layer_input(&job.model, 0, 0), JOB_INPUT_OF(0));
    ck_assert_int_eq(job_layer_input(&job.model, 1, 0), JOB_INPUT_OF(1));
    ck_assert_int_eq(job.model.layers[1].shares, 1);
    ck_assert_int_eq(job.model.layers[1].units, 3);
    ck_assert_str_eq(job.model.layers[1].name, "enc");
    ck_assert_int_eq(job_layer_input(&job.model, 2, 0), 0);
    ck_assert_int_eq(job_layer_input(&job.model, 2, 1), 1);
    ck_assert_int_eq(job.model.n_outputs, 2);
    ck_assert_int_eq(job.model.outputs[0], 4);
    ck_assert_int_eq(job.model.outputs[1], 3);
    ck_assert_str_eq(job.model.output_names[0], "reg");
    job_done(&job);
    /* one output: the last layer */
    parse_ok("model:\n  inputs: {x: [3]}\n  layers:\n    - {dense: {units: 3, name: a}}\n"
             "    - {call: a}\n    - {dense: {units: 1, name: out}}\n  outputs: out\n" TAIL,
             "job.yaml", &job);
    ck_assert_int_eq(job.model.n_outputs, 0);
    ck_assert_int_eq(job.model.layers[1].shares, 1);
    ck_assert_int_eq(job_layer_input(&job.model, 1, 0), 0);
    job_done(&job);
    ASSERT_BAD(SIAMESE "  outputs: [cls]\n" TAIL, "the one output 'cls' is not the last layer");
    ASSERT_BAD(SIAMESE "  outputs: [reg, nope]\n" TAIL, "model.outputs", "'nope' names no layer");
    ASSERT_BAD(SIAMESE "  outputs: [reg, enc@2]\n" TAIL, "'enc@2' names no layer");
    ASSERT_BAD(SIAMESE "  outputs: [reg, reg]\n" TAIL, "one layer, or one name");
    ASSERT_BAD(SIAMESE "  outputs: [reg, cls]\n  input_shape: [4]\n" TAIL,
               "input_shape or inputs, not both");
    ASSERT_BAD("model:\n  inputs: {a: [4]}\n  layers:\n    - {dense: {units: 3, name: a}}\n" TAIL,
               "the input 'a' and a layer have one name");
    ASSERT_BAD("model:\n  inputs: {ids: [5]}\n  layers:\n    - {embedding: {input_dim: 9, "
               "output_dim: 2, input_length: 5}}\n    - flatten\n" TAIL,
               "embedding.input_length beside model.inputs");
    ASSERT_BAD("model:\n  inputs: [4]\n  layers: [{dense: {units: 3}}]\n" TAIL, "model.inputs",
               "a mapping of 1 to 8 inputs");
    ASSERT_BAD("model:\n  inputs: {a: [4]}\n  layers:\n    - {dense: {units: 3}}\n"
               "    - {call: b}\n" TAIL,
               "call: 'b' names no layer before this one");
    ASSERT_BAD("model:\n  inputs: {a: [4]}\n  layers:\n    - {dense: {units: 3, name: b}}\n"
               "    - {call: b, dense: {units: 3}}\n" TAIL,
               "call: NAME takes inputs: beside it, nothing else");
    ASSERT_BAD("model:\n  inputs: {a: [4]}\n  layers:\n    - {dense: {units: 3, name: b}}\n"
               "    - {dense: {units: 3}, inputs: b@x}\n" TAIL,
               "'b@x' is no layer before this one");
#undef SIAMESE
#undef SIAMESE_DATA
}
END_TEST

/* A model of two inputs (a: [4], b: [2, 3]) with a TFRecord source of features `features`. */
static status_t parse_two_inputs(const char *features, job_t *job, status_msg_t *err)
{
    char model[512], text[2048];

    source_path(model, sizeof(model), "tests/fixtures/keras/keras3_two_inputs.json");
    snprintf(text, sizeof(text),
             "model: {keras_json: %s}\nloss: mse\ndata: {batch_size: 8, train: {format: "
             "tfrecord, files: t.tfrecord, features: {%s, label: {float_list: [1]}}}}\n",
             model, features);
    return job_parse(text, strlen(text), "job.yaml", job, err);
}

/* A TFRecord source of several input features: put in the model's order by name. */
START_TEST(tfrecord_features_of_several_inputs_follow_the_models_names)
{
    job_t job;
    status_msg_t err = {0};

    ck_assert_msg(parse_two_inputs("b: {float_list: [2, 3]}, a: {bytes_list: [4]}", &job, &err) ==
                      STATUS_OK,
                  "%s", err.text);
    ck_assert_int_eq(job.data.train.n_inputs, 2);
    ck_assert_str_eq(job.data.train.inputs[0].name, "a");
    ck_assert_int_eq(job.data.train.inputs[0].kind, JOB_FEATURE_BYTES_LIST);
    ck_assert_str_eq(job.data.train.inputs[1].name, "b");
    job_done(&job);
    ck_assert_int_eq(parse_two_inputs("b: {float_list: [6]}, c: {float_list: [4]}", &job, &err),
                     STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "no feature is named 'a', the model's input 0"), "%s", err.text);
    ck_assert_int_eq(parse_two_inputs("a: {float_list: [4]}, b: {float_list: [6]}, c: "
                                      "{float_list: [1]}",
                                      &job, &err),
                     STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "3 input features for a model of 2 inputs"), "%s", err.text);
    ck_assert_int_eq(parse_two_inputs("x: {float_list: [10]}", &job, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "1 input feature for a model of 2 inputs"), "%s", err.text);
    ck_assert_int_eq(parse_two_inputs("a: {float_list: [6]}, b: {float_list: [4]}", &job, &err),
                     STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "feature 'a' holds 6 values, the model's input takes 4"), "%s",
                  err.text);
}
END_TEST

/* The config.json of a .keras archive model.save() wrote (tests/fixtures/keras/), into buf. */
static size_t compiled_fixture(const char *stem, char *buf, size_t cap)
{
    char rel[128], path[512];
    FILE *f;
    size_t n;

    snprintf(rel, sizeof(rel), "tests/fixtures/keras/keras3_compiled_%s.config.json", stem);
    source_path(path, sizeof(path), rel);
    f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s (set TESSERA_SOURCE_DIR)", path);
    n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

/* The job "model: {keras: m.keras}" + rest, with m.keras's config.json sent along (as tessera
 * submit sends it). */
static status_t parse_archive(const char *config, const char *rest, job_t *job, status_msg_t *err)
{
    char text[1024];
    job_file_t file = {.path = "m.keras", .data = config, .len = strlen(config)};

    snprintf(text, sizeof(text), "model: {keras: m.keras}\n%s", rest);
    return job_parse_with_files(text, strlen(text), "job.yaml", &file, 1, job, err);
}

#define ARCHIVE_DATA                                                                               \
    "data: {batch_size: 8, train: {format: synthetic, examples: 10, shape: [8], classes: 4}}\n"

/* model: {keras: PATH}: the model, and the loss, optimizer and metrics model.compile() was
 * given, where the job file gives none; the job trains on from the archive's weights. */
static const char *changed_fixture(const char *stem, const char *from, const char *to);
static void assert_compile_refused(const char *stem, const char *from, const char *to,
                                   const char *expected);

START_TEST(keras_archives_bring_their_compile_config)
{
    static char config[16384];
    job_t job;
    status_msg_t err = {0};

    compiled_fixture("classes", config, sizeof(config));
    ck_assert_msg(parse_archive(config, ARCHIVE_DATA, &job, &err) == STATUS_OK, "%s", err.text);
    ck_assert(job.model.keras_archive);
    ck_assert_uint_eq(job.model.n_layers, 2);
    ck_assert_int_eq(job.loss, JOB_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY);
    ck_assert(job.from_logits);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_ADAM);
    ck_assert(job.optimizer.amsgrad);
    ck_assert_double_eq(job.optimizer.clipnorm, 1.0);
    ck_assert_int_eq(job.optimizer.schedule.kind, LR_EXPONENTIAL_DECAY);
    ck_assert_double_eq(job.optimizer.schedule.initial_lr, 0.01);
    ck_assert_int_eq(job.optimizer.schedule.decay_steps, 100);
    ck_assert(job.metric_accuracy);
    ck_assert_int_eq(job.n_metrics, 1);
    ck_assert_int_eq(job.metrics[0].kind, JOB_METRIC_TOP_K);
    ck_assert_int_eq(job.metrics[0].k, 2);
    ck_assert_str_eq(job.metrics[0].name, "sparse_top_k_categorical_accuracy");
    ck_assert_str_eq(job.init_from, "m.keras");
    job_done(&job);

    /* the job file's sections win; its init_from too */
    ck_assert_msg(
        parse_archive(config,
                      "loss: {sparse_categorical_crossentropy: {from_logits: true}}\n"
                      "optimizer: sgd\nmetrics: [auc]\ninit_from: other.keras\n" ARCHIVE_DATA,
                      &job, &err) == STATUS_OK,
        "%s", err.text);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_SGD);
    ck_assert(!job.metric_accuracy);
    ck_assert_str_eq(job.metrics[0].name, "auc");
    ck_assert_str_eq(job.init_from, "other.keras");
    job_done(&job);

    /* a binary model on logits: Keras's thresholds on logits become probabilities (0 ->
     * sigmoid(0) = 0.5; recall's default 0.5 -> sigmoid(0.5)); gradient accumulation carries
     * over unless the job's train section says otherwise */
    compiled_fixture("binary", config, sizeof(config));
    ck_assert_msg(parse_archive(config, ARCHIVE_DATA, &job, &err) == STATUS_OK, "%s", err.text);
    ck_assert_int_eq(job.loss, JOB_LOSS_BINARY_CROSSENTROPY);
    ck_assert(job.from_logits);
    ck_assert_double_eq_tol(job.label_smoothing, 0.1, 1e-12);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_SGD);
    ck_assert_double_eq(job.optimizer.momentum, 0.9);
    ck_assert_int_eq(job.accumulate_steps, 2);
    ck_assert(job.metric_accuracy);
    ck_assert_float_eq(job.accuracy_threshold, 0.5f);
    ck_assert_int_eq(job.n_metrics, 3);
    ck_assert_int_eq(job.metrics[0].curve, JOB_AUC_PR);
    ck_assert_float_eq(job.metrics[1].threshold, 0.5f);
    ck_assert_str_eq(job.metrics[2].name, "recall");
    ck_assert_float_eq_tol(job.metrics[2].threshold, 0.62245935f, 1e-6f);
    job_done(&job);
    /* top_k without thresholds: any of the k highest counts (Keras's -inf), not sigmoid(0.5);
     * a list of thresholds on the logits is a metric each, at each one's sigmoid */
    ck_assert_msg(parse_archive(changed_fixture("binary", "\"thresholds\": 0.0, \"top_k\": null",
                                                "\"thresholds\": null, \"top_k\": 2"),
                                ARCHIVE_DATA, &job, &err) == STATUS_OK,
                  "%s", err.text);
    ck_assert_int_eq(job.metrics[1].top_k, 2);
    ck_assert(isinf(job.metrics[1].threshold) && job.metrics[1].threshold < 0);
    job_done(&job);
    ck_assert_msg(parse_archive(changed_fixture("binary", "\"thresholds\": 0.0",
                                                "\"thresholds\": [0.2, 0.4]"),
                                ARCHIVE_DATA, &job, &err) == STATUS_OK,
                  "%s", err.text);
    ck_assert_int_eq(job.metrics[1].list_len, 2);
    ck_assert_int_eq(job.metrics[2].list_at, 1);
    ck_assert_float_eq_tol(job.metrics[1].threshold, 1 / (1 + exp(-0.2)), 1e-7);
    ck_assert_float_eq_tol(job.metrics[2].threshold, 1 / (1 + exp(-0.4)), 1e-7);
    job_done(&job);
    ck_assert_msg(parse_archive(config, ARCHIVE_DATA "train: {epochs: 1, accumulate_steps: 1}\n",
                                &job, &err) == STATUS_OK,
                  "%s", err.text);
    ck_assert_int_eq(job.accumulate_steps, 1);
    job_done(&job);
    /* the job's loss is what the archive's metrics are read for: on probabilities, "recall"
     * keeps Keras's 0.5 */
    ck_assert_msg(parse_archive(config, "loss: binary_crossentropy\n" ARCHIVE_DATA, &job, &err) ==
                      STATUS_BAD_CONFIG,
                  "AUC(from_logits) on probabilities was taken");
    ck_assert_msg(strstr(err.text, "from_logits") != NULL, "%s", err.text);
    /* a job that gives its own optimizer does not take the archive's accumulation */
    ck_assert_msg(parse_archive(config, "optimizer: adam\n" ARCHIVE_DATA, &job, &err) == STATUS_OK,
                  "%s", err.text);
    ck_assert_int_eq(job.accumulate_steps, 0);
    job_done(&job);

    /* a regression model: a piecewise schedule, the error metrics */
    compiled_fixture("regression", config, sizeof(config));
    ck_assert_msg(parse_archive(config, ARCHIVE_DATA, &job, &err) == STATUS_OK, "%s", err.text);
    ck_assert_int_eq(job.loss, JOB_LOSS_MSE);
    ck_assert_int_eq(job.optimizer.schedule.kind, LR_PIECEWISE_CONSTANT);
    ck_assert_uint_eq(job.optimizer.schedule.n_boundaries, 2);
    ck_assert_int_eq(job.n_metrics, 2);
    ck_assert_int_eq(job.metrics[0].kind, JOB_METRIC_MAE);
    ck_assert_int_eq(job.metrics[1].kind, JOB_METRIC_RMSE);
    job_done(&job);

    /* an uncompiled model: the job names the loss */
    compiled_fixture("uncompiled", config, sizeof(config));
    ck_assert_int_eq(parse_archive(config, ARCHIVE_DATA, &job, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "loss") != NULL, "%s", err.text);
    ck_assert_msg(parse_archive(config, "loss: mse\n" ARCHIVE_DATA, &job, &err) == STATUS_OK, "%s",
                  err.text);
    ck_assert_int_eq(job.optimizer.kind, OPTIMIZER_RMSPROP); /* compile()'s default */
    job_done(&job);
}
END_TEST

/* A fixture with one piece of text replaced: what another compile() call would have written
 * (a static buffer, until the next call). */
static const char *changed_fixture(const char *stem, const char *from, const char *to)
{
    static char config[16384], changed[16384];
    char *at;

    compiled_fixture(stem, config, sizeof(config));
    at = strstr(config, from);
    ck_assert_msg(at != NULL, "%s is not in the %s fixture", from, stem);
    snprintf(changed, sizeof(changed), "%.*s%s%s", (int)(at - config), config, to,
             at + strlen(from));
    return changed;
}

static void assert_compile_refused(const char *stem, const char *from, const char *to,
                                   const char *expected)
{
    const char *changed = changed_fixture(stem, from, to);
    job_t job;
    status_msg_t err = {0};

    ck_assert_msg(parse_archive(changed, ARCHIVE_DATA, &job, &err) == STATUS_BAD_CONFIG,
                  "not refused: %s -> %s", from, to);
    ck_assert_msg(strstr(err.text, "m.keras") != NULL && strstr(err.text, expected) != NULL,
                  "want '%s' in: %s", expected, err.text);
}

/* Keras's reductions: sum is the batch's sum, mean and the default the mean. */
START_TEST(keras_compile_configs_take_the_loss_reduction)
{
    static const struct {
        const char *to;
        bool sum, unreduced;
    } cases[] = {{"\"reduction\": \"sum\"", true, false},
                 {"\"reduction\": \"mean\"", false, false},
                 {"\"reduction\": \"sum_over_batch_size\"", false, false},
                 {"\"reduction\": null", false, true}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *changed =
            changed_fixture("classes", "\"reduction\": \"sum_over_batch_size\"", cases[i].to);
        job_t job;
        status_msg_t err = {0};
        ck_assert_msg(parse_archive(changed, ARCHIVE_DATA, &job, &err) == STATUS_OK, "%s: %s",
                      cases[i].to, err.text);
        ck_assert_int_eq(job.loss_sum, cases[i].sum);
        ck_assert_int_eq(job.loss_unreduced, cases[i].unreduced);
        job_done(&job);
    }
}
END_TEST

START_TEST(keras_compile_configs_refuse_what_is_not_built)
{
    assert_compile_refused("classes", "\"use_ema\": false", "\"use_ema\": true", "use_ema");
    assert_compile_refused("classes", "\"reduction\": \"sum_over_batch_size\"",
                           "\"reduction\": \"sum_over_everything\"", "sum_over_everything");
    assert_compile_refused("classes", "\"class_name\": \"Adam\"", "\"class_name\": \"Adadelta\"",
                           "optimizer Adadelta is not supported");
    assert_compile_refused("classes", "\"ExponentialDecay\"", "\"CosineDecay\"",
                           "schedule CosineDecay is not supported");
    assert_compile_refused("classes", "\"loss_weights\": null", "\"loss_weights\": [1.0]",
                           "loss_weights");
    assert_compile_refused("classes", "\"amsgrad\": true", "\"amsgrad\": true, \"bogus\": 1",
                           "bogus");
    assert_compile_refused("classes", "\"class_name\": \"SparseCategoricalCrossentropy\"",
                           "\"class_name\": \"CategoricalHinge\"", "loss CategoricalHinge");
    assert_compile_refused("binary", "\"label_weights\": null", "\"label_weights\": [-1]",
                           "label_weights[0] must be a non-negative number");
    assert_compile_refused("binary", "\"label_weights\": null", "\"label_weights\": [0]",
                           "label_weights are all 0");
    {
        /* AUC's label_weights: one an output (checked against the model when it is built) */
        job_t job;
        status_msg_t err = {0};
        const char *changed =
            changed_fixture("binary", "\"label_weights\": null", "\"label_weights\": [2.5]");
        bool found = false;
        ck_assert_msg(parse_archive(changed, ARCHIVE_DATA, &job, &err) == STATUS_OK, "%s",
                      err.text);
        for (int i = 0; i < job.n_metrics; i++)
            if (job.metrics[i].kind == JOB_METRIC_AUC) {
                ck_assert_int_eq(job.metrics[i].n_label_weights, 1);
                ck_assert(job.metrics[i].label_weights[0] == 2.5);
                found = true;
            }
        ck_assert(found);
        job_done(&job);
    }
    assert_compile_refused("classes", "\"k\": 2", "\"k\": 2, \"from_logits\": true", "from_logits");
    assert_compile_refused("classes", "\"compile_config\": {", "\"compile_config\": {\"x\": 1, ",
                           "x is not supported");
    assert_compile_refused("classes", "\"gradient_accumulation_steps\": null",
                           "\"gradient_accumulation_steps\": 2",
                           "schedule with gradient_accumulation_steps");
    assert_compile_refused("binary", "\"gradient_accumulation_steps\": 2",
                           "\"gradient_accumulation_steps\": 2.5", "must be an integer");
    assert_compile_refused("binary", "\"gradient_accumulation_steps\": 2",
                           "\"gradient_accumulation_steps\": \"2\"", "must be an integer");
    assert_compile_refused("binary", "\"momentum\": 0.9", "\"momentum\": 0.9, \"momentum\": 0.1",
                           "momentum twice");
    assert_compile_refused("binary", "\"momentum\": 0.9", "\"momentum\": 1e999",
                           "not a finite number");
    assert_compile_refused("binary", "\"momentum\": 0.9",
                           "\"momentum\": 0.9, \"scale_learning_rate\": true",
                           "scale_learning_rate");
    assert_compile_refused("classes", "\"class_name\": \"SparseTopKCategoricalAccuracy\"",
                           "\"class_name\": \"Accuracy\"", "metric Accuracy");
    assert_compile_refused("classes", "\"metrics\": [\"accuracy\"",
                           "\"metrics\": [\"accuracy\", \"precision\"", "several classes");
}
END_TEST

START_TEST(keras_json_mistakes_name_the_model_file)
{
    char job_path[256], model_path[256];
    job_t job;
    status_msg_t err = {0};

    make_tmp_dir();
    snprintf(job_path, sizeof(job_path), "%s/job.yaml", tmp_dir);
    snprintf(model_path, sizeof(model_path), "%s/models/missing.json", tmp_dir);
    write_file("job.yaml", "model: {keras_json: models/missing.json}\n" TAIL);
    ck_assert_int_eq(job_load_file(job_path, &job, &err), STATUS_NOT_FOUND);
    ck_assert_msg(strstr(err.text, "job.yaml:1: model.keras_json: cannot read") != NULL, "%s",
                  err.text);
    ck_assert_msg(strstr(err.text, model_path) != NULL, "%s", err.text);
    ck_assert_msg(strstr(err.text, "No such file") != NULL, "%s", err.text);
    ck_assert_ptr_null(job.model.layers);

    write_file("models/bad.json", "{\"class_name\": \"Sequential\",\n\"config\": }");
    write_file("job.yaml", "model: {keras_json: models/bad.json}\n" TAIL);
    ck_assert_int_eq(job_load_file(job_path, &job, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "bad.json:2:11: invalid JSON") != NULL, "%s", err.text);
    ck_assert_msg(strstr(err.text, "config") == NULL, "the file's text is shown: %s", err.text);
}
END_TEST

START_TEST(malformed_documents_are_rejected)
{
    ASSERT_BAD("model: [unclosed\nloss: mse\n", "job.yaml:", "invalid YAML");
    ASSERT_BAD("{\"model\": [1,, 2]}", "job.yaml:1: invalid YAML");
    ASSERT_BAD("", "job.yaml: the job file is empty");
    ASSERT_BAD("# only a comment\n", "the job file is empty");
    ASSERT_BAD("- a\n- b\n", "job.yaml:1: a job file is a mapping of keys");
    ASSERT_BAD(MODEL TAIL "---\nname: second\n", "a job file holds one YAML document");
    ASSERT_BAD("base: &b {units: 1}\nmodel: [{dense: *b}]\n", "aliases (*name) are not supported");
    ASSERT_BAD("? [a, b]\n: c\n", "keys must be plain words");
}
END_TEST

START_TEST(missing_job_file_is_named)
{
    job_t job;
    status_msg_t err = {0};

    ck_assert_int_eq(job_load_file("/nonexistent/dir/job.yaml", &job, &err), STATUS_NOT_FOUND);
    ck_assert_str_eq(err.text,
                     "cannot read job file '/nonexistent/dir/job.yaml': No such file or directory");
    ck_assert_ptr_null(job.name);
    job_done(&job); /* an emptied job may be freed again */
}
END_TEST

/* A binary model's job without its metrics. */
#define BINARY_TAIL                                                                                \
    "model:\n  - {dense: {units: 1, activation: sigmoid}, input_shape: [4]}\n"                     \
    "loss: binary_crossentropy\n" DATA_ONLY

typedef struct metric_case {
    const char *metric, *error;
} metric_case_t;

/* Each `metrics: [METRIC]` of the binary model is refused, its message holding ERROR. */
static void assert_metrics_refused(const metric_case_t *bad, size_t n)
{
    char text[512];
    status_msg_t err;
    job_t job;

    for (size_t i = 0; i < n; i++) {
        snprintf(text, sizeof(text), "metrics: [%s]\n%s", bad[i].metric, BINARY_TAIL);
        ck_assert_int_eq(job_parse(text, strlen(text), "j.yaml", &job, &err), STATUS_BAD_CONFIG);
        ck_assert_msg(strstr(err.text, bad[i].error) != NULL, "%s: %s", bad[i].metric, err.text);
    }
}

/* AUC's thresholds as a list (Keras's AUC(thresholds=[...])): numbers from 0 to 1, sorted as
 * Keras sorts them, num_thresholds their count + 2 */
START_TEST(auc_threshold_lists_are_checked_and_sorted)
{
    const char *rest = BINARY_TAIL;
    static const metric_case_t bad[] = {
        {"{auc: {thresholds: [0.5, 1.5]}}", "thresholds[1] must be a number from 0 to 1"},
        {"{auc: {thresholds: []}}", "a list of 1 to 9998 numbers"},
        {"{auc: {thresholds: 0.5}}", "a list of 1 to 9998 numbers"},
        {"{auc: {num_thresholds: 5, thresholds: [0.5]}}", "num_thresholds 5 beside 1 thresholds"},
    };
    char text[512];
    status_msg_t err;
    job_t job;

    snprintf(text, sizeof(text), "metrics: [{auc: {thresholds: [0.9, 0.1, 0.5]}}]\n%s", rest);
    ck_assert_msg(job_parse(text, strlen(text), "j.yaml", &job, &err) == STATUS_OK, "%s", err.text);
    ck_assert_int_eq(job.metrics[0].thresholds, 5);
    ck_assert(job.metrics[0].threshold_list[0] == 0.1f &&
              job.metrics[0].threshold_list[1] == 0.5f && job.metrics[0].threshold_list[2] == 0.9f);
    job_done(&job);
    assert_metrics_refused(bad, sizeof(bad) / sizeof(bad[0]));
}
END_TEST

/* Precision and recall at several thresholds (Keras's Precision(thresholds=[...]), one metric of
 * a vector): a metric each, "NAME_T", in the list's order, their sums one after the other; a
 * list of one is a metric of one value, as Keras's is. */
START_TEST(precision_and_recall_threshold_lists_are_a_metric_each)
{
    const char *rest = BINARY_TAIL;
    static const metric_case_t bad[] = {
        {"{precision: {thresholds: []}}", "a list of 1 to 16 of them"},
        {"{recall: {thresholds: [0.5, 1.5]}}", "numbers from 0 to 1, got 1.5"},
        {"{recall: {thresholds: [0.5, 0.5]}}", "a second metric named 'recall_0.5'"},
        {"{recall: {thresholds: [0.5, x]}}", "thresholds[1]"},
        /* Keras's names: a list is one metric, "precision", beside the other precision */
        {"{precision: {thresholds: [0.3, 0.7]}}, precision", "two metrics named 'precision'"},
        {"{precision: {thresholds: [0.3, 0.7]}}, {precision: {thresholds: [0.5, 0.9]}}",
         "two metrics named 'precision' in Keras"},
        {"auc, mae, mse, rmse, {auc: {name: b}}, {precision: {thresholds: [0.1, 0.2, 0.3, 0.4, "
         "0.5, 0.6, "
         "0.7, 0.8, 0.9, 0.95, 0.99, 0.999]}}",
         "its 12 thresholds are a metric each, and a job keeps at most 16"},
    };
    char text[512];
    status_msg_t err;
    job_t job;

    snprintf(text, sizeof(text),
             "metrics: [auc, {precision: {thresholds: [0.7, 0.25], name: p}}, {recall: "
             "{thresholds: [0.4]}}]\n%s",
             rest);
    ck_assert_msg(job_parse(text, strlen(text), "j.yaml", &job, &err) == STATUS_OK, "%s", err.text);
    ck_assert_int_eq(job.n_metrics, 4);
    ck_assert_str_eq(job.metrics[1].name, "p_0.7");
    ck_assert_str_eq(job.metrics[2].name, "p_0.25");
    ck_assert_str_eq(job.metrics[3].name, "recall");
    for (int k = 1; k <= 2; k++) {
        ck_assert_int_eq(job.metrics[k].kind, JOB_METRIC_PRECISION);
        ck_assert_str_eq(job.metrics[k].list_name, "p");
        ck_assert_int_eq(job.metrics[k].list_at, k - 1);
        ck_assert_int_eq(job.metrics[k].list_len, 2);
        ck_assert_uint_eq(job.metrics[k].offset,
                          job.metrics[k - 1].offset + job.metrics[k - 1].width);
    }
    ck_assert_float_eq(job.metrics[1].threshold, 0.7f);
    ck_assert_float_eq(job.metrics[2].threshold, 0.25f);
    ck_assert_float_eq(job.metrics[3].threshold, 0.4f);
    ck_assert_int_eq(job.metrics[3].list_len, 0);
    job_done(&job);
    /* a name a float32: as short as reads back, as long as tells two apart */
    snprintf(text, sizeof(text),
             "metrics: [{recall: {thresholds: [0.1234561, 0.1234564, 0.3], name: r}}]\n%s", rest);
    ck_assert_msg(job_parse(text, strlen(text), "j.yaml", &job, &err) == STATUS_OK, "%s", err.text);
    ck_assert_str_eq(job.metrics[0].name, "r_0.1234561");
    ck_assert_str_eq(job.metrics[1].name, "r_0.1234564");
    ck_assert_str_eq(job.metrics[2].name, "r_0.3");
    job_done(&job);
    assert_metrics_refused(bad, sizeof(bad) / sizeof(bad[0]));
}
END_TEST

/* device: cpu, cuda or cuda:N and nothing else; a GPU only for one replica a process */
START_TEST(devices_are_cpu_cuda_or_cuda_n)
{
    static const char *const good[] = {"cpu", "cuda", "cuda:0", "cuda:63"};
    static const int ordinal[] = {-1, -1, 0, 63};
    static const char *const bad[] = {"gpu",     "CUDA",    "cuda:",   "cuda:64",
                                      "cuda:-1", "cuda: 1", "cuda:1x", "cuda:99999999999999999999",
                                      ""};
    const char *model = "model:\n  - {dense: {units: 2}, input_shape: [4]}\nloss: mse\n" DATA_ONLY;
    char text[512], name[16];
    job_device_t d;
    status_msg_t err;
    job_t job;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ck_assert_int_eq(job_device_parse(good[i], &d, &err), STATUS_OK);
        ck_assert(d.cuda == (i > 0));
        ck_assert_int_eq(d.ordinal, ordinal[i]);
        ck_assert_str_eq(job_device_str(&d, name, sizeof(name)), good[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(job_device_parse(bad[i], &d, &err), STATUS_BAD_CONFIG);
        ck_assert_msg(strstr(err.text, "expected cpu, cuda or cuda:N") != NULL, "%s", err.text);
        ck_assert(!d.cuda);
    }
    snprintf(text, sizeof(text), "strategy: parameter_server\ndevice: cuda:2\n%s", model);
    ck_assert_int_eq(job_parse(text, strlen(text), "j.yaml", &job, &err), STATUS_OK);
    ck_assert(job.device.cuda && job.device.ordinal == 2);
    job_done(&job);
    snprintf(text, sizeof(text), "%s", model); /* default: cpu */
    ck_assert_int_eq(job_parse(text, strlen(text), "j.yaml", &job, &err), STATUS_OK);
    ck_assert(!job.device.cuda);
    job_done(&job);
    snprintf(text, sizeof(text), "device: tpu\n%s", model);
    ck_assert_int_eq(job_parse(text, strlen(text), "j.yaml", &job, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "j.yaml:1") != NULL && strstr(err.text, "'tpu'") != NULL, "%s",
                  err.text);
    snprintf(text, sizeof(text), "device: cuda\nstrategy: multi_worker_mirrored\n%s", model);
    ck_assert_int_eq(job_parse(text, strlen(text), "j.yaml", &job, &err), STATUS_BAD_CONFIG);
    ck_assert_msg(strstr(err.text, "device: cuda under strategy multi_worker_mirrored is not "
                                   "built yet") != NULL,
                  "%s", err.text);
}
END_TEST

static void remove_tmp_dir(void)
{
    static const char *const files[] = {"job.yaml", "models/cnn.json", "models/bad.json"};
    char path[256];

    if (tmp_dir[0] == '\0')
        return;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", tmp_dir, files[i]);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/models", tmp_dir);
    rmdir(path);
    rmdir(tmp_dir);
    tmp_dir[0] = '\0';
}

static Suite *job_suite(void)
{
    Suite *s = suite_create("job");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 10);
    tcase_add_checked_fixture(tc, NULL, remove_tmp_dir);
    tcase_add_test(tc, mlp_example_is_the_keras_tutorial_model);
    tcase_add_test(tc, cnn_example_is_two_conv_blocks_and_a_dense_head);
    tcase_add_test(tc, resnet_example_is_a_functional_graph_beside_it);
    tcase_add_test(tc, tfrecord_example_is_the_mlp_on_tfrecord_shards);
    tcase_add_test(tc, text_example_trains_an_embedding_on_synthetic_text);
    tcase_add_test(tc, every_key_of_a_job_is_read);
    tcase_add_test(tc, json_job_reads_like_yaml);
    tcase_add_test(tc, minimal_job_takes_keras_defaults);
    tcase_add_test(tc, model_may_be_a_mapping_with_layers_and_input_shape);
    tcase_add_test(tc, embedding_input_length_gives_the_input_shape);
    tcase_add_test(tc, learning_rate_schedules_are_read);
    tcase_add_test(tc, partitioners_take_tensorflow_defaults);
    tcase_add_test(tc, keras_json_is_read_relative_to_the_job_file);
    tcase_add_test(tc, misspelt_key_names_file_line_path_and_suggestion);
    tcase_add_test(tc, unknown_names_are_listed_with_the_known_ones);
    tcase_add_test(tc, newer_optimizers_weight_decay_and_clipping_are_read);
    tcase_add_test(tc, train_takes_epochs_or_steps_not_both);
    tcase_add_test(tc, global_batch_size_splits_over_the_replicas);
    tcase_add_test(tc, missing_required_keys_are_named);
    tcase_add_test(tc, bad_numbers_are_rejected_with_the_value);
    tcase_add_test(tc, optimizer_values_are_validated);
    tcase_add_test(tc, duplicate_keys_are_rejected);
    tcase_add_test(tc, duplicate_keys_in_huge_mappings_are_found_fast);
    tcase_add_test(tc, many_unnamed_layers_are_named_as_keras_does);
    tcase_add_test(tc, oversized_jobs_and_files_are_refused_before_parsing);
    tcase_add_test(tc, several_outputs_take_a_loss_each);
    tcase_add_test(tc, values_beyond_float32_are_rejected);
    tcase_add_test(tc, layer_structure_mistakes_are_explained);
    tcase_add_test(tc, metrics_are_read_with_their_options);
    tcase_add_test(tc, job_file_layers_wire_a_graph_by_name);
    tcase_add_test(tc, job_file_graphs_take_inputs_outputs_and_shared_layers);
    tcase_add_test(tc, tfrecord_features_of_several_inputs_follow_the_models_names);
    tcase_add_test(tc, keras_archives_bring_their_compile_config);
    tcase_add_test(tc, keras_compile_configs_refuse_what_is_not_built);
    tcase_add_test(tc, keras_compile_configs_take_the_loss_reduction);
    tcase_add_test(tc, keras_json_mistakes_name_the_model_file);
    tcase_add_test(tc, malformed_documents_are_rejected);
    tcase_add_test(tc, missing_job_file_is_named);
    tcase_add_test(tc, devices_are_cpu_cuda_or_cuda_n);
    tcase_add_test(tc, auc_threshold_lists_are_checked_and_sorted);
    tcase_add_test(tc, precision_and_recall_threshold_lists_are_a_metric_each);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(job_suite(), CK_FORK);
}
