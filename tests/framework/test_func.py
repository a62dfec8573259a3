"""torch.func on minidl (minidl/func.py) against torch: functional_call (MAML's adapted weights, tied weights),
grad / grad_and_value / vjp / jacrev / jacfwd / hessian, vmap over tensors and dicts (per-sample gradients), and
`import torch.func` through the runner."""
import numpy as np
import pytest
import torch

import minidl

RNG = np.random.default_rng(0)
X, Y = RNG.standard_normal((5, 3)).astype(np.float32), RNG.standard_normal((5, 2)).astype(np.float32)


def _twins():
    minidl.manual_seed(0)
    ours = minidl.nn.Sequential(minidl.nn.Linear(3, 4), minidl.nn.Tanh(), minidl.nn.Linear(4, 2))
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    theirs.load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in ours.state_dict().items()})
    return ((minidl, ours), (torch, theirs))


def test_functional_call_maml_step_matches_torch():
    results = []
    for lib, model in _twins():
        params = dict(model.named_parameters())
        loss = ((lib.func.functional_call(model, params, (lib.tensor(X),)) - lib.tensor(Y)) ** 2).mean()
        grads = lib.autograd.grad(loss, list(params.values()), create_graph=True)
        adapted = {k: p - 0.1 * g for (k, p), g in zip(params.items(), grads)}
        outer = (lib.func.functional_call(model, adapted, lib.tensor(X) * 2) ** 2).mean()
        outer.backward()
        results.append([outer.detach().numpy()] + [p.grad.numpy() for p in model.parameters()])
        assert all(p is q for p, q in zip(params.values(), model.parameters()))   # the model's own are back
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_functional_call_tied_weights_and_messages():
    m = minidl.nn.Sequential(minidl.nn.Linear(2, 2, bias=False), minidl.nn.Linear(2, 2, bias=False))
    m[1].weight = m[0].weight                      # tied: one tensor under two names
    w = minidl.eye(2) * 3
    out = minidl.func.functional_call(m, {"0.weight": w}, minidl.ones(1, 2))
    assert out.tolist() == [[9.0, 9.0]]            # both uses took the new tensor
    with pytest.raises(RuntimeError, match="functional_call: unexpected key\\(s\\): 'nope'"):
        minidl.func.functional_call(m, {"nope": w}, minidl.ones(1, 2))


@pytest.mark.parametrize("name", ["grad", "grad_and_value", "hessian", "jacrev", "jacfwd", "vjp"])
def test_transforms_match_torch(name):
    x = RNG.standard_normal(4)
    results = []
    for lib in (minidl, torch):
        f = (lambda t: (t.sin() * t ** 2).sum()) if name in ("grad", "grad_and_value", "hessian") else \
            (lambda t: t.sin() * t)
        t = lib.tensor(x)
        if name == "vjp":
            out, fn = lib.func.vjp(f, t)
            r = (out,) + tuple(fn(lib.tensor(np.arange(4.0))))
        elif name == "grad_and_value":
            r = lib.func.grad_and_value(f)(t)
        else:
            r = (getattr(lib.func, name)(f)(t),)
        results.append([v.detach().numpy() for v in r])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    # composed: the second derivative of x^3 at 2 is 12
    assert float(minidl.func.grad(minidl.func.grad(lambda t: t ** 3))(minidl.tensor(2.0))) == 12.0


def test_vmap_and_per_sample_gradients_match_torch():
    v, w = RNG.standard_normal((6, 4)), RNG.standard_normal(4)
    ours = minidl.vmap(lambda a, b: (a * b).sum(), in_dims=(0, None))(minidl.tensor(v), minidl.tensor(w))
    theirs = torch.vmap(lambda a, b: (a * b).sum(), in_dims=(0, None))(torch.tensor(v), torch.tensor(w))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)
    results = []
    for lib, model in _twins():
        def loss(params, xb, yb):
            return ((lib.func.functional_call(model, params, (xb.unsqueeze(0),)) - yb) ** 2).mean()

        params = {k: p.detach() for k, p in model.named_parameters()}
        grads = lib.func.vmap(lib.func.grad(loss), in_dims=(None, 0, 0))(params, lib.tensor(X), lib.tensor(Y))
        results.append({k: g.detach().numpy() for k, g in grads.items()})
    assert results[0]["0.weight"].shape == (5, 4, 3)
    for k in results[1]:
        np.testing.assert_allclose(results[0][k], results[1][k], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="vmap: the batched arguments must share one batch size"):
        minidl.vmap(lambda a, b: a + b)(minidl.ones(2), minidl.ones(3))


