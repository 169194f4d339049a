/* The payload codec: messages with field 15 sent as segments and received with one copy. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "check_run.h"
#include "rpc/internal.h"

static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *p = malloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 2654435761u + seed) >> 13);
    return p;
}

/* The whole body of bb in one malloc'd buffer. */
static uint8_t *body(grpc_byte_buffer *bb, size_t *ret_len)
{
    grpc_byte_buffer_reader r;
    grpc_slice all;
    uint8_t *out;

    grpc_byte_buffer_reader_init(&r, bb);
    all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    *ret_len = GRPC_SLICE_LENGTH(all);
    out = malloc(*ret_len ? *ret_len : 1);
    memcpy(out, GRPC_SLICE_START_PTR(all), *ret_len);
    grpc_slice_unref(all);
    return out;
}

/* bytes in slices of `piece` bytes, as TCP reads would cut them, after `small` slices of 16. */
static grpc_byte_buffer *sliced(const uint8_t *bytes, size_t len, size_t piece, size_t small)
{
    size_t n = small + (len + piece - 1) / piece, k = 0;
    grpc_slice *s = calloc(n ? n : 1, sizeof(*s));
    grpc_byte_buffer *out;

    for (size_t off = 0, take; off < len; off += take) {
        take = k < small ? 16 : piece;
        take = len - off < take ? len - off : take;
        s[k++] = grpc_slice_from_copied_buffer((const char *)bytes + off, take);
    }
    out = grpc_raw_byte_buffer_create(s, k);
    for (size_t i = 0; i < k; i++)
        grpc_slice_unref(s[i]);
    free(s);
    return out;
}

/* bb's body re-sliced (sliced). */
static grpc_byte_buffer *reslice(grpc_byte_buffer *bb, size_t piece, size_t small)
{
    size_t len;
    uint8_t *bytes = body(bb, &len);
    grpc_byte_buffer *out = sliced(bytes, len, piece, small);

    free(bytes);
    return out;
}

enum { A_LEN = 70000, B_LEN = 62000 };

/* The message in slices of `piece` bytes after `small` slices of 16 (gRPC keeps the bytes of
 * so small a slice inside the grpc_slice itself). */
static void roundtrip(size_t piece, size_t small, bool in_place)
{
    Tessera__V1__EchoRequest req = TESSERA__V1__ECHO_REQUEST__INIT;
    Tessera__V1__TensorRef t = TESSERA__V1__TENSOR_REF__INIT;
    int64_t shape[2] = {1000, 33};
    size_t a_len = A_LEN, b_len = B_LEN;
    uint8_t *a = pattern(a_len, 1), *b = pattern(b_len, 2);
    rpc_iov_t iov[2] = {{a, a_len, NULL, NULL}, {b, b_len, NULL, NULL}};
    grpc_byte_buffer *bb, *sliced;
    ProtobufCMessage *msg;
    rpc_payload_t payload;
    size_t len;

    t.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
    t.n_shape = 2;
    t.shape = shape;
    t.byte_length = a_len + b_len;
    req.tensor = &t;
    ck_assert_int_eq(rpc_encode(&req.base, iov, 2, NULL, &bb, &len), STATUS_OK);
    ck_assert_uint_eq(len, grpc_byte_buffer_length(bb));
    sliced = reslice(bb, piece, small);
    grpc_byte_buffer_destroy(bb);
    ck_assert_int_eq(rpc_decode(&tessera__v1__echo_request__descriptor, sliced, NULL, 0, in_place,
                                &msg, &payload, NULL),
                     STATUS_OK);
    /* the payload holds its own references: the received buffer may go */
    grpc_byte_buffer_destroy(sliced);
    {
        Tessera__V1__EchoRequest *got = (Tessera__V1__EchoRequest *)msg;
        ck_assert_ptr_nonnull(got->tensor);
        ck_assert_int_eq(got->tensor->n_shape, 2);
        ck_assert_int_eq(got->tensor->shape[1], 33);
        ck_assert_uint_eq(got->tensor->byte_length, a_len + b_len);
        ck_assert_uint_eq(got->payload.len, 0); /* the payload is handed out separately */
    }
    ck_assert_uint_eq(payload.len, a_len + b_len);
    if (in_place && piece >= 1024) { /* held where it lies, in the slices' pieces */
        pieces_t pl = rpc_payload_pieces(&payload);
        uint8_t *all = malloc(pl.len);
        size_t at = 0;
        ck_assert_ptr_null(payload.data);
        ck_assert_uint_eq(payload.copied, 0);
        ck_assert_uint_ge(pl.n, (a_len + b_len) / piece);
        for (size_t i = 0; i < pl.n; i++) {
            ck_assert_uint_eq(pl.v[i].at, at);
            at += pl.v[i].len;
        }
        ck_assert_uint_eq(at, pl.len);
        pieces_read(&pl, 0, all, pl.len);
        ck_assert_int_eq(memcmp(all, a, a_len), 0);
        ck_assert_int_eq(memcmp(all + a_len, b, b_len), 0);
        free(all);
    } else { /* one aligned copy: tiny slices are not worth a reference each */
        ck_assert_uint_eq((uintptr_t)payload.data % 64, 0);
        ck_assert_uint_eq(payload.copied, a_len + b_len);
        ck_assert_int_eq(memcmp(payload.data, a, a_len), 0);
        ck_assert_int_eq(memcmp((uint8_t *)payload.data + a_len, b, b_len), 0);
    }
    rpc_payload_done(&payload);
    protobuf_c_message_free_unpacked(msg, NULL);
    free(a);
    free(b);
}

