/* Suite `slow`: a seeded random schedule of 20 kills (SIGKILL) over one long job, of workers,
 * the parameter server and the chief, each restarted at its address after a random pause, as
 * systemd or Kubernetes would. The job finishes with every step counted exactly once and still
 * learns. TESSERA_FAULT_SEED picks the schedule (default 1); the test prints it.
 *
 *   meson test -C build --setup slow --suite slow */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "base/clock.h"
#include "check_run.h"
#include "fault_util.h"

#define KILLS  20
#define EPOCHS 120 /* of 250 steps */

/* A small, repeatable generator: the schedule depends on the seed only. */
static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int64_t job_step(cluster_t *c, const char *id, Tessera__V1__JobState *state)
{
    Tessera__V1__JobInfo *job = get_job(c, id);
    int64_t step = job->progress ? job->progress->step : 0;

    *state = job->state;
    protobuf_c_message_free_unpacked(&job->base, NULL);
    return step;
}

/* Waits until the job is past `step` (two minutes at most: a restore redoes steps). */
static void wait_step(cluster_t *c, const char *id, int64_t step)
{
    double until = clock_now_s() + 120;
    Tessera__V1__JobState state;
    int64_t now;

    while ((now = job_step(c, id, &state)) <= step) {
        ck_assert_msg(state == TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING ||
                          state == TESSERA__V1__JOB_STATE__JOB_STATE_QUEUED,
                      "job %s ended (state %d) at step %lld, before the schedule did", id,
                      (int)state, (long long)now);
        ck_assert_msg(clock_now_s() < until, "job %s is stuck at step %lld", id, (long long)now);
        usleep(50000);
    }
}

START_TEST(slow_twenty_random_kills_the_job_completes)
{
    static const char *const names[] = {"worker 0", "worker 1", "ps", "chief"};
    const char *seed_env = getenv("TESSERA_FAULT_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : 1, rng;
    char state[400], ps_flag[300], worker_flag[400], listen[4][300], name[64], *out = NULL, *id;
    int kills[4] = {0};
    cluster_t c;
    double t0 = clock_now_s();

    rng = seed * 0x9E3779B97F4A7C15ull + 1;
    printf("kill schedule seed %llu (TESSERA_FAULT_SEED)\n", (unsigned long long)seed);
    snprintf(state, sizeof(state), "--state-dir=%s/slow-state", harness_tmpdir());
    start_cluster_with(&c, 2, NULL, state);
    snprintf(listen[0], sizeof(listen[0]), "--listen=%s", c.worker[0].listen);
    snprintf(listen[1], sizeof(listen[1]), "--listen=%s", c.worker[1].listen);
    snprintf(listen[2], sizeof(listen[2]), "--listen=%s", c.ps.listen);
    snprintf(listen[3], sizeof(listen[3]), "--listen=%s", c.chief.listen);
    snprintf(ps_flag, sizeof(ps_flag), "--ps=%s", c.ps.listen);
    snprintf(worker_flag, sizeof(worker_flag), "--worker=%s,%s", c.worker[0].listen,
             c.worker[1].listen);
    id = submit(&c, write_job_of("schedule", "schedule", EPOCHS));
    for (int k = 0; k < KILLS; k++) {
        Tessera__V1__JobState st;
        int64_t at = job_step(&c, id, &st) + 200 + (int64_t)(next_rand(&rng) % 600);
        int victim = (int)(next_rand(&rng) % 10);
        victim = victim < 3 ? 0 : victim < 6 ? 1 : victim < 8 ? 2 : 3;
        wait_step(&c, id, at);
        printf("kill %2d at step %6lld: %s\n", k + 1, (long long)at, names[victim]);
        snprintf(name, sizeof(name), "slow-%s-%d", victim < 2 ? "worker" : names[victim], k);
        if (victim < 2) {
            char index[32];
            launch_stop(&c.worker[victim], SIGKILL, 5000, NULL);
            usleep(200000 + (useconds_t)(next_rand(&rng) % 800000));
            snprintf(index, sizeof(index), "--task-index=%d", victim);
            harness_start(&c.worker[victim], "tessera-worker", name, index, listen[victim], NULL);
        } else if (victim == 2) {
            launch_stop(&c.ps, SIGKILL, 5000, NULL);
            usleep(200000 + (useconds_t)(next_rand(&rng) % 800000));
            harness_start(&c.ps, "tessera-ps", name, "--task-index=0", listen[2], NULL);
        } else {
            launch_stop(&c.chief, SIGKILL, 5000, NULL);
            usleep(200000 + (useconds_t)(next_rand(&rng) % 800000));
            harness_start(&c.chief, "tessera-chief", name, ps_flag, worker_flag, listen[3], state,
                          "--worker-timeout=3s", NULL);
        }
        kills[victim]++;
    }
    expect_completed_steps(&c, id, EPOCHS * 250, &out);
    printf("%d kills (workers %d and %d, ps %d, chief %d) in %.0f s: test accuracy %.4f\n", KILLS,
           kills[0], kills[1], kills[2], kills[3], clock_now_s() - t0, test_accuracy(out));
    ck_assert_msg(test_accuracy(out) >= 0.75, "%s", out);
    free(out);
    free(id);
    stop_cluster(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("slow");
    TCase *tc = tcase_create("slow");

    grpc_init();
    tcase_set_timeout(tc, 1800);
    tcase_add_test(tc, slow_twenty_random_kills_the_job_completes);
    suite_add_tcase(s, tc);
    int rc = check_run(s, CK_NOFORK);
    grpc_shutdown();
    return rc;
}
