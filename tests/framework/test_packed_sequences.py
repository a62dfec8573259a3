"""Variable-length sequences (minidl.nn.utils.rnn) against torch.nn.utils.rnn: packing, unpacking,
padding, and RNN / LSTM / GRU over a PackedSequence (outputs, final states, and every gradient)."""
import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn
from minidl.nn.utils import rnn as R
from tests.conftest import DEVICES, rel_err

TR = torch.nn.utils.rnn


def _np(t):
    return t.detach().cpu().numpy() if isinstance(t, minidl.Tensor) else t.detach().numpy()


@pytest.mark.parametrize("enforce_sorted,lengths", [(True, [6, 4, 4, 1]), (False, [3, 6, 1, 4])])
@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_and_pad_match_torch(enforce_sorted, lengths, batch_first):
    rng = np.random.default_rng(0)
    shape = (4, 6, 3) if batch_first else (6, 4, 3)
    x = rng.standard_normal(shape).astype(np.float32)
    xm, xt = minidl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    pm = R.pack_padded_sequence(xm, lengths, batch_first=batch_first, enforce_sorted=enforce_sorted)
    pt = TR.pack_padded_sequence(xt, lengths, batch_first=batch_first, enforce_sorted=enforce_sorted)
    np.testing.assert_array_equal(_np(pm.data), _np(pt.data))
    np.testing.assert_array_equal(pm.batch_sizes.numpy(), pt.batch_sizes.numpy())
    for mine, theirs in ((pm.sorted_indices, pt.sorted_indices), (pm.unsorted_indices, pt.unsorted_indices)):
        assert (mine is None) == (theirs is None)
        if mine is not None:
            np.testing.assert_array_equal(mine.cpu().numpy(), theirs.numpy())

    ym, lm = R.pad_packed_sequence(pm, batch_first=batch_first, padding_value=-1.0, total_length=8)
    yt, lt = TR.pad_packed_sequence(pt, batch_first=batch_first, padding_value=-1.0, total_length=8)
    np.testing.assert_array_equal(_np(ym), _np(yt))
    np.testing.assert_array_equal(lm.cpu().numpy(), lt.numpy())
    # gradients flow back through pack and pad: only the real steps get one
    w = rng.standard_normal(yt.shape).astype(np.float32)
    (ym * minidl.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(xm.grad.cpu().numpy(), xt.grad.numpy())


def test_pad_sequence_and_pack_sequence_match_torch():
    rng = np.random.default_rng(1)
    seqs = [rng.standard_normal((n, 2)).astype(np.float32) for n in (2, 5, 3)]
    for batch_first in (False, True):
        for side in ("right", "left"):
            got = R.pad_sequence([minidl.tensor(s) for s in seqs], batch_first, 7.0, side)
            want = TR.pad_sequence([torch.tensor(s) for s in seqs], batch_first, 7.0, side)
            np.testing.assert_array_equal(_np(got), _np(want))
    got = R.pack_sequence([minidl.tensor(s) for s in seqs], enforce_sorted=False)
    want = TR.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False)
    np.testing.assert_array_equal(_np(got.data), _np(want.data))
    np.testing.assert_array_equal(got.batch_sizes.numpy(), want.batch_sizes.numpy())


