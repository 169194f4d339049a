/* The variable store. Layout: store -> jobs (array, creation order) -> variables (array in
 * creation order, with an open-addressing hash index by name) -> the shards of the variable held
 * here (array sorted by shard index). Values and slots of a shard are two exact-size arrays;
 * nothing is allocated ahead of need except those small index arrays.
 *
 * Create runs in three steps so that initializing a large variable does not stop pulls and
 * pushes of other jobs: plan under the read lock, allocate and initialize outside any lock, then
 * plan again and commit under the write lock. Every allocation the commit needs is made before
 * the first change, so a create either happens whole or not at all. */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np: writer-preferring locks */
#include "store.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "job/initializer.h"
#include "job/partitioner.h"
#include "rpc/types.h"
#include "base/clock.h"

typedef struct var var_t;

typedef struct shard {
    var_t *var;
    int index;
    int64_t row_offset;
    size_t rank;
    int64_t shape[STORE_MAX_RANK];
    size_t n;       /* elements */
    size_t n_rows;  /* shape[0], 1 for a scalar */
    size_t row_len; /* elements per row */
    float *values;
    float *slots; /* optimizer_slot_count arrays of n, slot-major; NULL when none */
    size_t n_slots;
    pthread_rwlock_t lock; /* guards values, slots, version and bounds */
    uint64_t version;
    optimizer_bounds_t bounds; /* on |values| and |slots|: most pushes are proven safe by them */
    atomic_uint_fast64_t pulls, pushes, bytes_pulled, bytes_pushed;
} shard_t;

struct var {
    char *name;
    size_t rank;
    int64_t full_shape[STORE_MAX_RANK];
    int num_shards;
    bool sparse;
    shard_t **shards; /* held here, sorted by index */
    size_t n_shards, cap_shards;
};

typedef struct sjob {
    char *name;
    optimizer_config_t opt;
    size_t n_slots;
    var_t **vars;
    size_t n_vars, cap_vars;
    size_t *index; /* position in vars + 1; 0 = empty slot */
    size_t index_cap;
    uint64_t param_bytes, slot_bytes, overhead_bytes;
    size_t n_shards;
} sjob_t;

struct store {
    pthread_rwlock_t lock; /* guards the jobs, their variables and shard sets, the totals */
    store_limits_t limits;
    metric_t *apply_seconds;
    sjob_t **jobs;
    size_t n_jobs, cap_jobs;
    uint64_t param_bytes, slot_bytes, overhead_bytes;
    size_t n_vars, n_shards;
};

/* What a shard and a variable cost beyond their values and slots: the structures, the index and
 * the allocator's headers. They count against --max-memory-bytes, so that a million tiny shards
 * cannot grow the server past its limit 4 bytes at a time. */
#define SHARD_OVERHEAD (sizeof(shard_t) + 3 * sizeof(void *) + 64)
#define VAR_OVERHEAD   (sizeof(var_t) + 4 * sizeof(size_t) + 64)

/* ---- helpers ------------------------------------------------------------------------------ */

static status_t fail(store_err_t *err, status_t st, const char *culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static status_t fail(store_err_t *err, status_t st, const char *culprit, const char *fmt, ...)
{
    va_list ap;

    if (err == NULL)
        return st;
    err->msg.status = st;
    va_start(ap, fmt);
    vsnprintf(err->msg.text, sizeof(err->msg.text), fmt, ap);
    va_end(ap);
    snprintf(err->culprit, sizeof(err->culprit), "%s", culprit ? culprit : "");
    return st;
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001B3ull;
    return h;
}

static void rwlock_init(pthread_rwlock_t *l)
{
    pthread_rwlockattr_t a;

    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(l, &a);
    pthread_rwlockattr_destroy(&a);
}

/* "[2, 3]" into buf. */
static const char *shape_str(const int64_t *shape, size_t rank, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "[");
    for (size_t i = 0; i < rank && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (off < len)
        snprintf(buf + off, len - off, "]");
    return buf;
}

static bool same_dims(const int64_t *a, const int64_t *b, size_t n)
{
    return n == 0 || memcmp(a, b, n * sizeof(*a)) == 0;
}

static status_t check_name(const char *name, const char *what, store_err_t *err)
{
    size_t len;

    if (name == NULL || name[0] == '\0')
        return fail(err, STATUS_INVALID_ARGUMENT, what, "the %s name is empty", what);
    len = strnlen(name, STORE_MAX_NAME + 1);
    if (len > STORE_MAX_NAME)
        return fail(err, STATUS_INVALID_ARGUMENT, what, "the %s name is longer than %d bytes", what,
                    STORE_MAX_NAME);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f)
            return fail(err, STATUS_INVALID_ARGUMENT, what,
                        "the %s name holds control character 0x%02x at byte %zu", what, c, i);
    }
    return STATUS_OK;
}

/* ---- lookups (store lock held) ------------------------------------------------------------ */

static sjob_t *find_job(const store_t *s, const char *name, size_t *ret_pos)
{
    for (size_t i = 0; i < s->n_jobs; i++)
        if (strcmp(s->jobs[i]->name, name) == 0) {
            if (ret_pos)
                *ret_pos = i;
            return s->jobs[i];
        }
    return NULL;
}

