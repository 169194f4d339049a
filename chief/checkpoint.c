/* Checkpoints of a parameter-server job (files/checkpoint.h). The runner pauses the closures
 * first (dispatch_run returns with nothing in flight), so the PS tasks hold the state after
 * exactly `step` steps. Then every PS that holds shards of the job writes them, all at once (one
 * Save each, ps-<task>.safetensors in DIR/ckpt-<step>/ on its own disk), and only when every one
 * has answered does the chief write the manifest: the variables' parts per PS file, the
 * optimizer, each worker's data position and dropout streams, the epoch's sums, and who wrote
 * which file. Killed at any moment, the previous checkpoint stays the newest complete one.
 *
 * With a shared filesystem the checkpoint is one directory. When each PS writes to a disk of
 * its own, DIR/ckpt-<step>/ on each PS host holds that PS's file at the same path, and the
 * manifest on the chief's disk names them (files, writers). */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "chief_ckpt.h"
#include "fanout.h"
#include "files/checkpoint.h"

#define PART_NAME_MAX 640

/* "ps-<p>.safetensors" */
static void ps_file(char *buf, size_t len, size_t p)
{
    snprintf(buf, len, "ps-%zu.safetensors", p);
}

/* Which PS tasks hold shards of the plan. */
static bool *ps_used(const coordinator_t *c, const plan_t *plan)
{
    bool *used = calloc(c->n_ps + 1, sizeof(*used));

    for (size_t k = 0; used != NULL && k < plan->n_places; k++)
        used[plan->places[k].ps_task] = true;
    return used;
}

/* ---- the manifest ------------------------------------------------------------------------- */

/* The strings a manifest borrows. */
typedef struct manifest_store {
    char (*files)[48];
    char (*parts)[PART_NAME_MAX];
    char (*tasks)[32];
    ckpt_part_t *part_list;
} manifest_store_t;

static void manifest_drop(ckpt_manifest_t *m, manifest_store_t *ms)
{
    free(m->slots);
    free(m->vars);
    free(m->files);
    free(m->data);
    free(m->writers);
    free(ms->files);
    free(ms->parts);
    free(ms->tasks);
    free(ms->part_list);
}

/* The manifest of a checkpoint at pos whose shards had had `updates` updates at most (the
 * optimizer's step, which a window of accumulate_steps, a Keras archive's optimizer going on and
 * a closure run again all make differ from the step; 0: none known, the step's count). */
