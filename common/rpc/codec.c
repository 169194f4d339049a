/* Encoding and decoding of messages with a zero-copy payload (field 15), shared by the server
 * and client halves of the RPC runtime. See rpc.h for the convention. */
#include "files/pb.h"
#include "rpc/internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define PAYLOAD_FIELD   15
#define PAYLOAD_KEY     ((PAYLOAD_FIELD << 3) | 2)
#define PAYLOAD_ALIGN   64
#define SCRATCH_INITIAL 512

void rpc_payload_done(rpc_payload_t *p)
{
    grpc_slice *held;

    if (p == NULL)
        return;
    if (p->owned)
        free(p->data);
    held = p->held;
    for (size_t i = 0; i < p->n_held; i++)
        grpc_slice_unref(held[i]);
    free(p->held);
    free(p->parts);
    *p = (rpc_payload_t){0};
}

pieces_t rpc_payload_pieces(rpc_payload_t *p)
{
    if (p->parts != NULL)
        return (pieces_t){p->parts, p->n_parts, p->len};
    return pieces_flat(&p->flat, p->data, p->len);
}

/* Buffers this large come from mmap (see RPC_MALLOC_MMAP_THRESHOLD below): fresh pages each
 * time, so every 4 KiB page faults in again. On huge pages a 64 MiB buffer takes 32 faults
 * instead of 16,384: measured here, first-touch copies of 64 MiB took 5.5 ms instead of 22-35. */
#define HUGE_BUFFER (32u << 20)
#define HUGE_PAGE   (2u << 20)

void *rpc_buffer_alloc(size_t len)
{
    size_t align = len >= HUGE_BUFFER ? HUGE_PAGE : PAYLOAD_ALIGN;
    size_t rounded = (len + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded ? rounded : align);
#ifdef MADV_HUGEPAGE
    if (p != NULL && align == HUGE_PAGE)
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* only advice: fine where THP is off */
#endif
    return p;
}

/* ---- malloc tuning ------------------------------------------------------------------------ */

/* gRPC reads a message into 64 KiB slices from malloc and frees them all once the message is
 * consumed. With glibc's defaults the freed top of the heap beyond 128 KiB goes back to the
 * kernel at once, so every multi-megabyte message page-faults and zeroes all of its memory again
 * (about 4,000 faults per 16 MiB): measured on loopback, 16 MiB pushes ran at 2.0 GB/s instead
 * of 4.0 GB/s. Keeping up to RPC_MALLOC_TRIM_THRESHOLD of free heap removes that cost. Setting
 * a trim threshold switches off glibc's sliding mmap threshold, so the mmap threshold is pinned
 * at the maximum that the sliding one climbs to (32 MiB on 64-bit). */
#define RPC_MALLOC_TRIM_THRESHOLD      (64 << 20)
#define RPC_MALLOC_MMAP_THRESHOLD      (32 << 20)
#define RPC_MALLOC_TRIM_THRESHOLD_HUGE (8 << 20)

static void tune_malloc_once(void)
{
#ifdef __GLIBC__
    const char *tunables = getenv("GLIBC_TUNABLES");

    /* An operator who tuned these knobs knows better: leave them. */
    if (getenv("MALLOC_TRIM_THRESHOLD_") != NULL || getenv("MALLOC_MMAP_THRESHOLD_") != NULL ||
        (tunables != NULL && (strstr(tunables, "malloc.trim_threshold") != NULL ||
                              strstr(tunables, "malloc.mmap_threshold") != NULL)))
        return;
    mallopt(M_MMAP_THRESHOLD, RPC_MALLOC_MMAP_THRESHOLD);
    /* On huge pages (daemon.c asks glibc for them) memory faults back in 512 times more cheaply:
     * a small reserve does, and the process holds less it does not use. */
    mallopt(M_TRIM_THRESHOLD, tunables != NULL && strstr(tunables, "malloc.hugetlb=1") != NULL
                                  ? RPC_MALLOC_TRIM_THRESHOLD_HUGE
                                  : RPC_MALLOC_TRIM_THRESHOLD);
#endif
}

void rpc_tune_malloc(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tune_malloc_once);
}

bool rpc_has_payload_field(const ProtobufCMessageDescriptor *desc)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(desc, PAYLOAD_FIELD);
    return f != NULL && f->type == PROTOBUF_C_TYPE_BYTES && f->label != PROTOBUF_C_LABEL_REPEATED;
}

