"""Benchmark: one eager training step of examples/char_gpt.py's model (6 layers, 6 heads, d=384, context
256, batch 64, AdamW, gradient clipping, dropout 0.2) in minidl against the same model in PyTorch eager, on
the same GPU in the same process, with the same weights; bfloat16 autocast (the example's --amp
--amp-dtype bfloat16) and float32 (TF32 off on both sides).

Time per step: wall clock over --steps steps, the GPU synchronised before and after (an eager step's
time is its host time where Python is slower than the GPU). 3 interleaved rounds (minidl, torch, minidl,
...), the fastest round kept. The ratio is minidl / torch: issue 25 asks for <= 1.3 with bfloat16. Beside the
eager steps, the example's own step (char_gpt.py on the GPU replays its forward and backward pass from a CUDA
graph), against the same torch eager step.

Python's cyclic garbage collector: both frameworks live in this one process, and importing torch alone leaves
~250,000 GC-tracked objects. minidl's autograd graph is Python objects (torch's is C++), so minidl's steps
promote thousands of objects a step into the oldest generation and set off its full collections, each a scan
of every object of the process: ~170 ms on an H100 with torch's objects in it, one step in ~20 (measured
with gc.callbacks, session 6; a minidl-only process has ~65,000 objects, and its full collections cost
~0.5 ms per step). So after the setup the benchmark calls gc.freeze(): what exists then (both models,
both libraries) is never scanned again, and each framework's steps pay for their own garbage only.
--no-gc-freeze measures without it.

--pairs N (the measure issue 25 is read by since session 19): the hosts these benchmarks run on change speed
within a run, by up to 2x over seconds (torch's own step read 9.8 to 19.8 ms in one session), so a round of 20
steps of one framework and the next round of the other can meet different hosts. With --pairs, the two
frameworks' eager steps alternate block by block (--block steps of minidl, the GPU synchronised, then as many
of torch; the order swapped every pair so that neither always goes first), and the ratio of each adjacent pair
is taken: a change of host speed slower than a pair (a few tens of ms) cancels in it. The table gives the median
of the N ratios and their 25th-75th percentiles, beside the medians of each side's block times.

    python3 benchmarks/bench_gpt_step.py [--out benchmarks/results/gpu_gpt_step.md] [--steps 20] [--pairs 40]
"""
from __future__ import annotations

import argparse
import datetime
import gc
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from benchmarks._report import git_commit, pin_to_cpu, write_report  # noqa: E402

VOCAB, BLOCK, LAYERS, HEADS, EMBD, BATCH, DROPOUT = 65, 256, 6, 6, 384, 64, 0.2
ROUNDS = 3


