# Source of tutorials/10_many_gpus.ipynb (percent format: `# %%` code cells,
# `# %% [markdown]` text cells). Edit here, then: python tutorials/build.py 10

# %% [markdown]
# # 10. Many GPUs: data parallelism and the all-reduce
#
# When one GPU is too slow for a model, the simplest way to use several is **data parallelism**:
# every GPU holds a full copy of the model (a *replica*), each takes a different slice of every batch,
# and after the backward pass the replicas **average their gradients**, so that every optimizer step
# is the same step on every GPU and the copies never drift apart. The averaging is one collective
# operation, the **all-reduce**: every process contributes an array and every process ends with the
# sum. On NVIDIA GPUs it is NCCL's job; on CPUs, MPI's.
#
# In this notebook we
# 1. check in NumPy why averaging the gradients of the slices gives the gradient of the whole batch;
# 2. write the **ring all-reduce** in NumPy (a reduce-scatter, then an all-gather) and count the bytes
#    each process sends: 2(N-1)/N times the array, whatever the number of processes N;
# 3. run a real all-reduce in several processes with `minidl.distributed` and compare;
# 4. run `DistributedDataParallel` and draw the timeline of one backward pass: gradients are
#    reduced in **buckets** while the backward pass is still computing the rest;
# 5. read the scaling measured on two H100s: minidl against PyTorch.

# %% [markdown]
# **Running it on a CPU.** Small mode (the default) takes about 10 s on a 2-core CPU: the NumPy
# simulations, then real programs in 2 and 3 CPU processes that talk through MPI (`pip install
# "minidl[distributed]"`; without it those cells say why they are skipped). Full mode runs the same
# programs one process per GPU over NCCL when the machine has two GPUs or more. The scaling section
# reads `benchmarks/results/gpu_distributed.md`, measured on two H100s. The saved outputs come from a
# small-mode run on a 2-core CPU (2026-11-25); a run on a multi-GPU machine has not been saved yet.

# %%
import tutorial_utils as tu   # next to the notebooks: the mode, device label, tables, figure stamps
MODE, USE_GPU, DEVICE, WHY_NOT_GPU = tu.setup()

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import matplotlib.pyplot as plt

import minidl
import minidl.distributed as dist

GPUS = minidl.cuda.device_count() if USE_GPU else 0
ON_GPUS = GPUS >= 2                      # the real programs run one process per GPU, over NCCL
HAVE_MPI = dist.is_mpi_available()       # else on CPU processes, over MPI
ROOT = Path(tu.__file__).resolve().parents[1]
WORK = Path(tempfile.mkdtemp(prefix="minidl_tutorial10_"))
print(f"GPUs: {GPUS}; real programs run on", "GPUs over NCCL" if ON_GPUS else
      ("CPU processes over MPI" if HAVE_MPI else "nothing (no second GPU, no mpi4py)"))


def launch(program: str, nproc: int, *args) -> subprocess.CompletedProcess:
    """Write `program` to a file and start it in nproc processes with minidl's launcher, as a user would
    from a terminal: python -m minidl.distributed.run --nproc-per-node N program.py."""
    path = WORK / "program.py"
    path.write_text(program)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "minidl.distributed.run", "--nproc-per-node", str(nproc), str(path), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=WORK, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the program failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc

# %% [markdown]
# ## 10.1 Why averaging gradients is enough
#
# The loss of a batch is the mean of its examples' losses, and the gradient of a mean is the mean of
# the gradients. Split a batch of B examples into N equal slices: the full batch's gradient is the
# average of the N slices' gradients. So N processes can each compute the gradient of their slice,
# average, and take exactly the step that one process would take on the whole batch. Here it is for
# a least-squares model, gradient 2 Xᵀ(Xw - y) / B:

# %%
rng = np.random.default_rng(0)
X, y, w = rng.standard_normal((12, 5)), rng.standard_normal(12), rng.standard_normal(5)


def grad(Xb, yb):
    return 2 * Xb.T @ (Xb @ w - yb) / len(yb)


