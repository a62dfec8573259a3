"""Second derivatives (create_graph=True, minidl/autograd/higher_order.py) against torch in float64: Hessian-vector
products of an MLP through every activation with a written double backward, a physics-informed network's u_xx, a
WGAN-GP gradient penalty, a MAML inner step through cross-entropy, the ops one by one, backward(create_graph=True)
into .grad, and what a Function without a tensor-op backward says."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import minidl
import minidl.nn.functional as F

RNG = np.random.default_rng(0)
X, W1, B1, W2, V = (RNG.standard_normal(s) for s in ((5, 3), (4, 3), (4,), (2, 4), (4, 3)))


def _lib_f(lib):
    return F if lib is minidl else TF


def _both(fn):
    """fn(lib) -> list of tensors, for minidl and torch; the values must agree to float64 rounding."""
    got = [[t.detach().numpy() for t in fn(lib)] for lib in (minidl, torch)]
    assert len(got[0]) == len(got[1])
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("act", ["tanh", "sigmoid", "relu", "elu", "leaky_relu", "relu6", "gelu", "gelu_tanh",
                                 "softplus_free"])
def test_hessian_vector_product_of_an_mlp_matches_torch(act):
    def fn(lib):
        Fm = _lib_f(lib)
        w1, b, w2 = (lib.tensor(a, requires_grad=True) for a in (W1, B1, W2))
        z = Fm.linear(lib.tensor(X), w1, b)
        h = (z.sin() * z if act == "softplus_free" else Fm.gelu(z, approximate="tanh") if act == "gelu_tanh"
             else getattr(Fm, act)(z))
        y = Fm.linear(h, w2)
        loss = (y ** 2).mean() + y.exp().sum() * 0.01 + (h.cos() * h).sum() * 0.1
        g1, gb, g2 = lib.autograd.grad(loss, [w1, b, w2], create_graph=True)
        hv = lib.autograd.grad((g1 * lib.tensor(V)).sum() + (gb * gb).sum() + (g2 ** 2).sum(), [w1, b, w2])
        return [g1, gb, g2, *hv]

    _both(fn)


def test_physics_informed_second_derivative_matches_torch():
    """u(x) by a tanh network, u_x and u_xx by autograd.grad with create_graph, then the residual's gradient."""
    def fn(lib):
        Fm = _lib_f(lib)
        x = lib.tensor(np.linspace(0, 1, 7).reshape(-1, 1), requires_grad=True)
        w1 = lib.tensor(np.random.default_rng(1).standard_normal((8, 1)), requires_grad=True)
        w2 = lib.tensor(np.random.default_rng(2).standard_normal((1, 8)), requires_grad=True)
        u = Fm.linear(lib.tanh(Fm.linear(x, w1)), w2)
        (ux,) = lib.autograd.grad(u, x, grad_outputs=lib.ones_like(u), create_graph=True)
        (uxx,) = lib.autograd.grad(ux, x, grad_outputs=lib.ones_like(ux), create_graph=True)
        ((uxx + u) ** 2).mean().backward()
        return [u, ux, uxx, w1.grad, w2.grad]

    _both(fn)


def test_gradient_penalty_matches_torch():
    """WGAN-GP's penalty on a leaky-ReLU critic: (||d critic / d x|| - 1)^2, then its gradient to the weights."""
    def fn(lib):
        Fm = _lib_f(lib)
        x = lib.tensor(X, requires_grad=True)
        w1, w2 = lib.tensor(W1, requires_grad=True), lib.tensor(W2, requires_grad=True)
        d = Fm.linear(Fm.leaky_relu(Fm.linear(x, w1), 0.2), w2)
        (g,) = lib.autograd.grad(d.sum(), x, create_graph=True)
        penalty = ((g.pow(2).sum(1).sqrt() - 1) ** 2).mean()
        penalty.backward()
        return [penalty, w1.grad, w2.grad]

    _both(fn)


