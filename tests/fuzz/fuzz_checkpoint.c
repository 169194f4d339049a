/* Fuzz target: checkpoint manifests (common/files/checkpoint.h), which a resumed job reads from
 * a directory anyone may have written to.
 *
 * Input: the manifest's bytes. A manifest that decodes is encoded again and must decode to the
 * same checkpoint: what Tessera writes, it reads back. */
#include <stdlib.h>
#include <string.h>

#include "files/checkpoint.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

static void check_same(const ckpt_manifest_t *a, const ckpt_manifest_t *b)
{
    if (a->step != b->step || a->iterations != b->iterations || a->n_vars != b->n_vars ||
        a->n_files != b->n_files || a->n_data != b->n_data || a->n_rng != b->n_rng ||
        a->n_slots != b->n_slots || a->job_hash != b->job_hash || a->n_writers != b->n_writers ||
        a->n_metric_sums != b->n_metric_sums || a->n_last_metrics != b->n_last_metrics ||
        a->has_last_epoch != b->has_last_epoch || strcmp(a->optimizer, b->optimizer) != 0 ||
        strcmp(a->job, b->job) != 0)
        fuzz_fail("checkpoint", "a manifest read back differs from the one written");
    for (size_t i = 0; i < a->n_vars; i++) {
        if (strcmp(a->vars[i].name, b->vars[i].name) != 0 || a->vars[i].rank != b->vars[i].rank ||
            a->vars[i].n_parts != b->vars[i].n_parts)
            fuzz_fail("checkpoint", "variable %zu read back differs", i);
        for (size_t k = 0; k < a->vars[i].n_parts; k++)
            if (strcmp(a->vars[i].parts[k].file, b->vars[i].parts[k].file) != 0 ||
                a->vars[i].parts[k].row != b->vars[i].parts[k].row)
                fuzz_fail("checkpoint", "a part of variable %zu read back differs", i);
    }
    for (size_t i = 0; i < a->n_rng; i++)
        if (a->rng[i] != b->rng[i])
            fuzz_fail("checkpoint", "random state %zu read back differs", i);
    for (size_t i = 0; i < a->n_data; i++) {
        if (a->data[i].n_rng != b->data[i].n_rng || a->data[i].batch != b->data[i].batch ||
            a->data[i].epoch != b->data[i].epoch || a->data[i].end != b->data[i].end)
            fuzz_fail("checkpoint", "worker %zu's position read back differs", i);
        for (size_t k = 0; k < a->data[i].n_rng; k++)
            if (a->data[i].rng[k] != b->data[i].rng[k])
                fuzz_fail("checkpoint", "worker %zu's random state %zu read back differs", i, k);
    }
    for (size_t i = 0; i < a->n_writers; i++)
        if (strcmp(a->writers[i].file, b->writers[i].file) != 0 ||
            strcmp(a->writers[i].task, b->writers[i].task) != 0 ||
            strcmp(a->writers[i].address, b->writers[i].address) != 0)
            fuzz_fail("checkpoint", "writer %zu read back differs", i);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = fuzz_copy(data, size);
    ckpt_manifest_t m, again;
    status_msg_t err = {0};
    status_t rc = ckpt_manifest_decode(copy, size, "manifest.json", &m, &err);

    fuzz_check_error("checkpoint", rc, &err);
    if (rc == STATUS_OK) {
        for (size_t i = 0; i < m.n_files; i++)
            if (strchr(m.files[i], '/') != NULL)
                fuzz_fail("checkpoint", "a file name with a '/' accepted: %s", m.files[i]);
        for (size_t i = 0; i < m.n_writers; i++)
            if (strchr(m.writers[i].file, '/') != NULL)
                fuzz_fail("checkpoint", "a writer's file with a '/' accepted: %s",
                          m.writers[i].file);
        pb_buf_t out = {0};
        ckpt_manifest_encode(&m, &out);
        if (!out.failed) {
            status_t again_rc =
                ckpt_manifest_decode((const char *)out.data, out.len, "again", &again, &err);
            if (again_rc != STATUS_OK)
                fuzz_fail("checkpoint", "a manifest written does not read back: %s", err.text);
            check_same(&m, &again);
            ckpt_manifest_free(&again);
        }
        pb_buf_free(&out);
        ckpt_manifest_free(&m);
    }
    free(copy);
    return 0;
}
