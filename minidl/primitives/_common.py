"""Shared helpers of the primitive library: array-module dispatch, layouts, blending, argument checks.

Everything here works on plain arrays (numpy.ndarray or cupy.ndarray), never on framework tensors.
"""
from __future__ import annotations

import functools
import inspect
import os

import numpy as np

from .._dtypes import HALF_DTYPES, float32, is_half

# ----------------------------------------------------------------------------------------------
# Which backend does an array live on?
# ----------------------------------------------------------------------------------------------


# Set by minidl.profiler while a profile is active: a function of no arguments that every kernel launch calls
# (_launch.Kernel.__call__), so that launches are counted wherever the launcher keeps its kernels (launch plans).
launch_counter = None

# Which tensor-core GEMM kernel the GPU runs (minidl.primitives.set_tensor_core_gemm): "auto" = wgmma
# (kernels/gemm_wgmma.cu) on an sm_90 GPU where the operands allow it, else mma.sync (gemm_tc.cu).
tensor_core_gemm = os.environ.get("MINIDL_TENSOR_CORE_GEMM", "auto")
# The TMA element type of float32 operands of the wgmma GEMM ("tfloat32" or "float32"; see gemm_wgmma.py).
tf32_tma_type = os.environ.get("MINIDL_TF32_TMA_TYPE", "tfloat32")


_CUDA_TYPES: set = set()   # the CuPy array types met so far (cupy.ndarray and its subclasses)


def is_cuda_array(a) -> bool:
    """True for a CuPy array. Checked by type name so that CuPy is never imported on the CPU path; a type
    seen once is remembered (a GPU step asks this hundreds of times)."""
    t = type(a)
    if t is np.ndarray:   # the CPU path's every call: no string work
        return False
    if t in _CUDA_TYPES:
        return True
    if t.__module__.startswith("cupy"):
        _CUDA_TYPES.add(t)
        return True
    return False


def get_array_module(*arrays):
    """numpy or cupy, whichever the arrays live on (DeZero's idea: one code path for both)."""
    for a in arrays:
        if a is not None and is_cuda_array(a):
            import cupy

            return cupy
    return np


def backend(family: str, on_cuda):
    """The implementation module of a primitive family: `cuda.<family>` (CuPy launchers of
    kernels/<family>.cu) when `on_cuda` is true or is a CuPy array, else `cpu.<family>` (the NumPy
    reference). Both expose the same names. The CUDA module is imported only when asked for, so the
    CPU path never imports CuPy."""
    if not isinstance(on_cuda, bool):
        kind = type(on_cuda)
        on_cuda = kind in _CUDA_TYPES or (kind is not np.ndarray and is_cuda_array(on_cuda))
    module = _BACKENDS.get((family, on_cuda))
    if module is None:
        import importlib

        module = importlib.import_module(f"{__package__}.{'cuda' if on_cuda else 'cpu'}.{family}")
        _BACKENDS[(family, on_cuda)] = module
    return module


_BACKENDS: dict = {}


class Checked:
    """The argument signatures a primitive's checks passed before (issue 23: a training step calls a primitive
    with the same shapes every step, and its checks cost more than its launch). A front builds its key with
    `key(arrays, *params)`: each array's type, shape and dtype, then the scalar arguments the checks read; the
    checks run only for a key not seen yet (and, for an argument that is not an array, always). A front may keep
    what its checks found out with the key (`add(key, value)`, `get(key)`: attention's whether the fused kernel
    takes the call; `value(key, check)` does both: batch norm's normalised layout)."""

    __slots__ = ("seen",)

    def __init__(self):
        self.seen = {}

    @staticmethod
    def key(arrays, *params):
        parts = []
        for a in arrays:
            if a is None:
                parts.append(None)
            elif type(a) is np.ndarray or type(a) in _CUDA_TYPES:
                parts.append((type(a), a.shape, a.dtype))
            else:
                return None   # (not an array: the checks say what it is)
        return (*parts, *params)

    def __contains__(self, key) -> bool:
        return key is not None and key in self.seen

    def get(self, key):
        """What add() kept with this key (None for a key not seen, or None)."""
        return None if key is None else self.seen.get(key)

    def add(self, key, value=True) -> None:
        if key is not None:
            if len(self.seen) >= 4096:
                self.seen.clear()
            self.seen[key] = value

    def value(self, key, check):
        """What the checks found out for this signature (a normalised layout, ...): kept from the signature's first
        call, when check() runs and returns it (check() runs on every call whose key is None: an argument that is
        not an array, which the checks then name)."""
        found = None if key is None else self.seen.get(key)
        if found is None:
            found = check()
            self.add(key, found)
        return found


