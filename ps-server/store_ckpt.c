/* Checkpoints of the store: one job's shards on this server to one safetensors file, and back.
 * Names follow files/checkpoint.h: a shard's values are its part's tensor ("NAME" or
 * "NAME/part_K"), each slot "optimizer/TENSOR/SLOT", its version the int64 scalar
 * "optimizer/TENSOR/iterations".
 *
 * Both hold the store lock shared (the job's set of shards cannot change underneath) and each
 * shard's own lock only for one copy of its values and slots into a staging buffer: the disk is
 * written, and read, with no shard lock held, so pushes to other shards go on meanwhile. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files/checkpoint.h"
#include "files/safetensors.h"
#include "store_internal.h"

#define TENSOR_NAME_MAX (2 * STORE_MAX_NAME + 64)

/* The job's shards in file order (variables in creation order, shards by index), with the
 * tensors that describe them: 2 + n_slots per shard. */
typedef struct layout {
    shard_t **shards;
    size_t n_shards;
    st_tensor_t *tensors;
    char (*names)[TENSOR_NAME_MAX];
    size_t n_tensors;
    size_t stage_bytes; /* the biggest shard's values and slots */
} layout_t;

static void layout_free(layout_t *l)
{
    free(l->shards);
    free(l->tensors);
    free(l->names);
}

static status_t layout_of(const sjob_t *j, layout_t *l, store_err_t *err)
{
    size_t per = 2 + j->n_slots, t = 0;

    memset(l, 0, sizeof(*l));
    l->shards = calloc(j->n_shards + 1, sizeof(*l->shards));
    l->tensors = calloc(j->n_shards * per + 1, sizeof(*l->tensors));
    l->names = calloc(j->n_shards * per + 1, sizeof(*l->names));
    if (l->shards == NULL || l->tensors == NULL || l->names == NULL) {
        layout_free(l);
        return store_fail(err, STATUS_NO_MEMORY, j->name, "out of memory for the shard list");
    }
    for (size_t i = 0; i < j->n_vars; i++) {
        const var_t *v = j->vars[i];
        for (size_t k = 0; k < v->n_shards; k++) {
            shard_t *sh = v->shards[k];
            st_tensor_t values = {.dtype = ST_F32, .rank = (int)sh->rank};
            size_t bytes = sh->n * sizeof(float) * (1 + sh->n_slots);
            char *part = l->names[t];
            for (size_t d = 0; d < sh->rank; d++)
                values.shape[d] = (uint64_t)sh->shape[d];
            ckpt_part_tensor(part, TENSOR_NAME_MAX, v->name, sh->index, v->num_shards);
            values.name = part;
            l->tensors[t++] = values;
            for (size_t s = 0; s < sh->n_slots; s++) {
                l->tensors[t] = values;
                l->tensors[t].name = ckpt_slot_tensor(l->names[t], TENSOR_NAME_MAX, part,
                                                      optimizer_slot_name(&j->opt, s));
                t++;
            }
            l->tensors[t] = (st_tensor_t){
                .name = ckpt_slot_tensor(l->names[t], TENSOR_NAME_MAX, part, CKPT_ITERATIONS),
                .dtype = ST_I64};
            t++;
            l->shards[l->n_shards++] = sh;
            if (bytes > l->stage_bytes)
                l->stage_bytes = bytes;
        }
    }
    l->n_tensors = t;
    return STATUS_OK;
}

/* ---- save --------------------------------------------------------------------------------- */

