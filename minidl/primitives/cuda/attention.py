"""CuPy launchers of kernels/attention.cu: fused attention forward and backward, float16/bfloat16 (mma.sync
m16n8k16) and float32 (TF32 mma.sync m16n8k8: 3xTF32 for fp32 math, one TF32 product for TF32 math), head dims
32/64/96/128. Arguments were validated (and the kernel's conditions checked) by
minidl/primitives/attention.py.

Forward: attention_forward<KIND, D, WARPS, MT, CAUSAL, MASK, DROPOUT>, one block per (128 queries, batch x
head); float32: attention_forward_tf32<PRECISE, D, CAUSAL, MASK, DROPOUT>, one block per (64 queries, batch x head),
and attention_backward_tf32 likewise. Backward: attention_delta (Delta = rowsum(dO * O)), attention_backward<KIND, D, CAUSAL, MASK, DROPOUT>
(one block per 64 keys of a key/value head; dQ summed in fp32 with atomics), attention_dq_finish
(dQ = scale * the sum, rounded). The flags are compile-time, so the plain case carries no per-element test.
Every launch reads the dropout generator state from the device when given one, so the whole pass can be
captured in a CUDA graph.

On an H100/H200 the 16-bit forward pass at D = 64 and 128 and the backward at D = 64 run kernels/attention_wgmma.cu
instead (attention_forward_wgmma / attention_backward_wgmma<KIND, D, CAUSAL, MASK, DROPOUT>: the same blocks, the
products on Hopper's wgmma; attention_delta and attention_dq_finish stay attention.cu's);
minidl.primitives.set_tensor_core_gemm("mma_sync"), which chooses between the two tensor-core kernel families
everywhere, keeps them on attention.cu.
"""
from __future__ import annotations

import math

import cupy
import numpy as np

from .. import _common
from ._compile import get_template_kernel
from ._launch import STORAGE_KINDS as KINDS, Plans, float32_contiguous, grid_stride_blocks, null_pointer
from .gemm_wgmma import device_has_wgmma

BLOCK_M = 128                            # queries per forward block (16-bit data)
BLOCK_M_F32 = 64                         # queries per forward block (float32 data)
PAD_F32 = 4                              # floats of padding per shared row (float32 kernels)


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


WGMMA_HEAD_DIMS = {"forward": (64, 128), "backward": (64,)}   # head dims of kernels/attention_wgmma.cu


def forward_smem_bytes_wgmma(d: int) -> int:
    """Q (128 rows) + two stages of K and V (64 rows each), unpadded (swizzled), + 1024 to align the atoms
    (Smem<D>::TOTAL of kernels/attention_wgmma.cu)."""
    return 1024 + (BLOCK_M + 4 * BLOCK_N) * d * 2


def backward_smem_bytes_wgmma(d: int) -> int:
    """K, V, two stages of Q and dO (64 rows each, swizzled), dS^T (64 x 64), two stages of LSE and Delta, + 1024
    to align the atoms (BwdSmem<D>::TOTAL)."""
    return 1024 + 6 * BACKWARD_BLOCK_M * d * 2 + BLOCK_N * BACKWARD_BLOCK_M * 2 + 4 * BACKWARD_BLOCK_M * 4


def kernel_family(kind: int, d: int, direction: str = "forward") -> str:
    """"wgmma" where attention_wgmma.cu takes the pass (16-bit data, a head dim of WGMMA_HEAD_DIMS[direction], an
    H100/H200, and set_tensor_core_gemm not "mma_sync"), else "mma_sync" (attention.cu). "wgmma" asked for where
    it cannot run is an error, as for the GEMM."""
    choice = _common.tensor_core_gemm
    if choice == "mma_sync":
        return "mma_sync"
    reason = None
    dims = WGMMA_HEAD_DIMS[direction]
    if kind == 0:
        reason = "float32 data (the wgmma attention kernels take float16 and bfloat16)"
    elif d not in dims:
        reason = f"head dim {d} (the wgmma attention {direction} kernel takes {dims})"
    elif not device_has_wgmma(cupy.cuda.runtime.getDevice()):
        reason = "this GPU has no wgmma (compute capability 9.0 only: H100, H200)"
    if reason is None:
        return "wgmma"
    if choice == "wgmma":
        raise RuntimeError(f"attention_{direction}: set_tensor_core_gemm('wgmma') asked for the wgmma kernel, but "
                           f"{reason}")
    return "mma_sync"


