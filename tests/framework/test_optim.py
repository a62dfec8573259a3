"""Optimizers against torch.optim: same weights, same problem, 25+ steps, every option.

Both frameworks compute their own gradients of the same small MLP loss (so a wrong update rule, a wrong
state buffer or a wrong step count all show as diverging weights), then each takes its optimizer step.
"""
import itertools

import numpy as np
import pytest
import torch

import minidl
from minidl import optim
from tests.conftest import DEVICES, rel_err

STEPS = 30


def make_problem(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    weights = {
        "w1": rng.standard_normal((5, 7)) * 0.5,
        "b1": rng.standard_normal(7) * 0.1,
        "w2": rng.standard_normal((7, 3)) * 0.5,
        "b2": rng.standard_normal(3) * 0.1,
    }
    x = rng.standard_normal((11, 5))
    y = rng.standard_normal((11, 3))
    return {k: v.astype(dtype) for k, v in weights.items()}, x.astype(dtype), y.astype(dtype)


def mlp_loss(p, x, y, maximize, relu):
    h = relu(x @ p[0] + p[1])
    loss = ((h @ p[2] + p[3] - y) ** 2).mean()
    return -loss if maximize else loss  # maximizing -loss still converges, so the run stays tame


def run_both(make_mine, make_torch, steps=STEPS, maximize=False, groups=False, device="cpu", dtype=np.float32):
    weights, x, y = make_problem(dtype=dtype)
    mine = [minidl.tensor(w, device=device, requires_grad=True) for w in weights.values()]
    theirs = [torch.tensor(w, requires_grad=True) for w in weights.values()]
    if groups:  # two groups, the second with its own lr
        opt_m = make_mine([{"params": mine[:2]}, {"params": mine[2:], "lr": 0.003}])
        opt_t = make_torch([{"params": theirs[:2]}, {"params": theirs[2:], "lr": 0.003}])
    else:
        opt_m, opt_t = make_mine(mine), make_torch(theirs)
    xm, ym = minidl.tensor(x, device=device), minidl.tensor(y, device=device)
    xt, yt = torch.tensor(x), torch.tensor(y)
    for _ in range(steps):
        opt_m.zero_grad()
        mlp_loss(mine, xm, ym, maximize, lambda a: a.maximum(0.0)).backward()
        opt_m.step()
        opt_t.zero_grad()
        mlp_loss(theirs, xt, yt, maximize, torch.relu).backward()
        opt_t.step()
    return opt_m, opt_t, mine, theirs


def assert_same_weights(mine, theirs, tol=1e-5):
    for m, t in zip(mine, theirs):
        host = m.detach().cpu().numpy()
        assert rel_err(host, t.detach().numpy()) <= tol, (m.shape, rel_err(host, t.detach().numpy()))


def moved(mine):
    weights, _, _ = make_problem()
    return max(rel_err(m.detach().cpu().numpy(), w) for m, w in zip(mine, weights.values()))


# ------------------------------------------------------------------------------------------------
# Every option against torch
# ------------------------------------------------------------------------------------------------

SGD_OPTIONS = [
    dict(momentum=m, dampening=d, nesterov=n, weight_decay=wd, maximize=mx)
    for m, d, n, wd, mx in itertools.product([0.0, 0.9], [0.0, 0.3], [False, True], [0.0, 0.05], [False, True])
    if not (n and (m == 0 or d != 0))
]


@pytest.mark.parametrize("opts", SGD_OPTIONS, ids=str)
def test_sgd_matches_torch(opts):
    opt_m, opt_t, mine, theirs = run_both(
        lambda p: optim.SGD(p, lr=0.05, **opts), lambda p: torch.optim.SGD(p, lr=0.05, **opts),
        maximize=opts["maximize"],
    )
    assert moved(mine) > 1e-2  # the run really trained
    assert_same_weights(mine, theirs)


ADAM_OPTIONS = [
    dict(betas=b, eps=e, weight_decay=wd, amsgrad=a, maximize=mx)
    for b, e, wd, a, mx in itertools.product([(0.9, 0.999), (0.3, 0.9)], [1e-8, 1e-3], [0.0, 0.1], [False, True], [False, True])
]


@pytest.mark.parametrize("opts", ADAM_OPTIONS, ids=str)
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_adam_and_adamw_match_torch(name, opts):
    opt_m, opt_t, mine, theirs = run_both(
        lambda p: getattr(optim, name)(p, lr=0.01, **opts), lambda p: getattr(torch.optim, name)(p, lr=0.01, **opts),
        maximize=opts["maximize"],
    )
    assert moved(mine) > 1e-2
    assert_same_weights(mine, theirs)
    for p_m, p_t in zip(mine, theirs):
        s_m, s_t = opt_m.state[p_m], opt_t.state[p_t]
        assert s_m["step"] == int(s_t["step"]) == STEPS
        assert rel_err(s_m["exp_avg_sq"].numpy(), s_t["exp_avg_sq"].numpy()) <= 1e-5


def test_adamw_differs_from_adam_with_weight_decay():
    # Decoupled decay is a different update: if AdamW silently ran Adam's L2 form this would fail.
    _, _, adam, _ = run_both(lambda p: optim.Adam(p, lr=0.01, weight_decay=0.1), lambda p: torch.optim.Adam(p, lr=0.01))
    _, _, adamw, _ = run_both(lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1), lambda p: torch.optim.Adam(p, lr=0.01))
    assert max(rel_err(a.detach().numpy(), b.detach().numpy()) for a, b in zip(adam, adamw)) > 1e-4


