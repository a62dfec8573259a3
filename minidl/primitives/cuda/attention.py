"""CuPy launchers of kernels/attention.cu: fused attention forward and backward, float16/bfloat16,
head dims 32/64/96/128. Arguments were validated (and the kernel's conditions checked) by
minidl/primitives/attention.py.

Forward: attention_forward<KIND, D, WARPS, MT, CAUSAL, MASK, DROPOUT>, one block per (128 queries, batch x
head). Backward: attention_delta (Delta = rowsum(dO * O)), attention_backward<KIND, D, CAUSAL, MASK, DROPOUT>
(one block per 64 keys of a key/value head; dQ summed in fp32 with atomics), attention_dq_finish
(dQ = scale * the sum, rounded). The flags are compile-time, so the plain case carries no per-element test.
Every launch reads the dropout generator state from the device when given one, so the whole pass can be
captured in a CUDA graph.
"""
from __future__ import annotations

import math

import cupy
import numpy as np

from ._compile import get_kernel
from ._launch import grid_stride_blocks, null_pointer

KINDS = {"float16": 1, "bfloat16": 2}   # KIND of kernels/tc_common.cuh
BLOCK_M = 128                            # queries per forward block


def forward_config(d: int) -> tuple:
    """(WARPS, MT) of attention_forward: 4 warps of two 16-row tiles where the registers hold them (D <= 64:
    every K/V fragment read from shared memory feeds two mma), else 8 warps of one tile."""
    return (4, 2) if d <= 64 else (8, 1)
BLOCK_N = 64                             # keys per block (BN of kernels/attention.cu)
BACKWARD_BLOCK_M = 64
PAD = 8
_kernels: dict = {}


def forward_smem_bytes(d: int) -> int:
    """Q tile + two stages of K and V tiles, rows padded by 8 elements (2 bytes each)."""
    return (BLOCK_M + 4 * BLOCK_N) * (d + PAD) * 2


def backward_smem_bytes(d: int) -> int:
    """K and V tiles, two stages of Q and dO tiles, dS^T (64 x 72) and two stages of two fp32 vectors of 64
    (LSE, Delta)."""
    return (2 * BLOCK_N + 4 * BACKWARD_BLOCK_M) * (d + PAD) * 2 + BLOCK_N * (BACKWARD_BLOCK_M + PAD) * 2 \
        + 4 * BACKWARD_BLOCK_M * 4


def _flags(causal, mask, dropout_p) -> str:
    return f"{str(bool(causal)).lower()}, {str(mask is not None).lower()}, {str(dropout_p > 0).lower()}"


def _kernel(name: str, template_args: str, smem: int = 0):
    """The instantiation name<template_args> of kernels/attention.cu (compiled on first use, alone)."""
    expression = f"{name}<{template_args}>"
    key = (cupy.cuda.Device().id, expression)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = get_kernel("attention", expression, name_expressions=(expression,))
        if smem > 48 * 1024:
            kernel.max_dynamic_shared_size_bytes = smem
        _kernels[key] = kernel
    return kernel


def _mask_args(mask, shape):
    """(pointer, 4 element strides) of an fp32 mask broadcast to (B, H, L, S); a bool mask becomes 0 / -inf."""
    if mask is None:
        return (null_pointer(),) + (np.int64(0),) * 4, None
    if mask.dtype == cupy.bool_:
        mask = cupy.where(mask, cupy.float32(0), cupy.float32(-cupy.inf))
    elif mask.dtype != cupy.float32:
        mask = mask.astype(cupy.float32)
    view = cupy.broadcast_to(mask, shape)
    strides = tuple(np.int64(s // 4) for s in view.strides)
    return (view,) + strides, mask


def _dropout_args(dropout_p, seed, offset):
    if dropout_p == 0.0:
        return np.float32(0), np.uint32(0), np.uint64(0), np.uint64(0), null_pointer()
    threshold = np.uint32(int(math.ceil(dropout_p * (1 << 24))))
    scale = np.float32(1.0 / (1.0 - dropout_p))
    if isinstance(seed, cupy.ndarray):
        return scale, threshold, np.uint64(0), np.uint64(offset), seed
    return scale, threshold, np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF), np.uint64(offset), null_pointer()


def attention_forward(q, k, v, mask=None, *, causal=False, scale=1.0, dropout_p=0.0, seed=0, offset=0):
    q, k, v = (cupy.ascontiguousarray(a) for a in (q, k, v))
    B, H, L, D = q.shape
    HK, S = k.shape[1], k.shape[2]
    out = cupy.empty_like(q)
    lse = cupy.empty((B, H, L), dtype=cupy.float32)
    if B * H * L == 0:
        return out, lse
    if S == 0:
        out.fill(0)
        lse.fill(cupy.inf)
        return out, lse
    kind = KINDS[q.dtype.name]
    mask_args, _keep_alive = _mask_args(mask, (B, H, L, S))
    smem = forward_smem_bytes(D)
    warps, mt = forward_config(D)
    kernel = _kernel("attention_forward", f"{kind}, {D}, {warps}, {mt}, {_flags(causal, mask, dropout_p)}", smem)
    kernel(((L + BLOCK_M - 1) // BLOCK_M, B * H), (32 * warps,),
           (q, k, v, out, lse, np.int32(H), np.int32(HK), np.int32(L), np.int32(S), np.float32(scale),
            *mask_args, *_dropout_args(dropout_p, seed, offset)), shared_mem=smem)
    return out, lse


def attention_backward(q, k, v, out, dout, lse, mask=None, *, causal=False, scale=1.0, dropout_p=0.0, seed=0,
                       offset=0):
    q, k, v, out, dout = (cupy.ascontiguousarray(a) for a in (q, k, v, out, dout))
    lse = cupy.ascontiguousarray(lse, dtype=cupy.float32)
    B, H, L, D = q.shape
    HK, S = k.shape[1], k.shape[2]
    dq, dk, dv = cupy.empty_like(q), cupy.empty_like(k), cupy.empty_like(v)
    if B * H * L == 0 or S == 0:
        for a in (dq, dk, dv):
            a.fill(0)
        return dq, dk, dv
    kind = KINDS[q.dtype.name]
    rows = B * H * L
    delta = cupy.empty((B, H, L), dtype=cupy.float32)
    _kernel("attention_delta", f"{kind}")(((rows + 3) // 4,), (128,), (out, dout, delta, np.int64(rows), np.int32(D)))
    dq_acc = cupy.zeros((B, H, L, D), dtype=cupy.float32)
    mask_args, _keep_alive = _mask_args(mask, (B, H, L, S))
    smem = backward_smem_bytes(D)
    _kernel("attention_backward", f"{kind}, {D}, {_flags(causal, mask, dropout_p)}", smem)(
        ((S + BLOCK_N - 1) // BLOCK_N, B * HK), (128,),
        (q, k, v, dout, lse, delta, dq_acc, dk, dv, np.int32(H), np.int32(HK), np.int32(L), np.int32(S),
         np.float32(scale), *mask_args, *_dropout_args(dropout_p, seed, offset)),
        shared_mem=smem)
    n = dq.size
    _kernel("attention_dq_finish", f"{kind}")((grid_stride_blocks(n),), (256,),
                                            (dq_acc, dq, np.int64(n), np.float32(scale)))
    return dq, dk, dv
