"""Files benchmark (issue 10): checkpoint write and restore throughput beside the disk's own
sequential speed (dd with O_DIRECT) and beside TensorFlow's tf.train.Checkpoint of the same
variables; and the TFRecord reader's throughput on Fashion-MNIST Examples beside tf.data's on
the same file, both on one core.

Tessera's side is bench-files (bench/files/bench_files.c), TensorFlow's peer_tf.py in the
virtual environment .venv-bench/tf (bench/train's). Every figure is the median of --rounds.
Checkpoints are fsynced by both sides and read back cold (the files' pages dropped with
posix_fadvise first). Files go under the build directory, on the disk the checkpoints of a
real job would use (not a tmpfs)."""
import argparse
import importlib.util
import math
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FM = "/usr/share/datasets/fashion-mnist/"
TARGET_DISK = 0.70  # checkpoint write speed over dd's
TARGET_TF = 1.5     # checkpoint throughput over tf.train.Checkpoint's
TARGET_READ = 1e9   # TFRecord bytes/s on one core

_spec = importlib.util.spec_from_file_location("train_bench",
                                               os.path.join(ROOT, "bench", "train", "bench.py"))
train_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_bench)

CKPT_JOB = """name: bench-ckpt
model:
  - {dense: {units: %(width)d, activation: relu}, input_shape: [%(width)d]}
  - {dense: {units: %(width)d, activation: relu}}
  - {dense: {units: 10}}
loss: {sparse_categorical_crossentropy: {from_logits: true}}
optimizer: {adam: {learning_rate: 0.001}}
data:
  batch_size: 32
  train: {format: synthetic, examples: 64, shape: [%(width)d], classes: 10}
checkpoint: {dir: %(dir)s, keep: 1000}
"""

TFRECORD_JOB = """name: bench-tfrecord
model: [{dense: {units: 10}, input_shape: [784]}]
loss: {sparse_categorical_crossentropy: {from_logits: true}}
data:
  scale: 0.00392156862745098
  batch_size: 32
  train: {format: tfrecord, files: %s, features: {image: {bytes_list: [784]}, label: {int64_list: [1]}}}
"""


def parse(out):
    return {k: float(v) for k, v in re.findall(r"^(\w+) ([0-9.e+]+)$", out, re.M)}


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError("%s failed: %s%s" % (" ".join(cmd[:3]), p.stdout, p.stderr))
    return p.stdout


def dd(path, nbytes, rounds):
    """The disk's sequential write and read speeds with O_DIRECT (medians)."""
    count = max(1, math.ceil(nbytes / (4 << 20)))
    writes, reads = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        run(["dd", "if=/dev/zero", "of=" + path, "bs=4M", "count=%d" % count, "oflag=direct",
             "conv=fsync", "status=none"])
        writes.append(count * (4 << 20) / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        run(["dd", "if=" + path, "of=/dev/null", "bs=4M", "iflag=direct", "status=none"])
        reads.append(count * (4 << 20) / (time.perf_counter() - t0))
        os.remove(path)
    return sorted(writes)[len(writes) // 2], sorted(reads)[len(reads) // 2]


def mb(v):
    return "%.0f MB/s" % (v / 1e6) if v else "-"


def row(name, ours, peer, target=None):
    ratio = "%.2fx" % (ours / peer) if ours and peer else "-"
    print("%-42s %10s %10s %7s %s" % (name, mb(ours), mb(peer), ratio, target or ""))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench-files", required=True)
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--width", type=int, default=4096,
                    help="the checkpointed model: two Dense layers this wide (default 4096: "
                         "134 MB of weights, 403 MB with Adam's slots)")
    ap.add_argument("--venv", default=os.path.join(ROOT, ".venv-bench"))
    ap.add_argument("--no-install", dest="install", action="store_false")
    args = ap.parse_args(argv)
    log = lambda msg: print(msg, file=sys.stderr)
    tf_python, tf_version, missing = train_bench.ensure_venv(
        os.path.join(args.venv, "tf"), ["tensorflow-cpu"], "tensorflow", args.install, log)
    work = os.path.join(os.path.dirname(os.path.abspath(args.bench_files)), "bench-files-work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        job = os.path.join(work, "ckpt.yaml")
        with open(job, "w") as f:
            f.write(CKPT_JOB % {"width": args.width, "dir": os.path.join(work, "ckpt")})
        ours = parse(run([args.bench_files, "ckpt", job, str(args.rounds)]))
        disk_w, disk_r = dd(os.path.join(work, "dd"), ours["ckpt_bytes"], args.rounds)
        peer = {}
        if tf_python and not missing:
            w = args.width
            shapes = ["%dx%d" % (w, w), str(w), "%dx%d" % (w, w), str(w), "%dx10" % w, "10"]
            peer = parse(run([tf_python, os.path.join(HERE, "peer_tf.py"), "ckpt", work,
                              str(args.rounds)] + shapes))
        data = os.path.join(work, "fm-train.tfrecord")
        run([args.tessera, "convert", "--images", FM + "train-images-idx3-ubyte.gz", "--labels",
             FM + "train-labels-idx1-ubyte.gz", "--out", data])
        job = os.path.join(work, "tfrecord.yaml")
        with open(job, "w") as f:
            f.write(TFRECORD_JOB % data)
        reader = parse(run([args.bench_files, "tfrecord", job, str(args.rounds)]))
        peer_reader = {}
        if tf_python and not missing:
            peer_reader = parse(run([tf_python, os.path.join(HERE, "peer_tf.py"), "tfrecord",
                                     str(args.rounds), data]))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("files benchmark: median of %d rounds; checkpoint of %.0f MB (Tessera) / %.0f MB "
          "(TensorFlow %s)" % (args.rounds, ours["ckpt_bytes"] / 1e6,
                               peer.get("ckpt_bytes", 0) / 1e6, tf_version or missing))
    print("%-42s %10s %10s %7s %s" % ("", "Tessera", "peer", "ratio", "target"))
    row("checkpoint write vs dd (O_DIRECT)", ours["ckpt_write_bytes_per_s"], disk_w,
        ">= %.2fx" % TARGET_DISK)
    row("checkpoint restore vs dd (O_DIRECT)", ours["ckpt_restore_bytes_per_s"], disk_r)
    row("checkpoint write vs tf.train.Checkpoint", ours["ckpt_write_bytes_per_s"],
        peer.get("ckpt_write_bytes_per_s"), ">= %.1fx" % TARGET_TF)
    row("checkpoint restore vs tf.train.Checkpoint", ours["ckpt_restore_bytes_per_s"],
        peer.get("ckpt_restore_bytes_per_s"), ">= %.1fx" % TARGET_TF)
    row("TFRecord read, one core, vs tf.data", reader["tfrecord_bytes_per_s"],
        peer_reader.get("tfrecord_bytes_per_s"), ">= %.0f MB/s" % (TARGET_READ / 1e6))
    print("TFRecord file: %.0f MB, %d Examples" % (reader["tfrecord_bytes"] / 1e6,
                                                  reader["tfrecord_examples"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
