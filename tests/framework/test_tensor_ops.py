"""The core Tensor ops against torch on the CPU: values, dtypes and gradients (torch autograd is the
oracle), plus the autograd behaviours (accumulation, retain_graph, no_grad), factories, seeding and
error messages."""
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import minidl
from minidl import _device
from tests.conftest import rel_err

TOL = 1e-5


def torch_dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def randn(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def away_from_zero(shape, seed=0):
    a = randn(shape, seed)
    return (np.sign(a) * (np.abs(a) + 0.5)).astype(np.float32)


def positive(shape, seed=0):
    return (np.abs(randn(shape, seed)) + 0.5).astype(np.float32)


def as_tuple(x):
    return x if isinstance(x, (tuple, list)) else (x,)


def compare(fn_m, fn_t, *arrays, grad=True, tol=TOL):
    """Run fn on minidl and torch tensors made from the same arrays; compare every output (value,
    shape, dtype) and, for float outputs, the gradient of sum(out * c) w.r.t. every float input."""
    ms = [minidl.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    ts = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    outs_m, outs_t = as_tuple(fn_m(*ms)), as_tuple(fn_t(*ts))
    assert len(outs_m) == len(outs_t)
    loss_m = loss_t = None
    for k, (om, ot) in enumerate(zip(outs_m, outs_t)):
        assert om.shape == tuple(ot.shape), (k, om.shape, tuple(ot.shape))
        assert om.dtype == np.dtype(torch_dtype_name(ot)), (k, om.dtype, ot.dtype)
        if om.dtype.kind == "f":
            assert rel_err(om.detach().numpy(), ot.detach().numpy()) <= tol, k
            if grad and ot.requires_grad:
                c = randn(om.shape, seed=100 + k)
                term_m, term_t = (om * minidl.tensor(c)).sum(), (ot * torch.tensor(c)).sum()
                loss_m = term_m if loss_m is None else loss_m + term_m
                loss_t = term_t if loss_t is None else loss_t + term_t
        else:
            np.testing.assert_array_equal(om.numpy(), ot.numpy())
    if loss_m is not None:
        loss_m.backward()
        loss_t.backward()
        for i, (m, t) in enumerate(zip(ms, ts)):
            if t.requires_grad:
                expected = np.zeros(t.shape, np.float32) if t.grad is None else t.grad.numpy()
                assert m.grad is not None, f"input {i} got no gradient"
                assert m.grad.shape == tuple(t.shape)
                assert rel_err(m.grad.numpy(), expected) <= tol, (i, rel_err(m.grad.numpy(), expected))
    return outs_m


# ------------------------------------------------------------------------------------------------
# Elementwise binary ops with broadcasting (the gradient is summed back to each input's shape)
# ------------------------------------------------------------------------------------------------

# name: (minidl op, torch op, input makers): divisors away from zero, powers of positive bases
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, (randn, randn)),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, (randn, randn)),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, (randn, randn)),
    "div": (lambda a, b: a / b, lambda a, b: a / b, (randn, away_from_zero)),
    "pow": (lambda a, b: a ** b, lambda a, b: a ** b, (positive, randn)),
    "maximum": (lambda a, b: minidl.maximum(a, b), torch.maximum, (randn, randn)),
    "minimum": (lambda a, b: a.minimum(b), torch.minimum, (randn, randn)),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@settings(max_examples=25, deadline=None)
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4))
def test_binary_ops_broadcast_like_torch(name, shapes):
    fn_m, fn_t, (make_a, make_b) = BINARY[name]
    a = make_a(shapes.input_shapes[0], seed=1)
    b = make_b(shapes.input_shapes[1], seed=2)
    compare(fn_m, fn_t, a, b)


def test_broadcast_gradient_is_reduced_to_each_input_shape():
    a = minidl.tensor(randn((3, 1)), requires_grad=True)
    b = minidl.tensor(randn((4,)), requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.shape == (3, 1) and b.grad.shape == (4,)
    np.testing.assert_allclose(a.grad.numpy(), np.full((3, 1), b.detach().numpy().sum()), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), np.full(4, a.detach().numpy().sum()), rtol=1e-6)


