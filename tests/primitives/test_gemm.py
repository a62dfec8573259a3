"""minidl.primitives.gemm on the CPU, against torch.matmul (the oracle), plus its argument checks."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from minidl.primitives.gemm import gemm
from tests.conftest import rel_err


def _stored(rng, rows, cols, trans, batch, dtype):
    shape = (cols, rows) if trans else (rows, cols)
    if batch:
        shape = (batch,) + shape
    return rng.standard_normal(shape).astype(dtype)


def _torch_op(a, trans):
    t = torch.from_numpy(a).double()
    return t.transpose(-1, -2) if trans else t


@settings(max_examples=30, deadline=None)
@given(M=st.integers(1, 19), N=st.integers(1, 19), K=st.integers(1, 19),
       trans_a=st.booleans(), trans_b=st.booleans(),
       batch_a=st.sampled_from([0, 3]), batch_b=st.sampled_from([0, 3]),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**31 - 1))
def test_gemm_matches_torch(M, N, K, trans_a, trans_b, batch_a, batch_b, dtype, seed):
    rng = np.random.default_rng(seed)
    a = _stored(rng, M, K, trans_a, batch_a, dtype)
    b = _stored(rng, K, N, trans_b, batch_b, dtype)
    got = gemm(a, b, trans_a=trans_a, trans_b=trans_b)
    want = torch.matmul(_torch_op(a, trans_a), _torch_op(b, trans_b)).numpy()
    assert got.shape == want.shape and got.dtype == dtype
    assert rel_err(got, want) <= (1e-5 if dtype == np.float32 else 1e-12)


def test_gemm_alpha_beta_blend_into_out(rng):
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    prior = rng.standard_normal((5, 3))
    out = prior.copy()
    result = gemm(a, b, alpha=0.5, beta=-2.0, out=out)
    assert result is out
    assert rel_err(out, 0.5 * (a @ b) - 2.0 * prior) <= 1e-12


def test_gemm_beta_zero_ignores_nan_in_out(rng):
    a, b = rng.standard_normal((4, 6)), rng.standard_normal((6, 2))
    out = np.full((4, 2), np.nan)
    gemm(a, b, alpha=2.0, out=out)
    assert rel_err(out, 2.0 * (a @ b)) <= 1e-12


@pytest.mark.parametrize("a_shape, b_shape, kwargs, match", [
    ((3, 4), (5, 2), {}, r"gemm: inner dimensions differ.*\(3, 4\).*\(5, 2\)"),
    ((3, 4), (3, 2), {"trans_b": True}, r"gemm: inner dimensions differ"),
    ((2, 3, 4), (3, 4, 2), {}, r"gemm: batch sizes differ"),
    ((3,), (3, 2), {}, r"gemm: a must be 2-D .* got shape \(3\)"),
    ((3, 4), (4, 2), {"beta": 1.0}, r"gemm: beta=1.0 blends into an existing output"),
])
def test_gemm_rejects_bad_shapes(a_shape, b_shape, kwargs, match):
    with pytest.raises(ValueError, match=match):
        gemm(np.ones(a_shape), np.ones(b_shape), **kwargs)


def test_gemm_rejects_wrong_out_shape_and_dtypes():
    with pytest.raises(ValueError, match=r"gemm: out has shape \(2, 2\), expected \(3, 2\)"):
        gemm(np.ones((3, 4)), np.ones((4, 2)), out=np.zeros((2, 2)))
    with pytest.raises(TypeError, match="gemm: a must be float16, bfloat16, float32 or float64, got int64"):
        gemm(np.ones((3, 4), dtype=np.int64), np.ones((4, 2)))
    with pytest.raises(TypeError, match="gemm: all arrays must have the same dtype"):
        gemm(np.ones((3, 4), dtype=np.float32), np.ones((4, 2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a,trans_b", [(False, True), (True, False)])
def test_gemm_bias_is_added_to_every_row_before_alpha(dtype, trans_a, trans_b, rng):
    a = rng.standard_normal((5, 7) if not trans_a else (7, 5)).astype(dtype)
    b = rng.standard_normal((6, 7) if trans_b else (7, 6)).astype(dtype)
    bias = rng.standard_normal(6).astype(dtype)
    out = rng.standard_normal((5, 6)).astype(dtype)
    expected = 0.5 * ((a.T if trans_a else a) @ (b.T if trans_b else b) + bias) + 2.0 * out
    got = gemm(a, b, trans_a=trans_a, trans_b=trans_b, alpha=0.5, beta=2.0, out=out.copy(), bias=bias)
    assert rel_err(got, expected) <= (1e-6 if dtype == np.float32 else 1e-13)
    batched = gemm(np.stack([a, a]), b, trans_a=trans_a, trans_b=trans_b, bias=bias)   # one bias for every matrix
    assert rel_err(batched[1], (a.T if trans_a else a) @ (b.T if trans_b else b) + bias) <= 1e-6


def test_gemm_bias_errors(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    with pytest.raises(ValueError, match=r"gemm: bias must be \(5,\) of dtype float64 for an op\(b\) of 5 columns, "
                                         r"got \(4\) of float64"):
        gemm(a, b, bias=np.zeros(4))
    with pytest.raises(ValueError, match=r"gemm: bias must be \(5,\) of dtype float64"):
        gemm(a, b, bias=np.zeros(5, np.float32))


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_gemm_float32_bias_of_half_operands_is_added_before_the_rounding(half, rng):
    """A float32 bias with float16/bfloat16 a and b (an autocast Linear's bias as it is): added to the fp32 sums,
    then rounded once to the 16-bit result; a 16-bit bias of the other kind is refused, naming both choices."""
    import ml_dtypes

    dtype = np.dtype(ml_dtypes.bfloat16) if half == "bfloat16" else np.dtype(np.float16)
    a = rng.standard_normal((5, 7)).astype(dtype)
    b = rng.standard_normal((6, 7)).astype(dtype)
    bias = (rng.standard_normal(6) * 1e-3 + 1.0).astype(np.float32)   # values a 16-bit cast would change
    got = gemm(a, b, trans_b=True, bias=bias)
    exact = a.astype(np.float32) @ b.astype(np.float32).T + bias
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.astype(np.float32), exact.astype(dtype).astype(np.float32))
    other = np.float16 if half == "bfloat16" else ml_dtypes.bfloat16
    with pytest.raises(ValueError, match=rf"gemm: bias must be \(6,\) of dtype {half} \(or float32\)"):
        gemm(a, b, trans_b=True, bias=bias.astype(other))
