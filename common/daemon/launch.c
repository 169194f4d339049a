#define _GNU_SOURCE
#include "daemon/launch.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static bool executable(const char *path)
{
    return access(path, X_OK) == 0;
}

status_t launch_find_program(const char *name, char *ret_path, size_t len, status_msg_t *err)
{
    char self[PATH_MAX], *slash;
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    const char *path_env = getenv("PATH");

    if (n > 0) {
        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            /* Installed programs sit side by side; in the build tree, tests run from tests/. */
            static const char *const rel[] = {"", "/..", "/../.."};
            for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
                snprintf(ret_path, len, "%s%s/%s", self, rel[i], name);
                if (executable(ret_path))
                    return STATUS_OK;
            }
        }
    }
    if (path_env != NULL) {
        char *copy = strdup(path_env), *save = NULL;
        for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
            snprintf(ret_path, len, "%s/%s", dir, name);
            if (executable(ret_path)) {
                free(copy);
                return STATUS_OK;
            }
        }
        free(copy);
    }
    return status_fail(err, STATUS_NOT_FOUND,
                       "cannot find the program %s beside this one or on $PATH", name);
}

static status_t open_notify_socket(launch_proc_t *p, status_msg_t *err)
{
    static unsigned counter;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

    snprintf(p->notify_path, sizeof(p->notify_path), "%s/tessera-notify-%d-%u", tmp, (int)getpid(),
             __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    p->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (p->notify_fd < 0)
        return status_fail(err, STATUS_SYSTEM, "socket: %s", strerror(errno));
    unlink(p->notify_path);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p->notify_path);
    if (bind(p->notify_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        status_t s =
            status_fail(err, STATUS_SYSTEM, "bind %s: %s", p->notify_path, strerror(errno));
        close(p->notify_fd);
        p->notify_fd = -1;
        return s;
    }
    return STATUS_OK;
}

static void copy_value(const char *msg, const char *key, char *out, size_t len)
{
    const char *v = strstr(msg, key);
    size_t n;
    if (v == NULL)
        return;
    v += strlen(key);
    n = strcspn(v, "\n");
    if (n >= len)
        n = len - 1;
    memcpy(out, v, n);
    out[n] = '\0';
}

static bool reap(launch_proc_t *p, bool block)
{
    if (p->exited)
        return true;
    if (waitpid(p->pid, &p->wait_status, block ? 0 : WNOHANG) == p->pid)
        p->exited = true;
    return p->exited;
}

/* A descriptor that polls readable when the child exits. Linux 5.3 and later; without it
 * (ENOSYS), -1, and the waits below fall back to waking every POLL_FALLBACK_MS. */
#define POLL_FALLBACK_MS 20

static int open_pidfd(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* poll() on the notify socket (when notify is true) and the child's pidfd, for at most
 * deadline - now. Returns the poll result; fds[0] is the socket, fds[1] the pidfd. */
static int wait_events(launch_proc_t *p, bool notify, int64_t deadline, struct pollfd fds[2])
{
    int64_t left = deadline - clock_now_ms();
    int timeout;

    if (left <= 0)
        return 0;
    timeout = left > INT_MAX ? INT_MAX : (int)left;
    if (p->pid_fd < 0 && timeout > POLL_FALLBACK_MS)
        timeout = POLL_FALLBACK_MS;
    /* A negative fd is skipped by poll(). */
    fds[0] = (struct pollfd){notify ? p->notify_fd : -1, POLLIN, 0};
    fds[1] = (struct pollfd){p->pid_fd, POLLIN, 0};
    return poll(fds, 2, timeout);
}

/* Reads datagrams until one contains key, the child exits, or the deadline passes. */
static status_t wait_key(launch_proc_t *p, const char *key, int64_t timeout_ms, char *ret_msg,
                         size_t msg_len)
{
    int64_t deadline = clock_now_ms() + timeout_ms;
    char buf[4096];

    for (;;) {
        struct pollfd fds[2];
        int r = wait_events(p, true, deadline, fds);
        if (r > 0 && (fds[0].revents & POLLIN)) {
            ssize_t n = recv(p->notify_fd, buf, sizeof(buf) - 1, 0);
            if (n > 0) {
                buf[n] = '\0';
                if (strstr(buf, key) != NULL) {
                    if (ret_msg != NULL)
                        snprintf(ret_msg, msg_len, "%s", buf);
                    return STATUS_OK;
                }
            }
            continue; /* a child that wrote and exited: its datagrams first */
        }
        if (reap(p, false))
            return STATUS_REMOTE;
        if (r == 0 && clock_now_ms() >= deadline)
            return STATUS_TIMEOUT;
    }
}

status_t launch_start(const char *name, char *const argv[], const char *log_path,
                      int64_t timeout_ms, launch_proc_t *ret_proc, status_msg_t *err)
{
    launch_proc_t *p = ret_proc;
    posix_spawn_file_actions_t fa;
    char notify_env[160], parent_env[48], msg[4096];
    char **envp;
    size_t n_env = 0, k = 0;
    status_t rc;
    int e;

    memset(p, 0, sizeof(*p));
    p->notify_fd = p->pid_fd = -1;
    snprintf(p->name, sizeof(p->name), "%s", name);
    STATUS_CHECK(open_notify_socket(p, err));
    while (environ[n_env] != NULL)
        n_env++;
    envp = calloc(n_env + 3, sizeof(*envp));
    if (envp == NULL) {
        launch_stop(p, SIGKILL, 0, NULL);
        return status_fail(err, STATUS_NO_MEMORY, "out of memory");
    }
    snprintf(notify_env, sizeof(notify_env), "NOTIFY_SOCKET=%s", p->notify_path);
    snprintf(parent_env, sizeof(parent_env), "TESSERA_PARENT_PID=%ld", (long)getpid());
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(environ[i], "NOTIFY_SOCKET=", 14) != 0 &&
            strncmp(environ[i], "WATCHDOG_", 9) != 0 &&
            strncmp(environ[i], "TESSERA_PARENT_PID=", 19) != 0)
            envp[k++] = environ[i];
    envp[k++] = notify_env;
    envp[k++] = parent_env;
    envp[k] = NULL;
    posix_spawn_file_actions_init(&fa);
    if (log_path != NULL)
        posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log_path,
                                         O_WRONLY | O_CREAT | O_APPEND, 0644);
    e = posix_spawn(&p->pid, argv[0], &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    if (e != 0) {
        p->exited = true;
        launch_stop(p, SIGKILL, 0, NULL);
        return status_fail(err, STATUS_SYSTEM, "cannot start %s (%s): %s", name, argv[0],
                           strerror(e));
    }
    p->pid_fd = open_pidfd(p->pid);
    rc = wait_key(p, "READY=1", timeout_ms, msg, sizeof(msg));
    if (rc == STATUS_OK) {
        copy_value(msg, "X_TESSERA_LISTEN=", p->listen, sizeof(p->listen));
        copy_value(msg, "X_TESSERA_METRICS=", p->metrics, sizeof(p->metrics));
        return STATUS_OK;
    }
    if (rc == STATUS_REMOTE) {
        int st = p->wait_status;
        launch_stop(p, SIGKILL, 0, NULL);
        return status_fail(err, STATUS_REMOTE, "%s exited during start-up (%s %d)%s%s", name,
                           WIFEXITED(st) ? "exit status" : "signal",
                           WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), log_path ? "; see " : "",
                           log_path ? log_path : "");
    }
    launch_stop(p, SIGKILL, 1000, NULL);
    return status_fail(err, STATUS_TIMEOUT, "%s did not report READY=1 within %lld ms", name,
                       (long long)timeout_ms);
}

