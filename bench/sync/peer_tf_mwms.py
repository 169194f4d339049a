"""One worker of TensorFlow's MultiWorkerMirroredStrategy (tensorflow-cpu, in the benchmark's
virtual environment) training the Fashion-MNIST MLP (784-128-10, Adam 1e-3) with Keras's fit
for bench/sync/mwms.py: a global batch of P x --batch examples split over the workers, one
intra-op and one inter-op thread each. Worker 0 prints one JSON line with the examples/s of all
workers together, timed from the end of the warm-up steps.

    peer_tf_mwms.py --rank R --workers HOST:PORT,HOST:PORT [--batch 64] [--steps N] [--warmup N]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import fmnist  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--workers", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=50)
    args = ap.parse_args()
    workers = args.workers.split(",")
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                          "task": {"type": "worker", "index": args.rank}})
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x, y = fmnist.load_train()
    glob = args.batch * len(workers)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(10000, seed=1).repeat().batch(glob)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(128, activation="relu",
                                                           input_shape=(784,)),
                                     tf.keras.layers.Dense(10)])
        model.compile(optimizer=tf.keras.optimizers.Adam(1e-3),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Timer(tf.keras.callbacks.Callback):
        t0 = None

        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 == args.warmup:
                Timer.t0 = time.perf_counter()

    timer = Timer()
    model.fit(ds, epochs=1, steps_per_epoch=args.warmup + args.steps, verbose=0,
              callbacks=[timer])
    seconds = time.perf_counter() - Timer.t0
    if args.rank == 0:
        print(json.dumps({"side": "tf", "examples_per_second": args.steps * glob / seconds}),
              flush=True)


if __name__ == "__main__":
    main()