static size_t varint_put(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* ---- encoding ---------------------------------------------------------------------------- */

static void static_release(void *arg)
{
    (void)arg;
}

status_t rpc_encode(const ProtobufCMessage *msg, const rpc_iov_t *iov, size_t n_iov,
                    rpc_release_tracker_t *tracker, grpc_byte_buffer **ret_bb, size_t *ret_len)
{
    size_t packed = protobuf_c_message_get_packed_size(msg);
    size_t payload_len = 0, n_slices = 1;
    grpc_slice stack_slices[8], *slices = stack_slices;
    uint8_t *hdr;
    size_t hdr_len;

    for (size_t i = 0; i < n_iov; i++) {
        payload_len += iov[i].len;
        n_slices += iov[i].len > 0;
    }
    hdr = malloc(packed + 11);
    if (hdr == NULL)
        return STATUS_NO_MEMORY;
    hdr_len = protobuf_c_message_pack(msg, hdr);
    if (n_iov > 0) {
        hdr[hdr_len++] = PAYLOAD_KEY;
        hdr_len += varint_put(hdr + hdr_len, payload_len);
    }
    if (n_slices > sizeof(stack_slices) / sizeof(stack_slices[0])) {
        slices = malloc(n_slices * sizeof(*slices));
        if (slices == NULL) {
            free(hdr);
            return STATUS_NO_MEMORY;
        }
    }
    slices[0] = grpc_slice_new(hdr, hdr_len, free);
    n_slices = 1;
    for (size_t i = 0; i < n_iov; i++) {
        if (iov[i].len == 0) { /* never handed to gRPC: handed back at once */
            if (iov[i].release != NULL)
                iov[i].release(iov[i].arg);
            continue;
        }
        if (iov[i].release != NULL) {
            slices[n_slices++] = grpc_slice_new_with_user_data((void *)iov[i].base, iov[i].len,
                                                               iov[i].release, iov[i].arg);
        } else if (tracker != NULL) {
            rpc_tracker_hold(tracker);
            slices[n_slices++] = grpc_slice_new_with_user_data((void *)iov[i].base, iov[i].len,
                                                               rpc_tracker_release, tracker);
        } else {
            slices[n_slices++] = grpc_slice_new_with_user_data((void *)iov[i].base, iov[i].len,
                                                               static_release, NULL);
        }
    }
    *ret_bb = grpc_raw_byte_buffer_create(slices, n_slices);
    for (size_t i = 0; i < n_slices; i++)
        grpc_slice_unref(slices[i]);
    if (slices != stack_slices)
        free(slices);
    *ret_len = hdr_len + payload_len;
    return STATUS_OK;
}

/* ---- release tracking --------------------------------------------------------------------- */

void rpc_tracker_init(rpc_release_tracker_t *t)
{
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->outstanding = 0;
}

void rpc_tracker_hold(rpc_release_tracker_t *t)
{
    pthread_mutex_lock(&t->mu);
    t->outstanding++;
    pthread_mutex_unlock(&t->mu);
}

void rpc_tracker_release(void *arg)
{
    rpc_release_tracker_t *t = arg;
    pthread_mutex_lock(&t->mu);
    if (--t->outstanding == 0)
        pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void rpc_tracker_wait_done(rpc_release_tracker_t *t)
{
    pthread_mutex_lock(&t->mu);
    while (t->outstanding > 0)
        pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
}

/* ---- decoding ----------------------------------------------------------------------------- */

/* Walks the slices of a received byte buffer as one byte stream. */
typedef struct walker {
    grpc_byte_buffer_reader reader;
    grpc_slice slice;
    size_t pos;
    bool have;
} walker_t;

static bool walker_fill(walker_t *w)
{
    while (!w->have || w->pos == GRPC_SLICE_LENGTH(w->slice)) {
        if (w->have)
            grpc_slice_unref(w->slice);
        w->have = false;
        if (!grpc_byte_buffer_reader_next(&w->reader, &w->slice))
            return false;
        w->have = true;
        w->pos = 0;
    }
    return true;
}

static bool walker_byte(walker_t *w, uint8_t *ret)
{
    if (!walker_fill(w))
        return false;
    *ret = GRPC_SLICE_START_PTR(w->slice)[w->pos++];
    return true;
}

static bool walker_copy(walker_t *w, uint8_t *dst, size_t n)
{
    while (n > 0) {
        size_t avail, take;
        if (!walker_fill(w))
            return false;
        avail = GRPC_SLICE_LENGTH(w->slice) - w->pos;
        take = avail < n ? avail : n;
        memcpy(dst, GRPC_SLICE_START_PTR(w->slice) + w->pos, take);
        w->pos += take;
        dst += take;
        n -= take;
    }
    return true;
}

typedef struct scratch {
    uint8_t *buf;
    size_t len, cap;
    uint8_t inline_buf[SCRATCH_INITIAL];
} scratch_t;

static bool scratch_reserve(scratch_t *s, size_t extra)
{
    size_t want = s->len + extra, cap = s->cap;
    uint8_t *nb;

    if (want <= cap)
        return true;
    while (cap < want)
        cap *= 2;
    if (s->buf == s->inline_buf) {
        nb = malloc(cap);
        if (nb != NULL)
            memcpy(nb, s->buf, s->len);
    } else {
        nb = realloc(s->buf, cap);
    }
    if (nb == NULL)
        return false;
    s->buf = nb;
    s->cap = cap;
    return true;
}

/* Reads a varint, appending its bytes to the scratch when keep is set. */
static bool read_varint(walker_t *w, scratch_t *s, bool keep, uint64_t *ret)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        uint8_t b;
        if (!walker_byte(w, &b))
            return false;
        if (keep) {
            if (!scratch_reserve(s, 1))
                return false;
            s->buf[s->len++] = b;
        }
        v |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *ret = v;
            return true;
        }
    }
    return false;
}

