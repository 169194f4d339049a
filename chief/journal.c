/* The chief's job journal (--state-dir): every submission, start and end of a job is appended
 * and fsynced before the chief acts on it, so that a chief killed at any moment and started
 * again has the same job table: queued jobs still queued, ended ones still listed, and the job
 * that was running queued first, marked recovered, to go on from its newest checkpoint
 * (runner.c). Opening rewrites the journal compact (one record per job kept), and so does a job's
 * end once the file has grown well past that. The file format is common/files/journal.h; the
 * records are tessera.v1.JournalRecord. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "files/journal.h"
#include "internal.h"
#include "tessera/v1/journal.pb-c.h"

#define JOURNAL_NAME        "journal"
#define JOURNAL_SLACK_BYTES (64u << 20) /* growth past the compact size before a rewrite */
#define JOURNAL_MAX_UNENDED (CHIEF_MAX_QUEUED + 1)

/* ---- reading ------------------------------------------------------------------------------ */

typedef struct replay {
    coordinator_t *c;
    const char *name;
    size_t n; /* records read */
} replay_t;

static chief_job_t *find_exact(coordinator_t *c, const char *id)
{
    for (chief_job_t *j = c->jobs; j != NULL; j = j->next)
        if (strcmp(j->id, id) == 0)
            return j;
    return NULL;
}

static bool printable(const char *s, size_t max)
{
    size_t n = strlen(s);

    if (n == 0 || n >= max)
        return false;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}

static bool state_valid(Tessera__V1__JobState s)
{
    return s >= TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED &&
           s <= TESSERA__V1__JOB_STATE__JOB_STATE_CANCELLED;
}

/* The number after the id's last '-': ids continue past it. */
static void note_id(coordinator_t *c, const char *id)
{
    const char *dash = strrchr(id, '-');
    char *end;
    unsigned long n;

    if (dash == NULL || dash[1] < '0' || dash[1] > '9')
        return;
    n = strtoul(dash + 1, &end, 10);
    if (*end == '\0' && n > c->next_id && n < 0xffffffffu)
        c->next_id = (unsigned)n;
}

static void set_progress(chief_job_t *j, const Tessera__V1__JobProgress *p)
{
    tessera__v1__job_progress__init(&j->progress);
    if (p == NULL) {
        chief_job_metrics_init(j);
        return;
    }
    j->progress.step = p->step;
    j->progress.total_steps = p->total_steps;
    j->progress.epoch = p->epoch;
    j->progress.loss = p->loss;
    j->progress.accuracy = p->accuracy;
    j->progress.examples_per_second = p->examples_per_second;
    j->progress.test_loss = p->test_loss;
    j->progress.test_accuracy = p->test_accuracy;
    j->progress.evaluated = p->evaluated;
    /* a job whose file was read again knows; a journal from before the field says nothing */
    j->progress.no_accuracy =
        p->no_accuracy || (j->job.model.n_layers > 0 && !job_reports_accuracy(&j->job));
    j->progress.elapsed_seconds = p->elapsed_seconds;
    j->progress.train_seconds = p->train_seconds;
    /* the journal's metrics: the job's when its file was read again (a job to go on with),
     * else (an ended job) as the journal names them */
    if (j->job.n_metrics == 0 || (size_t)j->job.n_metrics == p->n_metrics)
        chief_job_metrics_adopt(j, p);
    else
        chief_job_metrics_init(j);
}

static size_t unended(const coordinator_t *c)
{
    size_t n = 0;
    for (const chief_job_t *j = c->jobs; j != NULL; j = j->next)
        n += !chief_job_ended(j);
    return n;
}

