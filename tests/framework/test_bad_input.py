"""Bad input never gives a silent wrong answer or half-changed state (issue #15).

A corpus, one class per section: out-of-range dims, type promotion (against torch), state-changing
calls that must be all or nothing, optimizer/scheduler hyper-parameters and state dicts, values that
cannot be right, weak messages, and damaged checkpoint files. Every case asserts the error type and
that the message names the op (or the file), and for state-changing calls that nothing changed.
"""
from __future__ import annotations

import copy
import io
import json
import math
import os
import signal
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
import minidl.optim as optim
import minidl.primitives as P
from minidl.ops._dims import normalize_dim
from minidl.ops._promotion import promote_types, result_type
from minidl.utils import CheckpointError

# ------------------------------------------------------------------------------------------------
# Dims: one rule, IndexError with torch's text, prefixed with the op
# ------------------------------------------------------------------------------------------------

x2 = lambda: minidl.randn(2, 3)  # noqa: E731
x0 = lambda: minidl.tensor(1.5)  # noqa: E731

DIM_CASES = [
    ("unsqueeze", lambda: x2().unsqueeze(5), lambda: torch.randn(2, 3).unsqueeze(5)),
    ("unsqueeze", lambda: x2().unsqueeze(-4), lambda: torch.randn(2, 3).unsqueeze(-4)),
    ("cat", lambda: minidl.cat([x2(), x2()], dim=5), lambda: torch.cat([torch.randn(2, 3)] * 2, dim=5)),
    ("cat", lambda: minidl.cat([x2(), x2()], dim=-3), lambda: torch.cat([torch.randn(2, 3)] * 2, dim=-3)),
    ("stack", lambda: minidl.stack([x2(), x2()], dim=7), lambda: torch.stack([torch.randn(2, 3)] * 2, dim=7)),
    ("stack", lambda: minidl.stack([x2(), x2()], dim=-4), lambda: torch.stack([torch.randn(2, 3)] * 2, dim=-4)),
    ("permute", lambda: x2().permute(0, 3), lambda: torch.randn(2, 3).permute(0, 3)),
    ("flatten", lambda: x2().flatten(5), lambda: torch.randn(2, 3).flatten(5)),
    ("flatten", lambda: x2().flatten(0, 2), lambda: torch.randn(2, 3).flatten(0, 2)),
    ("transpose", lambda: x2().transpose(0, 5), lambda: torch.randn(2, 3).transpose(0, 5)),
    ("transpose", lambda: x0().transpose(0, 1), lambda: torch.tensor(1.5).transpose(0, 1)),
    ("split", lambda: x2().split(1, dim=4), lambda: torch.randn(2, 3).split(1, dim=4)),
    ("chunk", lambda: x2().chunk(2, dim=-3), lambda: torch.randn(2, 3).chunk(2, dim=-3)),
    ("sum", lambda: x2().sum(2), lambda: torch.randn(2, 3).sum(2)),
    ("sum", lambda: x2().sum((0, -3)), lambda: torch.randn(2, 3).sum((0, -3))),
    ("sum", lambda: x0().sum(1), lambda: torch.tensor(1.5).sum(1)),
    ("mean", lambda: x2().mean(-3), lambda: torch.randn(2, 3).mean(-3)),
    ("var", lambda: x2().var(3), lambda: torch.randn(2, 3).var(3)),
    ("max", lambda: x2().max(2), lambda: torch.randn(2, 3).max(2)),
    ("min", lambda: x2().min(-3), lambda: torch.randn(2, 3).min(-3)),
    ("argmax", lambda: x2().argmax(2), lambda: torch.randn(2, 3).argmax(2)),
    ("argmin", lambda: x0().argmin(1), lambda: torch.tensor(1.5).argmin(1)),
    ("amax", lambda: x2().amax(4), lambda: torch.randn(2, 3).amax(4)),
    ("softmax", lambda: F.softmax(x2(), dim=2), lambda: torch.softmax(torch.randn(2, 3), dim=2)),
    ("log_softmax", lambda: F.log_softmax(x2(), dim=-3), lambda: torch.log_softmax(torch.randn(2, 3), dim=-3)),
    ("squeeze", lambda: x2().squeeze(2), lambda: torch.randn(2, 3).squeeze(2)),
    ("gather", lambda: x2().gather(2, minidl.zeros(2, 3, dtype=minidl.int64)),
     lambda: torch.randn(2, 3).gather(2, torch.zeros(2, 3, dtype=torch.int64))),
    ("Unflatten", lambda: nn.Unflatten(3, (3, 1))(x2()), lambda: torch.nn.Unflatten(3, (3, 1))(torch.randn(2, 3))),
]


