#!/usr/bin/python3
"""bench/train: examples per second of the training loop, Tessera against its peers.

Run it through bench/train/run.sh, which builds `tessera` first. In one run it:

  1. makes sure the peers are there: PyTorch (the newest `torch` on PyPI, the only Linux x86_64
     build PyPI has, the CUDA one) and Keras on TensorFlow (`tensorflow-cpu`) each in its own
     virtual environment under .venv-bench/ (created with /usr/bin/python3 -m venv), and
     Debian's python3-torch (1.13) for /usr/bin/python3, installed with apt-get when run as
     root. A peer that cannot be installed is reported as MISSING with the reason.
  2. trains every case (MLP 784-128-10 at batch 64 and 256, the Keras tutorial CNN at batch 64;
     Adam 1e-3, sparse categorical cross-entropy from logits, Fashion-MNIST) on every side at 1
     and 2 threads, each run its own process, in rounds that interleave sides, cases and thread
     counts, so that a noisy neighbour spreads over every figure;
  3. prints the median examples/s and peak RSS (ru_maxrss of the child) per side, the ratio
     Tessera/peer, and the issue's targets with PASS or MISS against each PyTorch.

Every side preloads the data and trains the same steps: shuffled each epoch, the last batch of
an epoch partial, loss and accuracy kept per step. The peers time the steps after a warm-up;
Tessera's figure is its own (`tessera train` prints examples/s over all its steps; its first
steps run as fast as the later ones, so the figure is, if anything, low).

The exit status is 0 unless something failed to run; missing a target is a report, not a
failure.
"""

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA_DIR = "/usr/share/datasets/fashion-mnist"
SYSTEM_PYTHON = "/usr/bin/python3"
RUN_TIMEOUT_S = 300

# name, model, batch, warm-up steps (peers), timed steps. MLP: 3 epochs; CNN: 300 steps.
CASES = [
    ("MLP b64", "mlp", 64, 50, 3 * 938),
    ("MLP b256", "mlp", 256, 20, 3 * 235),
    ("CNN b64", "cnn", 64, 20, 300),
    # examples/fashion-mnist-resnet.json: a Functional model, ResNet's block with
    # BatchNormalization; Keras loads the same JSON, PyTorch builds the same layers
    ("ResNet b64", "resnet", 64, 20, 300),
    # examples/fashion-mnist-resnet3.json: three residual blocks (the proof model)
    ("ResNet3 b64", "resnet3", 64, 20, 300),
]
THREADS = [1, 2]
# The targets: Tessera's examples/s over PyTorch's, per case.
SPEED_TARGETS = {"MLP b64": 1.5, "MLP b256": 1.5, "CNN b64": 1.0, "ResNet b64": 1.0,
                 "ResNet3 b64": 1.0}

MODEL_YAML = {
    "mlp": """\
  - {dense: {units: 128, activation: relu}, input_shape: [784]}
  - {dense: {units: 10}}
""",
    "cnn": """\
  - {conv2d: {filters: 32, kernel_size: 3, activation: relu}, input_shape: [28, 28, 1]}
  - {max_pooling2d: {pool_size: 2}}
  - {conv2d: {filters: 64, kernel_size: 3, activation: relu}}
  - {max_pooling2d: {pool_size: 2}}
  - flatten
  - {dense: {units: 64, activation: relu}}
  - {dense: {units: 10}}
""",
    "resnet": "  keras_json: %s\n" % os.path.join(ROOT, "examples", "fashion-mnist-resnet.json"),
    "resnet3": "  keras_json: %s\n" % os.path.join(ROOT, "examples", "fashion-mnist-resnet3.json"),
}

JOB_YAML = """\
# Written by bench/train/bench.py: one case of the training benchmark, no evaluation.
name: bench-{model}-b{batch}
strategy: one_device
model:
{layers}loss: {{sparse_categorical_crossentropy: {{from_logits: true}}}}
metrics: [accuracy]
optimizer: {{adam: {{learning_rate: 0.001}}}}
data:
  train:
    format: idx
    images: {data}/train-images-idx3-ubyte.gz
    labels: {data}/train-labels-idx1-ubyte.gz
  scale: 0.00392156862745098
  batch_size: {batch}
  shuffle_buffer: 10000
  seed: 1
train: {{steps: {steps}}}
"""


