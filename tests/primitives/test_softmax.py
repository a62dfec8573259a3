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
