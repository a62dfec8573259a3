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
Not here: eig / eigvals (non-symmetric, complex results), ldl / lu factorizations, householder_product.
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
eigh_result = namedtuple("eigh", ["eigenvalues", "eigenvectors"])
qr_result = namedtuple("qr", ["Q", "R"])
svd_result = namedtuple("svd", ["U", "S", "Vh"])


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


def logdet(A):
    sign, logabs = slogdet(A)
    from .ops import where

    return where(sign > 0, logabs, logabs.new_full((), float("nan")))   # a negative det has no real log


# ------------------------------------------------------------------------------------------------
# Cholesky, triangular solves, the pseudo-inverse, and what is composed from them
# ------------------------------------------------------------------------------------------------

cholesky_ex_result = namedtuple("cholesky_ex", ["L", "info"])
lstsq_result = namedtuple("lstsq", ["solution", "residuals", "rank", "singular_values"])


def _tri(xp, a, upper, unit=False):
    """The triangle of a that a triangular solve reads (the diagonal as ones when unit)."""
    t = xp.triu(a) if upper else xp.tril(a)
    if unit:
        n = a.shape[-1]
        t = t - t * xp.eye(n, dtype=a.dtype) + xp.eye(n, dtype=a.dtype)
    return t


def _tri_solve(xp, t, b):
    """t^-1 b for a (batched) triangular t, by LAPACK's general solve (NumPy and CuPy have no triangular one)."""
    return xp.linalg.solve(t, xp.broadcast_to(b, t.shape[:-2] + b.shape[-2:]) if b.ndim < t.ndim else b)


