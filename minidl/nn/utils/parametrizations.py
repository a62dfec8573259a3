"""torch.nn.utils.parametrizations: weight_norm and spectral_norm as parametrizations (parametrize.py), the form
torch recommends over the hooks of weight_norm.py. Their state-dict names are torch's:
`parametrizations.weight.original0` (g) and `original1` (v) for weight norm; `parametrizations.weight.original` and
the power iteration's `parametrizations.weight.0._u`, `._v` for spectral norm."""
from __future__ import annotations

from ...autograd.function import no_grad
from ..module import Module
from . import parametrize
from .weight_norm import _as_matrix, _default_dim, _normalize, norm_except_dim, power_iteration, weight_from_norm

__all__ = ["weight_norm", "spectral_norm"]


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
