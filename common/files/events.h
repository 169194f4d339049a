/* TensorBoard event files: a TFRecord file of Event messages, as TensorFlow's summary writer
 * makes them. The first record says file_version "brain.Event:2"; scalars are written in
 * TensorFlow 2's form (a rank-0 DT_FLOAT tensor with the "scalars" plugin's metadata), which
 * TensorBoard's loaders read as scalars.
 *
 * One writer per directory (TensorBoard reads a directory's files in name order and assumes the
 * older ones are finished): the file is named events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2,
 * so a later writer's file sorts after an earlier one's. */
#ifndef TESSERA_FILES_EVENTS_H
#define TESSERA_FILES_EVENTS_H

#include <stdint.h>

#include "base/status.h"
#include "files/pb.h"

typedef struct events_writer events_writer_t;

/* Creates dir (and its parents) when missing and a new event file in it, and writes and flushes
 * the file_version record. */
status_t events_open(const char *dir, events_writer_t **ret, status_msg_t *err);

/* The file's path. */
const char *events_path(const events_writer_t *w);

/* Appends one scalar value of tag at step (buffered; see events_flush). */
status_t events_scalar(events_writer_t *w, const char *tag, int64_t step, double wall_time,
                       float value, status_msg_t *err);

/* Appends a histogram of values[0..n) with `buckets` equal-width buckets between their minimum
 * and maximum, in TensorFlow 2's form (a [buckets, 3] DT_DOUBLE tensor of left edge, right edge
 * and count, with the "histograms" plugin's metadata). */
status_t events_histogram(events_writer_t *w, const char *tag, int64_t step, double wall_time,
                          const float *values, size_t n, int buckets, status_msg_t *err);

/* Writes what is buffered to the file. */
status_t events_flush(events_writer_t *w, status_msg_t *err);

/* Flushes and closes; NULL-safe. Returns the flush's status. */
status_t events_close(events_writer_t *w, status_msg_t *err);

/* The serialized Event of a scalar or of the file version (for tests and fuzzers). */
void events_encode_scalar(pb_buf_t *out, const char *tag, int64_t step, double wall_time,
                          float value);
void events_encode_file_version(pb_buf_t *out, double wall_time);

#endif
