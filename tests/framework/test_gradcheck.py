"""minidl.utils.gradcheck: passes on correct ops, and catches (and names) a wrong backward."""
import numpy as np
import pytest

import minidl
from minidl.autograd import Function
from minidl.utils import GradcheckError, gradcheck
from tests.conftest import DEVICES


def leaf(*shape, device="cpu", seed=0, positive=False):
    a = np.random.default_rng(seed).standard_normal(shape)
    if positive:
        a = np.abs(a) + 0.5
    return minidl.tensor(a, dtype=minidl.float64, device=device, requires_grad=True)


CORRECT = {
    "exp_mul_broadcast": (lambda a, b: a.exp() * b, [(3, 4), (4,)]),
    "div_log": (lambda a, b: (a / b).abs().log(), [(2, 5), (2, 5)]),
    "matmul_batched": (lambda a, b: a @ b, [(2, 3, 4), (4, 5)]),
    "var_mean_dims": (lambda a: a.var(dim=1) + a.mean(dim=0, keepdim=True).sum(), [(4, 6)]),
    "max_dim_returns_indices_too": (lambda a: a.max(dim=1), [(3, 5)]),
    "repeated_index": (lambda a: a[np.array([0, 2, 0, 0])] * 2.0, [(3, 4)]),
    "cat_and_transpose": (lambda a, b: minidl.cat([a, b.T], dim=0), [(2, 3), (3, 4)]),
    "two_outputs": (lambda a, b: (a * b, (a - b).sum(dim=0)), [(3, 3), (3, 3)]),
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_ops_pass(name):
    fn, shapes = CORRECT[name]
    inputs = [leaf(*s, seed=i) for i, s in enumerate(shapes)]
    if name == "div_log":
        inputs = [leaf(*s, seed=i, positive=True) for i, s in enumerate(shapes)]
    assert gradcheck(fn, inputs) is True


def test_large_inputs_are_checked_along_directions():
    # the random output weights c come from minidl's generator: seeded, so the finite differences this tight
    # rtol compares do not depend on which tests ran before (an unseeded run after another test's draws once
    # met an element whose central difference was 1e-3 off)
    minidl.manual_seed(0)
    a, b = leaf(20, 30), leaf(30, 7, seed=1)  # 600 elements: above the element-by-element limit
    assert gradcheck(lambda x, y: (x @ y).exp(), (a, b), rtol=1e-4)
    assert gradcheck(lambda x, y: x @ y, (leaf(3, 4), leaf(4, 2)), n_directions=5)


class WrongAtOneElement(Function):
    """y = x * 3, but the backward gets element `bad` wrong: the kind of bug gradcheck must find."""

    def forward(self, x, bad=None):
        self.bad = bad
        return x * 3

    def backward(self, g):
        gx = g * 3
        gx[self.bad] += 0.5
        return gx


class ScaledBackward(Function):
    """y = a * b with da off by one percent."""

    def forward(self, a, b):
        self.a, self.b = a, b
        return a * b

    def backward(self, g):
        return g * self.b * 1.01, g * self.a


def test_wrong_element_is_named():
    x, w = leaf(2, 3), leaf(2, 3, seed=1)
    with pytest.raises(GradcheckError) as info:
        gradcheck(lambda w, x: w * WrongAtOneElement.apply(x, bad=(1, 2)), (w, x))
    msg = str(info.value)
    assert "input 1 of shape (2, 3)" in msg and "element (1, 2)" in msg and "1 of 6 elements" in msg
    assert "autograd gives" in msg and "finite differences give" in msg


def test_off_by_one_percent_is_caught_with_both_values():
    a, b = leaf(3, 2), leaf(3, 2, seed=1)
    with pytest.raises(GradcheckError, match="input 0 of shape \\(3, 2\\)"):
        gradcheck(ScaledBackward.apply, (a, b))
    # Only b requires grad: its gradient is right, so the check passes.
    a.requires_grad_(False)
    assert gradcheck(ScaledBackward.apply, (a, b))


def test_directions_catch_one_wrong_element_in_a_large_input():
    x = leaf(25, 40)
    with pytest.raises(GradcheckError, match="along random direction"):
        gradcheck(lambda t: WrongAtOneElement.apply(t, bad=(7, 11)), (x,))


def test_raise_exception_false_returns_false():
    a, b = leaf(3, 2), leaf(3, 2, seed=1)
    assert gradcheck(ScaledBackward.apply, (a, b), raise_exception=False) is False


def test_inputs_and_existing_grads_are_left_as_they_were():
    a = leaf(3, 4)
    before = a.detach().numpy().copy()
    (a * 2).sum().backward()
    grad_before = a.grad.numpy().copy()
    gradcheck(lambda t: (t * t).sum(dim=1), (a,))
    np.testing.assert_array_equal(a.detach().numpy(), before)
    np.testing.assert_array_equal(a.grad.numpy(), grad_before)
    big = leaf(30, 30)
    big_before = big.detach().numpy().copy()
    gradcheck(lambda t: t.exp(), (big,), n_directions=3)
    np.testing.assert_array_equal(big.detach().numpy(), big_before)


def test_non_tensor_arguments_pass_through():
    assert gradcheck(lambda t, k: t * k, (leaf(4), 2.5))


def test_argument_errors():
    with pytest.raises(TypeError, match="float64"):
        gradcheck(lambda t: t * 2, (minidl.randn(3, requires_grad=True),))
    with pytest.raises(ValueError, match="requires_grad"):
        gradcheck(lambda t: t * 2, (minidl.randn(3, dtype=minidl.float64),))
    with pytest.raises(TypeError, match="must return a Tensor"):
        gradcheck(lambda t: 3.0, (leaf(3),))
    with pytest.raises(ValueError, match="n_directions"):
        gradcheck(lambda t: t, (leaf(3),), n_directions=0)


@pytest.mark.parametrize("device", DEVICES)
def test_runs_on_each_device(device):
    a, b = leaf(3, 4, device=device), leaf(4, 2, seed=1, device=device)
    assert gradcheck(lambda x, y: (x @ y).exp(), (a, b))
    with pytest.raises(GradcheckError):
        gradcheck(ScaledBackward.apply, (leaf(2, 2, device=device), leaf(2, 2, seed=1, device=device)))
