#!/usr/bin/python3
"""bench/ps/accuracy.py: what bfloat16 on the wire costs in accuracy. Trains the MLP of bench/ps
(784-H-...-10 on Fashion-MNIST, batch 64, Adam 1e-3; chief + 1 PS + 1 worker on loopback) for
--epochs epochs with train.wire_dtype float32, bfloat16, and bfloat16 with wire_error_feedback,
for each of --seeds seeds, and prints the test accuracy of each run, the mean over the seeds and
the difference to float32 in points (the issue's bar: within 0.3).

    bench/ps/accuracy.py [--hidden 2048,2048] [--epochs 5] [--seeds 1,2,3] [--tessera PATH]

Exit status 0 unless a run failed; missing the bar is a report."""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FM = "/usr/share/datasets/fashion-mnist/"
WIRES = [("float32", ""), ("bfloat16", ", wire_dtype: bfloat16"),
         ("bfloat16 + error feedback", ", wire_dtype: bfloat16, wire_error_feedback: true")]


def job_text(hidden, epochs, seed, wire):
    layers = "\n".join("  - {dense: {units: %d, activation: relu}%s}"
                       % (h, ", input_shape: [784]" if i == 0 else "")
                       for i, h in enumerate(hidden))
    return ("name: accuracy\nstrategy: parameter_server\nmodel:\n%s\n"
            "  - {dense: {units: 10}}\n"
            "loss: {sparse_categorical_crossentropy: {from_logits: true}}\n"
            "metrics: [accuracy]\noptimizer: {adam: {learning_rate: 0.001}}\n"
            "data:\n  train: {format: idx, images: %strain-images-idx3-ubyte.gz, "
            "labels: %strain-labels-idx1-ubyte.gz}\n"
            "  test: {format: idx, images: %st10k-images-idx3-ubyte.gz, "
            "labels: %st10k-labels-idx1-ubyte.gz}\n"
            "  scale: 0.00392156862745098\n  batch_size: 64\n  shuffle_buffer: 60000\n"
            "  seed: %d\n"
            "train: {epochs: %d, steps_per_execution: 10%s}\n"
            % (layers, FM, FM, FM, FM, seed, epochs, wire))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "tessera"))
    ap.add_argument("--hidden", default="2048,2048")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--seeds", default="1,2,3")
    args = ap.parse_args(argv)
    hidden = [int(h) for h in args.hidden.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    acc = {name: [] for name, _ in WIRES}
    print("bfloat16 on the wire: test accuracy after %d epochs, MLP 784-%s-10, seeds %s"
          % (args.epochs, "-".join(map(str, hidden)), args.seeds))
    failed = False
    with tempfile.TemporaryDirectory(prefix="bench-accuracy-") as d:
        for seed in seeds:
            for name, wire in WIRES:
                path = os.path.join(d, "job.yaml")
                with open(path, "w") as f:
                    f.write(job_text(hidden, args.epochs, seed, wire))
                p = subprocess.run([args.tessera, "run", "--local", "--ps", "1", "--workers", "1",
                                    "--log-dir", os.path.join(d, "logs"), path],
                                   capture_output=True, text=True, timeout=3600)
                m = re.findall(r"test accuracy ([0-9.]+)", p.stdout)
                if p.returncode != 0 or not m:
                    print("  seed %d, %s: FAILED (exit %d) %s" % (seed, name, p.returncode,
                                                                 p.stderr.strip()[-200:]))
                    failed = True
                    continue
                acc[name].append(float(m[-1]))
                print("  seed %d  %-28s %.4f" % (seed, name, acc[name][-1]), flush=True)
    base = statistics.mean(acc["float32"]) if acc["float32"] else None
    print("\nMeans over the seeds")
    for name, _ in WIRES:
        if not acc[name]:
            continue
        mean = statistics.mean(acc[name])
        diff = "" if base is None or name == "float32" else \
            "   %+.2f points  %s" % ((mean - base) * 100,
                                      "PASS" if abs(mean - base) * 100 <= 0.3 else "MISS")
        print("  %-28s %.4f%s" % (name, mean, diff))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
