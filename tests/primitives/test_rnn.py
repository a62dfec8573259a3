"""The RNN primitive (rnn_tanh, rnn_relu, lstm, gru) against torch.nn.RNN/LSTM/GRU and finite differences.

Every comparison copies the same weights into torch by the names desc.weight_shapes() gives, runs both
forward, back-propagates the same random upstream gradients (into y, h_n and c_n) and compares every
output and every gradient.
"""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minidl.primitives import (
    RNNDescriptor,
    rnn_backward,
    rnn_cell_step,
    rnn_cell_step_backward,
    rnn_forward,
)
from tests.conftest import rel_err

MODES = ["rnn_tanh", "rnn_relu", "lstm", "gru"]
TOL = {np.float32: 1e-5, np.float64: 1e-10}


def _torch_module(desc, dtype):
    kw = dict(num_layers=desc.num_layers, bidirectional=desc.bidirectional, bias=desc.bias)
    if desc.mode == "lstm":
        m = torch.nn.LSTM(desc.input_size, desc.hidden_size, **kw)
    elif desc.mode == "gru":
        m = torch.nn.GRU(desc.input_size, desc.hidden_size, **kw)
    else:
        m = torch.nn.RNN(desc.input_size, desc.hidden_size, nonlinearity=desc.mode[4:], **kw)
    return m.to(torch.float64 if dtype == np.float64 else torch.float32)


def _random_weights(desc, dtype, rng):
    scale = 1 / np.sqrt(desc.hidden_size)
    return [tuple(None if spec is None else (rng.uniform(-1.5, 1.5, spec.shape) * scale).astype(dtype)
                  for spec in entry)
            for entry in desc.weight_shapes()]


def _case(desc, T, B, dtype, rng, with_state=True):
    """Random x, h0, c0, weights and upstream gradients dy, dhy, dcy."""
    x = rng.standard_normal((T, B, desc.input_size)).astype(dtype)
    state = (desc.num_layers * desc.num_directions, B, desc.hidden_size)
    h0 = rng.standard_normal(state).astype(dtype) if with_state else None
    c0 = rng.standard_normal(state).astype(dtype) if with_state and desc.mode == "lstm" else None
    dy = rng.standard_normal((T, B, desc.num_directions * desc.hidden_size)).astype(dtype)
    dhy = rng.standard_normal(state).astype(dtype)
    dcy = rng.standard_normal(state).astype(dtype) if desc.mode == "lstm" else None
    return x, h0, c0, _random_weights(desc, dtype, rng), dy, dhy, dcy


def _torch_run(desc, x, h0, c0, weights, dy, dhy, dcy, lengths=None):
    """torch's y, h_n, c_n and the gradients dx, dh0, dc0, {param name: grad}."""
    m = _torch_module(desc, x.dtype)
    with torch.no_grad():
        for entry, specs in zip(weights, desc.weight_shapes()):
            for array, spec in zip(entry, specs):
                if spec is not None:
                    getattr(m, spec.name).copy_(torch.from_numpy(array))
    state = (desc.num_layers * desc.num_directions, x.shape[1], desc.hidden_size)
    xt = torch.tensor(x, requires_grad=True)
    h0t = torch.tensor(h0 if h0 is not None else np.zeros(state, x.dtype), requires_grad=True)
    c0t = torch.tensor(c0 if c0 is not None else np.zeros(state, x.dtype), requires_grad=True)
    inp = xt
    if lengths is not None:
        inp = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.tensor(lengths), enforce_sorted=False)
    if desc.mode == "lstm":
        out, (hn, cn) = m(inp, (h0t, c0t))
    else:
        out, hn = m(inp, h0t)
        cn = None
    if lengths is not None:
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])
    loss = (out * torch.from_numpy(dy)).sum() + (hn * torch.from_numpy(dhy)).sum()
    if cn is not None:
        loss = loss + (cn * torch.from_numpy(dcy)).sum()
    loss.backward()
    grads = {name: p.grad.numpy() for name, p in m.named_parameters()}
    return dict(y=out.detach().numpy(), hy=hn.detach().numpy(), cy=None if cn is None else cn.detach().numpy(),
                dx=xt.grad.numpy(), dh0=h0t.grad.numpy(), dc0=c0t.grad.numpy() if cn is not None else None,
                dweights=grads)


