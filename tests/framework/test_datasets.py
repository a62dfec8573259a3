"""minidl.data.datasets: MNIST (idx), CIFAR-10 (binary, pickle, image folder, tar.gz), text corpora.

Every reader runs on small synthetic files written to tmp_path; nothing here reads a real dataset or
touches the network (urlopen is replaced).
"""
import gzip
import io
import os
import pickle
import tarfile
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import minidl
from minidl.data import (CIFAR10, MNIST, BPTTIterator, CharCorpus, DataLoader, DatasetNotFoundError,
                         UnsafePickleError, WordCorpus, batchify, data_root)
from minidl.data.datasets import cifar10 as cifar_module
from minidl.data.datasets import mnist as mnist_module
from tests.conftest import rel_err

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """No test may read or write the real ~/.cache/minidl or depend on $MINIDL_DATA."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MINIDL_DATA", raising=False)


def _offline(monkeypatch):
    calls = []

    def refuse(*args, **kwargs):
        calls.append(args[0])
        raise urllib.error.URLError("network is unreachable (test)")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    return calls


class _FakeResponse(io.BytesIO):
    def __init__(self, payload):
        super().__init__(payload)
        self.headers = {"Content-Length": str(len(payload))}


def _serve(monkeypatch, files: dict):
    """urlopen that serves `files` by the URL's last path component."""
    def fake_urlopen(request, timeout=None):
        url = request.full_url if hasattr(request, "full_url") else request
        return _FakeResponse(files[url.rsplit("/", 1)[-1]])

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)


# ------------------------------------------------------------------------------------------------
# data root
# ------------------------------------------------------------------------------------------------


def test_data_root_order(tmp_path, monkeypatch):
    assert data_root(tmp_path / "x") == tmp_path / "x"
    assert data_root() == tmp_path / "home" / ".cache" / "minidl"
    monkeypatch.setenv("MINIDL_DATA", str(tmp_path / "env"))
    assert data_root() == tmp_path / "env"
    assert data_root(tmp_path / "arg") == tmp_path / "arg"


# ------------------------------------------------------------------------------------------------
# MNIST
# ------------------------------------------------------------------------------------------------


