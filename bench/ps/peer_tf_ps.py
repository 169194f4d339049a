"""TensorFlow peer of bench/ps: ParameterServerStrategy with a ClusterCoordinator, 1 PS + 1 worker.

    python peer_tf_ps.py --steps N --steps-per-execution K --batch B --warmup W

Run as above, the script is the chief (the coordinator). It starts one parameter server and one
worker as child processes (this script again, with --role ps|worker and a TF_CONFIG naming the
cluster {chief, worker: [1], ps: [1]}, all at 127.0.0.1; TensorFlow's gRPC servers still listen
on all interfaces, which tf.distribute.Server has no option against), connects to them with
tf.distribute.ParameterServerStrategy, and builds under its scope the MLP 784-128 relu-10
(logits), Adam(learning_rate=0.001) and sparse categorical cross-entropy. The variables live on
the PS. The worker reads Fashion-MNIST batches (shuffled, the last batch of an epoch partial)
from a per-worker dataset, built on the worker from the pixels as bytes and scaled there to the
float32 values fmnist.load_train gives (a quarter of the bytes to send). Each scheduled closure
is one tf.function that runs K training steps. The chief schedules ceil(W/K) untimed closures
(at least one) and joins (tracing, connections), then times scheduling ceil(N/K) closures and
coordinator.join(), and prints one JSON line: steps per second over the steps actually run
(ceil(N/K) * K), the mean loss over them, and the TensorFlow version. Everything else goes to
stderr. The children are killed when the chief ends, however it ends; a child exits by itself
when its parent has gone, and the chief exits non-zero if a child dies during training (the
coordinator would otherwise wait for it to come back).

Needs TensorFlow 2.x with Keras 2 as tf.keras (written against tensorflow-cpu 2.15.1) and numpy.
"""

import argparse
import atexit
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))

HOST = "127.0.0.1"
PROG = "peer_tf_ps.py"
START_TIMEOUT = 120.0  # seconds for the children's servers to listen


def log(msg):
    print("%s: %s" % (PROG, msg), file=sys.stderr, flush=True)


def fail(msg):
    log(msg)
    sys.exit(1)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog=PROG)
    ap.add_argument("--steps", type=int, default=400, help="timed training steps (rounded up to "
                    "a multiple of --steps-per-execution)")
    ap.add_argument("--steps-per-execution", type=int, default=1,
                    help="training steps per scheduled closure")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hidden", default="128",
                    help="widths of the hidden relu layers, comma-separated (default 128)")
    ap.add_argument("--role", choices=["chief", "ps", "worker"], default="chief",
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.steps < 1 or args.steps_per_execution < 1 or args.batch < 1 or args.warmup < 0:
        ap.error("--steps, --steps-per-execution and --batch must be positive, --warmup >= 0")
    import fmnist

    try:
        args.hidden = fmnist.parse_widths(args.hidden)
    except ValueError as e:
        ap.error(str(e))
    return args


# ---- children: a PS or a worker server ------------------------------------------------------

def watch_parent(parent):
    """Ends this process once its parent has gone (a killed chief cannot clean up after itself)."""
    def loop():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=loop, daemon=True).start()


def serve(role):
    watch_parent(int(os.environ.get("PEER_TF_PS_PARENT", os.getppid())))
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type != role:
        fail("TF_CONFIG names task %r, not %r" % (resolver.task_type, role))
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", start=True)
    log("%s %d serving at %s" % (role, resolver.task_id, server.target))
    server.join()


# ---- chief: starts and stops the children -----------------------------------------------------

class Cluster:
    """The PS and worker child processes, each in a session (process group) of its own."""

    def __init__(self, workers=1):
        self.procs = []
        self.socks = {}
        self.spec = {}
        self.workers = workers
        self.lock = threading.Lock()
        self.stopping = False

    def tasks(self):
        return [("ps", 0)] + [("worker", i) for i in range(self.workers)]

    def reserve_ports(self):
        # Held open until just before the children start, so nothing else takes them meanwhile.
        for job, n in (("chief", 1), ("worker", self.workers), ("ps", 1)):
            self.spec[job] = []
            for i in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind((HOST, 0))
                self.socks[(job, i)] = s
                self.spec[job].append("%s:%d" % (HOST, s.getsockname()[1]))

    def release_port(self, job, index=0):
        s = self.socks.pop((job, index), None)
        if s is not None:
            s.close()

    def tf_config(self, job, index=0):
        return json.dumps({"cluster": self.spec, "task": {"type": job, "index": index}})

    def start_task(self, job, index):
        """Starts (or starts again, at its address) one child; returns its Popen."""
        env = dict(os.environ, TF_CONFIG=self.tf_config(job, index), TF_CPP_MIN_LOG_LEVEL="2",
                   PEER_TF_PS_PARENT=str(os.getpid()))
        self.release_port(job, index)
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", job],
                             env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr,
                             start_new_session=True)
        self.procs.append((job, p))
        return p

    def start(self):
        return {task: self.start_task(*task) for task in self.tasks()}

    def check(self):
        for job, p in self.procs:
            if p.poll() is not None:
                fail("the %s process exited early with status %d" % (job, p.returncode))

    def wait_listening(self):
        deadline = time.monotonic() + START_TIMEOUT
        for job, index in self.tasks():
            port = int(self.spec[job][index].rsplit(":", 1)[1])
            while True:
                self.check()
                try:
                    socket.create_connection((HOST, port), timeout=1.0).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        fail("the %s server did not listen on port %d within %.0f s"
                             % (job, port, START_TIMEOUT))
                    time.sleep(0.1)

    def monitor(self):
        """Ends the chief if a child dies: the coordinator would wait for it to come back."""
        def loop():
            while not self.stopping:
                for job, p in self.procs:
                    if p.poll() is not None and not self.stopping:
                        log("the %s process exited with status %d during training"
                            % (job, p.returncode))
                        self.stop()
                        sys.stderr.flush()
                        os._exit(1)
                time.sleep(0.2)

        threading.Thread(target=loop, daemon=True).start()

    def stop(self):
        with self.lock:
            self.stopping = True
            self._kill()

    def _kill(self):
        for s in self.socks.values():
            s.close()
        self.socks.clear()
        for _, p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for _, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log("child %d did not exit" % p.pid)
        self.procs = []