def _check_against_torch(desc, T, B, dtype, rng, lengths=None, with_state=True):
    x, h0, c0, weights, dy, dhy, dcy = _case(desc, T, B, dtype, rng, with_state)
    y, hy, cy, reserve = rnn_forward(x, h0, c0, weights, desc, seq_lengths=lengths)
    dx, dh0, dc0, dweights = rnn_backward(dy, dhy, dcy, reserve)
    ref = _torch_run(desc, x, h0, c0, weights, dy, dhy, dcy, lengths)
    tol = TOL[dtype]

    assert y.dtype == dtype and y.shape == ref["y"].shape
    assert rel_err(y, ref["y"]) <= tol
    assert rel_err(hy, ref["hy"]) <= tol
    assert rel_err(dx, ref["dx"]) <= tol
    assert rel_err(dh0, ref["dh0"]) <= tol
    if desc.mode == "lstm":
        assert rel_err(cy, ref["cy"]) <= tol
        assert rel_err(dc0, ref["dc0"]) <= tol
    else:
        assert cy is None and dc0 is None
    for grads, specs in zip(dweights, desc.weight_shapes()):
        for grad, spec in zip(grads, specs):
            if spec is None:
                assert grad is None
            else:
                assert grad.shape == spec.shape and grad.dtype == dtype
                assert rel_err(grad, ref["dweights"][spec.name]) <= tol, spec.name


# ----------------------------------------------------------------------------------------------
# Against torch
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_layers,bidirectional,bias", [(1, False, True), (2, True, True), (3, False, False),
                                                           (2, True, False)])
def test_matches_torch_float32(mode, num_layers, bidirectional, bias, rng):
    desc = RNNDescriptor(mode, 5, 7, num_layers, bidirectional, bias)
    _check_against_torch(desc, T=6, B=3, dtype=np.float32, rng=rng)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_unequal_seq_lengths_match_pack_padded_sequence(mode, bidirectional, rng):
    desc = RNNDescriptor(mode, 3, 5, num_layers=2, bidirectional=bidirectional)
    lengths = np.array([4, 7, 1, 5])  # unsorted, with a full-length and a length-1 sequence
    _check_against_torch(desc, T=7, B=4, dtype=np.float64, rng=rng, lengths=lengths)


@pytest.mark.parametrize("mode", MODES)
def test_padded_steps_keep_state_and_write_zeros(mode, rng):
    desc = RNNDescriptor(mode, 3, 4, bidirectional=True)
    x, h0, c0, weights, *_ = _case(desc, 6, 3, np.float64, rng)
    lengths = np.array([6, 2, 4])
    y, hy, cy, _ = rnn_forward(x, h0, c0, weights, desc, seq_lengths=lengths)
    assert np.all(y[2:, 1] == 0) and np.all(y[4:, 2] == 0)
    # Changing the padding must change nothing, and sequence 1 alone gives the same states.
    x2 = x.copy()
    x2[2:, 1] = 1e3
    y2, hy2, _, _ = rnn_forward(x2, h0, c0, weights, desc, seq_lengths=lengths)
    assert np.array_equal(y, y2) and np.array_equal(hy, hy2)
    y1, hy1, cy1, _ = rnn_forward(x[:2, 1:2], h0[:, 1:2], None if c0 is None else c0[:, 1:2], weights, desc)
    assert rel_err(y[:2, 1:2], y1) <= 1e-14 and rel_err(hy[:, 1:2], hy1) <= 1e-14


@pytest.mark.parametrize("mode", MODES)
def test_zero_initial_state_when_none(mode, rng):
    desc = RNNDescriptor(mode, 4, 3, num_layers=2, bidirectional=True)
    _check_against_torch(desc, T=4, B=2, dtype=np.float32, rng=rng, with_state=False)


@settings(max_examples=40, deadline=None)
@given(mode=st.sampled_from(MODES), T=st.integers(1, 5), B=st.integers(1, 4), input_size=st.integers(1, 5),
       hidden=st.integers(1, 5), num_layers=st.integers(1, 3), bidirectional=st.booleans(), bias=st.booleans(),
       padded=st.booleans(), seed=st.integers(0, 2**16))
def test_property_matches_torch(mode, T, B, input_size, hidden, num_layers, bidirectional, bias, padded, seed):
    # float64 here: with sizes down to B = H = 1 a gradient can be a single number made by cancellation,
    # where float32 rounding alone (ours and torch's alike) exceeds 1e-5 relative. float32 is checked
    # against torch at the sizes of the tests above.
    dtype = np.float64
    rng = np.random.default_rng(seed)
    desc = RNNDescriptor(mode, input_size, hidden, num_layers, bidirectional, bias)
    lengths = rng.integers(1, T + 1, size=B) if padded else None
    _check_against_torch(desc, T, B, dtype, rng, lengths=lengths)