status_t launch_wait_notify(launch_proc_t *p, const char *key, int64_t timeout_ms)
{
    if (p->notify_fd < 0)
        return STATUS_INVALID_USAGE;
    return wait_key(p, key, timeout_ms, NULL, 0) == STATUS_OK ? STATUS_OK : STATUS_TIMEOUT;
}

status_t launch_wait_exit(launch_proc_t *p, int64_t timeout_ms, int *ret_status)
{
    int64_t deadline = clock_now_ms() + timeout_ms;
    while (!reap(p, false)) {
        struct pollfd fds[2];
        if (wait_events(p, false, deadline, fds) == 0 && clock_now_ms() >= deadline)
            return STATUS_TIMEOUT;
    }
    if (ret_status != NULL)
        *ret_status = p->wait_status;
    return STATUS_OK;
}

status_t launch_stop(launch_proc_t *p, int sig, int64_t timeout_ms, int *ret_status)
{
    status_t rc = STATUS_OK;

    if (p->pid > 0 && !p->exited) {
        kill(p->pid, sig);
        if (launch_wait_exit(p, timeout_ms, ret_status) != STATUS_OK) {
            rc = STATUS_TIMEOUT;
            kill(p->pid, SIGKILL);
            reap(p, true);
        }
    }
    if (ret_status != NULL)
        *ret_status = p->wait_status;
    if (p->notify_fd >= 0) {
        close(p->notify_fd);
        unlink(p->notify_path);
        p->notify_fd = -1;
    }
    if (p->pid_fd >= 0 && p->exited) {
        close(p->pid_fd);
        p->pid_fd = -1;
    }
    return rc;
}
