/* Unit tests for common/daemon/cluster.c: the TF_CONFIG parser. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "daemon/cluster.h"

/* Parses json, which must succeed; the spec is the caller's to free. */
static void parse_ok(const char *json, cluster_spec_t *spec)
{
    status_msg_t err = {0};
    status_t rc = cluster_spec_parse_tf_config(json, spec, &err);
    ck_assert_msg(rc == STATUS_OK, "parse failed: %s (json: %s)", err.text, json);
}

/* Parses json, which must fail with BAD_TF_CONFIG and a message containing every given part
 * (NULL-terminated), and checks the spec is left empty. */
static void parse_fails_naming(const char *json, const char *part, ...)
{
    status_msg_t err = {0};
    cluster_spec_t spec;
    status_t rc = cluster_spec_parse_tf_config(json, &spec, &err);
    va_list ap;

    ck_assert_msg(rc == STATUS_BAD_TF_CONFIG, "expected BAD_TF_CONFIG for %s, got %s", json,
                  status_name(rc));
    ck_assert_int_eq(err.status, STATUS_BAD_TF_CONFIG);
    ck_assert_msg(strncmp(err.text, "TF_CONFIG", 9) == 0, "message does not say TF_CONFIG: %s",
                  err.text);
    va_start(ap, part);
    for (const char *p = part; p != NULL; p = va_arg(ap, const char *))
        ck_assert_msg(strstr(err.text, p) != NULL, "message \"%s\" does not contain \"%s\"",
                      err.text, p);
    va_end(ap);
    ck_assert_int_eq(cluster_spec_task_count(&spec), 0);
    ck_assert(!spec.has_task);
    ck_assert_ptr_null(spec.environment);
    cluster_spec_done(&spec);
}

/* tf-semantics.md §7: the TensorFlow guide's parameter-server example. */
START_TEST(tf_guide_ps_example_parses_with_every_address)
{
    cluster_spec_t spec;

    parse_ok("{\"cluster\": {\"chief\": [\"c0:2222\"], \"ps\": [\"ps0:2222\",\"ps1:2222\"],"
             " \"worker\": [\"w0:2222\",\"w1:2222\",\"w2:2222\"]},"
             " \"task\": {\"type\": \"ps\", \"index\": 1}}",
             &spec);
    ck_assert(spec.has_task);
    ck_assert_int_eq(spec.task_type, CLUSTER_PS);
    ck_assert_int_eq(spec.task_index, 1);
    ck_assert_uint_eq(spec.jobs[CLUSTER_CHIEF].n, 1);
    ck_assert_uint_eq(spec.jobs[CLUSTER_PS].n, 2);
    ck_assert_uint_eq(spec.jobs[CLUSTER_WORKER].n, 3);
    ck_assert_uint_eq(spec.jobs[CLUSTER_EVALUATOR].n, 0);
    ck_assert_str_eq(cluster_spec_address(&spec, CLUSTER_CHIEF, 0), "c0:2222");
    ck_assert_str_eq(cluster_spec_address(&spec, CLUSTER_PS, 1), "ps1:2222");
    ck_assert_str_eq(cluster_spec_address(&spec, CLUSTER_WORKER, 2), "w2:2222");
    ck_assert_ptr_null(cluster_spec_address(&spec, CLUSTER_WORKER, 3));
    ck_assert_ptr_null(cluster_spec_address(&spec, CLUSTER_WORKER, -1));
    ck_assert_uint_eq(cluster_spec_task_count(&spec), 6);
    ck_assert_ptr_null(spec.environment);
    ck_assert_ptr_null(spec.rpc_layer);
    cluster_spec_done(&spec);
}
END_TEST

