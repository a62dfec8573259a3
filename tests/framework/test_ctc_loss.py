"""F.ctc_loss / nn.CTCLoss against torch in float64: padded and concatenated targets, a repeated label, an empty
target, shorter inputs, every reduction, the gradient through log_softmax and for leaf log-probabilities (torch's
form), and zero_infinity for alignments that cannot exist."""
import numpy as np
import pytest
import torch

import minidl

T, N, C, S = 12, 4, 6, 5


def _data():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((T, N, C))
    targets = rng.integers(1, C, (N, S))
    targets[1, 1] = targets[1, 0]
    return logits, targets, np.array([12, 10, 12, 7]), np.array([5, 3, 0, 2])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("concatenated", [False, True])
def test_ctc_loss_matches_torch(reduction, concatenated):
    logits, targets, il, tl = _data()
    got = []
    for lib in (minidl, torch):
        x = lib.tensor(logits, requires_grad=True)
        tg = lib.tensor(np.concatenate([targets[i, :tl[i]] for i in range(N)]) if concatenated else targets)
        loss = lib.nn.functional.ctc_loss(x.log_softmax(2), tg, lib.tensor(il), lib.tensor(tl), reduction=reduction)
        weights = lib.tensor(np.arange(1.0, N + 1)) if reduction == "none" else 1.0
        (loss * weights).sum().backward()
        got.append([loss.detach().numpy(), x.grad.numpy()])
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_ctc_loss_leaf_gradient_and_zero_infinity_match_torch():
    logits, targets, il, tl = _data()
    got = []
    for lib in (minidl, torch):
        lp = lib.tensor(np.log(np.full((T, N, C), 1.0 / C)) + 0.1 * logits, requires_grad=True)
        loss = lib.nn.CTCLoss(reduction="sum")(lp, lib.tensor(targets), lib.tensor(il), lib.tensor(tl))
        loss.backward()
        short = lib.nn.functional.ctc_loss(lib.tensor(logits[:2]).log_softmax(2), lib.tensor(targets),
                                           lib.tensor([2] * N), lib.tensor(tl), reduction="none", zero_infinity=True)
        got.append([loss.detach().numpy(), lp.grad.numpy(), short.detach().numpy()])
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_ctc_loss_messages():
    lp = minidl.randn(5, 2, 4).log_softmax(2)
    with pytest.raises(ValueError, match="input_lengths must be in"):
        minidl.nn.functional.ctc_loss(lp, minidl.tensor([[1, 2], [1, 1]]), [6, 5], [2, 2])
    with pytest.raises(ValueError, match="reduction must be"):
        minidl.nn.functional.ctc_loss(lp, minidl.tensor([[1, 2], [1, 1]]), [5, 5], [2, 2], reduction="avg")