def test_stack_module_state_and_vmap_over_an_ensemble_as_torch():
    """torch's model-ensembling recipe: stack_module_state, then vmap(functional_call) over the stacked parameters;
    the predictions and the gradients of the stacked parameters equal torch's."""
    import copy

    torch.manual_seed(0)
    theirs = [torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)) for _ in range(5)]
    ours = [minidl.nn.Sequential(minidl.nn.Linear(4, 8), minidl.nn.ReLU(), minidl.nn.Linear(8, 3)) for _ in range(5)]
    for t, m in zip(theirs, ours):
        m.load_state_dict({k: minidl.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    results = []
    for lib, models in ((torch, theirs), (minidl, ours)):
        params, buffers = lib.func.stack_module_state(models)
        assert list(params) == ["0.weight", "0.bias", "2.weight", "2.bias"] and buffers == {}
        assert tuple(params["0.weight"].shape) == (5, 8, 4) and params["0.weight"].requires_grad
        base = copy.deepcopy(models[0])

        def fmodel(p, b, x, base=base, lib=lib):
            return lib.func.functional_call(base, (p, b), (x,))

        out = lib.func.vmap(fmodel, in_dims=(0, 0, None))(params, buffers, lib.tensor(x))
        out.pow(2).sum().backward()
        results.append((out.detach().numpy(), params["0.weight"].grad.numpy(), params["2.bias"].grad.numpy()))
        assert models[0][0].weight.grad is None   # the models' own parameters are untouched
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="Expected all models to be of the same class"):
        minidl.func.stack_module_state([ours[0], minidl.nn.Linear(4, 8)])
    with pytest.raises(RuntimeError, match="Expected at least one model, got 0"):
        minidl.func.stack_module_state([])


def test_func_jvp_is_the_jacobian_times_the_tangent_as_torch():
    def f(lib):
        return lambda a, b: ((a * b).sin(), a.exp().sum())

    a, b = np.array([0.3, 1.2]), np.array([2.0, -1.0])
    ta, tb = np.array([1.0, 0.0]), np.array([0.5, 0.5])
    out, jv = minidl.func.jvp(f(minidl), (minidl.tensor(a), minidl.tensor(b)), (minidl.tensor(ta), minidl.tensor(tb)))
    tout, tjv = torch.func.jvp(f(torch), (torch.tensor(a), torch.tensor(b)), (torch.tensor(ta), torch.tensor(tb)))
    for ours, theirs in zip(out + jv, tout + tjv):
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="Expected primals and tangents to be tuples"):
        minidl.func.jvp(f(minidl), minidl.tensor(a), minidl.tensor(ta))


def _both(fn, *arrays):
    """fn(lib, *tensors) on minidl and on torch, float64 tensors made from the same arrays."""
    return fn(minidl, *[minidl.tensor(a) for a in arrays]), fn(torch, *[torch.tensor(a) for a in arrays])


def _same_tree(ours, theirs, rtol=1e-10):
    if isinstance(theirs, torch.Tensor):
        assert tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=rtol, atol=1e-12)
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for k in theirs:
            _same_tree(ours[k], theirs[k], rtol)
    else:
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _same_tree(a, b, rtol)


W, B, V = RNG.standard_normal((4, 3)), RNG.standard_normal(4), RNG.standard_normal(3)


def test_jacrev_nests_outputs_then_inputs_with_argnums_dicts_and_aux_as_torch():
    """The Jacobian tutorial's forms: argnums an int or a tuple, a dict of parameters as the input, two outputs, and
    has_aux: the shapes (output + input) and values of torch.func.jacrev."""
    def run(lib, w, b, v):
        predict = lambda w, b, x: lib.nn.functional.linear(x, w, b).tanh()   # noqa: E731
        two = lambda p, x: ((p["w"] @ x).sin(), (p["b"] * x.sum()).exp())   # noqa: E731
        aux = lambda x: (x.exp(), x.sum())   # noqa: E731
        return (lib.func.jacrev(predict, argnums=2)(w, b, v), lib.func.jacrev(predict, argnums=(0, 1))(w, b, v),
                lib.func.jacrev(two)({"w": w, "b": b}, v), lib.func.jacrev(aux, has_aux=True)(v),
                lib.func.jacfwd(predict, argnums=1)(w, b, v))

    ours, theirs = _both(run, W, B, V)
    _same_tree(ours, theirs)


