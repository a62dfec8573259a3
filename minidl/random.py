"""Random numbers: one seeded generator for the CPU (NumPy's PCG64) and one for the GPU (CuPy's).

`minidl.manual_seed(s)` seeds both, so a script is reproducible on either device. Dropout draws its
seeds from here too, and its masks come from a counter-based generator (Philox) in the primitive
library, so the same seed gives the same mask on the CPU and the GPU.
"""
from __future__ import annotations

import numpy as np

from . import _device

_cpu_rng = np.random.default_rng(0)
_seed = 0


def manual_seed(seed: int):
    """Seed every generator minidl uses (CPU, GPU, dropout seeds)."""
    global _cpu_rng, _seed
    _seed = int(seed)
    _cpu_rng = np.random.default_rng(_seed)
    if _device.cuda_unavailable_reason() is None:
        _device._cupy.random.seed(_seed)
    return _seed


def initial_seed() -> int:
    return _seed


def cpu_generator() -> np.random.Generator:
    return _cpu_rng


def next_seed() -> int:
    """A fresh 63-bit seed (for dropout masks and data shuffling), drawn from the CPU generator."""
    return int(_cpu_rng.integers(0, 2**63 - 1))


def _rng_for(device):
    device = _device.Device(device)
    if device.type == "cpu":
        return _cpu_rng
    cupy = _device.require_cuda()
    return cupy.random


def uniform_array(shape, low, high, dtype, device="cpu"):
    dtype = np.dtype(dtype)
    rng = _rng_for(device)
    if _device.Device(device).type == "cpu":
        return (rng.random(shape, dtype=np.float64) * (high - low) + low).astype(dtype)
    return (rng.random(shape, dtype=np.float64) * (high - low) + low).astype(dtype)


def normal_array(shape, mean, std, dtype, device="cpu"):
    dtype = np.dtype(dtype)
    rng = _rng_for(device)
    if _device.Device(device).type == "cpu":
        return (rng.standard_normal(shape) * std + mean).astype(dtype)
    return (rng.standard_normal(shape, dtype=np.float64) * std + mean).astype(dtype)


def integers_array(low, high, shape, dtype, device="cpu"):
    rng = _rng_for(device)
    if _device.Device(device).type == "cpu":
        return rng.integers(low, high, size=shape).astype(dtype)
    return rng.randint(low, high, size=shape).astype(dtype)


def permutation_array(n, device="cpu"):
    rng = _rng_for(device)
    if _device.Device(device).type == "cpu":
        return rng.permutation(n)
    return rng.permutation(n)
