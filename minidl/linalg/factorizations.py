"""torch.linalg's LU factorization (partial pivoting, LAPACK's getrf conventions) and the general eigen-decomposition.

    lu_factor(A)        (LU, pivots): L below the diagonal (unit diagonal implied), U on and above it; pivots[k] the
                        1-based row swapped with row k at step k, as LAPACK's and torch's
    lu(A)               (P, L, U) with A = P L U, unpacked from lu_factor by tensor ops (their gradient is the tape's)
    lu_unpack, lu_solve (A X = B from the factors: a permutation and two triangular solves, differentiable through
                        the tape)
    eig, eigvals        complex eigenvalues and eigenvectors of a general square matrix (NumPy's geev)

The factorization is written out (a loop over the columns, each step vectorised over rows and the batch), because
NumPy has no LU routine: it is the textbook algorithm that LAPACK blocks, so it pivots as LAPACK does (the first
largest |a_ik| in the column) and its values agree to rounding. Its gradient, for square matrices (torch's
linalg_lu_backward):

    A = P L U:   grad_A = P L^-T ( tril_-1(L^T gL) + triu(gU U^T) ) U^-T

eig's gradient is not in minidl (its results are complex; the backward raises and says so).
"""
from __future__ import annotations

import numpy as np

from .._device import get_array_module
from ..autograd.function import Function
from ..autograd.return_types import namedtuple
from . import _floating, _mT, _square, _work

lu_factor_result = namedtuple("lu_factor", ["LU", "pivots"])
lu_factor_ex_result = namedtuple("lu_factor_ex", ["LU", "pivots", "info"])
lu_result = namedtuple("lu", ["P", "L", "U"])
lu_unpack_result = namedtuple("lu_unpack", ["P", "L", "U"])
eig_result = namedtuple("eig", ["eigenvalues", "eigenvectors"])


def _getrf(xp, a):
    """(LU, pivots (1-based, int32)) of a batch of m x n matrices by Gaussian elimination with partial pivoting
    (LAPACK's unblocked getf2: the first largest |a_ik| pivots; a zero pivot leaves its column as it is)."""
    lu = a.copy()
    m, n = lu.shape[-2], lu.shape[-1]
    k_max = min(m, n)
    batch = lu.shape[:-2]
    flat = lu.reshape((-1, m, n))
    rows = xp.arange(flat.shape[0])
    pivots = xp.zeros((flat.shape[0], k_max), dtype=np.int32)
    for k in range(k_max):
        p = k + xp.argmax(xp.abs(flat[:, k:, k]), axis=1)
        pivots[:, k] = (p + 1).astype(np.int32)
        row_k, row_p = flat[rows, k, :].copy(), flat[rows, p, :].copy()
        flat[rows, p, :] = row_k
        flat[rows, k, :] = row_p
        pivot = flat[:, k, k]
        zero = pivot == 0
        scale = xp.where(zero, 0, 1 / xp.where(zero, 1, pivot))
        flat[:, k + 1:, k] *= scale[:, None]
        flat[:, k + 1:, k + 1:] -= flat[:, k + 1:, k:k + 1] * flat[:, k:k + 1, k + 1:]
    return flat.reshape(lu.shape), pivots.reshape(batch + (k_max,))


def _permutation(xp, pivots, m, dtype):
    """P (..., m, m) with A = P L U, from LAPACK's pivots: the row order that the swaps make, as columns of I."""
    batch = pivots.shape[:-1]
    flat = pivots.reshape((-1, pivots.shape[-1])).astype(np.int64) - 1
    perm = xp.broadcast_to(xp.arange(m), (flat.shape[0], m)).copy()
    rows = xp.arange(flat.shape[0])
    for k in range(flat.shape[1]):
        a, b = perm[rows, k].copy(), perm[rows, flat[:, k]].copy()
        perm[rows, k] = b
        perm[rows, flat[:, k]] = a
    eye = xp.eye(m, dtype=dtype)
    return eye[:, perm].transpose(1, 0, 2).reshape(batch + (m, m))


