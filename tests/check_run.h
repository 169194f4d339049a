/* The one runner of every Check test program: runs the suite, prints Check's summary (which
 * meson's log keeps), and turns the failures into the exit status. */
#ifndef TESSERA_CHECK_RUN_H
#define TESSERA_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

/* Runs every test of s, each in a child process unless fork is CK_NOFORK (programs that
 * initialise gRPC: it does not survive fork()), and returns EXIT_SUCCESS when none failed. */
static inline int check_run(Suite *s, enum fork_status fork)
{
    SRunner *sr = srunner_create(s);
    int failed;

    srunner_set_fork_status(sr, fork);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
