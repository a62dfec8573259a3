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
"""
from __future__ import annotations

import numpy as np

from ._common import backend, check_float, is_cuda_array, shape_str

__all__ = ["dropout_forward", "dropout_backward", "dropout_mask", "philox4x32"]


def _check_args(op: str, p, seed, offset) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: p must be a number, got {type(p).__name__}")
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p (the drop probability) must be in [0, 1], got {p}")
    for name, v, bound in (("seed", seed, 2**64), ("offset", offset, 2**64)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{op}: {name} must be an int, got {type(v).__name__}")
        if not 0 <= int(v) < bound:
            raise ValueError(f"{op}: {name} must be in [0, 2**64), got {v}")
    return p


def dropout_forward(x, p, seed, *, offset=0):
    """y = x * keep / (1 - p), keep drawn from Philox(seed, offset + index). y has x's shape."""
    op = "dropout_forward"
    p = _check_args(op, p, seed, offset)
    check_float(op, x=x)
    if int(offset) + x.size > 2**64:
        raise ValueError(f"{op}: offset {offset} + x.size {x.size} runs past the 2**64 counter space")
    return backend("dropout", x).dropout_forward(x, p, int(seed), offset=int(offset))


def dropout_backward(dy, p, seed, *, offset=0):
    """dx = dy * keep / (1 - p), with the forward's mask (same p, seed, offset and shape)."""
    op = "dropout_backward"
    p = _check_args(op, p, seed, offset)
    check_float(op, dy=dy)
    if int(offset) + dy.size > 2**64:
        raise ValueError(f"{op}: offset {offset} + dy.size {dy.size} runs past the 2**64 counter space")
    return backend("dropout", dy).dropout_backward(dy, p, int(seed), offset=int(offset))


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
