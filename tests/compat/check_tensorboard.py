"""tessera train's TensorBoard files, read by TensorBoard itself (PyPI tensorboard).

Trains the Fashion-MNIST MLP for two epochs with a tensorboard section, then loads
<logdir>/<job>/train and /validation with TensorBoard's plugin event accumulator (what the
TensorBoard app reads with) and checks: the first record is file_version brain.Event:2; every
record's length and payload CRC, with TensorBoard's own masked CRC32C; the scalars plugin sees
epoch_loss, epoch_accuracy and a metric's epoch_auc (both runs), learning_rate, batch_loss and
batch_accuracy every update_freq steps; the values equal what tessera train printed for each epoch; the histograms
plugin sees one [30, 3] histogram per weight per epoch whose counts add up to the weight's size."""
import glob
import os
import re
import struct
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.util import tensor_util

from compat import BUILD, SOURCE, check, failures
FASHION = "/usr/share/datasets/fashion-mnist"
UPDATE_FREQ = 100
WEIGHTS = {"dense/kernel": 784 * 32, "dense/bias": 32, "dense_1/kernel": 320, "dense_1/bias": 10}

def records(path):
    """The payloads of a TFRecord file, checking both CRCs of every record."""
    data = open(path, "rb").read()
    off, out = 0, []
    while off < len(data):
        check(off + 12 <= len(data), "%s: record at %d: header cut" % (path, off))
        (length,) = struct.unpack_from("<Q", data, off)
        (len_crc,) = struct.unpack_from("<I", data, off + 8)
        check(len_crc == masked_crc32c(data[off:off + 8]), "%s: record at %d: length CRC" % (path, off))
        payload = data[off + 12:off + 12 + length]
        (crc,) = struct.unpack_from("<I", data, off + 12 + length)
        check(crc == masked_crc32c(payload), "%s: record at %d: payload CRC" % (path, off))
        out.append(payload)
        off += 16 + length
    return out


