"""Framework-level switches for the primitive library, named as in `torch.backends`.

    minidl.backends.cudnn.benchmark = True      # algo="auto" measures every convolution algorithm
                                                # once per shape and keeps the fastest
    minidl.backends.cudnn.deterministic = True  # algo="auto" picks only bit-reproducible algorithms

Both map onto the convolution algorithm policy of minidl.primitives (set_convolution_policy):
benchmark -> "prefer_fastest", deterministic -> "deterministic" (it wins when both are set, as in
PyTorch), neither -> the library's own default ("heuristic": a fixed preference order, no measuring).
A layer built with an explicit `algo=` (e.g. Conv2d(..., algo="winograd")) ignores these switches.
"""
from __future__ import annotations

import contextlib

from .primitives import convolution as _conv

__all__ = ["cudnn"]


class _CudnnFlags:
    """The `minidl.backends.cudnn` namespace: benchmark and deterministic flags."""

    def __init__(self):
        self.benchmark = False
        self.deterministic = False

    def policy(self):
        """The convolution policy the flags ask for, or None to leave the library's setting alone."""
        if self.deterministic:
            return "deterministic"
        if self.benchmark:
            return "prefer_fastest"
        return None

    @contextlib.contextmanager
    def flags(self, benchmark=None, deterministic=None):
        """Set the flags inside a `with` block, then restore them."""
        previous = (self.benchmark, self.deterministic)
        if benchmark is not None:
            self.benchmark = bool(benchmark)
        if deterministic is not None:
            self.deterministic = bool(deterministic)
        try:
            yield self
        finally:
            self.benchmark, self.deterministic = previous

    def __repr__(self):
        return f"cudnn(benchmark={self.benchmark}, deterministic={self.deterministic})"


cudnn = _CudnnFlags()


def _conv_policy_for(algo: str):
    """The policy a convolution with this `algo` should run under (None: the library's own setting).

    Read once when the op is recorded, so its backward uses the same policy as its forward."""
    return cudnn.policy() if algo == "auto" else None


def _policy_context(policy):
    """A `with` context that applies `policy` (None: nothing changes)."""
    if policy is None:
        return contextlib.nullcontext()
    _, workspace_limit = _conv.get_convolution_policy()
    return _conv.convolution_policy(policy, workspace_limit if policy == "prefer_fastest" else None)
