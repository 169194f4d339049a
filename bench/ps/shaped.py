"""The parameter-server benchmark across a shaped link: the step-time model checked.

    bench/ps/run.sh --shaped [--rates=1,10,25] [--rounds=N] [--steps=N] [--hidden=2048,2048]
                             [--spe=K]

Root only. It makes two network namespaces joined by a veth pair and nothing else (no route
leaves them): 10.203.0.1 holds the chief and the PS, 10.203.0.2 the worker. tc's token bucket
(tbf) limits each direction of the pair to RATE Gbit/s. The job is bench/ps's (the MLP, batch
64, Adam, one PS, one worker), first on loopback (tessera run --local), then across the link at
each rate, and every measured step is set beside the step-time model:

    step = max(loopback step, forward + B / R + C / R)

B is the bytes of gradients a step pushes (and of values it pulls back the other way: the two
directions overlap), R the link's rate, C the 1 MiB chunk whose values come back last; the
loopback step and the worker's forward time come from the loopback run. Below the link's
limit a step costs what it costs on loopback; above it the wire is the step, with the pushes
starting as backward starts. PASS: measured within 20% of the model. iperf3's single stream
across the same link is printed beside it, for what the wire gives TCP. Everything it makes
(namespaces, links, processes) is removed when it ends; each job is bounded in time.
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sys.path.insert(0, os.path.join(ROOT, "bench", "train"))
ps_bench = load("ps_bench", os.path.join(HERE, "bench.py"))
import fmnist  # noqa: E402

PS_NS, WK_NS = "tsh-ps-%d" % os.getpid(), "tsh-wk-%d" % os.getpid()
PS_IF, WK_IF = "tshp%d" % (os.getpid() % 100000), "tshw%d" % (os.getpid() % 100000)
PS_IP, WK_IP = "10.203.0.1", "10.203.0.2"
CHIEF, PS, WORKER = PS_IP + ":23000", PS_IP + ":23001", WK_IP + ":23002"
CHUNK = 1 << 20
JOB_TIMEOUT_S = 900


def sh(*cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), (p.stderr or p.stdout).strip()))
    return p


def make_link():
    sh("ip", "netns", "add", PS_NS)
    sh("ip", "netns", "add", WK_NS)
    sh("ip", "link", "add", PS_IF, "type", "veth", "peer", "name", WK_IF)
    for ns, dev, ip in [(PS_NS, PS_IF, PS_IP), (WK_NS, WK_IF, WK_IP)]:
        sh("ip", "link", "set", dev, "netns", ns)
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", ip + "/30", "dev", dev)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", dev, "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")


def shape(gbit):
    """Each direction limited to gbit Gbit/s: a token bucket of 2 ms of traffic."""
    rate = gbit * 1e9 / 8
    burst = max(int(rate * 0.002), 64 * 1024)
    for ns, dev in [(PS_NS, PS_IF), (WK_NS, WK_IF)]:
        sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
           "rate", "%dmbit" % int(gbit * 1000), "burst", str(burst), "latency", "10ms")


def iperf3_mbit():
    """iperf3's single TCP stream across the shaped link, worker to PS (Mbit/s; None without
    iperf3)."""
    if shutil.which("iperf3") is None:
        return None
    server = subprocess.Popen(["ip", "netns", "exec", PS_NS, "iperf3", "-s", "-1", "-B", PS_IP],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(20):
            p = sh("ip", "netns", "exec", WK_NS, "iperf3", "-c", PS_IP, "-t", "3", "-J",
                   check=False)
            if p.returncode == 0:
                end = json.loads(p.stdout)["end"]
                return end["sum_received"]["bits_per_second"] / 1e6
            time.sleep(0.2)
        return None
    finally:
        server.kill()
        server.wait()


def remove_link():
    for ns in (PS_NS, WK_NS):  # the veth pair goes with its namespaces
        sh("ip", "netns", "del", ns, check=False)


class Cluster:
    """The chief and the PS in one namespace, the worker in the other."""

    def __init__(self, build, logs):
        self.procs, self.build, self.logs = [], build, logs

    def start(self, ns, program, listen, role, extra):
        cmd = ["ip", "netns", "exec", ns, os.path.join(self.build, program),
               "--listen=" + listen, "--metrics-listen=127.0.0.1:0", "--data-root=/"] + extra
        log = open(os.path.join(self.logs, "%s-0.log" % role), "w")
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        log.close()

    def up(self):
        self.start(PS_NS, "tessera-ps", PS, "ps", [])
        self.start(WK_NS, "tessera-worker", WORKER, "worker", ["--chief", CHIEF])
        self.start(PS_NS, "tessera-chief", CHIEF, "chief", ["--ps", PS, "--worker", WORKER])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError("a daemon exited at start (logs in %s)" % self.logs)
            p = sh("ip", "netns", "exec", PS_NS, os.path.join(self.build, "tessera"), "cluster",
                   "--chief", CHIEF, check=False)
            if p.returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError("the cluster was not healthy within 60 s (logs in %s)" % self.logs)

    def down(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []


def run_shaped(args, build, job, gbit):
    logs = tempfile.mkdtemp(prefix="bench-shaped-")
    cluster = Cluster(build, logs)
    try:
        shape(gbit)
        cluster.up()
        cmd = ["ip", "netns", "exec", PS_NS, os.path.join(build, "tessera"), "submit", "--chief",
               CHIEF, "--watch", job]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
        m = re.search(r"(\d+) steps in [0-9.]+ s \(training ([0-9.]+) s,", p.stdout)
        if p.returncode != 0 or m is None:
            return {"error": "exit %d: %s" % (p.returncode, (p.stderr or p.stdout).strip()[-300:])}
        cluster.down()  # the worker logs its breakdown when the job ends; stopped, it is written
        r = {"rate": int(m.group(1)) / float(m.group(2))}
        r.update(ps_bench.step_breakdown(logs))
        return r
    finally:
        cluster.down()
        shutil.rmtree(logs, ignore_errors=True)


def forward_ms(r):
    """The worker's forward time per step, from its breakdown line."""
    _, phases, _, _ = r["worker"]
    for part in phases.split(", "):
        name, value, _ = part.rsplit(" ", 2)
        if name == "forward":
            return float(value)
    raise ValueError("no forward time in " + phases)


