"""minidl.linalg: torch.linalg's most used functions, on NumPy's or CuPy's LAPACK-backed routines, with their
gradients (batched over leading dimensions):

    inv(A)            d inv = -inv dA inv              grad_A = -inv^T G inv^T
    det(A)            d det = det tr(inv dA)           grad_A = g det inv^T
    slogdet(A)        (sign, log|det|)                 grad_A = g inv^T
    solve(A, B)       X = inv(A) B                     grad_B = inv^T G, grad_A = -grad_B X^T
    eigh(A), eigvalsh A = V diag(L) V^T (symmetric)    grad_A = V (skew(V^T gV) / (L_j - L_i), diag gL) V^T
    qr(A)             A = Q R (m >= n for gradients)   grad_A = (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q
    svd(A), svdvals   A = U diag(S) Vh                 Townsend's formula (below), distinct singular values
    cholesky(A)       A = L L^T (s.p.d.)               grad_A = sym(L^-T phi(L^T gL) L^-1), phi: tril, diagonal halved
    solve_triangular  X = tri(A)^-1 B                  grad_B = tri(A)^-T G, grad_A = tri(-grad_B X^T)
    pinv(A)           P = V diag(1/S) U^T (S > tol)    Golub & Pereyra's derivative of a constant-rank pseudo-inverse
    vector_norm, matrix_norm ('fro', 'nuc', 2, -2, ...), norm
and, composed from those (their gradients by the tape): cholesky_ex, cholesky_solve, lstsq, matrix_rank, matrix_power,
matrix_exp, multi_dot, cond, vecdot.

The gradients through the inverse assume an invertible matrix (for a singular one torch switches to an SVD
formula; minidl returns inf/nan there); those of eigh and svd assume distinct eigen / singular values, as torch's.
The LU factorization (lu_factor, lu, lu_unpack, lu_solve) and the general eig / eigvals are in factorizations.py.
householder_product and geqrf too. inv and solve raise LinAlgError for a singular matrix (on the CPU, where LAPACK
reports it); inv_ex / solve_ex return its info instead; tensorinv, tensorsolve, vander and diagonal are in
solvers.py. Not here: ldl factorizations, eig's gradient.
"""
from __future__ import annotations

import numbers

import numpy as np

from .. import _dtypes
from .._device import get_array_module
from ..autograd.function import Function
from ..ops.mathops import quiet_float_errors
from ..autograd.return_types import namedtuple

slogdet_result = namedtuple("slogdet", ["sign", "logabsdet"])
eigh_result = namedtuple("eigh", ["eigenvalues", "eigenvectors"])
qr_result = namedtuple("qr", ["Q", "R"])
svd_result = namedtuple("svd", ["U", "S", "Vh"])


class LinAlgError(RuntimeError):
    """torch.linalg.LinAlgError: a matrix the operation cannot handle (a singular one in inv and solve)."""


