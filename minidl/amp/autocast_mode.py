"""autocast: run each op in the precision that suits it, as torch.amp.autocast does.

Inside `with minidl.autocast("cuda"):` (or "cpu") the framework casts the inputs of each listed op
before it runs, by the op's policy:

- LOWER ("lower_precision_fp"): matrix work (linear, matmul, conv1d/2d/3d, RNN/LSTM/GRU) runs in
  the autocast dtype (float16 on cuda, bfloat16 on cpu by default): that is where tensor cores pay
  and where float32 accumulation inside the GEMM keeps the result accurate. float64 is left alone.
- FP32: ops whose result loses too much in 16 bits (softmax over many classes, exp/log/pow, long
  sums, losses) get float32 inputs.
- Every other op runs in the widest dtype of its inputs (minidl's ordinary type promotion).

The tables are PyTorch's, per device type (torch's CPU autocast lists fewer fp32 ops: softmax, exp
and sum keep their input dtype there). Casts of leaf tensors that require grad (the parameters)
are cached for the whole autocast region, so a weight used by several ops is cast once; the cache
is emptied when the outermost region exits. The cast is an autograd op, so gradients reach the
float32 parameters in float32 ("master weights").
"""
from __future__ import annotations

import functools
import threading
import warnings
import weakref

import numpy as np

from .. import primitives
from .._dtypes import bfloat16, float16, float32, float64, is_floating, is_half
from ..autograd.function import is_grad_enabled
from ..autograd.tensor import Tensor

LOWER, FP32 = "lower_precision_fp", "fp32"

# op name -> policy, per device type. Names are minidl's op names (the functional / Tensor method).
_MATRIX_OPS = ("linear", "matmul", "conv1d", "conv2d", "conv3d", "rnn", "rnn_cell", "scaled_dot_product_attention")
POLICIES = {
    "cuda": {
        **{op: LOWER for op in _MATRIX_OPS},
        **{op: FP32 for op in (
            "softmax", "log_softmax", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
            "binary_cross_entropy_with_logits", "sum", "exp", "log", "log1p", "pow", "rsqrt", "rtruediv",
            "layer_norm",
        )},
    },
    "cpu": {
        **{op: LOWER for op in _MATRIX_OPS},
        **{op: FP32 for op in (
            "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "binary_cross_entropy_with_logits",
        )},
    },
}
DEFAULT_DTYPES = {"cuda": float16, "cpu": bfloat16}

_state = threading.local()

# Autocast regions open with enabled=True, over every thread. The ops test it before calling cast_inputs
# (`if _amp.regions:`), so that a program outside autocast never enters this module: one attribute read per op
# instead of a call. Each thread still keeps its own flags (_state); 0 here means they are all off.
regions = 0
_regions_lock = threading.Lock()


def _count_region(step: int) -> None:
    global regions
    with _regions_lock:
        regions += step


def _get():
    if not hasattr(_state, "enabled"):
        _state.enabled = {"cuda": False, "cpu": False}
        _state.dtype = dict(DEFAULT_DTYPES)
        _state.cache_enabled = True
        _state.depth = 0
        _state.cache = {}
        _state.last_casts = {}   # dtype -> {id: weakref} of the parameters cast_array cast in the last region
        _state.batched = set()   # the dtypes whose casts this region made in one multi-tensor call already
    return _state


def _check_device_type(op, device_type):
    if device_type not in POLICIES:
        raise ValueError(f"{op}: device_type must be 'cuda' or 'cpu', got {device_type!r}")


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    _check_device_type("is_autocast_enabled", device_type)
    return _get().enabled[device_type]


def get_autocast_dtype(device_type: str = "cuda"):
    _check_device_type("get_autocast_dtype", device_type)
    return _get().dtype[device_type]


def is_autocast_cache_enabled() -> bool:
    return _get().cache_enabled


def clear_autocast_cache() -> None:
    _get().cache.clear()


