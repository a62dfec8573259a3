"""Scaled dot-product attention, forward and backward (cuDNN's fused attention, FlashAttention's
interface): for every (batch, head),

    S = Q K^T * scale + mask        (L queries x S keys)
    P = softmax(S) over the keys,   dropped out with probability p (kept ones scaled by 1 / (1 - p))
    O = P V

q (B, H, L, D); k and v (B, HK, S, D) and (B, HK, S, Dv), H a multiple of HK (grouped-query attention:
query head h reads key/value head h // (H // HK)). mask: None, or an array broadcastable to (B, H, L, S):
a float mask is added to the scores, a bool mask is True where a query may attend (False -> -inf).
causal=True hides key j from query i when j > i (top-left aligned, torch's is_causal).

The forward pass returns (O, LSE): LSE (B, H, L) (float32; float64 for float64 data) is
log(sum_j exp(S_ij)) per query, the one statistic the backward pass needs to recompute P = exp(S - LSE)
without storing P. A query that sees no
key gets O = 0 and LSE = +inf (so that the recomputed P is 0). Dropout: element (b, h, i, j) of P is kept
iff dropout's mask at flat index ((b * H + h) * L + i) * S + j (plus `offset`) keeps it -- the same Philox
stream dropout_forward draws for a (B, H, L, S) array, so the kernel and the reference agree.

Implementations: the NumPy reference (cpu/attention.py) forms S and P in memory. kernels/attention.cu is
the fused FlashAttention-2 kernel (S and P never leave the chip) for float16/bfloat16 and float32 with D = Dv
in {32, 64, 96, 128}; on the GPU anything else runs the reference's array code on CuPy (see
`attention_kernel_reason`). math= (float32 data on the GPU): "fp32" multiplies on the TF32 tensor cores with
3xTF32 splits (fp32's accuracy), "tf32" with one TF32 product (torch's allow_tf32); the reference computes
exactly in both.
"""
from __future__ import annotations

from math import isfinite, sqrt

import numpy as np

from .._dtypes import bfloat16, float16, float32
from ._common import (
    Checked, backend, check_arrays, check_float_or_half, check_same_device, computes_half_in_float32, is_cuda_array,
    shape_str,
)

__all__ = ["attention_forward", "attention_backward", "attention_kernel_reason", "ATTENTION_HEAD_DIMS", "ATTENTION_MATHS"]

ATTENTION_HEAD_DIMS = (32, 64, 96, 128)   # head dims kernels/attention.cu is instantiated for
ATTENTION_MATHS = ("fp32", "tf32")         # float32 data: 3xTF32 or TF32 products
MAX_GRID_Y = 65535                         # the kernels' grid y is batch x heads


def _check(op, q, k, v, mask, causal, scale, dropout_p):
    check_arrays(op, q=q, k=k, v=v)
    check_same_device(op, q=q, k=k, v=v, mask=mask)
    check_float_or_half(op, q=q, k=k, v=v)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim != 4:
            raise ValueError(f"{op}: {name} must be 4-D (batch, heads, sequence, head dim), got {shape_str(a.shape)}")
    B, H, L, D = q.shape
    if k.shape[0] != B or v.shape[0] != B:
        raise ValueError(f"{op}: q {shape_str(q.shape)}, k {shape_str(k.shape)} and v {shape_str(v.shape)} must "
                         "have the same batch size")
    HK, S = k.shape[1], k.shape[2]
    if k.shape[3] != D:
        raise ValueError(f"{op}: q's head dim {D} and k's {k.shape[3]} must match (q {shape_str(q.shape)}, "
                         f"k {shape_str(k.shape)})")
    if v.shape[1] != HK or v.shape[2] != S:
        raise ValueError(f"{op}: k {shape_str(k.shape)} and v {shape_str(v.shape)} must have the same heads and "
                         "sequence length")
    if HK == 0 or H % HK:
        raise ValueError(f"{op}: q's heads ({H}) must be a multiple of k's and v's ({HK})")
    if mask is not None:
        try:
            np.broadcast_shapes(tuple(mask.shape), (B, H, L, S))
        except ValueError:
            raise ValueError(f"{op}: mask {shape_str(mask.shape)} does not broadcast to (batch, heads, L, S) = "
                             f"{shape_str((B, H, L, S))}") from None
        if mask.dtype != np.bool_:
            check_float_or_half(op, mask=mask)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"{op}: causal must be a bool, got {causal!r}")
    if scale is not None and not (isinstance(scale, (int, float)) and isfinite(scale)):
        raise ValueError(f"{op}: scale must be a finite number or None, got {scale!r}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{op}: dropout_p must be in [0, 1), got {dropout_p!r}")
    return (B, H, L, D), (HK, S)


