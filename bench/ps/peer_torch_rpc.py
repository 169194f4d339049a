"""PyTorch peer of bench/ps: a parameter server over torch.distributed.rpc, 1 PS + 1 trainer.

    python peer_torch_rpc.py --steps N --batch B --warmup W [--rendezvous file|tcp]
                             [--tensorpipe uv|default]

The pattern of PyTorch's "parameter server with RPC" tutorial, reduced to one trainer. The script
starts two processes (itself again, with --role ps|trainer): the PS, rank 0, and the trainer, rank
1, joined by init_rpc (TensorPipe backend, world size 2, its sockets on 127.0.0.1). They meet at a
file store in a temporary directory, or with --rendezvous tcp at torch's TCP store at
MASTER_ADDR=127.0.0.1 and a free MASTER_PORT (which torch 1.13 listens for on all interfaces; the
rendezvous only, the same speed after it). TensorPipe moves the tensors over its uv transport (TCP
on loopback) with its basic channel: its default pick here, the shm transport, polls busily and so
competes with the two processes' compute on a small machine, which made it slower and erratic on 2
CPUs (--tensorpipe default restores it). The PS holds the MLP 784-128 relu-10 and
torch.optim.Adam(lr=0.001). Every trainer step pulls the current weights from the PS with rpc_sync,
loads them into the trainer's own copy of the model, runs forward and backward on a batch of
Fashion-MNIST (a fresh random order each epoch, the last batch of an epoch partial), and pushes the
gradients with rpc_sync; the PS applies Adam to them under a lock. The trainer runs W untimed
steps, then N timed ones. The launcher prints one JSON line: steps per second over the timed steps,
the mean loss over them, and the torch version; everything else goes to stderr. Both processes run
one intra-op and one inter-op thread. The children are killed when the launcher ends, however it
ends, and the launcher fails as soon as either exits non-zero; a child exits by itself (removing
the launcher's temporary directory) when its parent has gone.

Runs under any interpreter with torch (with torch.distributed.rpc) and numpy, e.g. Debian's
python3-torch.
"""

import argparse
import atexit
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))

HOST = "127.0.0.1"
PROG = "peer_torch_rpc.py"
PS_NAME, TRAINER_NAME = "ps", "trainer"


def log(msg):
    print("%s: %s" % (PROG, msg), file=sys.stderr, flush=True)


def fail(msg):
    log(msg)
    sys.exit(1)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog=PROG)
    ap.add_argument("--steps", type=int, default=500, help="timed training steps")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hidden", default="128",
                    help="widths of the hidden relu layers, comma-separated (default 128)")
    ap.add_argument("--rendezvous", choices=["file", "tcp"], default="file",
                    help="init_rpc's rendezvous: a file store in a temporary directory (default), "
                    "or torch's TCP store at MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, which "
                    "torch 1.13 listens for on all interfaces")
    ap.add_argument("--tensorpipe", choices=["uv", "default"], default="uv",
                    help="TensorPipe's transports and channels: uv (TCP over loopback, the "
                    "basic channel; default) or default (TensorPipe's own pick, shm here, whose "
                    "busy-polling reactor competes for the CPUs)")
    ap.add_argument("--role", choices=["launcher", "ps", "trainer"], default="launcher",
                    help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.warmup < 0:
        ap.error("--steps and --batch must be positive, --warmup >= 0")
    import fmnist

    try:
        args.hidden = fmnist.parse_widths(args.hidden)
    except ValueError as e:
        ap.error(str(e))
    return args


# ---- both ranks -------------------------------------------------------------------------------

def build_model(hidden):
    import torch.nn as nn

    layers, width = [], 784
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, 10))


def watch_parent(parent, tmp):
    """Ends this process once its parent has gone (a killed launcher cannot clean up after it),
    removing the launcher's temporary directory too."""
    def loop():
        while os.getppid() == parent:
            time.sleep(0.5)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        os._exit(3)

    threading.Thread(target=loop, daemon=True).start()


def init_rpc(name, rank, tensorpipe):
    import torch
    from torch.distributed import rpc

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    # PEER_TORCH_RPC_INIT: file:///... or env:// (MASTER_ADDR and MASTER_PORT), from the launcher.
    kw = {}
    if tensorpipe == "uv":
        kw = dict(_transports=["uv"], _channels=["basic"])
    options = rpc.TensorPipeRpcBackendOptions(init_method=os.environ["PEER_TORCH_RPC_INIT"], **kw)
    rpc.init_rpc(name, rank=rank, world_size=2, rpc_backend_options=options)
    return rpc


# ---- rank 0: the parameter server -------------------------------------------------------------

class ParameterServer:
    def __init__(self, seed, hidden):
        import torch

        torch.manual_seed(seed)
        self.model = build_model(hidden)
        self.params = list(self.model.parameters())
        self.optimizer = torch.optim.Adam(self.params, lr=0.001)
        self.lock = threading.Lock()
        self.updates = 0

    def pull(self):
        # Copies taken under the lock: the reply is serialized after this returns, while a
        # concurrent push could be updating the parameters in place.
        with self.lock:
            return [p.detach().clone() for p in self.params]

    def push(self, grads):
        with self.lock:
            for p, g in zip(self.params, grads):
                p.grad = g
            self.optimizer.step()
            self.updates += 1


SERVER = None  # the ParameterServer, in the PS process


