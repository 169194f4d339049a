"""tessera train's checkpoints, read by Hugging Face's own safetensors (PyPI safetensors, NumPy).

Trains a small model with dropout and Adam for two epochs with a checkpoint section, then for
the newest checkpoint: `ckpt/checkpoint` names it in TensorFlow's text form; the manifest is
JSON that Python's json module reads; safetensors.safe_open opens the shard file the manifest
names, with the metadata format "pt"; every variable is there whole with the manifest's shape,
float32, with Adam's momentum and velocity beside it under optimizer/NAME/SLOT, and velocity is
never negative. Then the other way: a file safetensors itself writes, with a tensor Tessera's
checkpoint names, is read back by `tessera train --resume` as the checkpoint's shard: the
resumed run starts from those values (proved by a file of all-zero weights, on which the model
predicts one class only)."""
import json
import os
import re
import tempfile

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from compat import check, finish, tessera

JOB = """name: st
model:
  - {dense: {units: 64, activation: relu}, input_shape: [30]}
  - {dropout: {rate: 0.25}}
  - {dense: {units: 5, activation: softmax}}
loss: sparse_categorical_crossentropy
metrics: [accuracy]
optimizer: {adam: {learning_rate: 0.01}}
data:
  batch_size: 50
  train: {format: synthetic, kind: classification, examples: 1000, shape: [30], classes: 5, seed: 1}
  test: {format: synthetic, kind: classification, examples: 500, shape: [30], classes: 5, seed: 2}
train: {epochs: 2}
checkpoint: {dir: ckpt, keep: 5}
"""
SHAPES = {"dense/kernel": [30, 64], "dense/bias": [64], "dense_1/kernel": [64, 5],
          "dense_1/bias": [5]}


def train(cwd, *flags):
    return tessera("train", "job.yaml", *flags, cwd=cwd)


with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "job.yaml"), "w") as f:
        f.write(JOB)
    train(tmp)
    ckpt = os.path.join(tmp, "ckpt")
    index = open(os.path.join(ckpt, "checkpoint")).read()
    check(index.startswith('model_checkpoint_path: "ckpt-40"\n'), "ckpt/checkpoint: " + index)
    check('all_model_checkpoint_paths: "ckpt-20"' in index, "ckpt-20 not listed: " + index)
    manifest = json.load(open(os.path.join(ckpt, "ckpt-40", "manifest.json")))
    check(manifest["step"] == 40 and manifest["optimizer"]["iterations"] == 40,
          "manifest step/iterations: %r" % manifest)
    check(manifest["optimizer"]["slots"] == ["momentum", "velocity"], "slots")
    check(manifest["data"] == [{"worker": 0, "epoch": 2, "batch": 0}], "data position")
    check(len(manifest["rng"]) == 1 and int(manifest["rng"][0]) > 0, "dropout stream")
    shard = os.path.join(ckpt, "ckpt-40", manifest["files"][0])
    with safe_open(shard, framework="numpy") as st:
        check(st.metadata() == {"format": "pt"}, "metadata %r" % st.metadata())
        keys = set(st.keys())
        for name, shape in SHAPES.items():
            check(manifest["variables"][name]["shape"] == shape, name + " shape in the manifest")
            part = manifest["variables"][name]["parts"][0]
            value = st.get_tensor(part["tensor"])
            check(list(value.shape) == shape and value.dtype == np.float32, name + " tensor")
            check(np.isfinite(value).all() and np.abs(value).sum() > 0, name + " values")
            m = st.get_tensor("optimizer/%s/momentum" % name)
            v = st.get_tensor("optimizer/%s/velocity" % name)
            check(m.shape == value.shape and v.shape == value.shape, name + " slot shapes")
            check((v >= 0).all() and v.sum() > 0, name + " velocity")
            keys -= {name, "optimizer/%s/momentum" % name, "optimizer/%s/velocity" % name}
        check(not keys, "tensors the manifest does not name: %r" % keys)

    # safetensors writes the shard of the checkpoint at step 20 again, every weight zero: a
    # resumed run starts from those weights, so after the rest of the training (one epoch)
    # it differs from the run that resumed the true step-20 checkpoint.
    first = train(tmp, "--resume")
    check("resumed st at step 40" in first, "resume at 40: " + first)
    step20 = os.path.join(ckpt, "ckpt-20")
    os.remove(os.path.join(ckpt, "ckpt-40", "manifest.json"))  # ckpt-40 incomplete now
    with safe_open(os.path.join(step20, "train-0.safetensors"), framework="numpy") as st:
        tensors = {k: st.get_tensor(k) for k in st.keys()}
    true_run = train(tmp, "--resume")
    check("resumed st at step 20" in true_run, "resume at 20: " + true_run)
    os.remove(os.path.join(ckpt, "ckpt-40", "manifest.json"))
    zeros = {k: np.zeros_like(v) for k, v in tensors.items()}
    save_file(zeros, os.path.join(step20, "train-0.safetensors"), metadata={"format": "pt"})
    zero_run = train(tmp, "--resume")
    check("resumed st at step 20" in zero_run, "resume at 20 (zeros): " + zero_run)
    acc = lambda out: re.search(r"test accuracy ([0-9.]+)", out).group(1)
    check(acc(zero_run) != acc(true_run),
          "the zeroed weights made no difference: %s vs %s" % (zero_run, true_run))

finish("safetensors reads tessera's checkpoints, and tessera reads safetensors' files")
