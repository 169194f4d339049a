#define _GNU_SOURCE
#include "daemon/cluster.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/net.h"
#include "base/parse.h"

/* A sparse map names its indices in text, so without a cap {"1000000000": ...} would make us
 * allocate gigabytes of empty slots. No parameter-server cluster comes near this many tasks. */
#define MAX_TASKS_PER_JOB 65536

static const char *const type_names[CLUSTER_TASK_TYPE_COUNT_] = {
    [CLUSTER_CHIEF] = "chief",
    [CLUSTER_WORKER] = "worker",
    [CLUSTER_PS] = "ps",
    [CLUSTER_EVALUATOR] = "evaluator",
};

/* What the parser learns about each job besides its addresses. */
typedef struct parse_state {
    bool present[CLUSTER_TASK_TYPE_COUNT_];        /* the job appears in `cluster` */
    bool sparse[CLUSTER_TASK_TYPE_COUNT_];         /* given as a map, not a list */
    const char *spelled[CLUSTER_TASK_TYPE_COUNT_]; /* name as written: "master" or "chief" */
} parse_state_t;

const char *cluster_task_type_name(cluster_task_type_t t)
{
    if ((int)t < 0 || t >= CLUSTER_TASK_TYPE_COUNT_)
        return "unknown";
    return type_names[t];
}

status_t cluster_task_type_parse(const char *s, cluster_task_type_t *ret_type)
{
    if (s == NULL)
        return STATUS_INVALID_ARGUMENT;
    /* TF1 called the chief "master"; TFJob and old TF_CONFIGs still use it. */
    if (strcmp(s, "master") == 0) {
        *ret_type = CLUSTER_CHIEF;
        return STATUS_OK;
    }
    for (int t = 0; t < CLUSTER_TASK_TYPE_COUNT_; t++) {
        if (strcmp(s, type_names[t]) == 0) {
            *ret_type = (cluster_task_type_t)t;
            return STATUS_OK;
        }
    }
    return STATUS_INVALID_ARGUMENT;
}

/* Empties a spec that holds nothing yet; no allocation, cannot fail. */
void cluster_spec_init(cluster_spec_t *spec)
{
    memset(spec, 0, sizeof(*spec));
}

/* Frees every address and string of the spec and leaves it empty, ready for reuse. NULL-safe. */
void cluster_spec_done(cluster_spec_t *spec)
{
    if (spec == NULL)
        return;
    for (int t = 0; t < CLUSTER_TASK_TYPE_COUNT_; t++) {
        for (size_t i = 0; i < spec->jobs[t].n; i++)
            free(spec->jobs[t].addrs[i]);
        free(spec->jobs[t].addrs);
    }
    free(spec->environment);
    free(spec->rpc_layer);
    free(spec->other_jobs);
    cluster_spec_init(spec);
}

/* Parses a task index written as text: decimal digits only, as Python's int() would accept them
 * minus the whitespace and sign it tolerates. Returns 0, or EINVAL / ERANGE. */
static int index_from_text(const char *s, int *ret_index)
{
    int64_t v;
    int rc = s[0] == '-' ? EINVAL : parse_int(s, 0, MAX_TASKS_PER_JOB - 1, &v);

    if (rc == 0)
        *ret_index = (int)v;
    return rc;
}

/* Finds the member `key` of a JSON object. cJSON keeps duplicate keys where Python's json keeps
 * the last one, so a repeated key is rejected instead of being resolved differently from TF. */
static status_t get_member(const cJSON *obj, const char *key, const char *path,
                           const cJSON **ret_item, status_msg_t *err)
{
    const cJSON *item, *found = NULL;

    cJSON_ArrayForEach(item, obj)
    {
        if (item->string == NULL || strcmp(item->string, key) != 0)
            continue;
        if (found != NULL)
            return status_fail(err, STATUS_BAD_TF_CONFIG, "TF_CONFIG: key %s%s appears twice", path,
                               key);
        found = item;
    }
    *ret_item = found;
    return STATUS_OK;
}

