"""minidl.nn.functional vs torch.nn.functional on the CPU: outputs and every gradient, on random
configs (hypothesis, small); float64 finite-difference checks; and bad-input errors that name the op
and the shapes."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from hypothesis import given, settings, strategies as st

import minidl
import minidl.nn.functional as F
from tests.conftest import rel_err

TOL = 1e-5


def _pair(a, requires_grad=True):
    return minidl.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)


def _check(ours, theirs, pairs, tol=TOL, seed=0):
    """Compare outputs, then backprop one random cotangent through both and compare every gradient."""
    assert ours.shape == tuple(theirs.shape)
    assert rel_err(ours.detach().numpy(), theirs.detach().numpy()) <= tol
    # an rng of its own: a cotangent equal to the input (same seed) would make e.g. batch-norm dx ~ 0
    g = np.random.default_rng(seed + 12345).standard_normal(ours.shape).astype(ours.dtype)
    ours.backward(minidl.tensor(g))
    theirs.backward(torch.tensor(g))
    for m, t in pairs:
        # (or within 1e-6 absolute: a float32 sum of a few terms that cancel, e.g. a bias gradient of 0.005 from six
        # rows, differs from torch's in its last bits when the two sum in another order)
        err = rel_err(m.grad.numpy(), t.grad.numpy())
        assert err <= tol or np.abs(m.grad.numpy() - t.grad.numpy()).max() <= 1e-6, err


def _finite_difference_check(fn, arrays, seed=0, eps=1e-6, tol=1e-6):
    """float64: d/da sum(fn(*a) * c) by autograd vs central differences, along 3 random directions."""
    rng = np.random.default_rng(seed)
    tensors = [minidl.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*tensors)
    c = rng.standard_normal(out.shape)
    (out * minidl.tensor(c)).sum().backward()
    for i, a in enumerate(arrays):
        for _ in range(3):
            d = rng.standard_normal(a.shape)
            plus = [x if j != i else x + eps * d for j, x in enumerate(arrays)]
            minus = [x if j != i else x - eps * d for j, x in enumerate(arrays)]
            f_plus = (fn(*[minidl.tensor(x) for x in plus]).numpy() * c).sum()
            f_minus = (fn(*[minidl.tensor(x) for x in minus]).numpy() * c).sum()
            numeric = (f_plus - f_minus) / (2 * eps)
            analytic = float((tensors[i].grad.numpy() * d).sum())
            assert abs(numeric - analytic) <= tol * max(1.0, abs(numeric))


# ------------------------------------------------------------------------------------------------
# Activations, softmax, linear
# ------------------------------------------------------------------------------------------------

ACTIVATIONS = [
    (lambda x: F.relu(x), lambda x: TF.relu(x)),
    (lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2)),
    (lambda x: F.elu(x, 0.7), lambda x: TF.elu(x, 0.7)),
    (lambda x: F.sigmoid(x), lambda x: torch.sigmoid(x)),
    (lambda x: F.tanh(x), lambda x: torch.tanh(x)),
    (lambda x: F.gelu(x), lambda x: TF.gelu(x)),
    (lambda x: F.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    (lambda x: F.relu6(x * 4), lambda x: TF.relu6(x * 4)),
]


@pytest.mark.parametrize("i", range(len(ACTIVATIONS)))
def test_activations_vs_torch(i):
    ours_fn, torch_fn = ACTIVATIONS[i]
    x_np = np.random.default_rng(i).standard_normal((3, 5, 7)).astype(np.float32) * 2
    x, tx = _pair(x_np)
    _check(ours_fn(x), torch_fn(tx), [(x, tx)])


@settings(max_examples=30, deadline=None)
@given(shape=st.sampled_from([(7,), (3, 5), (2, 3, 4), (2, 3, 2, 2)]), dim=st.integers(-4, 3),
       log=st.booleans(), seed=st.integers(0, 10**6))
def test_softmax_vs_torch(shape, dim, log, seed):
    if not -len(shape) <= dim < len(shape):
        return
    x_np = (np.random.default_rng(seed).standard_normal(shape) * 5).astype(np.float32)
    x, tx = _pair(x_np)
    ours = F.log_softmax(x, dim) if log else F.softmax(x, dim)
    theirs = TF.log_softmax(tx, dim) if log else TF.softmax(tx, dim)
    _check(ours, theirs, [(x, tx)], seed=seed)


def test_tensor_methods_route_to_functional():
    x_np = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    x = minidl.tensor(x_np)
    assert rel_err(x.relu().numpy(), np.maximum(x_np, 0)) == 0
    assert rel_err(x.softmax(1).numpy(), TF.softmax(torch.tensor(x_np), 1).numpy()) <= TOL


@settings(max_examples=30, deadline=None)
@given(lead=st.sampled_from([(), (3,), (2, 3)]), fin=st.integers(1, 6), fout=st.integers(1, 6), bias=st.booleans(),
       seed=st.integers(0, 10**6))
def test_linear_vs_torch(lead, fin, fout, bias, seed):
    rng = np.random.default_rng(seed)
    x, tx = _pair(rng.standard_normal(lead + (fin,)).astype(np.float32))
    w, tw = _pair(rng.standard_normal((fout, fin)).astype(np.float32))
    b, tb = _pair(rng.standard_normal(fout).astype(np.float32))
    pairs = [(x, tx), (w, tw)] + ([(b, tb)] if bias else [])
    _check(F.linear(x, w, b if bias else None), TF.linear(tx, tw, tb if bias else None), pairs, seed=seed)


def test_linear_errors():
    with pytest.raises(ValueError, match=r"linear: input of shape \(2, 5\) has last dim 5, but weight \(3, 4\) expects in_features=4"):
        F.linear(minidl.randn(2, 5), minidl.randn(3, 4))
    with pytest.raises(TypeError, match="floating-point"):
        F.linear(minidl.tensor([[1, 2]]), minidl.randn(3, 2))


def test_activation_float64_finite_differences():
    x = np.random.default_rng(1).standard_normal((4, 5))
    for fn in (F.tanh, F.sigmoid, F.gelu, lambda t: F.elu(t, 1.3), lambda t: F.log_softmax(t, 1), lambda t: F.softmax(t, 0)):
        _finite_difference_check(fn, [x])


# ------------------------------------------------------------------------------------------------
# Embedding, one_hot, pad
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_vs_torch(padding_idx):
    rng = np.random.default_rng(0)
    w, tw = _pair(rng.standard_normal((6, 4)).astype(np.float32))
    idx = np.array([[0, 2, 5], [2, 2, 1]])  # repeated indices must accumulate
    ours = F.embedding(minidl.tensor(idx), w, padding_idx=padding_idx)
    theirs = TF.embedding(torch.tensor(idx), tw, padding_idx=padding_idx)
    _check(ours, theirs, [(w, tw)])
    if padding_idx is not None:
        assert np.all(w.grad.numpy()[padding_idx] == 0)


def test_embedding_errors():
    with pytest.raises(ValueError, match=r"embedding: index out of range: input \(3,\) holds values in \[0, 6\] but weight \(6, 2\) has 6 rows"):
        F.embedding(minidl.tensor([0, 1, 6]), minidl.randn(6, 2))
    with pytest.raises(TypeError, match="integer indices"):
        F.embedding(minidl.tensor([0.0, 1.0]), minidl.randn(6, 2))


def test_one_hot_matches_torch():
    t = np.array([[0, 3], [2, 1]])
    np.testing.assert_array_equal(F.one_hot(minidl.tensor(t), 5).numpy(), TF.one_hot(torch.tensor(t), 5).numpy())
    assert F.one_hot(minidl.tensor(t)).shape == (2, 2, 4)
    with pytest.raises(ValueError, match=r"class values must be in \[0, 3\)"):
        F.one_hot(minidl.tensor(t), 3)


@pytest.mark.parametrize("pad", [(1, 2), (0, 1, 2, 0), (1, 1, 1, 1, 2, 3)])
def test_pad_vs_torch(pad):
    x, tx = _pair(np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32))
    _check(F.pad(x, pad, value=0.5), TF.pad(tx, pad, value=0.5), [(x, tx)])


# ------------------------------------------------------------------------------------------------
# Convolution
# ------------------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(dims=st.sampled_from([1, 2, 3]), groups=st.sampled_from([1, 2]), k=st.integers(1, 3), stride=st.integers(1, 2),
       padding=st.integers(0, 2), dilation=st.integers(1, 2), bias=st.booleans(),
       layout=st.sampled_from(["NCHW", "NHWC"]), seed=st.integers(0, 10**6))
def test_conv_vs_torch(dims, groups, k, stride, padding, dilation, bias, layout, seed):
    rng = np.random.default_rng(seed)
    size = 5 if dims < 3 else 4
    if size + 2 * padding < dilation * (k - 1) + 1:
        return
    C, K = 2 * groups, 3 * groups
    x, tx = _pair(rng.standard_normal((2, C) + (size,) * dims).astype(np.float32))
    w, tw = _pair(rng.standard_normal((K, C // groups) + (k,) * dims).astype(np.float32))
    b, tb = _pair(rng.standard_normal(K).astype(np.float32))
    ours_fn = (F.conv1d, F.conv2d, F.conv3d)[dims - 1]
    torch_fn = (TF.conv1d, TF.conv2d, TF.conv3d)[dims - 1]
    ours = ours_fn(x, w, b if bias else None, stride, padding, dilation, groups, layout=layout)
    theirs = torch_fn(tx, tw, tb if bias else None, stride, padding, dilation, groups)
    _check(ours, theirs, [(x, tx), (w, tw)] + ([(b, tb)] if bias else []), seed=seed)


@pytest.mark.parametrize("k,dilation", [(3, 1), (4, 1), (2, 3)])
def test_conv_padding_same_and_valid(k, dilation):
    rng = np.random.default_rng(0)
    x, tx = _pair(rng.standard_normal((1, 2, 7, 6)).astype(np.float32))
    w, tw = _pair(rng.standard_normal((3, 2, k, k)).astype(np.float32))
    _check(F.conv2d(x, w, padding="same", dilation=dilation), TF.conv2d(tx, tw, padding="same", dilation=dilation),
           [(x, tx), (w, tw)])
    assert F.conv2d(x, w, padding="valid").shape == tuple(TF.conv2d(tx, tw, padding="valid").shape)


@pytest.mark.parametrize("algo", ["direct", "im2col_gemm", "winograd"])
def test_conv_explicit_algorithms_agree(algo):
    rng = np.random.default_rng(0)
    x, tx = _pair(rng.standard_normal((2, 3, 6, 6)).astype(np.float32))
    w, tw = _pair(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    _check(F.conv2d(x, w, padding=1, algo=algo), TF.conv2d(tx, tw, padding=1), [(x, tx), (w, tw)], tol=2e-5)


def test_conv_unbatched_and_float64_finite_differences():
    rng = np.random.default_rng(0)
    x, tx = _pair(rng.standard_normal((2, 5, 5)).astype(np.float32))
    w, tw = _pair(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    _check(F.conv2d(x, w), TF.conv2d(tx, tw), [(x, tx), (w, tw)])
    _finite_difference_check(lambda a, b, c: F.conv2d(a, b, c, stride=2, padding=1, groups=2),
                             [rng.standard_normal((2, 4, 5, 4)), rng.standard_normal((2, 2, 3, 2)), rng.standard_normal(2)])


def test_conv_errors_pass_through():
    with pytest.raises(ValueError, match=r"conv2d: expected a 4-D input .* got shape \(5, 5\)"):
        F.conv2d(minidl.randn(5, 5), minidl.randn(2, 3, 3, 3))
    with pytest.raises(ValueError, match=r"convolution_forward: .*3 channels.*\(2, 4, 3, 3\)"):
        F.conv2d(minidl.randn(1, 3, 5, 5), minidl.randn(2, 4, 3, 3))
    with pytest.raises(ValueError, match="padding='same' is not supported for strided"):
        F.conv2d(minidl.randn(1, 3, 5, 5), minidl.randn(2, 3, 3, 3), stride=2, padding="same")
    with pytest.raises(TypeError, match="same dtype"):
        F.conv2d(minidl.randn(1, 3, 5, 5), minidl.randn(2, 3, 3, 3, dtype=minidl.float64))


# ------------------------------------------------------------------------------------------------
# Pooling
# ------------------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(dims=st.sampled_from([1, 2, 3]), k=st.integers(1, 3), stride=st.sampled_from([None, 1, 2]),
       padding=st.integers(0, 1), ceil_mode=st.booleans(), mode=st.sampled_from(["max", "avg_in", "avg_ex"]),
       seed=st.integers(0, 10**6))
def test_pooling_vs_torch(dims, k, stride, padding, ceil_mode, mode, seed):
    if 2 * padding > k:
        return
    size = 6 if dims < 3 else 4
    x_np = np.random.default_rng(seed).standard_normal((2, 3) + (size,) * dims).astype(np.float32)
    x, tx = _pair(x_np)
    if mode == "max":
        ours = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[dims - 1](x, k, stride, padding, ceil_mode=ceil_mode)
        theirs = (TF.max_pool1d, TF.max_pool2d, TF.max_pool3d)[dims - 1](tx, k, stride, padding, ceil_mode=ceil_mode)
    else:
        include = mode == "avg_in"
        ours = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[dims - 1](x, k, stride, padding, ceil_mode, include)
        theirs = (TF.avg_pool1d, TF.avg_pool2d, TF.avg_pool3d)[dims - 1](tx, k, stride, padding, ceil_mode, include)
    _check(ours, theirs, [(x, tx)], seed=seed)


@pytest.mark.parametrize("dims,out", [(1, 3), (2, (3, 2)), (2, (None, 4)), (3, 2)])
def test_adaptive_avg_pool_vs_torch(dims, out):
    x, tx = _pair(np.random.default_rng(0).standard_normal((2, 3) + (7, 5, 4)[:dims]).astype(np.float32))
    ours = (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)[dims - 1](x, out)
    theirs = (TF.adaptive_avg_pool1d, TF.adaptive_avg_pool2d, TF.adaptive_avg_pool3d)[dims - 1](tx, out)
    _check(ours, theirs, [(x, tx)])


def test_pooling_errors():
    with pytest.raises(ValueError, match=r"max_pool2d: expected a 4-D input .* got shape \(4,\)"):
        F.max_pool2d(minidl.randn(4), 2)
    with pytest.raises(ValueError, match="max_pool2d: .*dilation must be >= 1"):
        F.max_pool2d(minidl.randn(1, 1, 4, 4), 2, dilation=0)
    with pytest.raises(ValueError, match="avg_pool2d: divisor_override must be a nonzero int"):
        F.avg_pool2d(minidl.randn(1, 1, 4, 4), 2, divisor_override=0)


# ------------------------------------------------------------------------------------------------
# Batch norm, LRN, dropout
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 6), (2, 3, 4, 5), (2, 3, 2, 3, 2)])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_vs_torch(shape, training, affine):
    rng = np.random.default_rng(0)
    x, tx = _pair((rng.standard_normal(shape) * 2 + 1).astype(np.float32))
    g, tg = _pair(rng.uniform(0.5, 1.5, 3).astype(np.float32))
    b, tb = _pair(rng.standard_normal(3).astype(np.float32))
    rm_np, rv_np = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    rm, rv = minidl.tensor(rm_np), minidl.tensor(rv_np)
    trm, trv = torch.tensor(rm_np), torch.tensor(rv_np)
    ours = F.batch_norm(x, rm, rv, g if affine else None, b if affine else None, training, 0.3, 1e-4)
    theirs = TF.batch_norm(tx, trm, trv, tg if affine else None, tb if affine else None, training, 0.3, 1e-4)
    _check(ours, theirs, [(x, tx)] + ([(g, tg), (b, tb)] if affine else []))
    assert rel_err(rm.numpy(), trm.numpy()) <= TOL and rel_err(rv.numpy(), trv.numpy()) <= TOL
    if training:
        assert rel_err(rm.numpy(), rm_np) > 1e-3  # really updated in place


def test_batch_norm_float64_finite_differences():
    rng = np.random.default_rng(2)
    _finite_difference_check(lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True),
                             [rng.standard_normal((3, 2, 4)), rng.uniform(0.5, 1.5, 2), rng.standard_normal(2)])


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_local_response_norm_vs_torch(size):
    x, tx = _pair(np.random.default_rng(size).standard_normal((2, 6, 3, 4)).astype(np.float32) * 3)
    _check(F.local_response_norm(x, size, 1e-2, 0.75, 2.0), TF.local_response_norm(tx, size, 1e-2, 0.75, 2.0), [(x, tx)])
    with pytest.raises(ValueError, match="at least 3 dims"):
        F.local_response_norm(minidl.randn(2, 3), 2)


def test_dropout_statistics_mask_reuse_and_eval():
    minidl.manual_seed(0)
    x = minidl.ones(200, 100, requires_grad=True)
    y = F.dropout(x, 0.3)
    kept = y.detach().numpy() != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(y.detach().numpy()[kept], 1 / 0.7, rtol=1e-6)
    y.sum().backward()
    # the backward regenerated the very same mask from the seed
    np.testing.assert_array_equal(x.grad.numpy() != 0, kept)
    np.testing.assert_allclose(x.grad.numpy()[kept], 1 / 0.7, rtol=1e-6)
    assert F.dropout(x, 0.3, training=False) is x
    y2 = F.dropout(x, 0.3)
    assert not np.array_equal(y2.detach().numpy() != 0, kept)  # a fresh seed per call
    with pytest.raises(ValueError, match=r"dropout: p .* must be in \[0, 1\], got 1.5"):
        F.dropout(x, 1.5)
