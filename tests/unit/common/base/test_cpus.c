/* The CPUs a worker computes on by default: the affinity mask within the cgroup CPU quotas. */
#define _GNU_SOURCE
#include <check.h>
#include <ftw.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cpus.h"
#include "check_run.h"

static char root[64];

/* A cgroup hierarchy under a fresh directory: `dir` (relative, "" for the root) with cpu.max
 * holding `max` (NULL: no file). */
static void cgroup(const char *dir, const char *max)
{
    char path[256];

    snprintf(path, sizeof(path), "%s/%s", root, dir);
    ck_assert(mkdir(path, 0700) == 0 || access(path, F_OK) == 0);
    if (max != NULL) {
        FILE *f;
        snprintf(path, sizeof(path), "%s/%s/cpu.max", root, dir);
        ck_assert_ptr_nonnull(f = fopen(path, "w"));
        fputs(max, f);
        fclose(f);
    }
}

/* The process's /proc/self/cgroup, as a file. */
static const char *proc_cgroup(const char *text)
{
    static char path[96];
    FILE *f;

    snprintf(path, sizeof(path), "%s/proc-cgroup", root);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs(text, f);
    fclose(f);
    return path;
}

static void make_root(void)
{
    snprintf(root, sizeof(root), "/tmp/tessera-test-cpus.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(root));
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_root(void)
{
    nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

START_TEST(the_tightest_quota_on_the_way_to_the_root_wins_rounded_up)
{
    make_root();
    cgroup("kubepods", "400000 100000\n");          /* 4 CPUs */
    cgroup("kubepods/pod1", "max 100000\n");        /* no quota of its own */
    cgroup("kubepods/pod1/ctr", "150000 100000\n"); /* 1.5 CPUs: 2 threads */
    ck_assert_int_eq(cpus_limit(proc_cgroup("0::/kubepods/pod1/ctr\n"), root, 16), 2);
    /* a looser quota below a tighter one: the tighter */
    cgroup("kubepods/pod2", NULL);
    cgroup("kubepods/pod2/ctr", "800000 100000\n");
    ck_assert_int_eq(cpus_limit(proc_cgroup("0::/kubepods/pod2/ctr\n"), root, 16), 4);
    /* fewer CPUs in the mask than the quota allows: the mask */
    ck_assert_int_eq(cpus_limit(proc_cgroup("0::/kubepods/pod1/ctr\n"), root, 1), 1);
    /* a hybrid hierarchy lists the v1 controllers first */
    ck_assert_int_eq(
        cpus_limit(proc_cgroup("4:memory:/x\n1:cpu:/\n0::/kubepods/pod1/ctr\n"), root, 16), 2);
    /* a container in a cgroup namespace of its own sits at "/": the root's cpu.max is its
     * limit, and it bounds every cgroup below it too */
    cgroup("", "250000 100000\n");
    ck_assert_int_eq(cpus_limit(proc_cgroup("0::/\n"), root, 16), 3);
    ck_assert_int_eq(cpus_limit(proc_cgroup("0::/kubepods/pod2/ctr\n"), root, 16), 3);
    remove_root();
}
END_TEST

START_TEST(without_a_quota_the_mask_counts)
{
    cpu_set_t set;

    make_root();
    cgroup("system.slice", "max 100000\n");
    cgroup("system.slice/tessera-worker.service", NULL);
    ck_assert_int_eq(cpus_limit(proc_cgroup("0::/system.slice/tessera-worker.service\n"), root, 3),
                     3);
    ck_assert_int_eq(cpus_limit(proc_cgroup("0::/\n"), root, 3), 3);
    ck_assert_int_eq(cpus_limit(proc_cgroup("1:cpu:/\n"), root, 3), 3); /* cgroup v1 only */
    ck_assert_int_eq(cpus_limit("/nonexistent/cgroup", root, 3), 3);
    /* a path that is not there, or a cpu.max that does not parse, is no quota */
    ck_assert_int_eq(cpus_limit(proc_cgroup("0::/gone/away\n"), root, 5), 5);
    cgroup("bad", "lots 100000\n");
    ck_assert_int_eq(cpus_limit(proc_cgroup("0::/bad\n"), root, 5), 5);
    cgroup("zero", "0 100000\n");
    ck_assert_int_eq(cpus_limit(proc_cgroup("0::/zero\n"), root, 5), 5);
    ck_assert_int_eq(cpus_limit(proc_cgroup("0::/\n"), root, 0), 1);
    /* this process: its mask, or less */
    ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    ck_assert_int_ge(cpus_available(), 1);
    ck_assert_int_le(cpus_available(), CPU_COUNT(&set));
    remove_root();
}
END_TEST

static Suite *cpus_suite(void)
{
    Suite *s = suite_create("cpus");
    TCase *tc = tcase_create("cpus");

    tcase_add_test(tc, the_tightest_quota_on_the_way_to_the_root_wins_rounded_up);
    tcase_add_test(tc, without_a_quota_the_mask_counts);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(cpus_suite(), CK_FORK);
}
