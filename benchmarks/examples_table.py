"""Benchmark: the training step of each example, on minidl's GPU path, its CPU path, and in PyTorch.

For every example model (MNIST MLP and CNN, CIFAR-10 ResNet-9, char-RNN LSTM, PTB 2 x 650 LSTM), at the
example's default sizes, a full training step (forward, loss, backward, clipping where the example
clips, optimizer step) is timed on synthetic batches of the real shapes: the data's values do not
change the time. For each device: minidl, and the same model in PyTorch (a few lines each, below),
in the same process on the same machine. PyTorch runs only where it can (its CUDA build on the GPU).
On the GPU the image examples also get a "minidl, CUDA graph" row: the examples' own step
(examples/_common.make_train_step), replayed from a CUDA graph after 3 eager steps (--no-graph: no such rows).

Each row gives the median wall time per step over --steps timed steps (after --warmup steps, which
include the NVRTC compile of our kernels), and the time of one epoch estimated as that median times
the epoch's number of steps. With --full the GPU rows time a whole epoch's worth of steps instead.
The CPU is slow for the big models: there --cpu-steps steps are timed (default 2), and --skip-cpu
leaves the CPU out.

    python benchmarks/examples_table.py [--out benchmarks/results/examples.md] [--commit SHA]
                                        [--steps 20] [--warmup 3] [--cpu-steps 2] [--full] [--skip-cpu]
                                        [--only mnist_mlp,cifar10_resnet9] [--torch-threads N]
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from benchmarks._report import cpu_name, git_commit, write_report  # noqa: E402

import minidl  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
from minidl.nn.utils import clip_grad_norm_  # noqa: E402


# ------------------------------------------------------------------------------------------------
# The workloads: the examples' models at their default sizes
# ------------------------------------------------------------------------------------------------


class Workload:
    """One example's training step: how to build the model, a batch, and the optimizer (minidl and torch)."""

    def __init__(self, name, config, steps_per_epoch, kind, batch_size, make_minidl, make_torch, make_batch,
                 optimizer, clip=None):
        self.name, self.config, self.steps_per_epoch = name, config, steps_per_epoch
        self.kind, self.batch_size = kind, batch_size   # kind: "image" (x, y) or "lm" (ids, next ids)
        self.make_minidl, self.make_torch, self.make_batch = make_minidl, make_torch, make_batch
        self.optimizer, self.clip = optimizer, clip     # optimizer: (name, kwargs)


def _image_batch(shape, classes=10):
    def make(rng):
        return rng.standard_normal(shape).astype(np.float32), rng.integers(0, classes, shape[0]).astype(np.int64)
    return make


def _lm_batch(T, B, vocab):
    def make(rng):
        ids = rng.integers(0, vocab, (T + 1, B)).astype(np.int64)
        return ids[:-1], ids[1:]
    return make


def workloads():
    import char_rnn
    import ptb_lm
    import train_cifar10
    import train_mnist

    return [
        Workload("mnist_mlp", "784-512-256-10, batch 128, Adam", 469, "image", 128,
                 lambda: train_mnist.MLP(), _torch_mlp, _image_batch((128, 1, 28, 28)), ("adam", {"lr": 1e-3})),
        Workload("mnist_cnn", "2 x conv-BN-ReLU-pool, batch 128, Adam", 469, "image", 128,
                 lambda: train_mnist.CNN(), _torch_mnist_cnn, _image_batch((128, 1, 28, 28)), ("adam", {"lr": 1e-3})),
        Workload("cifar10_resnet9", "ResNet-9 64-128-256-512, BN, batch 512, SGD nesterov", 97, "image", 512,
                 lambda: train_cifar10.ResNet9(64, "bn"), lambda: _torch_resnet9(64), _image_batch((512, 3, 32, 32)),
                 ("sgd", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4})),
        Workload("char_rnn_lstm", "2 x 512 LSTM, vocab 65, bptt 100, batch 64, Adam, clip 5", 156, "lm", 64,
                 lambda: char_rnn.CharRNN(65, 128, 512, 2, "lstm", 0.2), lambda: _torch_lm(65, 128, 512, 0.2),
                 _lm_batch(100, 64, 65), ("adam", {"lr": 2e-3}), clip=5.0),
        Workload("ptb_lstm", "2 x 650 LSTM, vocab 10k, bptt 35, batch 20, SGD, clip 0.25", 1327, "lm", 20,
                 lambda: ptb_lm.WordLM(10000, 650, 650, 2, 0.5), lambda: _torch_lm(10000, 650, 650, 0.5),
                 _lm_batch(35, 20, 10000), ("sgd", {"lr": 20.0}), clip=0.25),
    ]


