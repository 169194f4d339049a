#define _POSIX_C_SOURCE 200809L
#include "init_from.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "files/keras_archive.h"
#include "optim/optimizer.h"

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
    return rc;
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

/* The name param i of the model has in the file. */
static void file_name(const init_weights_t *w, model_t *m, size_t i, char *buf, size_t len)
{
    const model_param_t *p = model_param(m, i);

    if (!w->keras) {
        snprintf(buf, len, "%s", p->name);
        return;
    }
    /* "<layer>/<k>": the k-th variable of its layer, as the layer creates them */
    const char *slash = strchr(p->name, '/');
    size_t layer_len = slash ? (size_t)(slash - p->name) : strlen(p->name), k = 0;
    for (size_t j = 0; j < i; j++)
        if (strncmp(model_param(m, j)->name, p->name, layer_len + 1) == 0)
            k++;
    snprintf(buf, len, "%.*s/%zu", (int)layer_len, p->name, k);
}

static status_t check(const init_weights_t *w, model_t *m, status_msg_t *err)
{
    char name[160];

    if (st_count(w->file) != model_param_count(m))
        return status_fail(err, STATUS_BAD_CONFIG,
                           "%s holds %zu variables, the model %zu: the weights of another model",
                           w->path, st_count(w->file), model_param_count(m));
    for (size_t i = 0; i < model_param_count(m); i++) {
        const model_param_t *p = model_param(m, i);
        const st_info_t *t;
        bool same;
        file_name(w, m, i, name, sizeof(name));
        if ((t = st_find(w->file, name)) == NULL)
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s has no %s (the model's %s): the weights of another model "
                               "(or layers named otherwise)",
                               w->path, name, p->name);
        same = t->dtype == ST_F32 && t->rank == p->rank;
        for (int d = 0; same && d < p->rank; d++)
            same = t->shape[d] == (uint64_t)p->shape[d];
        if (!same) {
            char theirs[96] = "", ours[96] = "";
            for (int d = 0; d < t->rank; d++)
                snprintf(theirs + strlen(theirs), sizeof(theirs) - strlen(theirs), "%s%llu",
                         d ? ", " : "", (unsigned long long)t->shape[d]);
            for (int d = 0; d < p->rank; d++)
                snprintf(ours + strlen(ours), sizeof(ours) - strlen(ours), "%s%d", d ? ", " : "",
                         p->shape[d]);
            return status_fail(err, STATUS_BAD_CONFIG,
                               "%s: %s is %s [%s], the model's %s float32 [%s]: the weights of "
                               "another model",
                               w->path, name, st_dtype_name(t->dtype), theirs, p->name, ours);
        }
    }
    return STATUS_OK;
}

status_t init_weights_apply(const init_weights_t *w, model_t *m, status_msg_t *err)
{
    char name[160];

    STATUS_CHECK(check(w, m, err));
    for (size_t i = 0; i < model_param_count(m); i++) {
        model_param_t *p = model_param(m, i);
        file_name(w, m, i, name, sizeof(name));
        STATUS_CHECK(st_read(w->file, st_find(w->file, name), p->value, err));
        /* HDF5 keeps no checksums: damage inside the data reads back as numbers, which is
         * caught only when it makes them NaN or infinite. */
        if (optimizer_first_non_finite(p->value, p->n) < p->n)
            return status_fail(err, STATUS_DATA_LOSS,
                               "%s: %s holds NaN or infinite values: a corrupt file", w->path,
                               name);
    }
    return STATUS_OK;
}
