/* The ring all-reduce of synchronous training (worker/ring.c), its ranks on threads of this
 * process over real TCP connections on loopback: exact sums of integer-valued floats for 2, 3
 * and 4 ranks and odd sizes, in plain TCP and in TLS 1.3 (mutual TLS on), the same bits on
 * every rank, and a rank that never comes or goes away named in the error. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "ring.h"
#include "rpc/security.h"

#define MAX_RANKS 4

typedef struct rank_arg {
    int rank, size, listen_fd, timeout_ms;
    char next[64];
    uint64_t token;
    size_t n;
    float *buf;
    int rounds;      /* all-reduces to run */
    bool quit_early; /* connect, then leave without reducing */
    status_t rc;
    status_msg_t err;
} rank_arg_t;

static void *rank_main(void *arg)
{
    rank_arg_t *a = arg;
    ring_opts_t o = {.rank = a->rank,
                     .size = a->size,
                     .listen_fd = a->listen_fd,
                     .next_address = a->next,
                     .token = a->token,
                     .timeout_ms = a->timeout_ms};
    ring_t *r = NULL;

    a->rc = ring_connect(&o, &r, &a->err);
    for (int i = 0; a->rc == STATUS_OK && !a->quit_early && i < a->rounds; i++)
        a->rc = ring_allreduce(r, a->buf, a->n, &a->err);
    ring_free(r);
    return NULL;
}

/* Ranks 0..size-1 on threads, each with its own listener; a[] filled by the caller after. */
static void setup(rank_arg_t *a, int size, size_t n)
{
    int port[MAX_RANKS];
    status_msg_t err = {0};

    for (int r = 0; r < size; r++) {
        memset(&a[r], 0, sizeof(a[r]));
        ck_assert_msg(ring_listen("127.0.0.1:0", &a[r].listen_fd, &port[r], &err) == STATUS_OK,
                      "%s", err.text);
    }
    for (int r = 0; r < size; r++) {
        a[r].rank = r;
        a[r].size = size;
        a[r].token = 0x1234567890abcdefull;
        a[r].timeout_ms = 5000;
        a[r].rounds = 1;
        a[r].n = n;
        snprintf(a[r].next, sizeof(a[r].next), "127.0.0.1:%d", port[(r + 1) % size]);
        a[r].buf = malloc((n + 1) * sizeof(float));
        for (size_t i = 0; i < n; i++) /* integers: every order of summing gives the same */
            a[r].buf[i] = (float)((i * 7 + (size_t)r * 13) % 1000) - 300;
    }
}

static void run(rank_arg_t *a, int size)
{
    pthread_t tid[MAX_RANKS];

    for (int r = 0; r < size; r++)
        ck_assert_int_eq(pthread_create(&tid[r], NULL, rank_main, &a[r]), 0);
    for (int r = 0; r < size; r++)
        pthread_join(tid[r], NULL);
}

static void teardown(rank_arg_t *a, int size)
{
    for (int r = 0; r < size; r++) {
        if (a[r].listen_fd >= 0)
            close(a[r].listen_fd);
        free(a[r].buf);
    }
}

static void check_exact_sums(const size_t *sizes, size_t n_sizes)
{
    rank_arg_t a[MAX_RANKS];

    for (int size = 2; size <= MAX_RANKS; size++)
        for (size_t k = 0; k < n_sizes; k++) {
            size_t n = sizes[k];
            setup(a, size, n);
            for (int r = 0; r < size; r++)
                a[r].rounds = 2; /* twice: the second sums the first's results */
            run(a, size);
            for (int r = 0; r < size; r++)
                ck_assert_msg(a[r].rc == STATUS_OK, "%d ranks, n %zu, rank %d: %s", size, n, r,
                              a[r].err.text);
            for (size_t i = 0; i < n; i++) {
                double want = 0;
                for (int r = 0; r < size; r++)
                    want += (double)((i * 7 + (size_t)r * 13) % 1000) - 300;
                want *= size; /* the second round */
                ck_assert_msg(a[0].buf[i] == (float)want, "%d ranks, n %zu: [%zu] = %g, not %g",
                              size, n, i, a[0].buf[i], want);
            }
            for (int r = 1; r < size; r++)
                ck_assert_msg(memcmp(a[0].buf, a[r].buf, n * sizeof(float)) == 0,
                              "%d ranks, n %zu: rank %d differs from rank 0", size, n, r);
            teardown(a, size);
        }
}

START_TEST(sums_are_exact_and_the_same_on_every_rank)
{
    static const size_t sizes[] = {1, 2, 7, 1001, 100003, 1 << 20};
    check_exact_sums(sizes, sizeof(sizes) / sizeof(sizes[0]));
}
END_TEST

