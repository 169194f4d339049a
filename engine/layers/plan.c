/* What the layer kinds plan with: shapes, the model's buffers, parameters and plan errors. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layer.h"
#include "model_internal.h"

size_t layer_mul_sat(size_t a, size_t b)
{
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

size_t layer_shape_len(const int *shape, int rank)
{
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n = layer_mul_sat(n, (size_t)(shape[i] > 0 ? shape[i] : 0));
    return n;
}

void layer_shape_str(const int *shape, int rank, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "(batch");
    for (int i = 0; i < rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, ", %d", shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, ")");
}

int layer_window_out(int in, int k, int stride, bool same, int *ret_pad)
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

/* Refuses a buffer past the limit, of more than INT_MAX elements (the BLAS dimensions are
 * ints), or that the backend cannot allocate; the first refusal is kept in m->alloc_rc and
 * m->alloc_bytes for layer_plan_failed. */
void *layer_alloc(model_t *m, size_t count, size_t elem)
{
    size_t bytes = layer_mul_sat(count ? count : 1, elem), rounded = (bytes + 63) / 64 * 64;
    void *p = NULL;

    if (m->alloc_rc != STATUS_OK)
        return NULL;
    if (count > INT_MAX || bytes > SIZE_MAX - 63 || rounded > m->max_bytes - m->bytes)
        m->alloc_rc = STATUS_RESOURCE_EXHAUSTED;
    else if (m->n_buffers == m->cap_buffers) {
        size_t cap = m->cap_buffers ? 2 * m->cap_buffers : 16;
        void **more = realloc(m->buffers, cap * sizeof(*more));
        if (more == NULL)
            m->alloc_rc = STATUS_NO_MEMORY;
        else
            m->buffers = more, m->cap_buffers = cap;
    }
    if (m->alloc_rc == STATUS_OK && (p = m->be->alloc(bytes)) == NULL)
        m->alloc_rc = STATUS_NO_MEMORY;
    if (p == NULL) {
        m->alloc_bytes = bytes;
        m->alloc_count = count;
        return NULL;
    }
    m->buffers[m->n_buffers++] = p;
    m->bytes += rounded;
    return p;
}

float *layer_floats(model_t *m, size_t n)
{
    return layer_alloc(m, n, sizeof(float));
}

model_param_t *layer_add_param(layer_plan_t *p, const char *what, const int *shape, int rank,
                               bool sparse, const job_init_t *init, job_init_kind_t dflt)
{
    model_t *m = p->m;
    model_param_t *param = &m->params[m->n_params++];

    /* the slot may be a shared layer's later call's, given back (share_params) with its flags */
    *param = (model_param_t){0};
    param->n = layer_shape_len(shape, rank);
    param->rank = rank;
    memcpy(param->shape, shape, (size_t)rank * sizeof(int));
    snprintf(param->name, sizeof(param->name), "%s/%s", p->name, what);
    param->sparse = sparse;
    param->init = *init;
    param->init_default = dflt;
    param->value = layer_floats(m, param->n);
    param->grad = sparse ? NULL : layer_floats(m, param->n);
    return param->value != NULL && (sparse || param->grad != NULL) ? param : NULL;
}

status_t layer_plan_error(const layer_plan_t *p, status_msg_t *err, const char *fmt, ...)
{
    char text[sizeof(err->text)];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return status_fail(err, STATUS_BAD_CONFIG, "layer %d (%s): %s", p->index, p->name, text);
}

status_t layer_plan_failed(const layer_plan_t *p, status_msg_t *err)
{
    const model_t *m = p->m;
    status_msg_t why;

    if (m->alloc_rc == STATUS_NO_MEMORY && m->be->check != NULL &&
        m->be->check(&why) != STATUS_OK) /* the device failed, rather than ran out */
        return status_fail(err, STATUS_CUDA, "layer %d (%s): %s", p->index, p->name, why.text);
    if (m->alloc_rc == STATUS_NO_MEMORY)
        return status_fail(err, STATUS_NO_MEMORY,
                           "layer %d (%s): out of memory for a buffer of %zu bytes%s", p->index,
                           p->name, m->alloc_bytes, m->be->device_memory ? " on the device" : "");
    if (m->alloc_count > INT_MAX)
        return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                           "layer %d (%s): a tensor of %zu values at batch size %d is over the "
                           "%d values one tensor may hold",
                           p->index, p->name, m->alloc_count, m->max_batch, INT_MAX);
    return status_fail(err, STATUS_RESOURCE_EXHAUSTED,
                       "layer %d (%s): a buffer of %zu bytes at batch size %d passes the memory "
                       "limit (%zu of %llu bytes already used)",
                       p->index, p->name, m->alloc_bytes, m->max_batch, m->bytes,
                       (unsigned long long)m->max_bytes);
}