def main():
    if not os.path.exists(os.path.join(FASHION, "train-images-idx3-ubyte.gz")):
        print("FAIL: %s is missing (Debian package dataset-fashion-mnist)" % FASHION)
        return 1
    tmp = tempfile.mkdtemp(prefix="tessera-compat-tb-")
    logdir = os.path.join(tmp, "tb")
    job = open(os.path.join(SOURCE, "examples", "fashion-mnist-mlp.yaml")).read()
    job = job.replace("name: fashion-mnist-mlp", "name: tb-mlp")
    job = job.replace("units: 128", "units: 32")
    job = job.replace("metrics: [accuracy]", "metrics: [accuracy, auc]")
    job = job.replace("train: {epochs: 5}", "train: {epochs: 2}\ntensorboard: {logdir: %s, "
                      "update_freq: %d, histogram_freq: 1}" % (logdir, UPDATE_FREQ))
    job_path = os.path.join(tmp, "job.yaml")
    open(job_path, "w").write(job)
    run = subprocess.run([os.path.join(BUILD, "tessera"), "train", job_path],
                         capture_output=True, text=True, timeout=600)
    print(run.stdout, run.stderr)
    if run.returncode != 0:
        print("FAIL: tessera train exited %d" % run.returncode)
        return 1
    printed = [tuple(float(x) for x in m) for m in re.findall(
        r"epoch \d+/2: loss ([\d.]+) - accuracy ([\d.]+) - auc ([\d.]+) - test_loss ([\d.]+) - "
        r"test_accuracy ([\d.]+) - test_auc ([\d.]+)", run.stdout)]
    steps = int(re.search(r"trained tb-mlp: (\d+) steps", run.stdout).group(1))
    check(len(printed) == 2, "two epochs printed")

    runs = {}
    for name in ("train", "validation"):
        files = glob.glob(os.path.join(logdir, "tb-mlp", name, "events.out.tfevents.*"))
        check(len(files) == 1, "%s: one event file, found %s" % (name, files))
        first = event_pb2.Event.FromString(records(files[0])[0])
        check(first.file_version == "brain.Event:2", "%s: first record is file_version" % name)
        acc = pea.EventAccumulator(os.path.join(logdir, "tb-mlp", name),
                                   size_guidance={pea.TENSORS: 0})
        acc.Reload()
        runs[name] = acc

    def scalars(run, tag):
        if tag not in runs[run].Tags()[pea.TENSORS]:
            return []
        return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                for e in runs[run].Tensors(tag)]

    train_tags = set(runs["train"].PluginTagToContent("scalars"))
    for tag in ("epoch_loss", "epoch_accuracy", "epoch_auc", "learning_rate", "batch_loss",
                "batch_accuracy", "epoch_examples_per_second", "epoch_steps_per_second"):
        check(tag in train_tags, "train: scalars plugin has %s (has %s)" % (tag, sorted(train_tags)))
    check(set(runs["validation"].PluginTagToContent("scalars")) ==
          {"epoch_loss", "epoch_accuracy", "epoch_auc"},
          "validation: scalars are epoch_loss, epoch_accuracy and epoch_auc")
    for e, (loss, acc, auc, test_loss, test_acc, test_auc) in enumerate(printed):
        for run, tag, want in (("train", "epoch_loss", loss), ("train", "epoch_accuracy", acc),
                               ("train", "epoch_auc", auc),
                               ("validation", "epoch_loss", test_loss),
                               ("validation", "epoch_accuracy", test_acc),
                               ("validation", "epoch_auc", test_auc)):
            got = dict(scalars(run, tag)).get(e)
            check(got is not None and abs(got - want) <= 6e-5,
                  "%s %s at epoch %d: %s, printed %s" % (run, tag, e, got, want))
    lr = scalars("train", "learning_rate")
    check([s for s, _ in lr] == [0, 1] and all(abs(v - 0.001) < 1e-9 for _, v in lr),
          "learning_rate 0.001 at epochs 0 and 1: %s" % lr)
    batch_steps = [s for s, _ in scalars("train", "batch_loss")]
    check(batch_steps == list(range(UPDATE_FREQ, steps + 1, UPDATE_FREQ)),
          "batch_loss every %d steps up to %d: %s" % (UPDATE_FREQ, steps, batch_steps))

    hist_tags = set(runs["train"].PluginTagToContent("histograms"))
    check(hist_tags == {w + "/histogram" for w in WEIGHTS}, "histograms: %s" % sorted(hist_tags))
    for w, size in WEIGHTS.items():
        for e in runs["train"].Tensors(w + "/histogram"):
            h = tensor_util.make_ndarray(e.tensor_proto)
            check(h.shape == (30, 3) and int(h[:, 2].sum()) == size and
                  all(h[i, 1] <= h[i + 1, 0] + 1e-12 for i in range(29)),
                  "%s at epoch %d: shape %s, count %s of %d" % (w, e.step, h.shape,
                                                                h[:, 2].sum(), size))
    check_cluster(tmp, job)
    if failures:
        print("%d checks failed" % len(failures))
        return 1
    print("ok: TensorBoard reads every scalar and histogram tessera train and the chief wrote")
    return 0


