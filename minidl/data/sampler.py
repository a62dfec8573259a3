"""Samplers: the order in which a DataLoader visits sample indices (torch.utils.data's names).

A sampler is an iterable of indices with a length; `DataLoader(sampler=...)` takes its order, and
`DataLoader(batch_sampler=BatchSampler(...))` takes whole index lists. Random samplers draw from
`generator` (an int seed or a numpy Generator, continued across epochs) or, when it is None, from a
fresh seed drawn from the global state each epoch, as the DataLoader's shuffle does.
"""
from __future__ import annotations

import numpy as np

from ._random import make_rng


class Sampler:
    """Base class: subclasses define __iter__ (indices) and usually __len__."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class _Random(Sampler):
    def _rng(self):
        if self.generator is None:
            return make_rng(None)
        if getattr(self, "_stream", None) is None:
            self._stream = make_rng(self.generator, type(self).__name__)
        return self._stream


class RandomSampler(_Random):
    """A random permutation of the indices (or num_samples draws with replacement)."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source, self.replacement, self.generator = data_source, bool(replacement), generator
        self._num_samples = num_samples
        if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
            raise ValueError(f"RandomSampler: num_samples should be a positive integer, got {num_samples!r}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n, rng = len(self.data_source), self._rng()
        if self.replacement:  # drawn lazily, in chunks: num_samples may be huge (an "infinite" sampler)
            def draws(total=self.num_samples, chunk=32768):
                for first in range(0, total, chunk):
                    yield from rng.integers(0, n, size=min(chunk, total - first)).tolist()
            return draws()
        reps = -(-self.num_samples // n)
        return iter(np.concatenate([rng.permutation(n) for _ in range(reps)])[: self.num_samples].tolist())

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(_Random):
    """The given indices, in a random order each epoch."""

    def __init__(self, indices, generator=None):
        self.indices, self.generator = list(indices), generator

    def __iter__(self):
        return iter([self.indices[i] for i in self._rng().permutation(len(self.indices))])

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(_Random):
    """num_samples indices drawn with probability proportional to weights."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        self.weights = np.asarray(getattr(weights, "_data", weights), dtype=np.float64)
        if self.weights.ndim != 1 or (self.weights < 0).any() or not self.weights.sum() > 0:
            raise ValueError("WeightedRandomSampler: weights must be a 1-D sequence of non-negative numbers, not all 0")
        self.num_samples, self.replacement, self.generator = int(num_samples), bool(replacement), generator
        if not self.replacement and self.num_samples > self.weights.size:
            raise ValueError("WeightedRandomSampler: num_samples exceeds the number of weights without replacement")

    def __iter__(self):
        p = self.weights / self.weights.sum()
        return iter(self._rng().choice(p.size, size=self.num_samples, replace=self.replacement, p=p).tolist())

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of batch_size (the last shorter unless drop_last)."""

    def __init__(self, sampler, batch_size, drop_last):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"BatchSampler: batch_size should be a positive integer, got {batch_size!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, bool(drop_last)

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
