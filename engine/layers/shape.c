/* Layers that move values without computing with them: ZeroPadding2D and Cropping2D (margins of
 * an NHWC image, added as zeros or cut off), UpSampling2D (each pixel repeated size[0] x size[1]
 * times, "nearest"), Permute (axes reordered, the batch axis staying first) and RepeatVector
 * ((features) -> (n, features)). Backward moves the gradient back: cut, padded, summed over the
 * copies, permuted back, summed over the repeats. */
#include <math.h>
#include <string.h>

#include "layers/layer.h"

/* ---- ZeroPadding2D and Cropping2D ------------------------------------------------------------ */

static status_t margins_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    const int *m = l->spec.margins;
    int sign = l->spec.kind == JOB_LAYER_ZERO_PADDING2D ? 1 : -1;
    int64_t h, w;

    if (l->in_rank != 3)
        return layer_plan_error(p, err, "%s needs input (batch, height, width, channels), got %s",
                                sign > 0 ? "ZeroPadding2D" : "Cropping2D", p->in_s);
    h = (int64_t)l->in_shape[0] + sign * ((int64_t)m[0] + m[1]);
    w = (int64_t)l->in_shape[1] + sign * ((int64_t)m[2] + m[3]);
    if (h <= 0 || w <= 0 || h > INT32_MAX || w > INT32_MAX)
        return layer_plan_error(p, err, "margins %d, %d, %d, %d leave nothing of input %s", m[0],
                                m[1], m[2], m[3], p->in_s);
    l->out_shape[0] = (int)h;
    l->out_shape[1] = (int)w;
    return STATUS_OK;
}

/* Copies the overlap of a small image (the cropped one, or the one before padding) and a large
 * one: rows [top, top + small_h) and columns [left, left + small_w) of the large. to_large: small
 * into large (zeroing the rest of large first), else large into small. */
static void copy_window(layer_t *l, int batch, const float *src, float *dst, bool to_large)
{
    bool pad = l->spec.kind == JOB_LAYER_ZERO_PADDING2D;
    const int *big = pad ? l->out_shape : l->in_shape, *small = pad ? l->in_shape : l->out_shape;
    size_t c = (size_t)l->in_shape[2], big_len = (size_t)big[0] * big[1] * c;
    size_t small_len = (size_t)small[0] * small[1] * c, row = (size_t)small[1] * c;
    int top = l->spec.margins[0], left = l->spec.margins[2];

    for (int b = 0; b < batch; b++) {
        float *large = (float *)(to_large ? dst : src) + (size_t)b * big_len;
        float *little = (float *)(to_large ? src : dst) + (size_t)b * small_len;
        if (to_large)
            memset(large, 0, big_len * sizeof(float));
        for (int y = 0; y < small[0]; y++) {
            float *at = large + (((size_t)(y + top) * big[1]) + (size_t)left) * c;
            if (to_large)
                memcpy(at, little + (size_t)y * row, row * sizeof(float));
            else
                memcpy(little + (size_t)y * row, at, row * sizeof(float));
        }
    }
}

static status_t margins_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    (void)training, (void)err;
    copy_window(l, batch, l->in, l->out, l->spec.kind == JOB_LAYER_ZERO_PADDING2D);
    return STATUS_OK;
}

static void margins_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    copy_window(l, batch, dy, dx, l->spec.kind != JOB_LAYER_ZERO_PADDING2D);
}

/* ---- UpSampling2D ------------------------------------------------------------------------------
 */

static status_t up_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    int64_t h, w;

    if (l->in_rank != 3)
        return layer_plan_error(
            p, err, "UpSampling2D needs input (batch, height, width, channels), got %s", p->in_s);
    h = (int64_t)l->in_shape[0] * l->spec.size[0];
    w = (int64_t)l->in_shape[1] * l->spec.size[1];
    if (h > INT32_MAX || w > INT32_MAX)
        return layer_plan_error(p, err, "size %dx%d makes input %s too large", l->spec.size[0],
                                l->spec.size[1], p->in_s);
    l->out_shape[0] = (int)h;
    l->out_shape[1] = (int)w;
    return STATUS_OK;
}

