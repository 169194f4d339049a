#define _POSIX_C_SOURCE 200809L
#include "files/keras_archive.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

#include "files/safetensors.h"

/* ---- model.weights.h5 ------------------------------------------------------------------------
 */

/* A group at path with the string attribute name=value (variable-length UTF-8, as h5py writes
 * Python strings). */
static hid_t group_with_name(hid_t file, const char *path, const char *value)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), g, type, space, attr;
    herr_t ok = -1;

    H5Pset_create_intermediate_group(lcpl, 1);
    g = H5Gcreate2(file, path, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Pclose(lcpl);
    if (g < 0)
        return -1;
    type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    space = H5Screate(H5S_SCALAR);
    attr = H5Acreate2(g, "name", type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (attr >= 0) {
        ok = H5Awrite(attr, type, &value);
        H5Aclose(attr);
    }
    H5Sclose(space);
    H5Tclose(type);
    if (ok < 0) {
        H5Gclose(g);
        return -1;
    }
    return g;
}

static herr_t put_dataset(hid_t group, const char *name, hid_t file_type, hid_t mem_type, int rank,
                          const uint64_t *shape, const void *data)
{
    hsize_t dims[KERAS_MAX_RANK];
    hid_t space, d;
    herr_t rc = -1;

    for (int i = 0; i < rank; i++)
        dims[i] = shape[i];
    space = rank > 0 ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
    d = H5Dcreate2(group, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d >= 0) {
        rc = H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
        H5Dclose(d);
    }
    H5Sclose(space);
    return rc;
}

/* The variables of one group: datasets "0", "1", ... */
static herr_t put_vars(hid_t g, const keras_tensor_t *vars, size_t n, size_t first)
{
    char name[32];

    for (size_t i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "%zu", first + i);
        if (put_dataset(g, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, vars[i].rank, vars[i].shape,
                        vars[i].data) < 0)
            return -1;
    }
    return 0;
}

static herr_t put_optimizer(hid_t file, const keras_archive_t *a)
{
    hid_t g = group_with_name(file, "optimizer/vars", a->optimizer);
    herr_t rc = g < 0 ? -1 : 0;

    if (rc == 0)
        rc = put_dataset(g, "0", H5T_STD_I64LE, H5T_NATIVE_INT64, 0, NULL, &a->iterations);
    if (rc == 0)
        rc = put_dataset(g, "1", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 0, NULL, &a->learning_rate);
    if (rc == 0)
        rc = put_vars(g, a->optimizer_vars, a->n_optimizer_vars, 2);
    if (g >= 0)
        H5Gclose(g);
    return rc;
}

static status_t write_weights(const char *path, const keras_archive_t *a, status_msg_t *err)
{
    hid_t file, g;
    herr_t rc = 0;
    char group[160];

    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors come back as statuses, not on stderr */
    file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0)
        return status_fail(err, STATUS_IO, "cannot create %s (HDF5)", path);
    for (size_t i = 0; rc == 0 && i < a->n_layers; i++) {
        snprintf(group, sizeof(group), "layers/%s/vars", a->layers[i].name);
        g = group_with_name(file, group, a->layers[i].name);
        rc = g < 0 ? -1 : put_vars(g, a->layers[i].vars, a->layers[i].n, 0);
        if (g >= 0)
            H5Gclose(g);
    }
    if (rc == 0 && a->optimizer != NULL)
        rc = put_optimizer(file, a);
    if (rc == 0) {
        g = group_with_name(file, "vars", a->model_name);
        rc = g < 0 ? -1 : H5Gclose(g);
    }
    if (H5Fclose(file) < 0 || rc < 0)
        return status_fail(err, STATUS_IO, "cannot write %s (HDF5)", path);
    return STATUS_OK;
}

/* ---- the zip ---------------------------------------------------------------------------------
 */

static status_t zip_failed(zip_t *z, const char *path, status_msg_t *err)
{
    status_t rc = status_fail(err, STATUS_IO, "cannot write %s: %s", path, zip_strerror(z));

    zip_discard(z);
    return rc;
}

/* Adds an entry, stored as Keras stores it. */
static int add_entry(zip_t *z, const char *name, zip_source_t *src)
{
    zip_int64_t i;

    if (src == NULL)
        return -1;
    if ((i = zip_file_add(z, name, src, ZIP_FL_OVERWRITE | ZIP_FL_ENC_UTF_8)) < 0) {
        zip_source_free(src);
        return -1;
    }
    return zip_set_file_compression(z, (zip_uint64_t)i, ZIP_CM_STORE, 0);
}