SCALAR_FORMS = {
    "x+2": (lambda x: x + 2, lambda x: x + 2),
    "2-x": (lambda x: 2 - x, lambda x: 2 - x),
    "x*2.5": (lambda x: x * 2.5, lambda x: x * 2.5),
    "3/x": (lambda x: 3 / x, lambda x: 3 / x),
    "x/3": (lambda x: x / 3, lambda x: x / 3),
    "x**3": (lambda x: x ** 3, lambda x: x ** 3),
    "x**0.5": (lambda x: x ** 0.5, lambda x: x ** 0.5),
    "2**x": (lambda x: 2 ** x, lambda x: 2 ** x),
    "-x": (lambda x: -x, lambda x: -x),
    "+x": (lambda x: +x, lambda x: +x),
    "ndarray+x": (lambda x: np.full((4,), 1.5, np.float32) + x, lambda x: torch.full((4,), 1.5) + x),
    "x.add(y,alpha)": (lambda x: x.add(x * x, alpha=0.5), lambda x: x.add(x * x, alpha=0.5)),
}


@pytest.mark.parametrize("name", sorted(SCALAR_FORMS))
def test_python_scalars_and_reversed_operators(name):
    fn_m, fn_t = SCALAR_FORMS[name]
    compare(fn_m, fn_t, positive((3, 4)))


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_give_bool_tensors(op):
    rng = np.random.default_rng(0)
    a = rng.integers(-2, 3, size=(4, 5)).astype(np.float32)  # small integers: plenty of ties
    b = rng.integers(-2, 3, size=(5,)).astype(np.float32)
    symbol = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
    for other_m, other_t in [(minidl.tensor(b), torch.tensor(b)), (1.0, 1.0)]:
        got = eval(f"x {symbol} y", {"x": minidl.tensor(a), "y": other_m})
        want = eval(f"x {symbol} y", {"x": torch.tensor(a), "y": other_t})
        assert got.dtype == np.bool_ and not got.requires_grad
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(getattr(minidl.tensor(a), op)(other_m).numpy(), want.numpy())


# ------------------------------------------------------------------------------------------------
# Elementwise unary ops, where
# ------------------------------------------------------------------------------------------------

