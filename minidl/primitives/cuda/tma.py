"""TMA tensor maps (CUtensorMap) for the Hopper kernels, made through the CUDA driver with ctypes.

A tensor map is a 128-byte descriptor the copy engine (TMA, `cp.async.bulk.tensor`) reads to copy a
box of a tensor between global and shared memory: the tensor's base address, sizes and strides, the
box's size, and how the box is laid out in shared memory (the swizzle). The driver's
`cuTensorMapEncodeTiled` writes it on the host; the kernel receives it by value as a
`__grid_constant__` parameter. CuPy does not wrap that function, so it is called here through ctypes on
libcuda. A map is encoded once per shape (everything but the address); a later map of the same shape is
that one with its address replaced (`cuTensorMapReplaceAddress`, ~1 us), since a training step's
operands come from CuPy's memory pool at addresses that change from step to step; and the map of an address
seen before is the one made then (CuPy's pool gives a step's buffers back at the same few addresses, so in a
steady training loop no map is made at all).
"""
from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

# CUtensorMapDataType (cuda.h)
DATA_TYPES = {"float16": 6, "float32": 7, "bfloat16": 9, "tfloat32": 11}
SWIZZLE_NONE = 0           # CU_TENSOR_MAP_SWIZZLE_NONE: the box lies in shared memory as a plain array
SWIZZLE_128B = 3            # CU_TENSOR_MAP_SWIZZLE_128B
L2_PROMOTION_256B = 3       # CU_TENSOR_MAP_L2_PROMOTION_L2_256B
OOB_FILL_ZERO = 0           # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements outside the tensor read as zero
INTERLEAVE_NONE = 0

# What a kernel parameter of type TensorMap (kernels/gemm_wgmma.cu) receives: CuPy passes a NumPy
# array of size one by value, its bytes copied into the parameter.
MAP_DTYPE = np.dtype((np.void, 128))
_CACHE_SIZE = 4096
_MAPS_PER_RECIPE = 64   # addresses remembered per map shape (CuPy's pool hands a step's buffers back at the same ones)
_lock = threading.Lock()   # the template buffers are rewritten in place
_recipes: dict = {}   # map shape (all but the address) -> its MapRecipe (encode_tiled's cache)


class TensorMapError(RuntimeError):
    """The driver refused a tensor map (the arguments break one of TMA's rules)."""


@functools.lru_cache(maxsize=None)
def _encode_function():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:  # pragma: no cover - only on a machine without the NVIDIA driver
        raise TensorMapError(f"TMA: cannot load the CUDA driver library libcuda.so.1 ({exc})") from exc
    f = lib.cuTensorMapEncodeTiled
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                  ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    f.restype = ctypes.c_int
    return f


@functools.lru_cache(maxsize=None)
def _replace_function():
    _encode_function()   # loads the library (or raises TensorMapError)
    f = ctypes.CDLL("libcuda.so.1").cuTensorMapReplaceAddress
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    f.restype = ctypes.c_int
    return f


def encode_tiled(dtype: str, pointer: int, dims, strides_bytes, box, element_strides=None,
                 swizzle: int = SWIZZLE_128B) -> np.ndarray:
    """A tensor map (as a size-one NumPy array of 128 bytes) of the tensor at `pointer`.

    dims: sizes, innermost (contiguous) first; strides_bytes: the byte strides of dims[1:]; box: the
    box's extent in elements per dimension; element_strides: take every e-th element of the box along
    each dimension (a strided convolution's window; default all 1): ceil(box / e) elements arrive, so a
    box of n elements at stride e has extent n * e. TMA's rules, checked by the driver: pointer and
    strides multiples of 16 bytes, box extents <= 256, element strides <= 8, the innermost box row <=
    the swizzle span (128 bytes). Made from the MapRecipe of this shape, kept per shape (a map of a shape
    seen before is that recipe's template re-addressed).
    """
    element_strides = tuple(element_strides or (1,) * len(dims))
    key = (dtype, tuple(dims), tuple(strides_bytes), tuple(box), element_strides, swizzle)
    recipe = _recipes.get(key)
    if recipe is None:
        if len(_recipes) >= _CACHE_SIZE:
            _recipes.clear()
        recipe = _recipes[key] = MapRecipe(*key)
    return recipe.at(pointer)


def _encode(dtype, pointer, dims, strides_bytes, box, element_strides, swizzle):
    """cuTensorMapEncodeTiled into a new 64-byte aligned buffer: (buffer, its address, a MAP_DTYPE view)."""
    rank = len(dims)
    raw = ctypes.create_string_buffer(128 + 64)        # CUtensorMap is 64-byte aligned
    addr = (ctypes.addressof(raw) + 63) & ~63
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    result = _encode_function()(
        ctypes.c_void_p(addr), DATA_TYPES[dtype], rank, ctypes.c_void_p(pointer),
        (u64 * rank)(*dims), (u64 * max(rank - 1, 1))(*strides_bytes), (u32 * rank)(*box), (u32 * rank)(*element_strides),
        INTERLEAVE_NONE, swizzle, L2_PROMOTION_256B, OOB_FILL_ZERO)
    if result != 0:
        raise TensorMapError(
            f"TMA: cuTensorMapEncodeTiled refused a {dtype} map (CUDA error {result}): dims {list(dims)}, byte "
            f"strides {list(strides_bytes)}, box {list(box)}, element strides {list(element_strides)}, address "
            f"{pointer:#x}")
    return raw, addr, np.frombuffer(raw, dtype=MAP_DTYPE, count=1, offset=addr - ctypes.addressof(raw))


class MapRecipe:
    """All of a tensor map but its address, for a launch plan that runs again and again on tensors at new
    addresses (a training step's GEMMs): `at(pointer)` is the map for the tensor at pointer. The first call
    encodes it in full (cuTensorMapEncodeTiled); later calls rewrite the address of that template
    (cuTensorMapReplaceAddress, ~1 us), and encode again only where the driver refuses the new address."""

    __slots__ = ("args", "_template", "maps")

    def __init__(self, dtype: str, dims, strides_bytes, box, element_strides=None, swizzle: int = SWIZZLE_128B):
        element_strides = tuple(element_strides or (1,) * len(dims))
        self.args = (dtype, tuple(dims), tuple(strides_bytes), tuple(box), element_strides, swizzle)
        self._template = None   # (buffer, its address, a view of it)
        self.maps = {}          # pointer -> its map: a step's operands come back at the same few addresses (a launch
                                # plan may look a map up here itself, and call at() only when it is missing)

    def at(self, pointer: int) -> np.ndarray:
        """The map of this shape for the tensor at `pointer` (an array the caller must not change: the launch
        copies its bytes, and the next call for this pointer returns the same array)."""
        found = self.maps.get(pointer)
        if found is not None:
            return found
        if len(self.maps) >= _MAPS_PER_RECIPE:
            self.maps.clear()
        template = self._template
        if template is not None:
            with _lock:   # the template buffer is rewritten in place
                if _replace_function()(template[1], pointer) == 0:
                    found = self.maps[pointer] = template[2].copy()
                    return found
        dtype, dims, strides_bytes, box, element_strides, swizzle = self.args
        template = _encode(dtype, pointer, dims, strides_bytes, box, element_strides, swizzle)
        self._template = template
        found = self.maps[pointer] = template[2].copy()
        return found
