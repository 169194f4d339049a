/* Sequential models on the CPU: shape inference, Keras initializers (common/job/initializer.c),
 * forward and backward passes of every layer, losses and accuracy. Matrix products go through
 * blas_sgemm.
 */
#define _POSIX_C_SOURCE 200809L
#include "model.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "job/initializer.h"
#include "base/log.h"
#include "model_internal.h"

/* ---- random numbers (splitmix64) ---------------------------------------------------------- */

uint64_t model_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- shapes ------------------------------------------------------------------------------- */

/* Saturating product: a size past what any machine holds stays past every limit. */
static size_t mul_sat(size_t a, size_t b)
{
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

static size_t shape_len(const int *shape, int rank)
{
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n = mul_sat(n, (size_t)(shape[i] > 0 ? shape[i] : 0));
    return n;
}

static void shape_str(const int *shape, int rank, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "(batch");
    for (int i = 0; i < rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, ", %d", shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, ")");
}

/* Output size of a window sliding over `in`, TensorFlow's rule for valid and same padding;
 * *ret_pad gets the padding before the first element (the extra one goes after). */
static int window_out(int in, int k, int stride, bool same, int *ret_pad)
{
    if (same) {
        int64_t out = ((int64_t)in + stride - 1) / stride;
        int64_t total = (out - 1) * stride + k - in;
        *ret_pad = total > 0 && total / 2 <= INT_MAX ? (int)(total / 2) : 0;
        return total / 2 <= INT_MAX ? (int)out : 0;
    }
    *ret_pad = 0;
    return in >= k ? (in - k) / stride + 1 : 0;
}

/* ---- memory ------------------------------------------------------------------------------ */

/* Every buffer of the model comes from here: `count` zeroed elements of `elem` bytes, 64-byte
 * aligned, counted against m->max_bytes. NULL when the buffer would pass the limit, hold more
 * than INT_MAX elements (the BLAS dimensions are ints), or the allocation fails; the first such
 * failure is kept in m->alloc_rc and m->alloc_bytes for plan_failed. */
static void *model_alloc(model_t *m, size_t count, size_t elem)
{
    size_t bytes = mul_sat(count ? count : 1, elem), rounded;
    void *p = NULL;

    if (m->alloc_rc != STATUS_OK)
        return NULL;
    if (count > INT_MAX || bytes > m->max_bytes - m->bytes || bytes > SIZE_MAX - 63)
        m->alloc_rc = STATUS_RESOURCE_EXHAUSTED;
    else if ((p = aligned_alloc(64, rounded = (bytes + 63) / 64 * 64)) == NULL)
        m->alloc_rc = STATUS_NO_MEMORY;
    if (p == NULL) {
        m->alloc_bytes = bytes;
        m->alloc_count = count;
        return NULL;
    }
    memset(p, 0, rounded);
    m->bytes += rounded;
    return p;
}

static float *alloc_floats(model_t *m, size_t n)
{
    return model_alloc(m, n, sizeof(float));
}

/* The error for a layer whose buffers model_alloc refused. */
static status_t plan_failed(const model_t *m, int index, const char *name, status_msg_t *err)
{
    if (m->alloc_rc == STATUS_NO_MEMORY)
        return status_fail(err, STATUS_NO_MEMORY,
                           "layer %d (%s): out of memory for a buffer of %zu bytes", index, name,
                           m->alloc_bytes);
    if (m->alloc_count > INT_MAX)
        return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                           "layer %d (%s): a tensor of %zu values at batch size %d is over the "
                           "%d values one tensor may hold",
                           index, name, m->alloc_count, m->max_batch, INT_MAX);
    return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                       "layer %d (%s): a buffer of %zu bytes at batch size %d passes the memory "
                       "limit (%zu of %llu bytes already used)",
                       index, name, m->alloc_bytes, m->max_batch, m->bytes,
                       (unsigned long long)m->max_bytes);
}

/* A parameter with its value (and dense gradient) buffers; NULL when model_alloc refused one. */
static model_param_t *add_param(model_t *m, const char *layer, const char *what, const int *shape,
                                int rank, bool sparse, const job_init_t *init,
                                job_init_kind_t init_default)
{
    model_param_t *p = &m->params[m->n_params++];
    p->init = *init;
    p->init_default = init_default;
    p->n = shape_len(shape, rank);
    p->rank = rank;
    memcpy(p->shape, shape, (size_t)rank * sizeof(int));
    snprintf(p->name, sizeof(p->name), "%s/%s", layer, what);
    p->sparse = sparse;
    p->value = alloc_floats(m, p->n);
    p->grad = sparse ? NULL : alloc_floats(m, p->n);
    return p->value != NULL && (sparse || p->grad != NULL) ? p : NULL;
}

