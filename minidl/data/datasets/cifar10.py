"""CIFAR-10: 60,000 colour images 32 x 32 in 10 classes (50,000 train, 10,000 test).

Three on-disk forms are read, all to uint8 images NHWC (N, 32, 32, 3) and int64 labels:

(a) the official binary release, `cifar-10-batches-bin/data_batch_{1..5}.bin` and `test_batch.bin`:
    records of 1 label byte + 3072 pixel bytes (the red plane 32 x 32, then green, then blue);
(b) the official python release, `cifar-10-batches-py/data_batch_{1..5}` and `test_batch`: pickled
    dicts {"data": uint8 (N, 3072) in the same plane order, "labels": [int], ...}. A pickle can run
    any code when loaded, so these are read with a restricted unpickler that builds only what those
    files contain (dicts, lists, strings, bytes, ints and NumPy uint8 arrays) and refuses the rest;
(c) an image folder `train/<class>/*.jpg` / `test/<class>/*` (or the same inside a .tar.gz such as
    `cifar10-jpeg-train.tar.gz`), decoded once with Pillow and cached as a .npz next to it.
"""
from __future__ import annotations

import hashlib
import io
import pickle
import os
import sys
import tarfile
import warnings
from pathlib import Path

import numpy as np

from ..dataset import ImageArrayDataset
from ._download import DatasetNotFoundError, data_root, fetch_files, safe_extract_tar

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)

_RECORD_BYTES = 1 + 3 * 32 * 32
_PYTHON_ARCHIVE = ("cifar-10-python.tar.gz", ["https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"],
                   "c58f30108f718f92721af3b95e74349a")
_IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp"}
_CACHE_VERSION = 1


def _planes_to_nhwc(flat: np.ndarray) -> np.ndarray:
    """(N, 3072) in R-plane, G-plane, B-plane order -> (N, 32, 32, 3)."""
    return np.ascontiguousarray(flat.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def _check_labels(labels: np.ndarray, path) -> np.ndarray:
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"CIFAR10: {path} has labels outside 0..9 (min {labels.min()}, max {labels.max()})")
    return labels.astype(np.int64)


# ------------------------------------------------------------------------------------------------
# (a) binary batches
# ------------------------------------------------------------------------------------------------


def read_binary_batch(path):
    """One `*.bin` batch -> (images uint8 (N, 32, 32, 3), labels int64 (N,))."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size == 0 or raw.size % _RECORD_BYTES != 0:
        raise ValueError(f"CIFAR10: {path} has {raw.size} bytes, not a whole number of "
                         f"{_RECORD_BYTES}-byte records (1 label + 3072 pixels): truncated or not a CIFAR-10 batch")
    records = raw.reshape(-1, _RECORD_BYTES)
    return _planes_to_nhwc(records[:, 1:]), _check_labels(records[:, 0], path)


# ------------------------------------------------------------------------------------------------
# (b) pickled batches, through a restricted unpickler
# ------------------------------------------------------------------------------------------------


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle asked for something a CIFAR-10 batch never contains (e.g. a function to call)."""


_NUMPY_RECONSTRUCT = np.zeros(1).__reduce__()[0]  # numpy's own array-rebuilding function


def _safe_reconstruct(subtype, shape, typecode):
    if subtype is not np.ndarray:
        raise UnsafePickleError(f"refusing to rebuild an array of type {subtype!r}")
    return _NUMPY_RECONSTRUCT(np.ndarray, shape, typecode)


def _safe_dtype(*args):
    dtype = np.dtype(*args)
    if dtype.hasobject:  # object arrays would unpickle arbitrary Python objects
        raise UnsafePickleError("refusing to rebuild an array of dtype object")
    return dtype


def _safe_frombuffer(buffer, dtype, shape, order):
    if np.dtype(dtype).hasobject:
        raise UnsafePickleError("refusing to rebuild an array of dtype object")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape, order=order).copy()


def _safe_encode(text, encoding):
    # Python 3 writes bytes as _codecs.encode(str, "latin1") in pickle protocols 0-2.
    if str(encoding).lower().replace("-", "") != "latin1":
        raise UnsafePickleError(f"refusing _codecs.encode with encoding {encoding!r}")
    return str(text).encode("latin1")