/* A job as submitted, or as the last rewrite left it. */
static status_t replay_job(replay_t *r, const Tessera__V1__JournalJob *jj, status_msg_t *err)
{
    coordinator_t *c = r->c;
    chief_job_t *j = NULL;
    bool ended = jj->state >= TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED;

    if (!state_valid(jj->state))
        return status_fail(err, STATUS_DATA_LOSS, "%s: record %zu: job state %d is not one",
                           r->name, r->n, (int)jj->state);
    if (find_exact(c, jj->id) != NULL)
        return status_fail(err, STATUS_DATA_LOSS, "%s: record %zu: job %s appears twice", r->name,
                           r->n, jj->id);
    if (!ended && jj->request == NULL)
        return status_fail(err, STATUS_DATA_LOSS, "%s: record %zu: job %s has no job file", r->name,
                           r->n, jj->id);
    if (!ended && unended(c) >= JOURNAL_MAX_UNENDED)
        return status_fail(err, STATUS_DATA_LOSS,
                           "%s: record %zu: more than %d jobs waiting, more than a chief keeps",
                           r->name, r->n, JOURNAL_MAX_UNENDED);
    if (!ended) {
        status_msg_t jerr = {0};
        if (chief_job_new(jj->request, &j, &jerr) != STATUS_OK) {
            /* a job this chief no longer accepts (another version): listed, failed */
            if ((j = calloc(1, sizeof(*j))) == NULL)
                return status_fail(err, STATUS_NO_MEMORY, "out of memory");
            snprintf(j->reason, sizeof(j->reason),
                     "cannot be taken up again after the chief restarted: %.400s", jerr.text);
            j->state = TESSERA__V1__JOB_STATE__JOB_STATE_FAILED;
            j->finished_at = jj->submitted_at;
        }
    } else if ((j = calloc(1, sizeof(*j))) == NULL) {
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    } else {
        j->state = jj->state;
        snprintf(j->reason, sizeof(j->reason), "%s", jj->reason);
        snprintf(j->failed_task, sizeof(j->failed_task), "%s", jj->failed_task);
        j->fault = (int)jj->fault;
        j->finished_at = jj->finished_at;
    }
    if (!chief_job_ended(j))
        j->state = jj->state;
    snprintf(j->id, sizeof(j->id), "%s", jj->id);
    snprintf(j->name, sizeof(j->name), "%s", jj->name);
    j->submitted_at = jj->submitted_at;
    j->started_at = jj->started_at;
    set_progress(j, jj->progress);
    chief_jobs_link(c, j);
    note_id(c, jj->id);
    chief_jobs_prune(c);
    return STATUS_OK;
}

/* A worker that had joined: it joins again (the runner takes it in before the first job). */
static status_t replay_worker(replay_t *r, const char *address, status_msg_t *err)
{
    status_msg_t why = {0};
    size_t index;
    bool added;

    if (chief_register_worker(r->c, address, &index, &added, &why) != STATUS_OK)
        return status_fail(err, STATUS_DATA_LOSS, "%s: record %zu: worker %.100s: %.300s", r->name,
                           r->n, address, why.text);
    return STATUS_OK;
}

static status_t replay_change(replay_t *r, const Tessera__V1__JournalRecord *rec, status_msg_t *err)
{
    const Tessera__V1__JournalJob *jj = rec->job       ? rec->job
                                        : rec->started ? rec->started
                                                       : rec->ended;
    chief_job_t *j;

    if (rec->change_case == TESSERA__V1__JOURNAL_RECORD__CHANGE_WORKER)
        return replay_worker(r, rec->worker, err);
    if (rec->change_case == TESSERA__V1__JOURNAL_RECORD__CHANGE_NEXT_ID) {
        if (rec->next_id > r->c->next_id && rec->next_id < 0xffffffffu)
            r->c->next_id = rec->next_id;
        return STATUS_OK;
    }
    if (jj == NULL)
        return status_fail(err, STATUS_DATA_LOSS, "%s: record %zu is of no kind this chief knows",
                           r->name, r->n);
    if (!printable(jj->id, sizeof(j->id)) || strlen(jj->name) >= sizeof(j->name))
        return status_fail(err, STATUS_DATA_LOSS, "%s: record %zu: a job id or name is not one",
                           r->name, r->n);
    if (rec->change_case == TESSERA__V1__JOURNAL_RECORD__CHANGE_JOB)
        return replay_job(r, jj, err);
    if ((j = find_exact(r->c, jj->id)) == NULL)
        return status_fail(err, STATUS_DATA_LOSS, "%s: record %zu: job %s was never submitted",
                           r->name, r->n, jj->id);
    if (chief_job_ended(j))
        return status_fail(err, STATUS_DATA_LOSS, "%s: record %zu: job %s had already ended",
                           r->name, r->n, jj->id);
    if (rec->change_case == TESSERA__V1__JOURNAL_RECORD__CHANGE_STARTED) {
        j->state = TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING;
        if (j->started_at == 0)
            j->started_at = jj->started_at;
        return STATUS_OK;
    }
    if (jj->state < TESSERA__V1__JOB_STATE__JOB_STATE_SUCCEEDED || !state_valid(jj->state))
        return status_fail(err, STATUS_DATA_LOSS, "%s: record %zu: job %s ends in state %d",
                           r->name, r->n, jj->id, (int)jj->state);
    j->state = jj->state;
    snprintf(j->reason, sizeof(j->reason), "%s", jj->reason);
    snprintf(j->failed_task, sizeof(j->failed_task), "%s", jj->failed_task);
    j->fault = (int)jj->fault;
    j->finished_at = jj->finished_at;
    set_progress(j, jj->progress);
    chief_job_release(j);
    chief_jobs_prune(r->c);
    return STATUS_OK;
}