def main(argv):
    ap = argparse.ArgumentParser(prog="bench/ps/run.sh --shaped", description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rates", default="1,10,25", help="link rates in Gbit/s (default 1,10,25)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--spe", type=int, default=10)
    ap.add_argument("--hidden", default="2048,2048")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("run.sh --shaped: needs root (network namespaces and tc)", file=sys.stderr)
        return 2
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            print("run.sh --shaped: %s is missing (apt-get install iproute2)" % tool, file=sys.stderr)
            return 2
    args.hidden = fmnist.parse_widths(args.hidden)
    args.tessera = os.path.join(args.build, "tessera")
    rates = [float(r) for r in args.rates.split(",")]
    widths = [784] + args.hidden + [10]
    params = sum(a * b + b for a, b in zip(widths, widths[1:]))
    push_bytes = 4 * params

    jobdir = tempfile.mkdtemp(prefix="bench-shaped-job-")
    job = os.path.join(jobdir, "job.yaml")
    with open(job, "w") as f:
        f.write(ps_bench.JOB % {"steps": args.steps, "spe": args.spe, "pack": 0, "wire": "",
                                "hidden": ps_bench.hidden_layers(args.hidden)})
    print("Tessera parameter-server benchmark across a shaped link (bench/ps/run.sh --shaped)")
    print("  host     %s, %d CPUs online" % (os.uname().release, os.cpu_count()))
    print("  job      MLP %s (%.1f MB of gradients a step each way), batch 64, Adam, spe %d; "
          "1 PS + 1 worker, %d timed steps, %d rounds" % (
              "-".join(str(w) for w in widths), push_bytes / 1e6, args.spe, args.steps,
              args.rounds))
    print("  link     veth pair between two network namespaces, tc tbf on each end")
    rows, iperf = {}, {}
    try:
        make_link()
        for rnd in range(args.rounds):
            r = ps_bench.run_tessera(args, args.spe, jobdir)
            rows.setdefault("loopback", []).append(r)
            for gbit in rates:
                rows.setdefault(gbit, []).append(run_shaped(args, args.build, job, gbit))
                if rnd == 0:
                    iperf[gbit] = iperf3_mbit()
            print("  round %d: %s" % (rnd + 1, ", ".join(
                "%s %s" % ("loopback" if k == "loopback" else "%g Gbit/s" % k,
                           "%.1f steps/s" % v[-1]["rate"] if "rate" in v[-1] else "FAILED")
                for k, v in rows.items())), flush=True)
            for v in rows.values():
                if "error" in v[-1]:
                    print("    " + v[-1]["error"], file=sys.stderr)
    finally:
        remove_link()
        shutil.rmtree(jobdir, ignore_errors=True)

    loop = [r for r in rows.get("loopback", []) if "rate" in r and "worker" in r]
    if not loop:
        print("no loopback run succeeded: no model")
        return 1
    loop_ms = 1000 / statistics.median(r["rate"] for r in loop)
    fwd = statistics.median(forward_ms(r) for r in loop)
    print("\nStep-time model: max(loopback step %.1f ms, forward %.1f ms + B/R + C/R)" % (
        loop_ms, fwd))
    print("  %-12s %12s %12s %12s %10s   %s" % ("link", "measured ms", "model ms", "steps/s",
                                                "measured/model", "iperf3 Mbit/s"))
    failed = False
    for gbit in rates:
        ok = [r["rate"] for r in rows.get(gbit, []) if "rate" in r]
        if not ok:
            print("  %-12s %12s" % ("%g Gbit/s" % gbit, "FAILED"))
            failed = True
            continue
        measured = 1000 / statistics.median(ok)
        wire_ms = (push_bytes + CHUNK) / (gbit * 1e9 / 8) * 1000
        model = max(loop_ms, fwd + wire_ms)
        ratio = measured / model
        verdict = "PASS" if abs(ratio - 1) <= 0.2 else "MISS"
        print("  %-12s %12.1f %12.1f %12.1f %9.2fx  %s   %s" % (
            "%g Gbit/s" % gbit, measured, model, 1000 / measured, ratio, verdict,
            "%.0f" % iperf[gbit] if iperf.get(gbit) else "-"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
