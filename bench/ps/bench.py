#!/usr/bin/python3
"""bench/ps: parameter-server training steps per second, Tessera against its peers, and what
one tessera-ps sustains.

Run it through bench/ps/run.sh, which builds tessera, tessera-ps and bench-ps first. In one run
it:

  1. makes sure the peers are there: TensorFlow's ParameterServerStrategy with its
     ClusterCoordinator (PyPI tensorflow-cpu 2.15.1, the last release whose tf.keras is Keras 2,
     which that strategy needs, in .venv-bench/tf-ps), and PyTorch's RPC parameter server on
     Debian's python3-torch (1.13, for /usr/bin/python3, installed with apt-get when run as
     root). A peer that cannot be installed is reported as MISSING with the reason.
  2. trains the MLP 784-128-10 on Fashion-MNIST (batch 64, Adam 1e-3, sparse categorical
     cross-entropy from logits) as local processes on loopback, in rounds that interleave the
     sides so that a noisy neighbour spreads over every figure:
       - Tessera: `tessera run --local --ps 1 --workers 1` (chief + 1 PS + 1 worker), at
         steps_per_execution K and at 1, and at K with train.wire_dtype: bfloat16; its figure
         is the chief's steps/s over the training closures (setup and evaluation excluded),
         and the worker's and PS's logs say where a step's time went;
       - TensorFlow: chief + 1 PS + 1 worker with the same K, steps/s of the scheduled closures
         after a warm-up;
       - PyTorch: 1 PS + 1 trainer pulling the weights and pushing the gradients every step;
     Tessera's worker also pulls every variable and pushes every gradient on each step.
  3. runs bench-ps: push+pull of a 64 MiB variable against iperf3 on loopback, and 16 clients
     pushing 1 MiB gradients (throughput, p50/p99 latency);
  4. prints the medians, the ratios and the issue's targets with PASS or MISS.

With --shaped (root) it runs shaped.py instead: the wide MLP across a veth pair limited by tc,
beside the step-time model (`bench/ps/run.sh --shaped [--rates=1,10,25] [--rounds=N]
[--steps=N]`; shaped.py says how).

The exit status is 0 unless something failed to run; missing a target is a report.
"""

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SYSTEM_PYTHON = "/usr/bin/python3"
RUN_TIMEOUT_S = 600
TF_PACKAGES = ["tensorflow-cpu==2.15.1", "numpy<2"]
TARGET = 2.0  # Tessera's steps/s over each peer's

# The venv, Debian-package and child-process helpers of bench/train, shared.
_spec = importlib.util.spec_from_file_location("train_bench",
                                               os.path.join(ROOT, "bench", "train", "bench.py"))
train_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_bench)
sys.path.insert(0, os.path.join(ROOT, "bench", "train"))
import fmnist  # noqa: E402  (bench/train's, for the --hidden option every side shares)

JOB = """\
name: bench-ps
strategy: parameter_server
model:
%(hidden)s
  - {dense: {units: 10}}
loss: {sparse_categorical_crossentropy: {from_logits: true}}
metrics: [accuracy]
optimizer: {adam: {learning_rate: 0.001}}
data:
  train:
    format: idx
    images: /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
    labels: /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz
  scale: 0.00392156862745098
  batch_size: 64
  shuffle_buffer: 60000
  seed: 1
train: {steps: %(steps)d, steps_per_execution: %(spe)d, bytes_per_pack: %(pack)d%(wire)s}
"""


def hidden_layers(hidden):
    lines = []
    for i, h in enumerate(hidden):
        lines.append("  - {dense: {units: %d, activation: relu}%s}"
                     % (h, ", input_shape: [784]" if i == 0 else ""))
    return "\n".join(lines)


