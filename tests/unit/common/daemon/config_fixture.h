/* The config loader's test table and fixture, shared by the config suites: a table with one
 * option of every type, temp files removed after each test, and loaders that fail the test on
 * misuse. */
#ifndef TESSERA_TEST_CONFIG_FIXTURE_H
#define TESSERA_TEST_CONFIG_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/config.h"

typedef struct test_opts {
    char *listen;
    config_list_t ps;
    config_list_t seeds;
    char *name;
    char *data_dir;
    int64_t threads;
    int64_t offset;
    bool verbose;
    bool metrics;
    int64_t timeout_ms;
    int log_level;
} test_opts_t;

/* The TF_CONFIG of a worker in a cluster with two parameter servers. */
#define TF_CONFIG_WORKER                                                                           \
    "{\"cluster\": {\"ps\": [\"tf-ps0:2222\", \"tf-ps1:2222\"], \"worker\": [\"tf-w0:2222\"]},"    \
    " \"task\": {\"type\": \"worker\", \"index\": 0}}"

/* Every option type once; TF_CONFIG sets listen from the task's address and ps from cluster.ps. */
extern const config_table_t test_table;

/* Checked fixture: clears TF_CONFIG, and removes the temp files a test wrote. */
void setup(void);
void teardown(void);

/* Writes content to a new temp file and returns its path (removed by the fixture). */
const char *write_temp(const char *content);

/* Runs config_load on "test-prog" followed by the NULL-terminated arguments. */
status_t load(test_opts_t *o, config_action_t *action, status_msg_t *err, ...);

/* Loads with a config file holding yaml (and no flags) and returns the status. */
status_t load_yaml(test_opts_t *o, status_msg_t *err, const char *yaml, const char **path);

/* Asserts the message contains each NULL-terminated part. */
void assert_mentions(const status_msg_t *err, ...);

/* Asserts the list holds exactly the n strings given. */
void assert_list(const config_list_t *l, size_t n, ...);

/* Asserts every option holds the table's default. */
void assert_defaults(const test_opts_t *o);

#endif