static bool keep_bytes(walker_t *w, scratch_t *s, uint64_t n, size_t total)
{
    if (n > total || !scratch_reserve(s, (size_t)n))
        return false;
    if (!walker_copy(w, s->buf + s->len, (size_t)n))
        return false;
    s->len += (size_t)n;
    return true;
}

/* Takes the next n bytes in place: a reference to each slice they lie in, and where. The parts'
 * data pointers are set once the list is final (hold_finish): a small slice keeps its bytes
 * inside the grpc_slice itself, which moves when the list grows. */
static status_t walker_hold(walker_t *w, size_t n, rpc_payload_t *p, size_t *cap)
{
    size_t at = 0;

    while (n > 0) {
        size_t avail, take;
        if (!walker_fill(w))
            return STATUS_BAD_MESSAGE;
        if (p->n_held == *cap) {
            size_t c = *cap ? 2 * *cap : 64;
            grpc_slice *h = realloc(p->held, c * sizeof(*h));
            pieces_part_t *pa;
            if (h != NULL)
                p->held = h;
            pa = h != NULL ? realloc(p->parts, c * sizeof(*pa)) : NULL;
            if (pa == NULL)
                return STATUS_NO_MEMORY;
            p->parts = pa;
            *cap = c;
        }
        avail = GRPC_SLICE_LENGTH(w->slice) - w->pos;
        take = avail < n ? avail : n;
        ((grpc_slice *)p->held)[p->n_held] = grpc_slice_ref(w->slice);
        /* the offset in its slice, until hold_finish */
        p->parts[p->n_held] = (pieces_part_t){(const uint8_t *)(uintptr_t)w->pos, take, at};
        p->n_held++;
        w->pos += take;
        at += take;
        n -= take;
    }
    return STATUS_OK;
}

static void hold_finish(rpc_payload_t *p)
{
    const grpc_slice *held = p->held;

    for (size_t i = 0; i < p->n_held; i++)
        p->parts[i].data = GRPC_SLICE_START_PTR(held[i]) + (uintptr_t)p->parts[i].data;
    p->n_parts = p->n_held;
}

/* Whether to read bb's payload in place: not when it is compressed (only a guard: gRPC's server
 * inflates a compressed message before the call sees it, and gRPC 1.51's reader would not), nor
 * when its slices average under 1 KiB, where the list of references (56 bytes a slice) would
 * cost more than one copy: a sender cutting its message into tiny frames must not make the
 * server hold a million references. */
static bool worth_holding(const grpc_byte_buffer *bb)
{
    size_t total = grpc_byte_buffer_length((grpc_byte_buffer *)bb);

    return bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE &&
           bb->data.raw.slice_buffer.count <= total / 1024 + 16;
}

/* Splits the top-level fields: field 15 goes to the payload buffer (or, in_place, is held where
 * it lies), the rest to the scratch. */
