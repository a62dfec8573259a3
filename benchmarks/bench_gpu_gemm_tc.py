"""Benchmark: minidl's tensor-core GEMM (kernels/gemm_tc.cu) against cuBLAS (through torch), same process.

Three tables:
  1. GEMM 4096^3 in TF32, every transpose case: ours (float32 data, math="tf32") vs torch.matmul with
     torch.backends.cuda.matmul.allow_tf32 = True (cuBLAS TF32), on the very same arrays (DLPack).
  2. GEMM 4096^3 in float16 and bfloat16 (fp32 accumulation on both sides): ours vs torch.matmul.
  3. Linear layers forward + backward at the examples' shapes, TF32 on both sides: minidl with
     minidl.backends.cuda.matmul.allow_tf32 = True vs torch.nn.Linear with allow_tf32; minidl in fp32
     (its SGEMM) for reference. Host-inclusive (Python, launches and GPU), as in bench_gpu_gemm.py.

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


def _cupy_view(t):
    """A CuPy array sharing the torch tensor's memory (bfloat16 through its bits if DLPack refuses)."""
    import cupy
    import torch

    try:
        return cupy.from_dlpack(t)
    except Exception:
        bits = cupy.from_dlpack(t.view(torch.int16))
        return bits.view(cupy.dtype("bfloat16"))


def bench_gemm(repeats, dtype_name, cases, n=4096):
    import cupy
    import torch

    from minidl.primitives.gemm import gemm

    torch_dtype = {"tf32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype_name]
    gen = torch.Generator(device="cuda").manual_seed(1)
    ta_ = torch.randn(n, n, device="cuda", generator=gen).to(torch_dtype)
    tb_ = torch.randn(n, n, device="cuda", generator=gen).to(torch_dtype)
    a, b = _cupy_view(ta_), _cupy_view(tb_)
    out = cupy.empty((n, n), dtype=a.dtype)
    tout = torch.empty(n, n, device="cuda", dtype=torch_dtype)
    rows = []
    for case in cases:
        trans_a, trans_b = case[0] == "T", case[1] == "T"
        op_a, op_b = (ta_.T if trans_a else ta_), (tb_.T if trans_b else tb_)
        ours = time_ms(lambda: gemm(a, b, trans_a=trans_a, trans_b=trans_b, out=out, math="tf32"), repeats)
        theirs = time_ms(lambda: torch.matmul(op_a, op_b, out=tout), repeats)
        ref = torch.matmul(op_a.double(), op_b.double())
        gemm(a, b, trans_a=trans_a, trans_b=trans_b, out=out, math="tf32")
        # our result as a torch tensor (16-bit types through their bits: DLPack may not know bfloat16)
        ours_t = torch.from_dlpack(out) if out.dtype.itemsize == 4 else \
            torch.from_dlpack(out.view(cupy.int16)).view(torch_dtype)
        torch.matmul(op_a, op_b, out=tout)
        err = lambda x: float(torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref))
        rows.append((case, ours, theirs, 2.0 * n ** 3 / 1e9, err(ours_t), err(tout)))
        del ref
    return rows


def bench_variants(repeats, n=4096):
    """Our kernel at 4096^3 NN with each k step of its pipeline (64 bytes x 4 stages, 128 bytes x 3)."""
    import cupy

    from minidl.primitives.cuda.gemm import gemm_tc

    rows = []
    for dtype in ("float32", "float16"):
        a = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(dtype)
        b = cupy.random.standard_normal((n, n), dtype=cupy.float32).astype(dtype)
        c = cupy.empty((n, n), dtype=dtype)
        for bk in (64, 128):
            t = time_ms(lambda: gemm_tc(n, n, n, a, n, b, n, c, tile=128, bk_bytes=bk), repeats)
            rows.append(("TF32" if dtype == "float32" else dtype, bk, t, 2.0 * n ** 3 / 1e9 / t))
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
    parser.add_argument("--bk-bytes", type=int, default=None, help="k step of our kernel (64 or 128; default TC_BK_BYTES)")
    args = parser.parse_args()

    import cupy
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True  # cuBLAS TF32 for float32 (the yardstick of table 1)
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    device = device.decode() if isinstance(device, bytes) else device

    from minidl.primitives.cuda import gemm as gemm_launcher

    if args.bk_bytes:
        gemm_launcher.TC_BK_BYTES = args.bk_bytes
    variants = bench_variants(args.repeats)
    tf32 = bench_gemm(args.repeats, "tf32", ["NN", "NT", "TN", "TT"])
    half = [("float16", r) for r in bench_gemm(args.repeats, "float16", ["NN", "NT", "TN", "TT"])]
    half += [("bfloat16", r) for r in bench_gemm(args.repeats, "bfloat16", ["NN", "TN"])]
    linear = [] if args.skip_linear else bench_linear(args.repeats)

    geo = lambda v: math.exp(sum(math.log(t) for t in v) / len(v))
    lines = [
        "# minidl tensor-core GEMM vs cuBLAS (TF32, float16, bfloat16), and Linear layers in TF32",
        "",
        f"date {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, commit {git_commit(args.commit)}, device {device}, "
        f"CuPy {cupy.__version__}, torch {torch.__version__}; median of {args.repeats} CUDA-event timings after "
        "warm-up, same process, same arrays. Command: `python3 benchmarks/bench_gpu_gemm_tc.py`. Our kernel: "
        f"128 x 128 tiles, k step {gemm_launcher.TC_BK_BYTES} bytes.",
        "",
        "## GEMM 4096^3, TF32 (ours math=\"tf32\"; torch.matmul with allow_tf32 = True), GPU time",
        "",
        "| op(A) op(B) | ours (ms) | cuBLAS (ms) | ours TFLOP/s | cuBLAS TFLOP/s | ours / cuBLAS | "
        "ours rel. error | cuBLAS rel. error |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for case, ours, theirs, gflop, e_ours, e_theirs in tf32:
        lines.append(f"| {case} | {ours:.3f} | {theirs:.3f} | {gflop / ours:.1f} | {gflop / theirs:.1f} | "
                     f"{ours / theirs:.2f} | {e_ours:.1e} | {e_theirs:.1e} |")
    lines += ["", f"Geometric mean of the ratios: {geo([r[1] / r[2] for r in tf32]):.2f}.", "",
              "## GEMM 4096^3, float16 / bfloat16 (fp32 accumulation both sides), GPU time", "",
              "| dtype | op(A) op(B) | ours (ms) | cuBLAS (ms) | ours TFLOP/s | cuBLAS TFLOP/s | ours / cuBLAS | "
              "ours rel. error | cuBLAS rel. error |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for dtype, (case, ours, theirs, gflop, e_ours, e_theirs) in half:
        lines.append(f"| {dtype} | {case} | {ours:.3f} | {theirs:.3f} | {gflop / ours:.1f} | {gflop / theirs:.1f} | "
                     f"{ours / theirs:.2f} | {e_ours:.1e} | {e_theirs:.1e} |")
    for dtype in ("float16", "bfloat16"):
        ratios = [r[1] / r[2] for d, r in half if d == dtype]
        lines.append(f"\nGeometric mean of the {dtype} ratios: {geo(ratios):.2f}.")
    lines += ["", "## Our kernel's pipeline k step at 4096^3 NN (GPU time)", "",
              "| math | k step (bytes) x stages | ms | TFLOP/s |", "| --- | --- | ---: | ---: |"]
    for name, bk, t, tflops in variants:
        lines.append(f"| {name} | {bk} x {4 if bk == 64 else 3} | {t:.3f} | {tflops:.1f} |")
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
