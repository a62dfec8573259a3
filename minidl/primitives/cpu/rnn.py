"""NumPy reference of the RNN primitive (vanilla tanh/ReLU, LSTM, GRU), structured as cuDNN does it.

Forward, per layer and direction:
  1. one GEMM projects the inputs of all T steps at once: (T*B, in) @ w_ih.T + b_ih -> (T, B, G*H);
  2. per step, one recurrent GEMM h @ w_hh.T + b_hh -> (B, G*H), and one pointwise cell function
     that turns the two gate pre-activations into the new state (`*_cell_forward`).
Backward (back-propagation through time), per layer and direction, from the top layer down:
  1. per step, in the reverse of the forward order, the pointwise `*_cell_backward` gives the
     gradients of the gate pre-activations, and one GEMM dgates_h @ w_hh carries dh to the step before;
  2. after the loop, the weight gradients are one GEMM each over all T*B rows, and the gradient of
     the layer's input is one GEMM dgates_x @ w_ih.

The pointwise cell functions have the names of the CUDA kernels in kernels/rnn.cu that fuse them.
Arguments arrive checked by minidl/primitives/rnn.py. Dropout between layers is not done here.

Padded batches: mask[t, b] = t < seq_lengths[b]. A masked step keeps the old state and writes zeros
to y; in backward it passes dh/dc through untouched and contributes nothing to the weights.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .gemm import round_to_bf16, round_to_tf32

# ----------------------------------------------------------------------------------------------
# Pointwise cells. gates_x = W_ih x + b_ih and gates_h = W_hh h + b_hh, each (B, G*H).
# ----------------------------------------------------------------------------------------------


def _sigmoid(a):
    # 0.5 * (1 + tanh(a / 2)) equals 1 / (1 + exp(-a)) but never overflows exp for large -a.
    return 0.5 * (1.0 + np.tanh(0.5 * a))


def rnn_cell_forward(gates_x, gates_h, nonlinearity):
    """h' = tanh or relu(gates_x + gates_h). All (B, H). Returns h'."""
    pre = gates_x + gates_h
    if nonlinearity == "tanh":
        return np.tanh(pre)
    return np.maximum(pre, 0)


def rnn_cell_backward(dh_new, h_new, nonlinearity):
    """Gradient of the pre-activation (the same for gates_x and gates_h), from h' alone."""
    if nonlinearity == "tanh":
        return dh_new * (1 - h_new * h_new)
    return dh_new * (h_new > 0)


def lstm_cell_forward(gates_x, gates_h, c):
    """LSTM cell, gates i, f, g, o. gates_* (B, 4H), c (B, H).

    Returns (h_new, c_new, acts) with acts (B, 4H) the gate activations [i, f, g, o] for backward.
    """
    H = c.shape[1]
    pre = gates_x + gates_h
    i = _sigmoid(pre[:, 0 * H:1 * H])
    f = _sigmoid(pre[:, 1 * H:2 * H])
    g = np.tanh(pre[:, 2 * H:3 * H])
    o = _sigmoid(pre[:, 3 * H:4 * H])
    c_new = f * c + i * g
    h_new = o * np.tanh(c_new)
    return h_new, c_new, np.concatenate([i, f, g, o], axis=1)


def lstm_cell_backward(dh_new, dc_new, acts, c, c_new):
    """Returns (dgates (B, 4H), dc (B, H)); dgates is the gradient of both gates_x and gates_h."""
    H = c.shape[1]
    i, f, g, o = (acts[:, k * H:(k + 1) * H] for k in range(4))
    tanh_c = np.tanh(c_new)
    # c_new reaches the loss directly (dc_new, from the next step) and through h_new = o * tanh(c_new).
    dc_total = dc_new + dh_new * o * (1 - tanh_c * tanh_c)
    di = dc_total * g * i * (1 - i)
    df = dc_total * c * f * (1 - f)
    dg = dc_total * i * (1 - g * g)
    do = dh_new * tanh_c * o * (1 - o)
    return np.concatenate([di, df, dg, do], axis=1), dc_total * f