_forward_checked, _backward_checked = Checked(), Checked()   # signatures checked -> whether the fused kernel takes them


def _plain(causal, scale, dropout_p, math) -> bool:
    """The scalar arguments are of the kinds a signature key holds (anything else goes through the checks)."""
    return (type(causal) is bool and (scale is None or type(scale) in (int, float)) and type(dropout_p) in (int, float)
            and type(math) is str)


def _forward_fused(op, q, k, v, mask, causal, scale, dropout_p, math) -> bool:
    """The forward's checks (raising naming the op); returns whether the fused kernel takes the call."""
    _check(op, q, k, v, mask, causal, scale, dropout_p)
    _check_math(op, math)
    return attention_kernel_reason(q, k, v) is None


def _backward_fused(op, q, k, v, out, dout, lse, mask, causal, scale, dropout_p, math) -> bool:
    """The backward's checks (raising naming the op); returns whether the fused kernel takes the call."""
    (B, H, L, _), _ = _check(op, q, k, v, mask, causal, scale, dropout_p)
    _check_math(op, math)
    check_arrays(op, out=out, dout=dout, lse=lse)
    check_same_device(op, q=q, out=out, dout=dout, lse=lse)
    Dv = v.shape[-1]
    for name, a, shape in (("out", out, (B, H, L, Dv)), ("dout", dout, (B, H, L, Dv)), ("lse", lse, (B, H, L))):
        if tuple(a.shape) != shape:
            raise ValueError(f"{op}: {name} has shape {shape_str(a.shape)}, expected {shape_str(shape)}")
    return attention_kernel_reason(q, k, v) is None and dout.dtype == q.dtype and out.dtype == q.dtype


def attention_kernel_reason(q, k, v) -> str | None:
    """Why kernels/attention.cu cannot run this problem (None when it can): the reference's array code
    runs it instead."""
    if not is_cuda_array(q):
        return "the arrays are on the CPU"
    if q.dtype not in (float16, bfloat16, float32) or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"the fused kernel takes float16/bfloat16/float32 q, k, v of one dtype (got {q.dtype}, {k.dtype}, {v.dtype})"
    if q.shape[-1] not in ATTENTION_HEAD_DIMS or v.shape[-1] != q.shape[-1]:
        return (f"the fused kernel takes head dims {ATTENTION_HEAD_DIMS} with equal q/k and v dims "
                f"(got {q.shape[-1]} and {v.shape[-1]})")
    if q.shape[0] * q.shape[1] > MAX_GRID_Y:
        return (f"batch x heads = {q.shape[0] * q.shape[1]} is more than the {MAX_GRID_Y} blocks of a CUDA grid's "
                "y dimension, where the kernel puts them")
    return None


@computes_half_in_float32(out_dtypes=("q", None))
def _reference_forward(q, k, v, mask=None, *, causal=False, scale=None, dropout_p=0.0, seed=0, offset=0):
    return backend("attention", False).attention_forward(q, k, v, mask, causal=causal, scale=scale,
                                                         dropout_p=dropout_p, seed=seed, offset=offset)


