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
