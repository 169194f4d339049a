/* Fuzz target: the chief's job journal (chief/journal.c over common/files/journal.h), which a
 * restarted chief reads from its --state-dir before it serves anyone.
 *
 * Input: one mode byte, then either the journal file's bytes (mode even), or (mode odd) the
 * records' payloads, each after "\n#@rec\n", which the target frames with their checksums so
 * that mutations reach the records' decoding and the table rather than stopping at a checksum.
 * A journal that is read gives a table that, written out again
 * as a rewrite does, reads back as the same jobs (ids, names, states, the next id) and joined
 * workers, and in which no id appears twice. */
#include <stdlib.h>
#include <string.h>

#include "../../chief/chief.h"
#include "../../chief/internal.h"
#include "files/journal.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

static coordinator_t *table_new(chief_opts_t *opts)
{
    coordinator_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        abort();
    c->opts = opts;
    c->cap_workers = CHIEF_MAX_JOINED; /* none listed: every worker in the journal joined */
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_cond_init(&c->watch_cv, NULL);
    return c;
}

static void table_free(coordinator_t *c)
{
    while (c->jobs != NULL) {
        chief_job_t *j = c->jobs;
        c->jobs = j->next;
        chief_job_free(j);
    }
    for (size_t i = 0; i < c->n_joining; i++)
        free(c->joining[i]);
    free(c->joining);
    pthread_cond_destroy(&c->watch_cv);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void check_same(coordinator_t *a, coordinator_t *b)
{
    const chief_job_t *x = a->jobs, *y = b->jobs;

    for (; x != NULL && y != NULL; x = x->next, y = y->next) {
        if (strcmp(x->id, y->id) != 0 || strcmp(x->name, y->name) != 0 || x->state != y->state ||
            x->recovered != y->recovered || x->progress.step != y->progress.step)
            fuzz_fail("journal", "job %s read back as %s (state %d, then %d)", x->id, y->id,
                      (int)x->state, (int)y->state);
        for (const chief_job_t *z = x->next; z != NULL; z = z->next)
            if (strcmp(x->id, z->id) == 0)
                fuzz_fail("journal", "job %s is in the table twice", x->id);
    }
    if (x != NULL || y != NULL)
        fuzz_fail("journal", "the table read back has a different number of jobs");
    if (a->n_joining != b->n_joining)
        fuzz_fail("journal", "%zu joined workers read back as %zu", a->n_joining, b->n_joining);
    for (size_t i = 0; i < a->n_joining; i++)
        if (strcmp(a->joining[i], b->joining[i]) != 0)
            fuzz_fail("journal", "joined worker %s read back as %s", a->joining[i], b->joining[i]);
    if (a->next_id != b->next_id)
        fuzz_fail("journal", "the next id read back is %u, not %u", b->next_id, a->next_id);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    chief_opts_t opts = {0};
    coordinator_t *c;
    pb_buf_t framed = {0};
    uint8_t *copy;
    status_msg_t err = {0};
    status_t rc;

    if (size < 1)
        return 0;
    /* the chief's own defaults: its limits decide which ended jobs stay in the table */
    if (config_defaults(&chief_table, &opts, &err) != STATUS_OK)
        fuzz_fail("journal", "the chief's defaults: %s", err.text);
    if (data[0] & 1) {
        fuzz_part_t parts[64];
        size_t n = fuzz_split(data + 1, size - 1, "\n#@rec\n", parts, 64);
        pb_put_raw(&framed, JOURNAL_MAGIC, JOURNAL_HEADER_LEN);
        for (size_t i = 1; i < n; i++) /* parts[0]: before the first record */
            journal_frame(&framed, parts[i].data, parts[i].len);
        if (framed.failed)
            abort();
        copy = (uint8_t *)fuzz_copy(framed.data, framed.len);
        size = framed.len;
    } else {
        copy = (uint8_t *)fuzz_copy(data + 1, size - 1);
        size--;
    }
    c = table_new(&opts);
    rc = chief_journal_replay(c, copy, size, "journal", &err);

    fuzz_check_error("journal", rc, &err);
    if (rc == STATUS_OK) {
        pb_buf_t b = {0};
        coordinator_t *again = table_new(&opts);
        pb_put_raw(&b, JOURNAL_MAGIC, JOURNAL_HEADER_LEN);
        if (chief_journal_encode(c, &b, &err) != STATUS_OK)
            fuzz_fail("journal", "the table cannot be written out: %s", err.text);
        if (chief_journal_replay(again, b.data, b.len, "rewritten", &err) != STATUS_OK)
            fuzz_fail("journal", "the table written out cannot be read back: %s", err.text);
        check_same(c, again);
        table_free(again);
        pb_buf_free(&b);
    }
    free(copy);
    pb_buf_free(&framed);
    table_free(c);
    config_done(&chief_table, &opts);
    return 0;
}
