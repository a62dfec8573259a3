"""Host cost of one op on the GPU: minidl against torch on tiny CUDA tensors, where the kernels cost next to
nothing and what is left is the framework's host path (Python, checks, autocast, the tape, CuPy's launch).
bench_op_overhead.py's CPU yardstick, for the path an eager GPU training step takes (issue 23: the small CNNs
and the char_gpt step are host-bound; this says which op costs what).

Each case runs the same work in both frameworks many times without a sync inside the loop (the GPU keeps up:
every kernel is tiny), one sync per round, and reports the median microseconds per call over --repeats rounds
(minidl's and torch's rounds interleaved) and the ratio. "GPU ops" is how many kernels, memsets and copies
one call of minidl's case queues (torch.profiler, which sees CuPy's launches too) against torch's.

    python3 benchmarks/bench_gpu_op_overhead.py                          # table on stdout
    python3 benchmarks/bench_gpu_op_overhead.py --out benchmarks/results/gpu_op_overhead.md
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import minidl  # noqa: E402
import minidl.nn as mnn  # noqa: E402
import minidl.nn.functional as MF  # noqa: E402
from benchmarks._report import git_commit  # noqa: E402
from benchmarks.bench_op_overhead import _time_pair  # noqa: E402  (the GPU drained after every round: syncs)


def _gpu_ops(torch, fn, sync) -> int:
    """Kernels, memsets and copies one call of fn queues (CUPTI through torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        sync()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


def cases(torch):
    import torch.nn.functional as TF

    rng = np.random.default_rng(0)

    def pair(*shape, grad=False):
        a = rng.standard_normal(shape).astype(np.float32)
        return (minidl.tensor(a, device="cuda", requires_grad=grad),
                torch.tensor(a, device="cuda", requires_grad=grad))

    (ma, ta), (mb, tb) = pair(64, 64), pair(64, 64)
    (mg, tg) = pair(64, 64, grad=True)
    (mx, tx) = pair(8, 16, 64, grad=True)
    mlin, tlin = mnn.Linear(64, 64).to("cuda"), torch.nn.Linear(64, 64).cuda()
    tlin.load_state_dict({k: torch.tensor(v.cpu().numpy()) for k, v in mlin.state_dict().items()})
    (mq, tq) = pair(2, 2, 16, 32, grad=True)
    (mi, ti) = pair(8, 4, 16, 16, grad=True)
    mconv, tconv = mnn.Conv2d(4, 8, 3, padding=1).to("cuda"), torch.nn.Conv2d(4, 8, 3, padding=1).cuda()
    mbn, tbn = mnn.BatchNorm2d(8).to("cuda"), torch.nn.BatchNorm2d(8).cuda()

    def backward_of(f, x, F):
        def run():
            f(F).sum().backward()
            x.grad = None
        return run

    def autocast(lib, f):
        def run():
            with lib.autocast("cuda", dtype=lib.bfloat16):
                return f()
        return run

    def linear_step(lin, x, lib):
        def run():
            with lib.autocast("cuda", dtype=lib.bfloat16):
                y = lin(x)
            y.float().sum().backward()
            x.grad = None
            for p in lin.parameters():
                p.grad = None
        return run

    def conv_bn_step(conv, bn, x, lib, F):
        def run():
            F.relu(bn(conv(x))).sum().backward()
            x.grad = None
            for p in (*conv.parameters(), *bn.parameters()):
                p.grad = None
        return run

    return [
        ("a + b (no grad)", lambda: ma + mb, lambda: ta + tb, 5000),
        ("a * 2.5 (no grad)", lambda: ma * 2.5, lambda: ta * 2.5, 5000),
        ("a @ b (no grad)", lambda: ma @ mb, lambda: ta @ tb, 3000),
        ("a.sum()", lambda: ma.sum(), lambda: ta.sum(), 3000),
        ("a + b (a requires grad)", lambda: mg + mb, lambda: tg + tb, 3000),
        ("cast to bfloat16", lambda: ma.to(minidl.bfloat16), lambda: ta.to(torch.bfloat16), 3000),
        ("relu(x).sum().backward()", backward_of(lambda F: F.relu(mg), mg, MF),
         backward_of(lambda F: F.relu(tg), tg, TF), 1000),
        ("linear (bf16 autocast, no grad)", autocast(minidl, lambda: mlin(ma)), autocast(torch, lambda: tlin(ta)),
         2000),
        ("linear fwd+bwd (bf16 autocast)", linear_step(mlin, mx, minidl), linear_step(tlin, tx, torch), 500),
        ("layer_norm fwd+bwd", backward_of(lambda F: F.layer_norm(mx, (64,)), mx, MF),
         backward_of(lambda F: F.layer_norm(tx, (64,)), tx, TF), 1000),
        ("gelu fwd+bwd", backward_of(lambda F: F.gelu(mx), mx, MF), backward_of(lambda F: F.gelu(tx), tx, TF), 1000),
        ("dropout fwd+bwd", backward_of(lambda F: F.dropout(mx, 0.2), mx, MF),
         backward_of(lambda F: F.dropout(tx, 0.2), tx, TF), 1000),
        ("sdpa causal fwd+bwd (fp32)",
         backward_of(lambda F: F.scaled_dot_product_attention(mq, mq, mq, is_causal=True), mq, MF),
         backward_of(lambda F: F.scaled_dot_product_attention(tq, tq, tq, is_causal=True), tq, TF), 500),
        ("conv-bn-relu fwd+bwd (fp32)", conv_bn_step(mconv, mbn, mi, minidl, MF),
         conv_bn_step(tconv, tbn, ti, torch, TF), 300),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the iteration counts (0.1 for a quick look)")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import cupy
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    syncs = (cupy.cuda.Device().synchronize, torch.cuda.synchronize)
    rows = []
    for name, mine, theirs, number in cases(torch):
        ours_us, torch_us = _time_pair(mine, theirs, max(10, int(number * args.scale)), args.repeats, syncs)
        ops = (_gpu_ops(torch, mine, syncs[0]), _gpu_ops(torch, theirs, syncs[1]))
        rows.append((name, ours_us, torch_us, ours_us / torch_us, ops))
        print(f"{name:40s} {ours_us:9.1f} us {torch_us:9.1f} us {ours_us / torch_us:6.2f}x  ops {ops[0]} / {ops[1]}",
              flush=True)
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    lines = [
        "# Host cost of one op on the GPU: minidl against torch (issue 23)", "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit "
        f"{args.commit or git_commit()}, {device}, torch {torch.__version__}, CuPy {cupy.__version__}. Tiny "
        "CUDA tensors (64x64, 8x16x64, ...): the kernels cost next to nothing, so a call's time is its host path. "
        f"Median us per call over {args.repeats} interleaved rounds, one sync per round. GPU ops: kernels, "
        "memsets and copies one call queues (torch.profiler), minidl / torch. Produced by "
        "`python3 benchmarks/bench_gpu_op_overhead.py`.", "",
        "| op | minidl us | torch us | ratio | GPU ops (minidl / torch) |", "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {n} | {a:.1f} | {b:.1f} | {r:.2f}x | {o[0]} / {o[1]} |" for n, a, b, r, o in rows]
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