static var_t *find_var(const sjob_t *j, const char *name)
{
    size_t mask = j->index_cap - 1;

    if (j->index_cap == 0)
        return NULL;
    for (size_t h = fnv1a(0xCBF29CE484222325ull, name) & mask;; h = (h + 1) & mask) {
        size_t e = j->index[h];
        if (e == 0)
            return NULL;
        if (strcmp(j->vars[e - 1]->name, name) == 0)
            return j->vars[e - 1];
    }
}

static shard_t *find_shard(const var_t *v, int index)
{
    size_t lo = 0, hi = v->n_shards;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->shards[mid]->index == index)
            return v->shards[mid];
        if (v->shards[mid]->index < index)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static status_t lookup_job(const store_t *s, const char *job, sjob_t **ret, store_err_t *err)
{
    STATUS_CHECK(check_name(job, "job", err));
    *ret = find_job(s, job, NULL);
    if (*ret == NULL)
        return fail(err, STATUS_NOT_FOUND, job,
                    "job '%s' has no variables on this parameter server", job);
    return STATUS_OK;
}

static status_t lookup_shard(const sjob_t *j, const store_key_t *key, shard_t **ret,
                             store_err_t *err)
{
    var_t *v;

    STATUS_CHECK(check_name(key->variable, "variable", err));
    v = find_var(j, key->variable);
    if (v == NULL)
        return fail(err, STATUS_NOT_FOUND, key->variable, "job '%s' has no variable '%s'", j->name,
                    key->variable);
    *ret = find_shard(v, key->shard);
    if (*ret == NULL)
        return fail(err, STATUS_NOT_FOUND, key->variable,
                    "variable '%s' of job '%s' has no shard %d on this parameter server "
                    "(it has %d shards in all)",
                    key->variable, j->name, key->shard, v->num_shards);
    return STATUS_OK;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

store_t *store_new(const store_limits_t *limits, metric_t *apply_seconds)
{
    store_t *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    s->limits = *limits;
    s->apply_seconds = apply_seconds;
    rwlock_init(&s->lock);
    return s;
}

static void shard_free(shard_t *sh)
{
    if (sh == NULL)
        return;
    pthread_rwlock_destroy(&sh->lock);
    free(sh->values);
    free(sh->slots);
    free(sh);
}

static void var_free(var_t *v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < v->n_shards; i++)
        shard_free(v->shards[i]);
    free(v->shards);
    free(v->name);
    free(v);
}

static void job_free(sjob_t *j)
{
    if (j == NULL)
        return;
    for (size_t i = 0; i < j->n_vars; i++)
        var_free(j->vars[i]);
    free(j->vars);
    free(j->index);
    free(j->name);
    free(j);
}

void store_free(store_t *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n_jobs; i++)
        job_free(s->jobs[i]);
    free(s->jobs);
    pthread_rwlock_destroy(&s->lock);
    free(s);
}

/* ---- create: checking one description ----------------------------------------------------- */

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
        return fail(err, STATUS_INVALID_ARGUMENT, v,
                    "variable '%s': shape has rank %zu and full_shape rank %zu; both must be "
                    "equal and at most %d",
                    v, sp->rank, sp->full_rank, STORE_MAX_RANK);
    for (size_t i = 0; i < sp->rank; i++)
        if (sp->shape[i] < 1 || sp->full_shape[i] < 1)
            return fail(err, STATUS_INVALID_ARGUMENT, v,
                        "variable '%s': every dimension must be >= 1, got shape %s of %s", v,
                        shape_str(sp->shape, sp->rank, a, sizeof(a)),
                        shape_str(sp->full_shape, sp->rank, b, sizeof(b)));
    if (sp->rank > 1 && !same_dims(sp->shape + 1, sp->full_shape + 1, sp->rank - 1))
        return fail(err, STATUS_INVALID_ARGUMENT, v,
                    "variable '%s': shard shape %s and full shape %s differ beyond axis 0 (only "
                    "axis 0 is sharded)",
                    v, shape_str(sp->shape, sp->rank, a, sizeof(a)),
                    shape_str(sp->full_shape, sp->rank, b, sizeof(b)));
    return STATUS_OK;
}

static status_t check_layout(const store_shard_spec_t *sp, store_err_t *err)
{
    const char *v = sp->variable;
    int64_t d0 = sp->rank ? sp->full_shape[0] : 1, rows = sp->rank ? sp->shape[0] : 1, off, want;

    if (sp->num_shards < 1 || sp->num_shards > d0)
        return fail(err, STATUS_INVALID_ARGUMENT, v,
                    "variable '%s': num_shards %d is outside [1, %" PRId64 "]", v, sp->num_shards,
                    d0);
    if (sp->shard < 0 || sp->shard >= sp->num_shards)
        return fail(err, STATUS_INVALID_ARGUMENT, v, "variable '%s': shard %d is outside [0, %d)",
                    v, sp->shard, sp->num_shards);
    partitioner_shard_rows(d0, sp->num_shards, sp->shard, &off, &want);
    if (sp->row_offset != off || rows != want)
        return fail(err, STATUS_INVALID_ARGUMENT, v,
                    "variable '%s' shard %d of %d: %" PRId64 " rows from row %" PRId64
                    " are not the div layout's %" PRId64 " rows from row %" PRId64 " of %" PRId64,
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
            return fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                        "variable '%s': its size overflows 64 bits", sp->variable);
    if (n > s->limits.max_shard_bytes / sizeof(float) || n > SIZE_MAX / sizeof(float))
        return fail(err, STATUS_RESOURCE_EXHAUSTED, sp->variable,
                    "variable '%s' shard %d: %" PRIu64 " elements of 4 bytes exceed the limit of "
                    "%" PRIu64 " bytes per shard (it must fit in one message); split it with a "
                    "partitioner",
                    sp->variable, sp->shard, n, s->limits.max_shard_bytes);
    *ret_n = (size_t)n;
    return STATUS_OK;
}