RMSPROP_OPTIONS = [
    dict(alpha=al, eps=e, weight_decay=wd, momentum=m, centered=c, maximize=mx)
    for al, e, wd, m, c, mx in itertools.product([0.99, 0.8], [1e-8], [0.0, 0.05], [0.0, 0.8], [False, True], [False, True])
]


@pytest.mark.parametrize("opts", RMSPROP_OPTIONS, ids=str)
def test_rmsprop_matches_torch(opts):
    opt_m, opt_t, mine, theirs = run_both(
        lambda p: optim.RMSprop(p, lr=0.003, **opts), lambda p: torch.optim.RMSprop(p, lr=0.003, **opts),
        maximize=opts["maximize"],
    )
    assert moved(mine) > 1e-2
    assert_same_weights(mine, theirs)


@pytest.mark.parametrize("make", [
    (lambda p: optim.SGD(p, lr=0.05, momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
    (lambda p: optim.Adam(p, lr=0.02, amsgrad=True), lambda p: torch.optim.Adam(p, lr=0.02, amsgrad=True)),
    (lambda p: optim.RMSprop(p, lr=0.01, centered=True), lambda p: torch.optim.RMSprop(p, lr=0.01, centered=True)),
], ids=["sgd", "adam", "rmsprop"])
def test_param_groups_with_own_lr_match_torch(make):
    _, _, mine, theirs = run_both(*make, groups=True)
    assert_same_weights(mine, theirs)


def test_float64_parameters_stay_float64_and_match_torch():
    _, _, mine, theirs = run_both(lambda p: optim.Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01),
                                  dtype=np.float64)
    assert all(p.dtype == np.float64 for p in mine)
    assert_same_weights(mine, theirs, tol=1e-12)


def test_step_with_closure_returns_the_loss_and_matches_torch():
    weights, x, y = make_problem()
    mine = [minidl.tensor(w, requires_grad=True) for w in weights.values()]
    theirs = [torch.tensor(w, requires_grad=True) for w in weights.values()]
    opt_m, opt_t = optim.SGD(mine, lr=0.05, momentum=0.5), torch.optim.SGD(theirs, lr=0.05, momentum=0.5)
    xm, ym, xt, yt = minidl.tensor(x), minidl.tensor(y), torch.tensor(x), torch.tensor(y)
    for _ in range(25):
        def closure_m():
            opt_m.zero_grad()
            loss = mlp_loss(mine, xm, ym, False, lambda a: a.maximum(0.0))
            loss.backward()
            return loss

        def closure_t():
            opt_t.zero_grad()
            loss = mlp_loss(theirs, xt, yt, False, torch.relu)
            loss.backward()
            return loss

        loss_m = opt_m.step(closure_m)
        loss_t = opt_t.step(closure_t)
        assert abs(loss_m.item() - loss_t.item()) <= 1e-5 * abs(loss_t.item())
    assert_same_weights(mine, theirs)


def test_parameters_without_grad_are_left_alone():
    a = minidl.tensor([1.0, 2.0], requires_grad=True)
    b = minidl.tensor([3.0, 4.0], requires_grad=True)
    opt = optim.Adam([a, b], lr=0.1)
    (a * a).sum().backward()
    opt.step()
    assert b.grad is None and np.array_equal(b.detach().numpy(), [3.0, 4.0])
    assert b not in opt.state and opt.state[a]["step"] == 1
    assert not np.allclose(a.detach().numpy(), [1.0, 2.0])


def test_zero_grad_set_to_none_and_to_zeros():
    a = minidl.tensor([1.0, -2.0, 3.0], requires_grad=True)
    opt = optim.SGD([a], lr=0.1)
    (a * a).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert a.grad is not None and np.array_equal(a.grad.numpy(), np.zeros(3, np.float32))
    (a * a).sum().backward()  # accumulates into the zeroed gradient: 2a, not 4a
    np.testing.assert_array_equal(a.grad.numpy(), 2 * a.detach().numpy())
    opt.zero_grad()
    assert a.grad is None


def test_add_param_group_uses_defaults_and_rejects_duplicates():
    a = minidl.tensor([1.0], requires_grad=True)
    b = minidl.tensor([2.0], requires_grad=True)
    opt = optim.SGD([a], lr=0.1, momentum=0.9)
    opt.add_param_group({"params": [b], "lr": 0.5})
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1]["momentum"] == 0.9
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    assert len(opt.param_groups) == 2


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------