/* Copies one address of a job into *slot after checking it is a "host:port" string. `label` is
 * the position as the user would write it: "[1]" for lists, "[\"3\"]" for sparse maps. */
static status_t parse_address(const cJSON *item, const char *job, const char *label, char **slot,
                              status_msg_t *err)
{
    if (!cJSON_IsString(item))
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: cluster.%s%s must be a \"host:port\" string", job, label);
    if (!net_hostport_valid(item->valuestring))
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: cluster.%s%s \"%s\" is not a valid host:port address", job,
                           label, item->valuestring);
    *slot = strdup(item->valuestring);
    if (*slot == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "TF_CONFIG: out of memory");
    return STATUS_OK;
}

/* Allocates the address slots of a job; they belong to the spec from here on, so a failure later
 * in parsing is cleaned up by cluster_spec_done(). */
static status_t alloc_job(cluster_job_t *job, size_t n, status_msg_t *err)
{
    if (n == 0)
        return STATUS_OK;
    job->addrs = calloc(n, sizeof(*job->addrs));
    if (job->addrs == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "TF_CONFIG: out of memory");
    job->n = n;
    return STATUS_OK;
}

static status_t parse_job_list(const cJSON *list, const char *name, cluster_job_t *job,
                               status_msg_t *err)
{
    int n = cJSON_GetArraySize(list);
    const cJSON *item = NULL;
    char label[32];
    size_t i = 0;

    if (n > MAX_TASKS_PER_JOB)
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: cluster.%s has %d tasks; at most %d are supported", name, n,
                           MAX_TASKS_PER_JOB);
    STATUS_CHECK(alloc_job(job, (size_t)n, err));
    cJSON_ArrayForEach(item, list)
    {
        snprintf(label, sizeof(label), "[%zu]", i);
        STATUS_CHECK(parse_address(item, name, label, &job->addrs[i], err));
        i++;
    }
    return STATUS_OK;
}

/* The sparse form {"<index>": "host:port"} that TFJob uses with enableDynamicWorker: each task
 * sees only itself among the workers, so indices may have holes. */
static status_t parse_job_map(const cJSON *map, const char *name, cluster_job_t *job,
                              status_msg_t *err)
{
    const cJSON *item = NULL;
    int max_index = -1, index;
    char label[64];

    cJSON_ArrayForEach(item, map)
    {
        int rc = index_from_text(item->string, &index);
        if (rc == ERANGE)
            return status_fail(err, STATUS_BAD_TF_CONFIG,
                               "TF_CONFIG: cluster.%s index \"%s\" is too large (at most %d)", name,
                               item->string, MAX_TASKS_PER_JOB - 1);
        if (rc != 0)
            return status_fail(err, STATUS_BAD_TF_CONFIG,
                               "TF_CONFIG: cluster.%s key \"%s\" is not a task index (expected a "
                               "whole number such as \"0\")",
                               name, item->string);
        if (index > max_index)
            max_index = index;
    }
    STATUS_CHECK(alloc_job(job, (size_t)(max_index + 1), err));
    cJSON_ArrayForEach(item, map)
    {
        (void)index_from_text(item->string, &index);
        if (job->addrs[index] != NULL)
            return status_fail(err, STATUS_BAD_TF_CONFIG,
                               "TF_CONFIG: cluster.%s names task index %d twice", name, index);
        snprintf(label, sizeof(label), "[\"%.40s\"]", item->string);
        STATUS_CHECK(parse_address(item, name, label, &job->addrs[index], err));
    }
    return STATUS_OK;
}