def _idx_bytes(array, type_byte=0x08):
    header = bytes([0, 0, type_byte, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def _write(path, payload, gz=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        payload = gzip.compress(payload)
    path.write_bytes(payload)
    return path


def _mnist_files(folder, rng, n=7, prefix="train", gz=False):
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n).astype(np.uint8)
    _write(folder / f"{prefix}-images-idx3-ubyte", _idx_bytes(images), gz)
    _write(folder / f"{prefix}-labels-idx1-ubyte", _idx_bytes(labels), gz)
    return images, labels


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("layout", ["MNIST/raw", "."])
def test_mnist_reads_idx_plain_and_gz(tmp_path, rng, gz, layout):
    images, labels = _mnist_files(tmp_path / layout, rng, gz=gz)
    test_images, test_labels = _mnist_files(tmp_path / layout, rng, n=3, prefix="t10k", gz=gz)
    train = MNIST(tmp_path, train=True, download=False)
    test = MNIST(tmp_path, train=False, download=False)
    np.testing.assert_array_equal(train.data, images)
    np.testing.assert_array_equal(train.targets, labels)
    assert train.data.dtype == np.uint8 and train.targets.dtype == np.int64
    np.testing.assert_array_equal(test.data, test_images)
    np.testing.assert_array_equal(test.targets, test_labels)
    image, target = train[4]
    np.testing.assert_array_equal(image, images[4])
    assert target == labels[4]


def test_mnist_as_arrays_and_loader_fast_path(tmp_path, rng, monkeypatch):
    images, labels = _mnist_files(tmp_path / "MNIST" / "raw", rng)
    monkeypatch.setenv("MINIDL_DATA", str(tmp_path))
    ds = MNIST(download=False)  # root from the environment variable
    x, y = ds.as_arrays(normalize=True)
    ref = (torch.from_numpy(images).float().unsqueeze(1) / 255 - 0.1307) / 0.3081
    assert x.shape == (7, 1, 28, 28) and x.dtype == np.float32 and rel_err(x, ref.numpy()) <= 1e-6
    x_raw, _ = ds.as_arrays(normalize=False)
    assert rel_err(x_raw, images[:, None] / 255.0) <= 1e-6
    loader = DataLoader(ds, batch_size=4)
    assert loader._arrays is not None  # whole-array batches, no per-sample calls
    (xb, yb), _ = list(loader)
    np.testing.assert_array_equal(xb._data, images[:4])
    np.testing.assert_array_equal(yb._data, labels[:4])


def _corrupt_cases(images, labels):
    good_labels = _idx_bytes(labels)
    good_images = _idx_bytes(images)
    return {
        "truncated images": (good_images[:-5], good_labels, r"truncated.*\(7, 28, 28\)"),
        "trailing bytes": (good_images + b"xx", good_labels, "longer than its header says"),
        "bad magic": (b"\x12\x34" + good_images[2:], good_labels, "bad magic number 1234"),
        "wrong ndim": (_idx_bytes(images.reshape(7, 784)), good_labels, "has 2 dimensions, expected 3"),
        "wrong size": (_idx_bytes(images[:, :27, :]), good_labels, r"uint8 28 x 28"),
        "count mismatch": (good_images, _idx_bytes(labels[:6]), "has 7 images but .* has 6 labels"),
        "bad label": (good_images, _idx_bytes(np.full(7, 12, np.uint8)), "label 12, expected 0..9"),
        "truncated header": (good_images[:9], good_labels, "truncated inside its header"),
    }


@pytest.mark.parametrize("case", ["truncated images", "trailing bytes", "bad magic", "wrong ndim",
                                  "wrong size", "count mismatch", "bad label", "truncated header"])
def test_mnist_corrupt_files_give_clear_errors(tmp_path, rng, case):
    images = rng.integers(0, 256, size=(7, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=7).astype(np.uint8)
    image_bytes, label_bytes, message = _corrupt_cases(images, labels)[case]
    raw = tmp_path / "MNIST" / "raw"
    _write(raw / "train-images-idx3-ubyte", image_bytes)
    _write(raw / "train-labels-idx1-ubyte", label_bytes)
    with pytest.raises(ValueError, match=message) as info:
        MNIST(tmp_path, download=False)
    assert "idx1-ubyte" in str(info.value) or "idx3-ubyte" in str(info.value)  # names the file


def test_mnist_corrupt_gzip(tmp_path, rng):
    _mnist_files(tmp_path, rng, gz=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:200])  # a gzip stream cut short
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte.gz is not a readable \(gzipped\) idx file"):
        MNIST(tmp_path, download=False)


def test_mnist_missing_without_download(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"MNIST: missing t10k-images-idx3-ubyte\(\.gz\), "
                                                   r"t10k-labels-idx1-ubyte\(\.gz\), train-images-idx3-ubyte\(\.gz\), "
                                                   r"train-labels-idx1-ubyte\(\.gz\).*MINIDL_DATA") as info:
        MNIST(tmp_path, train=False, download=False)
    assert str(tmp_path / "MNIST" / "raw") in str(info.value)
    # The one-line form a program prints names its own option instead of root=.
    short = info.value.short("--data")
    assert "\n" not in short and "--data" in short and "root=" not in short and len(info.value.files) == 4


def test_mnist_offline_download_error_names_files_and_place(tmp_path, monkeypatch):
    calls = _offline(monkeypatch)
    with pytest.raises(DatasetNotFoundError) as info:
        MNIST(tmp_path, train=True, download=True)
    message = str(info.value)
    for part in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", str(tmp_path / "MNIST" / "raw"),
                 "MINIDL_DATA", "network is unreachable"):
        assert part in message
    # Both files from both mirrors (twice more where torchvision imports: its downloader is tried too).
    assert len(calls) in (4, 8)
    assert not (tmp_path / "MNIST").exists()  # no partial files, and no empty folders, left behind
    assert "network is unreachable (test)" in info.value.reason


def test_mnist_download_checks_md5(tmp_path, rng, monkeypatch):
    images = rng.integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=5).astype(np.uint8)
    files = {"train-images-idx3-ubyte.gz": gzip.compress(_idx_bytes(images)),
             "train-labels-idx1-ubyte.gz": gzip.compress(_idx_bytes(labels))}
    _serve(monkeypatch, files)
    # The official checksums do not match these synthetic files: refused, and nothing is kept.
    with pytest.raises(DatasetNotFoundError, match="md5 mismatch"):
        MNIST(tmp_path / "a", download=True)
    assert not list((tmp_path / "a" / "MNIST" / "raw").glob("*"))
    import hashlib

    md5s = {name: hashlib.md5(payload).hexdigest() for name, payload in files.items()}
    monkeypatch.setattr(mnist_module, "_MD5_GZ", {**mnist_module._MD5_GZ, **md5s})
    ds = MNIST(tmp_path / "b", download=True)
    np.testing.assert_array_equal(ds.data, images)
    np.testing.assert_array_equal(ds.targets, labels)
    assert (tmp_path / "b" / "MNIST" / "raw" / "train-images-idx3-ubyte.gz").is_file()


