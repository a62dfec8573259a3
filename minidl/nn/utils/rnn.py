"""Batches of sequences of different lengths for the recurrent layers, as torch.nn.utils.rnn.

A batch of sentences of lengths 5, 3 and 2 is padded to (T=5, B=3, features); an RNN run over the
padding would read 2 and 3 made-up steps and end with the wrong final states. A PackedSequence
keeps only the real steps, time-major:

    padded (T, B, *) with lengths [5, 3, 2]      packed data (10, *), batch_sizes [3, 3, 2, 1, 1]
    t=0: a0 b0 c0                                 a0 b0 c0 | a1 b1 c1 | a2 b2 | a3 | a4
    t=1: a1 b1 c1
    t=2: a2 b2 .        (the sequences sorted by decreasing length, so that the batch_sizes[t]
    t=3: a3 .  .         sequences still running at step t are the first batch_sizes[t] ones)
    t=4: a4 .  .

    packed = pack_padded_sequence(padded, lengths, enforce_sorted=False)  # any order: sorted here
    output, (h_n, c_n) = lstm(packed)           # h_n: each sequence's state after ITS last step
    padded_out, lengths = pad_packed_sequence(output)

Every step here is a gather (an index with arrays), so gradients flow through packing and
unpacking as through any other tensor operation, on the CPU and on the GPU. batch_sizes and the
index permutations are int64 CPU tensors (they plan the computation; PyTorch keeps batch_sizes on
the CPU too).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ...ops.creation import full, tensor
from ...autograd.tensor import Tensor
from ...ops import cat


class PackedSequence(namedtuple("PackedSequence", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """data (sum of lengths, *): the real steps, time-major; batch_sizes (T,) int64: how many sequences
    are still running at each step; sorted_indices: for each sorted position the original batch index
    (None when the batch came sorted), unsorted_indices its inverse. Made by pack_padded_sequence or
    pack_sequence, not by hand."""

    __slots__ = ()

    def to(self, *args, **kwargs):
        """The same packing with data moved (device and/or dtype); the index tensors stay on the CPU."""
        return self._replace(data=self.data.to(*args, **kwargs))

    def cpu(self):
        return self.to("cpu")

    def cuda(self):
        return self.to("cuda")

    @property
    def is_cuda(self):
        return self.data.is_cuda


def _host_ints(name, op, values):
    """A 1-D int64 NumPy array from a list, array or CPU/GPU tensor of integers."""
    if isinstance(values, Tensor):
        values = values.detach().cpu().numpy()
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"{op}: {name} must be a 1-D sequence of integers, got {array.dtype} of shape {array.shape}")
    return array.astype(np.int64)


def _batch_sizes_of(lengths):
    """batch_sizes[t] = how many of the (decreasingly sorted) lengths exceed t."""
    return (lengths[None, :] > np.arange(int(lengths[0]))[:, None]).sum(axis=1).astype(np.int64)


def lengths_of(batch_sizes):
    """The sorted lengths back from batch_sizes: lengths[b] = how many steps have more than b sequences."""
    return (batch_sizes[None, :] > np.arange(int(batch_sizes[0]))[:, None]).sum(axis=1).astype(np.int64)


def _packed_positions(batch_sizes):
    """(times, rows): the (t, b) of every packed step, in packed (time-major) order."""
    times = np.repeat(np.arange(len(batch_sizes)), batch_sizes)
    rows = np.concatenate([np.arange(b) for b in batch_sizes]) if len(batch_sizes) else np.zeros(0, np.int64)
    return times, rows


def _padded_index(batch_sizes, total_length):
    """(total_length, B) int array: the packed row of each padded (t, b), or N (one past the last
    packed row: a padding row appended before the gather) where sequence b has ended."""
    n = int(batch_sizes.sum())
    index = np.full((total_length, int(batch_sizes[0])), n, dtype=np.int64)
    times, rows = _packed_positions(batch_sizes)
    index[times, rows] = np.arange(n)
    return index


def pad_packed(data, batch_sizes, total_length=None, padding_value=0.0):
    """The padded (T, B, *) tensor of packed `data` (sorted batch order), padding_value where a sequence
    has ended. A gather, so gradients flow back to `data`."""
    batch_sizes = np.asarray(batch_sizes, dtype=np.int64)
    total_length = len(batch_sizes) if total_length is None else int(total_length)
    pad_row = full((1,) + tuple(data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)
    return cat([data, pad_row], 0)[_padded_index(batch_sizes, total_length)]


def pack_padded(padded, batch_sizes):
    """The packed (N, *) data of a padded time-major (T, B, *) tensor in sorted batch order."""
    times, rows = _packed_positions(np.asarray(batch_sizes, dtype=np.int64))
    return padded[times, rows]


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """PackedSequence of a padded batch (T, B, *) (or (B, T, *) with batch_first) whose sequence b has
    lengths[b] real steps. enforce_sorted=True needs lengths in decreasing order; False sorts them
    (and the PackedSequence remembers how, so that outputs and states come back in the input's order)."""
    op = "pack_padded_sequence"
    if not isinstance(input, Tensor) or input.ndim < 2:
        shape = input.shape if isinstance(input, Tensor) else type(input).__name__
        raise ValueError(f"{op}: expected a padded batch of at least 2 dims (T, B, *), got {shape}")
    lengths = _host_ints("lengths", op, lengths)
    x = input.transpose(0, 1) if batch_first else input
    steps, batch = x.shape[0], x.shape[1]
    if len(lengths) != batch:
        raise ValueError(f"{op}: {len(lengths)} lengths for a batch of {batch} sequences (input {input.shape}, "
                         f"batch_first={batch_first})")
    if batch == 0 or lengths.min() <= 0:
        raise ValueError(f"{op}: every sequence needs a length greater than 0, got lengths {lengths.tolist()}")
    if lengths.max() > steps:
        raise ValueError(f"{op}: a length of {lengths.max()} is longer than the {steps} steps of the input "
                         f"{input.shape} (batch_first={batch_first})")
    sorted_indices = unsorted_indices = None
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise ValueError(f"{op}: lengths {lengths.tolist()} must be sorted in decreasing order when "
                             f"enforce_sorted=True; pass enforce_sorted=False to have them sorted")
    else:
        order = np.argsort(-lengths, kind="stable")
        lengths = lengths[order]
        x = x[:, order]
        sorted_indices = tensor(order.astype(np.int64))
        unsorted_indices = tensor(np.argsort(order).astype(np.int64))
    batch_sizes = _batch_sizes_of(lengths)
    return PackedSequence(pack_padded(x, batch_sizes), tensor(batch_sizes), sorted_indices, unsorted_indices)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """(padded (T, B, *) or (B, T, *), lengths int64 CPU tensor (B,)), both in the original batch order.
    total_length pads to that many steps (at least the longest sequence)."""
    op = "pad_packed_sequence"
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"{op}: expected a PackedSequence, got {type(sequence).__name__}")
    batch_sizes = _host_ints("batch_sizes", op, sequence.batch_sizes)
    steps = len(batch_sizes)
    if total_length is not None and total_length < steps:
        raise ValueError(f"{op}: total_length={total_length} is shorter than the longest sequence ({steps} steps)")
    padded = pad_packed(sequence.data, batch_sizes, total_length, padding_value)
    lengths = lengths_of(batch_sizes)
    if sequence.unsorted_indices is not None:
        unsorted = _host_ints("unsorted_indices", op, sequence.unsorted_indices)
        padded = padded[:, unsorted]
        lengths = lengths[unsorted]
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, tensor(lengths)


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack tensors of shapes (L_i, *) into (max L, B, *) (or (B, max L, *)), padding each sequence
    after its end (padding_side="right") or before its start ("left") with padding_value."""
    op = "pad_sequence"
    sequences = list(sequences)
    if not sequences or not all(isinstance(s, Tensor) and s.ndim >= 1 for s in sequences):
        raise ValueError(f"{op}: expected a non-empty list of tensors of at least 1 dim")
    if padding_side not in ("right", "left"):
        raise ValueError(f"{op}: padding_side must be 'right' or 'left', got {padding_side!r}")
    trailing = sequences[0].shape[1:]
    if any(s.shape[1:] != trailing for s in sequences):
        raise ValueError(f"{op}: every sequence must have the trailing shape {trailing}, got "
                         f"{[tuple(s.shape) for s in sequences]}")
    lengths = np.array([s.shape[0] for s in sequences], dtype=np.int64)
    steps, n = int(lengths.max()), int(lengths.sum())
    index = np.full((steps, len(sequences)), n, dtype=np.int64)  # n: the padding row
    start = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    for b, (first, length) in enumerate(zip(start, lengths)):
        t0 = 0 if padding_side == "right" else steps - length
        index[t0:t0 + length, b] = first + np.arange(length)
    first = sequences[0]
    pad_row = full((1,) + tuple(trailing), padding_value, dtype=first.dtype, device=first.device)
    padded = cat(sequences + [pad_row], 0)[index]
    return padded.transpose(0, 1) if batch_first else padded


def pack_sequence(sequences, enforce_sorted=True):
    """PackedSequence of a list of tensors (L_i, *) (by default in decreasing order of length)."""
    padded = pad_sequence(sequences)  # checks that they are tensors of one trailing shape
    return pack_padded_sequence(padded, [s.shape[0] for s in sequences], enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences (L_i, *) a padded batch holds (pad_sequence's inverse)."""
    padded = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    lengths = _host_ints("lengths", "unpad_sequence", lengths)
    return [padded[b, :int(n)] for b, n in enumerate(lengths)]


def unpack_sequence(packed_sequences):
    """The list of sequences a PackedSequence holds, in its original order (pack_sequence's inverse)."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)


def invert_permutation(permutation):
    """The permutation that undoes `permutation` (a 1-D int64 tensor), or None for None."""
    if permutation is None:
        return None
    from ...ops.creation import arange

    out = permutation.new_empty(permutation.shape)
    out[permutation] = arange(permutation.numel(), device=permutation.device)
    return out