UNARY = {
    "exp": (lambda x: x.exp(), torch.exp, randn),
    "log": (lambda x: minidl.log(x), torch.log, positive),
    "sqrt": (lambda x: x.sqrt(), torch.sqrt, positive),
    "abs": (lambda x: x.abs(), torch.abs, away_from_zero),
    "clamp_min": (lambda x: x.clamp(min=-0.3), lambda x: x.clamp(min=-0.3), randn),
    "clamp_max": (lambda x: x.clamp(max=0.2), lambda x: x.clamp(max=0.2), randn),
    "clamp_both": (lambda x: minidl.clamp(x, -0.5, 0.5), lambda x: torch.clamp(x, -0.5, 0.5), randn),
    "square": (lambda x: x.square(), torch.square, randn),
    "rsqrt": (lambda x: x.rsqrt(), torch.rsqrt, positive),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops(name):
    fn_m, fn_t, make = UNARY[name]
    compare(fn_m, fn_t, make((3, 5, 2)))


def test_where_with_broadcast_condition():
    cond = np.random.default_rng(0).random((4, 1)) > 0.5
    cond_m, cond_t = minidl.tensor(cond), torch.tensor(cond)
    compare(lambda a, b: minidl.where(cond_m, a, b), lambda a, b: torch.where(cond_t, a, b),
            randn((4, 3)), randn((3,), seed=1))
    compare(lambda a: minidl.where(cond_m, a, 0.0), lambda a: torch.where(cond_t, a, 0.0), randn((4, 3)))


# ------------------------------------------------------------------------------------------------
# Reductions
# ------------------------------------------------------------------------------------------------

REDUCTIONS = {
    "sum": (lambda x: x.sum(), lambda x: x.sum()),
    "sum_dim": (lambda x: x.sum(dim=1), lambda x: x.sum(dim=1)),
    "sum_dims_keepdim": (lambda x: x.sum(dim=(0, 2), keepdim=True), lambda x: x.sum(dim=(0, 2), keepdim=True)),
    "sum_neg_dim": (lambda x: minidl.sum(x, -1), lambda x: torch.sum(x, -1)),
    "mean": (lambda x: x.mean(), lambda x: x.mean()),
    "mean_dim_keepdim": (lambda x: x.mean(dim=0, keepdim=True), lambda x: x.mean(dim=0, keepdim=True)),
    "var": (lambda x: x.var(), lambda x: x.var()),
    "var_dim": (lambda x: x.var(dim=1), lambda x: x.var(dim=1)),
    "var_biased_keepdim": (lambda x: x.var(dim=2, unbiased=False, keepdim=True),
                           lambda x: x.var(dim=2, correction=0, keepdim=True)),
    "std_dim": (lambda x: x.std(dim=0), lambda x: x.std(dim=0)),
    "max": (lambda x: x.max(), lambda x: x.max()),
    "min": (lambda x: x.min(), lambda x: x.min()),
    "max_dim": (lambda x: x.max(dim=1), lambda x: tuple(x.max(dim=1))),
    "max_dim_keepdim": (lambda x: x.max(dim=-1, keepdim=True), lambda x: tuple(x.max(dim=-1, keepdim=True))),
    "min_dim": (lambda x: x.min(dim=0), lambda x: tuple(x.min(dim=0))),
    "argmax": (lambda x: x.argmax(), lambda x: x.argmax()),
    "argmax_dim": (lambda x: x.argmax(dim=1), lambda x: x.argmax(dim=1)),
    "argmin_dim_keepdim": (lambda x: x.argmin(dim=2, keepdim=True), lambda x: x.argmin(dim=2, keepdim=True)),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions(name):
    fn_m, fn_t = REDUCTIONS[name]
    compare(fn_m, fn_t, randn((3, 4, 5)))


def test_max_over_all_elements_shares_the_gradient_among_ties():
    x = np.array([[1.0, 3.0], [3.0, 2.0]], np.float32)
    compare(lambda t: t.max(), lambda t: t.max(), x)


# ------------------------------------------------------------------------------------------------
# Shapes
# ------------------------------------------------------------------------------------------------

SHAPES = {
    "reshape": (lambda x: x.reshape(6, -1), lambda x: x.reshape(6, -1)),
    "reshape_tuple": (lambda x: x.reshape((4, 15)), lambda x: x.reshape((4, 15))),
    "view": (lambda x: x.view(-1), lambda x: x.view(-1)),
    "flatten": (lambda x: x.flatten(), lambda x: x.flatten()),
    "flatten_1": (lambda x: x.flatten(1), lambda x: x.flatten(1)),
    "flatten_0_1": (lambda x: minidl.flatten(x, 0, 1), lambda x: torch.flatten(x, 0, 1)),
    "unsqueeze": (lambda x: x.unsqueeze(0), lambda x: x.unsqueeze(0)),
    "unsqueeze_neg": (lambda x: x.unsqueeze(-1), lambda x: x.unsqueeze(-1)),
    "squeeze_all": (lambda x: x.unsqueeze(1).unsqueeze(-1).squeeze(), lambda x: x.unsqueeze(1).unsqueeze(-1).squeeze()),
    "squeeze_dim": (lambda x: x.unsqueeze(1).squeeze(1), lambda x: x.unsqueeze(1).squeeze(1)),
    "squeeze_non1": (lambda x: x.squeeze(0), lambda x: x.squeeze(0)),
    "transpose": (lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2)),
    "permute": (lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1)),
    "permute_tuple": (lambda x: x.permute((1, 2, 0)), lambda x: x.permute((1, 2, 0))),
    "expand": (lambda x: x[:, :1].expand(2, 3, 4, 5), lambda x: x[:, :1].expand(2, 3, 4, 5)),
    "expand_minus1": (lambda x: x[:1].expand(-1, 4, -1), lambda x: x[:1].expand(-1, 4, -1)),
    "T_2d": (lambda x: x.reshape(12, 5).T, lambda x: x.reshape(12, 5).T),
    "t": (lambda x: x.reshape(12, 5).t(), lambda x: x.reshape(12, 5).t()),
    "mT": (lambda x: x.mT, lambda x: x.mT),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shape_ops(name):
    fn_m, fn_t = SHAPES[name]
    compare(fn_m, fn_t, randn((3, 4, 5)))


# ------------------------------------------------------------------------------------------------
# Indexing (repeated integer indices must accumulate their gradients)
# ------------------------------------------------------------------------------------------------

MASK = np.random.default_rng(3).random((4, 5)) > 0.4
INDEXING = {
    "int": lambda x: x[1],
    "negative_int": lambda x: x[-1],
    "slice": lambda x: x[1:3],
    "step_slice": lambda x: x[::2, 1::2],
    "column": lambda x: x[:, 2],
    "ellipsis": lambda x: x[..., 0],
    "none": lambda x: x[None, 1],
    "int_and_slice": lambda x: x[2, 1:4],
    "int_list_repeated": lambda x: x[[0, 2, 0, 0]],
    "int_array_repeated": lambda x: x[np.array([3, 3, 1])],
    "column_array_repeated": lambda x: x[:, np.array([0, 4, 0])],
    "two_arrays": lambda x: x[np.array([0, 1, 1]), np.array([2, 2, 3])],
    "bool_mask": lambda x: x[MASK],
    "bool_rows": lambda x: x[np.array([True, False, True, True])],
}


@pytest.mark.parametrize("name", sorted(INDEXING))
def test_indexing(name):
    fn = INDEXING[name]
    compare(fn, fn, randn((4, 5)))


def test_indexing_with_tensors():
    idx = [2, 0, 2]
    compare(lambda x: x[minidl.tensor(idx)], lambda x: x[torch.tensor(idx)], randn((3, 4)))
    compare(lambda x: x[x > 0], lambda x: x[x > 0], randn((3, 4)))


# ------------------------------------------------------------------------------------------------
# Joining and splitting
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dim):
    shapes = {0: [(2, 3), (4, 3), (1, 3)], 1: [(2, 3), (2, 1), (2, 4)], -1: [(2, 3), (2, 2), (2, 5)]}[dim]
    arrays = [randn(s, seed=i) for i, s in enumerate(shapes)]
    compare(lambda *t: minidl.cat(list(t), dim=dim), lambda *t: torch.cat(list(t), dim=dim), *arrays)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack(dim):
    arrays = [randn((3, 4), seed=i) for i in range(3)]
    compare(lambda *t: minidl.stack(list(t), dim=dim), lambda *t: torch.stack(list(t), dim=dim), *arrays)


