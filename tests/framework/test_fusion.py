"""Fused ops on the CPU: the references of batch_norm_relu_*, add_relu_*, convolution_bias_activation_forward
equal the unfused pair bit for bit, gradients equal torch's, and fuse_modules keeps state_dict keys,
outputs and training steps unchanged."""
import numpy as np
import pytest
import torch

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl import primitives as P
from tests.conftest import rel_err


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_relu_equals_batch_norm_then_relu_and_torch(training, affine, rng):
    x = rng.standard_normal((5, 3, 7, 6)).astype(np.float32)
    g = rng.standard_normal(3).astype(np.float32) if affine else None
    b = rng.standard_normal(3).astype(np.float32) if affine else None
    rm, rv = rng.standard_normal(3).astype(np.float32), rng.uniform(0.5, 2, 3).astype(np.float32)
    c = rng.standard_normal(x.shape).astype(np.float32)

    def run(fused):
        xt = minidl.tensor(x, requires_grad=True)
        wt = minidl.tensor(g, requires_grad=True) if affine else None
        bt = minidl.tensor(b, requires_grad=True) if affine else None
        m, v = minidl.tensor(rm.copy()), minidl.tensor(rv.copy())
        if fused:
            y = F.batch_norm_relu(xt, m, v, wt, bt, training=training, momentum=0.2)
        else:
            y = F.relu(F.batch_norm(xt, m, v, wt, bt, training=training, momentum=0.2))
        (y * minidl.tensor(c)).sum().backward()
        grads = [xt.grad.numpy()] + ([wt.grad.numpy(), bt.grad.numpy()] if affine else [])
        return y.detach().numpy(), grads, m.numpy(), v.numpy()

    fused, plain = run(True), run(False)
    np.testing.assert_array_equal(fused[0], plain[0])
    for a, p in zip(fused[1], plain[1]):
        np.testing.assert_array_equal(a, p)
    np.testing.assert_array_equal(fused[2], plain[2])
    np.testing.assert_array_equal(fused[3], plain[3])

    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(g, requires_grad=True) if affine else None
    bt = torch.tensor(b, requires_grad=True) if affine else None
    y = torch.relu(torch.nn.functional.batch_norm(xt, torch.tensor(rm), torch.tensor(rv), wt, bt, training, 0.2))
    (y * torch.tensor(c)).sum().backward()
    assert rel_err(fused[0], y.detach().numpy()) <= 1e-5
    assert rel_err(fused[1][0], xt.grad.numpy()) <= 1e-5
    if affine:
        assert rel_err(fused[1][1], wt.grad.numpy()) <= 1e-5 and rel_err(fused[1][2], bt.grad.numpy()) <= 1e-5


def test_batch_norm_relu_primitives_nhwc_and_per_activation(rng):
    for shape, mode, layout in [((4, 5, 6, 3), "spatial", "NHWC"), ((9, 7), "per_activation", "NCHW")]:
        x = rng.standard_normal(shape)
        pshape = P.batch_norm_param_shape(shape, mode, layout)
        g, b = rng.standard_normal(pshape), rng.standard_normal(pshape)
        y, m, s = P.batch_norm_relu_forward_training(x, g, b, None, None, mode=mode, layout=layout)
        y0, m0, s0 = P.batch_norm_forward_training(x, g, b, None, None, mode=mode, layout=layout)
        np.testing.assert_array_equal(y, np.maximum(y0, 0))
        dy = rng.standard_normal(shape)
        got = P.batch_norm_relu_backward(x, dy, g, b, m, s, mode=mode, layout=layout)
        want = P.batch_norm_backward(x, np.where(y0 > 0, dy, 0), g, m, s, mode=mode, layout=layout)
        for a, w in zip(got, want):
            np.testing.assert_array_equal(a, w)
    with pytest.raises(ValueError, match=r"batch_norm_relu_backward: beta_ has shape \(4\)"):
        P.batch_norm_relu_backward(x, dy, g, np.zeros(4), m, s, mode="per_activation")


def test_add_relu_equals_add_then_relu(rng):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 4, 5)).astype(np.float32)
    c = rng.standard_normal((3, 4, 5)).astype(np.float32)
    outs = []
    for fused in (True, False):
        at, bt = minidl.tensor(a, requires_grad=True), minidl.tensor(b, requires_grad=True)
        y = F.add_relu(at, bt) if fused else F.relu(at + bt)
        (y * minidl.tensor(c)).sum().backward()
        outs.append((y.detach().numpy(), at.grad.numpy(), bt.grad.numpy()))
    for f, p in zip(*outs):
        np.testing.assert_array_equal(f, p)
    with pytest.raises(ValueError, match=r"add_relu_forward: a has shape \(3\) but b has shape \(4\)"):
        P.add_relu_forward(np.zeros(3, np.float32), np.zeros(4, np.float32))