N = 3
slices = [grad(X[r::N], y[r::N]) for r in range(N)]        # rank r takes every N-th example
print("whole batch      :", np.round(grad(X, y), 6))
print("mean of 3 slices :", np.round(np.mean(slices, axis=0), 6))
print("largest difference:", np.abs(grad(X, y) - np.mean(slices, axis=0)).max())

# %% [markdown]
# Two things make this exact in a real network, and both are DDP's business: every replica must start
# from the same weights (DDP broadcasts rank 0's at the start), and the slices must be equal in size
# (`DistributedSampler` pads the dataset so they are). One thing does not average away: **batch norm**
# normalises with the statistics of each process's slice, not of the whole batch. Where that matters,
# `nn.SyncBatchNorm` all-reduces the per-channel sums too, so that N processes compute what one
# computes on the whole batch (tests/test_distributed.py checks exactly that).
#
# ## 10.2 The ring all-reduce, in NumPy
#
# The simplest all-reduce sends every array to one process, which adds them and sends the sum back:
# that process moves N times the data and the others wait. The **ring** keeps every link busy. The N
# processes stand in a ring, each array is cut into N chunks, and
# 1. **reduce-scatter**, N-1 steps: at each step every process sends one chunk to its right neighbour,
#    which adds it into its own copy of that chunk. After N-1 steps process r holds the complete sum of
#    chunk (r+1) mod N;
# 2. **all-gather**, N-1 steps: the complete chunks travel once more around the ring, each process
#    overwriting its copy, until everyone has every sum.
#
# Each process sends 2(N-1) chunks of S/N bytes: **2(N-1)/N · S**, less than 2S however many
# processes there are. That is why NCCL reports a *bus bandwidth*, the array's size divided by the time
# and multiplied by 2(N-1)/N: it is what each link carried.

# %%
def ring_allreduce(arrays, record=None):
    """Every process's array becomes the sum of all of them, by N-1 reduce-scatter and N-1 all-gather
    steps around a ring. `arrays`: one 1-D array per process. Returns the results and the bytes each
    process sent. `record`: a list that gets, after each step, which chunks each process holds summed."""
    n = len(arrays)
    chunks = [np.array_split(a.astype(np.float64), n) for a in arrays]   # chunks[rank][c]
    have = [[{r} for c in range(n)] for r in range(n)]   # which ranks' contributions chunk c holds
    sent = [0] * n
    for step in range(n - 1):                 # reduce-scatter: rank r sends chunk (r - step) to r + 1
        outgoing = [(r, (r - step) % n, chunks[r][(r - step) % n].copy(), set(have[r][(r - step) % n]))
                    for r in range(n)]
        for r, c, data, who in outgoing:
            dst = (r + 1) % n
            chunks[dst][c] += data
            have[dst][c] |= who
            sent[r] += data.nbytes
        if record is not None:
            record.append(("reduce-scatter", step, [[len(h) for h in have[r]] for r in range(n)]))
    for step in range(n - 1):                 # all-gather: rank r sends its complete chunk (r + 1 - step)
        outgoing = [(r, (r + 1 - step) % n, chunks[r][(r + 1 - step) % n].copy()) for r in range(n)]
        for r, c, data in outgoing:
            dst = (r + 1) % n
            chunks[dst][c] = data
            have[dst][c] = set(range(n))
            sent[r] += data.nbytes
        if record is not None:
            record.append(("all-gather", step, [[len(h) for h in have[r]] for r in range(n)]))
    return [np.concatenate(c) for c in chunks], sent


N, SIZE = 4, 1000
arrays = [np.random.default_rng(r).standard_normal(SIZE) for r in range(N)]
steps = []
results, sent = ring_allreduce(arrays, record=steps)
expected = np.sum(arrays, axis=0)
print("every process holds the sum:", all(np.allclose(r, expected) for r in results))
print(f"bytes sent per process: {sent[0]} = 2(N-1)/N x {expected.nbytes} bytes = {2 * (N - 1) / N * expected.nbytes:.0f}")

