"""Host time of one Conv2d forward + backward on the GPU: how long Python takes to queue the kernels.

A launch-bound training loop pays this on every layer of every step, so it is measured on its own: a
small convolution whose kernels finish faster than the host can queue them (the GPU is never the
bottleneck), perf_counter around `y = conv(x); y.backward(dy)`, median and p10/p90 of --iters calls
after a warm-up. Only public API (nn.Conv2d), so the same script measures any tree: run it with
PYTHONPATH pointing at each to compare before/after.

    PYTHONPATH=. python3 benchmarks/bench_conv_host_time.py --label after
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import minidl
import minidl.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=400)
    ap.add_argument("--label", default="")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    import cupy

    rng = np.random.default_rng(0)
    rows = []
    for shape, cin, cout in (((32, 64, 16, 16), 64, 64), ((8, 3, 32, 32), 3, 16)):
        conv = nn.Conv2d(cin, cout, 3, padding=1, bias=True).to(args.device)
        x = minidl.tensor(rng.standard_normal(shape).astype(np.float32), device=args.device, requires_grad=True)
        dy = minidl.tensor(rng.standard_normal((shape[0], cout) + shape[2:]).astype(np.float32), device=args.device)
        times = []
        for i in range(args.iters + 50):
            t0 = time.perf_counter()
            y = conv(x)
            y.backward(dy)
            t1 = time.perf_counter()
            if i >= 50:
                times.append((t1 - t0) * 1e6)
            if i % 50 == 49:
                cupy.cuda.Device().synchronize()
                x.grad = None
                conv.zero_grad()
        t = np.asarray(times)
        rows.append(f"| {args.label} | Conv2d {cin}->{cout} 3x3, x {shape} | {np.median(t):.1f} | "
                    f"{np.percentile(t, 10):.1f}-{np.percentile(t, 90):.1f} |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
