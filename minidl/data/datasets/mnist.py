"""MNIST: 70,000 handwritten digits, 28 x 28 grey levels, in LeCun's idx format.

An idx file is a big-endian header followed by the raw array:
    bytes 0-1  zero
    byte  2    element type (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64)
    byte  3    number of dimensions d
    then d big-endian uint32 sizes, then prod(sizes) elements, row-major.
So the images file starts with the magic number 0x00000803 (uint8, 3 dims: N, 28, 28) and the labels
file with 0x00000801 (uint8, 1 dim: N). Files may be gzipped (the official downloads) or not.
"""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from ...autograd.tensor import Tensor
from ..dataset import ImageArrayDataset
from ._download import DatasetNotFoundError, data_root, fetch_files, missing_files_message

MNIST_MEAN = 0.1307
MNIST_STD = 0.3081

_IDX_DTYPES = {0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"),
               0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}

_MIRRORS = ["https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"]
_MD5_GZ = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
_FILES = [name[:-3] for name in _MD5_GZ]  # the four idx files, without .gz


def read_idx(path, expected_ndim: int | None = None) -> np.ndarray:
    """Read an idx file (gzipped if its name ends in .gz) into a native-endian NumPy array.

    Raises ValueError naming the file when the magic number, the dimensions or the size is wrong.
    """
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise ValueError(f"read_idx: {path} is not a readable (gzipped) idx file: {e}") from e

    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"read_idx: {path} has a bad magic number {raw[:4].hex() or '(empty file)'}; "
                         "an idx file starts with 00 00, a type byte (08 for uint8) and the number of dims")
    dtype, ndim = _IDX_DTYPES[raw[2]], raw[3]
    if expected_ndim is not None and ndim != expected_ndim:
        raise ValueError(f"read_idx: {path} has {ndim} dimensions, expected {expected_ndim}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"read_idx: {path} is truncated inside its header ({len(raw)} bytes)")
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        what = "truncated" if len(raw) < expected else "longer than its header says"
        raise ValueError(f"read_idx: {path} is {what}: header says shape {shape} of {dtype.name} "
                         f"({expected} bytes in all), the file has {len(raw)} bytes")
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="))  # a native-endian, writable copy


def _find(filename: str, folders) -> Path | None:
    """The first of folder/filename or folder/filename.gz that exists."""
    for folder in folders:
        for name in (filename, filename + ".gz"):
            if (folder / name).is_file():
                return folder / name
    return None


class MNIST(ImageArrayDataset):
    """MNIST digits. `data`: a uint8 tensor (N, 28, 28); `targets`: an int64 tensor (N,) in 0..9 (tensors,
    as torchvision's; both share memory with the arrays the dataset reads, and can be re-assigned,
    e.g. `ds.data = ds.data[:1000]`). A sample `ds[i]` is (uint8 array (28, 28), int) before `transform`.

    root: the data root (see `data_root`); the idx files, gzipped or not, are looked for in
    root/MNIST/raw/ (torchvision's layout) and in root/ itself. download: fetch the gzipped files
    into root/MNIST/raw/ when missing. transform / target_transform: applied per sample in
    __getitem__ (for batch transforms see minidl.data.transforms).
    """

    classes = ["0 - zero", "1 - one", "2 - two", "3 - three", "4 - four",
               "5 - five", "6 - six", "7 - seven", "8 - eight", "9 - nine"]

    _folder, _mirrors, _md5_gz = "MNIST", None, None  # None: the module's _MIRRORS/_MD5_GZ (FashionMNIST sets its own)

    def __init__(self, root=None, train=True, transform=None, target_transform=None, download=False):
        self.root = data_root(root)
        self.train = bool(train)
        self.transform = transform
        self.target_transform = target_transform
        prefix = "train" if self.train else "t10k"
        image_name, label_name = f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"
        name = self._folder  # "MNIST" or "FashionMNIST": the folder and the name in messages
        raw_folder = self.root / self._folder / "raw"
        folders = [raw_folder, self.root]

        image_path, label_path = _find(image_name, folders), _find(label_name, folders)
        if image_path is None or label_path is None:
            missing = [f for f in (image_name, label_name) if _find(f, folders) is None]
            mirrors = _MIRRORS if self._mirrors is None else self._mirrors
            md5s = _MD5_GZ if self._md5_gz is None else self._md5_gz
            resources = [(f + ".gz", [m + f + ".gz" for m in mirrors], md5s[f + ".gz"]) for f in missing]
            # The error also names the other split's missing files: a first run offline learns all
            # four it needs at once, not two now and two after it has found those.
            others = [f"{f}(.gz)" for f in _FILES
                      if f not in (image_name, label_name) and _find(f, folders) is None]
            fetch_files(name, resources, raw_folder, download, also_missing=others,
                        names={f + ".gz": f"{f}(.gz)" for f in missing},
                        hint=f" Each file may be gzipped (.gz) or plain, in {raw_folder} or in {self.root}.")
            image_path, label_path = _find(image_name, folders), _find(label_name, folders)
            if image_path is None or label_path is None:  # pragma: no cover - fetch_files raises first
                raise DatasetNotFoundError(missing_files_message(name, missing, raw_folder))

        images = read_idx(image_path, expected_ndim=3)
        labels = read_idx(label_path, expected_ndim=1)
        if images.shape[1:] != (28, 28) or images.dtype != np.uint8:
            raise ValueError(f"{name}: {image_path} holds {images.dtype} images of shape {images.shape[1:]}, "
                             "expected uint8 28 x 28")
        if labels.dtype != np.uint8:
            raise ValueError(f"{name}: {label_path} holds {labels.dtype} labels, expected uint8")
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"{name}: {image_path} has {images.shape[0]} images but {label_path} has "
                             f"{labels.shape[0]} labels")
        if labels.size and labels.max() > 9:
            raise ValueError(f"{name}: {label_path} has a label {labels.max()}, expected 0..9")
        self.data = images
        self.targets = labels.astype(np.int64)

    @property
    def data(self):
        return Tensor._make(self._images)

    @data.setter
    def data(self, value):
        self._images = getattr(value, "_data", value)

    @property
    def targets(self):
        return Tensor._make(self._labels)

    @targets.setter
    def targets(self, value):
        self._labels = getattr(value, "_data", value)

    # torchvision's legacy names (older programs use them; torchvision warns, and so do we)
    def _legacy(self, split, what):
        import warnings

        warnings.warn(f"{split}_{what} has been renamed {'data' if what == 'data' else 'targets'}", UserWarning,
                      stacklevel=3)
        return self.data if what == "data" else self.targets

    train_data = property(lambda self: self._legacy("train", "data"))
    test_data = property(lambda self: self._legacy("test", "data"))
    train_labels = property(lambda self: self._legacy("train", "labels"))
    test_labels = property(lambda self: self._legacy("test", "labels"))

    def as_arrays(self, normalize=True):
        """(x float32 (N, 1, 28, 28), y int64 (N,)): pixels / 255, then (x - 0.1307) / 0.3081 if normalize."""
        x = self._images.astype(np.float32)[:, None, :, :] / np.float32(255.0)
        if normalize:
            x = (x - np.float32(MNIST_MEAN)) / np.float32(MNIST_STD)
        return x, self._labels.copy()

    def __repr__(self):
        split = "train" if self.train else "test"
        return f"MNIST(split={split}, samples={len(self)}, root={str(self.root)!r})"


class FashionMNIST(MNIST):
    """Fashion-MNIST (Xiao et al. 2017): 70,000 28 x 28 grey images of clothing in 10 classes, in
    MNIST's idx format and torchvision's layout (root/FashionMNIST/raw/); the same interface as MNIST
    (PyTorch's quickstart tutorial uses it)."""

    classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot"]
    _folder = "FashionMNIST"
    _mirrors = ["http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"]
    _md5_gz = {
        "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
    }

    def as_arrays(self, normalize=True):
        raise NotImplementedError("FashionMNIST.as_arrays: MNIST's normalisation constants do not apply; use "
                                  "transform=ToTensor() or the raw .data / .targets")

    def __repr__(self):
        return "Fashion" + super().__repr__()
