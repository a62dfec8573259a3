"""torch.nn.modules and its submodules (torch.nn.modules.batchnorm, .conv, .loss, ...), as real programs import
them: every public name of minidl.nn, and the private base classes and helpers that code subclasses or tests with
isinstance (`nn.modules.batchnorm._BatchNorm` to find the normalisation layers, `nn.modules.loss._Loss` as the base
of a custom loss, `nn.modules.utils._pair`). The runner maps each `torch.nn.modules.*` here."""
from __future__ import annotations

import collections.abc
import itertools

from .composite import _InstanceNorm  # noqa: F401
from .conv import _ConvNd, _ConvTransposeNd  # noqa: F401
from .dropout import Dropout as _DropoutNd  # noqa: F401  (torch's base of the dropout layers)
from .loss import _Loss, _WeightedLoss  # noqa: F401
from .normalization import _BatchNorm, _NormBase  # noqa: F401
from .padding import _PadNd  # noqa: F401
from .pooling import _AdaptiveAvgPoolNd, _AvgPoolNd, _MaxPoolNd, _MaxUnpoolNd  # noqa: F401
from ..module import _addindent  # noqa: F401


def _ntuple(n, name="parse"):
    """x -> a tuple of n copies of x, or tuple(x) when x is already an iterable (torch.nn.modules.utils._ntuple)."""
    def parse(x):
        if isinstance(x, collections.abc.Iterable):
            return tuple(x)
        return tuple(itertools.repeat(x, n))

    parse.__name__ = name
    return parse


_single, _pair, _triple, _quadruple = _ntuple(1, "_single"), _ntuple(2, "_pair"), _ntuple(3, "_triple"), \
    _ntuple(4, "_quadruple")


def _reverse_repeat_tuple(t, n):
    """(a, b) -> (b, b, a, a) for n = 2: the padding order F.pad reads, from a per-dimension tuple."""
    return tuple(x for x in reversed(t) for _ in range(n))


def __getattr__(name):
    from ... import nn

    return getattr(nn, name)
