"""NVTX ranges and marks (torch.cuda.nvtx): names that show up on the timeline of Nsight Systems (`nsys profile`),
around the host code and the kernels it queued. Through CuPy's NVTX binding; where NVTX is not there (no GPU, or a
CuPy built without it) the calls keep their nesting count and do nothing else, so a program that annotates itself
runs anywhere."""
from __future__ import annotations

import contextlib

from .. import _device

_depth = 0


def _nvtx():
    cupy = _device._load_cupy()
    nvtx = getattr(getattr(cupy, "cuda", None), "nvtx", None) if cupy is not None else None
    return nvtx if nvtx is not None and getattr(nvtx, "available", True) else None


def range_push(msg: str) -> int:
    """Open a range named msg; returns the depth of the range (0 for the outermost), as torch's."""
    global _depth
    nvtx = _nvtx()
    if nvtx is not None:
        nvtx.RangePush(str(msg))
    _depth += 1
    return _depth - 1


def range_pop() -> int:
    """Close the innermost open range; returns the depth of the range it closed (-1 when none was open)."""
    global _depth
    if _depth == 0:
        return -1
    nvtx = _nvtx()
    if nvtx is not None:
        nvtx.RangePop()
    _depth -= 1
    return _depth


def mark(msg: str) -> None:
    """A point event named msg on the timeline."""
    nvtx = _nvtx()
    if nvtx is not None:
        nvtx.Mark(str(msg))


_ranges: dict = {}


def range_start(msg: str) -> int:
    """Start a range that may end on another thread; returns its handle for range_end."""
    handle = len(_ranges) + 1
    _ranges[handle] = range_push(msg)
    return handle


def range_end(range_id: int) -> None:
    if _ranges.pop(range_id, None) is not None:
        range_pop()


@contextlib.contextmanager
def range(msg: str, *args, **kwargs):   # noqa: A001 - torch's name
    """`with nvtx.range("forward"):` (or `@nvtx.range("step")`): a range around the block; msg.format(*args,
    **kwargs) when arguments are given."""
    range_push(msg.format(*args, **kwargs) if args or kwargs else msg)
    try:
        yield
    finally:
        range_pop()
