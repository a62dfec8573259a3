"""Batch norm against torch: outputs, saved statistics, running statistics, gradients; errors."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from minidl.primitives import (
    batch_norm_backward,
    batch_norm_forward_inference,
    batch_norm_forward_training,
    batch_norm_param_shape,
)
from tests.conftest import rel_err


def to_last(a):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def to_first(a):
    return np.moveaxis(a, -1, 1)


def make(rng, shape, n_params, dtype, affine=True, running=True):
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    gamma = rng.standard_normal(n_params).astype(dtype) if affine else None
    beta_ = rng.standard_normal(n_params).astype(dtype) if affine else None
    rm = rng.standard_normal(n_params).astype(dtype) if running else None
    rv = (rng.random(n_params) + 0.5).astype(dtype) if running else None
    return x, gamma, beta_, rm, rv


def torch_training(x, gamma, beta_, rm, rv, dy, momentum, eps):
    """torch's y, save_mean, save_invstd, gradients and updated running stats (x channels-first)."""
    t = lambda a: None if a is None else torch.tensor(a)  # noqa: E731
    xt = torch.tensor(x, requires_grad=True)
    gt = None if gamma is None else torch.tensor(gamma, requires_grad=True)
    bt = None if beta_ is None else torch.tensor(beta_, requires_grad=True)
    rmt, rvt = t(rm), t(rv)
    y, save_mean, save_invstd = torch.ops.aten.native_batch_norm(xt, gt, bt, rmt, rvt, True, momentum, eps)
    y.backward(torch.tensor(dy))
    grads = (xt.grad.numpy(), None if gt is None else gt.grad.numpy(), None if bt is None else bt.grad.numpy())
    running = (None if rmt is None else rmt.numpy(), None if rvt is None else rvt.numpy())
    return y.detach().numpy(), save_mean.detach().numpy(), save_invstd.detach().numpy(), grads, running


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 7), (3, 4, 5, 6), (2, 3, 3, 4, 5)])
def test_spatial_training_against_torch(shape, layout, dtype, rng):
    x, gamma, beta_, rm, rv = make(rng, shape, shape[1], dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    y_ref, mean_ref, invstd_ref, grads_ref, running_ref = torch_training(x, gamma, beta_, rm.copy(), rv.copy(),
                                                                         dy, 0.3, 1e-4)
    convert = to_last if layout == "NHWC" and len(shape) > 2 else (lambda a: a)
    back = to_first if layout == "NHWC" and len(shape) > 2 else (lambda a: a)
    lay = layout if len(shape) > 2 else "NCHW"
    y, mean, invstd = batch_norm_forward_training(convert(x), gamma, beta_, rm, rv, momentum=0.3, eps=1e-4,
                                                  layout=lay)
    dx, dgamma, dbeta = batch_norm_backward(convert(x), convert(dy), gamma, mean, invstd, layout=lay)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert y.dtype == mean.dtype == invstd.dtype == dx.dtype == dtype
    assert rel_err(back(y), y_ref) <= tol
    assert rel_err(mean, mean_ref) <= tol and rel_err(invstd, invstd_ref) <= tol
    assert rel_err(rm, running_ref[0]) <= tol and rel_err(rv, running_ref[1]) <= tol
    assert rel_err(back(dx), grads_ref[0]) <= tol
    assert rel_err(dgamma, grads_ref[1]) <= tol and rel_err(dbeta, grads_ref[2]) <= tol


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_inference_against_torch(layout, rng):
    x, gamma, beta_, rm, rv = make(rng, (3, 5, 4, 6), 5, np.float32)
    y_ref = torch.nn.functional.batch_norm(torch.tensor(x), torch.tensor(rm), torch.tensor(rv), torch.tensor(gamma),
                                           torch.tensor(beta_), training=False, eps=1e-3).numpy()
    xl = to_last(x) if layout == "NHWC" else x
    y = batch_norm_forward_inference(xl, gamma, beta_, rm, rv, eps=1e-3, layout=layout)
    assert rel_err(to_first(y) if layout == "NHWC" else y, y_ref) <= 1e-5


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_per_activation_is_batch_norm_over_flattened_features(layout, rng):
    # One statistic per element of the sample: torch's BatchNorm1d over the flattened (N, C*H*W).
    x, _, _, _, _ = make(rng, (5, 3, 4, 2), 1, np.float64, affine=False, running=False)
    xl = to_last(x) if layout == "NHWC" else x
    pshape = batch_norm_param_shape(xl.shape, "per_activation", layout)
    assert pshape == xl.shape[1:]
    gamma, beta_, rm = (rng.standard_normal(pshape) for _ in range(3))
    rv = rng.random(pshape) + 0.5
    dy = rng.standard_normal(xl.shape)
    flat = lambda a: a.reshape(a.shape[0], -1) if a.ndim == 4 else a.reshape(-1)  # noqa: E731
    y_ref, mean_ref, invstd_ref, grads_ref, running_ref = torch_training(
        flat(xl), flat(gamma), flat(beta_), flat(rm).copy(), flat(rv).copy(), flat(dy), 0.1, 1e-5)
    y, mean, invstd = batch_norm_forward_training(xl, gamma, beta_, rm, rv, mode="per_activation", layout=layout)
    dx, dgamma, dbeta = batch_norm_backward(xl, dy, gamma, mean, invstd, mode="per_activation", layout=layout)
    assert rel_err(flat(y), y_ref) <= 1e-12
    assert rel_err(flat(mean), mean_ref) <= 1e-12 and rel_err(flat(invstd), invstd_ref) <= 1e-12
    assert rel_err(flat(rm), running_ref[0]) <= 1e-12 and rel_err(flat(rv), running_ref[1]) <= 1e-12
    assert rel_err(flat(dx), grads_ref[0]) <= 1e-12
    assert rel_err(flat(dgamma), grads_ref[1]) <= 1e-12 and rel_err(flat(dbeta), grads_ref[2]) <= 1e-12
    y_inf = batch_norm_forward_inference(xl, gamma, beta_, rm, rv, mode="per_activation", layout=layout)
    assert rel_err(y_inf, (xl - rm) / np.sqrt(rv + 1e-5) * gamma + beta_) <= 1e-12


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=2, max_size=4),
    affine=st.booleans(),
    running=st.booleans(),
    momentum=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31),
)
def test_random_shapes_affine_and_tracking(shape, affine, running, momentum, seed):
    shape = [shape[0] + 1] + shape[1:]  # N >= 2, so every channel has more than one value
    rng = np.random.default_rng(seed)
    x, gamma, beta_, rm, rv = make(rng, shape, shape[1], np.float64, affine, running)
    dy = rng.standard_normal(shape)
    y_ref, _, _, grads_ref, running_ref = torch_training(
        x, gamma, beta_, None if rm is None else rm.copy(), None if rv is None else rv.copy(), dy, momentum, 1e-5)
    y, mean, invstd = batch_norm_forward_training(x, gamma, beta_, rm, rv, momentum=momentum)
    dx, dgamma, dbeta = batch_norm_backward(x, dy, gamma, mean, invstd)
    assert rel_err(y, y_ref) <= 1e-10
    assert rel_err(dx, grads_ref[0]) <= 1e-8  # near-constant channels make dx ill-conditioned
    if affine:
        assert rel_err(dgamma, grads_ref[1]) <= 1e-10 and rel_err(dbeta, grads_ref[2]) <= 1e-10
    else:
        assert dgamma is None and dbeta is None
    if running:
        assert rel_err(rm, running_ref[0]) <= 1e-12 and rel_err(rv, running_ref[1]) <= 1e-12