# ------------------------------------------------------------------------------------------------
# CIFAR-10: binary and pickled batches
# ------------------------------------------------------------------------------------------------


def _cifar_images(rng, n):
    return rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, size=n)


def _planes(images):
    return images.transpose(0, 3, 1, 2).reshape(len(images), 3072)


def _binary_batch(images, labels):
    return np.concatenate([labels.astype(np.uint8)[:, None], _planes(images)], axis=1).tobytes()


def _write_binary_release(root, rng, per_batch=3):
    folder = root / "cifar-10-batches-bin"
    folder.mkdir(parents=True)
    parts = []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        images, labels = _cifar_images(rng, per_batch)
        (folder / f"{name}.bin").write_bytes(_binary_batch(images, labels))
        parts.append((images, labels))
    return parts


def test_cifar_binary_release(tmp_path, rng):
    parts = _write_binary_release(tmp_path, rng)
    train, test = CIFAR10(tmp_path, train=True, download=False), CIFAR10(tmp_path, train=False, download=False)
    np.testing.assert_array_equal(train.data, np.concatenate([p[0] for p in parts[:5]]))
    np.testing.assert_array_equal(train.targets, np.concatenate([p[1] for p in parts[:5]]))
    np.testing.assert_array_equal(test.data, parts[5][0])
    assert train.data.shape == (15, 32, 32, 3) and train.data.dtype == np.uint8
    assert train.targets.dtype == np.int64 and train.classes == CLASSES


def test_cifar_binary_truncated_and_bad_labels(tmp_path, rng):
    _write_binary_release(tmp_path, rng)
    path = tmp_path / "cifar-10-batches-bin" / "test_batch.bin"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match=r"test_batch.bin has 9119 bytes, not a whole number of 3073-byte"):
        CIFAR10(tmp_path, train=False, download=False)
    images, labels = _cifar_images(rng, 2)
    path.write_bytes(_binary_batch(images, np.array([3, 11])))
    with pytest.raises(ValueError, match=r"test_batch.bin has labels outside 0..9"):
        CIFAR10(tmp_path, train=False, download=False)
    (tmp_path / "cifar-10-batches-bin" / "data_batch_4.bin").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"lacks \['data_batch_4.bin'\]"):
        CIFAR10(tmp_path, train=True, download=False)