static status_t build_manifest(coordinator_t *c, chief_job_t *j, const plan_t *plan,
                               const chief_position_t *pos, uint64_t updates, ckpt_manifest_t *m,
                               manifest_store_t *ms, status_msg_t *err)
{
    const optimizer_config_t *opt = &j->job.optimizer;
    int64_t iterations = updates > 0 ? (int64_t)updates : j->updates_from + pos->step;
    bool *used = ps_used(c, plan);
    size_t n = plan->n_places;

    memset(ms, 0, sizeof(*ms));
    *m = (ckpt_manifest_t){.step = pos->step,
                           .job = j->job.name ? j->job.name : j->name,
                           .job_hash = j->job.source_hash,
                           .wall_time = clock_wall_s(),
                           .optimizer = (char *)optimizer_kind_name(opt->kind),
                           .iterations = iterations,
                           .learning_rate = optimizer_learning_rate(opt, iterations),
                           .n_slots = optimizer_slot_count(opt),
                           .has_last_epoch = pos->has_last_epoch,
                           .last_loss = pos->last_loss,
                           .last_accuracy = pos->last_accuracy,
                           /* borrowed, not freed with the manifest's lists */
                           .metric_sums = (double *)pos->metric_sums,
                           .n_metric_sums = pos->metric_sums != NULL ? j->job.metric_width : 0,
                           .last_metrics = (double *)pos->last_metrics,
                           .n_last_metrics =
                               pos->last_metrics != NULL ? (size_t)j->job.n_metrics : 0,
                           .metric_signature = job_metrics_signature(&j->job)};
    memcpy(m->epoch_sums, pos->epoch_sums, sizeof(m->epoch_sums));
    m->slots = calloc(m->n_slots + 1, sizeof(*m->slots));
    m->vars = calloc(n + 1, sizeof(*m->vars));
    m->files = calloc(c->n_ps + 1, sizeof(*m->files));
    m->writers = calloc(c->n_ps + 1, sizeof(*m->writers));
    m->data = calloc(pos->n_workers + 1, sizeof(*m->data));
    ms->files = calloc(c->n_ps + 1, sizeof(*ms->files));
    ms->tasks = calloc(c->n_ps + 1, sizeof(*ms->tasks));
    ms->parts = calloc(n + 1, sizeof(*ms->parts));
    ms->part_list = calloc(n + 1, sizeof(*ms->part_list));
    if (!used || !m->slots || !m->vars || !m->files || !m->writers || !m->data || !ms->files ||
        !ms->tasks || !ms->parts || !ms->part_list) {
        free(used);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (size_t k = 0; k < m->n_slots; k++)
        m->slots[k] = (char *)optimizer_slot_name(opt, k);
    for (size_t p = 0; p < c->n_ps; p++) {
        ps_file(ms->files[p], sizeof(ms->files[p]), p);
        snprintf(ms->tasks[p], sizeof(ms->tasks[p]), "ps:%zu", p);
        if (!used[p])
            continue;
        m->files[m->n_files++] = ms->files[p];
        m->writers[m->n_writers++] =
            (ckpt_writer_t){.file = ms->files[p],
                            .task = ms->tasks[p],
                            .address = (char *)rpc_channel_target(c->ps[p])};
    }
    free(used);
    /* The plan lists each variable's shards together, by index: rows in order. */
    for (size_t k = 0; k < n; k++) {
        const Tessera__V1__VariableShard *sh = &plan->shards[k];
        const Tessera__V1__ShardPlacement *pl = &plan->places[k];
        ckpt_var_t *v = m->n_vars ? &m->vars[m->n_vars - 1] : NULL;
        if (v == NULL || strcmp(v->name, sh->variable) != 0) {
            v = &m->vars[m->n_vars++];
            *v = (ckpt_var_t){
                .name = sh->variable, .rank = (int)sh->n_full_shape, .parts = &ms->part_list[k]};
            for (size_t d = 0; d < sh->n_full_shape && d < ST_MAX_RANK; d++)
                v->shape[d] = (uint64_t)sh->full_shape[d];
        }
        ms->part_list[k] =
            (ckpt_part_t){.file = ms->files[pl->ps_task],
                          .tensor = (char *)ckpt_part_tensor(
                              ms->parts[k], PART_NAME_MAX, sh->variable, sh->shard, sh->num_shards),
                          .row = (uint64_t)sh->row_offset};
        v->n_parts++;
    }
    for (size_t w = 0; w < pos->n_workers; w++)
        m->data[m->n_data++] = (ckpt_data_pos_t){.worker = (int64_t)w,
                                                 .epoch = pos->workers[w].epoch,
                                                 .batch = pos->workers[w].batch,
                                                 .end = pos->workers[w].end,
                                                 .rng = pos->workers[w].rng,
                                                 .n_rng = pos->workers[w].n_rng};
    return STATUS_OK;
}

/* ---- save --------------------------------------------------------------------------------- */

/* One Save per PS that holds shards, all at once; *ret_updates gets the most updates a
 * trainable shard had (the optimizer's step: what the manifest's iterations says). */
static status_t save_shards(coordinator_t *c, chief_job_t *j, const plan_t *plan, const char *path,
                            int64_t step, uint64_t *ret_updates, status_msg_t *err)
{
    Tessera__V1__SaveRequest *reqs = calloc(c->n_ps + 1, sizeof(*reqs));
    char(*files)[48] = calloc(c->n_ps + 1, sizeof(*files));
    fanout_t *f = calloc(c->n_ps + 1, sizeof(*f));
    size_t *which = calloc(c->n_ps + 1, sizeof(*which)), n = 0;
    bool *used = ps_used(c, plan);
    int64_t *keep = NULL;
    size_t n_keep = 0;
    status_t rc = STATUS_OK;

    if (!reqs || !files || !f || !which || !used) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        goto out;
    }
    /* the complete checkpoints the chief keeps: each PS removes its files of the others */
    rc = ckpt_complete_steps(j->job.checkpoint_dir, &keep, &n_keep, err);
    for (size_t p = 0; p < c->n_ps && rc == STATUS_OK; p++) {
        if (!used[p])
            continue;
        ps_file(files[p], sizeof(files[p]), p);
        tessera__v1__save_request__init(&reqs[p]);
        reqs[p].job = j->id;
        reqs[p].directory = (char *)path;
        reqs[p].step = step;
        reqs[p].file = files[p];
        reqs[p].keep_steps = keep;
        reqs[p].n_keep_steps = n_keep;
        which[n] = p;
        f[n++] = (fanout_t){.ch = c->ps[p],
                            .method = RPC_PS_SAVE,
                            .req = &reqs[p].base,
                            .timeout_ms = CLOSURE_TIMEOUT};
    }
    if (rc != STATUS_OK)
        goto out;
    fanout_run(f, n);
    *ret_updates = 0;
    for (size_t i = 0; i < n && rc == STATUS_OK; i++) {
        const Tessera__V1__SaveResponse *r = (const void *)f[i].resp;
        if (f[i].rc != STATUS_OK)
            rc = status_fail(err, f[i].rc, "ps:%zu (%s) could not write its shards: %s", which[i],
                             rpc_channel_target(c->ps[which[i]]), f[i].err.message);
        else if (r != NULL && r->updates > *ret_updates)
            *ret_updates = r->updates;
    }
    fanout_done(f, n);
out:
    free(reqs);
    free(files);
    free(f);
    free(which);
    free(used);
    free(keep);
    return rc;
}