def check_cluster(tmp, job):
    """The chief of a parameter-server job writes the same scalars and histograms (the weights
    pulled from the PS tasks between epochs); its last epoch's match the job's result line. It
    applies the mean gradient of 2 batches (accumulate_steps) under a decaying learning rate:
    the learning_rate it writes is the schedule's at the optimizer's updates, half the steps."""
    logdir = os.path.join(tmp, "tb-cluster")
    job = job.replace("name: tb-mlp", "name: tb-ps").replace("strategy: one_device",
                                                              "strategy: parameter_server")
    job = re.sub(r"tensorboard: \{.*\}", "tensorboard: {logdir: %s, update_freq: %d, "
                 "histogram_freq: 1}" % (logdir, UPDATE_FREQ), job)
    job += "partitioner: {fixed: {num_shards: 3}}\n"  # histograms put together from 3 shards
    job = job.replace("optimizer: {adam: {learning_rate: 0.001}}",
                      "optimizer: {adam: {learning_rate: {exponential_decay: "
                      "{initial_learning_rate: 0.001, decay_steps: 100, decay_rate: 0.5}}}}")
    job = job.replace("train: {epochs: 2}", "train: {epochs: 2, accumulate_steps: 2}")
    check("accumulate_steps" in job and "exponential_decay" in job, "the cluster job: %s" % job)
    job_path = os.path.join(tmp, "job-ps.yaml")
    open(job_path, "w").write(job)
    run = subprocess.run([os.path.join(BUILD, "tessera"), "run", "--local", "--ps", "2",
                          "--workers", "1", job_path], capture_output=True, text=True, timeout=600)
    print(run.stdout, run.stderr)
    m = re.search(r"succeeded: (\d+) steps.*; loss ([\d.]+), accuracy ([\d.]+), auc ([\d.]+); "
                  r"test loss ([\d.]+), test accuracy ([\d.]+), test auc ([\d.]+)", run.stdout)
    check(run.returncode == 0 and m is not None, "tessera run --local exited %d" % run.returncode)
    if m is None:
        return
    steps = int(m.group(1))
    final = [float(x) for x in m.groups()[1:]]
    runs = {}
    for name in ("train", "validation"):
        acc = pea.EventAccumulator(os.path.join(logdir, "tb-ps", name),
                                   size_guidance={pea.TENSORS: 0})
        acc.Reload()
        runs[name] = acc

    def scalars(run, tag):
        if tag not in runs[run].Tags()[pea.TENSORS]:
            return []
        return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                for e in runs[run].Tensors(tag)]

    tags = set(runs["train"].PluginTagToContent("scalars"))
    check(tags == {"epoch_loss", "epoch_accuracy", "epoch_auc", "learning_rate", "batch_loss",
                   "batch_accuracy", "epoch_examples_per_second", "epoch_steps_per_second"},
          "chief: train scalars %s" % sorted(tags))
    for run, tag, want in (("train", "epoch_loss", final[0]), ("train", "epoch_accuracy", final[1]),
                           ("train", "epoch_auc", final[2]),
                           ("validation", "epoch_loss", final[3]),
                           ("validation", "epoch_accuracy", final[4]),
                           ("validation", "epoch_auc", final[5])):
        got = scalars(run, tag)
        check([s for s, _ in got] == [0, 1] and abs(got[-1][1] - want) <= 6e-5,
              "chief: %s %s at epochs 0 and 1, the last %s (printed %s)" % (run, tag, got, want))
    lr = scalars("train", "learning_rate")
    want = 0.001 * 0.5 ** ((steps // 2) / 100)  # at the last epoch's end: steps / 2 updates
    check(len(lr) == 2 and abs(lr[-1][1] - want) <= 1e-7,
          "chief: learning_rate %s, the schedule's at %d updates %.8f" % (lr, steps // 2, want))
    batch_steps = [s for s, _ in scalars("train", "batch_loss")]
    check(batch_steps == list(range(UPDATE_FREQ, steps + 1, UPDATE_FREQ)),
          "chief: batch_loss every %d steps up to %d: %s" % (UPDATE_FREQ, steps, batch_steps))
    hist_tags = set(runs["train"].PluginTagToContent("histograms"))
    check(hist_tags == {w + "/histogram" for w in WEIGHTS}, "chief: histograms %s" % sorted(hist_tags))
    for w, size in WEIGHTS.items():
        events = runs["train"].Tensors(w + "/histogram")
        check([e.step for e in events] == [0, 1], "chief: %s at epochs 0 and 1" % w)
        for e in events:
            h = tensor_util.make_ndarray(e.tensor_proto)
            check(h.shape == (30, 3) and int(h[:, 2].sum()) == size,
                  "chief: %s at epoch %d: shape %s, count %s of %d" % (w, e.step, h.shape,
                                                                       h[:, 2].sum(), size))


sys.exit(main())
