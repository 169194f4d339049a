#define _POSIX_C_SOURCE 200809L
#include "files/keras_archive.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

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