SPLITS = {
    "split_size": (lambda x: x.split(2, dim=1), lambda x: x.split(2, dim=1)),
    "split_sections": (lambda x: minidl.split(x, [1, 3, 1], dim=1), lambda x: torch.split(x, [1, 3, 1], dim=1)),
    "chunk": (lambda x: x.chunk(2, dim=0), lambda x: x.chunk(2, dim=0)),
    "chunk_uneven": (lambda x: minidl.chunk(x, 3, dim=1), lambda x: torch.chunk(x, 3, dim=1)),
}


@pytest.mark.parametrize("name", sorted(SPLITS))
def test_split_and_chunk(name):
    fn_m, fn_t = SPLITS[name]
    compare(fn_m, fn_t, randn((4, 5)))


# ------------------------------------------------------------------------------------------------
# Matrix products: 1-D, 2-D, batched with broadcasting
# ------------------------------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((4,), (4,)), ((4,), (4, 3)), ((3, 4), (4,)), ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)),
    ((2, 3, 4), (4,)), ((4,), (2, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)), ((2, 3, 4), (2, 4, 5)),
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul(shapes):
    a, b = randn(shapes[0], seed=1), randn(shapes[1], seed=2)
    compare(lambda x, y: x @ y, lambda x, y: x @ y, a, b)
    compare(lambda x, y: minidl.matmul(x, y), torch.matmul, a, b)


# ------------------------------------------------------------------------------------------------
# Autograd behaviour
# ------------------------------------------------------------------------------------------------


def test_shared_subexpressions_accumulate_like_torch():
    compare(lambda x, y: (x * y + (x * y) * x).exp().sum(dim=0), lambda x, y: (x * y + (x * y) * x).exp().sum(dim=0),
            randn((3, 2)), randn((3, 2), seed=1))


def test_gradients_accumulate_across_two_backward_calls():
    a = randn((3, 4))
    m, t = minidl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    (m * m).sum().backward()
    (m * 3.0).sum().backward()
    (t * t).sum().backward()
    (t * 3.0).sum().backward()
    assert rel_err(m.grad.numpy(), t.grad.numpy()) <= TOL
    np.testing.assert_allclose(m.grad.numpy(), 2 * a + 3, rtol=1e-6)


