"""bench/fault: how Tessera's parameter-server training lives through failures, beside
TensorFlow 2.15's ParameterServerStrategy with the same failures on the same machine.

    bench/fault/run.sh [--rounds N] [--worker-timeout 10s] [--no-install]

Tessera: a chief (with --state-dir), one PS and two workers started here as real processes on
127.0.0.1, training the Fashion-MNIST MLP (784-128-10, Adam, batch 64, a checkpoint every 200
steps). Each scenario runs one job and hits it once mid-way:

  worker killed   SIGKILL of worker 1: seconds until the chief counts the failure
                  (tessera_chief_task_failures_total), and the longest time without a completed
                  closure around it (the job's stall).
  worker hung     SIGSTOP of worker 1 (its connections stay open): seconds until the chief gives
                  up on it (--worker-timeout, default 10 s), the stall; then SIGCONT and the
                  seconds until it is back in the job (tessera_chief_worker_rejoins_total).
  ps killed       SIGKILL of the PS, started again 1 s later at its address: seconds from its
                  restart to the first completed closure, and the steps redone (the step at the
                  kill minus the checkpoint's, from the chief's `restored from step N` event).
  chief killed    SIGKILL of the chief, started again at once on its --state-dir: the same two.

Each job must then finish with every step counted; the report gives medians over --rounds.

TensorFlow (tensorflow-cpu 2.15.1 in .venv-bench/tf-ps, peer_tf_fault.py): a coordinator, one
PS and two workers, the same model and data, the worker killed, the worker stopped and the PS
killed the same way; its figures are the stall after the kill, whether the job finishes (and in
how long) with a worker stopped, and what happens when the PS is killed.

Exit status 0 unless a Tessera job failed to finish. Speeds are not compared: this is about
failures.
"""

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "train"))
import bench as train_bench  # noqa: E402  (bench/train's venv helpers)

TF_PACKAGES = ["tensorflow-cpu==2.15.1", "numpy<2"]
PROG = "bench/fault"
JOB = """name: fault-%(name)s
strategy: parameter_server
model:
  - {dense: {units: 128, activation: relu}, input_shape: [784]}
  - {dense: {units: 10}}
loss: {sparse_categorical_crossentropy: {from_logits: true}}
metrics: [accuracy]
optimizer: {adam: {learning_rate: 0.001}}
data:
  train: {format: idx, images: %(ds)s/train-images-idx3-ubyte.gz,
          labels: %(ds)s/train-labels-idx1-ubyte.gz}
  test: {format: idx, images: %(ds)s/t10k-images-idx3-ubyte.gz,
         labels: %(ds)s/t10k-labels-idx1-ubyte.gz}
  scale: 0.00392156862745098
  batch_size: 64
train: {epochs: %(epochs)d}
checkpoint: {dir: %(ckpt)s, every_steps: 200, keep: 2}
"""
DATASET = "/usr/share/datasets/fashion-mnist"


