/* Helpers the benchmarks share: samples and their quantiles, number formatting, and iperf3 on
 * loopback as the ceiling for transfer rates. */
#ifndef TESSERA_BENCH_UTIL_H
#define TESSERA_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/launch.h"
#include "base/status.h"

#define MB 1e6 /* throughput unit: 10^6 bytes */

/* A growing list of measurements. */
typedef struct samples {
    double *v;
    size_t n, cap;
} samples_t;

bool samples_add(samples_t *s, double x);
bool samples_merge(samples_t *dst, const samples_t *src);
void samples_free(samples_t *s);
/* The q-quantile (0 = min, 0.5 = median, 1 = max), interpolated; NAN when empty. Sorts. */
double samples_quantile(samples_t *s, double q);

/* Formats v rounded to an integer with thousands separators ("12,345"), or "n/a". */
const char *fmt_num(char *buf, size_t len, double v);
#define NUM(v) fmt_num((char[40]){0}, 40, (v))

/* Fills buf with a pseudo-random pattern (xorshift64), so that a misplaced block shows. */
void fill_pattern(uint8_t *buf, size_t len);

/* Spawns argv (searched on $PATH) with its stdout on a pipe whose read end is returned. */
status_t spawn_piped(char *const argv[], pid_t *ret_pid, int *ret_fd, status_msg_t *err);
/* Waits for pid, killing it when it has not exited within timeout_ms. */
int reap_child(pid_t pid, int64_t timeout_ms);
/* A port on 127.0.0.1 that was free a moment ago. */
int free_port(void);

/* Runs `iperf3 -s -1` on a free 127.0.0.1 port and one single-stream client against it for
 * `seconds`; *ret_mbps is what the client reports received, in MB/s. */
status_t run_iperf(long seconds, double *ret_mbps, status_msg_t *err);

/* What a benchmark measures once its tessera-ps is up, against target. */
/* Starts a tessera-ps (path NULL: the one beside this program) on 127.0.0.1 with --threads and
 * the extra flags (NULL-terminated, may be NULL); ret_shown gets its path. Call before
 * grpc_init() or from a process whose gRPC threads cannot be forked into (posix_spawn). */
status_t bench_start_ps(const char *path, int threads, char *const *extra, launch_proc_t *ps,
                        char *ret_shown, size_t len, status_msg_t *err);

/* Stops it with SIGTERM; false (and a message) when it did not exit cleanly. */
bool bench_stop_ps(const char *prog, launch_proc_t *ps);

/* A body runs against the PS at target, whose metrics endpoint is at metrics. */
typedef status_t (*bench_body_fn)(const void *opts, const char *target, const char *metrics,
                                  status_msg_t *err);

/* The main both PS benchmarks share, after their flags are parsed: prints the header (title,
 * the host, client_line, units), starts the tessera-ps at ps_path (NULL: the one beside this
 * program) on 127.0.0.1 with `threads` handler threads, runs body against it under gRPC, stops
 * it, and reports an unclean stop or body's error on stderr as prog. Returns the exit status: 0
 * when everything ran. */
int bench_against_ps(const char *prog, const char *title, const char *client_line,
                     const char *ps_path, int threads, bench_body_fn body, const void *opts);

#endif
