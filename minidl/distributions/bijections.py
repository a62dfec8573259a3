"""More of torch.distributions.transforms (the ones with a vector or matrix event), and the two constraint registries
that map a constraint to a transform from unconstrained space (torch.distributions.biject_to / transform_to): how
variational and Bayesian programs keep a parameter on its support while optimising an unconstrained tensor,

    q = biject_to(constraints.simplex)(unconstrained)        # a point of the simplex, differentiable

Each transform's formula is torch's (written as tensor ops, so gradients come from the tape):
- StickBreakingTransform: R^(K-1) -> the K-simplex, z_i = sigmoid(x_i - log(K - i)) broken off the remaining stick;
  a bijection with a log-determinant.
- SoftmaxTransform: softmax, inverse log (not a bijection: no log-determinant, as torch's).
- SoftplusTransform: y = softplus(x), x = y + log(-expm1(-y)), log |dy/dx| = -softplus(-x).
- LowerCholeskyTransform: the strict lower triangle kept, the diagonal exponentiated; PositiveDefiniteTransform:
  L L^T of that L.
- ReshapeTransform, IndependentTransform, CatTransform, StackTransform, CumulativeDistributionTransform.
"""
from __future__ import annotations

import math

from . import constraints
from .transforms import (
    AffineTransform, ComposeTransform, ExpTransform, SigmoidTransform, Transform, TransformedDistribution,
    _sum_rightmost,
)


def _F():
    from ..nn import functional as F

    return F


identity_transform = ComposeTransform([])   # (torch's: the empty composition)


class SoftmaxTransform(Transform):
    """x -> softmax(x) over the last dimension; inverse log (up to a constant): not a bijection."""

    bijective = False
    event_dim = 1

    def _call(self, x):
        logprobs = x - x.max(-1, keepdim=True).values
        probs = logprobs.exp()
        return probs / probs.sum(-1, keepdim=True)

    def _inverse(self, y):
        return y.log()


class StickBreakingTransform(Transform):
    """R^(K-1) -> the K-simplex by stick breaking (a bijection, unlike softmax)."""

    event_dim = 1

    @staticmethod
    def _offset(n, like):
        from ..ops.creation import arange

        return (n + 1 - arange(1, n + 1, device=like.device).type(like.dtype)).log()

    def _call(self, x):
        F = _F()
        z = (x - self._offset(x.shape[-1], x)).sigmoid()
        z_cumprod = (1 - z).cumprod(-1)
        return F.pad(z, [0, 1], value=1) * F.pad(z_cumprod, [1, 0], value=1)

    def _inverse(self, y):
        import numpy as np

        y_crop = y[..., :-1]
        sf = (1 - y_crop.cumsum(-1)).clamp(min=float(np.finfo(y._data.dtype).tiny))
        return y_crop.log() - sf.log() + self._offset(y_crop.shape[-1], y)

    def log_abs_det_jacobian(self, x, y):
        x = x - self._offset(x.shape[-1], x)
        return (-x + _F().logsigmoid(x) + y[..., :-1].log()).sum(-1)

    def forward_shape(self, shape):
        return tuple(shape[:-1]) + (shape[-1] + 1,)

    def inverse_shape(self, shape):
        return tuple(shape[:-1]) + (shape[-1] - 1,)


class SoftplusTransform(Transform):
    def _call(self, x):
        return _F().softplus(x)

    def _inverse(self, y):
        return (-(-y).expm1()).log() + y

    def log_abs_det_jacobian(self, x, y):
        return -_F().softplus(-x)


class LowerCholeskyTransform(Transform):
    """A square matrix -> a lower-triangular one with a positive diagonal (the diagonal exponentiated)."""

    event_dim = 2

    def _call(self, x):
        return x.tril(-1) + x.diagonal(dim1=-2, dim2=-1).exp().diag_embed()

    def _inverse(self, y):
        return y.tril(-1) + y.diagonal(dim1=-2, dim2=-1).log().diag_embed()


class PositiveDefiniteTransform(Transform):
    """A square matrix -> a symmetric positive-definite one, L L^T with L = LowerCholeskyTransform(x)."""

    event_dim = 2

    def _call(self, x):
        L = LowerCholeskyTransform()(x)
        return L @ L.mT

    def _inverse(self, y):
        from .. import linalg

        return LowerCholeskyTransform().inv(linalg.cholesky(y))


