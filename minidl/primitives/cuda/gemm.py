"""CuPy launchers of kernels/gemm.cu (our tiled SGEMM), kernels/gemm_tc.cu (our tensor-core GEMM),
and cuBLAS (through cupy.matmul) to compare.

General entries for the other launchers (convolution, RNN), all strided-batched with any (row, column)
strides for C:
    sgemm(...)          float32 on the CUDA cores (math="fp32"), split-K for long reductions
    gemm_tc(...)        tensor cores: float32 data in TF32 math, float16, bfloat16 (fp32 accumulation)
    strided_gemm(..., math=)   picks one of the two from the dtype and the math mode; this is the
                        function an im2col + GEMM convolution calls.
`gemm` is the backend of the public minidl.primitives.gemm (arguments already validated there).
"""
from __future__ import annotations

import math

import cupy
import numpy as np

from .._common import blend
from ._compile import get_kernel, get_template_kernel
from ._launch import STORAGE_KINDS as TC_KINDS, check_no_cublas_capture, finish, grid_stride_blocks, kernel_output, \
    sm_count
from .. import _common
from . import gemm_wgmma as _wgmma
from .cast import cast
from .gemm_wgmma import gemm_wgmma

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


def split_k_plan(M: int, N: int, K: int, batch: int, min_k: int = MIN_K_PER_SPLIT) -> tuple[int, int]:
    """(splits, k_per_split): split the reduction when there are too few output tiles to fill the GPU.

    A 128 x 128 tile runs on one SM; with fewer tiles than about two waves, most SMs would idle while
    a few reduce a long K. Each split gets at least `min_k` of K (default MIN_K_PER_SPLIT).
    """
    tiles = math.ceil(M / TILE) * math.ceil(N / TILE) * batch
    target = 2 * sm_count()
    splits = 1
    if tiles < target and K >= 2 * min_k:
        splits = min(math.ceil(target / tiles), K // min_k)
    k_per_split = math.ceil(math.ceil(K / splits) / TILE_K) * TILE_K
    splits = math.ceil(K / k_per_split)
    return splits, k_per_split


def split_k_workspace_bytes(M: int, N: int, K: int, batch: int) -> int:
    splits, _ = split_k_plan(M, N, K, batch)
    return 0 if splits == 1 else splits * batch * M * N * 4


# struct SgemmParams of kernels/gemm.cu, field for field (the same order: no padding either side)
SGEMM_PARAMS = np.dtype([(name, np.int64) for name in ("lda", "stride_a", "ldb", "stride_b", "ldc_row", "ldc_col",
                                                        "stride_c", "bias_row", "bias_col")]
                        + [(name, np.int32) for name in ("M", "N", "K", "batch", "split_k", "k_per_split", "vec_a",
                                                         "vec_b")]
                        + [("alpha", np.float32), ("beta", np.float32)])


class _Records:
    """A kernel's scalar arguments as one by-value struct: the record of these values (in the dtype's field order),
    made once per problem and kept; passed to the kernel as raw bytes (one argument, where a dozen or more NumPy
    scalars each cost CuPy's launch about half a microsecond)."""

    def __init__(self, dtype: np.dtype):
        self.dtype, self.raw, self.made = dtype, np.dtype((np.void, dtype.itemsize)), {}

    def __call__(self, values: tuple) -> np.ndarray:
        record = self.made.get(values)
        if record is None:
            if len(self.made) >= 4096:
                self.made.clear()
            record = self.made[values] = np.array([values], dtype=self.dtype).view(self.raw)
        return record


_params = _Records(SGEMM_PARAMS)   # SgemmParams records


def _pointer(a) -> int:
    return int(a) if isinstance(a, (int, np.integer)) else a.data.ptr


# Launch plans (issue 23: the host cost of an eager step). A training step multiplies the same problems every step
# on operands at addresses that change: everything a launch needs but the addresses (kernel, grid, the parameter
# record, the split-K reduction's arguments) is worked out once per problem and kept; a later call of the same problem
# is its plan launched on the new addresses. `last_launch` is the (launch function, plan) the latest sgemm / gemm_tc
# call ran (gemm() keeps it for its planned 2-D problems); `launches` counts the GEMM launches, so that gemm() plans
# only a call that was one GEMM.
_PLANS_SIZE = 4096
_sgemm_plans: dict = {}
_tc_plans: dict = {}
last_launch = None
launches = 0


def sgemm(M, N, K, A, lda, B, ldb, C, *, trans_a=False, trans_b=False, alpha=1.0, beta=0.0,
          ldc_row=None, ldc_col=1, batch=1, stride_a=0, stride_b=0, stride_c=0, workspace=None,
          min_k_per_split=MIN_K_PER_SPLIT, bias=None):
    """C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] for b < batch, with our kernel.

    A, B, C: float32 CuPy arrays (or raw device pointers) whose data pointers are the matrices' first elements. op(A) is
    (M, K): A stored (M, K) with leading dimension lda, or (K, M) when trans_a. op(B) is (K, N).
    C element (b, m, n) is C[b*stride_c + m*ldc_row + n*ldc_col] (default row-major, ldc_row = N).
    workspace: a float32 array for split-K partial sums (allocated here when None and needed).
    min_k_per_split: the least K a split-K slice gets (split_k_plan); lower it for skinny products whose
    few tiles would leave most SMs idle (the RNN's per-step GEMMs under graph capture use 128).
    bias: None or a float32 CuPy array of N: C = alpha * (op(A) op(B) + bias) + beta * C, bias[n] added to
    column n in the epilogue (nn.Linear's, with no launch of its own).
    """
    if M == 0 or N == 0 or batch == 0:
        return C
    global last_launch, launches
    a_ptr, b_ptr, c_ptr = _pointer(A), _pointer(B), _pointer(C)
    bias_ptr = 0 if bias is None else _pointer(bias)
    if ldc_row is None:
        ldc_row = N
    key = (M, N, K, lda, ldb, trans_a, trans_b, alpha, beta, ldc_row, ldc_col, batch, stride_a, stride_b, stride_c,
           min_k_per_split, bias is None, a_ptr % 16, b_ptr % 16, cupy.cuda.runtime.getDevice())
    plan = _sgemm_plans.get(key)
    if plan is None:
        if len(_sgemm_plans) >= _PLANS_SIZE:
            _sgemm_plans.clear()
        plan = _sgemm_plans[key] = _sgemm_plan(M, N, K, lda, ldb, trans_a, trans_b, alpha, beta, ldc_row, ldc_col,
                                               batch, stride_a, stride_b, stride_c, min_k_per_split, a_ptr, b_ptr)
    launch_sgemm(plan, a_ptr, b_ptr, c_ptr, bias_ptr, workspace)
    last_launch, launches = (launch_sgemm, plan), launches + 1
    return C


def _sgemm_plan(M, N, K, lda, ldb, trans_a, trans_b, alpha, beta, ldc_row, ldc_col, batch, stride_a, stride_b,
                stride_c, min_k_per_split, a_ptr, b_ptr):
    """What an sgemm launch of this problem needs but the addresses: (swapped, kernel, grid, parameter record,
    split-K workspace elements, the reduction's (kernel, grid, scalars) or None)."""
    bias_row, bias_col, swapped = 0, 1, False
    if M <= 64 < N:
        # Few rows, many columns: compute the transpose C^T = op(B)^T op(A)^T instead, so that the
        # short side lands on the tile's narrow N dimension (128 x 64) instead of wasting 128 rows.
        M, N, lda, ldb, a_ptr, b_ptr = N, M, ldb, lda, b_ptr, a_ptr
        trans_a, trans_b = not trans_b, not trans_a
        stride_a, stride_b = stride_b, stride_a
        ldc_row, ldc_col = ldc_col, ldc_row
        bias_row, bias_col = bias_col, bias_row       # the user's columns are now the kernel's rows
        swapped = True
    bn = tile_n(N)
    kernel = get_kernel("gemm", "gemm_" + ("t" if trans_a else "n") + ("t" if trans_b else "n") + f"_bn{bn}")
    splits, k_per_split = split_k_plan(M, N, K, batch, min_k_per_split) if K > 0 else (1, TILE_K)
    grid = (math.ceil(M / TILE), math.ceil(N / bn), batch * splits)
    vec_a = int(a_ptr % 16 == 0 and lda % 4 == 0 and (batch == 1 or stride_a % 4 == 0))
    vec_b = int(b_ptr % 16 == 0 and ldb % 4 == 0 and (batch == 1 or stride_b % 4 == 0))
    params = _params((lda, stride_a, ldb, stride_b, ldc_row, ldc_col, stride_c, bias_row, bias_col, M, N, K, batch,
                      splits, k_per_split, vec_a, vec_b, float(alpha), float(beta)))
    reduce = None
    if splits > 1:
        i64 = np.int64
        reduce = (get_kernel("gemm", "gemm_splitk_reduce"), (grid_stride_blocks(batch * M * N),),
                  (np.int32(splits), np.int32(batch), np.int32(M), np.int32(N), np.float32(alpha), np.float32(beta)),
                  (i64(ldc_row), i64(ldc_col), i64(stride_c)), (i64(bias_row), i64(bias_col)))
    return swapped, kernel, grid, params, splits * batch * M * N if splits > 1 else 0, reduce


def launch_sgemm(plan, a_ptr: int, b_ptr: int, c_ptr: int, bias_ptr: int = 0, workspace=None) -> None:
    """Launch an sgemm plan on operands at these addresses (split-K: partial sums in `workspace` when it is big
    enough, else in a new array)."""
    swapped, kernel, grid, params, need, reduce = plan
    if swapped:
        a_ptr, b_ptr = b_ptr, a_ptr
    partial = None
    if need:
        partial = workspace if workspace is not None and workspace.size >= need else \
            cupy.ndarray((need,), dtype=np.float32)
    c_arg, bias_arg = np.uint64(c_ptr), np.uint64(bias_ptr)
    kernel(grid, (THREADS,), (params, np.uint64(a_ptr), np.uint64(b_ptr), c_arg, partial, bias_arg))
    if reduce is not None:
        reduce_kernel, reduce_grid, head, c_layout, bias_layout = reduce
        reduce_kernel(reduce_grid, (THREADS,), (partial, *head, c_arg, *c_layout, bias_arg, *bias_layout))


# ----------------------------------------------------------------------------------------------
# Tensor-core GEMM (kernels/gemm_tc.cu)
# ----------------------------------------------------------------------------------------------

TC_THREADS = 128       # 4 warps per block
# Bytes of k per block step of the 128 x 128 tiles (BK_BYTES of kernels/gemm_tc.cu): 128 (3 stages) measured
# 10-15% faster than 64 (4 stages) at 4096^3 on the H200 (benchmarks/results/gpu_gemm_tc.md). The 64 x 64
# tiles (small problems, short K) keep 64-byte steps.
TC_BK_BYTES = 128
TC_MN_PAD = 8          # MN_PAD of kernels/gemm_tc.cu
TC_MAX_GRID_Z = 65535  # the batch runs on grid z
# KIND of kernels/gemm_tc.cu for each data type (float32 data means TF32 math).
_tc_kernels: dict = {}
# struct GemmTcParams of kernels/gemm_tc.cu, field for field (the same order: no padding either side)
TC_PARAMS = np.dtype([(name, np.int64) for name in ("lda", "stride_a", "ldb", "stride_b", "ldc_row", "ldc_col",
                                                     "stride_c", "bias_row", "bias_col")]
                     + [(name, np.int32) for name in ("M", "N", "K", "vec_a", "vec_b", "vec_c")]
                     + [("alpha", np.float32), ("beta", np.float32), ("bias_f32", np.int32), ("pad", np.int32)])
_tc_record = _Records(TC_PARAMS)   # GemmTcParams records


def tc_stages(bk_bytes: int) -> int:
    """Pipeline depth of gemm_tc (Config::STAGES): 4 buffers of 64-byte k steps, 3 of 128-byte ones."""
    return 4 if bk_bytes == 64 else 3


def tc_smem_bytes(itemsize: int, tile: int, trans_a: bool, trans_b: bool, bk_bytes: int = 64) -> int:
    """Dynamic shared memory of one gemm_tc block: STAGES x (A tile + B tile), padded as in the kernel."""
    vec = 16 // itemsize           # elements per 16-byte chunk
    bk = bk_bytes // itemsize      # k per block step
    k_rows = tile * (bk + vec)     # a k-contiguous tile: tile rows of bk + 16 bytes
    mn_rows = bk * (tile + TC_MN_PAD)
    a_elems = mn_rows if trans_a else k_rows
    b_elems = k_rows if trans_b else mn_rows
    return tc_stages(bk_bytes) * (a_elems + b_elems) * itemsize


def tc_tile(M: int, N: int, batch: int) -> int:
    """128 x 128 tiles when there are enough of them to fill every SM once, else 64 x 64."""
    tiles = math.ceil(M / 128) * math.ceil(N / 128) * batch
    return 128 if tiles >= sm_count() else 64


def _tc_kernel(kind: int, tile: int, bk_bytes: int, trans_a: bool, trans_b: bool, itemsize: int):
    """The gemm_tc<kind, tile, bk_bytes, trans_a, trans_b> instantiation (compiled on first use, alone)."""
    key = (cupy.cuda.Device().id, kind, tile, bk_bytes, trans_a, trans_b)
    kernel = _tc_kernels.get(key)
    if kernel is None:
        name = f"gemm_tc<{kind}, {tile}, {bk_bytes}, {str(trans_a).lower()}, {str(trans_b).lower()}>"
        kernel = get_template_kernel("gemm_tc", name)
        kernel.max_dynamic_shared_size_bytes = tc_smem_bytes(itemsize, tile, trans_a, trans_b, bk_bytes)
        _tc_kernels[key] = kernel
    return kernel


def gemm_tc(M, N, K, A, lda, B, ldb, C, *, dtype=None, trans_a=False, trans_b=False, alpha=1.0, beta=0.0,
            ldc_row=None, ldc_col=1, batch=1, stride_a=0, stride_b=0, stride_c=0, tile=None, bk_bytes=None,
            bias=None, out_dtype=None):
    """C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] for b < batch, on the tensor cores.

    A, B, C: CuPy arrays (or raw device pointers, then pass `dtype`) of one dtype: float32 (TF32
    math), float16 or bfloat16; their pointers are the matrices' first elements. op(A) is (M, K): A
    stored (M, K) with leading dimension lda, or (K, M) when trans_a; op(B) is (K, N): B stored
    (K, N), or (N, K) when trans_b. C element (b, m, n) is C[b*stride_c + m*ldc_row + n*ldc_col]
    (default row-major, ldc_row = N), of the same dtype (fp32 accumulation, rounded once at the end).
    Strides and leading dimensions are in elements. tile: 128 or 64 (default: tc_tile); bk_bytes: 64
    or 128, the k step of the shared-memory pipeline (default: TC_BK_BYTES for 128-tiles, 64 for 64-tiles).
    bias: None or an array of N of C's dtype, added to every row before alpha (in the epilogue); or of float32 with
    16-bit C (an autocast Linear's float32 bias: added to the fp32 sums before the one rounding, no cast launched).
    out_dtype: float32 with 16-bit A and B (C then float32): only the wgmma kernel stores its accumulators as
    they are; returns None, launching nothing, where it declines (the caller rounds through 16 bits instead).
    """
    if M == 0 or N == 0 or batch == 0:
        return C
    if K == 0:
        raise ValueError("gemm_tc: K = 0 (an empty reduction) is the caller's case: the product is zero")
    global last_launch, launches
    dtype = C.dtype if dtype is None else dtype
    if ldc_row is None:
        ldc_row = N
    a_ptr, b_ptr, c_ptr = _pointer(A), _pointer(B), _pointer(C)
    bias_ptr = 0 if bias is None else _pointer(bias)
    bias_f32 = int(bias is not None and bias.dtype == np.float32 and np.dtype(dtype).itemsize == 2)
    key = (M, N, K, lda, ldb, dtype, trans_a, trans_b, alpha, beta, ldc_row, ldc_col, batch, stride_a, stride_b,
           stride_c, tile, bk_bytes, bias_f32, out_dtype, a_ptr % 16, b_ptr % 16, c_ptr % 16,
           *_settings(), cupy.cuda.runtime.getDevice())
    planned = _tc_plans.get(key)
    if planned is not None:   # this problem ran before: (launch function, plan) of the wgmma or the mma.sync kernel
        planned[0](planned[1], a_ptr, b_ptr, c_ptr, bias_ptr)
        last_launch, launches = planned, launches + 1
        return C
    dtype = np.dtype(dtype)
    if dtype not in TC_KINDS:
        raise TypeError(f"gemm_tc: the tensor-core GEMM takes float32 (TF32), float16 or bfloat16, got {dtype}")
    # On an H100/H200, Hopper's wgmma kernel (gemm_wgmma.py says when it declines); an explicit tile or
    # k step asks for this mma.sync kernel itself. 16-bit data into float32 C (out_dtype): wgmma's OUT argument
    # alone; the mma.sync kernel has none, so there the caller rounds through 16 bits instead.
    if tile is None and bk_bytes is None:
        if gemm_wgmma(M, N, K, a_ptr, lda, b_ptr, ldb, c_ptr, dtype=dtype, trans_a=bool(trans_a),
                      trans_b=bool(trans_b), alpha=alpha, beta=beta, ldc_row=ldc_row, ldc_col=ldc_col, batch=batch,
                      stride_a=stride_a, stride_b=stride_b, stride_c=stride_c, bias_ptr=bias_ptr, bias_f32=bias_f32,
                      out_dtype=None if out_dtype is None else np.dtype(out_dtype)):
            plan = _wgmma.last_plan   # (None where it copied an operand first: nothing to plan)
            last_launch, launches = (None if plan is None else (_wgmma.launch_plan, plan)), launches + 1
            if last_launch is not None:   # the next call of this problem launches wgmma's plan from here
                _keep_tc_plan(key, last_launch)
            return C
    if out_dtype is not None:
        return None
    tile = tile or tc_tile(M, N, batch)
    bk_bytes = bk_bytes or (TC_BK_BYTES if tile == 128 else 64)
    kernel = _tc_kernel(TC_KINDS[dtype], tile, bk_bytes, bool(trans_a), bool(trans_b), dtype.itemsize)
    vec = 16 // dtype.itemsize
    # 16-byte cp.async copies need every row (and every matrix of the batch) to start 16-byte aligned.
    vec_a = int(a_ptr % 16 == 0 and lda % vec == 0 and (batch == 1 or stride_a % vec == 0))
    vec_b = int(b_ptr % 16 == 0 and ldb % vec == 0 and (batch == 1 or stride_b % vec == 0))
    # Paired stores of two adjacent columns of C need row-major C with rows aligned to two elements.
    vec_c = int(ldc_col == 1 and ldc_row % 2 == 0 and c_ptr % (2 * dtype.itemsize) == 0
                and (batch == 1 or stride_c % 2 == 0))
    tiles = math.ceil(M / tile) * math.ceil(N / tile)
    smem = tc_smem_bytes(dtype.itemsize, tile, trans_a, trans_b, bk_bytes)
    params = _tc_record((lda, stride_a, ldb, stride_b, ldc_row, ldc_col, stride_c, 0, 1, M, N, K, vec_a, vec_b,
                         vec_c, float(alpha), float(beta), bias_f32, 0))
    # the batch runs on grid z, in chunks of at most TC_MAX_GRID_Z: (first matrix, count, its byte offsets)
    size = dtype.itemsize
    chunks = tuple((min(TC_MAX_GRID_Z, batch - first), first * stride_a * size, first * stride_b * size,
                    first * stride_c * size) for first in range(0, batch, TC_MAX_GRID_Z))
    last_launch, launches = (launch_tc, (kernel, tiles, smem, params, chunks)), launches + 1
    _keep_tc_plan(key, last_launch)
    launch_tc(last_launch[1], a_ptr, b_ptr, c_ptr, bias_ptr)
    return C


def _keep_tc_plan(key, planned) -> None:
    """Keep gemm_tc's (launch function, plan) of a problem: the wgmma kernel's or the mma.sync kernel's."""
    if len(_tc_plans) >= _PLANS_SIZE:
        _tc_plans.clear()
    _tc_plans[key] = planned


def launch_tc(plan, a_ptr: int, b_ptr: int, c_ptr: int, bias_ptr: int = 0) -> None:
    """Launch a gemm_tc (mma.sync) plan on operands at these addresses."""
    kernel, tiles, smem, params, chunks = plan
    bias_arg = np.uint64(bias_ptr)
    for count, a_off, b_off, c_off in chunks:
        kernel((tiles, 1, count), (TC_THREADS,),
               (params, np.uint64(a_ptr + a_off), np.uint64(b_ptr + b_off), np.uint64(c_ptr + c_off), bias_arg),
               shared_mem=smem)


def strided_gemm(M, N, K, A, lda, B, ldb, C, *, math="fp32", trans_a=False, trans_b=False, alpha=1.0,
                 beta=0.0, ldc_row=None, ldc_col=1, batch=1, stride_a=0, stride_b=0, stride_c=0, bias=None):
    """C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] with the kernel the dtype and math mode ask for.

    Arguments as in gemm_tc (A, B, C: CuPy arrays). float32 with math="fp32": our SGEMM on the CUDA
    cores (sgemm, split-K when few output tiles); float32 with math="tf32", float16, bfloat16: the
    tensor cores (gemm_tc). K = 0 gives C = beta * C.
    """
    if M == 0 or N == 0 or batch == 0:
        return C
    if K == 0:
        raise ValueError("strided_gemm: K = 0 (an empty reduction) is the caller's case: the product is zero")
    if C.dtype == np.float32 and math == "fp32":
        return sgemm(M, N, K, A, lda, B, ldb, C, trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta,
                     ldc_row=ldc_row, ldc_col=ldc_col, batch=batch, stride_a=stride_a, stride_b=stride_b,
                     stride_c=stride_c, bias=bias)
    return gemm_tc(M, N, K, A, lda, B, ldb, C, trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta,
                   ldc_row=ldc_row, ldc_col=ldc_col, batch=batch, stride_a=stride_a, stride_b=stride_b,
                   stride_c=stride_c, bias=bias)


def _gemm_output(out, shape, dtype, beta, *inputs):
    """(target, original) as _launch.kernel_output, for any dtype: the C-contiguous array the kernel
    writes, and the user's `out` to copy it into afterwards (None when the kernel writes `out` itself)."""
    if out is None:
        return cupy.ndarray(shape, dtype=dtype), None
    if out.dtype != dtype:
        raise TypeError(f"gemm: out has dtype {out.dtype}, expected {dtype}")
    overlaps = any(cupy.may_share_memory(out, a) for a in inputs)
    if out.flags.c_contiguous and not overlaps:
        return out, None
    scratch = out.copy(order="C") if beta != 0 else cupy.ndarray(shape, dtype=dtype)
    return scratch, out


# Planned 2-D GEMMs (issue 23: the host cost of an eager step). A training step multiplies the same shapes every
# step; once a problem has run as one launch plan (sgemm's, gemm_tc's or gemm_wgmma's, with no operand copies), its
# next call goes from here straight to that plan: an output array and the plan's launch, skipping the layers between
# (views, contiguity, the output's shape, the dispatch between the kernels and their own plan keys).
# Key: what decides the plan (shapes and dtype of C-contiguous operands, the flags, alpha, beta, the operands'
# 16-byte alignment, the kernel settings); an output made here is always 16-byte aligned, as the first call's.
_planned: dict = {}
_PLANNED_SIZE = 1024


def _planned_key(a, b, trans_a, trans_b, alpha, beta, bias, math, out_dtype):
    return (a.shape, b.shape, a.dtype, trans_a, trans_b, alpha, beta, None if bias is None else bias.dtype, math, out_dtype,
            a.data.ptr & 15, b.data.ptr & 15, *_settings(), cupy.cuda.runtime.getDevice())


def gemm(a, b, *, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, out=None, use_cublas=False, math="fp32",
         bias=None, out_dtype=None):
    """Backend of minidl.primitives.gemm on the GPU. a, b: 2-D or 3-D (batched) arrays of one dtype; bias:
    None or (N,) of their dtype (or float32 for 16-bit a and b), added in the GEMM's epilogue (cuBLAS: added after). out_dtype: float32 for
    16-bit a and b (the wgmma kernel stores its fp32 accumulators; elsewhere the result is rounded to 16 bits
    and cast)."""
    global last_launch
    if (out is None and not use_cublas and a.ndim == 2 and b.ndim == 2 and a.flags.c_contiguous
            and b.flags.c_contiguous and (bias is None or bias.flags.c_contiguous)):
        key = _planned_key(a, b, trans_a, trans_b, alpha, beta, bias, math, out_dtype)
        found = _planned.get(key)
        if found is not None:
            shape, dtype, launch, plan = found
            c = cupy.ndarray(shape, dtype=dtype)
            launch(plan, a.data.ptr, b.data.ptr, c.data.ptr, 0 if bias is None else bias.data.ptr)
            return c
        last_launch, before = None, launches
        c = _gemm(a, b, trans_a, trans_b, alpha, beta, None, use_cublas, math, bias, out_dtype)
        if last_launch is not None and launches == before + 1 and c.flags.c_contiguous and c.data.ptr & 15 == 0:
            # it ran as one plan, with no copies: the next call of this problem launches that plan
            if len(_planned) >= _PLANNED_SIZE:
                _planned.clear()
            _planned[key] = (c.shape, c.dtype, *last_launch)
        return c
    return _gemm(a, b, trans_a, trans_b, alpha, beta, out, use_cublas, math, bias, out_dtype)


def _settings():
    """The kernel settings a plan depends on (the plan keys' last entries but the device): one list for gemm_tc's
    plans, gemm()'s and GemmPlan's check, so that a new setting goes into all of them."""
    return (_common.tensor_core_gemm, _common.tf32_tma_type, _wgmma.EPILOGUE, _wgmma.TILE_SHAPES, _wgmma.TILE_WIDTHS,
            _wgmma.SPLIT_K)


def planned_launch(a, b, trans_a, trans_b, bias, math, out_dtype, shapes=None):
    """For a problem gemm() has planned (its call was one launch from a plan): a callable run(a, b, bias) that makes
    this problem's product on arrays like these (array type, shapes, dtypes, C-contiguous, the same 16-byte alignment
    and device), with the kernel settings of now, by one allocation and the plan's launch; it returns None for
    anything else. None when gemm() has no plan for the problem. shapes: (a's, b's, the result's) as the caller
    passes and wants them, of the same sizes as a's, b's and the product's matrices (the launch reads addresses:
    an (..., K) array is the matrix of its rows as it is). (minidl.primitives.GemmPlan's fast path.)"""
    if not (a.ndim == 2 and b.ndim == 2 and a.flags.c_contiguous and b.flags.c_contiguous
            and (bias is None or bias.flags.c_contiguous)):
        return None
    if out_dtype is not None and out_dtype == a.dtype:
        out_dtype = None
    found = _planned.get(_planned_key(a, b, trans_a, trans_b, 1.0, 0.0, bias, math, out_dtype))
    if found is None:
        return None
    shape, dtype, launch, plan = found
    ndarray, settings = cupy.ndarray, _settings()
    a_shape, b_shape, shape = (a.shape, b.shape, shape) if shapes is None else shapes
    a_dtype, a_align, b_align, device = a.dtype, a.data.ptr & 15, b.data.ptr & 15, a.data.device_id
    bias_key = None if bias is None else (bias.shape, bias.dtype)

    def run(a, b, bias):   # (_c_contiguous: CuPy's own flag; a.flags makes a Flags object at every read)
        if (type(a) is not ndarray or type(b) is not ndarray or a.shape != a_shape or b.shape != b_shape
                or a.dtype != a_dtype or b.dtype != a_dtype or a.data.ptr & 15 != a_align
                or b.data.ptr & 15 != b_align or a.data.device_id != device or b.data.device_id != device
                or not a._c_contiguous or not b._c_contiguous or _settings() != settings
                or cupy.cuda.runtime.getDevice() != device):
            return None
        if bias is None:
            if bias_key is not None:
                return None
            bias_ptr = 0
        elif (type(bias) is not ndarray or (bias.shape, bias.dtype) != bias_key or bias.data.device_id != device
              or not bias._c_contiguous):
            return None
        else:
            bias_ptr = bias.data.ptr
        c = ndarray(shape, dtype=dtype)
        launch(plan, a.data.ptr, b.data.ptr, c.data.ptr, bias_ptr)
        return c

    return run


def _gemm(a, b, trans_a, trans_b, alpha, beta, out, use_cublas, math, bias, out_dtype):
    op_a = a.swapaxes(-1, -2) if trans_a else a
    op_b = b.swapaxes(-1, -2) if trans_b else b
    if bias is not None:
        bias = cupy.ascontiguousarray(bias)
    if use_cublas:
        check_no_cublas_capture("gemm with use_cublas=True (Linear under backends.cuda.use_cublas)")
        product = cupy.matmul(op_a, op_b)
        if bias is not None:
            product += bias if bias.dtype == product.dtype else bias.astype(product.dtype)
        product = blend("gemm", product, out, alpha, beta)
        return product if out_dtype is None else product.astype(out_dtype)
    if a.dtype != np.float32 or math == "tf32":
        return _gemm_tc_arrays(a, b, trans_a, trans_b, alpha, beta, out, bias, out_dtype)

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
    if K == 0:  # an empty reduction: the product is zero (plus the bias)
        target[...] = (0 if beta == 0 else target * np.float32(beta)) + \
            (0 if bias is None else np.float32(alpha) * bias)
    else:
        sgemm(M, N, K, a, lda, b, ldb, target, trans_a=trans_a, trans_b=trans_b, alpha=alpha,
              beta=beta, batch=batch, stride_a=stride_a, stride_b=stride_b, stride_c=M * N, bias=bias)
    return finish(target, original)


def _gemm_tc_arrays(a, b, trans_a, trans_b, alpha, beta, out, bias=None, out_dtype=None):
    """The tensor-core path of `gemm` (float32 in TF32 math, float16, bfloat16). out_dtype (float32, 16-bit
    a and b, out None): into float32 on wgmma; where it declines, rounded through a 16-bit result."""
    global last_launch
    M, K = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
    N = b.shape[-2] if trans_b else b.shape[-1]
    batch = max(a.shape[0] if a.ndim == 3 else 1, b.shape[0] if b.ndim == 3 else 1)
    out_shape = (batch, M, N) if (a.ndim == 3 or b.ndim == 3) else (M, N)
    a = cupy.ascontiguousarray(a)
    b = cupy.ascontiguousarray(b)
    target, original = _gemm_output(out, out_shape, a.dtype if out_dtype is None else out_dtype, beta, a, b)
    if K == 0:  # an empty reduction: the product is zero (plus the bias)
        value = cupy.zeros(target.shape, cupy.float32) if beta == 0 else target.astype(cupy.float32) * np.float32(beta)
        if bias is not None:
            value += np.float32(alpha) * bias.astype(cupy.float32)
        target[...] = value.astype(target.dtype)
    else:
        strides = dict(stride_a=a.shape[-1] * a.shape[-2] if a.ndim == 3 else 0,
                       stride_b=b.shape[-1] * b.shape[-2] if b.ndim == 3 else 0, stride_c=M * N)
        if out_dtype is not None and gemm_tc(M, N, K, a, a.shape[-1], b, b.shape[-1], target, dtype=a.dtype,
                                             trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta, batch=batch,
                                             out_dtype=out_dtype, **strides) is None:
            half = cupy.ndarray(out_shape, dtype=a.dtype)   # (wgmma declined: the mma.sync kernel stores 16 bits)
            gemm_tc(M, N, K, a, a.shape[-1], b, b.shape[-1], half, trans_a=trans_a, trans_b=trans_b, alpha=alpha,
                    beta=beta, batch=batch, **strides)
            target = cast(half, out_dtype)
            last_launch = None   # (two launches: gemm() plans none of them)
        elif out_dtype is None:
            gemm_tc(M, N, K, a, a.shape[-1], b, b.shape[-1], target, trans_a=trans_a, trans_b=trans_b,
                    alpha=alpha, beta=beta, batch=batch, bias=bias, **strides)
    return finish(target, original)