def _singular(op, a):
    """The LinAlgError for a singular input of op, naming the first zero pivot as torch does (getrf's info)."""
    xp = get_array_module(a)
    from .factorizations import lu_factor_ex
    from ..autograd.tensor import Tensor

    info = lu_factor_ex(Tensor._make(xp.asarray(a))).info._host_array().reshape(-1)
    k = int(info[info > 0][0]) if (info > 0).any() else 0
    what = "inversion" if op == "inv" else "solve"
    return LinAlgError(f"linalg.{op}: The diagonal element {k} is zero, the {what} could not be completed because "
                       "the input matrix is singular.")


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
        try:
            self.out = xp.linalg.inv(_work(a))
        except np.linalg.LinAlgError:
            raise _singular("inv", a) from None
        return self.out.astype(a.dtype, copy=False)

    def backward(self, g):
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
        try:
            self.x = xp.linalg.solve(self.a, bb)
        except np.linalg.LinAlgError:
            raise _singular("solve", a) from None
        out = self.x[..., 0] if vector else self.x
        self.shapes = (a.shape, b.shape)
        return out.astype(a.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        gg = g.astype(self.x.dtype)[..., None] if self.vector else g.astype(self.x.dtype)
        gb = xp.linalg.solve(_mT(self.a), gg)
        ga = -gb @ _mT(self.x)
        from ..autograd.function import unbroadcast

        gb = gb[..., 0] if self.vector else gb
        return (unbroadcast(ga, self.shapes[0]).astype(g.dtype, copy=False),
                unbroadcast(gb, self.shapes[1]).astype(g.dtype, copy=False))


def _diag_embed(xp, d):
    """(..., n) -> (..., n, n) with d on the diagonal."""
    out = xp.zeros(d.shape + d.shape[-1:], dtype=d.dtype)
    idx = xp.arange(d.shape[-1])
    out[..., idx, idx] = d
    return out


class Eigh(Function):
    """A = V diag(L) V^T for symmetric A (LAPACK reads one triangle, UPLO). Backward (torch's
    linalg_eig_backward for Hermitian input): grad_A = V (skew(V^T gV) / E + diag(gL)) V^T, E_ij = L_j - L_i."""

    def forward(self, a, uplo="L"):
        xp = get_array_module(a)
        self.L, self.V = xp.linalg.eigh(_work(a), UPLO=uplo)
        return self.L.astype(a.dtype, copy=False), self.V.astype(a.dtype, copy=False)

    def backward(self, gL, gV):
        xp = get_array_module(self.V)
        V, L = self.V, self.L
        dtype = gL.dtype if gL is not None else gV.dtype
        if gV is not None:
            inner = _mT(V) @ gV.astype(V.dtype)
            inner = 0.5 * (inner - _mT(inner))
            E = L[..., None, :] - L[..., :, None]
            n = L.shape[-1]
            E[..., xp.arange(n), xp.arange(n)] = 1
            with quiet_float_errors(xp):
                inner = inner / E
        else:
            inner = xp.zeros(V.shape, dtype=V.dtype)
        n = L.shape[-1]
        inner[..., xp.arange(n), xp.arange(n)] = 0 if gL is None else gL.astype(V.dtype)
        return (V @ inner @ _mT(V)).astype(dtype, copy=False)


class QR(Function):
    """A = Q R, Q with orthonormal columns, R upper triangular (numpy's Householder QR: torch's signs). Backward
    for m >= n (the reduced factors, or complete ones of a square A): grad_A = (gQ + Q copyltu(M)) R^-T,
    M = R gR^T - gQ^T Q, copyltu(M) = M's lower triangle mirrored up (Walter & Lehmann; torch's formula)."""

    def forward(self, a, mode="reduced"):
        xp = get_array_module(a)
        self.Q, self.R = xp.linalg.qr(_work(a), mode="complete" if mode == "complete" else "reduced")
        return self.Q.astype(a.dtype, copy=False), self.R.astype(a.dtype, copy=False)

    def backward(self, gQ, gR):
        xp = get_array_module(self.Q)
        Q, R = self.Q, self.R
        m, n = Q.shape[-2], R.shape[-1]
        if m < n or Q.shape[-1] != R.shape[-2] or Q.shape[-1] != n:
            raise NotImplementedError(f"linalg.qr: the gradient of a {m} x {n} matrix's factors (m < n, or complete "
                                      "factors of a non-square matrix) is not in minidl")
        gQ = xp.zeros(Q.shape, Q.dtype) if gQ is None else gQ.astype(Q.dtype)
        gR = xp.zeros(R.shape, R.dtype) if gR is None else gR.astype(R.dtype)
        M = R @ _mT(gR) - _mT(gQ) @ Q
        low = xp.tril(M, -1)
        copyltu = low + _mT(low) + _diag_embed(xp, xp.diagonal(M, axis1=-2, axis2=-1))
        B = gQ + Q @ copyltu
        # B R^-T: solve R X^T = B^T
        out = _mT(xp.linalg.solve(R, _mT(B)))
        return out.astype(gQ.dtype, copy=False)


class SVD(Function):
    """A = U diag(S) Vh (k = min(m, n) singular values, descending). Backward (Townsend 2016), with V = Vh^T,
    F_ij = 1 / (S_j^2 - S_i^2) off the diagonal:
        grad_A = U [ (F * (U^T gU - gU^T U)) S + diag(gS) + S (F * (V^T gV - gV^T V)) ] V^T
                 + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T)."""

    def forward(self, a, full_matrices=True):
        xp = get_array_module(a)
        U, S, Vh = xp.linalg.svd(_work(a), full_matrices=full_matrices)
        self.U, self.S, self.Vh, self.full = U, S, Vh, full_matrices
        return U.astype(a.dtype, copy=False), S.astype(a.dtype, copy=False), Vh.astype(a.dtype, copy=False)

    def backward(self, gU, gS, gVh):
        xp = get_array_module(self.S)
        S, k = self.S, self.S.shape[-1]
        U, Vh = self.U[..., :, :k], self.Vh[..., :k, :]
        if self.full and ((gU is not None and bool(xp.any(gU[..., :, k:] != 0)))
                          or (gVh is not None and bool(xp.any(gVh[..., k:, :] != 0)))):
            raise NotImplementedError("linalg.svd: the gradient through the extra columns of full_matrices=True is not "
                                      "defined (as in torch); call svd with full_matrices=False")
        V = _mT(Vh)
        dtype = next(g.dtype for g in (gU, gS, gVh) if g is not None)
        m, n = U.shape[-2], V.shape[-2]
        inner = xp.zeros(S.shape + (k,), dtype=S.dtype)
        F = S[..., None, :] ** 2 - S[..., :, None] ** 2
        F[..., xp.arange(k), xp.arange(k)] = 1
        with quiet_float_errors(xp):
            F = 1 / F
        F[..., xp.arange(k), xp.arange(k)] = 0
        Sm = S[..., None, :]   # multiplies columns
        out = 0
        if gU is not None:
            gU = gU[..., :, :k].astype(S.dtype)
            J = F * (_mT(U) @ gU - _mT(gU) @ U)
            inner = inner + J * Sm
            if m > k:
                with quiet_float_errors(xp):
                    out = out + (gU - U @ (_mT(U) @ gU)) / Sm @ Vh
        if gVh is not None:
            gV = _mT(gVh[..., :k, :].astype(S.dtype))
            K = F * (_mT(V) @ gV - _mT(gV) @ V)
            inner = inner + S[..., :, None] * K
            if n > k:
                with quiet_float_errors(xp):
                    out = out + U @ (_mT(gV) / S[..., :, None] - (_mT(gV) @ V) / S[..., :, None] @ Vh)
        if gS is not None:
            inner = inner + _diag_embed(xp, gS.astype(S.dtype))
        out = out + U @ inner @ Vh
        return out.astype(dtype, copy=False)


def _floating(op, A):
    if A.ndim < 2:
        raise RuntimeError(f"linalg.{op}: A must have at least 2 dimensions, got shape {tuple(A.shape)}")
    if not _dtypes.is_floating(A.dtype):
        raise RuntimeError(f"linalg.{op}: Expected a floating point tensor as input. Got {A.dtype}")


def eigh(A, UPLO="L", *, out=None):
    """Eigenvalues (ascending) and eigenvectors (columns) of symmetric A, reading its UPLO triangle."""
    _square("eigh", A)
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    return eigh_result(*Eigh.apply(A, uplo=UPLO))


def eigvalsh(A, UPLO="L", *, out=None):
    return eigh(A, UPLO).eigenvalues


def qr(A, mode="reduced", *, out=None):
    """(Q, R): mode 'reduced' (Q m x k), 'complete' (Q m x m) or 'r' (Q empty, as torch)."""
    _floating("qr", A)
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    Q, R = QR.apply(A, mode=mode)
    return qr_result(Q.new_empty((0,)) if mode == "r" else Q, R)


def svd(A, full_matrices=True, *, driver=None, out=None):
    """(U, S, Vh) with A = U diag(S) Vh, S descending."""
    _floating("svd", A)
    return svd_result(*SVD.apply(A, full_matrices=full_matrices))


def svdvals(A, *, driver=None, out=None):
    return svd(A, full_matrices=False).S


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
    """'fro' (the square root of the sum of squares), inf / -inf (the largest / smallest row sum of |A|),
    1 / -1 (the same over columns), 'nuc', 2, -2 (the sum, largest, smallest singular value)."""
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
    if ord in ("nuc", 2, -2):   # the sum, the largest, the smallest of the singular values
        S = svdvals(A.movedim((d0, d1), (-2, -1)))
        out = S.sum(-1) if ord == "nuc" else (S.amax(-1) if ord == 2 else S.amin(-1))
        if keepdim:
            out = out.unsqueeze(min(d0, d1)).unsqueeze(max(d0, d1))
        return out
    raise RuntimeError(f"linalg.matrix_norm: ord={ord!r} is not one of 'fro', 'nuc', inf, -inf, 1, -1, 2, -2")


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    if isinstance(dim, numbers.Integral) or (ord is not None and not isinstance(ord, str) and dim is None and A.ndim == 1):
        return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)
    if ord is None:
        return vector_norm(A, 2, dim, keepdim, dtype=dtype)
    return matrix_norm(A, ord, (-2, -1) if dim is None else dim, keepdim, dtype=dtype)


def cross(input, other, *, dim=-1, out=None):
    """The cross product of 3-vectors along dim (default the last), broadcasting the others (torch.linalg.cross)."""
    from ..ops.linalg import cross as _vector_cross
    from ..ops.shape import broadcast_tensors

    input, other = broadcast_tensors(input, other)
    return _vector_cross(input, other, dim)


def logdet(A):
    sign, logabs = slogdet(A)
    from ..ops import where

    return where(sign > 0, logabs, logabs.new_full((), float("nan")))   # a negative det has no real log


from .solvers import (  # noqa: E402,F401  (the solvers and what is composed from them: minidl/linalg/solvers.py)
    cholesky, cholesky_ex, cholesky_solve, cond, diagonal, inv_ex, lstsq, matmul, matrix_exp, matrix_power, matrix_rank,
    multi_dot, pinv, solve_ex, solve_triangular, tensorinv, tensorsolve, vander, vecdot,
)
from .factorizations import (  # noqa: E402,F401  (LU and the general eigen-decomposition: factorizations.py)
    eig, eigvals, geqrf, householder_product, lu, lu_factor, lu_factor_ex, lu_solve, lu_unpack,
)
