/* The step: forward through the layers, the loss, and backward from the last layer, telling the
 * caller as each layer's gradients are ready (model_on_backward). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "model_internal.h"

/* Whether the backend's kernels have all worked so far (a device's may fail): after each
 * layer, so that no host loop reads what a failed kernel left. */
static status_t device_ok(const model_t *m, status_msg_t *err)
{
    return m->be->check != NULL ? m->be->check(err) : STATUS_OK;
}

/* Forgets (and logs) a device error this thread met where nothing checked (a step that failed
 * for another reason, a model freed): it is not the coming step's. */
static void device_drain(const model_t *m)
{
    status_msg_t stale;

    if (m->be->check != NULL && m->be->check(&stale) != STATUS_OK)
        LOG_WARNING(TRAIN, "a device error before this step: %s", stale.text);
}

static status_t forward(model_t *m, const float *x, int batch, bool training, status_msg_t *err)
{
    const float *in;
    if (batch < 1 || batch > m->max_batch)
        return status_fail(err, STATUS_INVALID_USAGE, "batch of %d examples (at most %d)", batch,
                           m->max_batch);
    if (m->x_buf != NULL) {
        m->be->copy(m->x_buf, x, (size_t)batch * m->in_len * sizeof(float));
        x = m->x_buf;
    }
    in = x;
    for (int k = 0; k < m->n_model_in && m->n_model_in > 1; k++) /* each input's own rows */
        for (int b = 0; b < batch; b++)
            memcpy(m->in_buf[k] + (size_t)b * m->n_in[k], x + (size_t)b * m->in_len + m->in_at[k],
                   m->n_in[k] * sizeof(float));
    for (size_t i = 0; i < m->n_layers; i++) {
        layer_t *l = &m->layers[i];
        if (m->graph) {
            for (int k = 0; k < l->n_ins; k++) {
                int src = l->src[k];
                l->ins[k] = src >= 0             ? m->layers[src].out
                            : m->n_model_in == 1 ? x
                                                 : m->in_buf[job_input_index(src)];
            }
            in = l->ins[0];
        }
        l->in = in;
        STATUS_CHECK(layer_forward(l, batch, training, model_layer_fused(m, i), err));
        STATUS_CHECK(device_ok(m, err)); /* before a host loop reads what a kernel left */
        in = l->out;
    }
    return STATUS_OK;
}

/* In a graph, the part of layer `src`'s output gradient that one of its readers computed: the
 * first part stays where it is (dx), the next ones add to it. */
static void gather_grad(model_t *m, int src, float *dx, int batch)
{
    float *sum = m->grad_of[src];
    size_t n = (size_t)batch * m->layers[src].out_len;

    if (sum == NULL) {
        m->grad_of[src] = dx;
        return;
    }
    for (size_t i = 0; i < n; i++)
        sum[i] += dx[i];
}

/* In a graph, the gradients for what layer l reads, from dy (its output's): each lands in its
 * source's own buffer when it is the first part there, else in the scratch buffer to add. A
 * layer that passes gradients through hands dy itself on: nothing else writes it any more, as
 * every reader of l came before. */
static void backward_graph(model_t *m, layer_t *l, int batch, float *dy)
{
    const layer_ops_t *ops = layer_ops(l->spec.kind);

    for (int k = 0; k < l->n_ins; k++) {
        int src = l->src[k];
        float *dst, *dx;

        if (src < 0) { /* a model input */
            if (l->n_ins == 1)
                layer_backward_input(l, batch, dy, NULL); /* nothing to compute */
            continue;
        }
        dst = m->grad_of[src] == NULL ? m->gbuf[src] : m->grad_b;
        if (ops->backward_inputs != NULL) {
            float *dxs[JOB_MAX_INPUTS] = {0};
            dxs[k] = dst;
            ops->backward_inputs(l, batch, dy, dxs);
            dx = dst;
        } else {
            dx = layer_backward_input(l, batch, dy, dst);
        }
        gather_grad(m, src, dx, batch);
    }
}

/* sum of |v[k]| (l1) or v[k]^2 (!l1), in 8 lanes the compiler can keep in one vector */
static double lane_sum(const float *v, size_t n, bool l1)
{
    float acc[8] = {0};
    size_t k = 0;
    double sum = 0;

    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += l1 ? fabsf(v[k + j]) : v[k + j] * v[k + j];
    for (int j = 0; j < 8; j++)
        sum += acc[j];
    for (; k < n; k++)
        sum += l1 ? fabsf(v[k]) : (double)v[k] * v[k];
    return sum;
}

/* Keras's weight regularizers on one of a layer's weights: returns l1 * sum|w| + l2 * sum w^2;
 * with `share` > 0 also adds share times its gradient to the weight's. */
