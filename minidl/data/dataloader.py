"""DataLoader: turns a dataset into an iterator over batches of minidl tensors.

One epoch = one pass over a permutation of the sample indices (or 0..N-1 without shuffle), cut into
batches of `batch_size`; the last short batch is kept unless `drop_last`. Two ways to build a batch:

- the general path calls `dataset[i]` for each index and `collate_fn` stacks the samples;
- the fast path, for datasets of whole arrays (ArrayDataset/TensorDataset, a Subset of one, MNIST or
  CIFAR10 without a per-sample transform), cuts each batch with one fancy index per array. With
  `device="cuda"` those arrays are copied to the GPU once, when the loader is made, and batches are
  cut there: no host-to-device copy per step, which is what keeps a small GPU model busy.
"""
from __future__ import annotations

import collections.abc
import math

import numpy as np

from .. import _device
from ..primitives import get_array_module
from ._random import make_rng
from .dataset import Dataset


def _as_tensor(array):
    """Wrap a NumPy/CuPy array as a minidl Tensor without copying it."""
    from ..autograd.tensor import Tensor

    return Tensor(array)


def _is_tensor(x) -> bool:
    from ..autograd.tensor import Tensor

    return isinstance(x, Tensor)


# ------------------------------------------------------------------------------------------------
# Collation: a list of samples -> one batch
# ------------------------------------------------------------------------------------------------