# %%
fig, axes = plt.subplots(1, len(steps), figsize=(2.1 * len(steps), 2.6))
for ax, (phase, step, held) in zip(axes, steps):
    ax.imshow(np.array(held), cmap="Greens", vmin=0, vmax=N)
    ax.set_title(f"{phase}\nstep {step + 1}", fontsize=8)
    ax.set_xticks(range(N)), ax.set_yticks(range(N))
    ax.set_xlabel("chunk", fontsize=8)
    for r in range(N):
        for c in range(N):
            ax.text(c, r, held[r][c], ha="center", va="center", fontsize=7)
axes[0].set_ylabel("process (rank)")
fig.suptitle(f"Ring all-reduce of {N} processes: how many processes' contributions each chunk holds", fontsize=9)
tu.stamp(fig, DEVICE, MODE)
plt.tight_layout()
plt.show()

# %% [markdown]
# After the reduce-scatter (the first three panels) each process holds one complete chunk (a 4 on its
# row); after the all-gather every chunk is complete everywhere. NCCL runs rings like this one (and
# trees, for small messages) inside a single kernel per GPU, moving chunks over NVLink; MPI libraries
# choose among several algorithms by message size.
#
# ## 10.3 The same in real processes: `minidl.distributed`
#
# A data-parallel program is started N times, once per GPU (or per CPU worker), by a **launcher**:
#
# ```
# python -m minidl.distributed.run --nproc-per-node 4 program.py
# ```
#
# gives every process its `RANK` (0..N-1), `WORLD_SIZE` (N) and the address of rank 0
# (`MASTER_ADDR`, `MASTER_PORT`), the same variables PyTorch's `torchrun` sets. The program joins the
# *process group* and calls the collectives with PyTorch's names. Here is one that all-reduces the
# arrays of the ring above, each rank contributing its own:

# %%
ALLREDUCE_PROGRAM = '''
import os, sys
import numpy as np
import minidl
import minidl.distributed as dist

on_gpu = sys.argv[1] == "cuda"
if on_gpu:
    minidl.cuda.set_device(int(os.environ["LOCAL_RANK"]))    # one GPU per process
dist.init_process_group("nccl" if on_gpu else "mpi")
rank, world = dist.get_rank(), dist.get_world_size()
x = minidl.tensor(np.random.default_rng(rank).standard_normal(1000), device="cuda" if on_gpu else "cpu")
dist.all_reduce(x)                  # in place: the sum over ranks, on every rank
if rank == 0:
    np.save("allreduce.npy", x.cpu().numpy())
    print(f"rank 0 of {world}: all_reduce over {dist.get_backend()} done")
dist.destroy_process_group()
'''

if ON_GPUS or HAVE_MPI:
    nproc = GPUS if ON_GPUS else 3
    proc = launch(ALLREDUCE_PROGRAM, nproc, "cuda" if ON_GPUS else "cpu")
    print(proc.stdout.strip())
    real = np.load(WORK / "allreduce.npy")
    simulated, _ = ring_allreduce([np.random.default_rng(r).standard_normal(1000) for r in range(nproc)])
    print(f"{nproc} processes: largest difference from the NumPy ring: {np.abs(real - simulated[0]).max():.2e}")
else:
    print("skipped: needs two GPUs, or mpi4py for CPU processes (pip install 'minidl[distributed]')")

# %% [markdown]
# The difference is rounding: MPI and NCCL add the contributions in their own order, not necessarily
# the ring's. The other collectives have the same shape: `broadcast` (everyone
# gets rank 0's tensor), `all_gather` (everyone gets everyone's), `reduce_scatter` (the first half of
# the ring), `barrier`.
#
# ## 10.4 What an all-reduce costs
#
# A simple model of one all-reduce of S bytes over N processes on links of bandwidth B, with a
# latency α per step: **t = 2(N-1)·α + 2(N-1)/N · S/B**. Small messages pay the latency; large ones
# run at the link's bandwidth. Below, the model for NVLink-like numbers (α = 5 µs, B = 300 GB/s),
# and what minidl and PyTorch measured on two H100s (`benchmarks/bench_distributed.py`), when that
# file is in the checkout.