class autocast:
    """Context manager and decorator: `with minidl.autocast("cuda"):` or `@minidl.autocast("cpu")`.

    device_type: "cuda" or "cpu" (only tensors on that device type are cast).
    dtype: the lower precision, float16 or bfloat16; default float16 on cuda, bfloat16 on cpu.
    enabled: False makes a region without autocast (e.g. to run one op in float32 inside another).
    cache_enabled: cache the casts of parameters within the region (True, as torch).
    Wrap the forward pass and the loss, not backward(): gradients flow back in the dtypes the forward
    pass chose, and reach each parameter in its own dtype. Keep optimizer.step() outside the region
    too: a parameter changed in place inside it would still be read through its cached cast (as in
    torch).
    """

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled: bool = True):
        _check_device_type("autocast", device_type)
        self.device_type = device_type
        self.fast_dtype = DEFAULT_DTYPES[device_type] if dtype is None else np.dtype(dtype)
        for name, flag in (("enabled", enabled), ("cache_enabled", cache_enabled)):
            if not isinstance(flag, (bool, np.bool_)):   # bool('no') is True: refuse, as torch
                raise TypeError(f"autocast: {name} must be a bool, got {type(flag).__name__} {flag!r}")
        self._enabled = bool(enabled)
        self._cache_enabled = bool(cache_enabled)
        if self._enabled and not is_half(self.fast_dtype):
            # torch warns and disables in this case; so do we.
            warnings.warn(f"autocast: the {device_type} autocast dtype must be float16 or bfloat16, got "
                          f"{self.fast_dtype}; autocast is disabled for this region", stacklevel=2)
            self._enabled = False

    def __enter__(self):
        st = _get()
        self._prev = (st.enabled[self.device_type], st.dtype[self.device_type], st.cache_enabled)
        st.enabled[self.device_type] = self._enabled
        st.dtype[self.device_type] = self.fast_dtype
        st.cache_enabled = self._cache_enabled
        st.depth += 1
        if self._enabled:
            _count_region(1)
        return self

    def __exit__(self, *exc):
        st = _get()
        st.depth -= 1
        if self._enabled:
            _count_region(-1)
        st.enabled[self.device_type], st.dtype[self.device_type], st.cache_enabled = self._prev
        if st.depth == 0:
            _remember_casts(st)
            st.cache.clear()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device_type, self.fast_dtype, self._enabled, self._cache_enabled):
                return fn(*args, **kwargs)

        return wrapper


def _cast(t, dtype, cacheable: bool):
    """t.type(dtype) through an autograd cast; cached per region for parameters."""
    st = _get()
    if cacheable and st.cache_enabled and t.is_leaf and t.requires_grad:
        key = (id(t), dtype, is_grad_enabled())
        hit = st.cache.get(key)
        if hit is not None and hit[0] is t and hit[1].shape == t.shape and hit[1].is_cuda == t.is_cuda:
            return hit[1]
        out = _cast_op(t, dtype)
        st.cache[key] = (t, out)  # keep t alive so its id is not reused within the region
        return out
    return _cast_op(t, dtype)


def cast_array(t, dtype):
    """t's data in dtype, cast once per autocast region for a parameter (the weight cache of _cast): an array, not an
    autograd op, for an op that takes the gradient back to t's dtype itself (nn.functional.dense.AutocastLinear).
    None when t is not cacheable (the op casts it then). Keyed by t's version too: changed in place within the
    region, it is cast again.

    The first parameter a region asks for that the last region cast too brings the casts of all the parameters
    the last region cast, in one multi-tensor call (primitives.multi_tensor_cast: one launch on the GPU for the
    whole model, instead of one per weight; issue 25): a training loop's regions cast the same weights. Each is
    cast from its values at that moment, so the result is what casting it at its first use would give, unless
    the region changes it in place before using it: its version then differs and it is cast again."""
    st = _get()
    if not (st.cache_enabled and t.is_leaf and t.requires_grad):
        return None
    key = ("array", id(t), dtype, t._version)
    hit = st.cache.get(key)
    if hit is not None and hit[0] is t:
        return hit[1]
    if dtype not in st.batched and dtype in st.last_casts and _cast_together(st, t, dtype):
        hit = st.cache.get(key)
        if hit is not None and hit[0] is t:
            return hit[1]
    data = t._data
    array = data.astype(dtype) if type(data) is np.ndarray else primitives.cast(data, dtype)
    st.cache[key] = (t, array)   # keep t alive so its id is not reused within the region
    return array


