# Source of tutorials/08_where_the_time_goes.ipynb (percent format: `# %%` code cells,
# `# %% [markdown]` text cells). Edit here, then: python tutorials/build.py 08

# %% [markdown]
# # 8. Where the time goes in a training step
#
# A training step on the GPU is two programs running at once. The **host** (Python) walks through
# the model, the loss, the backward pass and the optimizer, and for every primitive it *queues*
# one or more kernels on a CUDA stream; the **GPU** runs the queue. As long as the host stays ahead,
# the GPU never waits and the step takes as long as its kernels. When the kernels are small, the
# host falls behind: each launch from Python costs several microseconds (about 8.6 µs for a CuPy
# launch on the H200, measured in `docs/GPU.md`), and a step of a small CNN queues a few
# hundred of them, so the GPU sits idle between kernels. Such a step is **launch-bound**: its time
# is the host's time, whatever the GPU's speed.
#
# In this notebook we
# 1. profile a step with `minidl.profiler` (which primitive, how many calls, host time, GPU time,
#    kernel launches) and look at the timeline to see the gaps;
# 2. cut launches with **fused kernels** (`nn.utils.fuse_modules`: batch norm + ReLU, conv + ReLU)
#    and the **multi-tensor optimizer** (one launch updates every parameter);
# 3. measure again, and discuss **CUDA graphs**, which remove the launch cost itself.
#
# Small mode runs on the CPU with a tiny batch (host times only: the NumPy path has no launches);
# full mode runs the MNIST CNN at batch 128 on the GPU.

# %% [markdown]
# **Running it on a CPU.** Small mode (the default) takes ~15 s on a 2-core CPU: the MNIST CNN at
# batch 8 on random data, a few profiled steps; the profiler shows host times only (the NumPy path
# launches no kernels) and the CUDA-graph cell is skipped. Full mode needs a GPU for its point (launch
# counts, GPU times, graphs); on a CPU it runs the same cells at batch 128 (a few minutes). The saved
# outputs come from a small-mode run on the CPU (a full-mode GPU run has not been saved yet).

# %%
import tutorial_utils as tu   # next to the notebooks: the mode, device label, tables, figure stamps
MODE, USE_GPU, DEVICE, WHY_NOT_GPU = tu.setup(precompile="all")   # compile every kernel now: no timing below may include NVRTC

import time

import numpy as np
import matplotlib.pyplot as plt

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl.profiler import ProfilerActivity, profile, record_function

device = "cuda" if USE_GPU else "cpu"
BATCH = 128 if MODE == "full" else 8
STEPS = 30 if MODE == "full" else 2
WARMUP = 3 if MODE == "full" else 1
ACTIVITIES = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if USE_GPU else [])

# %% [markdown]
# ## 8.1 The model and its step
#
# The MNIST CNN of tutorial 4 (and `examples/train_mnist.py`): two blocks conv3x3 - batch norm -
# ReLU - max-pool, then dropout and two linear layers, trained with Adam. `make_step` returns a
# function that runs one whole training step on a fixed batch.

# %%
def make_cnn():
    minidl.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
        nn.Linear(128, 10)).to(device)


def make_step(model, fused_optimizer=True):
    optimizer = minidl.optim.Adam(model.parameters(), lr=1e-3, fused=None if fused_optimizer else False)
    x = minidl.randn(BATCH, 1, 28, 28, device=device)
    y = minidl.randint(0, 10, (BATCH,), device=device)

    def step():
        with record_function("forward + loss"):
            loss = F.cross_entropy(model(x), y)
        with record_function("backward"):
            optimizer.zero_grad()
            loss.backward()
        with record_function("optimizer"):
            optimizer.step()

    step.optimizer = optimizer
    return step


def step_time_ms(step, steps=STEPS):
    """Wall-clock ms per step over `steps` steps after a warm-up (the GPU is synchronised at both
    ends, not in between: exactly what a training loop pays)."""
    for _ in range(WARMUP):
        step()
    if USE_GPU:
        minidl.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if USE_GPU:
        minidl.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / steps


def profile_steps(step, n=3):
    for _ in range(WARMUP):       # warm-up: kernel compiles, algorithm choices, optimizer state
        step()
    with profile(activities=ACTIVITIES, record_shapes=True) as prof:
        for _ in range(n):
            step()
            prof.step()
    return prof

