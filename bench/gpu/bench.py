"""The GPU benchmark's report: Tessera's bench-gpu and PyTorch (peer_torch.py: eager,
torch.compile, CUDA graphs) on the same cases, alternating round by round on the same GPU, then
each case's median examples/s, Tessera's achieved TFLOP/s beside the GPU's float32 peak, and
the ratios Tessera / PyTorch. Run through bench/gpu/run.sh."""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ["mlp64", "mlp1024", "cnn64", "cnn256", "wide1024"]
MODES = ["eager", "compile", "graphs"]
# float32 without tensor cores (Tessera's products are float32, TF32 off), from NVIDIA's sheets
PEAK_TFLOPS = {"H100": 66.9, "H200": 66.9, "A100": 19.5}


KEYS = ("examples_per_s", "step_ms", "tflops")


def parse(lines, with_mode):
    out = {}
    for line in lines.splitlines():
        f = line.split()
        if len(f) < 2 or "unavailable" in line:
            continue
        vals = {}
        for x in f:
            k, _, v = x.partition("=")
            try:
                if k in KEYS:
                    vals[k] = float(v)
            except ValueError:
                pass
        if "examples_per_s" in vals:
            out[(f[0], f[1]) if with_mode else f[0]] = vals
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-gpu", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a side may take a round")
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    cases = args.cases or CASES
    common = ["--steps", str(args.steps)]
    ours, peer = {}, {}
    for r in range(args.rounds):
        t = subprocess.run([args.bench_gpu, "--device", args.device] + common + cases,
                           capture_output=True, text=True, timeout=args.timeout)
        sys.stderr.write(t.stderr)
        if t.returncode != 0 and not t.stdout.strip():
            print(f"bench-gpu failed (exit {t.returncode}): {t.stderr.strip()}")
            return 1
        for k, v in parse(t.stdout, False).items():
            ours.setdefault(k, []).append(v)
        p = subprocess.run([sys.executable, os.path.join(HERE, "peer_torch.py"), "--device",
                            args.device] + common + cases, capture_output=True, text=True,
                           timeout=args.timeout)
        sys.stderr.write(p.stderr)
        for line in p.stdout.splitlines():
            if "unavailable" in line and r == 0:
                print("pytorch:", line)
        for k, v in parse(p.stdout, True).items():
            peer.setdefault(k, []).append(v)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    try:
        import torch
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    except ImportError:
        name = "unknown"
    peak = next((v for k, v in PEAK_TFLOPS.items() if k in name), None)
    print(f"device: {name}; float32 peak {peak or '?'} TFLOP/s; medians of {args.rounds} rounds "
          f"of {args.steps} steps; PyTorch in float32 (no TF32), its batches on the GPU already, "
          f"Tessera's copied from the host each step")
    print(f"{'case':10} {'tessera ex/s':>13} {'TFLOP/s':>8} " +
          " ".join(f"{m + ' ex/s':>13} {'ratio':>6}" for m in MODES))
    for c in cases:
        if c not in ours:
            print(f"{c:10} tessera failed")
            continue
        eps = statistics.median(v["examples_per_s"] for v in ours[c])
        tf = statistics.median(v["tflops"] for v in ours[c])
        row = f"{c:10} {eps:13.0f} {tf:8.3f} "
        for m in MODES:
            if (c, m) in peer:
                p = statistics.median(v["examples_per_s"] for v in peer[(c, m)])
                row += f"{p:13.0f} {eps / p:6.2f} "
            else:
                row += f"{'-':>13} {'-':>6} "
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