static status_t parse_job(const cJSON *item, cluster_spec_t *spec, parse_state_t *st,
                          status_msg_t *err)
{
    const char *name = item->string;
    cluster_task_type_t type = CLUSTER_CHIEF;

    if (cluster_task_type_parse(name, &type) != STATUS_OK) {
        /* a job of another name: TensorFlow accepts any; its addresses are checked, then
         * only its name is kept */
        cluster_job_t other = {0};
        status_t rc = cJSON_IsArray(item)    ? parse_job_list(item, name, &other, err)
                      : cJSON_IsObject(item) ? parse_job_map(item, name, &other, err)
                                             : status_fail(err, STATUS_BAD_TF_CONFIG,
                                                           "TF_CONFIG: cluster.%s must be a list "
                                                           "of \"host:port\" strings or a map "
                                                           "from task index to \"host:port\"",
                                                           name);
        for (size_t i = 0; i < other.n; i++)
            free(other.addrs[i]);
        free(other.addrs);
        if (rc != STATUS_OK)
            return rc;
        char *names = NULL;
        if (asprintf(&names, "%s%s%s", spec->other_jobs ? spec->other_jobs : "",
                     spec->other_jobs ? ", " : "", name) < 0)
            return status_fail(err, STATUS_NO_MEMORY, "out of memory");
        free(spec->other_jobs);
        spec->other_jobs = names;
        return STATUS_OK;
    }
    if (st->present[type] && strcmp(st->spelled[type], name) != 0)
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: cluster has both chief and master, which name the same job; "
                           "keep only one");
    if (st->present[type])
        return status_fail(err, STATUS_BAD_TF_CONFIG, "TF_CONFIG: cluster.%s appears twice", name);
    st->present[type] = true;
    st->spelled[type] = name;
    if (cJSON_IsArray(item))
        return parse_job_list(item, name, &spec->jobs[type], err);
    if (cJSON_IsObject(item)) {
        st->sparse[type] = true;
        return parse_job_map(item, name, &spec->jobs[type], err);
    }
    return status_fail(err, STATUS_BAD_TF_CONFIG,
                       "TF_CONFIG: cluster.%s must be a list of \"host:port\" strings or a map "
                       "from task index to \"host:port\"",
                       name);
}

static size_t job_count(const cluster_job_t *job)
{
    size_t n = 0;
    for (size_t i = 0; i < job->n; i++)
        n += job->addrs[i] != NULL;
    return n;
}

static status_t parse_cluster(const cJSON *cluster, cluster_spec_t *spec, parse_state_t *st,
                              status_msg_t *err)
{
    const cJSON *item = NULL;
    static const cluster_task_type_t singletons[] = {CLUSTER_CHIEF, CLUSTER_EVALUATOR};

    if (!cJSON_IsObject(cluster))
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: cluster must be an object mapping job names to address "
                           "lists");
    cJSON_ArrayForEach(item, cluster)
    {
        STATUS_CHECK(parse_job(item, spec, st, err));
    }
    /* TF's _validate_cluster_spec: a second chief or evaluator would have no defined role. */
    for (size_t k = 0; k < sizeof(singletons) / sizeof(singletons[0]); k++) {
        cluster_task_type_t t = singletons[k];
        size_t n = job_count(&spec->jobs[t]);
        if (n > 1)
            return status_fail(err, STATUS_BAD_TF_CONFIG,
                               "TF_CONFIG: cluster.%s has %zu tasks, but there can be at most "
                               "one %s",
                               st->spelled[t], n, type_names[t]);
    }
    return STATUS_OK;
}