/* Bilinear interpolation as TensorFlow's resize computes it (half-pixel centres, no antialias,
 * which Keras 3's UpSampling2D asks for): output row o reads input rows lo and hi = min(ceil(in),
 * n - 1) with weight `lerp` on hi, in = (o + 0.5) * n_in / n_out - 0.5, lo = max(floor(in), 0). */
typedef struct lerp_at {
    int lo, hi;
    float lerp;
} lerp_at_t;

static lerp_at_t lerp_of(int o, int n_in, int n_out)
{
    float scale = (float)n_in / (float)n_out, in = ((float)o + 0.5f) * scale - 0.5f;
    float f = floorf(in);
    lerp_at_t at = {.lo = f > 0 ? (int)f : 0, .hi = (int)ceilf(in), .lerp = in - f};

    if (at.hi > n_in - 1)
        at.hi = n_in - 1;
    if (at.hi < 0)
        at.hi = 0;
    return at;
}

/* Bilinear, forward (dy NULL: y from x) or backward (dx += the transposed weights times dy). */
static void up_bilinear(const layer_t *l, int batch, const float *x, float *y, const float *dy,
                        float *dx)
{
    size_t c = (size_t)l->in_shape[2];
    int ih = l->in_shape[0], iw = l->in_shape[1], oh = l->out_shape[0], ow = l->out_shape[1];

    for (int b = 0; b < batch; b++)
        for (int i = 0; i < oh; i++) {
            lerp_at_t r = lerp_of(i, ih, oh);
            for (int j = 0; j < ow; j++) {
                lerp_at_t q = lerp_of(j, iw, ow);
                size_t base = (size_t)b * l->in_len,
                       at = (size_t)b * l->out_len + ((size_t)i * (size_t)ow + (size_t)j) * c;
                size_t tl = base + ((size_t)r.lo * (size_t)iw + (size_t)q.lo) * c,
                       tr = base + ((size_t)r.lo * (size_t)iw + (size_t)q.hi) * c,
                       bl = base + ((size_t)r.hi * (size_t)iw + (size_t)q.lo) * c,
                       br = base + ((size_t)r.hi * (size_t)iw + (size_t)q.hi) * c;
                for (size_t k = 0; k < c; k++) {
                    if (dy == NULL) {
                        float top = x[tl + k] + (x[tr + k] - x[tl + k]) * q.lerp;
                        float bottom = x[bl + k] + (x[br + k] - x[bl + k]) * q.lerp;
                        y[at + k] = top + (bottom - top) * r.lerp;
                    } else {
                        float g = dy[at + k], top = g * (1.0f - r.lerp), bottom = g * r.lerp;
                        dx[tl + k] += top * (1.0f - q.lerp);
                        dx[tr + k] += top * q.lerp;
                        dx[bl + k] += bottom * (1.0f - q.lerp);
                        dx[br + k] += bottom * q.lerp;
                    }
                }
            }
        }
}

static status_t up_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t c = (size_t)l->in_shape[2];
    int oh = l->out_shape[0], ow = l->out_shape[1], sh = l->spec.size[0], sw = l->spec.size[1];

    (void)training, (void)err;
    if (l->spec.bilinear) {
        up_bilinear(l, batch, l->in, l->out, NULL, NULL);
        return STATUS_OK;
    }
    for (int b = 0; b < batch; b++) {
        const float *x = l->in + (size_t)b * l->in_len;
        float *y = l->out + (size_t)b * l->out_len;
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++)
                memcpy(y + ((size_t)i * ow + j) * c,
                       x + ((size_t)(i / sh) * l->in_shape[1] + (size_t)(j / sw)) * c,
                       c * sizeof(float));
    }
    return STATUS_OK;
}

static void up_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t c = (size_t)l->in_shape[2];
    int oh = l->out_shape[0], ow = l->out_shape[1], sh = l->spec.size[0], sw = l->spec.size[1];

    memset(dx, 0, (size_t)batch * l->in_len * sizeof(float));
    if (l->spec.bilinear) {
        up_bilinear(l, batch, NULL, NULL, dy, dx);
        return;
    }
    for (int b = 0; b < batch; b++) {
        const float *g = dy + (size_t)b * l->out_len;
        float *d = dx + (size_t)b * l->in_len;
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++) {
                float *to = d + ((size_t)(i / sh) * l->in_shape[1] + (size_t)(j / sw)) * c;
                const float *from = g + ((size_t)i * ow + j) * c;
                for (size_t k = 0; k < c; k++)
                    to[k] += from[k];
            }
    }
}

