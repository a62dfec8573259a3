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
    # the MNIST CNN's other layers: batch norm (front, launcher, forward and backward), the generic pooling path
    # (W = 14: no 2x2 fast path), cross-entropy
    from minidl.primitives.cuda import batch_norm as cuda_bn, pooling as cuda_pool, softmax as cuda_softmax
    bnw, bnb, bnm, bnv = (p._data for p in (bn.weight, bn.bias, bn.running_mean, bn.running_var))
    bn_y, bn_mean, bn_invstd = cuda_bn.batch_norm_forward_training(xid, bnw, bnb, bnm, bnv)
    x14, tx14 = minidl.randn(8, 16, 14, 14, device="cuda", requires_grad=True), \
        torch.randn(8, 16, 14, 14, device="cuda", requires_grad=True)
    pool_desc, x14d = P.PoolingDescriptor(mode="max", kernel_size=(2, 2), stride=(2, 2), padding=(0, 0)), x14._data
    y14d = cuda_pool.pooling_forward(x14d, pool_desc)
    logits, tlogits = minidl.randn(32, 10, device="cuda", requires_grad=True), \
        torch.randn(32, 10, device="cuda", requires_grad=True)
    labels, tlabels = minidl.randint(0, 10, (32,), device="cuda"), torch.randint(0, 10, (32,), device="cuda")
    ce_loss, ce_stats, ce_denom = cuda_softmax.cross_entropy_forward(logits._data, labels._data)
    # the MNIST CNN's second convolution in TF32 (issue 23: its step's TF32 rows), 32 -> 64 channels, 3x3, stride 1:
    # the module's forward + backward, and the plan's three directions (on Hopper: wgmma, channels-first)
    conv32, tconv32 = minidl.nn.Conv2d(32, 64, 3, padding=1, bias=False).to("cuda"), \
        torch.nn.Conv2d(32, 64, 3, padding=1, bias=False).cuda()
    x32, tx32 = minidl.randn(8, 32, 8, 8, device="cuda", requires_grad=True), \
        torch.randn(8, 32, 8, 8, device="cuda", requires_grad=True)
    tf32_plan = P.ConvolutionPlan((8, 32, 8, 8), (64, 32, 3, 3), P.ConvolutionDescriptor(padding=1), device="cuda",
                                  math="tf32")
    x32d, w32d = x32._data, conv32.weight._data
    dy32d = tf32_plan.forward(x32d, w32d)
    # char_gpt's attention (issue 25), small and fp32: the functional, forward and forward + backward
    q = minidl.randn(4, 2, 16, 32, device="cuda", requires_grad=True)
    tq = torch.randn(4, 2, 16, 32, device="cuda", requires_grad=True)
    g = dict(minidl=minidl, torch=torch, F=F, P=P, cupy=cupy, np=np, x=x, ln=ln, drop=drop, emb=emb, ids=ids, tx=tx,
             tln=tln, tdrop=tdrop, temb=temb, tids=tids, xd=xd, wd=wd, bd=bd, LayerNormFn=LayerNormFn,
             cuda_layer_norm=cuda_layer_norm,
             empty_shape=(B, T), f32=cupy.float32,
             xi=xi, txi=txi, relu=relu, trelu=trelu, pool=pool, tpool=tpool, bn=bn, tbn=tbn, conv=conv, tconv=tconv,
             lin=lin, tlin=tlin, xl=xl, txl=txl, relu_desc=relu_desc, xid=xid, xld=xld, lwd=lwd, lbd=lbd,
             Activation=Activation, LinearFn=LinearFn, cuda_activation=cuda_activation, cuda_gemm=cuda_gemm,
             cuda_bn=cuda_bn, cuda_pool=cuda_pool, cuda_softmax=cuda_softmax, bnw=bnw, bnb=bnb, bnm=bnm, bnv=bnv,
             bn_mean=bn_mean, bn_invstd=bn_invstd, x14=x14, tx14=tx14, pool_desc=pool_desc, x14d=x14d, y14d=y14d,
             logits=logits, tlogits=tlogits, labels=labels, tlabels=tlabels, ce_stats=ce_stats, ce_denom=ce_denom,
             ce_dloss=cupy.ones((), dtype=cupy.float32), q=q, tq=tq, conv32=conv32, tconv32=tconv32, x32=x32,
             tx32=tx32, tf32_plan=tf32_plan, x32d=x32d, w32d=w32d, dy32d=dy32d)
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
        ("P.batch_norm_forward_training (front)", "P.batch_norm_forward_training(xid, bnw, bnb, bnm, bnv)"),
        ("cuda batch_norm_forward_training (launcher)", "cuda_bn.batch_norm_forward_training(xid, bnw, bnb, bnm, bnv)"),
        ("P.batch_norm_backward (front)", "P.batch_norm_backward(xid, xid, bnw, bn_mean, bn_invstd)"),
        ("cuda batch_norm_backward (launcher)", "cuda_bn.batch_norm_backward(xid, xid, bnw, bn_mean, bn_invstd)"),
        ("torch: BatchNorm2d forward + backward", "tbn(txi).backward(txi)"),
        ("BatchNorm2d forward + backward", "bn(xi).backward(xi)"),
        ("torch: MaxPool2d 14x14 module", "tpool(tx14)"),
        ("MaxPool2d 14x14 module", "pool(x14)"),
        ("P.pooling_forward 14x14 (front)", "P.pooling_forward(x14d, pool_desc)"),
        ("cuda pooling_forward 14x14 (launcher)", "cuda_pool.pooling_forward(x14d, pool_desc)"),
        ("cuda pooling_backward 14x14 (launcher)", "cuda_pool.pooling_backward(x14d, y14d, y14d, pool_desc)"),
        ("torch: MaxPool2d 14x14 forward + backward", "tpool(tx14).backward(tpool(tx14))"),
        ("MaxPool2d 14x14 forward + backward", "pool(x14).backward(pool(x14))"),
        ("torch: F.cross_entropy", "torch.nn.functional.cross_entropy(tlogits, tlabels)"),
        ("F.cross_entropy", "F.cross_entropy(logits, labels)"),
        ("cuda cross_entropy_forward (launcher)", "cuda_softmax.cross_entropy_forward(logits._data, labels._data)"),
        ("cuda cross_entropy_backward (launcher)", "cuda_softmax.cross_entropy_backward(logits._data, labels._data, ce_stats, ce_dloss, ce_denom)"),
        ("torch: F.cross_entropy forward + backward", "torch.nn.functional.cross_entropy(tlogits, tlabels).backward()"),
        ("F.cross_entropy forward + backward", "F.cross_entropy(logits, labels).backward()"),
        ("torch: Conv2d 32->64 TF32 forward + backward",
         "with torch.backends.cudnn.flags(enabled=True, allow_tf32=True):\n    y = tconv32(tx32); y.backward(y)"),
        ("Conv2d 32->64 TF32 forward + backward",
         "with minidl.backends.cudnn.flags(allow_tf32=True):\n    y = conv32(x32); y.backward(y)"),
        ("TF32 plan.forward", "tf32_plan.forward(x32d, w32d)"),
        ("TF32 plan.backward_data", "tf32_plan.backward_data(w32d, dy32d)"),
        ("TF32 plan.backward_filter", "tf32_plan.backward_filter(x32d, dy32d)"),
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
        ("torch: Linear forward + backward (bf16 autocast)",
         "with torch.autocast('cuda', dtype=torch.bfloat16):\n    y = tlin(txl)\ny.float().sum().backward()"),
        ("Linear forward + backward (bf16 autocast)",
         "with minidl.autocast('cuda', dtype=minidl.bfloat16):\n    y = lin(xl)\ny.float().sum().backward()"),
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
        ("torch: SDPA causal", "torch.nn.functional.scaled_dot_product_attention(tq, tq, tq, is_causal=True)"),
        ("SDPA causal", "F.scaled_dot_product_attention(q, q, q, is_causal=True)"),
        ("torch: SDPA causal forward + backward",
         "torch.nn.functional.scaled_dot_product_attention(tq, tq, tq, is_causal=True).backward(tq)"),
        ("SDPA causal forward + backward", "F.scaled_dot_product_attention(q, q, q, is_causal=True).backward(q)"),
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