class ReshapeTransform(Transform):
    """The rightmost dimensions reshaped from in_shape to out_shape (same number of elements)."""

    def __init__(self, in_shape, out_shape, cache_size=0):
        super().__init__(cache_size)
        self.in_shape, self.out_shape = tuple(in_shape), tuple(out_shape)
        if math.prod(self.in_shape) != math.prod(self.out_shape):
            raise ValueError(f"ReshapeTransform: in_shape {self.in_shape} and out_shape {self.out_shape} have "
                             "different numbers of elements")
        self.event_dim = len(self.in_shape)

    def _call(self, x):
        return x.reshape(tuple(x.shape[:x.ndim - len(self.in_shape)]) + self.out_shape)

    def _inverse(self, y):
        return y.reshape(tuple(y.shape[:y.ndim - len(self.out_shape)]) + self.in_shape)

    def log_abs_det_jacobian(self, x, y):
        from ..ops.creation import zeros

        return zeros(tuple(x.shape[:x.ndim - len(self.in_shape)]), dtype=x.dtype, device=x.device)

    def forward_shape(self, shape):
        return tuple(shape[:len(shape) - len(self.in_shape)]) + self.out_shape

    def inverse_shape(self, shape):
        return tuple(shape[:len(shape) - len(self.out_shape)]) + self.in_shape


class IndependentTransform(Transform):
    """base_transform with its reinterpreted_batch_ndims rightmost batch dimensions made part of the event."""

    def __init__(self, base_transform, reinterpreted_batch_ndims, cache_size=0):
        super().__init__(cache_size)
        self.base_transform, self.reinterpreted_batch_ndims = base_transform, reinterpreted_batch_ndims
        self.event_dim = base_transform.event_dim + reinterpreted_batch_ndims
        self.bijective, self.sign = base_transform.bijective, base_transform.sign

    def _call(self, x):
        return self.base_transform(x)

    def _inverse(self, y):
        return self.base_transform.inv(y)

    def log_abs_det_jacobian(self, x, y):
        return _sum_rightmost(self.base_transform.log_abs_det_jacobian(x, y), self.reinterpreted_batch_ndims)


class CatTransform(Transform):
    """transforms[i] applied to the i-th slice of x along dim (slices of lengths, 1 each by default)."""

    def __init__(self, tseq, dim=0, lengths=None, cache_size=0):
        super().__init__(cache_size)
        self.transforms, self.dim = list(tseq), dim
        self.lengths = list(lengths) if lengths is not None else [1] * len(self.transforms)
        if len(self.lengths) != len(self.transforms):
            raise ValueError("CatTransform: one length per transform")
        self.event_dim = max((t.event_dim for t in self.transforms), default=0)

    def _pieces(self, x):
        return x.split(self.lengths, dim=self.dim)

    def _call(self, x):
        from ..ops.joining import cat

        return cat([t(p) for t, p in zip(self.transforms, self._pieces(x))], dim=self.dim)

    def _inverse(self, y):
        from ..ops.joining import cat

        return cat([t.inv(p) for t, p in zip(self.transforms, self._pieces(y))], dim=self.dim)

    def log_abs_det_jacobian(self, x, y):
        from ..ops.joining import cat

        parts = [_sum_rightmost(t.log_abs_det_jacobian(a, b), self.event_dim - t.event_dim)
                 for t, a, b in zip(self.transforms, self._pieces(x), self._pieces(y))]
        dim = self.dim if self.dim < 0 else self.dim - x.ndim
        if dim >= -self.event_dim:   # the split dimension is part of the event: its terms add up
            return sum(parts)
        return cat(parts, dim=dim + self.event_dim)


