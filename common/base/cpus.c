/* CPUs this process may use: the affinity mask within the cgroup v2 CPU quotas. */
#define _GNU_SOURCE
#include "base/cpus.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The CPUs cpu.max in `dir` allows, rounded up; 0 when it sets no quota or cannot be read.
 * The file is "max PERIOD" or "QUOTA PERIOD" in microseconds. */
static long quota_cpus(const char *dir)
{
    char path[PATH_MAX + 16], word[32];
    long long quota, period;
    FILE *f;
    int n;

    if (snprintf(path, sizeof(path), "%s/cpu.max", dir) >= (int)sizeof(path))
        return 0;
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    n = fscanf(f, "%31s %lld", word, &period);
    fclose(f);
    if (n != 2 || strcmp(word, "max") == 0 || sscanf(word, "%lld", &quota) != 1 || quota <= 0 ||
        period <= 0)
        return 0;
    return (long)((quota + period - 1) / period);
}

/* The cgroup v2 path of the process ("0::/system.slice/x.service"), "" when there is none. */
static void cgroup_path(const char *proc_cgroup, char *out, size_t len)
{
    char line[PATH_MAX + 8];
    FILE *f = fopen(proc_cgroup, "r");

    out[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "0::/", 4) == 0) {
            line[strcspn(line, "\n")] = '\0';
            size_t n = strlen(line + 3);
            /* a kernel path: never "..", nor too long, but neither followed */
            if (strstr(line + 3, "/..") == NULL && n < len)
                memcpy(out, line + 3, n + 1);
            break;
        }
    fclose(f);
}

int cpus_limit(const char *proc_cgroup, const char *cgroup_root, int affinity)
{
    char rel[PATH_MAX], dir[PATH_MAX + PATH_MAX];
    long cpus = affinity > 0 ? affinity : 1;

    cgroup_path(proc_cgroup, rel, sizeof(rel));
    if (rel[0] == '\0')
        return (int)cpus;
    /* From the process's own cgroup up to the root. A host's root has no cpu.max, but in a
     * container's cgroup namespace (Docker, containerd under Kubernetes) the process sits at
     * "/" and the root's cpu.max is the container's limit. */
    for (size_t end = strlen(rel);;) {
        long q;
        rel[end] = '\0';
        snprintf(dir, sizeof(dir), "%s%s", cgroup_root, rel);
        if ((q = quota_cpus(dir)) > 0 && q < cpus)
            cpus = q;
        if (end <= 1)
            break;
        while (end > 0 && rel[end - 1] != '/')
            end--;
        if (end > 1)
            end--; /* the slash before the last part; the root keeps its "/" */
    }
    return (int)cpus;
}

int cpus_available(void)
{
    cpu_set_t set;
    long affinity = 0;

    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        affinity = CPU_COUNT(&set);
    if (affinity <= 0)
        affinity = sysconf(_SC_NPROCESSORS_ONLN);
    if (affinity <= 0 || affinity > INT_MAX)
        affinity = 1;
    return cpus_limit("/proc/self/cgroup", "/sys/fs/cgroup", (int)affinity);
}