static double regularize(model_param_t *p, const job_regularizer_t *r, float share)
{
    double sum = 0;

    if (p == NULL || (r->l1 == 0 && r->l2 == 0))
        return 0;
    if (r->l2 != 0) {
        float c = share * 2.0f * (float)r->l2;
        sum += r->l2 * lane_sum(p->value, p->n, false);
        for (size_t k = 0; share > 0 && k < p->n; k++)
            p->grad[k] += c * p->value[k];
    }
    if (r->l1 != 0) {
        float c = share * (float)r->l1;
        sum += r->l1 * lane_sum(p->value, p->n, true);
        for (size_t k = 0; share > 0 && k < p->n; k++)
            p->grad[k] += c * (float)((p->value[k] > 0) - (p->value[k] < 0));
    }
    return sum;
}

static bool has_activity_reg(const layer_t *l)
{
    return l->spec.activity_reg.l1 != 0 || l->spec.activity_reg.l2 != 0;
}

/* Keras's activity regularizers of the last forward pass: l1 * sum|y| + l2 * sum y^2 over each
 * regularized layer's outputs of the `batch` examples (the loss takes it divided by the whole
 * batch's size, as Keras divides by the batch's). */
static double activity_terms(const model_t *m, int batch)
{
    double sum = 0;

    for (size_t i = 0; i < m->n_layers; i++) {
        const layer_t *l = &m->layers[i];
        const job_regularizer_t *r = &l->spec.activity_reg;
        size_t n = (size_t)batch * l->out_len;
        if (!has_activity_reg(l))
            continue;
        if (r->l1 != 0)
            sum += r->l1 * lane_sum(l->out, n, true);
        if (r->l2 != 0)
            sum += r->l2 * lane_sum(l->out, n, false);
    }
    return sum;
}

/* Adds layer l's activity regularizer's gradient to dy, its output's: (l1 sign(y) + 2 l2 y) over
 * the whole batch's size `total`. */
static void activity_grad(const layer_t *l, int batch, int total, float *dy)
{
    const job_regularizer_t *r = &l->spec.activity_reg;
    float l1 = (float)r->l1 / (float)total, l2 = 2.0f * (float)r->l2 / (float)total;
    size_t n = (size_t)batch * l->out_len;

    for (size_t k = 0; k < n; k++) {
        float y = l->out[k];
        dy[k] += l1 * (float)((y > 0) - (y < 0)) + l2 * y;
    }
}

/* Keras's weight regularizers of layer l (once a layer: not on a shared layer's later calls),
 * with share as regularize's. */
static double regularize_layer(layer_t *l, float share)
{
    if (l->own != NULL)
        return 0;
    return regularize(l->w, &l->spec.kernel_reg, share) +
           regularize(l->b, &l->spec.bias_reg, share) +
           regularize(l->w2, &l->spec.pointwise_reg, share);
}

/* The regularization term of every layer (no gradients). */
static double regularization(model_t *m)
{
    double sum = 0;

    for (size_t i = 0; i < m->n_layers; i++)
        sum += regularize_layer(&m->layers[i], 0);
    return sum;
}

/* A shared Embedding's later call's rows into its first call's p: an id's rows add up; the ids
 * the first call did not see follow its own, in the later call's order (room: share_params). */
static void gather_rows(layer_t *l, model_param_t *p, const model_param_t *add)
{
    size_t dim = p->n / (size_t)p->shape[0];

    for (size_t s = 0; s < p->n_rows; s++)
        l->slot_of_row[p->rows_index[s]] = (int32_t)s;
    for (size_t j = 0; j < add->n_rows; j++) {
        int64_t id = add->rows_index[j];
        int32_t slot = l->slot_of_row[id];
        float *g;
        if (slot < 0) {
            slot = (int32_t)p->n_rows++;
            l->slot_of_row[id] = slot;
            p->rows_index[slot] = id;
            memcpy(p->rows_grad + (size_t)slot * dim, add->rows_grad + j * dim,
                   dim * sizeof(float));
            continue;
        }
        g = p->rows_grad + (size_t)slot * dim;
        for (size_t e = 0; e < dim; e++)
            g[e] += add->rows_grad[j * dim + e];
    }
    for (size_t s = 0; s < p->n_rows; s++)
        l->slot_of_row[p->rows_index[s]] = -1;
}

/* A shared layer's first call: adds its later calls' gradients (their backward came first) to
 * its own, the gradients of the weights they use. */
static void gather_calls(model_t *m, layer_t *l)
{
    for (int next = l->next_call; next > 0; next = m->layers[next - 1].next_call) {
        const layer_t *c = &m->layers[next - 1];
        for (size_t k = 0; k < l->n_params; k++) {
            float *g = l->params[k].grad;
            const float *add = c->own[k].grad;
            if (l->params[k].sparse) {
                gather_rows(l, &l->params[k], &c->own[k]);
                continue;
            }
            for (size_t e = 0; e < l->params[k].n; e++)
                g[e] += add[e];
        }
    }
}

