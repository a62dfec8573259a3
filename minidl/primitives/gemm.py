"""General matrix multiply, BLAS-style: out = alpha * op(a) @ op(b) + beta * out.

op(a) is a or its transpose (trans_a), likewise b. a and b are 2-D matrices, or 3-D stacks of
matrices (a batched GEMM; a 2-D operand is shared by every matrix of the other's stack).

Math modes (cuDNN's "math type"; the framework picks them from minidl.backends):
    math="fp32"  float32 products and sums (the default): minidl's tiled SGEMM on the CUDA cores
                 (kernels/gemm.cu) on the GPU, NumPy's matmul on the CPU.
    math="tf32"  float32 arrays, TF32 tensor-core math: both operands rounded to 10 mantissa bits
                 (round to nearest, ties away), products summed in fp32 (kernels/gemm_tc.cu); the
                 relative error grows to ~1e-3 on long sums. The CPU path emulates it exactly
                 (minidl/primitives/cpu/gemm.py), so it can be taught and tested without a GPU.
float16 and bfloat16 arrays always run on the tensor cores (fp32 accumulation, result in the input's
dtype; on the CPU, numpy.float16 or ml_dtypes.bfloat16 computed in fp32), whatever `math` says;
float64 ignores `math` (exact float64 on the CPU; cuBLAS on the GPU, use_cublas=True).
use_cublas=True runs cupy.matmul (cuBLAS) instead of our kernels, to compare with.
"""
from __future__ import annotations

import numpy as np

from .._dtypes import FLOATING_SET
from . import _common
from ._common import backend, check_same_device, is_cuda_array, shape_str

__all__ = ["gemm", "GemmPlan", "GEMM_MATH_MODES", "TENSOR_CORE_GEMMS", "set_tensor_core_gemm", "get_tensor_core_gemm"]

# The tensor-core GEMM kernels of the GPU path: "wgmma" (kernels/gemm_wgmma.cu: Hopper's warpgroup MMA fed
# by TMA, H100/H200 only), "mma_sync" (kernels/gemm_tc.cu: Ampere's warp-level MMA, any GPU since sm_80);
# "auto" runs wgmma where the GPU and the operands allow it, else mma_sync.
TENSOR_CORE_GEMMS = ("auto", "wgmma", "mma_sync")


def set_tensor_core_gemm(kernel: str) -> None:
    """Choose the tensor-core GEMM kernel (TENSOR_CORE_GEMMS); "wgmma" makes a problem that kernel cannot
    take an error instead of a quiet fall-back (for tests and benchmarks). Also: $MINIDL_TENSOR_CORE_GEMM."""
    if kernel not in TENSOR_CORE_GEMMS:
        raise ValueError(f"set_tensor_core_gemm: unknown kernel {kernel!r}; use one of {TENSOR_CORE_GEMMS}")
    _common.tensor_core_gemm = kernel


def get_tensor_core_gemm() -> str:
    return _common.tensor_core_gemm

GEMM_MATH_MODES = ("fp32", "tf32")
_GEMM_DTYPE_SET = frozenset(np.dtype(d) for d in ("float16", "float32", "float64"))   # the CPU's fast path
_GPU_DTYPE_SET = frozenset(d for d in FLOATING_SET if d != np.float64)   # the GPU kernels' (float64: cuBLAS only)


def _check_dtypes(op: str, **arrays) -> np.dtype:
    """All arrays of one dtype among float16, bfloat16, float32, float64; return it."""
    dtypes = [(name, a.dtype) for name, a in arrays.items() if a is not None]
    for name, dt in dtypes:
        if dt not in FLOATING_SET:
            raise TypeError(f"{op}: {name} must be float16, bfloat16, float32 or float64, got {dt}")
    first = dtypes[0][1]
    if any(dt != first for _, dt in dtypes[1:]):
        desc = ", ".join(f"{k}={v}" for k, v in dtypes)
        raise TypeError(f"{op}: all arrays must have the same dtype, got {desc}")
    return first


