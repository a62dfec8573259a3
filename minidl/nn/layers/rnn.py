"""Recurrent layers RNN, LSTM, GRU (whole sequences) and RNNCell, LSTMCell, GRUCell (one step).

A whole multi-layer, bidirectional sequence is ONE autograd Function over the `rnn_forward` /
`rnn_backward` primitives (cuDNN's design: one GEMM for the input projection of every time step,
then a fused cell kernel per step), not T * layers small ops on the tape. The exception is dropout
between layers, which the primitive does not do: then the layers run one call each with dropout
between them.

Parameters have PyTorch's names, shapes and gate orders (weight_ih_l0, weight_hh_l0, bias_ih_l0,
bias_hh_l0, ..._reverse; LSTM gates i, f, g, o; GRU r, z, n), so a PyTorch state dict loads as is.
All start U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), PyTorch's default.
"""
from __future__ import annotations

import math

import numpy as np

from ... import primitives as P
from ..._device import Device
from ...ops.creation import empty
from ...autograd.tensor import Tensor
from ...ops import cat
from .. import functional as F
from ..functional.recurrent import RNNCellStep, RNNSequence
from .. import init
from ..module import Module, Parameter
from ..utils.rnn import PackedSequence, lengths_of, pack_padded, pad_packed


def _uniform_init(module, hidden_size):
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0
    for p in module.parameters():
        init.uniform_(p, -bound, bound)


class RNNBase(Module):
    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        name = type(self).__name__
        if proj_size:
            raise NotImplementedError(f"{name}: proj_size is not implemented")
        if not 0.0 <= float(dropout) <= 1.0:
            raise ValueError(f"{name}: dropout must be in [0, 1], got {dropout}")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional = float(dropout), bidirectional
        self._desc = P.RNNDescriptor(mode, input_size, hidden_size, num_layers, bidirectional, bias)
        factory = dict(dtype=dtype, device=None if device is None else Device(device))
        # the weights' names in the order the primitive takes them (cuDNN's), made once: _flat_weights reads them
        self._weight_names = [spec.name for specs in self._desc.weight_shapes() for spec in specs if spec is not None]
        for specs in self._desc.weight_shapes():
            for spec in specs:
                if spec is not None:
                    self.register_parameter(spec.name, Parameter(empty(*spec.shape, **factory)))
        self.reset_parameters()

    def reset_parameters(self):
        _uniform_init(self, self.hidden_size)

    def flatten_parameters(self):
        """PyTorch re-packs cuDNN's weight buffer here; minidl's primitive takes the weights as they
        are, so there is nothing to do (kept so that programs calling it run)."""

    def _flat_weights(self):
        params = self._parameters
        return [params[name] for name in self._weight_names]

    def _check_state(self, name, state, batch, unbatched):
        D = 2 if self.bidirectional else 1
        expected = (self.num_layers * D, self.hidden_size) if unbatched else (self.num_layers * D, batch, self.hidden_size)
        if not isinstance(state, Tensor) or state.shape != expected:
            got = state.shape if isinstance(state, Tensor) else type(state).__name__
            raise ValueError(f"{type(self).__name__}: expected {name} of shape {expected}, got {got}")
        return state.unsqueeze(1) if unbatched else state

    def forward(self, input, hx=None):
        name = type(self).__name__
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        # (shapes read from the arrays: a Tensor's shape is a Size, whose indexing is a Python call)
        if not isinstance(input, Tensor) or input._data.ndim not in (2, 3):
            shape = input.shape if isinstance(input, Tensor) else type(input).__name__
            raise ValueError(f"{name}: expected a 3-D input (T, B, input_size) (or (B, T, ...) with batch_first) "
                             f"or a 2-D unbatched one, got {shape}")
        if input._data.shape[-1] != self.input_size:
            raise ValueError(f"{name}: input of shape {input.shape} has input_size {input.shape[-1]}, "
                             f"expected {self.input_size}")
        unbatched = input._data.ndim == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        batch = x._data.shape[1]
        h0, c0 = self._initial_states(hx, batch, unbatched)
        if self.dropout > 0 and self.training and self.num_layers > 1:
            outs = self._layer_by_layer(x, h0, c0)
        else:
            outs = RNNSequence.apply(x, h0, c0, *self._flat_weights(), desc=self._desc)
        y, states = outs[0], outs[1:]
        if unbatched:
            y, states = y.squeeze(1), tuple(s.squeeze(1) for s in states)
        elif self.batch_first:
            y = y.transpose(0, 1)
        return (y, states) if self.mode == "lstm" else (y, states[0])

    def _initial_states(self, hx, batch, unbatched=False):
        """(h0, c0) from hx (None, h_0, or (h_0, c_0) for LSTM), checked; (None, None) without hx."""
        if hx is None:
            return None, None
        if self.mode == "lstm":
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise ValueError(f"{type(self).__name__}: hx must be a tuple (h_0, c_0)")
            return (self._check_state("h_0", hx[0], batch, unbatched),
                    self._check_state("c_0", hx[1], batch, unbatched))
        return self._check_state("h_0", hx, batch, unbatched), None

    def _forward_packed(self, packed, hx):
        """The RNN over a PackedSequence: each sequence runs its own number of steps, and h_n (c_n) hold
        each sequence's state after its last real step.

        The packed steps are laid out padded (T, B, input_size), sorted by decreasing length, and the
        whole layer stack is ONE `rnn_forward(..., seq_lengths=...)` call: the primitive leaves a
        sequence's state alone after its end, writes zeros there, and starts the reverse direction at
        each sequence's own last step (cuDNN does the same from its packed layout). With dropout
        between layers it is one call per layer, as for padded input."""
        name = type(self).__name__
        data = packed.data
        if not isinstance(data, Tensor) or data.ndim != 2 or data.shape[1] != self.input_size:
            shape = data.shape if isinstance(data, Tensor) else type(data).__name__
            raise ValueError(f"{name}: a PackedSequence of data (steps, input_size={self.input_size}), got {shape}")
        batch_sizes = np.asarray(packed.batch_sizes.cpu().numpy(), dtype=np.int64)
        batch = int(batch_sizes[0])
        h0, c0 = self._initial_states(hx, batch)
        if packed.sorted_indices is not None:  # states come in the caller's order; the layout is sorted
            order = packed.sorted_indices.cpu().numpy()
            h0 = None if h0 is None else h0[:, order]
            c0 = None if c0 is None else c0[:, order]
        x = pad_packed(data, batch_sizes)  # (T, B, input_size), zeros after each sequence's end
        lengths = lengths_of(batch_sizes)
        if self.dropout > 0 and self.training and self.num_layers > 1:
            outs = self._layer_by_layer(x, h0, c0, lengths)
        else:
            outs = RNNSequence.apply(x, h0, c0, *self._flat_weights(), desc=self._desc, seq_lengths=lengths)
        output = packed._replace(data=pack_padded(outs[0], batch_sizes))
        h_n = outs[1]
        c_n = outs[2] if self.mode == "lstm" else None
        if packed.unsorted_indices is not None:
            back = packed.unsorted_indices.cpu().numpy()
            h_n = h_n[:, back]
            c_n = None if c_n is None else c_n[:, back]
        return (output, (h_n, c_n)) if self.mode == "lstm" else (output, h_n)

    def _layer_by_layer(self, x, h0, c0, seq_lengths=None):
        """The same RNN, one primitive call per layer, with dropout on each layer's output but the last."""
        D = 2 if self.bidirectional else 1
        per = 4 if self.bias else 2
        weights = self._flat_weights()
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            desc = P.RNNDescriptor(self.mode, self._desc.layer_input_size(layer), self.hidden_size, 1,
                                   self.bidirectional, self.bias)
            rows = slice(layer * D, (layer + 1) * D)
            outs = RNNSequence.apply(x, None if h0 is None else h0[rows], None if c0 is None else c0[rows],
                                     *weights[layer * D * per:(layer + 1) * D * per], desc=desc,
                                     seq_lengths=seq_lengths)
            x = outs[0]
            h_n.append(outs[1])
            if self.mode == "lstm":
                c_n.append(outs[2])
            if layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
        return (x, cat(h_n, 0), cat(c_n, 0)) if self.mode == "lstm" else (x, cat(h_n, 0))

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """Elman RNN, h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu). Returns (output, h_n)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(f"rnn_{nonlinearity}", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, device=device, dtype=dtype)

    def extra_repr(self):
        s = super().extra_repr()
        return s + (", nonlinearity='relu'" if self.nonlinearity == "relu" else "")


class LSTM(RNNBase):
    """Long short-term memory. Returns (output, (h_n, c_n))."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("lstm", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit. Returns (output, h_n)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None):
        super().__init__("gru", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)


