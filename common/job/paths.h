/* The files and directories a job names, checked against a daemon's roots (base/roots.h) before
 * it reads or writes any of them. */
#ifndef TESSERA_JOB_PATHS_H
#define TESSERA_JOB_PATHS_H

#include "base/roots.h"
#include "job/job.h"

/* What a daemon touches of a job: */
#define JOB_PATHS_DATA        (1u << 0) /* data.train and data.test files (glob patterns expanded) */
#define JOB_PATHS_INIT        (1u << 1) /* init_from */
#define JOB_PATHS_CHECKPOINT  (1u << 2) /* checkpoint.dir */
#define JOB_PATHS_TENSORBOARD (1u << 3) /* tensorboard.dir */

/* STATUS_OK when every path of the kinds in `which` is inside roots; else the first outside,
 * named with its key (roots_check). */
status_t job_paths_check(const job_t *job, unsigned which, const roots_t *roots, status_msg_t *err);

/* Where job parsing may read a file a job names from disk (model.keras_json not sent with the
 * job): NULL (the default, for `tessera train`) = anywhere; a daemon sets its roots at start. */
void job_paths_confine(const roots_t *roots);

/* roots_check against the roots job_paths_confine set; STATUS_OK when none was set. */
status_t job_paths_check_read(const char *what, const char *path, status_msg_t *err);

#endif