/* With mutual TLS on, every link is a TLS 1.3 connection between two worker certificates (all
 * ranks here share one): the handshakes of 2, 3 and 4 ranks do not wait on each other round
 * the ring, and the sums stay exact. */
START_TEST(in_tls_sums_are_exact_too)
{
    static const size_t sizes[] = {7, 100003};
    const char *build = getenv("TESSERA_BUILD_DIR");
    char dir[] = "/tmp/ring-tls-XXXXXX", cmd[1024], cert[200], key[200], ca[200];
    status_msg_t err = {0};

    ck_assert_ptr_nonnull(build);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "%s/tessera certs init --dir %s >/dev/null && %s/tessera certs issue --dir %s "
             "worker 0 --host 127.0.0.1 >/dev/null",
             build, dir, build, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cert, sizeof(cert), "%s/worker-0.crt", dir);
    snprintf(key, sizeof(key), "%s/worker-0.key", dir);
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    ck_assert_msg(rpc_security_init(cert, key, ca, &err) == STATUS_OK, "%s", err.text);
    check_exact_sums(sizes, sizeof(sizes) / sizeof(sizes[0]));
    rpc_security_done();
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Ranks whose sums are not integers still agree bit for bit. */
START_TEST(every_rank_gets_the_same_bits)
{
    rank_arg_t a[MAX_RANKS];
    size_t n = 12345;

    setup(a, 3, n);
    for (int r = 0; r < 3; r++)
        for (size_t i = 0; i < n; i++)
            a[r].buf[i] = 1.0f / (float)(i + 1 + (size_t)r * 3);
    run(a, 3);
    for (int r = 0; r < 3; r++)
        ck_assert_msg(a[r].rc == STATUS_OK, "rank %d: %s", r, a[r].err.text);
    ck_assert(memcmp(a[0].buf, a[1].buf, n * sizeof(float)) == 0);
    ck_assert(memcmp(a[0].buf, a[2].buf, n * sizeof(float)) == 0);
    teardown(a, 3);
}
END_TEST

/* A rank that never connects, one with another job's token, and one that leaves: the others
 * fail within the timeout, naming the rank they waited on. */
START_TEST(a_missing_or_departed_rank_is_named)
{
    rank_arg_t a[MAX_RANKS];
    pthread_t tid[MAX_RANKS];

    setup(a, 3, 1000);
    for (int r = 0; r < 3; r++)
        a[r].timeout_ms = 500;
    /* rank 2 never starts: rank 0 waits for it to connect, rank 1 cannot reach it */
    close(a[2].listen_fd);
    a[2].listen_fd = -1;
    for (int r = 0; r < 2; r++)
        ck_assert_int_eq(pthread_create(&tid[r], NULL, rank_main, &a[r]), 0);
    for (int r = 0; r < 2; r++)
        pthread_join(tid[r], NULL);
    ck_assert_int_eq(a[0].rc, STATUS_TIMEOUT);
    ck_assert_msg(strstr(a[0].err.text, "rank 2 did not connect") != NULL, "%s", a[0].err.text);
    ck_assert_int_eq(a[1].rc, STATUS_UNAVAILABLE);
    ck_assert_msg(strstr(a[1].err.text, "rank 2 at 127.0.0.1:") != NULL, "%s", a[1].err.text);
    teardown(a, 3);

    /* rank 1 carries another token: rank 2 refuses it and times out */
    setup(a, 3, 1000);
    for (int r = 0; r < 3; r++)
        a[r].timeout_ms = 500;
    a[1].token = 42;
    run(a, 3);
    ck_assert_int_eq(a[2].rc, STATUS_TIMEOUT);
    ck_assert_msg(strstr(a[2].err.text, "rank 1 did not connect") != NULL, "%s", a[2].err.text);
    teardown(a, 3);

    /* rank 1 connects and leaves: its neighbours fail at once, naming it */
    setup(a, 3, 1 << 20);
    a[1].quit_early = true;
    run(a, 3);
    ck_assert_int_eq(a[1].rc, STATUS_OK);
    ck_assert_int_ne(a[2].rc, STATUS_OK);
    ck_assert_msg(strstr(a[2].err.text, "rank 1") != NULL, "%s", a[2].err.text);
    ck_assert_int_ne(a[0].rc, STATUS_OK);
    teardown(a, 3);
}
END_TEST

static Suite *ring_suite(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("ring");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, sums_are_exact_and_the_same_on_every_rank);
    tcase_add_test(tc, in_tls_sums_are_exact_too);
    tcase_add_test(tc, every_rank_gets_the_same_bits);
    tcase_add_test(tc, a_missing_or_departed_rank_is_named);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(ring_suite(), CK_FORK);
}