@pytest.mark.parametrize("op, ours, theirs", DIM_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(DIM_CASES)])
def test_out_of_range_dim_is_index_error_like_torch(op, ours, theirs):
    with pytest.raises(IndexError) as torch_err:
        theirs()
    with pytest.raises(IndexError) as ours_err:
        ours()
    msg = str(ours_err.value)
    assert msg.startswith(f"{op}: "), msg
    # torch's own wording follows the prefix (its range and the dim it got)
    torch_msg = str(torch_err.value)
    if "Dimension out of range" in torch_msg:
        assert torch_msg.split("(")[0].strip() in msg and torch_msg[torch_msg.index("("):] in msg, (msg, torch_msg)


def test_normalize_dim_rule():
    for ndim in range(4):
        n = max(ndim, 1)
        for d in range(-n - 2, n + 2):
            if -n <= d < n:
                assert normalize_dim(d, ndim, "op") == d % n
            else:
                with pytest.raises(IndexError, match=rf"op: Dimension out of range \(expected to be in range of \[{-n}, {n - 1}\], but got {d}\)"):
                    normalize_dim(d, ndim, "op")
    with pytest.raises(TypeError, match="op: a dim must be an int"):
        normalize_dim(1.0, 2, "op")
    with pytest.raises(TypeError, match="op: a dim must be an int"):
        normalize_dim(True, 2, "op")


# ------------------------------------------------------------------------------------------------
# Type promotion: one table, equal to torch's, used by every op
# ------------------------------------------------------------------------------------------------

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]


def _make(dtype, shape):
    rng = np.random.default_rng(0)
    if dtype == "bool":
        return np.asarray(rng.random(shape) > 0.5)
    return np.asarray((rng.random(shape) * 4 + 1).astype(dtype))


def test_promote_types_equals_torch():
    import ml_dtypes

    names = DTYPES + ["bfloat16"]

    def np_dtype(n):
        return np.dtype(ml_dtypes.bfloat16) if n == "bfloat16" else np.dtype(n)

    for a in names:
        for b in names:
            expected = str(torch.promote_types(getattr(torch, a), getattr(torch, b))).replace("torch.", "")
            assert promote_types(np_dtype(a), np_dtype(b)).name == expected, (a, b)


@pytest.mark.parametrize("scalar", [True, 3, 2.5])
def test_result_type_with_numbers_and_zero_dim_equals_torch(scalar):
    for a in DTYPES:
        for b in DTYPES:
            for da, db in ((1, 0), (0, 1), (0, 0)):
                ta, tb = torch.from_numpy(_make(a, (2,) * da)), torch.from_numpy(_make(b, (2,) * db))
                ma, mb = minidl.tensor(_make(a, (2,) * da)), minidl.tensor(_make(b, (2,) * db))
                assert result_type(ma, mb) == np.dtype(str(torch.result_type(ta, tb)).replace("torch.", ""))
        t = torch.from_numpy(_make(a, (2,)))
        expected = str(torch.result_type(t, scalar)).replace("torch.", "")
        assert result_type(minidl.tensor(_make(a, (2,))), scalar).name == expected, (a, scalar)


BINARY_OPS = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "eq": (lambda a, b: a == b, lambda a, b: a == b),
    "lt": (lambda a, b: a < b, lambda a, b: a < b),
    "maximum": (minidl.maximum, torch.maximum),
    "matmul": (lambda a, b: a @ b, lambda a, b: a @ b),
    "cat": (lambda a, b: minidl.cat([a, b]), lambda a, b: torch.cat([a, b])),
    "stack": (lambda a, b: minidl.stack([a, b]), lambda a, b: torch.stack([a, b])),
    "where": (lambda a, b: minidl.where(a > 2, a, b), lambda a, b: torch.where(a > 2, a, b)),
}
PAIRS = [("int64", "float32"), ("float32", "int64"), ("int32", "float64"), ("uint8", "int8"), ("int16", "float16"),
         ("float32", "float64"), ("int32", "int64"), ("bool", "float32")]


@pytest.mark.parametrize("op", list(BINARY_OPS))
@pytest.mark.parametrize("a, b", PAIRS)
def test_every_op_promotes_like_torch(op, a, b):
    ours, theirs = BINARY_OPS[op]
    if op in ("matmul",) and "bool" in (a, b):
        pytest.skip("torch has no bool matmul")
    if op in ("maximum", "where") and a == "bool":
        pytest.skip("comparison of a bool input with 2")
    xa, xb = _make(a, (3, 3)), _make(b, (3, 3))
    try:
        expected = theirs(torch.from_numpy(xa), torch.from_numpy(xb))
    except RuntimeError:
        pytest.skip(f"torch does not compute {op} on {a}, {b}")
    got = ours(minidl.tensor(xa), minidl.tensor(xb))
    assert got.dtype == np.dtype(str(expected.dtype).replace("torch.", "")), (op, a, b, got.dtype, expected.dtype)
    np.testing.assert_allclose(got.numpy().astype(np.float64), expected.numpy().astype(np.float64), rtol=1e-3)


