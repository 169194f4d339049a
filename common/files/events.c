#define _GNU_SOURCE
#include "files/events.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "files/atomic.h"
#include "files/tfrecord.h"

/* Field numbers of the messages written (tensorboard/compat/proto: event.proto, summary.proto,
 * tensor.proto, tensor_shape.proto). */
enum {
    EVENT_WALL_TIME = 1,
    EVENT_STEP = 2,
    EVENT_FILE_VERSION = 3,
    EVENT_SUMMARY = 5,
    SUMMARY_VALUE = 1,
    VALUE_TAG = 1,
    VALUE_TENSOR = 8,
    VALUE_METADATA = 9,
    METADATA_PLUGIN_DATA = 1,
    METADATA_DATA_CLASS = 4,
    PLUGIN_NAME = 1,
    TENSOR_DTYPE = 1,
    TENSOR_SHAPE = 2,
    TENSOR_CONTENT = 4,
    TENSOR_FLOAT_VAL = 5,
    SHAPE_DIM = 2,
    DIM_SIZE = 1,
};
enum { DT_FLOAT = 1, DT_DOUBLE = 2 };
enum { DATA_CLASS_SCALAR = 1, DATA_CLASS_TENSOR = 2 };

struct events_writer {
    FILE *f;
    char *path;
    pb_buf_t event, summary, value, sub, sub2;
};

/* Event{wall_time, step, summary{value{tag, metadata{plugin_data{plugin_name}, data_class},
 * tensor}}} into out, with value, summary and meta as scratch. */
static void encode_value_event(pb_buf_t *out, pb_buf_t *value, pb_buf_t *summary, pb_buf_t *meta,
                               const pb_buf_t *tensor, const char *tag, const char *plugin,
                               int data_class, int64_t step, double wall_time)
{
    pb_buf_t plugin_data = {0};

    pb_put_string_field(&plugin_data, PLUGIN_NAME, plugin);
    pb_buf_reset(meta);
    pb_put_message_field(meta, METADATA_PLUGIN_DATA, &plugin_data);
    pb_put_varint_field(meta, METADATA_DATA_CLASS, (uint64_t)data_class);
    pb_buf_free(&plugin_data);

    pb_buf_reset(value);
    pb_put_string_field(value, VALUE_TAG, tag);
    pb_put_message_field(value, VALUE_METADATA, meta);
    pb_put_message_field(value, VALUE_TENSOR, tensor);
    pb_buf_reset(summary);
    pb_put_message_field(summary, SUMMARY_VALUE, value);
    pb_buf_reset(out);
    pb_put_double_field(out, EVENT_WALL_TIME, wall_time);
    pb_put_varint_field(out, EVENT_STEP, (uint64_t)step);
    pb_put_message_field(out, EVENT_SUMMARY, summary);
}

static void encode_scalar_tensor(pb_buf_t *tensor, float value)
{
    uint8_t le[4];
    uint32_t bits;
    pb_buf_t shape = {0};

    memcpy(&bits, &value, sizeof(bits));
    for (int i = 0; i < 4; i++)
        le[i] = (uint8_t)(bits >> (8 * i));
    pb_buf_reset(tensor);
    pb_put_varint_field(tensor, TENSOR_DTYPE, DT_FLOAT);
    pb_put_message_field(tensor, TENSOR_SHAPE, &shape); /* rank 0 */
    pb_put_bytes_field(tensor, TENSOR_FLOAT_VAL, le, sizeof(le));
}

void events_encode_scalar(pb_buf_t *out, const char *tag, int64_t step, double wall_time,
                          float value)
{
    pb_buf_t tensor = {0}, value_buf = {0}, summary = {0}, meta = {0};

    encode_scalar_tensor(&tensor, value);
    encode_value_event(out, &value_buf, &summary, &meta, &tensor, tag, "scalars", DATA_CLASS_SCALAR,
                       step, wall_time);
    pb_buf_free(&tensor);
    pb_buf_free(&value_buf);
    pb_buf_free(&summary);
    pb_buf_free(&meta);
}

void events_encode_file_version(pb_buf_t *out, double wall_time)
{
    pb_buf_reset(out);
    pb_put_double_field(out, EVENT_WALL_TIME, wall_time);
    pb_put_string_field(out, EVENT_FILE_VERSION, "brain.Event:2");
}

static status_t append(events_writer_t *w, const pb_buf_t *event, status_msg_t *err)
{
    if (event->failed)
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory for an event", w->path);
    return tfrecord_write(w->f, w->path, event->data, event->len, err);
}

