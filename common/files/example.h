/* tf.train.Example, TensorFlow's record of named features, read and written on the protobuf wire
 * (files/pb.h): Example{features: Features{feature: map<string, Feature>}}, each Feature one of
 * bytes_list, float_list (packed or not) or int64_list (packed or not).
 *
 * Reading finds one feature by name without decoding the rest; a name given twice takes the
 * last, as protobuf's maps do. Every reader stops at the end of its bytes: malformed input is
 * an error, never a read past it. */
#ifndef TESSERA_FILES_EXAMPLE_H
#define TESSERA_FILES_EXAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "files/pb.h"

typedef enum {
    EXAMPLE_BYTES_LIST = 1,
    EXAMPLE_FLOAT_LIST = 2,
    EXAMPLE_INT64_LIST = 3,
} example_kind_t;

/* A feature as found: its kind and its encoded list message. */
typedef struct example_feature {
    example_kind_t kind;
    const uint8_t *data;
    size_t len;
} example_feature_t;

/* Finds feature `name` in the serialized Example ex[0..len): 1 when found (*ret filled), 0 when
 * absent, -1 when the bytes are not an Example. A Feature with no list set reads as absent. */
int example_find(const uint8_t *ex, size_t len, const char *name, example_feature_t *ret);

/* The number of values in a float_list or int64_list (packed or not), or of strings in a
 * bytes_list; -1 when malformed. */
int64_t example_count(const example_feature_t *f);

/* Writes the values of a float_list or int64_list (int64 converted to float) into out, which
 * holds exactly n; -1 when malformed or when the list does not hold exactly n values. */
int example_floats(const example_feature_t *f, float *out, size_t n);

/* The first string of a bytes_list: 1 with *ret_data and *ret_len set, 0 when the list is
 * empty, -1 when malformed. */
int example_bytes(const example_feature_t *f, const uint8_t **ret_data, size_t *ret_len);

/* Writing: an Example of the features added (packed lists), in the order added. */
typedef struct example_writer {
    pb_buf_t features; /* the Features message being built */
    pb_buf_t entry, feature, list, scratch;
    pb_buf_t out; /* the Example, after example_finish */
} example_writer_t;

void example_writer_reset(example_writer_t *w);
void example_add_floats(example_writer_t *w, const char *name, const float *v, size_t n);
void example_add_int64s(example_writer_t *w, const char *name, const int64_t *v, size_t n);
void example_add_bytes(example_writer_t *w, const char *name, const void *data, size_t len);
/* The Example's bytes (valid until the next reset); NULL when out of memory. */
const uint8_t *example_finish(example_writer_t *w, size_t *ret_len);
void example_writer_free(example_writer_t *w);

#endif