def run_tessera(args, spe, jobdir, pack=0, tessera=None, wire=None):
    """pack: train.bytes_per_pack (0: Tessera's default); tessera: the binary (its daemons are
    the ones built beside it), args.tessera by default; wire: train.wire_dtype (None: the
    default, float32)."""
    tag = "%d-%d-%s" % (spe, pack, wire or "default")
    path = os.path.join(jobdir, "bench-ps-%s.yaml" % tag)
    with open(path, "w") as f:
        f.write(JOB % {"steps": args.steps, "spe": spe, "pack": pack,
                       "wire": ", wire_dtype: %s" % wire if wire else "",
                       "hidden": hidden_layers(args.hidden)})
    logs = os.path.join(jobdir, "logs-%s" % tag)
    cmd = [tessera or args.tessera, "run", "--local", "--ps", "1", "--workers", "1",
           "--log-dir", logs, path]
    rc, out, err, _ = train_bench.run_child(cmd, dict(os.environ), RUN_TIMEOUT_S)
    # The printed steps/s is rounded to a whole number: compute it from the steps and seconds.
    m = re.search(r"(\d+) steps in [0-9.]+ s \(training ([0-9.]+) s,", out)
    if rc != 0 or m is None or float(m.group(2)) <= 0:
        tail = (err.strip() or out.strip()).splitlines()[-3:]
        return {"error": "%s: exit %d: %s" % (" ".join(cmd), rc, " | ".join(tail))}
    r = {"rate": int(m.group(1)) / float(m.group(2))}
    r.update(step_breakdown(logs))
    shutil.rmtree(logs, ignore_errors=True)
    return r


# The lines the worker and the PS log when a job ends: where a training step's time went.
WORKER_LINE = re.compile(r"training steps here; per step ([0-9.]+) ms: (.*?); beside them, in "
                         r"calls to the parameter servers ([0-9.]+) ms and copying their values "
                         r"in ([0-9.]+) ms")
PS_LINE = re.compile(r"pushes, per push ([0-9.]+) ms: receive ([0-9.]+) ms, decode ([0-9.]+) ms, "
                     r"handle ([0-9.]+) ms \(of it the optimizer's update ([0-9.]+) ms\), reply "
                     r"([0-9.]+) ms")


def step_breakdown(logs):
    """The worker's and the PS's breakdown of the run's steps, from their logs ({} if absent)."""
    found = {}
    for name, pattern, key in [("worker-0.log", WORKER_LINE, "worker"),
                               ("ps-0.log", PS_LINE, "ps")]:
        try:
            with open(os.path.join(logs, name), errors="replace") as f:
                m = None
                for line in f:
                    m = pattern.search(line) or m
        except OSError:
            continue
        if m is not None:
            found[key] = m.groups()
    return found


