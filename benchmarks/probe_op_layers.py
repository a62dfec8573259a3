"""Host microseconds of one eager op on the GPU, layer by layer: the nn.Module call, the functional, Function.apply,
the primitive's front (minidl/primitives), its CUDA launcher (minidl/primitives/cuda) and the CuPy calls the
launchers make (cupy.empty, ascontiguousarray, one kernel launch), beside torch's module on the same tensors. Tiny
tensors, so the GPU keeps up and what is timed is the host path; the GPU is synchronised after each timed batch.
Where the layers' times step up is where an op's host time goes (issue 23 / 25: char_gpt's forward host time is
2.2x torch's, benchmarks/results/gpu_gpt_step.md).

    python3 benchmarks/probe_op_layers.py [--number 2000] [--pin 3]
"""
from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import pin_to_cpu  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=2000)
    ap.add_argument("--pin", type=int, default=None)
    args = ap.parse_args(argv)
    print(pin_to_cpu(args.pin))
    import cupy
    import numpy as np
    import torch

    import minidl
    import minidl.nn.functional as F
    import minidl.primitives as P
    from minidl.nn.functional.normalization import LayerNorm as LayerNormFn
    from minidl.primitives.cuda import layer_norm as cuda_layer_norm

    B, T, D, V = 4, 16, 64, 65
    x = minidl.randn(B, T, D, device="cuda", requires_grad=True)
    ln, drop, emb = minidl.nn.LayerNorm(D).to("cuda"), minidl.nn.Dropout(0.2), minidl.nn.Embedding(V, D).to("cuda")
    ids = minidl.randint(0, V, (B, T), device="cuda")
    tx = torch.randn(B, T, D, device="cuda", requires_grad=True)
    tln, tdrop, temb = torch.nn.LayerNorm(D).cuda(), torch.nn.Dropout(0.2), torch.nn.Embedding(V, D).cuda()
    tids = torch.randint(0, V, (B, T), device="cuda")
    xd, wd, bd = x._data, ln.weight._data, ln.bias._data
    g = dict(minidl=minidl, torch=torch, F=F, P=P, cupy=cupy, np=np, x=x, ln=ln, drop=drop, emb=emb, ids=ids, tx=tx,
             tln=tln, tdrop=tdrop, temb=temb, tids=tids, xd=xd, wd=wd, bd=bd, LayerNormFn=LayerNormFn,
             cuda_layer_norm=cuda_layer_norm,
             empty_shape=(B, T), f32=cupy.float32)
    rows = [
        ("cupy.empty((B, T), float32)", "cupy.empty(empty_shape, dtype=f32)"),
        ("cupy.ndarray((B, T), float32)", "cupy.ndarray(empty_shape, dtype=f32)"),
        ("cupy.ascontiguousarray(x) (contiguous)", "cupy.ascontiguousarray(xd)"),
        ("x.reshape(-1, D) (CuPy)", "xd.reshape(-1, 64)"),
        ("np.int32(5) + np.float32(1.0)", "np.int32(5); np.float32(1.0)"),
        ("torch: LayerNorm module", "tln(tx)"),
        ("LayerNorm module", "ln(x)"),
        ("F.layer_norm", "F.layer_norm(x, (64,), ln.weight, ln.bias)"),
        ("LayerNorm Function.apply", "LayerNormFn.apply(x, ln.weight, ln.bias, normalized_ndim=1, eps=1e-5, rms=False)"),
        ("P.layer_norm_forward (front)", "P.layer_norm_forward(xd, wd, bd, normalized_ndim=1, eps=1e-5)"),
        ("cuda layer_norm_forward (launcher)", "cuda_layer_norm.layer_norm_forward(xd, wd, bd, normalized_ndim=1, eps=1e-5)"),
        ("torch: Dropout module", "tdrop(tx)"),
        ("Dropout module", "drop(x)"),
        ("F.dropout", "F.dropout(x, 0.2, True)"),
        ("torch: Embedding module", "temb(tids)"),
        ("Embedding module", "emb(ids)"),
        ("torch: x + x", "tx + tx"),
        ("x + x", "x + x"),
        ("torch: x.transpose(1, 2)", "tx.transpose(1, 2)"),
        ("x.transpose(1, 2)", "x.transpose(1, 2)"),
        ("torch: x.split(16, dim=2)", "tx.split(16, dim=2)"),
        ("x.split(16, dim=2)", "x.split(16, dim=2)"),
        ("torch: GELU", "torch.nn.functional.gelu(tx)"),
        ("GELU", "F.gelu(x)"),
    ]
    for _ in range(2):   # compile and warm
        for _, stmt in rows:
            exec(stmt, g)
    cupy.cuda.Device().synchronize()
    torch.cuda.synchronize()
    print("| call | us |\n| --- | ---: |")
    for name, stmt in rows:
        best = float("inf")
        for _ in range(5):
            t = timeit.timeit(stmt, globals=g, number=args.number)
            cupy.cuda.Device().synchronize()
            torch.cuda.synchronize()
            best = min(best, t / args.number * 1e6)
        print(f"| {name} | {best:.2f} |", flush=True)


if __name__ == "__main__":
    main()