class RNNCellBase(Module):
    _gates = 1

    def __init__(self, mode, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__()
        self.mode, self.input_size, self.hidden_size, self.bias = mode, input_size, hidden_size, bias
        factory = dict(dtype=dtype, device=None if device is None else Device(device))
        gh = self._gates * hidden_size
        self.weight_ih = Parameter(empty(gh, input_size, **factory))
        self.weight_hh = Parameter(empty(gh, hidden_size, **factory))
        if bias:
            self.bias_ih = Parameter(empty(gh, **factory))
            self.bias_hh = Parameter(empty(gh, **factory))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        _uniform_init(self, self.hidden_size)

    def _prepare(self, input, states):
        name = type(self).__name__
        if not isinstance(input, Tensor) or input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            shape = input.shape if isinstance(input, Tensor) else type(input).__name__
            raise ValueError(f"{name}: expected input (batch, {self.input_size}) or ({self.input_size},), got {shape}")
        unbatched = input.ndim == 1
        x = input.unsqueeze(0) if unbatched else input
        expected = (x.shape[0], self.hidden_size)
        out = []
        for i, s in enumerate(states):
            if s is None:
                out.append(None)
                continue
            s = s.unsqueeze(0) if unbatched and s.ndim == 1 else s
            if s.shape != expected:
                raise ValueError(f"{name}: expected hidden state {i} of shape {expected}, got {s.shape}")
            out.append(s)
        return x, out, unbatched

    def _step(self, x, h, c):
        params = [self.weight_ih, self.weight_hh] + ([self.bias_ih, self.bias_hh] if self.bias else [])
        return RNNCellStep.apply(x, h, c, *params, mode=self.mode)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        return s


class RNNCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(f"rnn_{nonlinearity}", input_size, hidden_size, bias, device, dtype)

    def forward(self, input, hx=None):
        x, (h,), unbatched = self._prepare(input, [hx])
        h_new = self._step(x, h, None)
        return h_new.squeeze(0) if unbatched else h_new


class LSTMCell(RNNCellBase):
    _gates = 4

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__("lstm", input_size, hidden_size, bias, device, dtype)

    def forward(self, input, hx=None):
        h, c = (None, None) if hx is None else hx
        x, (h, c), unbatched = self._prepare(input, [h, c])
        h_new, c_new = self._step(x, h, c)
        return (h_new.squeeze(0), c_new.squeeze(0)) if unbatched else (h_new, c_new)


class GRUCell(RNNCellBase):
    _gates = 3

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__("gru", input_size, hidden_size, bias, device, dtype)

    def forward(self, input, hx=None):
        x, (h,), unbatched = self._prepare(input, [hx])
        h_new = self._step(x, h, None)
        return h_new.squeeze(0) if unbatched else h_new
