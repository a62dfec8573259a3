"""Recurrent networks as one primitive: vanilla RNN (tanh or ReLU), LSTM and GRU, in the cuDNN style.

A multi-layer, optionally bidirectional RNN over a whole sequence is one call, as in cuDNN's
`cudnnRNNForward`, because that is what lets a library make it fast (Appleyard et al., "Optimizing
Performance of Recurrent Neural Networks on GPUs", 2016):

* for each layer and direction, the input projection of ALL time steps is one big GEMM,
  `(T*B, input) @ w_ih.T`, since it does not depend on the recurrence;
* then, step by step, only the small recurrent GEMM `h @ w_hh.T` and one "pointwise cell" function
  (`rnn_cell_forward`, `lstm_cell_forward`, `gru_cell_forward`) that applies the gate
  non-linearities; the CUDA backend fuses each cell into one kernel of the same name.

Equations and gate orders are exactly PyTorch's (so weights transfer one to one):

    rnn:  h' = act(W_ih x + b_ih + W_hh h + b_hh)                      act = tanh or relu
    lstm: i, f, g, o = sigma, sigma, tanh, sigma of (W_ih x + b_ih + W_hh h + b_hh), split in 4
          c' = f * c + i * g,   h' = o * tanh(c')
    gru:  r, z = sigma of (W_ir x + b_ir + W_hr h + b_hr), (W_iz x + ... )
          n  = tanh(W_in x + b_in + r * (W_hn h + b_hn))
          h' = (1 - z) * n + z * h

Padded batches (`seq_lengths`) follow PyTorch's `pack_padded_sequence(enforce_sorted=False)`:
steps at t >= length[b] leave sequence b's state unchanged and write zeros to y; the reverse
direction starts at each sequence's own last valid step; hy/cy are the states after each sequence's
last valid step.

Dropout between layers is NOT part of this primitive (cuDNN has it in its RNN descriptor; here the
nn.LSTM/GRU/RNN modules run the layers one call per layer and apply `dropout_forward` between them).

Single cells (the framework's RNNCell/LSTMCell/GRUCell) are a one-step, one-layer RNN:
`rnn_cell_step` and `rnn_cell_step_backward` below do exactly that, so they share every line of the
sequence code and both backends.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ._common import (
    backend, check_float, check_same_device, computes_half_in_float32, is_cuda_array, shape_str,
)

__all__ = [
    "RNN_ALGOS",
    "RNN_MATHS",
    "RNN_MODES",
    "RNNDescriptor",
    "RNNReserve",
    "WeightSpec",
    "rnn_forward",
    "rnn_backward",
    "rnn_cell_step",
    "rnn_cell_step_backward",
]

RNN_MODES = ("rnn_tanh", "rnn_relu", "lstm", "gru")
# cuDNN's cudnnRNNAlgo_t: STANDARD and PERSIST_STATIC; "auto" lets the backend pick (see RNNDescriptor).
RNN_ALGOS = ("auto", "standard", "persistent")
# The GEMMs' math: "fp32"; "tf32" (every GEMM with TF32 operands); "bf16" (the recurrent products and the
# backward's weight and input gradients with bfloat16 operands, the forward's input projection TF32: what autocast
# to bfloat16/float16 asks for).
RNN_MATHS = ("fp32", "tf32", "bf16")
_GATE_COUNT = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}


class WeightSpec(NamedTuple):
    """One parameter of an RNN: its PyTorch name (e.g. 'weight_ih_l1_reverse') and its shape."""

    name: str
    shape: tuple


@dataclass(frozen=True)
class RNNDescriptor:
    """What an RNN is, without its weights (cuDNN's cudnnRNNDescriptor_t).

    algo, as cuDNN's RNN algorithm (the CPU reference computes the same math for every choice):
      "standard"    per time step, one recurrent GEMM and one fused cell kernel (kernels/rnn.cu);
      "persistent"  one launch per layer runs every step, the recurrent weights held in shared memory
                    for the whole sequence (kernels/rnn_persistent.cu); a ValueError where it does not fit;
      "auto"        persistent where it fits (hidden size, batch, this GPU's SMs and shared memory),
                    standard elsewhere. The default.
    """

    mode: str
    input_size: int
    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    bias: bool = True
    algo: str = "auto"
    # 2 for a bidirectional RNN, else 1: set once here (a plain attribute, read per call by the backends)
    num_directions: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.mode not in RNN_MODES:
            raise ValueError(f"RNNDescriptor: mode must be one of {RNN_MODES}, got {self.mode!r}")
        if self.algo not in RNN_ALGOS:
            raise ValueError(f"RNNDescriptor: algo must be one of {RNN_ALGOS}, got {self.algo!r}")
        for name in ("input_size", "hidden_size", "num_layers"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"RNNDescriptor: {name} must be an int >= 1, got {value!r}")
            object.__setattr__(self, name, int(value))
        object.__setattr__(self, "bidirectional", bool(self.bidirectional))
        object.__setattr__(self, "bias", bool(self.bias))
        object.__setattr__(self, "num_directions", 2 if self.bidirectional else 1)

    @property
    def gate_count(self) -> int:
        """Gates per cell: 1 (vanilla RNN), 4 (LSTM: i, f, g, o), 3 (GRU: r, z, n)."""
        return _GATE_COUNT[self.mode]

    def layer_input_size(self, layer: int) -> int:
        """Layer 0 reads x; deeper layers read the concatenated directions of the layer below."""
        return self.input_size if layer == 0 else self.num_directions * self.hidden_size

    def weight_shapes(self) -> list:
        """For each (layer, direction) in PyTorch's order, a tuple of 4 WeightSpec
        (w_ih, w_hh, b_ih, b_hh); the two biases are None when bias=False.

        w_ih (gates*hidden, layer_input), w_hh (gates*hidden, hidden), biases (gates*hidden,).
        """
        gh = self.gate_count * self.hidden_size
        specs = []
        for layer in range(self.num_layers):
            for direction in range(self.num_directions):
                suffix = f"l{layer}" + ("_reverse" if direction == 1 else "")
                w_ih = WeightSpec(f"weight_ih_{suffix}", (gh, self.layer_input_size(layer)))
                w_hh = WeightSpec(f"weight_hh_{suffix}", (gh, self.hidden_size))
                if self.bias:
                    b_ih = WeightSpec(f"bias_ih_{suffix}", (gh,))
                    b_hh = WeightSpec(f"bias_hh_{suffix}", (gh,))
                else:
                    b_ih = b_hh = None
                specs.append((w_ih, w_hh, b_ih, b_hh))
        return specs


@dataclass
class RNNReserve:
    """What rnn_backward needs from rnn_forward (cuDNN's "reserve space").

    `saved` is the backend's own record (layer inputs, gate activations, states per step); the other
    fields let rnn_backward check its arguments without looking inside it.
    """

    desc: RNNDescriptor
    x_shape: tuple
    dtype: Any
    on_cuda: bool
    weights: list
    seq_lengths: Any  # numpy int64 array of B lengths on the host, or None
    saved: Any
    math: str = "fp32"  # the forward pass's math mode; the backward pass uses the same


# ----------------------------------------------------------------------------------------------
# Argument checks (all of them before any computation)
# ----------------------------------------------------------------------------------------------


def _check_state(op, name, a, expected):
    if a is not None and tuple(a.shape) != expected:
        raise ValueError(f"{op}: {name} has shape {shape_str(a.shape)}, expected {shape_str(expected)} "
                         "(num_layers * num_directions, batch, hidden_size)")


def _check_weights(op, weights, desc):
    specs = desc.weight_shapes()
    if not isinstance(weights, (list, tuple)) or len(weights) != len(specs):
        got = len(weights) if isinstance(weights, (list, tuple)) else type(weights).__name__
        raise ValueError(f"{op}: weights must be a list of {len(specs)} tuples (w_ih, w_hh, b_ih, b_hh), one per "
                         f"(layer, direction), got {got}")
    named = {}
    for entry, spec in zip(weights, specs):
        if not isinstance(entry, (list, tuple)) or len(entry) != 4:
            raise ValueError(f"{op}: each weights entry must be a tuple (w_ih, w_hh, b_ih, b_hh); "
                             f"the one for {spec[0].name} is not")
        for array, want in zip(entry, spec):
            if want is None:
                if array is not None:
                    raise ValueError(f"{op}: the descriptor has bias=False, but a bias array was given "
                                     f"next to {spec[0].name}; pass None")
                continue
            if array is None:
                raise ValueError(f"{op}: {want.name} is missing (the descriptor has bias=True)")
            if tuple(array.shape) != want.shape:
                raise ValueError(f"{op}: {want.name} has shape {shape_str(array.shape)}, expected "
                                 f"{shape_str(want.shape)} for mode={desc.mode!r} "
                                 f"({desc.gate_count} gates x hidden_size {desc.hidden_size})")
            named[want.name] = array
    return named


def _check_seq_lengths(op, seq_lengths, T, B):
    """To a host int64 array of B lengths in 1..T (cuDNN also takes the lengths on the host)."""
    if seq_lengths is None:
        return None
    if is_cuda_array(seq_lengths):
        seq_lengths = seq_lengths.get()
    lengths = np.asarray(seq_lengths)
    if lengths.dtype.kind not in "iu":
        raise TypeError(f"{op}: seq_lengths must be integers, got dtype {lengths.dtype}")
    if lengths.shape != (B,):
        raise ValueError(f"{op}: seq_lengths has shape {tuple(lengths.shape)}, expected ({B},): one length "
                         "per batch element")
    if lengths.min() < 1 or lengths.max() > T:
        raise ValueError(f"{op}: seq_lengths must lie in 1..{T} (the padded length of x), got "
                         f"min {int(lengths.min())}, max {int(lengths.max())}")
    return lengths.astype(np.int64)


# ----------------------------------------------------------------------------------------------
# The sequence primitive
# ----------------------------------------------------------------------------------------------


@computes_half_in_float32()
def rnn_forward(x, h0, c0, weights, desc: RNNDescriptor, *, seq_lengths=None, training=True, math="fp32"):
    """Run the whole RNN over a (padded) batch of sequences.

    x (T, B, input_size), time-major; h0, c0 (num_layers * num_dirs, B, hidden_size) or None
    (zeros; c0 only for LSTM); weights as listed by desc.weight_shapes(); seq_lengths None or B ints
    in 1..T. Returns (y, hy, cy, reserve): y (T, B, num_dirs * hidden_size), hy like h0, cy like
    c0 for LSTM and None otherwise, reserve for rnn_backward (None when training=False).
    math: "fp32" or "tf32", the math mode of every GEMM (see minidl.primitives.gemm; "tf32" runs our
    TF32 tensor-core GEMM on the GPU and emulates it on the CPU); or "bf16": the recurrent products
    (h @ W_hh^T and its gradients) and the backward's weight and input gradients with bfloat16 operands and
    fp32 sums, the forward's input projection as "tf32" (on the GPU only the persistent algorithm has bf16
    recurrent products, and only the wgmma GEMM (H100/H200) the bf16 gradients; elsewhere they run in TF32).
    rnn_backward uses the same.
    """
    op = "rnn_forward"
    if math not in RNN_MATHS:
        raise ValueError(f"{op}: unknown math {math!r}; use one of {RNN_MATHS}")
    if not isinstance(desc, RNNDescriptor):
        raise TypeError(f"{op}: desc must be an RNNDescriptor, got {type(desc).__name__}")
    if x.ndim != 3:
        raise ValueError(f"{op}: x must be (T, batch, input_size), time-major, got shape {shape_str(x.shape)}")
    T, B, in_size = x.shape
    if T == 0 or B == 0:
        raise ValueError(f"{op}: x has shape {shape_str(x.shape)}; empty sequences or batches are not supported")
    if in_size != desc.input_size:
        raise ValueError(f"{op}: x has shape {shape_str(x.shape)}, i.e. input_size {in_size}, but the "
                         f"descriptor has input_size {desc.input_size}")
    state_shape = (desc.num_layers * desc.num_directions, B, desc.hidden_size)
    _check_state(op, "h0", h0, state_shape)
    if c0 is not None and desc.mode != "lstm":
        raise ValueError(f"{op}: c0 is only for mode='lstm', got mode={desc.mode!r}; pass None")
    _check_state(op, "c0", c0, state_shape)
    named = _check_weights(op, weights, desc)
    check_same_device(op, x=x, h0=h0, c0=c0, **named)
    dtype = check_float(op, x=x, h0=h0, c0=c0, **named)
    lengths = _check_seq_lengths(op, seq_lengths, T, B)

    on_cuda = is_cuda_array(x)
    impl = backend("rnn", on_cuda)
    y, hy, cy, saved = impl.rnn_forward(x, h0, c0, weights, desc, lengths, bool(training), math=math)
    if not training:
        return y, hy, cy, None
    reserve = RNNReserve(desc=desc, x_shape=tuple(x.shape), dtype=dtype, on_cuda=on_cuda,
                         weights=list(weights), seq_lengths=lengths, saved=saved, math=math)
    return y, hy, cy, reserve


@computes_half_in_float32()
def rnn_backward(dy, dhy, dcy, reserve: RNNReserve):
    """Back-propagation through time for the rnn_forward call that made `reserve`.

    dy (T, B, num_dirs * hidden_size) or None; dhy, dcy (num_layers * num_dirs, B, hidden_size) or None
    (zeros; dcy only for LSTM). Returns (dx, dh0, dc0, dweights): dx like x, dh0 like h0, dc0 like c0
    for LSTM and None otherwise, dweights in the structure of the weights (None where a bias is None).
    """
    op = "rnn_backward"
    if not isinstance(reserve, RNNReserve):
        raise ValueError(f"{op}: reserve must be the RNNReserve returned by rnn_forward(..., training=True), "
                         f"got {type(reserve).__name__}")
    desc = reserve.desc
    T, B, _ = reserve.x_shape
    y_shape = (T, B, desc.num_directions * desc.hidden_size)
    state_shape = (desc.num_layers * desc.num_directions, B, desc.hidden_size)
    if dy is not None and tuple(dy.shape) != y_shape:
        raise ValueError(f"{op}: dy has shape {shape_str(dy.shape)}, expected y's shape {shape_str(y_shape)}")
    _check_state(op, "dhy", dhy, state_shape)
    if dcy is not None and desc.mode != "lstm":
        raise ValueError(f"{op}: dcy is only for mode='lstm', got mode={desc.mode!r}; pass None")
    _check_state(op, "dcy", dcy, state_shape)
    grads = {k: v for k, v in (("dy", dy), ("dhy", dhy), ("dcy", dcy)) if v is not None}
    if grads:
        check_same_device(op, **grads)
        if any((not isinstance(g, np.ndarray)) != reserve.on_cuda for g in grads.values()):   # (NumPy or CuPy)
            raise ValueError(f"{op}: the gradients are on a different device from the forward pass")
        dtype = check_float(op, **grads)
        if dtype != reserve.dtype:
            raise TypeError(f"{op}: gradients have dtype {dtype} but the forward pass ran in {reserve.dtype}")

    impl = backend("rnn", reserve.on_cuda)
    return impl.rnn_backward(dy, dhy, dcy, desc, reserve.weights, reserve.seq_lengths, reserve.saved,
                             math=reserve.math)


# ----------------------------------------------------------------------------------------------
# Single cells: a one-step, one-layer RNN
# ----------------------------------------------------------------------------------------------


@computes_half_in_float32()
def rnn_cell_step(mode, x, h, c, w_ih, w_hh, b_ih=None, b_hh=None, *, training=True, math="fp32"):
    """One step of one cell (PyTorch's RNNCell / LSTMCell / GRUCell).

    x (B, input_size); h (B, hidden) or None (zeros); c (B, hidden) or None, LSTM only;
    w_ih (gates*hidden, input_size), w_hh (gates*hidden, hidden), biases (gates*hidden,) or both None.
    Returns (h_new, c_new, reserve): c_new is None unless mode='lstm'; reserve feeds
    rnn_cell_step_backward (None when training=False). math: as in rnn_forward.
    """
    op = "rnn_cell_step"
    if mode not in RNN_MODES:
        raise ValueError(f"{op}: mode must be one of {RNN_MODES}, got {mode!r}")
    if x.ndim != 2:
        raise ValueError(f"{op}: x must be (batch, input_size), got shape {shape_str(x.shape)}")
    if w_hh.ndim != 2:
        raise ValueError(f"{op}: w_hh must be (gates*hidden, hidden), got shape {shape_str(w_hh.shape)}")
    if (b_ih is None) != (b_hh is None):
        raise ValueError(f"{op}: pass both biases or neither")
    for name, a in (("h", h), ("c", c)):
        if a is not None and a.ndim != 2:
            raise ValueError(f"{op}: {name} must be (batch, hidden), got shape {shape_str(a.shape)}")
    desc = RNNDescriptor(mode, x.shape[1], w_hh.shape[1], bias=b_ih is not None)
    _, hy, cy, reserve = rnn_forward(
        x[None], None if h is None else h[None], None if c is None else c[None],
        [(w_ih, w_hh, b_ih, b_hh)], desc, training=training, math=math)
    return hy[0], (None if cy is None else cy[0]), reserve


@computes_half_in_float32()
def rnn_cell_step_backward(dh_new, dc_new, reserve: RNNReserve):
    """Gradients of one cell step. dh_new, dc_new (B, hidden) or None (dc_new LSTM only).

    Returns (dx, dh, dc, dw_ih, dw_hh, db_ih, db_hh); dc is None unless LSTM, the biases' None if
    the cell has none.
    """
    op = "rnn_cell_step_backward"
    for name, a in (("dh_new", dh_new), ("dc_new", dc_new)):
        if a is not None and a.ndim != 2:
            raise ValueError(f"{op}: {name} must be (batch, hidden), got shape {shape_str(a.shape)}")
    dx, dh0, dc0, dweights = rnn_backward(
        None, None if dh_new is None else dh_new[None], None if dc_new is None else dc_new[None], reserve)
    dw_ih, dw_hh, db_ih, db_hh = dweights[0]
    return dx[0], dh0[0], (None if dc0 is None else dc0[0]), dw_ih, dw_hh, db_ih, db_hh
