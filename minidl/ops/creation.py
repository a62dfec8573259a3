"""Tensor factories with PyTorch's names: tensor, zeros, ones, full, empty, arange, linspace, eye,
rand, randn, randint, their *_like forms, and from_numpy."""
from __future__ import annotations

import numpy as np

from .. import _device, random
from ..autograd.tensor import Tensor, get_default_dtype, to_array
from .joining import _flat


def _shape(size, op="size"):
    """A shape from (d0, d1, ...) or ((d0, d1, ...),): integers >= 0, as torch (2.5 is a TypeError)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)) or len(size) == 1 and type(size[0]).__name__ == "Size":
        size = tuple(size[0])
    for s in size:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) and not (
                isinstance(s, Tensor) and s.ndim == 0 and s.dtype.kind in "iu"):
            raise TypeError(f"{op}: size must be a tuple of ints, got {tuple(size)!r}")
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise ValueError(f"{op}: negative dimension in size {size}")
    return size


def _size_arg(size, kwargs, op):
    """The factories' shape: positional (d0, d1, ...) / ((d0, d1, ...),), or torch's keyword size=(d0, d1, ...)."""
    if kwargs:
        if set(kwargs) != {"size"} or size:
            extra = sorted(set(kwargs) - {"size"})
            raise TypeError(f"{op}() got an unexpected keyword argument {extra[0]!r}" if extra else
                            f"{op}(): the size given both positionally and as size=")
        return (kwargs["size"],)
    return size


def _finish(array, requires_grad):
    t = Tensor._make(array)
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of `data` (a list, number, NumPy/CuPy array or tensor)."""
    src = data._data if isinstance(data, Tensor) else data
    if device is None and _default_device is not None and not _device.is_cuda_array(src):
        device = _default_device
    t = Tensor._make(to_array(src, dtype, device))
    if t._data is src:
        t._data = t._data.copy()
    if requires_grad:
        t.requires_grad_(True)
    return t


def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """A 1-D tensor over an object that exposes the buffer protocol (bytes, bytearray, memoryview, mmap): no copy,
    so writes to a writable buffer show in the tensor (torch.frombuffer; NumPy's frombuffer underneath)."""
    dt = np.dtype(dtype)
    try:
        array = np.frombuffer(buffer, dtype=dt, count=count, offset=offset)
    except (TypeError, ValueError) as e:
        raise ValueError(f"frombuffer: cannot read {count if count >= 0 else 'all'} {dt} values at offset {offset} "
                         f"from a {type(buffer).__name__} ({e})") from None
    return _finish(array, requires_grad)


def from_numpy(array: np.ndarray):
    """A tensor sharing memory with a NumPy array (no copy)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(array).__name__}")
    return Tensor._make(array)


def as_tensor(data, dtype=None, device=None):
    """A tensor sharing `data`'s memory when it already is an array of that dtype and device, else a copy."""
    if isinstance(data, Tensor) and dtype is None and device is None:
        return data
    return Tensor._make(to_array(data._data if isinstance(data, Tensor) else data, dtype, device))


_default_device = None   # minidl.set_default_device: where factories put tensors without a device=


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """torch.asarray: as_tensor (the data shared where it can be: a tensor or an array of that dtype and device),
    a copy with copy=True; requires_grad as asked."""
    t = tensor(obj, dtype=dtype, device=device) if copy else as_tensor(obj, dtype=dtype, device=device)
    if copy is False and isinstance(obj, Tensor) and t is not obj and t._data is not obj._data:
        raise ValueError("asarray: copy=False, but the data must be copied (another dtype or device)")
    return t.requires_grad_(True) if requires_grad else t


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """torch.empty_strided: an uninitialised tensor of `size`. minidl's arrays are dense: the strides are not
    kept (the values are the same; only the memory order can differ from torch's)."""
    if len(tuple(stride)) != len(tuple(size)):
        raise RuntimeError(f"empty_strided: mismatch in length of strides ({len(tuple(stride))}) and shape "
                           f"({len(tuple(size))})")
    return empty(*tuple(size), dtype=dtype, device=device, requires_grad=requires_grad)


def set_default_device(device):
    global _default_device
    _default_device = None if device is None else _device.Device(device)