def _cast_together(st, t, dtype) -> bool:
    """The casts of the parameters the last region cast to dtype (t among them), in one multi-tensor call, into the
    cache; False where t was not among them or fewer than two still qualify (alive, float32, C-contiguous leaves
    that require grad, on t's device)."""
    last = st.last_casts[dtype]
    if id(t) not in last:
        return False
    st.batched.add(dtype)
    data = t._data
    kind, on_device = type(data), getattr(getattr(data, "data", None), "device_id", None)
    params = []
    for ref in last.values():
        p = ref()
        if p is None or p._ctx is not None or not p.requires_grad:
            continue
        a = p._data
        if (type(a) is not kind or a.dtype != float32
                or not (a.flags.c_contiguous if kind is np.ndarray else a._c_contiguous)   # (CuPy's own flag)
                or (on_device is not None and a.data.device_id != on_device)
                or ("array", id(p), dtype, p._version) in st.cache):
            continue
        params.append(p)
    if len(params) < 2:
        return False
    for p, array in zip(params, primitives.multi_tensor_cast([p._data for p in params], dtype)):
        st.cache[("array", id(p), dtype, p._version)] = (p, array)
    return True


def _remember_casts(st):
    """At the outermost region's exit: which parameters cast_array cast, per dtype (for the next region's
    _cast_together), by weak reference: remembering a model does not keep it alive."""
    casts = {}
    for key, (t, _) in st.cache.items():
        if key[0] == "array":
            casts.setdefault(key[2], {})[id(t)] = weakref.ref(t)
    st.last_casts = casts
    st.batched = set()


def _cast_op(t, dtype):
    if t.requires_grad and is_grad_enabled():
        return _autocast_cast_class().apply(t, dtype=dtype)
    data = t._data
    # the cast primitive on the GPU (one launch of kernels/cast.cu; CuPy's astype costs twice its host time)
    return Tensor._make(data.astype(dtype) if type(data) is np.ndarray else primitives.cast(data, dtype))


def _policy(op: str, args):
    """(device type, policy) autocast applies to op on these args (the device of the first tensor), or None
    outside autocast, without a tensor, or for an op without a policy."""
    st = _get()
    if not (st.enabled["cuda"] or st.enabled["cpu"]):
        return None
    first = next((a for a in args if isinstance(a, Tensor)), None)
    if first is None:
        return None
    device_type = "cuda" if first.is_cuda else "cpu"
    policy = POLICIES[device_type].get(op) if st.enabled[device_type] else None
    return None if policy is None else (device_type, policy)


def cast_inputs(op: str, *args):
    """The args of op `op`, cast by the autocast policy of the device type they live on (unchanged
    outside autocast, for ops without a policy, and for non-tensors, integer and None args)."""
    found = _policy(op, args)
    if found is None:
        return args
    (device_type, policy), st = found, _get()
    out = []
    for a in args:
        if isinstance(a, Tensor) and is_floating(a.dtype):
            if policy == LOWER and a.dtype not in (st.dtype[device_type], float64):
                a = _cast(a, st.dtype[device_type], cacheable=a.dtype == float32)
            elif policy == FP32 and is_half(a.dtype):
                a = _cast(a, float32, cacheable=False)
        out.append(a)
    return tuple(out)