@pytest.mark.parametrize("channels_last", [False, True])
def test_gradient_penalty_through_a_convolutional_critic_matches_torch(channels_last):
    """WGAN-GP as it is trained on images: the critic is strided, grouped and dilated convolutions (1-D and 2-D,
    with and without bias) and leaky ReLUs; the penalty's gradient reaches every weight and bias through the
    convolutions' double backward. channels_last: the critic's input in channels-last memory (an NHWC plan)."""
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((3, 4, 9, 8))
    ws = [rng.standard_normal(s) for s in ((6, 2, 3, 3), (6,), (4, 6, 3, 3), (5, 4, 2))]

    def fn(lib):
        Fm = _lib_f(lib)
        x = lib.tensor(xs, requires_grad=True)
        if channels_last:
            x = x.to(memory_format=lib.channels_last)
        w1, b1, w2, w3 = (lib.tensor(a, requires_grad=True) for a in ws)
        h = Fm.leaky_relu(Fm.conv2d(x, w1, b1, stride=2, padding=1, groups=2), 0.2)
        h = Fm.leaky_relu(Fm.conv2d(h, w2, padding=2, dilation=2), 0.2)
        d = Fm.conv1d(h.reshape(3, 20, 4), w3, stride=2, groups=5)
        (g,) = lib.autograd.grad(d.sum(), x, create_graph=True)
        penalty = ((g.pow(2).sum((1, 2, 3)).sqrt() - 1) ** 2).mean()
        penalty.backward()
        return [g, penalty, w1.grad, b1.grad, w2.grad, w3.grad]

    _both(fn)


def test_hessian_vector_product_through_transposed_convolutions_matches_torch():
    """A generator's conv_transpose2d (stride 2, output_padding, bias) then a conv2d, squared: grad with
    create_graph to every weight, then the gradient of <grad, v> (H v) to the weights and to the input; and a
    third derivative of one product, through the double backward's own ops (ConvolutionBackwardFilter's)."""
    rng = np.random.default_rng(6)
    z, wt, bt, wc = (rng.standard_normal(s) for s in ((2, 3, 4, 5), (3, 4, 3, 3), (4,), (2, 4, 3, 3)))
    vs = [rng.standard_normal(a.shape) for a in (wt, bt, wc)]

    def fn(lib):
        Fm = _lib_f(lib)
        zz = lib.tensor(z, requires_grad=True)
        w1, b1, w2 = (lib.tensor(a, requires_grad=True) for a in (wt, bt, wc))
        y = Fm.conv2d(Fm.tanh(Fm.conv_transpose2d(zz, w1, b1, stride=2, padding=1, output_padding=1)), w2,
                      padding=1)
        grads = lib.autograd.grad((y ** 2).sum(), [w1, b1, w2], create_graph=True)
        dot = sum((g * lib.tensor(v)).sum() for g, v in zip(grads, vs))
        hv = lib.autograd.grad(dot, [w1, b1, w2, zz], create_graph=True)
        (third,) = lib.autograd.grad((hv[2] ** 2).sum(), w2)
        return [*grads, *hv, third]

    _both(fn)