class Cholesky(Function):
    """A = L L^T. Backward (Murray 2016, torch's cholesky_backward): with phi(X) the lower triangle of X and its
    diagonal halved, grad_A = S + S^T halved, S = L^-T phi(L^T gL) L^-1."""

    def forward(self, a, upper=False):
        xp = get_array_module(a)
        self.upper = upper
        with quiet_float_errors(xp):
            self.L = xp.linalg.cholesky(_work(a))
        if bool(xp.isnan(self.L).any()):   # CuPy returns NaNs where NumPy raises
            raise RuntimeError("linalg.cholesky: The factorization could not be completed because the input is not "
                               "positive-definite")
        return (_mT(self.L) if upper else self.L).astype(a.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        L = self.L
        gL = _mT(g) if self.upper else g
        phi = xp.tril(_mT(L) @ gL.astype(L.dtype))
        n = L.shape[-1]
        phi = phi - 0.5 * phi * xp.eye(n, dtype=L.dtype)
        Lt = _mT(L)
        s = _mT(_tri_solve(xp, Lt, _mT(_tri_solve(xp, Lt, phi))))   # L^-T phi L^-1
        return (0.5 * (s + _mT(s))).astype(g.dtype, copy=False)


class SolveTriangular(Function):
    """X = tri(A)^-1 B (left) or B tri(A)^-1 (right). Backward of the left form: grad_B = tri(A)^-T G,
    grad_A = the same triangle of -grad_B X^T (zero diagonal when unitriangular); the right form is the left one
    transposed."""

    def forward(self, a, b, upper=False, left=True, unitriangular=False):
        xp = get_array_module(a)
        self.upper, self.left, self.unit = upper, left, unitriangular
        t = _tri(xp, _work(a), upper, unitriangular)
        self.t, self.shapes = t, (a.shape, b.shape)
        self.x = _tri_solve(xp, t, _work(b)) if left else _mT(_tri_solve(xp, _mT(t), _mT(_work(b))))
        return self.x.astype(b.dtype, copy=False)

    def backward(self, g):
        from .autograd.function import unbroadcast

        xp = get_array_module(g)
        gg = g.astype(self.x.dtype)
        if self.left:
            gb = _tri_solve(xp, _mT(self.t), gg)
            ga = -gb @ _mT(self.x)
        else:   # X t = B: gB = G t^-T, gA = -X^T gB
            gb = _mT(_tri_solve(xp, self.t, _mT(gg)))
            ga = -_mT(self.x) @ gb
        ga = xp.triu(ga, 1 if self.unit else 0) if self.upper else xp.tril(ga, -1 if self.unit else 0)
        return (unbroadcast(ga, self.shapes[0]).astype(g.dtype, copy=False),
                unbroadcast(gb, self.shapes[1]).astype(g.dtype, copy=False))


class Pinv(Function):
    """P = V diag(1/S) U^T over the singular values above the tolerance. Backward (Golub & Pereyra 1973, for a
    constant rank): dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P, so
    grad_A = -P^T G P^T + (I - A P) G^T P P^T + P^T P G^T (I - P A)."""

    def forward(self, a, atol=0.0, rtol=None):
        xp = get_array_module(a)
        w = _work(a)
        U, S, Vh = xp.linalg.svd(w, full_matrices=False)
        m, n = a.shape[-2:]
        rtol = (np.finfo(w.dtype).eps * max(m, n)) if rtol is None else rtol
        tol = xp.maximum(atol, rtol * (S.max(-1, keepdims=True) if S.shape[-1] else S))
        inv_s = xp.where(S > tol, 1.0 / xp.where(S > tol, S, 1), 0).astype(w.dtype)
        self.a, self.p = w, _mT(Vh) @ (inv_s[..., :, None] * _mT(U))
        return self.p.astype(a.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        A, P, G = self.a, self.p, g.astype(self.p.dtype)
        m, n = A.shape[-2:]
        Pt, Gt = _mT(P), _mT(G)
        ga = -Pt @ G @ Pt + (xp.eye(m, dtype=A.dtype) - A @ P) @ Gt @ P @ Pt + Pt @ P @ Gt @ (xp.eye(n, dtype=A.dtype)
                                                                                              - P @ A)
        return ga.astype(g.dtype, copy=False)


def cholesky(A, *, upper=False, out=None):
    """The lower factor L of a symmetric positive-definite A = L L^T (upper=True: L^T); reads A's lower triangle."""
    _square("cholesky", A)
    return Cholesky.apply(A, upper=upper)


def cholesky_ex(A, *, upper=False, check_errors=False, out=None):
    """(L, info): info 0 per matrix (a matrix that is not positive-definite raises here, where torch sets info)."""
    L = cholesky(A, upper=upper)
    from .ops.creation import zeros

    return cholesky_ex_result(L, zeros(*A.shape[:-2], dtype=_dtypes.int32, device=A.device))


def solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):
    """X with tri(A) X = B (left) or X tri(A) = B (right), tri(A) the upper or lower triangle of A."""
    _square("solve_triangular", A)
    if A.dtype != B.dtype:
        raise RuntimeError(f"linalg.solve_triangular: Expected A and B to have the same dtype, but found A of type "
                           f"{A.dtype} and B of type {B.dtype} instead")
    if B.ndim < 2 or B.shape[-2 if left else -1] != A.shape[-1]:
        raise RuntimeError(f"linalg.solve_triangular: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({tuple(A.shape)} and {tuple(B.shape)})")
    return SolveTriangular.apply(A, B, upper=upper, left=left, unitriangular=unitriangular)


def cholesky_solve(B, L, upper=False, *, out=None):
    """X with A X = B for A = L L^T (upper: U^T U) given the factor (torch.cholesky_solve). Solved as A X = B with A
    formed from L, so that L's gradient is torch's (which differentiates A = L L^T over the whole of L)."""
    return solve(L.mT @ L if upper else L @ L.mT, B)


def pinv(A, *, atol=None, rtol=None, hermitian=False, out=None):
    """The Moore-Penrose pseudo-inverse: singular values at most max(atol, rtol * largest) count as zero (torch's
    defaults: atol 0, rtol eps * max(m, n) when neither is given, else 0)."""
    _floating("pinv", A)
    if rtol is None and atol is not None:
        rtol = 0.0
    return Pinv.apply(A, atol=float(atol or 0.0), rtol=rtol)


def lstsq(A, B, rcond=None, *, driver=None):
    """The least-squares solution of A X = B (torch.linalg.lstsq): (solution, residuals, rank, singular_values).
    The solution is pinv(A) B (its gradient through pinv's); residuals (squared, per column) for tall full-rank
    A but with 'gelsy' (the CPU's default), rank for every driver but 'gels', singular values for 'gelsd' /
    'gelss', as torch fills them; empty otherwise."""
    _floating("lstsq", A)
    driver = driver or ("gels" if A.is_cuda else "gelsy")
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError(f"linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss), got {driver}")
    vector = B.ndim == A.ndim - 1
    b = B.unsqueeze(-1) if vector else B
    m, n = A.shape[-2:]
    X = pinv(A, rtol=rcond) @ b
    empty = A.new_empty((0,))
    rank = matrix_rank(A, rtol=rcond) if driver != "gels" else empty.long()
    residuals = empty
    if driver != "gelsy" and m > n and bool((matrix_rank(A) == n).all()):
        residuals = ((A @ X - b) ** 2).sum(-2)
    singular_values = svdvals(A) if driver in ("gelsd", "gelss") else empty
    return lstsq_result(X.squeeze(-1) if vector else X, residuals, rank, singular_values)


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, tol=None, out=None):
    """The number of singular values above max(atol, rtol * largest) (the defaults as pinv's), int64."""
    _floating("matrix_rank", A)
    if tol is not None:
        atol = tol
    S = svdvals(A.detach())
    m, n = A.shape[-2:]
    if rtol is None:
        rtol = 0.0 if atol is not None else float(np.finfo(_work(np.empty(0, A.dtype)).dtype).eps * max(m, n))
    largest = S.amax(-1, keepdim=True) if S.shape[-1] else S
    tol_ = (largest * rtol).clamp(min=float(atol or 0.0))
    return (S > tol_).sum(-1)


