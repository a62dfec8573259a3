"""Where the host time of char_gpt's eager step goes, phase by phase, in minidl and in torch: forward (with the loss),
backward, clip_grad_norm_, optimizer step. Host time only: perf_counter around each phase, no synchronisation inside a
step (the GPU is synchronised after each step, so that every step starts on an idle GPU, as bench_gpt_step.py's
rows end). Same model, weights and settings as bench_gpt_step.py (bf16 autocast by default); median over the steps of
each round, interleaved rounds, the fastest round of each phase kept.

    python3 benchmarks/probe_gpt_phases.py [--fp32] [--steps 30] [--rounds 3] [--pin 3]
    python3 benchmarks/probe_gpt_phases.py --modules     # also: the forward's host time by module class
    python3 benchmarks/probe_gpt_phases.py --backward    # also: minidl's backward by Function class, and the engine's own

--modules times every module's forward with forward pre/post hooks (exclusive time: a module's own code, its
children's taken out; CausalSelfAttention's own is the split, reshapes, transposes and scaled_dot_product_attention,
Block's the two residual adds), in a separate pass after the phase rounds (the hooks cost time on both sides).
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

from benchmarks._report import pin_to_cpu  # noqa: E402

PHASES = ("forward", "backward", "clip", "step")


def phased(lib, model, opt, x, y, vocab, amp, sync):
    """One eager step of `lib`, returning the host seconds of each phase."""
    t0 = time.perf_counter()
    with lib.autocast("cuda", dtype=lib.bfloat16, enabled=amp):
        loss = lib.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
    t1 = time.perf_counter()
    opt.zero_grad()
    loss.backward()
    t2 = time.perf_counter()
    lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    t3 = time.perf_counter()
    opt.step()
    t4 = time.perf_counter()
    sync()
    return t1 - t0, t2 - t1, t3 - t2, t4 - t3


def module_times(lib, model, x, y, vocab, amp, sync, steps):
    """Exclusive host seconds per module class over `steps` forward passes (forward pre/post hooks)."""
    totals, stack, handles = {}, [], []

    def pre(module, args):
        stack.append([time.perf_counter(), 0.0])

    def post(module, args, output):
        start, children = stack.pop()
        spent = time.perf_counter() - start
        name = {"Attn": "CausalSelfAttention", "GPT": "CharGPT"}.get(type(module).__name__, type(module).__name__)
        totals[name] = totals.get(name, 0.0) + spent - children
        if stack:
            stack[-1][1] += spent
        return None

    for m in model.modules():
        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post))
    for _ in range(steps):
        with lib.autocast("cuda", dtype=lib.bfloat16, enabled=amp):
            lib.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        sync()
    for h in handles:
        h.remove()
    return {k: v / steps for k, v in totals.items()}


def backward_times(minidl, model, opt, x, y, vocab, amp, sync, steps):
    """minidl's backward pass: host seconds per step in each Function class's backward (wrapped for the run), and
    in the tape's own loop (the backward's wall time less the sum of the nodes')."""
    from minidl.autograd.function import Function

    def subclasses(c):
        for sub in c.__subclasses__():
            yield sub
            yield from subclasses(sub)

    totals, counts, wrapped = {}, {}, []
    for cls in set(subclasses(Function)):
        original = cls.__dict__.get("backward")
        if original is None or isinstance(original, (staticmethod, classmethod)) or not callable(original):
            continue

        def timed(self, *grads, _original=original):
            start = time.perf_counter()
            try:
                return _original(self, *grads)
            finally:
                name = type(self).__name__
                totals[name] = totals.get(name, 0.0) + time.perf_counter() - start
                counts[name] = counts.get(name, 0) + 1

        wrapped.append((cls, original))
        cls.backward = timed
    whole = 0.0
    try:
        for _ in range(steps):
            with minidl.autocast("cuda", dtype=minidl.bfloat16, enabled=amp):
                loss = minidl.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
            opt.zero_grad()
            start = time.perf_counter()
            loss.backward()
            whole += time.perf_counter() - start
            sync()
    finally:
        for cls, original in wrapped:
            cls.backward = original
    nodes = sum(totals.values())
    return ({k: (v / steps, counts[k] / steps) for k, v in totals.items()}, whole / steps, (whole - nodes) / steps)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fp32", action="store_true", help="no autocast (TF32 off on both sides)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pin", type=int, default=None)
    ap.add_argument("--modules", action="store_true", help="also the forward's host time by module class")
    ap.add_argument("--backward", action="store_true", help="also minidl's backward by Function class")
    args = ap.parse_args(argv)
    print(pin_to_cpu(args.pin))
    import cupy
    import numpy as np
    import torch

    import bench_gpt_step as bench
    import minidl
    from char_gpt import CharGPT

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    amp = not args.fp32
    minidl.manual_seed(0)
    model = CharGPT(bench.VOCAB, bench.BLOCK, bench.LAYERS, bench.HEADS, bench.EMBD, bench.DROPOUT).to("cuda")
    twin = bench.torch_twin(model)
    opt = minidl.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    topt = torch.optim.AdamW(twin.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
    ids = np.random.default_rng(0).integers(0, bench.VOCAB, (bench.BATCH, bench.BLOCK + 1))
    sides = {
        "minidl": (minidl, model, opt, minidl.tensor(ids[:, :-1], device="cuda"), minidl.tensor(ids[:, 1:], device="cuda"),
                   cupy.cuda.Device().synchronize),
        "torch": (torch, twin, topt, torch.tensor(ids[:, :-1], device="cuda"), torch.tensor(ids[:, 1:], device="cuda"),
                  torch.cuda.synchronize),
    }
    for lib, m, o, x, y, sync in sides.values():
        for _ in range(3):
            phased(lib, m, o, x, y, bench.VOCAB, amp, sync)
    gc.collect()
    gc.freeze()
    best = {name: [float("inf")] * 4 for name in sides}
    for _ in range(args.rounds):
        for name, (lib, m, o, x, y, sync) in sides.items():
            runs = [phased(lib, m, o, x, y, bench.VOCAB, amp, sync) for _ in range(args.steps)]
            for k in range(4):
                best[name][k] = min(best[name][k], statistics.median(r[k] for r in runs))
    print(f"{'bf16 autocast' if amp else 'fp32'}: host ms per phase (median of {args.steps} steps, best of "
          f"{args.rounds} rounds)")
    print("| phase | minidl | torch | ratio |\n| --- | ---: | ---: | ---: |")
    for k, phase in enumerate(PHASES + ("total",)):
        a = best["minidl"][k] if k < 4 else sum(best["minidl"])
        b = best["torch"][k] if k < 4 else sum(best["torch"])
        print(f"| {phase} | {a * 1e3:.2f} | {b * 1e3:.2f} | {a / b:.2f} |")
    if args.modules:
        times = {name: module_times(lib, m, x, y, bench.VOCAB, amp, sync, args.steps)
                 for name, (lib, m, o, x, y, sync) in sides.items()}
        print("\nforward host ms per step by module class (exclusive: children taken out; hooks on)")
        print("| module | minidl | torch | ratio |\n| --- | ---: | ---: | ---: |")
        for cls in sorted(times["minidl"], key=lambda c: -times["minidl"][c]):
            a, b = times["minidl"][cls], times["torch"].get(cls, float("nan"))
            print(f"| {cls} | {a * 1e3:.3f} | {b * 1e3:.3f} | {a / b:.2f} |")


    if args.backward:
        lib, m, o, x, y, sync = sides["minidl"]
        per_class, whole, engine = backward_times(lib, m, o, x, y, bench.VOCAB, amp, sync, args.steps)
        print(f"\nminidl's backward: {whole * 1e3:.2f} ms a step, of which the tape's own loop {engine * 1e3:.2f} ms "
              "(the rest in the nodes' backward methods; timers on)")
        print("| Function | calls a step | ms a step | us a call |\n| --- | ---: | ---: | ---: |")
        for name, (t, n) in sorted(per_class.items(), key=lambda kv: -kv[1][0]):
            print(f"| {name} | {n:.0f} | {t * 1e3:.3f} | {t / n * 1e6:.1f} |")


if __name__ == "__main__":
    main()
