"""Where an example's training time goes on the GPU: runs one example (its own main(), its own flags) for a
few batches under torch.profiler's CUPTI tracing (every kernel of the process: ours, CuPy's, cuBLAS) and
Python's cProfile, and prints the GPU kernels by total time and the Python functions by own time.

Written for issue 24's open question (ptb_lm.py --amp took 34 s an epoch against 10.6 s in fp32):

    python3 benchmarks/profile_example.py ptb_lm --limit-batches 120 --epochs 1 --no-progress
    python3 benchmarks/profile_example.py ptb_lm --limit-batches 120 --epochs 1 --no-progress --amp

Any flag after the example's name goes to the example. --top N (before the name) sets the rows shown.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import importlib
import io
import os
import pstats
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))


def main():
    ap = argparse.ArgumentParser(usage="profile_example.py [--top N] EXAMPLE [example flags ...]")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("example")
    args, rest = ap.parse_known_args()
    module = importlib.import_module(args.example)

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    py = cProfile.Profile()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        py.enable()
        module.main(rest + ["--checkpoint", "/tmp/profile_example.ckpt"])
        py.disable()
    wall = time.perf_counter() - start
    kernels = collections.Counter()
    calls = collections.Counter()
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            kernels[e.name] += e.device_time_total
            calls[e.name] += 1
    total = sum(kernels.values())
    print(f"\n{args.example} {' '.join(rest)}: wall {wall:.2f} s, GPU kernel time {total / 1e6:.2f} s, "
          f"{sum(calls.values())} kernel launches")
    print(f"{'GPU ms':>9} {'calls':>7}  kernel")
    for name, us in kernels.most_common(args.top):
        print(f"{us / 1e3:9.1f} {calls[name]:7d}  {name[:110]}")
    text = io.StringIO()
    pstats.Stats(py, stream=text).sort_stats("tottime").print_stats(args.top)
    print(text.getvalue()[-9000:])
    del torch


if __name__ == "__main__":
    main()
