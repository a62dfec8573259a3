"""Losses vs PyTorch on the CPU: values and input gradients for every reduction, weights,
ignore_index, label smoothing, K-dim inputs, probability targets; float64 finite differences;
numerical stability; and the bad-input errors."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from tests.conftest import rel_err

TOL = 1e-5


def _pair(a, requires_grad=True):
    return minidl.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)


def _compare(ours, theirs, x, tx, tol=TOL):
    assert rel_err(ours.detach().numpy(), theirs.detach().numpy()) <= tol
    g = np.random.default_rng(5).standard_normal(ours.shape).astype(ours.dtype)
    ours.backward(minidl.tensor(g))
    theirs.backward(torch.tensor(g))
    assert rel_err(x.grad.numpy(), tx.grad.numpy()) <= tol


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 6), c=st.integers(2, 7), extra=st.sampled_from([(), (3,), (2, 3)]),
       reduction=st.sampled_from(["mean", "sum", "none"]), weighted=st.booleans(),
       smoothing=st.sampled_from([0.0, 0.1, 0.35]), use_ignore=st.booleans(), seed=st.integers(0, 10**6))
def test_cross_entropy_class_indices_vs_torch(n, c, extra, reduction, weighted, smoothing, use_ignore, seed):
    rng = np.random.default_rng(seed)
    x_np = (rng.standard_normal((n, c) + extra) * 3).astype(np.float32)
    t_np = rng.integers(0, c, size=(n,) + extra)
    if use_ignore:
        t_np.ravel()[0] = -100 if rng.random() < 0.5 else 1
        t_np.ravel()[-1] = -100
        if np.all(t_np == -100):
            t_np.ravel()[0] = 0  # keep the mean defined (all-ignored is 0/0 in PyTorch too)
    w_np = rng.uniform(0.2, 2.0, c).astype(np.float32) if weighted else None
    x, tx = _pair(x_np)
    ours = F.cross_entropy(x, minidl.tensor(t_np), weight=None if w_np is None else minidl.tensor(w_np),
                           reduction=reduction, label_smoothing=smoothing)
    theirs = torch.nn.functional.cross_entropy(tx, torch.tensor(t_np), weight=None if w_np is None else torch.tensor(w_np),
                                               reduction=reduction, label_smoothing=smoothing)
    _compare(ours, theirs, x, tx)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 5), c=st.integers(2, 6), extra=st.sampled_from([(), (4,)]),
       reduction=st.sampled_from(["mean", "sum", "none"]), weighted=st.booleans(),
       smoothing=st.sampled_from([0.0, 0.2]), seed=st.integers(0, 10**6))
def test_cross_entropy_probability_targets_vs_torch(n, c, extra, reduction, weighted, smoothing, seed):
    rng = np.random.default_rng(seed)
    x_np = rng.standard_normal((n, c) + extra).astype(np.float32)
    p_np = rng.random((n, c) + extra).astype(np.float32)
    p_np /= p_np.sum(axis=1, keepdims=True)
    w_np = rng.uniform(0.2, 2.0, c).astype(np.float32) if weighted else None
    x, tx = _pair(x_np)
    p, tp = _pair(p_np)
    ours = F.cross_entropy(x, p, weight=None if w_np is None else minidl.tensor(w_np), reduction=reduction,
                           label_smoothing=smoothing)
    theirs = torch.nn.functional.cross_entropy(tx, tp, weight=None if w_np is None else torch.tensor(w_np),
                                               reduction=reduction, label_smoothing=smoothing)
    _compare(ours, theirs, x, tx)
    assert rel_err(p.grad.numpy(), tp.grad.numpy()) <= TOL  # the target's gradient too


def test_cross_entropy_unbatched_and_module():
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal(5).astype(np.float32)
    x, tx = _pair(x_np)
    _compare(F.cross_entropy(x, minidl.tensor(3)), torch.nn.functional.cross_entropy(tx, torch.tensor(3)), x, tx)
    w = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    loss = nn.CrossEntropyLoss(weight=minidl.tensor(w), ignore_index=2, label_smoothing=0.1)
    tloss = torch.nn.CrossEntropyLoss(weight=torch.tensor(w), ignore_index=2, label_smoothing=0.1)
    x_np = rng.standard_normal((6, 4)).astype(np.float32)
    t_np = np.array([0, 2, 3, 1, 2, 0])
    x, tx = _pair(x_np)
    _compare(loss(x, minidl.tensor(t_np)), tloss(tx, torch.tensor(t_np)), x, tx)
    assert "weight" in loss.state_dict()


def test_cross_entropy_is_one_fused_function():
    x = minidl.randn(4, 3, requires_grad=True)
    out = F.cross_entropy(x, minidl.tensor([0, 1, 2, 0]))
    assert type(out.grad_fn).__name__ == "CrossEntropy"
    assert out.grad_fn.inputs[0] is x  # straight from the logits: no chain of small ops


def test_cross_entropy_stable_for_huge_logits():
    x_np = np.array([[1000.0, -1000.0, 0.0], [-5e4, 5e4, 3.0]], np.float32)
    x, tx = _pair(x_np)
    t = np.array([1, 1])
    ours = F.cross_entropy(x, minidl.tensor(t))
    theirs = torch.nn.functional.cross_entropy(tx, torch.tensor(t))
    assert np.isfinite(ours.item())
    _compare(ours, theirs, x, tx)


def test_cross_entropy_float64_finite_differences():
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((3, 4, 2))
    t = minidl.tensor(rng.integers(0, 4, (3, 2)))
    w = minidl.tensor(rng.uniform(0.5, 2, 4))

    def f(a):
        return F.cross_entropy(minidl.tensor(a), t, weight=w, label_smoothing=0.2).item()

    x = minidl.tensor(x_np, requires_grad=True)
    F.cross_entropy(x, t, weight=w, label_smoothing=0.2).backward()
    num = np.zeros_like(x_np)
    h = 1e-6
    for i in np.ndindex(x_np.shape):
        e = np.zeros_like(x_np)
        e[i] = h
        num[i] = (f(x_np + e) - f(x_np - e)) / (2 * h)
    assert rel_err(x.grad.numpy(), num) <= 1e-6


def test_cross_entropy_errors():
    x = minidl.randn(4, 3)
    with pytest.raises(ValueError, match=r"cross_entropy: input \(4, 3\) expects a target of shape \(4,\), got \(5,\)"):
        F.cross_entropy(x, minidl.tensor([0, 1, 2, 0, 1]))
    with pytest.raises(TypeError, match="integer tensor"):
        F.cross_entropy(x, minidl.tensor([0.0, 1.0, 2.0, 0.0]))
    with pytest.raises(ValueError, match="class index 3, out of range for 3 classes"):
        F.cross_entropy(x, minidl.tensor([0, 1, 3, 0]))
    with pytest.raises(ValueError, match="class index -2"):
        F.cross_entropy(x, minidl.tensor([0, -2, 1, 0]))
    with pytest.raises(ValueError, match=r"probability target must have the input's shape \(4, 3\)"):
        F.cross_entropy(x, minidl.randn(4, 2))
    with pytest.raises(ValueError, match=r"weight has shape \(2,\), expected \(3,\)"):
        F.cross_entropy(x, minidl.tensor([0, 1, 2, 0]), weight=minidl.ones(2))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(x, minidl.tensor([0, 1, 2, 0]), reduction="avg")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("extra", [(), (3,)])
def test_nll_loss_vs_torch(reduction, extra):
    rng = np.random.default_rng(2)
    x_np = np.log(rng.dirichlet(np.ones(5), size=(4,) + extra)).astype(np.float32)
    x_np = np.moveaxis(x_np, -1, 1).copy()
    t_np = rng.integers(0, 5, (4,) + extra)
    t_np.ravel()[1] = -100
    w_np = rng.uniform(0.5, 2, 5).astype(np.float32)
    x, tx = _pair(x_np)
    ours = nn.NLLLoss(weight=minidl.tensor(w_np), reduction=reduction)(x, minidl.tensor(t_np))
    theirs = torch.nn.NLLLoss(weight=torch.tensor(w_np), reduction=reduction)(tx, torch.tensor(t_np))
    _compare(ours, theirs, x, tx)


def test_nll_after_log_softmax_equals_cross_entropy():
    rng = np.random.default_rng(3)
    x_np = rng.standard_normal((6, 4)).astype(np.float32)
    t = minidl.tensor(rng.integers(0, 4, 6))
    a = F.nll_loss(F.log_softmax(minidl.tensor(x_np), dim=1), t)
    b = F.cross_entropy(minidl.tensor(x_np), t)
    assert abs(a.item() - b.item()) <= 1e-6 * abs(b.item())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_and_l1_vs_torch(reduction):
    rng = np.random.default_rng(4)
    a_np, b_np = rng.standard_normal((2, 3, 5)).astype(np.float32), rng.standard_normal((2, 3, 5)).astype(np.float32)
    for ours_cls, torch_cls in [(nn.MSELoss, torch.nn.MSELoss), (nn.L1Loss, torch.nn.L1Loss)]:
        x, tx = _pair(a_np)
        y, ty = _pair(b_np)
        ours, theirs = ours_cls(reduction=reduction)(x, y), torch_cls(reduction=reduction)(tx, ty)
        _compare(ours, theirs, x, tx)
        assert rel_err(y.grad.numpy(), ty.grad.numpy()) <= TOL
    with pytest.raises(ValueError, match=r"mse_loss: input \(2, 3\) and target \(3, 2\)"):
        F.mse_loss(minidl.randn(2, 3), minidl.randn(3, 2))


@settings(max_examples=30, deadline=None)
@given(shape=st.sampled_from([(5,), (3, 4), (2, 3, 4)]), reduction=st.sampled_from(["mean", "sum", "none"]),
       weighted=st.booleans(), pos=st.booleans(), seed=st.integers(0, 10**6))
def test_bce_with_logits_vs_torch(shape, reduction, weighted, pos, seed):
    rng = np.random.default_rng(seed)
    x_np = (rng.standard_normal(shape) * 4).astype(np.float32)
    y_np = rng.random(shape).astype(np.float32)
    w_np = rng.uniform(0.5, 2, shape[-1:]).astype(np.float32) if weighted else None
    pw_np = rng.uniform(0.5, 3, shape[-1:]).astype(np.float32) if pos else None
    x, tx = _pair(x_np)
    y, ty = _pair(y_np)
    ours = nn.BCEWithLogitsLoss(weight=None if w_np is None else minidl.tensor(w_np), reduction=reduction,
                                pos_weight=None if pw_np is None else minidl.tensor(pw_np))(x, y)
    theirs = torch.nn.BCEWithLogitsLoss(weight=None if w_np is None else torch.tensor(w_np), reduction=reduction,
                                        pos_weight=None if pw_np is None else torch.tensor(pw_np))(tx, ty)
    _compare(ours, theirs, x, tx)
    assert rel_err(y.grad.numpy(), ty.grad.numpy()) <= TOL


def test_bce_with_logits_stable_for_huge_logits():
    x_np = np.array([200.0, -200.0, 1e4, -1e4], np.float32)
    y_np = np.array([0.0, 1.0, 1.0, 0.0], np.float32)
    x, tx = _pair(x_np)
    ours = F.binary_cross_entropy_with_logits(x, minidl.tensor(y_np), reduction="none")
    theirs = torch.nn.functional.binary_cross_entropy_with_logits(tx, torch.tensor(y_np), reduction="none")
    np.testing.assert_allclose(ours.detach().numpy(), [200.0, 200.0, 0.0, 0.0], rtol=1e-6)
    _compare(ours, theirs, x, tx)


def test_bce_errors():
    with pytest.raises(ValueError, match=r"binary_cross_entropy_with_logits: input \(3,\) and target \(4,\)"):
        F.binary_cross_entropy_with_logits(minidl.randn(3), minidl.rand(4))
    with pytest.raises(ValueError, match=r"pos_weight of shape \(2,\) does not broadcast"):
        F.binary_cross_entropy_with_logits(minidl.randn(3), minidl.rand(3), pos_weight=minidl.ones(2))
