#define _POSIX_C_SOURCE 200809L
#include "config_fixture.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

static const config_option_t test_options[] = {
    {"listen", CONFIG_ADDRESS, offsetof(test_opts_t, listen), "0.0.0.0:2222", 0, 0,
     "Address the server listens on."},
    {"ps", CONFIG_ADDRESS_LIST, offsetof(test_opts_t, ps), NULL, 0, 0,
     "Parameter servers in task order. TF_CONFIG fills this from cluster.ps when it is set, and "
     "a config file or flag replaces the whole list rather than adding to it."},
    {"seeds", CONFIG_ADDRESS_LIST, offsetof(test_opts_t, seeds), "a:1, [::1]:2", 0, 0,
     "Seed peers."},
    {"name", CONFIG_STRING, offsetof(test_opts_t, name), "tessera \"test\"", 0, 0, "Job name."},
    {"data-dir", CONFIG_STRING, offsetof(test_opts_t, data_dir), NULL, 0, 0,
     "Directory for checkpoints."},
    {"threads", CONFIG_INT, offsetof(test_opts_t, threads), "4", 1, 64, "Worker threads."},
    {"offset", CONFIG_INT, offsetof(test_opts_t, offset), "0", 0, 0, "Unbounded integer."},
    {"verbose", CONFIG_BOOL, offsetof(test_opts_t, verbose), "false", 0, 0, "Log more."},
    {"metrics", CONFIG_BOOL, offsetof(test_opts_t, metrics), "true", 0, 0, "Serve /metrics."},
    {"timeout", CONFIG_DURATION_MS, offsetof(test_opts_t, timeout_ms), "5s", 1, 3600000,
     "RPC deadline."},
    {"log-level", CONFIG_LOG_LEVEL, offsetof(test_opts_t, log_level), "info", 0, 0,
     "Most verbose log level written."},
};

/* Takes listen from the task's own address and ps from cluster.ps, as a PS daemon would. */
static status_t test_tf_config_cb(const config_table_t *t, void *opts, const cluster_spec_t *spec,
                                  status_msg_t *err)
{
    char ps[1024] = "";
    size_t len = 0;

    if (spec->has_task) {
        const char *addr = cluster_spec_address(spec, spec->task_type, spec->task_index);
        if (addr != NULL)
            STATUS_CHECK(config_set(t, opts, "listen", addr, "TF_CONFIG", err));
    }
    for (size_t i = 0; i < spec->jobs[CLUSTER_PS].n; i++)
        len += (size_t)snprintf(ps + len, sizeof(ps) - len, "%s%s", i ? "," : "",
                                spec->jobs[CLUSTER_PS].addrs[i]);
    if (len > 0)
        STATUS_CHECK(config_set(t, opts, "ps", ps, "TF_CONFIG", err));
    return STATUS_OK;
}

const config_table_t test_table = {
    .program = "test-prog",
    .summary = "A program that exists only to test the config loader.",
    .options = test_options,
    .n_options = sizeof(test_options) / sizeof(test_options[0]),
    .tf_config_cb = test_tf_config_cb,
};

static char temp_paths[8][64];
static int n_temp;

void setup(void)
{
    unsetenv("TF_CONFIG");
    n_temp = 0;
}

void teardown(void)
{
    for (int i = 0; i < n_temp; i++)
        unlink(temp_paths[i]);
    n_temp = 0;
    unsetenv("TF_CONFIG");
}

const char *write_temp(const char *content)
{
    char *path;
    FILE *f;
    int fd;

    ck_assert_int_lt(n_temp, 8);
    path = temp_paths[n_temp];
    snprintf(path, sizeof(temp_paths[0]), "/tmp/tessera-test-config-XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    n_temp++;
    f = fdopen(fd, "w");
    ck_assert_ptr_nonnull(f);
    fputs(content, f);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

status_t load(test_opts_t *o, config_action_t *action, status_msg_t *err, ...)
{
    char *argv[32] = {"test-prog"};
    int argc = 1;
    config_action_t dummy;
    va_list ap;

    va_start(ap, err);
    for (char *a = va_arg(ap, char *); a != NULL; a = va_arg(ap, char *)) {
        ck_assert_int_lt(argc, 31);
        argv[argc++] = a;
    }
    va_end(ap);
    memset(o, 0, sizeof(*o));
    memset(err, 0, sizeof(*err));
    return config_load(&test_table, o, argc, argv, action ? action : &dummy, err);
}

status_t load_yaml(test_opts_t *o, status_msg_t *err, const char *yaml, const char **path)
{
    const char *p = write_temp(yaml);
    if (path != NULL)
        *path = p;
    return load(o, NULL, err, "--config", (char *)p, (char *)NULL);
}

void assert_mentions(const status_msg_t *err, ...)
{
    va_list ap;

    va_start(ap, err);
    for (const char *p = va_arg(ap, const char *); p != NULL; p = va_arg(ap, const char *))
        ck_assert_msg(strstr(err->text, p) != NULL, "message \"%s\" does not contain \"%s\"",
                      err->text, p);
    va_end(ap);
}

void assert_list(const config_list_t *l, size_t n, ...)
{
    va_list ap;

    ck_assert_uint_eq(l->n, n);
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_str_eq(l->items[i], va_arg(ap, const char *));
    va_end(ap);
}

void assert_defaults(const test_opts_t *o)
{
    ck_assert_str_eq(o->listen, "0.0.0.0:2222");
    ck_assert_uint_eq(o->ps.n, 0);
    assert_list(&o->seeds, 2, "a:1", "[::1]:2");
    ck_assert_str_eq(o->name, "tessera \"test\"");
    ck_assert_ptr_null(o->data_dir);
    ck_assert_int_eq(o->threads, 4);
    ck_assert_int_eq(o->offset, 0);
    ck_assert(!o->verbose);
    ck_assert(o->metrics);
    ck_assert_int_eq(o->timeout_ms, 5000);
    ck_assert_int_eq(o->log_level, LOG_LEVEL_INFO);
}
