"""One training step of a small CIFAR-sized CNN: minidl's NumPy path against PyTorch's CPU path.

The network (issue 3's benchmark): three conv3x3-BN-ReLU-maxpool2 blocks of 64/128/256 channels on
32x32 RGB input, then a linear layer to 10 classes; batch 128; cross-entropy; SGD with momentum.
Both frameworks run in this process on the same inputs and the same weights; the step time is the
median over --steps steps after --warmup steps. Writes a markdown table (date, commit, machine).

    python benchmarks/bench_cpu_cnn.py --out benchmarks/results/cpu_cnn.md --commit $(git rev-parse --short HEAD)
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
import minidl  # noqa: E402
import minidl.nn as nn  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
from benchmarks._report import git_commit, write_report  # noqa: E402


def minidl_model():
    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]

    return nn.Sequential(*block(3, 64), *block(64, 128), *block(128, 256), nn.Flatten(), nn.Linear(256 * 4 * 4, 10))


def torch_model(torch):
    tnn = torch.nn

    def block(cin, cout):
        return [tnn.Conv2d(cin, cout, 3, padding=1, bias=False), tnn.BatchNorm2d(cout), tnn.ReLU(), tnn.MaxPool2d(2)]

    return tnn.Sequential(*block(3, 64), *block(64, 128), *block(128, 256), tnn.Flatten(), tnn.Linear(256 * 4 * 4, 10))


def time_steps(step, warmup, steps):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--out", default=None)
    ap.add_argument("--commit", default=None, help="commit to record (default: $MINIDL_COMMIT, else git)")
    args = ap.parse_args()

    import torch

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((args.batch, 3, 32, 32)).astype(np.float32)
    y_np = rng.integers(0, 10, args.batch).astype(np.int64)

    tmodel = torch_model(torch)
    model = minidl_model()
    # Same weights in both.
    model.load_state_dict({k: v.detach().numpy().copy() for k, v in tmodel.state_dict().items()})
    opt = minidl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.01, momentum=0.9)
    x, y = minidl.tensor(x_np), minidl.tensor(y_np)
    tx, ty = torch.from_numpy(x_np), torch.from_numpy(y_np)

    def step_minidl():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def step_torch():
        loss = torch.nn.functional.cross_entropy(tmodel(tx), ty)
        topt.zero_grad()
        loss.backward()
        topt.step()

    # First check that both compute the same step (a benchmark of a wrong program is worthless).
    l_ours = F.cross_entropy(model(x), y).item()
    l_torch = torch.nn.functional.cross_entropy(tmodel(tx), ty).item()
    assert abs(l_ours - l_torch) < 1e-4 * max(1.0, abs(l_torch)), (l_ours, l_torch)

    ours = time_steps(step_minidl, args.warmup, args.steps)
    ref = time_steps(step_torch, args.warmup, args.steps)
    ratio = ours / ref
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), numpy {np.__version__}"
    table = "\n".join([
        "# CPU training step: small CIFAR CNN (minidl NumPy path vs PyTorch CPU)",
        "",
        f"- date: {date}", f"- commit: {git_commit(args.commit)}", f"- machine: {machine}",
        f"- network: 3 x (conv3x3-BN-ReLU-maxpool) 64/128/256 + linear, batch {args.batch}, SGD momentum; median of {args.steps} steps after {args.warmup} warm-up",
        f"- same initial loss checked: minidl {l_ours:.6f}, torch {l_torch:.6f}",
        "",
        "| path | step time (ms) | ratio to torch |",
        "| --- | ---: | ---: |",
        f"| minidl (NumPy, conv algo {minidl.primitives.get_convolution_policy()}) | {ours:.1f} | {ratio:.2f}x |",
        f"| PyTorch CPU | {ref:.1f} | 1.00x |",
        "",
        f"Target: minidl within 2x of PyTorch's CPU time -> {'met' if ratio <= 2 else 'missed'} ({ratio:.2f}x).",
    ])
    write_report(table, args.out)


if __name__ == "__main__":
    main()
