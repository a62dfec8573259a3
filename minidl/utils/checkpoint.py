"""torch.utils.checkpoint, for programs that use it: `checkpoint(fn, *args)` and `checkpoint_sequential(...)` run
the function and keep its graph as usual. minidl does not recompute the forward pass in the backward (the memory
activation checkpointing saves is not saved here): the values and gradients are the same as torch's, the memory is
that of the plain forward pass."""
from __future__ import annotations

__all__ = ["checkpoint", "checkpoint_sequential"]


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default", debug=False,
               preserve_rng_state=True, **kwargs):
    """function(*args, **kwargs), its graph kept (no recomputation: see the module docstring)."""
    return function(*args, **kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """The modules (a Sequential or a list) applied in order to input, as torch's (segments does not change the
    result; no recomputation here)."""
    if isinstance(segments, bool) or not isinstance(segments, int) or segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be a positive integer, got {segments!r}")
    modules = list(functions.children()) if hasattr(functions, "children") else list(functions)
    for module in modules:
        input = module(input)
    return input
