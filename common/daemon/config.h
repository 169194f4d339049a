/* Declarative daemon configuration: one table per program, strict parsing, three sources.
 *
 * Each program describes its options once, as rows of config_option_t pointing into its own
 * options struct. config_load() then fills that struct from, in increasing precedence:
 *   1. the table's defaults,
 *   2. TF_CONFIG (through the table's tf_config hook, when the variable is set),
 *   3. a YAML config file (a flat mapping of key: value; lists as YAML sequences), named by
 *      --config FILE on the command line,
 *   4. command-line flags: --key=value or --key value; booleans also as --key / --no-key.
 * Unknown keys and flags, values of the wrong type, numbers out of bounds or with trailing
 * garbage, and malformed addresses are rejected with one sentence naming the source (flag, file
 * and line, or TF_CONFIG) and the key. Strings in the options struct are owned by it and freed by
 * config_done(). Not thread-safe; call from main before starting threads. */
#ifndef TESSERA_CONFIG_H
#define TESSERA_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon/cluster.h"
#include "base/status.h"

typedef enum {
    CONFIG_STRING,       /* char *                                            */
    CONFIG_INT,          /* int64_t, within [min, max]                        */
    CONFIG_BOOL,         /* bool: true/false/yes/no/on/off/1/0                */
    CONFIG_DURATION_MS,  /* int64_t milliseconds: "250ms", "2s", "1m", "1500" */
    CONFIG_ADDRESS,      /* char *, "host:port" checked by net_hostport_valid */
    CONFIG_ADDRESS_LIST, /* config_list_t of addresses; "a:1,b:2" on the command line */
    CONFIG_LOG_LEVEL,    /* int (log_level_t): err, warning, notice, info, debug */
    CONFIG_PATH_LIST,    /* config_list_t of paths: each --key PATH adds one; a YAML sequence */
} config_type_t;

typedef struct config_list {
    char **items;
    size_t n;
} config_list_t;

typedef struct config_option {
    const char *key; /* flag name and file key, lower case with dashes */
    config_type_t type;
    size_t offset; /* offsetof(options struct, field) */
    const char
        *default_value; /* parsed like user input; NULL = unset (NULL string, empty list, 0) */
    int64_t min, max;   /* bounds for CONFIG_INT and CONFIG_DURATION_MS */
    const char *help;   /* one or more sentences; used by --help and the sample */
} config_option_t;

typedef struct config_table {
    const char *program; /* "tessera-ps" */
    const char *summary; /* one line for --help */
    const config_option_t *options;
    size_t n_options;
    /* Optional: copies what applies to this program from a parsed TF_CONFIG into opts, through
     * config_set(). Called only when TF_CONFIG is set. */
    status_t (*tf_config_cb)(const struct config_table *t, void *opts, const cluster_spec_t *spec,
                             status_msg_t *err);
} config_table_t;

typedef enum {
    CONFIG_RUN,     /* options loaded: run the program */
    CONFIG_HELP,    /* --help was given: usage printed to stdout, exit 0 */
    CONFIG_VERSION, /* --version was given: exit 0 after printing the version */
} config_action_t;

/* Fills opts (zeroed by the caller) from all sources. On failure opts holds what was parsed so
 * far and must still be released with config_done(). */
status_t config_load(const config_table_t *t, void *opts, int argc, char **argv,
                     config_action_t *ret_action, status_msg_t *err);

/* Fills opts (zeroed by the caller) with the table's built-in defaults only: no flags, file or
 * TF_CONFIG (a role that one process runs beside another, as worker 0 leads a cluster without
 * a chief). Release with config_done(). */
status_t config_defaults(const config_table_t *t, void *opts, status_msg_t *err);

/* Sets one option from text, as if given on the command line; `source` names where the value
 * came from in error messages ("TF_CONFIG", "flag --listen", "file.yaml:3"). */
status_t config_set(const config_table_t *t, void *opts, const char *key, const char *value,
                    const char *source, status_msg_t *err);

/* Frees every string and list the table owns in opts. */
void config_done(const config_table_t *t, void *opts);

/* Prints --help text: the summary and each option with its default and help. */
void config_print_usage(const config_table_t *t, FILE *out);

/* Writes a YAML sample config in which every option appears, commented with its help text and
 * default; deploy/config/ holds these files and a test checks they load. */
void config_write_sample(const config_table_t *t, FILE *out);

void config_list_done(config_list_t *l);

#endif
