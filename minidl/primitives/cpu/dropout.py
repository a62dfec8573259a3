"""NumPy reference of Philox4x32-10 and of dropout (the mapping is in minidl/primitives/dropout.py).

Philox works on 32-bit words; NumPy has no 32x32 -> 64-bit "mulhilo", so words are held in uint64
and products are split into their high and low halves. Every product of two 32-bit values fits in
64 bits, so nothing overflows.
"""
from __future__ import annotations

import numpy as np

_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)
_PHILOX_M0 = np.uint64(0xD2511F53)  # round multipliers (Salmon et al. 2011)
_PHILOX_M1 = np.uint64(0xCD9E8D57)
_PHILOX_W0 = np.uint64(0x9E3779B9)  # key schedule: golden ratio
_PHILOX_W1 = np.uint64(0xBB67AE85)  # key schedule: sqrt(3) - 1
_ROUNDS = 10


def _mulhilo(a, b):
    """(high 32 bits, low 32 bits) of the 64-bit product of two 32-bit words."""
    product = a * b
    return product >> _SHIFT32, product & _MASK32


def philox4x32(counter_words, key_words):
    """Philox4x32-10: 4 counter words and 2 key words (broadcastable) -> 4 uint32 arrays."""
    c0, c1, c2, c3 = (np.asarray(w, dtype=np.uint64) & _MASK32 for w in counter_words)
    k0, k1 = (np.asarray(w, dtype=np.uint64) & _MASK32 for w in key_words)
    for round_number in range(_ROUNDS):
        if round_number > 0:
            # The key is bumped between rounds (Weyl sequence), so each round has its own key.
            k0 = (k0 + _PHILOX_W0) & _MASK32
            k1 = (k1 + _PHILOX_W1) & _MASK32
        hi0, lo0 = _mulhilo(_PHILOX_M0, c0)
        hi1, lo1 = _mulhilo(_PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return tuple(np.asarray(c, dtype=np.uint32) for c in np.broadcast_arrays(c0, c1, c2, c3))


def _words(n, seed, offset):
    """The Philox words of global indices offset .. offset + n - 1, in order (uint32)."""
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    # One Philox call makes 4 words, for indices 4b .. 4b+3: generate whole blocks, then cut.
    first_block, last_block = offset >> 2, (offset + n - 1) >> 2
    blocks = np.arange(last_block - first_block + 1, dtype=np.uint64) + np.uint64(first_block)
    key = (seed & 0xFFFFFFFF, seed >> 32)
    words = philox4x32((blocks & _MASK32, blocks >> _SHIFT32, 0, 0), key)
    stream = np.stack(words, axis=1).reshape(-1)  # word (i & 3) of block (i >> 2), in order of i
    start = offset & 3
    return stream[start:start + n]


def dropout_mask(shape, p, seed, offset=0):
    """Boolean keep-mask of `shape`: element i (offset + flat index) is kept iff u_i >= p."""
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return np.zeros(shape, dtype=bool)
    bits24 = _words(n, seed, offset) >> np.uint32(8)
    # u = bits24 * 2^-24 >= p  <=>  bits24 >= p * 2^24 (exact in float64: a power-of-two scaling).
    keep = bits24.astype(np.float64) * 2.0**-24 >= p
    return keep.reshape(shape)


def philox_bits(shape, seed, *, offset=0):
    """The uint32 word of each element's index (offset + flat index)."""
    seed, offset = _seed_and_offset(seed, offset)
    return _words(int(np.prod(shape, dtype=np.int64)), seed, offset).reshape(shape)


def philox_uniform(shape, seed, *, offset=0, dtype=np.float32):
    """u = (word(offset + i) >> 8) * 2^-24 for each element i (C order): uniform on [0, 1)."""
    seed, offset = _seed_and_offset(seed, offset)
    dtype = np.dtype(dtype).type
    n = int(np.prod(shape, dtype=np.int64))
    bits24 = _words(n, seed, offset) >> np.uint32(8)
    return (bits24.astype(dtype) * dtype(2.0**-24)).reshape(shape)


def philox_normal(shape, seed, *, offset=0, dtype=np.float32):
    """Box-Muller on the word pairs (g & ~1, g | 1) of each global index g = offset + i (the kernel's mapping), in
    the output's precision: standard normal numbers."""
    seed, offset = _seed_and_offset(seed, offset)
    dtype = np.dtype(dtype).type
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return np.zeros(shape, dtype=dtype)
    g = np.arange(n, dtype=np.uint64) + np.uint64(offset)
    base = offset & ~1                                   # the words of every pair the elements touch
    words = _words(int(g[-1] | np.uint64(1)) - base + 1, seed, base) >> np.uint32(8)
    first = (g & ~np.uint64(1)) - np.uint64(base)
    one, scale = dtype(1), dtype(2.0**-24)
    u1 = (words[first].astype(dtype) + one) * scale
    u2 = words[first + np.uint64(1)].astype(dtype) * scale
    radius = np.sqrt(dtype(-2) * np.log(u1))
    angle = dtype(2 * np.pi) * u2
    z = np.where((g & np.uint64(1)) == 1, radius * np.sin(angle), radius * np.cos(angle))
    return z.astype(dtype).reshape(shape)


def _seed_and_offset(seed, offset):
    """(seed, offset) as ints; `seed` may be a (2,) uint64 generator state (seed, base offset)."""
    if isinstance(seed, np.ndarray):
        return int(seed[0]), int(seed[1]) + int(offset)
    return int(seed), int(offset)


def philox_advance(state, count):
    """claimed = a copy of state (seed, offset); then state[1] += count rounded up to a multiple of 4."""
    claimed = state.copy()
    state[1] = np.uint64(int(state[1]) + ((int(count) + 3) & ~3))
    return claimed


def _apply_mask(a, p, seed, offset):
    seed, offset = _seed_and_offset(seed, offset)
    if p == 0.0:
        return a.copy()
    if p == 1.0:
        return np.zeros_like(a)
    keep = dropout_mask(a.shape, p, seed, offset)
    scale = a.dtype.type(1.0 / (1.0 - p))
    return np.where(keep, a * scale, a.dtype.type(0))


def dropout_forward(x, p, seed, *, offset=0, claim=False):
    if claim:   # seed: the generator, whose x.size counters this call claims (the GPU kernel does it in its launch)
        claimed = philox_advance(seed, x.size)
        return _apply_mask(x, p, claimed, 0), claimed
    return _apply_mask(x, p, seed, offset)


def dropout_backward(dy, p, seed, *, offset=0):
    # The same (seed, offset, index) -> the same mask as the forward pass, regenerated.
    return _apply_mask(dy, p, seed, offset)