def on_signal(signum, frame):
    raise SystemExit(128 + signum)  # so that finally blocks and atexit run


def connect(cluster):
    """The chief's strategy and coordinator over the children's cluster."""
    import tensorflow as tf

    os.environ["TF_CONFIG"] = cluster.tf_config("chief")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    cluster.release_port("chief")  # the strategy starts the chief's own server on it
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    try:
        coordinator_cls = tf.distribute.coordinator.ClusterCoordinator
    except AttributeError:
        coordinator_cls = tf.distribute.experimental.coordinator.ClusterCoordinator
    return strategy, coordinator_cls(strategy)


def build_steps(strategy, coordinator, hidden, batch, seed, k):
    """The MLP, Adam and the per-worker Fashion-MNIST iterator on the cluster, and a tf.function
    of k training steps on a worker (one closure) that returns their mean loss."""
    import numpy as np
    import tensorflow as tf
    import fmnist

    keras = tf.keras
    keras.utils.set_random_seed(seed)
    x, y = fmnist.load_train()
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((784,))]
            + [keras.layers.Dense(h, activation="relu") for h in hidden]
            + [keras.layers.Dense(10)])
        optimizer = keras.optimizers.Adam(learning_rate=0.001)
        # Slots and the step counter as PS variables now, not inside the first traced step.
        optimizer.build(model.trainable_variables)
    # Per-example losses: one worker runs one replica on whole batches, so their mean is the
    # batch's loss (a partial last batch included).
    loss_fn = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=keras.losses.Reduction.NONE)

    # The pixels travel to the worker as the bytes they were read from (a quarter of the float32
    # array) and become fmnist's float32 x / 255 there, bit for bit, once per dataset.
    pixels = np.rint(x * np.float32(255.0)).astype(np.uint8)
    if not np.array_equal(pixels.astype(np.float32) * np.float32(1.0 / 255.0), x):
        fail("fmnist's pixels are not bytes scaled by 1/255")
    del x

    def dataset_fn(_input_context=None):
        images = tf.cast(tf.constant(pixels), tf.float32) * tf.constant(1.0 / 255.0, tf.float32)
        ds = tf.data.Dataset.from_tensor_slices((images, y))
        ds = ds.shuffle(len(y), seed=seed, reshuffle_each_iteration=True)
        return ds.batch(batch).repeat().prefetch(2)

    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = tf.reduce_mean(loss_fn(yb, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_steps(it):
        """K steps on the worker, one closure; returns their mean loss."""
        loss_sum = tf.constant(0.0)
        for _ in tf.range(k):
            xb, yb = next(it)
            loss_sum += strategy.run(replica_step, args=(xb, yb))
        return loss_sum / k

    return train_steps, iterator


def train(args, cluster):
    import numpy as np
    import tensorflow as tf

    strategy, coordinator = connect(cluster)
    log("connected to the cluster")
    k = args.steps_per_execution
    train_steps, per_worker_iterator = build_steps(strategy, coordinator, args.hidden,
                                                   args.batch, args.seed, k)

    def run(closures):
        results = [coordinator.schedule(train_steps, args=(per_worker_iterator,))
                   for _ in range(closures)]
        coordinator.join()
        return results

    log("warming up")
    t0 = time.monotonic()
    run(max(1, math.ceil(args.warmup / k)))
    log("warm-up done in %.1f s" % (time.monotonic() - t0))
    closures = math.ceil(args.steps / k)
    t0 = time.perf_counter()
    results = run(closures)
    seconds = time.perf_counter() - t0
    losses = [float(r.fetch()) for r in results]
    steps = closures * k
    loss = float(np.mean(losses))
    if not math.isfinite(loss):
        fail("the loss is not finite: %r" % loss)
    print(json.dumps({"steps_per_second": steps / seconds, "steps": steps, "seconds": seconds,
                      "loss": loss, "version": "tensorflow %s" % tf.__version__,
                      "steps_per_execution": k, "batch": args.batch}), flush=True)


def main(argv):
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.role != "chief":
        serve(args.role)
        return
    cluster = Cluster()
    atexit.register(cluster.stop)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    status = 1
    try:
        t0 = time.monotonic()
        cluster.reserve_ports()
        cluster.start()
        cluster.wait_listening()
        cluster.monitor()
        log("servers up after %.1f s" % (time.monotonic() - t0))
        train(args, cluster)
        status = 0
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
        log("failed")
    finally:
        cluster.stop()
    # Straight out: at interpreter exit TensorFlow's eager context would try to reach the servers
    # just killed and log a screenful of gRPC errors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main(sys.argv[1:])