static status_t split_fields(walker_t *w, size_t total, scratch_t *s, void *recv_buf,
                             size_t recv_cap, bool in_place, rpc_payload_t *payload)
{
    size_t cap = 0;    /* of the list of held slices */
    bool seen = false; /* field 15 may appear once */

    for (;;) {
        uint64_t key, len;

        if (!walker_fill(w))
            return STATUS_OK;
        if (!read_varint(w, s, false, &key))
            return STATUS_BAD_MESSAGE;
        if ((key >> 3) == PAYLOAD_FIELD && (key & 7) == 2) {
            if (seen || !read_varint(w, s, false, &len) || len > total)
                return STATUS_BAD_MESSAGE;
            seen = true;
            if (len == 0) { /* rpc.h: data is NULL when len is 0 */
                *payload = (rpc_payload_t){0};
                continue;
            }
            if (in_place) {
                status_t rc = walker_hold(w, (size_t)len, payload, &cap);
                if (rc != STATUS_OK)
                    return rc;
                hold_finish(payload);
                payload->len = (size_t)len;
                continue;
            }
            if (len <= recv_cap && recv_buf != NULL) {
                payload->data = recv_buf;
                payload->owned = false;
            } else {
                payload->data = rpc_buffer_alloc((size_t)len);
                if (payload->data == NULL)
                    return STATUS_NO_MEMORY;
                payload->owned = true;
            }
            payload->len = (size_t)len;
            payload->copied = (size_t)len;
            if (!walker_copy(w, payload->data, (size_t)len))
                return STATUS_BAD_MESSAGE;
            continue;
        }
        /* Re-emit the key, then the value by wire type. */
        if (!scratch_reserve(s, 10))
            return STATUS_NO_MEMORY;
        s->len += varint_put(s->buf + s->len, key);
        switch (key & 7) {
        case 0:
            if (!read_varint(w, s, true, &len))
                return STATUS_BAD_MESSAGE;
            break;
        case 1:
            if (!keep_bytes(w, s, 8, total))
                return STATUS_BAD_MESSAGE;
            break;
        case 2:
            if (!read_varint(w, s, true, &len) || !keep_bytes(w, s, len, total))
                return STATUS_BAD_MESSAGE;
            break;
        case 5:
            if (!keep_bytes(w, s, 4, total))
                return STATUS_BAD_MESSAGE;
            break;
        default: /* groups (3, 4) and invalid types */
            return STATUS_BAD_MESSAGE;
        }
    }
}

/* ---- checks on the wire, before unpacking ---------------------------------------------------- */

/* One walk of a message's bytes against its descriptor, before protobuf-c unpacks anything:
 * - protobuf-c hands string fields over as C strings, so a NUL inside one would silently cut it
 *   ("alpha-main\0evil" read as "alpha-main"), and proto3 requires strings to be UTF-8, which
 *   strict parsers check: every string field, at any depth, must be UTF-8 without NUL;
 * - protobuf-c would build every entry of a repeated field (a million CreateVariables shards cost
 *   half a gigabyte) only for the handler to refuse them: the entries of each repeated field at
 *   the top level are counted against RPC_MAX_REPEATED.
 * Bytes that do not parse end the walk quietly: unpacking then says so. */
typedef struct wire_check {
    const ProtobufCFieldDescriptor *fields[16]; /* top-level repeated fields seen, and */
    uint32_t counts[16];                        /* their entries */
    size_t n_fields;
    char path[256]; /* of the field being walked: "items.key" */
    status_msg_t *err;
    const ProtobufCMessageDescriptor *top;
} wire_check_t;

/* Appends ".name" to the field path, which is `used` bytes long; returns the new length. */
static size_t path_push(wire_check_t *w, size_t used, const char *name)
{
    int n = snprintf(w->path + used, sizeof(w->path) - used, "%s%s", used > 0 ? "." : "", name);

    return n < 0                                ? used
           : used + (size_t)n < sizeof(w->path) ? used + (size_t)n
                                                : sizeof(w->path) - 1;
}

/* Counts one more entry of the top-level repeated field f. */
static status_t count_entry(wire_check_t *w, const ProtobufCFieldDescriptor *f)
{
    size_t i;

    for (i = 0; i < w->n_fields && w->fields[i] != f; i++)
        ;
    if (i == w->n_fields) {
        if (i == sizeof(w->fields) / sizeof(w->fields[0]))
            return STATUS_OK; /* no message of the contract has that many */
        w->fields[w->n_fields++] = f;
    }
    if (++w->counts[i] > RPC_MAX_REPEATED)
        return status_fail(w->err, STATUS_RESOURCE_EXHAUSTED,
                           "%s.%s has more than %d entries; send them in several requests",
                           w->top->short_name, f->name, RPC_MAX_REPEATED);
    return STATUS_OK;
}