status_t keras_archive_write(const char *path, const keras_archive_t *a, status_msg_t *err)
{
    char metadata[128], date[32], *h5 = NULL;
    size_t len = strlen(path) + 32;
    time_t now = time(NULL);
    struct tm tm;
    int zerr = 0;
    zip_t *z;
    status_t rc;

    strftime(date, sizeof(date), "%Y-%m-%d@%H:%M:%S", localtime_r(&now, &tm));
    snprintf(metadata, sizeof(metadata), "{\"keras_version\": \"%s\", \"date_saved\": \"%s\"}",
             KERAS_ARCHIVE_VERSION, date);
    if ((h5 = malloc(len)) == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    snprintf(h5, len, "%s.h5-%ld", path, (long)getpid());
    rc = write_weights(h5, a, err);
    if (rc == STATUS_OK && (z = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &zerr)) == NULL) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        rc = status_fail(err, STATUS_IO, "cannot create %s: %s", path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
    } else if (rc == STATUS_OK) {
        if (add_entry(z, "metadata.json", zip_source_buffer(z, metadata, strlen(metadata), 0)) <
                0 ||
            add_entry(z, "config.json",
                      zip_source_buffer(z, a->config_json, strlen(a->config_json), 0)) < 0 ||
            add_entry(z, "model.weights.h5", zip_source_file(z, h5, 0, -1)) < 0)
            rc = zip_failed(z, path, err);
        else if (zip_close(z) < 0)
            rc = zip_failed(z, path, err);
    }
    unlink(h5);
    free(h5);
    return rc;
}

/* ---- reading weights ---------------------------------------------------------------------- */

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#define CHILD_SECONDS 120
#define CHILD_MEMORY  (16ull << 30)

