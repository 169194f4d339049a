#define _GNU_SOURCE
#include "harness.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "files/checkpoint.h"
#include "base/net.h"
#include "base/clock.h"
#include "daemon/metrics.h"

extern char **environ;

const char *harness_program(const char *name)
{
    static char path[8][1024];
    static int next;
    const char *dir = getenv("TESSERA_BUILD_DIR");
    char *out = path[next++ % 8];
    snprintf(out, sizeof(path[0]), "%s/%s", dir ? dir : ".", name);
    return out;
}

const char *harness_source(const char *rel)
{
    static char path[4][1024];
    static int next;
    const char *src = getenv("TESSERA_SOURCE_DIR"), *build = getenv("TESSERA_BUILD_DIR");
    char *out = path[next++ % 4];
    if (src != NULL && src[0] != '\0') /* meson sets it: build directories may live anywhere */
        snprintf(out, sizeof(path[0]), "%s/%s", src, rel);
    else
        snprintf(out, sizeof(path[0]), "%s/../%s", build ? build : ".", rel);
    return out;
}

const char *harness_tmpdir(void)
{
    static char dir[256];
    if (dir[0] == '\0') {
        snprintf(dir, sizeof(dir), "/tmp/tessera-test-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
    }
    return dir;
}

int harness_try_start(launch_proc_t *p, const char *program, const char *name, char **args,
                      char *ret_log, size_t log_len)
{
    char log[512], *argv[32];
    status_msg_t err = {0};
    int a = 0, rc;

    snprintf(log, sizeof(log), "%s/%s.log", harness_tmpdir(), name);
    argv[a++] = (char *)harness_program(program);
    argv[a++] = "--listen=127.0.0.1:0";
    argv[a++] = "--metrics-listen=127.0.0.1:0";
    {
        /* The tests' daemons may use any file, unless a test confines them itself. */
        bool confined = false;
        for (size_t i = 0; args && args[i]; i++)
            confined |= strncmp(args[i], "--data-root", 11) == 0;
        if (!confined)
            argv[a++] = "--data-root=/";
    }
    if (strcmp(program, "tessera-worker") == 0) {
        /* The tests' workers compute on one thread each, unless a test says otherwise: their
         * figures are the ones the tests expect (a product split over more threads sums in
         * another order), and the daemons of a test share the machine's cores. */
        bool given = false;
        for (size_t i = 0; args && args[i]; i++)
            given |= strncmp(args[i], "--compute-threads", 17) == 0;
        if (!given)
            argv[a++] = "--compute-threads=1";
    }
    for (size_t i = 0; args && args[i] && a < 31; i++)
        argv[a++] = args[i];
    argv[a] = NULL;
    rc = launch_start(name, argv, log, 20000, p, &err);
    if (ret_log != NULL)
        snprintf(ret_log, log_len, "%s", log);
    if (rc != STATUS_OK)
        fprintf(stderr, "harness: %s\n", err.text);
    return rc;
}

void harness_start(launch_proc_t *p, const char *program, const char *name, ...)
{
    char *args[24];
    int n = 0;
    va_list ap;

    va_start(ap, name);
    for (char *s = va_arg(ap, char *); s != NULL && n < 23; s = va_arg(ap, char *))
        args[n++] = s;
    va_end(ap);
    args[n] = NULL;
    ck_assert_msg(harness_try_start(p, program, name, args, NULL, 0) == STATUS_OK,
                  "%s did not start", name);
    ck_assert_str_ne(p->listen, "");
    ck_assert_str_ne(p->metrics, "");
}

void harness_stop(launch_proc_t *p)
{
    int st = 0;
    char wchan[128] = "";
    status_t rc;

    /* A daemon stops in milliseconds; on a 2-core machine busy with other tests its last steps
     * (gRPC's shutdown, the heap's release) once took over 5 s. Where it is stuck past 30 s is
     * said: the kernel's wait channel of its main thread. */
    if (p->pid > 0 && !p->exited)
        kill(p->pid, SIGTERM);
    rc = launch_wait_exit(p, 30000, &st);
    if (rc != STATUS_OK) {
        char path[64];
        FILE *f;
        snprintf(path, sizeof(path), "/proc/%d/wchan", (int)p->pid);
        if ((f = fopen(path, "r")) != NULL) {
            if (fgets(wchan, sizeof(wchan), f) == NULL)
                wchan[0] = '\0';
            fclose(f);
        }
    }
    launch_stop(p, SIGKILL, 5000, rc == STATUS_OK ? NULL : &st);
    ck_assert_msg(rc == STATUS_OK, "%s did not exit within 30 s of SIGTERM (waiting in %s)",
                  p->name, wchan[0] ? wchan : "?");
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s exited with status %d", p->name, st);
}

int harness_http_get(const char *addr, const char *path, char **ret_headers, char **ret_body)
{
    return metrics_http_get(addr, path, ret_headers, ret_body);
}

int harness_run(char *const argv[], char *const env_extra[], const char *stdin_text, int timeout_ms,
                char **ret_output)
{
    int out_pipe[2], in_pipe[2], st = 0;
    posix_spawn_file_actions_t fa;
    size_t n_env = 0, k = 0, len = 0, cap = 4096;
    char **envp, *buf = malloc(cap);
    int64_t deadline = clock_now_ms() + timeout_ms;
    bool exited = false;
    pid_t pid;

    ck_assert_int_eq(pipe2(out_pipe, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(in_pipe, O_CLOEXEC), 0);
    while (environ[n_env])
        n_env++;
    for (size_t i = 0; env_extra && env_extra[i]; i++)
        n_env++;
    envp = calloc(n_env + 1, sizeof(*envp));
    for (size_t i = 0; env_extra && env_extra[i]; i++)
        envp[k++] = env_extra[i];
    for (size_t i = 0; environ[i]; i++) {
        bool overridden = false;
        for (size_t j = 0; env_extra && env_extra[j]; j++) {
            size_t klen = strcspn(env_extra[j], "=");
            if (strncmp(environ[i], env_extra[j], klen + 1) == 0)
                overridden = true;
        }
        if (!overridden && strncmp(environ[i], "NOTIFY_SOCKET=", 14) != 0)
            envp[k++] = environ[i];
    }
    envp[k] = NULL;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_pipe[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDERR_FILENO);
    ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL, argv, envp), 0);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    close(out_pipe[1]);
    close(in_pipe[0]);
    if (stdin_text != NULL)
        (void)!write(in_pipe[1], stdin_text, strlen(stdin_text));
    close(in_pipe[1]);
    for (;;) {
        struct pollfd pfd = {out_pipe[0], POLLIN, 0};
        int64_t left = deadline - clock_now_ms();
        ssize_t n;
        if (left <= 0)
            break;
        if (poll(&pfd, 1, (int)left) <= 0)
            continue;
        if (len + 1024 >= cap)
            buf = realloc(buf, cap *= 2);
        n = read(out_pipe[0], buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(out_pipe[0]);
    buf[len] = '\0';
    while (clock_now_ms() < deadline) {
        struct timespec ts = {0, 5000000};
        if (waitpid(pid, &st, WNOHANG) == pid) {
            exited = true;
            break;
        }
        nanosleep(&ts, NULL);
    }
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    if (ret_output != NULL)
        *ret_output = buf;
    else
        free(buf);
    return exited && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool harness_file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    bool found = false;
    if (f == NULL)
        return false;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

int harness_free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

rpc_channel_t *harness_channel(const launch_proc_t *p)
{
    rpc_channel_t *ch;
    status_msg_t msg;
    ck_assert_msg(rpc_channel_new(p->listen, NULL, &ch, &msg) == STATUS_OK, "channel to %s: %s",
                  p->name, msg.text);
    return ch;
}

uint64_t harness_resident_bytes(pid_t pid)
{
    char path[64], line[256];
    uint64_t kib = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %" SCNu64 " kB", &kib) == 1)
            break;
    fclose(f);
    return kib * 1024;
}

bool harness_instrumented(pid_t pid)
{
    char path[64], line[512];
    bool found = false;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, "libasan") != NULL || strstr(line, "libtsan") != NULL ||
                strstr(line, "vgpreload") != NULL;
    fclose(f);
    return found;
}

bool harness_has_checkpoint(const char *dir)
{
    int64_t step;
    char *path = NULL;
    bool has = ckpt_latest(dir, &step, &path, NULL) == STATUS_OK;

    free(path);
    return has;
}

double harness_metric(const launch_proc_t *p, const char *series)
{
    double v = 0;
    status_t rc = metrics_http_value(p->metrics, series, &v);

    ck_assert_msg(rc == STATUS_OK, "%s: %s on %s", series, status_str(rc), p->metrics);
    return v;
}

char *harness_result(const char *out)
{
    const char *at = strstr(out, "; loss "); /* after "(training …)", if the job trained */
    ck_assert_msg(at != NULL, "no result line: %s", out);
    return strndup(at + 2, strcspn(at + 2, "\n"));
}