static status_t replay_record(void *arg, const uint8_t *buf, size_t len, status_msg_t *err)
{
    replay_t *r = arg;
    Tessera__V1__JournalRecord *rec = tessera__v1__journal_record__unpack(NULL, len, buf);
    status_t rc;

    r->n++;
    if (rec == NULL)
        return status_fail(err, STATUS_DATA_LOSS, "%s: record %zu cannot be decoded", r->name,
                           r->n);
    rc = replay_change(r, rec, err);
    protobuf_c_message_free_unpacked(&rec->base, NULL);
    return rc;
}

/* After the records: what was running goes first again, recovered; the rest stays queued. */
static void settle(coordinator_t *c)
{
    for (chief_job_t *j = c->jobs; j != NULL; j = j->next) {
        if (chief_job_ended(j))
            continue;
        j->recovered = j->state == TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING || j->started_at > 0;
        j->state = TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED;
        if (j->recovered)
            chief_job_event(c, j,
                            "the chief restarted while the job ran: it goes on from its newest "
                            "checkpoint");
        else
            chief_job_event(c, j, "queued (the chief restarted)");
    }
}

status_t chief_journal_replay(coordinator_t *c, const uint8_t *buf, size_t len, const char *name,
                              status_msg_t *err)
{
    replay_t r = {.c = c, .name = name};
    size_t valid;

    STATUS_CHECK(journal_scan(buf, len, name, replay_record, &r, &valid, err));
    settle(c);
    return STATUS_OK;
}

/* ---- writing ------------------------------------------------------------------------------ */

/* Packs a record of kind `change` about j: the whole job (with its files while it has not
 * ended), or what a start or an end changes. NULL when out of memory. */