def casts_to_float32(op: str, t) -> bool:
    """Whether autocast would cast the 16-bit tensor t to float32 for op (op's policy is float32 on t's device): for an
    op that reads 16-bit data in float32 itself and so skips the cast (cross_entropy on the GPU)."""
    if not (isinstance(t, Tensor) and is_half(t.dtype)):
        return False
    found = _policy(op, (t,))
    return found is not None and found[1] == FP32


def cast_output(t, dtype):
    """t cast to dtype through autocast's own cast op (what an op that skips the input casts uses to give its
    outputs autocast's dtype)."""
    return _cast_op(t, dtype)


def lower_precision_dtype(op: str, *args):
    """The 16-bit dtype autocast would cast op's float32 arguments to (its policy is lower precision on the
    device they live on), else None. For ops that run in float32 data with a 16-bit math mode of their own
    (the RNN), so that they can skip the casts and take only autocast's output dtype."""
    found = _policy(op, args)
    if found is None or found[1] != LOWER:
        return None
    return _get().dtype[found[0]]


@functools.lru_cache(maxsize=None)
def _autocast_cast_class():
    # Defined on first use: minidl.ops imports this module, so it cannot import ops first.
    from ..ops.conversion import Cast

    class AutocastCast(Cast):
        """The cast autocast inserts. It saves nothing but a dtype, so (unlike other ops) its graph
        node is never freed: a cached weight cast may be reached by several backward passes within
        one autocast region (gradient accumulation), as in PyTorch."""

        def _release(self):
            pass

    return AutocastCast


def _cast_floats(value, dtype, device_type):
    """value with every floating-point tensor on device_type cast to dtype (inside lists, tuples and dicts too)."""
    from ..autograd.tensor import Tensor

    if isinstance(value, Tensor):
        on_type = (value.is_cuda and device_type == "cuda") or (not value.is_cuda and device_type == "cpu")
        return value.type(dtype) if on_type and value.dtype.kind in "fV" and value.dtype != dtype else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_floats(v, dtype, device_type) for v in value)
    if isinstance(value, dict):
        return {k: _cast_floats(v, dtype, device_type) for k, v in value.items()}
    return value


def custom_fwd(fwd=None, *, device_type="cuda", cast_inputs=None):
    """Decorates a custom Function's forward for autocast (torch.amp.custom_fwd). Without cast_inputs the forward
    runs in the autocast state of its caller, and custom_bwd's backward will run in that same state. With
    cast_inputs (e.g. torch.float32) inside an autocast region: the floating-point inputs on device_type are cast
    to it and the forward runs with autocast off (an op that must run in one precision)."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)
    _check_device_type("custom_fwd", device_type)

    @functools.wraps(fwd)
    def decorate_fwd(ctx, *args, **kwargs):
        ctx._fwd_used_autocast = is_autocast_enabled(device_type)
        ctx._dtype = get_autocast_dtype(device_type)
        if cast_inputs is None or not ctx._fwd_used_autocast:
            return fwd(ctx, *args, **kwargs)
        ctx._fwd_used_autocast = False
        with autocast(device_type, enabled=False):
            return fwd(ctx, *_cast_floats(args, np.dtype(cast_inputs), device_type),
                       **_cast_floats(kwargs, np.dtype(cast_inputs), device_type))

    return decorate_fwd


def custom_bwd(bwd=None, *, device_type="cuda"):
    """Decorates a custom Function's backward: it runs in the autocast state its custom_fwd forward ran in."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    _check_device_type("custom_bwd", device_type)

    @functools.wraps(bwd)
    def decorate_bwd(ctx, *args, **kwargs):
        used = getattr(ctx, "_fwd_used_autocast", False)
        with autocast(device_type, dtype=getattr(ctx, "_dtype", None), enabled=used):
            return bwd(ctx, *args, **kwargs)

    return decorate_bwd


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast can be used on this device type (torch.amp.is_autocast_available): cuda and cpu."""
    return device_type in POLICIES
