/* How many CPUs this process may compute on. */
#ifndef TESSERA_CPUS_H
#define TESSERA_CPUS_H

/* The CPUs of this process's affinity mask (taskset, systemd's CPUAffinity=, a container's
 * cpuset), at most the CPU quota of its cgroup v2 and of every cgroup above it, rounded up
 * (Kubernetes' CPU limit, systemd's CPUQuota=); at least 1. The default thread count of the
 * worker's compute pool, the PS's updates and the local replicas. */
int cpus_available(void);

/* The same from given files (tests): `proc_cgroup` names the process's cgroup as
 * /proc/self/cgroup does, `cgroup_root` is where the cgroup v2 hierarchy is mounted, and
 * `affinity` the CPUs of the mask (the limit when the quotas allow more). */
int cpus_limit(const char *proc_cgroup, const char *cgroup_root, int affinity);

#endif
