/* Creating variables: each request is checked whole, planned against what the store holds, its
 * shards are allocated and initialized outside the store lock, and the plan is committed under
 * the write lock only when every allocation the commit needs has been made (store.c explains
 * the three steps). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "files/checkpoint.h"
#include "job/initializer.h"
#include "rpc/initializer_proto.h"
#include "rpc/types.h"
#include "job/partitioner.h"
#include "store_internal.h"

static const char *dtype_name(Tessera__V1__DType d)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&tessera__v1__dtype__descriptor, (int)d);
    return v ? v->name : "an unknown dtype";
}

static status_t check_dims(const store_shard_spec_t *sp, store_err_t *err)
{
    const char *v = sp->variable;
    char a[160], b[160];

    if (sp->rank > STORE_MAX_RANK || sp->full_rank != sp->rank)
        return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                          "variable '%s': shape has rank %zu and full_shape rank %zu; both must be "
                          "equal and at most %d",
                          v, sp->rank, sp->full_rank, STORE_MAX_RANK);
    for (size_t i = 0; i < sp->rank; i++)
        if (sp->shape[i] < 1 || sp->full_shape[i] < 1)
            return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                              "variable '%s': every dimension must be >= 1, got shape %s of %s", v,
                              store_shape_str(sp->shape, sp->rank, a, sizeof(a)),
                              store_shape_str(sp->full_shape, sp->rank, b, sizeof(b)));
    if (sp->rank > 1 && !store_same_dims(sp->shape + 1, sp->full_shape + 1, sp->rank - 1))
        return store_fail(
            err, STATUS_INVALID_ARGUMENT, v,
            "variable '%s': shard shape %s and full shape %s differ beyond axis 0 (only "
            "axis 0 is sharded)",
            v, store_shape_str(sp->shape, sp->rank, a, sizeof(a)),
            store_shape_str(sp->full_shape, sp->rank, b, sizeof(b)));
    return STATUS_OK;
}

static status_t check_layout(const store_shard_spec_t *sp, store_err_t *err)
{
    const char *v = sp->variable;
    int64_t d0 = sp->rank ? sp->full_shape[0] : 1, rows = sp->rank ? sp->shape[0] : 1, off, want;

    if (sp->num_shards < 1 || sp->num_shards > d0)
        return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                          "variable '%s': num_shards %d is outside [1, %" PRId64 "]", v,
                          sp->num_shards, d0);
    if (sp->shard < 0 || sp->shard >= sp->num_shards)
        return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                          "variable '%s': shard %d is outside [0, %d)", v, sp->shard,
                          sp->num_shards);
    partitioner_shard_rows(d0, sp->num_shards, sp->shard, &off, &want);
    if (sp->row_offset != off || rows != want)
        return store_fail(err, STATUS_INVALID_ARGUMENT, v,
                          "variable '%s' shard %d of %d: %" PRId64 " rows from row %" PRId64
                          " are not the div layout's %" PRId64 " rows from row %" PRId64
                          " of %" PRId64,
                          v, sp->shard, sp->num_shards, rows, sp->row_offset, want, off, d0);
    return STATUS_OK;
}

/* Elements of the shard; fails when it or the whole variable overflows, or is over the limit. */
static status_t check_size(const store_t *s, const store_shard_spec_t *sp, size_t *ret_n,
                           store_err_t *err)
{
    uint64_t n = 1, full = 1;

    for (size_t i = 0; i < sp->rank; i++)
        if (__builtin_mul_overflow(n, (uint64_t)sp->shape[i], &n) ||
            __builtin_mul_overflow(full, (uint64_t)sp->full_shape[i], &full))
            return store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                              "variable '%s': its size overflows 64 bits", sp->variable);
    if (n > s->limits.max_shard_bytes / sizeof(float) || n > SIZE_MAX / sizeof(float))
        return store_fail(
            err, STATUS_RESOURCE_EXHAUSTED, sp->variable,
            "variable '%s' shard %d: %" PRIu64 " elements of 4 bytes exceed the limit of "
            "%" PRIu64 " bytes per shard (it must fit in one message); %s",
            sp->variable, sp->shard, n, s->limits.max_shard_bytes,
            constraint_spans_rows(&sp->constraint)
                ? "its constraint's norms span rows, so it cannot be split: raise the parameter "
                  "servers' --max-message-bytes"
                : "split it with a partitioner");
    *ret_n = (size_t)n;
    return STATUS_OK;
}

