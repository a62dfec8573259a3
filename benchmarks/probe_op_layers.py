"""Host microseconds of one eager op on the GPU, layer by layer: the nn.Module call, the functional, Function.apply,
the primitive's front (minidl/primitives), its CUDA launcher (minidl/primitives/cuda) and the CuPy calls the
launchers make (cupy.empty, ascontiguousarray, one kernel launch), beside torch's module on the same tensors. Tiny
tensors, so the GPU keeps up and what is timed is the host path; the GPU is synchronised after each timed batch.
Where the layers' times step up is where an op's host time goes (issue 23 / 25: char_gpt's forward host time is
2.2x torch's, benchmarks/results/gpu_gpt_step.md).

    python3 benchmarks/probe_op_layers.py [--number 2000] [--pin 3] [--only relu,linear,...]
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
    ap.add_argument("--only", default=None, help="comma-separated words: only the rows whose label holds one")
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
    # issue 23's small CNNs: their ops on a small NCHW batch, fp32 (TF32 off), layer by layer
    from minidl.ops.activation import Activation
    from minidl.nn.functional.dense import Linear as LinearFn
    from minidl.primitives.cuda import activation as cuda_activation, gemm as cuda_gemm
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    xi = minidl.randn(8, 16, 8, 8, device="cuda", requires_grad=True)
    txi = torch.randn(8, 16, 8, 8, device="cuda", requires_grad=True)
    relu, trelu = minidl.nn.ReLU(), torch.nn.ReLU()
    pool, tpool = minidl.nn.MaxPool2d(2), torch.nn.MaxPool2d(2)
    bn, tbn = minidl.nn.BatchNorm2d(16).to("cuda"), torch.nn.BatchNorm2d(16).cuda()
    conv, tconv = minidl.nn.Conv2d(16, 16, 3, padding=1, bias=False).to("cuda"), \
        torch.nn.Conv2d(16, 16, 3, padding=1, bias=False).cuda()
    lin, tlin = minidl.nn.Linear(256, 64).to("cuda"), torch.nn.Linear(256, 64).cuda()
    xl, txl = minidl.randn(32, 256, device="cuda", requires_grad=True), torch.randn(32, 256, device="cuda", requires_grad=True)
    relu_desc, xid, xld, lwd, lbd = P.ActivationDescriptor("relu"), xi._data, xl._data, lin.weight._data, lin.bias._data
    g = dict(minidl=minidl, torch=torch, F=F, P=P, cupy=cupy, np=np, x=x, ln=ln, drop=drop, emb=emb, ids=ids, tx=tx,
             tln=tln, tdrop=tdrop, temb=temb, tids=tids, xd=xd, wd=wd, bd=bd, LayerNormFn=LayerNormFn,
             cuda_layer_norm=cuda_layer_norm,
             empty_shape=(B, T), f32=cupy.float32,
             xi=xi, txi=txi, relu=relu, trelu=trelu, pool=pool, tpool=tpool, bn=bn, tbn=tbn, conv=conv, tconv=tconv,
             lin=lin, tlin=tlin, xl=xl, txl=txl, relu_desc=relu_desc, xid=xid, xld=xld, lwd=lwd, lbd=lbd,
             Activation=Activation, LinearFn=LinearFn, cuda_activation=cuda_activation, cuda_gemm=cuda_gemm)
    rows = [
        ("torch: ReLU module", "trelu(txi)"),
        ("ReLU module", "relu(xi)"),
        ("F.relu", "F.relu(xi)"),
        ("Activation.apply", "Activation.apply(xi, desc=relu_desc)"),
        ("P.activation_forward (front)", "P.activation_forward(xid, relu_desc)"),
        ("cuda activation_forward (launcher)", "cuda_activation.activation_forward(xid, relu_desc)"),
        ("torch: MaxPool2d module", "tpool(txi)"),
        ("MaxPool2d module", "pool(xi)"),
        ("torch: BatchNorm2d module (training)", "tbn(txi)"),
        ("BatchNorm2d module (training)", "bn(xi)"),
        ("torch: Conv2d module", "tconv(txi)"),
        ("Conv2d module", "conv(xi)"),
        ("torch: Linear module (fp32)", "tlin(txl)"),
        ("Linear module (fp32)", "lin(xl)"),
        ("F.linear", "F.linear(xl, lin.weight, lin.bias)"),
        ("Linear Function.apply", "LinearFn.apply(xl, lin.weight, lin.bias)"),
        ("P.gemm (front)", "P.gemm(xld, lwd, trans_b=True, bias=lbd)"),
        ("cuda gemm (launcher)", "cuda_gemm.gemm(xld, lwd, trans_b=True, bias=lbd)"),
        ("torch: ReLU forward + backward", "trelu(txi).backward(txi)"),
        ("ReLU forward + backward", "relu(xi).backward(xi)"),
        ("torch: Linear forward + backward", "tlin(txl).backward(txl[:, :64])"),
        ("Linear forward + backward", "lin(xl).backward(xl[:, :64])"),
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
    if args.only:
        words = [w.lower() for w in args.only.split(",")]
        rows = [r for r in rows if any(w in r[0].lower() for w in words)]
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