def test_inference_mode_returns_no_reserve_and_same_output(rng):
    desc = RNNDescriptor("lstm", 3, 4, num_layers=2)
    x, h0, c0, weights, *_ = _case(desc, 5, 2, np.float32, rng)
    y, hy, cy, reserve = rnn_forward(x, h0, c0, weights, desc, training=True)
    y2, hy2, cy2, reserve2 = rnn_forward(x, h0, c0, weights, desc, training=False)
    assert reserve is not None and reserve2 is None
    assert np.array_equal(y, y2) and np.array_equal(hy, hy2) and np.array_equal(cy, cy2)
    with pytest.raises(ValueError, match="rnn_backward: reserve"):
        rnn_backward(np.ones_like(y), None, None, reserve2)


def test_backward_with_only_dy(rng):
    """dhy/dcy None means zero gradients for the final states."""
    desc = RNNDescriptor("lstm", 3, 4, bidirectional=True)
    x, h0, c0, weights, dy, dhy, dcy = _case(desc, 4, 2, np.float64, rng)
    _, _, _, reserve = rnn_forward(x, h0, c0, weights, desc)
    got = rnn_backward(dy, None, None, reserve)
    want = rnn_backward(dy, np.zeros_like(dhy), np.zeros_like(dcy), reserve)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
    ref = _torch_run(desc, x, h0, c0, weights, dy, np.zeros_like(dhy), np.zeros_like(dcy))
    assert rel_err(got[0], ref["dx"]) <= 1e-10


# ----------------------------------------------------------------------------------------------
# Finite differences (float64), independent of torch
# ----------------------------------------------------------------------------------------------


def _numerical_grad(f, a, eps=1e-6):
    g = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        old = a[idx]
        a[idx] = old + eps
        fp = f()
        a[idx] = old - eps
        fm = f()
        a[idx] = old
        g[idx] = (fp - fm) / (2 * eps)
    return g


@pytest.mark.parametrize("mode", MODES)
def test_gradients_match_finite_differences(mode, rng):
    desc = RNNDescriptor(mode, 2, 3, num_layers=2, bidirectional=True)
    x, h0, c0, weights, dy, dhy, dcy = _case(desc, 3, 2, np.float64, rng)
    lengths = np.array([3, 2])

    def loss():
        y, hy, cy, _ = rnn_forward(x, h0, c0, weights, desc, seq_lengths=lengths, training=False)
        total = np.sum(y * dy) + np.sum(hy * dhy)
        return total + (np.sum(cy * dcy) if cy is not None else 0.0)

    _, _, _, reserve = rnn_forward(x, h0, c0, weights, desc, seq_lengths=lengths)
    dx, dh0, dc0, dweights = rnn_backward(dy, dhy, dcy, reserve)
    assert rel_err(dx, _numerical_grad(loss, x)) <= 1e-6
    assert rel_err(dh0, _numerical_grad(loss, h0)) <= 1e-6
    if mode == "lstm":
        assert rel_err(dc0, _numerical_grad(loss, c0)) <= 1e-6
    for k in (0, 3):  # first layer forward, second layer reverse
        for grad, array in zip(dweights[k], weights[k]):
            assert rel_err(grad, _numerical_grad(loss, array)) <= 1e-6


