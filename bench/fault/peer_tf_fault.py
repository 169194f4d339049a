"""TensorFlow peer of bench/fault: ParameterServerStrategy with a ClusterCoordinator, one PS and
two workers (bench/ps/peer_tf_ps.py's cluster and model: Fashion-MNIST, 784-128 relu-10, Adam,
batch 64), hit the way bench/fault hits Tessera:

  killed   worker 1 gets SIGKILL mid-training: the longest time without a completed closure
           (TensorFlow has no health check: a closure that fails on the dead worker is given to
           the other one; the report's "noticed" is that first failed closure, seen as the stall)
  hung     worker 1 gets SIGSTOP: whether the closures still complete within --worker-timeout
           seconds (the coordinator waits for the stopped worker's closure), then SIGCONT and
           the seconds until they do
  ps       the PS gets SIGKILL and is started again at its address 1 s later: what the program
           sees (TensorFlow fails the program; its users restart it from a checkpoint)

The chief schedules closures of 10 steps two at a time (one per worker) and joins each pair on a
thread, so that a join that never returns is seen. Prints one JSON line; logs to stderr.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ps"))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
import peer_tf_ps as ps  # noqa: E402

K = 10  # steps per closure


def build(cluster):
    strategy, coordinator = ps.connect(cluster)
    train_steps, iterator = ps.build_steps(strategy, coordinator, [128], 64, 1, K)

    def pair(timeout):
        """Two closures and a join; the seconds it took, or None when it did not end in time
        (then the join goes on, on its thread), or the exception it raised."""
        out = {}

        def go():
            try:
                for _ in range(2):
                    coordinator.schedule(train_steps, args=(iterator,))
                coordinator.join()
            except Exception as e:  # what TensorFlow raises to the program
                out["error"] = e
            out["done"] = time.monotonic()

        t0 = time.monotonic()
        th = threading.Thread(target=go, daemon=True)
        th.start()
        th.join(timeout)
        if "done" not in out:
            return None, th
        if "error" in out:
            return out["error"], th
        return out["done"] - t0, th

    return pair


def scenario(kind, args):
    cluster = ps.Cluster(workers=2)
    cluster.reserve_ports()
    procs = cluster.start()
    cluster.wait_listening()
    pair = build(cluster)
    res = {}
    try:
        for _ in range(20):  # warm up: tracing, connections
            pair(120)
        if kind == "killed":
            t_kill = time.monotonic()
            os.killpg(procs[("worker", 1)].pid, signal.SIGKILL)
            longest = 0.0
            for _ in range(30):
                took, _ = pair(args.worker_timeout)
                if took is None or isinstance(took, Exception):
                    res["killed_stall"] = "no closure for %d s" % args.worker_timeout
                    break
                longest = max(longest, took)
            else:
                res["killed_stall"] = longest
                res["killed_noticed"] = "by its failed closure"
            ps.log("killed: %r (%.1f s after the kill)" % (res, time.monotonic() - t_kill))
        elif kind == "hung":
            os.killpg(procs[("worker", 1)].pid, signal.SIGSTOP)
            took, th = None, None
            for _ in range(30):
                took, th = pair(args.worker_timeout)
                if took is None or isinstance(took, Exception):
                    break
            if took is None:
                res["hung_noticed"] = "never (%d s)" % args.worker_timeout
                res["hung_stall"] = "> %d s" % args.worker_timeout
                t_cont = time.monotonic()
                os.killpg(procs[("worker", 1)].pid, signal.SIGCONT)
                th.join(120)
                res["hung_back"] = time.monotonic() - t_cont if not th.is_alive() else "never"
            else:
                res["hung_noticed"] = "kept training"
            ps.log("hung: %r" % res)
        else:
            os.killpg(procs[("ps", 0)].pid, signal.SIGKILL)
            t_kill = time.monotonic()
            time.sleep(1)
            cluster.start_task("ps", 0)
            took = None
            for _ in range(30):
                took, _ = pair(args.worker_timeout)
                if took is None or isinstance(took, Exception):
                    break
            if isinstance(took, Exception):
                res["ps_killed"] = "the program fails after %.1f s: %s" % (
                    time.monotonic() - t_kill, type(took).__name__)
            elif took is None:
                res["ps_killed"] = "hangs (%d s)" % args.worker_timeout
            else:
                res["ps_killed"] = "goes on, variables lost"
            ps.log("ps: %r" % res)
    finally:
        cluster.stop()
    return res


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker-timeout", type=int, default=60,
                    help="seconds to wait for closures before calling the job hung")
    ap.add_argument("--scenario", choices=["killed", "hung", "ps"])
    ap.add_argument("--role", choices=["chief", "ps", "worker"], default="chief")
    args = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.role != "chief":
        ps.serve(args.role)
        return
    if args.scenario:  # one cluster per process: TensorFlow connects a program to one cluster
        print(json.dumps(scenario(args.scenario, args)), flush=True)
        sys.stderr.flush()
        os._exit(0)
    import tensorflow as tf

    out = {"version": "tensorflow %s" % tf.__version__,
           "chief_killed": "the program is gone: restart it from a checkpoint"}
    for kind in ("killed", "hung", "ps"):
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--scenario", kind,
                            "--worker-timeout", str(args.worker_timeout)],
                           stdout=subprocess.PIPE, text=True)
        lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
        if p.returncode != 0 or not lines:
            ps.fail("the %s scenario failed (exit %d)" % (kind, p.returncode))
        out.update(json.loads(lines[-1]))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