def test_scalar_operands_keep_the_tensor_dtype_like_torch():
    for dtype in ("float32", "float64", "int32", "int64", "uint8"):
        t, m = torch.from_numpy(_make(dtype, (3,))), minidl.tensor(_make(dtype, (3,)))
        for s in (2, 2.5, True):
            for f in (lambda a: a + s, lambda a: a * s, lambda a: s - a, lambda a: a / s, lambda a: a > s):
                try:
                    f(t)
                except RuntimeError:  # torch refuses bool subtraction
                    continue
                assert f(m).dtype == np.dtype(str(f(t).dtype).replace("torch.", "")), (dtype, s)


# ------------------------------------------------------------------------------------------------
# All or nothing: a failing state-changing call changes nothing
# ------------------------------------------------------------------------------------------------


def _params(n=3, seed=0):
    minidl.manual_seed(seed)
    return [nn.Parameter(minidl.randn(4, 3)) for _ in range(n)]


def _snapshot(opt):
    params = [p._data.copy() for g in opt.param_groups for p in g["params"]]
    state = {id(p): {k: (v._data.copy() if isinstance(v, minidl.Tensor) else v) for k, v in s.items()}
             for p, s in opt.state.items()}
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    return params, state, copy.deepcopy(groups)


def _assert_same(a, b):
    for x, y in zip(a[0], b[0]):
        np.testing.assert_array_equal(x, y)
    assert a[0].__len__() == b[0].__len__()
    assert a[1].keys() == b[1].keys()
    for k in a[1]:
        assert a[1][k].keys() == b[1][k].keys()
        for kk in a[1][k]:
            np.testing.assert_array_equal(a[1][k][kk], b[1][k][kk])
    assert a[2] == b[2]


OPTIMIZERS = {
    "SGD": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
    "Adam": lambda ps: optim.Adam(ps, lr=0.1),
    "AdamW": lambda ps: optim.AdamW(ps, lr=0.1, amsgrad=True),
    "RMSprop": lambda ps: optim.RMSprop(ps, lr=0.1, momentum=0.5, centered=True),
}


def _one_step(opt, params):
    for p in params:
        p.grad = minidl.randn(*p.shape)
    opt.step()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("bad_grad", ["shape", "dtype"])
def test_step_with_one_bad_gradient_changes_nothing(name, bad_grad):
    params = _params()
    opt = OPTIMIZERS[name](params)
    _one_step(opt, params)
    for p in params:
        p.grad = minidl.randn(*p.shape)
    bad = minidl.randn(3, 4) if bad_grad == "shape" else minidl.ones(4, 3, dtype=minidl.int64)
    with pytest.raises(RuntimeError, match="assigned grad has"):   # refused where it is set, as torch
        params[-1].grad = bad
    # A gradient can still go wrong after it was set (its array replaced in place, the parameter's
    # .data reshaped): step() checks every gradient before it changes anything.
    params[-1].grad._data = bad._data
    before = _snapshot(opt)
    with pytest.raises((ValueError, TypeError), match=rf"{name}\.step: gradient"):
        opt.step()
    _assert_same(before, _snapshot(opt))


BAD_STATE_DICTS = {
    "sgd_into_adam": lambda sd, other: other,
    "wrong_shape_moment": lambda sd, other: _edit_state(sd, "exp_avg", minidl.zeros(3, 4)),
    "int_moment": lambda sd, other: _edit_state(sd, "exp_avg", minidl.zeros(4, 3, dtype=minidl.int64)),
    "moment_is_a_list": lambda sd, other: _edit_state(sd, "exp_avg", [[0.0] * 3] * 4),
    "negative_step": lambda sd, other: _edit_state(sd, "step", -1),
    "fractional_step": lambda sd, other: _edit_state(sd, "step", 1.5),
    "unknown_state_key": lambda sd, other: _edit_state(sd, "momentum_buffer", minidl.zeros(4, 3)),
    "nan_lr": lambda sd, other: _edit_group(sd, "lr", float("nan")),
    "negative_lr": lambda sd, other: _edit_group(sd, "lr", -0.1),
    "inf_eps": lambda sd, other: _edit_group(sd, "eps", float("inf")),
    "string_lr": lambda sd, other: _edit_group(sd, "lr", "0.1"),
    "beta_one": lambda sd, other: _edit_group(sd, "betas", (0.9, 1.0)),
    "amsgrad_not_bool": lambda sd, other: _edit_group(sd, "amsgrad", "yes"),
    "missing_betas": lambda sd, other: _drop_group_key(sd, "betas"),
    "state_not_dict": lambda sd, other: {**sd, "state": [1, 2]},
    "groups_not_list": lambda sd, other: {**sd, "param_groups": {"lr": 0.1}},
    "bad_index": lambda sd, other: {**sd, "state": {"x": sd["state"][0]}},
    "unknown_index": lambda sd, other: {**sd, "state": {**sd["state"], 17: sd["state"][0]}},
    "too_few_params": lambda sd, other: _edit_group(sd, "params", [0, 1]),
}


