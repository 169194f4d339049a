/* Rescaling: x * scale + offset (Keras's preprocessing layer, often an image model's first);
 * the input gradient is the output's times scale. */
#include "layers/layer.h"

static status_t rescaling_forward(layer_t *l, int batch, bool training, status_msg_t *err)
{
    size_t n = (size_t)batch * l->in_len;
    float scale = (float)l->spec.scale, offset = (float)l->spec.offset;

    (void)training, (void)err;
    for (size_t i = 0; i < n; i++)
        l->out[i] = l->in[i] * scale + offset;
    return STATUS_OK;
}

static void rescaling_backward_input(layer_t *l, int batch, const float *dy, float *dx)
{
    size_t n = (size_t)batch * l->in_len;
    float scale = (float)l->spec.scale;

    for (size_t i = 0; i < n; i++)
        dx[i] = dy[i] * scale;
}

const layer_ops_t layer_rescaling = {.forward = rescaling_forward,
                                     .backward_input = rescaling_backward_input};
