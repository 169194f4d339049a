/* Unit tests for the job file's sections about files users keep and bring: checkpoint and
 * resume, init_from, tensorboard, and the tfrecord, npy and npz data sources. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "job/job.h"
#include "job_check.h"

/* checkpoint: {dir, every_steps, every_seconds, keep}, and resume: true, which needs a dir. */
START_TEST(checkpoint_section_and_resume)
{
    job_t job, again;

    parse_ok(MODEL TAIL "checkpoint: {dir: ckpt, every_steps: 500, every_seconds: 60, keep: 2}\n"
                        "resume: true\n",
             "/jobs/job.yaml", &job);
    ck_assert_str_eq(job.checkpoint_dir, "/jobs/ckpt");
    ck_assert_int_eq(job.checkpoint_every_steps, 500);
    ck_assert_int_eq(job.checkpoint_every_seconds, 60);
    ck_assert_int_eq(job.checkpoint_keep, 2);
    ck_assert(job.resume);
    ck_assert_ptr_null(job.init_from);
    parse_ok(MODEL TAIL "checkpoint: {dir: ckpt}\ninit_from: m.keras\n", "/jobs/job.yaml", &again);
    ck_assert_str_eq(again.init_from, "/jobs/m.keras");
    ck_assert_int_eq(again.checkpoint_every_steps, 0);
    ck_assert_int_eq(again.checkpoint_keep, 3);
    ck_assert(!again.resume);
    ck_assert_uint_ne(job.source_hash, again.source_hash);
    job_done(&job);
    job_done(&again);
    ASSERT_BAD(MODEL TAIL "checkpoint: {dir: ckpt, every: 5}\n", "every");
    ASSERT_BAD(MODEL TAIL "checkpoint: {dir: ckpt, keep: 0}\n", "keep");
    ASSERT_BAD(MODEL TAIL "resume: true\n", "resume: true needs checkpoint.dir");
}
END_TEST

