"""RNN / LSTM / GRU and their cells vs torch.nn on the CPU: a PyTorch state dict loads as is, and the
outputs, final states and every gradient (input, h0, c0, all weights) match; the layer-by-layer
path used for dropout between layers; float64 finite differences; bad-input errors."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import minidl
import minidl.nn as nn
from tests.conftest import rel_err

TOL = 2e-5

CLASSES = {"rnn_tanh": (nn.RNN, torch.nn.RNN, {}), "rnn_relu": (nn.RNN, torch.nn.RNN, {"nonlinearity": "relu"}),
           "lstm": (nn.LSTM, torch.nn.LSTM, {}), "gru": (nn.GRU, torch.nn.GRU, {})}


def _build(mode, seed, dropout=0.0, torch_dropout=None, **kw):
    ours_cls, torch_cls, extra = CLASSES[mode]
    torch.manual_seed(seed)
    theirs = torch_cls(**kw, **extra, dropout=dropout if torch_dropout is None else torch_dropout)
    ours = ours_cls(**kw, **extra, dropout=dropout)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return ours, theirs


def _compare_sequence(ours, theirs, mode, x_np, h_np=None, c_np=None, seed=0, tol=TOL):
    x, tx = minidl.tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    states = []
    for a in (h_np, c_np):
        if a is not None:
            states.append((minidl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)))
    if mode == "lstm":
        hx = None if not states else (states[0][0], states[1][0])
        thx = None if not states else (states[0][1], states[1][1])
    else:
        hx = states[0][0] if states else None
        thx = states[0][1] if states else None
    y, hn = ours(x, hx)
    ty, thn = theirs(tx, thx)
    outs = [y] + (list(hn) if mode == "lstm" else [hn])
    touts = [ty] + (list(thn) if mode == "lstm" else [thn])
    rng = np.random.default_rng(seed + 7)
    loss, tloss = 0, 0
    for o, t in zip(outs, touts):
        assert o.shape == tuple(t.shape)
        assert rel_err(o.detach().numpy(), t.detach().numpy()) <= tol
        c = rng.standard_normal(o.shape).astype(np.float32)
        loss = loss + (o * minidl.tensor(c)).sum()
        tloss = tloss + (t * torch.tensor(c)).sum()
    loss.backward()
    tloss.backward()
    assert rel_err(x.grad.numpy(), tx.grad.numpy()) <= tol
    for s, ts in states:
        assert rel_err(s.grad.numpy(), ts.grad.numpy()) <= tol
    tp = dict(theirs.named_parameters())
    names = [n for n, _ in ours.named_parameters()]
    assert names == list(tp)
    for name, p in ours.named_parameters():
        assert rel_err(p.grad.numpy(), tp[name].grad.numpy()) <= tol, name


@settings(max_examples=30, deadline=None)
@given(mode=st.sampled_from(list(CLASSES)), layers=st.integers(1, 2), bidirectional=st.booleans(), bias=st.booleans(),
       batch_first=st.booleans(), with_state=st.booleans(), T=st.integers(1, 4), B=st.integers(1, 3),
       seed=st.integers(0, 10**6))
def test_sequence_layers_vs_torch(mode, layers, bidirectional, bias, batch_first, with_state, T, B, seed):
    ours, theirs = _build(mode, seed, input_size=3, hidden_size=4, num_layers=layers, bias=bias,
                          batch_first=batch_first, bidirectional=bidirectional)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, 3) if batch_first else (T, B, 3)).astype(np.float32)
    state_shape = (layers * (2 if bidirectional else 1), B, 4)
    h = rng.standard_normal(state_shape).astype(np.float32) if with_state else None
    c = rng.standard_normal(state_shape).astype(np.float32) if with_state and mode == "lstm" else None
    _compare_sequence(ours, theirs, mode, x, h, c, seed=seed)


@pytest.mark.parametrize("mode", list(CLASSES))
def test_unbatched_input(mode):
    ours, theirs = _build(mode, 0, input_size=2, hidden_size=3, num_layers=2, bidirectional=True)
    rng = np.random.default_rng(0)
    h = rng.standard_normal((4, 3)).astype(np.float32)
    _compare_sequence(ours, theirs, mode, rng.standard_normal((5, 2)).astype(np.float32), h,
                      h * 0.5 if mode == "lstm" else None)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_dropout_between_layers(mode):
    # A tiny p takes the layer-by-layer path (one primitive call per layer, dropout in between) while
    # keeping (almost surely) every element: it must agree with PyTorch's single fused run.
    ours, theirs = _build(mode, 1, dropout=1e-12, torch_dropout=0.0, input_size=3, hidden_size=4, num_layers=3,
                          bidirectional=True)
    assert ours.training
    rng = np.random.default_rng(1)
    _compare_sequence(ours, theirs, mode, rng.standard_normal((4, 2, 3)).astype(np.float32),
                      rng.standard_normal((6, 2, 4)).astype(np.float32),
                      rng.standard_normal((6, 2, 4)).astype(np.float32) if mode == "lstm" else None)
    # a real p: training outputs differ run to run, eval is deterministic and dropout-free
    ours.dropout = 0.5
    x = minidl.tensor(rng.standard_normal((4, 2, 3)).astype(np.float32))
    a, b = ours(x)[0].detach().numpy(), ours(x)[0].detach().numpy()
    assert not np.allclose(a, b)
    ours.eval()
    theirs.eval()
    ours.zero_grad()
    theirs.zero_grad()
    _compare_sequence(ours, theirs, mode, x.numpy())


def test_sequence_is_one_function():
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    y, (h, c) = lstm(minidl.randn(6, 2, 3))
    assert type(y.grad_fn).__name__ == "RNNSequence" and h.grad_fn is y.grad_fn


def test_float64_finite_differences():
    gru = nn.GRU(2, 3, num_layers=2, bidirectional=True).double()
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((3, 2, 2))
    c = rng.standard_normal((3, 2, 6))
    x = minidl.tensor(x_np, requires_grad=True)
    (gru(x)[0] * minidl.tensor(c)).sum().backward()
    w = gru.weight_hh_l1_reverse
    for _ in range(3):
        d = rng.standard_normal(x_np.shape)
        f = lambda a: float((gru(minidl.tensor(a))[0].detach().numpy() * c).sum())  # noqa: E731
        numeric = (f(x_np + 1e-6 * d) - f(x_np - 1e-6 * d)) / 2e-6
        assert abs(numeric - float((x.grad.numpy() * d).sum())) <= 1e-6 * max(1, abs(numeric))
    dw = rng.standard_normal(w.shape)
    w0 = w.detach().numpy().copy()
    vals = []
    for sign in (1, -1):
        with minidl.no_grad():
            w._data[...] = w0 + sign * 1e-6 * dw
        vals.append(float((gru(minidl.tensor(x_np))[0].detach().numpy() * c).sum()))
    numeric = (vals[0] - vals[1]) / 2e-6
    assert abs(numeric - float((w.grad.numpy() * dw).sum())) <= 1e-6 * max(1, abs(numeric))


@pytest.mark.parametrize("cls,tcls,extra", [
    (nn.RNNCell, torch.nn.RNNCell, {}), (nn.RNNCell, torch.nn.RNNCell, {"nonlinearity": "relu"}),
    (nn.LSTMCell, torch.nn.LSTMCell, {}), (nn.GRUCell, torch.nn.GRUCell, {}),
])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
def test_cells_vs_torch(cls, tcls, extra, bias, with_state):
    torch.manual_seed(0)
    theirs = tcls(3, 5, bias=bias, **extra)
    ours = cls(3, 5, bias=bias, **extra)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((4, 3)).astype(np.float32)
    x, tx = minidl.tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    lstm = cls is nn.LSTMCell
    states = [rng.standard_normal((4, 5)).astype(np.float32) for _ in range(2 if lstm else 1)] if with_state else []
    ms = [minidl.tensor(s, requires_grad=True) for s in states]
    ts = [torch.tensor(s, requires_grad=True) for s in states]
    hx = (tuple(ms) if lstm else ms[0]) if with_state else None
    thx = (tuple(ts) if lstm else ts[0]) if with_state else None
    outs, touts = ours(x, hx), theirs(tx, thx)
    outs, touts = (list(outs), list(touts)) if lstm else ([outs], [touts])
    loss, tloss = 0, 0
    for o, t in zip(outs, touts):
        assert rel_err(o.detach().numpy(), t.detach().numpy()) <= TOL
        c = rng.standard_normal(o.shape).astype(np.float32)
        loss, tloss = loss + (o * minidl.tensor(c)).sum(), tloss + (t * torch.tensor(c)).sum()
    loss.backward()
    tloss.backward()
    assert rel_err(x.grad.numpy(), tx.grad.numpy()) <= TOL
    for m, t in zip(ms, ts):
        assert rel_err(m.grad.numpy(), t.grad.numpy()) <= TOL
    tp = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert rel_err(p.grad.numpy(), tp[name].grad.numpy()) <= TOL, name


def test_repr_and_init_match_torch():
    assert repr(nn.LSTM(3, 4, num_layers=2, batch_first=True, dropout=0.5, bidirectional=True)) == \
        repr(torch.nn.LSTM(3, 4, num_layers=2, batch_first=True, dropout=0.5, bidirectional=True))
    assert repr(nn.GRUCell(3, 4, bias=False)) == repr(torch.nn.GRUCell(3, 4, bias=False))
    m = nn.GRU(5, 16)
    allp = np.concatenate([p.detach().numpy().ravel() for p in m.parameters()])
    assert np.abs(allp).max() <= 0.25 and np.abs(allp).max() > 0.24  # U(-1/sqrt(16), 1/sqrt(16))


def test_errors():
    lstm = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(ValueError, match=r"LSTM: input of shape \(5, 2, 6\) has input_size 6, expected 3"):
        lstm(minidl.randn(5, 2, 6))
    with pytest.raises(ValueError, match=r"LSTM: expected h_0 of shape \(2, 2, 4\), got \(1, 2, 4\)"):
        lstm(minidl.randn(5, 2, 3), (minidl.randn(1, 2, 4), minidl.randn(2, 2, 4)))
    with pytest.raises(ValueError, match=r"hx must be a tuple"):
        lstm(minidl.randn(5, 2, 3), minidl.randn(2, 2, 4))
    with pytest.raises(ValueError, match="expected a 3-D input"):
        nn.GRU(3, 4)(minidl.randn(5))
    with pytest.raises(ValueError, match=r"GRUCell: expected hidden state 0 of shape \(2, 4\), got \(3, 4\)"):
        nn.GRUCell(3, 4)(minidl.randn(2, 3), minidl.randn(3, 4))
    with pytest.raises(TypeError, match="same dtype"):
        nn.GRU(3, 4)(minidl.randn(2, 1, 3, dtype=minidl.float64))