def forward_smem_bytes_f32(d: int) -> int:
    """float32: a Q tile of 64 rows + two stages of K and V tiles, rows padded by 4 floats."""
    return (BLOCK_M_F32 + 4 * BLOCK_N) * (d + PAD_F32) * 4


def backward_smem_bytes_f32(d: int) -> int:
    """float32: K and V tiles, one stage of Q and dO tiles, dS^T (64 x 68) and LSE / Delta (2 x 64)."""
    return (2 * BLOCK_N + 2 * BACKWARD_BLOCK_M) * (d + PAD_F32) * 4 + BLOCK_N * (BACKWARD_BLOCK_M + PAD_F32) * 4 \
        + 2 * BACKWARD_BLOCK_M * 4


def backward_smem_bytes(d: int) -> int:
    """K and V tiles, two stages of Q and dO tiles, dS^T (64 x 72) and two stages of two fp32 vectors of 64
    (LSE, Delta)."""
    return (2 * BLOCK_N + 4 * BACKWARD_BLOCK_M) * (d + PAD) * 2 + BLOCK_N * (BACKWARD_BLOCK_M + PAD) * 2 \
        + 4 * BACKWARD_BLOCK_M * 4


def _flags(causal, mask, dropout_p) -> str:
    return f"{str(bool(causal)).lower()}, {str(mask is not None).lower()}, {str(dropout_p > 0).lower()}"


def _kernel(name: str, template_args: str, smem: int = 0, family: str = "attention"):
    """The instantiation name<template_args> of kernels/<family>.cu (compiled on first use, alone)."""
    expression = f"{name}<{template_args}>"
    key = (cupy.cuda.Device().id, expression)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = get_template_kernel(family, expression)
        if smem > 48 * 1024:
            kernel.max_dynamic_shared_size_bytes = smem
        _kernels[key] = kernel
    return kernel


_NO_MASK = (null_pointer(),) + (np.int64(0),) * 4   # the mask arguments of a call without one (_mask_args)


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


def _rows(a):
    """(a, its batch / head / row strides in elements) for an operand the kernels read in place: the last dim
    contiguous, the start and every stride a multiple of 16 bytes (cp.async's 16-byte copies), none negative.
    q, k, v split out of one projection and moved to (B, H, T, D) by a transpose qualify; anything else is
    copied to a contiguous array first."""
    sb, sh, sl, sd = a.strides
    if (sd != a.itemsize or a.data.ptr % 16 or sb % 16 or sh % 16 or sl % 16 or min(sb, sh, sl) < 0) and a.size:
        a = cupy.ascontiguousarray(a)
    return a, _strides(a)


def _precise(math_mode) -> str:
    """PRECISE of the float32 kernels: 'true' (3xTF32, fp32 accuracy) unless the math is 'tf32'."""
    return "false" if math_mode == "tf32" else "true"


# Launch plans (issue 25: a GPT's attention runs the same shapes every step). Per the operands' shapes, strides and
# dtype, the flags, the math and the device: the kernels, grids, shared memory, the shape arguments, and each
# operand's stride arguments where the kernels read it in place (its strides allow it; its start is checked per
# call). Calls without a mask only; with one (its arrays change), and wherever a call differs from its plan (an
# operand that must be copied, gradients that cannot be laid out as the plan's), the general path below runs.
_plans = Plans()


def _in_place_strides(a):
    """The batch / head / row stride arguments of an operand read in place, or None where its strides rule that out
    (the conditions of _rows, all but the start's alignment, which each call checks)."""
    sb, sh, sl, sd = a.strides
    if sd != a.itemsize or sb % 16 or sh % 16 or sl % 16 or min(sb, sh, sl) < 0:
        return None
    return _strides(a)


def _planned_operands(arrays, strides):
    """The operands' stride arguments, concatenated, when every operand is read in place as its plan says (None
    otherwise)."""
    found = ()
    for a, s in zip(arrays, strides):
        if s is None or a.data.ptr % 16:
            return None
        found += s
    return found


