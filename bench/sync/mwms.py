#!/usr/bin/env python3
"""multi_worker_mirrored beside PyTorch DistributedDataParallel (gloo, Debian's python3-torch)
and TensorFlow's MultiWorkerMirroredStrategy (tensorflow-cpu in .venv-bench/tf-ps, which
bench/ps/run.sh sets up): the Fashion-MNIST MLP (784-128-10, Adam 1e-3), 2 workers on this
machine, batch 64 each, one thread each. Rounds interleave the sides; the medians of the total
examples/s and the ratios are printed, with the issue's target (>= 1.5x the faster peer).

    bench/sync/run.sh --mwms [--rounds N] [--steps N]
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


def tessera(binary, d, steps, batch):
    path = os.path.join(d, "mwms.yaml")
    text = JOB_YAML.format(model="mlp", batch=batch, layers=MODEL_YAML["mlp"], data=DATA_DIR,
                           steps=steps)
    text = text.replace("strategy: one_device", "strategy: multi_worker_mirrored")
    text = text.replace("train: {steps: %d}" % steps,
                        "train: {steps: %d, steps_per_execution: 50}" % steps)
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
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
