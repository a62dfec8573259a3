"""Probe of the Hopper GEMM (kernels/gemm_wgmma.cu) on the GPU machine: correctness of every kind x transpose x
tile width on awkward sizes (against float64, and for TF32 against both the rounding and the truncating
emulation, to tell which one the hardware path does), then 4096^3 timings of wgmma, mma.sync and cuBLAS in
one process. Prints one line per case as it goes (so a hang shows where), and a table at the end.

    PYTHONUNBUFFERED=1 timeout 300 python3 benchmarks/probe_wgmma.py [--quick] [--no-timing]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def tf32_round(x):
    """float32 -> TF32 by round to nearest, ties away (cvt.rna.tf32.f32)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x1000) & 0xFFFFE000
    return bits.astype(np.uint32).view(np.float32)


def tf32_round_even(x):
    """float32 -> TF32 by round to nearest, ties to even."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & 0xFFFFE000
    return bits.astype(np.uint32).view(np.float32)


def tf32_trunc(x):
    bits = np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return bits.view(np.float32)


def to_gpu(x):
    """A CuPy copy of a NumPy array; 16-bit floats through their bits (CuPy may not take bfloat16 directly)."""
    import cupy

    if x.dtype == np.float32:
        return cupy.asarray(x)
    return cupy.asarray(x.view(np.uint16)).view(cupy.dtype(x.dtype))


def to_host(x, dtype):
    import cupy

    if np.dtype(dtype) == np.float32:
        return cupy.asnumpy(x)
    return cupy.asnumpy(x.view(cupy.uint16)).view(dtype)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--n", type=int, default=4096)
    args = parser.parse_args()

    import cupy
    import ml_dtypes

    from minidl.primitives import _common
    from minidl.primitives.cuda import gemm_wgmma as gw
    from minidl.primitives.gemm import gemm, set_tensor_core_gemm

    dev = cupy.cuda.runtime.getDeviceProperties(0)
    print("device", dev["name"].decode() if isinstance(dev["name"], bytes) else dev["name"],
          "cc", cupy.cuda.Device().compute_capability, "cupy", cupy.__version__, flush=True)

    kinds = {"tf32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
    # M, N, K multiples of 8 (every leading dimension a multiple of 16 bytes, as TMA needs), not of the tile
    sizes = [(136, 296, 72), (256, 512, 192), (64, 64, 64), (8, 200, 40), (296, 8, 40), (1000, 704, 520)]
    if args.quick:
        sizes = sizes[:3]
    rng = np.random.default_rng(0)
    failures = []
    set_tensor_core_gemm("wgmma")
    widths = gw.TILE_WIDTHS
    t0 = time.time()
    for kind, dtype in kinds.items():
        for trans_a in (False, True):
            for trans_b in (False, True):
                for bn in widths:
                    gw.TILE_WIDTHS = (bn,)
                    for (M, N, K) in sizes:
                        a = rng.standard_normal((K, M) if trans_a else (M, K)).astype(np.float32)
                        b = rng.standard_normal((N, K) if trans_b else (K, N)).astype(np.float32)
                        a_d, b_d = to_gpu(a.astype(dtype)), to_gpu(b.astype(dtype))
                        a64 = a.astype(dtype).astype(np.float64)
                        b64 = b.astype(dtype).astype(np.float64)
                        opa, opb = (a64.T if trans_a else a64), (b64.T if trans_b else b64)
                        ref = opa @ opb
                        out = to_gpu(np.full((M, N), np.nan, dtype=np.float32).astype(dtype))
                        try:
                            gemm(a_d, b_d, trans_a=trans_a, trans_b=trans_b, out=out, math="tf32")
                            cupy.cuda.runtime.deviceSynchronize()
                            got = to_host(out, dtype).astype(np.float64)
                            err = np.linalg.norm(got - ref) / np.linalg.norm(ref) if np.all(np.isfinite(got)) else np.inf
                        except Exception as exc:  # noqa: BLE001
                            err, got = np.inf, None
                            print("   EXC", type(exc).__name__, str(exc)[:300], flush=True)
                        extra = ""
                        if kind == "tf32" and got is not None:
                            for name, f in (("rna", tf32_round), ("rne", tf32_round_even), ("trunc", tf32_trunc)):
                                ra = f(a).astype(np.float64)
                                rb = f(b).astype(np.float64)
                                e = (ra.T if trans_a else ra) @ (rb.T if trans_b else rb)
                                extra += f" vs-{name} {np.linalg.norm(got - e) / np.linalg.norm(e):.1e}"
                        tol = {"tf32": 5e-3, "f16": 2e-3, "bf16": 1e-2}[kind]
                        ok = err <= tol
                        if not ok:
                            failures.append((kind, trans_a, trans_b, bn, (M, N, K), err))
                        print(f"{'ok ' if ok else 'BAD'} {kind:4s} {'T' if trans_a else 'N'}{'T' if trans_b else 'N'} "
                              f"bn{bn:<3d} {M}x{N}x{K}: rel err {err:.2e}{extra}", flush=True)
    gw.TILE_WIDTHS = widths
    print(f"correctness: {len(failures)} failures, {time.time() - t0:.1f} s", flush=True)

    # Batched, broadcast, alpha/beta, strided C through the primitive
    for kind, dtype in kinds.items():
        bsz, M, N, K = 3, 200, 136, 72
        a = rng.standard_normal((bsz, M, K)).astype(np.float32).astype(dtype)
        b = rng.standard_normal((K, N)).astype(np.float32).astype(dtype)
        c0 = rng.standard_normal((bsz, M, N)).astype(np.float32).astype(dtype)
        ad, bd, cd = to_gpu(a), to_gpu(b), to_gpu(c0)
        gemm(ad, bd, out=cd, alpha=0.5, beta=2.0, math="tf32")
        got = to_host(cd, dtype).astype(np.float64)
        ref = 0.5 * a.astype(np.float64) @ b.astype(np.float64) + 2.0 * c0.astype(np.float64)
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        tol = {"tf32": 5e-3, "f16": 2e-3, "bf16": 1e-2}[kind]
        print(f"{'ok ' if err <= tol else 'BAD'} batched+broadcast+alpha/beta {kind}: {err:.2e}", flush=True)
        if err > tol:
            failures.append((kind, "batched", err))

    if args.no_timing:
        return 1 if failures else 0

    import torch
    from bench_gpu_conv import time_ms

    torch.backends.cuda.matmul.allow_tf32 = True
    n = args.n
    rows = []
    for kind in ("bf16", "f16", "tf32"):
        tdt = {"tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[kind]
        ta = torch.randn(n, n, device="cuda").to(tdt)
        tb = torch.randn(n, n, device="cuda").to(tdt)
        view = (lambda t: cupy.from_dlpack(t)) if kind == "tf32" else \
            (lambda t: cupy.from_dlpack(t.view(torch.int16)).view(cupy.dtype(kinds[kind])))
        a, b = view(ta), view(tb)
        out = cupy.empty((n, n), dtype=a.dtype)
        tout = torch.empty(n, n, device="cuda", dtype=tdt)
        for case in ("NN", "NT", "TN", "TT"):
            trans_a, trans_b = case[0] == "T", case[1] == "T"
            res = {}
            for impl in ("wgmma", "mma_sync"):
                set_tensor_core_gemm(impl)
                res[impl] = time_ms(lambda: gemm(a, b, trans_a=trans_a, trans_b=trans_b, out=out, math="tf32"), 20)
            op_a, op_b = (ta.T if trans_a else ta), (tb.T if trans_b else tb)
            res["cublas"] = time_ms(lambda: torch.matmul(op_a, op_b, out=tout), 20)
            tflop = 2.0 * n ** 3 / 1e9
            rows.append((kind, case, res))
            print(f"{kind:4s} {case}: wgmma {res['wgmma']:.3f} ms ({tflop / res['wgmma']:.0f} TFLOP/s)  mma.sync "
                  f"{res['mma_sync']:.3f}  cuBLAS {res['cublas']:.3f} ({tflop / res['cublas']:.0f})  "
                  f"wgmma/cuBLAS {res['wgmma'] / res['cublas']:.2f}", flush=True)
        del ta, tb, a, b, out, tout
    # the 16-bit epilogue: staged + TMA store, 16-byte stores after a quad exchange, pair stores
    set_tensor_core_gemm("wgmma")
    ta = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    a = cupy.from_dlpack(ta.view(torch.int16)).view(cupy.dtype(kinds["bf16"]))
    out = cupy.empty((n, n), dtype=a.dtype)
    for flag in ("staged", "16byte", "pairs", "staged", "16byte"):
        gw.EPILOGUE = flag
        t = time_ms(lambda: gemm(a, a, out=out, math="tf32"), 30)
        print(f"bf16 NN epilogue {flag}: {t:.4f} ms ({2.0 * n ** 3 / 1e9 / t:.0f} TFLOP/s)", flush=True)
    gw.EPILOGUE = "staged"
    set_tensor_core_gemm("auto")
    print("tf32 TMA map type:", _common.tf32_tma_type)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