def attention_forward(q, k, v, mask=None, *, causal=False, scale=1.0, dropout_p=0.0, seed=0, offset=0, math="fp32"):
    if mask is None:
        key = ("forward", q.shape, q.strides, k.shape, k.strides, v.shape, v.strides, q.dtype, causal, dropout_p > 0,
               math, _common.tensor_core_gemm, cupy.cuda.runtime.getDevice())
        plan = _plans.get(key)
        if plan is None and q.size and k.size:
            plan = _plans.keep(key, _forward_plan(q, k, v, causal, dropout_p, math))
        if plan is not None:
            kernel, grid, block, smem, heads, strides = plan
            rows = _planned_operands((q, k, v), strides)
            if rows is not None:
                out = cupy.ndarray(q.shape, dtype=q.dtype)
                lse = cupy.ndarray(q.shape[:3], dtype=cupy.float32)
                kernel(grid, block, (q, k, v, out, lse, *heads, np.float32(scale), *_NO_MASK,
                                     *_dropout_args(dropout_p, seed, offset), *rows), shared_mem=smem)
                return out, lse
    (q, q_rows), (k, k_rows), (v, v_rows) = _rows(q), _rows(k), _rows(v)
    B, H, L, D = q.shape
    HK, S = k.shape[1], k.shape[2]
    out = cupy.ndarray(q.shape, dtype=q.dtype)
    lse = cupy.ndarray((B, H, L), dtype=cupy.float32)
    if B * H * L == 0:
        return out, lse
    if S == 0:
        out.fill(0)
        lse.fill(cupy.inf)
        return out, lse
    mask_args, _keep_alive = _mask_args(mask, (B, H, L, S))
    kernel, warps, block_m, smem = _forward_kernel(KINDS[q.dtype], D, causal, mask, dropout_p, math)
    kernel(((L + block_m - 1) // block_m, B * H), (32 * warps,),
           (q, k, v, out, lse, np.int32(H), np.int32(HK), np.int32(L), np.int32(S), np.float32(scale),
            *mask_args, *_dropout_args(dropout_p, seed, offset), *q_rows, *k_rows, *v_rows), shared_mem=smem)
    return out, lse


def _forward_kernel(kind, D, causal, mask, dropout_p, math):
    """(kernel, warps, block_m, smem) of the forward pass."""
    if kind == 0:
        smem, warps, block_m = forward_smem_bytes_f32(D), 4, BLOCK_M_F32
        kernel = _kernel("attention_forward_tf32", f"{_precise(math)}, {D}, {_flags(causal, mask, dropout_p)}", smem)
    elif kernel_family(kind, D) == "wgmma":
        smem, warps, block_m = forward_smem_bytes_wgmma(D), 8, BLOCK_M
        kernel = _kernel("attention_forward_wgmma", f"{kind}, {D}, {_flags(causal, mask, dropout_p)}", smem,
                         family="attention_wgmma")
    else:
        smem, (warps, mt), block_m = forward_smem_bytes(D), forward_config(D), BLOCK_M
        kernel = _kernel("attention_forward", f"{kind}, {D}, {warps}, {mt}, {_flags(causal, mask, dropout_p)}", smem)
    return kernel, warps, block_m, smem


def _forward_plan(q, k, v, causal, dropout_p, math):
    B, H, L, D = q.shape
    HK, S = k.shape[1], k.shape[2]
    kernel, warps, block_m, smem = _forward_kernel(KINDS[q.dtype], D, causal, None, dropout_p, math)
    return (kernel, ((L + block_m - 1) // block_m, B * H), (32 * warps,), smem,
            (np.int32(H), np.int32(HK), np.int32(L), np.int32(S)), tuple(_in_place_strides(a) for a in (q, k, v)))


def _backward_kernel(kind, D, causal, mask, dropout_p, math):
    """(kernel, smem) of the backward pass's main kernel."""
    if kind == 0:
        smem = backward_smem_bytes_f32(D)
        kernel = _kernel("attention_backward_tf32", f"{_precise(math)}, {D}, {_flags(causal, mask, dropout_p)}", smem)
    elif kernel_family(kind, D, "backward") == "wgmma":
        smem = backward_smem_bytes_wgmma(D)
        kernel = _kernel("attention_backward_wgmma", f"{kind}, {D}, {_flags(causal, mask, dropout_p)}", smem,
                         family="attention_wgmma")
    else:
        smem = backward_smem_bytes(D)
        kernel = _kernel("attention_backward", f"{kind}, {D}, {_flags(causal, mask, dropout_p)}", smem)
    return kernel, smem


def _backward_plan(q, k, v, dout, causal, dropout_p, math):
    B, H, L, D = q.shape
    HK, S = k.shape[1], k.shape[2]
    kind = KINDS[q.dtype]
    strides = tuple(_in_place_strides(a) for a in (q, k, v, dout))
    # the gradients' layout: q, k, v's when they are the pieces of one array (their pointers' step, checked per
    # call), else contiguous
    packed = _packed((q, k, v)) if None not in strides[:3] else None
    grad_strides = tuple(_strides(a) if packed else tuple(np.int64(s // a.itemsize) for s in _contiguous_strides(a)[:3])
                         for a in (q, k, v))
    rows = B * H * L
    kernel, smem = _backward_kernel(kind, D, causal, None, dropout_p, math)
    return (strides, packed, grad_strides,
            (_kernel("attention_delta", f"{kind}"), ((rows + 3) // 4,), (np.int64(rows), np.int32(D), np.int32(H),
                                                                      np.int32(L))),
            (kernel, ((S + BLOCK_N - 1) // BLOCK_N, B * HK), smem,
             (np.int32(H), np.int32(HK), np.int32(L), np.int32(S))),
            (_kernel("attention_dq_finish", f"{kind}"), (grid_stride_blocks(q.size),),
             (np.int64(q.size),), (np.int32(D), np.int32(H), np.int32(L))))


def _contiguous_strides(a):
    """The byte strides of a C-contiguous array of a's shape and dtype."""
    strides, step = [], a.itemsize
    for n in reversed(a.shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _backward_planned(q, k, v, out, dout, lse, causal, scale, dropout_p, seed, offset, math):
    """attention_backward from its plan, or None where the call differs from it (the general path runs then)."""
    key = ("backward", q.shape, q.strides, k.shape, k.strides, v.shape, v.strides, dout.strides, q.dtype, causal,
           dropout_p > 0, math, _common.tensor_core_gemm, cupy.cuda.runtime.getDevice())
    plan = _plans.get(key)
    if plan is None:
        if not (q.size and k.size):
            return None
        plan = _plans.keep(key, _backward_plan(q, k, v, dout, causal, dropout_p, math))
    strides, packed, grad_strides, delta, main, finish = plan
    rows = _planned_operands((q, k, v, dout), strides)
    if rows is None:
        return None
    if packed is None:
        dq, dk, dv = (cupy.ndarray(a.shape, dtype=a.dtype) for a in (q, k, v))
    else:
        step, nbytes = packed
        if k.data.ptr - q.data.ptr != step or v.data.ptr - k.data.ptr != step:
            return None
        parent = cupy.ndarray(nbytes // q.itemsize, dtype=q.dtype)
        dq, dk, dv = (cupy.ndarray(a.shape, dtype=a.dtype, memptr=parent.data + i * step, strides=a.strides)
                      for i, a in enumerate((q, k, v)))
    out, lse = cupy.ascontiguousarray(out), float32_contiguous(lse)
    d_rows = rows[9:]
    kernel, grid, shape_args = delta
    delta_rows = cupy.ndarray(lse.shape, dtype=cupy.float32)
    kernel(grid, (128,), (out, dout, delta_rows, *shape_args, *d_rows))
    dq_acc = cupy.ndarray(q.shape, dtype=cupy.float32)
    dq_acc.data.memset_async(0, dq_acc.nbytes)
    kernel, grid, smem, heads = main
    kernel(grid, (128,), (q, k, v, dout, lse, delta_rows, dq_acc, dk, dv, *heads, np.float32(scale), *_NO_MASK,
                          *_dropout_args(dropout_p, seed, offset), *rows, *grad_strides[1], *grad_strides[2]),
           shared_mem=smem)
    kernel, grid, size_args, shape_args = finish
    kernel(grid, (256,), (dq_acc, dq, *size_args, np.float32(scale), *shape_args, *grad_strides[0]))
    return dq, dk, dv


def _packed(arrays):
    """(byte step between neighbours, the parent's size in bytes) when the arrays (one shape, strides and dtype)
    are consecutive pieces of one C-contiguous parent, each a block of `step` bytes of every parent row, and
    the parent nothing else: the q, k, v heads of one (B, T, 3 * H * D) projection split along its last dim and
    transposed to (B, H, T, D). None otherwise (then the pieces may overlap, or leave gaps)."""
    first = arrays[0]
    if any(a.shape != first.shape or a.strides != first.strides or a.dtype != first.dtype for a in arrays[1:]):
        return None
    step = arrays[1].data.ptr - first.data.ptr
    if step <= 0 or any(b.data.ptr - a.data.ptr != step for a, b in zip(arrays, arrays[1:])):
        return None
    expected, inner = first.itemsize, True       # bytes the axes walked so far span (the smallest strides first)
    for stride, size in sorted((s, n) for s, n in zip(first.strides, first.shape) if n > 1):
        if inner and stride != expected:         # the piece's block ends here: the parent's rows begin
            if expected != step:
                return None
            inner, expected = False, step * len(arrays)
        if stride != expected:
            return None
        expected *= size
    if inner:                                    # each piece one block: the pieces stacked whole
        if expected != step:
            return None
        expected = step * len(arrays)
    return step, expected


def _gradients_like(q, k, v):
    """dq, dk, dv: laid out as q, k, v, in one new array, when those are the pieces of one array (_packed): a
    GPT block's gradients then lie where the split of its projection joins them, and the transposes and
    reshapes back to (B, T, 3 * H * D) are views (no copies). Contiguous otherwise."""
    packed = _packed((q, k, v)) if q.size else None
    if packed is None:
        return tuple(cupy.ndarray(a.shape, dtype=a.dtype) for a in (q, k, v))
    step, nbytes = packed
    parent = cupy.ndarray(nbytes // q.itemsize, dtype=q.dtype)
    return tuple(cupy.ndarray(a.shape, dtype=a.dtype, memptr=parent.data + i * step, strides=a.strides)
                 for i, a in enumerate((q, k, v)))


def _strides(a):
    """The batch / head / row strides of a (B, H, rows, D) array, in elements."""
    return tuple(np.int64(s // a.itemsize) for s in a.strides[:3])


def attention_backward(q, k, v, out, dout, lse, mask=None, *, causal=False, scale=1.0, dropout_p=0.0, seed=0,
                       offset=0, math="fp32"):
    if mask is None:
        planned = _backward_planned(q, k, v, out, dout, lse, causal, scale, dropout_p, seed, offset, math)
        if planned is not None:
            return planned
    (q, q_rows), (k, k_rows), (v, v_rows), (dout, d_rows) = _rows(q), _rows(k), _rows(v), _rows(dout)
    out = cupy.ascontiguousarray(out)
    lse = cupy.ascontiguousarray(lse, dtype=cupy.float32)
    B, H, L, D = q.shape
    HK, S = k.shape[1], k.shape[2]
    dq, dk, dv = _gradients_like(q, k, v)
    if B * H * L == 0 or S == 0:
        for a in (dq, dk, dv):
            a.fill(0)
        return dq, dk, dv
    kind = KINDS[q.dtype]
    rows = B * H * L
    delta = cupy.ndarray((B, H, L), dtype=cupy.float32)
    _kernel("attention_delta", f"{kind}")(((rows + 3) // 4,), (128,),
                                          (out, dout, delta, np.int64(rows), np.int32(D), np.int32(H), np.int32(L),
                                           *d_rows))
    dq_acc = cupy.zeros((B, H, L, D), dtype=cupy.float32)
    mask_args, _keep_alive = _mask_args(mask, (B, H, L, S))
    kernel, smem = _backward_kernel(kind, D, causal, mask, dropout_p, math)
    kernel(
        ((S + BLOCK_N - 1) // BLOCK_N, B * HK), (128,),
        (q, k, v, dout, lse, delta, dq_acc, dk, dv, np.int32(H), np.int32(HK), np.int32(L), np.int32(S),
         np.float32(scale), *mask_args, *_dropout_args(dropout_p, seed, offset), *q_rows, *k_rows, *v_rows,
         *d_rows, *_strides(dk), *_strides(dv)),
        shared_mem=smem)
    n = dq.size
    _kernel("attention_dq_finish", f"{kind}")((grid_stride_blocks(n),), (256,),
                                            (dq_acc, dq, np.int64(n), np.float32(scale), np.int32(D), np.int32(H),
                                             np.int32(L), *_strides(dq)))
    return dq, dk, dv