POOLS = {
    "max_pool2d": lambda Fm, h: Fm.max_pool2d(h, 3, stride=2, padding=1, dilation=(1, 2), ceil_mode=True),
    "avg_pool2d": lambda Fm, h: Fm.avg_pool2d(h, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    "avg_pool2d_divisor": lambda Fm, h: Fm.avg_pool2d(h, 2, divisor_override=3),
    "max_pool1d": lambda Fm, h: Fm.max_pool1d(h.flatten(2), 4, stride=3),
    "avg_pool1d": lambda Fm, h: Fm.avg_pool1d(h.flatten(2), 3, padding=1),
    "max_pool3d": lambda Fm, h: Fm.max_pool3d(h.unsqueeze(1), 2),
    "adaptive_avg_pool2d": lambda Fm, h: Fm.adaptive_avg_pool2d(h, (3, 2)),
    "max_pool2d_with_indices": lambda Fm, h: Fm.max_pool2d(h, 2, return_indices=True)[0],
}


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("pool", sorted(POOLS))
def test_second_derivatives_through_pooling_match_torch(pool, channels_last):
    """A gradient penalty and a Hessian-vector product through each pooling op after a convolution with bias
    (a critic's conv + pool): the pools' double backward (PoolingBackward, AdaptiveAvgPoolingBackward). The
    bias before a max pool receives torch's zero-through-the-argmax term. Then third order (max pooling's: a gather
    at the argmax)."""
    rng = np.random.default_rng(7)
    xs, w, b, v = (rng.standard_normal(s) for s in ((2, 3, 9, 10), (4, 3, 3, 3), (4,), (4, 3, 3, 3)))

    def fn(lib):
        Fm = _lib_f(lib)
        x = lib.tensor(xs, requires_grad=True)
        if channels_last:
            x = x.to(memory_format=lib.channels_last)
        wt, bt = lib.tensor(w, requires_grad=True), lib.tensor(b, requires_grad=True)
        h = Fm.conv2d(x, wt, bt, padding=1).tanh()
        if channels_last:
            h = h.contiguous(memory_format=lib.channels_last)
        y = POOLS[pool](Fm, h)
        (g,) = lib.autograd.grad((y ** 3).sum(), x, create_graph=True)
        penalty = ((g.pow(2).sum((1, 2, 3)).sqrt() - 1) ** 2).mean()
        gw, gb = lib.autograd.grad(penalty, [wt, bt], create_graph=True)
        return [g, penalty, gw, gb, *lib.autograd.grad((gw * lib.tensor(v)).sum(), [wt, bt])]

    _both(fn)


NORMS = {
    "batch_norm": lambda Fm, lib, h, w, b: Fm.batch_norm(h, None, None, w, b, training=True),
    "batch_norm_eval": lambda Fm, lib, h, w, b: Fm.batch_norm(h, lib.tensor([0.1, -0.2, 0.3, 0.0], dtype=h.dtype),
                                                               lib.tensor([1.5, 0.5, 2.0, 1.0], dtype=h.dtype), w, b),
    "batch_norm_plain": lambda Fm, lib, h, w, b: Fm.batch_norm(h, lib.zeros(4, dtype=h.dtype),
                                                                lib.ones(4, dtype=h.dtype), training=True, eps=1e-3),
    "batch_norm_channels_last": lambda Fm, lib, h, w, b: Fm.batch_norm(
        h.contiguous(memory_format=lib.channels_last), None, None, w, b, training=True),
    "layer_norm": lambda Fm, lib, h, w, b: Fm.layer_norm(h, (5, 6), w[:1] * lib.ones(5, 6, dtype=h.dtype),
                                                          b[1:2] * lib.ones(5, 6, dtype=h.dtype)),
    "layer_norm_plain": lambda Fm, lib, h, w, b: Fm.layer_norm(h, (6,), eps=1e-2),
    "rms_norm": lambda Fm, lib, h, w, b: Fm.rms_norm(h, (6,), w[:1].expand(6) * 2, eps=1e-6),
    "group_norm": lambda Fm, lib, h, w, b: Fm.group_norm(h, 2, w, b),
    "instance_norm": lambda Fm, lib, h, w, b: Fm.instance_norm(h, weight=w, bias=b),
}


@pytest.mark.parametrize("norm", sorted(NORMS))
def test_second_derivatives_through_normalization_match_torch(norm):
    """A gradient penalty through each normalisation after a convolution (a critic's conv + norm), and its gradient
    to every weight with create_graph: the norms' double backward (_normalization_backward_graph recomputes the
    statistics from x as tensor ops). Weights and biases reach the penalty through the norm's own gradient formula.
    (Third order: see the next test.)"""
    rng = np.random.default_rng(8)
    xs, cw, w, b, v = (rng.standard_normal(s) for s in ((3, 2, 5, 6), (4, 2, 3, 3), (4,), (4,), (4, 2, 3, 3)))

    def fn(lib):
        Fm = _lib_f(lib)
        x = lib.tensor(xs, requires_grad=True)
        cwt, wt, bt = (lib.tensor(a, requires_grad=True) for a in (cw, w, b))
        h = Fm.conv2d(x, cwt, padding=1)
        y = NORMS[norm](Fm, lib, h, wt, bt).tanh()
        (g,) = lib.autograd.grad((y ** 2 * lib.tensor(np.arange(6.0))).sum(), x, create_graph=True)
        penalty = ((g.pow(2).sum((1, 2, 3)).sqrt() - 1) ** 2).mean()
        grads = lib.autograd.grad(penalty, [cwt, wt, bt], create_graph=True, allow_unused=True)
        assert all(t.requires_grad for t in grads if t is not None)
        return [t for t in (g, penalty, *grads) if t is not None]

    _both(fn)


@pytest.mark.parametrize("norm", ["layer_norm", "batch_norm"])
def test_third_derivatives_through_normalization_match_the_composed_formula(norm):
    """Third order through layer / batch norm. torch's own layer_norm and batch_norm double backwards are not
    differentiable once more in full (on this case torch's third derivative of F.layer_norm / F.batch_norm differs
    from that of the same normalisation written as (x - mean) * rsqrt(var + eps) by 104% / 89% of its largest
    value, while the first and second agree to 1e-15), so the oracle here is torch on the composed
    formula, whose derivatives of every order are exact."""
    rng = np.random.default_rng(9)
    xs = rng.standard_normal((4, 3, 6))
    axes = (0, 2) if norm == "batch_norm" else (2,)

    def fn(lib):
        x = lib.tensor(xs, requires_grad=True)
        if lib is minidl:
            y = F.layer_norm(x, (6,), eps=1e-2) if norm == "layer_norm" else F.batch_norm(x, None, None,
                                                                                        training=True, eps=1e-2)
        else:
            xc = x - x.mean(axes, keepdim=True)
            y = xc * ((xc * xc).mean(axes, keepdim=True) + 1e-2).rsqrt()
        (g,) = lib.autograd.grad((y ** 2 * lib.tensor(np.arange(6.0))).sum(), x, create_graph=True)
        (h,) = lib.autograd.grad((g ** 2).sum(), x, create_graph=True)
        (k,) = lib.autograd.grad((h ** 2).sum(), x)
        return [g, h, k]

    _both(fn)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_maml_inner_step_through_cross_entropy_matches_torch(reduction):
    """One inner SGD step with create_graph (MAML), the outer loss through the adapted weights."""
    def fn(lib):
        Fm = _lib_f(lib)
        w = lib.tensor(W1, requires_grad=True)
        x, t = lib.tensor(X), lib.tensor(np.array([0, 1, 2, 3, 1]))
        inner = Fm.cross_entropy(Fm.linear(x, w), t, reduction=reduction)
        inner = inner.sum() if reduction == "none" else inner
        (gw,) = lib.autograd.grad(inner, w, create_graph=True)
        adapted = w - 0.5 * gw
        outer = Fm.cross_entropy(Fm.linear(x * 2, adapted), t)
        outer.backward()
        return [inner, gw, outer, w.grad]

    _both(fn)


def test_each_op_of_the_double_backward_matches_torch():
    def fn(lib):
        x = lib.tensor(np.random.default_rng(4).standard_normal((3, 4)), requires_grad=True)
        y = ((x[:, 1:3].softmax(-1) * x.log_softmax(0)[:, :2]).sum()
             + lib.cat([x, x * 2], 0).permute(1, 0).reshape(-1).pow(3).mean()
             + (x.abs() + 1).log().sqrt().sum() + (x / (x * x + 1)).sum() + (x @ x.T).sum()
             + (x.unsqueeze(0).expand(2, 3, 4) * x).sum() + lib.where(x > 0, x * x, -x).sum()
             + (x.exp() - x.sin() * x.cos() + (-x)).sum() + (x.T @ x[:, 0]).sum() + x.float().double().sum())
        (g,) = lib.autograd.grad(y, x, create_graph=True)
        (g * g).sum().backward()
        return [y, g, x.grad]

    _both(fn)


def test_backward_with_create_graph_fills_grad_with_a_graph():
    def fn(lib):
        w = lib.tensor(np.random.default_rng(5).standard_normal(3), requires_grad=True)
        (w ** 3).sum().backward(create_graph=True)
        first = w.grad
        assert first.requires_grad
        (first * first).sum().backward()    # accumulates into w.grad in place, as torch's (first is w.grad)
        return [first, w.grad]

    _both(fn)


@pytest.mark.parametrize("channels_last", [False, True])
def test_second_derivatives_through_dropout_use_the_same_mask(channels_last):
    """Dropout's double backward is dropout again with the same seed: the gradient penalty through a dropped-out
    critic equals the one through the same critic with the forward's mask applied as a constant."""
    rng = np.random.default_rng(11)
    xs, w = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((3, 3, 1, 1))
    x = minidl.tensor(xs, requires_grad=True)
    if channels_last:
        x = x.to(memory_format=minidl.channels_last)
    wt = minidl.tensor(w, requires_grad=True)
    minidl.manual_seed(3)
    h = F.conv2d(x, wt).tanh()
    y = F.dropout(h, 0.4)
    mask = (y.detach().numpy() != 0) / 0.6
    (g,) = minidl.autograd.grad((y ** 3).sum(), x, create_graph=True)
    (gw,) = minidl.autograd.grad((g ** 2).sum(), wt)

    x2, w2 = minidl.tensor(xs, requires_grad=True), minidl.tensor(w, requires_grad=True)
    y2 = F.conv2d(x2, w2).tanh() * minidl.tensor(mask)
    (g2,) = minidl.autograd.grad((y2 ** 3).sum(), x2, create_graph=True)
    (gw2,) = minidl.autograd.grad((g2 ** 2).sum(), w2)
    assert 0.2 < mask.mean() / (1 / 0.6) < 0.9   # some kept, some dropped
    np.testing.assert_allclose(g.detach().numpy(), g2.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw.numpy(), gw2.numpy(), rtol=1e-11, atol=1e-11)


def test_functions_without_a_tensor_op_backward_say_so():
    x = minidl.randn(1, 1, 5, 5, requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"create_graph=True: the gradient of LocalResponseNorm .* finite "
                                                  r"differences"):
        minidl.autograd.grad(F.local_response_norm(x, 2).sum(), x, create_graph=True)
    with minidl.autocast("cpu", dtype=minidl.bfloat16):   # an autocast linear's products are 16-bit: it says so
        y = F.linear(minidl.randn(2, 3, requires_grad=True), minidl.randn(4, 3, requires_grad=True))
    with pytest.raises(NotImplementedError, match="AutocastLinear"):
        minidl.autograd.grad(y.float().sum(), y.grad_fn.inputs[0], create_graph=True)


def test_double_backward_through_python_numbers_as_the_gpu_wraps_them():
    """On the GPU a Python number beside a tensor is wrapped as a tensor around a NumPy scalar (binary's scalar
    path); backward_graph takes it as the number (saved_input), not as a CPU tensor. Made here by hand: x^3 * 2 /
    4 + 1 - 0.5 + 2^x + x^x, second derivative against torch's."""
    from minidl.autograd.tensor import Tensor
    from minidl.ops.elementwise import Add, Div, Mul, Pow, Sub

    def wrapped(v):
        o = Tensor._make(None)
        o._data = np.float64(v)
        return o

    x = minidl.tensor([0.5, 1.5, 2.0], dtype=minidl.float64, requires_grad=True)
    y = Sub.apply(Add.apply(Div.apply(Mul.apply(Pow.apply(x, wrapped(3.0)), wrapped(2.0)), wrapped(4.0)),
                            wrapped(1.0)), wrapped(0.5)) + Pow.apply(wrapped(2.0), x) + x ** x
    (g,) = minidl.autograd.grad(y.sum(), x, create_graph=True)
    (h,) = minidl.autograd.grad(g.sum(), x)
    tx = torch.tensor([0.5, 1.5, 2.0], dtype=torch.float64, requires_grad=True)
    ty = tx ** 3 * 2 / 4 + 1 - 0.5 + 2 ** tx + tx ** tx
    (tg,) = torch.autograd.grad(ty.sum(), tx, create_graph=True)
    (th,) = torch.autograd.grad(tg.sum(), tx)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-12)


