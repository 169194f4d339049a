"""One rank of PyTorch DistributedDataParallel over gloo training the Fashion-MNIST MLP
(784-128-10, Adam 1e-3) for bench/sync/mwms.py, as Tessera's multi_worker_mirrored does it:
each step a global batch of P x --batch examples from one shuffled order, each rank its
contiguous slice. Rank 0 prints one JSON line with the examples/s of all ranks together.

    peer_ddp.py --rank R --size P --master HOST:PORT [--batch 64] [--steps N] [--warmup N]
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
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--master", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=50)
    args = ap.parse_args()
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(1)
    host, port = args.master.rsplit(":", 1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, port
    dist.init_process_group("gloo", rank=args.rank, world_size=args.size)
    x, y = fmnist.load_train()
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    order = np.random.default_rng(1).permutation(len(x))
    glob = args.batch * args.size
    pos, t0 = 0, None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        if pos + glob > len(order):
            pos = 0
        idx = torch.from_numpy(order[pos + args.rank * args.batch:pos + (args.rank + 1) * args.batch])
        pos += glob
        loss = F.cross_entropy(ddp(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    seconds = time.perf_counter() - t0
    if args.rank == 0:
        print(json.dumps({"side": "ddp", "examples_per_second": args.steps * glob / seconds,
                          "loss": float(loss)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