# ----------------------------------------------------------------------------------------------
# Single cells
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bias", [True, False])
def test_cell_step_matches_torch_cells(mode, bias, rng):
    B, n_in, H = 3, 4, 5
    desc = RNNDescriptor(mode, n_in, H, bias=bias)
    (w_ih, w_hh, b_ih, b_hh), = _random_weights(desc, np.float32, rng)
    x = rng.standard_normal((B, n_in)).astype(np.float32)
    h = rng.standard_normal((B, H)).astype(np.float32)
    c = rng.standard_normal((B, H)).astype(np.float32) if mode == "lstm" else None
    dh = rng.standard_normal((B, H)).astype(np.float32)
    dc = rng.standard_normal((B, H)).astype(np.float32) if mode == "lstm" else None

    h_new, c_new, reserve = rnn_cell_step(mode, x, h, c, w_ih, w_hh, b_ih, b_hh)
    dx, dh_prev, dc_prev, dw_ih, dw_hh, db_ih, db_hh = rnn_cell_step_backward(dh, dc, reserve)

    if mode == "lstm":
        cell = torch.nn.LSTMCell(n_in, H, bias=bias)
    elif mode == "gru":
        cell = torch.nn.GRUCell(n_in, H, bias=bias)
    else:
        cell = torch.nn.RNNCell(n_in, H, bias=bias, nonlinearity=mode[4:])
    with torch.no_grad():
        cell.weight_ih.copy_(torch.from_numpy(w_ih))
        cell.weight_hh.copy_(torch.from_numpy(w_hh))
        if bias:
            cell.bias_ih.copy_(torch.from_numpy(b_ih))
            cell.bias_hh.copy_(torch.from_numpy(b_hh))
    xt = torch.tensor(x, requires_grad=True)
    ht = torch.tensor(h, requires_grad=True)
    if mode == "lstm":
        ct = torch.tensor(c, requires_grad=True)
        hn, cn = cell(xt, (ht, ct))
        ((hn * torch.from_numpy(dh)).sum() + (cn * torch.from_numpy(dc)).sum()).backward()
        assert rel_err(c_new, cn.detach().numpy()) <= 1e-5
        assert rel_err(dc_prev, ct.grad.numpy()) <= 1e-5
    else:
        hn = cell(xt, ht)
        (hn * torch.from_numpy(dh)).sum().backward()
        assert c_new is None and dc_prev is None
    assert h_new.shape == (B, H) and dx.shape == (B, n_in)
    assert rel_err(h_new, hn.detach().numpy()) <= 1e-5
    assert rel_err(dx, xt.grad.numpy()) <= 1e-5
    assert rel_err(dh_prev, ht.grad.numpy()) <= 1e-5
    assert rel_err(dw_ih, cell.weight_ih.grad.numpy()) <= 1e-5
    assert rel_err(dw_hh, cell.weight_hh.grad.numpy()) <= 1e-5
    if bias:
        assert rel_err(db_ih, cell.bias_ih.grad.numpy()) <= 1e-5
        assert rel_err(db_hh, cell.bias_hh.grad.numpy()) <= 1e-5
    else:
        assert db_ih is None and db_hh is None


# ----------------------------------------------------------------------------------------------
# The descriptor
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bidirectional,bias", [(False, True), (True, False)])
def test_weight_shapes_follow_torch_parameter_order(mode, bidirectional, bias):
    desc = RNNDescriptor(mode, 3, 5, num_layers=2, bidirectional=bidirectional, bias=bias)
    ours = [(spec.name, spec.shape) for entry in desc.weight_shapes() for spec in entry if spec is not None]
    theirs = [(name, tuple(p.shape)) for name, p in _torch_module(desc, np.float32).named_parameters()]
    assert ours == theirs
    assert desc.gate_count == {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}[mode]
    assert desc.num_directions == (2 if bidirectional else 1)


def test_descriptor_is_hashable_and_checks_its_fields():
    assert hash(RNNDescriptor("gru", 2, 3)) == hash(RNNDescriptor("gru", 2, 3))
    with pytest.raises(ValueError, match="RNNDescriptor: mode"):
        RNNDescriptor("transformer", 2, 3)
    with pytest.raises(ValueError, match="hidden_size"):
        RNNDescriptor("lstm", 2, 0)
    with pytest.raises(ValueError, match="num_layers"):
        RNNDescriptor("lstm", 2, 3, num_layers=0)


# ----------------------------------------------------------------------------------------------
# Bad input: a clear error, before any computation
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def lstm_case(rng):
    desc = RNNDescriptor("lstm", 3, 4, num_layers=2, bidirectional=True)
    x, h0, c0, weights, dy, dhy, dcy = _case(desc, 5, 2, np.float32, rng)
    return desc, x, h0, c0, weights, dy, dhy, dcy


def test_error_wrong_rank(lstm_case):
    desc, x, h0, c0, weights, *_ = lstm_case
    with pytest.raises(ValueError, match=r"rnn_forward: x must be \(T, batch, input_size\).*\(5, 3\)"):
        rnn_forward(x[:, 0], h0, c0, weights, desc)


def test_error_input_size_mismatch(lstm_case):
    desc, x, h0, c0, weights, *_ = lstm_case
    with pytest.raises(ValueError, match=r"rnn_forward: x has shape \(5, 2, 2\).*input_size 3"):
        rnn_forward(x[:, :, :2], h0, c0, weights, desc)


def test_error_empty_batch(lstm_case):
    desc, x, h0, c0, weights, *_ = lstm_case
    with pytest.raises(ValueError, match="rnn_forward: x has shape \\(5, 0, 3\\)"):
        rnn_forward(x[:, :0], None, None, weights, desc)


