"""torch.nn.utils.parametrizations: weight_norm and spectral_norm as parametrizations (parametrize.py), the form
torch recommends over the hooks of weight_norm.py, and orthogonal. Their state-dict names are torch's:
`parametrizations.weight.original0` (g) and `original1` (v) for weight norm; `parametrizations.weight.original` and
the power iteration's `parametrizations.weight.0._u`, `._v` for spectral norm; `parametrizations.weight.original` and
`parametrizations.weight.0.base` for orthogonal.

orthogonal(module) keeps module.weight orthogonal (orthonormal columns or rows) while an optimizer moves an
unconstrained `original`: weight = base @ map(original), map one of
    matrix_exp   exp(A), A = X - X^T from the lower triangle of X (skew-symmetric, so exp(A) is orthogonal)
    cayley       (I - A/2)^-1 (I + A/2), the same A
    householder  the product of the reflections stored in X's lower triangle (linalg.householder_product)
and base the orthogonalized starting weight (QR with a non-negative diagonal of R), so that training starts where
the weight was ("trivialization": Lezcano-Casado 2019). A tall or wide weight is handled as its tall form."""
from __future__ import annotations

import numpy as np

from ...autograd.function import no_grad
from ...ops.elementwise import where
from ..module import Module
from . import parametrize
from .weight_norm import _as_matrix, _default_dim, _normalize, norm_except_dim, power_iteration, weight_from_norm

__all__ = ["weight_norm", "spectral_norm", "orthogonal"]