def leaf():
    return minidl.tensor([1.0, 2.0], requires_grad=True)


@pytest.mark.parametrize("make, match", [
    (lambda: optim.SGD([leaf()], lr=-0.1), "learning rate"),
    (lambda: optim.SGD([leaf()], lr=0.1, momentum=-1), "momentum"),
    (lambda: optim.SGD([leaf()], lr=0.1, nesterov=True), "Nesterov"),
    (lambda: optim.SGD([leaf()], lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), "Nesterov"),
    (lambda: optim.Adam([leaf()], lr=-1e-3), "learning rate"),
    (lambda: optim.Adam([leaf()], betas=(1.0, 0.999)), "beta parameter at index 0"),
    (lambda: optim.Adam([leaf()], betas=(0.9, -0.1)), "beta parameter at index 1"),
    (lambda: optim.AdamW([leaf()], eps=-1e-8), "eps"),
    (lambda: optim.Adam([leaf()], weight_decay=-1), "weight_decay"),
    (lambda: optim.RMSprop([leaf()], alpha=-0.5), "alpha"),
    (lambda: optim.SGD([], lr=0.1), "empty"),
    (lambda: optim.SGD([(leaf() * 2)], lr=0.1), "non-leaf"),
])
def test_invalid_arguments_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_type_errors():
    with pytest.raises(TypeError, match="single Tensor"):
        optim.SGD(leaf(), lr=0.1)
    with pytest.raises(TypeError, match="can only optimize Tensors"):
        optim.SGD([np.zeros(3)], lr=0.1)
    with pytest.raises(TypeError, match="int64"):
        optim.SGD([minidl.tensor([1, 2])], lr=0.1)


# ------------------------------------------------------------------------------------------------
# state_dict / load_state_dict
# ------------------------------------------------------------------------------------------------

ROUND_TRIP = [
    lambda p: optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    lambda p: optim.Adam(p, lr=0.01, amsgrad=True, weight_decay=0.01),
    lambda p: optim.AdamW(p, lr=0.01),
    lambda p: optim.RMSprop(p, lr=0.003, momentum=0.5, centered=True),
]


