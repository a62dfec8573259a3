"""The math modes of minidl.primitives.gemm on the CPU: TF32 emulation and float16 / bfloat16.

torch's CPU build has no TF32, so the rounding is checked bit for bit against a rounding done by hand
in float64 (frexp: split off the exponent, round the significand to 11 bits, ties away from zero).
"""
import ml_dtypes
import numpy as np
import pytest
import torch

from minidl.primitives.cpu.gemm import round_to_tf32
from minidl.primitives.gemm import gemm
from tests.conftest import rel_err


def _tf32_by_hand(x):
    """Round float32 values to 10 explicit mantissa bits in float64 arithmetic (normals and subnormals)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    for i, v in enumerate(x.ravel()):
        if not np.isfinite(v) or v == 0:
            out.flat[i] = v
            continue
        mant, exp = np.frexp(abs(v))               # abs(v) = mant * 2**exp, 0.5 <= mant < 1
        exp = max(exp, -125)                        # subnormals keep the step of the smallest normal
        step = 2.0 ** (exp - 11)                    # 11 significant bits: 1 implicit + 10 stored
        q = abs(v) / step                           # exact in float64
        r = np.floor(q + 0.5)                       # ties away from zero (on the magnitude)
        rounded = r * step
        out.flat[i] = np.copysign(rounded if rounded < 2.0 ** 128 else np.inf, v)
    return out.astype(np.float32)


def test_round_to_tf32_matches_hand_rounding_bitwise():
    rng = np.random.default_rng(0)
    values = np.concatenate([
        rng.standard_normal(2000).astype(np.float32) * np.float32(1e3),
        rng.uniform(-1e-38, 1e-38, 200).astype(np.float32),              # subnormals
        np.array([1.0, -1.0, 0.0, -0.0, np.inf, -np.inf, 3.4028235e38, 1.17549435e-38], np.float32),
        # exact ties: 1 + 2**-11 (+ an odd last TF32 bit) must round away from zero
        np.array([1 + 2.0**-11, -(1 + 2.0**-11), 1 + 3 * 2.0**-11, 1 + 2.0**-11 - 2.0**-23], np.float32),
    ])
    got = round_to_tf32(values)
    want = _tf32_by_hand(values)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.all((got.view(np.uint32) & 0x1FFF) == 0)      # 13 low bits are clear
    assert np.isnan(round_to_tf32(np.array([np.nan], np.float32)))[0]
    assert round_to_tf32(np.float32(1 + 2.0**-11))[()] == np.float32(1 + 2.0**-10)  # a tie goes up


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False), (True, True)])
def test_gemm_tf32_equals_fp32_gemm_of_rounded_operands(trans_a, trans_b):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 37, 53) if not trans_a else (2, 53, 37)).astype(np.float32)
    b = rng.standard_normal((53, 29) if not trans_b else (29, 53)).astype(np.float32)
    got = gemm(a, b, trans_a=trans_a, trans_b=trans_b, math="tf32")
    ra, rb = torch.from_numpy(_tf32_by_hand(a.ravel()).reshape(a.shape)).double(), \
        torch.from_numpy(_tf32_by_hand(b.ravel()).reshape(b.shape)).double()
    want = torch.matmul(ra.transpose(-1, -2) if trans_a else ra, rb.transpose(-1, -2) if trans_b else rb).numpy()
    assert got.dtype == np.float32 and got.shape == (2, 37, 29)
    assert rel_err(got, want) <= 1e-6                      # the products are exact: only fp32 sums differ
    exact = gemm(a, b, trans_a=trans_a, trans_b=trans_b).astype(np.float64)
    assert 1e-5 < rel_err(got, exact) <= 5e-3             # ... and TF32 really is coarser than fp32


def test_gemm_tf32_alpha_beta_and_float64_ignores_math():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((9, 11)).astype(np.float32), rng.standard_normal((11, 7)).astype(np.float32)
    prior = rng.standard_normal((9, 7)).astype(np.float32)
    out = prior.copy()
    gemm(a, b, alpha=-0.5, beta=2.0, out=out, math="tf32")
    want = -0.5 * (round_to_tf32(a).astype(np.float64) @ round_to_tf32(b)) + 2.0 * prior
    assert rel_err(out, want) <= 1e-6
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert np.array_equal(gemm(a64, b64, math="tf32"), a64 @ b64)


@pytest.mark.parametrize("dtype, tol", [(np.float16, 2e-3), (ml_dtypes.bfloat16, 1e-2)])
def test_gemm_half_computes_in_fp32_and_rounds_once(dtype, tol):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 21, 40)).astype(dtype)
    b = rng.standard_normal((3, 17, 40)).astype(dtype)
    prior = rng.standard_normal((3, 21, 17)).astype(dtype)
    got = gemm(a, b, trans_b=True)
    assert got.dtype == np.dtype(dtype) and got.shape == (3, 21, 17)
    exact = np.matmul(a.astype(np.float64), np.swapaxes(b.astype(np.float64), -1, -2))
    # fp32 sums rounded once: within one unit in the last place of the half result (plus fp32's error)
    ulp = np.abs(exact.astype(dtype).astype(np.float64)) * float(ml_dtypes.finfo(dtype).eps)
    assert np.all(np.abs(got.astype(np.float64) - exact) <= ulp + 1e-5 * np.abs(exact).max())
    assert rel_err(got.astype(np.float64), exact) <= tol
    out = prior.copy()
    gemm(a, b, trans_b=True, alpha=2.0, beta=-1.0, out=out)
    want = 2.0 * exact - prior.astype(np.float64)
    assert out.dtype == np.dtype(dtype) and rel_err(out.astype(np.float64), want) <= tol


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_gemm_half_into_float32_keeps_the_fp32_sums(dtype):
    """out_dtype=float32: the fp32 sums of the 16-bit products as they are (AutocastLinear's gradients), i.e. the
    16-bit result is exactly their rounding; float32 asked of float32 data is the plain GEMM; the rest refused."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 33, 40)).astype(dtype)
    b = rng.standard_normal((40, 17)).astype(dtype)
    got = gemm(a, b, out_dtype=np.float32)
    assert got.dtype == np.float32 and got.shape == (2, 33, 17)
    assert np.array_equal(got, np.matmul(a.astype(np.float32), b.astype(np.float32)))
    assert np.array_equal(got.astype(dtype), gemm(a, b))
    f = a.astype(np.float32)
    assert np.array_equal(gemm(f, b.astype(np.float32), out_dtype=np.float32), gemm(f, b.astype(np.float32)))
    with pytest.raises(ValueError, match="out_dtype=float64 is for float32 results"):
        gemm(a, b, out_dtype=np.float64)
    with pytest.raises(ValueError, match="and a bias"):
        gemm(a[0], b, out_dtype=np.float32, bias=np.zeros(17, dtype))


def test_gemm_math_argument_checked():
    a = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="gemm: unknown math 'fp16'; use 'fp32' or 'tf32'"):
        gemm(a, a.T, math="fp16")
    with pytest.raises(TypeError, match="gemm: all arrays must have the same dtype"):
        gemm(a, a.T.astype(np.float16))