status_t events_open(const char *dir, events_writer_t **ret, status_msg_t *err)
{
    static unsigned counter;
    events_writer_t *w = calloc(1, sizeof(*w));
    char host[256] = "localhost";
    double now = clock_wall_s();
    status_t rc;
    int len;

    *ret = NULL;
    if (w == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    if ((rc = files_mkdirs(dir, err)) != STATUS_OK) {
        free(w);
        return rc;
    }
    (void)gethostname(host, sizeof(host) - 1);
    len = asprintf(&w->path, "%s/events.out.tfevents.%010lld.%s.%d.%u.v2", dir, (long long)now,
                   host, (int)getpid(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    if (len < 0) {
        free(w);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    w->f = fopen(w->path, "wbx");
    if (w->f == NULL) {
        rc = status_fail(err, STATUS_IO, "cannot create %s: %s", w->path, strerror(errno));
        free(w->path);
        free(w);
        return rc;
    }
    events_encode_file_version(&w->event, now);
    rc = append(w, &w->event, err);
    if (rc == STATUS_OK)
        rc = events_flush(w, err);
    if (rc != STATUS_OK) {
        events_close(w, NULL);
        return rc;
    }
    *ret = w;
    return STATUS_OK;
}

const char *events_path(const events_writer_t *w)
{
    return w->path;
}

status_t events_scalar(events_writer_t *w, const char *tag, int64_t step, double wall_time,
                       float value, status_msg_t *err)
{
    encode_scalar_tensor(&w->sub2, value);
    encode_value_event(&w->event, &w->value, &w->summary, &w->sub, &w->sub2, tag, "scalars",
                       DATA_CLASS_SCALAR, step, wall_time);
    return append(w, &w->event, err);
}

/* The [buckets, 3] tensor of left edge, right edge and count. */
static status_t encode_histogram_tensor(pb_buf_t *tensor, const float *values, size_t n,
                                        int buckets)
{
    double lo = INFINITY, hi = -INFINITY, width, *rows;
    size_t bytes = (size_t)buckets * 3 * sizeof(double);
    pb_buf_t shape = {0}, dim = {0};

    if (buckets < 1 || (rows = calloc((size_t)buckets * 3, sizeof(double))) == NULL)
        return STATUS_NO_MEMORY;
    for (size_t i = 0; i < n; i++)
        if (isfinite(values[i])) {
            lo = fmin(lo, values[i]);
            hi = fmax(hi, values[i]);
        }
    if (!(lo <= hi)) /* nothing finite */
        lo = hi = 0;
    if (hi == lo) { /* one value: buckets of width 1/buckets from it */
        hi = lo + 1;
    }
    width = (hi - lo) / buckets;
    for (int b = 0; b < buckets; b++) {
        rows[3 * b] = lo + width * b;
        rows[3 * b + 1] = b == buckets - 1 ? hi : lo + width * (b + 1);
    }
    for (size_t i = 0; i < n; i++) {
        long b;
        if (!isfinite(values[i]))
            continue;
        b = (long)((values[i] - lo) / width);
        b = b < 0 ? 0 : b >= buckets ? buckets - 1 : b;
        rows[3 * b + 2] += 1;
    }
    pb_buf_reset(tensor);
    pb_put_varint_field(tensor, TENSOR_DTYPE, DT_DOUBLE);
    pb_put_varint_field(&dim, DIM_SIZE, (uint64_t)buckets);
    pb_put_message_field(&shape, SHAPE_DIM, &dim);
    pb_buf_reset(&dim);
    pb_put_varint_field(&dim, DIM_SIZE, 3);
    pb_put_message_field(&shape, SHAPE_DIM, &dim);
    pb_put_message_field(tensor, TENSOR_SHAPE, &shape);
    /* tensor_content is little-endian, as are the hosts Tessera builds for. */
    pb_put_bytes_field(tensor, TENSOR_CONTENT, rows, bytes);
    pb_buf_free(&shape);
    pb_buf_free(&dim);
    free(rows);
    return tensor->failed ? STATUS_NO_MEMORY : STATUS_OK;
}

status_t events_histogram(events_writer_t *w, const char *tag, int64_t step, double wall_time,
                          const float *values, size_t n, int buckets, status_msg_t *err)
{
    if (encode_histogram_tensor(&w->sub2, values, n, buckets) != STATUS_OK)
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory for histogram %s", w->path,
                           tag);
    encode_value_event(&w->event, &w->value, &w->summary, &w->sub, &w->sub2, tag, "histograms",
                       DATA_CLASS_TENSOR, step, wall_time);
    return append(w, &w->event, err);
}

status_t events_flush(events_writer_t *w, status_msg_t *err)
{
    if (fflush(w->f) != 0)
        return status_fail(err, STATUS_IO, "cannot write %s: %s", w->path, strerror(errno));
    return STATUS_OK;
}

status_t events_close(events_writer_t *w, status_msg_t *err)
{
    status_t rc = STATUS_OK;

    if (w == NULL)
        return STATUS_OK;
    if (fclose(w->f) != 0)
        rc = status_fail(err, STATUS_IO, "cannot write %s: %s", w->path, strerror(errno));
    pb_buf_free(&w->event);
    pb_buf_free(&w->summary);
    pb_buf_free(&w->value);
    pb_buf_free(&w->sub);
    pb_buf_free(&w->sub2);
    free(w->path);
    free(w);
    return rc;
}