static status_t check_spec(const store_t *s, const store_shard_spec_t *sp, store_err_t *err)
{
    size_t n;

    STATUS_CHECK(check_name(sp->variable, "variable", err));
    if (sp->dtype != TESSERA__V1__DTYPE__DTYPE_FLOAT32)
        return fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                    "variable '%s': dtype %s (%d) is not supported; parameter servers hold "
                    "DTYPE_FLOAT32 variables",
                    sp->variable, dtype_name(sp->dtype), (int)sp->dtype);
    STATUS_CHECK(check_dims(sp, err));
    STATUS_CHECK(check_layout(sp, err));
    STATUS_CHECK(check_size(s, sp, &n, err));
    if ((unsigned)sp->init.kind > (unsigned)JOB_INIT_RANDOM_NORMAL)
        return fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
                    "variable '%s': unknown initializer kind %d", sp->variable, (int)sp->init.kind);
    return STATUS_OK;
}

/* Two descriptions of the same variable agree on what makes it (shape, sharding, kind). */
static bool same_variable(const store_shard_spec_t *a, const store_shard_spec_t *b)
{
    return a->rank == b->rank && same_dims(a->full_shape, b->full_shape, a->rank) &&
           a->num_shards == b->num_shards && a->sparse == b->sparse;
}