def _edit_state(sd, key, value):
    sd = copy.deepcopy(sd)
    sd["state"][2][key] = value
    return sd


def _edit_group(sd, key, value):
    sd = copy.deepcopy(sd)
    sd["param_groups"][0][key] = value
    return sd


def _drop_group_key(sd, key):
    sd = copy.deepcopy(sd)
    del sd["param_groups"][0][key]
    return sd


@pytest.mark.parametrize("case", list(BAD_STATE_DICTS))
def test_optimizer_load_state_dict_refuses_bad_state_and_changes_nothing(case):
    params = _params()
    opt = optim.Adam(params, lr=0.1)
    _one_step(opt, params)
    sgd = optim.SGD(params, lr=0.1, momentum=0.9)
    _one_step(sgd, params)
    bad = BAD_STATE_DICTS[case](opt.state_dict(), sgd.state_dict())
    before = _snapshot(opt)
    with pytest.raises(ValueError, match="Adam.load_state_dict"):
        opt.load_state_dict(bad)
    _assert_same(before, _snapshot(opt))
    opt.load_state_dict(copy.deepcopy(opt.state_dict()))  # the good one still loads


def test_optimizer_loads_torchs_sgd_state_with_none_buffers():
    params = _params(1)
    opt = optim.SGD(params, lr=0.1, momentum=0.9)
    opt.load_state_dict({"state": {0: {"momentum_buffer": None}}, "param_groups": [
        {"lr": 0.1, "momentum": 0.9, "dampening": 0, "weight_decay": 0, "nesterov": False, "maximize": False,
         "params": [0]}]})


BAD_HYPER = [
    (optim.SGD, dict(lr=float("nan")), "learning rate"),
    (optim.SGD, dict(lr=-1e-3), "learning rate"),
    (optim.SGD, dict(lr=float("inf")), "learning rate"),
    (optim.SGD, dict(lr="0.1"), "lr must be a number"),
    (optim.SGD, dict(lr=0.1, momentum=float("nan")), "momentum"),
    (optim.SGD, dict(lr=0.1, weight_decay=-1), "weight_decay"),
    (optim.SGD, dict(lr=0.1, dampening=float("nan")), "dampening"),
    (optim.SGD, dict(lr=0.1, nesterov=True), "Nesterov"),
    (optim.SGD, dict(lr=0.1, nesterov="yes"), "nesterov must be a bool"),
    (optim.Adam, dict(lr=0.1, eps=float("nan")), "eps"),
    (optim.Adam, dict(lr=0.1, eps=-1e-8), "eps"),
    (optim.Adam, dict(lr=0.1, betas=(0.9, float("nan"))), "beta"),
    (optim.Adam, dict(lr=0.1, betas=(1.0, 0.999)), "beta"),
    (optim.Adam, dict(lr=0.1, betas=(0.9,)), "betas"),
    (optim.AdamW, dict(lr=0.1, weight_decay=float("nan")), "weight_decay"),
    (optim.RMSprop, dict(lr=0.1, alpha=float("nan")), "alpha"),
    (optim.RMSprop, dict(lr=0.1, momentum=-0.1), "momentum"),
    (optim.RMSprop, dict(lr=0.1, centered=1), "centered must be a bool"),
]


@pytest.mark.parametrize("cls, kwargs, match", BAD_HYPER, ids=[f"{c.__name__}-{m}-{i}" for i, (c, k, m) in enumerate(BAD_HYPER)])
def test_invalid_hyperparameters_are_refused(cls, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        cls(_params(1), **kwargs)
    # and as a later param group
    opt = cls(_params(1), lr=0.1)
    with pytest.raises((ValueError, TypeError), match=match):
        opt.add_param_group({"params": _params(1, seed=1), **kwargs})
    assert len(opt.param_groups) == 1


@pytest.mark.parametrize("params", [set, frozenset, lambda ps: {i: p for i, p in enumerate(ps)}])
def test_unordered_params_are_refused(params):
    with pytest.raises(TypeError, match="ordered"):
        optim.SGD(params(_params()), lr=0.1)


def test_module_load_state_dict_is_all_or_nothing():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    before = {k: v._data.copy() for k, v in model.state_dict().items()}
    sd = {k: v._data.copy() + 1 for k, v in model.state_dict().items()}
    sd["2.bias"] = np.array(["a", "b"])  # right shape, cannot be a float
    with pytest.raises(RuntimeError, match="2.bias"):
        model.load_state_dict(sd)
    sd["2.bias"] = np.array([1.0, None], dtype=object)  # a None would have become NaN
    with pytest.raises(RuntimeError, match="2.bias"):
        model.load_state_dict(sd)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v._data, before[k])