# ------------------------------------------------------------------------------------------------
# The same models in PyTorch
# ------------------------------------------------------------------------------------------------


def _torch_mlp():
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def _torch_mnist_cnn():
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def _torch_resnet9(w):
    import torch
    from torch import nn

    def cbr(c_in, c_out):
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())

    class Residual(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.body = nn.Sequential(cbr(c, c), cbr(c, c))

        def forward(self, x):
            return x + self.body(x)

    class Scale(nn.Module):
        def forward(self, x):
            return x * 0.125

    return nn.Sequential(
        cbr(3, w), cbr(w, 2 * w), nn.MaxPool2d(2), Residual(2 * w), cbr(2 * w, 4 * w), nn.MaxPool2d(2),
        cbr(4 * w, 8 * w), nn.MaxPool2d(2), Residual(8 * w), nn.MaxPool2d(4), torch.nn.Flatten(),
        nn.Linear(8 * w, 10, bias=False), Scale())


def _torch_lm(vocab, embed, hidden, dropout):
    from torch import nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.drop = nn.Embedding(vocab, embed), nn.Dropout(dropout)
            self.rnn = nn.LSTM(embed, hidden, 2, dropout=dropout)
            self.fc = nn.Linear(hidden, vocab)

        def forward(self, ids):
            y, _ = self.rnn(self.drop(self.embed(ids)))
            y = self.drop(y)
            return self.fc(y.reshape(-1, y.shape[-1]))

    return LM()


# ------------------------------------------------------------------------------------------------
# Timing
# ------------------------------------------------------------------------------------------------


def _median_step_ms(step, synchronize, warmup, steps):
    for _ in range(warmup):
        step()
    synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        synchronize()  # a step's time includes its GPU work
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), times


def time_minidl(w, device, warmup, steps):
    rng = np.random.default_rng(0)
    minidl.manual_seed(0)
    model = w.make_minidl().to(device)
    name, kwargs = w.optimizer
    opt = (minidl.optim.Adam if name == "adam" else minidl.optim.SGD)(model.parameters(), **kwargs)
    x_np, y_np = w.make_batch(rng)
    x, y = minidl.tensor(x_np, device=device), minidl.tensor(y_np, device=device)

    def step():
        out = model(x)
        logits = out[0] if isinstance(out, tuple) else out
        loss = F.cross_entropy(logits, y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if w.clip is not None:
            clip_grad_norm_(model.parameters(), w.clip)
        opt.step()

    sync = minidl.cuda.synchronize if device == "cuda" else (lambda: None)
    return _median_step_ms(step, sync, warmup, steps)


def time_minidl_graphed(w, device, warmup, steps):
    """The examples' own GPU step (examples/_common.make_train_step): captured in a CUDA graph after
    3 eager steps. Image workloads only: the LSTM models run on cuBLAS, which CuPy cannot capture."""
    from _common import make_train_step

    rng = np.random.default_rng(0)
    minidl.manual_seed(0)
    model = w.make_minidl().to(device)
    name, kwargs = w.optimizer
    opt = (minidl.optim.Adam if name == "adam" else minidl.optim.SGD)(model.parameters(), **kwargs)
    x_np, y_np = w.make_batch(rng)
    x, y = minidl.tensor(x_np, device=device), minidl.tensor(y_np, device=device)
    train_step = make_train_step(model, opt, F.cross_entropy, device=device, graph=True)
    return _median_step_ms(lambda: train_step(x, y), minidl.cuda.synchronize, max(warmup, 5), steps)


def time_torch(w, device, warmup, steps):
    import torch

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = w.make_torch().to(device)
    name, kwargs = w.optimizer
    opt = (torch.optim.Adam if name == "adam" else torch.optim.SGD)(model.parameters(), **kwargs)
    x_np, y_np = w.make_batch(rng)
    x, y = torch.from_numpy(x_np).to(device), torch.from_numpy(y_np).to(device)

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if w.clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), w.clip)
        opt.step()

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return _median_step_ms(step, sync, warmup, steps)