def gru_cell_forward(gates_x, gates_h, h):
    """GRU cell, gates r, z, n. gates_* (B, 3H), h (B, H).

    Returns (h_new, saved) with saved (B, 4H) = [r, z, n, W_hn h + b_hn] for backward. The last block
    is kept because r multiplies it: unlike the LSTM, the GRU's x and h gate parts do not just add up.
    """
    H = h.shape[1]
    r = _sigmoid(gates_x[:, 0 * H:1 * H] + gates_h[:, 0 * H:1 * H])
    z = _sigmoid(gates_x[:, 1 * H:2 * H] + gates_h[:, 1 * H:2 * H])
    hn = gates_h[:, 2 * H:3 * H]
    n = np.tanh(gates_x[:, 2 * H:3 * H] + r * hn)
    h_new = (1 - z) * n + z * h
    return h_new, np.concatenate([r, z, n, hn], axis=1)


def gru_cell_backward(dh_new, saved, h):
    """Returns (dgates_x (B, 3H), dgates_h (B, 3H), dh_direct (B, H)).

    dh_direct is the part of dh that flows straight through h' = ... + z * h, not through W_hh.
    """
    H = h.shape[1]
    r, z, n, hn = (saved[:, k * H:(k + 1) * H] for k in range(4))
    dn_pre = dh_new * (1 - z) * (1 - n * n)
    dz_pre = dh_new * (h - n) * z * (1 - z)
    dr_pre = dn_pre * hn * r * (1 - r)
    dgates_x = np.concatenate([dr_pre, dz_pre, dn_pre], axis=1)
    dgates_h = np.concatenate([dr_pre, dz_pre, dn_pre * r], axis=1)
    return dgates_x, dgates_h, dh_new * z


# ----------------------------------------------------------------------------------------------
# One direction of one layer over the whole sequence
# ----------------------------------------------------------------------------------------------


@dataclass
class _DirectionRecord:
    """What backward needs from one (layer, direction), every array indexed by time t (T, B, .)."""

    h_prev: np.ndarray           # state entering step t
    c_prev: np.ndarray | None    # LSTM only
    cell_h: np.ndarray           # the cell's output at step t (before masking)
    cell_c: np.ndarray | None    # LSTM only
    gates: np.ndarray            # LSTM acts, GRU [r, z, n, hn]; None for the vanilla RNN


def _mm(a, b, math, recurrent=False):
    """a @ b in the primitive's math mode: "tf32" rounds float32 operands to TF32 first (as the GPU's
    tensor cores do, see minidl/primitives/cpu/gemm.py); "bf16" rounds the recurrent products' operands
    (recurrent=True: h @ W_hh^T, dgates @ W_hh; and the backward pass's weight and input gradients, which
    multiply bfloat16 copies on a GPU with the wgmma GEMM, as cuDNN's bf16 RNN does) to bfloat16 and the forward
    pass's input projection's to TF32; "fp32" is the plain product."""
    if math in ("tf32", "bf16") and a.dtype == np.float32:
        rounding = round_to_bf16 if math == "bf16" and recurrent else round_to_tf32
        a, b = rounding(a), rounding(b)
    return a @ b


def _nonlinearity(mode):
    return "relu" if mode == "rnn_relu" else "tanh"


def _time_steps(T, reverse):
    return range(T - 1, -1, -1) if reverse else range(T)


def _forward_direction(mode, gates_x_all, h, c, w_hh, b_hh, mask, reverse, math="fp32"):
    """gates_x_all (T, B, G*H) already holds W_ih x + b_ih; h, c (B, H). Returns (out, h, c, record).

    With a mask, step t computes only the rows up to the last sequence still running there
    (`_running_rows`): for a batch sorted by decreasing length, as a PackedSequence is, that is exactly
    the running ones, so finished sequences cost nothing (what cuDNN's packed layout saves)."""
    T, B, _ = gates_x_all.shape
    H = w_hh.shape[1]
    dtype = gates_x_all.dtype
    out = np.zeros((T, B, H), dtype)
    h_prev = np.empty((T, B, H), dtype)
    cell_h = np.zeros((T, B, H), dtype)
    is_lstm = mode == "lstm"
    c_prev = np.empty((T, B, H), dtype) if is_lstm else None
    cell_c = np.zeros((T, B, H), dtype) if is_lstm else None
    # LSTM keeps [i, f, g, o], GRU [r, z, n, hn]: 4H each; the vanilla RNN needs only cell_h.
    gates = np.zeros((T, B, 4 * H), dtype) if mode in ("lstm", "gru") else None
    running = _running_rows(mask, T, B)
    h = h.copy()
    c = c.copy() if is_lstm else None

    for t in _time_steps(T, reverse):
        n = running[t]
        h_prev[t] = h
        if is_lstm:
            c_prev[t] = c
        if n == 0:
            continue
        gates_h = _mm(h[:n], w_hh.T, math, recurrent=True)
        if b_hh is not None:
            gates_h += b_hh
        if is_lstm:
            h_new, c_new, gates[t, :n] = lstm_cell_forward(gates_x_all[t, :n], gates_h, c[:n])
            cell_c[t, :n] = c_new
        elif mode == "gru":
            h_new, gates[t, :n] = gru_cell_forward(gates_x_all[t, :n], gates_h, h[:n])
        else:
            h_new = rnn_cell_forward(gates_x_all[t, :n], gates_h, _nonlinearity(mode))
        cell_h[t, :n] = h_new

        if mask is None:
            h, c = h_new, (c_new if is_lstm else None)
            out[t] = h_new
        else:
            # Finished (or not yet started, in reverse) sequences keep their state and output zeros.
            m = mask[t, :n]
            h[:n] = np.where(m, h_new, h[:n])
            if is_lstm:
                c[:n] = np.where(m, c_new, c[:n])
            out[t, :n] = np.where(m, h_new, 0)
    return out, h, c, _DirectionRecord(h_prev, c_prev, cell_h, cell_c, gates)