def test_custom_function_written_in_tensor_ops_has_a_second_derivative_as_torch():
    """A torch-style Function (static forward/backward on a ctx) whose backward uses tensor ops: create_graph=True
    records that backward on the tape's own tensors (what ctx saved, the input and the output, mapped back), so the
    gradient can be differentiated again, as torch's. The tutorials' LegendrePolynomial3 and an exp that saves its
    output."""
    import torch

    def legendre(base):
        class P3(base):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return 0.5 * (5 * x ** 3 - 3 * x)

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * 1.5 * (5 * x ** 2 - 1)
        return P3

    def exp(base):
        class Exp(base):
            @staticmethod
            def forward(ctx, x):
                y = x.exp()
                ctx.save_for_backward(y)
                return y

            @staticmethod
            def backward(ctx, g):
                (y,) = ctx.saved_tensors
                return g * y
        return Exp

    values = np.array([-0.7, 0.2, 1.3])
    for make in (legendre, exp):
        results = []
        for lib, base in ((minidl, minidl.autograd.Function), (torch, torch.autograd.Function)):
            x = lib.tensor(values, requires_grad=True)
            (g,) = lib.autograd.grad(make(base).apply(x).sum(), x, create_graph=True)
            (gg,) = lib.autograd.grad((g * g).sum(), x)
            results.append((g.detach().numpy(), gg.numpy()))
        np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-12)
        np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-12)
