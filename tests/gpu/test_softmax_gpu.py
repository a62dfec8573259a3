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


# ------------------------------------------------------------------------------------------------
# The fused cross-entropy (cross_entropy_forward_warp / _strided, cross_entropy_reduce, cross_entropy_backward)
# against the NumPy reference computed in float64 from the same float32 inputs.
# ------------------------------------------------------------------------------------------------

CE_CASES = [   # shape; warp kernel for (N, C) with C below, at and far above the 32 lanes; a block per row from
    # 1024 classes (float4 where C % 4 == 0: 2048, 10000; one by one: 1027); strided for (N, C, d...)
    (37, 10), (5, 2), (9, 32), (64, 33), (6, 1000), (7, 1027), (3, 2048), (12, 10000), (4, 7, 13), (3, 5, 2, 129),
    (2, 300, 3),
]


@pytest.mark.parametrize("shape", CE_CASES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted,eps", [(False, 0.0), (True, 0.0), (True, 0.25)])
def test_cross_entropy_kernels_match_reference(cp, shape, reduction, weighted, eps):
    from minidl.primitives import cross_entropy_backward, cross_entropy_forward

    rng = np.random.default_rng(sum(shape) + 7 * weighted)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    t = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    t.flat[0] = -100                      # ignored
    w = rng.uniform(0.2, 2.0, shape[1]).astype(np.float32) if weighted else None
    loss, stats, denom = cross_entropy_forward(cp.asarray(x), cp.asarray(t), None if w is None else cp.asarray(w),
                                               reduction=reduction, label_smoothing=eps)
    g = rng.standard_normal(loss.shape).astype(np.float32)
    dx = cross_entropy_backward(cp.asarray(x), cp.asarray(t), stats, cp.asarray(g), denom,
                                None if w is None else cp.asarray(w), reduction=reduction, label_smoothing=eps)
    x64, w64 = x.astype(np.float64), None if w is None else w.astype(np.float64)
    ref_loss, ref_stats, ref_denom = cross_entropy_forward(x64, t, w64, reduction=reduction, label_smoothing=eps)
    ref_dx = cross_entropy_backward(x64, t, ref_stats, g.astype(np.float64), ref_denom, w64, reduction=reduction,
                                    label_smoothing=eps)
    assert loss.dtype == cp.float32 and dx.dtype == cp.float32 and dx.shape == x.shape
    assert rel_err(cp.asnumpy(loss), ref_loss) <= 5e-6
    assert rel_err(cp.asnumpy(dx), ref_dx) <= 5e-6
    assert abs(float(denom) - float(ref_denom)) <= 1e-5 * float(ref_denom)


@pytest.mark.parametrize("C", [6, 1500])   # the warp kernel, a block per row
def test_cross_entropy_kernel_out_of_range_rows_are_nan(cp, C):
    from minidl.primitives import cross_entropy_backward, cross_entropy_forward

    x = cp.asarray(np.random.default_rng(0).standard_normal((4, C)).astype(np.float32))
    t = cp.asarray(np.array([2, C, -100, -1]))
    loss, stats, denom = cross_entropy_forward(x, t, reduction="none")
    dx = cp.asnumpy(cross_entropy_backward(x, t, stats, cp.ones(4, dtype=cp.float32), denom, reduction="none"))
    loss = cp.asnumpy(loss)
    assert np.isfinite(loss[0]) and np.isnan(loss[1]) and loss[2] == 0 and np.isnan(loss[3])
    assert np.isfinite(dx[0]).all() and np.isnan(dx[1]).all() and (dx[2] == 0).all() and np.isnan(dx[3]).all()
    mean, _, denom = cross_entropy_forward(x, cp.asarray(np.array([2, 1, -100, 0])))
    assert float(denom) == 3.0


def test_cross_entropy_block_kernels_on_misaligned_rows(cp):
    """Rows that do not start 16-byte aligned (a contiguous array 4 bytes into its allocation) take the block
    kernels' one-by-one path: the same values as the aligned copy's float4 path."""
    from minidl.primitives import cross_entropy_backward, cross_entropy_forward

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((9, 4096)) * 2).astype(np.float32)
    t = cp.asarray(rng.integers(0, 4096, 9))
    buf = cp.empty(x.size + 1, dtype=cp.float32)
    shifted = buf[1:].reshape(x.shape)
    shifted[...] = cp.asarray(x)
    assert shifted.flags.c_contiguous and shifted.data.ptr % 16 != 0
    results = []
    for xs in (cp.asarray(x), shifted):
        loss, stats, denom = cross_entropy_forward(xs, t, label_smoothing=0.1)
        dx = cross_entropy_backward(xs, t, stats, cp.asarray(np.float32(1.0)), denom, label_smoothing=0.1)
        results.append((float(loss), cp.asnumpy(dx)))
    assert abs(results[0][0] - results[1][0]) <= 1e-6 * abs(results[0][0])
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("shape", [(20000, 10), (300, 10000)])
def test_cross_entropy_kernel_is_deterministic(cp, shape):
    from minidl.primitives import cross_entropy_forward

    rng = np.random.default_rng(3)
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    t = cp.asarray(rng.integers(0, shape[1], shape[0]))
    first = [cp.asnumpy(cross_entropy_forward(x, t)[0]) for _ in range(3)]
    assert all(np.array_equal(first[0], f) for f in first[1:])


