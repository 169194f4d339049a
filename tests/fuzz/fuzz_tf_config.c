/* Fuzz target: TF_CONFIG (common/daemon/cluster.h, cluster_spec_parse_tf_config). The input is the
 * variable's value; the parser takes a C string, so it is cut at the first NUL. */
#include <stdlib.h>
#include <string.h>

#include "daemon/cluster.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    return 0;
}

/* What a parsed spec promises the daemons and the CLI. */
static void check_spec(const cluster_spec_t *spec)
{
    cluster_task_type_t type;
    size_t count = 0;
    int index;

    for (int t = 0; t < CLUSTER_TASK_TYPE_COUNT_; t++) {
        const cluster_job_t *j = &spec->jobs[t];
        if (j->n > 0 && j->addrs == NULL)
            fuzz_fail("tf_config", "%s: %zu tasks but no addresses",
                      cluster_task_type_name((cluster_task_type_t)t), j->n);
        for (size_t i = 0; i < j->n; i++) {
            const char *a = cluster_spec_address(spec, (cluster_task_type_t)t, (int)i);
            if (a != j->addrs[i])
                fuzz_fail("tf_config", "cluster_spec_address disagrees with the spec");
            count += a != NULL;
        }
    }
    if (count != cluster_spec_task_count(spec))
        fuzz_fail("tf_config", "%zu tasks counted, cluster_spec_task_count says %zu", count,
                  cluster_spec_task_count(spec));
    if (spec->has_task) {
        if ((int)spec->task_type < 0 || spec->task_type >= CLUSTER_TASK_TYPE_COUNT_ ||
            spec->task_index < 0)
            fuzz_fail("tf_config", "task %d:%d out of range", (int)spec->task_type,
                      spec->task_index);
        if (spec->task_type != CLUSTER_EVALUATOR &&
            cluster_spec_address(spec, spec->task_type, spec->task_index) == NULL)
            fuzz_fail("tf_config", "task %s %d has no address",
                      cluster_task_type_name(spec->task_type), spec->task_index);
    }
    if (cluster_spec_chief(spec, &type, &index) && cluster_spec_address(spec, type, index) == NULL)
        fuzz_fail("tf_config", "the chief task has no address");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *json = fuzz_strndup(data, size);
    status_msg_t err = {0};
    cluster_spec_t spec;
    status_t rc;

    rc = cluster_spec_parse_tf_config(json, &spec, &err);
    fuzz_check_error("tf_config", rc, &err);
    if (rc == STATUS_OK)
        check_spec(&spec);
    cluster_spec_done(&spec);
    free(json);
    return 0;
}
