"""Softmax and log-softmax against torch, finite differences, stability, blending and errors."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from minidl.primitives import softmax_backward, softmax_forward
from tests.conftest import rel_err


def torch_reference(x, dy, axis, algorithm):
    xt = torch.tensor(x, requires_grad=True)
    fn = torch.log_softmax if algorithm == "log" else torch.softmax
    yt = fn(xt, dim=axis)
    yt.backward(torch.tensor(dy))
    return yt.detach().numpy(), xt.grad.numpy()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("algorithm", ["accurate", "log"])
@pytest.mark.parametrize("axis", [1, -1, 0])
def test_against_torch(axis, algorithm, dtype, rng):
    x = (rng.standard_normal((3, 7, 2, 5)) * 3).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    y = softmax_forward(x, axis=axis, algorithm=algorithm)
    dx = softmax_backward(y, dy, axis=axis, algorithm=algorithm)
    y_ref, dx_ref = torch_reference(x, dy, axis, algorithm)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert y.dtype == dtype and dx.dtype == dtype
    assert rel_err(y, y_ref) <= tol
    assert rel_err(dx, dx_ref) <= tol


def test_channels_of_nhwc_is_the_last_axis(rng):
    x_nchw = rng.standard_normal((2, 5, 3, 4))
    x_nhwc = np.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1))
    y_nchw = softmax_forward(x_nchw)  # default axis=1: channels
    y_nhwc = softmax_forward(x_nhwc, axis=-1)
    assert rel_err(y_nhwc.transpose(0, 3, 1, 2), y_nchw) <= 1e-14
    np.testing.assert_allclose(y_nchw.sum(axis=1), 1.0, rtol=1e-12)


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    axis_seed=st.integers(0, 100),
    algorithm=st.sampled_from(["accurate", "log"]),
    seed=st.integers(0, 2**31),
)
def test_random_shapes(shape, axis_seed, algorithm, seed):
    rng = np.random.default_rng(seed)
    axis = axis_seed % len(shape)
    x = rng.standard_normal(shape) * 4
    dy = rng.standard_normal(shape)
    y = softmax_forward(x, axis=axis, algorithm=algorithm)
    dx = softmax_backward(y, dy, axis=axis, algorithm=algorithm)
    y_ref, dx_ref = torch_reference(x, dy, axis, algorithm)
    assert rel_err(y, y_ref) <= 1e-12
    # The backward is dy - y * sum(dy) (log: dy - exp(y) * sum(dy)): when those terms nearly cancel, dx is
    # small and its relative error large, for any correct float64 implementation. So the bound is on the
    # error against the size of the terms: ||dy|| (1 + n) bounds them (|sum(dy)| <= sqrt(n) ||dy||, and
    # the probabilities are <= 1), a few hundred ulps of float64 (n terms summed in each row).
    n = shape[axis]
    scale = np.linalg.norm(dy) * (1 + n)
    assert np.all(np.isfinite(dx)) and np.linalg.norm(dx - dx_ref) <= 256 * np.finfo(np.float64).eps * scale


def test_large_inputs_do_not_overflow():
    x = np.array([[1000.0, 999.0, -1000.0], [88.0, 89.0, 90.0]], dtype=np.float32)
    for algorithm in ("accurate", "log"):
        y = softmax_forward(x, axis=1, algorithm=algorithm)
        y_ref, _ = torch_reference(x, np.ones_like(x), 1, algorithm)
        assert np.all(np.isfinite(y))
        assert rel_err(y, y_ref) <= 1e-6


@pytest.mark.parametrize("algorithm", ["accurate", "log"])
def test_finite_differences(algorithm, rng):
    x = rng.standard_normal((3, 5))
    dy = rng.standard_normal(x.shape)
    y = softmax_forward(x, axis=1, algorithm=algorithm)
    dx = softmax_backward(y, dy, axis=1, algorithm=algorithm)
    eps = 1e-6
    numeric = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        f = lambda a: np.sum(softmax_forward(a, axis=1, algorithm=algorithm) * dy)  # noqa: E731
        numeric[i] = (f(xp) - f(xm)) / (2 * eps)
    assert rel_err(dx, numeric) <= 1e-6


def test_alpha_beta_blending(rng):
    x = rng.standard_normal((4, 6))
    prior = rng.standard_normal((4, 6))
    plain = softmax_forward(x)
    out = prior.copy()
    softmax_forward(x, alpha=0.5, beta=2.0, out=out)
    assert rel_err(out, 0.5 * plain + 2.0 * prior) <= 1e-14
    dy = rng.standard_normal((4, 6))
    out = prior.copy()
    softmax_backward(plain, dy, alpha=3.0, beta=-1.0, out=out)
    assert rel_err(out, 3.0 * softmax_backward(plain, dy) - prior) <= 1e-14


def test_errors():
    x = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=r"softmax_forward: axis 2 is out of range for an input of shape \(2, 3\)"):
        softmax_forward(x, axis=2)
    with pytest.raises(ValueError, match="softmax_forward: unknown algorithm 'fast'"):
        softmax_forward(x, algorithm="fast")
    with pytest.raises(TypeError, match="softmax_forward: x must be float32 or float64, got int64"):
        softmax_forward(np.ones((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match=r"softmax_backward: y \(2, 3\) and dy \(3, 2\)"):
        softmax_backward(x, np.ones((3, 2), dtype=np.float32))
    with pytest.raises(TypeError, match="softmax_backward: all arrays must have the same dtype"):
        softmax_backward(x, x.astype(np.float64))
    with pytest.raises(ValueError, match="softmax_forward: beta=1.0 blends"):
        softmax_forward(x, beta=1.0)


# ------------------------------------------------------------------------------------------------
# cross_entropy_forward / cross_entropy_backward (the fused log-softmax + NLL at class indices)
# ------------------------------------------------------------------------------------------------

from minidl.primitives import cross_entropy_backward, cross_entropy_forward  # noqa: E402


def _torch_cross_entropy(x, t, w, reduction, ignore_index, eps, g):
    xt = torch.tensor(x, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(xt, torch.tensor(t), weight=None if w is None else torch.tensor(w),
                                             reduction=reduction, ignore_index=ignore_index, label_smoothing=eps)
    loss.backward(torch.tensor(g))
    return loss.detach().numpy(), xt.grad.numpy()


@pytest.mark.parametrize("shape", [(6, 5), (1, 2), (4, 7, 3), (2, 3, 2, 4)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted,eps", [(False, 0.0), (True, 0.0), (False, 0.2), (True, 0.35)])
def test_cross_entropy_against_torch(shape, reduction, weighted, eps, rng):
    x = rng.standard_normal(shape) * 3
    t = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    t.flat[-1] = 7 if t.size > 1 else t.flat[-1]           # a custom ignore_index below
    w = rng.uniform(0.2, 2.0, shape[1]) if weighted else None
    loss, stats, denom = cross_entropy_forward(x, t, w, reduction=reduction, ignore_index=7, label_smoothing=eps)
    g = rng.standard_normal(loss.shape)
    dx = cross_entropy_backward(x, t, stats, g, denom, w, reduction=reduction, ignore_index=7, label_smoothing=eps)
    ref_loss, ref_dx = _torch_cross_entropy(x, t, w, reduction, 7, eps, g)
    assert loss.shape == ref_loss.shape and dx.shape == x.shape
    assert rel_err(loss, ref_loss) <= 1e-12 and rel_err(dx, ref_dx) <= 1e-12
    assert stats.shape == (t.size, 2)


def test_cross_entropy_float32_confident_rows(rng):
    """A confident row's loss and gradient are tiny: computed as (x - max) - log-sum and p - 1, not as
    differences of large rounded numbers, they match torch's float32 to its own rounding."""
    x = np.array([[1.7622, -5.6904], [9.5, 1.0]], dtype=np.float32)
    t = np.array([0, 0])
    w = np.array([1.3, 0.4], dtype=np.float32)
    loss, stats, denom = cross_entropy_forward(x, t, w, reduction="none")
    dx = cross_entropy_backward(x, t, stats, np.ones(2, np.float32), denom, w, reduction="none")
    ref_loss, ref_dx = _torch_cross_entropy(x, t, w, "none", -100, 0.0, np.ones(2, np.float32))
    assert rel_err(loss, ref_loss) <= 1e-6 and rel_err(dx, ref_dx) <= 1e-6