@computes_half_in_float32(out_dtypes=("q", "k", "v"))
def _reference_backward(q, k, v, out, dout, lse, mask=None, *, causal=False, scale=None, dropout_p=0.0, seed=0,
                        offset=0):
    return backend("attention", False).attention_backward(q, k, v, out, dout, lse, mask, causal=causal, scale=scale,
                                                          dropout_p=dropout_p, seed=seed, offset=offset)


def _refuse_capture(op, q, k, v):
    """On the GPU the reference's products are cupy.matmul (cuBLAS) calls, which a capture cannot hold."""
    if is_cuda_array(q):
        from .cuda import check_no_cublas_capture

        reason = attention_kernel_reason(q, k, v)
        check_no_cublas_capture(op, f"The fused kernel is not used here: {reason}. Capture attention "
                                    "with head dims 32-128 in float32/float16/bfloat16, or run this step eagerly.")


def _check_math(op, math_mode):
    if math_mode not in ATTENTION_MATHS:
        raise ValueError(f"{op}: math must be one of {ATTENTION_MATHS}, got {math_mode!r}")


def attention_forward(q, k, v, mask=None, *, causal=False, scale=None, dropout_p=0.0, seed=0, offset=0, math="fp32"):
    """(O, LSE): O (B, H, L, Dv) in q's dtype, LSE (B, H, L) float32. scale=None is 1 / sqrt(D). seed: an
    int or a (2,) uint64 generator state (seed, base offset) on q's device (dropout_p > 0 only). math: see the
    module docstring (float32 data on the GPU only)."""
    op = "attention_forward"
    # A signature whose checks passed before (every step of a model calls with the same shapes) skips them, and
    # keeps whether the fused kernel takes it (issue 23: the checks cost more than the launch).
    key = Checked.key((q, k, v, mask), causal, scale, dropout_p, math) if _plain(causal, scale, dropout_p, math) else None
    fused = _forward_checked.value(key, lambda: _forward_fused(op, q, k, v, mask, causal, scale, dropout_p, math))
    scale = 1.0 / sqrt(q.shape[-1]) if scale is None else float(scale)
    if fused:
        return backend("attention", True).attention_forward(q, k, v, mask, causal=bool(causal), scale=scale,
                                                            dropout_p=float(dropout_p), seed=seed, offset=int(offset),
                                                            math=math)
    _refuse_capture(op, q, k, v)
    return _reference_forward(q, k, v, mask, causal=bool(causal), scale=scale, dropout_p=float(dropout_p), seed=seed,
                              offset=int(offset))


def attention_backward(q, k, v, out, dout, lse, mask=None, *, causal=False, scale=None, dropout_p=0.0, seed=0,
                       offset=0, math="fp32"):
    """(dQ, dK, dV) from the forward's inputs, its output O and LSE, and dO; the same mask, causal, scale
    and dropout arguments as the forward call (the dropout mask is regenerated, not stored)."""
    op = "attention_backward"
    key = (Checked.key((q, k, v, out, dout, lse, mask), causal, scale, dropout_p, math)
           if _plain(causal, scale, dropout_p, math) else None)
    fused = _backward_checked.value(key, lambda: _backward_fused(op, q, k, v, out, dout, lse, mask, causal, scale,
                                                                 dropout_p, math))
    scale = 1.0 / sqrt(q.shape[-1]) if scale is None else float(scale)
    if fused:
        return backend("attention", True).attention_backward(q, k, v, out, dout, lse, mask, causal=bool(causal),
                                                             scale=scale, dropout_p=float(dropout_p), seed=seed,
                                                             offset=int(offset), math=math)
    _refuse_capture(op, q, k, v)
    return _reference_backward(q, k, v, out, dout, lse, mask, causal=bool(causal), scale=scale,
                               dropout_p=float(dropout_p), seed=seed, offset=int(offset))
