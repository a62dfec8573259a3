"""torch.distributions.utils: the helpers custom distributions are written with."""
from __future__ import annotations

import numpy as np

from ..autograd.tensor import Tensor

__all__ = ["broadcast_all", "probs_to_logits", "logits_to_probs", "clamp_probs"]


def broadcast_all(*values):
    """The values as tensors of one broadcast shape (numbers take the dtype and device of the first tensor)."""
    from ..ops.creation import tensor
    from ..ops.shape import broadcast_tensors

    like = next((v for v in values if isinstance(v, Tensor)), None)
    if like is None:
        return tuple(tensor(float(v)) for v in values)
    tensors = [v if isinstance(v, Tensor) else tensor(float(v), dtype=like.dtype, device=like.device) for v in values]
    return tuple(broadcast_tensors(*tensors))


def clamp_probs(probs):
    """probs kept inside (0, 1) by the dtype's eps (so that their logs are finite)."""
    eps = float(np.finfo(probs._data.dtype).eps)
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary=False):
    """log(p) for categorical probabilities, log(p / (1 - p)) for binary ones (clamped first)."""
    ps = clamp_probs(probs)
    return ps.log() - (-ps).log1p() if is_binary else ps.log()


def logits_to_probs(logits, is_binary=False):
    """softmax over the last dim for categorical logits, sigmoid for binary ones."""
    return logits.sigmoid() if is_binary else logits.softmax(-1)
