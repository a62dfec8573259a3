"""Dropout with a counter-based random number generator: the mask is recomputed, never stored.

Training-time dropout zeroes each element with probability p and scales the survivors by
1 / (1 - p), so the expected output equals the input:  y = x * keep / (1 - p).
The backward pass needs the same mask: dx = dy * keep / (1 - p).

Storing the mask costs memory; cuDNN and PyTorch's fused kernels instead draw it from a
counter-based generator, Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
SC 2011). Philox is a keyed bijection of a 128-bit counter: random numbers for element i are a pure
function of (seed, i), so any thread computes its own without shared state, the backward pass
regenerates the forward's mask, and the CPU and GPU draw the identical mask.

The mapping (the CUDA kernel uses exactly the same):
    i       = offset + flat C-order index of the element
    counter = (lo32(i >> 2), hi32(i >> 2), 0, 0),   key = (lo32(seed), hi32(seed))
    word    = Philox4x32-10(counter, key)[i & 3]     (one call feeds four consecutive elements)
    u       = (word >> 8) * 2^-24                    (24 random bits: exact in float32 and float64)
    keep    = u >= p
`offset` lets successive dropout calls with one seed use disjoint streams (advance it by the number
of elements used). p == 0 is the identity; p == 1 gives zeros.

Device-resident generator (for CUDA graphs): `seed` may also be a (2,) uint64 array (seed, base
offset) on x's device; the mask then uses offset = base offset + `offset`, read where the array lives
(by the kernel on the GPU). `philox_advance(state, count)` hands out such arrays from a generator
state without a host read: it returns a copy of state and advances state's offset by count (rounded
up to 4). A captured graph replays the advance too, so each replay draws fresh masks.

The same stream gives random numbers (minidl's GPU generator, minidl/random.py, draws rand and randn here):
    philox_uniform:  u = (word >> 8) * 2^-24 of each element's index, uniform on [0, 1)
    philox_normal:   Box-Muller on the word pair (g & ~1, g | 1) of index g: u1 = ((word >> 8) + 1) * 2^-24,
                     u2 = (word >> 8) * 2^-24, z = sqrt(-2 log u1) * (cos if g is even else sin)(2 pi u2)
The NumPy reference draws the same words (uniform: the same bits; normal: within the last bits of log and sin).
"""
from __future__ import annotations

import numpy as np

from .._dtypes import is_half
from ._common import Checked, backend, check_float_or_half, computes_half_in_float32, is_cuda_array, shape_str

__all__ = ["dropout_forward", "dropout_backward", "dropout_mask", "philox4x32", "philox_advance", "philox_bits",
           "philox_uniform", "philox_normal"]


