"""The cast primitive on the GPU (kernels/cast.cu) against its NumPy reference, bit for bit: float32 /
float16 / bfloat16 among themselves, with the values where rounding matters (halfway cases, subnormals,
overflow to inf, NaN, signed zero); strided and other-dtype arrays through the library's astype."""
import ml_dtypes
import numpy as np
import pytest

import minidl
from minidl import primitives as P

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]


def _values(rng):
    special = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, 65520.0, 1e6, -1e6, 3e38, 6e-8, 1e-40, np.inf, -np.inf,
                        np.nan, 1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8], np.float32)
    return np.concatenate([special, rng.standard_normal(7 * 716 - 18).astype(np.float32) * 100])


@pytest.mark.parametrize("src", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dst", DTYPES, ids=lambda d: np.dtype(d).name)
def test_cast_matches_the_reference_bit_for_bit(src, dst):
    with np.errstate(over="ignore", invalid="ignore"):
        x = _values(np.random.default_rng(0)).astype(src).reshape(-1, 7)[:, :5]   # a strided view too
    x = np.ascontiguousarray(x)
    want = P.cast(x, dst)
    got = cupy.asnumpy(P.cast(cupy.asarray(x), dst))
    assert got.dtype == np.dtype(dst) and got.shape == x.shape
    nan = np.isnan(want.astype(np.float32))
    assert (np.isnan(got.astype(np.float32)) == nan).all()
    assert (got.view(np.uint8).reshape(x.size, -1)[~nan.ravel()] ==
            want.view(np.uint8).reshape(x.size, -1)[~nan.ravel()]).all()


def test_cast_of_strided_empty_and_other_dtypes():
    x = cupy.asarray(np.arange(24, dtype=np.float32).reshape(4, 6))
    assert (cupy.asnumpy(P.cast(x[:, ::2], np.float16)) == np.arange(24, dtype=np.float16).reshape(4, 6)[:, ::2]).all()
    assert P.cast(cupy.empty((0, 3), np.float32), ml_dtypes.bfloat16).shape == (0, 3)
    assert P.cast(x, np.float64).dtype == np.float64 and P.cast(x, np.int32).dtype == np.int32


def test_autocast_casts_on_the_cast_kernel_and_gradients_flow_back():
    w = minidl.randn(8, 4, device="cuda", requires_grad=True)
    with minidl.autocast("cuda", dtype=minidl.bfloat16):
        y = minidl.nn.functional.linear(minidl.randn(3, 4, device="cuda"), w)
    assert y.dtype == minidl.bfloat16
    y.float().sum().backward()
    assert w.grad.dtype == minidl.float32 and w.grad.shape == (8, 4)
