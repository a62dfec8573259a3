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
import itertools
import math

import numpy as np

from .. import _device
from ..primitives import get_array_module
from ._random import make_rng
from .dataset import Dataset, IterableDataset


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
        if any(isinstance(b, (float, np.floating)) for b in batch):   # ints and floats mixed: floats, as torch
            return np.array(batch, dtype=np.float64)
        return np.array(batch, dtype=np.int64)
    if isinstance(elem, float):
        return np.array(batch, dtype=np.float64)
    if isinstance(elem, np.floating):
        return np.array(batch, dtype=elem.dtype)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if hasattr(elem, "__array__") or hasattr(elem, "__array_interface__"):
        # A torch.Tensor (from a torchvision dataset or transform) or a PIL image: as a NumPy array.
        return _collate_arrays([np.asarray(sample) for sample in batch])
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


def default_convert(data):
    """One sample's NumPy arrays (nested in dicts, tuples and lists) as tensors, nothing stacked
    (torch.utils.data.default_convert: the collate_fn of a DataLoader with batch_size=None)."""
    return _to_tensors(data)


def default_collate(batch):
    """A list of samples -> a batch of minidl tensors with the samples' structure.

    [(x0, y0), (x1, y1), ...] with x arrays of shape S and y ints -> (Tensor (B, *S), Tensor int64 (B,)).
    """
    return _to_tensors(_collate_arrays(batch))


# ------------------------------------------------------------------------------------------------
# The loader
# ------------------------------------------------------------------------------------------------



# A sampler longer than this many indices is drawn batch by batch (DataLoader._long_sampler), not listed at the
# epoch's start.
EAGER_ORDER_LIMIT = 1 << 24


def _sampler_index(i) -> int:
    """One index a sampler yielded, as an int (integers only: a bool or a float is the sampler's bug)."""
    if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) and not (
            hasattr(i, "ndim") and i.ndim == 0 and i.dtype.kind in "iu"):
        raise TypeError(f"DataLoader: the sampler yielded {i!r}; indices must be integers")
    return int(i)