/* formats.md §8, with the placeholder ports made real. */
START_TEST(reference_example_keeps_environment_and_rpc_layer)
{
    cluster_spec_t spec;

    parse_ok("{\"cluster\": {\"chief\": [\"host:2222\"], \"worker\": [\"h0:2222\", \"h1:2222\"],"
             " \"ps\": [\"h2:2222\", \"h3:2222\"], \"evaluator\": [\"h4:2222\"]},"
             " \"task\": {\"type\": \"worker\", \"index\": 1}, \"environment\": \"cloud\","
             " \"rpc_layer\": \"grpc\"}",
             &spec);
    ck_assert_int_eq(spec.task_type, CLUSTER_WORKER);
    ck_assert_int_eq(spec.task_index, 1);
    ck_assert_str_eq(spec.environment, "cloud");
    ck_assert_str_eq(spec.rpc_layer, "grpc");
    ck_assert_str_eq(cluster_spec_address(&spec, CLUSTER_EVALUATOR, 0), "h4:2222");
    ck_assert_uint_eq(cluster_spec_task_count(&spec), 6);
    cluster_spec_done(&spec);
}
END_TEST

/* formats.md §8 verbatim uses "host:port" placeholders, which are not addresses. */
START_TEST(documentation_placeholder_port_is_rejected_naming_the_address)
{
    parse_fails_naming("{\"cluster\": {\"chief\": [\"host:port\"]},"
                       " \"task\": {\"type\": \"chief\", \"index\": 0}}",
                       "cluster.chief[0]", "host:port", NULL);
}
END_TEST

/* formats.md §7: the TF_CONFIG the Kubeflow training operator gives a PS pod. */
START_TEST(kubeflow_tfjob_example_parses)
{
    cluster_spec_t spec;

    parse_ok("{\"cluster\": {\"chief\": [\"mnist-chief-0.ml.svc:2222\"],"
             " \"ps\": [\"mnist-ps-0.ml.svc:2222\", \"mnist-ps-1.ml.svc:2222\"],"
             " \"worker\": [\"mnist-worker-0.ml.svc:2222\", \"mnist-worker-1.ml.svc:2222\"],"
             " \"evaluator\": [\"mnist-evaluator-0.ml.svc:2222\"]},"
             " \"task\": {\"type\": \"ps\", \"index\": 1}, \"environment\": \"cloud\"}",
             &spec);
    ck_assert_int_eq(spec.task_type, CLUSTER_PS);
    ck_assert_int_eq(spec.task_index, 1);
    ck_assert_str_eq(cluster_spec_address(&spec, CLUSTER_PS, 1), "mnist-ps-1.ml.svc:2222");
    ck_assert_str_eq(spec.environment, "cloud");
    cluster_spec_done(&spec);
}
END_TEST

/* formats.md §7: with enableDynamicWorker, cluster.worker is a sparse map holding only the
 * pod's own worker. */
START_TEST(kubeflow_dynamic_worker_sparse_map_keeps_holes)
{
    cluster_spec_t spec;

    parse_ok("{\"cluster\": {\"chief\": [\"mnist-chief-0.ml.svc:2222\"],"
             " \"ps\": [\"mnist-ps-0.ml.svc:2222\", \"mnist-ps-1.ml.svc:2222\"],"
             " \"worker\": {\"3\": \"mnist-worker-3.ml.svc:2222\"}},"
             " \"task\": {\"type\": \"worker\", \"index\": 3}, \"environment\": \"cloud\"}",
             &spec);
    ck_assert_int_eq(spec.task_type, CLUSTER_WORKER);
    ck_assert_int_eq(spec.task_index, 3);
    ck_assert_uint_eq(spec.jobs[CLUSTER_WORKER].n, 4);
    ck_assert_ptr_null(cluster_spec_address(&spec, CLUSTER_WORKER, 0));
    ck_assert_ptr_null(cluster_spec_address(&spec, CLUSTER_WORKER, 2));
    ck_assert_str_eq(cluster_spec_address(&spec, CLUSTER_WORKER, 3), "mnist-worker-3.ml.svc:2222");
    ck_assert_uint_eq(cluster_spec_task_count(&spec), 4);
    cluster_spec_done(&spec);
}
END_TEST

