"""CUDA graph API without a GPU: torch's names, clear errors where the GPU path is missing or the
arguments are wrong; the device-resident dropout generator (philox_advance) on the CPU reference; the
layer-owned convolution plans (the problem described once per shape). The GPU half is
tests/gpu/test_graphs_gpu.py."""
import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl import _graphs
from minidl.primitives import convolution as conv_prims
from minidl.primitives import dropout_forward, dropout_mask, philox_advance
from tests.conftest import GPU_AVAILABLE


def test_api_names_match_torch():
    for name in ("CUDAGraph", "graph", "graph_pool_handle", "make_graphed_callables", "is_current_stream_capturing"):
        assert hasattr(torch.cuda, name) and hasattr(minidl.cuda, name), name
    for method in ("capture_begin", "capture_end", "replay", "reset", "pool", "debug_dump"):
        assert hasattr(torch.cuda.CUDAGraph, method) and hasattr(minidl.cuda.CUDAGraph, method), method
    assert minidl.cuda.is_current_stream_capturing() is False


@pytest.mark.skipif(GPU_AVAILABLE, reason="checks the errors of a machine without CuPy or a GPU")
def test_without_gpu_every_entry_point_says_why():
    for call, name in ((lambda: minidl.cuda.CUDAGraph().capture_begin(), "CUDAGraph.capture_begin"),
                       (minidl.cuda.graph_pool_handle, "cuda.graph_pool_handle"),
                       (lambda: minidl.cuda.graph(minidl.cuda.CUDAGraph()).__enter__(), "cuda.graph"),
                       (lambda: minidl.cuda.CUDAGraphStep(lambda x: x)(minidl.ones(2)), "CUDAGraphStep"),
                       (lambda: minidl.cuda.make_graphed_callables(nn.Linear(2, 2), (minidl.ones(1, 2),)),
                        "make_graphed_callables")):
        with pytest.raises(RuntimeError, match=rf"{name}: the CUDA path is not available"):
            call()


def test_argument_errors():
    with pytest.raises(TypeError, match="expected a minidl.cuda.CUDAGraph"):
        minidl.cuda.graph(object())
    with pytest.raises(RuntimeError, match="nothing captured yet"):
        minidl.cuda.CUDAGraph().replay()
    with pytest.raises(RuntimeError, match="no pool yet"):
        minidl.cuda.CUDAGraph().pool()
    with pytest.raises(TypeError, match="fn must be callable"):
        minidl.cuda.CUDAGraphStep(3)
    with pytest.raises(ValueError, match="warmup must be an int >= 1"):
        minidl.cuda.CUDAGraphStep(lambda: None, warmup=0)
    with pytest.raises(TypeError, match="optimizers must be minidl optimizers"):
        minidl.cuda.CUDAGraphStep(lambda: None, optimizers=[torch.optim.SGD([torch.zeros(1, requires_grad=True)])])
    step = minidl.cuda.graphed_step(optimizers=minidl.optim.SGD([nn.Parameter(minidl.ones(2))], lr=0.1), warmup=2)(
        lambda x: x)
    assert isinstance(step, minidl.cuda.CUDAGraphStep) and step.warmup == 2 and not step.captured


def test_static_input_checks_name_the_input_and_both_shapes():
    static = (minidl.zeros(4, 3), minidl.zeros(4, dtype=minidl.int64))
    _graphs.check_static_args("op", static, (minidl.ones(4, 3), minidl.ones(4, dtype=minidl.int64)))  # fine
    with pytest.raises(ValueError, match=r"op: input 0 has shape \(5, 3\), dtype float32, device cpu but the "
                                         r"graph was captured with shape \(4, 3\)"):
        _graphs.check_static_args("op", static, (minidl.ones(5, 3), static[1]))
    with pytest.raises(ValueError, match=r"input 1 has shape \(4,\), dtype int32"):
        _graphs.check_static_args("op", static, (static[0], minidl.ones(4, dtype=minidl.int32)))
    with pytest.raises(ValueError, match="captured with 2 inputs, called with 1"):
        _graphs.check_static_args("op", static, (static[0],))
    with pytest.raises(TypeError, match="input 1 must be a Tensor"):
        _graphs.check_static_args("op", static, (static[0], np.zeros(4)))


