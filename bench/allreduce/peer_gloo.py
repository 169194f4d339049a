"""One rank of torch.distributed's gloo all_reduce for bench/allreduce/run.sh: the same float32
buffer sizes as bench-allreduce, a few times each, and one JSON line per size (rank 0) with the
median time. Run one process per rank:

    peer_gloo.py --rank R --size P --master HOST:PORT --mib 4,64,256 [--iters N] [--warmup N]
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--master", required=True)
    ap.add_argument("--mib", default="4,64,256")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    host, port = args.master.rsplit(":", 1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, port
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=args.rank, world_size=args.size)
    for mib in (int(m) for m in args.mib.split(",")):
        t = torch.arange(mib * (1 << 20) // 4, dtype=torch.float32).remainder_(7)
        times = []
        for k in range(args.warmup + args.iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            if k >= args.warmup:
                times.append(time.perf_counter() - t0)
        if args.rank == 0:
            print(json.dumps({"side": "gloo", "mib": mib, "ranks": args.size,
                              "seconds": statistics.median(times)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