def test_retain_graph():
    a = randn((5,))
    x = minidl.tensor(a, requires_grad=True)
    y = x.exp().sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(a), rtol=1e-6)
    z = (x * x).exp().sum()
    z.backward()
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        z.backward()


def test_no_grad_and_set_grad_enabled():
    x = minidl.randn(3, requires_grad=True)
    with minidl.no_grad():
        y = x * 2
        assert not minidl.is_grad_enabled()
    assert minidl.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None and y.is_leaf

    @minidl.no_grad()
    def double(t):
        return t * 2

    assert not double(x).requires_grad and minidl.is_grad_enabled()
    with minidl.set_grad_enabled(False):
        assert not (x + 1).requires_grad
        with minidl.enable_grad():
            assert (x + 1).requires_grad
    z = x * 2
    assert z.requires_grad and z.grad_fn is not None and not z.is_leaf


def test_requires_grad_and_detach():
    x = minidl.tensor([1.0, 2.0])
    assert not x.requires_grad and not (x * 2).requires_grad
    assert x.requires_grad_() is x and x.requires_grad
    assert (x * 2).requires_grad
    d = (x * 2).detach()
    assert not d.requires_grad and d.is_leaf
    with pytest.raises(RuntimeError, match="floating-point"):
        minidl.tensor([1, 2]).requires_grad_()
    with pytest.raises(RuntimeError, match="in place"):
        x.add_(1.0)
    with minidl.no_grad():
        x.add_(1.0)
    np.testing.assert_array_equal(x.detach().numpy(), [2.0, 3.0])


def test_backward_with_a_gradient_argument():
    a, g = randn((2, 3)), randn((2, 3), seed=5)
    m, t = minidl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    (m.exp() * 2).backward(gradient=minidl.tensor(g))
    (t.exp() * 2).backward(gradient=torch.tensor(g))
    assert rel_err(m.grad.numpy(), t.grad.numpy()) <= TOL
    m2 = minidl.tensor(a, requires_grad=True)
    (m2 * 1.0).backward(g)  # an array works too
    np.testing.assert_allclose(m2.grad.numpy(), g)
    with pytest.raises(RuntimeError, match="only for scalar outputs.*shape \\(2, 3\\)"):
        (m * 2).backward()
    with pytest.raises(RuntimeError, match="gradient has shape \\(3,\\), expected \\(2, 3\\)"):
        (m * 2).backward(gradient=np.ones(3, np.float32))
    with pytest.raises(RuntimeError, match="does not require grad"):
        minidl.tensor(a).sum().backward()


# ------------------------------------------------------------------------------------------------
# dtypes
# ------------------------------------------------------------------------------------------------


def test_default_and_kept_dtypes():
    assert minidl.tensor([1.0, 2.0]).dtype == minidl.float32
    assert minidl.tensor(1.5).dtype == minidl.float32
    assert minidl.tensor([0, 2, 1]).dtype == minidl.int64  # class labels
    assert minidl.tensor(np.zeros(3)).dtype == minidl.float64  # an array's dtype is kept
    assert minidl.tensor([1, 2], dtype=minidl.float64).dtype == minidl.float64
    assert minidl.randn(2).dtype == minidl.float32 and minidl.zeros(2).dtype == minidl.float32
    x64 = minidl.tensor(np.ones(3), requires_grad=True)
    y = (x64 * 2.5 + 1).exp().sum()
    assert y.dtype == minidl.float64
    y.backward()
    assert x64.grad.dtype == minidl.float64
    assert minidl.randn(3).double().dtype == minidl.float64 and minidl.tensor([1, 2]).float().dtype == minidl.float32


PROMOTIONS = [
    (np.float32, np.float32, "add"), (np.float32, np.float64, "mul"), (np.int64, np.float32, "add"),
    (np.float32, np.int64, "sub"), (np.int64, np.int64, "div"), (np.int64, np.int64, "mul"),
    (np.int64, np.float64, "add"),
]