static status_t check_spec(const store_t *s, const store_shard_spec_t *sp, store_err_t *err)
{
    size_t n = 0;

    STATUS_CHECK(store_check_name(sp->variable, "variable", err));
    if (sp->dtype != TESSERA__V1__DTYPE__DTYPE_FLOAT32)
        return store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                          "variable '%s': dtype %s (%d) is not supported; parameter servers hold "
                          "DTYPE_FLOAT32 variables",
                          sp->variable, dtype_name(sp->dtype), (int)sp->dtype);
    STATUS_CHECK(check_dims(sp, err));
    STATUS_CHECK(check_layout(sp, err));
    STATUS_CHECK(check_size(s, sp, &n, err));
    if (sp->has_values && sp->values_len != n * sizeof(float))
        return store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                          "variable '%s' shard %d: its values are %zu bytes, the shard's %zu "
                          "float32 take %zu",
                          sp->variable, sp->shard, sp->values_len, n, n * sizeof(float));
    if (sp->constraint.kind != JOB_CONSTRAINT_NONE && (sp->sparse || sp->moving))
        return store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                          "variable '%s': a constraint on a %s variable, which the parameter "
                          "servers do not apply",
                          sp->variable, sp->sparse ? "sparse (row-updated)" : "moving");
    if (constraint_spans_rows(&sp->constraint) && sp->num_shards != 1)
        return store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                          "variable '%s': its constraint's norms span rows, so it is one shard, "
                          "not %d",
                          sp->variable, sp->num_shards);
    if (sp->moving && (sp->sparse || !(sp->momentum >= 0 && sp->momentum <= 1)))
        return store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                          "variable '%s': a moving statistic is dense, its momentum from 0 to 1 "
                          "(got %g%s)",
                          sp->variable, sp->momentum, sp->sparse ? ", sparse" : "");
    if ((unsigned)sp->init.kind > (unsigned)JOB_INIT_RANDOM_NORMAL)
        return store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                          "variable '%s': unknown initializer kind %d", sp->variable,
                          (int)sp->init.kind);
    return STATUS_OK;
}

static bool same_constraint(const job_constraint_t *a, const job_constraint_t *b)
{
    return a->kind == b->kind &&
           (a->kind == JOB_CONSTRAINT_NONE || (a->axes == b->axes && a->min_value == b->min_value &&
                                               a->max_value == b->max_value && a->rate == b->rate));
}

/* Two descriptions of the same variable agree on what makes it (shape, sharding, kind). */
static bool same_variable(const store_shard_spec_t *a, const store_shard_spec_t *b)
{
    return a->rank == b->rank && store_same_dims(a->full_shape, b->full_shape, a->rank) &&
           a->num_shards == b->num_shards && a->sparse == b->sparse && a->moving == b->moving &&
           (!a->moving || a->momentum == b->momentum) &&
           same_constraint(&a->constraint, &b->constraint);
}

/* ---- create: planning --------------------------------------------------------------------- */

typedef struct plan {
    const store_shard_spec_t *spec;
    size_t n;          /* elements */
    bool dup;          /* repeats an earlier description in this request */
    bool first_of_var; /* the first description of its variable in this request */
    size_t var_specs;  /* first_of_var: descriptions of the variable in this request */
    bool exists;       /* set by plan_against: the shard is already held */
    var_t *new_var;    /* commit: a variable object made for this request */
    shard_t *made;
} plan_t;

static int plan_cmp(const void *pa, const void *pb)
{
    const plan_t *a = *(plan_t *const *)pa, *b = *(plan_t *const *)pb;
    int c = strcmp(a->spec->variable, b->spec->variable);

    if (c != 0)
        return c;
    if (a->spec->shard != b->spec->shard)
        return a->spec->shard < b->spec->shard ? -1 : 1;
    return a < b ? -1 : a > b; /* request order */
}

