/* Starting and stopping Tessera daemons as child processes, the way systemd would: each child
 * gets its own $NOTIFY_SOCKET, and start-up waits for its READY=1 message, which names the ports
 * it bound. Used by `tessera run --local` and by the integration tests. */
#ifndef TESSERA_LAUNCH_H
#define TESSERA_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/status.h"

typedef struct launch_proc {
    pid_t pid;
    int pid_fd; /* pidfd_open(pid): readable once the child exits; -1 before it started */
    int notify_fd;
    char notify_path[108];
    char listen[160];  /* X_TESSERA_LISTEN from READY=1 */
    char metrics[160]; /* X_TESSERA_METRICS */
    char name[64];     /* for messages: "ps 0" */
    bool exited;
    int wait_status;
} launch_proc_t;

/* Finds a Tessera program ("tessera-ps") beside the running executable, in the build tree
 * layout, or on $PATH. Writes its path into ret_path. */
status_t launch_find_program(const char *name, char *ret_path, size_t len, status_msg_t *err);

/* Spawns argv[0] (a path) with argv, stderr to log_path (NULL: inherited), and waits up to
 * timeout_ms for READY=1. `name` labels the process in messages. On failure the child is
 * killed and reaped, and err says why (its exit status, or the timeout). A Tessera daemon
 * started this way stops (SIGTERM) when the calling thread dies, so a crashed or killed parent
 * leaves no daemons behind: call it from a thread that lives as long as the children. */
status_t launch_start(const char *name, char *const argv[], const char *log_path,
                      int64_t timeout_ms, launch_proc_t *ret_proc, status_msg_t *err);

/* Waits up to timeout_ms for a notification datagram containing `key` (e.g. "STOPPING=1");
 * returns STATUS_TIMEOUT if none came. */
status_t launch_wait_notify(launch_proc_t *p, const char *key, int64_t timeout_ms);

/* Sends sig and waits up to timeout_ms for the process to exit; then kills it with SIGKILL.
 * *ret_status (may be NULL) gets the wait status. Closes the notify socket. Returns
 * STATUS_TIMEOUT when SIGKILL was needed. */
status_t launch_stop(launch_proc_t *p, int sig, int64_t timeout_ms, int *ret_status);

/* Waits up to timeout_ms for the process to exit by itself (woken by its pidfd, not polled). */
status_t launch_wait_exit(launch_proc_t *p, int64_t timeout_ms, int *ret_status);

#endif
