"""The cast primitive's NumPy reference: rounding to nearest even, overflow to inf without a warning,
NaN kept, the errors of a non-array argument."""
import warnings

import ml_dtypes
import numpy as np
import pytest

from minidl import primitives as P


def test_cast_rounds_to_nearest_even_and_overflows_quietly():
    x = np.array([1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, 70000.0, -1e6, np.nan, -0.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = P.cast(x, np.float16)
    assert y.dtype == np.float16
    assert y[0] == 1.0 and y[1] == np.float16(1.0 + 4 * 2 ** -11)      # ties to even
    assert np.isposinf(y[2]) and np.isneginf(y[3]) and np.isnan(y[4]) and np.signbit(y[5])
    b = P.cast(x[:2], ml_dtypes.bfloat16)
    assert b.dtype == ml_dtypes.bfloat16 and (b.astype(np.float32) == 1.0).all()


def test_cast_names_the_op_for_a_non_array():
    with pytest.raises(TypeError, match="cast: x must be a numpy.ndarray"):
        P.cast([1.0, 2.0], np.float16)
