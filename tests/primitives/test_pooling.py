"""Pooling (max, average with and without padding, adaptive) against torch, finite differences, errors."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings, strategies as st

from minidl.primitives import (
    PoolingDescriptor,
    adaptive_avg_pooling_backward,
    adaptive_avg_pooling_forward,
    global_avg_pooling_backward,
    global_avg_pooling_forward,
    pooling_backward,
    pooling_forward,
    pooling_output_shape,
)
from tests.conftest import rel_err

MODES = ["max", "avg_include_pad", "avg_exclude_pad"]


def to_last(a):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def to_first(a):
    return np.moveaxis(a, -1, 1)


def torch_pool(x, dy, desc):
    """torch's output and input gradient for an NCHW array x."""
    dims = desc.spatial_dims
    xt = torch.tensor(x, requires_grad=True)
    k, s, p, c = desc.kernel_size, desc.stride, desc.padding, desc.ceil_mode
    if desc.mode == "max":
        yt = getattr(F, f"max_pool{dims}d")(xt, k, s, p, ceil_mode=c)
    else:
        yt = getattr(F, f"avg_pool{dims}d")(xt, k, s, p, c, desc.mode == "avg_include_pad")
    yt.backward(torch.tensor(dy))
    return yt.detach().numpy(), xt.grad.numpy()


def check_against_torch(x, desc, layout, rng, tol):
    """Run minidl in `layout` on the NCHW array x and compare with torch."""
    y_shape = pooling_output_shape(x.shape, desc)
    dy = rng.standard_normal(y_shape).astype(x.dtype)
    y_ref, dx_ref = torch_pool(x, dy, desc)
    if layout == "NHWC":
        y = pooling_forward(to_last(x), desc, layout="NHWC")
        assert y.shape == to_last(y_ref).shape
        dx = pooling_backward(to_last(x), y, to_last(dy), desc, layout="NHWC")
        y, dx = to_first(y), to_first(dx)
    else:
        y = pooling_forward(x, desc)
        dx = pooling_backward(x, y, dy, desc)
    assert y.dtype == x.dtype and dx.dtype == x.dtype
    assert y.shape == y_ref.shape and dx.shape == x.shape
    assert rel_err(y, y_ref) <= tol
    assert rel_err(dx, dx_ref) <= tol