def test_failed_batch_norm_call_counts_no_batch():
    bn = nn.BatchNorm2d(3, momentum=None)
    bn(minidl.randn(4, 3, 2, 2))
    state = {k: v._data.copy() for k, v in bn.state_dict().items()}
    for bad in (minidl.randn(1, 3, 1, 1), minidl.randn(4, 5, 2, 2), minidl.randn(4, 3, 2)):
        with pytest.raises(ValueError):
            bn(bad)
        for k, v in bn.state_dict().items():
            np.testing.assert_array_equal(v._data, state[k])


def test_batch_norm_on_an_empty_batch_is_torchs():
    for training in (True, False):
        bn, tbn = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
        bn.train(training), tbn.train(training)
        x = minidl.randn(0, 3, 4, 4, requires_grad=True)
        y, ty = bn(x), tbn(torch.zeros(0, 3, 4, 4))
        assert y.shape == tuple(ty.shape)
        assert int(bn.num_batches_tracked.item()) == int(tbn.num_batches_tracked.item())
        np.testing.assert_array_equal(bn.running_mean.numpy(), tbn.running_mean.numpy())
        y.sum().backward()
        assert x.grad.shape == (0, 3, 4, 4) and bn.weight.grad is not None


def test_scheduler_step_that_fails_changes_nothing():
    params = _params(1)
    opt = optim.SGD(params, lr=0.1)
    sched = optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=3)
    with pytest.raises(ValueError, match="OneCycleLR"):
        for _ in range(10):
            lr, epoch, count = opt.param_groups[0]["lr"], sched.last_epoch, sched._step_count
            sched.step()
    assert (opt.param_groups[0]["lr"], sched.last_epoch, sched._step_count) == (lr, epoch, count)


@pytest.mark.parametrize("bad", [
    [1, 2], {"last_epoch": 1.5}, {"last_epoch": -3}, {"base_lrs": [0.1, 0.2]}, {"base_lrs": [float("nan")]},
    {"not_a_key": 1},
])
def test_scheduler_load_state_dict_is_checked(bad):
    opt = optim.SGD(_params(1), lr=0.1)
    sched = optim.lr_scheduler.StepLR(opt, step_size=2)
    before = dict(sched.state_dict())
    with pytest.raises((TypeError, ValueError), match="StepLR.load_state_dict"):
        sched.load_state_dict(bad)
    assert sched.state_dict() == before


# ------------------------------------------------------------------------------------------------
# Values that cannot be right, and messages that used to be NumPy's or Python's
# ------------------------------------------------------------------------------------------------

