"""Benchmark: minidl's tensor-core GEMMs against cuBLAS (through torch), same process, same arrays.

Our two kernels: kernels/gemm_wgmma.cu (Hopper's wgmma fed by TMA; what "auto" runs on an H100/H200) and
kernels/gemm_tc.cu (mma.sync, the pre-Hopper path), chosen with minidl.primitives.set_tensor_core_gemm.
Tables:
  1. GEMM 4096^3 in bfloat16, float16 (fp32 accumulation both sides) and TF32 (ours math="tf32"; torch
     with allow_tf32 = True), every transpose case: wgmma, mma.sync, cuBLAS.
  2. The GEMMs of the tutorial models (Linear layers forward and backward, LSTM input projections,
     ResNet-9's im2col products) in bfloat16 and TF32: wgmma vs cuBLAS. Operands whose rows TMA cannot
     read (a 650-wide matrix) are copied into padded rows first, and that copy is inside our time.
  3. Linear layers forward + backward at the examples' shapes, TF32 on both sides, host-inclusive.

Tables 1-2 time the device alone (a spin kernel is queued before each timed call), median of --repeats
CUDA-event timings after a warm-up that includes the NVRTC compile. Relative errors are against a
float64 product of the same inputs.

    python3 benchmarks/bench_gpu_gemm_tc.py [--out benchmarks/results/gpu_gemm_tc.md] [--repeats 30]
"""
from __future__ import annotations

import argparse
import datetime
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_gpu_conv import time_ms  # noqa: E402
from bench_gpu_gemm import LINEAR_SHAPES  # noqa: E402
from benchmarks._report import git_commit, write_report  # noqa: E402

# (label, M, N, K, op(A) op(B)): the products the tutorial models run (Linear y = x W^T is NT, its dx = dy W
# is NN and dW = dy^T x is TN; a conv's im2col forward is NT with K = C*R*S).
MODEL_SHAPES = [
    ("MNIST MLP 784->512 b128, forward", 128, 512, 784, "NT"),
    ("MNIST MLP 784->512 b128, dx", 128, 784, 512, "NN"),
    ("MNIST MLP 784->512 b128, dW", 512, 784, 128, "TN"),
    ("PTB decoder 650->10000, 700 tokens, forward", 700, 10000, 650, "NT"),
    ("PTB decoder, dx", 700, 650, 10000, "NN"),
    ("PTB decoder, dW", 10000, 650, 700, "TN"),
    ("char-RNN head 512->65, 6400 tokens, forward", 6400, 65, 512, "NT"),
    ("LSTM 2x512 input projection, T35 B32", 1120, 2048, 512, "NT"),
    ("LSTM 2x512 input projection, T64 B64", 4096, 2048, 512, "NT"),
    ("LSTM 650 input projection (PTB), T35 B20", 700, 2600, 650, "NT"),
    ("ResNet-9 w64 b512 prep conv 3->64 32x32 (im2col)", 524288, 64, 27, "NT"),
    ("ResNet-9 layer1 conv 64->128 32x32 (im2col)", 524288, 128, 576, "NT"),
    ("ResNet-9 layer2 conv 128->256 16x16 (im2col)", 131072, 256, 1152, "NT"),
    ("ResNet-9 layer3 conv 256->512 8x8 (im2col)", 32768, 512, 2304, "NT"),
]
DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "tf32": "float32"}


def _cupy_view(t):
    """A CuPy array sharing the torch tensor's memory (bfloat16 through its bits if DLPack refuses)."""
    import cupy
    import torch

    try:
        return cupy.from_dlpack(t)
    except Exception:
        bits = cupy.from_dlpack(t.view(torch.int16))
        return bits.view(cupy.dtype("bfloat16"))


