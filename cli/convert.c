/* tessera convert: writes TFRecord files of tf.train.Example from IDX files, which TensorFlow's
 * tf.data.TFRecordDataset and Tessera's tfrecord data source read. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "cli.h"
#include "daemon/config.h"
#include "data.h"
#include "files/atomic.h"
#include "files/example.h"
#include "job/job.h"
#include "files/tfrecord.h"

typedef struct convert_opts {
    char *images, *labels, *out, *job, *split;
    char *image_feature, *label_feature;
    int64_t shards;
    bool floats; /* float_list instead of raw uint8 bytes */
} convert_opts_t;

static const config_option_t convert_options[] = {
    {"images", CONFIG_STRING, offsetof(convert_opts_t, images), NULL, 0, 0,
     "IDX file of the inputs (uint8, gzipped or not), e.g. train-images-idx3-ubyte.gz."},
    {"labels", CONFIG_STRING, offsetof(convert_opts_t, labels), NULL, 0, 0,
     "IDX file of the labels (uint8, one per input)."},
    {"out", CONFIG_STRING, offsetof(convert_opts_t, out), NULL, 0, 0,
     "The TFRecord file to write; a name ending in .gz is GZIP-compressed (TFRecordDataset's "
     "compression_type=\"GZIP\"). With --shards N: NAME-00000-of-0000N.tfrecord[.gz]."},
    {"job", CONFIG_STRING, offsetof(convert_opts_t, job), NULL, 0, 0,
     "Instead of --images and --labels: the data a job file's data section names (any format, "
     "synthetic included), the split --split says; inputs as float_list (int64_list for "
     "integer ids), labels as int64_list (float_list for regression)."},
    {"split", CONFIG_STRING, offsetof(convert_opts_t, split), "train", 0, 0,
     "With --job: train or test."},
    {"shards", CONFIG_INT, offsetof(convert_opts_t, shards), "1", 1, 10000,
     "Split the examples over this many files, round robin (for sharding by file)."},
    {"image-feature", CONFIG_STRING, offsetof(convert_opts_t, image_feature), "image", 0, 0,
     "The input's feature name."},
    {"label-feature", CONFIG_STRING, offsetof(convert_opts_t, label_feature), "label", 0, 0,
     "The label's feature name (an int64_list of one value)."},
    {"floats", CONFIG_BOOL, offsetof(convert_opts_t, floats), "false", 0, 0,
     "Store inputs as a float_list of their values instead of a bytes_list of raw uint8 bytes."},
};

static const config_table_t convert_table = {
    .program = "tessera convert --images IDX --labels IDX | --job JOB.yaml [--split test] "
               "--out FILE.tfrecord[.gz]",
    .summary = "Writes TFRecord files of tf.train.Example {image, label} from IDX files: the "
               "input as raw uint8 bytes (bytes_list, or float_list with --floats), the label "
               "as int64_list. NumPy and CSV inputs are not supported yet.",
    .options = convert_options,
    .n_options = sizeof(convert_options) / sizeof(convert_options[0]),
};

/* One output file, plain or gzip, written under a temporary name and renamed when complete. */
typedef struct out_file {
    char path[4096], tmp[4200];
    FILE *f;
    gzFile gz;
} out_file_t;

static int out_open(out_file_t *o, const char *base, int64_t shard, int64_t shards)
{
    size_t len = strlen(base);
    bool gz = len > 3 && strcmp(base + len - 3, ".gz") == 0;

    if (shards > 1) {
        /* NAME-00000-of-00004.tfrecord.gz: the shard before the extensions */
        const char *slash = strrchr(base, '/'), *dot = strchr(slash ? slash + 1 : base, '.');
        int stem = dot ? (int)(dot - base) : (int)len;
        snprintf(o->path, sizeof(o->path), "%.*s-%05lld-of-%05lld%s", stem, base, (long long)shard,
                 (long long)shards, dot ? dot : "");
    } else
        snprintf(o->path, sizeof(o->path), "%s", base);
    snprintf(o->tmp, sizeof(o->tmp), "%s.tmp-%ld", o->path, (long)getpid());
    if (gz)
        o->gz = gzopen(o->tmp, "wb6");
    else
        o->f = fopen(o->tmp, "wb");
    if (o->gz == NULL && o->f == NULL) {
        fprintf(stderr, "tessera convert: cannot create %s: %s\n", o->tmp, strerror(errno));
        return -1;
    }
    return 0;
}

static int out_write(out_file_t *o, const void *data, size_t len)
{
    uint8_t head[12], foot[4];

    tfrecord_header(head, len);
    tfrecord_footer(foot, data, len);
    if (o->gz != NULL)
        return gzwrite(o->gz, head, 12) == 12 &&
                       (len == 0 || gzwrite(o->gz, data, (unsigned)len) == (int)len) &&
                       gzwrite(o->gz, foot, 4) == 4
                   ? 0
                   : -1;
    return fwrite(head, 1, 12, o->f) == 12 && fwrite(data, 1, len, o->f) == len &&
                   fwrite(foot, 1, 4, o->f) == 4
               ? 0
               : -1;
}

/* Closes; renames over the final name when ok, else removes the temporary. */
static int out_close(out_file_t *o, bool ok)
{
    int rc = o->gz != NULL ? (gzclose(o->gz) == Z_OK ? 0 : -1) : (fclose(o->f) == 0 ? 0 : -1);

    if (ok && rc == 0 && rename(o->tmp, o->path) == 0)
        return 0;
    if (ok)
        fprintf(stderr, "tessera convert: cannot write %s: %s\n", o->path, strerror(errno));
    unlink(o->tmp);
    return -1;
}

/* How the examples are written: from IDX files, raw bytes or floats; from a job, as the job's
 * data holds them. */
