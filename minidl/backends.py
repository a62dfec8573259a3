"""Framework-level switches for the primitive library, named as in `torch.backends`.

    minidl.backends.cudnn.benchmark = True      # algo="auto" measures every convolution algorithm
                                                # once per shape and keeps the fastest
    minidl.backends.cudnn.deterministic = True  # algo="auto" picks only bit-reproducible algorithms

Both map onto the convolution algorithm policy of minidl.primitives (set_convolution_policy):
benchmark -> "prefer_fastest", deterministic -> "deterministic" (it wins when both are set, as in
PyTorch), neither -> the library's own default ("heuristic": a fixed preference order, no measuring).
A layer built with an explicit `algo=` (e.g. Conv2d(..., algo="winograd")) ignores these switches.

    minidl.backends.cuda.use_cublas = True      # Linear's matrix products on cuBLAS (through CuPy)
                                                # instead of minidl's own SGEMM (kernels/gemm.cu)
    minidl.backends.cuda.check_indices = True   # validate class targets / embedding indices on the
                                                # host (one GPU sync per call) and raise at once

`use_cublas` exists so that the two GEMMs can be compared (benchmarks/bench_gpu_primitives.py) and
so that float64 layers run on the GPU (our SGEMM is float32; float64 always goes to cuBLAS).

`check_indices`: on the CPU, cross_entropy / nll_loss / embedding always check their integer
indices and raise a ValueError naming the bad value. On the GPU that check would copy a flag back to
the host and wait for the GPU in every training step, so by default it runs on the device instead:
an out-of-range index makes the result NaN (the loss, or the embedding rows it selected), and the
first NaN loss you print points at it. PyTorch has the same trade-off (its CUDA kernels raise an
asynchronous "device-side assert"). Set `check_indices = True` while debugging to get the eager error.
"""
from __future__ import annotations

import contextlib

from .primitives import convolution as _conv

__all__ = ["cudnn", "cuda"]


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


class _CudaFlags:
    """The `minidl.backends.cuda` namespace: use_cublas and check_indices (see the module docstring)."""

    def __init__(self):
        self.use_cublas = False
        self.check_indices = False

    @contextlib.contextmanager
    def flags(self, use_cublas=None, check_indices=None):
        """Set the flags inside a `with` block, then restore them."""
        previous = (self.use_cublas, self.check_indices)
        if use_cublas is not None:
            self.use_cublas = bool(use_cublas)
        if check_indices is not None:
            self.check_indices = bool(check_indices)
        try:
            yield self
        finally:
            self.use_cublas, self.check_indices = previous

    def __repr__(self):
        return f"cuda(use_cublas={self.use_cublas}, check_indices={self.check_indices})"


cuda = _CudaFlags()


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
