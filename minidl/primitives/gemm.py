"""General matrix multiply, BLAS-style: out = alpha * op(a) @ op(b) + beta * out.

op(a) is a or its transpose (trans_a), likewise b. a and b are 2-D matrices, or 3-D stacks of
matrices (a batched GEMM; a 2-D operand is shared by every matrix of the other's stack).
On the CPU this is NumPy's matmul (which calls the BLAS). On the GPU it is minidl's own tiled SGEMM
(kernels/gemm.cu, float32), or cuBLAS through cupy.matmul when use_cublas=True, to compare with.
"""
from __future__ import annotations

import numpy as np

from ._common import blend, check_float, check_same_device, is_cuda_array, shape_str

__all__ = ["gemm"]


def _op_shape(shape, trans):
    return (shape[-1], shape[-2]) if trans else (shape[-2], shape[-1])


def gemm(a, b, *, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, out=None, use_cublas=False):
    """out = alpha * op(a) @ op(b) + beta * out.

    a: (M, K) or (batch, M, K); with trans_a, (K, M) or (batch, K, M). b: (K, N) or (batch, K, N);
    with trans_b, (N, K) or (batch, N, K). Returns (M, N), or (batch, M, N) if either is 3-D.
    beta != 0 needs out. The GPU kernel is float32 (use_cublas=True also takes float64).
    """
    op = "gemm"
    check_same_device(op, a=a, b=b, out=out)
    dtype = check_float(op, a=a, b=b, out=out)
    for name, arr in (("a", a), ("b", b)):
        if arr.ndim not in (2, 3):
            raise ValueError(f"{op}: {name} must be 2-D (matrix) or 3-D (batch of matrices), "
                             f"got shape {shape_str(arr.shape)}")
    M, K = _op_shape(a.shape, trans_a)
    Kb, N = _op_shape(b.shape, trans_b)
    if K != Kb:
        raise ValueError(f"{op}: inner dimensions differ: op(a) is ({M}, {K}) from a {shape_str(a.shape)} "
                         f"(trans_a={trans_a}), op(b) is ({Kb}, {N}) from b {shape_str(b.shape)} "
                         f"(trans_b={trans_b})")
    if a.ndim == 3 and b.ndim == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"{op}: batch sizes differ: a {shape_str(a.shape)}, b {shape_str(b.shape)}")
    batched = a.ndim == 3 or b.ndim == 3
    batch = a.shape[0] if a.ndim == 3 else (b.shape[0] if b.ndim == 3 else 1)
    out_shape = (batch, M, N) if batched else (M, N)
    if out is not None and tuple(out.shape) != out_shape:
        raise ValueError(f"{op}: out has shape {shape_str(out.shape)}, expected {shape_str(out_shape)} "
                         f"for a {shape_str(a.shape)} and b {shape_str(b.shape)}")
    if beta != 0 and out is None:
        raise ValueError(f"{op}: beta={beta} blends into an existing output, so pass out=")

    if is_cuda_array(a):
        if dtype != np.float32 and not use_cublas:
            raise TypeError(f"{op}: the GPU kernel is float32, got {dtype} (use_cublas=True takes float64)")
        from .cuda import gemm as impl

        return impl.gemm(a, b, trans_a, trans_b, alpha, beta, out, use_cublas)

    op_a = np.swapaxes(a, -1, -2) if trans_a else a
    op_b = np.swapaxes(b, -1, -2) if trans_b else b
    return blend(op, np.matmul(op_a, op_b), out, alpha, beta)
