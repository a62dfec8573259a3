"""Probe (session 19): char_gpt's forward / dx GEMM shapes (M = 16384 rows) on the wgmma kernel, epilogue and tile variants,
against torch's F.linear / matmul in bf16 (cuBLAS), CUDA events, median of 50.

    python3 benchmarks/probe_gemm_shapes.py     # on an H100 / H200; prints a markdown table (us per GEMM)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np, cupy, torch
import ml_dtypes
import minidl.primitives as P
from minidl.primitives.gemm import gemm
from minidl.primitives.cuda import gemm_wgmma as W

def timeit(fn, n=50):
    for _ in range(5): fn()
    cupy.cuda.Device().synchronize()
    ts = []
    for _ in range(n):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(cupy.cuda.get_elapsed_time(a, b) * 1e3)
    return float(np.median(ts))

def ttime(fn, n=50):
    for _ in range(5): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return float(np.median(ts))

rng = np.random.default_rng(0)
M = 16384
shapes = [("qkv fwd", 1152, 384, True), ("proj fwd", 384, 384, True), ("mlp0 fwd", 1536, 384, True), ("mlp2 fwd", 384, 1536, True),
          ("qkv dx", 384, 1152, False), ("mlp0 dx", 384, 1536, False), ("mlp2 dx", 1536, 384, False)]
variants = [("staged, tile_shape's choice", "staged", None), ("staged (1,256)", "staged", ((1, 256),)),
            ("16byte, tile_shape's choice", "16byte", None),
            ("staged (2,128)", "staged", ((2, 128),)), ("staged (1,128)", "staged", ((1, 128),)),
            ("16byte (1,128)", "16byte", ((1, 128),))]
print("| shape | N | K | " + " | ".join(v[0] for v in variants) + " | torch |")
for name, N, K, fwd in shapes:
    x = cupy.asarray(rng.standard_normal((M, K)).astype(np.float32))
    xb = P.cast(x, ml_dtypes.bfloat16)
    if fwd:
        w = P.cast(cupy.asarray(rng.standard_normal((N, K)).astype(np.float32)), ml_dtypes.bfloat16)   # (out, in)
        bias = cupy.asarray(rng.standard_normal(N).astype(np.float32))
        call = lambda: gemm(xb, w, trans_b=True, bias=bias)
    else:
        w = P.cast(cupy.asarray(rng.standard_normal((K, N)).astype(np.float32)), ml_dtypes.bfloat16)   # dy (M,K) @ W (K,N)
        call = lambda: gemm(xb, w)
    row = []
    old = (W.EPILOGUE, W.TILE_SHAPES, W.TILE_WIDTHS)
    for label, epi, tiles in variants:
        W.EPILOGUE = epi
        if tiles is not None:
            W.TILE_SHAPES, W.TILE_WIDTHS = tiles, tuple(sorted({t[1] for t in tiles}, reverse=True))
        try:
            row.append(f"{timeit(call):.1f}")
        except Exception as e:
            row.append(f"err {type(e).__name__}")
        W.EPILOGUE, W.TILE_SHAPES, W.TILE_WIDTHS = old
    tx = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    if fwd:
        tw = torch.randn(N, K, device="cuda", dtype=torch.bfloat16); tb = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        tcall = lambda: torch.nn.functional.linear(tx, tw, tb)
    else:
        tw = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        tcall = lambda: tx @ tw
    print(f"| {name} | {N} | {K} | " + " | ".join(row) + f" | {ttime(tcall):.1f} |", flush=True)