def _collate_arrays(batch):
    """Stack a list of samples into arrays, keeping the samples' structure (tuple, list, dict).

    Python ints (and NumPy integer scalars) become int64, Python floats float64, bools bool, as in
    PyTorch's default_collate; arrays and tensors are stacked along a new first axis keeping their
    dtype; strings are returned as a list.
    """
    if len(batch) == 0:
        raise ValueError("default_collate: the batch is empty")
    elem = batch[0]
    if _is_tensor(elem):
        return _collate_arrays([t._data for t in batch])
    if isinstance(elem, np.ndarray) or _device.is_cuda_array(elem):
        shapes = {tuple(a.shape) for a in batch}
        if len(shapes) != 1:
            raise ValueError(f"default_collate: samples have different shapes {sorted(shapes)}; "
                             "pass a collate_fn that pads them")
        xp = get_array_module(elem)
        return xp.stack(batch)
    if isinstance(elem, (bool, np.bool_)):
        return np.array(batch, dtype=np.bool_)
    if isinstance(elem, (int, np.integer)):
        return np.array(batch, dtype=np.int64)
    if isinstance(elem, float):
        return np.array(batch, dtype=np.float64)
    if isinstance(elem, np.floating):
        return np.array(batch, dtype=elem.dtype)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return {key: _collate_arrays([sample[key] for sample in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(_collate_arrays(list(field)) for field in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise ValueError("default_collate: samples are sequences of different lengths")
        fields = [_collate_arrays(list(field)) for field in zip(*batch)]
        return tuple(fields) if isinstance(elem, tuple) else fields
    raise TypeError(f"default_collate: cannot collate samples of type {type(elem).__name__}; "
                    "samples must be arrays, tensors, numbers, strings, or tuples/lists/dicts of them")


def _to_tensors(structure, device=None):
    """Replace every array leaf of a (nested) batch by a minidl Tensor on `device` (None: stay put)."""
    if _is_tensor(structure):
        if device is not None and _device.device_of(structure._data) != _device.Device(device):
            return _as_tensor(_device.move_array(structure._data, device))
        return structure
    if isinstance(structure, np.ndarray) or _device.is_cuda_array(structure):
        if device is not None:
            structure = _device.move_array(structure, device)
        return _as_tensor(structure)
    if isinstance(structure, dict):
        return {key: _to_tensors(value, device) for key, value in structure.items()}
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        return type(structure)(*(_to_tensors(v, device) for v in structure))
    if isinstance(structure, (tuple, list)) and not all(isinstance(v, (str, bytes)) for v in structure):
        return type(structure)(_to_tensors(v, device) for v in structure)
    return structure


def default_collate(batch):
    """A list of samples -> a batch of minidl tensors with the samples' structure.

    [(x0, y0), (x1, y1), ...] with x arrays of shape S and y ints -> (Tensor (B, *S), Tensor int64 (B,)).
    """
    return _to_tensors(_collate_arrays(batch))


# ------------------------------------------------------------------------------------------------
# The loader
# ------------------------------------------------------------------------------------------------


class DataLoader:
    """Iterate over `dataset` in batches (PyTorch's DataLoader, single process).

    dataset:    a map-style dataset (len and [i]).
    batch_size: samples per batch; the last batch is shorter unless drop_last.
    shuffle:    a new random order every epoch, drawn from `generator`.
    collate_fn: list of samples -> batch (default: `default_collate`).
    generator:  int seed or numpy Generator, used across epochs (two loaders with the same seed give
                the same epochs). None draws a fresh seed from the global seed at each epoch.
    device:     None/"cpu"/"cuda": where the batches' tensors live. On the fast path the whole dataset
                is copied to that device once, here.
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, collate_fn=None,
                 generator=None, device=None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        try:
            n = len(dataset)
        except TypeError:
            raise TypeError(f"DataLoader: the dataset must have a length, got {type(dataset).__name__}") from None
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.collate_fn = collate_fn
        self.device = None if device is None else _device.Device(device)
        self._num_samples = n
        # A given generator is made once so successive epochs continue its stream.
        self._rng = None if generator is None else make_rng(generator, "DataLoader")

        self._arrays, self._index_map = None, None
        whole = dataset._whole_arrays() if (collate_fn is None and isinstance(dataset, Dataset)) else None
        if whole is not None:
            arrays, index_map = whole
            if self.device is not None:
                # The one copy of the dataset to the device; batches are cut there afterwards.
                arrays = tuple(_device.move_array(a, self.device) for a in arrays)
                if index_map is not None:
                    index_map = _device.move_array(index_map, self.device)
            self._arrays, self._index_map = arrays, index_map

    def __len__(self):
        if self.drop_last:
            return self._num_samples // self.batch_size
        return math.ceil(self._num_samples / self.batch_size)

    def _epoch_order(self):
        """The sample order of one epoch: a permutation (shuffle) or None meaning 0..N-1."""
        if not self.shuffle:
            return None
        rng = self._rng if self._rng is not None else make_rng(None)
        return rng.permutation(self._num_samples)

    def __iter__(self):
        order = self._epoch_order()
        if self._arrays is not None:
            yield from self._iter_fast(order)
        else:
            yield from self._iter_samples(order)

    def _batch_bounds(self):
        for b in range(len(self)):
            start = b * self.batch_size
            yield start, min(start + self.batch_size, self._num_samples)

    def _iter_fast(self, order):
        on_device = self._arrays[0]
        xp = get_array_module(on_device)
        if order is not None and _device.is_cuda_array(on_device):
            # One small transfer of the permutation per epoch, not one per batch.
            order = _device.move_array(order, _device.device_of(on_device))
        for start, stop in self._batch_bounds():
            if order is None and self._index_map is None:
                batch = tuple(a[start:stop] for a in self._arrays)  # views: no copy at all
            else:
                idx = order[start:stop] if order is not None else xp.arange(start, stop)
                if self._index_map is not None:
                    idx = self._index_map[idx]
                batch = tuple(a[idx] for a in self._arrays)
            yield tuple(_as_tensor(a) for a in batch)

    def _iter_samples(self, order):
        for start, stop in self._batch_bounds():
            indices = range(start, stop) if order is None else order[start:stop]
            samples = [self.dataset[int(i)] for i in indices]
            if self.collate_fn is None:
                yield _to_tensors(_collate_arrays(samples), self.device)
            elif self.device is not None:
                yield _to_tensors(self.collate_fn(samples), self.device)
            else:
                yield self.collate_fn(samples)  # a custom collate's batch, untouched
