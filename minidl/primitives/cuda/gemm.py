"""CuPy launchers of kernels/gemm.cu: our tiled SGEMM, and cuBLAS (through cupy.matmul) to compare.

`sgemm` is the general entry the other launchers (convolution) use: strided-batched, any
(row, column) strides for C, split-K for long reductions. `gemm` is the backend of the public
minidl.primitives.gemm (arguments already validated there).
"""
from __future__ import annotations

import math

import cupy
import numpy as np

from .._common import blend
from ._compile import get_kernel
from ._launch import check_no_cublas_capture, finish, grid_stride_blocks, kernel_output, sm_count
from .handle import get_handle

TILE = 128          # TILE_M of kernels/common.cuh (and the widest TILE_N)
TILE_K = 8
THREADS = 256
MIN_K_PER_SPLIT = 512


def tile_n(N: int, widths=(128, 64)) -> int:
    """The narrowest tile width (of those compiled) that covers N in one tile, else the widest."""
    for width in sorted(widths):
        if N <= width:
            return width
    return max(widths)


def split_k_plan(M: int, N: int, K: int, batch: int) -> tuple[int, int]:
    """(splits, k_per_split): split the reduction when there are too few output tiles to fill the GPU.

    A 128 x 128 tile runs on one SM; with fewer tiles than about two waves, most SMs would idle while
    a few reduce a long K. Each split gets at least MIN_K_PER_SPLIT of K.
    """
    tiles = math.ceil(M / TILE) * math.ceil(N / TILE) * batch
    target = 2 * sm_count()
    splits = 1
    if tiles < target and K >= 2 * MIN_K_PER_SPLIT:
        splits = min(math.ceil(target / tiles), K // MIN_K_PER_SPLIT)
    k_per_split = math.ceil(math.ceil(K / splits) / TILE_K) * TILE_K
    splits = math.ceil(K / k_per_split)
    return splits, k_per_split


def split_k_workspace_bytes(M: int, N: int, K: int, batch: int) -> int:
    splits, _ = split_k_plan(M, N, K, batch)
    return 0 if splits == 1 else splits * batch * M * N * 4


def _aligned(a, ld: int, stride: int, batch: int) -> bool:
    return a.data.ptr % 16 == 0 and ld % 4 == 0 and (batch == 1 or stride % 4 == 0)


def sgemm(M, N, K, A, lda, B, ldb, C, *, trans_a=False, trans_b=False, alpha=1.0, beta=0.0,
          ldc_row=None, ldc_col=1, batch=1, stride_a=0, stride_b=0, stride_c=0, workspace=None):
    """C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] for b < batch, with our kernel.

    A, B, C: float32 CuPy arrays whose data pointers are the matrices' first elements. op(A) is
    (M, K): A stored (M, K) with leading dimension lda, or (K, M) when trans_a. op(B) is (K, N).
    C element (b, m, n) is C[b*stride_c + m*ldc_row + n*ldc_col] (default row-major, ldc_row = N).
    workspace: a float32 array for split-K partial sums (allocated here when None and needed).
    """
    if M == 0 or N == 0 or batch == 0:
        return C
    if ldc_row is None:
        ldc_row = N
    if M <= 64 < N:
        # Few rows, many columns: compute the transpose C^T = op(B)^T op(A)^T instead, so that the
        # short side lands on the tile's narrow N dimension (128 x 64) instead of wasting 128 rows.
        M, N, A, B, lda, ldb = N, M, B, A, ldb, lda
        trans_a, trans_b = not trans_b, not trans_a
        stride_a, stride_b = stride_b, stride_a
        ldc_row, ldc_col = ldc_col, ldc_row
    bn = tile_n(N)
    name = "gemm_" + ("t" if trans_a else "n") + ("t" if trans_b else "n") + f"_bn{bn}"
    kernel = get_kernel("gemm", name)
    splits, k_per_split = split_k_plan(M, N, K, batch) if K > 0 else (1, TILE_K)
    partial = None
    if splits > 1:
        need = splits * batch * M * N
        partial = workspace if workspace is not None and workspace.size >= need else \
            cupy.empty(need, dtype=cupy.float32)
    grid = (math.ceil(M / TILE), math.ceil(N / bn), batch * splits)
    vec_a = np.int32(_aligned(A, lda, stride_a, batch))
    vec_b = np.int32(_aligned(B, ldb, stride_b, batch))
    i64 = np.int64
    kernel(grid, (THREADS,),
           (np.int32(M), np.int32(N), np.int32(K), np.float32(alpha), A, i64(lda), i64(stride_a),
            B, i64(ldb), i64(stride_b), np.float32(beta), C, i64(ldc_row), i64(ldc_col), i64(stride_c),
            np.int32(batch), np.int32(splits), np.int32(k_per_split), partial, vec_a, vec_b))
    if splits > 1:
        reduce = get_kernel("gemm", "gemm_splitk_reduce")
        reduce((grid_stride_blocks(batch * M * N),), (THREADS,),
               (partial, np.int32(splits), np.int32(batch), np.int32(M), np.int32(N), np.float32(alpha),
                np.float32(beta), C, i64(ldc_row), i64(ldc_col), i64(stride_c)))
    return C


def gemm(a, b, trans_a, trans_b, alpha, beta, out, use_cublas):
    """Backend of minidl.primitives.gemm on the GPU. a, b: 2-D or 3-D (batched) float arrays."""
    op_a = a.swapaxes(-1, -2) if trans_a else a
    op_b = b.swapaxes(-1, -2) if trans_b else b
    if use_cublas:
        check_no_cublas_capture("gemm with use_cublas=True (Linear under backends.cuda.use_cublas)")
        return blend("gemm", cupy.matmul(op_a, op_b), out, alpha, beta)

    M, K = op_a.shape[-2], op_a.shape[-1]
    N = op_b.shape[-1]
    batch = max(a.shape[0] if a.ndim == 3 else 1, b.shape[0] if b.ndim == 3 else 1)
    out_shape = (batch, M, N) if (a.ndim == 3 or b.ndim == 3) else (M, N)

    a = cupy.ascontiguousarray(a)
    b = cupy.ascontiguousarray(b)
    # Stored shapes: a is (.., M, K) or (.., K, M) when transposed; ld is its last dim.
    lda, ldb = a.shape[-1], b.shape[-1]
    stride_a = a.shape[-1] * a.shape[-2] if a.ndim == 3 else 0
    stride_b = b.shape[-1] * b.shape[-2] if b.ndim == 3 else 0

    target, original = kernel_output("gemm", out, out_shape, beta, a, b)
    if K == 0:  # an empty reduction: the product is zero
        target[...] = 0 if beta == 0 else target * np.float32(beta)
    else:
        with get_handle().launch_context():
            sgemm(M, N, K, a, lda, b, ldb, target, trans_a=trans_a, trans_b=trans_b, alpha=alpha,
                  beta=beta, batch=batch, stride_a=stride_a, stride_b=stride_b, stride_c=M * N)
    return finish(target, original)
