"""tessera export, loaded by Keras itself (PyPI keras 3 on the TensorFlow backend).

For the three shipped example models (the Fashion-MNIST MLP and CNN, and the text model with an
Embedding): `tessera train` with a checkpoint section, `tessera export`, then
keras.saving.load_model("model.keras") evaluates the job's test split (written by
`tessera convert --job ... --split test`, read with tf.data) and must reach Tessera's own test
accuracy within 0.1 percentage point. The loaded model is compiled with the job's loss, metrics
and optimizer (its iterations carried over), and model.safetensors holds exactly the weights
Keras loaded.

The other way: Keras trains the MLP for an epoch on Fashion-MNIST and saves it with
model.save("m.keras"); `tessera train --init-from m.keras --evaluate` evaluates it to Keras's
own test accuracy within 0.1 percentage point; and a job whose model is the archive alone
(`model: {keras: m.keras}`: the model, the loss, optimizer and metrics compile() was given, the
weights) evaluates to Keras's loss, accuracy and top-3 accuracy within 0.001, then trains on."""
import os
import shutil
import re
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np
import tensorflow as tf
import keras
from safetensors.numpy import load_file

from compat import SOURCE, check, fashion, finish, tessera
def test_split(path, shape, int_input):
    spec = {"image": tf.io.FixedLenFeature(shape, tf.int64 if int_input else tf.float32),
            "label": tf.io.FixedLenFeature([1], tf.int64)}
    xs, ys = [], []
    for rec in tf.data.TFRecordDataset([path]):
        ex = tf.io.parse_single_example(rec, spec)
        xs.append(ex["image"].numpy())
        ys.append(ex["label"].numpy())
    return np.stack(xs), np.concatenate(ys)


CASES = [
    # example, train flags, input shape, integer input, variables
    ("fashion-mnist-mlp.yaml", ["--epochs", "1"], [28 * 28], False, 4),
    ("fashion-mnist-cnn.yaml", ["--steps", "300"], [28, 28, 1], False, 8),
    ("fashion-mnist-resnet.yaml", ["--steps", "300"], [28, 28, 1], False, 17),
    ("text-synthetic.yaml", ["--epochs", "1"], [100], True, 5),
    # the MLP with one-hot labels, smoothed: Keras evaluates it on to_categorical's labels
    ("fashion-mnist-mlp.yaml", ["--steps", "300"], [28 * 28], False, 4,
     "{categorical_crossentropy: {from_logits: true, label_smoothing: 0.1}}"),
]