WEAK = [
    (lambda: minidl.tensor(np.array([1.0, None], dtype=object)), TypeError, "tensor"),
    (lambda: minidl.tensor([1.0, None]), TypeError, "tensor"),
    (lambda: x2().chunk(0), ValueError, "chunk: chunks must be greater than 0"),
    (lambda: x2().chunk(1.5), TypeError, "chunk"),
    (lambda: x0().chunk(1), ValueError, "chunk"),
    (lambda: minidl.cat([x0(), x0()]), ValueError, "cat: zero-dimensional tensor"),
    (lambda: minidl.cat(x2()), TypeError, "cat: expected a sequence of tensors"),
    (lambda: minidl.cat([x2(), np.ones((2, 3))]), TypeError, "cat"),
    (lambda: minidl.stack([]), ValueError, "stack"),
    (lambda: x2().split(0), ValueError, "split"),
    (lambda: x2().split([1, 2]), ValueError, "split"),
    (lambda: x2().split([3, -1], dim=1), ValueError, "split"),
    (lambda: x2().reshape(-2, -3), ValueError, "reshape"),
    (lambda: x2().reshape(-1, -1), ValueError, "reshape"),
    (lambda: x2().reshape(4, 2), ValueError, "reshape"),
    (lambda: x2().reshape(1.5, 4), TypeError, "shape entries must be ints"),
    (lambda: minidl.zeros(0, 3).max(), IndexError, "max"),
    (lambda: minidl.zeros(0, 3).argmin(0), IndexError, "argmin"),
    (lambda: minidl.zeros(0, 3).amax(), IndexError, "amax"),
    (lambda: x2().permute(0, 0), ValueError, "permute"),
    (lambda: x2().permute(0), ValueError, "permute"),
    (lambda: x2().add_(minidl.randn(4, 2, 3)), RuntimeError, "add_"),
    (lambda: minidl.zeros(3, dtype=minidl.int64).add_(minidl.randn(3)), RuntimeError, "add_"),
    (lambda: minidl.zeros(3, dtype=minidl.int64).mul_(1.5), RuntimeError, "mul_"),
    (lambda: x2().to("cuda:x"), ValueError, "cuda:x"),
    (lambda: x2()[1.5], IndexError, "index"),
    (lambda: x2() + "a", TypeError, "add"),
    (lambda: x2() + minidl.randn(3, 2), ValueError, "add"),
    (lambda: x2() == minidl.randn(3, 2), ValueError, "eq"),
    (lambda: x2() < minidl.randn(3, 2), ValueError, "compare"),
    (lambda: x2() < "a", TypeError, "compare"),
    (lambda: minidl.where(x2(), x2(), x2()), TypeError, "where: expected condition to be a bool"),
    (lambda: minidl.where(x2() > 0, x2(), minidl.randn(4, 1, 2)), ValueError, "where"),
    (lambda: x2().clamp(minidl.randn(4, 2)), ValueError, "clamp"),
    (lambda: x2().gather(0, minidl.zeros(2, 3)), TypeError, "gather"),
    (lambda: P.softmax_forward([[1.0, 2.0]]), TypeError, "softmax_forward: x must be a numpy.ndarray"),
    (lambda: P.pooling_forward([[[[1.0]]]], P.PoolingDescriptor(mode="max", kernel_size=(1, 1), stride=(1, 1),
                                                                   padding=(0, 0), ceil_mode=False, spatial_dims=2)),
     TypeError, "pooling_forward: x must be"),
    (lambda: P.batch_norm_forward_inference([[1.0, 2.0]], None, None, np.zeros(2), np.ones(2)), TypeError,
     "batch_norm_forward_inference: x must be"),
    (lambda: P.lrn_forward(minidl.randn(1, 3, 2, 2), P.LRNDescriptor(size=3)), TypeError, "lrn_forward: x must be"),
    (lambda: P.adaptive_avg_pooling_forward([[[[1.0]]]], (1, 1)), TypeError, "adaptive_avg_pooling_forward"),
    (lambda: F.batch_norm(minidl.randn(1, 3), minidl.zeros(3), minidl.ones(3), training=True), ValueError,
     "more than 1 value per channel"),
    (lambda: F.batch_norm(minidl.randn(4, 3), minidl.zeros(2), minidl.ones(3)), ValueError, "running_mean"),
]


@pytest.mark.parametrize("fn, error, match", WEAK, ids=[f"{i}-{m[:20]}" for i, (f, e, m) in enumerate(WEAK)])
def test_bad_input_gets_our_message(fn, error, match):
    with pytest.raises(error, match=match) as info:
        fn()
    # never NumPy's or Python's internals
    for internal in ("object has no attribute", "operands could not be broadcast", "invalid literal for int",
                     "UFuncTypeError", "non-broadcastable output operand"):
        assert internal not in str(info.value), str(info.value)


def test_equality_with_a_non_tensor_is_false_not_an_error():
    t = x2()
    assert (t == None) is False and (t != None) is True  # noqa: E711
    assert t not in [None, "x"]


def test_bce_with_logits_targets_outside_01_are_computed_like_torch():
    # torch does not check these targets (soft labels and label tricks use them); neither do we,
    # and the value equals torch's.
    x, t = np.array([0.3, -1.2, 2.0], np.float32), np.array([2.0, -1.0, 0.5], np.float32)
    ours = F.binary_cross_entropy_with_logits(minidl.tensor(x), minidl.tensor(t)).item()
    theirs = torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor(x), torch.tensor(t)).item()
    assert ours == pytest.approx(theirs, rel=1e-6)


# ------------------------------------------------------------------------------------------------
# Checkpoints: every damaged file ends in one CheckpointError that names the file
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def checkpoint(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    path = tmp_path / "model.mdl"
    minidl.save({"model": model.state_dict(), "epoch": 3, "nested": [1, (2.5, None)]}, path)
    return path


def _rewrite(path, entries: dict):
    """Rewrite the zip at path with some entries replaced (bytes) or removed (None)."""
    with zipfile.ZipFile(path) as zf:
        old = {n: zf.read(n) for n in zf.namelist()}
    old.update(entries)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in old.items():
            if data is not None:
                zf.writestr(name, data)


def _structure(path):
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("structure.json"))


def _deep(n):
    node = {"type": "none"}
    for _ in range(n):
        node = {"type": "list", "items": [node]}
    return node


def _npy_header(shape, dtype="<f4"):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