/* format: tfrecord: files (a path, a glob or a list), the label and one input feature. */
START_TEST(tfrecord_source_maps_features)
{
    job_t job;

    parse_ok(MODEL "loss: mse\ndata:\n  batch_size: 8\n  train:\n    format: tfrecord\n"
                   "    files: [a/*.tfrecord.gz, /abs/b.tfrecord]\n"
                   "    features: {img: {bytes_list: [2, 2]}, y: {int64_list: [1]}}\n"
                   "    label: y\n"
                   "  test: {format: tfrecord, files: t.tfrecord, features: {x: {float_list: [4]}, "
                   "label: {float_list: [1]}}}\n",
             "/jobs/job.yaml", &job);
    ck_assert_int_eq(job.data.train.format, JOB_DATA_TFRECORD);
    ck_assert_uint_eq(job.data.train.n_files, 2);
    ck_assert_str_eq(job.data.train.files[0], "/jobs/a/*.tfrecord.gz");
    ck_assert_str_eq(job.data.train.files[1], "/abs/b.tfrecord");
    ck_assert_str_eq(job.data.train.inputs[0].name, "img");
    ck_assert_int_eq(job.data.train.inputs[0].kind, JOB_FEATURE_BYTES_LIST);
    ck_assert_int_eq(job.data.train.inputs[0].rank, 2);
    ck_assert_str_eq(job.data.train.label[0].name, "y");
    ck_assert_int_eq(job.data.train.label[0].kind, JOB_FEATURE_INT64_LIST);
    ck_assert_uint_eq(job.data.test.n_files, 1);
    ck_assert_str_eq(job.data.test.files[0], "/jobs/t.tfrecord");
    ck_assert_str_eq(job.data.test.inputs[0].name, "x");
    ck_assert_int_eq(job.data.test.inputs[0].kind, JOB_FEATURE_FLOAT_LIST);
    job_done(&job);
#define TF(rest) MODEL "loss: mse\ndata: {batch_size: 8, train: {format: tfrecord, " rest "}}\n"
    ASSERT_BAD(TF("features: {x: {float_list: [4]}, label: {int64_list: [1]}}"), "files");
    ASSERT_BAD(TF("files: [], features: {x: {float_list: [4]}, label: {int64_list: [1]}}"),
               "files");
    ASSERT_BAD(TF("files: a, features: {x: {float_list: [4]}}"), "must map the label",
               "label: NAME");
    ASSERT_BAD(TF("files: a, features: {x: {float_list: [4]}, y: {int64_list: [1]}}"),
               "the label 'label'");
    ASSERT_BAD(TF("files: a, features: {x: {floats: [4]}, label: {int64_list: [1]}}"), "floats");
    ASSERT_BAD(TF("files: a, features: {x: {float_list: [4]}, label: {bytes_list: [1]}}"),
               "a label is numbers");
    ASSERT_BAD(TF("files: a, features: {x: {float_list: [4]}, label: {float_list: [4096, 4097]}}"),
               "at most 16777216 values");
    parse_ok(TF("files: a, features: {x: {float_list: [4]}, label: {float_list: [2, 3]}}"),
             "/jobs/job.yaml", &job); /* six values an example: the loss checks the model's */
    ck_assert_int_eq(job.data.train.label[0].rank, 2);
    ck_assert_int_eq(job.data.train.label[0].shape[1], 3);
    job_done(&job);
    ASSERT_BAD(TF("files: a, features: {x: {float_list: [4]}, label: {int64_list: [1]}}, "
                  "images: b"),
               "images");
    /* a model of several outputs: one label feature an output, in the model's order, whatever
     * the order of the features */
    parse_ok(TF("files: a, label: [box, cls], features: {cls: {int64_list: [1]}, x: {float_list: "
                "[4]}, box: {float_list: [2]}}"),
             "/jobs/job.yaml", &job);
    ck_assert_int_eq(job.data.train.n_label, 2);
    ck_assert_int_eq(job.data.train.n_inputs, 1);
    ck_assert_str_eq(job.data.train.label[0].name, "box");
    ck_assert_int_eq(job.data.train.label[0].shape[0], 2);
    ck_assert_str_eq(job.data.train.label[1].name, "cls");
    ck_assert_int_eq(job.data.train.label[1].kind, JOB_FEATURE_INT64_LIST);
    job_done(&job);
    ASSERT_BAD(TF("files: a, label: [box, cls], features: {x: {float_list: [4]}, box: "
                  "{float_list: [2]}}"),
               "must map the labels 'box', ...");
    ASSERT_BAD(TF("files: a, label: [box, box], features: {x: {float_list: [4]}, box: "
                  "{float_list: [2]}}"),
               "names 'box' twice");
    ASSERT_BAD(TF("files: a, label: [], features: {x: {float_list: [4]}, box: {float_list: [2]}}"),
               "a name or a list of them");
    ASSERT_BAD(TF("files: a, label: [a, b], features: {x: {float_list: [4]}, a: {float_list: "
                  "[4096, 4096]}, b: {float_list: [4096, 4096]}}"),
               "at most 16777216 values in all");
#undef TF
    parse_ok(MODEL "loss: mse\ndata:\n  batch_size: 8\n  train: {format: npy, x: x.npy, y: y.npy}\n"
                   "  test: {format: npz, file: /d/fm.npz, x: x_test, y: y_test}\n",
             "/jobs/job.yaml", &job);
    ck_assert_int_eq(job.data.train.format, JOB_DATA_NPY);
    ck_assert_uint_eq(job.data.train.n_x, 1);
    ck_assert_str_eq(job.data.train.x[0], "/jobs/x.npy");
    ck_assert_uint_eq(job.data.train.n_y, 1);
    ck_assert_str_eq(job.data.train.y[0], "/jobs/y.npy");
    ck_assert_int_eq(job.data.test.format, JOB_DATA_NPZ);
    ck_assert_str_eq(job.data.test.archive, "/d/fm.npz");
    ck_assert_str_eq(job.data.test.x[0], "x_test");
    job_done(&job);
    /* a model of several inputs: one array each, in the model's order */
    parse_ok(MODEL
             "loss: mse\ndata:\n  batch_size: 8\n  train: {format: npy, x: [a.npy, /d/b.npy], "
             "y: y.npy}\n  test: {format: npz, file: t.npz, x: [image, meta], y: y}\n",
             "/jobs/job.yaml", &job);
    ck_assert_uint_eq(job.data.train.n_x, 2);
    ck_assert_str_eq(job.data.train.x[0], "/jobs/a.npy");
    ck_assert_str_eq(job.data.train.x[1], "/d/b.npy");
    ck_assert_uint_eq(job.data.test.n_x, 2);
    ck_assert_str_eq(job.data.test.x[1], "meta");
    job_done(&job);
    ASSERT_BAD(MODEL
               "loss: mse\ndata: {batch_size: 8, train: {format: npz, file: f, x: [], y: b}}\n",
               "a list of them");
    ASSERT_BAD(MODEL
               "loss: mse\ndata: {batch_size: 8, train: {format: npy, x: [a, {b: c}], y: y}}\n",
               "a .npy path or a list of them");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 8, train: {format: npz, x: a, y: b}}\n",
               "file");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 8, train: {format: npy, x: a}}\n", "'y'");
    parse_ok(MODEL "loss: mse\ndata: {batch_size: 8, train: {format: csv, files: [a.csv, "
                   "'b-*.csv'], label: y, delimiter: ';'}}\n",
             "/jobs/job.yaml", &job);
    ck_assert_int_eq(job.data.train.format, JOB_DATA_CSV);
    ck_assert_uint_eq(job.data.train.n_files, 2);
    ck_assert_str_eq(job.data.train.files[1], "/jobs/b-*.csv");
    ck_assert_str_eq(job.data.train.label[0].name, "y");
    ck_assert_int_eq(job.data.train.delimiter, ';');
    job_done(&job);
    /* one label column an output of a model of several */
    parse_ok(MODEL "loss: mse\ndata: {batch_size: 8, train: {format: csv, files: a.csv, label: "
                   "[y, z]}}\n",
             "/jobs/job.yaml", &job);
    ck_assert_int_eq(job.data.train.n_label, 2);
    ck_assert_str_eq(job.data.train.label[1].name, "z");
    job_done(&job);
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 8, train: {format: csv, files: a.csv}}\n",
               "'label'");
    ASSERT_BAD(MODEL "loss: mse\ndata: {batch_size: 8, train: {format: csv, files: a.csv, "
                     "label: y, delimiter: '::'}}\n",
               "one character");
}
END_TEST