def matrix_power(A, n):
    """A^n by repeated squaring (n < 0: of the inverse; n = 0: the identity)."""
    _square("matrix_power", A)
    if not isinstance(n, numbers.Integral):
        raise TypeError(f"linalg.matrix_power: n must be an int, got {type(n).__name__}")
    if n == 0:
        from .ops.creation import eye

        identity = eye(A.shape[-1], dtype=A.dtype, device=A.device).expand(*A.shape)
        return identity + A.masked_fill(A.new_ones((), dtype=_dtypes.bool_), 0.0)   # (A's zero gradient, as torch)
    base, result = (inv(A) if n < 0 else A), None
    n = abs(n)
    while n:
        if n & 1:
            result = base if result is None else result @ base
        n >>= 1
        if n:
            base = base @ base
    return result


def matrix_exp(A):
    """exp(A) by scaling and squaring: A / 2^s with norm <= 1/2, its Taylor series to degree 18 (truncation below
    float64's rounding there), squared s times. Its gradient is the tape's through those products. The scale is read
    on the host (a sync on the GPU)."""
    _square("matrix_exp", A)
    from .ops.creation import eye

    norm1 = float(A.detach().abs().sum(-2).amax().item()) if A.numel() else 0.0
    s = max(0, int(np.ceil(np.log2(norm1 / 0.5)))) if norm1 > 0.5 else 0
    X = A / (2.0 ** s)
    identity = eye(A.shape[-1], dtype=A.dtype, device=A.device)
    term, total = identity, identity
    for k in range(1, 19):
        term = term @ X / k
        total = total + term
    for _ in range(s):
        total = total @ total
    return total


def multi_dot(tensors, *, out=None):
    """The product of the matrices in order (a first 1-D tensor is a row vector, a last one a column); the order of
    the products is left to right."""
    if len(tensors) < 2:
        raise RuntimeError(f"linalg.multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    first, last = tensors[0], tensors[-1]
    mats = [first.unsqueeze(0) if first.ndim == 1 else first, *tensors[1:-1],
            last.unsqueeze(-1) if last.ndim == 1 else last]
    result = mats[0]
    for m_ in mats[1:]:
        result = result @ m_
    if last.ndim == 1:
        result = result.squeeze(-1)
    if first.ndim == 1:
        result = result.squeeze(0)
    return result


def cond(A, p=None, *, out=None):
    """The condition number: the ratio of the largest to the smallest singular value (p None or 2; -2 inverts it),
    else norm(A, p) * norm(inv(A), p)."""
    if p is None or p in (2, -2):
        S = svdvals(A)
        ratio = S.amax(-1) / S.amin(-1)
        return ratio if p != -2 else 1 / ratio
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


def vecdot(x, y, *, dim=-1, out=None):
    """sum(conj(x) * y) over dim."""
    return (x.conj() * y).sum(dim)


def matmul(input, other, *, out=None):
    return input @ other
