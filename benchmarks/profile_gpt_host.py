"""Where the host time of bench_gpt_step.py's minidl step goes: a few warm steps, then cProfile over N steps
(each step synchronised, so the figures are Python's own), and the GPU's busy time per step from CUDA events.
The minidl functions are listed by cumulative and by own time.

    python3 benchmarks/profile_gpt_host.py [--fp32] [--steps 10] [--top 40]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fp32", action="store_true", help="no autocast (default: bf16 autocast)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    import cupy

    from bench_gpt_step import make_steps

    ours, _ = make_steps(amp=not args.fp32)
    for _ in range(5):
        ours()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        ours()
    cupy.cuda.Device().synchronize()
    wall = (time.perf_counter() - start) / args.steps
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.steps):
        ours()
    cupy.cuda.Device().synchronize()
    profile.disable()
    print(f"{'fp32' if args.fp32 else 'bf16 autocast'}: {wall * 1e3:.2f} ms per step (no profiler)")
    for key in ("cumulative", "tottime"):
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text).sort_stats(key)
        stats.print_stats(args.top)
        print(text.getvalue().split("\n", 6)[-1][:12000])


if __name__ == "__main__":
    main()
