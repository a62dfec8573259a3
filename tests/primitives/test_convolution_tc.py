"""CPU side of the tensor-core and FFT convolution: the math argument, the TF32 emulation of the
NumPy reference, half data computed in fp32, the FFT algorithm against torch, and the algorithm
query with the new variants. (The kernels themselves: tests/gpu/test_convolution_tc_gpu.py.)"""
import numpy as np
import pytest
import torch

import minidl.primitives as P
from minidl.primitives.cpu import convolution as cpu_conv
from tests.conftest import rel_err

DIRECTIONS = ("forward", "backward_data", "backward_filter")


def _run(direction, desc, x, w, dy, **kw):
    if direction == "forward":
        return P.convolution_forward(x, w, desc, **kw)
    if direction == "backward_data":
        return P.convolution_backward_data(w, dy, desc, x.shape, **kw)
    return P.convolution_backward_filter(x, dy, desc, w.shape, **kw)


def _problem(seed=0, x_shape=(2, 5, 9, 8), w_shape=(6, 5, 3, 3), desc=None, dtype=np.float32):
    desc = desc or P.ConvolutionDescriptor(padding=1)
    y_shape = P.convolution_output_shape(x_shape, w_shape, desc)
    rng = np.random.default_rng(seed)
    return desc, *(rng.standard_normal(s).astype(dtype) for s in (x_shape, w_shape, y_shape))


def test_round_to_tf32_keeps_10_mantissa_bits_ties_away():
    one_ulp = 2.0 ** -10                                   # TF32's spacing just above 1.0
    x = np.array([1.0, 1.0 + one_ulp / 2, 1.0 + one_ulp / 2 - 2.0 ** -23, -(1.0 + one_ulp / 2),
                  1.0 + 3 * one_ulp / 2, np.inf, -np.inf, 3.0e38], dtype=np.float32)
    got = cpu_conv.round_to_tf32(x)
    np.testing.assert_array_equal(got[:5], np.array([1.0, 1.0 + one_ulp, 1.0, -(1.0 + one_ulp), 1.0 + 2 * one_ulp],
                                                     dtype=np.float32))
    assert got[5] == np.inf and got[6] == -np.inf
    assert np.isnan(cpu_conv.round_to_tf32(np.array([np.nan], np.float32)))[0]
    r = cpu_conv.round_to_tf32(np.random.default_rng(0).standard_normal(1000).astype(np.float32))
    assert np.all(r.view(np.uint32) & 0x1FFF == 0)           # the 13 dropped bits are zero


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_tf32_math_on_cpu_is_fp32_on_rounded_operands(direction):
    desc, x, w, dy = _problem(1)
    exact = _run(direction, desc, x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64))
    tf32 = _run(direction, desc, x, w, dy, math="tf32")
    rounded = [cpu_conv.round_to_tf32(a).astype(np.float64) for a in (x, w, dy)]
    assert rel_err(tf32, _run(direction, desc, *rounded)) < 1e-6     # only fp32 summation error left
    assert 1e-5 < rel_err(tf32, exact) <= 5e-3                      # TF32's error, within its tolerance
    assert rel_err(_run(direction, desc, x, w, dy, math="fp32"), exact) < 1e-6
    # float64 data ignores math="tf32" (it is a permission for float32, as cuDNN's tensor-op math)
    assert rel_err(_run(direction, desc, x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64),
                        math="tf32"), exact) < 1e-13


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_half_data_on_cpu_is_computed_in_fp32_and_rounded_once(direction, dtype):
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")  # NumPy's bfloat16 (the amp work adds it as a dependency)
        np_dtype = np.dtype(ml_dtypes.bfloat16)
    else:
        np_dtype = np.dtype(np.float16)
    desc, x, w, dy = _problem(2)
    xh, wh, dyh = (a.astype(np_dtype) for a in (x, w, dy))
    got = _run(direction, desc, xh, wh, dyh)
    assert got.dtype == np_dtype
    want = _run(direction, desc, *(a.astype(np.float64) for a in (xh, wh, dyh))).astype(np_dtype)
    assert rel_err(got.astype(np.float64), want.astype(np.float64)) < 1e-2
    out = np.full(got.shape, 2.0, dtype=np_dtype)
    _run(direction, desc, xh, wh, dyh, out=out, alpha=0.5, beta=1.0)
    assert rel_err(out.astype(np.float64), 0.5 * got.astype(np.float64) + 2.0) < 1e-2


