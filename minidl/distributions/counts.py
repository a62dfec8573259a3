"""Counts from torch.distributions: Poisson, Geometric, Binomial, NegativeBinomial, Multinomial.

log_prob is written with lgamma (so it is differentiable in the parameters, and takes float counts as torch does);
samples are float counts. Poisson's and Binomial's samples are NumPy's / CuPy's draws (on the GPU CuPy's generator,
which cuda.get_rng_state does not hold), NegativeBinomial's a gamma-Poisson mixture, Multinomial's a sum of
categorical draws.
"""
from __future__ import annotations

import numpy as np

from .. import _device, random
from ..autograd.tensor import Tensor
from ..ops import creation
from . import Bernoulli, Categorical, Distribution, _as_tensor

__all__ = ["Poisson", "Geometric", "Binomial", "NegativeBinomial", "Multinomial"]


def _softplus(x):
    from ..nn import functional as F

    return F.softplus(x)


def _rng(device, what):
    """The generator of device's draws that minidl's Philox stream does not make (binomial, poisson)."""
    return random.cpu_generator() if device.type == "cpu" else _device.require_cuda(what).random


class Poisson(Distribution):
    """Poisson(rate): rate^k exp(-rate) / k! on k = 0, 1, 2, ... (samples are float counts, as torch's)."""

    def __init__(self, rate, validate_args=None):
        self.rate = _as_tensor(rate)
        super().__init__(self.rate.shape)

    def sample(self, sample_shape=()):
        r = self.rate.detach().expand(self._extended(sample_shape)).contiguous()._data
        return Tensor._make(random.poisson_array(r, r.dtype, self.rate.device))

    def log_prob(self, value):
        value = _as_tensor(value, self.rate)
        return value.xlogy(self.rate) - self.rate - (value + 1).lgamma()

    @property
    def mean(self):
        return self.rate

    @property
    def variance(self):
        return self.rate


class Geometric(Distribution):
    """The number of failures before the first success (k = 0, 1, ...), success probability `probs` (or sigmoid of
    `logits`): P(k) = (1 - p)^k p."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._bernoulli = Bernoulli(probs=probs, logits=logits)
        self.probs, self.logits = self._bernoulli.probs, self._bernoulli.logits
        super().__init__(self.probs.shape)

    def sample(self, sample_shape=()):
        tiny = float(np.finfo(self.probs._data.dtype).tiny)
        u = creation.rand(self._extended(sample_shape), dtype=self.probs.dtype,
                          device=self.probs.device).clamp(min=tiny)
        return (u.log() / (-self.probs.detach()).log1p()).floor()

    def log_prob(self, value):
        value = _as_tensor(value, self.probs)
        p = self.probs
        return value * (-p).log1p() + p.log()

    def entropy(self):
        return self._bernoulli.entropy() / self.probs

    @property
    def mean(self):
        return 1.0 / self.probs - 1.0

    @property
    def variance(self):
        return (1.0 / self.probs - 1.0) / self.probs


class Binomial(Distribution):
    """The number of successes in total_count trials of probability `probs` (or sigmoid of `logits`)."""

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        self._bernoulli = Bernoulli(probs=probs, logits=logits)
        self.probs, self.logits = self._bernoulli.probs, self._bernoulli.logits
        count = _as_tensor(total_count, self.probs)
        shape = tuple(np.broadcast_shapes(count.shape, self.probs.shape))
        self.total_count, self.probs, self.logits = count.expand(shape), self.probs.expand(shape), \
            self.logits.expand(shape)
        super().__init__(shape)

    def sample(self, sample_shape=()):
        shape = self._extended(sample_shape)
        n = self.total_count.detach().expand(shape).contiguous()._data
        p = self.probs.detach().expand(shape).contiguous()._data
        draws = _rng(self.probs.device, "Binomial.sample").binomial(n.astype(np.int64), p)
        return Tensor._make(draws.astype(p.dtype))

    def log_prob(self, value):
        k = _as_tensor(value, self.probs)
        n, logits = self.total_count, self.logits
        log_comb = (n + 1).lgamma() - (k + 1).lgamma() - (n - k + 1).lgamma()
        # k log p + (n - k) log(1 - p) = k logits - n softplus(logits), written stably
        return log_comb + k * logits - n * _softplus(logits)

    @property
    def mean(self):
        return self.total_count * self.probs

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)


class NegativeBinomial(Distribution):
    """The number of successes before total_count failures, success probability `probs` (or sigmoid(`logits`)):
    log P(k) = lgamma(k + r) - lgamma(k + 1) - lgamma(r) + r log(1 - p) + k log p (torch's parameterisation).
    Sampled as Poisson(Gamma(r, (1 - p) / p))."""

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        self._bernoulli = Bernoulli(probs=probs, logits=logits)
        count = _as_tensor(total_count, self._bernoulli.probs)
        shape = tuple(np.broadcast_shapes(count.shape, self._bernoulli.probs.shape))
        self.total_count = count.expand(shape)
        self.probs, self.logits = self._bernoulli.probs.expand(shape), self._bernoulli.logits.expand(shape)
        super().__init__(shape)

    def log_prob(self, value):
        from ..nn import functional as F
        from ..ops import where

        k, r = _as_tensor(value, self.logits), self.total_count
        unnormalized = r * F.logsigmoid(-self.logits) + k * F.logsigmoid(self.logits)
        normalization = -(r + k).lgamma() + (1.0 + k).lgamma() + r.lgamma()
        return unnormalized - where(r + k == 0, normalization.new_zeros(()), normalization)

    def sample(self, sample_shape=()):
        from .continuous import Gamma

        rate = Gamma(self.total_count.detach(), (-self.logits.detach()).exp()).sample(sample_shape)
        return Poisson(rate).sample()

    @property
    def mean(self):
        return self.total_count * self.logits.exp()

    @property
    def variance(self):
        return self.mean / (-self.logits).sigmoid()


class Multinomial(Distribution):
    """Counts of total_count draws from Categorical(probs | logits), over the last dimension (event_shape (K,))."""

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if isinstance(total_count, Tensor) or not float(total_count).is_integer():
            raise NotImplementedError("Multinomial: total_count must be an int (one count for the whole batch), as "
                                      "torch's")
        self.total_count = int(total_count)
        self._categorical = Categorical(probs=probs, logits=logits)
        self.probs, self.logits = self._categorical.probs, self._categorical.logits
        super().__init__(self._categorical.batch_shape, (self._categorical._num_events,))

    def sample(self, sample_shape=()):
        from ..nn import functional as F

        draws = self._categorical.sample((self.total_count,) + tuple(sample_shape))   # (n, S..., B...)
        return F.one_hot(draws, self.event_shape[0]).sum(0).to(self.probs.dtype)

    def log_prob(self, value):
        from ..ops import where

        value = _as_tensor(value, self.logits)
        # 0 * log 0 is 0: a category of zero probability drawn zero times adds nothing
        terms = where((value == 0) & self.logits.isinf(), value.new_zeros(()), value * self.logits)
        return (value.sum(-1) + 1).lgamma() - (value + 1).lgamma().sum(-1) + terms.sum(-1)

    @property
    def mean(self):
        return self.probs * self.total_count

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)