status_t chief_ckpt_save(coordinator_t *c, chief_job_t *j, const plan_t *plan,
                         const chief_position_t *pos, status_msg_t *err)
{
    const char *dir = j->job.checkpoint_dir;
    ckpt_manifest_t m;
    manifest_store_t ms;
    pb_buf_t json = {0};
    char *path = NULL;
    double t0 = clock_now_s();
    uint64_t updates = 0;
    status_t rc = ckpt_begin(dir, pos->step, &path, err);

    if (rc == STATUS_ALREADY_EXISTS) /* this very state is on disk (the job resumed from it) */
        return STATUS_OK;
    STATUS_CHECK(rc);
    rc = save_shards(c, j, plan, path, pos->step, &updates, err);
    if (rc == STATUS_OK) {
        rc = build_manifest(c, j, plan, pos, updates, &m, &ms, err);
        if (rc == STATUS_OK)
            ckpt_manifest_encode(&m, &json);
        manifest_drop(&m, &ms);
    }
    if (rc == STATUS_OK && json.failed)
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    if (rc == STATUS_OK)
        rc = ckpt_commit(dir, pos->step, json.data, json.len, j->job.checkpoint_keep, err);
    if (rc == STATUS_OK)
        LOG_INFO(CHIEF, "job %s: checkpoint at step %" PRId64 " in %s (%.2f s)", j->id, pos->step,
                 path, clock_now_s() - t0);
    pb_buf_free(&json);
    free(path);
    return rc;
}

/* ---- resume ------------------------------------------------------------------------------- */

status_t chief_ckpt_find(chief_job_t *j, char **ret_path, ckpt_manifest_t *ret, status_msg_t *err)
{
    const optimizer_config_t *opt = &j->job.optimizer;
    int64_t step;
    status_t rc;

    memset(ret, 0, sizeof(*ret));
    *ret_path = NULL;
    STATUS_CHECK(ckpt_latest(j->job.checkpoint_dir, &step, ret_path, err));
    rc = ckpt_read_manifest(*ret_path, ret, err);
    if (rc == STATUS_OK)
        rc = ckpt_check_optimizer(*ret_path, ret, optimizer_kind_name(opt->kind),
                                  optimizer_slot_count(opt), err);
    if (rc == STATUS_OK && ret->step != step)
        rc = status_fail(err, STATUS_DATA_LOSS, "%s: the manifest says step %" PRId64, *ret_path,
                         ret->step);
    if (rc != STATUS_OK) {
        ckpt_manifest_free(ret);
        free(*ret_path);
        *ret_path = NULL;
    }
    return rc;
}

/* The manifest's variable of that name, or NULL. */
static const ckpt_var_t *find_var(const ckpt_manifest_t *m, const char *name)
{
    for (size_t i = 0; i < m->n_vars; i++)
        if (strcmp(m->vars[i].name, name) == 0)
            return &m->vars[i];
    return NULL;
}

/* Every shard of the plan is in the checkpoint where the plan puts it (same PS file, tensor and
 * rows), every variable with its shape, and the checkpoint has no other variable. */
