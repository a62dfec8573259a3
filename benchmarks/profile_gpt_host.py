"""Where the host time of an eager training step goes: bench_gpt_step.py's minidl step (default), or one
model of bench_gpu_train_step.py (--model I --math fp32|tf32|bf16). A few warm steps, the wall time per step
without the profiler, then cProfile over N steps; the functions by cumulative and by own time.

    python3 benchmarks/profile_gpt_host.py [--fp32] [--steps 10] [--top 40]
    python3 benchmarks/profile_gpt_host.py --model 0 --math tf32      # the MNIST CNN with TF32 (issue 23)
    python3 benchmarks/profile_gpt_host.py --dump $OUT/gpt_bf16.prof   # raw stats, to sort and read elsewhere
    python3 benchmarks/profile_gpt_host.py --model 1 --sync-each       # as bench_gpu_train_step.py times it

--sync-each waits for the GPU after every step, as the benchmark's rows do (each step starts on an idle GPU), and
also prints the median host time of a step so; a step whose host time grows under it waits for the GPU somewhere
(the profile then shows where: the waiting call's own time).
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
    ap.add_argument("--model", type=int, default=None, help="index into bench_gpu_train_step.MODELS")
    ap.add_argument("--math", choices=("fp32", "tf32", "bf16"), default="fp32")
    ap.add_argument("--sync-each", action="store_true", help="wait for the GPU after each step (the benchmark's way)")
    ap.add_argument("--dump", default=None, help="also write the raw cProfile stats here (pstats.Stats reads them)")
    args = ap.parse_args()
    import cupy

    if args.model is None:
        from bench_gpt_step import make_steps

        ours, _ = make_steps(amp=not args.fp32)
        label = "fp32" if args.fp32 else "bf16 autocast"
    else:
        ours = _train_step(args.model, args.math)
        label = f"model {args.model}, {args.math}"
    for _ in range(5):
        ours()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        ours()
    cupy.cuda.Device().synchronize()
    wall = (time.perf_counter() - start) / args.steps
    host = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        ours()
        host.append(time.perf_counter() - t0)
        cupy.cuda.Device().synchronize()
    host = sorted(host)[len(host) // 2]
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.steps):
        ours()
        if args.sync_each:
            cupy.cuda.Device().synchronize()
    cupy.cuda.Device().synchronize()
    profile.disable()
    print(f"{label}: {wall * 1e3:.2f} ms per step back to back, host {host * 1e3:.2f} ms (median) when each step "
          f"starts on an idle GPU (no profiler)")
    if args.dump:
        profile.dump_stats(args.dump)
    for key in ("cumulative", "tottime"):
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text).sort_stats(key)
        stats.print_stats(args.top)
        print(text.getvalue().split("\n", 6)[-1][:12000])


def _train_step(index, math):
    import numpy as np

    import minidl
    from bench_gpu_train_step import MODELS

    tf32 = math == "tf32"
    minidl.backends.cudnn.allow_tf32 = tf32
    minidl.backends.cuda.matmul.allow_tf32 = tf32
    build, make_batch, opt_name = MODELS[list(MODELS)[index]]
    model = build(minidl.nn).to("cuda")
    x, y = make_batch(np.random.default_rng(0))
    x, y = minidl.tensor(x, device="cuda"), minidl.tensor(y, device="cuda")
    opt = minidl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if opt_name == "sgd" else \
        minidl.optim.Adam(model.parameters(), lr=1e-3)
    F = minidl.nn.functional

    def step():
        opt.zero_grad()
        with minidl.autocast("cuda", dtype=minidl.bfloat16, enabled=math == "bf16"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


if __name__ == "__main__":
    main()