def _torch_devices(tf32=False):
    """Where PyTorch can run. Its convolutions use TF32 tensor cores by default (cudnn.allow_tf32);
    minidl computes in fp32, so unless tf32 is asked for, both TF32 switches are turned off."""
    try:
        import torch
    except ImportError:
        return set()
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return {"cpu"} | ({"cuda"} if torch.cuda.is_available() else set())


# ------------------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------------------



def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "examples.md"))
    p.add_argument("--commit", default=None)
    p.add_argument("--steps", type=int, default=20, help="timed steps per row on the GPU")
    p.add_argument("--cpu-steps", type=int, default=2, help="timed steps per row on the CPU")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--full", action="store_true", help="on the GPU, time a whole epoch of steps")
    p.add_argument("--skip-cpu", action="store_true")
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--no-graph", action="store_true", help="leave out the CUDA-graph rows of the image examples")
    p.add_argument("--only", default=None, help="comma-separated workload names")
    p.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--torch-tf32", action="store_true",
                   help="let PyTorch use TF32 tensor cores (its default for convolutions); default: fp32 like minidl")
    args = p.parse_args(argv)

    chosen = workloads()
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {w.name for w in chosen}
        if unknown:
            sys.exit(f"--only: unknown workloads {sorted(unknown)}; known: {[w.name for w in chosen]}")
        chosen = [w for w in chosen if w.name in names]
    devices = (["cuda"] if minidl.cuda.is_available() else []) + ([] if args.skip_cpu else ["cpu"])
    if not devices:
        sys.exit("nothing to time: no GPU and --skip-cpu")
    torch_devices = set() if args.skip_torch else _torch_devices(args.torch_tf32)
    if args.torch_threads and torch_devices:
        import torch
        torch.set_num_threads(args.torch_threads)

    rows = []
    for w in chosen:
        for device in devices:
            steps = args.cpu_steps if device == "cpu" else (w.steps_per_epoch if args.full else args.steps)
            warmup = 1 if device == "cpu" else args.warmup
            frameworks = [("minidl", time_minidl)]
            if device == "cuda" and w.kind == "image" and not args.no_graph:
                frameworks.append(("minidl, CUDA graph", time_minidl_graphed))
            frameworks += [("PyTorch", time_torch)] if device in torch_devices else []
            for framework, timer in frameworks:
                print(f"{w.name} on {device} ({framework}): {steps} steps ...", end=" ", flush=True)
                ms, times = timer(w, device, warmup, steps)
                epoch_s = ms * w.steps_per_epoch / 1e3 if not (args.full and device != "cpu") else sum(times) / 1e3
                print(f"{ms:.1f} ms/step")
                rows.append((w, device, framework, ms, steps, epoch_s, args.full and device != "cpu"))

    gpu = minidl.cuda.get_device_name() if minidl.cuda.is_available() else "none"
    lines = [
        "# Example trainings: time per training step",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- commit: {git_commit(args.commit)}",
        f"- GPU: {gpu}",
        f"- CPU: {cpu_name()}, {os.cpu_count()} logical cores",
        f"- PyTorch on the GPU: {'TF32 allowed (convolutions and matmuls)' if args.torch_tf32 else 'fp32, TF32 off'}",
        f"- command: `python benchmarks/examples_table.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        "",
        "A step = forward, cross-entropy, backward, gradient clipping (RNNs), optimizer step, on synthetic",
        "batches of the example's default shapes; median wall time over the timed steps, after warm-up.",
        "Epoch = median x steps per epoch (estimated), or measured over a whole epoch of steps where marked.",
        "",
        "| example | model and batch | device | framework | ms / step | steps timed | s / epoch |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for w, device, framework, ms, steps, epoch_s, measured in rows:
        epoch = f"{epoch_s:.1f}" + ("" if measured else " (est.)")
        lines.append(f"| {w.name} | {w.config} | {device} | {framework} | {ms:.1f} | {steps} | {epoch} |")
    text = "\n".join(lines) + "\n"
    write_report(text, args.out)
    print(f"written to {args.out}")
    return rows


if __name__ == "__main__":
    main()
