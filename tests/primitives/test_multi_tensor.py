"""The NumPy reference of the multi-tensor primitives against the optimizers' per-parameter code
(itself equal to torch, tests/framework/test_optim.py), and the optimizers' loss-scaling interface
and device-lr group on the CPU."""
import copy

import numpy as np
import pytest

import minidl
from minidl import optim
from minidl import primitives as P

SHAPES = [(7,), (13, 17), (3, 5, 7), (1,)]


def _arrays(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


@pytest.mark.parametrize("kw", [dict(lr=0.1), dict(lr=0.05, momentum=0.9, weight_decay=1e-2),
                                dict(lr=0.05, momentum=0.8, dampening=0.3, maximize=True),
                                dict(lr=0.05, momentum=0.9, nesterov=True)])
def test_multi_tensor_sgd_reference_equals_sgd(kw):
    params = [minidl.tensor(a, requires_grad=True) for a in _arrays(0)]
    opt = optim.SGD(params, **kw)
    mine = _arrays(0)
    bufs = [np.zeros_like(a) for a in mine] if kw.get("momentum") else None
    for step in range(4):
        grads = _arrays(10 + step)
        for p, g in zip(params, grads):
            p.grad = minidl.tensor(g)
        opt.step()
        hp = np.array([kw["lr"], kw.get("momentum", 0.0), kw.get("dampening", 0.0), kw.get("weight_decay", 0.0)])
        P.multi_tensor_sgd(mine, grads, bufs, [int(step == 0)] * len(mine), hp, nesterov=kw.get("nesterov", False),
                           maximize=kw.get("maximize", False))
    for p, a in zip(params, mine):
        np.testing.assert_array_equal(p.detach().numpy(), a)


@pytest.mark.parametrize("cls,kw", [(optim.Adam, dict(lr=1e-2)), (optim.Adam, dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
                                    (optim.AdamW, dict(lr=1e-2, weight_decay=0.05)),
                                    (optim.Adam, dict(lr=1e-2, betas=(0.3, 0.9), maximize=True))])
def test_multi_tensor_adam_reference_equals_adam(cls, kw):
    params = [minidl.tensor(a, requires_grad=True) for a in _arrays(0)]
    opt = cls(params, **kw)
    mine = _arrays(0)
    m, v = [np.zeros_like(a) for a in mine], [np.zeros_like(a) for a in mine]
    vmax = [np.zeros_like(a) for a in mine] if kw.get("amsgrad") else None
    steps = np.zeros(len(mine), np.float32)
    b1, b2 = kw.get("betas", (0.9, 0.999))
    for step in range(4):
        grads = _arrays(10 + step)
        for p, g in zip(params, grads):
            p.grad = minidl.tensor(g)
        opt.step()
        hp = np.array([kw["lr"], b1, b2, 1e-8, opt.defaults["weight_decay"]])
        P.multi_tensor_adam(mine, grads, m, v, vmax, list(range(len(mine))), steps, hp, decoupled=cls is optim.AdamW,
                            maximize=kw.get("maximize", False))
    assert steps.tolist() == [4.0] * len(mine)
    for p, a in zip(params, mine):
        np.testing.assert_array_equal(p.detach().numpy(), a)


@pytest.mark.parametrize("kw", [dict(lr=1e-2), dict(lr=1e-2, alpha=0.3, momentum=0.9, centered=True, weight_decay=0.1,
                                                    maximize=True)])
def test_multi_tensor_rmsprop_reference_equals_rmsprop(kw):
    params = [minidl.tensor(a, requires_grad=True) for a in _arrays(0)]
    opt = optim.RMSprop(params, **kw)
    mine = _arrays(0)
    sq = [np.zeros_like(a) for a in mine]
    bufs = [np.zeros_like(a) for a in mine] if kw.get("momentum") else None
    gavg = [np.zeros_like(a) for a in mine] if kw.get("centered") else None
    steps = np.zeros(len(mine), np.float32)
    for step in range(4):
        grads = _arrays(10 + step)
        for p, g in zip(params, grads):
            p.grad = minidl.tensor(g)
        opt.step()
        hp = np.array([kw["lr"], kw.get("alpha", 0.99), 1e-8, kw.get("weight_decay", 0.0), kw.get("momentum", 0.0)])
        P.multi_tensor_rmsprop(mine, grads, sq, bufs, gavg, list(range(len(mine))), steps, hp,
                               maximize=kw.get("maximize", False))
    assert steps.tolist() == [4.0] * len(mine)
    for p, a in zip(params, mine):
        np.testing.assert_array_equal(p.detach().numpy(), a)


def test_l2norm_and_scale_reference():
    arrays = _arrays(3)
    norm, coef = P.multi_tensor_l2norm(arrays, 1.5)
    expected = np.sqrt(sum((a.astype(np.float64) ** 2).sum() for a in arrays))
    assert abs(float(norm) - expected) <= 1e-6 * expected
    assert abs(float(coef) - min(1.0, 1.5 / (expected + 1e-6))) <= 1e-6
    before = [a.copy() for a in arrays]
    P.multi_tensor_scale(arrays, coef)
    for a, b in zip(arrays, before):
        np.testing.assert_allclose(a, b * np.float32(coef), rtol=1e-6)
    P.multi_tensor_zero(arrays)
    assert not any(a.any() for a in arrays)


def test_multi_tensor_checks_name_the_op_and_shapes():
    with pytest.raises(ValueError, match=r"multi_tensor_sgd: tensor 0 has different shapes"):
        P.multi_tensor_sgd([np.zeros(3, np.float32)], [np.zeros(4, np.float32)], None, [0], np.zeros(4),
                           nesterov=False, maximize=False)
    with pytest.raises(ValueError, match="differ in length"):
        P.multi_tensor_sgd([np.zeros(3, np.float32)], [], None, [0], np.zeros(4), nesterov=False, maximize=False)


def test_usual_rows_check_agrees_with_the_general_checks(monkeypatch):
    """_check_rows' quick path (C-level maps over an optimizer's lists) takes only what its general checks would send
    to the kernels: full lists of one length, rows of one shape, C-contiguous float32 arrays of a CuPy type. Run
    here with a stand-in array type registered as a CuPy type (the CPU has no CuPy)."""
    from minidl.primitives import _common
    from minidl.primitives import multi_tensor as mt

    class FakeCuPy:
        def __init__(self, shape, dtype=np.float32, contiguous=True):
            self.shape, self.dtype, self._c_contiguous = shape, np.dtype(dtype), contiguous

    monkeypatch.setattr(_common, "_CUDA_TYPES", _common._CUDA_TYPES | {FakeCuPy})
    a = [FakeCuPy((3,)), FakeCuPy((4, 5))]
    assert mt._usual_rows([a, [FakeCuPy((3,)), FakeCuPy((4, 5))]])
    assert mt.multi_tensor_supported(*a)
    for other in ([FakeCuPy((3,))],                                      # another length
                  [FakeCuPy((3,)), FakeCuPy((5, 4))],                    # a row of another shape
                  [FakeCuPy((3,)), FakeCuPy((4, 5), np.float16)],        # another dtype
                  [FakeCuPy((3,)), FakeCuPy((4, 5), contiguous=False)],  # not contiguous
                  [FakeCuPy((3,)), None],                                # a hole
                  [FakeCuPy((3,)), np.zeros((4, 5), np.float32)]):       # another array type
        assert not mt._usual_rows([a, other])
    assert not mt.multi_tensor_supported(FakeCuPy((3,)), FakeCuPy((2,), np.float64))
    assert mt.multi_tensor_supported(FakeCuPy((3,)), None)   # (Nones are skipped, as before)
    with pytest.raises(ValueError, match="tensor 1 has different shapes"):
        mt._check_rows("multi_tensor_sgd", params=a, grads=[FakeCuPy((3,)), FakeCuPy((5, 4))])


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_step_with_grad_scale_and_found_inf_on_the_cpu(name):
    make = {"SGD": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), "Adam": lambda ps: optim.Adam(ps, lr=0.01)}[name]
    a = [minidl.tensor(x, requires_grad=True) for x in _arrays(0)]
    b = [minidl.tensor(x, requires_grad=True) for x in _arrays(0)]
    opt_a, opt_b = make(a), make(b)
    assert opt_a._step_supports_amp_scaling
    for step in range(3):
        grads = _arrays(20 + step)
        for p, q, g in zip(a, b, grads):
            p.grad = minidl.tensor(g)
            q.grad = minidl.tensor(g * np.float32(512.0))
        opt_a.step()
        opt_b.step(grad_scale=np.float32(512.0), found_inf=np.float32(0.0))
        snapshot = [q.detach().numpy().copy() for q in b]
        state = copy.deepcopy({k: dict(v) for k, v in opt_b.state_dict()["state"].items()}) if name == "Adam" else None
        opt_b.step(grad_scale=np.float32(512.0), found_inf=np.float32(1.0))  # skipped entirely
        assert all(np.array_equal(s, q.detach().numpy()) for s, q in zip(snapshot, b))
        if state is not None:
            assert [s["step"] for s in opt_b.state_dict()["state"].values()] == [x["step"] for x in state.values()]
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


def test_param_group_lr_reads_and_writes_like_a_float():
    p = minidl.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    group = opt.param_groups[0]
    group["lr"] = 0.25
    assert group["lr"] == 0.25 and isinstance(group["lr"], float)
    sd = opt.state_dict()
    assert type(sd["param_groups"][0]) is dict and sd["param_groups"][0]["lr"] == 0.25
    assert sd["param_groups"][0]["fused"] is None
    clone = copy.deepcopy(sd)
    opt.load_state_dict(clone)
    assert opt.param_groups[0]["lr"] == 0.25
    assert type(opt.param_groups[0]).__name__ == "ParamGroup"


# ------------------------------------------------------------------------------------------------
# The optimizers' multi-tensor path on the CPU (fused=True runs the NumPy reference of the kernels
# through the same bookkeeping as the GPU: group lr array, step-count array, state views).
# ------------------------------------------------------------------------------------------------
OPTIMIZERS = {
    "sgd_nesterov": lambda ps, f: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4, fused=f),
    "sgd_dampening_max": lambda ps, f: optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.3, maximize=True, fused=f),
    "adam_wd_amsgrad": lambda ps, f: optim.Adam(ps, lr=3e-3, weight_decay=0.1, amsgrad=True, fused=f),
    "adamw": lambda ps, f: optim.AdamW(ps, lr=1e-2, weight_decay=0.05, fused=f),
    "rmsprop_centered": lambda ps, f: optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True, fused=f),
}