RNN_CASES = [("LSTM", 1, False), ("LSTM", 2, True), ("GRU", 2, True), ("GRU", 1, False), ("RNN", 3, False),
             ("RNN", 1, True)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode,layers,bidirectional", RNN_CASES)
@pytest.mark.parametrize("with_hx", [False, True])
def test_rnn_over_packed_sequence_matches_torch(device, mode, layers, bidirectional, with_hx):
    rng = np.random.default_rng(layers + 3 * bidirectional)
    T, B, I, H = 6, 5, 3, 4
    lengths = [3, 6, 1, 4, 6]  # unsorted, with ties and a one-step sequence
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    mine = getattr(nn, mode)(I, H, num_layers=layers, bidirectional=bidirectional)
    theirs = getattr(torch.nn, mode)(I, H, num_layers=layers, bidirectional=bidirectional)
    theirs.load_state_dict({k: torch.tensor(_np(v)) for k, v in mine.state_dict().items()})
    mine.to(device)
    D = 2 if bidirectional else 1
    states = [rng.standard_normal((layers * D, B, H)).astype(np.float32) for _ in range(2)]
    xm, xt = minidl.tensor(x, device=device, requires_grad=True), torch.tensor(x, requires_grad=True)
    sm = [minidl.tensor(s, device=device, requires_grad=True) for s in states]
    st = [torch.tensor(s, requires_grad=True) for s in states]
    hx_m = hx_t = None
    if with_hx:
        hx_m, hx_t = (tuple(sm), tuple(st)) if mode == "LSTM" else (sm[0], st[0])

    out_m, hn_m = mine(R.pack_padded_sequence(xm, lengths, enforce_sorted=False), hx_m)
    out_t, hn_t = theirs(TR.pack_padded_sequence(xt, lengths, enforce_sorted=False), hx_t)
    assert isinstance(out_m, R.PackedSequence)
    finals_m = list(hn_m) if mode == "LSTM" else [hn_m]
    finals_t = list(hn_t) if mode == "LSTM" else [hn_t]
    ym, _ = R.pad_packed_sequence(out_m, batch_first=True)
    yt, _ = TR.pad_packed_sequence(out_t, batch_first=True)
    assert rel_err(_np(ym), _np(yt)) < 1e-5
    for a, b in zip(finals_m, finals_t):
        assert a.shape == tuple(b.shape) and rel_err(_np(a), _np(b)) < 1e-5

    w = rng.standard_normal(tuple(yt.shape)).astype(np.float32)
    loss_m = (ym * minidl.tensor(w, device=device)).sum()
    loss_t = (yt * torch.tensor(w)).sum()
    for a, b in zip(finals_m, finals_t):
        loss_m = loss_m + (a * a).sum()
        loss_t = loss_t + (b * b).sum()
    loss_m.backward()
    loss_t.backward()
    assert rel_err(_np(xm.grad), _np(xt.grad)) < 1e-4
    for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
        assert rel_err(_np(p.grad), _np(q.grad)) < 1e-4, name
    if with_hx:
        for a, b in zip(sm[:len(finals_m)], st):
            assert rel_err(_np(a.grad), _np(b.grad)) < 1e-4


def test_packed_sequence_moves_and_dropout_runs():
    lstm = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = minidl.randn(5, 3, 3)
    packed = R.pack_padded_sequence(x, [5, 2, 4], enforce_sorted=False).to("cpu")
    out, (h, c) = lstm(packed)  # training mode: dropout between the layers
    assert out.data.shape == (11, 4) and h.shape == (2, 3, 4) and c.shape == (2, 3, 4)
    lstm.eval()
    a, _ = lstm(packed)
    b, _ = lstm(packed)
    np.testing.assert_array_equal(a.data.detach().cpu().numpy(), b.data.detach().cpu().numpy())


def test_errors_name_the_problem():
    x = minidl.randn(4, 2, 3)
    with pytest.raises(ValueError, match="sorted in decreasing order"):
        R.pack_padded_sequence(x, [2, 4])
    with pytest.raises(ValueError, match="greater than 0"):
        R.pack_padded_sequence(x, [4, 0])
    with pytest.raises(ValueError, match="longer than the 4 steps"):
        R.pack_padded_sequence(x, [5, 1])
    with pytest.raises(ValueError, match="2 lengths for a batch of 3"):
        R.pack_padded_sequence(minidl.randn(4, 3, 3), [2, 1])
    packed = R.pack_padded_sequence(x, [4, 2])
    with pytest.raises(ValueError, match="total_length=3"):
        R.pad_packed_sequence(packed, total_length=3)
    with pytest.raises(ValueError, match="input_size=5"):
        nn.GRU(5, 2)(packed)
    with pytest.raises(ValueError, match="h_0 of shape"):
        nn.GRU(3, 2)(packed, minidl.zeros(1, 3, 2))
    with pytest.raises(ValueError, match="trailing shape"):
        R.pad_sequence([minidl.randn(2, 3), minidl.randn(2, 4)])
