/* What the job parser's test programs share (test_job.c, test_job_files.c): a minimal valid
 * job to append to, and the assertions on job_parse's verdict. */
#ifndef TESSERA_TEST_JOB_CHECK_H
#define TESSERA_TEST_JOB_CHECK_H

#include <check.h>
#include <stdarg.h>
#include <string.h>

#include "job/job.h"

/* A model, loss and data section that make a complete job when appended. */
#define TAIL                                                                                       \
    "loss: mse\n"                                                                                  \
    "data: {batch_size: 8, train: {format: synthetic, examples: 10, shape: [4], classes: 2}}\n"
#define MODEL "model: [{dense: {units: 1}, input_shape: [4]}]\n"

static inline void parse_ok(const char *text, const char *path, job_t *job)
{
    status_msg_t err = {0};
    status_t rc = job_parse(text, strlen(text), path, job, &err);

    ck_assert_msg(rc == STATUS_OK, "%s", err.text);
}

/* Requires job_parse to fail with `status` and a message containing every NULL-terminated
 * fragment, leaving the job empty. */
static inline void assert_fails(const char *text, status_t status, ...)
{
    job_t job;
    status_msg_t err = {0};
    va_list ap;
    const char *want;

    memset(&job, 0x5a, sizeof(job));
    ck_assert_int_eq(job_parse(text, strlen(text), "job.yaml", &job, &err), status);
    ck_assert_int_eq(err.status, status);
    ck_assert_ptr_null(job.name);
    ck_assert_ptr_null(job.model.layers);
    ck_assert_ptr_null(job.data.train.images);
    va_start(ap, status);
    while ((want = va_arg(ap, const char *)) != NULL)
        ck_assert_msg(strstr(err.text, want) != NULL, "message '%s' lacks '%s'", err.text, want);
    va_end(ap);
}

#define ASSERT_BAD(text, ...) assert_fails(text, STATUS_BAD_CONFIG, __VA_ARGS__, NULL)

#endif