static status_t wire_walk(wire_check_t *w, const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                          size_t len, int depth, size_t used)
{
    const uint8_t *end = p + len;

    if (depth > 32)
        return STATUS_OK; /* no message of the contract nests this deep */
    while (p < end) {
        const ProtobufCFieldDescriptor *f;
        uint64_t key, n = 0;

        if (!pb_read_varint(&p, end, &key))
            return STATUS_OK;
        switch (key & 7) {
        case 0:
            if (!pb_read_varint(&p, end, &n))
                return STATUS_OK;
            continue;
        case 1:
        case 5:
            n = (key & 7) == 1 ? 8 : 4;
            if (n > (size_t)(end - p))
                return STATUS_OK;
            p += n;
            continue;
        case 2:
            break;
        default:
            return STATUS_OK;
        }
        if (!pb_read_varint(&p, end, &n) || n > (size_t)(end - p))
            return STATUS_OK;
        f = key >> 3 <= UINT32_MAX
                ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3))
                : NULL;
        if (f != NULL && f->type == PROTOBUF_C_TYPE_STRING &&
            !utf8_valid_text((const char *)p, (size_t)n)) {
            path_push(w, used, f->name);
            return status_fail(w->err, STATUS_INVALID_ARGUMENT,
                               "%s.%s holds a NUL byte or is not UTF-8: strings must be UTF-8 "
                               "text",
                               w->top->short_name, w->path);
        }
        if (f != NULL && depth == 0 && f->label == PROTOBUF_C_LABEL_REPEATED)
            STATUS_CHECK(count_entry(w, f));
        if (f != NULL && f->type == PROTOBUF_C_TYPE_MESSAGE) {
            STATUS_CHECK(
                wire_walk(w, f->descriptor, p, (size_t)n, depth + 1, path_push(w, used, f->name)));
            w->path[used] = '\0';
        }
        p += n;
    }
    return STATUS_OK;
}

status_t rpc_check_wire(const ProtobufCMessageDescriptor *desc, const void *buf, size_t len,
                        status_msg_t *err)
{
    wire_check_t w = {.err = err, .top = desc};

    return wire_walk(&w, desc, buf, len, 0, 0);
}

status_t rpc_decode(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb, void *recv_buf,
                    size_t recv_cap, bool in_place, ProtobufCMessage **ret_msg,
                    rpc_payload_t *ret_payload, status_msg_t *err)
{
    rpc_payload_t payload = {0};
    scratch_t s = {.len = 0, .cap = SCRATCH_INITIAL};
    walker_t w = {.have = false};
    size_t total = grpc_byte_buffer_length(bb);
    ProtobufCMessage *msg = NULL;
    status_t rc;

    s.buf = s.inline_buf;
    if (!grpc_byte_buffer_reader_init(&w.reader, bb))
        return STATUS_BAD_MESSAGE;
    if (rpc_has_payload_field(desc))
        rc = split_fields(&w, total, &s, recv_buf, recv_cap, in_place && worth_holding(bb),
                          &payload);
    else
        rc = keep_bytes(&w, &s, total, total) ? STATUS_OK : STATUS_BAD_MESSAGE;
    if (w.have)
        grpc_slice_unref(w.slice);
    grpc_byte_buffer_reader_destroy(&w.reader);
    if (rc == STATUS_OK)
        rc = rpc_check_wire(desc, s.buf, s.len, err);
    else
        status_fail(err, rc, "the body does not parse as %s", desc->name);
    if (rc == STATUS_OK) {
        msg = protobuf_c_message_unpack(desc, NULL, s.len, s.buf);
        if (msg == NULL)
            rc = status_fail(err, STATUS_BAD_MESSAGE, "the body does not parse as %s", desc->name);
    }
    if (s.buf != s.inline_buf)
        free(s.buf);
    if (rc != STATUS_OK) {
        rpc_payload_done(&payload);
        return rc;
    }
    *ret_msg = msg;
    if (ret_payload != NULL)
        *ret_payload = payload;
    else
        rpc_payload_done(&payload);
    return STATUS_OK;
}