def log(msg):
    print("%s: %s" % (PROG, msg), file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Task:
    """One daemon: its flags, its log, started and stopped at will at the same address."""

    def __init__(self, build, program, name, workdir, flags):
        self.program = os.path.join(build, program)
        self.name = name
        self.listen = "127.0.0.1:%d" % free_port()
        self.metrics = "127.0.0.1:%d" % free_port()
        self.flags = flags
        self.log_path = os.path.join(workdir, name + ".log")
        self.proc = None

    def start(self):
        out = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [self.program, "--listen", self.listen, "--metrics-listen", self.metrics,
             "--data-root", "/"]
            + self.flags, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        out.close()
        host, port = self.listen.rsplit(":", 1)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return time.monotonic()
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("%s did not start (see %s)" % (self.name, self.log_path))
                time.sleep(0.01)

    def signal(self, sig):
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    def metric(self, series):
        with urllib.request.urlopen("http://%s/metrics" % self.metrics, timeout=5) as r:
            body = r.read().decode()
        m = re.search(r"^%s (\S+)$" % re.escape(series), body, re.M)
        return float(m.group(1)) if m else 0.0


class Cluster:
    def __init__(self, build, workdir, worker_timeout):
        self.build = build
        self.ps = Task(build, "tessera-ps", "ps", workdir, [])
        # the two workers share the machine's CPUs, as tessera run --local shares them
        threads = str(max(1, len(os.sched_getaffinity(0)) // 2))
        self.workers = [Task(build, "tessera-worker", "worker%d" % i, workdir,
                             ["--task-index", str(i), "--compute-threads", threads])
                        for i in range(2)]
        self.chief = Task(build, "tessera-chief", "chief", workdir, [
            "--ps", self.ps.listen,
            "--worker", ",".join(w.listen for w in self.workers),
            "--worker-timeout", worker_timeout,
            "--state-dir", os.path.join(workdir, "state")])

    def tasks(self):
        return [self.ps] + self.workers + [self.chief]

    def start(self):
        for t in self.tasks():
            t.start()

    @staticmethod
    def started(build, workdir, worker_timeout):
        """A cluster up; again on other ports when one was taken meanwhile (free_port's race)."""
        for attempt in range(3):
            c = Cluster(build, workdir, worker_timeout)
            try:
                c.start()
                return c
            except RuntimeError:
                c.stop()
                if attempt == 2:
                    raise

    def stop(self):
        for t in reversed(self.tasks()):
            t.stop()

    def cli(self, *args):
        p = subprocess.run([os.path.join(self.build, "tessera")] + list(args)
                           + ["--chief", self.chief.listen], capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr

    def step(self, job):
        rc, out = self.cli("status", job)
        m = re.search(r" step (\d+)/(\d+)", out)
        return int(m.group(1)) if rc == 0 and m else None

    def closures(self):
        try:
            return self.chief.metric("tessera_chief_closures_total")
        except OSError:
            return None


def wait_for(what, cond, timeout=120, every=0.01):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for %s" % what)
        time.sleep(every)


class Stall:
    """Watches the chief's completed closures on a thread: the longest time without one."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.longest = 0.0
        self.running = True
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        last, last_t = None, time.monotonic()
        while self.running:
            v = self.cluster.closures()
            now = time.monotonic()
            if v is not None and v != last:
                last, last_t = v, now
            self.longest = max(self.longest, now - last_t)
            time.sleep(0.01)

    def stop(self):
        self.running = False
        self.thread.join()
        return self.longest


def run_scenario(args, kind, rnd):
    workdir = tempfile.mkdtemp(prefix="tessera-bench-fault-")
    c = None
    job_path = os.path.join(workdir, "job.yaml")
    with open(job_path, "w") as f:
        f.write(JOB % {"name": kind.replace(" ", "-"), "ds": DATASET, "epochs": args.epochs,
                       "ckpt": os.path.join(workdir, "ckpt")})
    res = {}
    try:
        c = Cluster.started(args.build, workdir, args.worker_timeout)
        rc, out = c.cli("submit", job_path)
        m = re.search(r"submitted (\S+)", out)
        if rc != 0 or not m:
            raise RuntimeError("submit failed: %s" % out)
        job = m.group(1)
        wait_for("the job to pass step 1500", lambda: (c.step(job) or 0) > 1500)
        stall = Stall(c)
        at = c.step(job)
        t_kill = time.monotonic()
        if kind in ("worker killed", "worker hung"):
            failures = 'tessera_chief_task_failures_total{task="worker:1"}'
            c.workers[1].signal(signal.SIGKILL if kind == "worker killed" else signal.SIGSTOP)
            wait_for("the chief to count the failure", lambda: c.chief.metric(failures) >= 1)
            res["detect"] = time.monotonic() - t_kill
            if kind == "worker hung":
                t_cont = time.monotonic()
                c.workers[1].signal(signal.SIGCONT)
                wait_for("the worker to rejoin",
                         lambda: c.chief.metric("tessera_chief_worker_rejoins_total") >= 1)
                res["rejoin"] = time.monotonic() - t_cont
        elif kind == "ps killed":
            c.ps.signal(signal.SIGKILL)
            time.sleep(1)
            before = c.closures()  # none completes while the PS is away
            t_up = c.ps.start()
            wait_for("training again", lambda: (c.closures() or 0) > before)
            res["back"] = time.monotonic() - t_up
        else:  # chief killed
            c.chief.signal(signal.SIGKILL)
            t_up = c.chief.start()
            wait_for("training again", lambda: (c.closures() or 0) > 0)
            res["back"] = time.monotonic() - t_up
        if kind in ("ps killed", "chief killed"):
            text = open(c.chief.log_path).read()
            restored = re.findall(r"restored from step (\d+)", text)
            res["redone"] = at - int(restored[-1]) if restored else at
        rc, out = c.cli("watch", job)
        res["stall"] = stall.stop()
        if rc != 0:
            raise RuntimeError("the job did not finish: %s" % out[-2000:])
        m = re.search(r"test accuracy (\d\.\d+)", out.splitlines()[-1])
        res["accuracy"] = float(m.group(1)) if m else float("nan")
        log("round %d, %s: %s" % (rnd + 1, kind,
                                   ", ".join("%s %.3g" % kv for kv in sorted(res.items()))))
        return res
    finally:
        if c is not None:
            c.stop()
        if not args.keep:
            subprocess.run(["rm", "-rf", workdir])
        else:
            log("kept %s" % workdir)


def tensorflow_side(args):
    python, version, why = train_bench.ensure_venv(
        os.path.join(args.venv, "tf-ps"), TF_PACKAGES, "tensorflow", args.install, log)
    if version is None:
        return None, why
    p = subprocess.run([python, os.path.join(HERE, "peer_tf_fault.py"),
                        "--worker-timeout", "60"], capture_output=True, text=True)
    sys.stderr.write(p.stderr[-3000:] if p.returncode != 0 else "")
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        return None, "peer_tf_fault.py failed (exit %d)" % p.returncode
    return json.loads(lines[-1]), version


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main(argv):
    ap = argparse.ArgumentParser(prog=PROG)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--worker-timeout", default="10s", help="the chief's --worker-timeout")
    ap.add_argument("--venv", default=os.path.join(ROOT, ".venv-bench"))
    ap.add_argument("--no-install", dest="install", action="store_false")
    ap.add_argument("--no-tensorflow", dest="tensorflow", action="store_false")
    ap.add_argument("--keep", action="store_true", help="keep each scenario's logs")
    ap.add_argument("--only", help="run the scenarios whose names contain this")
    args = ap.parse_args(argv)

    kinds = [k for k in ("worker killed", "worker hung", "ps killed", "chief killed")
             if args.only is None or args.only in k]
    results = {k: [] for k in kinds}
    failed = False
    for rnd in range(args.rounds):
        for kind in kinds:
            try:
                results[kind].append(run_scenario(args, kind, rnd))
            except RuntimeError as e:
                log("round %d, %s: %s" % (rnd + 1, kind, e))
                failed = True
    tf, tf_version = (None, "not run (--no-tensorflow)")
    if args.tensorflow:
        tf, tf_version = tensorflow_side(args)

    def med(kind, key):
        return median([r[key] for r in results[kind] if key in r])

    print("Failures in parameter-server training: medians over %d rounds (Tessera --worker-timeout"
          " %s)" % (args.rounds, args.worker_timeout))
    print("  %-52s %12s   %s" % ("", "Tessera", "TensorFlow PSS (%s)" % (
        tf_version if tf else "missing: %s" % tf_version)))
    rows = [
        ("worker killed: failure noticed after (s)", med("worker killed", "detect"),
         tf and tf.get("killed_noticed")),
        ("worker killed: longest stall of the job (s)", med("worker killed", "stall"),
         tf and tf.get("killed_stall")),
        ("worker hung (SIGSTOP): noticed after (s)", med("worker hung", "detect"),
         tf and tf.get("hung_noticed")),
        ("worker hung: longest stall of the job (s)", med("worker hung", "stall"),
         tf and tf.get("hung_stall")),
        ("worker hung, then woken: back in the job after (s)", med("worker hung", "rejoin"),
         tf and tf.get("hung_back")),
        ("ps killed, restarted 1 s later: training again after (s)", med("ps killed", "back"),
         tf and tf.get("ps_killed")),
        ("ps killed: steps redone", med("ps killed", "redone"), None),
        ("chief killed, restarted: training again after (s)", med("chief killed", "back"),
         tf and tf.get("chief_killed")),
        ("chief killed: steps redone", med("chief killed", "redone"), None),
    ]
    for label, ours, theirs in rows:
        if isinstance(theirs, (int, float)):
            theirs = "%.2f" % theirs
        print("  %-52s %12.2f   %s" % (label, ours, theirs if theirs else "-"))
    acc = [r["accuracy"] for k in kinds for r in results[k]]
    print("  test accuracy of the disturbed jobs: %.4f to %.4f" % (min(acc), max(acc))
          if acc else "  no job finished")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
