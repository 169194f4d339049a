/* Fuzz target: TFRecord files (common/files/tfrecord.h), plain or gzip, and the protobuf wire
 * reader (files/pb.h) over every record, as the Example and event readers walk them.
 *
 * Input: the file. It is written to a memfd and read by path, as a job's data files are. */
#include <string.h>

#include "files/pb.h"
#include "files/tfrecord.h"
#include "fuzz_common.h"

#define MAX_RECORD (1u << 20)
#define MAX_DEPTH  4

static fuzz_file_t file;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    fuzz_file_open(&file, "tessera-fuzz.tfrecord");
    return 0;
}

/* Walks a message's fields, descending into every length-delimited one that parses. */
static void walk(const uint8_t *data, size_t len, int depth)
{
    pb_reader_t r = {data, data + len};
    pb_field_t f;
    int rc;

    while ((rc = pb_next(&r, &f)) == 1) {
        if (f.wire == PB_LEN && (f.data < data || f.data + f.len > data + len))
            fuzz_fail("tfrecord", "a field of %zu bytes outside its message", f.len);
        if (f.wire == PB_LEN && depth < MAX_DEPTH)
            walk(f.data, f.len, depth + 1);
    }
    if (r.p > r.end)
        fuzz_fail("tfrecord", "the protobuf reader went %td bytes past the end", r.p - r.end);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tfrecord_reader_t *r = NULL;
    status_msg_t err = {0};
    const uint8_t *rec;
    uint64_t offset = 0;
    size_t len;
    status_t rc;
    bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;

    fuzz_file_set(&file, data, size);
    rc = tfrecord_open(file.path, MAX_RECORD, &r, &err);
    while (rc == STATUS_OK) {
        rc = tfrecord_next(r, &rec, &len, &err);
        if (rc != STATUS_OK || rec == NULL)
            break;
        if (len > MAX_RECORD)
            fuzz_fail("tfrecord", "a record of %zu bytes over the limit", len);
        offset += 16 + len;
        if (tfrecord_offset(r) != offset)
            fuzz_fail("tfrecord", "offset %llu after records totalling %llu",
                      (unsigned long long)tfrecord_offset(r), (unsigned long long)offset);
        walk(rec, len, 0);
    }
    fuzz_check_error("tfrecord", rc, &err);
    /* A plain file read to its end without an error was all records. */
    if (rc == STATUS_OK && !gz && offset != size)
        fuzz_fail("tfrecord", "read %llu of %zu bytes and called it the end",
                  (unsigned long long)offset, size);
    tfrecord_close(r);
    return 0;
}