def _check_args(op: str, p, seed, offset) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: p must be a number, got {type(p).__name__}")
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p (the drop probability) must be in [0, 1], got {p}")
    if hasattr(seed, "shape") and hasattr(seed, "dtype"):
        _check_state(op, "seed", seed)
        seed = 0
    for name, v, bound in (("seed", seed, 2**64), ("offset", offset, 2**64)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{op}: {name} must be an int, got {type(v).__name__}")
        if not 0 <= int(v) < bound:
            raise ValueError(f"{op}: {name} must be in [0, 2**64), got {v}")
    return p


def _check_state(op, name, state):
    """A Philox generator state: a (2,) uint64 array (seed, offset)."""
    if tuple(state.shape) != (2,) or state.dtype != np.uint64:
        raise ValueError(f"{op}: {name} as an array must be a (2,) uint64 generator state (seed, offset), "
                         f"got shape {shape_str(state.shape)} dtype {state.dtype}")


@computes_half_in_float32()
def _in_float32(name, a, p, seed, offset, **claim):
    """The NumPy reference on 16-bit data: computed in float32, rounded once (what the GPU's _half kernels
    compute directly)."""
    return getattr(backend("dropout", a), name)(a, p, seed, offset=offset, **claim)


def _run(name, a, p, seed, offset, claim=False):
    more = {"claim": True} if claim else {}
    if is_half(a.dtype) and not is_cuda_array(a):
        return _in_float32(name, a, p, seed, offset, **more)
    return getattr(backend("dropout", a), name)(a, p, seed, offset=offset, **more)


_checked_calls = Checked()   # the signatures of dropout's usual calls (a generator or claimed state, offset 0) checked


def _checked_run(op, name, a, p, seed, offset, claim=False):
    """The checks both directions share (p, seed, offset, dtype, counter space, devices), then the run. The usual
    calls (minidl.nn.functional.dropout's: the generator to claim from, or a claimed state, offset 0) run their
    checks once per signature."""
    key = None
    if type(offset) is int and offset == 0 and type(p) is float and type(seed) is not int and hasattr(seed, "shape"):
        key = (op, type(a), a.dtype, p, type(seed), seed.shape, seed.dtype, claim)
        if key in _checked_calls:
            return _run(op, a, p, seed, 0, claim)
    p = _check_args(op, p, seed, offset)
    check_float_or_half(op, **{name: a})
    if int(offset) + a.size > 2**64:
        raise ValueError(f"{op}: offset {offset} + {name}.size {a.size} runs past the 2**64 counter space")
    _check_state_device(op, a, seed)
    if claim:
        if not hasattr(seed, "shape") or int(offset) != 0:
            raise ValueError(f"{op}: claim=True takes the generator state (a (2,) uint64 array) as seed and offset "
                             f"0, got seed {type(seed).__name__} and offset {offset}")
    _checked_calls.add(key)
    return _run(op, a, p, _seed_arg(seed), int(offset), claim)


def dropout_forward(x, p, seed, *, offset=0, claim=False):
    """y = x * keep / (1 - p), keep drawn from Philox(seed, offset + index). y has x's shape and dtype
    (float16/bfloat16: the float32 product rounded once).

    claim=True: `seed` is a generator state (a (2,) uint64 array, minidl.random.philox_state), updated in place:
    the call claims x.size of its counters as philox_advance(seed, x.size) would, draws the mask from what it
    claimed, and returns (y, claimed), claimed being what dropout_backward needs as its seed. On the GPU the
    claim is part of the dropout launch (no launch of its own), so it too is replayed by a CUDA graph."""
    return _checked_run("dropout_forward", "x", x, p, seed, offset, bool(claim))


def dropout_backward(dy, p, seed, *, offset=0):
    """dx = dy * keep / (1 - p), with the forward's mask (same p, seed, offset and shape)."""
    return _checked_run("dropout_backward", "dy", dy, p, seed, offset)


def philox_advance(state, count):
    """Claim `count` counters of a Philox generator state without reading it on the host.

    state: (2,) uint64 array (seed, offset), NumPy or CuPy, updated in place. Returns a new (2,)
    array holding state's value before the call (pass it as dropout's `seed`); state's offset then
    grows by `count` rounded up to a multiple of 4 (one Philox call feeds 4 elements).
    """
    op = "philox_advance"
    _check_state(op, "state", state)
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ValueError(f"{op}: count must be an int >= 0, got {count!r}")
    return backend("dropout", state).philox_advance(state, int(count))


def _seed_arg(seed):
    return seed if hasattr(seed, "shape") else int(seed)


def _check_state_device(op, a, seed):
    if hasattr(seed, "shape") and is_cuda_array(seed) != is_cuda_array(a):
        where = "cuda" if is_cuda_array(seed) else "cpu"
        raise ValueError(f"{op}: the generator state (seed) is on {where} but the data is not")


def dropout_mask(shape, p, seed, offset=0):
    """The boolean keep-mask (NumPy, on the CPU) that dropout_forward uses for an array of `shape`."""
    op = "dropout_mask"
    p = _check_args(op, p, seed, offset)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"{op}: shape {shape_str(shape)} has a negative size")
    from .cpu import dropout as cpu_impl

    return cpu_impl.dropout_mask(shape, p, int(seed), int(offset))


def philox4x32(counter_words, key_words):
    """Philox4x32-10 of 4 counter words and 2 key words (ints or uint32 arrays, broadcast together).

    Returns 4 uint32 arrays. NumPy reference, for tests and tutorials.
    """
    if len(counter_words) != 4 or len(key_words) != 2:
        raise ValueError(
            f"philox4x32: needs 4 counter words and 2 key words, got {len(counter_words)} and {len(key_words)}"
        )
    from .cpu import dropout as cpu_impl

    return cpu_impl.philox4x32(counter_words, key_words)


def _philox_shape(op, shape):
    try:
        shape = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"{op}: shape must be a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in shape):
        raise ValueError(f"{op}: shape must not have negative sizes, got {shape}")
    return shape


def _philox_backend(op, seed, offset, device):
    _check_args(op, 0.0, seed, offset)
    on_gpu = is_cuda_array(seed) if hasattr(seed, "shape") else str(device).startswith("cuda")
    if hasattr(seed, "shape") and not on_gpu and str(device).startswith("cuda"):
        raise ValueError(f"{op}: the generator state is a host array but device={device!r}")
    return backend("dropout", on_gpu)


def philox_bits(shape, seed, *, offset=0, device="cpu"):
    """The raw uint32 word of each element's index (offset + flat index) in the Philox stream of `seed` (randint's and
    randperm's material: word % range, the order of the words)."""
    return _philox_backend("philox_bits", seed, offset, device).philox_bits(
        _philox_shape("philox_bits", shape), _seed_arg(seed), offset=int(offset))


def _philox_fill(op, shape, seed, offset, dtype, device):
    shape = _philox_shape(op, shape)
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"{op}: dtype must be float32 or float64, got {dtype}")
    return getattr(_philox_backend(op, seed, offset, device), op)(shape, _seed_arg(seed), offset=int(offset),
                                                                  dtype=dtype)


def philox_uniform(shape, seed, *, offset=0, dtype=np.float32, device="cpu"):
    """Uniform numbers on [0, 1) of `shape`: element i is (word(offset + i) >> 8) * 2^-24 of the Philox stream of
    `seed` (an int, or a (2,) uint64 state array (seed, base offset), on the device it draws on). float32 or float64;
    the CPU and the GPU give the same bits."""
    return _philox_fill("philox_uniform", shape, seed, offset, dtype, device)


def philox_normal(shape, seed, *, offset=0, dtype=np.float32, device="cpu"):
    """Standard normal numbers of `shape` from the Philox stream of `seed` (Box-Muller; see the module docstring)."""
    return _philox_fill("philox_normal", shape, seed, offset, dtype, device)
