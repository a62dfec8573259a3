"""Weight normalisation (Salimans & Kingma 2016) and spectral normalisation (Miyato et al. 2018) of a layer's
weight, in torch's two APIs:

- the hooks (torch.nn.utils.weight_norm / spectral_norm, and their remove_*): the weight parameter is replaced by
  `weight_g` and `weight_v` (or `weight_orig` and the power iteration's `weight_u`, `weight_v` buffers), and a
  forward pre-hook sets `module.weight` from them before every call;
- the parametrizations (torch.nn.utils.parametrizations.weight_norm / spectral_norm, on parametrize.py): the weight
  becomes a property computed from `parametrizations.weight.original0/original1` (or `.original`).

Either way w = g v / ||v|| (the norm over every dimension but `dim`, or over all of v when dim is None), or
w = W / sigma(W) with sigma estimated by power iteration on W as a matrix (dim first, the rest flattened), one step
per training-mode call. The gradients flow through these expressions like any other.
"""
from __future__ import annotations

from ...autograd.function import no_grad
from ..functional import normalize
from ..module import Parameter


def norm_except_dim(v, dim):
    """The 2-norm of v over every dimension but `dim`, shaped to broadcast against v (torch.norm_except_dim); over
    all of v, a 0-d tensor, when dim is None or -1 (torch's convention for "the whole tensor")."""
    if dim is None or dim == -1:
        return (v * v).sum().sqrt()
    dim = dim % v.ndim
    others = tuple(d for d in range(v.ndim) if d != dim)
    return (v * v).sum(dim=others, keepdim=True).sqrt() if others else v.abs()


def weight_from_norm(v, g, dim):
    """w = g * v / ||v|| (torch._weight_norm)."""
    return v * (g / norm_except_dim(v, dim))


class WeightNorm:
    """The forward pre-hook of weight_norm (torch.nn.utils.weight_norm.WeightNorm)."""

    def __init__(self, name, dim):
        self.name, self.dim = name, dim

    def compute_weight(self, module):
        return weight_from_norm(getattr(module, self.name + "_v"), getattr(module, self.name + "_g"), self.dim)

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module))

    def remove(self, module):
        with no_grad():
            weight = self.compute_weight(module).detach()
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight))


def weight_norm(module, name="weight", dim=0):
    """Reparametrize module.<name> as g * v / ||v|| (parameters <name>_g, <name>_v); returns the module."""
    if isinstance(_hooks(module).get(name), WeightNorm):
        raise RuntimeError(f"weight_norm: cannot register two weight_norm hooks on the same parameter {name}")
    weight = getattr(module, name)
    if not isinstance(weight, Parameter):
        raise TypeError(f"weight_norm: module.{name} must be a Parameter, got {type(weight).__name__}")
    fn = WeightNorm(name, dim)
    del module._parameters[name]
    module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, dim).detach()))
    module.register_parameter(name + "_v", Parameter(weight.detach()))
    setattr(module, name, fn.compute_weight(module))
    fn.handle = module.register_forward_pre_hook(fn)
    _hooks(module)[name] = fn
    return module


def _remove(module, name, kind, what):
    hook = _hooks(module).get(name)
    if not isinstance(hook, kind):
        raise ValueError(f"{what} of '{name}' not found in {module}")
    hook.remove(module)
    hook.handle.remove()
    del _hooks(module)[name]
    return module


def remove_weight_norm(module, name="weight"):
    """Back to one parameter <name> holding g * v / ||v||."""
    return _remove(module, name, WeightNorm, "weight_norm")


def _as_matrix(weight, dim):
    """The weight as a matrix for the power iteration: dimension `dim` first, the rest flattened."""
    if dim != 0:
        weight = weight.permute(dim, *[d for d in range(weight.ndim) if d != dim])
    return weight.reshape(weight.shape[0], -1)


def _normalize(x, eps):
    return normalize(x, dim=0, eps=eps)


def power_iteration(weight_mat, u, v, n_power_iterations, eps, u_first=False):
    """u, v after n steps of v = W^T u / |W^T u|, u = W v / |W v| (no gradient; copies of the updated vectors).
    u_first: u's update first in each step (the parametrization's order; the hook's updates v first)."""
    with no_grad():
        for _ in range(n_power_iterations):
            if u_first:
                u = _normalize(weight_mat @ v, eps)
            v = _normalize(weight_mat.t() @ u, eps)
            if not u_first:
                u = _normalize(weight_mat @ v, eps)
    return u.clone(), v.clone()


class SpectralNorm:
    """The forward pre-hook of spectral_norm (torch.nn.utils.spectral_norm.SpectralNorm): in training mode one
    power-iteration step per call updates the buffers <name>_u, <name>_v in place; the weight is
    <name>_orig / (u^T W v)."""

    def __init__(self, name="weight", n_power_iterations=1, dim=0, eps=1e-12):
        if n_power_iterations <= 0:
            raise ValueError(f"spectral_norm: expected n_power_iterations to be positive, got {n_power_iterations}")
        self.name, self.n_power_iterations, self.dim, self.eps = name, n_power_iterations, dim, eps

    def compute_weight(self, module, do_power_iteration):
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        weight_mat = _as_matrix(weight, self.dim)
        if do_power_iteration:
            new_u, new_v = power_iteration(weight_mat, u, v, self.n_power_iterations, self.eps)
            with no_grad():
                u.copy_(new_u)
                v.copy_(new_v)
            u, v = new_u, new_v
        sigma = (u * (weight_mat @ v)).sum()
        return weight / sigma

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))

    def remove(self, module):
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False).detach()
        delattr(module, self.name)
        del module._parameters[self.name + "_orig"]
        del module._buffers[self.name + "_u"]
        del module._buffers[self.name + "_v"]
        setattr(module, self.name, Parameter(weight))


def _default_dim(module):
    """1 for a transposed convolution (its weight is (in, out, ...): the output channels second), else 0."""
    from ..layers.conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d

    return 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0


def _hooks(module):
    """The normalisation hooks of a module by parameter name (kept beside the module's forward pre-hooks, which
    hold the same objects)."""
    return module.__dict__.setdefault("_norm_hooks", {})


def spectral_norm(module, name="weight", n_power_iterations=1, eps=1e-12, dim=None):
    """Divide module.<name> by its largest singular value, estimated by power iteration (parameter <name>_orig,
    buffers <name>_u and <name>_v, drawn from the normal distribution and normalised); returns the module."""
    if isinstance(_hooks(module).get(name), SpectralNorm):
        raise RuntimeError(f"spectral_norm: cannot register two spectral_norm hooks on the same parameter {name}")
    dim = _default_dim(module) if dim is None else dim
    fn = SpectralNorm(name, n_power_iterations, dim, eps)
    weight = module._parameters[name]
    with no_grad():
        weight_mat = _as_matrix(weight, dim)
        h, w = weight_mat.shape
        u = _normalize(weight.new_empty(h).normal_(0, 1), eps)
        v = _normalize(weight.new_empty(w).normal_(0, 1), eps)
    del module._parameters[name]
    module.register_parameter(name + "_orig", weight)
    setattr(module, name, weight.detach())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    fn.handle = module.register_forward_pre_hook(fn)
    _hooks(module)[name] = fn
    return module


def remove_spectral_norm(module, name="weight"):
    """Back to one parameter <name> holding the normalised weight."""
    return _remove(module, name, SpectralNorm, "spectral_norm")
