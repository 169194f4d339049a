/* tessera export JOB.yaml --out DIR: the newest checkpoint of a job (or the one named) as
 * DIR/model.keras, which keras.saving.load_model opens, and DIR/model.safetensors. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cli.h"
#include "daemon/config.h"
#include "export.h"
#include "job/job.h"
#include "model.h"

typedef struct export_opts {
    char *out, *checkpoint;
} export_opts_t;

static const config_option_t export_options[] = {
    {"out", CONFIG_STRING, offsetof(export_opts_t, out), NULL, 0, 0,
     "The directory to write model.keras and model.safetensors into (made when missing)."},
    {"checkpoint", CONFIG_STRING, offsetof(export_opts_t, checkpoint), NULL, 0, 0,
     "The checkpoint to export: a ckpt-<step> directory, or a directory of them (its newest). "
     "Default: the newest in the job's checkpoint.dir."},
};

static const config_table_t export_table = {
    .program = "tessera export JOB.yaml --out DIR",
    .summary = "Writes a job's trained model in Keras 3's own format (model.keras: the model, "
               "its compile settings, weights and optimizer state) and as model.safetensors "
               "(the variables).",
    .options = export_options,
    .n_options = sizeof(export_options) / sizeof(export_options[0]),
};

/* The model and its slot arrays, loaded from the checkpoint at path. */
static status_t load(const job_t *job, const char *path, const ckpt_manifest_t *m,
                     model_t **ret_model, float ***ret_slots, status_msg_t *err)
{
    size_t n_slots = optimizer_slot_count(&job->optimizer);
    float **slots;

    STATUS_CHECK(ckpt_check_optimizer(path, m, optimizer_kind_name(job->optimizer.kind),
                                      optimizer_slot_count(&job->optimizer), err));
    STATUS_CHECK(
        model_new(&job->model, job->loss, job->from_logits, 1, job->seed, 0, ret_model, err));
    *ret_slots = slots = calloc(model_param_count(*ret_model) + 1, sizeof(*slots));
    if (slots == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < model_param_count(*ret_model); i++)
        if ((slots[i] = calloc(n_slots * model_param(*ret_model, i)->n + 1, sizeof(float))) == NULL)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory for optimizer slots");
    return ckpt_load_model(*ret_model, slots, path, m, err);
}

static status_t run(const job_t *job, const export_opts_t *o, status_msg_t *err)
{
    const char *where = o->checkpoint ? o->checkpoint : job->checkpoint_dir;
    ckpt_manifest_t m = {0};
    char *path = NULL;
    model_t *model = NULL;
    float **slots = NULL;
    status_t rc;

    if (where == NULL)
        return status_fail(err, STATUS_INVALID_USAGE,
                           "%s has no checkpoint.dir: name the checkpoint with --checkpoint",
                           job->path);
    rc = ckpt_open_any(where, &path, &m, err);
    if (rc == STATUS_OK)
        rc = load(job, path, &m, &model, &slots, err);
    if (rc == STATUS_OK) {
        export_state_t st = {.model = model, .slots = slots, .iterations = m.iterations};
        rc = export_model(job, &st, o->out, err);
    }
    if (rc == STATUS_OK)
        printf("exported %s (step %lld) to %s/model.keras and %s/model.safetensors\n", path,
               (long long)m.step, o->out, o->out);
    for (size_t i = 0; slots != NULL && model != NULL && i < model_param_count(model); i++)
        free(slots[i]);
    free(slots);
    model_free(model);
    ckpt_manifest_free(&m);
    free(path);
    return rc;
}

int cli_export(int argc, char **argv)
{
    export_opts_t o = {0};
    config_action_t action;
    status_msg_t err = {0};
    job_t job;
    const char *path = cli_take_positional(&argc, argv);
    int rc = 2;

    memset(&job, 0, sizeof(job));
    if (config_load(&export_table, &o, argc, argv, &action, &err) != STATUS_OK) {
        fprintf(stderr, "tessera export: %s\n", err.text);
        goto out;
    }
    if (action != CONFIG_RUN) {
        rc = 0;
        goto out;
    }
    if (path == NULL || o.out == NULL) {
        fprintf(stderr, "tessera export: name the job file and --out DIR\n");
        goto out;
    }
    rc = 1;
    if (job_load_file(path, &job, &err) != STATUS_OK || run(&job, &o, &err) != STATUS_OK) {
        fprintf(stderr, "tessera export: %s\n", err.text);
        goto out;
    }
    rc = 0;
out:
    job_done(&job);
    config_done(&export_table, &o);
    return rc;
}
