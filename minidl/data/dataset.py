"""Datasets: anything with `__len__` and `__getitem__(i)` (PyTorch's map-style dataset).

`ArrayDataset` / `TensorDataset` hold whole arrays whose first axis is the sample axis. They tell the
DataLoader so (through `_whole_arrays`), and the loader then cuts a whole batch with one fancy index
per array instead of calling `__getitem__` once per sample: on MNIST that is the difference between
~60,000 Python calls per epoch and ~1,000 NumPy calls.
"""
from __future__ import annotations

import math

import numpy as np

from ._random import make_rng


def _raw_array(a):
    """A minidl Tensor -> its NumPy/CuPy array; arrays pass through; anything else -> np.asarray."""
    data = getattr(a, "_data", None)
    if data is not None:
        return data
    if type(a).__module__.startswith("cupy") or isinstance(a, np.ndarray):
        return a
    return np.asarray(a)


class Dataset:
    """Base class of map-style datasets: subclasses define `__len__` and `__getitem__(index)`."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def _whole_arrays(self):
        """(arrays, indices) when item i is exactly `tuple(a[indices[i]] for a in arrays)`, else None.

        `indices` is None for the identity. The DataLoader uses this to index whole batches at once;
        a dataset with a per-sample transform must return None.
        """
        return None

    def __add__(self, other):
        """dataset_a + dataset_b: their concatenation (torch's Dataset.__add__)."""
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A stream of samples (torch.utils.data.IterableDataset): define __iter__; DataLoader batches what it
    yields, in order (no sampler, no shuffle). __len__ is optional. With num_workers > 0 minidl still reads
    the stream in the main process (one copy of it, as torch's single-process loading)."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __getitem__(self, index):
        raise TypeError(f"{type(self).__name__} is an IterableDataset: iterate over it instead of indexing")


class ArrayDataset(Dataset):
    """Samples are rows of arrays of equal length: item i is `(a0[i], a1[i], ...)`.

    Arrays may be NumPy or CuPy arrays or minidl Tensors (their arrays are used, so items are arrays).
    """

    def __init__(self, *arrays):
        if not arrays:
            raise ValueError(f"{type(self).__name__}: needs at least one array")
        arrays = tuple(_raw_array(a) for a in arrays)
        for a in arrays:
            if a.ndim == 0:
                raise ValueError(f"{type(self).__name__}: arrays need a sample axis, got a 0-d array")
        lengths = [a.shape[0] for a in arrays]
        if len(set(lengths)) != 1:
            shapes = ", ".join(str(tuple(a.shape)) for a in arrays)
            raise ValueError(f"{type(self).__name__}: all arrays must have the same first dimension, "
                             f"got shapes {shapes}")
        self.arrays = arrays

    def __len__(self):
        return int(self.arrays[0].shape[0])

    def __getitem__(self, index):
        return tuple(a[index] for a in self.arrays)

    def _whole_arrays(self):
        return self.arrays, None


class TensorDataset(ArrayDataset):
    """torch.utils.data.TensorDataset: item i (or a slice, or an index array) is `(t0[i], t1[i], ...)` as
    Tensors, as in PyTorch (programs slice it directly: `xb, yb = train_ds[0:64]`). The DataLoader still
    cuts whole batches from the arrays (`_whole_arrays`)."""

    def __getitem__(self, index):
        from ..autograd.tensor import Tensor   # data sits below autograd's users; imported on use

        return tuple(Tensor._make(a[index]) for a in self.arrays)


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(dataset)
        if self.indices.size and (self.indices.min() < -n or self.indices.max() >= n):
            raise ValueError(f"Subset: indices must lie in [{-n}, {n}) for a dataset of length {n}, "
                             f"got min {self.indices.min()} and max {self.indices.max()}")
        self.indices = self.indices % max(n, 1)

    def __len__(self):
        return int(self.indices.size)

    def __getitem__(self, index):
        return self.dataset[int(self.indices[index])]

    def _whole_arrays(self):
        inner = self.dataset._whole_arrays() if isinstance(self.dataset, Dataset) else None
        if inner is None:
            return None
        arrays, inner_indices = inner
        # A subset of a subset composes the index maps instead of copying data.
        indices = self.indices if inner_indices is None else inner_indices[self.indices]
        return arrays, indices


class ConcatDataset(Dataset):
    """The datasets one after another (torch.utils.data.ConcatDataset); `cumulative_sizes` as torch's."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset (use ChainDataset)")
        self.cumulative_sizes = np.cumsum([len(d) for d in self.datasets]).tolist()

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index += len(self)
        which = int(np.searchsorted(self.cumulative_sizes, index, side="right"))
        if which >= len(self.datasets):
            raise IndexError(f"ConcatDataset: index {index} out of range for length {len(self)}")
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class ChainDataset(IterableDataset):
    """Iterable datasets one after another (torch.utils.data.ChainDataset)."""

    def __init__(self, datasets):
        self.datasets = list(datasets)

    def __iter__(self):
        for d in self.datasets:
            yield from d

    def __len__(self):
        try:
            return sum(len(d) for d in self.datasets)
        except NotImplementedError as e:   # (a stream without a length: a TypeError, as len() of torch's)
            raise TypeError(str(e)) from None


class StackDataset(Dataset):
    """Samples from several datasets of one length side by side: a tuple (positional) or a dict (keywords)
    (torch.utils.data.StackDataset)."""

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError("StackDataset: supported either tuple-like (positional) or dict-like (keyword) input, "
                             "not both")
        self.datasets = args or kwargs
        lengths = {len(d) for d in (args or kwargs.values())}
        if len(lengths) != 1:
            raise ValueError(f"StackDataset: size mismatch between datasets ({sorted(lengths)})")
        self._length = lengths.pop()

    def __len__(self):
        return self._length

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)


def _split_lengths(n: int, lengths) -> list[int]:
    """Integer lengths, or fractions summing to 1 turned into lengths as PyTorch does."""
    lengths = list(lengths)
    if not lengths:
        raise ValueError("random_split: lengths is empty")
    if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in lengths):
        if any(x < 0 for x in lengths):
            raise ValueError(f"random_split: lengths must be non-negative, got {lengths}")
        if sum(lengths) != n:
            raise ValueError(f"random_split: lengths {lengths} sum to {sum(lengths)}, "
                             f"but the dataset has {n} samples")
        return [int(x) for x in lengths]
    fractions = [float(x) for x in lengths]
    if any(f < 0 or f > 1 for f in fractions) or not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
        raise ValueError(f"random_split: fractions must lie in [0, 1] and sum to 1, got {lengths}")
    # Floor each share, then hand the leftover samples out one at a time from the front (PyTorch's rule).
    result = [int(math.floor(n * f)) for f in fractions]
    for i in range(n - sum(result)):
        result[i % len(result)] += 1
    return result


def random_split(dataset, lengths, generator=None) -> list[Subset]:
    """Split `dataset` into non-overlapping random Subsets of the given lengths (or fractions).

    generator: int seed, numpy Generator, or None (draws from the global seed).
    """
    n = len(dataset)
    sizes = _split_lengths(n, lengths)
    permutation = make_rng(generator, "random_split").permutation(n)
    subsets, start = [], 0
    for size in sizes:
        subsets.append(Subset(dataset, permutation[start:start + size]))
        start += size
    return subsets


def _as_pil(image):
    """What torchvision hands a dataset's transform: a PIL image (mode "L" for (H, W), "RGB" for (H, W, 3))
    when Pillow is installed, so transforms written for torchvision (img.resize, ImageOps, ...) run; the
    array itself without Pillow (minidl's transforms take either)."""
    try:
        from PIL import Image
    except ImportError:
        return image
    if isinstance(image, np.ndarray) and image.dtype == np.uint8 and (image.ndim == 2 or image.shape[-1] == 3):
        return Image.fromarray(image)
    return image


def _check_per_sample(dataset: str, transform) -> None:
    """A dataset's transform= sees one image at a time (torchvision's contract). minidl.data.transforms are
    batch transforms (N, C, H, W): passed here they would fail on the first image with a shape error that
    says nothing of the mix-up, so the mix-up is named."""
    if type(transform).__module__ == "minidl.data.transforms":
        name = type(transform).__name__
        raise TypeError(
            f"{dataset}(transform=minidl.data.transforms.{name}(...)): that is a batch transform, for whole "
            f"(N, C, H, W) batches (apply it to a batch in the training loop). A dataset's transform= gets one "
            f"image at a time: use minidl.vision.transforms (torchvision's per-image names: ToTensor, "
            f"Normalize, RandomCrop, ...) there")


class ImageArrayDataset(Dataset):
    """A labelled image set held as two arrays, `data` (N, ...) uint8 and `targets` (N,) int64, with
    optional per-item `transform` / `target_transform` (the shared part of MNIST and CIFAR10).

    Without transforms the DataLoader takes whole batches from the arrays at once (_whole_arrays)."""

    transform = None
    target_transform = None

    def __len__(self):
        return int(self._images_labels()[0].shape[0])

    def _images_labels(self):
        """The (images, labels) arrays, whether `data`/`targets` hold arrays or tensors (MNIST's are
        tensors, as torchvision's)."""
        return tuple(getattr(a, "_data", a) for a in (self.data, self.targets))

    def __getitem__(self, index):
        images, labels = self._images_labels()
        image, target = images[index], int(labels[index])
        if self.transform is not None:
            _check_per_sample(type(self).__name__, self.transform)
            image = self.transform(_as_pil(image))
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    def _whole_arrays(self):
        if self.transform is not None or self.target_transform is not None:
            return None
        return self._images_labels(), None
