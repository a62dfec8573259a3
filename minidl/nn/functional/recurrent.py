"""The RNN / LSTM / GRU Functions over the rnn primitive: a whole multi-layer, bidirectional sequence
is ONE Function over rnn_forward / rnn_backward (RNNSequence), a cell step one over rnn_cell_step
(RNNCellStep). The layers (nn.RNN, nn.LSTM, nn.GRU and the cells) are in nn/layers/rnn.py."""
from __future__ import annotations

import numpy as np

from ... import backends
from ... import primitives as P
from ..._dtypes import HALF_DTYPES, float32
from ...amp.autocast_mode import cast_output, lower_precision_dtype
from ...amp import autocast_mode as _amp
from ...autograd.function import Function, is_grad_enabled


def _group(flat, desc):
    """Flat list of weight arrays -> PyTorch-ordered tuples (w_ih, w_hh, b_ih, b_hh) per layer/direction."""
    per = 4 if desc.bias else 2
    groups = []
    for i in range(0, len(flat), per):
        chunk = flat[i:i + per]
        groups.append(tuple(chunk) if desc.bias else (chunk[0], chunk[1], None, None))
    return groups


def _rnn_math(x) -> str:
    """The GEMMs' math mode: TF32 on the GPU when minidl.backends.cudnn.allow_tf32 is set (torch uses
    the cuDNN flag for RNNs too); the CPU path stays exact fp32. Half data on the GPU (autocast's
    bfloat16/float16) gets "bf16": the RNN kernels keep the data and states in float32 and round the
    recurrent products' operands to bfloat16 (the persistent kernels; elsewhere TF32), as torch's
    autocast runs cuDNN's RNN in bf16."""
    if isinstance(x, np.ndarray):
        return "fp32"
    if x.dtype in HALF_DTYPES:
        return "bf16"
    return backends.math_for_conv(x.dtype)


class RNNSequence(Function):
    """The whole (multi-layer, bidirectional) RNN over a sequence. Inputs: x (T, B, I) time-major,
    h0, c0 (L*D, B, H) or None, then the weights in PyTorch's order. Outputs: y (T, B, D*H), h_n
    and, for LSTM, c_n."""

    @classmethod
    def apply(cls, *inputs, **params):
        half = lower_precision_dtype("rnn", *inputs) if _amp.regions else None
        if half is None:            # no autocast here (the policy for "rnn" is lower precision or nothing)
            return super().apply(*inputs, **params)
        x, h0, c0, *weights = inputs
        states = [t for t in (x, h0, c0) if t is not None]
        if (x.is_cuda and all(w.dtype == float32 for w in weights if w is not None)
                and all(t.dtype in (float32, half) for t in states)):
            # Autocast on the GPU with float32 weights: the RNN kernels keep data and states in float32 and
            # round the recurrent products' operands to bfloat16 themselves (math="bf16"), so casting every
            # weight to half (and the primitive casting it back) would only add launches. A half input (the
            # layer below's output, with dropout between layers) is cast up instead; the outputs take
            # autocast's dtype, as torch's.
            up = [t if t is None or t.dtype == float32 else cast_output(t, float32) for t in (x, h0, c0)]
            outputs = super().apply(*up, *weights, math="bf16", **params)
            return tuple(cast_output(o, half) for o in outputs)
        if _amp.regions:
            inputs = _amp.cast_inputs("rnn", *inputs)
        return super().apply(*inputs, **params)

    def forward(self, x, h0, c0, *weights, desc=None, seq_lengths=None, math=None):
        self.desc = desc
        keep = is_grad_enabled() and any(self.needs_input_grad)  # the reserve is only for backward
        y, hy, cy, self.reserve = P.rnn_forward(x, h0, c0, _group(list(weights), desc), desc,
                                                seq_lengths=seq_lengths, training=keep, math=math or _rnn_math(x))
        return (y, hy, cy) if desc.mode == "lstm" else (y, hy)

    def backward(self, dy, dhy, dcy=None):
        dx, dh0, dc0, dweights = P.rnn_backward(dy, dhy, dcy, self.reserve)
        flat = [g for group in dweights for g in group[: 4 if self.desc.bias else 2]]
        return (dx, dh0, dc0, *flat)


class RNNCellStep(Function):
    """One step of one cell. Inputs x (B, I), h, c (B, H) or None, w_ih, w_hh[, b_ih, b_hh]."""

    @classmethod
    def apply(cls, *inputs, **params):
        if _amp.regions:
            inputs = _amp.cast_inputs("rnn_cell", *inputs)
        return super().apply(*inputs, **params)

    def forward(self, x, h, c, w_ih, w_hh, b_ih=None, b_hh=None, mode="rnn_tanh"):
        self.mode, self.has_bias = mode, b_ih is not None
        keep = is_grad_enabled() and any(self.needs_input_grad)
        h_new, c_new, self.reserve = P.rnn_cell_step(mode, x, h, c, w_ih, w_hh, b_ih, b_hh, training=keep,
                                                     math=_rnn_math(x))
        return (h_new, c_new) if mode == "lstm" else h_new

    def backward(self, dh, dc=None):
        dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh = P.rnn_cell_step_backward(dh, dc, self.reserve)
        grads = (dx, dh0, dc0, dw_ih, dw_hh)
        return grads + (db_ih, db_hh) if self.has_bias else grads