/* tensorboard: as Keras's callback takes it: update_freq epoch, batch or a step count. */
START_TEST(tensorboard_section_reads_keras_options)
{
    job_t job;

    parse_ok(MODEL TAIL "tensorboard: {logdir: tb}\n", "/jobs/job.yaml", &job);
    ck_assert_str_eq(job.tensorboard_logdir, "/jobs/tb");
    ck_assert_int_eq(job.tensorboard_update_freq, 0);
    ck_assert_int_eq(job.tensorboard_histogram_freq, 0);
    job_done(&job);
    parse_ok(MODEL TAIL "tensorboard: {logdir: /tb, update_freq: batch, histogram_freq: 2}\n",
             "/jobs/job.yaml", &job);
    ck_assert_int_eq(job.tensorboard_update_freq, 1);
    ck_assert_int_eq(job.tensorboard_histogram_freq, 2);
    job_done(&job);
    parse_ok(MODEL TAIL "tensorboard: {logdir: /tb, update_freq: 100}\n", "/jobs/job.yaml", &job);
    ck_assert_int_eq(job.tensorboard_update_freq, 100);
    job_done(&job);
    ASSERT_BAD(MODEL TAIL "tensorboard: {}\n", "logdir");
    ASSERT_BAD(
        MODEL TAIL "tensorboard: {logdir: /tb, update_freq: 0}\n",
        "tensorboard.update_freq must be epoch, batch or a positive number of steps, got '0'");
    ASSERT_BAD(MODEL TAIL "tensorboard: {logdir: /tb, update_freq: weekly}\n", "weekly");
    ASSERT_BAD(MODEL TAIL "tensorboard: {logdir: /tb, histogram_freq: -1}\n", "histogram_freq");
    ASSERT_BAD(MODEL TAIL "tensorboard: {logdir: /tb, profile_batch: 2}\n", "profile_batch");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("job_files");
    TCase *tc = tcase_create("job_files");

    tcase_add_test(tc, checkpoint_section_and_resume);
    tcase_add_test(tc, tfrecord_source_maps_features);
    tcase_add_test(tc, tensorboard_section_reads_keras_options);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK);
}