START_TEST(sparse_map_task_index_must_be_a_key_of_the_map)
{
    parse_fails_naming("{\"cluster\": {\"worker\": {\"3\": \"w3:2222\", \"0\": \"w0:2222\"}},"
                       " \"task\": {\"type\": \"worker\", \"index\": 1}}",
                       "task.index 1", "cluster.worker", NULL);
    parse_fails_naming("{\"cluster\": {\"worker\": {\"3\": \"w3:2222\"}},"
                       " \"task\": {\"type\": \"worker\", \"index\": 7}}",
                       "task.index 7", "cluster.worker", NULL);
}
END_TEST

START_TEST(sparse_map_rejects_bad_and_repeated_indices)
{
    parse_fails_naming("{\"cluster\": {\"worker\": {\"one\": \"w1:2222\"}}}", "cluster.worker",
                       "\"one\"", NULL);
    parse_fails_naming("{\"cluster\": {\"worker\": {\"-1\": \"w1:2222\"}}}", "cluster.worker",
                       "\"-1\"", NULL);
    parse_fails_naming("{\"cluster\": {\"worker\": {\"1\": \"a:1\", \"01\": \"b:2\"}}}",
                       "cluster.worker", "index 1 twice", NULL);
    parse_fails_naming("{\"cluster\": {\"worker\": {\"1000000000\": \"a:1\"}}}", "cluster.worker",
                       "too large", NULL);
    parse_fails_naming("{\"cluster\": {\"worker\": {\"2\": 7}}}", "cluster.worker[\"2\"]", NULL);
}
END_TEST

START_TEST(master_means_chief)
{
    cluster_spec_t spec;
    cluster_task_type_t type;
    int index;

    parse_ok("{\"cluster\": {\"master\": [\"m0:2222\"], \"worker\": [\"w0:2222\"]},"
             " \"task\": {\"type\": \"master\", \"index\": 0}}",
             &spec);
    ck_assert_int_eq(spec.task_type, CLUSTER_CHIEF);
    ck_assert_str_eq(cluster_spec_address(&spec, CLUSTER_CHIEF, 0), "m0:2222");
    ck_assert(cluster_spec_chief(&spec, &type, &index));
    ck_assert_int_eq(type, CLUSTER_CHIEF);
    ck_assert_int_eq(index, 0);
    cluster_spec_done(&spec);
}
END_TEST

START_TEST(task_index_may_be_a_numeric_string)
{
    cluster_spec_t spec;

    parse_ok("{\"cluster\": {\"worker\": [\"w0:1\", \"w1:1\"]},"
             " \"task\": {\"type\": \"worker\", \"index\": \"1\"}}",
             &spec);
    ck_assert_int_eq(spec.task_index, 1);
    cluster_spec_done(&spec);
}
END_TEST

START_TEST(task_index_written_as_whole_float_is_accepted)
{
    cluster_spec_t spec;

    parse_ok("{\"cluster\": {\"worker\": [\"w0:1\", \"w1:1\"]},"
             " \"task\": {\"type\": \"worker\", \"index\": 1.0}}",
             &spec);
    ck_assert_int_eq(spec.task_index, 1);
    cluster_spec_done(&spec);
}
END_TEST

START_TEST(evaluator_may_be_missing_from_cluster)
{
    cluster_spec_t spec;

    parse_ok("{\"cluster\": {\"chief\": [\"c0:2222\"], \"worker\": [\"w0:2222\"]},"
             " \"task\": {\"type\": \"evaluator\", \"index\": 0}}",
             &spec);
    ck_assert(spec.has_task);
    ck_assert_int_eq(spec.task_type, CLUSTER_EVALUATOR);
    ck_assert_ptr_null(cluster_spec_address(&spec, CLUSTER_EVALUATOR, 0));
    cluster_spec_done(&spec);
}
END_TEST

START_TEST(evaluator_may_come_without_any_cluster)
{
    cluster_spec_t spec;

    parse_ok("{\"task\": {\"type\": \"evaluator\", \"index\": 0}}", &spec);
    ck_assert(spec.has_task);
    ck_assert_int_eq(spec.task_type, CLUSTER_EVALUATOR);
    ck_assert_uint_eq(cluster_spec_task_count(&spec), 0);
    cluster_spec_done(&spec);
}
END_TEST

