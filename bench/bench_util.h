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

/* Starts the tessera-ps at path (NULL: the one beside this program) on 127.0.0.1 with `threads`
 * handler threads and waits for it to be ready; ret_shown gets its resolved path (len >=
 * PATH_MAX). */
status_t bench_start_ps(const char *path, int threads, launch_proc_t *ps, char *ret_shown,
                        size_t len, status_msg_t *err);

/* Stops the server, reports an unclean stop or rc's error (err) on stderr, and returns the exit
 * status of a benchmark program: 0 when everything ran. */
int bench_finish(const char *prog, launch_proc_t *ps, status_t rc, const status_msg_t *err);

#endif
