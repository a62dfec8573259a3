"""NumPy reference of the GEMM, with the GPU's math modes emulated (see minidl/primitives/gemm.py).

    math="fp32":  float32 (or float64) operands multiplied and summed as they are (NumPy's BLAS).
    math="tf32":  float32 operands first rounded to TF32 (round_to_tf32: 10 mantissa bits, as the
                  tensor cores' cvt.rna.tf32.f32 does), then multiplied and summed in fp32. The
                  product of two TF32 numbers (11-bit significands) is exact in fp32, so this equals
                  the GPU's result up to the order of the fp32 sums.
    float16 / bfloat16 operands: converted to fp32 (exact), multiplied and summed in fp32, alpha/beta
                  applied in fp32, the result rounded once back to the operands' dtype, as the
                  tensor-core kernel does (fp32 accumulation, half result).
"""
from __future__ import annotations

import numpy as np

from ..._dtypes import bfloat16
from .._common import FLOAT_DTYPES, blend

# The 13 low mantissa bits that TF32 drops (23 - 10), and half of their weight (the rounding carry).
_TF32_DROPPED = np.uint32(0x1FFF)
_TF32_HALF = np.uint32(0x1000)
_EXPONENT = np.uint32(0x7F800000)


def round_to_tf32(x):
    """float32 array rounded to TF32 precision (stored as float32): round to nearest, ties away from
    zero, on the magnitude (cvt.rna.tf32.f32). Inf and NaN pass unchanged; a value within half a TF32
    step of the largest float rounds up to inf, as on the GPU.

    Bitwise: add half of the dropped part (bit 12) to the magnitude and clear the 13 low bits; a carry
    out of the mantissa correctly bumps the exponent."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    finite = (bits & _EXPONENT) != _EXPONENT
    rounded = (bits + _TF32_HALF) & ~_TF32_DROPPED
    return np.where(finite, rounded, bits).view(np.float32)


def round_to_bf16(x):
    """float32 array rounded to bfloat16 precision (8 significant bits; stored as float32): round to
    nearest, ties to even (cvt.rn.bf16.f32), by a round trip through the bfloat16 dtype. Inf and NaN
    pass unchanged."""
    return np.asarray(x, dtype=np.float32).astype(bfloat16).astype(np.float32)


def _is_half(dtype) -> bool:
    if dtype in FLOAT_DTYPES:   # the usual case (float32/float64), without building the dtype's name
        return False
    return np.dtype(dtype).name in ("float16", "bfloat16")


def gemm(a, b, *, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, out=None, use_cublas=False, math="fp32",
         bias=None, out_dtype=None):
    """out = alpha * (op(a) @ op(b) + bias) + beta * out on NumPy arrays (checked by minidl.primitives.gemm).
    use_cublas means nothing here (NumPy's matmul is the CPU's BLAS already). out_dtype=float32 with 16-bit
    operands: the fp32 sums as they are, not rounded to the operands' dtype."""
    op_a = np.swapaxes(a, -1, -2) if trans_a else a
    op_b = np.swapaxes(b, -1, -2) if trans_b else b
    if _is_half(a.dtype):
        product = np.matmul(op_a.astype(np.float32), op_b.astype(np.float32))
        if bias is not None:
            product += bias.astype(np.float32)
        result = np.float32(alpha) * product
        if out is not None and beta != 0:
            result = result + np.float32(beta) * out.astype(np.float32)
        result = result.astype(a.dtype if out_dtype is None else out_dtype)
        if out is None:
            return result
        out[...] = result
        return out
    if math == "tf32" and a.dtype == np.float32:
        op_a, op_b = round_to_tf32(op_a), round_to_tf32(op_b)
    product = np.matmul(op_a, op_b)
    if bias is not None:
        product += bias
    return blend("gemm", product, out, alpha, beta)
