/* Models: the layers planned in order (each kind's shape, parameters and buffers, layers/), each
 * reading the one before it (Sequential) or the layers its graph names (Functional), on the
 * model's backend, and what the model tells its users about itself. */
#define _POSIX_C_SOURCE 200809L
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "base/log.h"
#include "layers/layer.h"
#include "model_internal.h"

static size_t count_params(const job_model_t *spec)
{
    size_t n = 0;
    for (size_t i = 0; i < spec->n_layers; i++) {
        const layer_ops_t *ops = layer_ops(spec->layers[i].kind);
        n += ops->param_count != NULL ? ops->param_count(&spec->layers[i]) : 0;
    }
    return n;
}

/* Keras's masks, for an Embedding with mask_zero: the layers that support masking and keep the
 * steps pass the mask on, GlobalAveragePooling1D uses it (and ends it), a Softmax would apply it
 * (refused), any other layer drops it as Keras does (with a warning). *mask: the mask alive after
 * l, NULL when none. */
/* Whether the mask a layer receives is the one Keras's JSON names for it (l->spec.mask_of):
 * made by an Embedding that reads that input. */
static bool mask_of_input(const model_t *m, const job_model_t *spec, const layer_t *l,
                          const float *mask)
{
    for (size_t k = 0; l->spec.mask_of[0] != '\0' && spec->n_inputs > 0 && k < m->n_layers; k++) {
        const layer_t *e = &m->layers[k];
        if (e->spec.kind == JOB_LAYER_EMBEDDING && e->mask == mask && e->src[0] < 0)
            return strcmp(spec->inputs[job_input_index(e->src[0])].name, l->spec.mask_of) == 0;
    }
    return true;
}

static status_t carry_mask(model_t *m, const job_model_t *spec, layer_t *l, const float **mask,
                           status_msg_t *err)
{
    if (l->spec.kind == JOB_LAYER_EMBEDDING) {
        *mask = l->spec.mask_zero ? l->mask : NULL;
        return STATUS_OK;
    }
    if (l->spec.masked && (*mask == NULL || !mask_of_input(m, spec, l, *mask)))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "layer %s is called with the mask of ids != 0%s%s%s, which no "
                           "Embedding with mask_zero reading them brings it",
                           l->spec.name, l->spec.mask_of[0] ? " of input '" : "", l->spec.mask_of,
                           l->spec.mask_of[0] ? "'" : "");
    if (*mask == NULL)
        return STATUS_OK;
    switch (l->spec.kind) {
    case JOB_LAYER_GLOBAL_AVERAGE_POOLING1D:
        l->seq_mask = *mask;
        *mask = NULL;
        return STATUS_OK;
    case JOB_LAYER_DENSE:
    case JOB_LAYER_ACTIVATION:
    case JOB_LAYER_DROPOUT:
    case JOB_LAYER_SPATIAL_DROPOUT1D:
    case JOB_LAYER_SPATIAL_DROPOUT2D:
    case JOB_LAYER_LAYER_NORMALIZATION:
    case JOB_LAYER_RELU:
    case JOB_LAYER_LEAKY_RELU:
    case JOB_LAYER_PRELU:
    case JOB_LAYER_ELU:
    case JOB_LAYER_RESCALING:
    case JOB_LAYER_GAUSSIAN_NOISE:
        return STATUS_OK; /* the steps stay: so does the mask */
    case JOB_LAYER_SOFTMAX:
    case JOB_LAYER_BATCH_NORMALIZATION:
        return status_fail(err, STATUS_BAD_CONFIG,
                           "layer %s: a %s under the mask of mask_zero is not supported",
                           l->spec.name, job_layer_keras_class(l->spec.kind));
    default:
        LOG_WARNING(TRAIN,
                    "layer %s (%s) does not support masking: the mask of mask_zero stops there, as "
                    "in Keras",
                    l->spec.name, job_layer_kind_name(l->spec.kind));
        *mask = NULL;
        return STATUS_OK;
    }
}