# %%
def read_allreduce_table(path=ROOT / "benchmarks" / "results" / "gpu_distributed.md"):
    """(size MB, minidl ms, torch ms) rows of the measured table, or [] when the file is not there."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].endswith(" MB"):
            rows.append((float(cells[0][:-3]), float(cells[1]), float(cells[2])))
    return rows


sizes = np.logspace(4, 9, 60)    # bytes
fig, ax = plt.subplots(figsize=(6.4, 3.6))
for n in (2, 4, 8):
    t = 2 * (n - 1) * 5e-6 + 2 * (n - 1) / n * sizes / 300e9
    ax.loglog(sizes / 2**20, t * 1e3, label=f"model, N={n}")
measured = read_allreduce_table()
if measured:
    mb, ours, theirs = map(np.array, zip(*measured))
    ax.loglog(mb, ours, "o", color="k", label="minidl (NCCL), 2 x H100, measured")
    ax.loglog(mb, theirs, "x", color="tab:red", label="torch.distributed, 2 x H100, measured")
ax.set_xlabel("all-reduce size (MB)")
ax.set_ylabel("time (ms)")
ax.legend(fontsize=8)
ax.set_title("All-reduce time: latency for small messages, bandwidth for large ones", fontsize=9)
tu.stamp(fig, DEVICE + ("; points: 2 x H100, from gpu_distributed.md" if measured else ""), MODE)
plt.tight_layout()
plt.show()
if measured:
    display(tu.Table(["size (MB)", "minidl (ms)", "torch (ms)", "minidl bus GB/s"],
                  [[f"{m:g}", f"{a:.3f}", f"{b:.3f}", f"{m * 2**20 / (a * 1e-3) / 1e9:.0f}"] for m, a, b in measured]))

# %% [markdown]
# The measured points follow the bandwidth line for large messages: at 256 MB both frameworks move
# about 280 GB/s of bus bandwidth over the two GPUs' NVLink. For small ones they sit above the model:
# a real all-reduce costs tens of microseconds of latency (kernel launch, synchronisation between the
# GPUs), not 5. That is the reason for buckets, below.
#
# ## 10.5 DistributedDataParallel: buckets, and overlapping the all-reduce with backward
#
# A model has many parameters; one all-reduce per parameter would pay the latency hundreds of times,
# and one all-reduce of everything after the backward pass would leave the links idle while the GPU
# computes and the GPU idle while the links work. DDP does what PyTorch's does:
# - it groups the gradients into **buckets** of about 25 MB, in the reverse order of
#   `model.parameters()` — the order in which backward produces them;
# - a hook on each parameter hears its gradient arrive; when a bucket is complete, its gradients are
#   flattened into one array and **all-reduced at once, while backward goes on** with the earlier layers
#   (on a GPU on a side stream; on MPI a non-blocking call);
# - at the end of backward it waits for the buckets and hands every parameter its averaged gradient.
#
# The program below trains a small CNN on 2 processes, each on half of every batch, with tiny buckets
# (so that there are several) and DDP's `timeline` switched on for the last step.

# %%
DDP_PROGRAM = '''
import json, os, sys
import numpy as np
import minidl, minidl.nn as nn, minidl.nn.functional as F
import minidl.distributed as dist
from minidl.nn.parallel import DistributedDataParallel as DDP

on_gpu = sys.argv[1] == "cuda"
if on_gpu:
    minidl.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl" if on_gpu else "mpi")
rank, world = dist.get_rank(), dist.get_world_size()
device = "cuda" if on_gpu else "cpu"
minidl.manual_seed(rank)                    # different on every rank: DDP broadcasts rank 0's weights
model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.Flatten(),
                      nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
ddp = DDP(model, bucket_cap_mb=0.02)
opt = minidl.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
rng = np.random.default_rng(0)               # the same batches on every rank; each takes its half
for step in range(4):
    x = minidl.tensor(rng.standard_normal((32, 3, 16, 16)).astype(np.float32), device=device)
    y = minidl.tensor(rng.integers(0, 10, 32), device=device)
    if step == 3:
        ddp.timeline = []
    opt.zero_grad()
    loss = F.cross_entropy(ddp(x[rank::world]), y[rank::world])
    t_backward = __import__("time").perf_counter()
    loss.backward()
    opt.step()
weights = np.concatenate([p.detach().cpu().numpy().ravel() for p in model.parameters()])
np.save(f"weights{rank}.npy", weights)
if rank == 0:
    buckets = [[n for n, p in model.named_parameters() if any(p is q for q in b.params)] for b in ddp._buckets]
    json.dump({"t0": t_backward, "events": ddp.timeline, "buckets": buckets,
               "names": [n for n, _ in model.named_parameters()]}, open("timeline.json", "w"))
    print(f"rank 0 of {world}: {len(ddp._buckets)} buckets, last loss {float(loss.item()):.4f}")
dist.destroy_process_group()
'''

if ON_GPUS or HAVE_MPI:
    proc = launch(DDP_PROGRAM, 2, "cuda" if ON_GPUS else "cpu")
    print(proc.stdout.strip())
    w0, w1 = np.load(WORK / "weights0.npy"), np.load(WORK / "weights1.npy")
    print("both replicas hold the same weights after 4 steps:", np.array_equal(w0, w1))
    timeline = json.loads((WORK / "timeline.json").read_text())
    for k, names in enumerate(timeline["buckets"]):
        print(f"bucket {k}: {', '.join(names)}")
else:
    timeline = None
    print("skipped: needs two GPUs, or mpi4py for CPU processes (pip install 'minidl[distributed]')")

# %%
if timeline is not None:
    t0, events = timeline["t0"], timeline["events"]
    ms = lambda t: (t - t0) * 1e3   # noqa: E731
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    names = timeline["names"]
    n_ready = n_launch = 0
    for t, kind, *rest in events:
        if kind == "ready":      # names alternate in height so that neighbours do not overlap
            ax.plot([ms(t)], [1], "|", color="tab:blue", markersize=18)
            ax.annotate(names[rest[0]], (ms(t), 1.12 + 0.22 * (n_ready % 3)), fontsize=6, ha="center")
            n_ready += 1
        elif kind == "launch":
            ax.plot([ms(t)], [0.5], "v", color="tab:orange", markersize=9)
            ax.annotate(f"bucket {rest[0]}", (ms(t), 0.3 - 0.14 * (n_launch % 2)), fontsize=7, ha="center")
            n_launch += 1
        elif kind == "wait":
            ax.barh(0, max(ms(rest[1]) - ms(t), 0.002), left=ms(t), height=0.25, color="tab:red",
                    edgecolor="white")
            ax.annotate(str(rest[0]), ((ms(t) + ms(rest[1])) / 2, -0.33), fontsize=6, ha="center")
    ax.set_yticks([0, 0.5, 1], ["waiting for\nthe buckets", "bucket\nall-reduced", "gradient\nready"])
    ax.set_ylim(-0.45, 1.75)
    ax.set_xlabel("ms since loss.backward() started (rank 0)")
    ax.set_title("One DDP backward pass: each bucket leaves as soon as its gradients are ready", fontsize=9)
    tu.stamp(fig, DEVICE + (" (2 GPUs)" if ON_GPUS else " (2 CPU processes, MPI)"), MODE)
    plt.tight_layout()
    plt.show()

# %% [markdown]
# The gradients arrive from the last layer to the first (right to left in the model), and each orange
# mark is a bucket handed to the all-reduce while backward is still computing the layers before it.
# At the end, DDP waits for each bucket in turn (the red bars, numbered by bucket).
#
# Read the waits with care, because they depend on the engine. On CPU processes over MPI (the small-mode
# run), a non-blocking all-reduce only makes progress while its process is inside an MPI call, so the
# buckets launched early mostly complete during the final wait; the wait also holds the time until the
# *other* process reaches the same bucket (two processes share two cores here). MPICH can move messages
# in the background with a progress thread (`MPIR_CVAR_ASYNC_PROGRESS=1`). On GPUs the all-reduces are
# NCCL kernels on their own CUDA stream: they run beside the backward kernels as soon as they are
# queued, and the wait at the end is the GPU's, not the host's. How much they overlap then depends on
# how much backward is left when each bucket leaves, which is why PyTorch (and minidl) make the first
# bucket small.
#
# Two more details of DDP that a training script meets:
# - `with ddp.no_sync():` skips the all-reduce (gradient accumulation over several micro-batches:
#   only the last backward, outside the block, averages the accumulated gradients);
# - a parameter the forward pass did not use never gets a gradient, so its bucket never completes:
#   pass `find_unused_parameters=True` (DDP then walks the graph after forward to find such parameters).
#
# ## 10.6 Scaling, measured on two H100s
#
# *Weak scaling* keeps the batch per GPU fixed: with N GPUs the step should take as long as on one, so
# N times the images per second. The efficiency is rate(N) / (N · rate(1)); below 1 by the cost of the
# all-reduce that did not overlap, and of the processes waiting for each other. The table is
# `benchmarks/results/gpu_distributed.md` (`python3 benchmarks/bench_distributed.py`, ResNet-9 at 512
# images per GPU and the LSTM language model, bf16 autocast; "graphed": the whole step, NCCL calls
# included, replayed from one CUDA graph).

# %%
path = ROOT / "benchmarks" / "results" / "gpu_distributed.md"
rows = []
if path.exists():
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0] in ("resnet9", "lstm") and cells[6].replace(".", "").isdigit():
            rows.append(cells)
if rows:
    display(tu.Table(["model", "framework", "1 GPU step ms (host)", "2 GPU step ms (host)", "efficiency"],
                  [[r[0], r[1], r[2], r[3], r[6]] for r in rows]))
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    labels = [f"{r[0]}\n{r[1]}" for r in rows]
    ax.bar(range(len(rows)), [float(r[6]) for r in rows],
           color=["tab:red" if r[1].startswith("torch") else "tab:blue" for r in rows])
    ax.axhline(0.9, color="k", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylabel("weak-scaling efficiency, 2 GPUs")
    ax.set_ylim(0, 1.15)
    ax.set_title("rate(2 GPUs) / (2 x rate(1 GPU)); dashed: the 0.9 target", fontsize=9)
    tu.stamp(fig, "2 x NVIDIA H100 (gpu_distributed.md)", MODE)
    plt.tight_layout()
    plt.show()
else:
    print("benchmarks/results/gpu_distributed.md is not in this checkout: run benchmarks/bench_distributed.py")

# %% [markdown]
# What the table says: with the step in a CUDA graph, minidl's ResNet-9 scales 0.99 (PyTorch's eager step
# 0.97) and its LSTM 0.94 (PyTorch's 1.05: there minidl is behind). Its all-reduces cost what PyTorch's do —
# both call NCCL, and the bus bandwidth of 10.4 matches. The
# eager rows are another story: an eager minidl step is *host-bound* (the host time in brackets is
# about the step time), and with two processes the slower one sets the pace at every all-reduce. A
# host-bound step also varies by about ±20% from one process launch to the next (the same one-GPU
# LSTM step measured 18 to 25 ms), so read the eager efficiencies as rough figures.
# That is the same lesson as tutorial 8's: remove the host from the step (fewer launches, CUDA graphs)
# and the GPUs, one or many, do the work.
#
# **Exercises.**
# 1. Change `ring_allreduce` to count the *steps* (the latency term) and compare with a tree
#    all-reduce (reduce to rank 0 along a binary tree, then broadcast): which wins for small arrays?
# 2. In the DDP program, set `bucket_cap_mb=25`: how many buckets are left, and what happens to the
#    timeline?
# 3. Train `examples/train_cifar10.py` on two processes (`--device cpu --width 16 --limit-batches 5`
#    on a CPU), with and without `--sync-bn`.