typedef struct convert_form {
    bool bytes;      /* input as one string of uint8 values */
    bool int_input;  /* input as int64_list */
    bool int_labels; /* labels as int64_list (class indices: one a label) */
} convert_form_t;

static void add_example(const convert_opts_t *o, const convert_form_t *form, example_writer_t *w,
                        const float *x, size_t len, const float *y, size_t label_len, uint8_t *raw,
                        int64_t *ids)
{
    if (form->bytes) {
        for (size_t k = 0; k < len; k++)
            raw[k] = (uint8_t)x[k];
        example_add_bytes(w, o->image_feature, raw, len);
    } else if (form->int_input) {
        for (size_t k = 0; k < len; k++)
            ids[k] = (int64_t)x[k];
        example_add_int64s(w, o->image_feature, ids, len);
    } else {
        example_add_floats(w, o->image_feature, x, len);
    }
    if (form->int_labels) {
        int64_t label = (int64_t)y[0];
        example_add_int64s(w, o->label_feature, &label, 1);
    } else {
        example_add_floats(w, o->label_feature, y, label_len);
    }
}

static int convert(const convert_opts_t *o, const convert_form_t *form, const dataset_t *ds)
{
    out_file_t *outs = calloc((size_t)o->shards, sizeof(*outs));
    example_writer_t w = {0};
    uint8_t *raw = malloc(ds->feature_len + 1);
    int64_t *ids = malloc((ds->feature_len + 1) * sizeof(int64_t)), opened = 0;
    float *row = malloc((ds->feature_len + 1) * sizeof(float));
    int rc = outs != NULL && raw != NULL && ids != NULL && row != NULL ? 0 : -1;

    for (; rc == 0 && opened < o->shards; opened++)
        rc = out_open(&outs[opened], o->out, opened, o->shards);
    for (size_t i = 0; rc == 0 && i < ds->n; i++) {
        const uint8_t *ex;
        size_t len = 0;
        example_writer_reset(&w);
        dataset_row(ds, i, row);
        add_example(o, form, &w, row, ds->feature_len, ds->labels + i * ds->label_len,
                    ds->label_len, raw, ids);
        if ((ex = example_finish(&w, &len)) == NULL ||
            out_write(&outs[i % (size_t)o->shards], ex, len) != 0) {
            fprintf(stderr, "tessera convert: cannot write example %zu to %s\n", i,
                    outs[i % (size_t)o->shards].path);
            rc = -1;
        }
    }
    for (int64_t s = 0; s < opened; s++)
        if (out_close(&outs[s], rc == 0) != 0)
            rc = -1;
    if (rc == 0)
        printf("wrote %zu examples of %zu values to %lld file(s) like %s\n", ds->n, ds->feature_len,
               (long long)o->shards, outs[0].path);
    example_writer_free(&w);
    free(raw);
    free(ids);
    free(row);
    free(outs);
    return rc;
}

/* The examples to write: the IDX files (values as bytes, unscaled), or a job's split. */
static status_t load_data(const convert_opts_t *o, convert_form_t *form, dataset_t **ret,
                          status_msg_t *err)
{
    job_t job;
    const job_source_t *src;
    status_t rc;

    if (o->job == NULL) {
        form->bytes = !o->floats;
        form->int_labels = true;
        return dataset_load_idx(o->images, o->labels, 1.0, 0, ret, err);
    }
    STATUS_CHECK(job_load_file(o->job, &job, err));
    src = strcmp(o->split, "test") == 0 ? &job.data.test : &job.data.train;
    if (strcmp(o->split, "test") != 0 && strcmp(o->split, "train") != 0)
        rc =
            status_fail(err, STATUS_INVALID_ARGUMENT, "--split is train or test, not %s", o->split);
    else if (!src->present)
        rc = status_fail(err, STATUS_INVALID_ARGUMENT, "%s has no data.%s", o->job, o->split);
    else if (job.model.n_inputs > 1) /* its TFRecords map one feature an input */
        rc = status_fail(err, STATUS_INVALID_ARGUMENT,
                         "%s: a model of several inputs: tessera convert writes one input feature",
                         o->job);
    else if (job_model_outputs(&job.model) > 1 || src->n_y > 1 || src->n_label > 1)
        rc = status_fail(err, STATUS_INVALID_ARGUMENT,
                         "%s: a model of several outputs: tessera convert writes one label feature",
                         o->job);
    else
        rc = dataset_load(src, job.data.scale, 0, ret, err);
    if (rc == STATUS_OK) {
        form->int_input = job.model.input_is_int;
        form->int_labels = (*ret)->classes > 0;
    }
    job_done(&job);
    return rc;
}

int cli_convert(int argc, char **argv)
{
    convert_opts_t o = {0};
    config_action_t action;
    status_msg_t err = {0};
    dataset_t *ds = NULL;
    convert_form_t form = {0};
    int rc = 2;

    if (config_load(&convert_table, &o, argc, argv, &action, &err) != STATUS_OK) {
        fprintf(stderr, "tessera convert: %s\n", err.text);
        goto out;
    }
    if (action != CONFIG_RUN) {
        rc = 0;
        goto out;
    }
    if (o.out == NULL || (o.job == NULL) == (o.images == NULL || o.labels == NULL)) {
        fprintf(stderr, "tessera convert: give --out and either --images and --labels, or --job\n");
        goto out;
    }
    rc = 1;
    if (files_mkdirs_for(o.out, &err) != STATUS_OK ||
        load_data(&o, &form, &ds, &err) != STATUS_OK) {
        fprintf(stderr, "tessera convert: %s\n", err.text);
        goto out;
    }
    rc = convert(&o, &form, ds) == 0 ? 0 : 1;
out:
    dataset_free(ds);
    config_done(&convert_table, &o);
    return rc;
}