def check_arrays(op: str, **arrays) -> None:
    """Every argument must be a NumPy or CuPy array (not a list, a Tensor, a number): TypeError naming it."""
    for name, a in arrays.items():
        if a is not None and type(a) is not np.ndarray and type(a) not in _CUDA_TYPES and not (
                isinstance(a, (np.ndarray, np.generic)) or is_cuda_array(a)):
            hint = " (pass tensor._data, or use minidl.nn.functional)" if type(a).__name__ in ("Tensor", "Parameter") else ""
            if type(a).__name__ == "MetaArray":
                hint = (": the array of a tensor on the meta device, which has a shape and no values; give the module "
                        "a real device with module.to_empty(device='cpu') (or 'cuda') and load its weights first")
            raise TypeError(f"{op}: {name} must be a numpy.ndarray or cupy.ndarray, got {type(a).__name__}{hint}")


def check_same_device(op: str, **arrays) -> None:
    """Raise if some arrays are CuPy arrays and others are NumPy arrays."""
    check_arrays(op, **arrays)
    types = {type(a) for a in arrays.values() if a is not None}
    if len(types) <= 1:   # one array type (all NumPy, or all CuPy): nothing to compare
        return
    kinds = {name: ("cuda" if is_cuda_array(a) else "cpu") for name, a in arrays.items() if a is not None}
    if len(set(kinds.values())) > 1:
        desc = ", ".join(f"{k} on {v}" for k, v in kinds.items())
        raise ValueError(f"{op}: all arrays must be on the same device, got {desc}")


FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def check_float(op: str, **arrays) -> np.dtype:
    """All arrays float32 or all float64; return that dtype."""
    check_arrays(op, **arrays)
    first = None
    for a in arrays.values():   # the usual call: every array float32 (or every one float64)
        if a is not None:
            if first is None:
                first = a.dtype
                if first not in FLOAT_DTYPES:
                    break
            elif a.dtype != first:
                break
    else:
        if first is not None:
            return first
    dtypes = {name: np.dtype(a.dtype) for name, a in arrays.items() if a is not None}
    for name, dt in dtypes.items():
        if dt not in FLOAT_DTYPES:
            raise TypeError(f"{op}: {name} must be float32 or float64, got {dt}")
    if len(set(dtypes.values())) > 1:
        desc = ", ".join(f"{k}={v}" for k, v in dtypes.items())
        raise TypeError(f"{op}: all arrays must have the same dtype, got {desc}")
    return next(iter(dtypes.values()))


def check_float_or_half(op: str, *, half_with_float32=False, **arrays) -> np.dtype:
    """check_float, plus float16 / bfloat16: all arrays of one dtype (the first array's is returned).
    half_with_float32: half data may also come with float32 arrays (parameters kept in float32)."""
    for a in arrays.values():   # the usual call has no half array: check_float's rules
        if a is not None and getattr(a, "dtype", None) in HALF_DTYPES:
            break
    else:
        return check_float(op, **arrays)
    given = {name: a for name, a in arrays.items() if a is not None}
    dtypes = {name: np.dtype(a.dtype) for name, a in given.items()}
    for name, dt in dtypes.items():
        if dt not in HALF_DTYPES and dt not in FLOAT_DTYPES:
            raise TypeError(f"{op}: {name} must be float16, bfloat16, float32 or float64, got {dt}")
    allowed = set(HALF_DTYPES) | {np.dtype(np.float32)} if half_with_float32 else set()
    if len(set(dtypes.values())) > 1 and not (set(dtypes.values()) <= allowed
                                              and len(set(dtypes.values()) & set(HALF_DTYPES)) == 1):
        desc = ", ".join(f"{k}={v}" for k, v in dtypes.items())
        raise TypeError(f"{op}: all arrays must have the same dtype, got {desc}")
    return next(iter(dtypes.values()))


# ----------------------------------------------------------------------------------------------
# Half precision (float16, bfloat16) where a primitive has no half kernel
# ----------------------------------------------------------------------------------------------