static status_t check_layout(const coordinator_t *c, const plan_t *plan, const char *path,
                             const ckpt_manifest_t *m, status_msg_t *err)
{
    size_t n_vars = 0;

    for (size_t k = 0; k < plan->n_places; k++) {
        const Tessera__V1__VariableShard *sh = &plan->shards[k];
        const ckpt_var_t *v = find_var(m, sh->variable);
        char file[48], tensor[PART_NAME_MAX];
        bool found = false, same;
        if (v == NULL)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s has no variable %s: it is a checkpoint of another model", path,
                               sh->variable);
        same = v->rank == (int)sh->n_full_shape;
        for (size_t d = 0; same && d < sh->n_full_shape; d++)
            same = v->shape[d] == (uint64_t)sh->full_shape[d];
        if (!same)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: variable %s has another shape than the model's: it is a "
                               "checkpoint of another model",
                               path, sh->variable);
        if (k == 0 || strcmp(plan->shards[k - 1].variable, sh->variable) != 0)
            n_vars++;
        ps_file(file, sizeof(file), (size_t)plan->places[k].ps_task);
        ckpt_part_tensor(tensor, sizeof(tensor), sh->variable, sh->shard, sh->num_shards);
        for (size_t i = 0; i < v->n_parts && !found; i++)
            found = v->parts[i].row == (uint64_t)sh->row_offset &&
                    strcmp(v->parts[i].file, file) == 0 && strcmp(v->parts[i].tensor, tensor) == 0;
        if (!found || v->n_parts != (size_t)sh->num_shards)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s holds variable %s in %zu parts placed otherwise than on this "
                               "cluster (%d shards over %zu ps, shard %d on ps:%d): resume with "
                               "the PS count and partitioner it was written with, or export it "
                               "and start from the export with tessera train --init-from",
                               path, sh->variable, v->n_parts, sh->num_shards, c->n_ps, sh->shard,
                               plan->places[k].ps_task);
    }
    if (n_vars != m->n_vars)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s holds %zu variables, the model %zu: it is a checkpoint of another "
                           "model",
                           path, m->n_vars, n_vars);
    return STATUS_OK;
}

status_t chief_ckpt_restore(coordinator_t *c, chief_job_t *j, const plan_t *plan, const char *path,
                            const ckpt_manifest_t *m, status_msg_t *err)
{
    Tessera__V1__RestoreRequest *reqs = calloc(c->n_ps + 1, sizeof(*reqs));
    char(*files)[4096] = calloc(c->n_ps + 1, sizeof(*files));
    fanout_t *f = calloc(c->n_ps + 1, sizeof(*f));
    size_t *which = calloc(c->n_ps + 1, sizeof(*which)), n = 0;
    bool *used = ps_used(c, plan);
    status_t rc = STATUS_OK;

    if (!reqs || !files || !f || !which || !used) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
        goto out;
    }
    rc = check_layout(c, plan, path, m, err);
    for (size_t p = 0; p < c->n_ps && rc == STATUS_OK; p++) {
        char name[48];
        if (!used[p])
            continue;
        ps_file(name, sizeof(name), p);
        snprintf(files[p], sizeof(files[p]), "%s/%s", path, name);
        tessera__v1__restore_request__init(&reqs[p]);
        reqs[p].job = j->id;
        reqs[p].file = files[p];
        which[n] = p;
        f[n++] = (fanout_t){.ch = c->ps[p],
                            .method = RPC_PS_RESTORE,
                            .req = &reqs[p].base,
                            .timeout_ms = CLOSURE_TIMEOUT};
    }
    if (rc != STATUS_OK)
        goto out;
    fanout_run(f, n);
    for (size_t i = 0; i < n && rc == STATUS_OK; i++)
        if (f[i].rc != STATUS_OK)
            rc =
                status_fail(err, f[i].rc, "ps:%zu (%s) could not restore %s: %s", which[i],
                            rpc_channel_target(c->ps[which[i]]), files[which[i]], f[i].err.message);
    fanout_done(f, n);
out:
    free(reqs);
    free(files);
    free(f);
    free(which);
    free(used);
    return rc;
}

void chief_ckpt_answer(coordinator_t *c, chief_job_t *j, status_t rc, int64_t step,
                       const char *error)
{
    atomic_store(&j->ckpt_wanted, false);
    j->ckpt_rc = rc;
    j->ckpt_step = step;
    snprintf(j->ckpt_error, sizeof(j->ckpt_error), "%s", error);
    j->ckpt_done++;
    pthread_cond_broadcast(&c->cv);
}