/* Sets what layer i reads: its sources, their shapes (the first's is its input shape) and the
 * mask of mask_zero that comes with them (*ret_mask; a merge takes none). */
static status_t wire(model_t *m, const job_model_t *spec, size_t i, const float **masks,
                     const float **ret_mask, status_msg_t *err)
{
    layer_t *l = &m->layers[i];

    l->n_ins = job_layer_is_merge(l->spec.kind) ? l->spec.n_inputs : 1;
    if (l->n_ins < 1 || l->n_ins > JOB_MAX_INPUTS)
        return status_fail(err, STATUS_BAD_CONFIG, "layer %s reads %d inputs (1 to %d)",
                           l->spec.name, l->n_ins, JOB_MAX_INPUTS);
    for (int k = 0; k < l->n_ins; k++) {
        int src = job_layer_input(spec, i, k);
        if (src >= (int)i || src < JOB_INPUT_OF(job_model_inputs(spec) - 1))
            return status_fail(err, STATUS_BAD_CONFIG, "layer %s reads a layer after it",
                               l->spec.name);
        l->src[k] = src;
        if (src < 0) {
            int rank;
            const int *shape = job_model_input_shape(spec, job_input_index(src), &rank);
            l->ins_rank[k] = rank;
            memcpy(l->ins_shape[k], shape, sizeof(l->ins_shape[k]));
            continue;
        }
        l->ins_rank[k] = m->layers[src].out_rank;
        memcpy(l->ins_shape[k], m->layers[src].out_shape, sizeof(l->ins_shape[k]));
        if (masks[src] != NULL && l->n_ins > 1)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %s: merging under the mask of mask_zero is not supported",
                               l->spec.name);
        *ret_mask = masks[src];
    }
    l->in_rank = l->ins_rank[0];
    memcpy(l->in_shape, l->ins_shape[0], sizeof(l->in_shape));
    return STATUS_OK;
}

/* A later call of a shared layer (spec.shares): the parameters its plan made (with values of
 * their own, unused) become `own`, the first call's values with gradient buffers of their own;
 * the model's list keeps the first call's alone. The calls of one layer are chained in order
 * (next_call). */
static status_t share_params(model_t *m, const job_model_t *spec, size_t i, status_msg_t *err)
{
    layer_t *l = &m->layers[i], *first, *prev;
    model_param_t *own;

    if (!job_layer_shareable(spec, i) || m->layers[l->spec.shares - 1].n_params != l->n_params)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "layer %s: a later call of a shared layer must name an earlier first "
                           "call of its kind, one that may be shared",
                           l->spec.name);
    first = prev = &m->layers[l->spec.shares - 1];
    for (size_t k = 0; k < l->n_params; k++) {
        const model_param_t *a = &first->params[k], *b = &l->params[k];
        if (a->rank != b->rank || a->n != b->n ||
            memcmp(a->shape, b->shape, (size_t)a->rank * sizeof(int)) != 0) {
            char in_a[96], in_b[96];
            layer_shape_str(first->in_shape, first->in_rank, in_a, sizeof(in_a));
            layer_shape_str(l->in_shape, l->in_rank, in_b, sizeof(in_b));
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %s is called on %s after %s: a shared layer's calls take "
                               "inputs of shapes its weights fit alike",
                               l->spec.name, in_b, in_a);
        }
    }
    /* an Embedding's first call gathers every call's rows: room for all of them */
    if (l->spec.kind == JOB_LAYER_EMBEDDING) {
        size_t rows = first->rows_cap + l->rows_cap, dim = (size_t)l->spec.output_dim;
        if (rows > (size_t)l->spec.input_dim)
            rows = (size_t)l->spec.input_dim > first->rows_cap ? (size_t)l->spec.input_dim
                                                               : first->rows_cap;
        first->w->rows_index = layer_alloc(m, rows, sizeof(int64_t));
        first->w->rows_grad = layer_alloc(m, rows * dim, sizeof(float));
        if (first->w->rows_index == NULL || first->w->rows_grad == NULL)
            return status_fail(err, m->alloc_rc, "layer %s: no room for the rows of its calls",
                               l->spec.name);
        first->rows_cap = rows;
    }
    own = calloc(l->n_params + 1, sizeof(*own));
    if (own == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t k = 0; k < l->n_params; k++) {
        own[k] = l->params[k];
        own[k].value = first->params[k].value;
    }
    if (l->w != NULL)
        l->w = own + (l->w - l->params);
    if (l->b != NULL)
        l->b = own + (l->b - l->params);
    if (l->w2 != NULL)
        l->w2 = own + (l->w2 - l->params);
    m->n_params -= l->n_params;
    l->params = l->own = own;
    while (prev->next_call > 0)
        prev = &m->layers[prev->next_call - 1];
    prev->next_call = (int)i + 1;
    return STATUS_OK;
}

