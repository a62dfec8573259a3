"""Benchmark: minidl's SGEMM against cuBLAS, and Linear layers on our SGEMM against cuBLAS and torch.

Three tables, float32, TF32 off everywhere (CUPY_TF32=0, torch.backends.cuda.matmul.allow_tf32 = False):
  1. SGEMM at 4096^3 for each transpose case (NN, NT, TN, TT): ours vs cuBLAS (cupy.matmul).
  2. SGEMM at the GEMM shapes of the convolution layers of docs/GPU.md: the forward
     im2col product, M = output channels, N = batch * output pixels, K = C * R * S (cuBLAS gets the
     same operands).
  3. Linear layers, forward + backward (y = x W^T + b, then dx, dW, db), at the shapes the examples
     use: minidl with its own SGEMM (the default), minidl with `minidl.backends.cuda.use_cublas`, and
     torch.nn.Linear. Times include the Python and launch overhead of each framework (no spin), since
     for small layers that is what a training step pays.

Timing as in bench_gpu_conv.py: CUDA events, median of --repeats after warm-up; tables 1 and 2 queue a
spin kernel before each timed call so that they time the device alone.

    python3 benchmarks/bench_gpu_gemm.py [--out benchmarks/results/gpu_gemm.md] [--repeats 25]
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gpu_conv import SHAPES, time_ms  # noqa: E402
from benchmarks._report import git_commit, write_report  # noqa: E402

# (label, batch rows, in_features, out_features) of the examples' Linear layers, and a large square one.
LINEAR_SHAPES = [
    ("MNIST MLP 784->512, batch 128", 128, 784, 512),
    ("ResNet-9 head 512->10, batch 512", 512, 512, 10),
    ("char-RNN head 512->65, 100 x 64 tokens", 6400, 512, 65),
    ("PTB decoder 650->10000, 35 x 20 tokens", 700, 650, 10000),
    ("square 4096->4096, batch 4096", 4096, 4096, 4096),
]


def bench_sgemm_cases(repeats, n=4096):
    import cupy

    from minidl.primitives.gemm import gemm

    rng = np.random.default_rng(1)
    a = cupy.asarray(rng.standard_normal((n, n), dtype=np.float32))
    b = cupy.asarray(rng.standard_normal((n, n), dtype=np.float32))
    out = cupy.empty((n, n), dtype=cupy.float32)
    rows = []
    for ta in (False, True):
        for tb in (False, True):
            op_a, op_b = (a.T if ta else a), (b.T if tb else b)
            ours = time_ms(lambda: gemm(a, b, trans_a=ta, trans_b=tb, out=out), repeats)
            cublas = time_ms(lambda: cupy.matmul(op_a, op_b, out=out), repeats)
            ref = cupy.matmul(op_a, op_b)
            err = float(cupy.linalg.norm(gemm(a, b, trans_a=ta, trans_b=tb) - ref) / cupy.linalg.norm(ref))
            rows.append((("T" if ta else "N") + ("T" if tb else "N"), ours, cublas, 2.0 * n**3 / 1e9, err))
    return rows


def bench_conv_gemm_shapes(repeats):
    import cupy

    from minidl.primitives.gemm import gemm

    rng = np.random.default_rng(2)
    rows = []
    for label, N, C, K, HW, k, stride, pad in SHAPES:
        P = (HW + 2 * pad - k) // stride + 1
        M, Ncols, depth = K, N * P * P, C * k * k
        w = cupy.asarray(rng.standard_normal((M, depth), dtype=np.float32))
        cols = cupy.asarray(rng.standard_normal((depth, Ncols), dtype=np.float32))
        out = cupy.empty((M, Ncols), dtype=cupy.float32)
        ours = time_ms(lambda: gemm(w, cols, out=out), repeats)
        cublas = time_ms(lambda: cupy.matmul(w, cols, out=out), repeats)
        rows.append((label, (M, Ncols, depth), ours, cublas, 2.0 * M * Ncols * depth / 1e9))
    return rows


def bench_linear(repeats):
    import cupy
    import torch

    import minidl
    import minidl.nn as mnn

    rows = []
    for label, batch, fin, fout in LINEAR_SHAPES:
        rng = np.random.default_rng(3)
        x_np = rng.standard_normal((batch, fin), dtype=np.float32)
        g_np = rng.standard_normal((batch, fout), dtype=np.float32)
        layer = mnn.Linear(fin, fout).to("cuda")
        x = minidl.tensor(x_np, device="cuda", requires_grad=True)
        g = minidl.tensor(g_np, device="cuda")

        def ours():
            layer.zero_grad()
            x.grad = None
            layer(x).backward(g)

        t_ours = time_ms(ours, repeats, gpu_only=False)
        with minidl.backends.cuda.flags(use_cublas=True):
            t_cublas = time_ms(ours, repeats, gpu_only=False)
        tlayer = torch.nn.Linear(fin, fout).cuda()
        tx = torch.tensor(x_np, device="cuda", requires_grad=True)
        tg = torch.tensor(g_np, device="cuda")

        def theirs():
            tlayer.zero_grad(set_to_none=True)
            tx.grad = None
            tlayer(tx).backward(tg)

        t_torch = time_ms(theirs, repeats, gpu_only=False)
        flop = 3 * 2.0 * batch * fin * fout / 1e9
        rows.append((label, t_ours, t_cublas, t_torch, flop))
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/gpu_gemm.md")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--commit", default=None, help="commit to record (default: git rev-parse, else $MINIDL_COMMIT)")
    args = parser.parse_args()

    os.environ.setdefault("CUPY_TF32", "0")
    import cupy
    import torch

    from minidl.primitives.cuda._compile import precompile

    torch.backends.cuda.matmul.allow_tf32 = False
    precompile(["gemm"])
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    device = device.decode() if isinstance(device, bytes) else device

    cases = bench_sgemm_cases(args.repeats)
    conv_rows = bench_conv_gemm_shapes(args.repeats)
    linear_rows = bench_linear(args.repeats)

    geo = lambda v: math.exp(sum(math.log(t) for t in v) / len(v))
    lines = [
        "# minidl SGEMM vs cuBLAS, and Linear layers on it (float32, TF32 off)",
        "",
        f"date {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, commit {git_commit(args.commit)}, device {device}, "
        f"CuPy {cupy.__version__}, torch {torch.__version__}; median of {args.repeats} CUDA-event timings after "
        "warm-up. Command: `python3 benchmarks/bench_gpu_gemm.py`.",
        "",
        "## SGEMM 4096^3, every transpose case (GPU time)",
        "",
        "| op(A) op(B) | ours (ms) | cuBLAS (ms) | ours TFLOP/s | cuBLAS TFLOP/s | ratio ours / cuBLAS | rel. error |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for case, ours, cublas, gflop, err in cases:
        lines.append(f"| {case} | {ours:.3f} | {cublas:.3f} | {gflop / ours:.1f} | {gflop / cublas:.1f} | "
                     f"{ours / cublas:.2f} | {err:.1e} |")
    lines += ["", f"Geometric mean of the ratios: {geo([o / c for _, o, c, _, _ in cases]):.2f}.", "",
              "## SGEMM at the convolution layers' GEMM shapes (forward im2col product, GPU time)", "",
              "| layer | M x N x K | ours (ms) | cuBLAS (ms) | ours TFLOP/s | ratio ours / cuBLAS |",
              "| --- | --- | ---: | ---: | ---: | ---: |"]
    for label, (M, N, K), ours, cublas, gflop in conv_rows:
        lines.append(f"| {label} | {M} x {N} x {K} | {ours:.3f} | {cublas:.3f} | {gflop / ours:.1f} | "
                     f"{ours / cublas:.2f} |")
    lines += ["", f"Geometric mean of the ratios: {geo([o / c for _, _, o, c, _ in conv_rows]):.2f}.", "",
              "## Linear layer forward + backward (host-inclusive: Python, launches and GPU)", "",
              "| layer | minidl, our SGEMM (ms) | minidl, use_cublas (ms) | torch.nn.Linear (ms) | "
              "ours / minidl-cuBLAS | ours / torch |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, ours, cublas, t_torch, _ in linear_rows:
        lines.append(f"| {label} | {ours:.3f} | {cublas:.3f} | {t_torch:.3f} | {ours / cublas:.2f} | "
                     f"{ours / t_torch:.2f} |")
    lines.append("")
    report = "\n".join(lines)
    write_report(report, args.out)


if __name__ == "__main__":
    main()
