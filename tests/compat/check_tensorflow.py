"""TFRecord files both ways with TensorFlow itself (PyPI tensorflow-cpu).

Tessera to TensorFlow: `tessera convert` writes the Fashion-MNIST test set as TFRecord files
(plain with raw uint8 bytes, GZIP with float lists); tf.data.TFRecordDataset reads them (it
checks both CRCs of every record) and tf.io.parse_single_example parses every Example into
exactly the IDX file's pixels and labels.

TensorFlow to Tessera: tf.io.TFRecordWriter writes the same 10000 examples as tf.train.Example
(the image as a float_list of 0..255 values, the label as an int64_list), GZIP-compressed;
`tessera train` on those files ends at exactly the numbers it reaches on the IDX files."""
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf

from compat import FM, check, fashion, finish, result, tessera
images = fashion("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784)
labels = fashion("t10k-labels-idx1-ubyte.gz", 8)


def read_with_tf(path, compression, image_spec, decode):
    spec = {"image": image_spec, "label": tf.io.FixedLenFeature([1], tf.int64)}
    ds = tf.data.TFRecordDataset([path], compression_type=compression)
    xs, ys = [], []
    for rec in ds:
        ex = tf.io.parse_single_example(rec, spec)
        xs.append(decode(ex["image"]).numpy())
        ys.append(int(ex["label"][0]))
    return np.stack(xs), np.array(ys)


JOB = """name: tf
model:
  - {dense: {units: 32, activation: relu}, input_shape: [784]}
  - {dense: {units: 10}}
loss: {sparse_categorical_crossentropy: {from_logits: true}}
metrics: [accuracy]
optimizer: {adam: {learning_rate: 0.001}}
data:
  scale: 0.00392156862745098
  batch_size: 50
  shuffle_buffer: 10000
  train: %s
train: {epochs: 2}
"""

with tempfile.TemporaryDirectory() as tmp:
    plain = os.path.join(tmp, "t10k.tfrecord")
    gz = os.path.join(tmp, "t10k-f.tfrecord.gz")
    tessera("convert", "--images", FM + "t10k-images-idx3-ubyte.gz", "--labels",
            FM + "t10k-labels-idx1-ubyte.gz", "--out", plain)
    tessera("convert", "--images", FM + "t10k-images-idx3-ubyte.gz", "--labels",
            FM + "t10k-labels-idx1-ubyte.gz", "--out", gz, "--floats")
    x, y = read_with_tf(plain, "", tf.io.FixedLenFeature([], tf.string),
                        lambda s: tf.io.decode_raw(s, tf.uint8))
    check(x.shape == (10000, 784) and (x == images).all(), "bytes: pixels differ")
    check((y == labels).all(), "bytes: labels differ")
    x, y = read_with_tf(gz, "GZIP", tf.io.FixedLenFeature([784], tf.float32), lambda v: v)
    check(x.shape == (10000, 784) and (x == images.astype(np.float32)).all(),
          "floats: pixels differ")
    check((y == labels).all(), "floats: labels differ")

    tf_file = os.path.join(tmp, "by-tf.tfrecord.gz")
    with tf.io.TFRecordWriter(tf_file, options="GZIP") as w:
        for img, lab in zip(images, labels):
            ex = tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(float_list=tf.train.FloatList(value=img.astype(float))),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(lab)])),
            }))
            w.write(ex.SerializeToString())
    with open(os.path.join(tmp, "idx.yaml"), "w") as f:
        f.write(JOB % ("{format: idx, images: %st10k-images-idx3-ubyte.gz, labels: "
                       "%st10k-labels-idx1-ubyte.gz}" % (FM, FM)))
    with open(os.path.join(tmp, "tf.yaml"), "w") as f:
        f.write(JOB % ("{format: tfrecord, files: by-tf.tfrecord.gz, features: "
                       "{image: {float_list: [784]}, label: {int64_list: [1]}}}"))
    on_idx = result(tessera("train", "idx.yaml", cwd=tmp))
    on_tf = result(tessera("train", "tf.yaml", cwd=tmp))
    check(on_idx == on_tf, "trained on TensorFlow's files: %s, on IDX: %s" % (on_tf, on_idx))

finish("TensorFlow reads tessera's TFRecords, and tessera trains on TensorFlow's")