/* A graph's gradient buffers: one for the output of each layer that others read. */
static status_t graph_buffers(model_t *m, status_msg_t *err)
{
    m->gbuf = calloc(m->n_layers, sizeof(*m->gbuf));
    m->grad_of = calloc(m->n_layers, sizeof(*m->grad_of));
    if (m->gbuf == NULL || m->grad_of == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    /* backward needs every layer but the outputs read by a later one (job_model_finish checks
     * it of a parsed model; model_new takes any spec) */
    for (size_t i = 0; i + 1 < m->n_layers; i++) {
        bool read = false;
        for (int k = 0; k < m->n_heads; k++)
            read |= (size_t)m->heads[k].layer == i;
        for (size_t j = i + 1; j < m->n_layers && !read; j++)
            for (int k = 0; k < m->layers[j].n_ins && !read; k++)
                read = m->layers[j].src[k] == (int)i;
        if (!read)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "nothing reads the output of layer %s: every layer must lead to "
                               "one of the model's outputs",
                               m->layers[i].spec.name);
    }
    for (size_t i = 0; i + 1 < m->n_layers; i++) {
        m->gbuf[i] = layer_floats(m, layer_mul_sat((size_t)m->max_batch, m->layers[i].out_len));
        if (m->gbuf[i] == NULL) {
            layer_plan_t at = {.m = m, .index = (int)i, .name = m->layers[i].spec.name};
            return layer_plan_failed(&at, err);
        }
    }
    return STATUS_OK;
}

status_t model_new(const job_model_t *spec, job_loss_kind_t loss, bool from_logits, int max_batch,
                   uint64_t seed, uint64_t max_bytes, model_t **ret_model, status_msg_t *err)
{
    return model_new_on(backend_cpu(), spec, loss, from_logits, max_batch, seed, max_bytes,
                        ret_model, err);
}