def test_cross_entropy_out_of_range_rows_are_nan(rng):
    """The primitive does not raise on a bad index (the GPU could not without a sync): that row is NaN."""
    x = rng.standard_normal((3, 4))
    t = np.array([1, 9, -100])
    loss, stats, denom = cross_entropy_forward(x, t, reduction="none")
    assert np.isnan(loss[1]) and np.isfinite(loss[0]) and loss[2] == 0
    dx = cross_entropy_backward(x, t, stats, np.ones(3), denom, reduction="none")
    assert np.isnan(dx[1]).all() and np.isfinite(dx[0]).all() and (dx[2] == 0).all()
    assert denom == 1.0   # only row 0 counts towards a mean


def test_cross_entropy_float16_runs_in_float32(rng):
    x = (rng.standard_normal((5, 6)) * 2).astype(np.float16)
    t = rng.integers(0, 6, 5)
    loss, stats, denom = cross_entropy_forward(x, t)
    dx = cross_entropy_backward(x, t, stats, np.float16(1.0), denom)
    assert loss.dtype == np.float16 and stats.dtype == np.float32 and dx.dtype == np.float16
    ref_loss, ref_dx = _torch_cross_entropy(x.astype(np.float32), t, None, "mean", -100, 0.0, np.float32(1.0))
    assert abs(float(loss) - float(ref_loss)) <= 1e-3 * abs(float(ref_loss)) + 1e-3
    assert rel_err(dx.astype(np.float32), ref_dx) <= 2e-3