START_TEST(only_an_evaluator_may_omit_the_cluster)
{
    parse_fails_naming("{\"task\": {\"type\": \"worker\", \"index\": 0}}", "worker", "cluster",
                       NULL);
}
END_TEST

START_TEST(evaluator_listed_in_cluster_is_range_checked)
{
    parse_fails_naming("{\"cluster\": {\"evaluator\": [\"e0:2222\"]},"
                       " \"task\": {\"type\": \"evaluator\", \"index\": 1}}",
                       "task.index 1 is out of range", "cluster.evaluator has 1 task", NULL);
}
END_TEST

START_TEST(invalid_json_is_rejected)
{
    parse_fails_naming("{\"cluster\": {\"worker\": [\"w0:1\",]}", "JSON", NULL);
    parse_fails_naming("not json", "JSON", NULL);
    parse_fails_naming("{} trailing", "JSON", NULL);
    parse_fails_naming("", "JSON", NULL);
}
END_TEST

START_TEST(top_level_must_be_an_object)
{
    parse_fails_naming("[\"worker\"]", "object", NULL);
}
END_TEST

START_TEST(index_out_of_range_says_how_many_tasks_the_job_has)
{
    status_msg_t err = {0};
    cluster_spec_t spec;

    ck_assert_int_eq(
        cluster_spec_parse_tf_config("{\"cluster\": {\"worker\": [\"w0:1\", \"w1:1\"]},"
                                     " \"task\": {\"type\": \"worker\", \"index\": 3}}",
                                     &spec, &err),
        STATUS_BAD_TF_CONFIG);
    ck_assert_str_eq(err.text,
                     "TF_CONFIG: task.index 3 is out of range: cluster.worker has 2 tasks");
    cluster_spec_done(&spec);
}
END_TEST

START_TEST(two_chiefs_are_rejected)
{
    parse_fails_naming("{\"cluster\": {\"chief\": [\"c0:1\", \"c1:1\"]},"
                       " \"task\": {\"type\": \"chief\", \"index\": 0}}",
                       "cluster.chief", "at most one chief", NULL);
    parse_fails_naming("{\"cluster\": {\"master\": [\"c0:1\", \"c1:1\"]}}", "cluster.master",
                       "at most one chief", NULL);
}
END_TEST

START_TEST(two_evaluators_are_rejected)
{
    parse_fails_naming("{\"cluster\": {\"evaluator\": [\"e0:1\", \"e1:1\"]}}", "cluster.evaluator",
                       "at most one evaluator", NULL);
}
END_TEST

START_TEST(chief_and_master_together_are_rejected)
{
    parse_fails_naming("{\"cluster\": {\"chief\": [\"c0:1\"], \"master\": [\"m0:1\"]}}", "chief",
                       "master", NULL);
    parse_fails_naming("{\"cluster\": {\"master\": [\"m0:1\"], \"chief\": [\"c0:1\"]}}", "chief",
                       "master", NULL);
}
END_TEST

START_TEST(repeated_keys_are_rejected)
{
    parse_fails_naming("{\"cluster\": {\"worker\": [\"a:1\"], \"worker\": [\"b:1\"]}}",
                       "cluster.worker", "twice", NULL);
    parse_fails_naming("{\"task\": {\"type\": \"evaluator\", \"index\": 0}, \"task\": {}}", "task",
                       "twice", NULL);
    parse_fails_naming("{\"task\": {\"type\": \"evaluator\", \"index\": 0, \"index\": 1}}",
                       "task.index", "twice", NULL);
}
END_TEST

START_TEST(cluster_must_be_an_object)
{
    parse_fails_naming("{\"cluster\": [\"w0:1\"]}", "cluster", "object", NULL);
    parse_fails_naming("{\"cluster\": \"w0:1\"}", "cluster", "object", NULL);
}
END_TEST