def test_finite_differences(rng):
    x, gamma, beta_, _, _ = make(rng, (3, 2, 3, 2), 2, np.float64, running=False)
    dy = rng.standard_normal(x.shape)
    _, mean, invstd = batch_norm_forward_training(x, gamma, beta_, None, None, layout="NHWC")
    dx, dgamma, dbeta = batch_norm_backward(x, dy, gamma, mean, invstd, layout="NHWC")

    def loss(x_, g_, b_):
        return np.sum(batch_norm_forward_training(x_, g_, b_, None, None, layout="NHWC")[0] * dy)

    eps = 1e-6
    for analytic, index in ((dx, 0), (dgamma, 1), (dbeta, 2)):
        args = [x, gamma, beta_]
        numeric = np.zeros_like(args[index])
        for i in np.ndindex(numeric.shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[index][i] += eps
            minus[index][i] -= eps
            numeric[i] = (loss(*plus) - loss(*minus)) / (2 * eps)
        assert rel_err(analytic, numeric) <= 1e-6


def test_errors_leave_running_stats_unchanged(rng):
    x, gamma, beta_, rm, rv = make(rng, (4, 3, 5, 5), 3, np.float32)
    rm0, rv0 = rm.copy(), rv.copy()
    op = "batch_norm_forward_training"
    with pytest.raises(ValueError, match=rf"{op}: gamma has shape \(4\), but x \(4, 3, 5, 5\) \(NCHW, mode=spatial\) "
                                         r"needs \(3\)"):
        batch_norm_forward_training(x, np.ones(4, np.float32), beta_, rm, rv)
    with pytest.raises(ValueError, match=rf"{op}: running_mean has shape \(3\), but x \(4, 5, 5, 3\) \(NCHW, mode=spatial\) needs \(5\)"):
        batch_norm_forward_training(np.ones((4, 5, 5, 3), np.float32), None, None, np.ones(3, np.float32),
                                    np.ones(3, np.float32), layout="NCHW")
    with pytest.raises(TypeError, match=rf"{op}: all arrays must have the same dtype"):
        batch_norm_forward_training(x, gamma.astype(np.float64), beta_, rm, rv)
    with pytest.raises(TypeError, match=rf"{op}: x must be float32 or float64"):
        batch_norm_forward_training(x.astype(np.int32), None, None, None, None)
    with pytest.raises(ValueError, match=rf"{op}: x \(1, 3, 1, 1\) has only one value per statistic"):
        batch_norm_forward_training(x[:1, :, :1, :1], gamma, beta_, rm, rv)
    with pytest.raises(ValueError, match=rf"{op}: momentum must be in \[0, 1\]"):
        batch_norm_forward_training(x, gamma, beta_, rm, rv, momentum=1.5)
    with pytest.raises(ValueError, match=rf"{op}: unknown mode 'instance'"):
        batch_norm_forward_training(x, gamma, beta_, rm, rv, mode="instance")
    with pytest.raises(ValueError, match=rf"{op}: pass both running_mean and running_var"):
        batch_norm_forward_training(x, gamma, beta_, rm, None)
    with pytest.raises(ValueError, match=rf"{op}: x must have at least 2 dims"):
        batch_norm_forward_training(x[0, 0, 0], None, None, None, None)
    np.testing.assert_array_equal(rm, rm0)
    np.testing.assert_array_equal(rv, rv0)
    with pytest.raises(ValueError, match="batch_norm_forward_inference: inference needs running_mean"):
        batch_norm_forward_inference(x, gamma, beta_, None, None)
    _, mean, invstd = batch_norm_forward_training(x, gamma, beta_, None, None)
    with pytest.raises(ValueError, match=r"batch_norm_backward: dy has shape \(4, 3, 5\), but x has shape"):
        batch_norm_backward(x, x[..., 0], gamma, mean, invstd)
    with pytest.raises(ValueError, match=r"batch_norm_backward: saved_mean has shape \(2\)"):
        batch_norm_backward(x, x, gamma, mean[:2], invstd)


@pytest.mark.parametrize("relu", [False, True])
def test_num_batches_tracked_is_counted_by_the_primitive(relu, rng):
    """The layer's counter, handed to the training forward, goes up by one per call and changes nothing else; a
    counter of the wrong kind is refused before anything changes."""
    from minidl.primitives import batch_norm as P

    x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    forward = P.batch_norm_relu_forward_training if relu else P.batch_norm_forward_training
    counter = np.array(7, dtype=np.int64)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    plain = forward(x, None, None, rm.copy(), rv.copy())
    counted = forward(x, None, None, rm, rv, num_batches_tracked=counter)
    assert int(counter) == 8
    for a, b in zip(plain, counted):
        np.testing.assert_array_equal(a, b)
    for bad in (np.array(1.0, dtype=np.float32), np.zeros(1, dtype=np.int64)):
        before = rm.copy()
        with pytest.raises(TypeError, match="num_batches_tracked must be a 0-d int64"):
            forward(x, None, None, rm, rv, num_batches_tracked=bad)
        np.testing.assert_array_equal(rm, before)


def test_a_batchnorm_layer_counts_as_torch_does():
    """nn.BatchNorm2d's num_batches_tracked after training batches, an eval call, an empty batch and a failed call,
    against torch's layer."""
    import torch

    import minidl
    import minidl.nn as nn

    ours, theirs = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    x = np.random.default_rng(0).standard_normal((4, 3, 5, 5)).astype(np.float32)
    for _ in range(2):
        ours(minidl.tensor(x))
        theirs(torch.tensor(x))
    ours.eval(), theirs.eval()
    ours(minidl.tensor(x))
    theirs(torch.tensor(x))
    ours.train(), theirs.train()
    ours(minidl.zeros(0, 3, 5, 5))
    theirs(torch.zeros(0, 3, 5, 5))
    assert int(ours.num_batches_tracked.item()) == int(theirs.num_batches_tracked.item()) == 3
    with pytest.raises(ValueError):
        ours(minidl.tensor(x[:, :2]))   # wrong channels: nothing changes (torch would count it first)
    assert int(ours.num_batches_tracked.item()) == 3


def test_a_signature_checked_once_still_refuses_a_bad_call(rng):
    """The fronts keep the signatures whose checks passed (issue 23: the same ones every step) and skip the checks for
    them: a signature seen before gives what its first call gave (with the layout as normalised then: "nhwc"), and a
    call that differs in any checked way (a parameter's shape, dy's shape) is checked, and refused, as ever."""
    x, gamma, beta_, rm, rv = make(rng, (4, 5, 5, 3), 3, np.float32)
    runs = []
    for _ in range(2):
        state = (rm.copy(), rv.copy())
        y, mean, invstd = batch_norm_forward_training(x, gamma, beta_, *state, layout="nhwc")
        dx, dgamma, dbeta = batch_norm_backward(x, y, gamma, mean, invstd, layout="nhwc")
        runs.append((y, mean, invstd, dx, dgamma, dbeta, *state))
    for first, second in zip(*runs):
        np.testing.assert_array_equal(first, second)
    op = "batch_norm_forward_training"
    with pytest.raises(ValueError, match=rf"{op}: gamma has shape \(4\), but x \(4, 5, 5, 3\) \(NHWC, mode=spatial\)"):
        batch_norm_forward_training(x, np.ones(4, np.float32), beta_, rm, rv, layout="nhwc")
    with pytest.raises(ValueError, match=r"batch_norm_backward: dy has shape \(4, 5, 5, 2\), but x has shape"):
        batch_norm_backward(x, y[..., :2], gamma, mean, invstd, layout="nhwc")
    with pytest.raises(ValueError, match=rf"{op}: momentum must be in \[0, 1\]"):
        batch_norm_forward_training(x, gamma, beta_, rm, rv, momentum=-0.5, layout="nhwc")
