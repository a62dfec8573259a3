"""The layout_transform primitive's NumPy reference: NCHW <-> NHWC as contiguous transposed copies, the
round trip, and the errors at the boundary."""
import numpy as np
import pytest

from minidl import primitives as P


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 7, 3, 2, 6), (3, 5, 9)])
def test_layout_transform_is_the_transposed_copy_and_round_trips(shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    y = P.layout_transform(x, "NHWC")
    assert y.flags.c_contiguous and y.shape == (shape[0], *shape[2:], shape[1])
    assert (y == np.moveaxis(x, 1, -1)).all()
    back = P.layout_transform(y, "NCHW")
    assert back.flags.c_contiguous and (back == x).all()


def test_layout_transform_errors_name_the_op():
    with pytest.raises(ValueError, match="layout_transform: layout must be one of"):
        P.layout_transform(np.zeros((1, 2, 3)), "CHWN")
    with pytest.raises(ValueError, match=r"layout_transform: x must have .* got shape \(2, 3\)"):
        P.layout_transform(np.zeros((2, 3)), "NHWC")
    with pytest.raises(TypeError, match="layout_transform: x must be a numpy.ndarray"):
        P.layout_transform([[[1.0]]], "NHWC")