/* Marks repeats and first descriptions; a variable or shard described two ways fails. */
static status_t plan_request(plan_t *plans, size_t n, store_err_t *err)
{
    plan_t **order = malloc((n ? n : 1) * sizeof(*order));
    status_t rc = STATUS_OK;

    if (order == NULL)
        return store_fail(err, STATUS_NO_MEMORY, NULL, "out of memory for %zu shard descriptions",
                          n);
    for (size_t i = 0; i < n; i++)
        order[i] = &plans[i];
    qsort(order, n, sizeof(*order), plan_cmp);
    for (size_t i = 0, g; i < n && rc == STATUS_OK; i = g) {
        const store_shard_spec_t *first = order[i]->spec;
        plan_t *head = order[i]; /* lowest request position of the group */
        for (g = i; g < n && strcmp(order[g]->spec->variable, first->variable) == 0; g++) {
            const store_shard_spec_t *sp = order[g]->spec;
            if (!same_variable(sp, first)) {
                rc = store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                                "variable '%s' is described with two different shapes or shardings "
                                "in one request",
                                sp->variable);
                break;
            }
            if (g > i && sp->shard == order[g - 1]->spec->shard)
                order[g]->dup = true;
            if (order[g] < head)
                head = order[g];
        }
        if (rc == STATUS_OK) {
            head->first_of_var = true;
            head->var_specs = g - i;
        }
    }
    free(order);
    return rc;
}

/* Decides which shards exist and which are new against the job as it is now (lock held), and
 * checks the limits. */
static status_t plan_against(const store_t *s, const sjob_t *j, const char *job, size_t n_slots,
                             plan_t *plans, size_t n, store_err_t *err)
{
    uint64_t bytes = 0, have = s->param_bytes + s->slot_bytes + s->overhead_bytes;
    size_t new_vars = 0, new_shards = 0;
    char a[160];

    for (size_t i = 0; i < n; i++) {
        const store_shard_spec_t *sp = plans[i].spec;
        var_t *v = j ? store_find_var(j, sp->variable) : NULL;

        plans[i].exists = false;
        if (plans[i].dup)
            continue;
        if (v != NULL &&
            (v->rank != sp->rank || !store_same_dims(v->full_shape, sp->full_shape, v->rank) ||
             v->num_shards != sp->num_shards || v->sparse != sp->sparse ||
             v->moving != sp->moving || (sp->moving && v->momentum != (float)sp->momentum) ||
             !same_constraint(&v->constraint, &sp->constraint)))
            return store_fail(
                err, STATUS_ALREADY_EXISTS, sp->variable,
                "variable '%s' of job '%s' exists with shape %s in %d shards%s; drop the "
                "job to change it",
                sp->variable, job, store_shape_str(v->full_shape, v->rank, a, sizeof(a)),
                v->num_shards, v->sparse ? " (sparse)" : "");
        plans[i].exists = v != NULL && store_find_shard(v, sp->shard) != NULL;
        if (!plans[i].exists) {
            bytes += (uint64_t)plans[i].n * sizeof(float) * (1 + n_slots) + SHARD_OVERHEAD;
            new_shards++;
        }
        if (v == NULL && plans[i].first_of_var) {
            bytes += VAR_OVERHEAD + strlen(sp->variable);
            new_vars++;
        }
    }
    if (j == NULL && s->n_jobs >= s->limits.max_jobs)
        return store_fail(err, STATUS_RESOURCE_EXHAUSTED, job,
                          "job '%s': this parameter server already serves %zu jobs, its limit "
                          "(--max-jobs)",
                          job, s->n_jobs);
    if ((j ? j->n_vars : 0) + new_vars > s->limits.max_variables)
        return store_fail(err, STATUS_RESOURCE_EXHAUSTED, job,
                          "job '%s': %zu variables would exceed the limit of %zu per job "
                          "(--max-variables-per-job)",
                          job, (j ? j->n_vars : 0) + new_vars, s->limits.max_variables);
    if ((j ? j->n_shards : 0) + new_shards > s->limits.max_shards)
        return store_fail(err, STATUS_RESOURCE_EXHAUSTED, job,
                          "job '%s': %zu shards would exceed the limit of %zu per job "
                          "(--max-shards-per-job)",
                          job, (j ? j->n_shards : 0) + new_shards, s->limits.max_shards);
    if (bytes > s->limits.max_bytes || have > s->limits.max_bytes - bytes)
        return store_fail(
            err, STATUS_RESOURCE_EXHAUSTED, job,
            "job '%s': %" PRIu64 " more bytes of variables and slots would exceed the "
            "limit of %" PRIu64 " bytes (--max-memory-bytes; %" PRIu64 " in use; each shard "
            "also costs %zu bytes of bookkeeping)",
            job, bytes, s->limits.max_bytes, have, (size_t)SHARD_OVERHEAD);
    return STATUS_OK;
}

/* ---- create: making shards ---------------------------------------------------------------- */