class StackTransform(Transform):
    """transforms[i] applied to x.select(dim, i), the results stacked along dim."""

    def __init__(self, tseq, dim=0, cache_size=0):
        super().__init__(cache_size)
        self.transforms, self.dim = list(tseq), dim

    def _call(self, x):
        from ..ops.joining import stack

        return stack([t(x.select(self.dim, i)) for i, t in enumerate(self.transforms)], dim=self.dim)

    def _inverse(self, y):
        from ..ops.joining import stack

        return stack([t.inv(y.select(self.dim, i)) for i, t in enumerate(self.transforms)], dim=self.dim)

    def log_abs_det_jacobian(self, x, y):
        from ..ops.joining import stack

        return stack([t.log_abs_det_jacobian(x.select(self.dim, i), y.select(self.dim, i))
                      for i, t in enumerate(self.transforms)], dim=self.dim)


class CumulativeDistributionTransform(Transform):
    """y = distribution.cdf(x), inverse icdf, log |dy/dx| = distribution.log_prob(x)."""

    def __init__(self, distribution, cache_size=0):
        super().__init__(cache_size)
        self.distribution = distribution

    def _call(self, x):
        return self.distribution.cdf(x)

    def _inverse(self, y):
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x, y):
        return self.distribution.log_prob(x)


class ConstraintRegistry:
    """constraint -> a transform from unconstrained space onto it (torch's biject_to and transform_to).
    register(constraint_or_its_class, factory) adds one, also as a decorator."""

    def __init__(self):
        self._registry = {}

    def register(self, constraint, factory=None):
        if factory is None:
            return lambda f: self.register(constraint, f)
        key = constraint if isinstance(constraint, type) else type(constraint)
        self._registry[key] = factory
        return factory

    def __call__(self, constraint):
        for cls in type(constraint).__mro__:
            if cls in self._registry:
                return self._registry[cls](constraint)
        raise NotImplementedError(f"Cannot transform {type(constraint).__name__} constraints")


biject_to = ConstraintRegistry()
transform_to = ConstraintRegistry()


def _lower(c):   # (torch's: positive is greater_than(0), so it gets the composition too)
    return ComposeTransform([ExpTransform(), AffineTransform(c.lower_bound, 1)])


def _interval(c):   # (the unit interval is the sigmoid itself, as in torch's registry)
    lower, upper = c.lower_bound, c.upper_bound
    if not hasattr(lower, "shape") and not hasattr(upper, "shape") and lower == 0 and upper == 1:
        return SigmoidTransform()
    return ComposeTransform([SigmoidTransform(), AffineTransform(lower, upper - lower)])


for _registry in (biject_to, transform_to):
    _registry.register(constraints._Real, lambda c: identity_transform)
    _registry.register(constraints._GreaterThan, _lower)
    _registry.register(constraints._GreaterThanEq, _lower)
    _registry.register(constraints._LessThan,
                       lambda c: ComposeTransform([ExpTransform(), AffineTransform(c.upper_bound, -1)]))
    _registry.register(constraints._Interval, _interval)
transform_to.register(constraints._LowerCholesky, lambda c: LowerCholeskyTransform())   # (no bijection: transform_to
transform_to.register(constraints._PositiveDefinite, lambda c: PositiveDefiniteTransform())   # only, as torch's)
biject_to.register(constraints._Simplex, lambda c: StickBreakingTransform())
transform_to.register(constraints._Simplex, lambda c: SoftmaxTransform())
biject_to.register(constraints._IndependentConstraint, lambda c: IndependentTransform(
    biject_to(c.base_constraint), c.reinterpreted_batch_ndims))
transform_to.register(constraints._IndependentConstraint, lambda c: IndependentTransform(
    transform_to(c.base_constraint), c.reinterpreted_batch_ndims))


class LogisticNormal(TransformedDistribution):
    """The distribution on the simplex of StickBreakingTransform(x), x ~ Normal(loc, scale) over the last dimension
    (torch.distributions.LogisticNormal; K - 1 parameters for K categories)."""

    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        from . import Independent, Normal

        base = Normal(loc, scale)
        if not base.batch_shape:
            base = Normal(loc.reshape(1) if hasattr(loc, "reshape") else loc,
                          scale.reshape(1) if hasattr(scale, "reshape") else scale)
        super().__init__(Independent(base, 1), StickBreakingTransform())

    @property
    def loc(self):
        return self.base_dist.base_dist.loc

    @property
    def scale(self):
        return self.base_dist.base_dist.scale