def default_device():
    return _default_device or _device.Device("cpu")


def _xp(device):
    device = device if device is not None else _default_device
    return _device.array_module("cpu" if device is None else device)


def _dt(dtype):
    return np.dtype(get_default_dtype() if dtype is None else dtype)


def _with_device(fn, device):
    device = device if device is not None else _default_device
    if device is None or _device.Device(device).type in ("cpu", "meta"):
        return fn()
    cupy = _device.require_cuda()
    with cupy.cuda.Device(_device.Device(device).index):
        return fn()


def zeros(*size, dtype=None, device=None, requires_grad=False, **kwargs):
    s = _shape(_size_arg(size, kwargs, "zeros"), "zeros")
    return _finish(_with_device(lambda: _xp(device).zeros(s, dtype=_dt(dtype)), device), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False, **kwargs):
    s = _shape(_size_arg(size, kwargs, "ones"), "ones")
    return _finish(_with_device(lambda: _xp(device).ones(s, dtype=_dt(dtype)), device), requires_grad)


def scalar_tensor(s, dtype=None, device=None, requires_grad=False):
    """A 0-d tensor of the number s in the default float dtype (torch.scalar_tensor)."""
    return full((), float(s.item() if isinstance(s, Tensor) else s), dtype=dtype or get_default_dtype(),
                device=device, requires_grad=requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    s = _shape((size,), "full") if not isinstance(size, int) else _shape((size,), "full")
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if isinstance(fill_value, (str, bytes)) or not np.isscalar(fill_value) and not isinstance(fill_value, np.generic):
        raise TypeError(f"full: fill_value must be a number, got {type(fill_value).__name__} {fill_value!r}")
    if dtype is None:
        dtype = np.int64 if isinstance(fill_value, (int, np.integer)) and not isinstance(fill_value, bool) else (
            np.bool_ if isinstance(fill_value, bool) else get_default_dtype()
        )
    return _finish(_with_device(lambda: _xp(device).full(s, fill_value, dtype=np.dtype(dtype)), device), requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False, **kwargs):
    s = _shape(_size_arg(size, kwargs, "empty"), "empty")
    return _finish(_with_device(lambda: _xp(device).empty(s, dtype=_dt(dtype)), device), requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    _shape((n,) if m is None else (n, m), "eye")
    return _finish(_with_device(lambda: _xp(device).eye(n, m, dtype=_dt(dtype)), device), requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    start, end, step = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
    for name, v in (("start", start), ("end", end), ("step", step)):
        if not isinstance(v, (int, float, np.integer, np.floating, np.bool_)):   # bools count as 0/1, as torch
            raise TypeError(f"arange: {name} must be a number, got {type(v).__name__} {v!r}")
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if (end - start) * step < 0:
        raise ValueError(f"arange: upper bound and larger bound inconsistent with step sign: start={start}, "
                         f"end={end}, step={step}")
    if dtype is None:
        is_int = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = np.int64 if is_int else get_default_dtype()
    return _finish(_with_device(lambda: _xp(device).arange(start, end, step, dtype=np.dtype(dtype)), device), requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """steps values from start to end, computed in float64 and rounded once to dtype. start and end may
    be numbers or 0-d tensors (torch's tensor overload; read on the host)."""
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"linspace: steps must be an int >= 0, got {steps!r}")
    return _finish(
        _with_device(lambda: _xp(device).linspace(start, end, steps, dtype=np.float64).astype(_dt(dtype)), device),
        requires_grad,
    )


def logspace(start, end, steps, base=10.0, dtype=None, device=None, requires_grad=False):
    """base ** linspace(start, end, steps) (torch.logspace), computed in float64 and rounded once to dtype."""
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"logspace: steps must be an int >= 0, got {steps!r}")
    return _finish(_with_device(
        lambda: (float(base) ** _xp(device).linspace(start, end, steps, dtype=np.float64)).astype(_dt(dtype)),
        device), requires_grad)


def torch_range(start=0, end=None, step=1, dtype=None, device=None, requires_grad=False):
    """torch.range (deprecated in torch, still met in old programs): start .. end INCLUDED, in the default float
    dtype unless told: arange(start, end + step, step) as torch computes the count, floor((end - start) / step) + 1."""
    if end is None:
        start, end = 0, start
    count = int(np.floor((end - start) / step)) + 1
    if count < 0:
        raise RuntimeError(f"range: upper bound and larger bound inconsistent with step sign ({start}, {end}, {step})")
    values = lambda: (start + step * _xp(device).arange(count, dtype=np.float64)).astype(  # noqa: E731
        _dt(dtype) if dtype is not None else get_default_dtype())
    return _finish(_with_device(values, device), requires_grad)


def _float_dtype(op, dtype):
    dt = _dt(dtype)
    if dt.kind not in "fV" and dt.name != "bfloat16":
        raise TypeError(f"{op}: dtype {dt} is not a floating-point type (as in torch: "
                        f"\"check_uniform_bounds\" not implemented for '{dt}'); use randint for integers")
    return dt


def _draw(generator, device, fn):
    """fn(rng): a draw from `generator` (a minidl.Generator) or the global generator of `device`."""
    device = device or _default_device or "cpu"
    rng = random.rng_of(generator, device)
    return fn(rng) if _device.Device(device).type != "cuda" else _with_device(lambda: fn(rng), device)


_DIGITS = {"float16": 11, "bfloat16": 8, "float32": 24}   # significand bits: values k / 2**digits are exact


def _unit_uniform(rng, shape, dt):
    """Uniform on [0, 1) in dtype dt: a float64 draw cut to the multiples of 2**-digits that dt holds exactly,
    so that nothing rounds up to 1.0 (a float64 draw within 2**-12 of 1 becomes 1.0 in float16), as torch's
    rand draws dt's significand bits."""
    x = rng.random(shape, dtype=np.float64)
    digits = _DIGITS.get(dt.name)
    if digits is not None:
        x = (x * float(1 << digits)) // 1.0 * (1.0 / (1 << digits))
    return x.astype(dt)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False, **kwargs):
    """Uniform on [0, 1), from minidl's seeded generator (see manual_seed) or `generator`."""
    dt, shape = _float_dtype("rand", dtype), _shape(_size_arg(size, kwargs, "rand"), "rand")
    return _finish(_draw(generator, device, lambda rng: _unit_uniform(rng, shape, dt)), requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False, **kwargs):
    """Standard normal, from minidl's seeded generator or `generator`. A complex dtype: real and imaginary parts
    each of variance 1/2 (torch's complex normal, E|z|^2 = 1)."""
    size = _size_arg(size, kwargs, "randn")
    if dtype is not None and _dt(dtype).kind == "c":
        part = _dt(dtype).type(0).real.dtype   # float32 for complex64
        re, im = (randn(*size, generator=generator, dtype=part, device=device) for _ in range(2))
        z = (re._data + 1j * im._data) * np.sqrt(0.5)
        return _finish(z.astype(_dt(dtype)), requires_grad)
    dt, shape = _float_dtype("randn", dtype), _shape(size, "randn")
    if generator is None:
        return _finish(random.normal_array(shape, 0.0, 1.0, dt, device or _default_device or "cpu"), requires_grad)
    return _finish(_draw(generator, device, lambda rng: rng.standard_normal(shape).astype(dt)), requires_grad)


def randint(low, high=None, size=(), generator=None, dtype=None, device=None):
    """Integers in [low, high): randint(high, size) or randint(low, high, size), as torch.randint."""
    if isinstance(high, (tuple, list)) or (high is not None and type(high).__name__ == "Size"):
        low, high, size = 0, low, high       # randint(high, size)
    if high is None:
        low, high = 0, low
    if not low < high:
        raise ValueError(f"randint: the range [low, high) = [{low}, {high}) is empty (low must be < high)")
    shape, dt = _shape((size,), "randint"), np.dtype(dtype or np.int64)
    if generator is None:
        return _finish(random.integers_array(low, high, shape, dt, device or _default_device or "cpu"), False)
    return _finish(_draw(generator, device, lambda rng: rng.integers(low, high, size=shape).astype(dt)), False)


def randperm(n, generator=None, dtype=None, device=None):
    """A random permutation of 0 .. n-1 (int64)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"randperm: n must be a non-negative integer, got {n!r}")
    if generator is None:
        perm = random.permutation_array(int(n), device or _default_device or "cpu")
    else:
        perm = _draw(generator, device, lambda rng: rng.permutation(int(n)))
    return Tensor._make(perm.astype(np.dtype(dtype or np.int64)))


def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None, requires_grad=False, out=None):
    """torch.normal: normal(mean_tensor, std_tensor) (their broadcast shape), normal(mean_tensor, std=1.0),
    normal(mean=0.0, std_tensor), or normal(mean, std, size) with numbers. Not differentiable (as torch)."""
    m = mean._data if isinstance(mean, Tensor) else mean
    sd = std._data if isinstance(std, Tensor) else std
    like = mean if isinstance(mean, Tensor) else std if isinstance(std, Tensor) else None
    if like is None:
        if size is None:
            raise TypeError("normal: with a number mean and std, give the size, as torch.normal(0.0, 1.0, size=(2, 3))")
        shape, dt, dev = _shape((size,), "normal"), _float_dtype("normal", dtype), device
    else:
        shape = np.broadcast_shapes(np.shape(m), np.shape(sd))
        dt, dev = like.dtype, like.device
    if np.any(np.asarray(_device.move_array(sd, "cpu") if hasattr(sd, "shape") else sd) < 0):
        raise RuntimeError(f"normal: std must be >= 0, got {std}")
    z = _draw(generator, None if dev is None else str(dev), lambda rng: rng.standard_normal(shape))
    xp = _device.get_array_module(z)
    result = Tensor._make((z * xp.asarray(sd) + xp.asarray(m)).astype(dt))
    if requires_grad:
        result.requires_grad_(True)
    if out is not None:
        out.copy_(result)
        return out
    return result


def bernoulli(input, p=None, *, generator=None):
    """1 with probability input (or p), else 0, elementwise; input's shape and dtype (torch.bernoulli)."""
    probs = input._data if p is None else p
    if np.any(np.asarray(_device.move_array(probs, "cpu") if hasattr(probs, "shape") else probs) < 0) or \
            np.any(np.asarray(_device.move_array(probs, "cpu") if hasattr(probs, "shape") else probs) > 1):
        raise RuntimeError("bernoulli: the probabilities must be in [0, 1]")
    u = _draw(generator, str(input.device), lambda rng: rng.random(input.shape))
    return Tensor._make((u < probs).astype(input.dtype))


def multinomial(input, num_samples, replacement=False, *, generator=None):
    """Indices drawn from the categorical distribution(s) in the rows of `input` (non-negative weights,
    not necessarily normalised), as torch.multinomial: (num_samples,) for a 1-D input, (rows, num_samples)
    for 2-D; without replacement each row gives distinct indices."""
    if input.ndim not in (1, 2):
        raise RuntimeError(f"multinomial: prob_dist must be 1 or 2 dim, got {input.ndim}")
    if input.shape[-1] == 0:
        raise RuntimeError(f"multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement "
                           f"(the distribution of shape {tuple(input.shape)} has no categories)")
    w = np.asarray(_device.move_array(input._data, "cpu"), dtype=np.float64)
    rows = w.reshape(-1, w.shape[-1])
    if not np.all(np.isfinite(rows)) or (rows < 0).any():
        raise RuntimeError("multinomial: probability tensor contains either inf, nan or element < 0")
    if (rows.sum(axis=1) <= 0).any():
        raise RuntimeError("multinomial: invalid multinomial distribution (sum of probabilities <= 0)")
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples <= 0:
        raise RuntimeError(f"multinomial: num_samples must be a positive integer, got {num_samples!r}")
    if not replacement and num_samples > (rows > 0).sum(axis=1).min():
        raise RuntimeError("multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    rng = generator.rng if generator is not None else random.cpu_generator()
    if generator is not None and generator.device.type == "cuda":   # the rows are drawn on the host: a NumPy
        words = _device.move_array(generator.rng._bits((4,)), "cpu")  # generator seeded from the CUDA generator's stream
        rng = np.random.default_rng([int(w) for w in words])
    out = np.empty((rows.shape[0], int(num_samples)), dtype=np.int64)
    for i, row in enumerate(rows):
        out[i] = rng.choice(row.size, size=int(num_samples), replace=bool(replacement), p=row / row.sum())
    out = out.reshape(w.shape[:-1] + (int(num_samples),))
    return Tensor._make(_device.move_array(out, input.device))


def _like(t, dtype, device):
    return dict(dtype=dtype or t.dtype, device=device or t.device)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return zeros(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return ones(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    return full(t.shape, fill_value, **_like(t, dtype, device), requires_grad=requires_grad)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    return empty(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def rand_like(t, dtype=None, device=None, requires_grad=False):
    return rand(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def randn_like(t, dtype=None, device=None, requires_grad=False):
    return randn(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def randint_like(t, low, high=None, dtype=None, device=None):
    return randint(low, high, t.shape, **_like(t, dtype, device))

# ------------------------------------------------------------------------------------------------
# Index grids
# ------------------------------------------------------------------------------------------------


def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _tri_indices(np.tril_indices(row, offset, col), dtype, device)


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _tri_indices(np.triu_indices(row, offset, col), dtype, device)


def _tri_indices(pair, dtype, device):
    return tensor(np.stack(pair).astype(np.int64), dtype=dtype or np.int64, device=device)


def meshgrid(*tensors, indexing=None):
    ts = _flat(tensors)
    if indexing is None:
        indexing = "ij"      # torch's default (with a warning when not given); xy swaps the first two
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in ts:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {tuple(t.shape)}")
    ts = [t.reshape(-1) for t in ts]
    swap = indexing == "xy" and len(ts) >= 2
    order = [1, 0] + list(range(2, len(ts))) if swap else list(range(len(ts)))
    shape = [ts[i].shape[0] for i in order]
    out = []
    for k, t in enumerate(ts):
        pos = order.index(k)
        view = [1] * len(ts)
        view[pos] = t.shape[0]
        out.append(t.reshape(view).expand(*shape))
    return tuple(out)


# Window functions (torch.hann_window & co., what stft programs pass as `window`): computed in float64 on the host
# and rounded once. periodic=True (the default, as torch's) is the symmetric window of length L + 1 without its
# last point, the form a DFT expects.
def _window(op, window_length, periodic, dtype, device, requires_grad, formula):
    if isinstance(window_length, bool) or not isinstance(window_length, (int, np.integer)) or window_length < 0:
        raise ValueError(f"{op}: window_length must be an int >= 0, got {window_length!r}")
    dt = _float_dtype(op, dtype)
    if window_length <= 1:
        w = np.ones(window_length)
    else:
        n = window_length + 1 if periodic else window_length
        w = formula(np.arange(window_length) / (n - 1))   # x = n / (N - 1) in [0, 1]
    return tensor(w.astype(dt), device=device, requires_grad=requires_grad)


def hann_window(window_length, periodic=True, *, dtype=None, device=None, requires_grad=False):
    """0.5 - 0.5 cos(2 pi x)."""
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad,
                   lambda x: 0.5 - 0.5 * np.cos(2 * np.pi * x))


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None, device=None,
                   requires_grad=False):
    """alpha - beta cos(2 pi x)."""
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                   lambda x: alpha - beta * np.cos(2 * np.pi * x))


def blackman_window(window_length, periodic=True, *, dtype=None, device=None, requires_grad=False):
    """0.42 - 0.5 cos(2 pi x) + 0.08 cos(4 pi x)."""
    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad,
                   lambda x: 0.42 - 0.5 * np.cos(2 * np.pi * x) + 0.08 * np.cos(4 * np.pi * x))


def bartlett_window(window_length, periodic=True, *, dtype=None, device=None, requires_grad=False):
    """The triangle 1 - |2x - 1|."""
    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad,
                   lambda x: 1 - np.abs(2 * x - 1))


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, device=None, requires_grad=False):
    """I0(beta sqrt(1 - (2x - 1)^2)) / I0(beta)."""
    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad,
                   lambda x: np.i0(beta * np.sqrt(np.clip(1 - (2 * x - 1) ** 2, 0, None))) / np.i0(beta))
