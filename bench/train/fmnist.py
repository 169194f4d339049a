"""Fashion-MNIST in memory and the batch schedule every peer of bench/train follows.

Shared by peer_torch.py and peer_keras.py, which run under different interpreters (Debian's
/usr/bin/python3 and the benchmark's virtual environment), so it needs numpy and nothing else;
numpy is imported where the data is read, so that the drivers can parse their options before
they install the peers that bring it.
"""

import gzip
import json
import os
import struct

DATA_DIR = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
TRAIN_IMAGES = "train-images-idx3-ubyte.gz"
TRAIN_LABELS = "train-labels-idx1-ubyte.gz"


def _read_idx(path):
    import numpy as np

    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    rank = magic & 0xFF
    dims = struct.unpack(">" + "I" * rank, data[4:4 + 4 * rank])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def load_train(data_dir=DATA_DIR):
    """The training split as Tessera reads it: float32 pixels scaled by 1/255, int64 labels."""
    import numpy as np

    images = _read_idx(os.path.join(data_dir, TRAIN_IMAGES))
    labels = _read_idx(os.path.join(data_dir, TRAIN_LABELS))
    x = images.reshape(len(images), -1).astype(np.float32) * np.float32(1.0 / 255.0)
    return x, labels.astype(np.int64)


def batch_sizes(n, batch, steps):
    """Examples in each of `steps` consecutive steps over epochs of n examples, the last batch
    of an epoch partial (as Tessera, PyTorch's DataLoader and Keras do without drop_remainder)."""
    sizes, pos = [], 0
    for _ in range(steps):
        size = min(batch, n - pos)
        sizes.append(size)
        pos = 0 if pos + size == n else pos + size
    return sizes


def report(examples, seconds, loss, accuracy, **extra):
    """Prints the one JSON line the driver (bench.py) reads."""
    out = {"examples_per_second": examples / seconds, "examples": int(examples), "seconds": seconds,
           "loss": loss, "accuracy": accuracy}
    out.update(extra)
    print(json.dumps(out), flush=True)


def parse_args(argv, prog):
    import argparse

    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--model", choices=["mlp", "cnn", "resnet", "resnet3"], required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    ap.add_argument("--steps", type=int, required=True, help="timed steps")
    ap.add_argument("--seed", type=int, default=1)
    return ap.parse_args(argv)


def parse_widths(text):
    """The hidden layers' widths of a --hidden option ("2048,2048"), for every side of a
    benchmark to build the same MLP; ValueError says what is wrong."""
    try:
        widths = [int(w) for w in text.split(",")]
    except ValueError:
        widths = []
    if not widths or min(widths) < 1:
        raise ValueError("--hidden takes positive widths separated by commas, not %r" % text)
    return widths
