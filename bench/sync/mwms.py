#!/usr/bin/env python3
"""multi_worker_mirrored beside PyTorch DistributedDataParallel (gloo, Debian's python3-torch)
and TensorFlow's MultiWorkerMirroredStrategy (tensorflow-cpu in .venv-bench/tf-ps, which
bench/ps/run.sh sets up): the Fashion-MNIST MLP (784-128-10, Adam 1e-3), 2 workers on this
machine, batch 64 each, one thread each. Rounds interleave the sides; the medians of the total
examples/s and the ratios are printed, with the issue's target (>= 1.5x the faster peer).

With --packs A,B,... Tessera runs alone, once per train.bytes_per_pack (the gradient buckets
all-reduced while backward goes on; 0 = automatic), interleaved, and --hidden W,W,... widens the
MLP (784-W-W-10), where buckets have more to overlap: the medians and the ratios to the first.

    bench/sync/run.sh --mwms [--rounds N] [--steps N]
    bench/sync/run.sh --mwms --packs 0,65536 [--hidden 1024,1024] [--rounds N] [--steps N]
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
from bench import DATA_DIR, JOB_YAML, MODEL_YAML  # noqa: E402

SYSTEM_PYTHON = "/usr/bin/python3"
TF_PYTHON = os.path.join(ROOT, ".venv-bench", "tf-ps", "bin", "python")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mlp_layers(hidden):
    """The model's layers: the benchmark's MLP, or 784-W-...-10."""
    if not hidden:
        return MODEL_YAML["mlp"]
    text = ""
    for i, w in enumerate(hidden):
        text += "  - {dense: {units: %d, activation: relu}%s}\n" % (
            w, ", input_shape: [784]" if i == 0 else "")
    return text + "  - {dense: {units: 10}}\n"


def tessera(binary, d, steps, batch, pack=None, hidden=None):
    path = os.path.join(d, "mwms.yaml")
    text = JOB_YAML.format(model="mlp", batch=batch, layers=mlp_layers(hidden), data=DATA_DIR,
                           steps=steps)
    text = text.replace("strategy: one_device", "strategy: multi_worker_mirrored")
    text = text.replace("train: {steps: %d}" % steps,
                        "train: {steps: %d, steps_per_execution: 50%s}" % (
                            steps, "" if pack is None else ", bytes_per_pack: %d" % pack))
    with open(path, "w") as f:
        f.write(text)
    out = subprocess.run([binary, "run", "--local", "--ps", "1", "--workers", "2", path],
                         capture_output=True, text=True, timeout=600)
    m = re.search(r"training [0-9.]+ s, ([0-9.]+) steps/s", out.stdout)
    if out.returncode != 0 or m is None:
        sys.exit("tessera run failed (exit %d): %s" % (out.returncode,
                                                       (out.stdout + out.stderr)[-2000:]))
    return float(m.group(1)) * batch * 2


def ranks(cmds):
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            sys.exit("%s failed (exit %d): %s" % (p.args[1], p.returncode, err[-2000:]))
    for line in outs[0][0].splitlines():
        if line.startswith("{"):
            return json.loads(line)["examples_per_second"]
    sys.exit("no result from %s" % cmds[0][1])


def ddp(steps, batch):
    master = "127.0.0.1:%d" % free_port()
    return ranks([[SYSTEM_PYTHON, os.path.join(HERE, "peer_ddp.py"), "--rank", str(r), "--size",
                   "2", "--master", master, "--batch", str(batch), "--steps", str(steps)]
                  for r in range(2)])


def tf(steps, batch):
    workers = "127.0.0.1:%d,127.0.0.1:%d" % (free_port(), free_port())
    return ranks([[TF_PYTHON, os.path.join(HERE, "peer_tf_mwms.py"), "--rank", str(r),
                   "--workers", workers, "--batch", str(batch), "--steps", str(steps)]
                  for r in range(2)])


def main():
    ap = argparse.ArgumentParser(prog="bench/sync/run.sh --mwms")
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--packs", help="Tessera alone, at each train.bytes_per_pack (A,B,...)")
    ap.add_argument("--hidden", help="with --packs: the MLP's hidden widths (W,W,...)")
    args = ap.parse_args()
    if args.packs:
        return sweep_packs(args)
    sides = [("Tessera", lambda d: tessera(args.tessera, d, args.steps, args.batch)),
             ("PyTorch DDP (gloo)", lambda d: ddp(args.steps, args.batch))]
    if os.access(TF_PYTHON, os.X_OK):
        sides.append(("TensorFlow MWMS", lambda d: tf(args.steps // 2, args.batch)))
    else:
        print("TensorFlow: %s is missing (bench/ps/run.sh makes it)" % TF_PYTHON)
    rates = {}
    with tempfile.TemporaryDirectory(prefix="tessera-bench-mwms-") as d:
        for r in range(args.rounds):
            for name, fn in sides:
                rates.setdefault(name, []).append(fn(d))
                print("round %d %-20s %9.0f examples/s" % (r + 1, name, rates[name][-1]),
                      file=sys.stderr)
    print("multi_worker_mirrored, 2 workers on this machine, MLP 784-128-10, batch %d each,"
          " median of %d rounds (examples/s of both workers):" % (args.batch, args.rounds))
    med = {name: statistics.median(v) for name, v in rates.items()}
    for name, _ in sides:
        ratio = "" if name == "Tessera" else "%7.2fx" % (med["Tessera"] / med[name])
        print("  %-20s %10.0f  %s" % (name, med[name], ratio))
    best = max(v for k, v in med.items() if k != "Tessera")
    print("  target: >= 1.5x the faster peer: %.2fx %s" % (
        med["Tessera"] / best, "PASS" if med["Tessera"] / best >= 1.5 else "MISS"))


def sweep_packs(args):
    packs = [int(p) for p in args.packs.split(",")]
    hidden = [int(w) for w in args.hidden.split(",")] if args.hidden else None
    rates = {p: [] for p in packs}
    with tempfile.TemporaryDirectory(prefix="tessera-bench-mwms-") as d:
        for r in range(args.rounds):
            for p in packs:
                rates[p].append(tessera(args.tessera, d, args.steps, args.batch, p, hidden))
                print("round %d bytes_per_pack %-10d %9.0f examples/s" % (r + 1, p, rates[p][-1]),
                      file=sys.stderr)
    print("multi_worker_mirrored, 2 workers on this machine, MLP 784-%s-10, batch %d each, "
          "median of %d rounds (examples/s of both workers):" % (
              "-".join(str(w) for w in hidden) if hidden else "128", args.batch, args.rounds))
    first = statistics.median(rates[packs[0]])
    for p in packs:
        med = statistics.median(rates[p])
        print("  bytes_per_pack %-10d %10.0f  %6.2fx" % (p, med, med / first))


if __name__ == "__main__":
    main()