def _backward_direction(mode, dout, dh, dc, record, w_hh, mask, reverse, math="fp32"):
    """dout (T, B, H) gradient of this direction's output; dh, dc (B, H) gradient of its final state.

    Returns (dgates_x, dgates_h, dh0, dc0): the gate gradients (T, B, G*H) for the weight GEMMs and
    the gradients of the initial state.
    """
    T, B, _ = dout.shape
    G_H = w_hh.shape[0]
    dgates_x = np.zeros((T, B, G_H), dout.dtype)
    # Only the GRU has different x and h gate gradients; the others share one array.
    dgates_h = np.zeros((T, B, G_H), dout.dtype) if mode == "gru" else dgates_x
    if mask is not None:
        dout = dout * mask  # y is zero at padded steps: whatever dy says there reaches nothing

    running = _running_rows(mask, T, B)
    # Walk the steps in the reverse of the order forward took them.
    for t in _time_steps(T, not reverse):
        n = running[t]
        dh = dh + dout[t]
        if mask is not None:
            m = mask[t]
            dh, dh_skip = np.where(m, dh, 0), np.where(m, 0, dh)
            if mode == "lstm":
                dc, dc_skip = np.where(m, dc, 0), np.where(m, 0, dc)
        if n == 0:  # no sequence runs at this step: everything skips it
            dh, dc = dh_skip, (dc_skip if mode == "lstm" else None)
            continue
        if mode == "lstm":
            dgates_x[t, :n], dc_run = lstm_cell_backward(dh[:n], dc[:n], record.gates[t, :n], record.c_prev[t, :n],
                                                         record.cell_c[t, :n])
            dh_run = _mm(dgates_x[t, :n], w_hh, math, recurrent=True)
        elif mode == "gru":
            dgates_x[t, :n], dgates_h[t, :n], dh_direct = gru_cell_backward(dh[:n], record.gates[t, :n],
                                                                             record.h_prev[t, :n])
            dh_run = _mm(dgates_h[t, :n], w_hh, math, recurrent=True) + dh_direct
        else:
            dgates_x[t, :n] = rnn_cell_backward(dh[:n], record.cell_h[t, :n], _nonlinearity(mode))
            dh_run = _mm(dgates_x[t, :n], w_hh, math, recurrent=True)
        if mask is None:
            dh, dc = dh_run, (dc_run if mode == "lstm" else None)
        else:
            # The part of the gradient that skipped a padded step goes on to the step before unchanged.
            dh = dh_skip.copy()
            dh[:n] += dh_run
            if mode == "lstm":
                dc = dc_skip.copy()
                dc[:n] += dc_run
    return dgates_x, dgates_h, dh, dc


# ----------------------------------------------------------------------------------------------
# The whole network
# ----------------------------------------------------------------------------------------------


def _running_rows(mask, T, B):
    """For each step t, how many leading rows must be computed: 1 + the last row still inside its
    sequence (B everywhere for an unpadded batch; exactly the running count for a sorted batch)."""
    if mask is None:
        return [B] * T
    reversed_rows = mask[:, ::-1, 0]
    return [int(B - reversed_rows[t].argmax()) if reversed_rows[t].any() else 0 for t in range(T)]


def _mask(seq_lengths, T):
    """(T, B, 1) bool, True where step t is inside sequence b; None for an unpadded batch."""
    if seq_lengths is None:
        return None
    return (np.arange(T)[:, None] < seq_lengths[None, :])[:, :, None]