def _wide_bias(a, bias) -> bool:
    """A float32 bias of a float16/bfloat16 product (added in fp32 before the rounding)."""
    return bias.dtype == np.float32 and a.dtype.itemsize == 2 and a.dtype.kind in "fV"


def _op_shape(shape, trans):
    return (shape[-1], shape[-2]) if trans else (shape[-2], shape[-1])


def gemm(a, b, *, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, out=None, use_cublas=False, math="fp32",
         bias=None, out_dtype=None):
    """out = alpha * (op(a) @ op(b) + bias) + beta * out.

    a: (M, K) or (batch, M, K); with trans_a, (K, M) or (batch, K, M). b: (K, N) or (batch, K, N);
    with trans_b, (N, K) or (batch, N, K). Returns (M, N), or (batch, M, N) if either is 3-D, of the
    inputs' dtype. beta != 0 needs out. math: "fp32" or "tf32" (float32 arrays; see the module
    docstring). On the GPU: float32 (either math), float16, bfloat16; float64 with use_cublas=True.
    bias: None or (N,) of the inputs' dtype, added to every row of the product (nn.Linear's bias; on the
    GPU in the GEMM's epilogue, with no launch of its own). With float16/bfloat16 inputs the bias may also be
    float32 (an autocast Linear's parameter as it is): added to the fp32 sums before the one rounding to 16 bits.
    out_dtype: None (the inputs' dtype), or float32 for float16/bfloat16 inputs: the fp32 accumulators as they
    are, not rounded to 16 bits (an autocast layer's float32 gradients; no out= or bias then).
    """
    op = "gemm"
    if out_dtype is not None:
        out_dtype = np.dtype(out_dtype)
        if out_dtype == a.dtype:
            out_dtype = None
        elif out_dtype != np.float32 or a.dtype.itemsize != 2 or out is not None or bias is not None:
            raise ValueError(f"{op}: out_dtype={out_dtype} is for float32 results of float16/bfloat16 operands "
                             f"(without out= or bias), got {a.dtype} operands"
                             + (" and out=" if out is not None else "") + (" and a bias" if bias is not None else ""))
    if (out is None and beta == 0 and type(a) is type(b) and a.ndim == 2 and b.ndim == 2 and a.dtype == b.dtype
            and math in GEMM_MATH_MODES and a.shape[0 if trans_a else 1] == b.shape[1 if trans_b else 0]
            and (bias is None or (type(bias) is type(a) and (bias.dtype == a.dtype or _wide_bias(a, bias))
                                  and bias.shape == (b.shape[0 if trans_b else 1],)))):
        # The common call, already valid (issue 23: a Linear layer runs three per step): two matrices of one
        # float dtype whose inner dimensions agree (and a bias of their columns), no out to blend into; on the
        # GPU, of a dtype our kernels take, on one device.
        if type(a) is np.ndarray:
            if out_dtype is None and a.dtype in _GEMM_DTYPE_SET:
                return backend("gemm", False).gemm(a, b, trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta,
                                                   use_cublas=use_cublas, math=math, bias=bias)
        elif (is_cuda_array(a) and a.dtype in _GPU_DTYPE_SET and a.device.id == b.device.id
              and (bias is None or bias.device.id == a.device.id)):
            return backend("gemm", a).gemm(a, b, trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta,
                                           use_cublas=use_cublas, math=math, bias=bias, out_dtype=out_dtype)
    if math not in GEMM_MATH_MODES:
        raise ValueError(f"{op}: unknown math {math!r}; use 'fp32' or 'tf32'")
    check_same_device(op, a=a, b=b, out=out)
    dtype = _check_dtypes(op, a=a, b=b, out=out)
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

    if bias is not None:
        check_same_device(op, a=a, bias=bias)
        if tuple(bias.shape) != (N,) or not (bias.dtype == dtype or _wide_bias(a, bias)):
            wide = " (or float32)" if dtype.itemsize == 2 else ""
            raise ValueError(f"{op}: bias must be ({N},) of dtype {dtype}{wide} for an op(b) of {N} columns, got "
                             f"{shape_str(bias.shape)} of {bias.dtype}")
    if is_cuda_array(a) and dtype == np.float64 and not use_cublas:
        raise TypeError(f"{op}: the GPU kernels are float32, float16 and bfloat16, got {dtype} "
                        "(use_cublas=True takes float64)")
    return backend("gemm", a).gemm(a, b, trans_a=trans_a, trans_b=trans_b, alpha=alpha, beta=beta, out=out,
                                   use_cublas=use_cublas, math=math, bias=bias,
                                   **({} if out_dtype is None else {"out_dtype": out_dtype}))