@pytest.mark.parametrize("shape", [(128, 10), (32 * 35, 10000), (4, 21, 8, 8)])
def test_cross_entropy_framework_vs_torch_cuda(cp, torch, shape):
    """F.cross_entropy on a CUDA tensor (the fused kernels) against torch's on the GPU, loss and dx."""
    import minidl
    import minidl.nn.functional as F

    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    t = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    xm = minidl.tensor(x, requires_grad=True, device="cuda")
    loss = F.cross_entropy(xm, minidl.tensor(t, device="cuda"), label_smoothing=0.1)
    loss.backward()
    xt = torch.tensor(x, requires_grad=True, device="cuda")
    lt = torch.nn.functional.cross_entropy(xt, torch.tensor(t, device="cuda"), label_smoothing=0.1)
    lt.backward()
    assert abs(float(loss.item()) - float(lt.item())) <= 1e-5 * abs(float(lt.item()))
    assert rel_err(xm.grad.cpu().numpy(), xt.grad.cpu().numpy()) <= 1e-5


def test_cross_entropy_float64_on_the_gpu_runs_the_reference(cp):
    from minidl.primitives import cross_entropy_backward, cross_entropy_forward

    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 5))
    t = rng.integers(0, 5, 6)
    loss, stats, denom = cross_entropy_forward(cp.asarray(x), cp.asarray(t), label_smoothing=0.1)
    dx = cross_entropy_backward(cp.asarray(x), cp.asarray(t), stats, cp.asarray(1.0), denom, label_smoothing=0.1)
    ref_loss, ref_stats, ref_denom = cross_entropy_forward(x, t, label_smoothing=0.1)
    ref_dx = cross_entropy_backward(x, t, ref_stats, np.float64(1.0), ref_denom, label_smoothing=0.1)
    assert loss.dtype == cp.float64 and rel_err(cp.asnumpy(loss), ref_loss) <= 1e-12
    assert rel_err(cp.asnumpy(dx), ref_dx) <= 1e-12


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(37, 10), (64, 33), (7, 1027), (12, 10000), (4, 7, 13), (2, 300, 3)])
@pytest.mark.parametrize("eps", [0.0, 0.25])
def test_cross_entropy_kernels_read_16bit_logits(cp, dtype, shape, eps):
    """16-bit logits go to the kernels as they are (warp, block with and without 4-wide loads, strided), read in
    float32: the loss and stats of the float32 kernels on the widened logits, bit for bit, and the gradient
    they give rounded once to the logits' dtype."""
    from minidl._dtypes import bfloat16
    from minidl.primitives import cross_entropy_backward, cross_entropy_forward

    half = np.float16 if dtype == "float16" else bfloat16
    rng = np.random.default_rng(sum(shape))
    x16 = (rng.standard_normal(shape) * 3).astype(half)
    t = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    t.flat[0] = -100
    g = np.float32(0.7)
    loss16, stats16, denom16 = cross_entropy_forward(cp.asarray(x16), cp.asarray(t), label_smoothing=eps,
                                                     loss_dtype=np.float32)
    dx16 = cross_entropy_backward(cp.asarray(x16), cp.asarray(t), stats16, cp.asarray(g), denom16, label_smoothing=eps)
    x32 = cp.asarray(x16.astype(np.float32))
    loss, stats, denom = cross_entropy_forward(x32, cp.asarray(t), label_smoothing=eps)
    dx = cross_entropy_backward(x32, cp.asarray(t), stats, cp.asarray(g), denom, label_smoothing=eps)
    assert loss16.dtype == np.float32 and dx16.dtype == half and dx16.shape == shape
    np.testing.assert_array_equal(cp.asnumpy(loss16), cp.asnumpy(loss))
    np.testing.assert_array_equal(cp.asnumpy(stats16), cp.asnumpy(stats))
    np.testing.assert_array_equal(cp.asnumpy(dx16).astype(np.float32), cp.asnumpy(dx).astype(half).astype(np.float32))
    default16 = cross_entropy_forward(cp.asarray(x16), cp.asarray(t), label_smoothing=eps)[0]   # x's dtype by default
    assert default16.dtype == half


@pytest.mark.parametrize("amp_dtype", ["float16", "bfloat16"])
def test_cross_entropy_under_autocast_reads_16bit_logits(cp, amp_dtype):
    """F.cross_entropy under autocast on 16-bit CUDA logits (class indices, no weight): a float32 loss and a 16-bit
    gradient, the values of the float32 computation on the widened logits (what autocast's cast gave), and no cast
    of the logits on the way (the logits' tensor reaches the op itself)."""
    import minidl
    import minidl.nn.functional as F

    dtype = getattr(minidl, amp_dtype)
    rng = np.random.default_rng(2)
    x = minidl.tensor(rng.standard_normal((70, 1500)).astype(np.float32), device="cuda").to(dtype)
    x.requires_grad_(True)
    t = minidl.tensor(rng.integers(0, 1500, 70), device="cuda")
    with minidl.autocast("cuda", dtype=dtype):
        loss = F.cross_entropy(x, t, label_smoothing=0.1)
    assert loss.dtype == minidl.float32 and loss.grad_fn.inputs[0] is x   # the logits themselves, no cast between
    loss.backward()
    assert x.grad.dtype == dtype
    xf = x.detach().float().requires_grad_(True)
    ref = F.cross_entropy(xf, t, label_smoothing=0.1)
    ref.backward()
    assert float(loss.item()) == float(ref.item())
    np.testing.assert_array_equal(x.grad.float().cpu().numpy(), xf.grad.to(dtype).float().cpu().numpy())