/* n floats on a 64-byte boundary: a vector load of the optimizer's kernels never splits a cache
 * line (measured by bench/optim: on 16 Mi parameters, Adam's AVX-512 update took 17% longer on
 * malloc's 16-byte offset from the page than when aligned). */
static float *alloc_floats(size_t n)
{
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes ? bytes : 64);
}
static shard_t *shard_make(const char *job, const store_shard_spec_t *sp, size_t n,
                           const optimizer_config_t *opt, bool *ret_finite)
{
    shard_t *sh = calloc(1, sizeof(*sh));
    double fan_in = sp->fan_in, fan_out = sp->fan_out, fi, fo;
    uint64_t seed;

    if (sh == NULL)
        return NULL;
    sh->index = sp->shard;
    sh->row_offset = sp->row_offset;
    sh->rank = sp->rank;
    memcpy(sh->shape, sp->shape, sp->rank * sizeof(int64_t));
    sh->n = n;
    sh->n_rows = sp->rank ? (size_t)sp->shape[0] : 1;
    sh->row_len = n / sh->n_rows;
    sh->n_slots = optimizer_slot_count(opt);
    sh->block_rows = sp->sparse || constraint_spans_rows(&sp->constraint)
                         ? sh->n_rows /* updated whole */
                         : rpc_block_rows(sh->row_len * sizeof(float));
    sh->n_blocks = sh->n_rows > 0 ? (sh->n_rows + sh->block_rows - 1) / sh->block_rows : 1;
    sh->values = alloc_floats(n);
    sh->slots = sh->n_slots ? alloc_floats(sh->n_slots * n) : NULL;
    sh->blocks = calloc(sh->n_blocks, sizeof(*sh->blocks));
    if (sh->values == NULL || (sh->n_slots && sh->slots == NULL) || sh->blocks == NULL) {
        free(sh->values);
        free(sh->slots);
        free(sh->blocks);
        free(sh);
        return NULL;
    }
    /* Every shard of a variable draws from the same stream, wherever it lives: the initializer's
     * seed (workers send one derived from the job's seed), else one from the job and variable. */
    seed = store_hash(store_hash(0xCBF29CE484222325ull, job) * 31 + 1, sp->variable);
    initializer_fans(sp->full_shape, sp->rank, &fi, &fo);
    fan_in = fan_in > 0 ? fan_in : fi;
    fan_out = fan_out > 0 ? fan_out : fo;
    if (sp->has_values)
        memcpy(sh->values, sp->values, n * sizeof(float)); /* float32 LE, as on the hosts */
    else
        initializer_fill_at(&sp->init, JOB_INIT_ZEROS, sh->values, n,
                            (uint64_t)sp->row_offset * sh->row_len, fan_in, fan_out, seed);
    *ret_finite = optimizer_first_non_finite(sh->values, n) == n;
    if (sh->slots)
        optimizer_slots_init(opt, sh->slots, n);
    for (size_t k = 0; k < sp->n_slots && k < sh->n_slots; k++)
        memcpy(sh->slots + k * n, sp->slots[k], n * sizeof(float)); /* checked: check_state */
    for (size_t b = 0; b < sh->n_blocks; b++) {
        pthread_mutex_init(&sh->blocks[b].mu, NULL);
        atomic_init(&sh->blocks[b].version, sp->updates);
        optimizer_bounds_measure_part(opt, sh->values, sh->slots, n,
                                      block_first_row(sh, b) * sh->row_len,
                                      block_n_rows(sh, b) * sh->row_len, &sh->blocks[b].bounds);
    }
    return sh;
}

/* Grows an array of pointers to hold `want` entries. */
static bool reserve(void *arrayp, size_t *cap, size_t want)
{
    void **a = *(void ***)arrayp, **grown;
    size_t c = *cap ? *cap : 4;

    if (want <= *cap)
        return true;
    while (c < want)
        c *= 2;
    grown = realloc(a, c * sizeof(*a));
    if (grown == NULL)
        return false;
    *(void ***)arrayp = grown;
    *cap = c;
    return true;
}

static void index_put(size_t *index, size_t cap, const char *name, size_t pos)
{
    size_t h = store_hash(0xCBF29CE484222325ull, name) & (cap - 1);
    while (index[h] != 0)
        h = (h + 1) & (cap - 1);
    index[h] = pos + 1;
}