class LUFactor(Function):
    """(LU, pivots) of A; backward for square A by the formula in the module docstring, with L and U read from LU."""

    def forward(self, a):
        xp = get_array_module(a)
        lu, pivots = _getrf(xp, _work(a))
        self.lu, self.pivots = lu, pivots
        return lu.astype(a.dtype, copy=False), pivots

    def backward(self, g_lu, g_pivots=None):
        xp = get_array_module(self.lu)
        lu = self.lu
        m, n = lu.shape[-2], lu.shape[-1]
        if m != n:
            raise NotImplementedError(f"linalg.lu_factor: the gradient of the LU factors of a {m} x {n} (non-square) "
                                      "matrix is not in minidl")
        eye = xp.eye(n, dtype=lu.dtype)
        L = xp.tril(lu, -1) + eye
        U = xp.triu(lu)
        g = g_lu.astype(lu.dtype)
        inner = xp.tril(_mT(L) @ xp.tril(g, -1), -1) + xp.triu(xp.triu(g) @ _mT(U))
        # L^-T inner U^-T: two solves (NumPy has no triangular solve; these are general ones on triangles)
        left = xp.linalg.solve(_mT(L), inner)
        grad = _mT(xp.linalg.solve(U, _mT(left)))
        P = _permutation(xp, self.pivots, m, lu.dtype)
        return (P @ grad).astype(g_lu.dtype, copy=False)


def _check_pivot(op, pivot):
    if not pivot:
        raise NotImplementedError(f"linalg.{op}: pivot=False (LU without pivoting) is only in torch's CUDA path; "
                                  "minidl factors with partial pivoting (pivot=True)")


def lu_factor_ex(A, *, pivot=True, check_errors=False, out=None):
    """(LU, pivots, info): info[k] > 0 where U[k-1, k-1] is exactly zero (a singular matrix), as LAPACK's."""
    _floating("lu_factor_ex", A)
    _check_pivot("lu_factor_ex", pivot)
    from ..autograd.tensor import Tensor

    LU, pivots = LUFactor.apply(A)
    xp = get_array_module(LU._data)
    zero = xp.diagonal(LU._data, axis1=-2, axis2=-1) == 0   # (getrf's info: the first zero pivot, 1-based)
    info_array = xp.where(zero.any(-1), xp.argmax(zero, axis=-1) + 1, 0).astype(np.int32)
    info = Tensor._make(info_array)
    if check_errors and bool((info_array != 0).any()):
        raise RuntimeError(f"linalg.lu_factor_ex: U[{int(info_array.max()) - 1}, {int(info_array.max()) - 1}] is zero, "
                           "singular U.")
    return lu_factor_ex_result(LU, pivots, info)


def lu_factor(A, *, pivot=True, out=None):
    """(LU, pivots) of A = P L U (partial pivoting); a singular A is factored (U has a zero on its diagonal), as
    torch's, which raises only in lu_factor_ex(check_errors=True) or a later solve."""
    LU, pivots, _ = lu_factor_ex(A, pivot=pivot)
    return lu_factor_result(LU, pivots)


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True, *, out=None):
    """(P, L, U) from lu_factor's results: L (m x k) unit lower triangular, U (k x n) upper, P (m x m)."""
    from ..ops.creation import eye
    from ..autograd.tensor import Tensor

    m, n = LU_data.shape[-2], LU_data.shape[-1]
    k = min(m, n)
    empty = LU_data.new_empty((0,))
    L = U = P = empty
    if unpack_data:
        L = LU_data[..., :, :k].tril(-1) + eye(m, k, dtype=LU_data.dtype, device=LU_data.device)
        U = LU_data[..., :k, :].triu()
    if unpack_pivots:
        xp = get_array_module(LU_pivots._data)
        P = Tensor._make(_permutation(xp, LU_pivots._data, m, LU_data._data.dtype))
    return lu_unpack_result(P, L, U)


def lu(A, *, pivot=True, out=None):
    """(P, L, U) with A = P L U: P a permutation, L unit lower triangular (m x k), U upper (k x n), k = min(m, n)."""
    LU, pivots = lu_factor(A, pivot=pivot)
    return lu_result(*lu_unpack(LU, pivots))


def lu_solve(LU, pivots, B, *, left=True, adjoint=False, out=None):
    """X with A X = B (left), X A = B (left=False), or with A^T (adjoint), A = P L U given by lu_factor. Two
    triangular solves and a permutation, as tensor ops: gradients reach LU and B through the tape."""
    from .solvers import solve_triangular

    _square("lu_solve", LU)
    P, L, U = lu_unpack(LU, pivots)
    if not left:   # X A = B  <=>  A^T X^T = B^T
        return lu_solve(LU, pivots, B.mT, left=True, adjoint=not adjoint).mT
    if adjoint:    # A^T X = B: U^T L^T P^T X = B
        Y = solve_triangular(U.mT, B, upper=False)
        Z = solve_triangular(L.mT, Y, upper=True, unitriangular=True)
        return P @ Z
    Y = solve_triangular(L, P.mT @ B, upper=False, unitriangular=True)
    return solve_triangular(U, Y, upper=True)