START_TEST(job_must_be_a_list_or_a_map)
{
    parse_fails_naming("{\"cluster\": {\"ps\": \"ps0:1\"}}", "cluster.ps", NULL);
}
END_TEST

START_TEST(addresses_must_be_strings)
{
    parse_fails_naming("{\"cluster\": {\"worker\": [\"w0:1\", 2222]}}", "cluster.worker[1]",
                       "string", NULL);
    parse_fails_naming("{\"cluster\": {\"ps\": [null]}}", "cluster.ps[0]", NULL);
}
END_TEST

START_TEST(addresses_must_be_host_and_port)
{
    parse_fails_naming("{\"cluster\": {\"worker\": [\"w0:1\", \"w1\"]}}", "cluster.worker[1]",
                       "\"w1\"", NULL);
    parse_fails_naming("{\"cluster\": {\"worker\": [\"w0:99999\"]}}", "w0:99999", NULL);
}
END_TEST

static const struct {
    const char *index;
    const char *culprit;
} bad_indices[] = {
    {"true", "boolean"}, {"false", "boolean"},   {"1.5", "1.5"},
    {"\"abc\"", "abc"},  {"\"1.0\"", "1.0"},     {"\"\"", "not a whole number"},
    {"-1", "negative"},  {"\"-2\"", "negative"}, {"null", "null"},
    {"[0]", "a list"},   {"70000", "too large"}, {"\" 1\"", "not a whole number"},
};

START_TEST(task_index_must_be_a_whole_non_negative_number)
{
    char json[256];

    snprintf(json, sizeof(json),
             "{\"cluster\": {\"worker\": [\"w0:1\", \"w1:1\"]},"
             " \"task\": {\"type\": \"worker\", \"index\": %s}}",
             bad_indices[_i].index);
    parse_fails_naming(json, "task.index", bad_indices[_i].culprit, NULL);
}
END_TEST

START_TEST(task_index_is_required)
{
    parse_fails_naming("{\"cluster\": {\"worker\": [\"w0:1\"]}, \"task\": {\"type\": \"worker\"}}",
                       "task.index", "missing", NULL);
}
END_TEST

START_TEST(task_type_is_required_and_known)
{
    parse_fails_naming("{\"cluster\": {\"worker\": [\"w0:1\"]}, \"task\": {\"index\": 0}}",
                       "task.type", "missing", NULL);
    parse_fails_naming("{\"cluster\": {\"worker\": [\"w0:1\"]}, \"task\": {\"type\": 1, "
                       "\"index\": 0}}",
                       "task.type", NULL);
    parse_fails_naming("{\"cluster\": {\"worker\": [\"w0:1\"]}, \"task\": {\"type\": "
                       "\"Worker\", \"index\": 0}}",
                       "task.type", "Worker", NULL);
    parse_fails_naming("{\"cluster\": {\"worker\": [\"w0:1\"]}, \"task\": \"worker\"}", "task",
                       NULL);
}
END_TEST

/* TF_CONFIG exactly as Kubeflow's TFJob operator (v1.9.0) writes it: per-pod headless Services
 * <job>-<type>-<i>.<namespace>.svc, "environment": "cloud"; without a Chief replica worker 0 is
 * the chief; with enableDynamicWorker, cluster.worker is a sparse map of the pod's own entry. */
