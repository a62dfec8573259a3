"""torch.distributions.transforms and TransformedDistribution: a distribution of y = f(x) for x from a base
distribution and an invertible f, with the density by the change of variables,

    log p_Y(y) = log p_X(f^-1(y)) - log |det df/dx|   at x = f^-1(y).

Soft actor-critic's squashed Gaussian policy is the common use: TransformedDistribution(Normal(mu, sigma),
[TanhTransform(cache_size=1)]). rsample is the base's rsample pushed through the transforms (differentiable), and
log_prob of such a sample takes its x back from the cache (with cache_size=1) instead of atanh(y), which is not finite
at |y| = 1 where tanh rounds a large x.

Transforms: ExpTransform, AffineTransform(loc, scale, event_dim=0), SigmoidTransform, TanhTransform, PowerTransform,
AbsTransform (not invertible), ComposeTransform(parts); each with __call__, inv (a transform itself, or t.inv(y)),
log_abs_det_jacobian(x, y), sign, event_dim. Their domains and codomains (torch's constraints) are not here.
"""
from __future__ import annotations

import math

from . import Distribution, _as_tensor

__all__ = ["Transform", "ExpTransform", "AffineTransform", "SigmoidTransform", "TanhTransform", "PowerTransform",
           "AbsTransform", "ComposeTransform", "TransformedDistribution"]


def _softplus(x):
    from ..nn import functional as F

    return F.softplus(x)


def _sum_rightmost(value, dims: int):
    return value if dims <= 0 else value.reshape(value.shape[:value.ndim - dims] + (-1,)).sum(-1)


class Transform:
    """y = f(x), invertible (bijective) unless said otherwise. cache_size=1 keeps the last (x, y): inv(y) of that
    very y tensor returns its x, and calling on that x returns its y."""

    bijective = True
    sign = 1
    event_dim = 0

    def __init__(self, cache_size=0):
        if cache_size not in (0, 1):
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size = cache_size
        self._cached = (None, None)

    def __call__(self, x):
        if self._cache_size and x is self._cached[0]:
            return self._cached[1]
        y = self._call(x)
        if self._cache_size:
            self._cached = (x, y)
        return y

    def _inv_call(self, y):
        if self._cache_size and y is self._cached[1]:
            return self._cached[0]
        x = self._inverse(y)
        if self._cache_size:
            self._cached = (x, y)
        return x

    @property
    def inv(self):
        """The inverse transform (x = inv(y)); inv.inv is this one."""
        return _InverseTransform(self)

    def _call(self, x):
        raise NotImplementedError(f"{type(self).__name__} does not define its forward map")

    def _inverse(self, y):
        raise NotImplementedError(f"{type(self).__name__} is not invertible")

    def log_abs_det_jacobian(self, x, y):
        raise NotImplementedError(f"{type(self).__name__} does not define log_abs_det_jacobian")

    def forward_shape(self, shape):
        """The shape of y for an x of `shape` (the same, unless the transform changes it)."""
        return tuple(shape)

    def inverse_shape(self, shape):
        return tuple(shape)

    def __repr__(self):
        return f"{type(self).__name__}()"


class _InverseTransform(Transform):
    def __init__(self, transform):
        super().__init__()
        self._inv = transform
        self.event_dim, self.sign, self.bijective = transform.event_dim, transform.sign, transform.bijective

    def __call__(self, y):
        return self._inv._inv_call(y)

    @property
    def inv(self):
        return self._inv

    def log_abs_det_jacobian(self, x, y):
        return -self._inv.log_abs_det_jacobian(y, x)


class ExpTransform(Transform):
    def _call(self, x):
        return x.exp()

    def _inverse(self, y):
        return y.log()

    def log_abs_det_jacobian(self, x, y):
        return x


class AffineTransform(Transform):
    """y = loc + scale * x (event_dim: how many rightmost dimensions form one event, whose log-det terms add up)."""

    def __init__(self, loc, scale, event_dim=0, cache_size=0):
        super().__init__(cache_size)
        self.loc, self.scale, self.event_dim = loc, scale, event_dim

    @property
    def sign(self):
        return self.scale.sign() if hasattr(self.scale, "sign") else (1 if self.scale >= 0 else -1)

    def _call(self, x):
        return self.loc + self.scale * x

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x, y):
        scale = self.scale if hasattr(self.scale, "abs") else _as_tensor(float(self.scale), x)
        result = (scale.abs().log() + x * 0)   # (broadcast to x's shape)
        return _sum_rightmost(result, self.event_dim)


