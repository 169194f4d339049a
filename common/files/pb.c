#include "files/pb.h"

#include <stdlib.h>
#include <string.h>

void pb_buf_free(pb_buf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

void pb_buf_reset(pb_buf_t *b)
{
    b->len = 0;
    b->failed = false;
}

static bool reserve(pb_buf_t *b, size_t more)
{
    size_t cap;
    uint8_t *p;

    if (b->failed)
        return false;
    if (more <= b->cap - b->len)
        return true;
    cap = b->cap ? b->cap : 256;
    while (cap - b->len < more) {
        if (cap > SIZE_MAX / 2) {
            b->failed = true;
            return false;
        }
        cap *= 2;
    }
    p = realloc(b->data, cap);
    if (p == NULL) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void pb_put_raw(pb_buf_t *b, const void *data, size_t len)
{
    if (len == 0 || !reserve(b, len))
        return;
    memcpy(b->data + b->len, data, len);
    b->len += len;
}

static void put_varint(pb_buf_t *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;

    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v != 0);
    pb_put_raw(b, tmp, n);
}

static void put_tag(pb_buf_t *b, int field, int wire)
{
    put_varint(b, ((uint64_t)field << 3) | (uint64_t)wire);
}

void pb_put_varint_field(pb_buf_t *b, int field, uint64_t v)
{
    put_tag(b, field, PB_VARINT);
    put_varint(b, v);
}

void pb_put_double_field(pb_buf_t *b, int field, double v)
{
    uint8_t le[8];
    uint64_t bits;

    memcpy(&bits, &v, sizeof(bits));
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(bits >> (8 * i));
    put_tag(b, field, PB_FIXED64);
    pb_put_raw(b, le, sizeof(le));
}

void pb_put_bytes_field(pb_buf_t *b, int field, const void *data, size_t len)
{
    put_tag(b, field, PB_LEN);
    put_varint(b, len);
    pb_put_raw(b, data, len);
}

void pb_put_string_field(pb_buf_t *b, int field, const char *s)
{
    pb_put_bytes_field(b, field, s, strlen(s));
}

void pb_put_message_field(pb_buf_t *b, int field, const pb_buf_t *sub)
{
    if (sub->failed)
        b->failed = true;
    pb_put_bytes_field(b, field, sub->data, sub->len);
}

bool pb_read_varint(const uint8_t **p, const uint8_t *end, uint64_t *ret)
{
    uint64_t v = 0;

    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t c = *(*p)++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if ((c & 0x80) == 0) {
            *ret = v;
            return true;
        }
    }
    return false;
}

int pb_next(pb_reader_t *r, pb_field_t *f)
{
    uint64_t key, len;

    if (r->p >= r->end)
        return 0;
    if (!pb_read_varint(&r->p, r->end, &key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff)
        return -1;
    f->number = (int)(key >> 3);
    f->wire = (int)(key & 7);
    f->data = NULL;
    f->len = 0;
    f->u64 = 0;
    switch (f->wire) {
    case PB_VARINT:
        return pb_read_varint(&r->p, r->end, &f->u64) ? 1 : -1;
    case PB_FIXED64:
    case PB_FIXED32: {
        size_t n = f->wire == PB_FIXED64 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n)
            return -1;
        for (size_t i = 0; i < n; i++)
            f->u64 |= (uint64_t)r->p[i] << (8 * i);
        r->p += n;
        return 1;
    }
    case PB_LEN:
        if (!pb_read_varint(&r->p, r->end, &len) || len > (uint64_t)(r->end - r->p))
            return -1;
        f->data = r->p;
        f->len = (size_t)len;
        r->p += len;
        return 1;
    default:
        return -1;
    }
}