STRUCTURE_DAMAGE = {
    "not_json": b"{not json",
    "not_utf8": b"\xff\xfe\x00",
    "a_list": b"[1, 2]",
    "wrong_format": json.dumps({"format": "other", "version": 1, "object": {"type": "none"}}).encode(),
    "future_version": json.dumps({"format": "minidl.checkpoint", "version": 99, "object": {"type": "none"}}).encode(),
    "version_string": json.dumps({"format": "minidl.checkpoint", "version": "1", "object": {"type": "none"}}).encode(),
    "no_object": json.dumps({"format": "minidl.checkpoint", "version": 1}).encode(),
    "node_not_dict": json.dumps({"format": "minidl.checkpoint", "version": 1, "object": 5}).encode(),
    "unknown_type": json.dumps({"format": "minidl.checkpoint", "version": 1, "object": {"type": "pickle"}}).encode(),
    "items_not_list": json.dumps({"format": "minidl.checkpoint", "version": 1, "object": {"type": "list", "items": 3}}).encode(),
    "dict_item_not_pair": json.dumps({"format": "minidl.checkpoint", "version": 1,
                                      "object": {"type": "dict", "items": [[{"type": "none"}]]}}).encode(),
    "unhashable_key": json.dumps({"format": "minidl.checkpoint", "version": 1, "object": {"type": "dict", "items": [
        [{"type": "list", "items": []}, {"type": "none"}]]}}).encode(),
    "int_not_int": json.dumps({"format": "minidl.checkpoint", "version": 1, "object": {"type": "int", "value": "x"}}).encode(),
    "int_missing_value": json.dumps({"format": "minidl.checkpoint", "version": 1, "object": {"type": "int"}}).encode(),
    "missing_entry": json.dumps({"format": "minidl.checkpoint", "version": 1,
                                 "object": {"type": "ndarray", "entry": "arr_99.npy"}}).encode(),
    "entry_not_str": json.dumps({"format": "minidl.checkpoint", "version": 1,
                                 "object": {"type": "ndarray", "entry": [1]}}).encode(),
    "entry_is_structure": json.dumps({"format": "minidl.checkpoint", "version": 1,
                                      "object": {"type": "ndarray", "entry": "structure.json"}}).encode(),
    "bad_device": json.dumps({"format": "minidl.checkpoint", "version": 1, "object": {
        "type": "tensor", "entry": "arr_0.npy", "device": "tpu", "requires_grad": False}}).encode(),
    "deep_nesting": json.dumps({"format": "minidl.checkpoint", "version": 1, "object": _deep(5000)}).encode()
    if False else None,  # built lazily below (json.dumps of 5000 levels recurses too)
}


@pytest.mark.parametrize("case", list(STRUCTURE_DAMAGE))
def test_malformed_structure_json_is_a_checkpoint_error(checkpoint, case):
    data = STRUCTURE_DAMAGE[case]
    if case == "deep_nesting":
        data = (b'{"format": "minidl.checkpoint", "version": 1, "object": ' + b'{"type": "list", "items": [' * 5000
                + b'{"type": "none"}' + b"]}" * 5000 + b"}")
    _rewrite(checkpoint, {"structure.json": data})
    with pytest.raises(CheckpointError, match=str(checkpoint.name)):
        minidl.load(checkpoint)


def test_deep_but_legal_nesting_is_refused_past_the_limit_only(tmp_path):
    from minidl.utils.serialization import MAX_NESTING

    obj = None
    for _ in range(MAX_NESTING - 5):
        obj = [obj]
    minidl.save(obj, tmp_path / "ok.mdl")
    assert minidl.load(tmp_path / "ok.mdl") == obj


NPY_DAMAGE = {
    "terabytes": lambda: _npy_header((2**20, 2**20, 2**10)) + b"\0" * 64,
    "negative_shape": lambda: _npy_header((2**20,)).replace(b"(1048576,)", b"(-5,)     "),
    "short_data": lambda: _npy_header((4, 4)) + b"\0" * 20,
    "long_data": lambda: _npy_header((2,)) + b"\0" * 64,
    "object_dtype": lambda: _npy_header((2,), "|O") + b"\0" * 16,
    "bad_magic": lambda: b"NOTNUMPY" + b"\0" * 64,
    "bad_header": lambda: b"\x93NUMPY\x01\x00\x10\x00{'descr': 12}  \n" + b"\0" * 8,
    "empty": lambda: b"",
}


@pytest.mark.parametrize("case", list(NPY_DAMAGE))
def test_malformed_npy_entry_is_a_checkpoint_error(checkpoint, case):
    _rewrite(checkpoint, {"arr_0.npy": NPY_DAMAGE[case]()})
    with pytest.raises(CheckpointError, match=str(checkpoint.name)):
        minidl.load(checkpoint)