def _run_cpu(make, fused, steps=5, found_inf_at=(), grad_scale=None):
    params = [minidl.tensor(a, requires_grad=True) for a in _arrays(0)]
    opt = make(params, fused)
    for t in range(steps):
        for p, g in zip(params, _arrays(30 + t)):
            p.grad = minidl.tensor(g * np.float32(grad_scale or 1.0))
        for group in opt.param_groups:
            group["lr"] = 0.02 / (1 + t)
            if "betas" in group:
                group["betas"] = (0.9 - 0.05 * t, group["betas"][1])   # as OneCycleLR cycles beta1
            elif group.get("momentum"):
                group["momentum"] = 0.9 - 0.05 * t                      # ... or the momentum
        kwargs = {}
        if grad_scale is not None:
            kwargs["grad_scale"] = np.float32(grad_scale)
        if found_inf_at:
            kwargs["found_inf"] = np.float32(t in found_inf_at)
        opt.step(**kwargs)
    return [p.detach().numpy() for p in params], opt


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fused_true_on_the_cpu_equals_the_per_parameter_path(name):
    fused, opt = _run_cpu(OPTIMIZERS[name], True)
    ref, opt_ref = _run_cpu(OPTIMIZERS[name], False)
    for a, b in zip(fused, ref):
        np.testing.assert_array_equal(a, b)
    group = opt.param_groups[0]
    assert float(group.device_lr()) == group["lr"] == 0.02 / 5
    assert [float(v) for v in group._device_hp] == [group._hp_value(k) for k in group._hp_keys]
    sd, sd_ref = opt.state_dict(), opt_ref.state_dict()
    assert [sorted(s) for s in sd["state"].values()] == [sorted(s) for s in sd_ref["state"].values()]
    if "step" in sd["state"][0]:
        assert [float(s["step"].item()) for s in sd["state"].values()] == [5.0] * len(SHAPES)
        # the state dict loads back (steps become numbers, then the device array again) and runs on
        params = [minidl.tensor(a) for a in fused]
        for p in params:
            p.requires_grad_(True)
        again = OPTIMIZERS[name](params, True)
        again.load_state_dict(sd)
        for p, g in zip(params, _arrays(99)):
            p.grad = minidl.tensor(g)
        again.step()
        assert [float(s["step"].item()) for s in again.state_dict()["state"].values()] == [6.0] * len(SHAPES)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fused_path_found_inf_skips_everything_and_grad_scale_unscales(name):
    skipped, opt = _run_cpu(OPTIMIZERS[name], True, steps=3, found_inf_at=(0, 1, 2))
    for a, b in zip(skipped, _arrays(0)):
        np.testing.assert_array_equal(a, b)
    for state in opt.state.values():
        for k, v in state.items():
            assert not v.numpy().any(), k   # step counts and moments untouched
    scaled, _ = _run_cpu(OPTIMIZERS[name], True, steps=3, grad_scale=256.0)
    ref, _ = _run_cpu(OPTIMIZERS[name], False, steps=3)
    for a, b in zip(scaled, ref):
        np.testing.assert_array_equal(a, b)   # 256 is a power of two: unscaling is exact


def test_unscale_reference_sets_found_inf_and_multiplies_by_the_float32_inverse():
    rng = np.random.default_rng(0)
    tensors = [rng.standard_normal(s).astype(np.float32) * 3000 for s in [(4, 3), (7,), (2, 2, 2)]]
    before = [t.copy() for t in tensors]
    found = np.zeros((), np.float32)
    P.multi_tensor_unscale(tensors, np.asarray(3000.0, np.float32), found)
    inv = np.float32(1.0 / 3000.0)
    assert float(found) == 0.0 and all(np.array_equal(t, b * inv) for t, b in zip(tensors, before))
    tensors[1][2] = np.nan
    P.multi_tensor_unscale(tensors, None, found)
    assert float(found) == 1.0
    P.multi_tensor_unscale([], None, found)                     # nothing to do, found_inf kept
    assert float(found) == 1.0
    with pytest.raises(TypeError, match="multi_tensor_unscale: found_inf must be a 0-d float32 array"):
        P.multi_tensor_unscale(tensors, None, np.zeros(1, np.float32))