/* Makes the hash index hold `want` variables at most half full; rehashes what is there. */
static bool index_reserve(sjob_t *j, size_t want)
{
    size_t cap = j->index_cap ? j->index_cap : 16, *index;

    if (want * 2 <= j->index_cap)
        return true;
    while (cap < want * 2)
        cap *= 2;
    index = calloc(cap, sizeof(*index));
    if (index == NULL)
        return false;
    for (size_t i = 0; i < j->n_vars; i++)
        index_put(index, cap, j->vars[i]->name, i);
    free(j->index);
    j->index = index;
    j->index_cap = cap;
    return true;
}

static var_t *var_make(const store_shard_spec_t *sp, size_t n_specs)
{
    var_t *v = calloc(1, sizeof(*v));

    if (v == NULL)
        return NULL;
    v->name = strdup(sp->variable);
    v->shards = calloc(n_specs, sizeof(*v->shards));
    if (v->name == NULL || v->shards == NULL) {
        store_var_free(v);
        return NULL;
    }
    v->cap_shards = n_specs;
    v->rank = sp->rank;
    memcpy(v->full_shape, sp->full_shape, sp->rank * sizeof(int64_t));
    v->num_shards = sp->num_shards;
    v->sparse = sp->sparse;
    v->moving = sp->moving;
    v->momentum = (float)sp->momentum;
    v->rest = (float)(1.0 - sp->momentum);
    v->constraint = sp->constraint;
    return v;
}

/* Makes every allocation the commit needs (lock held); changes nothing visible. */
static bool commit_reserve(store_t *s, sjob_t *j, plan_t *plans, size_t n)
{
    size_t new_vars = 0;

    for (size_t i = 0; i < n; i++) {
        plan_t *p = &plans[i];
        var_t *v;
        if (p->dup || !p->first_of_var)
            continue;
        v = store_find_var(j, p->spec->variable);
        if (v == NULL) {
            if (p->new_var == NULL && (p->new_var = var_make(p->spec, p->var_specs)) == NULL)
                return false;
            new_vars++;
        } else if (!reserve(&v->shards, &v->cap_shards, v->n_shards + p->var_specs)) {
            return false;
        }
    }
    return reserve(&s->jobs, &s->cap_jobs, s->n_jobs + 1) &&
           reserve(&j->vars, &j->cap_vars, j->n_vars + new_vars) &&
           index_reserve(j, j->n_vars + new_vars);
}

static void shard_insert(var_t *v, shard_t *sh)
{
    size_t pos = v->n_shards;

    while (pos > 0 && v->shards[pos - 1]->index > sh->index) {
        v->shards[pos] = v->shards[pos - 1];
        pos--;
    }
    v->shards[pos] = sh;
    v->n_shards++;
    sh->var = v;
}

/* Inserts what the plans made; cannot fail after commit_reserve. Returns the shards added. */
static size_t commit(store_t *s, sjob_t *j, bool new_job, plan_t *plans, size_t n)
{
    size_t created = 0;

    if (new_job)
        s->jobs[s->n_jobs++] = j;
    for (size_t i = 0; i < n; i++) {
        plan_t *p = &plans[i];
        if (p->new_var != NULL) {
            uint64_t ob = VAR_OVERHEAD + strlen(p->new_var->name);
            index_put(j->index, j->index_cap, p->new_var->name, j->n_vars);
            j->vars[j->n_vars++] = p->new_var;
            p->new_var = NULL;
            s->n_vars++;
            j->overhead_bytes += ob;
            s->overhead_bytes += ob;
        }
    }
    for (size_t i = 0; i < n; i++) {
        plan_t *p = &plans[i];
        uint64_t vb, sb;
        if (p->made == NULL)
            continue;
        shard_insert(store_find_var(j, p->spec->variable), p->made);
        vb = (uint64_t)p->made->n * sizeof(float);
        sb = vb * p->made->n_slots;
        j->param_bytes += vb;
        j->slot_bytes += sb;
        j->overhead_bytes += SHARD_OVERHEAD;
        s->overhead_bytes += SHARD_OVERHEAD;
        j->n_shards++;
        s->param_bytes += vb;
        s->slot_bytes += sb;
        s->n_shards++;
        p->made = NULL;
        created++;
    }
    return created;
}

/* ---- create ------------------------------------------------------------------------------- */

