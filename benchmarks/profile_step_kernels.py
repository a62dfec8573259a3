"""Where a minidl training step's GPU time goes, kernel by kernel: torch.profiler's CUPTI tracing sees every
kernel of the process (ours, CuPy's elementwise and copy kernels, cuBLAS), which minidl.profiler does not
(it times the primitive calls only). One model of bench_gpu_train_step.py, eager, in a math mode, optionally
channels_last (or, with --gpt, bench_gpt_step.py's char_gpt step); prints the kernels by total GPU time per step. --sources adds, for every kernel minidl did not
write (CuPy's elementwise, reduction, copy and fill kernels, memsets and copies), the minidl source line that
launched it: one more step runs under torch.profiler's Python tracer, and each kernel is matched, through its
launch call's correlation id, to the innermost minidl frames around that call.

    python3 benchmarks/profile_step_kernels.py --model 2 --math bf16 --channels-last [--steps 3] [--top 30] [--sources]
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
    ap.add_argument("--gpt", action="store_true", help="bench_gpt_step.py's char_gpt step instead (--math fp32|bf16)")
    ap.add_argument("--math", choices=("fp32", "tf32", "bf16"), default="bf16")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--sources", action="store_true", help="where each CuPy-launched kernel comes from")
    ap.add_argument("--torch", action="store_true", help="the same model's torch step instead (what to compare with)")
    args = ap.parse_args()

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    tf32 = args.math == "tf32"
    minidl.backends.cudnn.allow_tf32 = tf32
    minidl.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    if args.gpt:
        from bench_gpt_step import make_steps

        ours, theirs = make_steps(amp=args.math == "bf16")
        step = theirs if args.torch else ours
        name = "char_gpt (bench_gpt_step.py)" + (", torch" if args.torch else "")
    elif args.torch:
        name, step = _model_step(args, torch)
        name += ", torch"
    else:
        name, step = _model_step(args, minidl)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    report(args, name, prof, DeviceType)
    if args.sources:
        print_sources(profile, ProfilerActivity, step)


def _model_step(args, minidl):
    """(name, step) of one model of bench_gpu_train_step.py; `minidl` may be the torch module too (--torch)."""
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

    return name, step


def report(args, name, prof, DeviceType):
    """The kernels of the profiled steps by total GPU time."""
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


def _ours(kernel_name: str) -> bool:
    """Whether a kernel is one of kernels/*.cu: CuPy's own are cupy_* (elementwise, reduction, copy, fill) or
    CUB's / Thrust's (reductions, sorts, scans)."""
    return not (kernel_name.startswith("cupy_") or "cub::" in kernel_name or "thrust::" in kernel_name)


def print_sources(profile, ProfilerActivity, step):
    """One step under the Python tracer; each non-minidl kernel -> the minidl lines around its launch call."""
    import json
    import tempfile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
        step()
        import torch

        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    events = json.load(open(path))["traceEvents"]
    python = [e for e in events if e.get("cat") == "python_function" and "dur" in e]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    where = collections.Counter()
    for k in events:
        if k.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset") or _ours(k.get("name", "")):
            continue
        launch = launches.get(k.get("args", {}).get("correlation"))
        frames = []
        if launch is not None:
            around = [p for p in python if p["tid"] == launch["tid"] and p["ts"] <= launch["ts"] <= p["ts"] + p["dur"]]
            frames = [p["name"] for p in sorted(around, key=lambda p: -p["ts"]) if "minidl/" in p["name"]
                      and "/benchmarks/" not in p["name"]][:3]
        where[(k["name"][:60], " <- ".join(f.split("minidl/")[-1] for f in frames) or "(no minidl frame)")] += 1
    print("\n| calls | kernel (not minidl's) | launched from (innermost minidl frames) |")
    print("| ---: | --- | --- |")
    for (kname, frames), n in sorted(where.items(), key=lambda kv: -kv[1]):
        print(f"| {n} | `{kname}` | {frames} |")


if __name__ == "__main__":
    main()
