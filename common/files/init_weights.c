#define _POSIX_C_SOURCE 200809L
#include "files/init_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files/checkpoint.h"
#include "files/keras_archive.h"

static bool is_zip(const char *path)
{
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    bool zip = f != NULL && fread(magic, 1, 4, f) == 4 && memcmp(magic, "PK\3\4", 4) == 0;

    if (f != NULL)
        fclose(f);
    return zip;
}

status_t init_weights_open(const char *path, init_weights_t *w, status_msg_t *err)
{
    char file[4096], tmpl[] = "/tmp/tessera-init-XXXXXX";
    const char *dir = getenv("TMPDIR");
    status_t rc;

    memset(w, 0, sizeof(*w));
    w->path = path;
    if (!is_zip(path))
        return st_open(path, &w->file, err);
    w->keras = true;
    if (dir != NULL && dir[0] != '\0') {
        size_t len = strlen(dir) + sizeof("/tessera-init-XXXXXX");
        if ((w->tmpdir = malloc(len)) != NULL)
            snprintf(w->tmpdir, len, "%s/tessera-init-XXXXXX", dir);
    } else {
        w->tmpdir = strdup(tmpl);
    }
    if (w->tmpdir == NULL || mkdtemp(w->tmpdir) == NULL) {
        free(w->tmpdir);
        w->tmpdir = NULL;
        return status_fail(err, STATUS_IO, "cannot make a temporary directory to unpack %s", path);
    }
    snprintf(file, sizeof(file), "%s/weights.safetensors", w->tmpdir);
    rc = keras_archive_read_weights(path, file, err);
    if (rc == STATUS_OK)
        rc = st_open(file, &w->file, err);
    /* in one pass: the child names them KERAS_OPTIMIZER_PREFIX "/0", "/1", ... */
    for (size_t i = 0; rc == STATUS_OK && i < st_count(w->file); i++)
        w->n_optimizer += strncmp(st_info(w->file, i)->name, KERAS_OPTIMIZER_PREFIX "/",
                                  sizeof(KERAS_OPTIMIZER_PREFIX)) == 0;
    return rc;
}

const st_info_t *init_weights_optimizer_info(const init_weights_t *w, size_t i)
{
    char name[64];

    if (!w->keras)
        return NULL;
    snprintf(name, sizeof(name), "%s/%zu", KERAS_OPTIMIZER_PREFIX, i);
    return st_find(w->file, name);
}

size_t init_weights_optimizer_count(const init_weights_t *w)
{
    return w->n_optimizer;
}

const char *init_weights_optimizer_unread(const init_weights_t *w)
{
    return w->keras ? st_metadata(w->file, KERAS_OPTIMIZER_UNREAD) : NULL;
}

status_t init_weights_optimizer_read(const init_weights_t *w, size_t i, void *out,
                                     status_msg_t *err)
{
    const st_info_t *t = i < w->n_optimizer ? init_weights_optimizer_info(w, i) : NULL;

    if (t == NULL)
        return status_fail(err, STATUS_INTERNAL, "%s: no optimizer variable %zu", w->path, i);
    STATUS_CHECK(st_read(w->file, t, out, err));
    return t->dtype == ST_F32
               ? ckpt_check_floats(w->path, t->name, out, (size_t)t->elements, false, err)
               : STATUS_OK;
}

void init_weights_close(init_weights_t *w)
{
    char file[4096];

    if (w == NULL)
        return;
    st_close(w->file);
    if (w->tmpdir != NULL) {
        snprintf(file, sizeof(file), "%s/weights.safetensors", w->tmpdir);
        unlink(file);
        rmdir(w->tmpdir);
        free(w->tmpdir);
    }
    memset(w, 0, sizeof(*w));
}

void init_weights_map_layers(init_weights_t *w, const char *const *names, const char *const *paths,
                             size_t n)
{
    w->layer_names = names;
    w->layer_paths = paths;
    w->n_layers = n;
}

