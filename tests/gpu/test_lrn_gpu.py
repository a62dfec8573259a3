"""GPU local response normalization (kernels/lrn.cu) against torch on the GPU and the NumPy reference."""
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


# Odd and even window sizes, a window wider than C, 1-D / 2-D / 3-D spatial.
CASES = [((3, 11, 6, 7), 5), ((2, 9, 5, 4), 4), ((2, 3, 10), 7), ((2, 6, 3, 4, 5), 3), ((4, 16, 5, 5), 1)]


@pytest.mark.parametrize("shape,size", CASES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_forward_backward_match_torch(cp, torch, shape, size, layout):
    from minidl.primitives import LRNDescriptor, lrn_backward, lrn_forward

    rng = np.random.default_rng(sum(shape) + size)
    x_cf = (rng.standard_normal(shape) * 3).astype(np.float32)
    dy_cf = rng.standard_normal(shape).astype(np.float32)
    desc = LRNDescriptor(size, alpha=0.3, beta=0.75, k=2.0)  # a large alpha, so the window matters

    def lay(a):
        return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if layout == "NHWC" else a

    def unlay(a):
        return np.moveaxis(a, -1, 1) if layout == "NHWC" else a

    x, dy = cp.asarray(lay(x_cf)), cp.asarray(lay(dy_cf))
    y = cp.full(x.shape, cp.nan, dtype=cp.float32)
    lrn_forward(x, desc, layout=layout, out=y)
    dx = cp.full(x.shape, cp.nan, dtype=cp.float32)
    lrn_backward(x, y, dy, desc, layout=layout, out=dx)

    t = torch.tensor(x_cf, device="cuda", requires_grad=True)
    ty = torch.nn.functional.local_response_norm(t, size, alpha=0.3, beta=0.75, k=2.0)
    ty.backward(torch.tensor(dy_cf, device="cuda"))
    assert rel_err(unlay(cp.asnumpy(y)), ty.detach().cpu().numpy()) <= 1e-5
    assert rel_err(unlay(cp.asnumpy(dx)), t.grad.cpu().numpy()) <= 1e-4

    y_ref = lrn_forward(lay(x_cf), desc, layout=layout)
    dx_ref = lrn_backward(lay(x_cf), y_ref, lay(dy_cf), desc, layout=layout)
    assert rel_err(cp.asnumpy(y), y_ref) <= 1e-5
    assert rel_err(cp.asnumpy(dx), dx_ref) <= 1e-4


def test_alpha_beta_blend(cp):
    from minidl.primitives import LRNDescriptor, lrn_backward, lrn_forward

    rng = np.random.default_rng(8)
    x = cp.asarray(rng.standard_normal((2, 7, 5, 3)).astype(np.float32))
    dy = cp.asarray(rng.standard_normal((2, 7, 5, 3)).astype(np.float32))
    desc = LRNDescriptor(3, alpha=0.5)
    y_plain = cp.asnumpy(lrn_forward(x, desc))
    prior = rng.standard_normal(x.shape).astype(np.float32)
    out = cp.asarray(prior)
    lrn_forward(x, desc, alpha=2.0, beta=0.5, out=out)
    assert rel_err(cp.asnumpy(out), 2.0 * y_plain + 0.5 * prior) <= 1e-6

    y = cp.asarray(y_plain)
    dx_plain = cp.asnumpy(lrn_backward(x, y, dy, desc))
    out = cp.asarray(prior)
    lrn_backward(x, y, dy, desc, alpha=-1.0, beta=1.0, out=out)
    assert rel_err(cp.asnumpy(out), -dx_plain + prior) <= 1e-6