START_TEST(tf_config_as_the_tfjob_operator_writes_it)
{
    cluster_spec_t spec;
    cluster_task_type_t type;
    int index;

    parse_ok("{\"cluster\":{\"chief\":[\"mnist-chief-0.kubeflow.svc:2222\"],\"ps\":[\"mnist-ps-0."
             "kubeflow.svc:2222\",\"mnist-ps-1.kubeflow.svc:2222\"],\"worker\":[\"mnist-worker-0."
             "kubeflow.svc:2222\",\"mnist-worker-1.kubeflow.svc:2222\"]},\"task\":{\"type\":"
             "\"ps\",\"index\":1},\"environment\":\"cloud\"}",
             &spec);
    ck_assert_int_eq(spec.task_type, CLUSTER_PS);
    ck_assert_int_eq(spec.task_index, 1);
    ck_assert_str_eq(cluster_spec_address(&spec, CLUSTER_PS, 1), "mnist-ps-1.kubeflow.svc:2222");
    ck_assert(cluster_spec_chief(&spec, &type, &index) && type == CLUSTER_CHIEF && index == 0);
    cluster_spec_done(&spec);
    /* no Chief replica: worker 0 leads */
    parse_ok("{\"cluster\":{\"ps\":[\"dist-ps-0.default.svc:2222\"],\"worker\":[\"dist-worker-0."
             "default.svc:2222\",\"dist-worker-1.default.svc:2222\"]},\"task\":{\"type\":"
             "\"worker\",\"index\":0},\"environment\":\"cloud\"}",
             &spec);
    ck_assert(cluster_spec_chief(&spec, &type, &index) && type == CLUSTER_WORKER && index == 0);
    cluster_spec_done(&spec);
    /* enableDynamicWorker: the pod's own worker entry, every PS; a custom cluster domain */
    parse_ok("{\"cluster\":{\"ps\":[\"dyn-ps-0.ns.svc.example.org:2222\"],\"worker\":{\"3\":"
             "\"dyn-worker-3.ns.svc.example.org:2222\"}},\"task\":{\"type\":\"worker\","
             "\"index\":3},\"environment\":\"cloud\"}",
             &spec);
    ck_assert_int_eq(spec.task_index, 3);
    ck_assert_str_eq(cluster_spec_address(&spec, CLUSTER_WORKER, 3),
                     "dyn-worker-3.ns.svc.example.org:2222");
    cluster_spec_done(&spec);
}
END_TEST

/* TensorFlow takes jobs of any name (a Kubeflow TFJob may add some): they are checked like the
 * others and then only named, for the daemon's warning. */
START_TEST(jobs_of_other_names_are_checked_and_set_aside)
{
    cluster_spec_t spec;

    parse_ok("{\"cluster\": {\"worker\": [\"w0:1\"], \"trainer\": [\"t0:1\", \"t1:1\"], "
             "\"sidecar\": {\"3\": \"s3:1\"}}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
             &spec);
    ck_assert_str_eq(spec.other_jobs, "trainer, sidecar");
    ck_assert_uint_eq(spec.jobs[CLUSTER_WORKER].n, 1);
    cluster_spec_done(&spec);
    parse_fails_naming("{\"cluster\": {\"trainer\": [\"no port\"]}}", "cluster.trainer", NULL);
    parse_fails_naming("{\"cluster\": {\"trainer\": 7}}", "cluster.trainer", NULL);
    /* a task of such a job has nothing to run here */
    parse_fails_naming("{\"cluster\": {\"trainer\": [\"t0:1\"]}, \"task\": {\"type\": "
                       "\"trainer\", \"index\": 0}}",
                       "task.type \"trainer\"", NULL);
}
END_TEST

START_TEST(task_type_must_be_a_job_in_the_cluster)
{
    parse_fails_naming("{\"cluster\": {\"worker\": [\"w0:1\"]}, \"task\": {\"type\": \"ps\", "
                       "\"index\": 0}}",
                       "task.type ps", "cluster", NULL);
    parse_fails_naming("{\"cluster\": {\"worker\": []}, \"task\": {\"type\": \"worker\", "
                       "\"index\": 0}}",
                       "task.index 0", "cluster.worker has 0 tasks", NULL);
}
END_TEST

START_TEST(unknown_top_level_keys_are_ignored)
{
    cluster_spec_t spec;

    parse_ok("{\"cluster\": {\"worker\": [\"w0:1\"]}, \"task\": {\"type\": \"worker\","
             " \"index\": 0, \"trial\": \"7\"}, \"session_master\": \"grpc://w0:1\","
             " \"job\": {\"name\": \"x\"}}",
             &spec);
    ck_assert_int_eq(spec.task_type, CLUSTER_WORKER);
    cluster_spec_done(&spec);
}
END_TEST

