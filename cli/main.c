/* tessera: the user's command. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "base/log.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"train", cli_train, "train a job in this process (one device, no cluster)"},
    {"convert", cli_convert, "write TFRecord files of tf.train.Example from IDX files"},
    {"export", cli_export, "write a trained job as model.keras (Keras 3) and model.safetensors"},
    {"cluster", cli_cluster, "show every task of a cluster and its health"},
    {"run", cli_run, "start a whole cluster on this machine, optionally run a job (run --local)"},
    {"submit", cli_jobs, "submit a job file to the chief (--watch to follow it)"},
    {"status", cli_jobs, "show a job's state and progress"},
    {"watch", cli_jobs, "follow a job's progress until it ends"},
    {"cancel", cli_jobs, "cancel a queued or running job"},
    {"checkpoint", cli_jobs,
     "checkpoint a running job now (its job file has a checkpoint section)"},
    {"list", cli_jobs, "list the chief's jobs"},
    {"certs", cli_certs, "make a cluster CA and certificates for mutual TLS (init, issue)"},
};

static void usage(FILE *out)
{
    fprintf(out, "Usage: tessera COMMAND [OPTIONS]\n\nCommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\n'tessera COMMAND --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    log_set_identity("tessera", -1);
    log_set_level(LOG_LEVEL_WARNING);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("tessera %s\n", TESSERA_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "tessera: unknown command \"%s\" (see tessera --help)\n", argv[1]);
    return 2;
}
