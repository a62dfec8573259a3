"""Cross-channel LRN against torch.nn.functional.local_response_norm, finite differences, errors."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from minidl.primitives import LRNDescriptor, lrn_backward, lrn_forward
from tests.conftest import rel_err


def to_last(a):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def to_first(a):
    return np.moveaxis(a, -1, 1)


def torch_lrn(x, dy, desc):
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.local_response_norm(xt, desc.size, desc.alpha, desc.beta, desc.k)
    yt.backward(torch.tensor(dy))
    return yt.detach().numpy(), xt.grad.numpy()


def run(x, dy, desc, layout):
    """minidl on the channels-first x, in the given layout; results returned channels-first."""
    if layout == "NHWC":
        y = lrn_forward(to_last(x), desc, layout="NHWC")
        dx = lrn_backward(to_last(x), y, to_last(dy), desc, layout="NHWC")
        return to_first(y), to_first(dx)
    y = lrn_forward(x, desc)
    return y, lrn_backward(x, y, dy, desc)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", [(2, 6, 5), (2, 7, 4, 3), (1, 5, 2, 3, 4)])
@pytest.mark.parametrize("size", [1, 2, 5])
def test_against_torch(size, shape, layout, dtype, rng):
    desc = LRNDescriptor(size, alpha=0.3, beta=0.75, k=1.5)  # large alpha: the normalisation matters
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    y, dx = run(x, dy, desc, layout)
    y_ref, dx_ref = torch_lrn(x, dy, desc)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert y.dtype == dtype and dx.dtype == dtype
    assert rel_err(y, y_ref) <= tol
    assert rel_err(dx, dx_ref) <= tol


@settings(max_examples=30, deadline=None)
@given(
    size=st.integers(1, 8),
    channels=st.integers(1, 9),
    spatial=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    alpha=st.floats(1e-4, 2.0),
    beta=st.floats(0.1, 1.5),
    k=st.floats(0.5, 3.0),
    layout=st.sampled_from(["NCHW", "NHWC"]),
    seed=st.integers(0, 2**31),
)
def test_random_parameters(size, channels, spatial, alpha, beta, k, layout, seed):
    rng = np.random.default_rng(seed)
    shape = (2, channels) + tuple(spatial)
    desc = LRNDescriptor(size, alpha, beta, k)
    x = rng.standard_normal(shape)
    dy = rng.standard_normal(shape)
    y, dx = run(x, dy, desc, layout)
    y_ref, dx_ref = torch_lrn(x, dy, desc)
    assert rel_err(y, y_ref) <= 1e-12
    assert rel_err(dx, dx_ref) <= 1e-12


@pytest.mark.parametrize("size", [2, 3])
def test_finite_differences(size, rng):
    desc = LRNDescriptor(size, alpha=0.5, beta=0.75, k=1.0)
    x = rng.standard_normal((2, 5, 2, 3))
    dy = rng.standard_normal(x.shape)
    dx = lrn_backward(x, lrn_forward(x, desc), dy, desc)
    eps = 1e-6
    numeric = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        numeric[i] = (np.sum(lrn_forward(xp, desc) * dy) - np.sum(lrn_forward(xm, desc) * dy)) / (2 * eps)
    assert rel_err(dx, numeric) <= 1e-6


def test_alpha_beta_blending(rng):
    desc = LRNDescriptor(3, 0.2)
    x = rng.standard_normal((2, 4, 3, 3))
    prior = rng.standard_normal(x.shape)
    out = prior.copy()
    lrn_forward(x, desc, alpha=2.0, beta=1.0, out=out)
    assert rel_err(out, 2.0 * lrn_forward(x, desc) + prior) <= 1e-14


def test_errors():
    x = np.ones((2, 4, 3, 3), dtype=np.float32)
    desc = LRNDescriptor(3)
    with pytest.raises(ValueError, match="LRNDescriptor: size must be an int >= 1, got 0"):
        LRNDescriptor(0)
    with pytest.raises(ValueError, match="LRNDescriptor: k must be > 0"):
        LRNDescriptor(3, k=0.0)
    with pytest.raises(ValueError, match=r"lrn_forward: input must have at least 3 dims .* got shape \(2, 4\)"):
        lrn_forward(x[:, :, 0, 0], desc)
    with pytest.raises(TypeError, match="lrn_forward: x must be float32 or float64, got int32"):
        lrn_forward(x.astype(np.int32), desc)
    with pytest.raises(TypeError, match="lrn_forward: desc must be an LRNDescriptor"):
        lrn_forward(x, 3)
    with pytest.raises(ValueError, match=r"lrn_backward: all arrays must have the same shape, got x \(2, 4, 3, 3\), "
                                         r"y \(2, 4, 3, 3\), dy \(2, 4, 3\)"):
        lrn_backward(x, x, x[..., 0], desc)
    with pytest.raises(ValueError, match="lrn_forward: beta=2.0 blends"):
        lrn_forward(x, desc, beta=2.0)