def test_rnn_primitive_tf32_math_on_cpu():
    """rnn_forward / rnn_backward with math="tf32" round every GEMM operand to TF32 (CPU emulation):
    within TF32's error of the exact result, but not equal to the fp32 one; a bad math is refused."""
    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward

    rng = np.random.default_rng(4)
    desc = RNNDescriptor("lstm", 7, 12, num_layers=2, bidirectional=True)
    weights = [tuple(rng.standard_normal(spec.shape).astype(np.float32) * np.float32(0.3) for spec in group)
               for group in desc.weight_shapes()]
    x = rng.standard_normal((5, 3, 7)).astype(np.float32)
    dy = rng.standard_normal((5, 3, 24)).astype(np.float32)
    f64 = [tuple(w.astype(np.float64) for w in g) for g in weights]
    y64, _, _, r64 = rnn_forward(x.astype(np.float64), None, None, f64, desc)
    dx64, _, _, dw64 = rnn_backward(dy.astype(np.float64), None, None, r64)
    y32, _, _, r32 = rnn_forward(x, None, None, weights, desc)
    y, _, _, reserve = rnn_forward(x, None, None, weights, desc, math="tf32")
    dx, _, _, dw = rnn_backward(dy, None, None, reserve)
    assert reserve.math == "tf32"
    assert 1e-6 < rel_err(y, y32.astype(np.float64)) and rel_err(y, y64) <= 5e-3
    assert rel_err(dx, dx64) <= 5e-3 and rel_err(dw[0][0], dw64[0][0]) <= 5e-3
    with pytest.raises(ValueError, match="rnn_forward: unknown math 'tf16'"):
        rnn_forward(x, None, None, weights, desc, math="tf16")



def test_round_to_bf16_keeps_8_bits_and_rounds_to_even():
    from minidl.primitives.cpu.gemm import round_to_bf16

    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -9, -(1 + 2 ** -7 + 2 ** -9), 3.1415927, np.inf, -np.inf],
                 dtype=np.float32)
    got = round_to_bf16(x)
    # 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to even (1); 1 + 3*2^-9 rounds up; the sign is kept
    np.testing.assert_array_equal(got[:4], np.array([1.0, 1.0, 1 + 2 ** -7, -(1 + 2 ** -7)], np.float32))
    assert abs(got[4] - 3.140625) == 0 and np.isinf(got[5]) and got[6] == -np.inf
    assert (got.view(np.uint32)[:5] & 0xFFFF).max() == 0


def test_rnn_bf16_math_rounds_the_recurrent_and_gradient_products():
    """math="bf16": the recurrent products' operands (and the backward's weight and input gradients') are rounded
    to bfloat16 (8 bits), so the result moves away from fp32 by ~1e-3 and stays within bf16's error of float64; the
    forward's input projection is TF32's."""
    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward

    rng = np.random.default_rng(4)
    desc = RNNDescriptor("lstm", 16, 32, num_layers=2)
    weights = [tuple(rng.uniform(-0.3, 0.3, s.shape).astype(np.float32) for s in e) for e in desc.weight_shapes()]
    x = rng.standard_normal((6, 3, 16)).astype(np.float32)
    dy = rng.standard_normal((6, 3, 32)).astype(np.float32)
    outs = {}
    for math in ("fp32", "tf32", "bf16"):
        y, _, _, reserve = rnn_forward(x, None, None, weights, desc, math=math)
        dx, _, _, _ = rnn_backward(dy, None, None, reserve)
        outs[math] = (y, dx)
    w64 = [tuple(w.astype(np.float64) for w in e) for e in weights]
    y64, _, _, r64 = rnn_forward(x.astype(np.float64), None, None, w64, desc)
    dx64, _, _, _ = rnn_backward(dy.astype(np.float64), None, None, r64)
    for got, want in zip(outs["bf16"], (y64, dx64)):
        assert 1e-4 < rel_err(got, want) <= 2e-2
    assert rel_err(outs["bf16"][0], y64) > 3 * rel_err(outs["tf32"][0], y64)   # bf16 is coarser than tf32
    with pytest.raises(ValueError, match="unknown math 'fp16'"):
        rnn_forward(x, None, None, weights, desc, math="fp16")
