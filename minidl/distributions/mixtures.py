"""More of torch.distributions: mixtures (MixtureSameFamily: a Gaussian mixture, a mixture density network's output)
and the relaxed (Gumbel-softmax / Concrete) distributions of discrete variables (RelaxedBernoulli,
RelaxedOneHotCategorical: differentiable samples, for a discrete VAE).

As the rest of the package: Tensor operations, so log_prob and rsample are differentiable; samples from minidl's
generator.
"""
from __future__ import annotations

import math

import numpy as np

from ..ops import creation
from . import Bernoulli, Categorical, Distribution, _as_tensor

__all__ = ["MixtureSameFamily", "RelaxedBernoulli", "RelaxedOneHotCategorical"]


def _softplus(x):
    from ..nn import functional as F

    return F.softplus(x)


class MixtureSameFamily(Distribution):
    """p(x) = sum_k pi_k p_k(x): mixture weights from `mixture_distribution` (a Categorical over the last batch
    dimension of `component_distribution`, whose components are of one family)."""

    def __init__(self, mixture_distribution, component_distribution, validate_args=None):
        if not isinstance(mixture_distribution, Categorical):
            raise ValueError("MixtureSameFamily: the mixture distribution must be a Categorical")
        comp_batch = tuple(component_distribution.batch_shape)
        if not comp_batch or comp_batch[-1] != mixture_distribution._num_events or \
                tuple(mixture_distribution.batch_shape) != comp_batch[:-1]:
            raise ValueError(f"MixtureSameFamily: the component distribution's batch shape {comp_batch} must end with "
                             f"the mixture's {mixture_distribution._num_events} components, after the mixture's batch "
                             f"shape {tuple(mixture_distribution.batch_shape)}")
        self.mixture_distribution, self.component_distribution = mixture_distribution, component_distribution
        self._event_ndims = len(component_distribution.event_shape)
        super().__init__(comp_batch[:-1], component_distribution.event_shape)

    def log_prob(self, value):
        value = _as_tensor(value)
        x = value.unsqueeze(-1 - self._event_ndims)                           # against every component
        log_prob_x = self.component_distribution.log_prob(x)                 # (..., K)
        log_mix = self.mixture_distribution.logits.log_softmax(-1)
        return (log_prob_x + log_mix).logsumexp(-1)

    def sample(self, sample_shape=()):
        k = self.mixture_distribution.sample(sample_shape)                    # (S..., B...)
        comps = self.component_distribution.sample(sample_shape)              # (S..., B..., K, E...)
        index = k.reshape(tuple(k.shape) + (1,) * (1 + self._event_ndims))
        index = index.expand(tuple(k.shape) + (1,) + tuple(self.event_shape))
        return comps.gather(k.ndim, index).squeeze(k.ndim)

    def _mixture_probs(self):
        """The mixture weights with a trailing 1 per event dim (to weight the components' means and variances)."""
        probs = self.mixture_distribution.probs
        return probs.reshape(tuple(probs.shape) + (1,) * self._event_ndims)

    @property
    def mean(self):
        probs = self._mixture_probs()
        return (probs * self.component_distribution.mean).sum(-1 - self._event_ndims)

    @property
    def variance(self):
        """The law of total variance: E[Var(x | k)] + Var(E[x | k])."""
        probs = self._mixture_probs()
        axis = -1 - self._event_ndims
        mean_cond = self.component_distribution.mean
        mean = (probs * mean_cond).sum(axis, keepdim=True)
        return (probs * self.component_distribution.variance).sum(axis) + \
            (probs * (mean_cond - mean) ** 2).sum(axis)


class RelaxedOneHotCategorical(Distribution):
    """The Concrete / Gumbel-softmax distribution (Maddison et al., Jang et al. 2017): softmax((logits + g) / t) for
    Gumbel noise g, a point of the simplex that tends to a one-hot draw as the temperature t goes to 0. rsample is
    differentiable in the logits."""

    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs=probs, logits=logits)
        self.logits, self.probs = self._categorical.logits, self._categorical.probs
        self.temperature = _as_tensor(temperature, self.logits)
        super().__init__(self._categorical.batch_shape, (self._categorical._num_events,))

    def _log_rsample(self, sample_shape):
        shape = self._extended(sample_shape)
        tiny = float(np.finfo(self.logits._data.dtype).tiny)
        u = creation.rand(shape, dtype=self.logits.dtype, device=self.logits.device).clamp(min=tiny, max=1 - 1e-7)
        scores = (self.logits - (-u.log()).log()) / self.temperature
        return scores - scores.logsumexp(-1, keepdim=True)

    def rsample(self, sample_shape=()):
        return self._log_rsample(sample_shape).exp()

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        """The density on the simplex (ExpRelaxedCategorical's of log(value), minus sum(log value): torch's)."""
        log_value = _as_tensor(value, self.logits).log()
        k = self._categorical._num_events
        log_scale = math.lgamma(k) - self.temperature.log() * (-(k - 1))
        score = self.logits - log_value * self.temperature
        score = (score - score.logsumexp(-1, keepdim=True)).sum(-1)
        return score + log_scale - log_value.sum(-1)


class RelaxedBernoulli(Distribution):
    """The binary Concrete distribution: sigmoid((logits + logistic noise) / t), in (0, 1); rsample differentiable."""

    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self._bernoulli = Bernoulli(probs=probs, logits=logits)
        self.logits, self.probs = self._bernoulli.logits, self._bernoulli.probs
        self.temperature = _as_tensor(temperature, self.logits)
        super().__init__(self._bernoulli.batch_shape)

    def rsample(self, sample_shape=()):
        eps = float(np.finfo(self.logits._data.dtype).eps)
        u = creation.rand(self._extended(sample_shape), dtype=self.logits.dtype,
                          device=self.logits.device).clamp(min=eps, max=1 - eps)
        return ((self.logits + u.log() - (-u).log1p()) / self.temperature).sigmoid()

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        """LogitRelaxedBernoulli's density of logit(value), minus log |d sigmoid| (torch's)."""
        value = _as_tensor(value, self.logits)
        eps = float(np.finfo(self.logits._data.dtype).eps)
        y = value.clamp(min=eps, max=1 - eps)
        x = y.log() - (-y).log1p()                                              # logit
        diff = self.logits - x * self.temperature
        logit_density = self.temperature.log() + diff - 2 * _softplus(diff)
        return logit_density - (-_softplus(-x) - _softplus(x))