status_t keras_archive_read_config(const char *path, size_t max_len, char **ret, size_t *ret_len,
                                   status_msg_t *err)
{
    int zerr = 0;
    zip_t *z = zip_open(path, ZIP_RDONLY, &zerr);
    zip_stat_t st;
    zip_file_t *zf = NULL;
    char *text = NULL;
    zip_int64_t n = 0;
    status_t rc = STATUS_OK;

    *ret = NULL;
    *ret_len = 0;
    if (z == NULL && zerr == ZIP_ER_MEMORY)
        return status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", path);
    if (z == NULL && zerr == ZIP_ER_NOENT)
        return status_fail(err, STATUS_NOT_FOUND, "%s: no such file", path);
    if (z == NULL && (zerr == ZIP_ER_OPEN || zerr == ZIP_ER_READ || zerr == ZIP_ER_SEEK))
        return status_fail(err, STATUS_IO, "%s: cannot be read", path);
    if (z == NULL)
        return status_fail(err, STATUS_BAD_CONFIG, "%s: not a zip archive (a .keras file is one)",
                           path);
    zip_stat_init(&st);
    if (zip_stat(z, "config.json", 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
        rc = status_fail(err, STATUS_BAD_CONFIG, "%s: no config.json in the archive", path);
    else if (st.size > max_len)
        rc =
            status_fail(err, STATUS_BAD_CONFIG, "%s: config.json is over %zu bytes", path, max_len);
    else if ((text = malloc((size_t)st.size + 1)) == NULL)
        rc = status_fail(err, STATUS_NO_MEMORY, "%s: out of memory", path);
    /* one byte more than the header says: the read that meets the entry's end is where libzip
     * checks its CRC, and an entry longer than its header says shows */
    else if ((zf = zip_fopen(z, "config.json", 0)) == NULL ||
             (n = zip_fread(zf, text, st.size + 1)) < 0 || (zip_uint64_t)n != st.size)
        rc = status_fail(err, STATUS_BAD_CONFIG, "%s: config.json cannot be extracted (corrupt)",
                         path);
    if (zf != NULL)
        zip_fclose(zf);
    zip_discard(z);
    if (rc != STATUS_OK) {
        free(text);
        return rc;
    }
    text[st.size] = '\0';
    *ret = text;
    *ret_len = (size_t)st.size;
    return STATUS_OK;
}

/* Extracts model.weights.h5 from the archive into h5_path. Runs in the child. */
int keras_archive_extract_h5(const char *path, const char *h5_path, char *why, size_t why_len)
{
    int zerr = 0;
    zip_t *z = zip_open(path, ZIP_RDONLY, &zerr);
    zip_stat_t st;
    zip_file_t *zf;
    FILE *out;
    char buf[1 << 16];
    zip_int64_t n;
    uint64_t total = 0;

    if (z == NULL)
        return snprintf(why, why_len, "not a zip archive (a .keras file is one)"), -1;
    if (zip_stat(z, "model.weights.h5", 0, &st) != 0 ||
        (zf = zip_fopen(z, "model.weights.h5", 0)) == NULL) {
        zip_discard(z);
        return snprintf(why, why_len, "no model.weights.h5 in the archive"), -1;
    }
    if ((out = fopen(h5_path, "wb")) == NULL) {
        zip_fclose(zf);
        zip_discard(z);
        return snprintf(why, why_len, "cannot create a temporary file"), -1;
    }
    while ((n = zip_fread(zf, buf, sizeof(buf))) > 0 && total <= KERAS_MAX_WEIGHTS) {
        total += (uint64_t)n;
        if (fwrite(buf, 1, (size_t)n, out) != (size_t)n) {
            n = -2; /* a full disk: stop, and say the weights cannot be extracted */
            break;
        }
    }
    zip_fclose(zf);
    zip_discard(z);
    if (fclose(out) != 0 || n < 0 || total > KERAS_MAX_WEIGHTS)
        return snprintf(why, why_len, "model.weights.h5 %s",
                        total > KERAS_MAX_WEIGHTS ? "is over 8 GiB"
                                                  : "cannot be extracted (corrupt)"),
               -1;
    return 0;
}

/* Whether a dataset that is not chunked stores all n elements of `size` bytes. */
static bool stored_whole(hid_t d, uint64_t n, size_t size)
{
    hid_t dcpl = H5Dget_create_plist(d);
    H5D_layout_t layout = dcpl >= 0 ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
    bool ok;

    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (layout == H5D_CHUNKED)
        return true;
    ok = layout == H5D_COMPACT || layout == H5D_CONTIGUOUS;
    return ok && size > 0 && n <= UINT64_MAX / size && H5Dget_storage_size(d) >= n * size;
}

/* Reads one dataset as float32 into a malloc'd buffer, with its shape and dtype; with
 * int_scalar, an integer scalar (an optimizer's iteration count) is read as int64. */
static void *read_dataset(hid_t group, const char *link, const char *name, bool int_scalar,
                          st_tensor_t *t, char *why, size_t why_len)
{
    hid_t d = H5Dopen2(group, link, H5P_DEFAULT), space = -1, type = -1;
    hsize_t dims[ST_MAX_RANK];
    void *data = NULL;
    int rank;
    uint64_t n = 1;

    if (d < 0)
        return snprintf(why, why_len, "cannot open dataset %s", name), NULL;
    space = H5Dget_space(d);
    type = H5Dget_type(d);
    rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    if (int_scalar && rank == 0 && type >= 0 && H5Tget_class(type) == H5T_INTEGER) {
        t->rank = 0;
        t->dtype = ST_I64;
        if (!stored_whole(d, 1, H5Tget_size(type)) || (data = malloc(sizeof(int64_t))) == NULL ||
            H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
            free(data);
            data = NULL;
            snprintf(why, why_len, "cannot read dataset %s", name);
        }
        goto out;
    }
    t->dtype = ST_F32;
    if (rank < 0 || rank > ST_MAX_RANK || type < 0 || H5Tget_class(type) != H5T_FLOAT) {
        snprintf(why, why_len, "dataset %s is not a floating-point array of at most %d dimensions",
                 name, ST_MAX_RANK);
        goto out;
    }
    H5Sget_simple_extent_dims(space, dims, NULL);
    t->rank = rank;
    for (int i = 0; i < rank; i++) {
        t->shape[i] = dims[i];
        if (dims[i] != 0 && n > (KERAS_MAX_WEIGHTS / 4) / dims[i]) {
            snprintf(why, why_len, "dataset %s is too big", name);
            goto out;
        }
        n *= dims[i];
    }
    /* libhdf5 trusts a compact or contiguous dataset's stored size less than its shape: a file
     * whose raw data is shorter than the shape says made it read past its own buffer (found by
     * the keras_h5 fuzz target), so the stored bytes are checked first. Chunked data may be
     * compressed or unallocated (fill values): libhdf5 reads it chunk by chunk. */
    if (!stored_whole(d, n, H5Tget_size(type))) {
        snprintf(why, why_len, "dataset %s holds fewer bytes than its shape needs", name);
        goto out;
    }
    if ((data = malloc(n * sizeof(float) + 1)) == NULL ||
        H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
        free(data);
        data = NULL;
        snprintf(why, why_len, "cannot read dataset %s", name);
    }
out:
    if (type >= 0)
        H5Tclose(type);
    if (space >= 0)
        H5Sclose(space);
    H5Dclose(d);
    return data;
}

typedef struct gathered {
    st_tensor_t *t;
    char **names;
    void **data;
    bool out_of_memory;
    size_t n, cap;
    char *why;
    size_t why_len;
} gathered_t;

/* The datasets 0, 1, ... of a vars group, named "<prefix>/<i>"; closes vars. The first may be
 * an integer scalar when first_int is set. */
static herr_t gather_vars(gathered_t *g, hid_t vars, const char *prefix, bool first_int)
{
    for (int i = 0;; i++) {
        char name[32], full[700];
        snprintf(name, sizeof(name), "%d", i);
        if (H5Lexists(vars, name, H5P_DEFAULT) <= 0)
            break;
        if (g->n == g->cap) {
            size_t cap = g->cap ? 2 * g->cap : 64;
            st_tensor_t *t = realloc(g->t, cap * sizeof(*t));
            char **names = realloc(g->names, cap * sizeof(*names));
            void **data = realloc(g->data, cap * sizeof(*data));
            if (t != NULL)
                g->t = t;
            if (names != NULL)
                g->names = names;
            if (data != NULL)
                g->data = data;
            if (t == NULL || names == NULL || data == NULL) {
                H5Gclose(vars);
                g->out_of_memory = true;
                return snprintf(g->why, g->why_len, "out of memory"), -1;
            }
            g->cap = cap;
        }
        memset(&g->t[g->n], 0, sizeof(g->t[g->n]));
        snprintf(full, sizeof(full), "%s/%d", prefix, i);
        g->data[g->n] =
            read_dataset(vars, name, full, first_int && i == 0, &g->t[g->n], g->why, g->why_len);
        g->names[g->n] = strdup(full);
        if (g->data[g->n] == NULL || g->names[g->n] == NULL) {
            free(g->data[g->n]);
            free(g->names[g->n]);
            H5Gclose(vars);
            return -1;
        }
        g->t[g->n].name = g->names[g->n];
        g->t[g->n].data = g->data[g->n];
        g->n++;
    }
    H5Gclose(vars);
    return 0;
}

/* One layer's group: its vars/0, vars/1, ... */
static herr_t gather_layer(hid_t layers, const char *layer, const H5L_info_t *info, void *arg)
{
    gathered_t *g = arg;
    char path[600];
    hid_t vars;

    (void)info;
    if (!utf8_valid_text(layer, strlen(layer))) { /* it becomes a safetensors (JSON) name */
        char shown[200];
        utf8_escape(shown, sizeof(shown), layer, strlen(layer));
        return snprintf(g->why, g->why_len, "layer name \"%s\" is not UTF-8 text", shown), -1;
    }
    snprintf(path, sizeof(path), "%s/vars", layer);
    if ((vars = H5Gopen2(layers, path, H5P_DEFAULT)) < 0)
        return 0; /* a layer without variables may have no vars group */
    return gather_vars(g, vars, layer, false);
}

/* The optimizer's variables (optimizer/vars/0: its iteration count), when it has any. They are
 * read for a job that goes on with them only: one that cannot be read (a type Tessera does not
 * read, such as another optimizer's counter) leaves them all out, the reason in *why_not, and
 * the weights are still read. */
static herr_t gather_optimizer(hid_t file, gathered_t *g, char *why_not, size_t why_not_len)
{
    size_t first = g->n;
    hid_t vars;

    if (H5Lexists(file, "optimizer", H5P_DEFAULT) <= 0 ||
        H5Lexists(file, "optimizer/vars", H5P_DEFAULT) <= 0 ||
        (vars = H5Gopen2(file, "optimizer/vars", H5P_DEFAULT)) < 0)
        return 0;
    if (gather_vars(g, vars, KERAS_OPTIMIZER_PREFIX, true) >= 0)
        return 0;
    if (g->out_of_memory)
        return -1;
    snprintf(why_not, why_not_len, "%s", g->why);
    g->why[0] = '\0';
    for (size_t i = first; i < g->n; i++) {
        free(g->data[i]);
        free(g->names[i]);
    }
    g->n = first;
    return 0;
}

/* HDF5 -> safetensors at out_path. Runs in the child. */
int keras_archive_h5_to_safetensors(const char *h5, const char *out_path, char *why, size_t why_len)
{
    gathered_t g = {.why = why, .why_len = why_len};
    hid_t file, layers;
    status_msg_t err = {0};
    char why_not[512] = {0};
    st_meta_t meta = {KERAS_OPTIMIZER_UNREAD, why_not};
    int rc = -1;

    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    file = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) {
        snprintf(why, why_len, "model.weights.h5 is not an HDF5 file");
    } else {
        if ((layers = H5Gopen2(file, "layers", H5P_DEFAULT)) < 0) {
            snprintf(why, why_len, "model.weights.h5 has no layers group");
        } else {
            /* by name: Keras's own order is the config's, which the caller matches by name */
            if (H5Literate(layers, H5_INDEX_NAME, H5_ITER_INC, NULL, gather_layer, &g) >= 0 &&
                gather_optimizer(file, &g, why_not, sizeof(why_not)) >= 0) {
                if (st_write_file(out_path, g.t, g.n, why_not[0] ? &meta : NULL, why_not[0] ? 1 : 0,
                                  NULL, &err) == STATUS_OK)
                    rc = 0;
                else
                    snprintf(why, why_len, "%s", err.text);
            } else if (why[0] == '\0') {
                snprintf(why, why_len, "cannot walk the layers of model.weights.h5");
            }
            H5Gclose(layers);
        }
        H5Fclose(file);
    }
    for (size_t i = 0; i < g.n; i++) {
        free(g.data[i]);
        free(g.names[i]);
    }
    free(g.t);
    free(g.names);
    free(g.data);
    return rc;
}

/* The child's work: archive -> HDF5 -> safetensors at out_path. */
static int child_read(const char *path, const char *out_path, char *why, size_t why_len)
{
    char h5[4200];
    int rc;

    snprintf(h5, sizeof(h5), "%s.h5", out_path);
    rc = keras_archive_extract_h5(path, h5, why, why_len);
    if (rc == 0)
        rc = keras_archive_h5_to_safetensors(h5, out_path, why, why_len);
    unlink(h5); /* also what a failed extraction left */
    return rc;
}

static void limit_memory(void) __attribute__((unused));

/* CHILD_MEMORY more than the address space the child starts with (the parent's: a GPU
 * runtime's reservations can be larger than the limit itself). open and read, not stdio: the
 * child of a threaded parent. */
static void limit_memory(void)
{
    char buf[64] = {0};
    int fd = open("/proc/self/statm", O_RDONLY);
    unsigned long long pages = 0;
    struct rlimit as;

    if (fd >= 0) {
        if (read(fd, buf, sizeof(buf) - 1) > 0)
            pages = strtoull(buf, NULL, 10); /* the first field: the whole address space */
        close(fd);
    }
    as.rlim_cur = as.rlim_max = pages * (unsigned long long)sysconf(_SC_PAGESIZE) + CHILD_MEMORY;
    setrlimit(RLIMIT_AS, &as);
}

status_t keras_archive_read_weights(const char *path, const char *out_path, status_msg_t *err)
{
    int pipefd[2], status;
    char why[512] = {0};
    pid_t pid;
    ssize_t n;

    if (access(path, R_OK) != 0)
        return status_fail(err, errno == ENOENT ? STATUS_NOT_FOUND : STATUS_IO,
                           "cannot read %s: %s", path, strerror(errno));
    if (pipe(pipefd) != 0)
        return status_fail(err, STATUS_SYSTEM, "pipe: %s", strerror(errno));
    fflush(NULL);
    if ((pid = fork()) < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        return status_fail(err, STATUS_SYSTEM, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(pipefd[0]);
#ifndef UNDER_ASAN /* ASan's shadow memory needs more address space than any limit */
        limit_memory();
#endif
        /* A fault in libhdf5 kills the child by its signal, whatever handlers the parent has
         * (a daemon's, a sanitizer's): the parent reports it as a crash of libhdf5. */
        static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
            signal(faults[i], SIG_DFL);
        alarm(CHILD_SECONDS);
        int rc = child_read(path, out_path, why, sizeof(why));
        if (rc != 0 && write(pipefd[1], why, strlen(why)) < 0)
            rc = 2;
        _exit(rc == 0 ? 0 : 1);
    }
    close(pipefd[1]);
    n = read(pipefd[0], why, sizeof(why) - 1);
    close(pipefd[0]);
    why[n > 0 ? n : 0] = '\0';
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return STATUS_OK;
    unlink(out_path);
    if (WIFSIGNALED(status))
        return status_fail(err, STATUS_DATA_LOSS,
                           "%s: reading its weights %s (signal %d): the file is corrupt", path,
                           WTERMSIG(status) == SIGALRM ? "took too long" : "crashed libhdf5",
                           WTERMSIG(status));
    return status_fail(err, STATUS_DATA_LOSS, "%s: %s", path, why[0] ? why : "unreadable");
}