class Side:
    """One contestant: how to run a case, and why it is missing when it is."""

    def __init__(self, key, label, program=None, script=None):
        self.key, self.label, self.program, self.script = key, label, program, script
        self.version = None
        self.missing = None  # the reason, when the side cannot run

    def command(self, case, threads, jobdir):
        name, model, batch, warmup, steps = case
        if self.key.startswith("tessera"):
            path = os.path.join(jobdir, "%s-b%d.yaml" % (model, batch))
            if not os.path.exists(path):
                with open(path, "w") as f:
                    f.write(JOB_YAML.format(model=model, batch=batch, layers=MODEL_YAML[model],
                                            data=DATA_DIR, steps=steps))
            return [self.program, "train", path, "--threads", str(threads)]
        return [self.program, os.path.join(HERE, self.script), "--model", model, "--batch",
                str(batch), "--threads", str(threads), "--warmup", str(warmup), "--steps",
                str(steps)]

    def parse(self, out):
        """examples/s from a run's standard output, or None."""
        if self.key.startswith("tessera"):
            m = re.search(r"^trained .*\(([0-9.]+) examples/s\)", out, re.M)
            return float(m.group(1)) if m else None
        for line in reversed(out.splitlines()):
            if line.startswith("{"):
                return json.loads(line)["examples_per_second"]
        return None


# ---- setting up the peers ------------------------------------------------------------------


def last_error(text):
    """The line of an installer's output that says what went wrong."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in reversed(lines):
        if l.startswith(("ERROR", "E:", "error:")):
            return l
    return lines[-1] if lines else "no output"


def probe(python, module):
    """The module's version under `python`, or (None, why not)."""
    if not os.path.exists(python):
        return None, "%s does not exist" % python
    code = ("import os; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '2'; import %s as m; "
            "print(m.__version__)" % module)
    p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return None, "import %s fails under %s: %s" % (module, python, last_error(p.stderr))
    return p.stdout.strip().splitlines()[-1], None


def ensure_venv(venv, packages, module, install, log):
    """The python of a virtual environment that has `packages`, making it when needed."""
    python = os.path.join(venv, "bin", "python")
    version, why = probe(python, module)
    if version is not None or not install:
        return python, version, why
    log("setting up %s: pip install %s (once; later runs reuse it)" % (venv, " ".join(packages)))
    shutil.rmtree(venv, ignore_errors=True)
    p = subprocess.run([SYSTEM_PYTHON, "-m", "venv", venv], capture_output=True, text=True)
    if p.returncode != 0:
        return python, None, "python3 -m venv failed (apt-get install python3-venv?): %s" % (
            last_error(p.stdout + p.stderr))
    p = subprocess.run([python, "-m", "pip", "install", "--progress-bar", "off"] + packages,
                       capture_output=True, text=True)
    if p.returncode != 0:
        return python, None, "pip install %s failed: %s" % (" ".join(packages),
                                                             last_error(p.stdout + p.stderr))
    version, why = probe(python, module)
    return python, version, why


def ensure_debian_torch(install, log):
    version, why = probe(SYSTEM_PYTHON, "torch")
    if version is not None or not install:
        return version, why
    if os.geteuid() != 0:
        return None, why + "; apt-get install python3-torch needs root"
    log("installing Debian's python3-torch with apt-get (once)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "python3-torch"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:  # a fresh machine may not have the package lists yet
        subprocess.run(["apt-get", "update"], capture_output=True, env=env)
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return None, "apt-get install python3-torch failed: %s" % last_error(p.stdout + p.stderr)
    return probe(SYSTEM_PYTHON, "torch")


def make_sides(args, log):
    venvs = args.venv
    tessera = Side("tessera", "Tessera", args.tessera)
    if not os.access(args.tessera, os.X_OK):
        tessera.missing = "%s is not built (run bench/train/run.sh)" % args.tessera
    else:
        tessera.version = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                                         capture_output=True, text=True).stdout.strip() or "?"
    torch_pypi = Side("torch", "PyTorch (PyPI)", script="peer_torch.py")
    torch_pypi.program, torch_pypi.version, torch_pypi.missing = ensure_venv(
        os.path.join(venvs, "torch"), ["torch", "numpy"], "torch", args.install, log)
    torch_deb = Side("torch-deb", "PyTorch (Debian)", SYSTEM_PYTHON, "peer_torch.py")
    torch_deb.version, torch_deb.missing = ensure_debian_torch(args.install, log)
    keras = Side("keras", "Keras/TensorFlow", script="peer_keras.py")
    keras.program, keras.version, keras.missing = ensure_venv(
        os.path.join(venvs, "tf"), ["tensorflow-cpu"], "tensorflow", args.install, log)
    sides = [tessera, torch_pypi, torch_deb, keras]
    if args.baseline:
        # Another build of Tessera (the commit before a change), run like the first.
        base = Side("tessera-base", "Tessera (baseline)", args.baseline)
        base.version = args.baseline
        if not os.access(args.baseline, os.X_OK):
            base.missing = "%s is not built" % args.baseline
        sides.insert(1, base)
    return sides


# ---- running -------------------------------------------------------------------------------