def train(params, opt, steps, x, y):
    for _ in range(steps):
        opt.zero_grad()
        mlp_loss(params, x, y, False, lambda a: a.maximum(0.0)).backward()
        opt.step()


@pytest.mark.parametrize("make", ROUND_TRIP, ids=["sgd", "adam", "adamw", "rmsprop"])
def test_state_dict_round_trip_through_a_file_continues_identically(make, tmp_path):
    weights, x, y = make_problem()
    x, y = minidl.tensor(x), minidl.tensor(y)
    ref = [minidl.tensor(w, requires_grad=True) for w in weights.values()]
    ref_opt = make([{"params": ref[:2]}, {"params": ref[2:], "lr": 0.002}])
    train(ref, ref_opt, 12, x, y)
    minidl.save({"params": [p.detach() for p in ref], "optim": ref_opt.state_dict()}, tmp_path / "ckpt.mdl")
    train(ref, ref_opt, 13, x, y)

    ckpt = minidl.load(tmp_path / "ckpt.mdl")
    resumed = [minidl.tensor(a, requires_grad=True) for a in ckpt["params"]]
    opt = make([{"params": resumed[:2]}, {"params": resumed[2:]}])
    opt.load_state_dict(ckpt["optim"])
    assert opt.param_groups[1]["lr"] == 0.002  # group options come from the checkpoint
    train(resumed, opt, 13, x, y)
    for a, b in zip(resumed, ref):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_load_state_dict_copies_state():
    weights, x, y = make_problem()
    x, y = minidl.tensor(x), minidl.tensor(y)
    params = [minidl.tensor(w, requires_grad=True) for w in weights.values()]
    opt = optim.Adam(params, lr=0.01)
    train(params, opt, 3, x, y)
    sd = opt.state_dict()
    before = sd["state"][0]["exp_avg"].numpy().copy()
    opt2 = optim.Adam([minidl.tensor(w, requires_grad=True) for w in weights.values()], lr=0.01)
    opt2.load_state_dict(sd)
    opt2.state[opt2.param_groups[0]["params"][0]]["exp_avg"]._data[...] = 123.0
    np.testing.assert_array_equal(sd["state"][0]["exp_avg"].numpy(), before)


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop"])
def test_state_dict_has_torchs_layout_and_loads_torchs_state(name):
    kwargs = {"SGD": dict(lr=0.05, momentum=0.9), "Adam": dict(lr=0.01, amsgrad=True),
              "RMSprop": dict(lr=0.003, momentum=0.5, centered=True)}[name]
    make_m = lambda p: getattr(optim, name)(p, **kwargs)  # noqa: E731
    make_t = lambda p: getattr(torch.optim, name)(p, **kwargs)  # noqa: E731
    opt_m, opt_t, mine, theirs = run_both(make_m, make_t, steps=10, groups=True)
    sd_m, sd_t = opt_m.state_dict(), opt_t.state_dict()
    assert sorted(sd_m) == sorted(sd_t) == ["param_groups", "state"]
    assert sorted(sd_m["state"]) == sorted(sd_t["state"]) == [0, 1, 2, 3]
    for i in range(4):
        assert sorted(sd_m["state"][i]) == sorted(sd_t["state"][i])
    for g_m, g_t in zip(sd_m["param_groups"], sd_t["param_groups"]):
        assert g_m["params"] == g_t["params"]
        assert set(g_m) <= set(g_t)
        assert all(g_m[k] == g_t[k] for k in g_m)

    # torch's own state dict (tensors as NumPy) loads into minidl and the runs continue together.
    converted = {
        "state": {i: {k: (minidl.tensor(v.numpy()) if isinstance(v, torch.Tensor) else v) for k, v in s.items()}
                  for i, s in sd_t["state"].items()},
        "param_groups": sd_t["param_groups"],
    }
    fresh = [minidl.tensor(t.detach().numpy(), requires_grad=True) for t in theirs]
    opt_f = make_m([{"params": fresh[:2]}, {"params": fresh[2:]}])
    opt_f.load_state_dict(converted)
    weights, x, y = make_problem()
    xm, ym, xt, yt = minidl.tensor(x), minidl.tensor(y), torch.tensor(x), torch.tensor(y)
    for _ in range(15):
        opt_f.zero_grad()
        mlp_loss(fresh, xm, ym, False, lambda a: a.maximum(0.0)).backward()
        opt_f.step()
        opt_t.zero_grad()
        mlp_loss(theirs, xt, yt, False, torch.relu).backward()
        opt_t.step()
    assert_same_weights(fresh, theirs)