def rnn_forward(x, h0, c0, weights, desc, seq_lengths, training, math="fp32"):
    """x (T, B, in); h0, c0 (L*D, B, H) or None; weights checked against desc.

    Returns (y, hy, cy, saved), saved = (layer_inputs, records) for rnn_backward, or None.
    """
    T, B, _ = x.shape
    H, D, dtype = desc.hidden_size, desc.num_directions, x.dtype
    mask = _mask(seq_lengths, T)
    state_shape = (desc.num_layers * D, B, H)
    if h0 is None:
        h0 = np.zeros(state_shape, dtype)
    if desc.mode == "lstm" and c0 is None:
        c0 = np.zeros(state_shape, dtype)
    hy = np.empty(state_shape, dtype)
    cy = np.empty(state_shape, dtype) if desc.mode == "lstm" else None

    layer_inputs, records = [], []
    layer_input = x
    for layer in range(desc.num_layers):
        layer_inputs.append(layer_input)
        outputs = []
        rows = layer_input.reshape(T * B, -1)
        for direction in range(D):
            k = layer * D + direction
            w_ih, w_hh, b_ih, b_hh = weights[k]
            # The input projection does not depend on the recurrence: one GEMM for all T steps.
            gates_x_all = _mm(rows, w_ih.T, math)
            if b_ih is not None:
                gates_x_all += b_ih
            gates_x_all = gates_x_all.reshape(T, B, -1)
            out, h, c, record = _forward_direction(
                desc.mode, gates_x_all, h0[k], None if c0 is None else c0[k], w_hh, b_hh, mask,
                reverse=direction == 1, math=math)
            hy[k] = h
            if cy is not None:
                cy[k] = c
            outputs.append(out)
            records.append(record)
        layer_input = np.concatenate(outputs, axis=2) if D == 2 else outputs[0]
    y = layer_input
    saved = (layer_inputs, records) if training else None
    return y, hy, cy, saved


def rnn_backward(dy, dhy, dcy, desc, weights, seq_lengths, saved, math="fp32"):
    """Gradients of rnn_forward. dy (T, B, D*H) or None; dhy, dcy (L*D, B, H) or None.

    Returns (dx, dh0, dc0, dweights).
    """
    layer_inputs, records = saved
    T, B, _ = layer_inputs[0].shape
    H, D = desc.hidden_size, desc.num_directions
    dtype = layer_inputs[0].dtype
    mask = _mask(seq_lengths, T)
    state_shape = (desc.num_layers * D, B, H)
    is_lstm = desc.mode == "lstm"
    dh0 = np.empty(state_shape, dtype)
    dc0 = np.empty(state_shape, dtype) if is_lstm else None
    dweights = [None] * len(weights)

    dout = np.zeros((T, B, D * H), dtype) if dy is None else dy
    for layer in reversed(range(desc.num_layers)):
        layer_input = layer_inputs[layer]
        rows = layer_input.reshape(T * B, -1)
        dinput = np.zeros(layer_input.shape, dtype)
        for direction in range(D):
            k = layer * D + direction
            w_ih, w_hh, b_ih, b_hh = weights[k]
            dh = np.zeros((B, H), dtype) if dhy is None else dhy[k]
            dc = None
            if is_lstm:
                dc = np.zeros((B, H), dtype) if dcy is None else dcy[k]
            dgates_x, dgates_h, dh0[k], dc_k = _backward_direction(
                desc.mode, dout[:, :, direction * H:(direction + 1) * H], dh, dc, records[k], w_hh, mask,
                reverse=direction == 1, math=math)
            if is_lstm:
                dc0[k] = dc_k

            # Weight gradients summed over all steps: one GEMM over the T*B rows each.
            gx_rows = dgates_x.reshape(T * B, -1)
            gh_rows = dgates_h.reshape(T * B, -1)
            dw_ih = _mm(gx_rows.T, rows, math, recurrent=True)
            dw_hh = _mm(gh_rows.T, records[k].h_prev.reshape(T * B, H), math, recurrent=True)
            db_ih = gx_rows.sum(axis=0) if b_ih is not None else None
            db_hh = gh_rows.sum(axis=0) if b_hh is not None else None
            dweights[k] = (dw_ih, dw_hh, db_ih, db_hh)
            # Both directions read the same layer input, so their input gradients add.
            dinput += _mm(gx_rows, w_ih, math, recurrent=True).reshape(layer_input.shape)
        dout = dinput
    return dout, dh0, dc0, dweights