_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _safe_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _safe_reconstruct,
    ("numpy.core.numeric", "_frombuffer"): _safe_frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _safe_frombuffer,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _safe_dtype,
    ("_codecs", "encode"): _safe_encode,
    ("builtins", "bytearray"): bytearray,
}


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles plain containers and NumPy arrays only: every global lookup goes through a whitelist."""

    def __init__(self, file, source="<pickle>"):
        super().__init__(file, encoding="latin1")  # the official batches were written by Python 2
        self.source = source

    def find_class(self, module, name):
        allowed = _ALLOWED_GLOBALS.get((module, name))
        if allowed is None:
            raise UnsafePickleError(
                f"CIFAR10: refusing to load {self.source}: the pickle asks for {module}.{name}, but a "
                "CIFAR-10 batch holds only dicts, lists, strings, bytes, ints and NumPy arrays. "
                "It may be corrupt or malicious; it was not run.")
        return allowed

    def persistent_load(self, pid):
        raise UnsafePickleError(f"CIFAR10: refusing to load {self.source}: it has a persistent id")


def restricted_load(path):
    with open(path, "rb") as f:
        try:
            return RestrictedUnpickler(f, source=str(path)).load()
        except UnsafePickleError:
            raise
        except Exception as e:  # truncated or garbled: EOFError, UnpicklingError, ValueError...
            raise ValueError(f"CIFAR10: {path} is not a readable CIFAR-10 python batch "
                             f"({type(e).__name__}: {e})") from e


def read_python_batch(path):
    """One pickled batch -> (images uint8 (N, 32, 32, 3), labels int64 (N,))."""
    entry = restricted_load(path)
    if not isinstance(entry, dict):
        raise ValueError(f"CIFAR10: {path} holds a {type(entry).__name__}, expected a dict")
    entry = {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in entry.items()}
    if "data" not in entry or "labels" not in entry:
        raise ValueError(f"CIFAR10: {path} has keys {sorted(map(str, entry))}, expected 'data' and 'labels'")
    data = entry["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        desc = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise ValueError(f"CIFAR10: {path} has data {desc}, expected uint8 (N, 3072)")
    labels = np.asarray(entry["labels"])
    if labels.shape != (data.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"CIFAR10: {path} has {labels.shape} labels of {labels.dtype} for {data.shape[0]} images")
    return _planes_to_nhwc(data), _check_labels(labels, path)


# ------------------------------------------------------------------------------------------------
# (c) image folders and archives of them, with a .npz cache
# ------------------------------------------------------------------------------------------------


def _decode_images(named_blobs, source):
    """[(label, name, bytes-or-path)] -> (uint8 (N, 32, 32, 3), int64 (N,)), decoded with Pillow."""
    try:
        from PIL import Image
    except ImportError as e:
        raise ImportError(f"CIFAR10: decoding the image files of {source} needs Pillow "
                          "(pip install -e \".[vision]\", or pip install pillow); the binary and python "
                          "releases need nothing") from e
    from tqdm import tqdm

    images = np.empty((len(named_blobs), 32, 32, 3), dtype=np.uint8)
    labels = np.empty(len(named_blobs), dtype=np.int64)
    bar = tqdm(named_blobs, desc=f"decoding {Path(str(source)).name}", unit="img", leave=False,
               disable=len(named_blobs) < 2000)
    for i, (label, name, blob) in enumerate(bar):
        try:
            with Image.open(io.BytesIO(blob) if isinstance(blob, bytes) else blob) as img:
                rgb = np.asarray(img.convert("RGB"))
        except Exception as e:
            raise ValueError(f"CIFAR10: cannot decode {name} in {source}: {e}") from e
        if rgb.shape != (32, 32, 3):
            raise ValueError(f"CIFAR10: {name} in {source} is {rgb.shape[1]} x {rgb.shape[0]}, expected 32 x 32")
        images[i], labels[i] = rgb, label
    return images, labels


def _check_classes(found: set, source, split: str) -> None:
    unknown = sorted(found - set(CLASSES))
    if unknown:
        raise ValueError(f"CIFAR10: {source} has folders {unknown} under {split}/ that are not CIFAR-10 "
                         f"classes {CLASSES}")
    missing = [c for c in CLASSES if c not in found]
    if missing:
        raise ValueError(f"CIFAR10: {source} has no images for classes {missing} under {split}/")


def _folder_listing(folder: Path, split: str):
    files = []
    found = set()
    for class_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        if class_dir.name not in CLASSES:
            found.add(class_dir.name)
            continue
        images = [f for f in class_dir.iterdir() if f.is_file() and f.suffix.lower() in _IMAGE_SUFFIXES]
        if images:  # an empty class folder counts as a missing class
            found.add(class_dir.name)
        files.extend((CLASSES.index(class_dir.name), f) for f in images)
    _check_classes(found, folder, split)
    files.sort(key=lambda item: (item[0], item[1].name))  # label order, then file-name order
    return files


def _archive_members(tar: tarfile.TarFile, archive: Path, split: str):
    members, found = [], set()
    for member in tar.getmembers():
        parts = member.name.replace("\\", "/").split("/")
        if not member.isfile() or len(parts) < 3 or parts[-3] != split:
            continue
        found.add(parts[-2])
        if parts[-2] in CLASSES and Path(parts[-1]).suffix.lower() in _IMAGE_SUFFIXES:
            members.append((CLASSES.index(parts[-2]), member))
    if not found:
        raise ValueError(f"CIFAR10: {archive} has no images under {split}/<class>/")
    _check_classes(found, archive, split)
    members.sort(key=lambda item: (item[0], item[1].name.rsplit("/", 1)[-1]))
    return members


def _fingerprint(source: Path) -> str:
    """Changes when the source changes: size and mtime of the archive, or of every image in the folder."""
    h = hashlib.md5()
    paths = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
    for p in paths:
        st = p.stat()
        h.update(f"{p.relative_to(source.parent)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def _cache_paths(source: Path, split: str):
    """Next to the source first; in the per-user cache if that folder is read-only."""
    stem = source.name.split(".")[0] if source.is_file() else f"cifar10-{source.name}"
    key = hashlib.md5(str(source.resolve()).encode()).hexdigest()[:12]
    return [source.parent / f"{stem}.npz",
            Path("~/.cache/minidl/cache").expanduser() / f"{stem}-{split}-{key}.npz"]


def read_image_source(source: Path, split: str):
    """Images of an image folder or archive, from its .npz cache when that is still valid."""
    fingerprint = _fingerprint(source)
    candidates = _cache_paths(source, split)
    for cache in candidates:
        if cache.is_file():
            try:
                with np.load(cache, allow_pickle=False) as z:
                    if str(z["fingerprint"]) == fingerprint and int(z["version"]) == _CACHE_VERSION:
                        return z["images"], z["labels"]
            except Exception:
                pass  # an unreadable cache is rebuilt
    if source.is_file():
        try:
            with tarfile.open(source, "r:*") as tar:
                members = _archive_members(tar, source, split)
                blobs = [(label, m.name, tar.extractfile(m).read()) for label, m in members]
        except (tarfile.TarError, EOFError, OSError) as e:
            raise ValueError(f"CIFAR10: {source} is not a readable tar archive: {e}") from e
    else:
        blobs = [(label, str(f), f) for label, f in _folder_listing(source, split)]
    # Decoding takes a while (tens of seconds for 50,000 JPEGs) and the cache is large (~150 MB for
    # the training split), so both are announced, with the path to delete to get the space back.
    print(f"CIFAR10: decoding {len(blobs)} images of {source} once; the decoded copy is cached for the "
          f"next runs", file=sys.stderr)
    images, labels = _decode_images(blobs, source)
    for cache in candidates:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp.npz")   # per process: ranks may race
            np.savez(tmp, images=images, labels=labels, fingerprint=np.array(fingerprint),
                     version=np.array(_CACHE_VERSION))
            tmp.replace(cache)
            print(f"CIFAR10: wrote the decoded-image cache {cache} ({cache.stat().st_size / 1e6:.0f} MB; "
                  "delete it to free the space, it is rebuilt when needed)", file=sys.stderr)
            break
        except OSError:
            continue
    else:
        warnings.warn(f"CIFAR10: could not write a decoded-image cache for {source}; it will be decoded again")
    return images, labels


# ------------------------------------------------------------------------------------------------
# The dataset
# ------------------------------------------------------------------------------------------------


def _batch_names(train: bool):
    return [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]


def _read_batches(folder: Path, names, reader):
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise DatasetNotFoundError(f"CIFAR10: {folder} lacks {missing}")
    parts = [reader(folder / n) for n in names]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _find_image_source(root: Path, split: str):
    for folder in (root / split, root / "cifar10" / split, root / "cifar10-jpeg" / split, root / "CIFAR10" / split):
        if folder.is_dir() and any((folder / c).is_dir() for c in CLASSES):
            return folder
    for name in (f"cifar10-jpeg-{split}.tar.gz", f"cifar10-{split}.tar.gz", f"cifar10-jpeg-{split}.tgz"):
        if (root / name).is_file():
            return root / name
    return None


class CIFAR10(ImageArrayDataset):
    """CIFAR-10. `data`: uint8 (N, 32, 32, 3) NHWC; `targets`: int64 (N,); `classes`: the 10 names.

    root: the data root (see `data_root`); looked for there, in this order: cifar-10-batches-bin/,
    cifar-10-batches-py/, an image folder <split>/<class>/ (also under cifar10/ or cifar10-jpeg/),
    an archive cifar10-jpeg-<split>.tar.gz. download: fetch and unpack the official python release
    when none is there. `source` says which was read.
    """

    classes = CLASSES

    def __init__(self, root=None, train=True, transform=None, target_transform=None, download=False):
        self.root = data_root(root)
        self.train = bool(train)
        self.transform = transform
        self.target_transform = target_transform
        split = "train" if self.train else "test"
        binary_dir, python_dir = self.root / "cifar-10-batches-bin", self.root / "cifar-10-batches-py"
        image_source = _find_image_source(self.root, split)

        if binary_dir.is_dir():
            self.source = binary_dir
            self.data, self.targets = _read_batches(
                binary_dir, [n + ".bin" for n in _batch_names(self.train)], read_binary_batch)
        elif python_dir.is_dir():
            self.source = python_dir
            self.data, self.targets = _read_batches(python_dir, _batch_names(self.train), read_python_batch)
        elif image_source is not None:
            self.source = image_source
            self.data, self.targets = read_image_source(image_source, split)
        else:
            # Nothing on disk: fetch the official python release (the error also lists the other forms).
            hint = (f" Any one of these in {self.root} works instead: cifar-10-batches-bin/, "
                    "cifar-10-batches-py/, train/<class>/*.jpg and test/<class>/*.jpg, or "
                    "cifar10-jpeg-train.tar.gz and cifar10-jpeg-test.tar.gz.")
            archive, = fetch_files("CIFAR10", [_PYTHON_ARCHIVE], self.root, download, hint)
            safe_extract_tar(archive, self.root, "cifar-10-batches-py/")
            self.source = python_dir
            self.data, self.targets = _read_batches(python_dir, _batch_names(self.train), read_python_batch)

    def as_arrays(self, normalize=True):
        """(x float32 (N, 3, 32, 32) NCHW, y int64 (N,)): pixels / 255, then per-channel mean/std if normalize."""
        x = self.data.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)
        if normalize:
            mean = np.asarray(CIFAR10_MEAN, dtype=np.float32).reshape(1, 3, 1, 1)
            std = np.asarray(CIFAR10_STD, dtype=np.float32).reshape(1, 3, 1, 1)
            x = (x - mean) / std
        return np.ascontiguousarray(x), self.targets.copy()

    def __repr__(self):
        split = "train" if self.train else "test"
        return f"CIFAR10(split={split}, samples={len(self)}, source={str(self.source)!r})"
