/* A job's paths against a daemon's roots (job/paths.h). */
#define _POSIX_C_SOURCE 200809L
#include "job/paths.h"

#include <glob.h>
#include <stdio.h>
#include <string.h>

static const roots_t *parse_roots;

void job_paths_confine(const roots_t *roots)
{
    parse_roots = roots;
}

status_t job_paths_check_read(const char *what, const char *path, status_msg_t *err)
{
    return parse_roots != NULL ? roots_check(parse_roots, what, path, err) : STATUS_OK;
}

/* A data file, or each file a glob pattern matches (and the pattern's own directory). */
static status_t check_file(const roots_t *roots, const char *what, const char *path,
                           status_msg_t *err)
{
    glob_t g;
    status_t rc = STATUS_OK;

    if (path == NULL)
        return STATUS_OK;
    STATUS_CHECK(roots_check(roots, what, path, err));
    if (strpbrk(path, "*?[") == NULL)
        return STATUS_OK;
    if (glob(path, 0, NULL, &g) != 0)
        return STATUS_OK; /* nothing matches: the reader says so */
    for (size_t i = 0; i < g.gl_pathc && rc == STATUS_OK; i++)
        rc = roots_check(roots, what, g.gl_pathv[i], err);
    globfree(&g);
    return rc;
}

static status_t check_source(const roots_t *roots, const char *split, const job_source_t *s,
                             status_msg_t *err)
{
    char what[64];

    if (!s->present)
        return STATUS_OK;
    snprintf(what, sizeof(what), "data.%s file", split);
    STATUS_CHECK(check_file(roots, what, s->images, err));
    STATUS_CHECK(check_file(roots, what, s->labels, err));
    for (size_t i = 0; s->format == JOB_DATA_NPY && i < s->n_x; i++) /* npz: names in it */
        STATUS_CHECK(check_file(roots, what, s->x[i], err));
    for (size_t i = 0; s->format == JOB_DATA_NPY && i < s->n_y; i++)
        STATUS_CHECK(check_file(roots, what, s->y[i], err));
    STATUS_CHECK(check_file(roots, what, s->archive, err));
    for (size_t i = 0; i < s->n_files; i++)
        STATUS_CHECK(check_file(roots, what, s->files[i], err));
    return STATUS_OK;
}

status_t job_paths_check(const job_t *job, unsigned which, const roots_t *roots, status_msg_t *err)
{
    if (which & JOB_PATHS_DATA) {
        STATUS_CHECK(check_source(roots, "train", &job->data.train, err));
        STATUS_CHECK(check_source(roots, "test", &job->data.test, err));
    }
    if (which & JOB_PATHS_INIT)
        STATUS_CHECK(roots_check(roots, "init_from", job->init_from, err));
    if (which & JOB_PATHS_CHECKPOINT)
        STATUS_CHECK(roots_check(roots, "checkpoint.dir", job->checkpoint_dir, err));
    if (which & JOB_PATHS_TENSORBOARD)
        STATUS_CHECK(roots_check(roots, "tensorboard.dir", job->tensorboard_logdir, err));
    return STATUS_OK;
}
