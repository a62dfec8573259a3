"""GPU activations (kernels/activation.cu) against torch on the GPU and the NumPy reference."""
import numpy as np
import pytest

from tests.conftest import rel_err

pytestmark = pytest.mark.gpu

MODES = ["relu", "leaky_relu", "elu", "clipped_relu", "sigmoid", "tanh", "gelu", "gelu_tanh"]
COEF = {"leaky_relu": 0.07, "elu": 1.3, "clipped_relu": 1.5}


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


@pytest.fixture(scope="module")
def torch():
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


def torch_activation(torch, mode, t):
    F = torch.nn.functional
    return {
        "relu": lambda: F.relu(t),
        "leaky_relu": lambda: F.leaky_relu(t, COEF["leaky_relu"]),
        "elu": lambda: F.elu(t, COEF["elu"]),
        "clipped_relu": lambda: F.hardtanh(t, 0.0, COEF["clipped_relu"]),
        "sigmoid": lambda: torch.sigmoid(t),
        "tanh": lambda: torch.tanh(t),
        "gelu": lambda: F.gelu(t),
        "gelu_tanh": lambda: F.gelu(t, approximate="tanh"),
    }[mode]()


# 4*7*9*11 is a multiple of 4 (float4 path); 1001 leaves a tail of 1 (scalar tail); the views
# starting one element in are not 16-byte aligned (scalar path).
SHAPES = [(4, 7, 9, 11), (1001,), (3, 3)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("unaligned", [False, True])
def test_forward_backward_match_torch(cp, torch, mode, shape, unaligned):
    from minidl.primitives import ActivationDescriptor, activation_backward, activation_forward

    rng = np.random.default_rng(hash((mode, shape)) % 2**32)
    n = int(np.prod(shape))
    x_host = (rng.standard_normal(n + 1) * 3).astype(np.float32)
    dy_host = rng.standard_normal(n + 1).astype(np.float32)
    sl = slice(1, None) if unaligned else slice(0, n)
    x = cp.asarray(x_host)[sl].reshape(shape)
    dy = cp.asarray(dy_host)[sl].reshape(shape)
    desc = ActivationDescriptor(mode, COEF.get(mode))

    y = cp.full(shape, cp.nan, dtype=cp.float32)  # poisoned: every element must be written
    activation_forward(x, desc, out=y)
    dx = cp.full(shape, cp.nan, dtype=cp.float32)
    activation_backward(x, y, dy, desc, out=dx)

    t = torch.tensor(cp.asnumpy(x), device="cuda", requires_grad=True)
    ty = torch_activation(torch, mode, t)
    ty.backward(torch.tensor(cp.asnumpy(dy), device="cuda"))
    assert rel_err(cp.asnumpy(y), ty.detach().cpu().numpy()) <= 1e-5
    assert rel_err(cp.asnumpy(dx), t.grad.cpu().numpy()) <= 1e-5

    # Against the NumPy reference on the same float32 data.
    x_np = cp.asnumpy(x)
    y_ref = activation_forward(x_np, desc)
    dx_ref = activation_backward(x_np, y_ref, cp.asnumpy(dy), desc)
    assert rel_err(cp.asnumpy(y), y_ref) <= 1e-5
    assert rel_err(cp.asnumpy(dx), dx_ref) <= 1e-5


@pytest.mark.parametrize("mode", ["relu", "gelu", "sigmoid"])
def test_alpha_beta_blend(cp, mode):
    from minidl.primitives import ActivationDescriptor, activation_backward, activation_forward

    rng = np.random.default_rng(1)
    shape = (5, 13, 7)
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    dy = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    prior = rng.standard_normal(shape).astype(np.float32)
    desc = ActivationDescriptor(mode)
    y_plain = activation_forward(x, desc)

    out = cp.asarray(prior)
    result = activation_forward(x, desc, alpha=0.5, beta=-2.0, out=out)
    assert result is out
    assert rel_err(cp.asnumpy(out), 0.5 * cp.asnumpy(y_plain) - 2.0 * prior) <= 1e-6

    dx_plain = activation_backward(x, y_plain, dy, desc)
    out = cp.asarray(prior)
    activation_backward(x, y_plain, dy, desc, alpha=3.0, beta=0.25, out=out)
    assert rel_err(cp.asnumpy(out), 3.0 * cp.asnumpy(dx_plain) + 0.25 * prior) <= 1e-6


def test_in_place_and_noncontiguous_out(cp):
    from minidl.primitives import ActivationDescriptor, activation_forward

    rng = np.random.default_rng(2)
    x_host = rng.standard_normal((6, 10)).astype(np.float32)
    expected = np.maximum(x_host, 0)
    x = cp.asarray(x_host)
    activation_forward(x, ActivationDescriptor("relu"), out=x)  # in place
    assert rel_err(cp.asnumpy(x), expected) == 0.0

    out = cp.full((10, 6), cp.nan, dtype=cp.float32).T  # a transposed (non-contiguous) out
    activation_forward(cp.asarray(x_host), ActivationDescriptor("relu"), out=out)
    assert rel_err(cp.asnumpy(out), expected) == 0.0


def test_float64_runs_the_reference_on_host_copies(cp):
    """No float64 kernel: float64 on the GPU runs the NumPy reference on host copies (cuda/_launch.on_host), in
    float64, the result on the GPU."""
    from minidl.primitives.cpu import activation as reference
    from minidl.primitives.cuda.activation import activation_backward, activation_forward

    from minidl.primitives import ActivationDescriptor

    x = np.linspace(-3, 3, 13)
    for mode in ("relu", "tanh", "gelu", "leaky_relu"):
        desc = ActivationDescriptor(mode)
        y = activation_forward(cp.asarray(x), desc)
        assert isinstance(y, cp.ndarray) and y.dtype == cp.float64
        np.testing.assert_array_equal(y.get(), reference.activation_forward(x, desc))
        dx = activation_backward(cp.asarray(x), y, cp.ones(13), desc)
        np.testing.assert_array_equal(dx.get(), reference.activation_backward(x, y.get(), np.ones(13), desc))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mode", MODES)
def test_half_kernels_equal_the_float32_path_rounded_once(cp, dtype, mode):
    """float16/bfloat16 run in place on activation_forward_half / _backward_half: fp32 math rounded once, so
    the bits equal those of the float32 kernels on converted copies (the path alpha/beta calls still take)."""
    from minidl._dtypes import bfloat16
    from minidl.primitives import ActivationDescriptor, activation_backward, activation_forward

    dt = bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(11)
    x = cp.asarray((rng.standard_normal((5, 77)) * 2).astype(dt))
    dy = cp.asarray(rng.standard_normal((5, 77)).astype(dt))
    desc = ActivationDescriptor(mode, COEF.get(mode))
    y = activation_forward(x, desc)
    x32 = x.astype(cp.float32)
    y_ref = activation_forward(x32, desc).astype(dt)
    assert y.dtype == dt and (y.view(cp.uint16) == y_ref.view(cp.uint16)).all()
    dx = activation_backward(x, y, dy, desc)
    dx_ref = activation_backward(x32, y.astype(cp.float32), dy.astype(cp.float32), desc).astype(dt)
    assert dx.dtype == dt and (dx.view(cp.uint16) == dx_ref.view(cp.uint16)).all()
    # 385 elements: 96 groups of 4 on the 8-byte path and a tail; a view one element in (2 bytes off) runs
    # element by element: the same bits either way
    flat, dflat = x.reshape(-1)[1:], dy.reshape(-1)[1:]
    assert flat.data.ptr % 8 and flat.flags.c_contiguous
    assert (activation_forward(flat, desc).view(cp.uint16) == y_ref.reshape(-1)[1:].view(cp.uint16)).all()
    dx_flat = activation_backward(flat, y.reshape(-1)[1:], dflat, desc)
    assert (dx_flat.view(cp.uint16) == dx_ref.reshape(-1)[1:].view(cp.uint16)).all()
    x0 = x[0, 0]   # a 0-d array keeps its shape (CuPy's ascontiguousarray would make it 1-D)
    assert activation_forward(x0, desc).shape == () and activation_backward(x0, x0, x0, desc).shape == ()
