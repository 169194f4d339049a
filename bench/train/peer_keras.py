"""Keras (TensorFlow) peer of bench/train: model.fit on the same model, data, batch, optimizer.

    python peer_keras.py --model mlp|cnn|resnet|resnet3 --batch B --threads N --warmup W --steps S

Loads Fashion-MNIST into numpy arrays first, then runs one model.fit (shuffle on, the last
batch of an epoch partial) over W + S steps; a callback takes the time at the end of step W and
of step W + S and stops training there. Prints one JSON line like peer_torch.py, with the
TensorFlow and Keras versions. TensorFlow gets `--threads` intra-op threads and one inter-op
thread, as PyTorch gets torch.set_num_threads(N) and one interop thread.
"""

import math
import os
import sys
import time

import fmnist


def keras_version():
    from importlib import metadata

    try:
        return metadata.version("keras")
    except metadata.PackageNotFoundError:
        return "bundled"


def main(argv):
    args = fmnist.parse_args(argv, "peer_keras.py")
    if args.warmup < 1:
        sys.exit("peer_keras.py: --warmup must be at least 1 (the timer starts at a step's end)")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras = tf.keras
    keras.utils.set_random_seed(args.seed)
    layers = keras.layers

    x, y = fmnist.load_train()
    if args.model == "mlp":
        model = keras.Sequential([
            keras.Input((784,)), layers.Dense(128, activation="relu"), layers.Dense(10)])
    elif args.model in ("resnet", "resnet3"):  # the example's Functional model, from its JSON
        x = x.reshape(-1, 28, 28, 1)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(os.path.join(root, "examples", "fashion-mnist-%s.json" % args.model)) as f:
            model = keras.models.model_from_json(f.read())
    else:
        x = x.reshape(-1, 28, 28, 1)  # channels last, Keras's default
        model = keras.Sequential([
            keras.Input((28, 28, 1)),
            layers.Conv2D(32, 3, activation="relu"), layers.MaxPooling2D(2),
            layers.Conv2D(64, 3, activation="relu"), layers.MaxPooling2D(2),
            layers.Flatten(), layers.Dense(64, activation="relu"), layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

    total = args.warmup + args.steps
    sizes = fmnist.batch_sizes(len(y), args.batch, total)
    steps_per_epoch = math.ceil(len(y) / args.batch)

    class Timer(keras.callbacks.Callback):
        step, t0, t1, logs = 0, None, None, {}

        def on_train_batch_end(self, batch, logs=None):
            Timer.step += 1
            if Timer.step == args.warmup:
                Timer.t0 = time.perf_counter()
            elif Timer.step == total:
                Timer.t1 = time.perf_counter()
                Timer.logs = dict(logs or {})
                self.model.stop_training = True

    model.fit(x, y, batch_size=args.batch, epochs=math.ceil(total / steps_per_epoch),
              shuffle=True, verbose=0, callbacks=[Timer()])
    if Timer.t1 is None:
        sys.exit("peer_keras.py: model.fit stopped after %d of %d steps" % (Timer.step, total))
    logs = Timer.logs
    fmnist.report(sum(sizes[args.warmup:]), Timer.t1 - Timer.t0, float(logs.get("loss", "nan")),
                  float(logs.get("accuracy", "nan")),
                  version="tensorflow %s, keras %s" % (tf.__version__, keras_version()),
                  threads=args.threads)


if __name__ == "__main__":
    main(sys.argv[1:])