@pytest.mark.parametrize("dt_a, dt_b, op", PROMOTIONS, ids=str)
def test_type_promotion_matches_torch(dt_a, dt_b, op):
    a, b = np.array([1, 2, 3], dtype=dt_a), np.array([4, 5, 6], dtype=dt_b)
    f = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[op]
    got, want = f(minidl.tensor(a), minidl.tensor(b)), f(torch.tensor(a), torch.tensor(b))
    assert got.dtype == np.dtype(torch_dtype_name(want))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    for scalar in (2, 2.5):
        got, want = f(minidl.tensor(a), scalar), f(torch.tensor(a), scalar)
        assert got.dtype == np.dtype(torch_dtype_name(want)), (scalar, got.dtype, want.dtype)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


# ------------------------------------------------------------------------------------------------
# Factories and seeding
# ------------------------------------------------------------------------------------------------

FACTORIES = {
    "zeros": (lambda: minidl.zeros(2, 3), lambda: torch.zeros(2, 3)),
    "ones_tuple": (lambda: minidl.ones((2, 3), dtype=minidl.float64), lambda: torch.ones((2, 3), dtype=torch.float64)),
    "full_float": (lambda: minidl.full((2, 3), 1.5), lambda: torch.full((2, 3), 1.5)),
    "full_int": (lambda: minidl.full((2,), 3), lambda: torch.full((2,), 3)),
    "arange_int": (lambda: minidl.arange(5), lambda: torch.arange(5)),
    "arange_float": (lambda: minidl.arange(1, 2, 0.25), lambda: torch.arange(1, 2, 0.25)),
    "arange_start_end": (lambda: minidl.arange(2, 9, 3), lambda: torch.arange(2, 9, 3)),
    "linspace": (lambda: minidl.linspace(0, 1, 7), lambda: torch.linspace(0, 1, 7)),
    "eye": (lambda: minidl.eye(3), lambda: torch.eye(3)),
    "eye_rect": (lambda: minidl.eye(2, 4), lambda: torch.eye(2, 4)),
    "zeros_like": (lambda: minidl.zeros_like(minidl.ones(2, dtype=minidl.float64)),
                   lambda: torch.zeros_like(torch.ones(2, dtype=torch.float64))),
    "ones_like": (lambda: minidl.ones_like(minidl.tensor([1, 2])), lambda: torch.ones_like(torch.tensor([1, 2]))),
    "full_like": (lambda: minidl.full_like(minidl.zeros(3), 7.0), lambda: torch.full_like(torch.zeros(3), 7.0)),
    "empty_shape": (lambda: minidl.empty(3, 0, 2).shape, lambda: tuple(torch.empty(3, 0, 2).shape)),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories(name):
    fn_m, fn_t = FACTORIES[name]
    got, want = fn_m(), fn_t()
    if isinstance(got, tuple):
        assert got == want
        return
    assert got.shape == tuple(want.shape) and got.dtype == np.dtype(torch_dtype_name(want))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_random_factories_and_manual_seed():
    minidl.manual_seed(5)
    a = [minidl.randn(3, 4), minidl.rand(6), minidl.randint(0, 10, (20,)), minidl.randperm(9)]
    minidl.manual_seed(5)
    b = [minidl.randn(3, 4), minidl.rand(6), minidl.randint(0, 10, (20,)), minidl.randperm(9)]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    minidl.manual_seed(6)
    assert not np.array_equal(minidl.randn(3, 4).numpy(), a[0].numpy())
    assert a[0].dtype == minidl.float32 and a[2].dtype == minidl.int64
    assert (a[1].numpy() >= 0).all() and (a[1].numpy() < 1).all()
    assert a[2].numpy().min() >= 0 and a[2].numpy().max() < 10
    assert sorted(a[3].tolist()) == list(range(9))
    r = minidl.randn(2, 3, requires_grad=True, dtype=minidl.float64)
    assert r.requires_grad and r.dtype == minidl.float64


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_rand_never_rounds_up_to_one_in_a_narrow_dtype(dtype):
    # a float64 draw within 2**-12 of 1 rounds to 1.0 in float16; 2**18 draws meet ~64 of them
    minidl.manual_seed(0)
    x = minidl.rand(1 << 18, dtype=getattr(minidl, dtype)).float().numpy()
    assert x.min() >= 0 and x.max() < 1, f"rand({dtype}) gave {x.max()}"
    assert x.max() > 0.99 and abs(x.mean() - 0.5) < 0.01


def test_conversions():
    x = minidl.tensor([[1.5, 2.0]], requires_grad=True)
    assert x.tolist() == [[1.5, 2.0]] and x[0, 1].item() == 2.0 and float(x[0, 0]) == 1.5
    with pytest.raises(RuntimeError, match="requires grad"):
        x.numpy()
    with pytest.raises(ValueError, match="one-element"):
        x.item()
    assert x.numel() == 2 and x.size() == (1, 2) and x.size(1) == 2 and x.ndim == 2 and x.dim() == 2


# ------------------------------------------------------------------------------------------------
# Error messages name the op and the shapes
# ------------------------------------------------------------------------------------------------


def test_error_messages():
    a, b = minidl.randn(2, 3), minidl.randn(4)
    with pytest.raises(ValueError, match=r"add: shapes \(2, 3\) and \(4,\) cannot be broadcast"):
        a + b
    with pytest.raises(ValueError, match=r"mul: shapes \(2, 3\) and \(4,\)"):
        a * b
    with pytest.raises(ValueError, match=r"matmul: shapes \(2, 3\) and \(4, 5\) are not aligned"):
        a @ minidl.randn(4, 5)
    with pytest.raises(ValueError, match=r"matmul: .*\(2, 3\) and \(4,\)"):
        a @ b
    with pytest.raises(ValueError, match=r"reshape: cannot reshape a tensor of shape \(2, 3\) to \(4, 2\)"):
        a.reshape(4, 2)
    with pytest.raises(ValueError, match=r"cat: .*\(2, 3\), \(2, 4\)"):
        minidl.cat([a, minidl.randn(2, 4)], dim=0)
    with pytest.raises(ValueError, match=r"stack: .*\(2, 3\), \(4,\)"):
        minidl.stack([a, b])
    with pytest.raises(IndexError, match=r"sum: Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"):
        a.sum(dim=2)
    with pytest.raises(ValueError, match=r"permute: .*\(2, 3\)"):
        a.permute(0, 0)
    with pytest.raises(ValueError, match=r"expand: cannot expand shape \(2, 3\)"):
        a.expand(4, 3)
    with pytest.raises(IndexError, match=r"shape \(2, 3\)"):
        a[5]
    with pytest.raises(ValueError, match=r"split: sections \[1, 1\] do not add up"):
        a.split([1, 1], dim=1)


def test_to_cuda_without_cupy_says_cupy_is_missing(monkeypatch):
    # Simulate a machine without CuPy (even on the GPU machine): importing cupy fails.
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(_device, "_cupy", None)
    monkeypatch.setattr(_device, "_cupy_error", None)
    x = minidl.randn(3)
    with pytest.raises(RuntimeError, match="to\\('cuda'\\).*CuPy is not installed"):
        x.to("cuda")
    with pytest.raises(RuntimeError, match="CuPy is not installed"):
        minidl.zeros(2, device="cuda")
    assert x.to("cpu") is x


def test_python_floor_divide_equals_numpys():
    """The floor division the GPU path uses for floats (CuPy's floor_divide is floor(a / b)) rounds as
    Python, NumPy and torch do, -0 and signs included: checked here on NumPy arrays, the same code."""
    from minidl.ops.elementwise import _python_floor_divide

    rng = np.random.default_rng(0)
    a = (rng.standard_normal(20000) * 10).astype(np.float32)
    b = rng.standard_normal(20000).astype(np.float32)
    a[:6], b[:6] = [-1e-30, 1e-30, 0.0, -0.0, 7.0, -7.0], [3, -3, -2, 2, 0.5, 0.5]
    with np.errstate(all="ignore"):
        got, want = _python_floor_divide(np, a, b), np.floor_divide(a, b)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_a_leaf_keeps_a_fresh_gradient_without_copying_it():
    """AccumulateGrad steals a gradient nobody else holds (as PyTorch), and copies one that is shared."""
    seen = {}

    class Fresh(minidl.autograd.Function):
        def forward(self, x):
            return x * 2

        def backward(self, g):
            dx = g * 2
            seen["dx"] = id(dx)          # an id, not a reference: the array stays unshared
            return dx

    x = minidl.tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    Fresh.apply(x).sum().backward()
    assert id(x.grad._data) == seen["dx"] and x.grad.numpy().tolist() == [2.0, 2.0, 2.0]

    # Shared gradients are copied: Add hands one array to both inputs, the user's seed stays the user's.
    a = minidl.tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    b = minidl.tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    (a + b).backward(minidl.tensor(np.full(3, 2.0, dtype=np.float32)))
    assert not np.shares_memory(a.grad.numpy(), b.grad.numpy())
    seed = minidl.tensor(np.full(3, 4.0, dtype=np.float32))
    c = minidl.tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    c.backward(seed)
    c.grad.numpy()[0] = 0.0
    assert seed.numpy().tolist() == [4.0, 4.0, 4.0]
    # retain_grad keeps its own copy: the intermediate's gradient is still used by the backward after it.
    x = minidl.tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    h = x * 2
    h.retain_grad()
    (h * 3).sum().backward()
    assert not np.shares_memory(h.grad.numpy(), x.grad.numpy())
    assert h.grad.numpy().tolist() == [3.0] * 3 and x.grad.numpy().tolist() == [6.0] * 3


def test_split_is_one_node_of_views_and_joins_the_gradients_once():
    """split/chunk: every piece a view of the input (sharing its version counter) from one tape node, whose
    backward concatenates the pieces' gradients (zeros for an unused piece): the same gradients as torch."""
    x = minidl.randn(2, 5, 9, requires_grad=True)
    xt = torch.tensor(x.detach().numpy(), requires_grad=True)
    a, b, c = x.split(3, dim=2)
    at, bt, ct = xt.split(3, dim=2)
    assert a._ctx is c._ctx and a._ctx.name == "Split"
    ((a * 2).sum() + (c ** 2 * b[..., :1]).sum()).backward()
    ((at * 2).sum() + (ct ** 2 * bt[..., :1]).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-6)
    y = x.detach()
    first, second = y.split([2, 3], dim=1)
    first.add_(1)
    assert np.shares_memory(first.numpy(), y.numpy()) and y._version == 1 and second._version == 1
    with pytest.raises(NotImplementedError, match="in-place change of a view"):
        (x * 1).chunk(3, dim=2)[0].mul_(2)
    assert [tuple(t.shape) for t in minidl.randn(7).chunk(3)] == [(3,), (3,), (1,)]


def test_split_backward_takes_gradients_already_side_by_side_as_they_are():
    """When the pieces' gradients lie side by side in one C-contiguous array, as the concatenate would write them
    (the attention primitive writes the gradients of q, k, v split from one projection that way), the split's
    backward returns that array as a view instead of copying; any other layout is concatenated as before."""
    from minidl.ops.joining import Split, _joined

    parent = np.arange(2 * 5 * 9, dtype=np.float32).reshape(2, 5, 9)
    pieces = [parent[..., i:i + 3] for i in (0, 3, 6)]
    joined = _joined(pieces, 2)
    assert joined is not None and np.shares_memory(joined, parent) and (joined == parent).all()
    node = Split()
    node.dim = 2
    assert np.shares_memory(node.backward(*pieces), parent)
    # a gap, the wrong order, another array, a transposed parent, a copy: concatenated (a new array), same values
    for bad in ([parent[..., 0:3], parent[..., 3:6], parent[..., 7:9]],
                [pieces[1], pieces[0], pieces[2]],
                [pieces[0], pieces[1], pieces[2].copy()],
                [parent.copy()[..., i:i + 3] for i in (0, 3, 6)][:1] + pieces[1:]):
        assert _joined(bad, 2) is None
        got = node.backward(*bad)
        assert not np.shares_memory(got, parent)
        np.testing.assert_array_equal(got, np.concatenate(bad, axis=2))
    t = np.ascontiguousarray(parent.transpose(0, 2, 1)).transpose(0, 2, 1)   # (2, 5, 9) with 5 innermost
    assert _joined([t[..., i:i + 3] for i in (0, 3, 6)], 2) is None
    # along a leading dim, and gradients of a GPT block's q, k, v: (B, T, 3C) pieces seen through (B, H, T, D)
    rows = [parent[i:i + 1] for i in (0, 1)]
    assert np.shares_memory(_joined(rows, 0), parent)
    x = minidl.tensor(parent.copy(), requires_grad=True)
    q, k, v = x.split(3, dim=2)
    (q * 1 + k * 2 + v * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.repeat([[[1, 1, 1, 2, 2, 2, 3, 3, 3]]], 5, axis=1).repeat(2, 0))
