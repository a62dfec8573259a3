"""torch.autograd.graph.saved_tensors_hooks on minidl (autograd/graph.py): a node keeps only what pack_hook returned
(its own arrays dropped), the backward reads what unpack_hook gives back, gradients through a CNN and an LSTM are the
same with save_on_cpu or disk-like hooks as without, and the errors."""
import numpy as np
import pytest

import minidl
import minidl.nn as nn
from minidl.autograd.graph import save_on_cpu, saved_tensors_hooks


def _grads(model, x, hooks=None):
    model.zero_grad()
    if hooks is None:
        out = model(x)
    else:
        with hooks:
            out = model(x)
    out = out[0] if isinstance(out, tuple) else out
    (out * out).sum().backward()
    return [p.grad.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("kind", ["cnn", "lstm"])
def test_gradients_are_the_same_through_the_hooks(kind):
    minidl.manual_seed(0)
    if kind == "cnn":
        model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(4 * 3 * 3, 3), nn.LogSoftmax(-1))
        x = minidl.randn(2, 2, 8, 8)
    else:
        model = nn.LSTM(3, 5, num_layers=2, batch_first=True)
        x = minidl.randn(2, 4, 3)
    plain = _grads(model, x)
    store = {}

    def to_store(t):   # (as saving to disk: only a key stays on the tape)
        key = len(store)
        store[key] = t.detach().numpy().copy()
        return key

    def from_store(key):
        return minidl.tensor(store.pop(key))

    for hooks in (save_on_cpu(), saved_tensors_hooks(to_store, from_store)):
        for ours, want in zip(_grads(model, x, hooks), plain):
            np.testing.assert_allclose(ours, want, rtol=1e-6, atol=1e-7)
    assert not store   # every packed tensor was unpacked once


def test_a_node_keeps_only_what_pack_returned():
    x = minidl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with saved_tensors_hooks(lambda t: "key", lambda key: x.detach() * 0 + 5):
        y = x * x
    node = y.grad_fn
    assert not any(type(v).__name__ == "ndarray" for v in vars(node).values())
    y.sum().backward()   # d(x*x)/dx = 2x, with x read back as 5 by unpack: 10 each
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 10.0, 10.0])


def test_innermost_hooks_win_and_errors_are_clear():
    calls = []
    x = minidl.ones(2, requires_grad=True)
    with saved_tensors_hooks(lambda t: calls.append("outer") or t, lambda t: t):
        with saved_tensors_hooks(lambda t: calls.append("inner") or t, lambda t: t):
            y = x.exp()
    assert calls == ["inner"]
    with saved_tensors_hooks(lambda t: t, lambda t: "not a tensor"):
        z = x.exp()
    with pytest.raises(TypeError, match="unpack_hook must return a tensor"):
        z.sum().backward()
    y.sum().backward()
    with minidl.autograd.graph.disable_saved_tensors_hooks("hooks are off in this region"):
        with pytest.raises(RuntimeError, match="hooks are off in this region"):
            with saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
