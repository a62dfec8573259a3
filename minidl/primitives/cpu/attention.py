"""NumPy reference of scaled dot-product attention (formulas in minidl/primitives/attention.py): the plain
algorithm, with the L x S scores and probabilities formed in memory.

Written with `xp = get_array_module(q)`, so the same lines run on CuPy arrays too, for what
kernels/attention.cu does not take (float32/float64 data, other head dims).
"""
from __future__ import annotations

import numpy as np

from .._common import backend, get_array_module


def _expand_heads(xp, a, heads):
    """(B, HK, S, E) -> (B, heads, S, E): each key/value head repeated for its group of query heads."""
    return a if a.shape[1] == heads else xp.repeat(a, heads // a.shape[1], axis=1)


def _sum_groups(a, kv_heads):
    """(B, H, S, E) -> (B, HK, S, E): a gradient summed over each group of query heads."""
    B, H = a.shape[:2]
    return a if H == kv_heads else a.reshape(B, kv_heads, H // kv_heads, *a.shape[2:]).sum(axis=2)


def _scores(xp, q, k, mask, causal, scale):
    """S = Q K^T * scale, masked: (B, H, L, S) in q's dtype; hidden pairs are -inf."""
    s = xp.matmul(q, _expand_heads(xp, k, q.shape[1]).swapaxes(-1, -2)) * q.dtype.type(scale)
    if mask is not None:
        if mask.dtype == bool:
            s = xp.where(mask, s, q.dtype.type(-xp.inf))
        else:
            s = s + mask.astype(q.dtype)
    if causal:
        L, S = s.shape[-2:]
        s = xp.where(xp.tri(L, S, dtype=bool), s, q.dtype.type(-xp.inf))
    return s


def _keep_scale(xp, shape, dtype, dropout_p, seed, offset):
    """keep / (1 - p) for every element of the (B, H, L, S) probabilities: dropout's own mask, drawn by
    the dropout primitive of the arrays' device over the same flat indices as the kernel's."""
    ones = xp.ones(shape, dtype=xp.float32)
    kept = backend("dropout", xp is not np).dropout_forward(ones, dropout_p, seed, offset=offset)
    return (kept != 0).astype(dtype) * dtype.type(1.0 / (1.0 - dropout_p))


def attention_forward(q, k, v, mask=None, *, causal=False, scale=1.0, dropout_p=0.0, seed=0, offset=0):
    xp = get_array_module(q)
    s = _scores(xp, q, k, mask, causal, scale)
    m = s.max(axis=-1, keepdims=True)
    m = xp.where(m == -xp.inf, q.dtype.type(0), m)         # a query that sees no key: every exp is 0
    e = xp.exp(s - m)
    total = e.sum(axis=-1, keepdims=True)
    p = e / xp.where(total == 0, q.dtype.type(1), total)
    lse = xp.where(total > 0, m + xp.log(xp.where(total > 0, total, 1)), xp.inf)[..., 0]
    if dropout_p > 0:
        p = p * _keep_scale(xp, p.shape, q.dtype, dropout_p, seed, offset)
    out = xp.matmul(p, _expand_heads(xp, v, q.shape[1]))
    lse_dtype = xp.float64 if q.dtype == xp.float64 else xp.float32
    return out.astype(q.dtype, copy=False), lse.astype(lse_dtype, copy=False)


def attention_backward(q, k, v, out, dout, lse, mask=None, *, causal=False, scale=1.0, dropout_p=0.0, seed=0,
                       offset=0):
    xp = get_array_module(q)
    H, HK = q.shape[1], k.shape[1]
    s = _scores(xp, q, k, mask, causal, scale)
    p = xp.exp(s - lse.astype(q.dtype)[..., None])        # LSE = +inf for a query with no key: P = 0
    dout = dout.astype(q.dtype, copy=False)
    v_all = _expand_heads(xp, v, H)
    dp = xp.matmul(dout, v_all.swapaxes(-1, -2))           # dL/d(dropped P)
    if dropout_p > 0:
        keep = _keep_scale(xp, p.shape, q.dtype, dropout_p, seed, offset)
        dv = xp.matmul((p * keep).swapaxes(-1, -2), dout)
        dp = dp * keep
    else:
        dv = xp.matmul(p.swapaxes(-1, -2), dout)
    delta = (dout * out.astype(q.dtype, copy=False)).sum(axis=-1, keepdims=True)   # = sum_j P_ij dP_ij
    ds = p * (dp - delta)
    dq = xp.matmul(ds, _expand_heads(xp, k, H)) * q.dtype.type(scale)
    dk = xp.matmul(ds.swapaxes(-1, -2), q) * q.dtype.type(scale)
    return (dq.astype(q.dtype, copy=False), _sum_groups(dk, HK).astype(k.dtype, copy=False),
            _sum_groups(dv, HK).astype(v.dtype, copy=False))