def test_optimizer_host_state_is_seen():
    p = nn.Parameter(minidl.ones(3))
    sgd, adam = minidl.optim.SGD([p], lr=0.1, momentum=0.9), minidl.optim.Adam([p], lr=1e-3)
    assert not _graphs._optimizer_is_capturable(sgd)
    p.grad = minidl.ones(3)
    adam.step()
    numbers = _graphs._host_numbers(adam)
    assert numbers[("state of parameter 0", "step")] == 1 and numbers[("param_groups[0]", "lr")] == 1e-3


# ------------------------------------------------------------------------------------------------
# Dropout's generator state: claimed and advanced where the data lives
# ------------------------------------------------------------------------------------------------


def test_philox_advance_claims_counters_in_multiples_of_four():
    state = np.array([123, 8], dtype=np.uint64)
    claimed = philox_advance(state, 10)
    assert claimed.tolist() == [123, 8] and state.tolist() == [123, 20]
    assert philox_advance(state, 0).tolist() == [123, 20] and state.tolist() == [123, 20]
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    # an array state gives the mask of (seed, its offset + offset)
    np.testing.assert_array_equal(dropout_forward(x, 0.4, np.array([9, 12], np.uint64), offset=5),
                                  dropout_forward(x, 0.4, 9, offset=17))
    with pytest.raises(ValueError, match=r"philox_advance: state as an array must be a \(2,\) uint64"):
        philox_advance(np.zeros(3, np.uint64), 4)
    with pytest.raises(ValueError, match=r"dropout_forward: seed as an array must be a \(2,\) uint64"):
        dropout_forward(x, 0.5, np.zeros(2, np.int64))


def test_functional_dropout_walks_the_generator():
    minidl.manual_seed(77)
    x = minidl.ones(5, 6)
    y1, y2 = F.dropout(x, 0.5), F.dropout(x, 0.5)
    np.testing.assert_array_equal(y1.numpy() != 0, dropout_mask((5, 6), 0.5, 77, 0))
    np.testing.assert_array_equal(y2.numpy() != 0, dropout_mask((5, 6), 0.5, 77, 32))  # 30 rounded up to 32
    minidl.manual_seed(77)  # resets the state in place: the same masks again
    np.testing.assert_array_equal(F.dropout(x, 0.5).numpy(), y1.numpy())


# ------------------------------------------------------------------------------------------------
# The layer owns its convolution: described once per shape, the policy an argument
# ------------------------------------------------------------------------------------------------


def test_conv_layer_describes_each_shape_once(monkeypatch):
    calls = []
    original = conv_prims._make_problem

    def spy(op, *args):
        calls.append(op)
        return original(op, *args)

    monkeypatch.setattr(conv_prims, "_make_problem", spy)
    conv = nn.Conv2d(3, 5, 3, padding=1)
    x = minidl.randn(2, 3, 7, 9, requires_grad=True)
    for _ in range(3):
        conv(x).sum().backward()
    assert calls == ["convolution_forward"]  # one description for 3 forward + 3x2 backward calls
    conv(minidl.randn(1, 3, 5, 5)).sum().backward()
    assert len(calls) == 2 and len(conv._conv_plans) == 2


def test_conv_plan_equals_the_primitives_and_checks_its_arrays():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 6, 5, 4)).astype(np.float32)
    desc = conv_prims.ConvolutionDescriptor(padding=1, stride=2, groups=2)
    plan = conv_prims.ConvolutionPlan(x.shape, w.shape, desc, policy="deterministic")
    np.testing.assert_array_equal(plan.forward(x, w), conv_prims.convolution_forward(x, w, desc, policy="deterministic"))
    np.testing.assert_array_equal(plan.backward_data(w, dy),
                                  conv_prims.convolution_backward_data(w, dy, desc, x.shape, policy="deterministic"))
    np.testing.assert_array_equal(plan.backward_filter(x, dy),
                                  conv_prims.convolution_backward_filter(x, dy, desc, w.shape, policy="deterministic"))
    np.testing.assert_array_equal(plan.backward_bias(dy), conv_prims.convolution_backward_bias(dy))
    with pytest.raises(ValueError, match=r"convolution_forward: x is \(2, 4, 9, 9\) on cpu, but the plan is for \(2, 4, 9, 8\)"):
        plan.forward(np.zeros((2, 4, 9, 9), np.float32), w)
    with pytest.raises(TypeError, match="convolution_backward_data: all arrays must have the same dtype"):
        plan.backward_data(w.astype(np.float64), dy)
    with pytest.raises(ValueError, match="convolution_forward: unknown policy 'fastest'"):
        conv_prims.convolution_forward(x, w, desc, policy="fastest")
