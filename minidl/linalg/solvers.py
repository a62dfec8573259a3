"""torch.linalg's Cholesky factorization, triangular solves and the pseudo-inverse (Functions with their gradients,
formulas in minidl/linalg/__init__.py's docstring), and what is composed from them and the decompositions: lstsq,
matrix_rank, matrix_power, matrix_exp, multi_dot, cond, vecdot. Their gradients are the tape's through those."""
from __future__ import annotations

import numbers

import numpy as np

from .. import _dtypes
from .._device import get_array_module
from ..autograd.function import Function
from ..autograd.return_types import namedtuple
from ..ops.mathops import quiet_float_errors
from . import _floating, _mT, _square, _work, inv, matrix_norm, solve, svdvals

cholesky_ex_result = namedtuple("cholesky_ex", ["L", "info"])
inv_ex_result = namedtuple("linalg_inv_ex", ["inverse", "info"])
solve_ex_result = namedtuple("linalg_solve_ex", ["result", "info"])
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
        from ..autograd.function import unbroadcast

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
    from ..ops.creation import zeros

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
        from ..ops.creation import eye

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
    from ..ops.creation import eye

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


def _ex(op, A, solve_all, check_errors):
    """(result, info) of an _ex form: info per matrix (> 0: the first zero pivot, LAPACK's getrf), the result of
    the plain op where every matrix is invertible (with its gradient), NaN for the singular ones otherwise."""
    from ..autograd.tensor import Tensor
    from . import LinAlgError
    from .factorizations import lu_factor_ex

    info = lu_factor_ex(A).info
    bad = info._host_array() != 0
    if check_errors and bad.any():
        raise LinAlgError(f"linalg.{op}: The diagonal element {int(info._host_array().max())} is zero, the "
                          f"{'inversion' if op == 'inv_ex' else 'solve'} could not be completed because the input "
                          "matrix is singular.")
    if not bad.any():
        return solve_all(A), info
    xp = get_array_module(A._data)
    ok = Tensor._make(xp.asarray(~bad))
    safe = A.detach().masked_fill(~ok.reshape(ok.shape + (1, 1)), 0.0) + \
        Tensor._make(xp.eye(A.shape[-1], dtype=A.dtype)) * (~ok).type(A.dtype).reshape(ok.shape + (1, 1))
    result = solve_all(safe).detach()
    shape = ok.shape + (1,) * (result.ndim - ok.ndim)
    return result.masked_fill(~ok.reshape(shape), float("nan")), info


def inv_ex(A, *, check_errors=False, out=None):
    """(inverse, info): info > 0 marks a singular matrix (its inverse NaN here, where torch's holds infs);
    check_errors=True raises LinAlgError instead (torch.linalg.inv_ex)."""
    _square("inv_ex", A)
    return inv_ex_result(*_ex("inv_ex", A, inv, check_errors))


def solve_ex(A, B, *, left=True, check_errors=False, out=None):
    """(result, info) of solve(A, B), as inv_ex: info > 0 for a singular A (torch.linalg.solve_ex)."""
    _square("solve_ex", A)
    return solve_ex_result(*_ex("solve_ex", A, lambda M: solve(M, B, left=left), check_errors))


def tensorinv(A, ind=2, *, out=None):
    """The inverse of A read as a matrix of shape (prod(A.shape[:ind]), prod(A.shape[ind:])), shaped
    A.shape[ind:] + A.shape[:ind] (torch.linalg.tensorinv)."""
    rows, cols = int(np.prod(A.shape[:ind])), int(np.prod(A.shape[ind:]))
    if ind <= 0 or rows != cols:
        raise RuntimeError(f"linalg.tensorinv: expected a positive ind whose leading and trailing dimensions have the "
                           f"same product, got ind={ind} for shape {tuple(A.shape)}")
    return inv(A.reshape(rows, cols)).reshape(tuple(A.shape[ind:]) + tuple(A.shape[:ind]))


def tensorsolve(A, B, dims=None, *, out=None):
    """X with tensordot(A, X, X.ndim) = B (torch.linalg.tensorsolve); dims: A's dimensions moved to the end first."""
    if dims is not None:
        dims = [d % A.ndim for d in dims]
        A = A.permute(*[d for d in range(A.ndim) if d not in dims], *dims)
    rest = tuple(A.shape[B.ndim:])
    n = int(np.prod(rest))
    if int(np.prod(A.shape[:B.ndim])) != n or tuple(A.shape[:B.ndim]) != tuple(B.shape):
        raise RuntimeError(f"linalg.tensorsolve: expected A's leading dimensions {tuple(A.shape[:B.ndim])} to be B's "
                           f"shape {tuple(B.shape)}, with as many elements as the rest {rest}")
    return solve(A.reshape(n, n), B.reshape(n)).reshape(rest)


def vander(x, *, N=None):
    """The Vandermonde matrix of x with increasing powers x^0 ... x^(N-1) (torch.linalg.vander)."""
    n = x.shape[-1] if N is None else int(N)
    if n < 0:
        raise ValueError(f"linalg.vander: N must be non-negative, got {N}")
    from ..ops.creation import arange

    powers = arange(n, device=x.device)
    return x.unsqueeze(-1) ** powers.type(x.dtype if x.dtype.kind in "fc" else powers.dtype)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """torch.linalg.diagonal: A.diagonal with the matrix dimensions last by default."""
    return A.diagonal(offset, dim1, dim2)
