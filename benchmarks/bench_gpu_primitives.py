"""Benchmark minidl's memory-bound GPU primitives against torch/cuDNN in the same process.

For pooling, batch norm (training forward), softmax, ReLU and LRN, at the sizes of
docs/../shared/guides/device.md and at one size of 256 MB or more each, this measures
  * our kernel and torch's (cuDNN where torch uses it) on the same inputs, TF32 off,
  * the achieved bandwidth: the compulsory bytes (read the input once, write the output once)
    over the time, and that as a fraction of a device-to-device copy measured in this same run.
Timing: CUDA events around each call, warm-up first (it includes the NVRTC compile), median of
the repeats. Writes a markdown table to --out and prints it.

    python3 benchmarks/bench_gpu_primitives.py [--out benchmarks/results/gpu_primitives.md] [--quick]
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



def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu_primitives.md"))
    parser.add_argument("--commit", default=None, help="commit to record (default: git rev-parse)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    precompile(["activation", "pooling", "batch_norm", "softmax", "lrn"])
    copy_bw = copy_bandwidth()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])

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
