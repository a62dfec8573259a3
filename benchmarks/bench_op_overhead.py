"""Host cost of one op: minidl against torch on tiny CPU tensors, where the arithmetic costs nothing and
what is left is the framework (Python calls, type promotion, the tape). Issue 23's yardstick.

Each case runs the same work in both frameworks (same shapes, dtypes, grad settings) many times and
reports the median microseconds per call over --repeats rounds (minidl's and torch's rounds interleaved),
and the ratio minidl / torch. The
training-step cases (a tiny MLP and a tiny CNN: forward, loss, backward, SGD step) show what the
per-op cost adds up to in a loop a student writes. Timings are of this machine: rerun both in the
same process to compare.

    python benchmarks/bench_op_overhead.py                      # table on stdout
    python benchmarks/bench_op_overhead.py --out benchmarks/results/cpu_op_overhead.md
"""
from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import minidl  # noqa: E402
import minidl.nn as mnn  # noqa: E402
import minidl.nn.functional as MF  # noqa: E402
from benchmarks._report import git_commit  # noqa: E402


def _time_pair(mine, theirs, number, repeats, syncs=(None, None)):
    """Median microseconds per call of each, the rounds of the two interleaved (mine, theirs, mine, ...)
    so that a noisy stretch of the machine falls on both alike. syncs: per side, a function that waits for
    the device after the warm-up and after each round (bench_gpu_op_overhead.py), or None."""
    for fn, sync in zip((mine, theirs), syncs):
        for _ in range(max(3, number // 10)):
            fn()
        if sync is not None:
            sync()
    rounds = ([], [])
    for _ in range(repeats):
        for k, (fn, sync) in enumerate(zip((mine, theirs), syncs)):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            if sync is not None:
                sync()
            rounds[k].append((time.perf_counter() - t0) / number * 1e6)
    return statistics.median(rounds[0]), statistics.median(rounds[1])


def cases(torch):
    import torch.nn as tnn
    import torch.nn.functional as TF

    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)
    ma, mb = minidl.tensor(a_np), minidl.tensor(b_np)
    ta, tb = torch.tensor(a_np), torch.tensor(b_np)
    mg, tg = minidl.tensor(a_np, requires_grad=True), torch.tensor(a_np, requires_grad=True)

    def relu_fb(x, F):
        def run():
            y = F.relu(x).sum()
            y.backward()
            x.grad = None
        return run

    def mlp(nn, F, opt_mod, tensor):
        m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = opt_mod.SGD(m.parameters(), lr=0.01)
        x, y = tensor(rng.standard_normal((8, 8)).astype(np.float32)), tensor(np.arange(8) % 4)

        def step():
            opt.zero_grad()
            F.cross_entropy(m(x), y).backward()
            opt.step()
        return step

    def cnn(nn, F, opt_mod, tensor):
        m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 4))
        opt = opt_mod.SGD(m.parameters(), lr=0.01)
        x, y = tensor(rng.standard_normal((2, 1, 8, 8)).astype(np.float32)), tensor(np.arange(2) % 4)

        def step():
            opt.zero_grad()
            F.cross_entropy(m(x), y).backward()
            opt.step()
        return step

    return [
        ("a + b (no grad)", lambda: ma + mb, lambda: ta + tb, 20000),
        ("a * 2.5 (no grad)", lambda: ma * 2.5, lambda: ta * 2.5, 20000),
        ("a @ b (no grad)", lambda: ma @ mb, lambda: ta @ tb, 20000),
        ("a.sum()", lambda: ma.sum(), lambda: ta.sum(), 20000),
        ("a + b (a requires grad)", lambda: mg + mb, lambda: tg + tb, 20000),
        ("a.transpose(0, 1) (a requires grad)", lambda: mg.transpose(0, 1), lambda: tg.transpose(0, 1), 20000),
        ("a.permute(1, 0) (a requires grad)", lambda: mg.permute(1, 0), lambda: tg.permute(1, 0), 20000),
        ("relu(x).sum().backward()", relu_fb(mg, MF), relu_fb(tg, TF), 5000),
        ("MLP step (8-16-4, SGD)", mlp(mnn, MF, minidl.optim, minidl.tensor),
         mlp(tnn, TF, torch.optim, torch.tensor), 1000),
        ("CNN step (conv-relu-pool-linear, SGD)", cnn(mnn, MF, minidl.optim, minidl.tensor),
         cnn(tnn, TF, torch.optim, torch.tensor), 300),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the iteration counts (0.1 for a quick look)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = []
    for name, mine, theirs, number in cases(torch):
        n = max(10, int(number * args.scale))
        t_mine, t_theirs = _time_pair(mine, theirs, n, args.repeats)
        rows.append((name, t_mine, t_theirs))
        print(f"{name:40s} minidl {t_mine:9.2f} us   torch {t_theirs:8.2f} us   ratio {t_mine / t_theirs:6.2f}")
    if args.out:
        lines = [
            "# Host cost of one op: minidl against torch on tiny CPU tensors",
            "",
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {git_commit()}, "
            f"{platform.processor() or platform.machine()} ({platform.python_implementation()} "
            f"{platform.python_version()}), NumPy {np.__version__}, torch {torch.__version__} (1 thread). "
            f"`python benchmarks/bench_op_overhead.py --out {args.out}`; median of {args.repeats} interleaved rounds.",
            "",
            "| case | minidl (µs) | torch (µs) | minidl / torch |",
            "| --- | ---: | ---: | ---: |",
        ]
        lines += [f"| {n} | {m:.2f} | {t:.2f} | {m / t:.2f} |" for n, m, t in rows]
        Path(args.out).write_text("\n".join(lines) + "\n")
        print("wrote", args.out)


if __name__ == "__main__":
    main()