def _write_python_release(root, rng, protocol, bytes_keys, per_batch=2):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        images, labels = _cifar_images(rng, per_batch)
        entry = {"batch_label": f"{name} of 6", "labels": [int(v) for v in labels], "data": _planes(images),
                 "filenames": [f"img_{i}.png".encode() for i in range(per_batch)]}
        if bytes_keys:  # how the Python 2 files look when read with encoding="bytes"
            entry = {k.encode(): v for k, v in entry.items()}
        (folder / name).write_bytes(pickle.dumps(entry, protocol=protocol))
        parts.append((images, labels))
    return parts


@pytest.mark.parametrize("protocol,bytes_keys", [(2, True), (2, False), (4, False), (5, True)])
def test_cifar_python_release(tmp_path, rng, protocol, bytes_keys):
    parts = _write_python_release(tmp_path, rng, protocol, bytes_keys)
    train = CIFAR10(tmp_path, train=True, download=False)
    test = CIFAR10(tmp_path, train=False, download=False)
    np.testing.assert_array_equal(train.data, np.concatenate([p[0] for p in parts[:5]]))
    np.testing.assert_array_equal(train.targets, np.concatenate([p[1] for p in parts[:5]]))
    np.testing.assert_array_equal(test.data, parts[5][0])
    assert train.source == tmp_path / "cifar-10-batches-py"


