/* tessera-chief: accepts jobs from the CLI and coordinates the cluster. */
#include "chief.h"

int main(int argc, char **argv)
{
    chief_opts_t opts = {0};
    return daemon_main(&chief_daemon_spec, &chief_table, &opts, argc, argv);
}
