"""CIFAR-100 (torchvision.datasets.CIFAR100): 60,000 32x32 colour images in 100 classes (20 superclasses), read
from the official python release (root/cifar-100-python/{train, test, meta}) through the restricted unpickler of
CIFAR-10's reader (plain containers and NumPy arrays only), downloaded when asked and missing."""
from __future__ import annotations

import numpy as np

from ..dataset import ImageArrayDataset
from ._download import data_root, fetch_files, safe_extract_tar
from .cifar10 import _planes_to_nhwc, restricted_load

_PYTHON_ARCHIVE = ("cifar-100-python.tar.gz", ["https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"],
                   "eb9058c3a382ffc7106e4002c42a8d85")


def _entries(path):
    entry = restricted_load(path)
    if not isinstance(entry, dict):
        raise ValueError(f"CIFAR100: {path} holds a {type(entry).__name__}, expected a dict")
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in entry.items()}


def read_cifar100_split(path):
    """One split's file -> (images uint8 (N, 32, 32, 3), fine labels int64 (N,), coarse labels int64 (N,))."""
    entry = _entries(path)
    missing = {"data", "fine_labels", "coarse_labels"} - set(entry)
    if missing:
        raise ValueError(f"CIFAR100: {path} lacks {sorted(missing)} (keys: {sorted(map(str, entry))})")
    data = entry["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        desc = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise ValueError(f"CIFAR100: {path} has data {desc}, expected uint8 (N, 3072)")
    fine = np.asarray(entry["fine_labels"], dtype=np.int64)
    coarse = np.asarray(entry["coarse_labels"], dtype=np.int64)
    if fine.shape != (data.shape[0],) or coarse.shape != fine.shape:
        raise ValueError(f"CIFAR100: {path} has {data.shape[0]} images but {fine.size} fine and {coarse.size} "
                         "coarse labels")
    if fine.size and (fine.min() < 0 or fine.max() > 99 or coarse.min() < 0 or coarse.max() > 19):
        raise ValueError(f"CIFAR100: {path} has labels outside 0..99 (fine) or 0..19 (coarse)")
    return _planes_to_nhwc(data), fine, coarse


class CIFAR100(ImageArrayDataset):
    """CIFAR-100. `data`: uint8 (N, 32, 32, 3) NHWC; `targets`: the fine labels, int64 (N,) (0..99);
    `coarse_targets` the superclasses (0..19); `classes` the 100 names from the release's meta file, and
    `class_to_idx`."""

    def __init__(self, root=None, train=True, transform=None, target_transform=None, download=False):
        self.root = data_root(root)
        self.train, self.transform, self.target_transform = bool(train), transform, target_transform
        folder = self.root / "cifar-100-python"
        split = "train" if self.train else "test"
        if not (folder / split).is_file():
            archive, = fetch_files("CIFAR100", [_PYTHON_ARCHIVE], self.root, download,
                                   f" Or unpack the release so that {folder / split} exists.")
            safe_extract_tar(archive, self.root, "cifar-100-python/")
        self.source = folder
        self.data, self.targets, self.coarse_targets = read_cifar100_split(folder / split)
        names = _entries(folder / "meta").get("fine_label_names") if (folder / "meta").is_file() else None
        self.classes = [n.decode() if isinstance(n, bytes) else str(n) for n in names] if names else \
            [str(i) for i in range(100)]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}

    def __repr__(self):
        return f"CIFAR100(split={'train' if self.train else 'test'}, samples={len(self)}, source={str(self.source)!r})"