# %% [markdown]
# ## 8.2 Profile the eager step
#
# `minidl.profiler.profile` records every call into the primitive library (the cuDNN-like layer
# under `nn.functional` and the optimizers): its host time and, on the GPU, its GPU time between two
# CUDA events, and how many kernels of `kernels/*.cu` it launched. `record_function` adds our own
# ranges (forward, backward, optimizer). The table sums three steps; sort it by host time first.

# %%
eager_model = make_cnn()
eager_step = make_step(eager_model, fused_optimizer=False)   # the per-parameter optimizer path
prof_eager = profile_steps(eager_step)
print(prof_eager.key_averages().table(sort_by="cpu_time_total", row_limit=20))

# %% [markdown]
# Read the columns. On the GPU, most primitives take tens of microseconds of host time per call and
# only a few of GPU time: Python decides, checks arguments, allocates, and launches, while the
# kernel itself is done almost at once (a batch-norm pass over 128x32x28x28 floats is 12 MB of
# traffic: ~4 µs at 3 TB/s). The optimizer row has no primitive under it with
# `fused=False`: it is Python and CuPy array arithmetic, ~10 small CuPy kernels per parameter,
# which the launch counter does not see (it counts the kernels of `kernels/*.cu`; see the
# `minidl.profiler` docstring for exactly what is counted).

# %%
if USE_GPU:
    print(prof_eager.key_averages().table(sort_by="cuda_time_total", row_limit=12))
    gpu_ms = sum(r["cuda_time_total"] for r in prof_eager.key_averages() if r["kind"] == "primitive") / 3
    print(f"\nGPU time inside primitives: {gpu_ms:.3f} ms per step; "
          f"launches of kernels/*.cu per step: {prof_eager.launches_per_step()}")

# %% [markdown]
# ## 8.3 The timeline: where the GPU waits
#
# Each bar is one primitive call: the top row is the host's time in the call, the bottom row the
# GPU's time between the call's two events. White space in the GPU row is time the GPU had nothing
# to do because the host had not queued the next kernel yet: **launch gaps**. (On the CPU path
# there is only the host row.) `prof.export_chrome_trace("trace.json")` writes the same data for
# chrome://tracing or ui.perfetto.dev, where you can zoom.

# %%
fig = prof_eager.plot_timeline()
fig.axes[0].set_title("eager step, 3 steps (per-parameter optimizer, unfused modules)")
tu.stamp(fig, DEVICE, MODE)
plt.show()

# %% [markdown]
# Why are small kernels so cheap on the GPU and still so costly in total? Occupancy: an H200 has
# 132 SMs, each able to hold 2048 threads; a kernel over 100 K elements with 256-thread blocks fills
# each SM with three blocks for a few microseconds, and the fixed cost of a launch (the Python call,
# the driver, the argument packing: ~8 µs) is larger than the work. Two ways out: **do more work
# per launch** (fuse kernels, update all parameters in one launch) and **launch without Python**
# (CUDA graphs replay a recorded sequence of kernels at ~1 µs each).
#
# ## 8.4 Fewer, fatter kernels
#
# `nn.utils.fuse_modules(model)` replaces each BN -> ReLU pair of a `Sequential` by
# `BatchNormReLU2d` (the ReLU applied in batch norm's last pass, and its gradient mask recomputed
# inside batch norm's backward kernels), and each Conv2d -> ReLU pair by `ConvReLU2d` (the ReLU in
# the convolution kernel's epilogue). The parameters and the `state_dict` keys stay the same.
# The Adam of `fused=None` (the default) updates every parameter in one launch of
# `multi_tensor_adam` on the GPU, reading the learning rate and the step count from device memory.

# %%
fused_model = make_cnn()
nn.utils.fuse_modules(fused_model)
print(fused_model)
assert list(fused_model.state_dict()) == list(eager_model.state_dict())
fused_step = make_step(fused_model, fused_optimizer=True)
prof_fused = profile_steps(fused_step)
print(prof_fused.key_averages().table(sort_by="cpu_time_total", row_limit=20))

# %% [markdown]
# The fused kernels compute the same numbers: the tests compare them with the unfused path bit for
# bit on the GPU (`tests/gpu/test_fused_gpu.py`) and equal the NumPy references on the CPU.
# Let's check here that one step of each model gives the same parameters:

