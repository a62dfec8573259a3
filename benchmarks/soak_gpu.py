"""Soak: train a small CNN and a small LSTM for thousands of steps on the GPU and watch the memory pool.

A framework that leaks (a graph kept alive, a cache that grows per step) shows it as a memory pool
that keeps growing. This records CuPy's pool (bytes in live arrays, bytes held from the driver) every
--every steps and reports whether both stay flat after the first --settle steps.

    python3 benchmarks/soak_gpu.py --steps 3000 --out benchmarks/results/gpu_soak.md --commit SHA
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
import minidl  # noqa: E402
import minidl.nn as nn  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
from benchmarks._report import git_commit, write_report  # noqa: E402


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Dropout(0.1), nn.Linear(64 * 8 * 8, 10))

    def forward(self, x):
        return self.body(x)


class SmallLM(nn.Module):
    def __init__(self, vocab=65, hidden=128):
        super().__init__()
        self.emb = nn.Embedding(vocab, 64)
        self.rnn = nn.LSTM(64, hidden, num_layers=2, dropout=0.1)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x):
        out, _ = self.rnn(self.emb(x))
        return self.head(out)


def soak(name, model, make_batch, loss_fn, steps, every, settle):
    import cupy

    pool = cupy.get_default_memory_pool()
    opt = minidl.optim.Adam(model.parameters(), lr=1e-3)
    rows, losses = [], []
    t0 = time.time()
    for step in range(1, steps + 1):
        x, y = make_batch()
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % every == 0 or step == 1:
            losses.append(loss.item())
            rows.append((step, pool.used_bytes(), pool.total_bytes()))
    secs = time.time() - t0
    after = [r for r in rows if r[0] >= settle]
    used_growth = max(r[1] for r in after) - min(r[1] for r in after)
    total_growth = max(r[2] for r in after) - min(r[2] for r in after)
    flat = used_growth == 0 and total_growth == 0
    return dict(name=name, rows=rows, losses=losses, secs=secs, used_growth=used_growth,
                total_growth=total_growth, flat=flat)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--every", type=int, default=250)
    ap.add_argument("--settle", type=int, default=50)
    ap.add_argument("--out", default=None)
    ap.add_argument("--commit", default=None, help="commit to record (default: $MINIDL_COMMIT, else git)")
    args = ap.parse_args()
    import cupy

    minidl.manual_seed(0)
    rng = np.random.default_rng(0)
    # A fixed pool of batches on the device, so the soak measures the framework, not the data.
    imgs = minidl.tensor(rng.standard_normal((8, 64, 3, 32, 32)).astype(np.float32), device="cuda")
    labels = minidl.tensor(rng.integers(0, 10, (8, 64)), device="cuda")
    text = minidl.tensor(rng.integers(0, 65, (8, 33, 32)), device="cuda")
    counter = {"i": 0}

    def image_batch():
        counter["i"] += 1
        k = counter["i"] % 8
        return imgs[k], labels[k]

    def text_batch():
        counter["i"] += 1
        seq = text[counter["i"] % 8]
        return seq[:-1], seq[1:]

    results = [
        soak("CNN (2 conv-BN-ReLU-pool + dropout + linear, batch 64, Adam)", SmallCNN().to("cuda"), image_batch,
             F.cross_entropy, args.steps, args.every, args.settle),
        soak("LSTM LM (embedding 64, 2x LSTM 128, dropout, seq 32, batch 32, Adam)", SmallLM().to("cuda"), text_batch,
             lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)),
             args.steps, args.every, args.settle),
    ]
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# GPU soak: memory pool over thousands of training steps", "",
             f"- date: {date}", f"- commit: {git_commit(args.commit)}", f"- device: {name}, CuPy {cupy.__version__}",
             f"- {args.steps} steps each; pool sampled every {args.every} steps; flat = no growth after step {args.settle}", ""]
    for r in results:
        lines += [f"## {r['name']}", "",
                  f"{args.steps} steps in {r['secs']:.1f} s; loss {r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}; "
                  f"pool growth after settling: used {r['used_growth']} B, held {r['total_growth']} B -> "
                  f"**{'flat' if r['flat'] else 'GROWING'}**", "",
                  "| step | used (MiB) | held (MiB) |", "| ---: | ---: | ---: |"]
        lines += [f"| {s} | {u / 2**20:.2f} | {t / 2**20:.2f} |" for s, u, t in r["rows"]]
        lines.append("")
    text_out = "\n".join(lines)
    write_report(text_out, args.out)


if __name__ == "__main__":
    main()
