"""Issue #19 and #16: the same snippet on minidl and on torch, compared (values, dtypes, gradients,
errors). In-place operators, version counter, module order, constructors, Size, named tuples,
__format__, contiguity, and the Tensor methods of PyTorch's tutorials with their gradients."""
import numpy as np
import pytest
import torch

import minidl

RNG = np.random.default_rng(19)


def both(array, requires_grad=False):
    a = np.asarray(array)
    return (minidl.tensor(a.copy(), requires_grad=requires_grad), torch.tensor(a.copy(), requires_grad=requires_grad))


def close(m, t, tol=1e-6):
    m = np.asarray(m._data if isinstance(m, minidl.Tensor) else m)
    t = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    assert m.shape == t.shape, (m.shape, t.shape)
    assert m.dtype == t.dtype, (m.dtype, t.dtype)
    np.testing.assert_allclose(m, t, rtol=tol, atol=tol)


# ------------------------------------------------------------------------------------------------
# In-place operators
# ------------------------------------------------------------------------------------------------


def test_manual_sgd_update_with_inplace_operators():
    """The classic loop: with no_grad(): w -= lr * w.grad; w.grad.zero_()  -- w keeps its identity."""
    x0, w0 = RNG.standard_normal((7, 3)).astype(np.float32), RNG.standard_normal((3, 1)).astype(np.float32)
    results = []
    for lib in (minidl, torch):
        x, w = lib.tensor(x0), lib.tensor(w0, requires_grad=True)
        w_id = id(w)
        for _ in range(3):
            loss = ((x @ w) ** 2).mean()
            loss.backward()
            with lib.no_grad():
                w -= 0.1 * w.grad
                w *= 0.99
                w.grad.zero_()
        assert id(w) == w_id and w.grad is not None and float(w.grad.abs().sum()) == 0
        results.append(w.detach().numpy().copy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_inplace_on_leaf_that_requires_grad_raises():
    for lib in (minidl, torch):
        w = lib.ones(3, requires_grad=True)
        for fn in (lambda: w.__iadd__(1), lambda: w.mul_(2), lambda: w.zero_(), lambda: w.__setitem__(0, 5.0)):
            with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
                fn()


def test_inplace_inside_graph_gives_torch_gradients():
    a0, b0 = RNG.standard_normal((4, 5)), RNG.standard_normal((5,))
    grads = []
    for lib in (minidl, torch):
        a, b = lib.tensor(a0, requires_grad=True), lib.tensor(b0, requires_grad=True)
        h = a * 2
        h += b            # broadcast add into a non-leaf
        h *= b            # Mul reads the old h: the rebase keeps a copy
        h[1] = b * 3      # CopySlices
        h.clamp_(-1.0, 2.0)
        h.relu_()
        buf = lib.zeros(4, 5, dtype=lib.float64)
        buf += h          # a tensor that did not require grad joins the graph
        (buf * buf).sum().backward()
        assert buf.requires_grad and not buf.is_leaf
        grads.append((buf.detach().numpy().copy(), a.grad.numpy().copy(), b.grad.numpy().copy()))
    for m, t in zip(*grads):
        np.testing.assert_allclose(m, t, rtol=1e-12, atol=1e-12)


def test_modified_saved_tensor_raises_at_backward():
    for lib in (minidl, torch):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        h = x * 1.5
        y = h * h            # Mul saves h
        h += 1
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
        z = x.exp()          # exp saves its output
        z.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.sum().backward()
    # ...but an op that saves nothing (add) lets the change through, as torch does.
    for lib in (minidl, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        h = x * 1.0
        y = h + 1
        h += 5
        y.sum().backward()
        assert x.grad.tolist() == [1.0, 1.0]


def test_inplace_dtype_and_shape_errors():
    for lib in (minidl, torch):
        i = lib.tensor([1, 2, 3])
        with pytest.raises(RuntimeError, match="can't be cast"):
            i += 1.5
        with pytest.raises(RuntimeError, match="can't be cast"):
            i /= 2
        f = lib.zeros(3)
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            f += lib.ones(2, 3)
        i += 2
        f += lib.tensor([1, 2, 3])   # an int64 operand into float32 is fine
        assert i.tolist() == [3, 4, 5] and f.tolist() == [1.0, 2.0, 3.0] and f.dtype == lib.float32
        f.add_(lib.ones(3), alpha=2).sub_(1).div_(2).fill_(7).copy_(lib.tensor([1, 2, 3]))
        assert f.tolist() == [1.0, 2.0, 3.0]
        b = lib.tensor([True, False])
        with pytest.raises(RuntimeError, match="can't be cast"):
            b += 1


def test_copy_and_fill_inside_a_graph():
    grads = []
    for lib in (minidl, torch):
        w = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        h = lib.tensor([float("nan"), 1.0, 2.0]) + 0 * w  # NaN in the overwritten value must not leak
        h.copy_(w * 2)
        g = lib.tensor([float("inf"), 5.0]) + w[:2]
        g.fill_(w[2])
        (h.sum() + g.sum()).backward()
        grads.append((h.detach().numpy().copy(), g.detach().numpy().copy(), w.grad.numpy().copy()))
    for m, t in zip(*grads):
        np.testing.assert_array_equal(m, t)


def test_views_share_the_version_counter():
    for lib in (minidl, torch):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        h = x * 1.0
        y = h * h              # Mul saves h
        h[0].mul_(1.0) if lib is torch else h.detach()[0].mul_(1.0)  # a change through a view of h
        assert h._version == 1
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
        v = lib.zeros(3, 4)
        for view in (v.view(12), v.t(), v[1:], v.reshape(4, 3), v.detach()):
            view.add_(1)
        assert v._version == 5 and float(v.sum()) == 4 * 12 + 8
    h = minidl.ones(3, requires_grad=True) * 2
    with pytest.raises(NotImplementedError, match="view"):
        h[1:].mul_(3)  # torch rebases h's history here; minidl refuses instead of missing it


def test_version_counter_counts_inplace_changes():
    for lib in (minidl, torch):
        x = lib.zeros(3)
        x += 1
        x.mul_(2)
        x[0] = 3
        assert x._version == 3


# ------------------------------------------------------------------------------------------------
# Modules keep their order when children or parameters are re-assigned
# ------------------------------------------------------------------------------------------------


def _net(lib):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = lib.nn.Linear(4, 3)
            self.act = lib.nn.ReLU()
            self.fc = lib.nn.Linear(3, 2)
            self.scale = lib.nn.Parameter(lib.ones(2))

    return Net()


def test_reassigned_module_and_parameter_keep_their_place():
    orders = []
    for lib in (minidl, torch):
        net = _net(lib)
        net.conv = lib.nn.Linear(4, 3)              # replace the first child
        net.scale = lib.nn.Parameter(lib.zeros(2))  # replace a parameter
        net.fc.weight = lib.nn.Parameter(lib.zeros(2, 3))
        trunk = lib.nn.Sequential(*list(net.children())[:-1])
        orders.append(([n for n, _ in net.named_children()], [n for n, _ in net.named_parameters()],
                       list(net.state_dict()), [type(m).__name__ for m in trunk]))
    assert orders[0] == orders[1]
    assert orders[0][0] == ["conv", "act", "fc"]


# ------------------------------------------------------------------------------------------------
# Constructors, Size, named tuples, __format__, contiguity
# ------------------------------------------------------------------------------------------------


def test_constructors_as_torch():
    for make in (lambda lib: lib.Tensor([1, 2]), lambda lib: lib.Tensor(2, 3), lambda lib: lib.Tensor(),
                 lambda lib: lib.FloatTensor([[1, 2]]), lambda lib: lib.LongTensor([1, 2]),
                 lambda lib: lib.LongTensor(4), lambda lib: lib.DoubleTensor(2, 2), lambda lib: lib.ByteTensor([1]),
                 lambda lib: lib.tensor([1, 2]), lambda lib: lib.tensor([1.0, 2])):
        m, t = make(minidl), make(torch)
        assert tuple(m.shape) == tuple(t.shape) and m.dtype == t.numpy().dtype
    assert isinstance(minidl.LongTensor([1]), minidl.LongTensor) and not isinstance(minidl.ones(1), minidl.LongTensor)
    v = minidl.autograd.Variable(minidl.ones(2), requires_grad=True)
    tv = torch.autograd.Variable(torch.ones(2), requires_grad=True)
    assert v.requires_grad == tv.requires_grad and v.is_leaf == tv.is_leaf
    assert minidl.ones(2, 3).type() == torch.ones(2, 3).type() == "torch.FloatTensor"
    assert minidl.ones(2).type(minidl.LongTensor).dtype == minidl.int64
    assert minidl.ones(2).type("torch.DoubleTensor").dtype == minidl.float64


def test_size_is_a_tuple_with_numel():
    m, t = minidl.zeros(2, 3, 5), torch.zeros(2, 3, 5)
    assert isinstance(m.shape, minidl.Size) and isinstance(m.size(), tuple) and isinstance(m.shape, tuple)
    assert m.size() == t.size() == (2, 3, 5) and m.shape.numel() == t.shape.numel() == 30
    assert isinstance(m.shape[1:], minidl.Size) and m.shape[1:] == t.shape[1:] and m.size(-1) == t.size(-1)
    assert repr(m.shape) == repr(t.shape).replace("torch", "minidl")


def test_named_tuple_returns():
    a = RNG.standard_normal((4, 7)).astype(np.float32)
    m, t = both(a)
    for name, call in [("max", lambda x: x.max(1)), ("min", lambda x: x.min(0, keepdim=True)),
                       ("sort", lambda x: x.sort(1, descending=True)), ("topk", lambda x: x.topk(3)),
                       ("kthvalue", lambda x: x.kthvalue(2, 0)), ("median", lambda x: x.median(1)),
                       ("mode", lambda x: (x * 2).round().mode(1)), ("mode", lambda x: (x * 2).round().mode(0, True))]:
        rm, rt = call(m), call(t)
        assert type(rm).__name__ == type(rt).__name__ == name
        close(rm.values, rt.values)
        close(rm.indices, rt.indices)
        values, indices = rm  # still unpacks as a pair
        assert values is rm[0] and indices is rm.indices


def test_format_of_0d_tensor():
    for lib in (minidl, torch):
        x = lib.tensor(3.14159)
        assert "{:.2f}".format(x) == "3.14" and f"{lib.tensor(7):d}" == "7"
    assert "{}".format(minidl.ones(2)) == str(minidl.ones(2))


def test_contiguity_and_view():
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    for lib in (minidl, torch):
        x = lib.tensor(a)
        t = x.t()
        assert x.is_contiguous() and not t.is_contiguous()
        with pytest.raises(RuntimeError, match=r"view size is not compatible.*Use .reshape"):
            t.view(-1)
        assert t.contiguous().is_contiguous() and t.contiguous().view(-1).shape == (12,)
        assert t.reshape(-1).tolist() == a.T.reshape(-1).tolist()
        assert x[:, 1:3].view(3, 2, 1).shape == (3, 2, 1)  # a strided view that still fits: allowed
        c = x.contiguous()
        assert c is x


# ------------------------------------------------------------------------------------------------
# Issue #16: Tensor methods with their gradients against torch
# ------------------------------------------------------------------------------------------------

IDX = RNG.integers(0, 5, size=(4, 6))

METHODS = {
    "mm": lambda x, lib: x[:, :5].mm(x[:, 1:].t()),
    "bmm": lambda x, lib: x.reshape(2, 3, 4).bmm(x.reshape(2, 4, 3)),
    "mv": lambda x, lib: x.mv(x[0]),
    "dot": lambda x, lib: x[0].dot(x[1]),
    "narrow": lambda x, lib: x.narrow(1, 1, 3) * x.narrow(0, -2, 2).sum(),
    "index_select": lambda x, lib: x.index_select(1, lib.tensor([4, 0, 4, 2])),
    "masked_fill": lambda x, lib: x.masked_fill(x > 0.3, -1.0),
    "masked_select": lambda x, lib: x.masked_select(x > 0),
    "gather": lambda x, lib: x.gather(1, lib.tensor(IDX[:, :4] % 6)),
    "scatter": lambda x, lib: x.scatter(1, lib.tensor(np.argsort(IDX, 1)[:, :3]), x[:, :3] * 2),
    "scatter_add": lambda x, lib: x.scatter_add(1, lib.tensor(IDX[:, :4]), x[:, 1:5] ** 2),
    "scatter_dim0": lambda x, lib: x.scatter_add(0, lib.tensor(IDX[:2] % 4), x[1:3]),
    "sort": lambda x, lib: x.sort(1)[0] * lib.arange(6.0),
    "sort_desc": lambda x, lib: x.sort(0, descending=True).values * lib.arange(6.0),
    "topk": lambda x, lib: x.topk(3, dim=1).values * 2,
    "topk_small": lambda x, lib: x.topk(2, dim=0, largest=False).values,
    "kthvalue": lambda x, lib: x.kthvalue(3, 1).values,
    "median": lambda x, lib: x.median(),
    "cumsum": lambda x, lib: x.cumsum(1) * x.cumsum(0),
    "norm": lambda x, lib: x.norm(),
    "norm1_dim": lambda x, lib: x.norm(p=1, dim=1),
    "norm3_keep": lambda x, lib: x.norm(p=3, dim=0, keepdim=True),
    "norm_inf": lambda x, lib: x.norm(p=float("inf"), dim=1),
    "unbind": lambda x, lib: x.unbind(1)[2] * x.unbind(0)[1][:3].sum(),
    "flip": lambda x, lib: x.flip(0, 1) * x,
    "tril": lambda x, lib: x.tril(1) + x.triu(-1) * 2,
    "where": lambda x, lib: x.where(x > 0, x * 3),
    "expand_repeat": lambda x, lib: x[:1].expand(4, 6) * x.repeat(2, 1)[:4] + x.repeat(1, 2)[:, :6],
    "sin_cos": lambda x, lib: x.sin() * x.cos(),
    "repeat_new_dims": lambda x, lib: x[:2, :3].repeat(2, 1, 3) * x[0, 0],
    "round": lambda x, lib: (x * 3).round() * x + x.floor() + x.ceil() * x.trunc(),
    "clone_type_as": lambda x, lib: x.clone().type_as(lib.ones(1, dtype=lib.float64)) * 2,
    "max_dim": lambda x, lib: x.max(dim=1).values + x.min(0).values.sum(),
}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_tensor_method_and_gradient_as_torch(name):
    a = RNG.permutation(np.linspace(-2, 2, 24)).reshape(4, 6)  # distinct values: no ties
    m, t = both(a, requires_grad=True)
    om, ot = METHODS[name](m, minidl), METHODS[name](t, torch)
    close(om, ot, tol=1e-10)
    c = RNG.standard_normal(tuple(ot.shape))
    (om * minidl.tensor(c)).sum().backward()
    (ot * torch.tensor(c)).sum().backward()
    close(m.grad, t.grad, tol=1e-10)


def test_norm_of_zero_has_zero_gradient():
    m, t = both(np.zeros(3), requires_grad=True)
    m.norm().backward()
    t.norm().backward()
    close(m.grad, t.grad)


def test_inplace_scatter_and_methods_without_grad():
    a = RNG.standard_normal((3, 5)).astype(np.float32)
    idx = np.array([[0, 1, 2, 0, 1], [2, 0, 1, 1, 2]])
    for lib in (minidl, torch):
        x = lib.zeros(3, 5)
        x.scatter_(0, lib.tensor(idx), lib.tensor(a[:2]))
        y = lib.zeros(3, 5).scatter_add_(0, lib.tensor(idx), lib.tensor(a[:2]))
        z = lib.zeros(2, 4).scatter_(1, lib.tensor([[1], [3]]), 1.0)
        nz = lib.tensor([[0, 1], [2, 0]]).nonzero()
        one_hot = lib.zeros(10, dtype=lib.float).scatter_(0, lib.tensor(3), value=1)  # the Datasets tutorial
        r = (x, y, z, nz, one_hot, lib.tensor(a).argsort(1), lib.tensor(a).any(1), (lib.tensor(a) > 0).all(dim=0),
             lib.tensor(a).new_zeros(2, 3), lib.tensor(a).new_ones((2,)), lib.tensor(a).new_full((2,), 3.0),
             lib.tensor(a).new_tensor([1, 2]), lib.tensor([1, 2]).cumsum(0))
        if lib is minidl:
            mine = r
    for m_, t_ in zip(mine, r):
        close(m_, t_)


def test_grad_fn_next_functions():
    for lib in (minidl, torch):
        w = lib.ones(3, requires_grad=True)
        x = lib.ones(3)
        loss = ((w * x).sum() + w.sum()) * 2
        nf = loss.grad_fn.next_functions
        add = nf[0][0]
        assert len(nf) == 2 and nf[1] == (None, 0)
        mul_sum, w_sum = (f for f, _ in add.next_functions)
        mul = mul_sum.next_functions[0][0]
        acc, none = mul.next_functions
        assert none == (None, 0) and acc[0].variable is w


def test_mse_loss_promotes_integer_target_and_warns_on_broadcast():
    out = RNG.standard_normal((4, 1)).astype(np.float32)
    tgt = RNG.integers(0, 3, size=(4, 1))
    lm = minidl.nn.functional.mse_loss(minidl.tensor(out), minidl.tensor(tgt))
    lt = torch.nn.functional.mse_loss(torch.tensor(out), torch.tensor(tgt))
    close(lm, lt)
    with pytest.warns(UserWarning, match="different to the input size"):
        lm = minidl.nn.functional.mse_loss(minidl.tensor(out), minidl.tensor(out[:, 0]))
    with pytest.warns(UserWarning):
        lt = torch.nn.functional.mse_loss(torch.tensor(out), torch.tensor(out[:, 0]))
    close(lm, lt)


def test_pytorch_style_custom_function():
    def make(lib):
        class ScaledMul(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, w, scale):
                ctx.save_for_backward(x, w)
                ctx.scale = scale
                return x * w * scale

            @staticmethod
            def backward(ctx, g):
                x, w = ctx.saved_tensors
                return g * w * ctx.scale, (g * x * ctx.scale).sum(0), None

        return ScaledMul

    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal(4)
    out = []
    for lib in (minidl, torch):
        x, w = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        y = make(lib).apply(x, w, 2.5)
        (y * y).sum().backward()
        out.append((y.detach().numpy().copy(), x.grad.numpy().copy(), w.grad.numpy().copy()))
        assert y.requires_grad and y.grad_fn is not None
    for m, t in zip(*out):
        np.testing.assert_allclose(m, t, rtol=1e-12)


@pytest.mark.parametrize("make", [
    lambda lib: lib.tensor([0.123456, -2.0]), lambda lib: lib.tensor([1.0, 2.0, 3.0]),
    lambda lib: lib.tensor([1e-5, 1e3]), lambda lib: lib.tensor([1e9, 1.0]),
    lambda lib: lib.tensor([float("nan"), 1.5, float("inf")]), lambda lib: lib.tensor(2.4691858),
    lambda lib: lib.tensor([[1.5, -0.25], [3.0, 4.0]]), lambda lib: lib.tensor([1, 2, 3]),
    lambda lib: lib.tensor([True, False]), lambda lib: lib.zeros(3, dtype=lib.float64),
    lambda lib: lib.arange(2000.0), lambda lib: lib.arange(6000.0).reshape(3, 2000) / 7,
], ids=["decimals", "whole", "sci-span", "sci-big", "nan-inf", "0-d", "2-d", "int", "bool", "float64", "summarized",
        "summarized-2d"])
def test_repr_prints_as_torch(make):
    """print(t) shows what PyTorch shows (precision 4, whole numbers as `1.`, scientific notation by
    torch's rule, summarised past 1000 elements), the dtype named minidl.<dtype>."""
    import torch

    assert repr(make(minidl)) == repr(make(torch)).replace("torch.", "minidl.")