def test_cross_entropy_half_loss_dtype(rng):
    """loss_dtype: a float16 input's loss in float32 (what autocast's cross_entropy returns), the float32 loss of the
    widened logits exactly; by default the input's dtype."""
    x = (rng.standard_normal((5, 6)) * 2).astype(np.float16)
    t = rng.integers(0, 6, 5)
    loss32 = cross_entropy_forward(x, t, loss_dtype=np.float32)[0]
    assert loss32.dtype == np.float32
    assert loss32 == cross_entropy_forward(x.astype(np.float32), t)[0]
    assert cross_entropy_forward(x, t)[0].dtype == np.float16


def test_cross_entropy_errors(rng):
    x = rng.standard_normal((4, 3))
    with pytest.raises(TypeError, match=r"cross_entropy_forward: target must hold integer class indices"):
        cross_entropy_forward(x, np.zeros(4))
    with pytest.raises(ValueError, match=r"cross_entropy_forward: x \(4, 3\) expects a target of shape \(4\)"):
        cross_entropy_forward(x, np.zeros((4, 1), dtype=np.int64))
    with pytest.raises(ValueError, match=r"weight has shape \(2\), expected \(3,\)"):
        cross_entropy_forward(x, np.zeros(4, dtype=np.int64), np.ones(2))
    with pytest.raises(ValueError, match=r"must be \(N, C\) or \(N, C, d1, ...\), got shape \(3\)"):
        cross_entropy_forward(x[0], np.zeros((), dtype=np.int64))
    with pytest.raises(ValueError, match=r"reduction must be 'mean', 'sum' or 'none', got 'avg'"):
        cross_entropy_forward(x, np.zeros(4, dtype=np.int64), reduction="avg")