@pytest.mark.parametrize("case", [
    dict(x=(2, 3, 13, 11), w=(4, 3, 7, 7), padding=3),
    dict(x=(1, 2, 16, 15), w=(3, 2, 11, 9), padding=(5, 0)),
    dict(x=(3, 4, 20), w=(5, 4, 9), padding=4),
    dict(x=(1, 2, 5, 6, 7), w=(2, 2, 3, 3, 3), padding=1),
])
def test_fft_matches_torch_in_every_direction(case):
    sd = len(case["x"]) - 2
    desc = P.ConvolutionDescriptor(padding=case["padding"], spatial_dims=sd)
    _, x, w, dy = _problem(3, case["x"], case["w"], desc, dtype=np.float64)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[sd]
    ty = conv(tx, tw, padding=desc.padding)
    ty.backward(torch.tensor(dy))
    assert rel_err(P.convolution_forward(x, w, desc, algo="fft"), ty.detach().numpy()) < 1e-12
    assert rel_err(P.convolution_backward_data(w, dy, desc, x.shape, algo="fft"), tx.grad.numpy()) < 1e-12
    assert rel_err(P.convolution_backward_filter(x, dy, desc, w.shape, algo="fft"), tw.grad.numpy()) < 1e-12
    # NHWC and float32 too
    to_cl = lambda a: np.ascontiguousarray(np.moveaxis(a, 1, -1))  # noqa: E731
    y_cl = P.convolution_forward(to_cl(x).astype(np.float32), to_cl(w).astype(np.float32), desc, algo="fft",
                                 layout="NHWC")
    assert y_cl.dtype == np.float32 and rel_err(y_cl, to_cl(ty.detach().numpy())) < 1e-5


def test_fft_covers_stride_1_dilation_1_groups_1_only():
    for desc, words in [(P.ConvolutionDescriptor(padding=1, stride=2), "stride 1"),
                        (P.ConvolutionDescriptor(padding=1, dilation=2), "dilation 1"),
                        (P.ConvolutionDescriptor(padding=1, groups=2), "groups=1")]:
        w_shape = (4, 4 // desc.groups, 3, 3)
        perf = next(p for p in P.find_convolution_algorithms((2, 4, 9, 9), w_shape, desc, measure=False)
                    if p.algo == "fft")
        assert perf.status.startswith("not_supported") and words in perf.status
        with pytest.raises(ValueError, match=f"algorithm 'fft' does not apply.*{words}"):
            P.convolution_forward(np.ones((2, 4, 9, 9), np.float32), np.ones(w_shape, np.float32), desc, algo="fft")


def test_query_reports_math_and_the_fft_workspace():
    desc = P.ConvolutionDescriptor(padding=2)
    perfs = P.find_convolution_algorithms((2, 3, 12, 12), (4, 3, 5, 5), desc, measure=False, math="tf32")
    assert {p.math for p in perfs} == {"tf32"}                  # the CPU emulates TF32 in every algorithm
    perfs = P.find_convolution_algorithms((2, 3, 12, 12), (4, 3, 5, 5), desc, measure=False)
    assert {p.math for p in perfs} == {"fp32"}
    fft = next(p for p in perfs if p.algo == "fft")
    # spectra of x, w and y (complex, 16 x 9 frequencies, float32 -> 8 bytes each) + the padded input
    assert fft.workspace_bytes == 8 * 16 * 9 * (2 * 3 + 4 * 3 + 2 * 4) + 4 * 16 * 16 * 2 * 4
    assert P.get_convolution_algorithm((2, 3, 12, 12), (4, 3, 5, 5), desc, math="tf32") == "im2col_gemm"
    perfs = P.find_convolution_algorithms((2, 3, 12, 12), (4, 3, 5, 5), desc, dtype="float16", measure=True)
    assert all(p.status == "ok" and p.time_ms is not None for p in perfs if p.algo != "winograd")
    with pytest.raises(ValueError, match="math must be one of"):
        P.convolution_forward(np.ones((1, 1, 4, 4), np.float32), np.ones((1, 1, 3, 3), np.float32), desc, math="TF32")
