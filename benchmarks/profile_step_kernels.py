"""Where a minidl training step's GPU time goes, kernel by kernel: torch.profiler's CUPTI tracing sees every
kernel of the process (ours, CuPy's elementwise and copy kernels, cuBLAS), which minidl.profiler does not
(it times the primitive calls only). One model of bench_gpu_train_step.py, eager, in a math mode, optionally
channels_last; prints the kernels by total GPU time per step.

    python3 benchmarks/profile_step_kernels.py --model 2 --math bf16 --channels-last [--steps 3] [--top 30]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import minidl  # noqa: E402
from bench_gpu_train_step import MODELS  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=int, default=2, help="index into bench_gpu_train_step.MODELS")
    ap.add_argument("--math", choices=("fp32", "tf32", "bf16"), default="bf16")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    tf32 = args.math == "tf32"
    minidl.backends.cudnn.allow_tf32 = tf32
    minidl.backends.cuda.matmul.allow_tf32 = tf32
    name = list(MODELS)[args.model]
    build, make_batch, opt_name = MODELS[name]
    model = build(minidl.nn).to("cuda")
    x, y = make_batch(np.random.default_rng(0))
    x, y = minidl.tensor(x, device="cuda"), minidl.tensor(y, device="cuda")
    if args.channels_last and x.ndim == 4:
        model.to(memory_format=minidl.channels_last)
        x = x.to(memory_format=minidl.channels_last)
    opt = minidl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if opt_name == "sgd" else \
        minidl.optim.Adam(model.parameters(), lr=1e-3)
    F = minidl.nn.functional

    def step():
        opt.zero_grad()
        if args.math == "bf16":
            with minidl.autocast("cuda", dtype=minidl.bfloat16):
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    total = collections.defaultdict(float)
    count = collections.Counter()
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            total[e.name] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            count[e.name] += 1
    all_ms = sum(total.values()) / 1e3 / args.steps
    print(f"{name}, {args.math}{', channels_last' if args.channels_last else ''}: {all_ms:.2f} ms of kernels per step, "
          f"{sum(count.values()) / args.steps:.0f} GPU operations per step")
    print("| ms / step | share | calls / step | kernel |")
    print("| ---: | ---: | ---: | --- |")
    for kname, us in sorted(total.items(), key=lambda kv: -kv[1])[: args.top]:
        ms = us / 1e3 / args.steps
        print(f"| {ms:.3f} | {100 * ms / all_ms:.1f}% | {count[kname] / args.steps:.0f} | `{kname[:90]}` |")


if __name__ == "__main__":
    main()
