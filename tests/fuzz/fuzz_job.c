/* Fuzz target: job files (common/job/job.h, job_parse_with_files), YAML or JSON, with the files a
 * job brings along.
 *
 * Input: the job text, then up to FILES_MAX files, each introduced by "\n#@file PATH\n" and
 * running to the next such line. The job is parsed as "fuzz/job.yaml", so `keras_json: m.json`
 * resolves to "fuzz/m.json": a file given as "#@file fuzz/m.json" is the one it reads. Nothing
 * is read from the disk (fuzz_block_files). Every piece is an exact-size copy, not
 * NUL-terminated, so reads past the end show; an empty file has a NULL data pointer. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "job/job.h"

#define FILE_SEP  "\n#@file "
#define FILES_MAX 4
#define JOB_PATH  "fuzz/job.yaml"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

/* What a parsed job promises its users (the model builder, the runtime). */
static void check_job(const job_t *job)
{
    const job_model_t *m = &job->model;

    if (m->n_layers > 0 && m->layers == NULL)
        fuzz_fail("job", "%zu layers but no layer array", m->n_layers);
    if (m->input_rank < 0 || m->input_rank > JOB_MAX_RANK)
        fuzz_fail("job", "input rank %d", m->input_rank);
    for (size_t i = 0; i < m->n_layers; i++) {
        const job_layer_t *l = &m->layers[i];
        if (memchr(l->name, '\0', sizeof(l->name)) == NULL)
            fuzz_fail("job", "layer %zu: name not NUL-terminated", i);
        if (job_layer_kind_name(l->kind) == NULL)
            fuzz_fail("job", "layer %zu: kind %d has no name", i, (int)l->kind);
        if (l->target_rank < 0 || l->target_rank > JOB_MAX_RANK)
            fuzz_fail("job", "layer %zu: reshape rank %d", i, l->target_rank);
    }
    if (job->epochs <= 0 && job->steps <= 0)
        fuzz_fail("job", "neither epochs nor steps is positive");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_part_t parts[1 + FILES_MAX];
    size_t n = fuzz_split(data, size, FILE_SEP, parts, 1 + FILES_MAX);
    job_file_t files[FILES_MAX];
    char *text = fuzz_copy(parts[0].data, parts[0].len);
    status_msg_t err = {0};
    job_t job;
    status_t rc;

    for (size_t i = 1; i < n; i++) {
        const uint8_t *nl = memchr(parts[i].data, '\n', parts[i].len);
        size_t plen = nl != NULL ? (size_t)(nl - parts[i].data) : parts[i].len;
        size_t dlen = nl != NULL ? parts[i].len - plen - 1 : 0;
        /* An empty file has no data pointer, as an empty protobuf bytes field arrives. */
        files[i - 1] = (job_file_t){
            fuzz_strndup(parts[i].data, plen),
            dlen > 0 ? fuzz_copy(parts[i].data + plen + (nl != NULL), dlen) : NULL, dlen};
    }
    fuzz_block_files(true);
    rc = job_parse_with_files(text, parts[0].len, JOB_PATH, files, n - 1, &job, &err);
    fuzz_block_files(false);
    fuzz_check_error("job", rc, &err);
    if (rc == STATUS_OK)
        check_job(&job);
    job_done(&job);
    for (size_t i = 0; i + 1 < n; i++) {
        free((char *)files[i].path);
        free((char *)files[i].data);
    }
    free(text);
    return 0;
}
