"""Benchmark minidl's memory-bound GPU primitives against torch/cuDNN in the same process.

For pooling, batch norm (training forward), softmax, ReLU and LRN, at the sizes of
docs/GPU.md and at one size of 256 MB or more each, this measures
  * our kernel and torch's (cuDNN where torch uses it) on the same inputs, TF32 off,
  * the achieved bandwidth: the compulsory bytes (read the input once, write the output once)
    over the time, and that as a fraction of a device-to-device copy measured in this same run.
Timing: CUDA events around each call, warm-up first (it includes the NVRTC compile), median of
the repeats. Writes a markdown table to --out and prints it.

A second table compares the fused kernels with the unfused calls they replace, in the same process
on the same inputs (batch norm + ReLU, residual add + ReLU, convolution + bias + ReLU, multi-tensor
SGD / Adam against the per-parameter optimizer path), as the time per call with 10 calls queued
(the larger of the GPU time and the host's launch time: what a training loop sees) and the
launches per call (minidl.profiler). --fused-only runs just that table (to --fused-out).

    python3 benchmarks/bench_gpu_primitives.py [--out benchmarks/results/gpu_primitives.md] [--quick]
    python3 benchmarks/bench_gpu_primitives.py --fused-only [--fused-out benchmarks/results/gpu_fused.md]
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path

import cupy
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._report import git_commit, write_report  # noqa: E402

from minidl.primitives import (  # noqa: E402
    ActivationDescriptor,
    LRNDescriptor,
    PoolingDescriptor,
    activation_forward,
    batch_norm_forward_training,
    lrn_forward,
    max_pooling_forward_with_indices,
    max_unpooling_forward,
    pooling_backward,
    pooling_forward,
    softmax_forward,
)
from minidl.primitives.cuda import pooling as pooling_launcher  # noqa: E402
from minidl.primitives.cuda._compile import precompile  # noqa: E402


def generic_pooling(fn):
    """fn() with the 2x2 / stride 2 fast path off: the generic pooling kernels, for comparison."""
    def run():
        pooling_launcher.USE_K2S2 = False
        try:
            return fn()
        finally:
            pooling_launcher.USE_K2S2 = True
    return run


def time_ms(fn, repeats: int, calls: int = 1, warmup: int = 3) -> float:
    """Median milliseconds per call of fn(), over `repeats` samples bracketed by CUDA events.

    Each sample times `calls` back-to-back calls and divides: with several calls queued the GPU
    never waits for Python, so the figure is the kernels' time (what a training loop that does not
    synchronise sees), not the host's launch overhead.
    """
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / calls)
    return statistics.median(times)


def copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 20) -> float:
    """Bytes per second of a device-to-device copy (bytes read + bytes written)."""
    a = cupy.ones(nbytes // 4, dtype=cupy.float32)
    b = cupy.empty_like(a)
    ms = time_ms(lambda: b.data.copy_from_device(a.data, nbytes), repeats)
    return 2 * nbytes / (ms * 1e-3)


def cases(big: bool):
    """(name, shape string, ours(), torch_fn(), compulsory bytes) for each benchmark."""
    rng = np.random.default_rng(0)
    n = 1024 if big else 128
    x_np = rng.standard_normal((n, 64, 32, 32), dtype=np.float32)
    x = cupy.asarray(x_np)
    tx = torch.as_tensor(x_np, device="cuda")
    nbytes = x.nbytes
    shape = f"{n}x64x32x32"

    pool = PoolingDescriptor("max", 2, 2)
    yield ("max-pool 2x2 fwd", shape, lambda: pooling_forward(x, pool),
           lambda: torch.nn.functional.max_pool2d(tx, 2, 2), nbytes + nbytes // 4)
    yield ("max-pool 2x2 fwd, generic kernel", shape, generic_pooling(lambda: pooling_forward(x, pool)),
           lambda: torch.nn.functional.max_pool2d(tx, 2, 2), nbytes + nbytes // 4)
    # Backward: ours reads x and dy and writes dx (it recomputes each window's argmax from x); torch
    # reads dy and the int64 indices its forward saved, and writes dx. Bytes: x + dy + dx.
    ty, t_indices = torch.nn.functional.max_pool2d(tx, 2, 2, return_indices=True)
    dy_np = rng.standard_normal(tuple(ty.shape), dtype=np.float32)
    dy, tdy = cupy.asarray(dy_np), torch.as_tensor(dy_np, device="cuda")
    yield ("max-pool 2x2 bwd", shape, lambda: pooling_backward(x, None, dy, pool),
           lambda: torch.ops.aten.max_pool2d_with_indices_backward(tdy, tx, [2, 2], [2, 2], [0, 0], [1, 1], False,
                                                                   t_indices),
           2 * nbytes + nbytes // 4)
    yield ("max-pool 2x2 bwd, generic kernel", shape, generic_pooling(lambda: pooling_backward(x, None, dy, pool)),
           lambda: torch.ops.aten.max_pool2d_with_indices_backward(tdy, tx, [2, 2], [2, 2], [0, 0], [1, 1], False,
                                                                   t_indices),
           2 * nbytes + nbytes // 4)

    gamma, beta_ = cupy.ones(64, cupy.float32), cupy.zeros(64, cupy.float32)
    rm, rv = cupy.zeros(64, cupy.float32), cupy.ones(64, cupy.float32)
    tg, tb = torch.ones(64, device="cuda"), torch.zeros(64, device="cuda")
    trm, trv = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda")
    yield ("batch norm train fwd", shape,
           lambda: batch_norm_forward_training(x, gamma, beta_, rm, rv),
           lambda: torch.nn.functional.batch_norm(tx, trm, trv, tg, tb, training=True), 2 * nbytes)

    yield ("ReLU fwd", shape, lambda: activation_forward(x, ActivationDescriptor("relu")),
           lambda: torch.relu(tx), 2 * nbytes)

    lrn = LRNDescriptor(5)
    yield ("LRN size 5 fwd", shape, lambda: lrn_forward(x, lrn),
           lambda: torch.nn.functional.local_response_norm(tx, 5), 2 * nbytes)

    rows = 65536 if big else 4096
    s_np = rng.standard_normal((rows, 1000), dtype=np.float32)
    s, ts = cupy.asarray(s_np), torch.as_tensor(s_np, device="cuda")
    yield ("softmax fwd (rows)", f"{rows}x1000", lambda: softmax_forward(s, axis=1),
           lambda: torch.softmax(ts, dim=1), 2 * s.nbytes)



def fused_cases():
    """(name, shape, fused(), unfused()) for the fused kernels against what they replace."""
    import minidl
    from minidl import optim
    from minidl.primitives import (ConvolutionDescriptor, activation_backward, add_relu_backward, add_relu_forward,
                                   batch_norm_backward, batch_norm_relu_backward, batch_norm_relu_forward_training,
                                   convolution_bias_activation_forward, convolution_forward)

    rng = np.random.default_rng(0)
    relu = ActivationDescriptor("relu")
    for n, c, hw in ((128, 64, 32), (128, 32, 14)):
        shape = f"{n}x{c}x{hw}x{hw}"
        x = cupy.asarray(rng.standard_normal((n, c, hw, hw), dtype=np.float32))
        dy = cupy.asarray(rng.standard_normal((n, c, hw, hw), dtype=np.float32))
        g, b = cupy.asarray(rng.standard_normal(c, dtype=np.float32)), cupy.zeros(c, cupy.float32)
        rm, rv = cupy.zeros(c, cupy.float32), cupy.ones(c, cupy.float32)
        z, mean, invstd = batch_norm_forward_training(x, g, b, rm, rv)
        y = activation_forward(z, relu)
        yield ("BN + ReLU train fwd", shape, lambda: batch_norm_relu_forward_training(x, g, b, rm, rv),
               lambda: activation_forward(batch_norm_forward_training(x, g, b, rm, rv)[0], relu))
        yield ("BN + ReLU bwd", shape, lambda: batch_norm_relu_backward(x, dy, g, b, mean, invstd),
               lambda: batch_norm_backward(x, activation_backward(z, y, dy, relu), g, mean, invstd))
        yield ("add + ReLU fwd", shape, lambda: add_relu_forward(x, dy), lambda: activation_forward(x + dy, relu))
        yield ("add + ReLU bwd", shape, lambda: add_relu_backward(y, dy),
               lambda: activation_backward(y, y, dy, relu))
    for xs, ws, algo in (((128, 64, 32, 32), (64, 64, 3, 3), "implicit_precomp_gemm"),
                         ((128, 1, 28, 28), (32, 1, 3, 3), "direct"),
                         ((128, 32, 14, 14), (64, 32, 3, 3), "winograd")):
        x = cupy.asarray(rng.standard_normal(xs, dtype=np.float32))
        w = cupy.asarray(rng.standard_normal(ws, dtype=np.float32))
        bias = cupy.asarray(rng.standard_normal(ws[0], dtype=np.float32))
        desc = ConvolutionDescriptor(padding=1, stride=1, dilation=1, groups=1, spatial_dims=2)
        yield (f"conv 3x3 + bias + ReLU ({algo})", f"{'x'.join(map(str, xs))} -> {ws[0]}",
               lambda: convolution_bias_activation_forward(x, w, desc, bias, relu, algo=algo),
               lambda: activation_forward(convolution_forward(x, w, desc, bias, algo=algo), relu))
    # ResNet-9 width 64's parameter shapes (8 convs, 8 BNs, 1 linear: 26 tensors, 6.6 M values).
    widths = [(64, 3), (128, 64), (128, 128), (128, 128), (256, 128), (512, 256), (512, 512), (512, 512)]
    shapes = [s for k, c in widths for s in ((k, c, 3, 3), (k,), (k,))] + [(10, 512)]
    for name, make in (("SGD momentum + nesterov + wd", lambda ps, f: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                                                                 weight_decay=5e-4, fused=f)),
                       ("Adam", lambda ps, f: optim.Adam(ps, lr=1e-3, fused=f)),
                       ("AdamW", lambda ps, f: optim.AdamW(ps, lr=1e-3, fused=f))):
        steps = []
        for fused in (None, False):
            params = [minidl.tensor(rng.standard_normal(s).astype(np.float32), device="cuda", requires_grad=True)
                      for s in shapes]
            for p in params:
                p.grad = minidl.tensor(rng.standard_normal(p.shape).astype(np.float32), device="cuda")
            steps.append(make(params, fused).step)
        yield (f"optimizer step: {name}", f"{len(shapes)} tensors (ResNet-9 w64)", steps[0], steps[1])


def fused_table(repeats, commit, device):
    from minidl.profiler import ProfilerActivity, profile

    def launches(fn):
        fn()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        return prof.launches_per_step()[0]

    lines = [
        "# Fused kernels vs the unfused calls they replace (minidl, GPU)",
        "",
        f"date {datetime.date.today().isoformat()}, commit {commit}, device {device}, CuPy {cupy.__version__}; "
        "fp32; CUDA events, median of the repeats; each sample times 10 calls queued back to back, so",
        "a call costs the larger of its GPU time and its host (launch) time, as in a training loop that",
        "does not synchronise. Launches: kernels of kernels/*.cu per call (minidl.profiler; CuPy's own",
        "kernels, e.g. the `x + y` of the unfused add and the per-parameter optimizer arithmetic, are",
        "not counted there: the unfused optimizer path is ~8-12 CuPy kernels per parameter).",
        "",
        "| fused op | shape | fused ms | unfused ms | unfused / fused | launches fused | launches unfused |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, shape, fused, unfused in fused_cases():
        f_ms, u_ms = time_ms(fused, repeats, 10), time_ms(unfused, repeats, 10)
        lines.append(f"| {name} | {shape} | {f_ms:.4f} | {u_ms:.4f} | {u_ms / f_ms:.2f} | {launches(fused)} | "
                     f"{launches(unfused)} |")
        print(lines[-1], flush=True)
    return "\n".join(lines) + "\n"


def indices_table(repeats: int, commit: str, device: str) -> str:
    """Max pooling: recompute the argmax (cuDNN's design, our pooling_forward / pooling_backward) or store
    it (PyTorch's return_indices=True: our max_pooling_forward_with_indices, then the gradient scattered
    through the indices, which for non-overlapping windows is max_unpooling_forward of dy). Generic
    kernels (the 2x2 fast path off) on both of our sides, so only the design differs; torch beside it."""
    rows = []
    for n in (128, 1024):
        rng = np.random.default_rng(0)
        x_np = rng.standard_normal((n, 64, 32, 32), dtype=np.float32)
        x, tx = cupy.asarray(x_np), torch.as_tensor(x_np, device="cuda")
        pool = PoolingDescriptor("max", 2, 2)
        y, idx = max_pooling_forward_with_indices(x, pool)
        dy = cupy.asarray(rng.standard_normal(y.shape, dtype=np.float32))
        ty, t_idx = torch.nn.functional.max_pool2d(tx, 2, 2, return_indices=True)
        tdy = torch.as_tensor(cupy.asnumpy(dy), device="cuda")
        shape = f"{n}x64x32x32"
        calls = 2 if n > 128 else 10
        cases = [
            ("forward, argmax recomputed later (y only)", generic_pooling(lambda: pooling_forward(x, pool)),
             lambda: torch.nn.functional.max_pool2d(tx, 2, 2), x.nbytes + y.nbytes),
            ("forward, argmax stored (y + int64 indices)",
             generic_pooling(lambda: max_pooling_forward_with_indices(x, pool)),
             lambda: torch.nn.functional.max_pool2d(tx, 2, 2, return_indices=True),
             x.nbytes + y.nbytes + idx.nbytes),
            ("backward, argmax recomputed from x", generic_pooling(lambda: pooling_backward(x, y, dy, pool)),
             None, x.nbytes + dy.nbytes + x.nbytes),
            ("backward, through stored indices", lambda: max_unpooling_forward(dy, idx, (32, 32)),
             lambda: torch.ops.aten.max_pool2d_with_indices_backward(tdy, tx, [2, 2], [2, 2], [0, 0], [1, 1],
                                                                     False, t_idx),
             dy.nbytes + idx.nbytes + x.nbytes),
        ]
        for name, ours, theirs, nbytes in cases:
            ours_ms = time_ms(ours, repeats, calls)
            torch_ms = time_ms(theirs, repeats, calls) if theirs is not None else None
            rows.append((name, shape, nbytes, ours_ms, torch_ms))
        torch.cuda.empty_cache()
        cupy.get_default_memory_pool().free_all_blocks()
    lines = [
        "# Max pooling: recompute the argmax or store it (2x2, stride 2)",
        "",
        f"date {datetime.date.today().isoformat()}, commit {commit}, device {device}, torch {torch.__version__}, "
        f"CuPy {cupy.__version__}; CUDA events, median per call with several calls queued.",
        "Ours: the generic pooling kernels (the 2x2 fast path off), so the two rows of a direction differ",
        "only in the design. Bytes: what each design must move (x, y, dy, dx, and the int64 indices).",
        "Command: `python3 benchmarks/bench_gpu_primitives.py --indices-only`.",
        "",
        "| design | shape | MB moved | ours ms | torch ms |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for name, shape, nbytes, ours_ms, torch_ms in rows:
        t = f"{torch_ms:.4f}" if torch_ms is not None else "(torch stores)"
        lines.append(f"| {name} | {shape} | {nbytes / 1e6:.0f} | {ours_ms:.4f} | {t} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu_primitives.md"))
    parser.add_argument("--fused-out", default=str(ROOT / "benchmarks" / "results" / "gpu_fused.md"))
    parser.add_argument("--fused-only", action="store_true", help="only the fused-vs-unfused table")
    parser.add_argument("--commit", default=None, help="commit to record (default: git rev-parse)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--indices-only", action="store_true",
                        help="only the max-pool recompute-vs-store table (to --indices-out)")
    parser.add_argument("--indices-out", default=str(ROOT / "benchmarks" / "results" / "gpu_pooling_indices.md"))
    args = parser.parse_args()

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    precompile(["activation", "pooling", "batch_norm", "softmax", "lrn"])
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    if args.indices_only:
        write_report(indices_table(10 if args.quick else 30, git_commit(args.commit), device), args.indices_out)
        return
    precompile(["multi_tensor", "convolution"])
    write_report(indices_table(10 if args.quick else 30, git_commit(args.commit), device), args.indices_out)
    write_report(fused_table(10 if args.quick else 30, git_commit(args.commit), device), args.fused_out)
    if args.fused_only:
        return

    copy_bw = copy_bandwidth()
    rows = []
    for big in (False, True):
        repeats = 10 if args.quick else (20 if big else 50)
        for name, shape, ours, theirs, nbytes in cases(big):
            calls = 2 if big else 10
            ours_ms = time_ms(ours, repeats, calls)
            torch_ms = time_ms(theirs, repeats, calls)
            rows.append((name, shape, nbytes, ours_ms, torch_ms))
        torch.cuda.empty_cache()
        cupy.get_default_memory_pool().free_all_blocks()

    lines = [
        "# minidl GPU primitives vs torch/cuDNN",
        "",
        f"date {datetime.date.today().isoformat()}, commit {git_commit(args.commit)}, device {device}, "
        f"torch {torch.__version__}, CuPy {cupy.__version__}; TF32 off; CUDA events, median.",
        f"Device-to-device copy (1 GiB, read + write) in this run: {copy_bw / 1e12:.2f} TB/s.",
        "Bandwidth = compulsory bytes (input read once + output written once) / time. Our batch norm",
        "reads x twice (statistics, then normalise), so its DRAM traffic is 1.5x the bytes listed.",
        "Times per call with several calls queued (kernel time, not Python launch overhead).",
        "",
        "| primitive | shape | MB moved | ours ms | torch ms | torch/ours | ours TB/s | ours % copy | torch % copy |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, shape, nbytes, ours_ms, torch_ms in rows:
        ours_bw = nbytes / (ours_ms * 1e-3)
        torch_bw = nbytes / (torch_ms * 1e-3)
        lines.append(f"| {name} | {shape} | {nbytes / 1e6:.0f} | {ours_ms:.4f} | {torch_ms:.4f} | "
                     f"{torch_ms / ours_ms:.2f} | {ours_bw / 1e12:.2f} | {100 * ours_bw / copy_bw:.0f}% | "
                     f"{100 * torch_bw / copy_bw:.0f}% |")
    text = "\n".join(lines) + "\n"
    write_report(text, args.out)


if __name__ == "__main__":
    main()