CASES = [  # (input NCHW shape, kernel, stride, padding)
    ((2, 3, 11), 3, 2, 1),
    ((2, 3, 9, 10), (3, 2), (2, 1), (1, 1)),
    ((1, 2, 5, 6, 7), (2, 3, 3), (2, 2, 1), (1, 0, 1)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=["1d", "2d", "3d"])
def test_against_torch(case, mode, ceil_mode, layout, dtype, rng):
    shape, k, s, p = case
    desc = PoolingDescriptor(mode, k, s, p, ceil_mode, spatial_dims=len(shape) - 2)
    x = rng.standard_normal(shape).astype(dtype)
    check_against_torch(x, desc, layout, rng, 1e-5 if dtype == np.float32 else 1e-12)


@settings(max_examples=40, deadline=None)
@given(
    dims=st.integers(1, 3),
    data=st.data(),
    mode=st.sampled_from(MODES),
    ceil_mode=st.booleans(),
    layout=st.sampled_from(["NCHW", "NHWC"]),
    seed=st.integers(0, 2**31),
)
def test_random_parameters(dims, data, mode, ceil_mode, layout, seed):
    kernel = tuple(data.draw(st.integers(1, 4)) for _ in range(dims))
    stride = tuple(data.draw(st.integers(1, 3)) for _ in range(dims))
    padding = tuple(data.draw(st.integers(0, k // 2)) for k in kernel)
    sizes = tuple(data.draw(st.integers(1, 9 if dims < 3 else 6)) for _ in range(dims))
    desc = PoolingDescriptor(mode, kernel, stride, padding, ceil_mode)
    shape = (2, 3) + sizes
    assume(all(s >= 1 for s in pooling_output_shape(shape, desc)[2:]))
    if dims == 3 and mode != "max":
        # torch's avg_pool3d also rejects an unpadded input smaller than the kernel (minidl pools it).
        assume(all(L >= k for L, k in zip(sizes, kernel)))
    rng = np.random.default_rng(seed)
    check_against_torch(rng.standard_normal(shape), desc, layout, rng, 1e-12)


@pytest.mark.parametrize("shape, kernel, stride, padding", [((2, 2, 7, 8), 3, 1, 1), ((2, 3, 13), 4, 2, 2)])
def test_max_ties_first_maximum_wins(shape, kernel, stride, padding, rng):
    # Few distinct values: most windows hold several maxima; torch routes the gradient to the first.
    x = rng.integers(0, 3, size=shape).astype(np.float64)
    desc = PoolingDescriptor("max", kernel, stride, padding, spatial_dims=len(shape) - 2)
    check_against_torch(x, desc, "NCHW", rng, 1e-14)


def test_ceil_mode_drops_a_window_starting_in_right_padding():
    # L=6, k=2, s=2, p=1: ceil((6+2-2)/2)+1 = 4, but window 3 would start at 6 = L+p-1+1: dropped.
    desc = PoolingDescriptor("max", 2, 2, 1, ceil_mode=True, spatial_dims=1)
    assert pooling_output_shape((1, 1, 6), desc) == (1, 1, 4)
    assert F.max_pool1d(torch.zeros(1, 1, 6), 2, 2, 1, ceil_mode=True).shape == (1, 1, 4)
    desc = PoolingDescriptor("max", 3, 2, 0, ceil_mode=True, spatial_dims=1)
    assert pooling_output_shape((1, 1, 6), desc) == tuple(F.max_pool1d(torch.zeros(1, 1, 6), 3, 2, ceil_mode=True).shape)


def numeric_grad(f, x, dy, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (np.sum(f(xp) * dy) - np.sum(f(xm) * dy)) / (2 * eps)
    return g


@pytest.mark.parametrize("mode", MODES)
def test_finite_differences(mode, rng):
    x = rng.standard_normal((1, 2, 5, 6))
    desc = PoolingDescriptor(mode, (3, 2), (2, 2), (1, 1), ceil_mode=True)
    y = pooling_forward(x, desc)
    dy = rng.standard_normal(y.shape)
    dx = pooling_backward(x, y, dy, desc)
    assert rel_err(dx, numeric_grad(lambda a: pooling_forward(a, desc), x, dy)) <= 1e-6


# ----------------------------------------------------------------------------------------------
# Adaptive and global average pooling
# ----------------------------------------------------------------------------------------------


def torch_adaptive(x, dy, output_size):
    xt = torch.tensor(x, requires_grad=True)
    yt = getattr(F, f"adaptive_avg_pool{x.ndim - 2}d")(xt, output_size)
    yt.backward(torch.tensor(dy))
    return yt.detach().numpy(), xt.grad.numpy()


@settings(max_examples=30, deadline=None)
@given(
    dims=st.integers(1, 3),
    data=st.data(),
    layout=st.sampled_from(["NCHW", "NHWC"]),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**31),
)
def test_adaptive_against_torch(dims, data, layout, dtype, seed):
    sizes = tuple(data.draw(st.integers(1, 9)) for _ in range(dims))
    output_size = tuple(data.draw(st.integers(1, 9)) for _ in range(dims))  # may exceed the input
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3) + sizes).astype(dtype)
    dy = rng.standard_normal((2, 3) + output_size).astype(dtype)
    y_ref, dx_ref = torch_adaptive(x, dy, output_size)
    if layout == "NHWC":
        y = to_first(adaptive_avg_pooling_forward(to_last(x), output_size, layout="NHWC"))
        dx = to_first(adaptive_avg_pooling_backward(to_last(dy), to_last(x).shape, output_size, layout="NHWC"))
    else:
        y = adaptive_avg_pooling_forward(x, output_size)
        dx = adaptive_avg_pooling_backward(dy, x.shape, output_size)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert y.dtype == dtype and dx.dtype == dtype
    assert rel_err(y, y_ref) <= tol
    assert rel_err(dx, dx_ref) <= tol


def test_global_average(rng):
    x = rng.standard_normal((2, 3, 5, 7))
    y = global_avg_pooling_forward(x)
    assert y.shape == (2, 3, 1, 1)
    assert rel_err(y[:, :, 0, 0], x.mean(axis=(2, 3))) <= 1e-14
    dy = rng.standard_normal((2, 3, 1, 1))
    dx = global_avg_pooling_backward(dy, x.shape)
    assert rel_err(dx, np.broadcast_to(dy / 35, x.shape)) <= 1e-14


def test_adaptive_finite_differences(rng):
    x = rng.standard_normal((1, 2, 7, 5))
    dy = rng.standard_normal((1, 2, 3, 4))
    dx = adaptive_avg_pooling_backward(dy, x.shape, (3, 4))
    assert rel_err(dx, numeric_grad(lambda a: adaptive_avg_pooling_forward(a, (3, 4)), x, dy)) <= 1e-6


def test_alpha_beta_blending(rng):
    x = rng.standard_normal((2, 3, 6, 6))
    desc = PoolingDescriptor("avg_include_pad", 2)
    prior = rng.standard_normal((2, 3, 3, 3))
    out = prior.copy()
    pooling_forward(x, desc, alpha=2.0, beta=-0.5, out=out)
    assert rel_err(out, 2.0 * pooling_forward(x, desc) - 0.5 * prior) <= 1e-14
    dy = rng.standard_normal((2, 3, 3, 3))
    prior_dx = rng.standard_normal(x.shape)
    out = prior_dx.copy()
    pooling_backward(x, None, dy, desc, alpha=1.0, beta=1.0, out=out)
    assert rel_err(out, pooling_backward(x, None, dy, desc) + prior_dx) <= 1e-14


def test_errors():
    x = np.ones((2, 3, 8, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="PoolingDescriptor: unknown mode 'min'"):
        PoolingDescriptor("min", 2)
    with pytest.raises(ValueError, match=r"padding \(2, 2\) must be at most half the kernel \(3, 3\)"):
        PoolingDescriptor("max", 3, 1, 2)
    with pytest.raises(ValueError, match="kernel_size must be >= 1"):
        PoolingDescriptor("max", 0)
    with pytest.raises(ValueError, match="stride must be >= 1"):
        PoolingDescriptor("max", 2, 0)
    with pytest.raises(ValueError, match="kernel_size must be an int or 2 ints"):
        PoolingDescriptor("max", (2, 2, 2), spatial_dims=2)
    with pytest.raises(ValueError, match=r"pooling_forward: x must have 4 dims .* got shape \(3, 8, 8\)"):
        pooling_forward(x[0], PoolingDescriptor("max", 2))
    with pytest.raises(ValueError, match=r"pooling_forward: input \(2, 3, 8, 8\) \(NCHW\) is too small"):
        pooling_forward(x, PoolingDescriptor("max", 9))
    with pytest.raises(TypeError, match="pooling_forward: x must be float32 or float64, got int32"):
        pooling_forward(x.astype(np.int32), PoolingDescriptor("max", 2))
    with pytest.raises(ValueError, match="pooling_forward: unknown layout 'CHWN'"):
        pooling_forward(x, PoolingDescriptor("max", 2), layout="CHWN")
    with pytest.raises(ValueError, match=r"pooling_backward: dy has shape \(2, 3, 5, 5\), but pooling x"):
        pooling_backward(x, None, np.ones((2, 3, 5, 5), dtype=np.float32), PoolingDescriptor("max", 2))
    with pytest.raises(ValueError, match="pooling_forward: beta=0.5 blends"):
        pooling_forward(x, PoolingDescriptor("max", 2), beta=0.5)
    with pytest.raises(ValueError, match="adaptive_avg_pooling_forward: output_size must be >= 1"):
        adaptive_avg_pooling_forward(x, (0, 2))
    with pytest.raises(ValueError, match="adaptive_avg_pooling_forward: input must have 3, 4 or 5 dims"):
        adaptive_avg_pooling_forward(x[0, 0], 2)
    with pytest.raises(ValueError, match=r"adaptive_avg_pooling_backward: dy has shape \(2, 3, 2, 2\)"):
        adaptive_avg_pooling_backward(np.ones((2, 3, 2, 2), dtype=np.float32), x.shape, 3)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape,kernel", [
    ((2, 3, 8, 8), 2),            # the common 2x2/2 pool: the tiled fast path
    ((2, 3, 9, 11), 2),           # odd sizes: the last row/column is dropped (floor mode)
    ((1, 2, 7), 3),               # 1-D
    ((1, 2, 4, 6, 6), (2, 3, 3)),  # 3-D
])
def test_non_overlapping_max_pool_fast_path(shape, kernel, layout, rng):
    """stride == kernel without padding takes a reshape-based path; it must equal torch, ties included."""
    dims = len(shape) - 2
    desc = PoolingDescriptor(mode="max", kernel_size=kernel, stride=kernel, padding=0, ceil_mode=False,
                             spatial_dims=dims)
    x = rng.integers(-2, 3, size=shape).astype(np.float32)  # few distinct values: many ties
    check_against_torch(x, desc, layout, rng, 1e-6)
    x = rng.standard_normal(shape).astype(np.float32)
    check_against_torch(x, desc, layout, rng, 1e-6)


@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1)])
def test_max_pool_with_nan_and_inf_matches_torch(kernel, stride, padding, rng):
    """NaN wins a window and takes its gradient; +-inf behave as numbers (the fast paths fall back)."""
    x = rng.standard_normal((2, 3, 8, 9)).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    x[0, 1, 2, 3] = np.inf
    x[1, 2, 4, 4] = -np.inf
    desc = PoolingDescriptor(mode="max", kernel_size=kernel, stride=stride, padding=padding, ceil_mode=False,
                             spatial_dims=2)
    dy = rng.standard_normal(pooling_output_shape(x.shape, desc)).astype(np.float32)
    y_ref, dx_ref = torch_pool(x, dy, desc)
    y = pooling_forward(x, desc)
    dx = pooling_backward(x, y, dy, desc)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(y_ref))
    np.testing.assert_allclose(y[~np.isnan(y)], y_ref[~np.isnan(y_ref)], rtol=1e-6)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-6, atol=1e-7)


def test_a_signature_checked_once_still_refuses_a_bad_call():
    """pooling_forward / pooling_backward skip their checks for a signature that passed them before (issue 23): the
    second call of a signature equals the first, with the layout as normalised then ("nhwc"), and a call whose dy or
    x no longer fits is refused as ever."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    desc = PoolingDescriptor("max", (2, 2))
    ys = [pooling_forward(x, desc, layout="nhwc") for _ in range(2)]
    np.testing.assert_array_equal(ys[0], ys[1])
    dxs = [pooling_backward(x, ys[0], ys[0] * 2, desc, layout="nhwc") for _ in range(2)]
    np.testing.assert_array_equal(dxs[0], dxs[1])
    with pytest.raises(ValueError, match=r"pooling_backward: dy has shape \(2, 3, 2, 3\), but pooling x"):
        pooling_backward(x, ys[0], ys[0][:, :, :2], desc, layout="nhwc")
    with pytest.raises(ValueError, match="pooling_forward: x must have 4 dims"):
        pooling_forward(x[0], desc, layout="nhwc")