def test_hessian_of_a_vector_function_is_output_by_input_by_input_as_torch():
    """torch.func.hessian is jacfwd(jacrev(f)): for predict (4 outputs of a 3-vector) a (4, 3, 3) tensor, and
    vmapped over a batch, one per row."""
    def run(lib, w, b, v, xs):
        predict = lambda w, b, x: lib.nn.functional.linear(x, w, b).tanh()   # noqa: E731
        return (lib.func.hessian(predict, argnums=2)(w, b, v),
                lib.func.vmap(lib.func.hessian(predict, argnums=2), in_dims=(None, None, 0))(w, b, xs),
                lib.func.hessian(lambda x: (x ** 3).sum())(v))

    ours, theirs = _both(run, W, B, V, RNG.standard_normal((2, 3)))
    assert tuple(ours[0].shape) == (4, 3, 3) and tuple(ours[1].shape) == (2, 4, 3, 3)
    _same_tree(ours, theirs)


def test_grad_at_the_top_level_needs_no_second_derivative():
    """Per-sample gradients through nll_loss, whose backward is array code (not differentiable again): grad alone,
    or under vmap, records no graph of the gradient, so it works, and the gradient does not require grad. Under
    another transform it does record (grad of grad)."""
    logits, target = RNG.standard_normal((3, 5)), np.array([1, 4, 0])

    def run(lib, x, t):
        loss = lambda x, t: lib.nn.functional.nll_loss(lib.log_softmax(x, dim=-1), t)   # noqa: E731
        per_row = lib.func.vmap(lib.func.grad(lambda x, t: loss(x.unsqueeze(0), t.unsqueeze(0))))(x, t)
        return lib.func.grad(loss)(x, t), per_row

    ours, theirs = _both(run, logits, target)
    _same_tree(ours, theirs)
    assert not ours[0].requires_grad
    assert float(minidl.func.grad(minidl.func.grad(lambda t: t.sin()))(minidl.tensor(0.5))) == pytest.approx(
        -np.sin(0.5))


def test_grad_keeps_the_graph_when_its_input_is_part_of_one():
    """MAML with torch.func.grad: the inner gradient of parameters that require grad stays differentiable, so the
    outer loss reaches them through the adapted weights."""
    def run(lib, w0):
        w = w0.clone().requires_grad_()
        inner = lambda w: (w ** 3).sum()   # noqa: E731
        adapted = w - 0.1 * lib.func.grad(inner)(w)
        (adapted ** 2).sum().backward()
        return w.grad

    _same_tree(*_both(run, V))


def test_vjp_and_jvp_take_dicts_of_parameters_as_torch():
    """The NTK tutorial's vjp_fn(vec) -> (dict,) and jvp(f, (params,), (dict,)); jvp through nll_loss (whose
    backward is not differentiable) takes one backward per output element instead of the double-backward trick."""
    def run(lib, w, b, v, u):
        f = lambda p: (p["w"] @ v).tanh() * p["b"]   # noqa: E731
        params = {"w": w, "b": b}
        out, vjp_fn = lib.func.vjp(f, params)
        (cot,) = vjp_fn(u)
        _, tangent = lib.func.jvp(f, (params,), (cot,))
        g = lambda x: lib.nn.functional.nll_loss(lib.log_softmax(x, dim=-1).unsqueeze(0),   # noqa: E731
                                                  lib.tensor([2]))
        _, t2 = lib.func.jvp(g, (u,), (u * 2,))
        return out, cot, tangent, t2

    _same_tree(*_both(run, W, B, V, RNG.standard_normal(4)))


def test_transforms_say_what_is_wrong():
    with pytest.raises(RuntimeError, match="Expected f.*to return a scalar Tensor"):
        minidl.func.grad(lambda x: x * 2)(minidl.ones(3))
    with pytest.raises(RuntimeError, match="argnums 3 is out of range"):
        minidl.func.jacrev(lambda x: x, argnums=3)(minidl.ones(3))
    with pytest.raises(RuntimeError, match="same shape"):
        minidl.func.jvp(lambda x: x, (minidl.ones(3),), (minidl.ones(2),))
    with pytest.raises(RuntimeError, match="should be a tuple: \\(output, aux\\)"):
        minidl.func.grad(lambda x: x.sum(), has_aux=True)(minidl.ones(3))
