#define _POSIX_C_SOURCE 200809L
#include "checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "files/safetensors.h"

#define NAME_MAX_LEN 256

/* ---- saving ------------------------------------------------------------------------------- */

/* The tensors of the shard file: each variable, then its slots; names in names[]. */
static status_t shard_tensors(trainer_t *t, st_tensor_t *out, char (*names)[NAME_MAX_LEN],
                              size_t *ret_n, status_msg_t *err)
{
    model_t *m = trainer_model(t);
    const optimizer_config_t *opt = trainer_optimizer(t);
    size_t n = 0, n_slots = optimizer_slot_count(opt);

    for (size_t i = 0; i < model_param_count(m); i++) {
        model_param_t *p = model_param(m, i);
        float *slots = trainer_slots(t, i);
        st_tensor_t v = {.name = p->name, .dtype = ST_F32, .rank = p->rank, .data = p->value};
        for (int d = 0; d < p->rank; d++)
            v.shape[d] = (uint64_t)p->shape[d];
        out[n++] = v;
        for (size_t k = 0; k < n_slots; k++) {
            if (slots == NULL)
                return status_fail(err, STATUS_INVALID_USAGE, "the trainer keeps no slots");
            out[n] = v;
            out[n].name =
                ckpt_slot_tensor(names[n], NAME_MAX_LEN, p->name, optimizer_slot_name(opt, k));
            out[n++].data = slots + k * p->n;
        }
    }
    *ret_n = n;
    return STATUS_OK;
}

static status_t write_shard(trainer_t *t, const char *path, status_msg_t *err)
{
    size_t cap = model_param_count(trainer_model(t)) * (1 + OPTIMIZER_MAX_SLOTS), n = 0;
    st_tensor_t *tensors = calloc(cap + 1, sizeof(*tensors));
    char(*names)[NAME_MAX_LEN] = calloc(cap + 1, sizeof(*names));
    char file[4096];
    status_t rc;

    if (tensors == NULL || names == NULL) {
        rc = status_fail(err, STATUS_NO_MEMORY, "out of memory");
    } else {
        snprintf(file, sizeof(file), "%s/%s", path, TRAIN_CKPT_FILE);
        rc = shard_tensors(t, tensors, names, &n, err);
        if (rc == STATUS_OK)
            rc = st_write_file(file, tensors, n, NULL, 0, NULL, err);
    }
    free(tensors);
    free(names);
    return rc;
}