@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_relu_equals_conv_then_relu(bias, rng):
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32) if bias else None
    c = rng.standard_normal((2, 5, 9, 8)).astype(np.float32)
    outs = []
    for fused in (True, False):
        xt, wt = minidl.tensor(x, requires_grad=True), minidl.tensor(w, requires_grad=True)
        bt = minidl.tensor(b, requires_grad=True) if bias else None
        y = F.conv2d_relu(xt, wt, bt, padding=1) if fused else F.relu(F.conv2d(xt, wt, bt, padding=1))
        (y * minidl.tensor(c)).sum().backward()
        outs.append([y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()] + ([bt.grad.numpy()] if bias else []))
    for f, p in zip(*outs):
        np.testing.assert_array_equal(f, p)
    with pytest.raises(TypeError, match="convolution_bias_activation_forward: activation_desc"):
        P.convolution_bias_activation_forward(x, w, P.ConvolutionDescriptor(1, 1, 1, 1, 2), b, "relu")


def _cnn():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 6, 3, bias=False),
                         nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(6 * 4 * 4, 5),
                         nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))


def test_fuse_modules_keeps_keys_parameters_and_training_steps(rng):
    minidl.manual_seed(0)
    plain = _cnn()
    fused = _cnn()
    fused.load_state_dict(plain.state_dict())
    params_before = [id(p) for p in fused.parameters()]
    opt_f = minidl.optim.SGD(fused.parameters(), lr=0.1, momentum=0.9)  # made before fusing: still works
    assert nn.utils.fuse_modules(fused) is fused
    assert [type(m).__name__ for m in fused][:5] == ["ConvReLU2d", "Identity", "Conv2d", "BatchNormReLU2d", "Identity"]
    assert type(fused[8]).__name__ == "BatchNormReLU1d"
    assert [id(p) for p in fused.parameters()] == params_before
    assert list(fused.state_dict()) == list(plain.state_dict())
    opt_p = minidl.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        x = minidl.tensor(rng.standard_normal((4, 1, 10, 10)).astype(np.float32))
        y = minidl.tensor(rng.integers(0, 3, 4))
        for model, opt in ((plain, opt_p), (fused, opt_f)):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    for (k, a), (_, b) in zip(plain.state_dict().items(), fused.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=k)
    plain.eval(), fused.eval()
    x = minidl.tensor(rng.standard_normal((3, 1, 10, 10)).astype(np.float32))
    np.testing.assert_array_equal(plain(x).detach().numpy(), fused(x).detach().numpy())


def test_fuse_conv_bn_eval_and_fuse_linear_bn_eval_fold_the_statistics_as_torch():
    """torch.nn.utils.fusion: an eval-mode batch norm folded into the conv (or linear) before it: the fused layer's
    weight and bias equal torch's, and its output equals bn(layer(x)); training-mode modules are refused."""
    import torch.nn.utils.fusion  # noqa: F401

    rng = np.random.default_rng(0)
    w, b, x = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4), rng.standard_normal((2, 3, 6, 6))
    stats = dict(running_mean=[.1, .2, -.3, .4], running_var=[1., 2., .5, .3], weight=[1., -1., 2., .5],
                 bias=[0., .1, .2, .3])
    results = []
    for lib in (minidl, torch):
        conv, bn = lib.nn.Conv2d(3, 4, 3), lib.nn.BatchNorm2d(4)
        lin, bn1 = lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4)
        with lib.no_grad():
            for layer in (conv, lin):
                layer.weight.copy_(lib.tensor(w if layer is conv else w[:, :, 0, 0], dtype=lib.float32))
                layer.bias.copy_(lib.tensor(b, dtype=lib.float32))
            for norm in (bn, bn1):
                for name, value in stats.items():
                    getattr(norm, name).copy_(lib.tensor(value))
        with pytest.raises(AssertionError, match="Fusion only for eval!"):
            lib.nn.utils.fusion.fuse_conv_bn_eval(conv, bn)
        for m in (conv, bn, lin, bn1):
            m.eval()
        fused = lib.nn.utils.fusion.fuse_conv_bn_eval(conv, bn)
        fused_lin = lib.nn.utils.fusion.fuse_linear_bn_eval(lin, bn1)
        X, X2 = lib.tensor(x, dtype=lib.float32), lib.tensor(x[0, :, 0, :5].T.copy(), dtype=lib.float32)
        results.append([t.detach().numpy() for t in (fused.weight, fused.bias, fused(X), bn(conv(X)),
                                                      fused_lin.weight, fused_lin.bias, fused_lin(X2), bn1(lin(X2)))])
        assert type(fused.weight).__name__ == "Parameter" and fused is not conv
    ours, theirs = results
    np.testing.assert_allclose(ours[2], ours[3], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours[6], ours[7], rtol=1e-5, atol=1e-5)
    for a, t in zip(ours, theirs):
        np.testing.assert_allclose(a, t, rtol=1e-5, atol=1e-5)
