/* The merge layers of Functional models: Add, Subtract, Multiply, Average, Maximum, Minimum of
 * inputs of one shape, and Concatenate along an axis. Values combine in Keras's order (the
 * running result with each next input, Average dividing the sum by the count), and gradients
 * follow TensorFlow's: Maximum's and Minimum's go to the first input that holds the extreme. */
#include <limits.h>
#include <string.h>

#include "layers/layer.h"

static status_t merge_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    char shape[96];

    for (int k = 1; k < l->n_ins; k++) {
        if (l->ins_rank[k] == l->in_rank &&
            memcmp(l->ins_shape[k], l->in_shape, sizeof(int) * (size_t)l->in_rank) == 0)
            continue;
        layer_shape_str(l->ins_shape[k], l->ins_rank[k], shape, sizeof(shape));
        return layer_plan_error(p, err,
                                "its inputs' shapes %s and %s differ (broadcasting them is not "
                                "supported)",
                                p->in_s, shape);
    }
    return STATUS_OK;
}

static status_t merge_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t n = (size_t)batch * l->out_len;
    float *out = l->out;

    (void)training, (void)err;
    memcpy(out, l->ins[0], n * sizeof(float));
    for (int k = 1; k < l->n_ins; k++) {
        const float *x = l->ins[k];
        switch (l->spec.kind) {
        case JOB_LAYER_ADD:
        case JOB_LAYER_AVERAGE:
            for (size_t i = 0; i < n; i++)
                out[i] += x[i];
            break;
        case JOB_LAYER_SUBTRACT:
            for (size_t i = 0; i < n; i++)
                out[i] -= x[i];
            break;
        case JOB_LAYER_MULTIPLY:
            for (size_t i = 0; i < n; i++)
                out[i] *= x[i];
            break;
        case JOB_LAYER_MAXIMUM:
            for (size_t i = 0; i < n; i++)
                out[i] = out[i] >= x[i] ? out[i] : x[i];
            break;
        default: /* JOB_LAYER_MINIMUM */
            for (size_t i = 0; i < n; i++)
                out[i] = out[i] <= x[i] ? out[i] : x[i];
            break;
        }
    }
    if (l->spec.kind == JOB_LAYER_AVERAGE) {
        float count = (float)l->n_ins;
        for (size_t i = 0; i < n; i++)
            out[i] /= count;
    }
    return STATUS_OK;
}

/* The input that the running maximum (or minimum) of element i came from: the first holding it,
 * as TensorFlow's gradient of maximum(x, y) goes to x where x >= y. */
static int extreme_of(const layer_t *l, size_t i, bool max)
{
    float best = l->ins[0][i];
    int at = 0;

    for (int k = 1; k < l->n_ins; k++) {
        float v = l->ins[k][i];
        if (max ? !(best >= v) : !(best <= v)) {
            best = v;
            at = k;
        }
    }
    return at;
}

static void merge_backward_inputs(layer_t *l, int batch, const float *dy, float *const *dx)
{
    size_t n = (size_t)batch * l->out_len;

    for (int k = 0; k < l->n_ins; k++) {
        float *d = dx[k];
        if (d == NULL)
            continue;
        switch (l->spec.kind) {
        case JOB_LAYER_ADD:
            memcpy(d, dy, n * sizeof(float));
            break;
        case JOB_LAYER_SUBTRACT:
            for (size_t i = 0; i < n; i++)
                d[i] = k == 0 ? dy[i] : -dy[i];
            break;
        case JOB_LAYER_AVERAGE: {
            float count = (float)l->n_ins;
            for (size_t i = 0; i < n; i++)
                d[i] = dy[i] / count;
            break;
        }
        case JOB_LAYER_MULTIPLY:
            for (size_t i = 0; i < n; i++) {
                float g = dy[i];
                for (int j = 0; j < l->n_ins; j++)
                    g = j == k ? g : g * l->ins[j][i];
                d[i] = g;
            }
            break;
        default: /* maximum, minimum */
            for (size_t i = 0; i < n; i++)
                d[i] = extreme_of(l, i, l->spec.kind == JOB_LAYER_MAXIMUM) == k ? dy[i] : 0.0f;
            break;
        }
    }
}

const layer_ops_t layer_merge = {
    .plan = merge_plan, .forward = merge_forward, .backward_inputs = merge_backward_inputs};

/* ---- Concatenate ---- */

/* The inputs agree on every axis but the joined one; each example's output is, per step of the
 * axes before it, each input's run of values in turn. */
static status_t concatenate_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    int rank = l->in_rank, axis = l->spec.axis < 0 ? rank + 1 + l->spec.axis : l->spec.axis;
    char shape[96];

    if (axis < 1 || axis > rank)
        return layer_plan_error(p, err, "axis %d is not an axis of its input %s", l->spec.axis,
                                p->in_s);
    int64_t joined = 0;

    axis--; /* of the example's shape */
    for (int k = 0; k < l->n_ins; k++) {
        bool fits = l->ins_rank[k] == rank;
        for (int d = 0; fits && d < rank; d++)
            fits = d == axis || l->ins_shape[k][d] == l->in_shape[d];
        if (!fits) {
            layer_shape_str(l->ins_shape[k], l->ins_rank[k], shape, sizeof(shape));
            return layer_plan_error(p, err,
                                    "inputs %s and %s differ on an axis other than the joined "
                                    "one (%d)",
                                    p->in_s, shape, l->spec.axis);
        }
        joined += l->ins_shape[k][axis];
        l->part[k] = layer_shape_len(l->ins_shape[k] + axis, rank - axis);
    }
    if (joined > INT_MAX)
        return layer_plan_error(p, err, "joins %lld values along axis %d (at most %d)",
                                (long long)joined, l->spec.axis, INT_MAX);
    l->out_shape[axis] = (int)joined;
    l->outer = layer_shape_len(l->in_shape, axis);
    return STATUS_OK;
}

static status_t concatenate_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t steps = (size_t)batch * l->outer;
    float *out = l->out;

    (void)training, (void)err;
    for (size_t s = 0; s < steps; s++)
        for (int k = 0; k < l->n_ins; k++) {
            memcpy(out, l->ins[k] + s * l->part[k], l->part[k] * sizeof(float));
            out += l->part[k];
        }
    return STATUS_OK;
}

static void concatenate_backward_inputs(layer_t *l, int batch, const float *dy, float *const *dx)
{
    size_t steps = (size_t)batch * l->outer;

    for (size_t s = 0; s < steps; s++)
        for (int k = 0; k < l->n_ins; k++) {
            if (dx[k] != NULL)
                memcpy(dx[k] + s * l->part[k], dy, l->part[k] * sizeof(float));
            dy += l->part[k];
        }
}

const layer_ops_t layer_concatenate = {.plan = concatenate_plan,
                                       .forward = concatenate_forward,
                                       .backward_inputs = concatenate_backward_inputs};