/* The manifest of a one-file checkpoint: every variable whole in TRAIN_CKPT_FILE. */
static status_t fill_manifest(trainer_t *t, const job_t *job, const train_position_t *pos,
                              ckpt_manifest_t *m, status_msg_t *err)
{
    static char *files[] = {TRAIN_CKPT_FILE};
    model_t *model = trainer_model(t);
    const optimizer_config_t *opt = trainer_optimizer(t);
    size_t n = model_param_count(model);

    *m = (ckpt_manifest_t){
        .step = pos->step,
        .job = job->name,
        .job_hash = job->source_hash,
        .wall_time = clock_wall_s(),
        .optimizer = (char *)optimizer_kind_name(opt->kind),
        .iterations = trainer_iterations(t),
        .learning_rate = trainer_learning_rate(t, trainer_iterations(t)),
        .n_slots = optimizer_slot_count(opt),
        .files = files,
        .n_files = 1,
        .n_vars = n,
        .n_data = 1,
        .n_rng = model_rng_count(model),
    };
    memcpy(m->epoch_sums, pos->epoch_sums, sizeof(m->epoch_sums));
    m->has_last_epoch = pos->has_last_epoch;
    m->last_loss = pos->last_loss;
    m->last_accuracy = pos->last_accuracy;
    m->metric_sums = (double *)pos->metric_sums; /* borrowed, as the strings */
    m->n_metric_sums = pos->metric_sums != NULL ? job->metric_width : 0;
    m->last_metrics = (double *)pos->last_metrics;
    m->n_last_metrics = pos->last_metrics != NULL ? (size_t)job->n_metrics : 0;
    m->metric_signature = job_metrics_signature(job);
    m->slots = calloc(m->n_slots + 1, sizeof(*m->slots));
    m->vars = calloc(n + 1, sizeof(*m->vars));
    m->data = calloc(1, sizeof(*m->data));
    m->rng = calloc(m->n_rng + 1, sizeof(*m->rng));
    ckpt_part_t *parts = calloc(n + 1, sizeof(*parts));
    if (m->slots == NULL || m->vars == NULL || m->data == NULL || m->rng == NULL || parts == NULL) {
        free(parts);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    for (size_t k = 0; k < m->n_slots; k++)
        m->slots[k] = (char *)optimizer_slot_name(opt, k);
    for (size_t i = 0; i < n; i++) {
        model_param_t *p = model_param(model, i);
        parts[i] = (ckpt_part_t){.file = files[0], .tensor = p->name};
        m->vars[i] =
            (ckpt_var_t){.name = p->name, .rank = p->rank, .parts = &parts[i], .n_parts = 1};
        for (int d = 0; d < p->rank; d++)
            m->vars[i].shape[d] = (uint64_t)p->shape[d];
    }
    m->data[0] = (ckpt_data_pos_t){.worker = 0, .epoch = pos->epoch, .batch = pos->batch};
    for (size_t i = 0; i < m->n_rng; i++)
        m->rng[i] = *model_rng_state(model, i);
    return STATUS_OK;
}

/* Frees what fill_manifest allocated (the strings are borrowed). */
static void drop_manifest(ckpt_manifest_t *m)
{
    free(m->vars != NULL ? m->vars[0].parts : NULL);
    free(m->vars);
    free(m->slots);
    free(m->data);
    free(m->rng);
}

status_t train_ckpt_save(trainer_t *t, const job_t *job, const train_position_t *pos,
                         status_msg_t *err)
{
    ckpt_manifest_t m;
    pb_buf_t json = {0};
    char *path = NULL;
    status_t rc = ckpt_begin(job->checkpoint_dir, pos->step, &path, err);

    if (rc == STATUS_ALREADY_EXISTS) /* this very state is on disk (a run resumed from it) */
        return STATUS_OK;
    STATUS_CHECK(rc);
    rc = write_shard(t, path, err);
    if (rc == STATUS_OK)
        rc = fill_manifest(t, job, pos, &m, err);
    if (rc == STATUS_OK) {
        ckpt_manifest_encode(&m, &json);
        rc = json.failed ? status_fail(err, STATUS_NO_MEMORY, "out of memory") : STATUS_OK;
    }
    drop_manifest(&m);
    if (rc == STATUS_OK)
        rc = ckpt_commit(job->checkpoint_dir, pos->step, json.data, json.len, job->checkpoint_keep,
                         err);
    pb_buf_free(&json);
    free(path);
    return rc;
}

/* ---- finding and restoring ---------------------------------------------------------------- */

status_t train_ckpt_find(const job_t *job, char **ret_path, ckpt_manifest_t *ret, status_msg_t *err)
{
    int64_t step;
    status_t rc;

    memset(ret, 0, sizeof(*ret));
    STATUS_CHECK(ckpt_latest(job->checkpoint_dir, &step, ret_path, err));
    rc = ckpt_read_manifest(*ret_path, ret, err);
    if (rc == STATUS_OK)
        rc = ckpt_check_optimizer(*ret_path, ret, optimizer_kind_name(job->optimizer.kind),
                                  optimizer_slot_count(&job->optimizer), err);
    if (rc == STATUS_OK && (ret->n_data != 1 || ret->step != step || ret->n_files != 1))
        rc = status_fail(err, STATUS_DATA_LOSS,
                         "%s: the manifest does not describe one-device training at step %lld",
                         *ret_path, (long long)step);
    if (rc != STATUS_OK) {
        ckpt_manifest_free(ret);
        free(*ret_path);
        *ret_path = NULL;
    }
    return rc;
}

/* The open shard files of one restore, by name. */
typedef struct shard_files {
    const char *dir;
    st_file_t **files;
    char **names;
    size_t n;
} shard_files_t;

static status_t shard_open(shard_files_t *s, const char *name, st_file_t **ret, status_msg_t *err)
{
    char path[4096];

    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) {
            *ret = s->files[i];
            return STATUS_OK;
        }
    snprintf(path, sizeof(path), "%s/%s", s->dir, name);
    st_file_t **files = realloc(s->files, (s->n + 1) * sizeof(*files));
    if (files != NULL)
        s->files = files;
    char **names = realloc(s->names, (s->n + 1) * sizeof(*names));
    if (names != NULL)
        s->names = names;
    if (files == NULL || names == NULL || (s->names[s->n] = strdup(name)) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    status_t rc = st_open(path, &s->files[s->n], err);
    if (rc == STATUS_NOT_FOUND)
        rc = status_fail(err, STATUS_DATA_LOSS, "the manifest names %s, which is missing", path);
    if (rc != STATUS_OK) {
        free(s->names[s->n]);
        return rc;
    }
    *ret = s->files[s->n++];
    return STATUS_OK;
}

static void shard_close(shard_files_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        st_close(s->files[i]);
        free(s->names[i]);
    }
    free(s->files);
    free(s->names);
}