/* Works out one layer's output shape and creates its parameters and buffers. */
static status_t layer_plan(model_t *m, layer_t *l, int index, uint64_t seed, status_msg_t *err)
{
    const job_layer_t *s = &l->spec;
    const char *name = s->name[0] ? s->name : job_layer_kind_name(s->kind);
    char in_s[96];
    int pad;

    shape_str(l->in_shape, l->in_rank, in_s, sizeof(in_s));
    if (shape_len(l->in_shape, l->in_rank) > INT_MAX)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "layer %d (%s): input %s has more than %d values per example", index,
                           name, in_s, INT_MAX);
    l->out_rank = l->in_rank;
    memcpy(l->out_shape, l->in_shape, sizeof(l->out_shape));
    switch (s->kind) {
    case JOB_LAYER_DENSE: {
        int in = l->in_shape[l->in_rank - 1];
        int kshape[2] = {in, s->units}, bshape[1] = {s->units};
        if (s->units <= 0)
            return status_fail(err, STATUS_BAD_CONFIG, "layer %d (%s): units must be positive",
                               index, name);
        l->out_shape[l->out_rank - 1] = s->units;
        if ((l->w = add_param(m, name, "kernel", kshape, 2, false, &s->kernel_init,
                              JOB_INIT_GLOROT_UNIFORM)) == NULL)
            return plan_failed(m, index, name, err);
        initializer_fill(&s->kernel_init, JOB_INIT_GLOROT_UNIFORM, l->w->value, l->w->n, in,
                         s->units, seed);
        if (s->use_bias) {
            if ((l->b = add_param(m, name, "bias", bshape, 1, false, &s->bias_init,
                                  JOB_INIT_ZEROS)) == NULL)
                return plan_failed(m, index, name, err);
            initializer_fill(&s->bias_init, JOB_INIT_ZEROS, l->b->value, l->b->n, 1, 1, seed + 1);
        }
        break;
    }
    case JOB_LAYER_CONV2D: {
        int kh = s->kernel_size[0], kw = s->kernel_size[1], cin, kshape[4], bshape[1];
        if (l->in_rank != 3)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %d (%s): Conv2D needs input (batch, height, width, "
                               "channels), got %s",
                               index, name, in_s);
        cin = l->in_shape[2];
        l->oh = window_out(l->in_shape[0], kh, s->strides[0], s->padding_same, &l->pad_t);
        l->ow = window_out(l->in_shape[1], kw, s->strides[1], s->padding_same, &pad);
        l->pad_l = pad;
        if (l->oh <= 0 || l->ow <= 0 || s->filters <= 0)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %d (%s): a %dx%d kernel does not fit input %s", index, name,
                               kh, kw, in_s);
        l->out_shape[0] = l->oh;
        l->out_shape[1] = l->ow;
        l->out_shape[2] = s->filters;
        kshape[0] = kh, kshape[1] = kw, kshape[2] = cin, kshape[3] = s->filters;
        bshape[0] = s->filters;
        if ((l->w = add_param(m, name, "kernel", kshape, 4, false, &s->kernel_init,
                              JOB_INIT_GLOROT_UNIFORM)) == NULL)
            return plan_failed(m, index, name, err);
        initializer_fill(&s->kernel_init, JOB_INIT_GLOROT_UNIFORM, l->w->value, l->w->n,
                         (double)kh * kw * cin, (double)kh * kw * s->filters, seed);
        if (s->use_bias) {
            if ((l->b = add_param(m, name, "bias", bshape, 1, false, &s->bias_init,
                                  JOB_INIT_ZEROS)) == NULL)
                return plan_failed(m, index, name, err);
            initializer_fill(&s->bias_init, JOB_INIT_ZEROS, l->b->value, l->b->n, 1, 1, seed + 1);
        }
        l->cols = alloc_floats(m, mul_sat(mul_sat((size_t)m->max_batch * l->oh, (size_t)l->ow),
                                          (size_t)kh * kw * cin));
        if (l->cols == NULL)
            return plan_failed(m, index, name, err);
        break;
    }
    case JOB_LAYER_MAX_POOLING2D:
    case JOB_LAYER_AVERAGE_POOLING2D: {
        int ph = s->pool_size[0], pw = s->pool_size[1];
        int sh = s->strides[0] > 0 ? s->strides[0] : ph,
            sw = s->strides[1] > 0 ? s->strides[1] : pw;
        if (l->in_rank != 3)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %d (%s): pooling needs input (batch, height, width, "
                               "channels), got %s",
                               index, name, in_s);
        l->sh = sh, l->sw = sw;
        l->oh = window_out(l->in_shape[0], ph, sh, s->padding_same, &l->pad_t);
        l->ow = window_out(l->in_shape[1], pw, sw, s->padding_same, &pad);
        l->pad_l = pad;
        if (l->oh <= 0 || l->ow <= 0)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %d (%s): a %dx%d pool does not fit input %s", index, name, ph,
                               pw, in_s);
        l->out_shape[0] = l->oh;
        l->out_shape[1] = l->ow;
        if (s->kind == JOB_LAYER_MAX_POOLING2D) {
            l->argmax = model_alloc(m, mul_sat((size_t)m->max_batch, shape_len(l->out_shape, 3)),
                                    sizeof(int32_t));
            if (l->argmax == NULL)
                return plan_failed(m, index, name, err);
        }
        break;
    }
    case JOB_LAYER_FLATTEN:
        l->out_rank = 1;
        l->out_shape[0] = (int)shape_len(l->in_shape, l->in_rank);
        l->alias = true;
        break;
    case JOB_LAYER_RESHAPE: {
        int infer = -1;
        size_t known = 1, total = shape_len(l->in_shape, l->in_rank);
        l->out_rank = s->target_rank;
        for (int i = 0; i < s->target_rank; i++) {
            l->out_shape[i] = s->target_shape[i];
            if (s->target_shape[i] == -1)
                infer = i;
            else
                known = mul_sat(known, (size_t)(s->target_shape[i] > 0 ? s->target_shape[i] : 0));
        }
        if (infer >= 0 && known > 0 && total % known == 0)
            l->out_shape[infer] = (int)(total / known);
        if (shape_len(l->out_shape, l->out_rank) != total || s->target_rank < 1)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %d (%s): cannot reshape %s to the target shape", index, name,
                               in_s);
        l->alias = true;
        break;
    }
    case JOB_LAYER_DROPOUT:
        if (!(s->rate >= 0 && s->rate < 1))
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %d (%s): rate must be in [0, 1), got %g", index, name,
                               s->rate);
        l->mask =
            alloc_floats(m, mul_sat((size_t)m->max_batch, shape_len(l->in_shape, l->in_rank)));
        if (l->mask == NULL)
            return plan_failed(m, index, name, err);
        l->rng = s->dropout_seed ? s->dropout_seed : seed;
        break;
    case JOB_LAYER_EMBEDDING: {
        int shape[2] = {s->input_dim, s->output_dim};
        if (index != 0)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %d (%s): Embedding must be the first layer", index, name);
        if (s->input_dim <= 0 || s->output_dim <= 0)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %d (%s): input_dim and output_dim must be positive", index,
                               name);
        l->out_rank = l->in_rank + 1;
        l->out_shape[l->in_rank] = s->output_dim;
        if ((l->w = add_param(m, name, "embeddings", shape, 2, true, &s->kernel_init,
                              JOB_INIT_RANDOM_UNIFORM)) == NULL)
            return plan_failed(m, index, name, err);
        {
            job_init_t dflt = {.kind = JOB_INIT_RANDOM_UNIFORM, .a = -0.05, .b = 0.05};
            const job_init_t *init =
                s->kernel_init.kind == JOB_INIT_DEFAULT ? &dflt : &s->kernel_init;
            initializer_fill(init, JOB_INIT_RANDOM_UNIFORM, l->w->value, l->w->n, 1, 1, seed);
        }
        {
            size_t max_rows = mul_sat((size_t)m->max_batch, shape_len(l->in_shape, l->in_rank));
            l->w->rows_index = model_alloc(m, max_rows, sizeof(int64_t));
            l->w->rows_grad = alloc_floats(m, mul_sat(max_rows, (size_t)s->output_dim));
            l->slot_of_row = model_alloc(m, (size_t)s->input_dim, sizeof(int32_t));
            if (!l->w->rows_index || !l->w->rows_grad || !l->slot_of_row)
                return plan_failed(m, index, name, err);
            for (int i = 0; i < s->input_dim; i++)
                l->slot_of_row[i] = -1;
        }
        break;
    }
    case JOB_LAYER_GLOBAL_AVERAGE_POOLING1D:
        if (l->in_rank != 2)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %d (%s): GlobalAveragePooling1D needs input (batch, steps, "
                               "features), got %s",
                               index, name, in_s);
        l->out_rank = 1;
        l->out_shape[0] = l->in_shape[1];
        break;
    case JOB_LAYER_GLOBAL_AVERAGE_POOLING2D:
        if (l->in_rank != 3)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "layer %d (%s): GlobalAveragePooling2D needs input (batch, height, "
                               "width, channels), got %s",
                               index, name, in_s);
        l->out_rank = 1;
        l->out_shape[0] = l->in_shape[2];
        break;
    case JOB_LAYER_ACTIVATION:
        break;
    }
    l->in_len = shape_len(l->in_shape, l->in_rank);
    l->out_len = shape_len(l->out_shape, l->out_rank);
    if (!l->alias) {
        l->out = alloc_floats(m, mul_sat((size_t)m->max_batch, l->out_len));
        if (l->out == NULL)
            return plan_failed(m, index, name, err);
    }
    return STATUS_OK;
}

