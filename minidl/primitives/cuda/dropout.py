"""CuPy launchers of kernels/dropout.cu: dropout with a Philox4x32-10 mask regenerated from
(seed, offset), identical to the NumPy reference's mask; float32, and float16/bfloat16 in place (the
_half kernels); and the uniform and normal numbers of the same stream (philox_uniform, philox_normal: minidl's
GPU generator). Arguments were validated by minidl/primitives/dropout.py.
"""
from __future__ import annotations

import functools
import math

import cupy
import numpy as np

from ._compile import get_kernel
from ._launch import HALF_KINDS as _HALF_KINDS, STORAGE_KINDS, THREADS, Plans, arrival_counters, as_kernel_input, \
    contiguous, grid_stride_blocks, is_aligned, null_pointer, on_host


@functools.lru_cache(maxsize=64)   # (a layer's p, every step: the NumPy scalars made once)
def _threshold_and_scale(p: float):
    """keep <=> (word >> 8) >= threshold, threshold = ceil(p * 2^24): the exact integer form of
    u >= p for u = (word >> 8) * 2^-24 (p * 2^24 is exact in float64, so no rounding of p)."""
    threshold = int(math.ceil(float(p) * (1 << 24)))
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - float(p))
    return np.uint32(threshold), np.float32(scale)


_HALF_KERNELS = {"dropout_forward": "dropout_forward_half", "dropout_backward": "dropout_backward_half"}
_PLANNED_DTYPES = frozenset(d for d in STORAGE_KINDS if not isinstance(d, str))   # (the table's dtype keys)


# Launch plans of the framework's calls (issue 25: char_gpt makes 13 dropout calls and 13 backward calls a step, of a
# few shapes): a C-contiguous array, the seed a device-resident state, offset 0. Per name, shape, dtype, p, claim and
# device: the kernel, grid, and the arguments that do not change from call to call.
_plans = Plans()
_ndarray = cupy.ndarray
_ZERO_U64 = np.uint64(0)
_NULL = null_pointer()


