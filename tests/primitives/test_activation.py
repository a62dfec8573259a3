"""Activations against torch (forward and autograd gradients), finite differences, and errors."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from minidl.primitives import ActivationDescriptor, activation_backward, activation_forward
from tests.conftest import rel_err

# mode -> (coef used in tests, torch function of (tensor, coef))
TORCH_ACTIVATIONS = {
    "relu": (None, lambda t, c: torch.relu(t)),
    "leaky_relu": (0.13, lambda t, c: torch.nn.functional.leaky_relu(t, c)),
    "elu": (0.7, lambda t, c: torch.nn.functional.elu(t, c)),
    "clipped_relu": (1.5, lambda t, c: torch.nn.functional.hardtanh(t, 0.0, c)),
    "sigmoid": (None, lambda t, c: torch.sigmoid(t)),
    "tanh": (None, lambda t, c: torch.tanh(t)),
    "gelu": (None, lambda t, c: torch.nn.functional.gelu(t)),
    "gelu_tanh": (None, lambda t, c: torch.nn.functional.gelu(t, approximate="tanh")),
}
MODES = list(TORCH_ACTIVATIONS)


def torch_reference(x, dy, mode):
    coef, fn = TORCH_ACTIVATIONS[mode]
    xt = torch.tensor(x, requires_grad=True)
    yt = fn(xt, coef)
    yt.backward(torch.tensor(dy))
    return yt.detach().numpy(), xt.grad.numpy()


def run(x, dy, mode):
    desc = ActivationDescriptor(mode, TORCH_ACTIVATIONS[mode][0])
    y = activation_forward(x, desc)
    return y, activation_backward(x, y, dy, desc)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", MODES)
def test_against_torch(mode, dtype, rng):
    x = (rng.standard_normal((3, 5, 7)) * 2.5).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    y, dx = run(x, dy, mode)
    y_ref, dx_ref = torch_reference(x, dy, mode)
    assert y.dtype == dtype and dx.dtype == dtype and y.shape == x.shape
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert rel_err(y, y_ref) <= tol
    assert rel_err(dx, dx_ref) <= tol


@settings(max_examples=30, deadline=None)
@given(
    mode=st.sampled_from(MODES),
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    coef=st.floats(0.05, 3.0),
    seed=st.integers(0, 2**31),
)
def test_random_shapes_and_coefs(mode, shape, coef, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 3
    dy = rng.standard_normal(shape)
    desc = ActivationDescriptor(mode, coef)
    y = activation_forward(x, desc)
    dx = activation_backward(x, y, dy, desc)
    fn = TORCH_ACTIVATIONS[mode][1]
    xt = torch.tensor(x, requires_grad=True)
    yt = fn(xt, coef)
    yt.backward(torch.tensor(dy))
    # float64. Relative 1e-10 with an absolute floor of 1e-13: in the far negative tail tanh-GELU is
    # 0.5 x (1 + tanh(..)) with 1 + tanh(..) ~ 1e-8, so both libraries lose digits there to cancellation
    # (found by hypothesis: x ~ -6 gives y ~ -1e-7, equal to 3e-16 absolute, 3e-9 relative).
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-10, atol=1e-13)


def numeric_grad(f, x, dy, eps=1e-6):
    """Central differences of sum(f(x) * dy) with respect to every element of x (float64)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        plus = np.sum(f(x) * dy)
        x[i] = old - eps
        minus = np.sum(f(x) * dy)
        x[i] = old
        g[i] = (plus - minus) / (2 * eps)
    return g


@pytest.mark.parametrize("mode", MODES)
def test_finite_differences(mode, rng):
    x = rng.standard_normal((4, 6)) * 2
    x[np.abs(x) < 0.05] += 0.2  # keep away from the kinks at 0 ...
    x[np.abs(x - 1.5) < 0.05] += 0.2  # ... and at clipped_relu's ceiling
    dy = rng.standard_normal(x.shape)
    desc = ActivationDescriptor(mode, TORCH_ACTIVATIONS[mode][0])
    y = activation_forward(x, desc)
    dx = activation_backward(x, y, dy, desc)
    assert rel_err(dx, numeric_grad(lambda a: activation_forward(a, desc), x.copy(), dy)) <= 1e-6


def test_default_coefs():
    assert ActivationDescriptor("leaky_relu").coef == 0.01
    assert ActivationDescriptor("elu").coef == 1.0
    assert ActivationDescriptor("clipped_relu").coef == 6.0
    x = np.array([-2.0, 3.0, 7.0])
    np.testing.assert_array_equal(activation_forward(x, ActivationDescriptor("clipped_relu")), [0.0, 3.0, 6.0])


def test_sigmoid_extremes_do_not_overflow():
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0], dtype=np.float32)
    with np.errstate(over="raise", invalid="raise"):
        y = activation_forward(x, ActivationDescriptor("sigmoid"))
    np.testing.assert_allclose(y, torch.sigmoid(torch.tensor(x)).numpy(), rtol=1e-6, atol=1e-30)


def test_alpha_beta_blending(rng):
    x = rng.standard_normal((4, 5))
    dy = rng.standard_normal((4, 5))
    prior = rng.standard_normal((4, 5))
    desc = ActivationDescriptor("tanh")
    out = prior.copy()
    result = activation_forward(x, desc, alpha=2.0, beta=0.5, out=out)
    assert result is out
    assert rel_err(out, 2.0 * np.tanh(x) + 0.5 * prior) <= 1e-14
    y = np.tanh(x)
    out = prior.copy()
    activation_backward(x, y, dy, desc, alpha=-1.0, beta=3.0, out=out)
    assert rel_err(out, -dy * (1 - y * y) + 3.0 * prior) <= 1e-14


