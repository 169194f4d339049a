/* Bytes that lie in several pieces of memory at any alignment, read where they are: a request
 * payload as gRPC received it, in the slices its TCP reads and HTTP/2 frames cut it into, which
 * the parameter server's optimizer reads in place instead of copying it into one buffer.
 *
 * A run of elements inside one piece is handed out in place, through the unaligned types below
 * (x86 loads them at full speed); an element that a piece boundary cuts is put together in the
 * walker's own few bytes. */
#ifndef TESSERA_PIECES_H
#define TESSERA_PIECES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Elements that may sit at any byte address. */
typedef float unaligned_float_t __attribute__((aligned(1)));
typedef uint16_t unaligned_u16_t __attribute__((aligned(1)));
typedef int64_t unaligned_i64_t __attribute__((aligned(1)));

/* Bytes [at, at + len) of the whole are at data. */
typedef struct pieces_part {
    const uint8_t *data;
    size_t len, at;
} pieces_part_t;

/* The whole: pieces in order, each starting where the one before ends (the first at 0), len
 * bytes in all. */
typedef struct pieces {
    const pieces_part_t *v;
    size_t n, len;
} pieces_t;

/* One piece over a flat buffer. */
static inline pieces_t pieces_flat(pieces_part_t *one, const void *data, size_t len)
{
    *one = (pieces_part_t){(const uint8_t *)data, len, 0};
    return (pieces_t){one, 1, len};
}

/* The piece holding byte at (< p->len). */
size_t pieces_find(const pieces_t *p, size_t at);

/* Points *ret at bytes [at, at + len) when one piece holds them all, else returns false. The
 * range must lie inside the whole; an empty one gets an 8-byte-aligned pointer. */
bool pieces_span(const pieces_t *p, size_t at, size_t len, const uint8_t **ret);

/* Copies bytes [at, at + len) of the whole to dst (a range inside the whole). */
void pieces_read(const pieces_t *p, size_t at, void *dst, size_t len);

/* Walks count elements of elem bytes (1 to 8) from byte at, which must lie inside the whole. */
typedef struct pieces_walk {
    const pieces_t *p;
    size_t k;        /* the piece of pos */
    size_t pos, end; /* bytes of the whole */
    size_t elem;
    uint8_t one[8] __attribute__((aligned(8))); /* an element cut by a piece boundary */
} pieces_walk_t;

void pieces_walk_init(pieces_walk_t *w, const pieces_t *p, size_t at, size_t elem, size_t count);

/* The next run: *ret_count (>= 1) elements at *ret_data, in place or (one element cut by a
 * boundary) in w->one. False when the walk is over. */
bool pieces_walk_next(pieces_walk_t *w, const void **ret_data, size_t *ret_count);

#endif
