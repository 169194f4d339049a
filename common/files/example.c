#include "files/example.h"

#include <string.h>

enum { EXAMPLE_FEATURES = 1, FEATURES_FEATURE = 1, ENTRY_KEY = 1, ENTRY_VALUE = 2, LIST_VALUE = 1 };

/* The Feature message's list: 1 with *ret filled, 0 when it sets none, -1 when malformed. */
static int feature_list(const uint8_t *data, size_t len, example_feature_t *ret)
{
    pb_reader_t r = {data, data + len};
    pb_field_t f;
    int rc, found = 0;

    while ((rc = pb_next(&r, &f)) == 1) {
        if (f.number < EXAMPLE_BYTES_LIST || f.number > EXAMPLE_INT64_LIST)
            continue;
        if (f.wire != PB_LEN)
            return -1;
        /* a oneof set twice keeps the last */
        *ret = (example_feature_t){(example_kind_t)f.number, f.data, f.len};
        found = 1;
    }
    return rc < 0 ? -1 : found;
}

/* One map entry: 1 when its key is name (and *ret is filled from its value), else 0; -1. */
static int map_entry(const uint8_t *data, size_t len, const char *name, size_t name_len,
                     example_feature_t *ret)
{
    pb_reader_t r = {data, data + len};
    pb_field_t f;
    const uint8_t *value = NULL;
    size_t value_len = 0;
    int rc, match = name_len == 0; /* proto3: an absent key is "" */

    while ((rc = pb_next(&r, &f)) == 1) {
        if ((f.number == ENTRY_KEY || f.number == ENTRY_VALUE) && f.wire != PB_LEN)
            return -1;
        if (f.number == ENTRY_KEY)
            match = f.len == name_len && memcmp(f.data, name, name_len) == 0;
        else if (f.number == ENTRY_VALUE) {
            value = f.data;
            value_len = f.len;
        }
    }
    if (rc < 0)
        return -1;
    if (!match)
        return 0;
    return value != NULL ? feature_list(value, value_len, ret) : 0;
}

int example_find(const uint8_t *ex, size_t len, const char *name, example_feature_t *ret)
{
    pb_reader_t r = {ex, ex + len};
    pb_field_t f;
    size_t name_len = strlen(name);
    int rc, found = 0;

    while ((rc = pb_next(&r, &f)) == 1) {
        if (f.number != EXAMPLE_FEATURES)
            continue;
        if (f.wire != PB_LEN)
            return -1;
        /* Features may come in several pieces: protobuf merges them. */
        pb_reader_t fr = {f.data, f.data + f.len};
        pb_field_t e;
        int erc;
        while ((erc = pb_next(&fr, &e)) == 1) {
            if (e.number != FEATURES_FEATURE)
                continue;
            if (e.wire != PB_LEN)
                return -1;
            int m = map_entry(e.data, e.len, name, name_len, ret);
            if (m < 0)
                return -1;
            found |= m;
        }
        if (erc < 0)
            return -1;
    }
    return rc < 0 ? -1 : found;
}

/* Counts a list's values, writing the first n of a float or int64 list into out (when not
 * NULL) as floats; returns the count, or -1 when malformed. */
static int64_t walk_values(const example_feature_t *f, float *out, size_t n)
{
    pb_reader_t r = {f->data, f->data + f->len};
    pb_field_t v;
    int64_t count = 0;
    int rc;

    while ((rc = pb_next(&r, &v)) == 1) {
        if (v.number != LIST_VALUE)
            continue;
        if (f->kind == EXAMPLE_BYTES_LIST) {
            if (v.wire != PB_LEN)
                return -1;
            count++;
        } else if (f->kind == EXAMPLE_FLOAT_LIST && v.wire == PB_LEN) { /* packed */
            if (v.len % 4 != 0)
                return -1;
            for (size_t k = 0; k < v.len; k += 4, count++) {
                uint32_t bits = (uint32_t)v.data[k] | (uint32_t)v.data[k + 1] << 8 |
                                (uint32_t)v.data[k + 2] << 16 | (uint32_t)v.data[k + 3] << 24;
                if (out != NULL && (size_t)count < n)
                    memcpy(&out[count], &bits, 4);
            }
        } else if (f->kind == EXAMPLE_FLOAT_LIST && v.wire == PB_FIXED32) {
            uint32_t bits = (uint32_t)v.u64;
            if (out != NULL && (size_t)count < n)
                memcpy(&out[count], &bits, 4);
            count++;
        } else if (f->kind == EXAMPLE_INT64_LIST && v.wire == PB_LEN) { /* packed */
            const uint8_t *p = v.data, *end = v.data + v.len;
            while (p < end) {
                uint64_t x;
                if (!pb_read_varint(&p, end, &x))
                    return -1;
                if (out != NULL && (size_t)count < n)
                    out[count] = (float)(int64_t)x;
                count++;
            }
        } else if (f->kind == EXAMPLE_INT64_LIST && v.wire == PB_VARINT) {
            if (out != NULL && (size_t)count < n)
                out[count] = (float)(int64_t)v.u64;
            count++;
        } else {
            return -1;
        }
    }
    return rc < 0 ? -1 : count;
}