static bool opt_equal(const optimizer_config_t *a, const optimizer_config_t *b)
{
    const lr_schedule_t *x = &a->schedule, *y = &b->schedule;

    if (x->kind != y->kind || x->lr != y->lr || x->initial_lr != y->initial_lr ||
        x->warmup_steps != y->warmup_steps || x->decay_steps != y->decay_steps ||
        x->decay_rate != y->decay_rate || x->staircase != y->staircase ||
        x->n_boundaries != y->n_boundaries)
        return false;
    for (size_t i = 0; i < x->n_boundaries && i < LR_MAX_PIECES; i++)
        if (x->boundaries[i] != y->boundaries[i] || x->values[i] != y->values[i] ||
            x->values[i + 1] != y->values[i + 1])
            return false;
    return a->kind == b->kind && a->lr_scale == b->lr_scale && a->momentum == b->momentum &&
           a->nesterov == b->nesterov && a->beta_1 == b->beta_1 && a->beta_2 == b->beta_2 &&
           a->amsgrad == b->amsgrad && a->epsilon == b->epsilon &&
           a->initial_accumulator_value == b->initial_accumulator_value && a->rho == b->rho &&
           a->centered == b->centered;
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
        return fail(err, STATUS_NO_MEMORY, NULL, "out of memory for %zu shard descriptions", n);
    for (size_t i = 0; i < n; i++)
        order[i] = &plans[i];
    qsort(order, n, sizeof(*order), plan_cmp);
    for (size_t i = 0, g; i < n && rc == STATUS_OK; i = g) {
        const store_shard_spec_t *first = order[i]->spec;
        plan_t *head = order[i]; /* lowest request position of the group */
        for (g = i; g < n && strcmp(order[g]->spec->variable, first->variable) == 0; g++) {
            const store_shard_spec_t *sp = order[g]->spec;
            if (!same_variable(sp, first)) {
                rc = fail(err, STATUS_INVALID_ARGUMENT, sp->variable,
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
        var_t *v = j ? find_var(j, sp->variable) : NULL;

        plans[i].exists = false;
        if (plans[i].dup)
            continue;
        if (v != NULL &&
            (v->rank != sp->rank || !same_dims(v->full_shape, sp->full_shape, v->rank) ||
             v->num_shards != sp->num_shards || v->sparse != sp->sparse))
            return fail(err, STATUS_ALREADY_EXISTS, sp->variable,
                        "variable '%s' of job '%s' exists with shape %s in %d shards%s; drop the "
                        "job to change it",
                        sp->variable, job, shape_str(v->full_shape, v->rank, a, sizeof(a)),
                        v->num_shards, v->sparse ? " (sparse)" : "");
        plans[i].exists = v != NULL && find_shard(v, sp->shard) != NULL;
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
        return fail(err, STATUS_RESOURCE_EXHAUSTED, job,
                    "job '%s': this parameter server already serves %zu jobs, its limit "
                    "(--max-jobs)",
                    job, s->n_jobs);
    if ((j ? j->n_vars : 0) + new_vars > s->limits.max_variables)
        return fail(err, STATUS_RESOURCE_EXHAUSTED, job,
                    "job '%s': %zu variables would exceed the limit of %zu per job "
                    "(--max-variables-per-job)",
                    job, (j ? j->n_vars : 0) + new_vars, s->limits.max_variables);
    if ((j ? j->n_shards : 0) + new_shards > s->limits.max_shards)
        return fail(err, STATUS_RESOURCE_EXHAUSTED, job,
                    "job '%s': %zu shards would exceed the limit of %zu per job "
                    "(--max-shards-per-job)",
                    job, (j ? j->n_shards : 0) + new_shards, s->limits.max_shards);
    if (bytes > s->limits.max_bytes || have > s->limits.max_bytes - bytes)
        return fail(err, STATUS_RESOURCE_EXHAUSTED, job,
                    "job '%s': %" PRIu64 " more bytes of variables and slots would exceed the "
                    "limit of %" PRIu64 " bytes (--max-memory-bytes; %" PRIu64
                    " in use; each shard "
                    "also costs %zu bytes of bookkeeping)",
                    job, bytes, s->limits.max_bytes, have, (size_t)SHARD_OVERHEAD);
    return STATUS_OK;
}

/* ---- create: making shards ---------------------------------------------------------------- */

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
    sh->values = malloc(n * sizeof(float));
    sh->slots = sh->n_slots ? malloc(sh->n_slots * n * sizeof(float)) : NULL;
    if (sh->values == NULL || (sh->n_slots && sh->slots == NULL)) {
        free(sh->values);
        free(sh->slots);
        free(sh);
        return NULL;
    }
    /* Every shard of a variable draws from the same stream, wherever it lives: the initializer's
     * seed (workers send one derived from the job's seed), else one from the job and variable. */
    seed = fnv1a(fnv1a(0xCBF29CE484222325ull, job) * 31 + 1, sp->variable);
    initializer_fans(sp->full_shape, sp->rank, &fi, &fo);
    fan_in = fan_in > 0 ? fan_in : fi;
    fan_out = fan_out > 0 ? fan_out : fo;
    initializer_fill_at(&sp->init, JOB_INIT_ZEROS, sh->values, n,
                        (uint64_t)sp->row_offset * sh->row_len, fan_in, fan_out, seed);
    *ret_finite = optimizer_first_non_finite(sh->values, n) == n;
    if (sh->slots)
        optimizer_slots_init(opt, sh->slots, n);
    optimizer_bounds_measure(opt, sh->values, sh->slots, n, &sh->bounds);
    rwlock_init(&sh->lock);
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
    size_t h = fnv1a(0xCBF29CE484222325ull, name) & (cap - 1);
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
        var_free(v);
        return NULL;
    }
    v->cap_shards = n_specs;
    v->rank = sp->rank;
    memcpy(v->full_shape, sp->full_shape, sp->rank * sizeof(int64_t));
    v->num_shards = sp->num_shards;
    v->sparse = sp->sparse;
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
        v = find_var(j, p->spec->variable);
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
        shard_insert(find_var(j, p->spec->variable), p->made);
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
        return fail(err, STATUS_INVALID_ARGUMENT, job,
                    "job '%s' is new here: its first CreateVariables must carry the optimizer",
                    job);
    if (j != NULL && opt != NULL && !opt_equal(&j->opt, opt))
        return fail(err, STATUS_ALREADY_EXISTS, job,
                    "job '%s' already uses another optimizer configuration (%s); drop the job to "
                    "change it",
                    job, optimizer_kind_name(j->opt.kind));
    return STATUS_OK;
}

static status_t validate_create(const store_t *s, const char *job, const optimizer_config_t *opt,
                                const store_shard_spec_t *specs, plan_t *plans, size_t n,
                                store_err_t *err)
{
    STATUS_CHECK(check_name(job, "job", err));
    if (n > STORE_MAX_SHARDS_PER_REQUEST)
        return fail(err, STATUS_RESOURCE_EXHAUSTED, "shards",
                    "job '%s': %zu shards in one request, more than %d; send them in several", job,
                    n, STORE_MAX_SHARDS_PER_REQUEST);
    if (opt != NULL) {
        status_msg_t m;
        if (optimizer_config_validate(opt, &m) != STATUS_OK)
            return fail(err, STATUS_INVALID_ARGUMENT, "optimizer", "job '%s': %s", job, m.text);
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
        shard_free(plans[i].made);
        var_free(plans[i].new_var);
    }
    free(plans);
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
        p->made = shard_make(job, p->spec, p->n, opt, &finite);
        if (p->made == NULL)
            return fail(err, STATUS_NO_MEMORY, p->spec->variable,
                        "out of memory for variable '%s' shard %d (%zu floats and slots)",
                        p->spec->variable, p->spec->shard, p->n);
        /* initializer_check bounds what a spec can ask for; this is the proof. */
        if (!finite)
            return fail(err, STATUS_INVALID_ARGUMENT, p->spec->variable,
                        "variable '%s' shard %d: its initializer makes values that are not finite "
                        "in float32; nothing was created",
                        p->spec->variable, p->spec->shard);
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
        return fail(err, STATUS_NO_MEMORY, NULL, "out of memory for %zu shard descriptions", n);
    STATUS_CHECK_GOTO(validate_create(s, job, opt, specs, plans, n, err), rc, out);

    /* 1. plan under the read lock */
    pthread_rwlock_rdlock(&s->lock);
    j = find_job(s, job, NULL);
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
    j = find_job(s, job, NULL);
    rc = check_optimizer(j, job, opt, err);
    if (rc == STATUS_OK && (j ? !opt_equal(&j->opt, &job_opt) : false))
        rc = fail(err, STATUS_ALREADY_EXISTS, job,
                  "job '%s' was re-created with another optimizer meanwhile; retry", job);
    if (rc == STATUS_OK)
        rc = plan_against(s, j, job, optimizer_slot_count(&job_opt), plans, n, err);
    for (size_t i = 0; rc == STATUS_OK && i < n; i++)
        if (plans[i].exists && plans[i].made != NULL) { /* created by a concurrent call */
            shard_free(plans[i].made);
            plans[i].made = NULL;
        }
    if (rc == STATUS_OK) /* rare: the job was dropped meanwhile, and the shards are new again */
        rc = make_planned(job, &job_opt, plans, n, err);
    if (rc == STATUS_OK && j == NULL) {
        fresh = calloc(1, sizeof(*fresh));
        if (fresh == NULL || (fresh->name = strdup(job)) == NULL)
            rc = fail(err, STATUS_NO_MEMORY, job, "out of memory for job '%s'", job);
        else {
            fresh->opt = job_opt;
            fresh->n_slots = optimizer_slot_count(&job_opt);
        }
    }
    if (rc == STATUS_OK && !commit_reserve(s, j ? j : fresh, plans, n))
        rc = fail(err, STATUS_NO_MEMORY, job, "out of memory for the variables of job '%s'", job);
    if (rc == STATUS_OK) {
        created = commit(s, j ? j : fresh, j == NULL, plans, n);
        fresh = NULL;
    }
    pthread_rwlock_unlock(&s->lock);
    if (rc == STATUS_OK && ret_created != NULL)
        *ret_created = created;
out:
    job_free(fresh);
    plans_free(plans, n);
    return rc;
}

/* ---- pull and push ------------------------------------------------------------------------ */

static status_t check_rows(const sjob_t *j, const shard_t *sh, const int64_t *rows, size_t n,
                           store_err_t *err)
{
    const char *v = sh->var->name;

    if (sh->rank == 0)
        return fail(err, STATUS_INVALID_ARGUMENT, v,
                    "variable '%s' of job '%s' is a scalar: it has no rows to select", v, j->name);
    for (size_t i = 0; i < n; i++)
        if (rows[i] < 0 || (uint64_t)rows[i] >= sh->n_rows)
            return fail(err, STATUS_INVALID_ARGUMENT, v,
                        "variable '%s' shard %d: row index %" PRId64 " (position %zu of %zu) is "
                        "outside [0, %zu)",
                        v, sh->index, rows[i], i, n, sh->n_rows);
    return STATUS_OK;
}

/* Bytes a read of the shard (or of n rows) returns, added to *total within the reply limit. */
static status_t add_reply(const store_t *s, const shard_t *sh, bool has_rows, size_t n_rows,
                          size_t *ret_bytes, size_t *total, store_err_t *err)
{
    size_t bytes = has_rows ? n_rows * sh->row_len * sizeof(float) : sh->n * sizeof(float);

    if (has_rows && n_rows > SIZE_MAX / sizeof(float) / (sh->row_len ? sh->row_len : 1))
        bytes = SIZE_MAX;
    if (bytes > s->limits.max_reply_bytes || *total > s->limits.max_reply_bytes - bytes)
        return fail(err, STATUS_RESOURCE_EXHAUSTED, sh->var->name,
                    "the reply would exceed %" PRIu64 " bytes at variable '%s' shard %d; ask for "
                    "fewer shards or rows per call",
                    s->limits.max_reply_bytes, sh->var->name, sh->index);
    *ret_bytes = bytes;
    *total += bytes;
    return STATUS_OK;
}

/* Copies the shard, or the rows, to dst (shard lock held) and describes the value. */
static void read_value(const shard_t *sh, bool has_rows, const int64_t *rows, size_t n_rows,
                       char *dst, store_value_t *ret)
{
    size_t row_bytes = sh->row_len * sizeof(float);

    ret->version = sh->version;
    ret->rank = sh->rank;
    memcpy(ret->shape, sh->shape, sh->rank * sizeof(int64_t));
    if (!has_rows) {
        memcpy(dst, sh->values, sh->n * sizeof(float));
        return;
    }
    ret->shape[0] = (int64_t)n_rows;
    for (size_t r = 0; r < n_rows; r++)
        memcpy(dst + r * row_bytes, sh->values + (size_t)rows[r] * sh->row_len, row_bytes);
}

status_t store_pull(store_t *s, const char *job, const store_pull_item_t *items, size_t n,
                    store_value_t *ret_values, void **ret_buf, size_t *ret_len, store_err_t *err)
{
    shard_t **shards = malloc((n ? n : 1) * sizeof(*shards));
    size_t total = 0;
    char *buf = NULL;
    sjob_t *j;
    status_t rc;

    if (shards == NULL)
        return fail(err, STATUS_NO_MEMORY, NULL, "out of memory for %zu pull items", n);
    pthread_rwlock_rdlock(&s->lock);
    STATUS_CHECK_GOTO(lookup_job(s, job, &j, err), rc, out);
    for (size_t i = 0; i < n; i++) {
        const store_pull_item_t *it = &items[i];
        STATUS_CHECK_GOTO(lookup_shard(j, &it->key, &shards[i], err), rc, out);
        if (it->has_rows)
            STATUS_CHECK_GOTO(check_rows(j, shards[i], it->rows, it->n_rows, err), rc, out);
        ret_values[i].offset = total;
        STATUS_CHECK_GOTO(
            add_reply(s, shards[i], it->has_rows, it->n_rows, &ret_values[i].bytes, &total, err),
            rc, out);
    }
    if (total > 0 && (buf = rpc_buffer_alloc(total)) == NULL) {
        rc = fail(err, STATUS_NO_MEMORY, NULL, "out of memory for a %zu-byte reply", total);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        shard_t *sh = shards[i];
        pthread_rwlock_rdlock(&sh->lock);
        read_value(sh, items[i].has_rows, items[i].rows, items[i].n_rows,
                   buf != NULL ? buf + ret_values[i].offset : NULL, &ret_values[i]);
        pthread_rwlock_unlock(&sh->lock);
        atomic_fetch_add_explicit(&sh->pulls, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&sh->bytes_pulled, ret_values[i].bytes, memory_order_relaxed);
    }
    *ret_buf = buf;
    *ret_len = total;
    buf = NULL;
    rc = STATUS_OK;
out:
    pthread_rwlock_unlock(&s->lock);
    free(buf);
    free(shards);
    return rc;
}

static status_t check_gradient(const sjob_t *j, const shard_t *sh, const store_push_item_t *it,
                               store_err_t *err)
{
    const char *v = sh->var->name;
    int64_t want[STORE_MAX_RANK];
    char a[160], b[160];

    memcpy(want, sh->shape, sh->rank * sizeof(int64_t));
    if (it->has_rows) {
        STATUS_CHECK(check_rows(j, sh, it->rows, it->n_rows, err));
        want[0] = (int64_t)it->n_rows;
    }
    if (it->rank != sh->rank || !same_dims(it->shape, want, sh->rank))
        return fail(err, STATUS_INVALID_ARGUMENT, v,
                    "variable '%s' shard %d: the gradient's shape %s is not %s", v, sh->index,
                    shape_str(it->shape, it->rank, a, sizeof(a)),
                    shape_str(want, sh->rank, b, sizeof(b)));
    return STATUS_OK;
}

/* What a push item's check found: the version it was made at, the largest gradient magnitude,
 * and whether the shard's bounds proved the update safe (then `next` are the bounds after it). */
typedef struct check {
    uint64_t version;
    double gmax;
    bool proven;
    optimizer_bounds_t next;
} check_t;

/* Marks an update not checked yet: versions count pushes and never get there. */
#define NOT_CHECKED UINT64_MAX

/* Whether the update of it would keep every value and slot of sh finite in float32: proven from
 * the shard's bounds and the gradient's largest magnitude (c->gmax) when they allow, else by a
 * dry run of the optimizer on copies (optimizer_check_*). A NaN or infinite gradient fails it too
 * (every kernel carries the gradient into the value), and only then is the gradient scanned to say
 * so. Caller holds sh's lock, either kind. */
static status_t check_update(const optimizer_config_t *opt, const shard_t *sh,
                             const store_push_item_t *it, check_t *c, store_err_t *err)
{
    size_t bad, nan_at, n = it->has_rows ? it->n_rows * sh->row_len : sh->n;
    status_msg_t m;

    c->version = sh->version;
    c->proven = optimizer_bounds_step(opt, (int64_t)sh->version, c->gmax, &sh->bounds, &c->next);
    if (c->proven)
        return STATUS_OK;
    if (it->has_rows) {
        status_t rc =
            optimizer_check_rows(opt, (int64_t)sh->version, sh->values, sh->n_rows, sh->row_len,
                                 it->rows, it->grad, it->n_rows, sh->slots, NULL, &bad, &m);
        if (rc != STATUS_OK)
            return fail(err, rc, sh->var->name, "variable '%s' shard %d: %s", sh->var->name,
                        sh->index, m.text);
    } else {
        bad = optimizer_check_dense(opt, (int64_t)sh->version, sh->values, it->grad, sh->slots,
                                    sh->n);
    }
    if (bad < n && (nan_at = optimizer_first_non_finite(it->grad, n)) < n)
        return fail(err, STATUS_INVALID_ARGUMENT, sh->var->name,
                    "variable '%s' shard %d: the gradient holds %g at element %zu", sh->var->name,
                    sh->index, (double)it->grad[nan_at], nan_at);
    if (bad < n)
        return fail(err, STATUS_INVALID_ARGUMENT, sh->var->name,
                    "variable '%s' shard %d: gradient element %zu (%g) at learning rate %g would "
                    "make the variable or its optimizer slots overflow float32 or turn NaN",
                    sh->var->name, sh->index, bad, (double)it->grad[bad],
                    optimizer_learning_rate(opt, (int64_t)sh->version));
    return STATUS_OK;
}

/* One update of one shard, and the read-back of push-pull, under the shard's write lock. The
 * update was checked at version c->version (or NOT_CHECKED); if another push got there first, it
 * is checked now and, should it not be safe, not applied (false). Afterwards the shard's bounds
 * are the proven ones, or, after a dry run, measured anew. */
static bool apply_one(store_t *s, const optimizer_config_t *opt, shard_t *sh,
                      const store_push_item_t *it, check_t *c, void *scratch, bool pull_after,
                      char *dst, store_value_t *val, uint64_t *ret_version, store_err_t *err)
{
    uint64_t wire;
    double t0;

    pthread_rwlock_wrlock(&sh->lock);
    if (sh->version != c->version && check_update(opt, sh, it, c, err) != STATUS_OK) {
        pthread_rwlock_unlock(&sh->lock);
        return false;
    }
    t0 = clock_now_s();
    if (it->has_rows) /* indices were checked: it cannot fail */
        optimizer_apply_rows(opt, (int64_t)sh->version, sh->values, sh->n_rows, sh->row_len,
                             it->rows, it->grad, it->n_rows, sh->slots, scratch, NULL);
    else
        optimizer_apply_dense(opt, (int64_t)sh->version, sh->values, it->grad, sh->slots, sh->n);
    sh->version++;
    if (c->proven)
        sh->bounds = c->next;
    else
        optimizer_bounds_measure(opt, sh->values, sh->slots, sh->n, &sh->bounds);
    metric_observe(s->apply_seconds, clock_now_s() - t0);
    *ret_version = sh->version;
    if (pull_after)
        read_value(sh, it->has_rows, it->rows, it->n_rows, dst, val);
    pthread_rwlock_unlock(&sh->lock);

    wire = it->has_rows ? it->n_rows * (sizeof(int64_t) + sh->row_len * sizeof(float))
                        : sh->n * sizeof(float);
    atomic_fetch_add_explicit(&sh->pushes, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->bytes_pushed, wire, memory_order_relaxed);
    if (pull_after) {
        atomic_fetch_add_explicit(&sh->pulls, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&sh->bytes_pulled, val->bytes, memory_order_relaxed);
    }
    return true;
}

/* Checks every item and sizes the scratch and reply (store lock held). */
static status_t validate_push(const store_t *s, const sjob_t *j, const store_push_item_t *items,
                              size_t n, bool pull_after, shard_t **shards, check_t *checks,
                              store_value_t *ret_values, size_t *ret_total, size_t *ret_scratch,
                              store_err_t *err)
{
    size_t total = 0, scratch = 0;

    for (size_t i = 0; i < n; i++) {
        const store_push_item_t *it = &items[i];
        status_t rc;
        STATUS_CHECK(lookup_shard(j, &it->key, &shards[i], err));
        STATUS_CHECK(check_gradient(j, shards[i], it, err));
        /* One item is checked under its write lock, just before it is applied: checked once,
         * even while other pushes hold the shard. Several are all checked first, so that one
         * that would fail leaves the others unapplied. */
        checks[i].version = NOT_CHECKED;
        /* Summed duplicate rows are at most as large as all of them together. */
        checks[i].gmax = optimizer_max_abs(it->grad, it->has_rows ? it->n_rows * shards[i]->row_len
                                                                  : shards[i]->n) *
                         (it->has_rows ? (double)it->n_rows : 1.0);
        if (n > 1) {
            pthread_rwlock_rdlock(&shards[i]->lock);
            rc = check_update(&j->opt, shards[i], it, &checks[i], err);
            pthread_rwlock_unlock(&shards[i]->lock);
            if (rc != STATUS_OK && err != NULL) {
                size_t used = strlen(err->msg.text);
                snprintf(err->msg.text + used, sizeof(err->msg.text) - used,
                         "; nothing was applied");
            }
            STATUS_CHECK(rc);
        }
        if (it->has_rows) {
            size_t need = optimizer_rows_scratch_size(it->n_rows, shards[i]->row_len);
            if (need == SIZE_MAX)
                return fail(err, STATUS_RESOURCE_EXHAUSTED, it->key.variable,
                            "variable '%s': %zu rows are too many for one push", it->key.variable,
                            it->n_rows);
            scratch = need > scratch ? need : scratch;
        }
        if (pull_after) {
            ret_values[i].offset = total;
            STATUS_CHECK(add_reply(s, shards[i], it->has_rows, it->n_rows, &ret_values[i].bytes,
                                   &total, err));
        }
    }
    *ret_total = total;
    *ret_scratch = scratch;
    return STATUS_OK;
}

status_t store_push(store_t *s, const char *job, const store_push_item_t *items, size_t n,
                    bool pull_after, uint64_t *ret_versions, store_value_t *ret_values,
                    void **ret_buf, size_t *ret_len, store_err_t *err)
{
    shard_t **shards = malloc((n ? n : 1) * sizeof(*shards));
    check_t *checks = malloc((n ? n : 1) * sizeof(*checks));
    size_t total = 0, scratch_len = 0, applied = 0;
    char *buf = NULL;
    void *scratch = NULL;
    sjob_t *j;
    status_t rc;

    if (shards == NULL || checks == NULL) {
        free(shards);
        free(checks);
        return fail(err, STATUS_NO_MEMORY, NULL, "out of memory for %zu push items", n);
    }
    pthread_rwlock_rdlock(&s->lock);
    STATUS_CHECK_GOTO(lookup_job(s, job, &j, err), rc, out);
    STATUS_CHECK_GOTO(validate_push(s, j, items, n, pull_after, shards, checks, ret_values, &total,
                                    &scratch_len, err),
                      rc, out);
    if ((scratch_len > 0 && (scratch = malloc(scratch_len)) == NULL) ||
        (total > 0 && (buf = rpc_buffer_alloc(total)) == NULL)) {
        rc = fail(err, STATUS_NO_MEMORY, NULL, "out of memory for a push of %zu items", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        applied += apply_one(s, &j->opt, shards[i], &items[i], &checks[i], scratch, pull_after,
                             pull_after && buf != NULL ? buf + ret_values[i].offset : NULL,
                             pull_after ? &ret_values[i] : NULL, &ret_versions[i], err);
    if (applied < n) {
        /* A single item checked at its update, or (rarely) one that a concurrent push changed
         * between the check of all items and its update. */
        rc = err != NULL ? err->msg.status : STATUS_INVALID_ARGUMENT;
        if (err != NULL) {
            size_t used = strlen(err->msg.text);
            if (applied == 0)
                snprintf(err->msg.text + used, sizeof(err->msg.text) - used,
                         "; nothing was applied");
            else
                snprintf(err->msg.text + used, sizeof(err->msg.text) - used,
                         " (after a concurrent push; %zu of the %zu items were applied)", applied,
                         n);
        }
        goto out;
    }
    if (pull_after) {
        *ret_buf = buf;
        *ret_len = total;
        buf = NULL;
    }
    rc = STATUS_OK;
out:
    pthread_rwlock_unlock(&s->lock);
    free(scratch);
    free(buf);
    free(shards);
    free(checks);
    return rc;
}

/* ---- drop, stats, totals ------------------------------------------------------------------ */

status_t store_drop_job(store_t *s, const char *job, size_t *ret_shards, store_err_t *err)
{
    sjob_t *j;
    size_t pos;
    status_t rc;

    STATUS_CHECK(check_name(job, "job", err));
    pthread_rwlock_wrlock(&s->lock);
    j = find_job(s, job, &pos);
    if (j == NULL) {
        rc = fail(err, STATUS_NOT_FOUND, job, "job '%s' has no variables on this parameter server",
                  job);
    } else {
        memmove(&s->jobs[pos], &s->jobs[pos + 1], (s->n_jobs - pos - 1) * sizeof(*s->jobs));
        s->n_jobs--;
        s->param_bytes -= j->param_bytes;
        s->slot_bytes -= j->slot_bytes;
        s->overhead_bytes -= j->overhead_bytes;
        s->n_vars -= j->n_vars;
        s->n_shards -= j->n_shards;
        rc = STATUS_OK;
    }
    pthread_rwlock_unlock(&s->lock);
    if (j != NULL && ret_shards != NULL)
        *ret_shards = j->n_shards;
    job_free(j); /* no call can reach it any more: every user held the store lock */
    return rc;
}

static void job_stats(const sjob_t *j, store_stats_cb cb, void *arg)
{
    for (size_t i = 0; i < j->n_vars; i++) {
        const var_t *v = j->vars[i];
        for (size_t k = 0; k < v->n_shards; k++) {
            shard_t *sh = v->shards[k];
            store_shard_stats_t st = {
                .job = j->name,
                .variable = v->name,
                .shard = sh->index,
                .rank = sh->rank,
                .shape = sh->shape,
                .value_bytes = (uint64_t)sh->n * sizeof(float),
                .slot_bytes = (uint64_t)sh->n * sizeof(float) * sh->n_slots,
                .pulls = atomic_load_explicit(&sh->pulls, memory_order_relaxed),
                .pushes = atomic_load_explicit(&sh->pushes, memory_order_relaxed),
                .bytes_pulled = atomic_load_explicit(&sh->bytes_pulled, memory_order_relaxed),
                .bytes_pushed = atomic_load_explicit(&sh->bytes_pushed, memory_order_relaxed),
            };
            pthread_rwlock_rdlock(&sh->lock);
            st.version = sh->version;
            pthread_rwlock_unlock(&sh->lock);
            cb(&st, arg);
        }
    }
}

status_t store_stats(store_t *s, const char *job, store_stats_cb cb, void *arg, store_err_t *err)
{
    sjob_t *j = NULL;
    status_t rc = STATUS_OK;

    pthread_rwlock_rdlock(&s->lock);
    if (job != NULL && job[0] != '\0')
        rc = lookup_job(s, job, &j, err);
    for (size_t i = 0; rc == STATUS_OK && i < s->n_jobs; i++)
        if (j == NULL || s->jobs[i] == j)
            job_stats(s->jobs[i], cb, arg);
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

void store_totals(store_t *s, store_totals_t *ret)
{
    pthread_rwlock_rdlock(&s->lock);
    ret->param_bytes = s->param_bytes;
    ret->slot_bytes = s->slot_bytes;
    ret->overhead_bytes = s->overhead_bytes;
    ret->jobs = s->n_jobs;
    ret->variables = s->n_vars;
    ret->shards = s->n_shards;
    pthread_rwlock_unlock(&s->lock);
}