def print_breakdown(label, results):
    """The per-step breakdown of the round with the median rate."""
    ok = sorted((r for r in results if "rate" in r and "worker" in r), key=lambda r: r["rate"])
    if not ok:
        return
    r = ok[len(ok) // 2]
    step, phases, calls, values = r["worker"]
    parts = [p.rsplit(" ", 2) for p in phases.split(", ")]
    total = sum(float(v) for _, v, _ in parts)
    print("\nWhere a step goes: %s (%.1f steps/s, the median round)" % (label, r["rate"]))
    print("  worker, training thread: %s ms a step = %s (sum %.2f ms)"
          % (step, " + ".join("%s %s" % (n, v) for n, v, _ in parts), total))
    print("  worker, PS threads:      %s ms in calls to the PS (overlapping backward), %s ms "
          "copying values in" % (calls, values))
    if "ps" in r:
        push, rec, dec, han, opt, rep = r["ps"]
        print("  PS, per push:            %s ms = receive %s + decode %s + handle %s (optimizer %s)"
              " + reply %s" % (push, rec, dec, han, opt, rep))


def run_peer(python, script, extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONDONTWRITEBYTECODE="1")
    cmd = [python, os.path.join(HERE, script)] + extra
    rc, out, err, _ = train_bench.run_child(cmd, env, RUN_TIMEOUT_S)
    line = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        rate = json.loads(line)["steps_per_second"] if rc == 0 else None
    except (ValueError, KeyError):
        rate = None
    if rate is None:
        tail = (err.strip() or out.strip()).splitlines()[-3:]
        return {"error": "%s: exit %d: %s" % (" ".join(cmd), rc, " | ".join(tail))}
    return {"rate": rate}


def median(results):
    rates = [r["rate"] for r in results if "rate" in r]
    return statistics.median(rates) if rates else None


def rate_str(v):
    return format(round(v), ",") if v >= 100 else "%.1f" % v


def fmt(v):
    return "%10s" % (rate_str(v) if v is not None else "-")


def shaped_main(argv):
    """--shaped: shaped.py's run, with the build run.sh names (--tessera's directory)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("shaped", os.path.join(HERE, "shaped.py"))
    shaped = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shaped)
    rest, it = [], iter(argv)
    for a in it:
        if a in ("--tessera", "--bench-ps"):
            value = next(it, "")
            if a == "--tessera":
                rest += ["--build", os.path.dirname(os.path.abspath(value))]
        elif a != "--shaped":
            rest.append(a)
    return shaped.main(rest)


def main(argv):
    if "--shaped" in argv:
        return shaped_main(argv)
    ap = argparse.ArgumentParser(prog="bench/ps/run.sh", description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("--bench-ps", default=os.path.join(ROOT, "build", "bench", "bench-ps"))
    ap.add_argument("--venv", default=os.path.join(ROOT, ".venv-bench"),
                    help="where the peers' virtual environments live (default .venv-bench)")
    ap.add_argument("--rounds", type=int, default=3, help="training rounds (default 3)")
    ap.add_argument("--steps", type=int, default=3000, help="timed steps per run (default 3000)")
    ap.add_argument("--spe", type=int, default=10,
                    help="steps_per_execution of Tessera and TensorFlow (default 10)")
    ap.add_argument("--hidden", default="128",
                    help="widths of the MLP's hidden relu layers, comma-separated, on every side "
                    "(default 128)")
    ap.add_argument("--one-pack", action="store_true",
                    help="also run Tessera with every gradient in one pack, pushed after backward "
                    "(bytes_per_pack 1 GiB): what overlapping the pushes with backward buys")
    ap.add_argument("--baseline", metavar="TESSERA",
                    help="also run this tessera binary (another build directory, e.g. of the "
                    "commit before a change) at the same steps_per_execution, and compare")
    ap.add_argument("--no-install", dest="install", action="store_false",
                    help="do not create virtual environments or apt-get install peers")
    ap.add_argument("--no-transfer", dest="transfer", action="store_false",
                    help="skip bench-ps (push+pull, 16 clients, iperf3)")
    args = ap.parse_args(argv)
    try:
        args.hidden = fmnist.parse_widths(args.hidden)
    except ValueError as e:
        ap.error(str(e))
    hidden = ",".join(str(h) for h in args.hidden)
    shape = "784-%s-10" % "-".join(str(h) for h in args.hidden)

    def log(msg):
        print("# " + msg, file=sys.stderr, flush=True)

    tf_python, tf_version, tf_missing = train_bench.ensure_venv(
        os.path.join(args.venv, "tf-ps"), TF_PACKAGES, "tensorflow", args.install, log)
    torch_version, torch_missing = train_bench.ensure_debian_torch(args.install, log)
    warmup = 10 * args.spe
    sides = [
        ("tessera", "Tessera, steps_per_execution %d" % args.spe, None,
         lambda d: run_tessera(args, args.spe, d)),
        ("tessera1", "Tessera, steps_per_execution 1", None, lambda d: run_tessera(args, 1, d)),
        ("bf16", "Tessera, spe %d, bfloat16 on the wire" % args.spe, None,
         lambda d: run_tessera(args, args.spe, d, wire="bfloat16")),
        ("tf", "TensorFlow %s PSS + ClusterCoordinator, spe %d" % (tf_version or "?", args.spe),
         tf_missing,
         lambda d: run_peer(tf_python, "peer_tf_ps.py",
                            ["--steps", str(args.steps), "--steps-per-execution", str(args.spe),
                             "--batch", "64", "--warmup", str(warmup), "--hidden", hidden])),
        ("torch", "PyTorch %s RPC parameter server" % (torch_version or "?"), torch_missing,
         lambda d: run_peer(SYSTEM_PYTHON, "peer_torch_rpc.py",
                            ["--steps", str(args.steps), "--batch", "64", "--warmup", "50",
                             "--hidden", hidden])),
    ]
    if args.one_pack:
        sides.insert(2, ("onepack", "Tessera, spe %d, one pack after backward" % args.spe, None,
                         lambda d: run_tessera(args, args.spe, d, 1 << 30)))
    if args.baseline:
        missing = None if os.access(args.baseline, os.X_OK) else "%s is not built" % args.baseline
        sides.insert(1, ("baseline", "Tessera baseline (%s), spe %d" % (args.baseline, args.spe),
                         missing, lambda d: run_tessera(args, args.spe, d, 0, args.baseline)))
    results = {key: [] for key, _, _, _ in sides}
    print("Tessera parameter-server benchmark (bench/ps)")
    print("  host     %s, %d CPUs online" % (os.uname().release, os.cpu_count()))
    print("  job      MLP %s, Fashion-MNIST, batch 64, Adam 1e-3; chief + 1 PS + 1 worker "
          "on loopback; %d timed steps per run, %d rounds" % (shape, args.steps, args.rounds))
    print("\nRounds (training steps/s)")
    print("  %5s %s" % ("round", " ".join("%12s" % key for key, _, _, _ in sides)))
    with tempfile.TemporaryDirectory(prefix="bench-ps-") as jobdir:
        for rnd in range(1, args.rounds + 1):
            cells = []
            for key, _, missing, run in sides:
                if missing:
                    cells.append("%12s" % "MISSING")
                    continue
                r = run(jobdir)
                results[key].append(r)
                if "error" in r:
                    log(r["error"])
                cells.append("%12s" % (rate_str(r["rate"]) if "rate" in r else "FAILED"))
            print("  %5d %s" % (rnd, " ".join(cells)), flush=True)

    for key, label, missing, _ in sides:
        if key.startswith("tessera") and not missing:
            print_breakdown(label, results[key])

    print("\nMedians")
    for key, label, missing, _ in sides:
        print("  %-52s %s%s" % (label, fmt(median(results[key])),
                                "   MISSING: " + missing if missing else ""))
    t, t1, bf = median(results["tessera"]), median(results["tessera1"]), median(results["bf16"])
    tf, torch = median(results["tf"]), median(results["torch"])
    print("\nTargets of the issue (a report, not a test)")
    for label, a, b, want in [("Tessera / TensorFlow PSS, same spe, >= 2x", t, tf, TARGET),
                              ("Tessera bfloat16 / TensorFlow PSS, same spe, >= 3x", bf, tf, 3.0),
                              ("Tessera / PyTorch RPC PS, >= 2x", t, torch, TARGET),
                              ("Tessera at spe 1 / PyTorch RPC PS (every step a closure)", t1,
                               torch, TARGET)]:
        if a is None or b is None:
            print("  %-58s %s" % (label, "n/a"))
        else:
            print("  %-58s %6.2fx  %s" % (label, a / b, "PASS" if a >= want * b else "MISS"))
    if args.baseline:
        b = median(results["baseline"])
        print("\nThis build / the baseline build, same job: %s" % (
            "%.3fx" % (t / b) if t and b else "n/a"))
    if args.one_pack:
        one = median(results["onepack"])
        print("\nPushes overlapping backward (default packs) / one pack after backward: %s"
              % ("%.2fx" % (t / one) if t and one else "n/a"))
    sys.stdout.flush()

    failed = any("error" in r for rs in results.values() for r in rs)
    if args.transfer:
        print()
        sys.stdout.flush()
        rc = subprocess.call([args.bench_ps])
        failed = failed or rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
