"""torch.autograd.profiler: the older profiler API (profile(use_cuda=...), record_function), on minidl.profiler."""
from __future__ import annotations

import contextlib

__all__ = ["profile", "record_function"]


def profile(enabled=True, *, use_cuda=False, use_device=None, record_shapes=False, with_flops=False,
            profile_memory=False, with_stack=False, **kwargs):
    """minidl.profiler.profile with the CPU activity, and the CUDA one for use_cuda=True (or use_device="cuda");
    enabled=False records nothing (a context manager that does nothing, as torch's)."""
    if not enabled:
        return contextlib.nullcontext()
    from .. import profiler

    activities = [profiler.ProfilerActivity.CPU]
    if use_cuda or use_device == "cuda":
        activities.append(profiler.ProfilerActivity.CUDA)
    return profiler.profile(activities=activities, record_shapes=record_shapes, with_stack=with_stack,
                            profile_memory=profile_memory)


def record_function(name: str):
    from .. import profiler

    return profiler.record_function(name)
