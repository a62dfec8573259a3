"""minidl.linalg: torch.linalg's most used functions, on NumPy's or CuPy's LAPACK-backed routines, with their
gradients (batched over leading dimensions):

    inv(A)            d inv = -inv dA inv              grad_A = -inv^T G inv^T
    det(A)            d det = det tr(inv dA)           grad_A = g det inv^T
    slogdet(A)        (sign, log|det|)                 grad_A = g inv^T
    solve(A, B)       X = inv(A) B                     grad_B = inv^T G, grad_A = -grad_B X^T
    vector_norm, matrix_norm ('fro'), norm            composed of minidl's ops

The gradients through the inverse assume an invertible matrix (for a singular one torch switches to an SVD
formula; minidl returns inf/nan there). Not here yet: svd, qr, eigh, cholesky, lstsq, pinv.
"""
from __future__ import annotations

import numbers

import numpy as np

from . import _dtypes
from ._device import get_array_module
from .autograd.function import Function
from .ops.mathops import quiet_float_errors
from .autograd.return_types import namedtuple

slogdet_result = namedtuple("slogdet", ["sign", "logabsdet"])


def _mT(a):
    return a.swapaxes(-1, -2)


def _square(op, A):
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.{op}: A must be batches of square matrices, but they are "
                           f"{A.shape[-2] if A.ndim >= 2 else '?'} by {A.shape[-1] if A.ndim else '?'} matrices")
    if not _dtypes.is_floating(A.dtype):
        raise RuntimeError(f"linalg.{op}: Expected a floating point tensor as input. Got {A.dtype}")


def _work(a):
    return a.astype(np.float32) if a.dtype in _dtypes.HALF_DTYPES else a


class Inv(Function):
    saves_output = True

    def forward(self, a):
        xp = get_array_module(a)
        self.out = xp.linalg.inv(_work(a))
        return self.out.astype(a.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        inv_t = _mT(self.out)
        return (-(inv_t @ g.astype(self.out.dtype) @ inv_t)).astype(g.dtype, copy=False)


class Det(Function):
    def forward(self, a):
        xp = get_array_module(a)
        self.a = _work(a)
        self.det = xp.linalg.det(self.a)
        return self.det.astype(a.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        with quiet_float_errors(xp):
            inv_t = _mT(xp.linalg.inv(self.a))
        return ((g * self.det)[..., None, None] * inv_t).astype(g.dtype, copy=False)


class SlogDet(Function):
    def forward(self, a):
        xp = get_array_module(a)
        self.a = _work(a)
        sign, logabs = xp.linalg.slogdet(self.a)
        return sign.astype(a.dtype, copy=False), logabs.astype(a.dtype, copy=False)

    def backward(self, g_sign, g_log):
        xp = get_array_module(g_log)
        inv_t = _mT(xp.linalg.inv(self.a))
        return (g_log[..., None, None] * inv_t).astype(g_log.dtype, copy=False)


class Solve(Function):
    def forward(self, a, b, vector=False):
        xp = get_array_module(a)
        self.a, self.vector = _work(a), vector
        bb = _work(b)[..., None] if vector else _work(b)
        self.x = xp.linalg.solve(self.a, bb)
        out = self.x[..., 0] if vector else self.x
        self.shapes = (a.shape, b.shape)
        return out.astype(a.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        gg = g.astype(self.x.dtype)[..., None] if self.vector else g.astype(self.x.dtype)
        gb = xp.linalg.solve(_mT(self.a), gg)
        ga = -gb @ _mT(self.x)
        from .autograd.function import unbroadcast

        gb = gb[..., 0] if self.vector else gb
        return (unbroadcast(ga, self.shapes[0]).astype(g.dtype, copy=False),
                unbroadcast(gb, self.shapes[1]).astype(g.dtype, copy=False))


def inv(A, *, out=None):
    _square("inv", A)
    return Inv.apply(A)


def det(A, *, out=None):
    _square("det", A)
    return Det.apply(A)


def slogdet(A, *, out=None):
    _square("slogdet", A)
    sign, logabs = SlogDet.apply(A)
    return slogdet_result(sign, logabs)


def solve(A, B, *, left=True, out=None):
    _square("solve", A)
    if not left:
        raise NotImplementedError("linalg.solve: left=False is not supported in minidl (solve A^T X^T = B^T)")
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    if A.dtype != B.dtype:
        raise RuntimeError(f"linalg.solve: Expected A and B to have the same dtype, but found A of type {A.dtype} "
                           f"and B of type {B.dtype} instead")
    return Solve.apply(A, B, vector=vector)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        x = x.type(dtype)
    if x.dtype in _dtypes.HALF_DTYPES:        # powers and sums in float32 (they overflow half), rounded once
        return vector_norm(x.float(), ord, dim, keepdim).type(x.dtype)
    if dim is None:
        flat = x.reshape(-1)
        out = flat.norm(ord, 0)
        return out.reshape((1,) * x.ndim) if keepdim else out
    return x.norm(ord, dim, keepdim=keepdim)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """'fro' (the square root of the sum of squares), inf / -inf (the largest / smallest row sum of |A|) and
    1 / -1 (the same over columns). 'nuc', 2 and -2 need singular values: not in minidl yet."""
    if dtype is not None:
        A = A.type(dtype)
    if A.dtype in _dtypes.HALF_DTYPES:
        return matrix_norm(A.float(), ord, dim, keepdim).type(A.dtype)
    d0, d1 = (d % A.ndim for d in dim)
    if ord == "fro":
        return (A * A).sum((d0, d1), keepdim=keepdim).sqrt()
    if ord in (float("inf"), float("-inf"), 1, -1):
        across, then = (d1, d0) if ord in (float("inf"), float("-inf")) else (d0, d1)
        sums = A.abs().sum(across, keepdim=True)
        out = sums.amax(then, keepdim=True) if ord > 0 else sums.amin(then, keepdim=True)
        return out if keepdim else out.squeeze(max(d0, d1)).squeeze(min(d0, d1))
    raise NotImplementedError(f"linalg.matrix_norm: ord={ord!r} needs singular values, which minidl does not "
                              "compute yet (supported: 'fro', inf, -inf, 1, -1)")


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    if isinstance(dim, numbers.Integral) or (ord is not None and not isinstance(ord, str) and dim is None and A.ndim == 1):
        return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
    if ord is None:
        return vector_norm(A, 2, dim, keepdim, dtype=dtype)
    return matrix_norm(A, ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)


def logdet(A):
    sign, logabs = slogdet(A)
    from .ops import where

    return where(sign > 0, logabs, logabs.new_full((), float("nan")))   # a negative det has no real log
