"""TensorFlow's side of bench/files: tf.train.Checkpoint of the same variables, and tf.data
reading the same TFRecord files.

  peer_tf.py ckpt DIR ROUNDS SHAPE...   (SHAPE: 784x128 ...; each variable and its 2 Adam slots)
  peer_tf.py tfrecord ROUNDS FILE...

Prints "key value" lines (medians), like bench-files."""
import glob
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def sync_all(prefix):
    for f in glob.glob(prefix + "*"):
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def ckpt(directory, rounds, shapes):
    vars_ = {}
    for i, s in enumerate(shapes):
        shape = [int(d) for d in s.split("x")]
        for slot in ("value", "m", "v"):
            vars_["v%d_%s" % (i, slot)] = tf.Variable(tf.random.uniform(shape))
    checkpoint = tf.train.Checkpoint(**vars_)
    writes, reads, size = [], [], 0
    for r in range(rounds):
        prefix = os.path.join(directory, "tf-%d" % r)
        t0 = time.perf_counter()
        path = checkpoint.write(prefix)
        sync_all(path)  # the same durability Tessera's checkpoints have
        writes.append(time.perf_counter() - t0)
        files = glob.glob(path + ".data-*")
        size = sum(os.path.getsize(f) for f in files)
        for f in glob.glob(path + "*"):
            evict(f)
        t0 = time.perf_counter()
        checkpoint.read(path).assert_consumed()
        reads.append(time.perf_counter() - t0)
    print("ckpt_bytes %d" % size)
    print("ckpt_write_bytes_per_s %.0f" % (size / statistics.median(writes)))
    print("ckpt_restore_bytes_per_s %.0f" % (size / statistics.median(reads)))


def tfrecord(rounds, files):
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    spec = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([1], tf.int64)}

    def decode(batch):
        ex = tf.io.parse_example(batch, spec)
        x = tf.cast(tf.io.decode_raw(ex["image"], tf.uint8), tf.float32) / 255.0
        return x, ex["label"]

    options = tf.data.Options()
    options.threading.private_threadpool_size = 1  # one core, as Tessera's reader
    ds = tf.data.TFRecordDataset(files).batch(1024).map(decode).with_options(options)
    size = sum(os.path.getsize(f) for f in files)
    times = []
    for _ in range(rounds):
        n = 0
        t0 = time.perf_counter()
        for x, _ in ds:
            n += int(x.shape[0])
        times.append(time.perf_counter() - t0)
    print("tfrecord_bytes %d" % size)
    print("tfrecord_examples %d" % n)
    print("tfrecord_bytes_per_s %.0f" % (size / statistics.median(times)))


if sys.argv[1] == "ckpt":
    ckpt(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
else:
    tfrecord(int(sys.argv[2]), sys.argv[3:])
