/* Integration-test harness: real Tessera daemons on 127.0.0.1 with ephemeral ports and temp
 * dirs, real HTTP scrapes, real CLI runs. Tests run in CK_NOFORK mode because gRPC does not
 * survive fork(). */
#ifndef TESSERA_TEST_HARNESS_H
#define TESSERA_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/launch.h"
#include "rpc/client.h"

/* Path of a built program ("tessera-ps") under $TESSERA_BUILD_DIR. */
const char *harness_program(const char *name);

/* Path of a source file: under $TESSERA_SOURCE_DIR, else $TESSERA_BUILD_DIR/... */
const char *harness_source(const char *rel);

/* A fresh temporary directory for this test process (created once). */
const char *harness_tmpdir(void);

/* Starts program with --listen=127.0.0.1:0 --metrics-listen=127.0.0.1:0 and the extra args
 * (NULL-terminated), logging to <tmpdir>/<name>.log; fails the test if it does not come up. */
void harness_start(launch_proc_t *p, const char *program, const char *name, ...);

/* Like harness_start but returns the status instead of failing, and names its log file in
 * ret_log (may be NULL). */
int harness_try_start(launch_proc_t *p, const char *program, const char *name, char **args,
                      char *ret_log, size_t log_len);

/* Stops p with SIGTERM and asserts a clean exit 0. */
void harness_stop(launch_proc_t *p);

/* "loss ..., accuracy ...; test loss ..., test accuracy ..." of the CLI's result line in out
 * (after "; ", which follows "(training ...)" only when the job trained), malloc'd; fails the
 * test when there is none. */
char *harness_result(const char *out);

/* The value of a series ("name" or "name{label=\"value\"}") on a task's /metrics; fails the
 * test when the page does not have it. */
double harness_metric(const launch_proc_t *p, const char *series);

/* GET http://addr/path over a plain socket. Returns the HTTP status (or -1) and a malloc'd
 * copy of the headers and body. */
int harness_http_get(const char *addr, const char *path, char **ret_headers, char **ret_body);

/* Runs argv (argv[0] is a path) with optional extra environment entries (NULL-terminated, may
 * be NULL) and stdin from /dev/null; captures stdout and stderr together into a malloc'd
 * string. Returns the exit status, or -1 if it did not exit within timeout_ms (then killed). */
int harness_run(char *const argv[], char *const env_extra[], const char *stdin_text, int timeout_ms,
                char **ret_output);

/* True when dir holds a complete checkpoint (files/checkpoint.h's ckpt_latest). */
bool harness_has_checkpoint(const char *dir);
/* True when the file contains needle. */
bool harness_file_contains(const char *path, const char *needle);

/* A TCP port on 127.0.0.1 that was free a moment ago. */
int harness_free_port(void);

/* A gRPC channel to p's listen address; fails the test if it cannot be made. */
rpc_channel_t *harness_channel(const launch_proc_t *p);

/* The resident memory of process pid (VmRSS), in bytes. */
uint64_t harness_resident_bytes(pid_t pid);

/* True when pid runs under ASan, TSan or valgrind, whose shadow memory and quarantine make its
 * resident memory meaningless. */
bool harness_instrumented(pid_t pid);

#endif
