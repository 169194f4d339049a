/* One rank of Tessera's ring all-reduce (worker/ring.c) for bench/allreduce/run.sh: listens,
 * connects the ring, then all-reduces float32 buffers of each size asked for, a few times, and
 * prints one JSON line per size with the median time. Run one process per rank:
 *
 *   bench-allreduce --rank R --size P --listen HOST:PORT --next HOST:PORT --mib 4,64,256
 *                   [--iters N] [--warmup N]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "ring.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int rank = -1, size = 0, iters = 5, warmup = 2, fd, port;
    const char *listen = NULL, *next = NULL, *mib = "4,64,256";
    status_msg_t err = {0};
    ring_t *r = NULL;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rank") == 0)
            rank = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--size") == 0)
            size = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--listen") == 0)
            listen = argv[i + 1];
        else if (strcmp(argv[i], "--next") == 0)
            next = argv[i + 1];
        else if (strcmp(argv[i], "--mib") == 0)
            mib = argv[i + 1];
        else if (strcmp(argv[i], "--iters") == 0)
            iters = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--warmup") == 0)
            warmup = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench-allreduce: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (rank < 0 || size < 1 || listen == NULL || next == NULL || iters < 1 || iters > 1000) {
        fprintf(stderr, "usage: bench-allreduce --rank R --size P --listen HOST:PORT --next "
                        "HOST:PORT [--mib 4,64,256] [--iters N] [--warmup N]\n");
        return 2;
    }
    if (ring_listen(listen, &fd, &port, &err) != STATUS_OK ||
        ring_connect(&(ring_opts_t){.rank = rank,
                                    .size = size,
                                    .listen_fd = fd,
                                    .next_address = next,
                                    .token = 1,
                                    .timeout_ms = 60000},
                     &r, &err) != STATUS_OK) {
        fprintf(stderr, "bench-allreduce: rank %d: %s\n", rank, err.text);
        return 1;
    }
    for (const char *p = mib; *p != '\0';) {
        char *end;
        long m = strtol(p, &end, 10);
        size_t n = (size_t)m * (1u << 20) / sizeof(float);
        float *buf = malloc(n * sizeof(float));
        double *t = calloc((size_t)iters, sizeof(double));
        if (m <= 0 || buf == NULL || t == NULL) {
            fprintf(stderr, "bench-allreduce: bad size '%s'\n", p);
            return 2;
        }
        for (size_t i = 0; i < n; i++)
            buf[i] = (float)(i % 7);
        for (int k = 0; k < warmup + iters; k++) {
            float one = 1;
            double t0;
            /* a barrier, as the peer's: one float all-reduced */
            if (ring_allreduce(r, &one, 1, &err) != STATUS_OK) {
                fprintf(stderr, "bench-allreduce: rank %d: %s\n", rank, err.text);
                return 1;
            }
            t0 = clock_now_s();
            if (ring_allreduce(r, buf, n, &err) != STATUS_OK) {
                fprintf(stderr, "bench-allreduce: rank %d: %s\n", rank, err.text);
                return 1;
            }
            if (k >= warmup)
                t[k - warmup] = clock_now_s() - t0;
            for (size_t i = 0; i < n; i += 4096) /* keep the values small */
                buf[i] = (float)(i % 7);
        }
        qsort(t, (size_t)iters, sizeof(double), cmp_double);
        if (rank == 0)
            printf("{\"side\": \"tessera\", \"mib\": %ld, \"ranks\": %d, \"seconds\": %.6f}\n", m,
                   size, t[iters / 2]);
        fflush(stdout);
        free(buf);
        free(t);
        p = *end == ',' ? end + 1 : end;
    }
    ring_free(r);
    return 0;
}
