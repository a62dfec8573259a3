"""Dropout: zero each element with probability p while training, scale the rest by 1/(1-p)."""
from __future__ import annotations

from .. import functional as F
from ..module import Module


class Dropout(Module):
    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p (the drop probability) must be in [0, 1], got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zeroes whole channels of an (N, C, L) input with probability p (F.dropout1d)."""

    def forward(self, input):
        return F.dropout1d(input, self.p, self.training)


class Dropout2d(Dropout):
    """Zeroes whole channels of an (N, C, H, W) input with probability p (F.dropout2d)."""

    def forward(self, input):
        return F.dropout2d(input, self.p, self.training)


class Dropout3d(Dropout):
    """Zeroes whole channels of an (N, C, D, H, W) input with probability p (F.dropout3d)."""

    def forward(self, input):
        return F.dropout3d(input, self.p, self.training)