START_TEST(rpc_codec_payload_survives_any_slicing)
{
    for (int in_place = 0; in_place < 2; in_place++) {
        roundtrip(1, 0, in_place);
        roundtrip(7, 0, in_place);
        roundtrip(4096, 0, in_place);
        roundtrip(16384 + 9, 0, in_place);
        roundtrip(1 << 20, 0, in_place);
        /* small slices held first, then more than the first list of references holds */
        roundtrip(1100, 8, in_place);
    }
}
END_TEST

/* A payload (field 15) that comes before the message's other fields, as any protobuf encoder
 * may send it, decodes as one sent last: held in place, or copied once. */
START_TEST(rpc_codec_payload_before_other_fields_decodes)
{
    Tessera__V1__EchoRequest req = TESSERA__V1__ECHO_REQUEST__INIT;
    Tessera__V1__TensorRef t = TESSERA__V1__TENSOR_REF__INIT;
    int64_t shape[2] = {1000, 33};
    size_t pay_len = A_LEN, rest_len, len = 0;
    uint8_t *pay = pattern(pay_len, 3), *rest, *bytes;
    grpc_byte_buffer *bb;

    t.dtype = TESSERA__V1__DTYPE__DTYPE_FLOAT32;
    t.n_shape = 2;
    t.shape = shape;
    t.byte_length = pay_len;
    req.tensor = &t;
    ck_assert_int_eq(rpc_encode(&req.base, NULL, 0, NULL, &bb, &rest_len), STATUS_OK);
    rest = body(bb, &rest_len);
    grpc_byte_buffer_destroy(bb);
    /* field 15, length-delimited (key 122), then the tensor */
    bytes = malloc(16 + pay_len + rest_len);
    bytes[len++] = 122;
    for (uint64_t v = pay_len; v != 0 || len == 1; v >>= 7)
        bytes[len++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    memcpy(bytes + len, pay, pay_len);
    len += pay_len;
    memcpy(bytes + len, rest, rest_len);
    len += rest_len;
    for (int in_place = 0; in_place < 2; in_place++) {
        ProtobufCMessage *msg;
        rpc_payload_t payload;
        uint8_t *got = malloc(pay_len);
        status_msg_t err = {0};
        bb = sliced(bytes, len, 4096, 0);
        ck_assert_msg(rpc_decode(&tessera__v1__echo_request__descriptor, bb, NULL, 0, in_place,
                                 &msg, &payload, &err) == STATUS_OK,
                      "%s", err.text);
        grpc_byte_buffer_destroy(bb);
        {
            Tessera__V1__EchoRequest *r = (Tessera__V1__EchoRequest *)msg;
            ck_assert_ptr_nonnull(r->tensor);
            ck_assert_int_eq(r->tensor->n_shape, 2);
            ck_assert_int_eq(r->tensor->shape[0], 1000);
            ck_assert_uint_eq(r->tensor->byte_length, pay_len);
        }
        ck_assert_uint_eq(payload.len, pay_len);
        ck_assert_uint_eq(payload.copied, in_place ? 0 : pay_len);
        {
            pieces_t pl = rpc_payload_pieces(&payload);
            ck_assert_uint_eq(pl.len, pay_len);
            pieces_read(&pl, 0, got, pay_len);
        }
        ck_assert_int_eq(memcmp(got, pay, pay_len), 0);
        free(got);
        rpc_payload_done(&payload);
        protobuf_c_message_free_unpacked(msg, NULL);
    }
    free(bytes);
    free(rest);
    free(pay);
}
END_TEST

START_TEST(rpc_codec_encoding_is_plain_protobuf)
{
    /* What the codec sends must decode with the stock parser, payload included. */
    Tessera__V1__SinkRequest req = TESSERA__V1__SINK_REQUEST__INIT;
    const char a[] = "hello ", b[] = "world";
    rpc_iov_t iov[2] = {{a, 6, NULL, NULL}, {b, 5, NULL, NULL}};
    grpc_byte_buffer *bb;
    Tessera__V1__SinkRequest *got;
    size_t len;
    uint8_t *all;

    req.checksum = 1;
    ck_assert_int_eq(rpc_encode(&req.base, iov, 2, NULL, &bb, &len), STATUS_OK);
    all = body(bb, &len);
    got = tessera__v1__sink_request__unpack(NULL, len, all);
    ck_assert_ptr_nonnull(got);
    ck_assert(got->checksum);
    ck_assert_uint_eq(got->payload.len, 11);
    ck_assert_int_eq(memcmp(got->payload.data, "hello world", 11), 0);
    tessera__v1__sink_request__free_unpacked(got, NULL);
    free(all);
    grpc_byte_buffer_destroy(bb);
}
END_TEST

START_TEST(rpc_codec_reuses_the_callers_buffer_when_it_fits)
{
    Tessera__V1__EchoResponse resp = TESSERA__V1__ECHO_RESPONSE__INIT;
    uint8_t *data = pattern(5000, 9);
    rpc_iov_t iov = {data, 5000, NULL, NULL};
    void *mine = aligned_alloc(64, 8192);
    grpc_byte_buffer *bb;
    ProtobufCMessage *msg;
    rpc_payload_t p;
    size_t len;

    ck_assert_int_eq(rpc_encode(&resp.base, &iov, 1, NULL, &bb, &len), STATUS_OK);
    ck_assert_int_eq(
        rpc_decode(&tessera__v1__echo_response__descriptor, bb, mine, 8192, false, &msg, &p, NULL),
        STATUS_OK);
    ck_assert_ptr_eq(p.data, mine);
    ck_assert(!p.owned);
    ck_assert_int_eq(memcmp(mine, data, 5000), 0);
    rpc_payload_done(&p); /* not owned: leaves `mine` alone */
    protobuf_c_message_free_unpacked(msg, NULL);
    ck_assert_int_eq(
        rpc_decode(&tessera__v1__echo_response__descriptor, bb, mine, 100, false, &msg, &p, NULL),
        STATUS_OK);
    ck_assert(p.owned);
    ck_assert_ptr_ne(p.data, mine);
    rpc_payload_done(&p);
    protobuf_c_message_free_unpacked(msg, NULL);
    grpc_byte_buffer_destroy(bb);
    free(mine);
    free(data);
}
END_TEST

static status_t decode_bytes(const ProtobufCMessageDescriptor *d, const void *bytes, size_t n)
{
    grpc_slice s = grpc_slice_from_copied_buffer(bytes, n);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    ProtobufCMessage *msg = NULL;
    rpc_payload_t p = {0};
    status_t rc = rpc_decode(d, bb, NULL, 0, false, &msg, &p, NULL);
    if (rc == STATUS_OK) {
        protobuf_c_message_free_unpacked(msg, NULL);
        rpc_payload_done(&p);
    }
    grpc_slice_unref(s);
    grpc_byte_buffer_destroy(bb);
    return rc;
}

START_TEST(rpc_codec_rejects_malformed_bodies)
{
    const ProtobufCMessageDescriptor *d = &tessera__v1__echo_request__descriptor;
    /* payload length beyond the message */
    ck_assert_int_eq(decode_bytes(d,
                                  "\x7a\xff\xff\x03"
                                  "abc",
                                  7),
                     STATUS_BAD_MESSAGE);
    /* truncated varint key */
    ck_assert_int_eq(decode_bytes(d, "\x80", 1), STATUS_BAD_MESSAGE);
    /* the payload field twice */
    ck_assert_int_eq(decode_bytes(d, "\x7a\x01x\x7a\x01y", 6), STATUS_BAD_MESSAGE);
    /* a group wire type */
    ck_assert_int_eq(decode_bytes(d, "\x0b\x0c", 2), STATUS_BAD_MESSAGE);
    /* a nested message whose length runs past the end */
    ck_assert_int_eq(decode_bytes(d, "\x0a\x10\x08", 3), STATUS_BAD_MESSAGE);
    /* the same garbage for a message without a payload field */
    ck_assert_int_eq(
        decode_bytes(&grpc__health__v1__health_check_request__descriptor, "\x0a\x10\x08", 3),
        STATUS_BAD_MESSAGE);
    /* an empty body is a valid empty message */
    ck_assert_int_eq(decode_bytes(d, "", 0), STATUS_OK);
}
END_TEST

/* protobuf-c reads strings up to their first NUL: a string with one inside, or one that is not
 * UTF-8 as proto3 requires, is refused by name at any depth instead of being read cut short. */
START_TEST(rpc_codec_refuses_strings_with_nul_or_bad_utf8_by_field)
{
    static const struct {
        const ProtobufCMessageDescriptor *d;
        const char *bytes;
        size_t n;
        const char *field;
    } cases[] = {
        {&tessera__v1__pull_request__descriptor,
         "\x0a\x0f"
         "alpha-main\0evil",
         17, "PullRequest.job"},
        {&tessera__v1__drop_job_request__descriptor,
         "\x0a\x06"
         "x\0tail",
         8, "DropJobRequest.job"},
        {&tessera__v1__drop_job_request__descriptor, "\x0a\x02\xc3\x28", 4, "DropJobRequest.job"},
        /* items[0].key.variable = "w\xff" */
        {&tessera__v1__pull_request__descriptor, "\x12\x06\x0a\x04\x0a\x02w\xff", 8,
         "PullRequest.items.key.variable"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        grpc_slice sl = grpc_slice_from_copied_buffer(cases[i].bytes, cases[i].n);
        grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
        ProtobufCMessage *msg = NULL;
        rpc_payload_t p = {0};
        status_msg_t err = {0};
        ck_assert_int_eq(rpc_decode(cases[i].d, bb, NULL, 0, false, &msg, &p, &err),
                         STATUS_INVALID_ARGUMENT);
        ck_assert_msg(strstr(err.text, cases[i].field) != NULL, "case %zu: %s", i, err.text);
        grpc_slice_unref(sl);
        grpc_byte_buffer_destroy(bb);
    }
    /* Valid UTF-8 beyond ASCII passes. */
    ck_assert_int_eq(decode_bytes(&tessera__v1__drop_job_request__descriptor,
                                  "\x0a\x04"
                                  "caf\xc3\xa9",
                                  6),
                     STATUS_INVALID_ARGUMENT); /* length 4 cuts the é in half */
    ck_assert_int_eq(decode_bytes(&tessera__v1__drop_job_request__descriptor,
                                  "\x0a\x05"
                                  "caf\xc3\xa9",
                                  7),
                     STATUS_OK);
}
END_TEST

/* A repeated field is counted on the wire before anything is unpacked. */
START_TEST(rpc_codec_refuses_too_many_entries_before_unpacking)
{
    size_t n = RPC_MAX_REPEATED + 1, len = 0;
    uint8_t *bytes = malloc(n * 5);
    grpc_slice sl;
    grpc_byte_buffer *bb;
    ProtobufCMessage *msg = NULL;
    rpc_payload_t p = {0};
    status_msg_t err = {0};

    for (size_t i = 0; i < n; i++) {
        memcpy(bytes + len, "\x1a\x03\x0a\x01v", 5); /* shards { variable: "v" } */
        len += 5;
    }
    sl = grpc_slice_from_copied_buffer((const char *)bytes, len);
    bb = grpc_raw_byte_buffer_create(&sl, 1);
    ck_assert_int_eq(rpc_decode(&tessera__v1__create_variables_request__descriptor, bb, NULL, 0,
                                false, &msg, &p, &err),
                     STATUS_RESOURCE_EXHAUSTED);
    ck_assert_msg(strstr(err.text, "CreateVariablesRequest.shards has more than 65536") != NULL,
                  "%s", err.text);
    grpc_slice_unref(sl);
    grpc_byte_buffer_destroy(bb);
    ck_assert_int_eq(
        decode_bytes(&tessera__v1__create_variables_request__descriptor, bytes, len - 5),
        STATUS_OK);
    free(bytes);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rpc_codec");
    TCase *tc = tcase_create("rpc_codec");

    grpc_init();
    tcase_add_test(tc, rpc_codec_payload_survives_any_slicing);
    tcase_add_test(tc, rpc_codec_payload_before_other_fields_decodes);
    tcase_add_test(tc, rpc_codec_encoding_is_plain_protobuf);
    tcase_add_test(tc, rpc_codec_reuses_the_callers_buffer_when_it_fits);
    tcase_add_test(tc, rpc_codec_rejects_malformed_bodies);
    tcase_add_test(tc, rpc_codec_refuses_strings_with_nul_or_bad_utf8_by_field);
    tcase_add_test(tc, rpc_codec_refuses_too_many_entries_before_unpacking);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