def test_load_state_dict_with_mismatched_groups_raises_and_changes_nothing():
    weights, x, y = make_problem()
    x, y = minidl.tensor(x), minidl.tensor(y)
    params = [minidl.tensor(w, requires_grad=True) for w in weights.values()]
    opt = optim.Adam([{"params": params[:2]}, {"params": params[2:]}], lr=0.01)
    train(params, opt, 2, x, y)
    sd = opt.state_dict()

    one_group = optim.Adam(params, lr=0.5)
    with pytest.raises(ValueError, match="2 parameter groups"):
        one_group.load_state_dict(sd)
    assert one_group.param_groups[0]["lr"] == 0.5 and not one_group.state

    other_sizes = optim.Adam([{"params": params[:1]}, {"params": params[1:]}], lr=0.5)
    with pytest.raises(ValueError, match="group 0 has 2 parameters"):
        other_sizes.load_state_dict(sd)
    assert other_sizes.param_groups[0]["lr"] == 0.5 and not other_sizes.state

    swapped = optim.Adam([{"params": params[:2]}, {"params": [params[3], params[2]]}], lr=0.5)
    with pytest.raises(ValueError, match="has shape"):
        swapped.load_state_dict(sd)
    assert swapped.param_groups[0]["lr"] == 0.5 and not swapped.state


# ------------------------------------------------------------------------------------------------
# Devices: the same update on the GPU (one code path, written with the array module)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop"])
def test_optimizers_run_on_each_device(device, name):
    kwargs = {"SGD": dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
              "Adam": dict(lr=0.01, amsgrad=True, weight_decay=0.01), "AdamW": dict(lr=0.01),
              "RMSprop": dict(lr=0.003, momentum=0.5, centered=True, weight_decay=0.01)}[name]
    opt_m, _, mine, theirs = run_both(lambda p: getattr(optim, name)(p, **kwargs),
                                      lambda p: getattr(torch.optim, name)(p, **kwargs), device=device)
    assert all(p.device == minidl.device(device) for p in mine)
    assert all(v.device == minidl.device(device) for s in opt_m.state.values() for v in s.values()
               if isinstance(v, minidl.Tensor))
    assert_same_weights(mine, theirs, tol=1e-5 if device == "cpu" else 1e-4)


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:cupyx.allow_synchronize")
@pytest.mark.parametrize("make", ROUND_TRIP + [lambda p: optim.SGD(p, lr=0.1)], ids=["sgd", "adam", "adamw", "rmsprop", "plain_sgd"])
def test_gpu_step_never_waits_for_the_device(make):
    # CuPy raises DeviceSynchronized for any host sync (.get(), .item(), bool of a device array) here.
    cupyx = pytest.importorskip("cupyx")
    weights, x, y = make_problem()
    params = [minidl.tensor(w, device="cuda", requires_grad=True) for w in weights.values()]
    opt = make(params)
    xm, ym = minidl.tensor(x, device="cuda"), minidl.tensor(y, device="cuda")
    for _ in range(3):
        opt.zero_grad()
        mlp_loss(params, xm, ym, False, lambda a: a.maximum(0.0)).backward()
        with cupyx.allow_synchronize(False):
            opt.step()
    assert all(np.isfinite(p.detach().cpu().numpy()).all() for p in params)