status_t model_new_on(const backend_t *be, const job_model_t *spec, job_loss_kind_t loss,
                      bool from_logits, int max_batch, uint64_t seed, uint64_t max_bytes,
                      model_t **ret_model, status_msg_t *err)
{
    status_msg_t stale;
    model_t *m;
    size_t max_len;
    const float **masks; /* of an Embedding with mask_zero: alive after each layer, or NULL */
    status_t rc;

    if (spec->n_layers == 0 || spec->input_rank < 1 || max_batch < 1)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "the model needs an input shape and at least one layer");
    for (size_t i = 0; i < spec->n_layers; i++)
        if ((size_t)spec->layers[i].kind >= JOB_LAYER_KINDS)
            return status_fail(err, STATUS_BAD_CONFIG, "layer %zu: unknown kind %d", i,
                               (int)spec->layers[i].kind);
    if (spec->n_outputs < 0 || spec->n_outputs > JOB_MAX_OUTPUTS)
        return status_fail(err, STATUS_BAD_CONFIG, "%d outputs (at most %d)", spec->n_outputs,
                           JOB_MAX_OUTPUTS);
    for (int k = 0; k < spec->n_outputs && spec->n_outputs > 1; k++) {
        bool again = false;
        for (int e = 0; e < k; e++)
            again |= spec->outputs[e] == spec->outputs[k];
        if (spec->outputs[k] < 0 || (size_t)spec->outputs[k] >= spec->n_layers || again)
            return status_fail(err, STATUS_BAD_CONFIG, "output %d: not a layer of its own", k);
    }
    if (spec->n_outputs > 1) { /* nothing reads the last layer: it must be an output */
        bool last = false;
        for (int k = 0; k < spec->n_outputs; k++)
            last |= (size_t)spec->outputs[k] == spec->n_layers - 1;
        if (!last)
            return status_fail(err, STATUS_BAD_CONFIG, "the last layer is not an output");
    }
    STATUS_CHECK(be->init(err));
    if (be->check != NULL && be->check(&stale) != STATUS_OK) /* met where nothing checked */
        LOG_WARNING(TRAIN, "a device error before this model: %s", stale.text);
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    m->be = be;
    m->max_batch = max_batch;
    m->max_bytes = max_bytes > 0 && max_bytes < SIZE_MAX ? (size_t)max_bytes : SIZE_MAX;
    m->n_heads = job_model_outputs(spec);
    for (int k = 0; k < m->n_heads; k++)
        m->heads[k] = (model_head_t){.layer = job_model_output(spec, k),
                                     .threshold = 0.5f,
                                     /* the others' until model_set_loss_options: one that
                                      * fits any output */
                                     .loss = k == 0 ? loss : JOB_LOSS_MSE,
                                     .from_logits = k == 0 && from_logits,
                                     .huber_delta = 1.0,
                                     .weight = 1.0f};
    m->n_layers = spec->n_layers;
    m->layers = calloc(spec->n_layers, sizeof(*m->layers));
    m->params = calloc(count_params(spec) + 1, sizeof(*m->params));
    m->graph = job_model_is_graph(spec);
    masks = calloc(spec->n_layers, sizeof(*masks));
    if (m->layers == NULL || m->params == NULL || masks == NULL) {
        free(masks);
        model_free(m);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    m->n_model_in = job_model_inputs(spec);
    for (int k = 0; k < m->n_model_in; k++) {
        int rank;
        const int *shape = job_model_input_shape(spec, k, &rank);
        m->in_at[k] = m->in_len;
        m->n_in[k] = layer_shape_len(shape, rank);
        m->in_len += m->n_in[k];
        if (m->n_model_in > 1 && (m->in_buf[k] = layer_floats(
                                      m, layer_mul_sat((size_t)max_batch, m->n_in[k]))) == NULL) {
            layer_plan_t at = {.m = m, .index = 0, .name = spec->inputs[k].name};
            rc = layer_plan_failed(&at, err);
            free(masks);
            model_free(m);
            return rc;
        }
    }
    /* a device reads its own copy of the batch */
    if (be->device_memory && m->n_model_in == 1 &&
        (m->x_buf = layer_floats(m, layer_mul_sat((size_t)max_batch, m->in_len))) == NULL) {
        layer_plan_t at = {.m = m, .index = 0, .name = "the input"};
        rc = layer_plan_failed(&at, err);
        free(masks);
        model_free(m);
        return rc;
    }
    max_len = m->in_len;
    for (size_t i = 0; i < spec->n_layers; i++) {
        layer_t *l = &m->layers[i];
        const float *mask = NULL;
        l->spec = spec->layers[i];
        if (!l->spec.name[0])
            snprintf(l->spec.name, sizeof(l->spec.name), "%s_%zu",
                     job_layer_kind_name(l->spec.kind), i);
        rc = wire(m, spec, i, masks, &mask, err);
        if (rc == STATUS_OK)
            rc = layer_plan(m, l, (int)i, seed + 1000003ull * (i + 1), err);
        if (rc == STATUS_OK && l->spec.shares > 0)
            rc = share_params(m, spec, i, err);
        if (rc == STATUS_OK)
            rc = carry_mask(m, spec, l, &mask, err);
        if (rc != STATUS_OK) {
            free(masks);
            model_free(m);
            return rc;
        }
        masks[i] = mask;
        if (l->in_len > max_len)
            max_len = l->in_len;
        if (l->out_len > max_len)
            max_len = l->out_len;
    }
    for (size_t i = 0; i < m->n_layers; i++) /* a shared BatchNormalization's calls */
        if (m->layers[i].spec.kind == JOB_LAYER_BATCH_NORMALIZATION && m->layers[i].own == NULL &&
            m->layers[i].next_call > 0)
            layer_batch_norm_share(m->layers, i);
    rc = STATUS_OK;
    for (int k = 0; k < m->n_heads && rc == STATUS_OK; k++) /* every output's loss: unmasked */
        if (masks[m->heads[k].layer] != NULL)
            rc = status_fail(err, STATUS_BAD_CONFIG,
                             "the mask of the Embedding's mask_zero reaches the model's output "
                             "'%s': a GlobalAveragePooling1D must use it (masking a loss is not "
                             "supported)",
                             spec->layers[m->heads[k].layer].name);
    free(masks);
    if (rc == STATUS_OK && m->graph)
        rc = graph_buffers(m, err);
    if (rc != STATUS_OK) {
        model_free(m);
        return rc;
    }
    rc = model_check_loss(m, err);
    if (rc != STATUS_OK) {
        model_free(m);
        return rc;
    }
    m->grad_a = layer_floats(m, layer_mul_sat((size_t)max_batch, max_len));
    m->grad_b = layer_floats(m, layer_mul_sat((size_t)max_batch, max_len));
    for (int k = 0; k < m->n_heads && m->grad_a != NULL; k++) {
        model_head_t *h = &m->heads[k];
        h->probs = layer_floats(m, layer_mul_sat((size_t)max_batch, h->out_len));
        h->dy = (size_t)h->layer == m->n_layers - 1 ? m->grad_a : m->gbuf[h->layer];
        if (h->probs == NULL)
            m->grad_a = NULL;
    }
    if (m->grad_a == NULL || m->grad_b == NULL) {
        layer_plan_t at = {.m = m, .index = (int)spec->n_layers - 1, .name = "gradients"};
        rc = layer_plan_failed(&at, err);
        model_free(m);
        return rc;
    }
    /* what the device met while the buffers were made (their zeroing, say) */
    if (be->check != NULL && (rc = be->check(err)) != STATUS_OK) {
        model_free(m);
        return rc;
    }
    *ret_model = m;
    return STATUS_OK;
}

