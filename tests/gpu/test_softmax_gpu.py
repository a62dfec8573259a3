"""GPU softmax / log-softmax (kernels/softmax.cu) against torch on the GPU and the NumPy reference."""
import numpy as np
import pytest

from tests.conftest import rel_err

pytestmark = pytest.mark.gpu


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


# (shape, axis): warp kernel with 1, 2 and 32 registers per lane, block kernel (L > 1024),
# strided kernel (inner > 1), negative axes.
CASES = [
    ((37, 10), 1),
    ((9, 45), -1),
    ((6, 1000), 1),
    ((3, 3001), 1),
    ((5, 7, 6, 3), 1),
    ((4, 11, 13), 0),
    ((3, 5, 2, 129), -1),
    ((2, 1500, 3), 1),
]


@pytest.mark.parametrize("shape,axis", CASES)
@pytest.mark.parametrize("algorithm", ["accurate", "log"])
def test_forward_backward_match_torch(cp, torch, shape, axis, algorithm):
    from minidl.primitives import softmax_backward, softmax_forward

    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x_host = (rng.standard_normal(shape) * 4 + 50).astype(np.float32)  # large values: needs max subtraction
    dy_host = rng.standard_normal(shape).astype(np.float32)
    x, dy = cp.asarray(x_host), cp.asarray(dy_host)

    y = cp.full(shape, cp.nan, dtype=cp.float32)
    softmax_forward(x, axis=axis, algorithm=algorithm, out=y)
    dx = cp.full(shape, cp.nan, dtype=cp.float32)
    softmax_backward(y, dy, axis=axis, algorithm=algorithm, out=dx)

    t = torch.tensor(x_host, device="cuda", requires_grad=True)
    fn = torch.log_softmax if algorithm == "log" else torch.softmax
    ty = fn(t, dim=axis)
    ty.backward(torch.tensor(dy_host, device="cuda"))
    assert rel_err(cp.asnumpy(y), ty.detach().cpu().numpy()) <= 1e-5
    assert rel_err(cp.asnumpy(dx), t.grad.cpu().numpy()) <= 1e-4

    y_ref = softmax_forward(x_host, axis=axis, algorithm=algorithm)
    dx_ref = softmax_backward(y_ref, dy_host, axis=axis, algorithm=algorithm)
    assert rel_err(cp.asnumpy(y), y_ref) <= 1e-5
    assert rel_err(cp.asnumpy(dx), dx_ref) <= 1e-4


@pytest.mark.parametrize("shape,axis", [((8, 100), 1), ((2, 2000), 1), ((3, 5, 4), 1)])
def test_alpha_beta_and_aliasing(cp, shape, axis):
    from minidl.primitives import softmax_backward, softmax_forward

    rng = np.random.default_rng(5)
    x_host = rng.standard_normal(shape).astype(np.float32)
    prior = rng.standard_normal(shape).astype(np.float32)
    y_plain = cp.asnumpy(softmax_forward(cp.asarray(x_host), axis=axis))

    out = cp.asarray(prior)
    softmax_forward(cp.asarray(x_host), axis=axis, alpha=2.0, beta=0.5, out=out)
    assert rel_err(cp.asnumpy(out), 2.0 * y_plain + 0.5 * prior) <= 1e-6

    # out aliasing the input: the launcher must not let the kernel read values it already wrote.
    x = cp.asarray(x_host)
    softmax_forward(x, axis=axis, out=x)
    assert rel_err(cp.asnumpy(x), y_plain) <= 1e-6

    dy = rng.standard_normal(shape).astype(np.float32)
    dx_plain = cp.asnumpy(softmax_backward(cp.asarray(y_plain), cp.asarray(dy), axis=axis))
    out = cp.asarray(prior)
    softmax_backward(cp.asarray(y_plain), cp.asarray(dy), axis=axis, alpha=-1.0, beta=3.0, out=out)
    assert rel_err(cp.asnumpy(out), -dx_plain + 3.0 * prior) <= 1e-6


def test_rows_sum_to_one_with_extreme_inputs(cp):
    from minidl.primitives import softmax_forward

    x = cp.asarray(np.array([[1e4, -1e4, 0.0, 88.0], [-200.0, -200.0, -200.0, -200.0]], dtype=np.float32))
    y = cp.asnumpy(softmax_forward(x, axis=1))
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(y[1], 0.25, rtol=1e-6)