/* ---- Permute -----------------------------------------------------------------------------------
 */

static status_t permute_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    if (l->spec.n_dims != l->in_rank)
        return layer_plan_error(p, err, "dims has %d axes, the input %s has %d", l->spec.n_dims,
                                p->in_s, l->in_rank);
    for (int i = 0; i < l->in_rank; i++)
        l->out_shape[i] = l->in_shape[l->spec.dims[i] - 1];
    return STATUS_OK;
}

/* Moves one example's values: out axis i is in axis dims[i] - 1; back swaps the direction. */
static void permute_one(const layer_t *l, const float *src, float *dst, bool back)
{
    int rank = l->in_rank, idx[JOB_MAX_RANK] = {0};
    size_t in_stride[JOB_MAX_RANK], n = l->in_len;

    in_stride[rank - 1] = 1;
    for (int i = rank - 2; i >= 0; i--)
        in_stride[i] = in_stride[i + 1] * (size_t)l->in_shape[i + 1];
    /* walk the output in order, idx its position */
    for (size_t o = 0; o < n; o++) {
        size_t in = 0;
        for (int i = 0; i < rank; i++)
            in += (size_t)idx[i] * in_stride[l->spec.dims[i] - 1];
        if (back)
            dst[in] = src[o];
        else
            dst[o] = src[in];
        for (int i = rank - 1; i >= 0 && ++idx[i] == l->out_shape[i]; i--)
            idx[i] = 0;
    }
}

static status_t permute_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    (void)training, (void)err;
    for (int b = 0; b < batch; b++)
        permute_one(l, l->in + (size_t)b * l->in_len, l->out + (size_t)b * l->out_len, false);
    return STATUS_OK;
}

static void permute_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    for (int b = 0; b < batch; b++)
        permute_one(l, dy + (size_t)b * l->out_len, dx + (size_t)b * l->in_len, true);
}

/* ---- RepeatVector ------------------------------------------------------------------------------
 */

static status_t repeat_plan(layer_plan_t *p, layer_t *l, status_msg_t *err)
{
    if (l->in_rank != 1)
        return layer_plan_error(p, err, "RepeatVector needs input (batch, features), got %s",
                                p->in_s);
    l->out_rank = 2;
    l->out_shape[0] = l->spec.repeat;
    l->out_shape[1] = l->in_shape[0];
    return STATUS_OK;
}

static status_t repeat_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    (void)training, (void)err;
    for (int b = 0; b < batch; b++)
        for (int r = 0; r < l->spec.repeat; r++)
            memcpy(l->out + (size_t)b * l->out_len + (size_t)r * l->in_len,
                   l->in + (size_t)b * l->in_len, l->in_len * sizeof(float));
    return STATUS_OK;
}

static void repeat_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    for (int b = 0; b < batch; b++) {
        float *d = dx + (size_t)b * l->in_len;
        memset(d, 0, l->in_len * sizeof(float));
        for (int r = 0; r < l->spec.repeat; r++) {
            const float *g = dy + (size_t)b * l->out_len + (size_t)r * l->in_len;
            for (size_t k = 0; k < l->in_len; k++)
                d[k] += g[k];
        }
    }
}

const layer_ops_t layer_zero_padding2d = {
    .plan = margins_plan, .forward = margins_forward, .backward_input = margins_backward_input};
const layer_ops_t layer_cropping2d = {
    .plan = margins_plan, .forward = margins_forward, .backward_input = margins_backward_input};
const layer_ops_t layer_up_sampling2d = {
    .plan = up_plan, .forward = up_forward, .backward_input = up_backward_input};
const layer_ops_t layer_permute = {
    .plan = permute_plan, .forward = permute_forward, .backward_input = permute_backward_input};
const layer_ops_t layer_repeat_vector = {
    .plan = repeat_plan, .forward = repeat_forward, .backward_input = repeat_backward_input};