def _torch_dtype(name):
    import torch

    return {"tf32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def bench_case(repeats, name, M, N, K, case, impls=("wgmma", "mma_sync"), seed=1):
    """{impl: ms, "cublas": ms, "err_<impl>": rel. error, "err_cublas": ...} for one product."""
    import cupy
    import torch

    from minidl.primitives.gemm import gemm, set_tensor_core_gemm

    tdt = _torch_dtype(name)
    trans_a, trans_b = case[0] == "T", case[1] == "T"
    gen = torch.Generator(device="cuda").manual_seed(seed)
    ta_ = torch.randn(*((K, M) if trans_a else (M, K)), device="cuda", generator=gen).to(tdt)
    tb_ = torch.randn(*((N, K) if trans_b else (K, N)), device="cuda", generator=gen).to(tdt)
    a, b = _cupy_view(ta_), _cupy_view(tb_)
    out = cupy.empty((M, N), dtype=a.dtype)
    tout = torch.empty(M, N, device="cuda", dtype=tdt)
    op_a, op_b = (ta_.T if trans_a else ta_), (tb_.T if trans_b else tb_)
    ref = torch.matmul(op_a.double(), op_b.double()) if M * N <= 1 << 26 else None
    err = (lambda x: float(torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref))) if ref is not None \
        else (lambda x: float("nan"))
    res = {}
    for impl in impls:
        set_tensor_core_gemm(impl)
        res[impl] = time_ms(lambda: gemm(a, b, trans_a=trans_a, trans_b=trans_b, out=out, math="tf32"), repeats)
        gemm(a, b, trans_a=trans_a, trans_b=trans_b, out=out, math="tf32")
        res["err_" + impl] = err(torch.from_dlpack(out) if out.dtype.itemsize == 4 else
                                 torch.from_dlpack(out.view(cupy.int16)).view(tdt))
    set_tensor_core_gemm("auto")
    res["cublas"] = time_ms(lambda: torch.matmul(op_a, op_b, out=tout), repeats)
    torch.matmul(op_a, op_b, out=tout)
    res["err_cublas"] = err(tout)
    del ref
    return res


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

        minidl.backends.cuda.matmul.allow_tf32 = False
        t_fp32 = time_ms(ours, repeats, gpu_only=False)
        minidl.backends.cuda.matmul.allow_tf32 = True
        t_tf32 = time_ms(ours, repeats, gpu_only=False)
        minidl.backends.cuda.matmul.allow_tf32 = False
        tlayer = torch.nn.Linear(fin, fout).cuda()
        tx = torch.tensor(x_np, device="cuda", requires_grad=True)
        tg = torch.tensor(g_np, device="cuda")

        def theirs():
            tlayer.zero_grad(set_to_none=True)
            tx.grad = None
            tlayer(tx).backward(tg)

        t_torch = time_ms(theirs, repeats, gpu_only=False)
        rows.append((label, t_tf32, t_torch, t_fp32))
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/gpu_gemm_tc.md")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--commit", default=None, help="commit to record (default: git rev-parse, else $MINIDL_COMMIT)")
    parser.add_argument("--skip-linear", action="store_true")
    parser.add_argument("--skip-models", action="store_true")
    args = parser.parse_args()

    import cupy
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True  # cuBLAS TF32 for float32 (the yardstick of the TF32 rows)
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    device = device.decode() if isinstance(device, bytes) else device
    n = 4096
    square = []
    for name in ("bfloat16", "float16", "tf32"):
        for case in ("NN", "NT", "TN", "TT"):
            res = bench_case(args.repeats, name, n, n, n, case)
            square.append((name, case, res))
            print(name, case, {k: round(v, 4) for k, v in res.items()}, flush=True)
    models = []
    if not args.skip_models:
        for name in ("bfloat16", "tf32"):
            for label, M, N, K, case in MODEL_SHAPES:
                res = bench_case(max(10, args.repeats // 2), name, M, N, K, case, impls=("wgmma",))
                models.append((name, label, M, N, K, case, res))
                print(name, label, {k: round(v, 4) for k, v in res.items()}, flush=True)
    linear = [] if args.skip_linear else bench_linear(args.repeats)

    geo = lambda v: math.exp(sum(math.log(t) for t in v) / len(v))
    tflop = 2.0 * n ** 3 / 1e9
    lines = [
        "# minidl tensor-core GEMMs (wgmma, mma.sync) vs cuBLAS: bfloat16, float16, TF32",
        "",
        f"date {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, commit {git_commit(args.commit)}, device {device}, "
        f"CuPy {cupy.__version__}, torch {torch.__version__}; median of {args.repeats} CUDA-event timings (GPU "
        "time) after warm-up, same process, same arrays. Command: `python3 benchmarks/bench_gpu_gemm_tc.py`. "
        "wgmma: kernels/gemm_wgmma.cu (TMA loads, the path \"auto\" takes on this GPU); mma.sync: "
        "kernels/gemm_tc.cu; cuBLAS through torch.matmul (TF32: allow_tf32 = True). TF32 wgmma reads K-major "
        "operands only, so its NN, TN and TT times include transposing B and/or A first.",
        "",
        "## GEMM 4096^3",
        "",
        "| dtype | op(A) op(B) | wgmma (ms) | mma.sync (ms) | cuBLAS (ms) | wgmma TFLOP/s | cuBLAS TFLOP/s | "
        "wgmma / cuBLAS time | wgmma % of cuBLAS TFLOP/s | wgmma rel. error | cuBLAS rel. error |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, case, r in square:
        lines.append(f"| {name} | {case} | {r['wgmma']:.3f} | {r['mma_sync']:.3f} | {r['cublas']:.3f} | "
                     f"{tflop / r['wgmma']:.0f} | {tflop / r['cublas']:.0f} | {r['wgmma'] / r['cublas']:.2f} | "
                     f"{100 * r['cublas'] / r['wgmma']:.0f}% | {r['err_wgmma']:.1e} | {r['err_cublas']:.1e} |")
    for name in ("bfloat16", "float16", "tf32"):
        ratios = [r["wgmma"] / r["cublas"] for d, _, r in square if d == name]
        mma = [r["mma_sync"] / r["cublas"] for d, _, r in square if d == name]
        lines.append(f"\n{name}: geometric mean of wgmma / cuBLAS time {geo(ratios):.2f} "
                     f"({100 / geo(ratios):.0f}% of cuBLAS's rate); mma.sync / cuBLAS {geo(mma):.2f}.")
    if models:
        lines += ["", "## The tutorial models' GEMMs (GPU time; target: >= 75% of cuBLAS's rate)", "",
                  "| dtype | product | M x N x K | op | wgmma (ms) | cuBLAS (ms) | wgmma % of cuBLAS rate | "
                  "wgmma rel. error | cuBLAS rel. error |",
                  "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
        for name, label, M, N, K, case, r in models:
            lines.append(f"| {name} | {label} | {M} x {N} x {K} | {case} | {r['wgmma']:.3f} | {r['cublas']:.3f} | "
                         f"{100 * r['cublas'] / r['wgmma']:.0f}% | {r['err_wgmma']:.1e} | {r['err_cublas']:.1e} |")
        for name in ("bfloat16", "tf32"):
            ratios = [r["cublas"] / r["wgmma"] for d, *_, r in models if d == name]
            lines.append(f"\n{name}: geometric mean {100 * geo(ratios):.0f}% of cuBLAS's rate, lowest "
                         f"{100 * min(ratios):.0f}%.")
    if linear:
        lines += ["", "## Linear layer forward + backward, TF32 both sides (host-inclusive: Python, launches, GPU)", "",
                  "| layer | minidl TF32 (ms) | torch.nn.Linear TF32 (ms) | minidl / torch | minidl fp32 SGEMM (ms) |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for label, t_tf32, t_torch, t_fp32 in linear:
            lines.append(f"| {label} | {t_tf32:.3f} | {t_torch:.3f} | {t_tf32 / t_torch:.2f} | {t_fp32:.3f} |")
    lines.append("")
    write_report("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