static uint8_t *pack(const chief_job_t *j, Tessera__V1__JournalRecord__ChangeCase change,
                     size_t *ret_len)
{
    Tessera__V1__JournalRecord rec = TESSERA__V1__JOURNAL_RECORD__INIT;
    Tessera__V1__JournalJob jj = TESSERA__V1__JOURNAL_JOB__INIT;
    Tessera__V1__SubmitJobRequest req = TESSERA__V1__SUBMIT_JOB_REQUEST__INIT;
    Tessera__V1__JobProgress progress = j->progress;
    Tessera__V1__SubmitJobRequest__FilesEntry *entries = NULL, **ep = NULL;
    uint8_t *out;

    jj.id = (char *)j->id;
    rec.change_case = change;
    if (change == TESSERA__V1__JOURNAL_RECORD__CHANGE_STARTED) {
        jj.started_at = j->started_at;
        rec.started = &jj;
    } else {
        jj.state = j->state;
        jj.reason = (char *)j->reason;
        jj.failed_task = (char *)j->failed_task;
        jj.fault = (Tessera__V1__Fault)j->fault;
        jj.finished_at = j->finished_at;
        jj.progress = &progress;
        if (change == TESSERA__V1__JOURNAL_RECORD__CHANGE_ENDED)
            rec.ended = &jj;
        else
            rec.job = &jj;
    }
    if (change == TESSERA__V1__JOURNAL_RECORD__CHANGE_JOB) {
        jj.name = (char *)j->name;
        jj.submitted_at = j->submitted_at;
        jj.started_at = j->started_at;
        if (j->recovered) /* still to go on from its checkpoint */
            jj.state = TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING;
    }
    if (change == TESSERA__V1__JOURNAL_RECORD__CHANGE_JOB && j->spec != NULL) {
        entries = calloc(j->n_files + 1, sizeof(*entries));
        ep = calloc(j->n_files + 1, sizeof(*ep));
        if (entries == NULL || ep == NULL) {
            free(entries);
            free(ep);
            return NULL;
        }
        for (size_t i = 0; i < j->n_files; i++) {
            tessera__v1__submit_job_request__files_entry__init(&entries[i]);
            entries[i].key = j->files[i].path;
            entries[i].value.data = j->files[i].data;
            entries[i].value.len = j->files[i].len;
            ep[i] = &entries[i];
        }
        req.job_spec = j->spec;
        req.job_path = j->path;
        req.n_files = j->n_files;
        req.files = ep;
        jj.request = &req;
    }
    *ret_len = tessera__v1__journal_record__get_packed_size(&rec);
    if ((out = malloc(*ret_len + 1)) != NULL)
        tessera__v1__journal_record__pack(&rec, out);
    free(entries);
    free(ep);
    return out;
}