static status_t check_optimizer(const sjob_t *j, const char *job, const optimizer_config_t *opt,
                                store_err_t *err)
{
    if (j == NULL && opt == NULL)
        return store_fail(
            err, STATUS_INVALID_ARGUMENT, job,
            "job '%s' is new here: its first CreateVariables must carry the optimizer", job);
    if (j != NULL && opt != NULL && !optimizer_config_equal(&j->opt, opt))
        return store_fail(
            err, STATUS_ALREADY_EXISTS, job,
            "job '%s' already uses another optimizer configuration (%s); drop the job to "
            "change it",
            job, optimizer_kind_name(j->opt.kind));
    return STATUS_OK;
}

static status_t validate_create(const store_t *s, const char *job, const optimizer_config_t *opt,
                                const store_shard_spec_t *specs, plan_t *plans, size_t n,
                                store_err_t *err)
{
    STATUS_CHECK(store_check_name(job, "job", err));
    if (n > STORE_MAX_SHARDS_PER_REQUEST)
        return store_fail(err, STATUS_RESOURCE_EXHAUSTED, "shards",
                          "job '%s': %zu shards in one request, more than %d; send them in several",
                          job, n, STORE_MAX_SHARDS_PER_REQUEST);
    if (opt != NULL) {
        status_msg_t m;
        if (optimizer_config_validate(opt, &m) != STATUS_OK)
            return store_fail(err, STATUS_INVALID_ARGUMENT, "optimizer", "job '%s': %s", job,
                              m.text);
    }
    for (size_t i = 0; i < n; i++) {
        STATUS_CHECK(check_spec(s, &specs[i], err));
        plans[i].spec = &specs[i];
        check_size(s, &specs[i], &plans[i].n, NULL);
    }
    return plan_request(plans, n, err);
}

static void plans_free(plan_t *plans, size_t n)
{
    for (size_t i = 0; plans != NULL && i < n; i++) {
        store_shard_free(plans[i].made);
        store_var_free(plans[i].new_var);
    }
    free(plans);
}

/* A shard's optimizer state (store_shard_spec_t) against the job's optimizer, before it is made. */
static status_t check_state(const store_shard_spec_t *sp, size_t n, const optimizer_config_t *opt,
                            store_err_t *err)
{
    size_t k = optimizer_slot_count(opt);

    if (sp->n_slots != 0 && sp->n_slots != k)
        return store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                          "variable '%s' shard %d: %zu optimizer slots given, but %s keeps %zu",
                          sp->variable, sp->shard, sp->n_slots, optimizer_kind_name(opt->kind), k);
    for (size_t i = 0; i < sp->n_slots; i++)
        if (sp->slots_len[i] != n * sizeof(float))
            return store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                              "variable '%s' shard %d: its %s slot is %zu bytes, the shard's %zu "
                              "float32 take %zu",
                              sp->variable, sp->shard, optimizer_slot_name(opt, i),
                              sp->slots_len[i], n, n * sizeof(float));
    if (sp->updates > (uint64_t)OPTIMIZER_MAX_ITERATIONS)
        return store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                          "variable '%s' shard %d: %" PRIu64 " updates so far, more than 2^53",
                          sp->variable, sp->shard, sp->updates);
    return STATUS_OK;
}

/* The slots a made shard took from its spec: finite, and sums of squares not negative (the
 * update takes their square root). */
static status_t check_slots(const shard_t *sh, const store_shard_spec_t *sp,
                            const optimizer_config_t *opt, store_err_t *err)
{
    for (size_t k = 0; k < sp->n_slots; k++) {
        const float *v = sh->slots + k * sh->n;
        const char *name = optimizer_slot_name(opt, k);
        size_t bad = optimizer_first_non_finite(v, sh->n);
        bool nonnegative = ckpt_slot_nonnegative(name);
        for (size_t i = 0; nonnegative && bad == sh->n && i < sh->n; i++)
            if (v[i] < 0)
                bad = i;
        if (bad < sh->n)
            return store_fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                              "variable '%s' shard %d: its %s slot holds %g at element %zu%s; "
                              "nothing was created",
                              sp->variable, sp->shard, name, (double)v[bad], bad,
                              isfinite(v[bad]) ? ", but it is a sum of squares" : "");
    }
    return STATUS_OK;
}

