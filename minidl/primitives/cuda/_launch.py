"""Launch helpers shared by the CuPy launchers in this package.

Block/grid sizes (THREADS, sm_count, grid_stride_blocks), and the conventions of the memory-bound
kernels for their arrays: inputs are C-contiguous float32 (as_kernel_input), the output is written
straight into the user's `out` when that is safe and into a scratch array otherwise
(kernel_output / finish), float4 paths need 16-byte alignment (is_aligned), and an absent optional
array is passed as a null pointer (null_pointer).
"""
from __future__ import annotations

import functools

import cupy
import numpy as np

from ..._dtypes import by_dtype

THREADS = 256  # threads per block of the elementwise / grid-stride kernels

# The KIND template argument of every kernel that stores float32, float16 or bfloat16 (enum Kind of
# kernels/tc_common.cuh: 0 float storage, 1 half, 2 bfloat16), keyed by dtype and by dtype name; HALF_KINDS: the
# two 16-bit ones (the kernels whose float32 version is another kernel).
STORAGE_KINDS = by_dtype({"float32": 0, "float16": 1, "bfloat16": 2})
HALF_KINDS = by_dtype({"float16": 1, "bfloat16": 2})


def contiguous(a):
    """a as a C-contiguous CuPy array of its own shape (copied only if it is not one already)."""
    out = cupy.ascontiguousarray(a)
    return out if out.shape == a.shape else out.reshape(a.shape)   # ascontiguousarray makes a 0-d array 1-D


def as_kernel_input(op: str, a):
    """A C-contiguous float32 CuPy array (copied only if it is not one already)."""
    if a.dtype != cupy.float32:
        raise TypeError(f"{op}: the CUDA kernels are float32, got {a.dtype}")
    return contiguous(a)


def as_storage_input(op: str, a):
    """A C-contiguous CuPy array of float32, float16 or bfloat16 (STORAGE_KINDS), for the kernels templated on
    the data's storage (copied only if it is not one already)."""
    if a.dtype not in STORAGE_KINDS:
        raise TypeError(f"{op}: the CUDA kernels take float32, float16 or bfloat16 data, got {a.dtype}")
    return contiguous(a)


def kernel_output(op: str, out, shape, beta: float, *inputs):
    """(target, original): the C-contiguous float32 array the kernel writes, and the user's `out`
    to copy it into afterwards (None when the kernel can write `out` directly).

    The kernel writes `out` itself unless `out` is not C-contiguous or overlaps an input (the
    kernels read neighbours, so writing in place could read already-written values). Then it
    writes a scratch array holding a copy of `out` (needed when beta != 0), and finish() copies
    it back.
    """
    shape = tuple(map(int, shape))
    if out is None:
        return cupy.empty(shape, dtype=cupy.float32), None
    if tuple(out.shape) != shape:
        raise ValueError(f"{op}: out has shape {tuple(out.shape)}, expected {shape}")
    if out.dtype != cupy.float32:
        raise TypeError(f"{op}: out has dtype {out.dtype}, expected float32")
    overlaps = any(a is not None and cupy.may_share_memory(out, a) for a in inputs)
    if out.flags.c_contiguous and not overlaps:
        return out, None
    scratch = out.copy(order="C") if beta != 0 else cupy.empty(shape, dtype=cupy.float32)
    return scratch, out


def finish(target, original):
    """Copy the kernel's output into the user's `out` when the kernel wrote a scratch array."""
    if original is None:
        return target
    original[...] = target
    return original


def is_aligned(*arrays) -> bool:
    """True when every array's data starts on a 16-byte boundary (float4 loads are legal)."""
    for a in arrays:   # (a loop: a generator costs a call per array on every launch)
        if a is not None and a.data.ptr % 16:
            return False
    return True


@functools.lru_cache(maxsize=None)
def _sm_count_of(device_id: int) -> int:
    return cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]


def sm_count() -> int:
    """Multiprocessors of the current device (cached: reading device attributes is slow)."""
    return _sm_count_of(cupy.cuda.runtime.getDevice())


def grid_stride_blocks(work_items: int, threads: int = THREADS, blocks_per_sm: int = 8) -> int:
    """Blocks for a grid-stride loop: enough to fill every SM, never more than the work needs."""
    return max(1, min((int(work_items) + threads - 1) // threads, sm_count() * blocks_per_sm))


def null_pointer():
    """What a kernel receives for an absent optional array (a 64-bit zero = nullptr)."""
    return np.uint64(0)


def check_no_cublas_capture(op: str, remedy: str = "Run this step eagerly, or let it run on minidl's kernels "
                                                    "(for Linear: backends.cuda.use_cublas = False, the default)"
                            ) -> None:
    """CuPy cannot call cuBLAS while a stream is captured into a CUDA graph (its binding raises a bare
    NotImplementedError): say which primitive needs cuBLAS, and what to do instead, before any launch."""
    if cupy.cuda.get_current_stream().is_capturing():
        raise RuntimeError(
            f"{op} cannot run inside a CUDA graph capture: its matrix products run on cuBLAS, which CuPy "
            f"cannot call during stream capture. {remedy}")


_ARRIVALS: dict = {}   # (device, stream) -> zeroed uint32 counters of the one-launch reductions


def arrival_counters(count: int):
    """Zeroed uint32 counters (at least `count`) for a kernel whose last block to finish does the final pass
    (it counts the blocks of its column in them and sets its count back to zero, so they stay zeroed): one
    array per device and stream, so that launches on two streams never share a count. None while a CUDA
    graph capture is under way and no array exists yet (zeroing one cannot run inside a capture): the
    caller then launches its separate final pass."""
    stream = cupy.cuda.get_current_stream()
    key = (cupy.cuda.runtime.getDevice(), stream.ptr)
    counters = _ARRIVALS.get(key)
    if counters is None or counters.size < count:
        if stream.is_capturing():
            return None
        counters = _ARRIVALS[key] = cupy.zeros(max(count, 1024), dtype=cupy.uint32)
    return counters
