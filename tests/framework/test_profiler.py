"""minidl.profiler on the CPU path: exact call counts per primitive on a known model, host times,
the table, the Chrome trace, the plots, and no wrapping outside a profile."""
import json

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl import primitives as P
from minidl.profiler import ProfilerActivity, profile, record_function


def _model():
    minidl.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 3 * 3, 5))


def _step(model, opt, x, y):
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()


def test_profile_counts_each_primitive_call_of_a_step(tmp_path):
    model = _model()
    opt = minidl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = minidl.randn(3, 2, 7, 6), minidl.tensor(np.array([0, 4, 2]))
    original = P.convolution_forward
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        assert P.convolution_forward is not original
        for _ in range(2):
            with record_function("train_step"):
                _step(model, opt, x, y)
            prof.step()
    assert P.convolution_forward is original  # restored: nothing is wrapped outside a profile
    rows = {r["name"]: r for r in prof.key_averages()}
    # Per step: conv fwd, BN fwd, ReLU fwd, max-pool fwd, 1 GEMM (Linear fwd); backward: Linear's 2
    # GEMMs (dx, dW), max-pool, ReLU, BN backward, conv backward_filter (the input needs no grad); the loss's
    # fused cross-entropy forward and backward.
    expected = {"convolution_forward": 2, "batch_norm_forward_training": 2, "activation_forward": 2,
                "pooling_forward": 2, "gemm": 6, "pooling_backward": 2, "activation_backward": 2,
                "batch_norm_backward": 2, "convolution_backward_filter": 2, "cross_entropy_forward": 2,
                "cross_entropy_backward": 2, "train_step": 2}
    assert {k: rows[k]["count"] for k in expected} == expected
    assert set(rows) == set(expected)
    assert all(r["launches"] == 0 and r["cuda_time_total"] == 0.0 for r in rows.values())  # NumPy path
    assert all(r["cpu_time_total"] > 0 for r in rows.values())
    assert rows["train_step"]["cpu_time_total"] >= sum(r["cpu_time_total"] for k, r in rows.items() if k != "train_step")
    table = prof.key_averages().table(sort_by="count")
    assert table.splitlines()[2].split()[0] == "gemm" and "Host total" in table and "GPU total" not in table
    by_shape = prof.key_averages(group_by_input_shape=True)
    assert any(r["name"] == "convolution_forward" and "(3, 2, 7, 6)" in r["shapes"] for r in by_shape)
    assert prof.launches_per_step() == [0, 0]

    trace = json.loads(open(prof.export_chrome_trace(tmp_path / "t.json")).read())["traceEvents"]
    assert len(trace) == sum(expected.values()) and {e["tid"] for e in trace} == {"host"}
    prof.plot_timeline(tmp_path / "timeline.png")
    prof.plot_launches_per_step(tmp_path / "launches.png")
    assert (tmp_path / "timeline.png").stat().st_size > 0


def test_profile_errors():
    with pytest.raises(ValueError, match="unknown activities"):
        profile(activities=["tpu"])
    prof = profile(activities=[ProfilerActivity.CPU])
    with pytest.raises(RuntimeError, match="after the"):
        prof.key_averages()
    with prof:
        with pytest.raises(RuntimeError, match="already active"):
            profile(activities=[ProfilerActivity.CPU]).__enter__()
    with pytest.raises(ValueError, match="sort_by"):
        prof.key_averages().table(sort_by="speed")


def test_a_profile_counts_launches_only_while_it_is_active():
    """The launch counter every kernel launch calls (primitives/_common.launch_counter) is set on entering a profile,
    counts into that profile, and is cleared on leaving it (a launch after that counts nowhere)."""
    from minidl import profiler
    from minidl.primitives import _common

    assert _common.launch_counter is None
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as prof:
        counter = _common.launch_counter
        counter()
        counter()
    assert _common.launch_counter is None
    assert prof._launches == 2 and prof.launches_per_step() == [2]
    counter()   # no active profile: nothing to count into
    assert prof._launches == 2


def test_schedule_records_only_active_steps_and_hands_each_cycle_to_on_trace_ready(tmp_path):
    """torch.profiler.schedule(wait, warmup, active, repeat) with on_trace_ready: only the active steps are recorded,
    each cycle's profile is handed over at its last active step (its results readable there), and
    tensorboard_trace_handler writes one trace file a cycle; the same counts as torch's on this program."""
    from minidl import profiler

    x = minidl.tensor(np.ones((8, 4), np.float32), requires_grad=True)
    w = minidl.tensor(np.ones((3, 4), np.float32))
    cycles = []

    def ready(prof):
        cycles.append(sum(row["count"] for row in prof.key_averages() if row["name"] == "gemm"))
        profiler.tensorboard_trace_handler(str(tmp_path), worker_name="w")(prof)

    plan = profiler.schedule(wait=1, warmup=1, active=2, repeat=2)
    assert [plan(i) for i in range(9)] == ["none", "warmup", "record", "record_and_save"] * 2 + ["none"]
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU], schedule=plan, on_trace_ready=ready) as prof:
        for _ in range(10):
            minidl.nn.functional.linear(x, w).relu().sum().backward()
            prof.step()
    assert cycles == [4, 4]   # 2 active steps x 2 GEMMs (forward, and dx: w needs no gradient), per cycle
    assert len(list(tmp_path.glob("w.*.pt.trace.json"))) == 2
    with pytest.raises(ValueError, match="active > 0"):
        profiler.schedule(wait=1, warmup=0, active=0)