static status_t append(coordinator_t *c, const chief_job_t *j,
                       Tessera__V1__JournalRecord__ChangeCase change, status_msg_t *err)
{
    size_t len;
    uint8_t *rec;
    status_t rc;

    if (c->journal == NULL)
        return STATUS_OK;
    if ((rec = pack(j, change, &len)) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory for the journal");
    rc = journal_append(c->journal, rec, len, err);
    free(rec);
    return rc;
}

/* A worker record, packed; NULL when out of memory. */
static uint8_t *pack_worker(const char *address, size_t *ret_len)
{
    Tessera__V1__JournalRecord rec = TESSERA__V1__JOURNAL_RECORD__INIT;
    uint8_t *buf;

    rec.change_case = TESSERA__V1__JOURNAL_RECORD__CHANGE_WORKER;
    rec.worker = (char *)address;
    *ret_len = tessera__v1__journal_record__get_packed_size(&rec);
    if ((buf = malloc(*ret_len + 1)) != NULL)
        tessera__v1__journal_record__pack(&rec, buf);
    return buf;
}

/* A worker record, framed onto out; false when out of memory. */
static bool frame_worker(pb_buf_t *out, const char *address)
{
    size_t len;
    uint8_t *buf = pack_worker(address, &len);

    if (buf != NULL)
        journal_frame(out, buf, len);
    free(buf);
    return buf != NULL;
}

status_t chief_journal_encode(coordinator_t *c, pb_buf_t *out, status_msg_t *err)
{
    /* the workers that joined past the --worker list, taken in or still to be */
    for (size_t w = c->opts->worker.n; w < c->n_workers + c->n_joining; w++)
        if (!frame_worker(out, w < c->n_workers ? rpc_channel_target(c->workers[w])
                                                : c->joining[w - c->n_workers]))
            return status_fail(err, STATUS_NO_MEMORY, "out of memory for the journal");
    for (chief_job_t *j = c->jobs; j != NULL; j = j->next) {
        size_t len;
        uint8_t *rec = pack(j, TESSERA__V1__JOURNAL_RECORD__CHANGE_JOB, &len);
        if (rec == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory for the journal");
        journal_frame(out, rec, len);
        free(rec);
    }
    /* the id counter, past the ended jobs --max-finished-jobs let go */
    {
        Tessera__V1__JournalRecord rec = TESSERA__V1__JOURNAL_RECORD__INIT;
        uint8_t buf[16];
        rec.change_case = TESSERA__V1__JOURNAL_RECORD__CHANGE_NEXT_ID;
        rec.next_id = c->next_id;
        journal_frame(out, buf, tessera__v1__journal_record__pack(&rec, buf));
    }
    if (out->failed)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory for the journal");
    return STATUS_OK;
}

/* Rewrites the journal as one record per job in the table. */
static status_t compact(coordinator_t *c, status_msg_t *err)
{
    pb_buf_t b = {0};
    status_t rc = chief_journal_encode(c, &b, err);

    if (rc == STATUS_OK)
        rc = journal_replace(c->journal, &b, err);
    if (rc == STATUS_OK)
        c->journal_compact = journal_size(c->journal);
    pb_buf_free(&b);
    return rc;
}

status_t chief_journal_submitted(coordinator_t *c, chief_job_t *j, status_msg_t *err)
{
    return append(c, j, TESSERA__V1__JOURNAL_RECORD__CHANGE_JOB, err);
}

void chief_journal_worker(coordinator_t *c, const char *address)
{
    status_msg_t err = {0};
    size_t len;
    uint8_t *rec;

    if (c->journal == NULL)
        return;
    rec = pack_worker(address, &len);
    if (rec == NULL || journal_append(c->journal, rec, len, &err) != STATUS_OK)
        LOG_ERR(CHIEF, "worker %s joined but is not in the journal: %s", address,
                err.text[0] ? err.text : "out of memory");
    free(rec);
}

void chief_journal_started(coordinator_t *c, chief_job_t *j)
{
    status_msg_t err = {0};

    if (append(c, j, TESSERA__V1__JOURNAL_RECORD__CHANGE_STARTED, &err) != STATUS_OK)
        LOG_ERR(CHIEF, "job %s: its start is not in the journal: %s", j->id, err.text);
}

void chief_journal_ended(coordinator_t *c, chief_job_t *j)
{
    status_msg_t err = {0};

    if (c->journal == NULL)
        return;
    if (append(c, j, TESSERA__V1__JOURNAL_RECORD__CHANGE_ENDED, &err) != STATUS_OK) {
        LOG_ERR(CHIEF,
                "job %s: its end is not in the journal (a restarted chief would run it "
                "again): %s",
                j->id, err.text);
        return;
    }
    if (journal_size(c->journal) > 2 * c->journal_compact + JOURNAL_SLACK_BYTES &&
        compact(c, &err) != STATUS_OK)
        LOG_WARNING(CHIEF, "cannot rewrite the journal compact: %s", err.text);
}

status_t chief_journal_open(coordinator_t *c, status_msg_t *err)
{
    const char *dir = c->opts->state_dir;
    replay_t r = {.c = c};
    uint64_t dropped = 0;
    size_t n;
    char *path;
    status_t rc;

    if (dir == NULL || dir[0] == '\0')
        return STATUS_OK;
    n = strlen(dir) + sizeof("/" JOURNAL_NAME);
    if ((path = malloc(n)) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    snprintf(path, n, "%s/%s", dir, JOURNAL_NAME);
    r.name = path;
    pthread_mutex_lock(&c->mu);
    rc = journal_open(path, replay_record, &r, &c->journal, &dropped, err);
    if (rc == STATUS_OK) {
        settle(c);
        if (dropped > 0)
            LOG_WARNING(CHIEF, "%s: dropped the last %llu bytes, a record cut short by a crash",
                        path, (unsigned long long)dropped);
        rc = compact(c, err);
    }
    if (rc == STATUS_OK && c->jobs != NULL) {
        size_t jobs = 0;
        for (chief_job_t *j = c->jobs; j != NULL; j = j->next)
            jobs++;
        LOG_NOTICE(CHIEF, "%s: %zu jobs, %zu of them still to run", path, jobs, unended(c));
    }
    pthread_mutex_unlock(&c->mu);
    free(path);
    return rc;
}

void chief_journal_close(coordinator_t *c)
{
    journal_close(c->journal);
    c->journal = NULL;
}