class SigmoidTransform(Transform):
    def _call(self, x):
        return x.sigmoid()

    def _inverse(self, y):
        import numpy as np

        eps = float(np.finfo(y._data.dtype).eps)   # (y clamped inside (0, 1), as torch's)
        y = y.clamp(min=eps, max=1 - eps)
        return y.log() - (-y).log1p()

    def log_abs_det_jacobian(self, x, y):
        return -_softplus(-x) - _softplus(x)


class TanhTransform(Transform):
    """y = tanh(x); log |dy/dx| = 2 (log 2 - x - softplus(-2x)) (the stable form torch uses)."""

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        return y.atanh()

    def log_abs_det_jacobian(self, x, y):
        return 2.0 * (math.log(2.0) - x - _softplus(-2.0 * x))


class PowerTransform(Transform):
    def __init__(self, exponent, cache_size=0):
        super().__init__(cache_size)
        self.exponent = exponent

    def _call(self, x):
        return x.pow(self.exponent)

    def _inverse(self, y):
        return y.pow(1 / self.exponent)

    def log_abs_det_jacobian(self, x, y):
        return (self.exponent * y / x).abs().log()


class AbsTransform(Transform):
    bijective = False

    def _call(self, x):
        return x.abs()

    def _inverse(self, y):
        return y


class ComposeTransform(Transform):
    """parts applied in order: y = parts[-1](...parts[0](x))."""

    def __init__(self, parts, cache_size=0):
        super().__init__(cache_size)
        self.parts = list(parts)
        self.event_dim = max((p.event_dim for p in self.parts), default=0)

    @property
    def sign(self):
        sign = 1
        for p in self.parts:
            sign = sign * p.sign
        return sign

    def _call(self, x):
        for p in self.parts:
            x = p(x)
        return x

    def _inverse(self, y):
        for p in reversed(self.parts):
            y = p.inv(y)
        return y

    def log_abs_det_jacobian(self, x, y):
        if not self.parts:   # the identity: a zero per element
            return x * 0
        total = 0
        for p in self.parts:
            y_p = p(x)
            total = total + _sum_rightmost(p.log_abs_det_jacobian(x, y_p), self.event_dim - p.event_dim)
            x = y_p
        return total


class TransformedDistribution(Distribution):
    """The distribution of y = transforms[-1](... transforms[0](x)) for x ~ base_distribution."""

    def __init__(self, base_distribution, transforms, validate_args=None):
        self.base_dist = base_distribution
        self.transforms = [transforms] if isinstance(transforms, Transform) else list(transforms)
        for t in self.transforms:
            if not isinstance(t, Transform):
                raise ValueError(f"transforms must be a Transform or a list of Transforms, got {type(t).__name__}")
        event_dim = max([len(base_distribution.event_shape)] + [t.event_dim for t in self.transforms])
        shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        for t in self.transforms:   # (a stick-breaking transform adds one to the last dimension)
            shape = t.forward_shape(shape)
        cut = len(shape) - event_dim
        super().__init__(shape[:cut], shape[cut:])

    @property
    def has_rsample(self):
        return self.base_dist.has_rsample

    def sample(self, sample_shape=()):
        x = self.base_dist.sample(sample_shape)
        for t in self.transforms:
            x = t(x)
        return x.detach()

    def rsample(self, sample_shape=()):
        x = self.base_dist.rsample(sample_shape)
        for t in self.transforms:
            x = t(x)
        return x

    def log_prob(self, value):
        y = _as_tensor(value)
        event_dim = len(self.event_shape)
        log_prob = 0.0
        for t in reversed(self.transforms):
            x = t.inv(y)
            log_prob = log_prob - _sum_rightmost(t.log_abs_det_jacobian(x, y), event_dim - t.event_dim)
            y = x
        return log_prob + _sum_rightmost(self.base_dist.log_prob(y),
                                         event_dim - len(self.base_dist.event_shape))


from .bijections import (  # noqa: E402,F401  (the vector and matrix transforms, and identity_transform)
    CatTransform, CumulativeDistributionTransform, IndependentTransform, LowerCholeskyTransform,
    PositiveDefiniteTransform, ReshapeTransform, SoftmaxTransform, SoftplusTransform, StackTransform,
    StickBreakingTransform, identity_transform,
)