def test_errors():
    x = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="ActivationDescriptor: unknown mode"):
        ActivationDescriptor("swish")
    with pytest.raises(ValueError, match="clipped_relu"):
        ActivationDescriptor("clipped_relu", 0.0)
    with pytest.raises(TypeError, match="activation_forward: x must be float32 or float64"):
        activation_forward(np.ones((2, 3), dtype=np.int32), ActivationDescriptor())
    with pytest.raises(TypeError, match="activation_forward: desc"):
        activation_forward(x, "relu")
    with pytest.raises(ValueError, match=r"activation_backward: x \(2, 3\), y \(2, 3\) and dy \(3, 2\)"):
        activation_backward(x, x, np.ones((3, 2), dtype=np.float32), ActivationDescriptor())
    with pytest.raises(TypeError, match="activation_backward: all arrays must have the same dtype"):
        activation_backward(x, x, x.astype(np.float64), ActivationDescriptor())
    with pytest.raises(ValueError, match="pass out="):
        activation_forward(x, ActivationDescriptor(), beta=1.0)
    with pytest.raises(ValueError, match=r"out has shape \(3, 2\), expected \(2, 3\)"):
        activation_forward(x, ActivationDescriptor(), out=np.zeros((3, 2), dtype=np.float32))
    with pytest.raises(TypeError, match="out has dtype float64"):
        activation_forward(x, ActivationDescriptor(), out=np.zeros((2, 3)))


def test_relu_backward_with_inf_and_nan_gradients_matches_torch():
    # (At x = NaN minidl passes no gradient, f'(x) = [x > 0]; torch tests the output instead.)
    x = np.array([-1.0, 0.0, 2.0, 3.0, -4.0], dtype=np.float32)
    dy = np.array([np.inf, np.inf, np.inf, np.nan, np.nan], dtype=np.float32)
    desc = ActivationDescriptor("relu")
    y = activation_forward(x, desc)
    dx = activation_backward(x, y, dy, desc)
    xt = torch.tensor(x, requires_grad=True)
    torch.relu(xt).backward(torch.tensor(dy))
    np.testing.assert_array_equal(np.isnan(dx), np.isnan(xt.grad.numpy()))
    finite = ~np.isnan(dx)
    np.testing.assert_array_equal(dx[finite], xt.grad.numpy()[finite])


def test_fast_erfc_is_within_its_bound_and_float32_gelu_is_accurate():
    """The float32 GELU path uses erfc_fast (vectorised): its relative error stays below 1.2e-7 against
    math.erfc on [0, 10], and float32 GELU forward and backward agree element by element with the exact
    float64 values (from math.erfc, so the tails are exact too) to float32 rounding. (torch's own float32
    CPU GELU is off by up to ~1e-4 relative near x = -3, so it is not the oracle here.)"""
    import math

    from minidl.primitives.cpu import activation as cpu_activation

    z = np.linspace(0.0, 10.0, 20001)
    exact_erfc = np.array([math.erfc(v) for v in z])
    assert (np.abs(cpu_activation.erfc_fast(z) - exact_erfc) / exact_erfc).max() < 1.2e-7
    x = np.concatenate([np.linspace(-9, 9, 4001), np.random.default_rng(0).standard_normal(5000) * 3]).astype(np.float32)
    x64 = x.astype(np.float64)
    cdf = 0.5 * np.array([math.erfc(-v / math.sqrt(2)) for v in x64])       # no 1 + erf cancellation
    desc = ActivationDescriptor("gelu")
    y = activation_forward(x, desc)
    assert np.allclose(y, x64 * cdf, rtol=3e-7, atol=1e-37)
    dy = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    dx = activation_backward(x, y, dy, desc)
    exact_dx = dy * (cdf + x64 * np.exp(-0.5 * x64 * x64) / math.sqrt(2 * math.pi))
    # near x = -0.75 the slope Phi(x) + x phi(x) crosses 0: there the bound is absolute, 1e-7 in slope units
    assert (np.abs(dx - exact_dx) <= 5e-7 * np.abs(exact_dx) + 1e-7 * np.abs(dy)).all()


def test_the_usual_call_is_told_in_a_few_comparisons_and_others_are_still_checked():
    """activation_forward / _backward take the usual call (one array type, shape and float dtype, no blending)
    straight to the backend (issue 23); anything else still meets the checks: a dy of another shape or dtype, a
    desc that is not a descriptor, integer data."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    desc = ActivationDescriptor("relu")
    y = activation_forward(x, desc)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    np.testing.assert_array_equal(activation_backward(x, y, x, desc), np.where(x > 0, x, 0))
    with pytest.raises(ValueError, match=r"activation_backward: x \(2, 3\), y \(2, 3\) and dy \(3, 2\)"):
        activation_backward(x, y, x.reshape(3, 2), desc)
    with pytest.raises(TypeError, match="activation_backward: all arrays must have the same dtype"):
        activation_backward(x, y, x.astype(np.float64), desc)
    with pytest.raises(TypeError, match="activation_forward: desc"):
        activation_forward(x, "relu")
    with pytest.raises(TypeError, match="activation_forward: x must be float32 or float64"):
        activation_forward(x.astype(np.int32), desc)