status_t model_train_step(model_t *m, const float *x, const float *y, int batch,
                          model_stats_t *ret_stats, status_msg_t *err)
{
    return model_train_slice(m, x, y, batch, batch, ret_stats, err);
}

status_t model_train_slice(model_t *m, const float *x, const float *y, int batch, int total,
                           model_stats_t *ret_stats, status_msg_t *err)
{
    model_stats_t st = {0};
    float *dy = m->grad_a, *spare = m->grad_b;
    /* a slice's share of the whole batch: the slices' regularization gradients add up to one */
    float share = total > 0 ? (float)batch / (float)total : 1.0f;
    double reg = 0;

    if (total < batch)
        return status_fail(err, STATUS_INVALID_USAGE, "a slice of %d examples of a batch of %d",
                           batch, total);
    double t0 = clock_now_s(), t1;

    m->forward_s = m->backward_s = 0;
    device_drain(m);
    STATUS_CHECK(forward(m, x, batch, true, err));
    STATUS_CHECK(model_loss(m, y, batch, total, true, &st, err)); /* into each head's dy */
    /* the activity terms of this slice's examples: the slices' add up to the batch's */
    st.loss_sum += activity_terms(m, batch);
    *ret_stats = st;
    t1 = clock_now_s();
    m->forward_s = t1 - t0;
    /* Before backward, so that a caller sending gradients as they come sends none of these. */
    if (!isfinite(st.loss_sum))
        return status_fail(err, STATUS_INVALID_ARGUMENT,
                           "the loss became %s: lower the learning rate or check the data",
                           isnan(st.loss_sum) ? "NaN" : "infinite");
    if (m->graph) { /* each output's gradient starts from its loss's; readers add theirs */
        memset(m->grad_of, 0, m->n_layers * sizeof(*m->grad_of));
        for (int k = 0; k < m->n_heads; k++)
            m->grad_of[m->heads[k].layer] = m->heads[k].dy;
    }
    for (size_t i = m->n_layers; i-- > 0;) {
        layer_t *l = &m->layers[i];
        /* a shared layer's later call (own) tells nothing: its first call does, after it */
        bool has_params = l->n_params > 0 && l->own == NULL;
        size_t first = has_params ? (size_t)(l->params - m->params) : 0;
        float *dx;

        if (m->graph)
            dy = m->grad_of[i]; /* every layer is read by a later one (job_model_finish) */
        l->share = share;
        if (has_activity_reg(l))
            activity_grad(l, batch, total, dy);
        layer_backward_params(l, batch, dy, model_layer_fused(m, i));
        STATUS_CHECK(device_ok(m, err)); /* and no gradient a failed kernel left leaves */
        if (l->own == NULL && l->next_call > 0)
            gather_calls(m, l);
        /* before the gradients leave (a PS push, an all-reduce bucket) */
        reg += regularize_layer(l, share);
        if (has_params && m->on_backward != NULL)
            m->on_backward(m->on_backward_arg, MODEL_GRADS_READY, first);
        if (m->graph) {
            backward_graph(m, l, batch, dy);
            dx = NULL;
        } else {
            dx = layer_backward_input(l, batch, dy, i > 0 ? spare : NULL);
        }
        STATUS_CHECK(device_ok(m, err));
        if (has_params && m->on_backward != NULL)
            m->on_backward(m->on_backward_arg, MODEL_VALUES_FREE, first);
        if (dx == spare) { /* the input gradient landed in the spare buffer: swap */
            spare = dy;
            dy = dx;
        }
    }
    /* the loss holds the term once in the mean over the whole batch, as Keras's loss does */
    ret_stats->loss_sum += reg * batch;
    m->backward_s = clock_now_s() - t1;
    return device_ok(m, err);
}

void model_on_backward(model_t *m, model_backward_fn fn, void *arg)
{
    m->on_backward = fn;
    m->on_backward_arg = arg;
}

void model_step_seconds(const model_t *m, double *ret_forward, double *ret_backward)
{
    *ret_forward = m->forward_s;
    *ret_backward = m->backward_s;
}

status_t model_evaluate(model_t *m, const float *x, const float *y, int batch,
                        model_stats_t *ret_stats, status_msg_t *err)
{
    model_stats_t st = {0};
    device_drain(m);
    STATUS_CHECK(forward(m, x, batch, false, err));
    STATUS_CHECK(model_loss(m, y, batch, batch, false, &st, err));
    st.loss_sum += regularization(m) * batch + activity_terms(m, batch);
    *ret_stats = st;
    return STATUS_OK;
}
