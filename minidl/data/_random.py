"""Seeded randomness for the data pipeline: shuffling, random_split and random transforms.

Everything random in minidl.data draws from a NumPy `Generator`. A caller passes either an int seed,
a `numpy.random.Generator`, or nothing; with nothing, a fresh seed is drawn from minidl's global
generator (set by `minidl.manual_seed`) when the framework has one, else from NumPy's global state,
so that `minidl.manual_seed(0)` (or `np.random.seed(0)`) makes a whole run reproducible.
"""
from __future__ import annotations

import numpy as np


def _seed_from_global_state() -> int:
    """A 63-bit seed drawn from minidl's global generator (minidl.random), else from NumPy's."""
    try:
        from .. import random as minidl_random

        return int(minidl_random.next_seed())
    except (ImportError, AttributeError):  # a framework without a global generator: NumPy's
        return int(np.random.randint(0, 2**63 - 1, dtype=np.int64))


def make_rng(generator=None, owner: str = "minidl.data") -> np.random.Generator:
    """An int seed, a numpy Generator or None -> a numpy Generator.

    A Generator passed in is used as is (not copied), so successive draws continue its stream.
    """
    if generator is None:
        return np.random.default_rng(_seed_from_global_state())
    if isinstance(generator, np.random.Generator):
        return generator
    if hasattr(generator, "rng") and hasattr(generator, "manual_seed"):   # a minidl.Generator (torch's), or
        if str(getattr(generator, "device", "cpu")) != "cpu":            # minidl.default_generator
            raise RuntimeError(f"{owner}: Expected a 'cpu' device type for generator but found "
                               f"'{generator.device}' (the data pipeline draws on the CPU, as torch's)")
        return generator.rng
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return np.random.default_rng(int(generator))
    raise TypeError(f"{owner}: generator must be a minidl.Generator, an int seed, a numpy.random.Generator or None, "
                    f"got {type(generator).__name__}")
