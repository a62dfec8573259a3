"""Launch helpers shared by the CuPy launchers in this package.

Block/grid sizes (THREADS, sm_count, grid_stride_blocks), and the conventions of the memory-bound
kernels for their arrays: inputs are C-contiguous float32 (as_kernel_input), the output is written
straight into the user's `out` when that is safe and into a scratch array otherwise
(kernel_output / finish), float4 paths need 16-byte alignment (is_aligned), and an absent optional
array is passed as a null pointer (null_pointer).

New arrays are made as `cupy.ndarray(shape, dtype=...)` throughout this package: what cupy.empty returns, without
its Python frame (up to ~1 us of host time per allocation on the GPU hosts; an eager step makes 50-330).
"""
from __future__ import annotations

import ctypes
import functools
import struct
import threading

import cupy
import numpy as np

from ..._dtypes import by_dtype
from .. import _common

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


def float32_contiguous(a):
    """a as a C-contiguous float32 array (a itself when it is one; else a converted copy): the statistics a
    forward pass saved (layer norm's mean and rstd, attention's log-sum-exp), read by a backward kernel."""
    return a if a.dtype == cupy.float32 and a._c_contiguous else cupy.ascontiguousarray(a, dtype=cupy.float32)


class Plans(dict):
    """A launcher's launch plans (issues 23 and 25: a training step calls a primitive with the same shapes every
    step): everything a launch needs but the arrays' addresses, by what decides it (shapes, dtypes, flags, the
    device), made on a key's first call. Emptied when `limit` plans are kept (a program that meets ever new
    shapes). Read with get(key); keep(key, plan) stores one and returns it."""

    __slots__ = ("limit",)

    def __init__(self, limit: int = 1024):
        super().__init__()
        self.limit = limit

    def keep(self, key, plan):
        if len(self) >= self.limit:
            self.clear()
        self[key] = plan
        return plan


def on_host(fn, *args, out=None, **kwargs):
    """fn (the family's NumPy reference) on host copies of the CuPy arrays among args, its result back on the
    device, blended into `out` when given: the float64 path of the families whose kernels are float32 and 16-bit
    only (correct, not fast: float64 models on the GPU, gradient checks, physics-informed networks)."""
    host = [cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else a for a in args]
    if out is None:
        return cupy.asarray(fn(*host, **kwargs))
    out[...] = cupy.asarray(fn(*host, out=cupy.asnumpy(out), **kwargs))
    return out


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
    if out is None:   # (the usual call: a new array; a shape of ints, as an array's, goes to CuPy as it is)
        return cupy.ndarray(shape if shape.__class__ is tuple else tuple(map(int, shape)), dtype=cupy.float32), None
    shape = tuple(map(int, shape))
    if tuple(out.shape) != shape:
        raise ValueError(f"{op}: out has shape {tuple(out.shape)}, expected {shape}")
    if out.dtype != cupy.float32:
        raise TypeError(f"{op}: out has dtype {out.dtype}, expected float32")
    overlaps = any(a is not None and cupy.may_share_memory(out, a) for a in inputs)
    if out.flags.c_contiguous and not overlaps:
        return out, None
    scratch = out.copy(order="C") if beta != 0 else cupy.ndarray(shape, dtype=cupy.float32)
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


# -- the launch itself ----------------------------------------------------------------------------------------
# CuPy's launch (RawKernel.__call__) wraps every argument in an object of its own, then builds the array of
# pointers cuLaunchKernel wants: 6 us for one 96-byte record and up to 19 us for two dozen NumPy scalars on these
# machines (benchmarks/results/gpu_op_overhead.md), against ~2 us for cuLaunchKernel itself. An eager training step
# launches 50 (MNIST CNN) to ~900 (char_gpt) kernels. Kernel below packs the arguments with one struct.pack_into
# into a buffer laid out as the driver says the kernel's parameters are (cuFuncGetParamInfo: each parameter's
# offset and size), and queues it with one cuLaunchKernel.

_PARAM_INFO = None


def _param_info_function():
    """cuFuncGetParamInfo through ctypes (CUDA 12.4+ drivers; CuPy does not wrap it), or None."""
    global _PARAM_INFO
    if _PARAM_INFO is None:
        try:
            f = ctypes.CDLL("libcuda.so.1").cuFuncGetParamInfo
        except (OSError, AttributeError):
            f = False
        else:
            f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                          ctypes.POINTER(ctypes.c_size_t)]
            f.restype = ctypes.c_int
        _PARAM_INFO = f
    return _PARAM_INFO or None


def param_layout(function_ptr: int):
    """[(offset, size)] of a CUfunction's parameters, as the driver lays them out; None where the driver
    cannot say (then Kernel launches through CuPy). The walk ends where the driver answers "invalid argument"
    (past the last parameter): compute-sanitizer's memcheck lists that answer, once per kernel, as an API error."""
    f = _param_info_function()
    if f is None:
        return None
    layout, offset, size = [], ctypes.c_size_t(), ctypes.c_size_t()
    for i in range(4096):
        if f(ctypes.c_void_p(function_ptr), i, ctypes.byref(offset), ctypes.byref(size)) != 0:
            break   # CUDA_ERROR_INVALID_VALUE past the last parameter
        layout.append((offset.value, size.value))
    return layout