class _RunsCode:
    """A pickle payload that runs a shell command when unpickled."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class _Evals:
    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return (eval, (self.code,))


@pytest.mark.parametrize("payload_kind", ["os.system", "eval", "object array"])
def test_cifar_malicious_pickle_is_refused_and_not_run(tmp_path, rng, payload_kind):
    parts = _write_python_release(tmp_path, rng, 2, False)
    marker = tmp_path / "pwned"
    images, labels = parts[5]
    payload = {"os.system": _RunsCode(f"touch {marker}"),
               "eval": _Evals(f"open({str(marker)!r}, 'w').close()"),
               "object array": np.array([1, "x", None], dtype=object)}[payload_kind]
    entry = {"batch_label": payload, "labels": [int(v) for v in labels], "data": _planes(images)}
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(pickle.dumps(entry, protocol=2))
    with pytest.raises(UnsafePickleError, match="refusing") as info:
        CIFAR10(tmp_path, train=False, download=False)
    assert not marker.exists(), "the pickle's payload ran"
    if payload_kind != "object array":
        assert "test_batch" in str(info.value) and "it was not run" in str(info.value)


def test_cifar_truncated_pickle(tmp_path, rng):
    _write_python_release(tmp_path, rng, 4, False)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(ValueError, match="test_batch is not a readable CIFAR-10 python batch"):
        CIFAR10(tmp_path, train=False, download=False)
    path.write_bytes(pickle.dumps({"data": np.zeros((2, 100), np.uint8), "labels": [1, 2]}))
    with pytest.raises(ValueError, match=r"has data uint8 \(2, 100\), expected uint8 \(N, 3072\)"):
        CIFAR10(tmp_path, train=False, download=False)


def test_cifar_offline_error_and_download(tmp_path, rng, monkeypatch):
    _offline(monkeypatch)
    with pytest.raises(DatasetNotFoundError) as info:
        CIFAR10(tmp_path / "empty", download=True)
    for part in ("cifar-10-python.tar.gz", str(tmp_path / "empty"), "MINIDL_DATA", "cifar-10-batches-bin/",
                 "cifar10-jpeg-train.tar.gz"):
        assert part in str(info.value)
    # Online (a fake server): the python release is fetched, md5-checked, unpacked and read.
    source = tmp_path / "src"
    parts = _write_python_release(source, rng, 2, True)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(source / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    _serve(monkeypatch, {"cifar-10-python.tar.gz": buffer.getvalue()})
    import hashlib

    name, urls, _ = cifar_module._PYTHON_ARCHIVE
    monkeypatch.setattr(cifar_module, "_PYTHON_ARCHIVE", (name, urls, hashlib.md5(buffer.getvalue()).hexdigest()))
    test = CIFAR10(tmp_path / "dl", train=False, download=True)
    np.testing.assert_array_equal(test.data, parts[5][0])


# ------------------------------------------------------------------------------------------------
# CIFAR-10: image folders and archives
# ------------------------------------------------------------------------------------------------


def _write_image_folder(folder, rng, per_class=2):
    """PNG (lossless) images in folder/<class>/; returns the expected arrays in label-then-name order."""
    from PIL import Image

    images, labels = [], []
    for label, name in enumerate(CLASSES):
        (folder / name).mkdir(parents=True)
        for k in reversed(range(per_class)):  # written out of order: the reader sorts by name
            img = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
            Image.fromarray(img).save(folder / name / f"{k:04d}.png")
            images.append((label, k, img))
    images.sort(key=lambda t: (t[0], t[1]))
    return np.stack([t[2] for t in images]), np.array([t[0] for t in images])


def test_cifar_image_folder_and_its_cache(tmp_path, rng, monkeypatch):
    pytest.importorskip("PIL")
    want_images, want_labels = _write_image_folder(tmp_path / "train", rng)
    ds = CIFAR10(tmp_path, train=True, download=False)
    np.testing.assert_array_equal(ds.data, want_images)
    np.testing.assert_array_equal(ds.targets, want_labels)
    assert (tmp_path / "cifar10-train.npz").is_file()

    # The second load comes from the .npz: decoding would now fail.
    def no_decoding(*args):
        raise AssertionError("decoded again despite a valid cache")

    monkeypatch.setattr(cifar_module, "_decode_images", no_decoding)
    np.testing.assert_array_equal(CIFAR10(tmp_path, train=True, download=False).data, want_images)
    monkeypatch.undo()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))

    # Changing an image invalidates the cache.
    from PIL import Image

    new = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    Image.fromarray(new).save(tmp_path / "train" / "bird" / "0001.png")
    os.utime(tmp_path / "train" / "bird" / "0001.png", ns=(1, 1))
    np.testing.assert_array_equal(CIFAR10(tmp_path, train=True, download=False).data[5], new)


def test_cifar_tar_gz_archive_and_readonly_cache_fallback(tmp_path, rng):
    pytest.importorskip("PIL")
    want_images, want_labels = _write_image_folder(tmp_path / "src" / "test", rng, per_class=1)
    root = tmp_path / "root"
    root.mkdir()
    with tarfile.open(root / "cifar10-jpeg-test.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "src" / "test", arcname="test")
    # A folder where the cache file would go makes that place unwritable: the per-user cache is used.
    (root / "cifar10-jpeg-test.npz").mkdir()
    ds = CIFAR10(root, train=False, download=False)
    np.testing.assert_array_equal(ds.data, want_images)
    np.testing.assert_array_equal(ds.targets, want_labels)
    assert ds.source == root / "cifar10-jpeg-test.tar.gz"
    assert len(list((tmp_path / "home" / ".cache" / "minidl" / "cache").glob("cifar10-jpeg-test-test-*.npz"))) == 1
    assert not (root / "test").exists()  # the archive is read in place, never extracted


def test_cifar_image_folder_errors(tmp_path, rng):
    pytest.importorskip("PIL")
    from PIL import Image

    _write_image_folder(tmp_path / "a" / "train", rng, per_class=1)
    (tmp_path / "a" / "train" / "unicorn").mkdir()
    with pytest.raises(ValueError, match=r"folders \['unicorn'\] under train/ that are not CIFAR-10 classes"):
        CIFAR10(tmp_path / "a", download=False)
    _write_image_folder(tmp_path / "b" / "train", rng, per_class=1)
    for f in (tmp_path / "b" / "train" / "ship").iterdir():
        f.unlink()
    with pytest.raises(ValueError, match=r"no images for classes \['ship'\]"):
        CIFAR10(tmp_path / "b", download=False)
    _write_image_folder(tmp_path / "c" / "train", rng, per_class=1)
    Image.fromarray(np.zeros((30, 32, 3), np.uint8)).save(tmp_path / "c" / "train" / "cat" / "0000.png")
    with pytest.raises(ValueError, match=r"cat/0000.png in .* is 32 x 30, expected 32 x 32"):
        CIFAR10(tmp_path / "c", download=False)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "cifar10-jpeg-train.tar.gz").write_bytes(b"not a tar archive at all")
    with pytest.raises(ValueError, match="cifar10-jpeg-train.tar.gz is not a readable tar archive"):
        CIFAR10(tmp_path / "d", download=False)


def test_cifar_as_arrays(tmp_path, rng):
    parts = _write_binary_release(tmp_path, rng, per_batch=2)
    x, y = CIFAR10(tmp_path, train=False, download=False).as_arrays(normalize=True)
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)
    ref = (torch.from_numpy(parts[5][0]).permute(0, 3, 1, 2).float() / 255 - mean) / std
    assert x.shape == (2, 3, 32, 32) and x.dtype == np.float32 and rel_err(x, ref.numpy()) <= 1e-6
    np.testing.assert_array_equal(y, parts[5][1])


# ------------------------------------------------------------------------------------------------
# Text
# ------------------------------------------------------------------------------------------------


def test_char_corpus(tmp_path):
    text = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 3
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_text(text)
    for corpus in (CharCorpus(tmp_path, download=False), CharCorpus(tmp_path / "tinyshakespeare" / "input.txt")):
        assert corpus.chars == sorted(set(text)) and corpus.vocab_size == len(set(text))
        assert corpus.decode(corpus.data) == text
        n_train = int(len(text) * 0.9)
        assert len(corpus.train_data) == n_train and len(corpus.val_data) == len(text) - n_train
        assert corpus.decode(corpus.val_data) == text[n_train:]
        assert corpus.data.dtype == np.int64
        assert corpus.decode(minidl.tensor(corpus.encode("hear"))) == "hear"
    with pytest.raises(ValueError, match=r"CharCorpus.encode: characters \['Z', 'q'\] are not in the vocabulary"):
        corpus.encode("Zq")


def test_char_corpus_offline(tmp_path, monkeypatch):
    _offline(monkeypatch)
    with pytest.raises(DatasetNotFoundError, match=r"missing input.txt.*tinyshakespeare.*MINIDL_DATA"):
        CharCorpus(tmp_path, download=True)


def test_word_corpus_vocabulary_eos_and_unk(tmp_path):
    (tmp_path / "ptb").mkdir()
    (tmp_path / "ptb" / "ptb.train.txt").write_text(" a b a \n c a \n")
    (tmp_path / "ptb" / "ptb.valid.txt").write_text(" a zebra \n")
    (tmp_path / "ptb" / "ptb.test.txt").write_text(" c <unk> b \n")
    corpus = WordCorpus(tmp_path, download=False)
    # counts in train: a 3, <eos> 2, b 1, c 1, <unk> 0 -> sorted by falling count, then by word
    assert corpus.vocab == ["a", "<eos>", "b", "c", "<unk>"]
    np.testing.assert_array_equal(corpus.train, [0, 2, 0, 1, 3, 0, 1])
    np.testing.assert_array_equal(corpus.valid, [0, 4, 1])  # an unseen word is <unk>
    assert corpus.decode(corpus.test) == "c <unk> b <eos>"
    assert corpus.train.dtype == np.int64


def test_word_corpus_offline_names_all_files(tmp_path, monkeypatch):
    _offline(monkeypatch)
    with pytest.raises(DatasetNotFoundError) as info:
        WordCorpus(tmp_path, download=True)
    for part in ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt", str(tmp_path / "ptb"), "MINIDL_DATA"):
        assert part in str(info.value)


def _torch_batchify(ids, bsz):
    data = torch.from_numpy(ids)
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


@settings(max_examples=30, deadline=None)
@given(length=st.integers(8, 120), batch=st.integers(1, 4), bptt=st.integers(1, 9))
def test_batchify_and_bptt_match_pytorch_example(length, batch, bptt):
    ids = np.random.default_rng(length).integers(0, 50, size=length)
    data = batchify(ids, batch)
    reference = _torch_batchify(ids, batch)
    np.testing.assert_array_equal(data, reference.numpy())
    windows = list(BPTTIterator(data, bptt))
    assert len(windows) == len(BPTTIterator(data, bptt))
    # PyTorch's word_language_model get_batch(source, i) for i in range(0, len - 1, bptt)
    starts = range(0, reference.size(0) - 1, bptt)
    assert len(windows) == len(starts)
    for (inputs, targets), i in zip(windows, starts):
        seq_len = min(bptt, len(reference) - 1 - i)
        np.testing.assert_array_equal(inputs._data, reference[i:i + seq_len].numpy())
        np.testing.assert_array_equal(targets._data, reference[i + 1:i + 1 + seq_len].numpy())
        assert inputs.shape == (seq_len, batch) and inputs._data.dtype == np.int64


def test_batchify_and_bptt_errors():
    with pytest.raises(ValueError, match="batchify: 5 tokens make fewer than 2 steps of batch 3"):
        batchify(np.arange(5), 3)
    with pytest.raises(TypeError, match="batchify: token ids must be integers, got float64"):
        batchify(np.zeros(10), 2)
    with pytest.raises(ValueError, match=r"BPTTIterator: data must be \(steps, batch\) from batchify, got shape \(10,\)"):
        BPTTIterator(np.arange(10), 3)
    with pytest.raises(ValueError, match=r"batchify: expects a 1-D stream .* got shape \(25, 2\); this looks already"):
        batchify(batchify(np.arange(50), 2), 4)   # flattening it would interleave the two streams


@pytest.mark.gpu
def test_bptt_on_gpu():
    import cupy

    data = batchify(np.arange(50), 4)
    inputs, targets = next(iter(BPTTIterator(data, 5, device="cuda")))
    assert isinstance(inputs._data, cupy.ndarray)
    np.testing.assert_array_equal(targets._data.get(), data[1:6])


def test_cifar100_reads_the_official_python_layout(tmp_path):
    """A CIFAR-100 release in the official layout (cifar-100-python/{train, test, meta}, pickles of uint8 planes,
    fine and coarse labels, the fine label names as bytes), written here with the release's keys."""
    import pickle

    import minidl.vision.datasets as tv

    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    rng = np.random.default_rng(0)
    planes = rng.integers(0, 256, (5, 3072), dtype=np.uint8)
    split = {b"data": planes, b"fine_labels": [3, 99, 0, 7, 42], b"coarse_labels": [1, 19, 0, 2, 4],
             b"filenames": [b"x.png"] * 5}
    for name in ("train", "test"):
        (folder / name).write_bytes(pickle.dumps(split, protocol=2))
    (folder / "meta").write_bytes(pickle.dumps({b"fine_label_names": [f"class{i}".encode() for i in range(100)],
                                                b"coarse_label_names": [b"sc"] * 20}, protocol=2))
    ds = tv.CIFAR100(tmp_path, train=False, transform=minidl.vision.transforms.ToTensor())
    assert len(ds) == 5 and ds.targets.tolist() == [3, 99, 0, 7, 42] and ds.coarse_targets.tolist()[1] == 19
    assert ds.classes[42] == "class42" and ds.class_to_idx["class99"] == 99
    image, label = ds[1]
    assert tuple(image.shape) == (3, 32, 32) and label == 99
    np.testing.assert_allclose(image.numpy() * 255, planes[1].reshape(3, 32, 32), atol=1e-4)   # R, G, B planes
    (folder / "train").write_bytes(pickle.dumps({b"data": planes, b"fine_labels": [0] * 5}, protocol=2))
    with pytest.raises(ValueError, match="lacks \\['coarse_labels'\\]"):
        tv.CIFAR100(tmp_path, train=True)