def _planned(name, a, p, state, claim):
    """_launch's usual call from its plan (made at a key's first call), or None where a claim finds no arrival counters
    (a CUDA-graph capture before any exist: _launch's general path claims through philox_advance then)."""
    arrivals = None
    if claim:
        arrivals = arrival_counters(1)
        if arrivals is None:
            return None
    key = (name, a.shape, a.dtype, p, claim, cupy.cuda.runtime.getDevice())
    plan = _plans.get(key)
    if plan is None:
        n = a.size
        half = a.dtype in _HALF_KINDS
        threshold, scale = _threshold_and_scale(float(p))
        kernel = get_kernel("dropout", _HALF_KERNELS[name] if half else name)
        plan = _plans.keep(key, (kernel, (grid_stride_blocks((n + 3) // 4 + 1),), np.int64(n), threshold, scale,
                                 np.int32(_HALF_KINDS[a.dtype]) if half else None))
    kernel, grid, n, threshold, scale, kind = plan
    result = _ndarray(a.shape, dtype=a.dtype)
    # (float32: the float4 flag; the kernel turns it off itself for an offset that is not a multiple of 4)
    last = kind if kind is not None else np.int32(not (a.data.ptr | result.data.ptr) & 15)
    args = (a, result, n, _ZERO_U64, _ZERO_U64, state, threshold, scale, last)
    if not claim:   # (the forward kernels take the claim's two arrays: null pointers here)
        kernel(grid, (THREADS,), args if name == "dropout_backward" else (*args, _NULL, _NULL))
        return result
    claimed = _ndarray(2, dtype=cupy.uint64)
    kernel(grid, (THREADS,), (*args, claimed, arrivals))
    return result, claimed


def _launch(name, a, p, seed, offset, claim=False):
    """The kernel `name` over a (float32; float16/bfloat16: its _half form, which takes the kind where the
    float32 kernel takes its float4 flag), into a new array of a's dtype. claim (the forward pass): `seed` is the
    device's generator, whose counters the launch claims itself (kernels/dropout.cu's claim_counters); returns
    (result, the claimed state)."""
    if seed.__class__ is _ndarray and a._c_contiguous and a.size and offset == 0 and a.dtype in _PLANNED_DTYPES:
        done = _planned(name, a, p, seed, claim)
        if done is not None:
            return done
    half = a.dtype in _HALF_KINDS
    a = contiguous(a) if half else as_kernel_input(name, a)
    n = a.size
    arrivals = arrival_counters(1) if claim and n else None
    if claim and arrivals is None:   # (nothing to draw, or a capture before any counters exist: two launches)
        claimed = philox_advance(seed, n)
        return _launch(name, a, p, claimed, 0), claimed
    result = cupy.ndarray(a.shape, dtype=a.dtype)
    if n == 0:
        return result
    offset = int(offset)
    threshold, scale = _threshold_and_scale(float(p))
    if isinstance(seed, cupy.ndarray):
        # Device-resident (seed, offset): the kernel reads them (a CUDA graph replays with the values
        # the array holds then). Offsets from philox_advance are multiples of 4; the kernel turns the
        # float4 path off itself for any other.
        state, seed = seed, 0
        groups = (n + 3) // 4 + 1          # an upper bound: the device offset may straddle a group
    else:
        state = null_pointer()
        groups = ((offset + n - 1) >> 2) - (offset >> 2) + 1
    if half:
        kernel, last = get_kernel("dropout", _HALF_KERNELS[name]), np.int32(_HALF_KINDS[a.dtype])
    else:
        kernel, last = get_kernel("dropout", name), np.int32(offset % 4 == 0 and is_aligned(a, result))
    args = (a, result, np.int64(n), np.uint64(offset), np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF), state,
            threshold, scale, last)
    if name == "dropout_forward":   # (the forward kernels take the claim's two arrays: null pointers unless claiming)
        claimed = cupy.ndarray(2, dtype=cupy.uint64) if claim else None
        kernel((grid_stride_blocks(groups),), (THREADS,),
               (*args, null_pointer() if claimed is None else claimed,
                null_pointer() if arrivals is None else arrivals))
        return (result, claimed) if claim else result
    kernel((grid_stride_blocks(groups),), (THREADS,), args)
    return result


def dropout_forward(x, p, seed, *, offset=0, claim=False):
    """y = x * mask / (1 - p); the mask of element i is Philox4x32-10(seed, offset + i). `seed` is an
    int, or a (2,) uint64 CuPy array (seed, base offset) read by the kernel; with claim=True, the device's
    generator, whose counters this launch claims: returns (y, the claimed (seed, offset))."""
    if x.dtype == np.float64:   # no float64 kernel: the NumPy reference (the same Philox masks) on host copies
        from ..cpu import dropout as reference
        if claim:
            claimed = philox_advance(seed, x.size)
            return on_host(reference.dropout_forward, x, p, claimed), claimed
        return on_host(reference.dropout_forward, x, p, seed, offset=offset)
    return _launch("dropout_forward", x, p, seed, offset, claim)


def dropout_backward(dy, p, seed, *, offset=0):
    """dx = dy * mask / (1 - p), with the mask regenerated from (seed, offset)."""
    if dy.dtype == np.float64:
        from ..cpu import dropout as reference
        return on_host(reference.dropout_backward, dy, p, seed, offset=offset)
    return _launch("dropout_backward", dy, p, seed, offset)


def philox_advance(state, count):
    """claimed = state (a copy, new array), then state[1] += count rounded up to 4, on the device."""
    claimed = cupy.ndarray(2, dtype=cupy.uint64)
    kernel = get_kernel("dropout", "philox_advance")
    kernel((1,), (1,), (state, claimed, np.uint64(int(count))))
    return claimed


def philox4x32(counter_words, key_words):
    """Philox4x32-10 on the GPU: 4 counter words and 2 key words (ints or uint32 arrays, broadcast
    together) -> 4 uint32 CuPy arrays. The same interface as the NumPy reference, for tests."""
    words = cupy.broadcast_arrays(*[cupy.asarray(w, dtype=cupy.uint32) for w in (*counter_words, *key_words)])
    shape = words[0].shape
    counters = cupy.ascontiguousarray(cupy.stack([w.reshape(-1) for w in words[:4]], axis=1))
    keys = cupy.ascontiguousarray(cupy.stack([w.reshape(-1) for w in words[4:]], axis=1))
    out = cupy.empty_like(counters)
    count = counters.shape[0]
    if count:
        kernel = get_kernel("dropout", "philox4x32_10_kernel")
        kernel(((count + THREADS - 1) // THREADS,), (THREADS,), (counters, keys, out, np.int64(count)))
    return tuple(out[:, k].reshape(shape) for k in range(4))


def _philox_fill(name, shape, seed, offset, dtype):
    out = cupy.ndarray(shape, dtype=dtype)
    n = out.size
    if n:
        device_state = isinstance(seed, cupy.ndarray)
        get_kernel("dropout", name)((grid_stride_blocks(n),), (THREADS,),
                                    (seed if device_state else null_pointer(), out, np.int64(n), np.uint64(offset),
                                     np.uint64(0 if device_state else int(seed)), np.int32(out.dtype == np.float64)))
    return out


def philox_bits(shape, seed, *, offset=0):
    """The uint32 words of the Philox stream (kernels/dropout.cu's philox_bits)."""
    out = cupy.ndarray(shape, dtype=cupy.uint32)
    n = out.size
    if n:
        device_state = isinstance(seed, cupy.ndarray)
        get_kernel("dropout", "philox_bits")((grid_stride_blocks(n),), (THREADS,),
                                             (seed if device_state else null_pointer(), out, np.int64(n),
                                              np.uint64(offset), np.uint64(0 if device_state else int(seed))))
    return out


def philox_uniform(shape, seed, *, offset=0, dtype=np.float32):
    """Uniform [0, 1) numbers of the Philox stream (kernels/dropout.cu's philox_uniform)."""
    return _philox_fill("philox_uniform", shape, seed, offset, dtype)


def philox_normal(shape, seed, *, offset=0, dtype=np.float32):
    """Standard normal numbers of the Philox stream, by Box-Muller (kernels/dropout.cu's philox_normal)."""
    return _philox_fill("philox_normal", shape, seed, offset, dtype)