START_TEST(environment_must_be_a_string)
{
    parse_fails_naming("{\"environment\": 1}", "environment", NULL);
    parse_fails_naming("{\"rpc_layer\": false}", "rpc_layer", NULL);
}
END_TEST

START_TEST(empty_object_is_a_spec_without_task)
{
    cluster_spec_t spec;
    cluster_task_type_t type;
    int index;

    parse_ok("{}", &spec);
    ck_assert(!spec.has_task);
    ck_assert_uint_eq(cluster_spec_task_count(&spec), 0);
    ck_assert(!cluster_spec_chief(&spec, &type, &index));
    cluster_spec_done(&spec);
}
END_TEST

START_TEST(worker_zero_is_chief_when_there_is_no_chief)
{
    cluster_spec_t spec;
    cluster_task_type_t type = CLUSTER_PS;
    int index = -1;

    parse_ok("{\"cluster\": {\"worker\": [\"w0:1\", \"w1:1\"], \"ps\": [\"p:1\"]}}", &spec);
    ck_assert(cluster_spec_chief(&spec, &type, &index));
    ck_assert_int_eq(type, CLUSTER_WORKER);
    ck_assert_int_eq(index, 0);
    cluster_spec_done(&spec);

    parse_ok("{\"cluster\": {\"ps\": [\"p:1\"]}}", &spec);
    ck_assert(!cluster_spec_chief(&spec, &type, &index));
    cluster_spec_done(&spec);
}
END_TEST

START_TEST(task_type_names_round_trip)
{
    cluster_task_type_t t;

    for (int i = 0; i < CLUSTER_TASK_TYPE_COUNT_; i++) {
        ck_assert_int_eq(
            cluster_task_type_parse(cluster_task_type_name((cluster_task_type_t)i), &t), STATUS_OK);
        ck_assert_int_eq(t, i);
    }
    ck_assert_int_eq(cluster_task_type_parse("master", &t), STATUS_OK);
    ck_assert_int_eq(t, CLUSTER_CHIEF);
    ck_assert_int_eq(cluster_task_type_parse("Chief", &t), STATUS_INVALID_ARGUMENT);
    ck_assert_int_eq(cluster_task_type_parse("", &t), STATUS_INVALID_ARGUMENT);
    ck_assert_str_eq(cluster_task_type_name(CLUSTER_PS), "ps");
}
END_TEST

START_TEST(unset_or_empty_tf_config_is_not_present)
{
    status_msg_t err = {0};
    cluster_spec_t spec;
    bool present = true;

    unsetenv("TF_CONFIG");
    ck_assert_int_eq(cluster_spec_from_env(&spec, &present, &err), STATUS_OK);
    ck_assert(!present);
    cluster_spec_done(&spec);

    present = true;
    setenv("TF_CONFIG", "", 1);
    ck_assert_int_eq(cluster_spec_from_env(&spec, &present, &err), STATUS_OK);
    ck_assert(!present);
    ck_assert_uint_eq(cluster_spec_task_count(&spec), 0);
    cluster_spec_done(&spec);
    unsetenv("TF_CONFIG");
}
END_TEST

START_TEST(tf_config_from_environment_is_parsed)
{
    status_msg_t err = {0};
    cluster_spec_t spec;
    bool present = false;

    setenv("TF_CONFIG",
           "{\"cluster\": {\"ps\": [\"ps0:2222\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}",
           1);
    ck_assert_int_eq(cluster_spec_from_env(&spec, &present, &err), STATUS_OK);
    ck_assert(present);
    ck_assert_int_eq(spec.task_type, CLUSTER_PS);
    ck_assert_str_eq(cluster_spec_address(&spec, CLUSTER_PS, 0), "ps0:2222");
    cluster_spec_done(&spec);

    setenv("TF_CONFIG", "{\"cluster\": 1}", 1);
    ck_assert_int_eq(cluster_spec_from_env(&spec, &present, &err), STATUS_BAD_TF_CONFIG);
    ck_assert_ptr_nonnull(strstr(err.text, "cluster"));
    cluster_spec_done(&spec);
    unsetenv("TF_CONFIG");
}
END_TEST