/* The name variable i has in the file. */
static void file_name(const init_weights_t *w, const st_tensor_t *vars, size_t i, char *buf,
                      size_t len)
{
    const char *name = vars[i].name, *slash = strchr(name, '/'), *layer = name;
    size_t layer_len = slash ? (size_t)(slash - name) : strlen(name), k = 0, shown = layer_len;

    if (!w->keras) {
        snprintf(buf, len, "%s", name);
        return;
    }
    /* "<path>/<k>": the k-th variable of its layer, as the layer creates them */
    for (size_t j = 0; j < i; j++)
        if (strncmp(vars[j].name, name, layer_len + 1) == 0)
            k++;
    for (size_t l = 0; l < w->n_layers; l++)
        if (strlen(w->layer_names[l]) == layer_len &&
            strncmp(w->layer_names[l], name, layer_len) == 0) {
            layer = w->layer_paths[l];
            shown = strlen(layer);
            break;
        }
    snprintf(buf, len, "%.*s/%zu", (int)shown, layer, k);
}

static void shape_text(const uint64_t *shape, int rank, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int d = 0; d < rank; d++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%llu", d ? ", " : "",
                 (unsigned long long)shape[d]);
}

status_t init_weights_check(const init_weights_t *w, const st_tensor_t *vars, size_t n,
                            status_msg_t *err)
{
    char name[160];

    if (st_count(w->file) - w->n_optimizer != n)
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s holds %zu variables, the model %zu: the weights of another model",
                           w->path, st_count(w->file) - w->n_optimizer, n);
    for (size_t i = 0; i < n; i++) {
        const st_tensor_t *v = &vars[i];
        const st_info_t *t;
        bool same;
        file_name(w, vars, i, name, sizeof(name));
        if ((t = st_find(w->file, name)) == NULL)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s has no %s (the model's %s): the weights of another model "
                               "(or layers named otherwise)",
                               w->path, name, v->name);
        same = t->dtype == ST_F32 && t->rank == v->rank;
        for (int d = 0; same && d < v->rank; d++)
            same = t->shape[d] == v->shape[d];
        if (!same) {
            char theirs[96], ours[96];
            shape_text(t->shape, t->rank, theirs, sizeof(theirs));
            shape_text(v->shape, v->rank, ours, sizeof(ours));
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: %s is %s [%s], the model's %s float32 [%s]: the weights of "
                               "another model",
                               w->path, name, st_dtype_name(t->dtype), theirs, v->name, ours);
        }
    }
    return STATUS_OK;
}

status_t init_weights_read(const init_weights_t *w, const st_tensor_t *vars, size_t n, size_t i,
                           float *out, status_msg_t *err)
{
    const st_info_t *t;
    char name[160];

    if (i >= n)
        return status_fail(err, STATUS_INTERNAL, "%s: no variable %zu of %zu", w->path, i, n);
    file_name(w, vars, i, name, sizeof(name));
    if ((t = st_find(w->file, name)) == NULL)
        return status_fail(err, STATUS_BAD_CONFIG, "%s has no %s", w->path, name);
    STATUS_CHECK(st_read(w->file, t, out, err));
    /* HDF5 keeps no checksums: damage inside the data reads back as numbers, which is caught
     * only when it makes them NaN or infinite. */
    return ckpt_check_floats(w->path, name, out, (size_t)t->elements, false, err);
}

status_t init_weights_optimizer_check(const init_weights_t *w, size_t i, const uint64_t *shape,
                                      int rank, const char *what, const char *name,
                                      status_msg_t *err)
{
    const st_info_t *v = init_weights_optimizer_info(w, i);
    bool same = v != NULL && v->dtype == ST_F32 && v->rank == rank;
    char theirs[96] = "", ours[96];

    for (int d = 0; same && d < rank; d++)
        same = v->shape[d] == shape[d];
    if (same)
        return STATUS_OK;
    if (v != NULL)
        shape_text(v->shape, v->rank, theirs, sizeof(theirs));
    shape_text(shape, rank, ours, sizeof(ours));
    return status_fail(err, STATUS_BAD_CONFIG,
                       "%s: optimizer variable %zu is %s [%s], but the %s of %s is float32 [%s]: "
                       "the optimizer of another model (name an optimizer in the job to start "
                       "a new one)",
                       w->path, i, v != NULL ? st_dtype_name(v->dtype) : "missing", theirs, what,
                       name, ours);
}