/* Makes the shards planned as new that have no allocation yet. */
static status_t make_planned(const char *job, const optimizer_config_t *opt, plan_t *plans,
                             size_t n, store_err_t *err)
{
    for (size_t i = 0; i < n; i++) {
        plan_t *p = &plans[i];
        if (p->dup || p->exists || p->made != NULL)
            continue;
        bool finite = true;
        STATUS_CHECK(check_state(p->spec, p->n, opt, err));
        p->made = shard_make(job, p->spec, p->n, opt, &finite);
        if (p->made == NULL)
            return store_fail(err, STATUS_NO_MEMORY, p->spec->variable,
                              "out of memory for variable '%s' shard %d (%zu floats and slots)",
                              p->spec->variable, p->spec->shard, p->n);
        /* initializer_check bounds what a spec can ask for; this is the proof. */
        if (!finite)
            return store_fail(
                err, STATUS_INVALID_ARGUMENT, p->spec->variable,
                "variable '%s' shard %d: %s values that are not finite in float32; nothing "
                "was created",
                p->spec->variable, p->spec->shard,
                p->spec->has_values ? "its values hold" : "its initializer makes");
        STATUS_CHECK(check_slots(p->made, p->spec, opt, err));
    }
    return STATUS_OK;
}

status_t store_create(store_t *s, const char *job, const optimizer_config_t *opt,
                      const store_shard_spec_t *specs, size_t n, size_t *ret_created,
                      store_err_t *err)
{
    plan_t *plans = calloc(n ? n : 1, sizeof(*plans));
    optimizer_config_t job_opt;
    sjob_t *j, *fresh = NULL;
    size_t created = 0;
    status_t rc;

    if (plans == NULL)
        return store_fail(err, STATUS_NO_MEMORY, NULL, "out of memory for %zu shard descriptions",
                          n);
    STATUS_CHECK_GOTO(validate_create(s, job, opt, specs, plans, n, err), rc, out);

    /* 1. plan under the read lock */
    pthread_rwlock_rdlock(&s->lock);
    j = store_find_job(s, job, NULL);
    rc = check_optimizer(j, job, opt, err);
    if (rc == STATUS_OK) {
        job_opt = j ? j->opt : *opt;
        rc = plan_against(s, j, job, optimizer_slot_count(&job_opt), plans, n, err);
    }
    pthread_rwlock_unlock(&s->lock);
    if (rc != STATUS_OK)
        goto out;

    /* 2. allocate and initialize outside the lock */
    STATUS_CHECK_GOTO(make_planned(job, &job_opt, plans, n, err), rc, out);

    /* 3. plan again and commit under the write lock */
    pthread_rwlock_wrlock(&s->lock);
    j = store_find_job(s, job, NULL);
    rc = check_optimizer(j, job, opt, err);
    if (rc == STATUS_OK && (j ? !optimizer_config_equal(&j->opt, &job_opt) : false))
        rc = store_fail(err, STATUS_ALREADY_EXISTS, job,
                        "job '%s' was re-created with another optimizer meanwhile; retry", job);
    if (rc == STATUS_OK)
        rc = plan_against(s, j, job, optimizer_slot_count(&job_opt), plans, n, err);
    for (size_t i = 0; rc == STATUS_OK && i < n; i++)
        if (plans[i].exists && plans[i].made != NULL) { /* created by a concurrent call */
            store_shard_free(plans[i].made);
            plans[i].made = NULL;
        }
    if (rc == STATUS_OK) /* rare: the job was dropped meanwhile, and the shards are new again */
        rc = make_planned(job, &job_opt, plans, n, err);
    if (rc == STATUS_OK && j == NULL) {
        fresh = calloc(1, sizeof(*fresh));
        if (fresh == NULL || (fresh->name = strdup(job)) == NULL)
            rc = store_fail(err, STATUS_NO_MEMORY, job, "out of memory for job '%s'", job);
        else {
            fresh->opt = job_opt;
            fresh->n_slots = optimizer_slot_count(&job_opt);
        }
    }
    if (rc == STATUS_OK && !commit_reserve(s, j ? j : fresh, plans, n))
        rc = store_fail(err, STATUS_NO_MEMORY, job, "out of memory for the variables of job '%s'",
                        job);
    if (rc == STATUS_OK) {
        created = commit(s, j ? j : fresh, j == NULL, plans, n);
        fresh = NULL;
    }
    pthread_rwlock_unlock(&s->lock);
    if (rc == STATUS_OK && ret_created != NULL)
        *ret_created = created;
out:
    store_job_free(fresh);
    plans_free(plans, n);
    return rc;
}

/* ---- pull and push ------------------------------------------------------------------------ */
