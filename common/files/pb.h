/* Protocol buffers on the wire, by hand: the few messages Tessera writes or reads in files
 * (TensorBoard events, tf.train.Example) without linking a protobuf runtime into the engine.
 *
 * Writing appends fields to a growing buffer; a failed allocation marks the buffer failed and
 * later appends do nothing, so a writer checks once at the end. Reading walks a buffer field by
 * field and never reads past its end. */
#ifndef TESSERA_FILES_PB_H
#define TESSERA_FILES_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pb_buf {
    uint8_t *data;
    size_t len, cap;
    bool failed; /* an allocation failed: the contents are incomplete */
} pb_buf_t;

/* Wire types. */
enum { PB_VARINT = 0, PB_FIXED64 = 1, PB_LEN = 2, PB_FIXED32 = 5 };

void pb_buf_free(pb_buf_t *b);
void pb_buf_reset(pb_buf_t *b); /* empties it, keeping the memory */

void pb_put_raw(pb_buf_t *b, const void *data, size_t len);
void pb_put_varint_field(pb_buf_t *b, int field, uint64_t v);
void pb_put_double_field(pb_buf_t *b, int field, double v);
void pb_put_bytes_field(pb_buf_t *b, int field, const void *data, size_t len);
void pb_put_string_field(pb_buf_t *b, int field, const char *s);
/* A nested message: field, its length, then sub's bytes. */
void pb_put_message_field(pb_buf_t *b, int field, const pb_buf_t *sub);

/* A cursor over an encoded message. */
typedef struct pb_reader {
    const uint8_t *p, *end;
} pb_reader_t;

/* One field as read: for PB_LEN, data and len; otherwise the value in u64 (fixed32 in its low
 * 32 bits). */
typedef struct pb_field {
    int number, wire;
    uint64_t u64;
    const uint8_t *data;
    size_t len;
} pb_field_t;

/* Reads the next field. Returns 1 with *f filled, 0 at the end of the message, -1 when the bytes
 * are not a valid encoding (a cut varint, a length past the end, field number 0, wire types 3
 * and 4 (groups) or 6 and 7). */
int pb_next(pb_reader_t *r, pb_field_t *f);

/* Reads a varint from [*p, end); false when cut or longer than 10 bytes. */
bool pb_read_varint(const uint8_t **p, const uint8_t *end, uint64_t *ret);

#endif
