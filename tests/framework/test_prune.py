"""torch.nn.utils.prune: the same masks, module layout (weight_orig, weight_mask, a pre-hook), gradients and
permanent removal as torch, on the same weights."""
import numpy as np
import pytest
import torch
import torch.nn.utils.prune  # noqa: F401  (torch.nn.utils.prune is a submodule torch does not import itself)

import minidl
import minidl.nn.utils.prune  # noqa: F401

RNG = np.random.default_rng(0)
W, B, W2 = RNG.standard_normal((6, 5)), RNG.standard_normal(6), RNG.standard_normal((3, 5)) * 0.3


def _linear(lib, w, b):
    layer = lib.nn.Linear(w.shape[1], w.shape[0])
    with lib.no_grad():
        layer.weight.copy_(lib.tensor(w, dtype=lib.float32))
        layer.bias.copy_(lib.tensor(b, dtype=lib.float32))
    return layer


def _state(layer):
    return {k: v.detach().numpy() for k, v in layer.state_dict().items()}


def _both(run):
    return [run(lib, lib.nn.utils.prune) for lib in (minidl, torch)]


def test_iterative_pruning_matches_torch_masks_layout_gradients_and_remove():
    def run(lib, P):
        layer = _linear(lib, W, B)
        P.l1_unstructured(layer, "weight", amount=0.3)
        P.ln_structured(layer, "weight", amount=2, n=2, dim=0)     # then 2 whole rows, among the rows still alive
        P.l1_unstructured(layer, "bias", amount=2)
        out = {"params": [n for n, _ in layer.named_parameters()], "buffers": [n for n, _ in layer.named_buffers()],
               "state": _state(layer), "hook": type(layer._forward_pre_hooks[next(iter(layer._forward_pre_hooks))]).__name__,
               "pruned": P.is_pruned(layer)}
        x = lib.tensor(np.linspace(-1, 1, 10).reshape(2, 5), dtype=lib.float32)
        layer(x).pow(2).sum().backward()
        out["grad"] = layer.weight_orig.grad.numpy()
        out["y"] = layer(x).detach().numpy()
        P.remove(layer, "weight")
        out["after"] = [n for n, _ in layer.named_parameters()], _state(layer)
        out["plain"] = type(layer.weight).__name__
        return out

    ours, theirs = _both(run)
    assert ours["params"] == theirs["params"] == ["weight_orig", "bias_orig"]
    assert ours["buffers"] == theirs["buffers"] and ours["hook"] == theirs["hook"] == "PruningContainer"
    assert ours["pruned"] and theirs["pruned"]
    for key in theirs["state"]:
        np.testing.assert_array_equal(ours["state"][key], theirs["state"][key])
    np.testing.assert_allclose(ours["grad"], theirs["grad"], rtol=1e-5, atol=1e-6)
    assert (ours["grad"][theirs["state"]["weight_mask"] == 0] == 0).all()   # pruned entries get no gradient
    np.testing.assert_allclose(ours["y"], theirs["y"], rtol=1e-5, atol=1e-6)
    assert ours["after"][0] == theirs["after"][0] == ["bias_orig", "weight"] and ours["plain"] == "Parameter"
    for key in theirs["after"][1]:
        np.testing.assert_allclose(ours["after"][1][key], theirs["after"][1][key], rtol=1e-6)


def test_global_unstructured_custom_mask_and_importance_scores_as_torch():
    def run(lib, P):
        a, b = _linear(lib, W, B), _linear(lib, W2, B[:3])
        P.global_unstructured([(a, "weight"), (b, "weight")], pruning_method=P.L1Unstructured, amount=0.5)
        c = _linear(lib, W, B)
        P.custom_from_mask(c, "bias", mask=lib.tensor([1, 0, 1, 0, 1, 1], dtype=lib.float32))
        d = _linear(lib, W, B)
        P.l1_unstructured(d, "weight", amount=4, importance_scores=lib.tensor(W[::-1].copy(), dtype=lib.float32))
        return [m.weight_mask.numpy() for m in (a, b, d)] + [c.bias_mask.numpy(), c.bias.detach().numpy()]

    for ours, theirs in zip(*_both(run)):
        np.testing.assert_array_equal(ours, theirs)


def test_random_pruning_counts_and_the_errors_say_what_is_wrong():
    minidl.manual_seed(3)
    P = minidl.nn.utils.prune
    layer = _linear(minidl, W, B)
    P.random_unstructured(layer, "weight", amount=7)
    assert int((layer.weight_mask == 0).sum()) == 7
    P.random_structured(layer, "weight", amount=0.5, dim=1)       # then half of the 5 columns still alive: 2 (round)
    dead_cols = int((layer.weight_mask.sum(0) == 0).sum())
    assert dead_cols >= 2 and (layer.weight.detach().numpy()[layer.weight_mask.numpy() == 0] == 0).all()
    fresh = _linear(minidl, W, B)
    with pytest.raises(ValueError, match=r"amount=1.5 should either be a float in the range \[0, 1\]"):
        P.l1_unstructured(fresh, "weight", amount=1.5)
    with pytest.raises(ValueError, match="amount=31 should be smaller than the number of parameters to prune=30"):
        P.l1_unstructured(fresh, "weight", amount=31)
    with pytest.raises(ValueError, match="Structured pruning can only be applied to multidimensional tensors"):
        P.ln_structured(fresh, "bias", amount=1, n=1, dim=0)
    with pytest.raises(ValueError, match="has to be pruned before pruning can be removed"):
        P.remove(fresh, "weight")
    assert not P.is_pruned(fresh)
