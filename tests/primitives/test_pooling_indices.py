"""Dilated max pooling, max pooling with indices and max unpooling: the NumPy reference against torch
(the GPU kernels are checked in tests/gpu/test_pooling_gpu.py)."""
import numpy as np
import pytest
import torch

from minidl.primitives import (PoolingDescriptor, max_pooling_forward_with_indices, max_unpooling_backward,
                               max_unpooling_forward, pooling_backward, pooling_forward, pooling_output_shape)

CASES = [
    ((2, 3, 13, 11), (3, 3), (2, 2), (1, 1), (2, 2), False),
    ((2, 3, 12, 16), (2, 2), (2, 2), (0, 0), (2, 3), True),
    ((3, 2, 19), (4,), (2,), (2,), (3,), True),
    ((2, 2, 7, 9, 8), (2, 3, 2), (1, 2, 2), (1, 1, 0), (3, 2, 2), False),
    ((1, 2, 6, 7), (3, 2), (1, 1), (1, 1), (1, 1), True),
]


def _layout(a, layout):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if layout == "NHWC" else a


def _back(a, layout):
    return np.moveaxis(a, -1, 1) if layout == "NHWC" else a


@pytest.mark.parametrize("shape,k,s,p,d,ceil_mode", CASES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_dilated_max_pooling_with_indices_matches_torch(shape, k, s, p, d, ceil_mode, layout):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape)
    desc = PoolingDescriptor("max", k, s, p, ceil_mode, spatial_dims=len(k), dilation=d)
    pool = getattr(torch.nn.functional, f"max_pool{len(k)}d")
    t = torch.tensor(x, requires_grad=True)
    ty, tidx = pool(t, k, s, p, d, ceil_mode=ceil_mode, return_indices=True)
    y, idx = max_pooling_forward_with_indices(_layout(x, layout), desc, layout=layout)
    assert y.shape == pooling_output_shape(_layout(x, layout).shape, desc, layout)
    np.testing.assert_array_equal(_back(y, layout), ty.detach().numpy())
    np.testing.assert_array_equal(_back(idx, layout), tidx.numpy())
    np.testing.assert_array_equal(pooling_forward(_layout(x, layout), desc, layout=layout), y)
    dy = rng.standard_normal(ty.shape)
    ty.backward(torch.tensor(dy))
    dx = pooling_backward(_layout(x, layout), y, _layout(dy, layout), desc, layout=layout)
    np.testing.assert_allclose(_back(dx, layout), t.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_max_unpooling_matches_torch(layout):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 7, 9))
    desc = PoolingDescriptor("max", (3, 2), (2, 2), (1, 1), spatial_dims=2)
    y, idx = max_pooling_forward_with_indices(_layout(x, layout), desc, layout=layout)
    unpooled = max_unpooling_forward(y, idx, (7, 9), layout=layout)
    ty = torch.tensor(np.ascontiguousarray(_back(y, layout)), requires_grad=True)
    tx = torch.nn.functional.max_unpool2d(ty, torch.tensor(np.ascontiguousarray(_back(idx, layout))), (3, 2), (2, 2),
                                          (1, 1), output_size=(7, 9))
    np.testing.assert_array_equal(_back(unpooled, layout), tx.detach().numpy())
    g = rng.standard_normal(tx.shape)
    tx.backward(torch.tensor(g))
    np.testing.assert_array_equal(_back(max_unpooling_backward(_layout(g, layout), idx, layout=layout), layout),
                                  ty.grad.numpy())


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="dilation .* only defined for max"):
        PoolingDescriptor("avg_include_pad", 2, dilation=2)
    with pytest.raises(ValueError, match="at most half the kernel"):
        PoolingDescriptor("max", 3, padding=2, dilation=3)  # torch compares with the kernel, not the extent
    y, idx = np.zeros((1, 1, 2, 2)), np.array([[[[0, 1], [2, 99]]]])
    with pytest.raises(ValueError, match="index 99 is out of range"):
        max_unpooling_forward(y, idx, (3, 3))
    with pytest.raises(TypeError, match="indices must be an integer array"):
        max_unpooling_forward(y, idx.astype(np.float64), (3, 3))
    with pytest.raises(ValueError, match="must have the shape"):
        max_unpooling_forward(y, idx[..., :1], (3, 3))
    with pytest.raises(ValueError, match="desc.mode must be 'max'"):
        max_pooling_forward_with_indices(np.zeros((1, 1, 4, 4)), PoolingDescriptor("avg_include_pad", 2))