def test_a_compressed_entry_claiming_too_much_is_refused(checkpoint):
    from minidl.utils.serialization import _check_entry_size

    with zipfile.ZipFile(checkpoint) as zf:
        old = {n: zf.read(n) for n in zf.namelist()}
    with zipfile.ZipFile(checkpoint, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in old.items():
            zf.writestr(name, data)
    assert minidl.load(checkpoint)["epoch"] == 3  # a deflated checkpoint is fine
    with zipfile.ZipFile(checkpoint) as zf:
        info = zf.getinfo("arr_0.npy")
    info.file_size = 2**32  # a forged size: more than deflate can expand to
    with pytest.raises(CheckpointError, match="claims"):
        _check_entry_size(info, None, "model.mdl")


def test_every_flipped_byte_is_a_checkpoint_error_or_a_correct_load(checkpoint):
    """Flip one byte at a time (a sample of offsets over the whole file): either the CRC or a check
    catches it (CheckpointError naming the file), or the byte did not matter and the load is equal."""
    good = checkpoint.read_bytes()
    reference = minidl.load(checkpoint)
    errors = 0
    offsets = sorted(set(np.linspace(0, len(good) - 1, 120).astype(int).tolist()))
    for offset in offsets:
        damaged = bytearray(good)
        damaged[offset] ^= 0xFF
        checkpoint.write_bytes(bytes(damaged))
        try:
            loaded = minidl.load(checkpoint)
        except CheckpointError as e:
            assert checkpoint.name in str(e)
            errors += 1
            continue
        # unimportant bytes (zip comments, timestamps, alignment): the content must be unchanged
        assert loaded["epoch"] == reference["epoch"] and loaded["nested"] == reference["nested"]
        for k, v in reference["model"].items():
            np.testing.assert_array_equal(loaded["model"][k].numpy(), v.numpy())
    assert errors > len(offsets) // 2


@pytest.mark.parametrize("cut", [0, 1, 10, 100, -100, -22, -1])
def test_truncated_file_is_a_checkpoint_error(checkpoint, cut):
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[:cut] if cut else b"")
    with pytest.raises(CheckpointError, match=checkpoint.name):
        minidl.load(checkpoint)


def test_checkpoint_error_is_a_value_error():
    assert issubclass(CheckpointError, ValueError)


def test_a_killed_save_leaves_a_temporary_that_the_next_save_removes(tmp_path):
    target = tmp_path / "ckpt.mdl"
    minidl.save({"w": minidl.ones(3)}, target)
    # A child process starts a save of a big object and is killed (SIGKILL) before it renames.
    code = (
        "import os, signal, sys, numpy as np, minidl\n"
        "import minidl.utils.serialization as s\n"
        "real = s._write_zip\n"
        "def slow(f, st, arrays):\n"
        "    real(f, st, arrays); f.flush(); print('written', flush=True); os.kill(os.getpid(), signal.SIGKILL)\n"
        "s._write_zip = slow\n"
        f"minidl.save({{'w': minidl.zeros(1000)}}, {str(target)!r})\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    stale = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert len(stale) == 1, os.listdir(tmp_path)
    np.testing.assert_array_equal(minidl.load(target)["w"].numpy(), np.ones(3, np.float32))  # old one intact
    # A temporary of a live process (this one, mid-save in another thread) is left alone.
    from minidl.utils import serialization as s

    live = tmp_path / f".other.mdl.{os.getpid()}.abc123{s._TMP_SUFFIX}"
    live.write_bytes(b"in flight")
    s._in_flight.add(str(live))
    try:
        minidl.save({"w": minidl.ones(2)}, tmp_path / "other.mdl")
    finally:
        s._in_flight.discard(str(live))
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".tmp")) == [live.name]
    minidl.save({"w": minidl.ones(2)}, target)
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_resume_from_a_bare_state_dict_explains(tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    try:
        import _common
    finally:
        sys.path.pop(0)
    model = nn.Linear(3, 2)
    opt = optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "bare.mdl"
    minidl.save(model.state_dict(), path)
    with pytest.raises(SystemExit, match="not a training checkpoint.*bare model state dict"):
        _common.load_checkpoint(str(path), model=model, optimizer=opt, device="cpu")
    path.write_bytes(b"garbage")
    with pytest.raises(SystemExit, match="--resume: .*bare.mdl"):
        _common.load_checkpoint(str(path), model=model, optimizer=opt, device="cpu")
    assert math.isfinite(1.0)


def test_inplace_casting_rules_are_torchs():
    ints = minidl.zeros(3, dtype=minidl.int64)
    ints.copy_(minidl.tensor([1.7, 2.2, -3.9]))  # copy_ converts, as torch
    assert ints.tolist() == torch.zeros(3, dtype=torch.int64).copy_(torch.tensor([1.7, 2.2, -3.9])).tolist()
    ints.fill_(2.9)
    assert ints.tolist() == [2, 2, 2]
    with pytest.raises(RuntimeError, match="div_: result type float32"):
        ints.div_(2)
    floats = minidl.zeros(3)
    floats.add_(minidl.ones(3, dtype=minidl.int64))  # int into float is fine
    assert floats.tolist() == [1.0, 1.0, 1.0]