class DataLoader:
    """Iterate over `dataset` in batches (PyTorch's DataLoader).

    dataset:     a map-style dataset (len and [i]): minidl's, or any object with those (a torchvision
                 dataset works as it is).
    batch_size:  samples per batch; the last batch is shorter unless drop_last.
    shuffle:     a new random order every epoch, drawn from `generator`.
    sampler:     an iterable of sample indices (with len) giving the order instead; batch_sampler: an
                 iterable of index lists, one per batch (then no batch_size/shuffle/sampler/drop_last).
    collate_fn:  list of samples -> batch (default: `default_collate`).
    num_workers: 0 loads in this process; N > 0 starts N worker processes (minidl.data._workers) that
                 call dataset[i] and collate, giving exactly the batches of num_workers=0. Datasets of
                 whole arrays (the fast path below) do not need workers and do not use them.
    worker_init_fn, prefetch_factor (default 2), persistent_workers, timeout, multiprocessing_context:
                 as torch. pin_memory / pin_memory_device are accepted and do nothing (use device=).
    generator:   int seed or numpy Generator, used across epochs (two loaders with the same seed give
                 the same epochs). None draws a fresh seed from the global seed at each epoch.
    device:      None/"cpu"/"cuda": where the batches' tensors live. On the fast path the whole dataset
                 is copied to that device once, here.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True, device=None):
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
                                       or batch_size < 1):
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError("DataLoader: batch_sampler option is mutually exclusive with batch_size, shuffle, "
                             "sampler, and drop_last")
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be a non-negative int, got {num_workers!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise ValueError(f"DataLoader: timeout option should be a number >= 0, got {timeout!r}")
        if num_workers == 0 and (prefetch_factor is not None or persistent_workers):
            raise ValueError("DataLoader: prefetch_factor and persistent_workers need num_workers > 0 (as torch)")
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle or sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle, sampler and "
                                 "batch_sampler options (the stream gives the order), as torch")
            try:
                n = len(dataset)
            except (TypeError, NotImplementedError):
                n = None
        else:
            try:
                n = len(dataset) if sampler is None else len(sampler)
            except TypeError:
                raise TypeError(f"DataLoader: the dataset must have a length, got {type(dataset).__name__}") from None
        self.dataset = dataset
        self.batch_size = None if batch_sampler is not None else int(batch_size)
        self.shuffle = bool(shuffle)
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.drop_last = bool(drop_last)
        self.collate_fn = collate_fn
        self.num_workers = int(num_workers)
        self.pin_memory, self.timeout, self.worker_init_fn = pin_memory, timeout, worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.prefetch_factor = 2 if prefetch_factor is None and num_workers else prefetch_factor
        self.persistent_workers = bool(persistent_workers)
        self._pool = None
        self.device = None if device is None else _device.Device(device)
        self._num_samples = n
        # A given generator is made once so successive epochs continue its stream.
        self._rng = None if generator is None else make_rng(generator, "DataLoader")

        self._arrays, self._index_map = None, None
        whole = (dataset._whole_arrays() if (collate_fn is None and batch_sampler is None and isinstance(dataset, Dataset)
                                              and not self._iterable) else None)
        if whole is not None:
            arrays, index_map = whole
            if self.device is not None:
                # The one copy of the dataset to the device; batches are cut there afterwards.
                arrays = tuple(_device.move_array(a, self.device) for a in arrays)
                if index_map is not None:
                    index_map = _device.move_array(index_map, self.device)
            self._arrays, self._index_map = arrays, index_map

    def __len__(self):
        if self._iterable and self._num_samples is None:
            raise TypeError(f"DataLoader: {type(self.dataset).__name__} has no __len__, so neither has its loader "
                            "(an IterableDataset's length is optional)")
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        if self.drop_last:
            return self._num_samples // self.batch_size
        return math.ceil(self._num_samples / self.batch_size)

    def _epoch_order(self):
        """The sample order of one epoch: the sampler's, a permutation (shuffle), or None meaning 0..N-1."""
        if self.sampler is not None:   # every index it yields, even past its __len__ (as torch)
            return np.asarray([_sampler_index(i) for i in self.sampler], dtype=np.int64)
        if not self.shuffle:
            return None
        rng = self._rng if self._rng is not None else make_rng(None)
        return rng.permutation(self._num_samples)

    def _iter_stream(self):
        """An IterableDataset: batches of what its iterator yields, in order."""
        collate = self.collate_fn or _collate_arrays
        it = iter(self.dataset)
        while True:
            samples = list(itertools.islice(it, self.batch_size))
            if not samples or (self.drop_last and len(samples) < self.batch_size):
                return
            yield self._finish(collate(samples))

    def _long_sampler(self) -> bool:
        """The sampler's indices are drawn batch by batch instead of all at the epoch's start: a sampler without a
        length, or one longer than EAGER_ORDER_LIMIT (minGPT's "endless" RandomSampler(replacement=True,
        num_samples=int(1e10)), which a training loop leaves after max_iters batches)."""
        if self.sampler is None:
            return False
        try:
            return len(self.sampler) > EAGER_ORDER_LIMIT
        except TypeError:
            return True

    def _sampler_batches(self):
        """Batches of the sampler's indices, drawn as they are needed."""
        it = iter(self.sampler)
        while True:
            batch = [_sampler_index(i) for i in itertools.islice(it, self.batch_size)]
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def __iter__(self):
        if self._iterable:
            yield from self._iter_stream()
            return
        if self.batch_sampler is not None:
            batches = (list(b) for b in self.batch_sampler)
        elif self._long_sampler():
            batches = self._sampler_batches()
            if self._arrays is not None:
                yield from self._iter_fast_batches(batches)
                return
        else:
            order = self._epoch_order()
            if self._arrays is not None:
                yield from self._iter_fast(order)
                return
            batches = [range(start, stop) if order is None else order[start:stop].tolist()
                       for start, stop in self._batch_bounds(None if order is None else len(order))]
        if self.num_workers == 0:
            yield from self._iter_samples(batches)
        else:
            yield from self._iter_workers(batches)

    def _batch_bounds(self, total=None):
        total = self._num_samples if total is None else total
        count = total // self.batch_size if self.drop_last else math.ceil(total / self.batch_size)
        for b in range(count):
            start = b * self.batch_size
            yield start, min(start + self.batch_size, total)

    def _iter_fast(self, order):
        on_device = self._arrays[0]
        xp = get_array_module(on_device)
        if order is not None and _device.is_cuda_array(on_device):
            # One small transfer of the permutation per epoch, not one per batch.
            order = _device.move_array(order, _device.device_of(on_device))
        for start, stop in self._batch_bounds(None if order is None else len(order)):
            if order is None and self._index_map is None:
                batch = tuple(a[start:stop] for a in self._arrays)  # views: no copy at all
            else:
                idx = order[start:stop] if order is not None else xp.arange(start, stop)
                if self._index_map is not None:
                    idx = self._index_map[idx]
                batch = tuple(a[idx] for a in self._arrays)
            yield tuple(_as_tensor(a) for a in batch)

    def _iter_fast_batches(self, batches):
        """_iter_fast for index batches drawn one at a time (_sampler_batches): each batch's indices go to the
        arrays' device on their own."""
        on_device = self._arrays[0]
        device = _device.device_of(on_device) if _device.is_cuda_array(on_device) else None
        for indices in batches:
            idx = np.asarray(indices, dtype=np.int64)
            if device is not None:
                idx = _device.move_array(idx, device)
            if self._index_map is not None:
                idx = self._index_map[idx]
            yield tuple(_as_tensor(a[idx]) for a in self._arrays)

    def _finish(self, batch):
        if self.collate_fn is None:
            return _to_tensors(batch, self.device)
        if self.device is not None:
            return _to_tensors(batch, self.device)
        return batch  # a custom collate's batch, untouched

    def _iter_samples(self, batches):
        collate = self.collate_fn or _collate_arrays
        for indices in batches:
            yield self._finish(collate([self.dataset[int(i)] for i in indices]))

    def _worker_base_seed(self):
        """The workers' base seed, from a stream of its own: drawing it never moves the loader's
        generator, so the sample order is the same as with num_workers=0."""
        if self._rng is None:
            from .. import random as minidl_random

            return minidl_random.next_seed() % 2**62
        if getattr(self, "_seed_rng", None) is None:
            self._seed_rng = np.random.default_rng(self._rng.bit_generator.seed_seq.spawn(1)[0])
        return int(self._seed_rng.integers(0, 2**62))

    def _iter_workers(self, batches):
        from ._workers import WorkerPool

        pool = self._pool
        if pool is not None and not pool.procs:   # a persistent pool shut down by a worker's error: start
            pool = self._pool = None              # fresh workers (the old ones are gone; waiting would hang)
        if pool is None:
            base_seed = self._worker_base_seed()
            pool = WorkerPool(self.dataset, self.collate_fn or _collate_arrays, self.num_workers, base_seed,
                              self.worker_init_fn, self.prefetch_factor, self.multiprocessing_context, self.timeout)
            if self.persistent_workers:
                self._pool = pool
        try:
            for batch in pool.run_epoch(list(map(int, b)) for b in batches):
                yield self._finish(batch)
        finally:
            if not self.persistent_workers:
                pool.shutdown()