def torch_twin(model):
    """The same network in torch, with the same parameter names, loaded with minidl's weights."""
    import torch
    import torch.nn as tnn
    import torch.nn.functional as TF

    class Attn(tnn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = tnn.Linear(EMBD, 3 * EMBD), tnn.Linear(EMBD, EMBD)
            self.resid_drop = tnn.Dropout(DROPOUT)

        def forward(self, x):
            B, T, d = x.shape
            q, k, v = (t.reshape(B, T, HEADS, d // HEADS).transpose(1, 2) for t in self.qkv(x).split(d, dim=2))
            y = TF.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=DROPOUT if self.training else 0.0)
            return self.resid_drop(self.proj(y.transpose(1, 2).reshape(B, T, d)))

    class Block(tnn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn, self.ln2 = tnn.LayerNorm(EMBD), Attn(), tnn.LayerNorm(EMBD)
            self.mlp = tnn.Sequential(tnn.Linear(EMBD, 4 * EMBD), tnn.GELU(), tnn.Linear(4 * EMBD, EMBD),
                                      tnn.Dropout(DROPOUT))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(tnn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = tnn.Embedding(VOCAB, EMBD), tnn.Embedding(BLOCK, EMBD)
            self.drop = tnn.Dropout(DROPOUT)
            self.blocks = tnn.ModuleList([Block() for _ in range(LAYERS)])
            self.ln_f = tnn.LayerNorm(EMBD)
            self.head = tnn.Linear(EMBD, VOCAB, bias=False)
            self.head.weight = self.tok.weight

        def forward(self, ids):
            x = self.drop(self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device)))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    twin = GPT().cuda()
    state = {name: torch.tensor(np.asarray(t.detach().cpu().numpy(), dtype=np.float32))
             for name, t in model.state_dict().items()}
    twin.load_state_dict(state)
    return twin


def make_steps(amp: bool):
    import torch

    import minidl
    import minidl.nn.functional as F
    from char_gpt import CharGPT

    minidl.manual_seed(0)
    model = CharGPT(VOCAB, BLOCK, LAYERS, HEADS, EMBD, DROPOUT).to("cuda")
    twin = torch_twin(model)
    opt = minidl.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    topt = torch.optim.AdamW(twin.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, (BATCH, BLOCK + 1))
    x, y = minidl.tensor(ids[:, :-1], device="cuda"), minidl.tensor(ids[:, 1:], device="cuda")
    tx, ty = torch.tensor(ids[:, :-1], device="cuda"), torch.tensor(ids[:, 1:], device="cuda")

    def ours():
        with minidl.autocast("cuda", dtype=minidl.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        minidl.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    def theirs():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(twin(tx).reshape(-1, VOCAB), ty.reshape(-1))
        topt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 1.0)
        topt.step()
        return loss

    return ours, theirs


def make_graphed_step(amp: bool):
    """The example's own training step (examples/_common.make_train_step, as char_gpt.py runs it on the GPU:
    forward and backward replayed from a CUDA graph after 3 eager steps, clipping and AdamW eager), on a fresh
    model with make_steps' weights. (torch's forward+backward captured the same way beside it hit a device-side
    index assert in torch's embedding, twice on an H100, session 7: no torch graphed column.)"""
    import argparse as _argparse

    import minidl
    import minidl.nn.functional as F
    from _common import MixedPrecision, make_train_step
    from char_gpt import CharGPT

    minidl.manual_seed(0)
    model = CharGPT(VOCAB, BLOCK, LAYERS, HEADS, EMBD, DROPOUT).to("cuda")
    opt = minidl.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    ids = np.random.default_rng(0).integers(0, VOCAB, (BATCH, BLOCK + 1))
    x, y = minidl.tensor(ids[:, :-1], device="cuda"), minidl.tensor(ids[:, 1:], device="cuda")
    mp = MixedPrecision(_argparse.Namespace(amp=amp, amp_dtype="bfloat16"), "cuda")
    step = make_train_step(model, opt, lambda logits, t: F.cross_entropy(logits.reshape(-1, VOCAB), t.reshape(-1)),
                           device="cuda", graph=True, amp=mp, max_norm=1.0)
    return lambda: step(x, y)


def time_steps(step, sync, steps: int, warmup: int = 3) -> float:
    """ms per step over `steps` steps (after `warmup` untimed ones), the GPU synchronised before and after."""
    for _ in range(warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync()
    del loss
    return (time.perf_counter() - t0) * 1e3 / steps


def time_pairs(ours, theirs, sync_ours, sync_theirs, pairs: int, block: int):
    """Per-pair ratios: `block` steps of each framework, back to back, alternating which goes first."""
    for _ in range(3):
        ours(), theirs()
    a, b = [], []
    sides = [(ours, sync_ours, a), (theirs, sync_theirs, b)]
    for i in range(pairs):
        for step, sync, times in (sides if i % 2 == 0 else sides[::-1]):
            times.append(time_steps(step, sync, block, warmup=0))
    a, b = np.array(a), np.array(b)
    r = a / b
    return float(np.median(a)), float(np.median(b)), float(np.median(r)), float(np.percentile(r, 25)), \
        float(np.percentile(r, 75))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--commit")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=0,
                        help="also N interleaved pairs of eager blocks, the median of their ratios (see the docstring)")
    parser.add_argument("--block", type=int, default=2, help="steps per block with --pairs")
    parser.add_argument("--no-gc-freeze", action="store_true", help="leave the setup's objects to the collector")
    parser.add_argument("--pin", type=int, default=None, help="run on this one CPU (both frameworks): see _report.pin_to_cpu")
    args = parser.parse_args(argv)
    pinned = pin_to_cpu(args.pin)
    import cupy
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    lines = [f"# char_gpt training step against torch eager ({gpu})", "",
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {git_commit(args.commit)}, "
             f"torch {torch.__version__}, CuPy {cupy.__version__}. {LAYERS} layers, {HEADS} heads, d={EMBD}, "
             f"context {BLOCK}, batch {BATCH}, AdamW, clip 1.0, dropout {DROPOUT}; ms per eager step over "
             f"{args.steps} steps, fastest of {ROUNDS} interleaved rounds"
             f"{'' if args.no_gc_freeze else ', the setup gc.freeze()d (see the script)'}; {pinned}. Produced by "
             f"`python3 benchmarks/bench_gpt_step.py{' --no-gc-freeze' if args.no_gc_freeze else ''}"
             f"{'' if args.pin is None else f' --pin {args.pin}'}"
             f"{f' --pairs {args.pairs} --block {args.block}' if args.pairs else ''}`.", "",
             "| math | minidl eager | torch eager | ratio (eager) | minidl graphed (char_gpt.py's step) | "
             "graphed / torch eager |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    pair_rows = []
    for amp in (True, False):
        ours, theirs = make_steps(amp)
        ours_g = make_graphed_step(amp)
        if not args.no_gc_freeze:
            gc.collect()
            gc.freeze()
        best = {"ours": float("inf"), "theirs": float("inf"), "ours_g": float("inf")}
        steps = {"ours": ours, "theirs": theirs, "ours_g": ours_g}
        for _ in range(ROUNDS):
            for name, fn in steps.items():
                sync = cupy.cuda.Device().synchronize if name.startswith("ours") else torch.cuda.synchronize
                best[name] = min(best[name], time_steps(fn, sync, args.steps))
        lines.append(f"| {'bf16 autocast' if amp else 'fp32 (TF32 off)'} | {best['ours']:.2f} | {best['theirs']:.2f} | "
                     f"**{best['ours'] / best['theirs']:.2f}** | {best['ours_g']:.2f} | "
                     f"**{best['ours_g'] / best['theirs']:.2f}** |")
        print(lines[-1], flush=True)
        if args.pairs:
            pair_rows.append(
                (amp,) + time_pairs(ours, theirs, cupy.cuda.Device().synchronize, torch.cuda.synchronize,
                                    args.pairs, args.block))
            print(pair_rows[-1], flush=True)
        del ours, theirs, ours_g, steps
        gc.unfreeze()
        gc.collect()
    if pair_rows:
        lines += ["", f"Interleaved pairs (`--pairs {args.pairs} --block {args.block}`): {args.block} eager steps of "
                  "each framework back to back, alternating which goes first; the ratio of each pair (minidl / torch), "
                  "then the median over the pairs. This is the measure that cancels the hosts' changes of speed.", "",
                  "| math | minidl block median | torch block median | median of pair ratios | 25th-75th percentile |",
                  "| --- | ---: | ---: | ---: | --- |"]
        for amp, a, b, r, lo, hi in pair_rows:
            lines.append(f"| {'bf16 autocast' if amp else 'fp32 (TF32 off)'} | {a:.2f} | {b:.2f} | **{r:.2f}** | "
                         f"{lo:.2f}-{hi:.2f} |")
    lines += ["", "ms per step. Graphed: the forward and backward pass replay from a CUDA graph, clipping and AdamW "
              "run eagerly after each replay (what examples/char_gpt.py does on the GPU unless --no-graph)."]
    write_report("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
