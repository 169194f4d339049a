/* Fuzz target: daemon config files (common/daemon/config.c), read as `--config FILE` by
 * config_load.
 *
 * The daemons' own tables live beside their main()s, out of reach here, so the table is a
 * representative one: the rows every daemon has (DAEMON_OPTION_ROWS: address, string, integer,
 * duration, log level), the parameter server's limits, the chief's address lists, and the
 * options of the config unit test (booleans, an unbounded integer): every option type config.c
 * knows. The input is the file, in a memfd. */
#include <stddef.h>
#include <stdlib.h>

#include "daemon/config.h"
#include "daemon/daemon.h"
#include "fuzz_common.h"

typedef struct fuzz_opts {
    daemon_opts_t common;
    int64_t max_memory_bytes;
    int64_t max_jobs;
    config_list_t ps, worker;
    int64_t health_timeout_ms;
    bool verbose, metrics;
    /* and the keys of tests/unit/common/daemon/test_config.c, whose YAML seeds the corpus */
    config_list_t seeds;
    char *name, *data_dir;
    int64_t offset, timeout_ms;
} fuzz_opts_t;

static const config_option_t options[] = {
    DAEMON_OPTION_ROWS("2223", "9401"),
    {"max-memory-bytes", CONFIG_INT, offsetof(fuzz_opts_t, max_memory_bytes), "0", 0, INT64_MAX,
     "Most bytes of variables."},
    {"max-jobs", CONFIG_INT, offsetof(fuzz_opts_t, max_jobs), "256", 1, 1000000, "Most jobs."},
    {"ps", CONFIG_ADDRESS_LIST, offsetof(fuzz_opts_t, ps), NULL, 0, 0, "Parameter servers."},
    {"worker", CONFIG_ADDRESS_LIST, offsetof(fuzz_opts_t, worker), "w0:1, [::1]:2", 0, 0,
     "Workers."},
    {"health-timeout", CONFIG_DURATION_MS, offsetof(fuzz_opts_t, health_timeout_ms), "1s", 10,
     60000, "Health check timeout."},
    {"verbose", CONFIG_BOOL, offsetof(fuzz_opts_t, verbose), "false", 0, 0, "Log more."},
    {"metrics", CONFIG_BOOL, offsetof(fuzz_opts_t, metrics), "true", 0, 0, "Serve /metrics."},
    {"seeds", CONFIG_ADDRESS_LIST, offsetof(fuzz_opts_t, seeds), "a:1, [::1]:2", 0, 0,
     "Seed peers."},
    {"name", CONFIG_STRING, offsetof(fuzz_opts_t, name), "tessera \"test\"", 0, 0, "Job name."},
    {"data-dir", CONFIG_STRING, offsetof(fuzz_opts_t, data_dir), NULL, 0, 0, "Directory."},
    {"offset", CONFIG_INT, offsetof(fuzz_opts_t, offset), "0", 0, 0, "Unbounded integer."},
    {"timeout", CONFIG_DURATION_MS, offsetof(fuzz_opts_t, timeout_ms), "5s", 1, 3600000,
     "RPC deadline."},
};

static const config_table_t table = {
    .program = "tessera-fuzz",
    .summary = "A daemon-like config table for the fuzzer.",
    .options = options,
    .n_options = sizeof(options) / sizeof(options[0]),
};

static fuzz_file_t file;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet_logs();
    unsetenv("TF_CONFIG"); /* the file alone decides */
    fuzz_file_open(&file, "tessera-fuzz-config.yaml");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[] = {"tessera-fuzz", "--config", file.path, NULL};
    fuzz_opts_t opts = {0};
    status_msg_t err = {0};
    config_action_t action;
    status_t rc;

    fuzz_file_set(&file, data, size);
    rc = config_load(&table, &opts, 3, argv, &action, &err);
    fuzz_check_error("config", rc, &err);
    if (rc == STATUS_OK) {
        if (action != CONFIG_RUN)
            fuzz_fail("config", "a config file changed the action to %d", (int)action);
        if (opts.common.threads < 1 || opts.common.threads > 256 || opts.max_jobs < 1 ||
            opts.health_timeout_ms < 10 || opts.health_timeout_ms > 60000)
            fuzz_fail("config", "a value outside its bounds was accepted");
        for (size_t i = 0; i < opts.ps.n; i++)
            if (opts.ps.items[i] == NULL)
                fuzz_fail("config", "ps[%zu] is NULL", i);
    }
    config_done(&table, &opts);
    return 0;
}