static status_t save_locked(const sjob_t *j, const char *path, uint64_t *ret_bytes,
                            size_t *ret_shards, uint64_t *ret_updates, store_err_t *err)
{
    uint64_t updates = 0;
    layout_t l;
    st_writer_t *w = NULL;
    float *stage = NULL;
    status_msg_t msg = {0};
    status_t rc;

    STATUS_CHECK(layout_of(j, &l, err));
    stage = l.stage_bytes ? malloc(l.stage_bytes) : NULL;
    if (l.stage_bytes && stage == NULL) {
        layout_free(&l);
        return store_fail(err, STATUS_NO_MEMORY, j->name, "out of memory for a %zu-byte stage",
                          l.stage_bytes);
    }
    rc = st_write_begin(path, l.tensors, l.n_tensors, NULL, 0, &w, &msg);
    for (size_t i = 0; i < l.n_shards && rc == STATUS_OK; i++) {
        shard_t *sh = l.shards[i];
        int64_t version;
        /* block by block: a push waits at most for the copy of one block */
        version = (int64_t)store_shard_version(sh);
        if (!sh->var->moving && (uint64_t)version > updates)
            updates = (uint64_t)version;
        for (size_t b = 0; b < sh->n_blocks; b++) {
            size_t first = block_first_row(sh, b) * sh->row_len;
            size_t count = block_n_rows(sh, b) * sh->row_len;
            pthread_mutex_lock(&sh->blocks[b].mu);
            memcpy(stage + first, sh->values + first, count * sizeof(float));
            for (size_t k = 0; k < sh->n_slots; k++)
                memcpy(stage + (1 + k) * sh->n + first, sh->slots + k * sh->n + first,
                       count * sizeof(float));
            pthread_mutex_unlock(&sh->blocks[b].mu);
        }
        rc = st_write_data(w, stage, sh->n * sizeof(float) * (1 + sh->n_slots), &msg);
        if (rc == STATUS_OK)
            rc = st_write_data(w, &version, sizeof(version), &msg);
    }
    if (rc == STATUS_OK)
        rc = st_write_commit(w, ret_bytes, &msg);
    else
        st_write_abort(w);
    if (rc == STATUS_OK && ret_shards != NULL)
        *ret_shards = l.n_shards;
    if (rc == STATUS_OK && ret_updates != NULL)
        *ret_updates = updates;
    free(stage);
    layout_free(&l);
    return rc == STATUS_OK ? rc : store_fail(err, rc, path, "%s", msg.text);
}