void model_free(model_t *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_buffers; i++)
        m->be->free(m->buffers[i]);
    free(m->buffers);
    free(m->gbuf);
    free(m->grad_of);
    for (size_t i = 0; m->layers != NULL && i < m->n_layers; i++)
        free(m->layers[i].own);
    free(m->layers);
    free(m->params);
    free(m);
}

size_t model_param_count(const model_t *m)
{
    return m->n_params;
}

model_param_t *model_param(model_t *m, size_t i)
{
    return i < m->n_params ? &m->params[i] : NULL;
}

static bool synchronized_bn(const layer_t *l)
{
    return l->spec.kind == JOB_LAYER_BATCH_NORMALIZATION && l->spec.synchronized;
}

size_t model_sync_width(const model_t *m)
{
    size_t most = 0;

    for (size_t i = 0; i < m->n_layers; i++) {
        const layer_t *l = &m->layers[i];
        size_t want = 2 * (size_t)l->in_shape[l->in_rank - 1] + 1; /* two sums a channel, rows */
        if (synchronized_bn(l) && want > most)
            most = want;
    }
    return most;
}

void model_set_sync(model_t *m, layer_sync_t *s, int rank)
{
    for (size_t i = 0; i < m->n_layers; i++)
        if (synchronized_bn(&m->layers[i])) {
            m->layers[i].sync = s;
            m->layers[i].sync_rank = rank;
        }
}

