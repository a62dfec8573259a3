"""The layer-norm primitive (layer_norm_forward / layer_norm_backward, layer norm and RMS norm) against
torch in float64: outputs, the saved statistics and every gradient, over awkward shapes; half inputs keep
float32 statistics; bad input is refused naming the op and the shapes."""
import numpy as np
import pytest
import torch

from minidl import primitives as P
from tests.conftest import rel_err


def close(a, b, tol):
    """Relative error, or absolute where the exact answer is 0 (one normalised value: dx = 0 up to rounding)."""
    return rel_err(a, b) <= tol or np.abs(np.asarray(a) - np.asarray(b)).max() <= 1e-10

SHAPES = [((7, 5), 1), ((3, 4, 6), 1), ((2, 3, 4, 5), 2), ((5, 1), 1), ((2, 3, 5), 3)]


@pytest.mark.parametrize("shape, nd", SHAPES)
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
@pytest.mark.parametrize("rms", [False, True])
def test_matches_torch(shape, nd, affine, rms):
    if rms and affine == "both":
        affine = "weight"
    rng = np.random.default_rng(len(shape) * 10 + nd)
    x = rng.standard_normal(shape) * 3 + 1
    norm_shape = shape[len(shape) - nd:]
    w = rng.standard_normal(norm_shape) if affine != "none" else None
    b = rng.standard_normal(norm_shape) if affine == "both" else None
    dy = rng.standard_normal(shape)
    y, mean, rstd = P.layer_norm_forward(x, w, b, normalized_ndim=nd, eps=1e-5, rms=rms)
    tx = torch.tensor(x, requires_grad=True)
    tw = None if w is None else torch.tensor(w, requires_grad=True)
    tb = None if b is None else torch.tensor(b, requires_grad=True)
    if rms:
        ty = torch.nn.functional.rms_norm(tx, norm_shape, tw, eps=1e-5)
    else:
        ty = torch.nn.functional.layer_norm(tx, norm_shape, tw, tb, eps=1e-5)
    ty.backward(torch.tensor(dy))
    assert rel_err(y, ty.detach().numpy()) <= 1e-12
    assert (mean is None) == rms and rstd.shape == shape[:len(shape) - nd]
    dx, dw, db = P.layer_norm_backward(x, dy, w, mean, rstd, normalized_ndim=nd, rms=rms, has_bias=b is not None)
    assert close(dx, tx.grad.numpy(), 1e-10)
    if w is not None:
        assert close(dw, tw.grad.numpy(), 1e-12)
    else:
        assert dw is None
    if b is not None:
        assert rel_err(db, tb.grad.numpy()) <= 1e-12
    else:
        assert db is None


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_half_computes_in_float32(dtype):
    import minidl

    dtype = minidl.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(3)
    x32 = rng.standard_normal((6, 40)).astype(np.float32)
    x = x32.astype(dtype)
    y, mean, rstd = P.layer_norm_forward(x, None, None, normalized_ndim=1)
    assert y.dtype == dtype and mean.dtype == np.float32 and rstd.dtype == np.float32
    ref, _, _ = P.layer_norm_forward(x.astype(np.float32), None, None, normalized_ndim=1)
    tol = 2e-3 if dtype == np.float16 else 1e-2
    assert rel_err(y.astype(np.float32), ref) <= tol


def test_bad_input_names_op_and_shapes():
    x = np.zeros((4, 6))
    with pytest.raises(ValueError, match=r"layer_norm_forward: weight has shape \(5\), expected the normalized shape \(6\) of x \(4, 6\)"):
        P.layer_norm_forward(x, np.ones(5), None)
    with pytest.raises(ValueError, match="normalized_ndim must be between 1 and x.ndim = 2"):
        P.layer_norm_forward(x, None, None, normalized_ndim=3)
    with pytest.raises(ValueError, match="RMS norm has no bias"):
        P.layer_norm_forward(x, np.ones(6), np.ones(6), rms=True)
    with pytest.raises(TypeError, match="layer_norm_forward: x must be a numpy.ndarray"):
        P.layer_norm_forward([[1.0]], None, None)
    y, mean, rstd = P.layer_norm_forward(x + 1, None, None)
    with pytest.raises(ValueError, match="dy .* and x .* must have the same shape"):
        P.layer_norm_backward(x, np.zeros((4, 5)), None, mean, rstd)
    with pytest.raises(ValueError, match="mean must be given for layer norm"):
        P.layer_norm_backward(x, x, None, None, rstd)