class Eig(Function):
    def forward(self, a):
        xp = get_array_module(a)
        if xp is not np:
            raise NotImplementedError("linalg.eig: CuPy has no general (non-symmetric) eigen-solver; move the matrix "
                                      "to the CPU (torch also computes it on the host)")
        w, v = np.linalg.eig(_work(a))
        complex_dtype = np.complex128 if a.dtype == np.float64 else np.complex64
        return w.astype(complex_dtype), v.astype(complex_dtype)

    def backward(self, gw, gv):
        raise NotImplementedError("linalg.eig: the gradient of a general eigen-decomposition (complex results) is not "
                                  "in minidl; for a symmetric matrix use linalg.eigh, whose gradient is")


def eig(A, *, out=None):
    """(eigenvalues, eigenvectors) of a general square A, complex (eigenvectors of unit norm, as LAPACK's geev)."""
    _square("eig", A)
    if A.dtype.kind == "c":
        raise NotImplementedError("linalg.eig: complex input matrices are not in minidl (real ones are)")
    return eig_result(*Eig.apply(A))


def eigvals(A, *, out=None):
    return eig(A).eigenvalues


def householder_product(A, tau, *, out=None):
    """The first k columns of H_1 H_2 ... H_k, H_i = I - tau_i v_i v_i^T, v_i the i-th column of A below the
    diagonal with a 1 on it (LAPACK's orgqr: the Q of geqrf's reflectors). Composed of tensor ops, so its gradient
    (in A and tau) is the tape's."""
    from ..ops.creation import eye

    if A.ndim < 2 or A.shape[-2] < A.shape[-1]:
        raise RuntimeError(f"linalg.householder_product: A must be a batch of tall matrices (m >= n), got shape "
                           f"{tuple(A.shape)}")
    m, n = A.shape[-2], A.shape[-1]
    k = tau.shape[-1]
    if k > n or tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(f"linalg.householder_product: tau of shape {tuple(tau.shape)} does not fit A of shape "
                           f"{tuple(A.shape)} (tau.shape[-1] <= A.shape[-1], the same batch)")
    identity = eye(m, dtype=A.dtype, device=A.device)
    Q = identity.expand(*A.shape[:-2], m, m)
    below = A.tril(-1) + eye(m, n, dtype=A.dtype, device=A.device)   # the reflectors, unit diagonal
    for i in range(k):
        v = below[..., :, i:i + 1]
        Q = Q - (Q @ v) * tau[..., i:i + 1].unsqueeze(-1) @ v.mT
    return Q[..., :, :n]


def geqrf(input, *, out=None):
    """(a, tau): the QR factorization in LAPACK's form (R on and above a's diagonal, the Householder vectors below
    it), as torch.geqrf; no gradient, as torch's. NumPy's qr(mode="raw") on the CPU, CuPy's on the GPU."""
    from ..autograd.tensor import Tensor

    _floating("geqrf", input)
    xp = get_array_module(input._data)
    a = _work(input._data)
    batch = a.shape[:-2]
    flat = a.reshape((-1,) + a.shape[-2:])
    hs, taus = [], []
    for matrix in flat:
        h, tau = xp.linalg.qr(matrix, mode="raw")
        hs.append(h.T)
        taus.append(tau)
    h = xp.stack(hs).reshape(a.shape) if hs else xp.zeros(a.shape, a.dtype)
    tau = xp.stack(taus).reshape(batch + (min(a.shape[-2:]),)) if taus else xp.zeros(batch + (0,), a.dtype)
    return Tensor._make(h.astype(input.dtype)), Tensor._make(tau.astype(input.dtype))


def torch_lu(A, pivot=True, get_infos=False, out=None):
    """torch.lu (deprecated in torch, met in older programs): (LU, pivots) or, with get_infos, (LU, pivots, infos)."""
    result = lu_factor_ex(A, pivot=pivot)
    return tuple(result) if get_infos else (result.LU, result.pivots)


def torch_lu_solve(b, LU_data, LU_pivots, *, out=None):
    """torch.lu_solve(b, LU_data, LU_pivots): the older argument order of linalg.lu_solve."""
    return lu_solve(LU_data, LU_pivots, b)