status_t store_save(store_t *s, const char *job, const char *path, uint64_t *ret_bytes,
                    size_t *ret_shards, uint64_t *ret_updates, store_err_t *err)
{
    sjob_t *j;
    status_t rc;

    pthread_rwlock_rdlock(&s->lock);
    rc = store_lookup_job(s, job, &j, err);
    if (rc == STATUS_OK)
        rc = save_locked(j, path, ret_bytes, ret_shards, ret_updates, err);
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

/* ---- restore ------------------------------------------------------------------------------ */

/* Every tensor the layout names is in the file with its dtype and shape, and no other. */
static status_t check_file(const st_file_t *f, const layout_t *l, store_err_t *err)
{
    if (st_count(f) != l->n_tensors)
        return store_fail(err, STATUS_BAD_CONFIG, st_path(f),
                          "%s holds %zu tensors, but this server's %zu shards of the job need %zu: "
                          "it is another server's file or another model's",
                          st_path(f), st_count(f), l->n_shards, l->n_tensors);
    for (size_t i = 0; i < l->n_tensors; i++) {
        const st_tensor_t *want = &l->tensors[i];
        const st_info_t *have = st_find(f, want->name);
        bool same;
        if (have == NULL)
            return store_fail(err, STATUS_BAD_CONFIG, want->name,
                              "%s has no tensor %s: it is another server's file or another model's",
                              st_path(f), want->name);
        same = have->dtype == want->dtype && have->rank == want->rank;
        for (int d = 0; same && d < want->rank; d++)
            same = have->shape[d] == want->shape[d];
        if (!same) {
            char shape[160];
            int64_t dims[ST_MAX_RANK];
            for (int d = 0; d < want->rank; d++)
                dims[d] = (int64_t)want->shape[d];
            return store_fail(err, STATUS_BAD_CONFIG, want->name,
                              "%s: tensor %s is %s with %d dimensions, but the shard is %s %s",
                              st_path(f), want->name, st_dtype_name(have->dtype), have->rank,
                              st_dtype_name(want->dtype),
                              store_shape_str(dims, (size_t)want->rank, shape, sizeof(shape)));
        }
    }
    return STATUS_OK;
}

/* Reads shard i's tensors into the stage and checks them; *ret_version gets its version. */
static status_t read_shard(const st_file_t *f, const sjob_t *j, const layout_t *l, size_t i,
                           size_t first, float *stage, int64_t *ret_version, store_err_t *err)
{
    const shard_t *sh = l->shards[i];
    status_msg_t msg = {0};

    for (size_t k = 0; k <= sh->n_slots; k++) {
        const char *name = l->tensors[first + k].name;
        float *dst = stage + k * sh->n;
        if (st_read(f, st_find(f, name), dst, &msg) != STATUS_OK ||
            ckpt_check_floats(st_path(f), name, dst, sh->n,
                              k > 0 && ckpt_slot_nonnegative(optimizer_slot_name(&j->opt, k - 1)),
                              &msg) != STATUS_OK)
            return store_fail(err, msg.status, name, "%s", msg.text);
    }
    const char *it = l->tensors[first + 1 + sh->n_slots].name;
    if (st_read(f, st_find(f, it), ret_version, &msg) != STATUS_OK)
        return store_fail(err, msg.status, it, "%s", msg.text);
    if (*ret_version < 0)
        return store_fail(err, STATUS_DATA_LOSS, it, "%s: tensor %s is %" PRId64 ", not a count",
                          st_path(f), it, *ret_version);
    return STATUS_OK;
}

static status_t restore_locked(const sjob_t *j, const st_file_t *f, size_t *ret_shards,
                               store_err_t *err)
{
    layout_t l;
    float *stage = NULL;
    status_t rc;

    STATUS_CHECK(layout_of(j, &l, err));
    rc = check_file(f, &l, err);
    if (rc == STATUS_OK && l.stage_bytes && (stage = malloc(l.stage_bytes)) == NULL)
        rc = store_fail(err, STATUS_NO_MEMORY, j->name, "out of memory for a %zu-byte stage",
                        l.stage_bytes);
    for (size_t i = 0, first = 0; i < l.n_shards && rc == STATUS_OK; i++) {
        shard_t *sh = l.shards[i];
        int64_t version = 0;
        rc = read_shard(f, j, &l, i, first, stage, &version, err);
        if (rc != STATUS_OK)
            break;
        for (size_t b = 0; b < sh->n_blocks; b++) /* in order, as everyone locks several */
            pthread_mutex_lock(&sh->blocks[b].mu);
        memcpy(sh->values, stage, sh->n * sizeof(float));
        if (sh->n_slots)
            memcpy(sh->slots, stage + sh->n, sh->n * sh->n_slots * sizeof(float));
        for (size_t b = 0; b < sh->n_blocks; b++) {
            atomic_store(&sh->blocks[b].version, (uint64_t)version);
            optimizer_bounds_measure_part(&j->opt, sh->values, sh->slots, sh->n,
                                          block_first_row(sh, b) * sh->row_len,
                                          block_n_rows(sh, b) * sh->row_len, &sh->blocks[b].bounds);
        }
        for (size_t b = sh->n_blocks; b-- > 0;)
            pthread_mutex_unlock(&sh->blocks[b].mu);
        first += 2 + sh->n_slots;
    }
    if (rc == STATUS_OK && ret_shards != NULL)
        *ret_shards = l.n_shards;
    free(stage);
    layout_free(&l);
    return rc;
}

status_t store_restore(store_t *s, const char *job, const char *path, size_t *ret_shards,
                       store_err_t *err)
{
    st_file_t *f = NULL;
    status_msg_t msg = {0};
    sjob_t *j;
    status_t rc;

    if (st_open(path, &f, &msg) != STATUS_OK)
        return store_fail(err, msg.status, path, "%s", msg.text);
    pthread_rwlock_rdlock(&s->lock);
    rc = store_lookup_job(s, job, &j, err);
    if (rc == STATUS_OK)
        rc = restore_locked(j, f, ret_shards, err);
    pthread_rwlock_unlock(&s->lock);
    st_close(f);
    return rc;
}