def computes_half_in_float32(out_dtypes=None, inplace=(), mixed_dtypes=False, native=None):
    """Decorator for a public primitive that has no float16/bfloat16 kernel: half arrays among its
    arguments (also inside lists/tuples, e.g. RNN weights) are converted to float32, the primitive
    runs in float32, and its float32 outputs are rounded back to half. Statistics and reductions
    thus accumulate in float32, as cuDNN's half kernels do too; the cost is the two conversions.

    out_dtypes: per output (a tuple result), the name of the argument whose dtype that output takes
        ("x" -> x's dtype), or None to keep it float32 (batch norm's saved statistics); by default
        every floating output takes the dtype of the first half argument.
    inplace: names of arguments that the primitive updates in place (batch norm's running
        statistics): their new values are copied back into the caller's half arrays.
    mixed_dtypes: whether half arrays may be mixed with float32 ones (batch norm: half x, float32
        parameters and statistics, as cuDNN). Otherwise a mixed call is left to the primitive's own
        dtype check, which names the arrays.
    `out=` (blending) works: the float32 result is blended into a float32 copy of out, then rounded.
    native: a predicate of the call's arguments, true where a backend has 16-bit kernels of its own for it
        (the GPU's batch norm and pooling: 16-bit data, float32 parameters): the call then passes through too.
    Calls without half arrays pass through untouched.
    """

    def decorate(fn):
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            # The usual call has no half array at all: pass it through before binding the signature (a
            # bind costs more than a small primitive's arithmetic).
            if not _any_half(args) and not _any_half(kwargs.values()):
                return fn(*args, **kwargs)
            if native is not None and native(*args, **kwargs):
                return fn(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            originals = dict(bound.arguments)
            half = []
            for name, value in originals.items():
                converted = _half_to_float32(value, half)
                if converted is not value:
                    bound.arguments[name] = converted
            if not half or (not mixed_dtypes and len(_float_dtypes(originals.values())) > 1):
                return fn(*args, **kwargs)
            result = fn(*bound.args, **bound.kwargs)
            for name in inplace:
                new, orig = bound.arguments.get(name), originals.get(name)
                if orig is not None and new is not orig:
                    orig[...] = new.astype(orig.dtype)
            out = originals.get("out")
            if out is not None and is_half(out.dtype):
                out[...] = result.astype(out.dtype)
                return out
            if out_dtypes is None:
                return _float32_to(result, half[0])
            return tuple(
                r if name is None or originals.get(name) is None else _float32_to(r, originals[name].dtype)
                for r, name in zip(result, out_dtypes)
            )

        wrapper.computes_half_in_float32 = True
        return wrapper

    return decorate


def gpu_half_data(data_args: int, blends: bool = True):
    """A `native` predicate for computes_half_in_float32: the first data_args positional arguments are CuPy arrays of
    one 16-bit dtype (x, and dy in a backward pass; None among them is skipped), and every other array argument is
    float32 (parameters and statistics, as cuDNN keeps them). Arrays passed by keyword as data (or nested in lists)
    take the float32 path; so does a call with `out` when blends is False (the kernel writes a new array)."""

    def native(*args, **kwargs):
        if len(args) < data_args or (not blends and kwargs.get("out") is not None):
            return False
        first = args[0]
        dtype = getattr(first, "dtype", None)
        if dtype not in HALF_DTYPES or not is_cuda_array(first):
            return False
        for a in args[1:data_args]:
            if a is not None and (getattr(a, "dtype", None) != dtype or not is_cuda_array(a)):
                return False
        for a in (*args[data_args:], *kwargs.values()):
            if isinstance(a, (list, tuple)):
                if any(hasattr(v, "astype") for v in a):
                    return False
            elif (getattr(a, "dtype", None) is not None and hasattr(a, "astype") and a.dtype != float32
                  and a.dtype.kind != "i"):   # (an integer array, e.g. batch norm's counter, is not data)
                return False
        return True

    return native


def _any_half(values) -> bool:
    """Whether any of values (arrays, or lists/tuples of them, e.g. RNN weights) holds a float16/bfloat16 array.
    The common arguments (float32 / float64 arrays, numbers, None, descriptors) are decided in this loop,
    without a call each."""
    for v in values:
        dtype = getattr(v, "dtype", None)
        if dtype is not None:
            if dtype in HALF_DTYPES and hasattr(v, "astype"):
                return True
        elif isinstance(v, (list, tuple)) and _any_half(v):
            return True
    return False


def _float_dtypes(values) -> set:
    found = set()
    for v in values:
        if isinstance(v, (list, tuple)):
            found |= _float_dtypes(v)
        elif hasattr(v, "dtype") and hasattr(v, "astype") and np.dtype(v.dtype).kind in "fV":
            found.add(np.dtype(v.dtype))
    return found


def _half_to_float32(value, half: list):
    if isinstance(value, (list, tuple)):
        items = [_half_to_float32(v, half) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return type(value)(items)
    dtype = getattr(value, "dtype", None)
    if dtype is None or not hasattr(value, "astype") or np.dtype(dtype) not in HALF_DTYPES:
        return value
    half.append(np.dtype(dtype))
    return value.astype(float32)


def _float32_to(result, dtype):
    if isinstance(result, (list, tuple)):
        return type(result)(_float32_to(r, dtype) for r in result)
    if getattr(result, "dtype", None) == float32 and hasattr(result, "astype"):
        with np.errstate(over="ignore"):  # beyond float16's range: inf, as a half kernel would give
            return result.astype(dtype)
    return result


# ----------------------------------------------------------------------------------------------
# Layouts. "NCHW" means channels-first for any number of spatial dims (NCW, NCHW, NCDHW);
# "NHWC" means channels-last (NWC, NHWC, NDHWC). The aliases below are accepted too.
# ----------------------------------------------------------------------------------------------

_LAYOUT_ALIASES = {
    "NCHW": "NCHW", "NCW": "NCHW", "NCDHW": "NCHW", "NCL": "NCHW", "CHANNELS_FIRST": "NCHW",
    "NHWC": "NHWC", "NWC": "NHWC", "NDHWC": "NHWC", "NLC": "NHWC", "CHANNELS_LAST": "NHWC",
}


def normalize_layout(op: str, layout: str) -> str:
    key = str(layout).upper()
    if key not in _LAYOUT_ALIASES:
        raise ValueError(f"{op}: unknown layout {layout!r}; use 'NCHW' (channels first) or 'NHWC' (channels last)")
    return _LAYOUT_ALIASES[key]


def to_channels_first(a, layout: str):
    """View a channels-last array (N, *spatial, C) as channels-first (N, C, *spatial). No copy."""
    if layout == "NCHW":
        return a
    return a.transpose((0, a.ndim - 1) + tuple(range(1, a.ndim - 1)))


def to_channels_last(a, layout: str):
    """Inverse of to_channels_first: a channels-first array (N, C, *spatial) to the given layout."""
    if layout == "NCHW":
        return a
    return a.transpose((0,) + tuple(range(2, a.ndim)) + (1,))


# ----------------------------------------------------------------------------------------------
# alpha/beta blending, as in cuDNN: y = alpha * op(x) + beta * y_prior
# ----------------------------------------------------------------------------------------------


def check_blend_out(op: str, out, shape, dtype, beta) -> None:
    """Check the blending target before any work: `beta != 0` needs `out`, of the result's shape and dtype.

    (The public primitives call it at the boundary, so a bad `out` fails before any computation;
    `blend` calls it again on the computed result.)
    """
    if out is None:
        if beta != 0:
            raise ValueError(f"{op}: beta={beta} blends into an existing output, so pass out=")
        return
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{op}: out has shape {shape_str(out.shape)}, expected {shape_str(shape)}")
    if out.dtype != dtype:
        raise TypeError(f"{op}: out has dtype {out.dtype}, expected {dtype}")


def blend(op: str, result, out, alpha: float, beta: float):
    """Write alpha * result + beta * out into out (or return a new array when out is None).

    beta != 0 needs an `out` holding the prior values. The result is computed before blending, so
    `out` may alias an input. NaN in `out` is ignored when beta == 0, as in cuDNN.
    """
    check_blend_out(op, out, result.shape, result.dtype, beta)
    if out is None:
        return result if alpha == 1 else result * result.dtype.type(alpha)
    if beta == 0:
        out[...] = result if alpha == 1 else result * result.dtype.type(alpha)
    else:
        out[...] = result * result.dtype.type(alpha) + out * out.dtype.type(beta)
    return out


# ----------------------------------------------------------------------------------------------
# Argument normalisation
# ----------------------------------------------------------------------------------------------


def as_tuple(op: str, name: str, value, n: int, minimum: int | None = None) -> tuple:
    """An int, a 1-sequence (as PyTorch: the same for every dim) or a sequence of n ints -> a tuple
    of n ints, checked against a minimum."""
    if isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be an int or {n} ints, got {value!r}")
    if isinstance(value, (int, np.integer)):
        t = (int(value),) * n
    else:
        try:
            t = tuple(int(v) for v in value)
        except TypeError:
            raise TypeError(f"{op}: {name} must be an int or {n} ints, got {value!r}") from None
        if len(t) == 1 and n > 1:
            t = t * n
        if len(t) != n:
            raise ValueError(f"{op}: {name} must be an int or {n} ints, got {value!r}")
    if minimum is not None and any(v < minimum for v in t):
        raise ValueError(f"{op}: {name} must be >= {minimum}, got {value!r}")
    return t


def shape_str(shape) -> str:
    return "(" + ", ".join(str(int(s)) for s in shape) + ")"


# ----------------------------------------------------------------------------------------------
# Pooling shapes: here, not in pooling.py, so that cpu/pooling.py and cuda/pooling.py (which pooling.py
# imports) need nothing from the module above them
# ----------------------------------------------------------------------------------------------


def _pooled_length(length: int, k: int, s: int, p: int, ceil_mode: bool, d: int = 1) -> int:
    span = length + 2 * p - (d * (k - 1) + 1)
    if span < 0:
        return 0
    if ceil_mode:
        n = -(-span // s) + 1
        # The last window must start inside the input or its left padding (PyTorch's rule).
        if (n - 1) * s >= length + p:
            n -= 1
        return n
    return span // s + 1


def fft_convolution_refusal(problem) -> str:
    """Why the FFT convolution (the NumPy reference's and the GPU's, one algorithm) cannot take a problem's
    geometry: "" when it can. The FFT computes a full correlation: one group, stride 1, dilation 1."""
    if problem.groups != 1:
        return f"the FFT convolution runs groups=1 only, got groups={problem.groups}"
    if any(s != 1 for s in problem.stride):
        return f"the FFT convolution needs stride 1, got stride {problem.stride}"
    if any(d != 1 for d in problem.dilation):
        return f"the FFT convolution needs dilation 1, got dilation {problem.dilation}"
    return ""


def pooling_output_shape(x_shape, desc, layout: str = "NCHW") -> tuple:
    """The output shape of pooling_forward for an input of x_shape (in the given layout). Cached: a layer
    asks it for the same shape at every step, forward and backward."""
    try:
        return _pooling_output_shape(tuple(x_shape), desc, layout)
    except TypeError:    # an unhashable descriptor or shape entry: computed, not cached
        return _pooling_output_shape.__wrapped__(tuple(x_shape), desc, layout)


@functools.lru_cache(maxsize=1024)
def _pooling_output_shape(x_shape, desc, layout):
    layout = normalize_layout("pooling_output_shape", layout)
    x_shape = tuple(int(s) for s in x_shape)
    n = x_shape[0]
    if layout == "NCHW":
        c, spatial = x_shape[1], x_shape[2:]
    else:
        c, spatial = x_shape[-1], x_shape[1:-1]
    out_spatial = tuple(
        _pooled_length(L, k, s, p, desc.ceil_mode, d)
        for L, k, s, p, d in zip(spatial, desc.kernel_size, desc.stride, desc.padding, desc.dilation)
    )
    return (n, c) + out_spatial if layout == "NCHW" else (n,) + out_spatial + (c,)


# ----------------------------------------------------------------------------------------------
# Saying what a slow first call is doing (NVRTC compiles)
# ----------------------------------------------------------------------------------------------

COMPILE_NOTICE_AFTER_S = 1.0   # a compile served from CuPy's disk cache takes milliseconds: no notice


def run_with_compile_notice(what: str, compile_fn, *, after_s=None, stream=None):
    """compile_fn(), and if it is still running after `after_s` seconds (a real NVRTC compile, not a
    cache hit), say on stderr what is being compiled, once, and how long it took: the first use of a
    kernel family (or of a new dtype of it) otherwise looks like a hang (issue 26: a first --amp epoch
    took 42 s in silence). Returns compile_fn's result."""
    import sys
    import threading
    import time

    stream = stream if stream is not None else sys.stderr
    delay = COMPILE_NOTICE_AFTER_S if after_s is None else after_s
    said = []

    def notice():
        said.append(True)
        print(f"minidl: compiling {what} for this GPU (NVRTC, once; cached in ~/.cupy/kernel_cache for later "
              "runs) ...", file=stream, flush=True)

    timer = threading.Timer(delay, notice)
    timer.daemon = True
    start = time.perf_counter()
    timer.start()
    try:
        return compile_fn()
    finally:
        timer.cancel()
        if said:
            print(f"minidl: compiled {what} in {time.perf_counter() - start:.1f} s", file=stream, flush=True)