bool model_sync_idle(model_t *m)
{
    size_t width = model_sync_width(m);
    double *zeros;
    bool ok = true;

    if (width == 0 || (zeros = calloc(width, sizeof(double))) == NULL)
        return width == 0;
    /* forward, layers first to last */
    for (size_t i = 0; ok && i < m->n_layers; i++)
        if (synchronized_bn(&m->layers[i]) && m->layers[i].sync != NULL)
            ok = layer_batch_norm_idle(&m->layers[i], false, zeros, width);
    /* backward, last to first; no input gradient for a layer that reads a model input */
    for (size_t i = m->n_layers; ok && i-- > 0;) {
        layer_t *l = &m->layers[i];
        bool reads_input = m->graph ? l->src[0] < 0 : i == 0;
        if (synchronized_bn(l) && l->sync != NULL && !reads_input)
            ok = layer_batch_norm_idle(l, true, zeros, width);
    }
    free(zeros);
    return ok;
}

size_t model_param_ids(const model_t *m, size_t i, size_t *ret_at, size_t *ret_len)
{
    bool seen[JOB_MAX_MODEL_INPUTS] = {0};
    size_t n = 0;

    for (size_t k = 0; i < m->n_params && m->params[i].sparse && k < m->n_layers; k++) {
        const layer_t *l = &m->layers[k];
        if (l->spec.kind != JOB_LAYER_EMBEDDING || l->params != &m->params[i])
            continue;
        /* the first call, then the later ones: each reads a model input (embedding_plan) */
        for (int call = (int)k + 1; call > 0; call = m->layers[call - 1].next_call) {
            int src = m->layers[call - 1].src[0], in = job_input_index(src);
            if (src >= 0 || in < 0 || in >= JOB_MAX_MODEL_INPUTS || seen[in])
                continue;
            seen[in] = true;
            ret_at[n] = m->n_model_in > 1 ? m->in_at[in] : 0;
            ret_len[n++] = m->n_model_in > 1 ? m->n_in[in] : m->in_len;
        }
        break;
    }
    return n;
}

void model_use_values(model_t *dst, model_t *src)
{
    for (size_t i = 0; i < dst->n_params && i < src->n_params; i++)
        dst->params[i].value = src->params[i].value;
    for (size_t i = 0; i < dst->n_layers; i++) {
        layer_t *l = &dst->layers[i];
        for (size_t k = 0; l->own != NULL && k < l->n_params; k++)
            l->own[k].value = dst->layers[l->spec.shares - 1].params[k].value;
    }
}

size_t model_bytes(const model_t *m)
{
    return m->bytes;
}

const backend_t *model_backend(const model_t *m)
{
    return m->be;
}

int model_max_batch(const model_t *m)
{
    return m->max_batch;
}

size_t model_input_len(const model_t *m)
{
    return m->in_len;
}

size_t model_output_len(const model_t *m)
{
    return m->out_len;
}

const float *model_output_of(const model_t *m, int k)
{
    return m->heads[k].fused ? m->heads[k].probs : m->layers[m->heads[k].layer].out;
}

const float *model_output(const model_t *m)
{
    return model_output_of(m, 0);
}

int model_outputs(const model_t *m)
{
    return m->n_heads;
}

size_t model_output_len_of(const model_t *m, int k)
{
    return m->heads[k].out_len;
}

bool model_constrain(model_t *m)
{
    bool any = false;

    for (size_t i = 0; i < model_param_count(m); i++) {
        model_param_t *p = model_param(m, i);
        if (p->constraint.kind == JOB_CONSTRAINT_NONE)
            continue;
        job_constraint_apply(&p->constraint, p->value, p->shape, p->rank, p->n);
        any = true;
    }
    return any;
}

