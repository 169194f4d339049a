"""The GPU benchmark's peer: the same models, batches and Adam steps in PyTorch on CUDA, three
ways: eager, torch.compile (the default mode) and the whole step captured in a CUDA graph
(static input tensors, Adam(capturable=True), as PyTorch's own whole-network capture recipe
does), in float32 without TF32 as Tessera computes. Its batches are on the GPU already, where
Tessera copies each from the host. Prints one line a case and mode, as bench-gpu does:

    CASE MODE examples_per_s=N step_ms=N

    python3 peer_torch.py [--device cuda] [--steps N] [--warmup N] [--modes eager,compile,graphs]
        [CASE...]
"""
import argparse
import sys
import time

import torch
from torch import nn

CASES = {
    "mlp64": ("mlp", 64),
    "mlp1024": ("mlp", 1024),
    "cnn64": ("cnn", 64),
    "cnn256": ("cnn", 256),
    "wide1024": ("wide", 1024),
}


def model_of(kind):
    # Keras's layouts: channels last is Tessera's; PyTorch convolves NCHW, the same arithmetic.
    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    if kind == "wide":
        return nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                             nn.Linear(2048, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 64), nn.ReLU(),
                         nn.Linear(64, 10))


def batches(kind, batch, device, count=16):
    shape = (batch, 784) if kind != "cnn" else (batch, 1, 28, 28)
    xs = [torch.rand(shape, device=device) for _ in range(count)]
    ys = [torch.randint(0, 10, (batch,), device=device) for _ in range(count)]
    return xs, ys


def run(kind, batch, mode, device, steps, warmup):
    torch.manual_seed(0)
    model = model_of(kind).to(device)
    loss_fn = nn.CrossEntropyLoss()
    xs, ys = batches(kind, batch, device)
    if mode == "graphs":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
        static_x, static_y = xs[0].clone(), ys[0].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up outside the graph, as the recipe asks
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                loss_fn(model(static_x), static_y).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = loss_fn(model(static_x), static_y)
            static_loss.backward()
            opt.step()

        def step(i):
            static_x.copy_(xs[i % len(xs)])
            static_y.copy_(ys[i % len(ys)])
            graph.replay()
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        forward = torch.compile(model) if mode == "compile" else model

        def step(i):
            opt.zero_grad(set_to_none=True)
            loss_fn(forward(xs[i % len(xs)]), ys[i % len(ys)]).backward()
            opt.step()

    for i in range(warmup):
        step(i)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--modes", default="eager,compile,graphs")
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    if args.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(args.device))  # the graphs' streams on it too
        # float32 as Tessera computes it: no TF32 rounding in cuBLAS or cuDNN
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    for name in args.cases or list(CASES):
        kind, batch = CASES[name]
        for mode in args.modes.split(","):
            if mode == "graphs" and not args.device.startswith("cuda"):
                continue
            try:
                secs = run(kind, batch, mode, args.device, args.steps, args.warmup)
            except Exception as e:  # a mode this PyTorch lacks (compile without Triton): say so
                why = " ".join(str(e).split())[:120]  # one line
                print(f"{name} {mode} unavailable: {type(e).__name__}: {why}", flush=True)
                continue
            print(f"{name} {mode} examples_per_s={args.steps * batch / secs:.0f} "
                  f"step_ms={1e3 * secs / args.steps:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