def _code(size: int, value) -> str:
    """The struct code that writes `value` into a parameter of `size` bytes, by the kind of value the launcher
    passes there (CuPy's rules: a float parameter gets a NumPy float of its width, an int one an int)."""
    if isinstance(value, bytes):
        if len(value) != size:
            raise ValueError(f"a {len(value)}-byte record for a {size}-byte parameter")
        return f"{size}s"
    if isinstance(value, (float, np.floating)):
        return {4: "f", 8: "d", 2: "e"}[size]
    unsigned = isinstance(value, (np.unsignedinteger, np.bool_, bool))
    code = {8: "q", 4: "i", 2: "h", 1: "b"}[size]
    return code.upper() if unsigned else code


class Kernel:
    """A compiled `__global__` function of kernels/, called as CuPy's RawKernel is: kernel(grid, block, args,
    shared_mem=0). Arguments: CuPy arrays (their data pointer), None (a null pointer), Python or NumPy ints and
    floats, and NumPy records (a by-value struct: its bytes). The first launch reads the parameters' layout from the
    driver and makes the packing format from the kinds of values given; later launches with other kinds rebuild
    it, and anything the format cannot take (or a driver that cannot tell the layout) goes through CuPy's launch.
    Other attributes (max_dynamic_shared_size_bytes, ...) are the RawKernel's."""

    __slots__ = ("kernel", "ptr", "_layout", "_struct", "_buffers")

    def __init__(self, kernel):
        set_ = object.__setattr__
        set_(self, "kernel", kernel)                 # the RawKernel
        set_(self, "ptr", kernel.kernel.ptr)         # its CUfunction
        set_(self, "_layout", param_layout(self.ptr))
        set_(self, "_struct", None)
        set_(self, "_buffers", {})                   # thread -> (buffer, address of its pointer array)

    def __getattr__(self, name):
        return getattr(self.kernel, name)

    def __setattr__(self, name, value):
        setattr(self.kernel, name, value)

    def _pack(self, values):
        """Make the struct that packs values of these kinds into the parameters' layout (gaps as pad bytes) and
        this thread's buffer, and pack them; returns the buffer's entry, or None when the format cannot take them
        (then CuPy launches). A wrong number of arguments is the launcher's bug: it raises."""
        layout = self._layout
        if len(values) != len(layout):
            raise TypeError(f"kernel {self.kernel.name} takes {len(layout)} arguments, the launcher gave {len(values)}")
        fmt, at = "<", 0
        try:
            for (offset, size), value in zip(layout, values):
                fmt += (f"{offset - at}x" if offset > at else "") + _code(size, value)
                at = offset + size
            packer = struct.Struct(fmt)
            buffer = ctypes.create_string_buffer(max(packer.size, 1))
            packer.pack_into(buffer, 0, *values)
        except (struct.error, KeyError, ValueError, TypeError):
            return None
        base = ctypes.addressof(buffer)
        pointers = (ctypes.c_void_p * max(len(layout), 1))(*[base + offset for offset, _ in layout])
        object.__setattr__(self, "_struct", packer)
        if len(self._buffers) > 64:
            self._buffers.clear()
        entry = self._buffers[threading.get_ident()] = (buffer, ctypes.addressof(pointers), pointers)
        return entry

    def __call__(self, grid, block, args, shared_mem=0, **kwargs):
        if _common.launch_counter is not None:   # a minidl.profiler.profile is active: count this launch
            _common.launch_counter()
        if kwargs or self._layout is None:
            return self.kernel(grid, block, args, shared_mem=shared_mem, **kwargs)
        values = [a.data.ptr if a.__class__ is _ndarray else
                  (0 if a is None else a.tobytes() if a.__class__ is np.ndarray else a) for a in args]
        entry = self._buffers.get(threading.get_ident())
        try:
            self._struct.pack_into(entry[0], 0, *values)
        except (struct.error, TypeError, AttributeError):   # the first launch, a new thread, or other kinds of values
            entry = self._pack(values)
            if entry is None:
                return self.kernel(grid, block, args, shared_mem=shared_mem)
        # (the usual grid and block, a 1-tuple or a 3-tuple, read here: two calls fewer per launch)
        gx, gy, gz = (grid[0], 1, 1) if grid.__class__ is tuple and len(grid) == 1 else \
            grid if grid.__class__ is tuple and len(grid) == 3 else _dims(grid)
        bx, by, bz = (block[0], 1, 1) if block.__class__ is tuple and len(block) == 1 else \
            block if block.__class__ is tuple and len(block) == 3 else _dims(block)
        _launch_kernel(self.ptr, gx, gy, gz, bx, by, bz, shared_mem, _stream().ptr, entry[1], 0)


_ndarray = cupy.ndarray   # the launch's names, bound once
_launch_kernel = cupy.cuda.driver.launchKernel
_stream = cupy.cuda.get_current_stream


def _dims(d):
    """A grid or block as CuPy takes it (an int, or a tuple or list of 1-3 ints) as three ints."""
    if d.__class__ is tuple:
        n = len(d)
        return (d[0], 1, 1) if n == 1 else (d[0], d[1], 1) if n == 2 else d
    return _dims(tuple(d)) if hasattr(d, "__len__") else (d, 1, 1)


def function_pointer(kernel) -> int:
    """The CUfunction of what get_kernel handed out (a Kernel, or anything that wraps one as `.kernel`)."""
    while not isinstance(kernel, Kernel):
        kernel = kernel.kernel
    return kernel.ptr