# What the trainer calls by RPC: module-level functions, so that they pickle by name (the
# script is __main__ in both processes).
def ps_pull():
    return SERVER.pull()


def ps_push(grads):
    SERVER.push(grads)


def run_ps(args):
    global SERVER
    SERVER = ParameterServer(args.seed, args.hidden)
    rpc = init_rpc(PS_NAME, 0, args.tensorpipe)
    rpc.shutdown()  # waits until the trainer has finished and shut down too
    log("PS applied %d updates" % SERVER.updates)


# ---- rank 1: the trainer ----------------------------------------------------------------------

def run_trainer(args):
    import torch
    import torch.nn.functional as F
    import fmnist

    xs, ys = fmnist.load_train()
    rpc = init_rpc(TRAINER_NAME, 1, args.tensorpipe)
    torch.manual_seed(args.seed)
    x, y = torch.from_numpy(xs), torch.from_numpy(ys)
    n = len(y)
    model = build_model(args.hidden)
    params = list(model.parameters())
    sizes = fmnist.batch_sizes(n, args.batch, args.warmup + args.steps)

    perm, pos = torch.randperm(n), 0
    loss_sum = examples = 0.0
    t0 = time.perf_counter()
    for step, size in enumerate(sizes):
        if step == args.warmup:
            t0 = time.perf_counter()
            loss_sum = examples = 0.0
        weights = rpc.rpc_sync(PS_NAME, ps_pull)
        with torch.no_grad():
            for p, w in zip(params, weights):
                p.copy_(w)
        idx = perm[pos:pos + size]
        xb, yb = x.index_select(0, idx), y.index_select(0, idx)
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        rpc.rpc_sync(PS_NAME, ps_push, args=([p.grad for p in params],))
        loss_sum += loss.item() * size
        examples += size
        pos += size
        if pos == n:
            perm, pos = torch.randperm(n), 0
    seconds = time.perf_counter() - t0
    rpc.shutdown()
    loss = loss_sum / examples
    if not math.isfinite(loss):
        fail("the loss is not finite: %r" % loss)
    with open(args.result, "w") as f:
        json.dump({"steps_per_second": args.steps / seconds, "steps": args.steps,
                   "seconds": seconds, "loss": loss, "version": torch.__version__,
                   "batch": args.batch, "threads": torch.get_num_threads(),
                   "tensorpipe": args.tensorpipe}, f)


# ---- the launcher -----------------------------------------------------------------------------

class Children:
    """The PS and trainer processes, each in a session (process group) of its own."""

    def __init__(self):
        self.procs = []
        self.lock = threading.Lock()

    def start(self, role, argv, env):
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", role] + argv,
                             env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr,
                             start_new_session=True)
        self.procs.append((role, p))

    def wait(self):
        """Until both exit; fails as soon as one exits with a non-zero status."""
        while True:
            running = 0
            for role, p in self.procs:
                if p.poll() is None:
                    running += 1
                elif p.returncode != 0:
                    fail("the %s process exited with status %d" % (role, p.returncode))
            if not running:
                return
            time.sleep(0.05)

    def stop(self):
        with self.lock:
            for _, p in self.procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            for role, p in self.procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    log("the %s process (%d) did not exit" % (role, p.pid))
            self.procs = []


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def on_signal(signum, frame):
    raise SystemExit(128 + signum)  # so that finally blocks and atexit run


def launch(args):
    try:
        from torch.distributed import rpc
    except ImportError as e:
        fail("torch.distributed.rpc is missing: %s" % e)
    if not rpc.is_available():
        fail("this torch was built without torch.distributed.rpc")

    children = Children()
    atexit.register(children.stop)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    with tempfile.TemporaryDirectory(prefix="peer_torch_rpc.") as tmp:
        result = os.path.join(tmp, "result.json")
        # TensorPipe's listening sockets on loopback only (TP_SOCKET_IFNAME).
        env = dict(os.environ, TP_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo",
                   PEER_TORCH_RPC_PARENT=str(os.getpid()), PEER_TORCH_RPC_TMP=tmp)
        if args.rendezvous == "tcp":
            env.update(MASTER_ADDR=HOST, MASTER_PORT=str(free_port()),
                       PEER_TORCH_RPC_INIT="env://")
        else:
            env["PEER_TORCH_RPC_INIT"] = "file://" + os.path.join(tmp, "rendezvous")
        common = ["--batch", str(args.batch), "--steps", str(args.steps),
                  "--warmup", str(args.warmup), "--seed", str(args.seed),
                  "--hidden", ",".join(str(h) for h in args.hidden),
                  "--tensorpipe", args.tensorpipe]
        try:
            children.start("ps", common, env)
            children.start("trainer", common + ["--result", result], env)
            children.wait()
        finally:
            children.stop()
        try:
            with open(result) as f:
                out = json.load(f)
        except (OSError, ValueError) as e:
            fail("the trainer left no result: %s" % e)
    print(json.dumps(out), flush=True)


def main(argv):
    args = parse_args(argv)
    if args.role == "launcher":
        launch(args)
        return
    watch_parent(int(os.environ.get("PEER_TORCH_RPC_PARENT", os.getppid())),
                 os.environ.get("PEER_TORCH_RPC_TMP"))
    try:
        if args.role == "ps":
            run_ps(args)
        else:
            run_trainer(args)
    except Exception:
        traceback.print_exc()
        fail("the %s failed" % args.role)


if __name__ == "__main__":
    main(sys.argv[1:])