with tempfile.TemporaryDirectory() as tmp:
    for example, flags, shape, int_input, n_vars, *loss in CASES:
        with open(os.path.join(SOURCE, "examples", example)) as f:
            text = f.read()
        if loss:
            text = re.sub(r"(?m)^loss: .*$", "loss: " + loss[0], text)
            example = example.replace(".yaml", "-cce.yaml")
        job = os.path.join(tmp, example)
        with open(job, "w") as f:
            f.write(text + "\ncheckpoint: {dir: ckpt-%s}\n" % example)
        model_json = example.replace(".yaml", ".json")  # a Keras model the job names
        if os.path.exists(os.path.join(SOURCE, "examples", model_json)):
            shutil.copy(os.path.join(SOURCE, "examples", model_json), tmp)
        out = tessera("train", job, *flags, cwd=tmp)
        m = re.search(r"test accuracy ([0-9.]+)", out)
        check(m is not None, example + ": no test accuracy in " + out)
        ours = float(m.group(1))
        export = os.path.join(tmp, "export-" + example)
        tessera("export", job, "--out", export, cwd=tmp)
        data = os.path.join(tmp, example + ".tfrecord")
        tessera("convert", "--job", job, "--split", "test", "--out", data, cwd=tmp)
        x, y = test_split(data, shape, int_input)
        if len(shape) == 3:
            x = x.reshape(-1, *shape)
        if example.startswith("text"):
            y = y.astype("float32")
        if loss:
            y = keras.utils.to_categorical(y, 10)
        model = keras.saving.load_model(os.path.join(export, "model.keras"))
        result = model.evaluate(x, y, verbose=0, return_dict=True, batch_size=256)
        theirs = result["accuracy"]
        print("%s: tessera %.4f, keras %.4f (loss %.4f), optimizer %s at iteration %d" % (
            example, ours, theirs, result["loss"], model.optimizer.name,
            int(model.optimizer.iterations.numpy())))
        check(abs(theirs - ours) <= 0.001 + 1e-9,
              "%s: Keras evaluates %.4f, Tessera %.4f" % (example, theirs, ours))
        check(int(model.optimizer.iterations.numpy()) > 0, example + ": optimizer iterations")
        weights = load_file(os.path.join(export, "model.safetensors"))
        check(len(weights) == n_vars, "%s: %d tensors in model.safetensors" % (example, len(weights)))
        for layer in model.layers:
            for var, value in zip(layer.weights, layer.get_weights()):
                name = "%s/%s" % (layer.name, var.name)
                check(name in weights and np.array_equal(weights[name], value),
                      "%s: %s differs between model.keras and model.safetensors" % (example, name))

    # Keras to Tessera.
    idx = fashion
    x_train = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784).astype("float32") / 255
    y_train = idx("train-labels-idx1-ubyte.gz", 8)
    x_test = idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784).astype("float32") / 255
    y_test = idx("t10k-labels-idx1-ubyte.gz", 8)
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(clipnorm=1.0),
                  metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(k=3,
                                                                                   name="top3")],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x_train, y_train, epochs=1, batch_size=64, verbose=0)
    keras_result = model.evaluate(x_test, y_test, verbose=0, return_dict=True)
    theirs = keras_result["accuracy"]
    saved = os.path.join(tmp, "from-keras.keras")
    model.save(saved)

    # The archive alone (model: {keras: ...}): its model, its compile config (loss, optimizer,
    # metrics) and its weights, evaluated to Keras's numbers, then trained on.
    archive_job = os.path.join(tmp, "from-keras.yaml")
    with open(os.path.join(SOURCE, "examples", "fashion-mnist-mlp.yaml")) as f:
        text = f.read()
    data = text[text.index("\ndata:"):text.index("\ntrain:")]
    with open(archive_job, "w") as f:
        f.write("model: {keras: from-keras.keras}\n" + data + "\ntrain: {epochs: 1}\n")
    out = tessera("train", archive_job, "--evaluate", cwd=tmp)
    found = dict(re.findall(r"test (loss|accuracy|top3) ([0-9.]+)", out))
    print("Keras's archive: keras %s, tessera %s" % (keras_result, found))
    for key in ["loss", "accuracy", "top3"]:
        check(key in found and abs(float(found[key]) - keras_result[key]) <= 0.001,
              "model: {keras: ...}: Tessera evaluates %s to %s, Keras %.4f" %
              (key, found.get(key), keras_result[key]))
    out = tessera("train", archive_job, cwd=tmp)
    m = re.search(r"test accuracy ([0-9.]+)", out)
    check(m is not None and float(m.group(1)) >= theirs - 0.01,
          "model: {keras: ...} trained on: test accuracy %s, from Keras's %.4f" %
          (m.group(1) if m else None, theirs))
    job = os.path.join(tmp, "fashion-mnist-mlp.yaml")
    out = tessera("train", job, "--init-from", saved, "--evaluate", cwd=tmp)
    m = re.search(r"test accuracy ([0-9.]+)", out)
    ours = float(m.group(1)) if m else -1
    print("Keras's MLP: keras %.4f, tessera %.4f" % (theirs, ours))
    check(abs(theirs - ours) <= 0.001 + 1e-9,
          "Keras's model: Tessera evaluates %.4f, Keras %.4f" % (ours, theirs))

    # A Functional model Keras trained (from the example's JSON, a little) reaches Tessera by
    # its .keras file: the variables are found by Keras's paths, the InputLayer among them.
    with open(os.path.join(SOURCE, "examples", "fashion-mnist-resnet.json")) as f:
        model = keras.models.model_from_json(f.read())
    model.compile(optimizer="adam", metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x_train[:6400].reshape(-1, 28, 28, 1), y_train[:6400], epochs=1, batch_size=64,
              verbose=0)
    theirs = model.evaluate(x_test.reshape(-1, 28, 28, 1), y_test, verbose=0,
                            return_dict=True)["accuracy"]
    saved = os.path.join(tmp, "functional-from-keras.keras")
    model.save(saved)
    job = os.path.join(tmp, "fashion-mnist-resnet.yaml")
    out = tessera("train", job, "--init-from", saved, "--evaluate", cwd=tmp)
    m = re.search(r"test accuracy ([0-9.]+)", out)
    ours = float(m.group(1)) if m else -1
    print("Keras's Functional model: keras %.4f, tessera %.4f" % (theirs, ours))
    check(abs(theirs - ours) <= 0.001 + 1e-9,
          "Keras's Functional model: Tessera evaluates %.4f, Keras %.4f" % (ours, theirs))

    # model.save() keeps the optimizer's state, and Keras's load_model restores it: a job of
    # the archive alone trains on from it (iteration count, slots) as Keras's fit goes on. Keras
    # and Tessera take the same ten batches, in order, from the state Keras left; a job that
    # names its own optimizer starts one anew, and must end elsewhere (the check can fail). The
    # same job under parameter_server (one PS, one worker: one update a batch, as Keras's) has
    # the chief hand the state to the PS, which goes on from it as tessera train does.
    x_more, y_more = x_train[2048:2688], y_train[2048:2688]
    np.save(os.path.join(tmp, "more-x.npy"), x_more)
    np.save(os.path.join(tmp, "more-y.npy"), y_more.astype("int64"))
    more = ("data:\n  train: {format: npy, x: more-x.npy, y: more-y.npy}\n"
            "  batch_size: 64\n  shuffle_buffer: 0\ntrain: {epochs: 1}\n")
    for name, make, accumulate in [
            ("adam", lambda: keras.optimizers.Adam(0.01), None),
            ("sgd-momentum", lambda: keras.optimizers.SGD(0.05, momentum=0.9), None),
            ("rmsprop-centered", lambda: keras.optimizers.RMSprop(0.002, momentum=0.5,
                                                                   centered=True), None),
            ("nadam", lambda: keras.optimizers.Nadam(0.005), None),
            ("adam-accumulate", lambda: keras.optimizers.Adam(0.01), 2)]:
        keras.utils.set_random_seed(2)
        # no bias before BatchNormalization: its gradient is rounding noise, which Adam's
        # normalized step turns into a different walk in every framework
        model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(32, use_bias=False),
                                  keras.layers.BatchNormalization(),
                                  keras.layers.Activation("relu"), keras.layers.Dense(10)])
        opt = make()
        if accumulate:
            opt = opt.__class__.from_config(dict(opt.get_config(),
                                                 gradient_accumulation_steps=accumulate))
        model.compile(optimizer=opt,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        # 30 batches: with accumulation the saved window is full (Keras's iterations 30)
        model.fit(x_train[:1920], y_train[:1920], epochs=1, batch_size=64, shuffle=False,
                  verbose=0)
        archive = os.path.join(tmp, "state-%s.keras" % name)
        model.save(archive)
        iterations = int(model.optimizer.iterations.numpy())
        model.fit(x_more, y_more, epochs=1, batch_size=64, shuffle=False, verbose=0)
        theirs = {"%s/%s" % (l.name, v.name): v.numpy() for l in model.layers for v in l.weights}
        ends = {}
        # --init-from takes the same archive's weights alone: the same optimizer, anew
        for tag, flags in [("state", []), ("fresh", ["--init-from", archive]), ("ps", [])]:
            job = os.path.join(tmp, "state-%s-%s.yaml" % (name, tag))
            with open(job, "w") as f:
                f.write("model: {keras: state-%s.keras}\n%scheckpoint: {dir: ckpt-state-%s-%s}\n"
                        % (name, more, name, tag))
                if tag == "ps":
                    f.write("strategy: parameter_server\n")
            if tag == "ps":
                out = tessera("run", "--local", "--ps", "1", "--workers", "1", job, cwd=tmp)
                check(("the optimizer goes on from iteration %d" % iterations) in out,
                      "%s: the chief does not say the optimizer went on from Keras's iteration "
                      "%d: %s" % (name, iterations, out))
            else:
                out = tessera("train", job, *flags, cwd=tmp)
            export = os.path.join(tmp, "export-state-%s-%s" % (name, tag))
            tessera("export", job, "--out", export, cwd=tmp)
            ours = load_file(os.path.join(export, "model.safetensors"))
            if tag != "fresh" and not accumulate:  # the export's optimizer counts on from Keras's
                went = int(keras.saving.load_model(os.path.join(export, "model.keras"))
                           .optimizer.iterations.numpy())
                check(went == iterations + 10, "%s (%s): the export's optimizer is at iteration "
                      "%d, Keras's went on to %d" % (name, tag, went, iterations + 10))
            ends[tag] = max(float(np.max(np.abs(ours[k] - v)) / (1e-3 + float(np.max(np.abs(v)))))
                            for k, v in theirs.items())
            if tag == "state":
                check(("optimizer went on from iteration %d" % iterations)
                      in out, "%s: tessera train does not say it went on from Keras's iteration "
                      "%d: %s" % (name, iterations, out))
        print("optimizer state of %s (Keras iteration %d): after 10 more batches Tessera's weights "
              "differ from Keras's by %.2e (relative to the largest), %.2e under "
              "parameter_server, %.2e with a fresh optimizer"
              % (name, iterations, ends["state"], ends["ps"], ends["fresh"]))
        for tag in ("state", "ps"):
            check(ends[tag] <= 2e-4, "%s: Tessera trained on from Keras's optimizer state (%s) "
                  "ends %.2e away from Keras" % (name, tag, ends[tag]))
        check(ends["fresh"] > 10 * ends["state"] and ends["fresh"] > 1e-3,
              "%s: a fresh optimizer ends as near (%.2e) as the carried state (%.2e): the check "
              "cannot tell them apart" % (name, ends["fresh"], ends["state"]))

finish("Keras loads tessera's exports and evaluates them to tessera's accuracy")