def test_error_state_shapes(lstm_case):
    desc, x, h0, c0, weights, *_ = lstm_case
    with pytest.raises(ValueError, match=r"rnn_forward: h0 has shape \(2, 2, 4\), expected \(4, 2, 4\)"):
        rnn_forward(x, h0[:2], c0, weights, desc)
    with pytest.raises(ValueError, match=r"rnn_forward: c0 has shape \(4, 1, 4\)"):
        rnn_forward(x, h0, c0[:, :1], weights, desc)
    gru = RNNDescriptor("gru", 3, 4, num_layers=2, bidirectional=True)
    gru_weights = _random_weights(gru, np.float32, np.random.default_rng(1))
    with pytest.raises(ValueError, match="rnn_forward: c0 is only for mode='lstm'"):
        rnn_forward(x, h0, c0, gru_weights, gru)


def test_error_weight_shapes_name_the_weight(lstm_case):
    desc, x, h0, c0, weights, *_ = lstm_case
    bad = list(weights)
    w_ih, w_hh, b_ih, b_hh = bad[3]
    bad[3] = (w_ih, w_hh[:, :3], b_ih, b_hh)
    with pytest.raises(ValueError, match=r"rnn_forward: weight_hh_l1_reverse has shape \(16, 3\), expected \(16, 4\)"):
        rnn_forward(x, h0, c0, bad, desc)
    bad[3] = (w_ih, w_hh, None, b_hh)
    with pytest.raises(ValueError, match="rnn_forward: bias_ih_l1_reverse is missing"):
        rnn_forward(x, h0, c0, bad, desc)
    with pytest.raises(ValueError, match="rnn_forward: weights must be a list of 4 tuples"):
        rnn_forward(x, h0, c0, weights[:3], desc)
    no_bias = RNNDescriptor("lstm", 3, 4, num_layers=2, bidirectional=True, bias=False)
    with pytest.raises(ValueError, match="bias=False"):
        rnn_forward(x, h0, c0, weights, no_bias)


def test_error_seq_lengths(lstm_case):
    desc, x, h0, c0, weights, *_ = lstm_case
    with pytest.raises(ValueError, match=r"rnn_forward: seq_lengths must lie in 1..5.*max 6"):
        rnn_forward(x, h0, c0, weights, desc, seq_lengths=np.array([6, 2]))
    with pytest.raises(ValueError, match=r"rnn_forward: seq_lengths must lie in 1..5.*min 0"):
        rnn_forward(x, h0, c0, weights, desc, seq_lengths=np.array([0, 2]))
    with pytest.raises(ValueError, match=r"rnn_forward: seq_lengths has shape \(3,\), expected \(2,\)"):
        rnn_forward(x, h0, c0, weights, desc, seq_lengths=np.array([1, 2, 3]))
    with pytest.raises(TypeError, match="rnn_forward: seq_lengths must be integers"):
        rnn_forward(x, h0, c0, weights, desc, seq_lengths=np.array([1.0, 2.0]))


def test_error_mixed_dtypes(lstm_case):
    desc, x, h0, c0, weights, *_ = lstm_case
    with pytest.raises(TypeError, match="rnn_forward: all arrays must have the same dtype.*float64"):
        rnn_forward(x.astype(np.float64), h0, c0, weights, desc)
    with pytest.raises(TypeError, match="rnn_forward: x must be float32 or float64, got int64"):
        rnn_forward(x.astype(np.int64), h0, c0, weights, desc)


def test_error_backward_arguments(lstm_case):
    desc, x, h0, c0, weights, dy, dhy, dcy = lstm_case
    _, _, _, reserve = rnn_forward(x, h0, c0, weights, desc)
    with pytest.raises(ValueError, match=r"rnn_backward: dy has shape \(5, 2, 4\), expected y's shape \(5, 2, 8\)"):
        rnn_backward(dy[:, :, :4], dhy, dcy, reserve)
    with pytest.raises(ValueError, match=r"rnn_backward: dhy has shape"):
        rnn_backward(dy, dhy[:1], dcy, reserve)
    with pytest.raises(TypeError, match="rnn_backward: gradients have dtype float64"):
        rnn_backward(dy.astype(np.float64), dhy.astype(np.float64), None, reserve)


def test_error_cell_step_arguments(rng):
    w_ih = rng.standard_normal((12, 3)).astype(np.float32)
    w_hh = rng.standard_normal((12, 4)).astype(np.float32)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(ValueError, match=r"rnn_cell_step: x must be \(batch, input_size\)"):
        rnn_cell_step("gru", x[None], None, None, w_ih, w_hh)
    with pytest.raises(ValueError, match="rnn_forward: weight_ih_l0 has shape \\(12, 3\\), expected \\(16, 3\\)"):
        rnn_cell_step("lstm", x, None, None, w_ih, w_hh)
    with pytest.raises(ValueError, match="rnn_cell_step: pass both biases or neither"):
        rnn_cell_step("gru", x, None, None, w_ih, w_hh, np.zeros(12, np.float32), None)
