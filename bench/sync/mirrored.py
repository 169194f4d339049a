#!/usr/bin/env python3
"""mirrored beside one_device on this host: examples/s of `tessera train` on Fashion-MNIST, the
same model and the same global batch, one_device on one thread (tessera train's default) and
with its matrix products split over every core (--threads N), against mirrored with one replica
per core (each taking batch/N examples of every global batch). Rounds interleave the sides;
medians and the ratios are printed, with the issue's target (mirrored >= 1.6x one_device on the
CNN with 2 replicas), judged against one_device as tessera train runs it by default (1 thread)
and against the faster one_device, with the most N cores allow against that one (N times
one_device's 1-thread rate over the faster rate).

    bench/sync/run.sh [--rounds=N] [--replicas=N] [--steps=N]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
from bench import DATA_DIR, JOB_YAML, MODEL_YAML  # noqa: E402  (the training benchmark's jobs)

CASES = [("CNN b64", "cnn", 64), ("MLP b256", "mlp", 256)]
TARGET = {"CNN b64": 1.6}


def job(dirname, model, batch, steps, replicas):
    text = JOB_YAML.format(model=model, batch=batch // replicas, layers=MODEL_YAML[model],
                           data=DATA_DIR, steps=steps)
    strategy = "one_device" if replicas == 1 else "{mirrored: {replicas: %d}}" % replicas
    text = text.replace("strategy: one_device", "strategy: " + strategy)
    path = os.path.join(dirname, "%s-b%d-r%d.yaml" % (model, batch, replicas))
    with open(path, "w") as f:
        f.write(text)
    return path


def rate(tessera, path, threads):
    out = subprocess.run([tessera, "train", path, "--threads", str(threads)], capture_output=True,
                         text=True, timeout=600)
    m = re.search(r"^trained .*\(([0-9.]+) examples/s\)", out.stdout, re.M)
    if out.returncode != 0 or m is None:
        sys.exit("tessera train %s failed (exit %d): %s" % (path, out.returncode,
                                                            (out.stderr or out.stdout)[-2000:]))
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(prog="bench/sync/run.sh")
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    n = args.replicas
    with tempfile.TemporaryDirectory(prefix="tessera-bench-sync-") as d:
        runs = {}
        for r in range(args.rounds):
            for name, model, batch in CASES:
                if batch % n:
                    sys.exit("batch %d does not split over %d replicas" % (batch, n))
                one = job(d, model, batch, args.steps, 1)
                mir = job(d, model, batch, args.steps, n)
                runs.setdefault((name, "one1"), []).append(rate(args.tessera, one, 1))
                runs.setdefault((name, "oneN"), []).append(rate(args.tessera, one, n))
                runs.setdefault((name, "mirrored"), []).append(rate(args.tessera, mir, 1))
                print("round %d %-9s one_device %8.0f (1 thread) %8.0f (%d)  mirrored %8.0f"
                      " examples/s" % (r + 1, name, runs[(name, "one1")][-1],
                                       runs[(name, "oneN")][-1], n, runs[(name, "mirrored")][-1]),
                      file=sys.stderr)
    print("mirrored (%d replicas on threads) beside one_device (1 thread, and --threads %d), same"
          " global batch, %d steps, median of %d rounds (examples/s):" % (n, n, args.steps,
                                                                        args.rounds))
    print("  %-9s %12s %12s %12s %8s %8s  %s" % ("case", "one_device/1", "one_device/%d" % n,
                                              "mirrored", "x 1", "x %d" % n, "target"))
    for name, _, _ in CASES:
        one1 = statistics.median(runs[(name, "one1")])
        onen = statistics.median(runs[(name, "oneN")])
        mir = statistics.median(runs[(name, "mirrored")])
        best = max(one1, onen)
        goal = TARGET.get(name)
        # One device as tessera train runs it by default (1 thread), and the faster of the two;
        # against the faster, N cores allow at most N x one_device/1 over it.
        verdict = "" if goal is None else (
            ">= %.1fx: one_device (default) %s; the faster %s (N cores allow at most %.2fx)" % (
                goal, "PASS" if mir / one1 >= goal else "MISS",
                "PASS" if mir / best >= goal else "MISS", n * one1 / best))
        print("  %-9s %12.0f %12.0f %12.0f %7.2fx %7.2fx  %s" % (name, one1, onen, mir, mir / one1,
                                                               mir / onen, verdict))


if __name__ == "__main__":
    main()