/* Rows of a variable of this shape (a scalar is one row), and floats per row. */
static void row_geometry(const model_param_t *p, uint64_t *ret_rows, uint64_t *ret_row_len)
{
    *ret_rows = p->rank > 0 ? (uint64_t)p->shape[0] : 1;
    *ret_row_len = *ret_rows > 0 ? p->n / *ret_rows : 0;
}

/* The part's tensor `name` in its file: float32, rows of the variable's row shape, inside it. */
static status_t find_part_tensor(shard_files_t *s, const ckpt_part_t *part, const char *name,
                                 const model_param_t *p, const st_info_t **ret, st_file_t **ret_f,
                                 status_msg_t *err)
{
    uint64_t rows, row_len;
    st_file_t *f;
    const st_info_t *t;

    STATUS_CHECK(shard_open(s, part->file, &f, err));
    row_geometry(p, &rows, &row_len);
    if ((t = st_find(f, name)) == NULL)
        return status_fail(err, STATUS_DATA_LOSS, "%s: no tensor %s, which the manifest names",
                           st_path(f), name);
    bool fits = t->dtype == ST_F32 && t->rank == (p->rank > 0 ? p->rank : 1) && part->row <= rows &&
                (p->rank == 0 || t->shape[0] <= rows - part->row);
    for (int d = 1; fits && d < p->rank; d++)
        fits = t->shape[d] == (uint64_t)p->shape[d];
    if (!fits || t->elements % (row_len ? row_len : 1) != 0)
        return status_fail(err, STATUS_DATA_LOSS,
                           "%s: tensor %s (%s, %d dimensions) does not fit rows from %llu of the "
                           "model's %s",
                           st_path(f), name, st_dtype_name(t->dtype), t->rank,
                           (unsigned long long)part->row, p->name);
    *ret = t;
    *ret_f = f;
    return STATUS_OK;
}

/* Checks (read = false) or reads (read = true) variable p and its slots from the parts. */
static status_t load_var(shard_files_t *s, const ckpt_var_t *v, model_param_t *p, float *slots,
                         const ckpt_manifest_t *m, bool read, status_msg_t *err)
{
    uint64_t rows, row_len, next = 0;

    row_geometry(p, &rows, &row_len);
    for (size_t k = 0; k < v->n_parts; k++) {
        const ckpt_part_t *part = &v->parts[k];
        uint64_t elements = 0;
        char name[NAME_MAX_LEN];
        if (part->row != next)
            return status_fail(err, STATUS_DATA_LOSS,
                               "the manifest's parts of %s leave a gap or overlap at row %llu",
                               v->name, (unsigned long long)next);
        for (size_t j = 0; j <= m->n_slots; j++) {
            const char *tensor =
                j == 0 ? part->tensor
                       : ckpt_slot_tensor(name, sizeof(name), part->tensor, m->slots[j - 1]);
            const st_info_t *t = NULL;
            st_file_t *f = NULL;
            STATUS_CHECK(find_part_tensor(s, part, tensor, p, &t, &f, err));
            if (j == 0)
                elements = t->elements;
            else if (t->elements != elements)
                return status_fail(err, STATUS_DATA_LOSS, "%s: slot %s is not the size of %s",
                                   st_path(f), tensor, part->tensor);
            if (!read || (j > 0 && slots == NULL))
                continue;
            float *dst = (j == 0 ? p->value : slots + (j - 1) * p->n) + part->row * row_len;
            STATUS_CHECK(st_read(f, t, dst, err));
            STATUS_CHECK(ckpt_check_floats(st_path(f), tensor, dst, (size_t)elements,
                                           j > 0 && ckpt_slot_nonnegative(m->slots[j - 1]), err));
        }
        next += row_len ? elements / row_len : 1;
    }
    if (next != rows)
        return status_fail(err, STATUS_DATA_LOSS,
                           "the manifest's parts of %s cover %llu of its %llu rows", v->name,
                           (unsigned long long)next, (unsigned long long)rows);
    return STATUS_OK;
}

