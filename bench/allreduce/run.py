#!/usr/bin/env python3
"""bench/allreduce: Tessera's ring all-reduce (bench-allreduce, worker/ring.c) beside
torch.distributed's gloo all_reduce (Debian's python3-torch), float32 buffers between P
processes on loopback, and iperf3's single TCP stream (the wire's limit), in one run. Prints the
median time of each size, busbw as nccl-tests defines it (bytes / time * 2 (P - 1) / P), and the
ratios; the issue's target is >= 1.5x gloo at 64 MiB.

    bench/allreduce/run.sh [--rounds N] [--ranks P] [--mib 4,64,256]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM_PYTHON = "/usr/bin/python3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(cmds):
    """Starts one process per rank, returns rank 0's JSON lines."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            sys.exit("%s failed (exit %d): %s" % (" ".join(p.args[:2]), p.returncode, err[-2000:]))
    return [json.loads(line) for line in outs[0][0].splitlines() if line.startswith("{")]


def tessera(binary, ranks, mib):
    ports = [free_port() for _ in range(ranks)]
    return run_ranks([[binary, "--rank", str(r), "--size", str(ranks), "--listen",
                       "127.0.0.1:%d" % ports[r], "--next", "127.0.0.1:%d" % ports[(r + 1) % ranks],
                       "--mib", mib] for r in range(ranks)])


def gloo(ranks, mib):
    master = "127.0.0.1:%d" % free_port()
    return run_ranks([[SYSTEM_PYTHON, os.path.join(HERE, "peer_gloo.py"), "--rank", str(r),
                       "--size", str(ranks), "--master", master, "--mib", mib]
                      for r in range(ranks)])


def iperf3():
    port = str(free_port())
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", port], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            try:
                out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", port, "-t", "3", "-J"],
                                     capture_output=True, text=True, timeout=30)
                if out.returncode == 0:
                    return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 8
            except (subprocess.TimeoutExpired, ValueError, KeyError):
                pass
        return None
    finally:
        server.kill()
        server.wait()


def main():
    ap = argparse.ArgumentParser(prog="bench/allreduce/run.sh")
    ap.add_argument("--binary", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--mib", default="4,64,256")
    args = ap.parse_args()
    p = args.ranks
    times = {}
    for r in range(args.rounds):
        for side, fn in (("tessera", lambda: tessera(args.binary, p, args.mib)),
                         ("gloo", lambda: gloo(p, args.mib))):
            for row in fn():
                times.setdefault((side, row["mib"]), []).append(row["seconds"])
                print("round %d %-8s %4d MiB %8.2f ms" % (r + 1, side, row["mib"],
                                                          row["seconds"] * 1e3), file=sys.stderr)
    wire = iperf3()
    print("all-reduce of float32 buffers, %d processes on loopback, median of %d rounds"
          " (each the median of 5 calls); busbw = bytes / time * 2(P-1)/P:" % (p, args.rounds))
    print("  %8s %12s %12s %14s %14s %8s  %s" % ("size", "tessera ms", "gloo ms", "tessera busbw",
                                                "gloo busbw", "ratio", "target"))
    for mib in (int(m) for m in args.mib.split(",")):
        t = statistics.median(times[("tessera", mib)])
        g = statistics.median(times[("gloo", mib)])
        scale = mib * (1 << 20) * 2 * (p - 1) / p / 1e9
        target = ">= 1.5x: %s" % ("PASS" if g / t >= 1.5 else "MISS") if mib == 64 else ""
        print("  %5d MiB %12.2f %12.2f %9.2f GB/s %9.2f GB/s %7.2fx  %s" % (
            mib, t * 1e3, g * 1e3, scale / t, scale / g, g / t, target))
    if wire:
        print("  iperf3 single stream on loopback: %.2f GB/s" % (wire / 1e9))
    else:
        print("  iperf3: no figure (is iperf3 installed?)")


if __name__ == "__main__":
    main()
