"""GPU pooling (kernels/pooling.cu) against torch on the GPU and the NumPy reference."""
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


def to_layout(a, layout):
    """A channels-first NumPy array in the given layout (C-contiguous)."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if layout == "NHWC" else a


def from_layout(a, layout):
    return np.moveaxis(a, -1, 1) if layout == "NHWC" else a


def torch_pool(torch, t, mode, dims, k, s, p, ceil_mode):
    F = torch.nn.functional
    if mode == "max":
        return getattr(F, f"max_pool{dims}d")(t, k, s, p, ceil_mode=ceil_mode)
    return getattr(F, f"avg_pool{dims}d")(t, k, s, p, ceil_mode=ceil_mode,
                                          count_include_pad=(mode == "avg_include_pad"))


# (channels-first shape, kernel, stride, padding, ceil_mode): odd sizes, overlapping windows,
# padding, ceil mode with a partial last window, 1-D, 2-D and 3-D.
CASES = [
    ((2, 3, 13, 11), (2, 2), (2, 2), (0, 0), False),
    ((2, 3, 12, 16), (2, 2), (2, 2), (0, 0), False),  # NCHW: the 2x2 / stride 2 fast path
    ((2, 5, 13, 11), (3, 3), (2, 2), (1, 1), True),
    ((3, 4, 9, 10), (3, 2), (1, 2), (1, 0), False),
    ((2, 3, 17), (4,), (3,), (2,), True),
    ((2, 3, 7, 8, 9), (3, 2, 3), (2, 2, 2), (1, 0, 1), True),
]


@pytest.mark.parametrize("shape,k,s,p,ceil_mode", CASES)
@pytest.mark.parametrize("mode", ["max", "avg_include_pad", "avg_exclude_pad"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_forward_backward_match_torch(cp, torch, shape, k, s, p, ceil_mode, mode, layout):
    from minidl.primitives import PoolingDescriptor, pooling_backward, pooling_forward, pooling_output_shape

    rng = np.random.default_rng(sum(shape))
    x_cf = rng.standard_normal(shape).astype(np.float32)
    desc = PoolingDescriptor(mode, k, s, p, ceil_mode, spatial_dims=len(k))
    x_host = to_layout(x_cf, layout)
    y_shape = pooling_output_shape(x_host.shape, desc, layout)
    dy_host = rng.standard_normal(y_shape).astype(np.float32)
    x, dy = cp.asarray(x_host), cp.asarray(dy_host)

    y = cp.full(y_shape, cp.nan, dtype=cp.float32)
    pooling_forward(x, desc, layout=layout, out=y)
    dx = cp.full(x.shape, cp.nan, dtype=cp.float32)
    pooling_backward(x, y, dy, desc, layout=layout, out=dx)

    t = torch.tensor(x_cf, device="cuda", requires_grad=True)
    ty = torch_pool(torch, t, mode, len(k), k, s, p, ceil_mode)
    ty.backward(torch.tensor(np.ascontiguousarray(from_layout(dy_host, layout)), device="cuda"))
    assert rel_err(from_layout(cp.asnumpy(y), layout), ty.detach().cpu().numpy()) <= 1e-5
    assert rel_err(from_layout(cp.asnumpy(dx), layout), t.grad.cpu().numpy()) <= 1e-5

    y_ref = pooling_forward(x_host, desc, layout=layout)
    dx_ref = pooling_backward(x_host, y_ref, dy_host, desc, layout=layout)
    assert rel_err(cp.asnumpy(y), y_ref) <= 1e-5
    assert rel_err(cp.asnumpy(dx), dx_ref) <= 1e-5


# (shape, fast backward too): H even -> both directions; H odd -> the forward only (the last row is in
# no window, so the backward stays generic); tiny shapes; 1 output pair per row.
K2S2_SHAPES = [((2, 3, 12, 16), True), ((2, 3, 13, 8), False), ((3, 2, 6, 4), True), ((1, 1, 2, 4), True)]


@pytest.mark.parametrize("shape,fast_backward", K2S2_SHAPES)
@pytest.mark.parametrize("mode", ["max", "avg_include_pad", "avg_exclude_pad"])
def test_k2s2_fast_path_equals_generic_kernels(cp, monkeypatch, shape, fast_backward, mode):
    """pooling_forward_k2s2 / pooling_backward_k2s2 give the generic kernels' results exactly (ties, NaN
    and -inf included), and the same alpha/beta blend."""
    from minidl.primitives import PoolingDescriptor, pooling_backward, pooling_forward, pooling_output_shape
    from minidl.primitives.cuda import pooling as launcher

    rng = np.random.default_rng(sum(shape))
    x_host = rng.integers(-2, 3, size=shape).astype(np.float32)  # small integers: many ties
    x_host[rng.random(shape) < 0.05] = np.nan
    x_host[rng.random(shape) < 0.05] = -np.inf
    x_host[..., 0, 0] = np.nan                      # a window with a NaN in every image ...
    x_host[..., 0:2, -2:] = [[1.0, 2.0], [2.0, 0.0]]  # ... and a finite one, with a tie
    desc = PoolingDescriptor(mode, 2, 2, 0)
    y_shape = pooling_output_shape(shape, desc, "NCHW")
    dy_host = rng.standard_normal(y_shape).astype(np.float32)
    x, dy = cp.asarray(x_host), cp.asarray(dy_host)
    y_prior = rng.standard_normal(y_shape).astype(np.float32)
    dx_prior = rng.standard_normal(shape).astype(np.float32)
    assert launcher.uses_k2s2(shape, y_shape, desc, "NCHW", arrays=(x,))
    assert launcher.uses_k2s2(shape, y_shape, desc, "NCHW", backward=True, arrays=(x, dy)) == fast_backward

    def run():
        y = pooling_forward(x, desc)
        dx = pooling_backward(x, None, dy, desc)
        y_blend = pooling_forward(x, desc, alpha=-0.5, beta=2.0, out=cp.asarray(y_prior))
        dx_blend = pooling_backward(x, None, dy, desc, alpha=2.0, beta=-1.0, out=cp.asarray(dx_prior))
        return [cp.asnumpy(a) for a in (y, dx, y_blend, dx_blend)]

    fast = run()
    monkeypatch.setattr(launcher, "USE_K2S2", False)
    generic = run()
    for name, a, b in zip(("y", "dx"), fast[:2], generic[:2]):
        np.testing.assert_array_equal(a, b, err_msg=name)
    # the blend alpha * r + beta * prior may be contracted into an FMA differently in the two kernels
    for name, a, b in zip(("y blended", "dx blended"), fast[2:], generic[2:]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=name)
    assert np.isnan(fast[0]).any() and np.isfinite(fast[0]).any()  # the data did exercise both


def test_k2s2_not_taken_where_it_does_not_apply(cp):
    from minidl.primitives import PoolingDescriptor, pooling_output_shape
    from minidl.primitives.cuda import pooling as launcher

    def uses(shape, desc, layout="NCHW"):
        return launcher.uses_k2s2(shape, pooling_output_shape(shape, desc, layout), desc, layout)

    assert uses((2, 3, 8, 8), PoolingDescriptor("max", 2, 2, 0))
    assert not uses((2, 3, 8, 10), PoolingDescriptor("max", 2, 2, 0))          # W not a multiple of 4
    assert not uses((2, 8, 8, 3), PoolingDescriptor("max", 2, 2, 0), "NHWC")  # channels last
    assert not uses((2, 3, 8, 8), PoolingDescriptor("max", 2, 2, 1))          # padding
    assert not uses((2, 3, 8, 8), PoolingDescriptor("max", 3, 2, 0))          # 3x3 window
    assert not uses((2, 3, 8, 8), PoolingDescriptor("max", 2, 1, 0))          # stride 1
    assert not uses((2, 3, 9, 8), PoolingDescriptor("max", 2, 2, 0, ceil_mode=True))  # a clipped last window
    assert not uses((2, 3, 8, 8, 8), PoolingDescriptor("max", 2, 2, 0, spatial_dims=3))  # 3-D
    x = cp.zeros(2 * 3 * 8 * 8 + 1, dtype=cp.float32)[1:].reshape(2, 3, 8, 8)  # 4-byte aligned only
    assert not launcher.uses_k2s2(x.shape, (2, 3, 4, 4), PoolingDescriptor("max", 2, 2, 0), "NCHW", arrays=(x,))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_max_backward_ties_first_max_wins(cp, layout):
    """Many equal values: the gradient of each window goes to its first maximum (the reference's rule)."""
    from minidl.primitives import PoolingDescriptor, pooling_backward, pooling_forward

    rng = np.random.default_rng(6)
    x_host = to_layout(rng.integers(0, 3, size=(2, 3, 9, 8)).astype(np.float32), layout)
    desc = PoolingDescriptor("max", 3, 1, 1)  # overlapping windows: several outputs per input
    y_ref = pooling_forward(x_host, desc, layout=layout)
    dy_host = rng.standard_normal(y_ref.shape).astype(np.float32)
    dx_ref = pooling_backward(x_host, y_ref, dy_host, desc, layout=layout)
    dx = pooling_backward(cp.asarray(x_host), cp.asarray(y_ref), cp.asarray(dy_host), desc, layout=layout)
    assert rel_err(cp.asnumpy(dx), dx_ref) <= 1e-6


def test_alpha_beta_blend(cp):
    from minidl.primitives import PoolingDescriptor, pooling_backward, pooling_forward

    rng = np.random.default_rng(7)
    x = cp.asarray(rng.standard_normal((2, 3, 10, 9)).astype(np.float32))
    desc = PoolingDescriptor("avg_exclude_pad", 3, 2, 1, True)
    y_plain = cp.asnumpy(pooling_forward(x, desc))
    prior = rng.standard_normal(y_plain.shape).astype(np.float32)
    out = cp.asarray(prior)
    pooling_forward(x, desc, alpha=-0.5, beta=2.0, out=out)
    assert rel_err(cp.asnumpy(out), -0.5 * y_plain + 2.0 * prior) <= 1e-6

    dy = cp.asarray(rng.standard_normal(y_plain.shape).astype(np.float32))
    dx_plain = cp.asnumpy(pooling_backward(x, None, dy, desc))
    prior = rng.standard_normal(x.shape).astype(np.float32)
    out = cp.asarray(prior)
    pooling_backward(x, None, dy, desc, alpha=2.0, beta=-1.0, out=out)
    assert rel_err(cp.asnumpy(out), 2.0 * dx_plain - prior) <= 1e-6


@pytest.mark.parametrize("shape,output_size", [((2, 3, 13, 11), (3, 5)), ((2, 4, 10, 7), (10, 7)),
                                               ((3, 2, 19), (4,)), ((1, 3, 5, 7, 6), (2, 3, 4)),
                                               ((2, 6, 7, 9), (1, 1))])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_adaptive_avg_matches_torch(cp, torch, shape, output_size, layout):
    from minidl.primitives import adaptive_avg_pooling_backward, adaptive_avg_pooling_forward

    rng = np.random.default_rng(sum(shape) + len(output_size))
    x_cf = rng.standard_normal(shape).astype(np.float32)
    x_host = to_layout(x_cf, layout)
    dims = len(output_size)
    t = torch.tensor(x_cf, device="cuda", requires_grad=True)
    ty = getattr(torch.nn.functional, f"adaptive_avg_pool{dims}d")(t, output_size)
    dy_cf = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    ty.backward(torch.tensor(dy_cf, device="cuda"))
    dy_host = to_layout(dy_cf, layout)

    y = cp.full(dy_host.shape, cp.nan, dtype=cp.float32)
    adaptive_avg_pooling_forward(cp.asarray(x_host), output_size, layout=layout, out=y)
    dx = cp.full(x_host.shape, cp.nan, dtype=cp.float32)
    adaptive_avg_pooling_backward(cp.asarray(dy_host), x_host.shape, output_size, layout=layout, out=dx)
    assert rel_err(from_layout(cp.asnumpy(y), layout), ty.detach().cpu().numpy()) <= 1e-5
    assert rel_err(from_layout(cp.asnumpy(dx), layout), t.grad.cpu().numpy()) <= 1e-5

    y_ref = adaptive_avg_pooling_forward(x_host, output_size, layout=layout)
    assert rel_err(cp.asnumpy(y), y_ref) <= 1e-5


# Dilated max pooling, max pooling with indices and max unpooling (kernels/pooling.cu, written
# without a GPU at hand: these are their first test). (channels-first shape, kernel, stride, padding,
# dilation, ceil_mode): 1-D, 2-D and 3-D, dilations that skip cells, padding, ceil mode.
DILATED = [
    ((2, 3, 13, 11), (3, 3), (2, 2), (1, 1), (2, 2), False),
    ((2, 3, 12, 16), (2, 2), (2, 2), (0, 0), (2, 3), True),   # a 2x2/s2 shape, but dilated: never k2s2
    ((3, 2, 19), (4,), (2,), (2,), (3,), True),
    ((2, 2, 7, 9, 8), (2, 3, 2), (1, 2, 2), (1, 1, 0), (3, 2, 2), False),
]


@pytest.mark.parametrize("shape,k,s,p,d,ceil_mode", DILATED)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_dilated_max_pooling_and_indices_match_torch(cp, torch, shape, k, s, p, d, ceil_mode, layout):
    from minidl.primitives import (PoolingDescriptor, max_pooling_forward_with_indices, pooling_backward,
                                   pooling_forward, pooling_output_shape)

    rng = np.random.default_rng(sum(shape))
    x_cf = rng.standard_normal(shape).astype(np.float32)
    desc = PoolingDescriptor("max", k, s, p, ceil_mode, spatial_dims=len(k), dilation=d)
    x_host = to_layout(x_cf, layout)
    y_shape = pooling_output_shape(x_host.shape, desc, layout)
    dy_host = rng.standard_normal(y_shape).astype(np.float32)
    x, dy = cp.asarray(x_host), cp.asarray(dy_host)
    y = cp.full(y_shape, cp.nan, dtype=cp.float32)
    pooling_forward(x, desc, layout=layout, out=y)
    dx = cp.full(x.shape, cp.nan, dtype=cp.float32)
    pooling_backward(x, y, dy, desc, layout=layout, out=dx)
    y_i, idx = max_pooling_forward_with_indices(x, desc, layout=layout)

    t = torch.tensor(x_cf, device="cuda", requires_grad=True)
    pool = getattr(torch.nn.functional, f"max_pool{len(k)}d")
    ty, tidx = pool(t, k, s, p, d, ceil_mode=ceil_mode, return_indices=True)
    ty.backward(torch.tensor(np.ascontiguousarray(from_layout(dy_host, layout)), device="cuda"))
    assert rel_err(from_layout(cp.asnumpy(y), layout), ty.detach().cpu().numpy()) <= 1e-5
    assert rel_err(from_layout(cp.asnumpy(dx), layout), t.grad.cpu().numpy()) <= 1e-5
    np.testing.assert_array_equal(cp.asnumpy(y_i), cp.asnumpy(y))
    np.testing.assert_array_equal(from_layout(cp.asnumpy(idx), layout), tidx.cpu().numpy())

    y_ref, idx_ref = max_pooling_forward_with_indices(x_host, desc, layout=layout)
    np.testing.assert_array_equal(cp.asnumpy(idx), idx_ref)
    assert rel_err(cp.asnumpy(dx), pooling_backward(x_host, y_ref, dy_host, desc, layout=layout)) <= 1e-5


@pytest.mark.parametrize("shape,k,s,p", [((2, 3, 8, 10), (2, 2), (2, 2), (0, 0)), ((2, 3, 9), (3,), (2,), (1,)),
                                         ((1, 2, 5, 6, 7), (2, 2, 3), (2, 2, 2), (1, 0, 1))])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_max_unpooling_matches_torch_and_reference(cp, torch, shape, k, s, p, layout):
    from minidl.primitives import (PoolingDescriptor, max_pooling_forward_with_indices, max_unpooling_backward,
                                   max_unpooling_forward)

    rng = np.random.default_rng(7)
    x_cf = rng.standard_normal(shape).astype(np.float32)
    desc = PoolingDescriptor("max", k, s, p, spatial_dims=len(k))
    y_host, idx_host = max_pooling_forward_with_indices(to_layout(x_cf, layout), desc, layout=layout)
    x_spatial = shape[2:]
    unpooled = max_unpooling_forward(cp.asarray(y_host), cp.asarray(idx_host), x_spatial, layout=layout)
    ref = max_unpooling_forward(y_host, idx_host, x_spatial, layout=layout)
    np.testing.assert_array_equal(cp.asnumpy(unpooled), ref)

    unpool = getattr(torch.nn.functional, f"max_unpool{len(k)}d")
    ty = torch.tensor(np.ascontiguousarray(from_layout(y_host, layout)), device="cuda", requires_grad=True)
    tx = unpool(ty, torch.tensor(np.ascontiguousarray(from_layout(idx_host, layout)), device="cuda"), k, s, p,
                output_size=x_spatial)
    np.testing.assert_array_equal(from_layout(cp.asnumpy(unpooled), layout), tx.detach().cpu().numpy())

    g_host = to_layout(rng.standard_normal(tx.shape).astype(np.float32), layout)
    dy = max_unpooling_backward(cp.asarray(g_host), cp.asarray(idx_host), layout=layout)
    tx.backward(torch.tensor(np.ascontiguousarray(from_layout(g_host, layout)), device="cuda"))
    np.testing.assert_array_equal(from_layout(cp.asnumpy(dy), layout), ty.grad.cpu().numpy())
    np.testing.assert_array_equal(cp.asnumpy(dy), max_unpooling_backward(g_host, idx_host, layout=layout))


def test_dilated_max_pooling_never_takes_the_k2s2_path(cp):
    from minidl.primitives import PoolingDescriptor, pooling_output_shape
    from minidl.primitives.cuda import pooling as launcher

    x = cp.zeros((2, 3, 16, 16), dtype=cp.float32)
    desc = PoolingDescriptor("max", 2, 2, 0, dilation=2)
    assert not launcher.uses_k2s2(x.shape, pooling_output_shape(x.shape, desc), desc, "NCHW", arrays=(x,))


@pytest.mark.parametrize("k2s2", [True, False])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_max_pooling_with_several_nans_picks_the_last_nan_as_torch(cp, torch, monkeypatch, k2s2, layout):
    """A window holding several NaNs: the maximum is NaN, its index the last NaN in scan order and the
    gradient goes there (PyTorch's rule on CPU and GPU; the NumPy reference's), on the 2x2/stride-2
    fast path and on the generic kernels."""
    from minidl.primitives import max_pooling_forward_with_indices, pooling_backward, PoolingDescriptor
    from minidl.primitives.cuda import pooling as launcher

    monkeypatch.setattr(launcher, "USE_K2S2", k2s2)
    rng = np.random.default_rng(11)
    x_cf = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
    x_cf[rng.random(x_cf.shape) < 0.3] = np.nan       # many windows with two or more NaNs
    x_cf[0, 0, 0:2, 0:2] = [[np.nan, 1.0], [np.nan, 5.0]]  # first and third taps: the third wins
    desc = PoolingDescriptor("max", 2, 2, 0)
    x_host = to_layout(x_cf, layout)
    y, idx = max_pooling_forward_with_indices(cp.asarray(x_host), desc, layout=layout)
    y_ref, idx_ref = max_pooling_forward_with_indices(x_host, desc, layout=layout)
    np.testing.assert_array_equal(cp.asnumpy(idx), idx_ref)
    np.testing.assert_array_equal(cp.asnumpy(y), y_ref)   # NaNs in the same places (assert_array_equal: NaN == NaN)

    t = torch.tensor(x_cf, requires_grad=True)            # torch on the CPU: the oracle for the index rule
    ty, tidx = torch.nn.functional.max_pool2d(t, 2, 2, return_indices=True)
    np.testing.assert_array_equal(from_layout(cp.asnumpy(idx), layout), tidx.numpy())
    assert int(tidx[0, 0, 0, 0]) == 8                     # (row 1, col 0) of the 6x8 plane
    dy_host = rng.standard_normal(y_ref.shape).astype(np.float32)
    ty.backward(torch.tensor(np.ascontiguousarray(from_layout(dy_host, layout))))
    dx = pooling_backward(cp.asarray(x_host), y, cp.asarray(dy_host), desc, layout=layout)
    np.testing.assert_array_equal(from_layout(cp.asnumpy(dx), layout), t.grad.numpy())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape,k,s,p,ceil_mode", CASES[:4] + [((2, 3, 12, 16), (2, 2), (2, 2), (0, 0), False)])
@pytest.mark.parametrize("mode", ["max", "avg_include_pad"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_16bit_data_runs_in_the_kernels_and_equals_float32_copies(cp, monkeypatch, dtype, shape, k, s, p, ceil_mode,
                                                                 mode, layout):
    """16-bit x and dy (autocast's convolution outputs): the pooling kernels (generic and the 2x2 / stride 2 fast
    path) read and write the 16-bit data themselves, with no float32 copies, and give the bits of the float32
    kernels on the widened data, rounded once."""
    from minidl import _dtypes
    from minidl.primitives import PoolingDescriptor, _common, pooling_backward, pooling_forward, pooling_output_shape

    dt = _dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(np.float16)
    rng = np.random.default_rng(sum(shape))
    desc = PoolingDescriptor(mode, k, s, p, ceil_mode=ceil_mode)
    x_cf = rng.standard_normal(shape).astype(np.float32).astype(dt)
    x_host = to_layout(x_cf, layout)
    dy_host = rng.standard_normal(pooling_output_shape(x_host.shape, desc, layout)).astype(np.float32).astype(dt)
    results = {}
    for name, x, dy in (("float32", cp.asarray(x_host.astype(np.float32)), cp.asarray(dy_host.astype(np.float32))),
                        ("16-bit", cp.asarray(x_host), cp.asarray(dy_host))):
        if name == "16-bit":
            monkeypatch.setattr(_common, "_half_to_float32", lambda *a: pytest.fail("a float32 copy was made"))
        y = pooling_forward(x, desc, layout=layout)
        dx = pooling_backward(x, y, dy, desc, layout=layout)
        results[name] = [cp.asnumpy(a) for a in (y, dx)]
    for label, got, f32 in zip(("y", "dx"), results["16-bit"], results["float32"]):
        want = f32.astype(dt)
        assert got.dtype == want.dtype and (got.view(np.uint8) == want.view(np.uint8)).all(), label