int64_t example_count(const example_feature_t *f)
{
    return walk_values(f, NULL, 0);
}

int example_floats(const example_feature_t *f, float *out, size_t n)
{
    if (f->kind == EXAMPLE_BYTES_LIST)
        return -1;
    return walk_values(f, out, n) == (int64_t)n ? 0 : -1;
}

int example_bytes(const example_feature_t *f, const uint8_t **ret_data, size_t *ret_len)
{
    pb_reader_t r = {f->data, f->data + f->len};
    pb_field_t v;
    int rc, found = 0;

    if (f->kind != EXAMPLE_BYTES_LIST)
        return -1;
    /* The whole list is read: a list malformed after its first string is malformed. */
    while ((rc = pb_next(&r, &v)) == 1) {
        if (v.number != LIST_VALUE)
            continue;
        if (v.wire != PB_LEN)
            return -1;
        if (!found) {
            *ret_data = v.data;
            *ret_len = v.len;
        }
        found = 1;
    }
    return rc < 0 ? -1 : found;
}

/* ---- writing ---- */

void example_writer_reset(example_writer_t *w)
{
    pb_buf_reset(&w->features);
    pb_buf_reset(&w->out);
}

/* Adds map entry {name: Feature{kind: w->list}} to the features. */
static void add_entry(example_writer_t *w, const char *name, example_kind_t kind)
{
    pb_buf_reset(&w->feature);
    pb_put_message_field(&w->feature, (int)kind, &w->list);
    pb_buf_reset(&w->entry);
    pb_put_string_field(&w->entry, ENTRY_KEY, name);
    pb_put_message_field(&w->entry, ENTRY_VALUE, &w->feature);
    pb_put_message_field(&w->features, FEATURES_FEATURE, &w->entry);
}

void example_add_floats(example_writer_t *w, const char *name, const float *v, size_t n)
{
    pb_buf_reset(&w->scratch);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        uint8_t le[4];
        memcpy(&bits, &v[i], 4);
        for (int k = 0; k < 4; k++)
            le[k] = (uint8_t)(bits >> (8 * k));
        pb_put_raw(&w->scratch, le, 4);
    }
    pb_buf_reset(&w->list);
    if (n > 0)
        pb_put_message_field(&w->list, LIST_VALUE, &w->scratch);
    add_entry(w, name, EXAMPLE_FLOAT_LIST);
}

void example_add_int64s(example_writer_t *w, const char *name, const int64_t *v, size_t n)
{
    pb_buf_reset(&w->scratch);
    for (size_t i = 0; i < n; i++) {
        uint8_t tmp[10];
        size_t k = 0;
        uint64_t x = (uint64_t)v[i];
        do {
            tmp[k++] = (uint8_t)((x & 0x7f) | (x > 0x7f ? 0x80 : 0));
            x >>= 7;
        } while (x != 0);
        pb_put_raw(&w->scratch, tmp, k);
    }
    pb_buf_reset(&w->list);
    if (n > 0)
        pb_put_message_field(&w->list, LIST_VALUE, &w->scratch);
    add_entry(w, name, EXAMPLE_INT64_LIST);
}

void example_add_bytes(example_writer_t *w, const char *name, const void *data, size_t len)
{
    pb_buf_reset(&w->list);
    pb_put_bytes_field(&w->list, LIST_VALUE, data, len);
    add_entry(w, name, EXAMPLE_BYTES_LIST);
}

const uint8_t *example_finish(example_writer_t *w, size_t *ret_len)
{
    pb_buf_reset(&w->out);
    pb_put_message_field(&w->out, EXAMPLE_FEATURES, &w->features);
    if (w->out.failed || w->features.failed || w->entry.failed || w->feature.failed ||
        w->list.failed || w->scratch.failed)
        return NULL;
    *ret_len = w->out.len;
    return w->out.data;
}

void example_writer_free(example_writer_t *w)
{
    pb_buf_free(&w->features);
    pb_buf_free(&w->entry);
    pb_buf_free(&w->feature);
    pb_buf_free(&w->list);
    pb_buf_free(&w->scratch);
    pb_buf_free(&w->out);
}
