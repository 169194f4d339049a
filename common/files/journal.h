/* An append-only journal of records, each durable when journal_append returns: the chief's job
 * table survives a crash of the chief (--state-dir).
 *
 * The file: an 8-byte header "TSJRNL\r\n" (the \r\n catches a text-mode copy), then records,
 * each a little-endian u32 length, a little-endian u32 masked CRC-32C of the payload (as
 * TFRecord masks it) and the payload. A record is appended with one write() and fdatasync(); a
 * crash mid-append leaves a torn last record, which opening drops (the file is truncated back to
 * the last whole record). Damage anywhere else is an error naming the file and the offset: a
 * journal is never read past a record it cannot trust.
 *
 * One process uses a journal at a time: opening takes an exclusive lock on PATH.lock and keeps it
 * until journal_close. */
#ifndef TESSERA_FILES_JOURNAL_H
#define TESSERA_FILES_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "files/pb.h"

#define JOURNAL_MAGIC      "TSJRNL\r\n"
#define JOURNAL_HEADER_LEN 8
#define JOURNAL_MAX_RECORD (1u << 30)

typedef struct journal journal_t;

/* Called with each record in order; an error stops the reading and is returned. */
typedef status_t (*journal_record_fn)(void *arg, const uint8_t *rec, size_t len, status_msg_t *err);

/* Reads a whole journal held in memory (name: for errors). *ret_valid is the length of the
 * header and the whole records before a torn tail (len when there is none). STATUS_DATA_LOSS: not
 * a journal, or a damaged record that is not the last. */
status_t journal_scan(const uint8_t *buf, size_t len, const char *name, journal_record_fn fn,
                      void *arg, size_t *ret_valid, status_msg_t *err);

/* Opens (creating it and its directory when missing) and locks the journal at path, passes its
 * records to fn, and drops a torn tail (*ret_dropped: its bytes, 0 if none). */
status_t journal_open(const char *path, journal_record_fn fn, void *arg, journal_t **ret,
                      uint64_t *ret_dropped, status_msg_t *err);

/* Appends one record and waits until it is on the disk. */
status_t journal_append(journal_t *j, const void *rec, size_t len, status_msg_t *err);

/* Frames one record onto out, for journal_replace. */
void journal_frame(pb_buf_t *out, const void *rec, size_t len);

/* Replaces the whole journal with framed records (without the header), atomically: after a
 * crash the journal is either the old one or the new one. Appends go to the new one. */
status_t journal_replace(journal_t *j, const pb_buf_t *records, status_msg_t *err);

/* Bytes in the journal now. */
uint64_t journal_size(const journal_t *j);

const char *journal_path(const journal_t *j);

/* Closes and unlocks. NULL-safe. */
void journal_close(journal_t *j);

#endif