class _WeightNorm(Module):
    def __init__(self, dim=0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return weight_from_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return norm_except_dim(weight, self.dim), weight


class _SpectralNorm(Module):
    def __init__(self, weight, n_power_iterations=1, dim=0, eps=1e-12):
        super().__init__()
        if n_power_iterations <= 0:
            raise ValueError(f"spectral_norm: expected n_power_iterations to be positive, got {n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + weight.ndim
        self.eps, self.n_power_iterations = eps, n_power_iterations
        if weight.ndim > 1:
            with no_grad():
                weight_mat = _as_matrix(weight, self.dim)
                h, w = weight_mat.shape
                u = _normalize(weight_mat.new_empty(h).normal_(0, 1), eps)
                v = _normalize(weight_mat.new_empty(w).normal_(0, 1), eps)
                u, v = power_iteration(weight_mat, u, v, 15, eps, u_first=True)   # as torch: 15 steps to start
            self.register_buffer("_u", u)
            self.register_buffer("_v", v)

    def forward(self, weight):
        if weight.ndim == 1:
            return weight / (weight * weight).sum().sqrt().clamp(min=self.eps)
        weight_mat = _as_matrix(weight, self.dim)
        if self.training:
            u, v = power_iteration(weight_mat, self._u, self._v, self.n_power_iterations, self.eps, u_first=True)
            with no_grad():
                self._u.copy_(u)
                self._v.copy_(v)
        u, v = self._u.clone(), self._v.clone()
        sigma = (u * (weight_mat @ v)).sum()
        return weight / sigma

    def right_inverse(self, value):
        return value


def weight_norm(module, name="weight", dim=0):
    """module.<name> = g * v / ||v|| (g = parametrizations.<name>.original0, v = original1); returns the module."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """module.<name> divided by its largest singular value (power iteration; buffers of the parametrization)."""
    weight = getattr(module, name)
    dim = _default_dim(module) if dim is None else dim
    parametrize.register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module


_ORTHOGONAL_MAPS = ("matrix_exp", "cayley", "householder")


def _orthonormalised(A):
    """The Q of A = QR (A tall) with R's diagonal made non-negative: the nearest matrix with orthonormal columns in
    the sense of QR, unique for a full-rank A (torch's _make_orthogonal)."""
    from ... import linalg

    Q, R = linalg.qr(A)
    signs = R.diagonal(dim1=-2, dim2=-1).sign()
    return Q * where(signs == 0, signs.new_ones(()), signs).unsqueeze(-2)


class _Orthogonal(Module):
    def __init__(self, weight, orthogonal_map, use_trivialization=True):
        super().__init__()
        self.shape, self.orthogonal_map = tuple(weight.shape), orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):
        from ... import linalg
        from ...ops.creation import eye
        from ...ops.joining import cat

        n, k = X.shape[-2], X.shape[-1]
        wide = n < k
        if wide:
            X, n, k = X.mT, k, n
        if self.orthogonal_map in ("matrix_exp", "cayley"):
            X = X.tril()
            if n != k:   # embedded into a square matrix
                X = cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], n, n - k)], -1)
            A = X - X.mT
            if self.orthogonal_map == "matrix_exp":
                Q = linalg.matrix_exp(A)
            else:
                identity = eye(n, dtype=A.dtype, device=A.device)
                Q = linalg.solve(identity - 0.5 * A, identity + 0.5 * A)
            Q = Q[..., :k] if n != k else Q
        else:
            A = X.tril(-1)
            tau = 2.0 / (1.0 + (A * A).sum(-2))
            Q = linalg.householder_product(A, tau)
            Q = Q * X.diagonal(dim1=-2, dim2=-1).detach().trunc().unsqueeze(-2)   # (the signs kept on X's diagonal)
        if "base" in self._buffers:
            Q = self.base @ Q
        return Q.mT if wide else Q

    def right_inverse(self, Q):
        """The `original` that makes the weight Q: with trivialization, Q (orthonormalised if it is not orthogonal,
        completed to a square orthogonal matrix if it is not square) becomes `base` and original -I (whose map is
        the identity); without it, the Householder form of Q (geqrf), as torch's."""
        from ... import linalg
        from ...ops.creation import eye, randn
        from ...ops.joining import cat

        if tuple(Q.shape) != self.shape:
            raise ValueError(f"orthogonal: expected a matrix or batch of matrices of shape {self.shape}, got a tensor "
                             f"of shape {tuple(Q.shape)}")
        with no_grad():
            start = Q
            n, k = Q.shape[-2], Q.shape[-1]
            wide = n < k
            if wide:
                Q, n, k = Q.mT, k, n
            if "base" not in self._buffers:
                if self.orthogonal_map != "householder":
                    raise NotImplementedError("orthogonal: it is not possible to assign to the matrix exponential or "
                                              "the Cayley parametrizations when use_trivialization=False")
                A, tau = linalg.geqrf(Q)
                diagonal = A.diagonal(dim1=-2, dim2=-1)
                signs = diagonal.sign() * where(tau == 0.0, tau.new_full((), -1.0), tau.new_ones(()))
                mask = eye(n, k, dtype=A.dtype, device=A.device)   # (X's diagonal holds the reflections' signs)
                A = A * (1 - mask) + mask * signs.unsqueeze(-2)
                return A.mT if wide else A
            if n == k:
                identity = eye(k, dtype=Q.dtype, device=Q.device)
                eps = 10.0 * n * float(np.finfo(np.dtype(Q.dtype)).eps)
                Q = Q.clone() if bool(((Q.mT @ Q - identity).abs() <= eps).all()) else _orthonormalised(Q)
            else:
                filler = randn(*(tuple(Q.shape[:-2]) + (n, n - k)), dtype=Q.dtype, device=Q.device)
                Q = _orthonormalised(cat([Q, filler], -1))
            self.base = Q
            minus_identity = start.new_zeros(start.shape)
            return minus_identity - eye(*start.shape[-2:], dtype=start.dtype, device=start.device)


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """module.<name> (a matrix or a batch of them) kept orthogonal; orthogonal_map "matrix_exp" (the default for a
    square weight), "cayley" or "householder" (the default otherwise). Returns the module."""
    weight = getattr(module, name, None)
    if weight is None or not hasattr(weight, "ndim"):
        raise ValueError(f"orthogonal: module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"orthogonal: expected a matrix or batch of matrices, got a tensor of {weight.ndim} dimensions")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    if orthogonal_map not in _ORTHOGONAL_MAPS:
        raise ValueError(f"orthogonal: orthogonal_map has to be one of {', '.join(_ORTHOGONAL_MAPS)}, got "
                         f"{orthogonal_map!r}")
    parametrize.register_parametrization(module, name, _Orthogonal(weight, orthogonal_map, use_trivialization),
                                         unsafe=True)
    return module