# %%
def params_after_one_step(fuse):
    model = make_cnn()                      # seeds the RNG: same weights, batch and dropout masks
    if fuse:
        nn.utils.fuse_modules(model)
    make_step(model, fused_optimizer=fuse)()
    return [p.detach().cpu().numpy() for p in model.parameters()]

worst = max(float(np.max(np.abs(p - q))) for p, q in zip(params_after_one_step(False), params_after_one_step(True)))
print(f"largest difference between the parameters after one step: {worst:.3g}")

# %% [markdown]
# ## 8.5 Measure again
#
# Now the step times: wall-clock per step over many steps, the GPU synchronised only at the ends.
# `launches` counts the kernels of `kernels/*.cu` per step (CuPy's own kernels are not counted; the
# per-parameter optimizer adds ~10 per parameter on top of the eager column).

# %%
rows = []
for name, make in (("eager (unfused, per-parameter Adam)", lambda: make_step(make_cnn(), False)),
                   ("multi-tensor Adam only", lambda: make_step(make_cnn(), True)),
                   ("fused modules + multi-tensor Adam", lambda: make_step(nn.utils.fuse_modules(make_cnn()), True))):
    step = make()
    ms = step_time_ms(step)
    launches = profile_steps(step, n=1).launches_per_step()[0]
    rows.append((name, ms, launches))
print(tu.Table(["step", "ms / step", "launches of kernels/*.cu"], [[n, m, l] for n, m, l in rows],
               title=f"MNIST CNN, batch {BATCH}, {DEVICE}"))

fig, axes = plt.subplots(1, 2, figsize=(10, 2.8))
axes[0].barh([r[0] for r in rows], [r[1] for r in rows])
axes[0].set_xlabel("ms per step")
axes[1].barh([r[0] for r in rows], [r[2] for r in rows])
axes[1].set_xlabel("launches per step")
axes[1].set_yticks([])
fig.tight_layout()
tu.stamp(fig, DEVICE, MODE)
plt.show()

# %% [markdown]
# On the GPU the multi-tensor optimizer removes the most host time: Adam on 8 parameters was ~100
# CuPy kernels and now is 2 launches. The fusions cut the batch-norm blocks' launches and their
# memory passes. What remains is still launch-bound for this small model: on the order of a hundred
# launches at several µs each.
#
# ## 8.6 CUDA graphs
#
# A CUDA graph records the kernels of a step once (stream capture) and replays them with one call:
# the host's per-kernel cost drops from ~8 µs to ~1 µs, and the GPU runs the kernels back to back.
# Everything that changes from step to step must then live in device memory, which is why the
# multi-tensor optimizer reads the learning rate (`group["lr"] = v` writes it to the device) and
# the step count from device arrays. minidl's graph API is `minidl.cuda.CUDAGraph` /
# `minidl.cuda.graph` (torch's names) and `minidl.cuda.CUDAGraphStep`, which warms a whole training
# step up, captures it and replays it; the cell below uses it when this minidl has it.

# %%
graph_step = getattr(minidl.cuda, "CUDAGraphStep", None)
if not USE_GPU:
    print("CUDA graphs need the GPU; skipped on the CPU path.")
elif graph_step is None:
    print("This minidl has no minidl.cuda.CUDAGraphStep yet; skipped.")
else:
    try:
        step = make_step(nn.utils.fuse_modules(make_cnn()), True)
        # three eager warm-up steps on a side stream, then one capture; later calls replay the graph
        graphed = graph_step(step, optimizers=step.optimizer)
        for _ in range(5):
            graphed()
        graphed_ms = step_time_ms(graphed)
        print(f"graphed step: {graphed_ms:.3f} ms (eager, fused: {rows[-1][1]:.3f} ms); "
              f"whole step captured: {minidl._graphs._optimizer_is_capturable(step.optimizer)}")
    except Exception as e:  # say what failed rather than stop the notebook
        print(f"CUDA graph capture did not run here: {type(e).__name__}: {e}")

# %% [markdown]
# ## Summary
#
# * A small model's step is launch-bound: the profiler shows host time per call far above GPU time,
#   and the timeline shows the GPU idle between kernels.
# * Fusing kernels (BN + ReLU, conv + ReLU, residual add + ReLU) and updating all parameters in one
#   launch cut the launches per step and the bytes moved, with results equal to the unfused path.
# * CUDA graphs remove the per-launch host cost itself; they need every per-step value (learning
#   rate, step count, RNG offsets) on the device, which the multi-tensor optimizers provide.