void model_summary(const model_t *m, char *buf, size_t len)
{
    size_t n = 0, total = 0;
    for (size_t i = 0; i < m->n_layers && n < len; i++) {
        const layer_t *l = &m->layers[i];
        char shape[96];
        size_t params = 0;
        for (size_t k = 0; k < l->n_params && l->own == NULL; k++) /* a shared layer's once */
            params += l->params[k].n;
        layer_shape_str(l->out_shape, l->out_rank, shape, sizeof(shape));
        n += (size_t)snprintf(buf + n, len - n, "  %-28s %-22s %10zu\n", l->spec.name, shape,
                              params);
        total += params;
    }
    if (n < len)
        snprintf(buf + n, len - n, "  total parameters: %zu", total);
}

/* The i-th layer that draws random numbers in training (layer_draws), or NULL. */
static layer_t *random_layer(model_t *m, size_t i)
{
    for (size_t k = 0; k < m->n_layers; k++)
        if (layer_draws(m->layers[k].spec.kind) && i-- == 0)
            return &m->layers[k];
    return NULL;
}

size_t model_rng_count(model_t *m)
{
    size_t n = 0;

    while (random_layer(m, n) != NULL)
        n++;
    return n;
}

uint64_t *model_rng_state(model_t *m, size_t i)
{
    layer_t *l = random_layer(m, i);

    return l != NULL ? &l->rng : NULL;
}

void model_set_huber_delta(model_t *m, double delta)
{
    for (int k = 0; delta > 0 && k < m->n_heads; k++)
        m->heads[k].huber_delta = delta;
}

status_t model_set_loss_options(model_t *m, const job_t *job, status_msg_t *err)
{
    int n = job->n_outputs > 0 ? job->n_outputs : 1;

    if (n != m->n_heads)
        return status_fail(err, STATUS_BAD_CONFIG, "the job gives %d loss%s for %d outputs", n,
                           n == 1 ? "" : "es", m->n_heads);
    for (int k = 0; k < n; k++) {
        /* a job of one output may leave outputs[] empty: its loss is in the job's fields */
        job_output_t o = job->n_outputs > 0
                             ? job->outputs[k]
                             : (job_output_t){.loss = job->loss,
                                              .from_logits = job->from_logits,
                                              .huber_delta = job->huber_delta,
                                              .label_smoothing = job->label_smoothing,
                                              .weight = 1.0};
        model_head_t *h = &m->heads[k];
        h->loss = o.loss;
        h->from_logits = o.from_logits;
        h->huber_delta = o.huber_delta > 0 ? o.huber_delta : 1.0;
        h->smoothing =
            o.label_smoothing >= 0 && o.label_smoothing <= 1 ? (float)o.label_smoothing : 0.0f;
        h->weight = (float)o.weight;
        /* a model of one: the job's accuracy's; of several: each output's accuracy metric's */
        h->threshold = n == 1 ? job->accuracy_threshold : 0.5f;
        for (int i = 0; n > 1 && i < job->n_metrics; i++)
            if (job->metrics[i].kind == JOB_METRIC_OUTPUT_ACCURACY && job->metrics[i].output == k)
                h->threshold = job->metrics[i].threshold;
    }
    m->loss_sum = job->loss_sum;
    m->loss_unreduced = job->loss_unreduced;
    m->n_metrics = job->n_metrics < JOB_MAX_METRICS ? job->n_metrics : JOB_MAX_METRICS;
    memcpy(m->metrics, job->metrics, (size_t)m->n_metrics * sizeof(*m->metrics));
    return model_check_loss(m, err);
}

void model_metrics_into(model_t *m, double *state)
{
    m->metric_sink = state;
}

double *model_metrics_sink(const model_t *m)
{
    return m->metric_sink;
}

void model_set_draw_key(model_t *m, uint64_t key)
{
    for (size_t k = 0; k < m->n_layers; k++) {
        m->layers[k].draw_key = key;
        m->layers[k].draw_keyed = true;
    }
}

uint64_t model_draw_key(int64_t epoch, int64_t index, int slice)
{
    uint64_t s = (uint64_t)epoch;
    uint64_t k = layer_rng_next(&s);
    s = k ^ (uint64_t)index;
    k = layer_rng_next(&s);
    s = k ^ (uint64_t)(uint32_t)slice;
    return layer_rng_next(&s);
}