/* The manifest's variable named like p, checked against p's shape. */
static status_t match_var(const char *path, const ckpt_manifest_t *m, const model_param_t *p,
                          const ckpt_var_t **ret, status_msg_t *err)
{
    for (size_t i = 0; i < m->n_vars; i++) {
        const ckpt_var_t *v = &m->vars[i];
        if (strcmp(v->name, p->name) != 0)
            continue;
        bool same = v->rank == p->rank;
        for (int d = 0; same && d < p->rank; d++)
            same = v->shape[d] == (uint64_t)p->shape[d];
        if (!same)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s holds %s with another shape than the model's: a checkpoint of "
                               "a different model",
                               path, p->name);
        *ret = v;
        return STATUS_OK;
    }
    return status_fail(err, STATUS_BAD_CONFIG,
                       "%s has no variable %s: a checkpoint of a different model", path, p->name);
}

static status_t load_all(model_t *model, float *const *slots, shard_files_t *s, const char *path,
                         const ckpt_manifest_t *m, bool read, status_msg_t *err)
{
    if (m->n_vars != model_param_count(model))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s holds %zu variables, the model %zu: a checkpoint of a different "
                           "model",
                           path, m->n_vars, model_param_count(model));
    /* none: a parameter-server job's, whose streams are each worker's (data[].rng) */
    if (m->n_rng != 0 && m->n_rng != model_rng_count(model))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s has %zu dropout streams, the model %zu dropout layers", path,
                           m->n_rng, model_rng_count(model));
    for (size_t i = 0; i < model_param_count(model); i++) {
        model_param_t *p = model_param(model, i);
        const ckpt_var_t *v = NULL;
        STATUS_CHECK(match_var(path, m, p, &v, err));
        STATUS_CHECK(load_var(s, v, p, slots != NULL ? slots[i] : NULL, m, read, err));
    }
    return STATUS_OK;
}

status_t ckpt_load_model(model_t *model, float *const *slots, const char *path,
                         const ckpt_manifest_t *m, status_msg_t *err)
{
    shard_files_t s = {.dir = path};
    status_t rc;

    rc = load_all(model, slots, &s, path, m, false, err);
    if (rc == STATUS_OK)
        rc = load_all(model, slots, &s, path, m, true, err);
    shard_close(&s);
    if (rc != STATUS_OK)
        return rc;
    for (size_t i = 0; i < m->n_rng; i++)
        *model_rng_state(model, i) = m->rng[i];
    /* one worker's parameter-server checkpoint: that worker's streams */
    if (m->n_rng == 0 && m->n_data == 1 && m->data[0].n_rng == model_rng_count(model))
        for (size_t i = 0; i < m->data[0].n_rng; i++)
            *model_rng_state(model, i) = m->data[0].rng[i];
    return STATUS_OK;
}

status_t train_ckpt_restore(trainer_t *t, const char *path, const ckpt_manifest_t *m,
                            status_msg_t *err)
{
    model_t *model = trainer_model(t);
    size_t n = model_param_count(model);
    float **slots = calloc(n + 1, sizeof(*slots));
    status_t rc;

    if (slots == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++)
        slots[i] = trainer_slots(t, i);
    rc = ckpt_load_model(model, slots, path, m, err);
    free(slots);
    if (rc == STATUS_OK)
        trainer_set_iterations(t, m->iterations);
    return rc;
}

status_t ckpt_open_any(const char *path, char **ret_path, ckpt_manifest_t *ret, status_msg_t *err)
{
    int64_t step;
    status_t rc;

    memset(ret, 0, sizeof(*ret));
    *ret_path = NULL;
    rc = ckpt_read_manifest(path, ret, err);
    if (rc == STATUS_OK) {
        *ret_path = strdup(path);
        return *ret_path != NULL ? STATUS_OK : status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    if (rc != STATUS_NOT_FOUND)
        return rc;
    STATUS_CHECK(ckpt_latest(path, &step, ret_path, err));
    rc = ckpt_read_manifest(*ret_path, ret, err);
    if (rc != STATUS_OK) {
        free(*ret_path);
        *ret_path = NULL;
    }
    return rc;
}