class GemmPlan:
    """One kind of GEMM call (transposes, math, result dtype) for a caller that makes it again and again, as a
    Linear layer makes three a step: cuBLASLt's matmul descriptor with the algorithm its heuristic chose.

    plan(a, b, bias) is gemm() on the matrices of a's and b's rows: an array (..., n) is read as the
    (prod(...), n) matrix of its last dim (a Linear layer's (batch, time, features) input is one GEMM's rows, as
    torch's Linear reads it). The result is (..., N) with a's leading dims (op(a) = a's rows), or (M, N) with
    trans_a (the rows summed over: a weight gradient).

    The first call reshapes and goes through gemm(), which checks the arguments and, on the GPU, plans the
    problem's launch (kernel, grid, parameter record); the plan then keeps the backend's fast path for these arrays
    (cuda/gemm.py's planned_launch). A later call on arrays like the first's (array type, shapes, dtypes,
    C-contiguous, the same 16-byte alignment and device, the kernel settings unchanged) makes the product by one
    allocation and one launch: no reshapes, none of gemm()'s checks, no key. Any other call goes through gemm()
    again. The CPU has no fast path: every call is gemm()'s."""

    __slots__ = ("trans_a", "trans_b", "math", "out_dtype", "use_cublas", "_run", "_tries")

    def __init__(self, *, trans_a=False, trans_b=False, math="fp32", out_dtype=None, use_cublas=False):
        if math not in GEMM_MATH_MODES:
            raise ValueError(f"GemmPlan: unknown math {math!r}; use 'fp32' or 'tf32'")
        self.trans_a, self.trans_b, self.math = bool(trans_a), bool(trans_b), math
        self.out_dtype = None if out_dtype is None else np.dtype(out_dtype)
        self.use_cublas = bool(use_cublas)
        self._run, self._tries = None, 0

    def __call__(self, a, b, bias=None):
        run = self._run
        if run is not None:
            c = run(a, b, bias)
            if c is not None:
                return c
        a2, b2 = _matrix("GemmPlan", a), _matrix("GemmPlan", b)
        c = gemm(a2, b2, trans_a=self.trans_a, trans_b=self.trans_b, math=self.math, bias=bias,
                 out_dtype=self.out_dtype, use_cublas=self.use_cublas)
        if a.ndim != 2 and not self.trans_a:
            c = c.reshape(a.shape[:-1] + (c.shape[-1],))
        # (a few tries: a problem the backend does not plan, or arrays whose layout changes, stay on gemm())
        if self._tries < 4 and not self.use_cublas and is_cuda_array(a):
            self._tries += 1
            self._run = backend("gemm", a).planned_launch(a2, b2, self.trans_a, self.trans_b, bias, self.math,
                                                          self.out_dtype, shapes=(a.shape, b.shape, c.shape))
        return c

    def __repr__(self):
        return (f"GemmPlan(trans_a={self.trans_a}, trans_b={self.trans_b}, math={self.math!r}, "
                f"out_dtype={self.out_dtype}, use_cublas={self.use_cublas})")


def _matrix(op, a):
    """a as the matrix of its last dim's rows: (..., n) -> (prod(...), n) (a 0-wide last dim too, where
    reshape(-1, 0) is ambiguous)."""
    if a.ndim == 2:
        return a
    if a.ndim == 0:
        raise ValueError(f"{op}: a 0-d array is not a matrix")
    rows = 1
    for n in a.shape[:-1]:
        rows *= n
    return a.reshape(rows, a.shape[-1])