START_TEST(spec_done_leaves_an_empty_reusable_spec)
{
    cluster_spec_t spec;

    parse_ok("{\"cluster\": {\"worker\": [\"w0:1\"]}, \"environment\": \"cloud\"}", &spec);
    cluster_spec_done(&spec);
    ck_assert_uint_eq(spec.jobs[CLUSTER_WORKER].n, 0);
    ck_assert_ptr_null(spec.jobs[CLUSTER_WORKER].addrs);
    ck_assert_ptr_null(spec.environment);
    cluster_spec_done(&spec);
    cluster_spec_done(NULL);
}
END_TEST

static Suite *cluster_suite(void)
{
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("tf_config");

    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, tf_guide_ps_example_parses_with_every_address);
    tcase_add_test(tc, reference_example_keeps_environment_and_rpc_layer);
    tcase_add_test(tc, documentation_placeholder_port_is_rejected_naming_the_address);
    tcase_add_test(tc, kubeflow_tfjob_example_parses);
    tcase_add_test(tc, kubeflow_dynamic_worker_sparse_map_keeps_holes);
    tcase_add_test(tc, sparse_map_task_index_must_be_a_key_of_the_map);
    tcase_add_test(tc, sparse_map_rejects_bad_and_repeated_indices);
    tcase_add_test(tc, master_means_chief);
    tcase_add_test(tc, task_index_may_be_a_numeric_string);
    tcase_add_test(tc, task_index_written_as_whole_float_is_accepted);
    tcase_add_test(tc, evaluator_may_be_missing_from_cluster);
    tcase_add_test(tc, evaluator_may_come_without_any_cluster);
    tcase_add_test(tc, only_an_evaluator_may_omit_the_cluster);
    tcase_add_test(tc, evaluator_listed_in_cluster_is_range_checked);
    tcase_add_test(tc, invalid_json_is_rejected);
    tcase_add_test(tc, top_level_must_be_an_object);
    tcase_add_test(tc, index_out_of_range_says_how_many_tasks_the_job_has);
    tcase_add_test(tc, two_chiefs_are_rejected);
    tcase_add_test(tc, two_evaluators_are_rejected);
    tcase_add_test(tc, chief_and_master_together_are_rejected);
    tcase_add_test(tc, repeated_keys_are_rejected);
    tcase_add_test(tc, cluster_must_be_an_object);
    tcase_add_test(tc, job_must_be_a_list_or_a_map);
    tcase_add_test(tc, addresses_must_be_strings);
    tcase_add_test(tc, addresses_must_be_host_and_port);
    tcase_add_loop_test(tc, task_index_must_be_a_whole_non_negative_number, 0,
                        (int)(sizeof(bad_indices) / sizeof(bad_indices[0])));
    tcase_add_test(tc, task_index_is_required);
    tcase_add_test(tc, task_type_is_required_and_known);
    tcase_add_test(tc, jobs_of_other_names_are_checked_and_set_aside);
    tcase_add_test(tc, tf_config_as_the_tfjob_operator_writes_it);
    tcase_add_test(tc, task_type_must_be_a_job_in_the_cluster);
    tcase_add_test(tc, unknown_top_level_keys_are_ignored);
    tcase_add_test(tc, environment_must_be_a_string);
    tcase_add_test(tc, empty_object_is_a_spec_without_task);
    tcase_add_test(tc, worker_zero_is_chief_when_there_is_no_chief);
    tcase_add_test(tc, task_type_names_round_trip);
    tcase_add_test(tc, unset_or_empty_tf_config_is_not_present);
    tcase_add_test(tc, tf_config_from_environment_is_parsed);
    tcase_add_test(tc, spec_done_leaves_an_empty_reusable_spec);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(cluster_suite(), CK_FORK);
}