static status_t parse_task_index(const cJSON *v, int *ret_index, status_msg_t *err)
{
    if (v == NULL)
        return status_fail(err, STATUS_BAD_TF_CONFIG, "TF_CONFIG: task.index is missing");
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d < 0)
            return status_fail(err, STATUS_BAD_TF_CONFIG, "TF_CONFIG: task.index %g is negative",
                               d);
        if (d >= MAX_TASKS_PER_JOB)
            return status_fail(err, STATUS_BAD_TF_CONFIG,
                               "TF_CONFIG: task.index %g is too large (at most %d)", d,
                               MAX_TASKS_PER_JOB - 1);
        /* Python's int() accepts 1.0 but TF would truncate 1.5 silently; we refuse it. */
        if (d != (double)(int)d)
            return status_fail(err, STATUS_BAD_TF_CONFIG,
                               "TF_CONFIG: task.index %g is not a whole number", d);
        *ret_index = (int)d;
        return STATUS_OK;
    }
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        int rc = index_from_text(s, ret_index);
        if (rc == 0)
            return STATUS_OK;
        if (s[0] == '-' && index_from_text(s + 1, ret_index) != EINVAL)
            return status_fail(err, STATUS_BAD_TF_CONFIG,
                               "TF_CONFIG: task.index \"%s\" is negative", s);
        if (rc == ERANGE)
            return status_fail(err, STATUS_BAD_TF_CONFIG,
                               "TF_CONFIG: task.index \"%s\" is too large (at most %d)", s,
                               MAX_TASKS_PER_JOB - 1);
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: task.index \"%s\" is not a whole number", s);
    }
    return status_fail(err, STATUS_BAD_TF_CONFIG,
                       "TF_CONFIG: task.index must be a number or a numeric string, not %s",
                       cJSON_IsBool(v)   ? "a boolean"
                       : cJSON_IsNull(v) ? "null"
                                         : "a list or object");
}

/* Checks that the task is one of the tasks the cluster lists, as TF's _validate_cluster_spec. */
static status_t check_task_in_cluster(const cluster_spec_t *spec, const parse_state_t *st,
                                      bool have_cluster, const char *type_text, status_msg_t *err)
{
    cluster_task_type_t t = spec->task_type;
    const cluster_job_t *job = &spec->jobs[t];
    size_t i = (size_t)spec->task_index;

    /* Managed platforms leave the evaluator out of `cluster`: it is not part of training. */
    if (t == CLUSTER_EVALUATOR && !st->present[t])
        return STATUS_OK;
    if (!have_cluster)
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: task.type is %s but there is no cluster; only an evaluator "
                           "may omit it",
                           type_text);
    if (!st->present[t])
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: task.type %s is not a job in cluster", type_text);
    if (st->sparse[t] && (i >= job->n || job->addrs[i] == NULL))
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: task.index %d is not in cluster.%s, a map with no key "
                           "\"%d\"",
                           spec->task_index, st->spelled[t], spec->task_index);
    if (i >= job->n)
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: task.index %d is out of range: cluster.%s has %zu task%s",
                           spec->task_index, st->spelled[t], job->n, job->n == 1 ? "" : "s");
    return STATUS_OK;
}

static status_t parse_task(const cJSON *task, cluster_spec_t *spec, const parse_state_t *st,
                           bool have_cluster, status_msg_t *err)
{
    const cJSON *type = NULL, *index = NULL;

    if (!cJSON_IsObject(task))
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: task must be an object with type and index");
    STATUS_CHECK(get_member(task, "type", "task.", &type, err));
    STATUS_CHECK(get_member(task, "index", "task.", &index, err));
    if (type == NULL)
        return status_fail(err, STATUS_BAD_TF_CONFIG, "TF_CONFIG: task.type is missing");
    if (!cJSON_IsString(type))
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: task.type must be a string such as \"worker\"");
    if (cluster_task_type_parse(type->valuestring, &spec->task_type) != STATUS_OK)
        return status_fail(err, STATUS_BAD_TF_CONFIG,
                           "TF_CONFIG: task.type \"%s\" is not one of chief, master, worker, ps, "
                           "evaluator",
                           type->valuestring);
    STATUS_CHECK(parse_task_index(index, &spec->task_index, err));
    spec->has_task = true;
    return check_task_in_cluster(spec, st, have_cluster, type->valuestring, err);
}

/* environment and rpc_layer: optional strings, kept for the caller. */
static status_t parse_optional_string(const cJSON *root, const char *key, char **ret,
                                      status_msg_t *err)
{
    const cJSON *item = NULL;

    STATUS_CHECK(get_member(root, key, "", &item, err));
    if (item == NULL)
        return STATUS_OK;
    if (!cJSON_IsString(item))
        return status_fail(err, STATUS_BAD_TF_CONFIG, "TF_CONFIG: %s must be a string", key);
    *ret = strdup(item->valuestring);
    if (*ret == NULL)
        return status_fail(err, STATUS_NO_MEMORY, "TF_CONFIG: out of memory");
    return STATUS_OK;
}