def run_child(cmd, env, timeout):
    """Runs cmd to its end; returns (exit code, stdout, stderr, peak RSS in KiB)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            # wait4 gives this child's own rusage; RUSAGE_CHILDREN would be a running maximum.
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return p.returncode, out.read(), err.read(), usage.ru_maxrss


def measure(side, case, threads, jobdir):
    env = dict(os.environ)
    if not side.key.startswith("tessera"):
        # The thread count holds for every pool a peer may use (OpenMP, MKL, and the OpenBLAS
        # behind Debian's torch); each peer also sets its framework's own thread counts.
        for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[k] = str(threads)
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in bench/train
    cmd = side.command(case, threads, jobdir)
    t0 = time.monotonic()
    rc, out, err, rss = run_child(cmd, env, RUN_TIMEOUT_S)
    wall = time.monotonic() - t0
    rate = side.parse(out) if rc == 0 else None
    if rate is None:
        why = "exit %d" % rc if rc != 0 else "no examples/s in its output"
        tail = (err.strip() or out.strip()).splitlines()[-3:]
        return {"error": "%s: %s: %s" % (" ".join(cmd), why, " | ".join(tail))}
    return {"rate": rate, "rss_kib": rss, "wall": wall}


def fmt_rate(v):
    return "%10s" % format(round(v), ",") if v is not None else "%10s" % "-"


def fmt_mib(kib):
    return "%6.0f MiB" % (kib / 1024.0) if kib is not None else "%10s" % "-"


def main(argv):
    ap = argparse.ArgumentParser(prog="bench/train/run.sh",
                                 description="Training throughput of Tessera and its peers.")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("--venv", default=os.path.join(ROOT, ".venv-bench"),
                    help="where the peers' virtual environments live (default .venv-bench)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each measurement (median)")
    ap.add_argument("--no-install", dest="install", action="store_false",
                    help="use the peers that are there; install nothing")
    ap.add_argument("--baseline", metavar="TESSERA",
                    help="also run this tessera binary (another build directory, e.g. of the "
                         "commit before a change); the Tessera/x column compares the two")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke test: one round, few steps (figures not comparable)")
    ap.add_argument("--cases", metavar="MODEL,...",
                    help="only the cases of these models (mlp, cnn, resnet, resnet3)")
    args = ap.parse_args(argv)
    cases = CASES
    if args.cases:
        wanted = args.cases.split(",")
        unknown = [m for m in wanted if m not in MODEL_YAML]
        if unknown:
            ap.error("unknown model %s (mlp, cnn, resnet, resnet3)" % ", ".join(unknown))
        cases = [c for c in CASES if c[1] in wanted]
    if args.quick:
        args.rounds = 1
        cases = [(n, m, b, 5, 30) for n, m, b, _, _ in cases]

    def log(msg):
        print("bench/train: " + msg, file=sys.stderr, flush=True)

    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        if not os.path.exists(os.path.join(DATA_DIR, name)):
            print("bench/train: %s/%s is missing: apt-get install dataset-fashion-mnist" % (
                DATA_DIR, name), file=sys.stderr)
            return 1
    t_start = time.monotonic()
    sides = make_sides(args, log)
    t_setup = time.monotonic() - t_start
    runnable = [s for s in sides if s.missing is None]
    results = {}  # (side key, case name, threads) -> list of run results
    errors = []
    with tempfile.TemporaryDirectory(prefix="tessera-bench-train-") as jobdir:
        for r in range(args.rounds):
            log("round %d of %d" % (r + 1, args.rounds))
            for case in cases:
                for threads in THREADS:
                    # Rotate the order each round so no side always runs right after another.
                    k = r % len(runnable) if runnable else 0
                    for side in runnable[k:] + runnable[:k]:
                        res = measure(side, case, threads, jobdir)
                        if "error" in res:
                            errors.append(res["error"])
                            log("FAILED: " + res["error"])
                        results.setdefault((side.key, case[0], threads), []).append(res)
    report(sides, cases, results, args, t_setup, time.monotonic() - t_start)
    if errors:
        print("\nFAILED runs (%d):" % len(errors))
        for e in errors:
            print("  " + e)
        return 1
    return 0


# ---- the report ----------------------------------------------------------------------------


def medians(results, key):
    ok = [r for r in results.get(key, []) if "rate" in r]
    if not ok:
        return None, None, []
    return (statistics.median(r["rate"] for r in ok), statistics.median(r["rss_kib"] for r in ok),
            [r["rate"] for r in ok])


def report(sides, cases, results, args, t_setup, t_total):
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print("Tessera training benchmark (bench/train)")
    print("machine: %s, %d CPUs, %s; load average now %s" % (
        cpu, os.cpu_count(), platform.platform(), " ".join("%.2f" % x for x in os.getloadavg())))
    print("each figure: median of %d run(s), each its own process; rounds interleave sides,"
          " cases and threads" % args.rounds)
    print("threads N: tessera --threads N; PyTorch torch.set_num_threads(N) and one interop"
          " thread;\n  TensorFlow N intra-op and 1 inter-op threads; peers also get"
          " OMP/MKL/OPENBLAS_NUM_THREADS=N")
    print("timing: peers time the steps after their warm-up; Tessera's figure is its own"
          " examples/s over all\n  its steps (it has no warm-up to speak of)."
          " Peak RSS: ru_maxrss of each run's process.")
    print("\nsides:")
    for s in sides:
        what = {"tessera": "build/tessera train, job written by bench.py",
                "tessera-base": "the same job, another build",
                "torch": "newest torch from PyPI (CUDA build; run on the CPU), venv " +
                         os.path.join(args.venv, "torch"),
                "torch-deb": "Debian python3-torch under /usr/bin/python3",
                "keras": "newest tensorflow-cpu from PyPI, model.fit, venv " +
                         os.path.join(args.venv, "tf")}[s.key]
        if s.missing:
            print("  %-18s MISSING: %s" % (s.label, s.missing))
        else:
            print("  %-18s %s (%s)" % (s.label, s.version, what))
    for case in cases:
        name, model, batch, warmup, steps = case
        desc = {"mlp": "784-128(relu)-10",
                "cnn": "Conv2D 32 3x3 relu, MaxPool 2, Conv2D 64 3x3 relu, MaxPool 2, Flatten, "
                       "Dense 64 relu, Dense 10",
                "resnet": "(examples/fashion-mnist-resnet.json) Conv2D 16 3x3/2, BN, ReLU; "
                          "[Conv2D 16, BN, ReLU, Conv2D 16, BN] + skip, ReLU; MaxPool 2; "
                          "Concatenate(Flatten, GlobalMaxPool); Dense 10",
                "resnet3": "(examples/fashion-mnist-resnet3.json) Conv2D 16 3x3/2, BN, ReLU; "
                           "residual blocks of 16, 32/2 (1x1/2 shortcut) and 32 filters, each "
                           "[Conv2D, BN, ReLU, Conv2D, BN] + skip, ReLU; GlobalAveragePool; "
                           "Dense 10"}[model]
        print("\n%s: %s %s, batch %d; %d timed steps (peers after %d warm-up steps)" % (
            name, model.upper(), desc, batch, steps, warmup))
        print("  %-18s %7s %10s %10s %10s  %-28s" % ("side", "threads", "examples/s", "Tessera/x",
                                                    "peak RSS", "runs (examples/s)"))
        for threads in THREADS:
            base, _, _ = medians(results, ("tessera", name, threads))
            for s in sides:
                if s.missing:
                    print("  %-18s %7d %10s" % (s.label, threads, "MISSING"))
                    continue
                rate, rss, runs = medians(results, (s.key, name, threads))
                ratio = ("%9.2fx" % (base / rate)) if base and rate and s.key != "tessera" else (
                    "%10s" % "")
                print("  %-18s %7d %s %s %s  %s" % (
                    s.label, threads, fmt_rate(rate) if rate else "%10s" % "FAILED", ratio,
                    fmt_mib(rss), ", ".join(format(round(x), ",") for x in runs)))
    print_targets(sides, cases, results)
    print("\nsetup %.0f s, total %.0f s" % (t_setup, t_total))


def print_targets(sides, cases, results):
    print("\nTargets (the issue): MLP b64 >= 1.5x PyTorch, MLP b256 >= 1.5x, CNN b64 >= 1.0x; "
          "peak RSS Tessera <= PyTorch")
    peers = [s for s in sides if s.key in ("torch", "torch-deb")]
    for p in peers:
        label = "%s %s" % (p.label, p.version or "")
        if p.missing:
            print("  vs %s: MISSING (%s)" % (label, p.missing))
            continue
        print("  vs %s:" % label)
        for name, *_ in cases:
            for threads in THREADS:
                t, t_rss, _ = medians(results, ("tessera", name, threads))
                x, x_rss, _ = medians(results, (p.key, name, threads))
                if t is None or x is None:
                    print("    %-9s %d thread(s): speed NOT MEASURED" % (name, threads))
                    continue
                goal = SPEED_TARGETS[name]
                print("    %-9s %d thread(s): speed %5.2fx (target >= %.1fx) %-4s   "
                      "RSS %s vs %s %s" % (
                          name, threads, t / x, goal, "PASS" if t / x >= goal else "MISS",
                          fmt_mib(t_rss).strip(), fmt_mib(x_rss).strip(),
                          "PASS" if t_rss <= x_rss else "MISS"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
