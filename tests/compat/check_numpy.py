"""NumPy arrays in, as NumPy itself writes them (PyPI numpy).

np.save writes the Fashion-MNIST training images ([60000, 28, 28] uint8) and labels, and
np.savez_compressed the same arrays with Keras's key names (x_train, y_train); `tessera train`
on either ends at exactly the numbers it reaches on the IDX files (same examples, same order,
same seed). Float64 images and int64 labels from np.save train too (a different dtype is not
a different dataset). One-hot labels ([60000, 10] float32, as keras.utils.to_categorical makes
them) under categorical_crossentropy end at exactly the numbers of the class ids.

CSV the same way: Python's csv module writes the training set in the layout of Kaggle's
fashion-mnist_train.csv (a header "label,pixel1..pixel784", one image a row), split over two
files; `tessera train` on {format: csv, files: [...], label: label} ends at the same numbers."""
import csv
import os
import tempfile

import numpy as np

from compat import FM, finish, check, fashion, result, tessera
JOB = """name: np
model:
  - {dense: {units: 32, activation: relu}, input_shape: [28, 28]}
  - flatten
  - {dense: {units: 10}}
loss: {sparse_categorical_crossentropy: {from_logits: true}}
metrics: [accuracy]
optimizer: {adam: {learning_rate: 0.001}}
data:
  scale: %s
  batch_size: 64
  shuffle_buffer: 10000
  train: %s
train: {steps: 600}
"""


def train(tmp, name, source, scale="0.00392156862745098"):
    return train_text(tmp, name, JOB % (scale, source))


def train_text(tmp, name, text):
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    return result(tessera("train", path))


with tempfile.TemporaryDirectory() as tmp:
    x = fashion("train-images-idx3-ubyte.gz", 16).reshape(60000, 28, 28)
    y = fashion("train-labels-idx1-ubyte.gz", 8)
    np.save(os.path.join(tmp, "x.npy"), x)
    np.save(os.path.join(tmp, "y.npy"), y)
    np.savez_compressed(os.path.join(tmp, "fm.npz"), x_train=x, y_train=y)
    np.save(os.path.join(tmp, "x64.npy"), x.astype(np.float64))
    np.save(os.path.join(tmp, "y64.npy"), y.astype(np.int64))
    on_idx = train(tmp, "idx", "{format: idx, images: %strain-images-idx3-ubyte.gz, labels: "
                               "%strain-labels-idx1-ubyte.gz}" % (FM, FM))
    on_npy = train(tmp, "npy", "{format: npy, x: x.npy, y: y.npy}")
    on_npz = train(tmp, "npz", "{format: npz, file: fm.npz, x: x_train, y: y_train}")
    on_f64 = train(tmp, "f64", "{format: npy, x: x64.npy, y: y64.npy}")
    np.save(os.path.join(tmp, "y1hot.npy"), np.eye(10, dtype=np.float32)[y])
    categorical = lambda name, source: train_text(tmp, name, (JOB % (
        "0.00392156862745098", source)).replace("sparse_categorical_crossentropy",
                                                "categorical_crossentropy"))
    on_ids = categorical("ids", "{format: npy, x: x.npy, y: y.npy}")
    on_1hot = categorical("1hot", "{format: npy, x: x.npy, y: y1hot.npy}")
    flat = x.reshape(60000, 784)
    for part, rows in (("a", range(0, 25000)), ("b", range(25000, 60000))):
        with open(os.path.join(tmp, "fm-%s.csv" % part), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["label"] + ["pixel%d" % i for i in range(1, 785)])
            for i in rows:
                w.writerow([int(y[i])] + flat[i].tolist())
    flat = lambda source: (JOB % ("0.00392156862745098", source)).replace(
        "input_shape: [28, 28]", "input_shape: [784]").replace("  - flatten\n", "")
    on_csv = train_text(tmp, "csv", flat("{format: csv, files: ['fm-*.csv'], label: label}"))
    on_flat = train_text(tmp, "flat-idx", flat(
        "{format: idx, images: %strain-images-idx3-ubyte.gz, labels: "
        "%strain-labels-idx1-ubyte.gz}" % (FM, FM)))
    print("IDX: %s\nnpy: %s\nnpz: %s\nfloat64/int64 npy: %s\ncsv: %s" % (
        on_idx, on_npy, on_npz, on_f64, on_csv))
    print("categorical_crossentropy, class ids: %s\none-hot rows: %s" % (on_ids, on_1hot))
    check(on_1hot == on_ids, "one-hot labels differ from class ids")
    check(on_npy == on_idx, "npy differs from IDX")
    check(on_npz == on_idx, "npz differs from IDX")
    check(on_f64 == on_idx, "float64/int64 npy differs from IDX")
    check(on_csv == on_flat, "csv (%s) differs from IDX (%s)" % (on_csv, on_flat))

finish("tessera trains on NumPy's .npy and .npz files as on the IDX files")