status_t cluster_spec_parse_tf_config(const char *json, cluster_spec_t *ret_spec, status_msg_t *err)
{
    parse_state_t st = {0};
    const cJSON *cluster = NULL, *task = NULL;
    const char *end = NULL;
    cJSON *root = NULL;
    status_t rc;

    cluster_spec_init(ret_spec);
    if (json == NULL)
        return status_fail(err, STATUS_INVALID_ARGUMENT, "TF_CONFIG: no JSON text given");
    root = cJSON_ParseWithOpts(json, &end, 1);
    if (root == NULL) {
        size_t off = end != NULL && end >= json ? (size_t)(end - json) : 0;
        rc = status_fail(err, STATUS_BAD_TF_CONFIG,
                         "TF_CONFIG is not valid JSON: error at offset %zu, near \"%.24s\"", off,
                         json + off);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        rc = status_fail(err, STATUS_BAD_TF_CONFIG,
                         "TF_CONFIG must be a JSON object with cluster and task keys");
        goto out;
    }
    /* Other top-level keys (session_master, anything a platform adds) are ignored, as in TF. */
    STATUS_CHECK_GOTO(get_member(root, "cluster", "", &cluster, err), rc, out);
    STATUS_CHECK_GOTO(get_member(root, "task", "", &task, err), rc, out);
    if (cluster != NULL)
        STATUS_CHECK_GOTO(parse_cluster(cluster, ret_spec, &st, err), rc, out);
    if (task != NULL)
        STATUS_CHECK_GOTO(parse_task(task, ret_spec, &st, cluster != NULL, err), rc, out);
    STATUS_CHECK_GOTO(parse_optional_string(root, "environment", &ret_spec->environment, err), rc,
                      out);
    STATUS_CHECK_GOTO(parse_optional_string(root, "rpc_layer", &ret_spec->rpc_layer, err), rc, out);
    rc = STATUS_OK;
out:
    cJSON_Delete(root);
    if (rc != STATUS_OK)
        cluster_spec_done(ret_spec);
    return rc;
}

status_t cluster_spec_from_env(cluster_spec_t *ret_spec, bool *ret_present, status_msg_t *err)
{
    const char *text = getenv("TF_CONFIG");

    if (text == NULL || text[0] == '\0') {
        cluster_spec_init(ret_spec);
        *ret_present = false;
        return STATUS_OK;
    }
    STATUS_CHECK(cluster_spec_parse_tf_config(text, ret_spec, err));
    *ret_present = true;
    return STATUS_OK;
}

bool cluster_spec_chief(const cluster_spec_t *spec, cluster_task_type_t *ret_type, int *ret_index)
{
    const cluster_job_t *chief = &spec->jobs[CLUSTER_CHIEF];

    /* There is at most one chief; in the sparse form it may not sit at index 0. */
    for (size_t i = 0; i < chief->n; i++) {
        if (chief->addrs[i] != NULL) {
            *ret_type = CLUSTER_CHIEF;
            *ret_index = (int)i;
            return true;
        }
    }
    if (cluster_spec_address(spec, CLUSTER_WORKER, 0) != NULL) {
        *ret_type = CLUSTER_WORKER;
        *ret_index = 0;
        return true;
    }
    return false;
}

const char *cluster_spec_address(const cluster_spec_t *spec, cluster_task_type_t type, int index)
{
    if ((int)type < 0 || type >= CLUSTER_TASK_TYPE_COUNT_ || index < 0 ||
        (size_t)index >= spec->jobs[type].n)
        return NULL;
    return spec->jobs[type].addrs[index];
}

size_t cluster_spec_task_count(const cluster_spec_t *spec)
{
    size_t n = 0;
    for (int t = 0; t < CLUSTER_TASK_TYPE_COUNT_; t++)
        n += job_count(&spec->jobs[t]);
    return n;
}