static size_t count_params(const job_model_t *spec)
{
    size_t n = 0;
    for (size_t i = 0; i < spec->n_layers; i++) {
        job_layer_kind_t k = spec->layers[i].kind;
        if (k == JOB_LAYER_DENSE || k == JOB_LAYER_CONV2D)
            n += spec->layers[i].use_bias ? 2 : 1;
        else if (k == JOB_LAYER_EMBEDDING)
            n += 1;
    }
    return n;
}

status_t model_new(const job_model_t *spec, job_loss_kind_t loss, bool from_logits, int max_batch,
                   uint64_t seed, uint64_t max_bytes, model_t **ret_model, status_msg_t *err)
{
    model_t *m;
    size_t max_len;
    status_t rc;

    if (spec->n_layers == 0 || spec->input_rank < 1 || max_batch < 1)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "the model needs an input shape and at least one layer");
    STATUS_CHECK(blas_init(err));
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    m->max_batch = max_batch;
    m->max_bytes = max_bytes > 0 && max_bytes < SIZE_MAX ? (size_t)max_bytes : SIZE_MAX;
    m->loss = loss;
    m->from_logits = from_logits;
    m->n_layers = spec->n_layers;
    m->layers = calloc(spec->n_layers, sizeof(*m->layers));
    m->params = calloc(count_params(spec) + 1, sizeof(*m->params));
    if (m->layers == NULL || m->params == NULL) {
        model_free(m);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    max_len = shape_len(spec->input_shape, spec->input_rank);
    m->in_len = max_len;
    for (size_t i = 0; i < spec->n_layers; i++) {
        layer_t *l = &m->layers[i];
        l->spec = spec->layers[i];
        if (i == 0) {
            l->in_rank = spec->input_rank;
            memcpy(l->in_shape, spec->input_shape, sizeof(l->in_shape));
        } else {
            l->in_rank = m->layers[i - 1].out_rank;
            memcpy(l->in_shape, m->layers[i - 1].out_shape, sizeof(l->in_shape));
        }
        if (!l->spec.name[0])
            snprintf(l->spec.name, sizeof(l->spec.name), "%s_%zu",
                     job_layer_kind_name(l->spec.kind), i);
        rc = layer_plan(m, l, (int)i, seed + 1000003ull * (i + 1), err);
        if (rc != STATUS_OK) {
            model_free(m);
            return rc;
        }
        if (l->in_len > max_len)
            max_len = l->in_len;
        if (l->out_len > max_len)
            max_len = l->out_len;
    }
    m->out_len = m->layers[m->n_layers - 1].out_len;
    rc = model_check_loss(m, err);
    if (rc != STATUS_OK) {
        model_free(m);
        return rc;
    }
    m->grad_a = alloc_floats(m, mul_sat((size_t)max_batch, max_len));
    m->grad_b = alloc_floats(m, mul_sat((size_t)max_batch, max_len));
    m->probs = alloc_floats(m, mul_sat((size_t)max_batch, m->out_len));
    if (m->grad_a == NULL || m->grad_b == NULL || m->probs == NULL) {
        rc = plan_failed(m, (int)spec->n_layers - 1, "gradients", err);
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
    for (size_t i = 0; i < m->n_layers; i++) {
        layer_t *l = &m->layers[i];
        if (!l->alias) /* an alias layer's output is its input, owned by the layer before */
            free(l->out);
        free(l->cols);
        free(l->argmax);
        free(l->mask);
        free(l->slot_of_row);
    }
    for (size_t i = 0; i < m->n_params; i++) {
        free(m->params[i].value);
        free(m->params[i].grad);
        free(m->params[i].rows_index);
        free(m->params[i].rows_grad);
    }
    free(m->layers);
    free(m->params);
    free(m->grad_a);
    free(m->grad_b);
    free(m->probs);
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

size_t model_bytes(const model_t *m)
{
    return m->bytes;
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

const float *model_output(const model_t *m)
{
    return m->fused ? m->probs : m->layers[m->n_layers - 1].out;
}

void model_summary(const model_t *m, char *buf, size_t len)
{
    size_t n = 0, total = 0;
    for (size_t i = 0; i < m->n_layers && n < len; i++) {
        const layer_t *l = &m->layers[i];
        char shape[96];
        size_t params = (l->w ? l->w->n : 0) + (l->b ? l->b->n : 0);
        shape_str(l->out_shape, l->out_rank, shape, sizeof(shape));
        n += (size_t)snprintf(buf + n, len - n, "  %-28s %-22s %10zu\n", l->spec.name, shape,
                              params);
        total += params;
    }
    if (n < len)
        snprintf(buf + n, len - n, "  total parameters: %zu", total);
}
