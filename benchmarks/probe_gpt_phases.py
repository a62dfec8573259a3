"""Where the host time of char_gpt's eager step goes, phase by phase, in minidl and in torch: forward (with the loss),
backward, clip_grad_norm_, optimizer step. Host time only: perf_counter around each phase, no synchronisation inside a
step (the GPU is synchronised after each step, so that every step starts on an idle GPU, as bench_gpt_step.py's
rows end). Same model, weights and settings as bench_gpt_step.py (bf16 autocast by default); median over the steps of
each round, interleaved rounds, the fastest round of each phase kept.

    python3 benchmarks/probe_gpt_phases.py [--fp32] [--steps 30] [--rounds 3] [--pin 3]
    python3 benchmarks/probe_gpt_phases.py --modules     # also: the forward's host time by module class
    python3 benchmarks/probe_gpt_phases.py --backward    # also: minidl's backward by Function class, and the engine's own
    python3 benchmarks/probe_gpt_phases.py --forward     # also: minidl's forward by Function class, and the layers around
    python3 benchmarks/probe_gpt_phases.py --model mnist [--math tf32]   # issue 23's small CNNs (mnist, cifar) instead:
        bench_gpu_train_step.py's models, batches and SGD; fp32 or TF32, no clipping phase

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


def _loss(lib, model, x, y, vocab, amp):
    """The step's forward with its loss: char_gpt's (logits flattened, under bf16 autocast unless --fp32), or a
    CNN's (vocab None: the logits as they are, no autocast)."""
    if vocab is None:
        return lib.nn.functional.cross_entropy(model(x), y)
    with lib.autocast("cuda", dtype=lib.bfloat16, enabled=amp):
        return lib.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))


def phased(lib, model, opt, x, y, vocab, amp, sync):
    """One eager step of `lib`, returning the host seconds of each phase (the CNNs: no clipping)."""
    t0 = time.perf_counter()
    loss = _loss(lib, model, x, y, vocab, amp)
    t1 = time.perf_counter()
    opt.zero_grad()
    loss.backward()
    t2 = time.perf_counter()
    if vocab is not None:
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
        _loss(lib, model, x, y, vocab, amp)
        sync()
    for h in handles:
        h.remove()
    return {k: v / steps for k, v in totals.items()}


def node_times(minidl, method, model, opt, x, y, vocab, amp, sync, steps):
    """minidl's Function nodes in one phase: host seconds per step in each Function class's `method` ("forward" or
    "backward", wrapped for the run; exclusive: a method called from another's, as AutocastLinear.forward calls
    Linear.forward, is taken out of its caller's), the phase's wall time, and the rest of it (the wall time less the
    methods': for the backward the tape's own loop, for the forward the modules, functionals and the tape's records
    around the ops)."""
    from minidl.autograd.function import Function

    def subclasses(c):
        for sub in c.__subclasses__():
            yield sub
            yield from subclasses(sub)

    totals, counts, wrapped, stack = {}, {}, [], []
    for cls in set(subclasses(Function)):
        original = cls.__dict__.get(method)
        if original is None or isinstance(original, (staticmethod, classmethod)) or not callable(original):
            continue

        def timed(self, *args, _original=original, **kwargs):
            # (a node's own class takes the time of every method of it on the stack: AutocastLinear's forward and
            # the Linear.forward it calls are one AutocastLinear; a call counts once, at its outermost method)
            outermost = all(owner is not self for owner, _ in stack)
            stack.append([self, 0.0])
            start = time.perf_counter()
            try:
                return _original(self, *args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                children = stack.pop()[1]
                if stack and stack[-1][0] is not self:
                    stack[-1][1] += spent   # another node's method called this one: out of that one's own time
                name = type(self).__name__
                own = spent - children if outermost else 0.0
                totals[name] = totals.get(name, 0.0) + own
                counts[name] = counts.get(name, 0) + outermost

        wrapped.append((cls, original))
        setattr(cls, method, timed)
    whole = 0.0
    try:
        for _ in range(steps):
            start = time.perf_counter()
            loss = _loss(minidl, model, x, y, vocab, amp)
            if method == "forward":
                whole += time.perf_counter() - start
            opt.zero_grad()
            start = time.perf_counter()
            loss.backward()
            if method == "backward":
                whole += time.perf_counter() - start
            sync()
    finally:
        for cls, original in wrapped:
            setattr(cls, method, original)
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
    ap.add_argument("--forward", action="store_true", help="also minidl's forward by Function class (its forward "
                                                           "methods: the primitive fronts and launchers inside them)")
    ap.add_argument("--model", choices=("gpt", "mnist", "cifar"), default="gpt",
                    help="char_gpt (default), or bench_gpu_train_step.py's MNIST CNN or small CIFAR CNN")
    ap.add_argument("--math", choices=("fp32", "tf32"), default="fp32", help="the CNNs' math (char_gpt: --fp32)")
    args = ap.parse_args(argv)
    print(pin_to_cpu(args.pin))
    import cupy
    import numpy as np
    import torch

    import bench_gpt_step as bench
    import minidl
    from char_gpt import CharGPT

    tf32 = args.model != "gpt" and args.math == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    minidl.backends.cuda.matmul.allow_tf32 = minidl.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = args.model != "gpt"   # (as bench_gpu_train_step.py)
    if args.model == "gpt":
        amp, vocab = not args.fp32, bench.VOCAB
        minidl.manual_seed(0)
        model = CharGPT(bench.VOCAB, bench.BLOCK, bench.LAYERS, bench.HEADS, bench.EMBD, bench.DROPOUT).to("cuda")
        twin = bench.torch_twin(model)
        opt = minidl.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
        topt = torch.optim.AdamW(twin.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
        ids = np.random.default_rng(0).integers(0, bench.VOCAB, (bench.BATCH, bench.BLOCK + 1))
        x_host, y_host = ids[:, :-1], ids[:, 1:]
    else:
        from bench_gpu_train_step import MODELS

        amp, vocab = False, None
        build, make_batch, _ = MODELS[list(MODELS)[0 if args.model == "mnist" else 1]]
        torch.manual_seed(0)
        twin = build(torch.nn).cuda()
        model = build(minidl.nn)
        model.load_state_dict({k: v.detach().cpu().numpy() for k, v in twin.state_dict().items()})
        model = model.to("cuda")
        opt = minidl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        topt = torch.optim.SGD(twin.parameters(), lr=0.01, momentum=0.9)
        x_host, y_host = make_batch(np.random.default_rng(0))
    sides = {
        "minidl": (minidl, model, opt, minidl.tensor(x_host, device="cuda"), minidl.tensor(y_host, device="cuda"),
                   cupy.cuda.Device().synchronize),
        "torch": (torch, twin, topt, torch.tensor(x_host, device="cuda"), torch.tensor(y_host, device="cuda"),
                  torch.cuda.synchronize),
    }
    for lib, m, o, x, y, sync in sides.values():
        for _ in range(3):
            phased(lib, m, o, x, y, vocab, amp, sync)
    gc.collect()
    gc.freeze()
    best = {name: [float("inf")] * 4 for name in sides}
    for _ in range(args.rounds):
        for name, (lib, m, o, x, y, sync) in sides.items():
            runs = [phased(lib, m, o, x, y, vocab, amp, sync) for _ in range(args.steps)]
            for k in range(4):
                best[name][k] = min(best[name][k], statistics.median(r[k] for r in runs))
    what = args.model if args.model != "gpt" else "char_gpt"
    print(f"{what}, {'bf16 autocast' if amp else 'TF32' if tf32 else 'fp32'}: host ms per phase (median of {args.steps} steps, best of "
          f"{args.rounds} rounds)")
    print("| phase | minidl | torch | ratio |\n| --- | ---: | ---: | ---: |")
    for k, phase in enumerate(PHASES + ("total",)):
        a = best["minidl"][k] if k < 4 else sum(best["minidl"])
        b = best["torch"][k] if k < 4 else sum(best["torch"])
        print(f"| {phase} | {a * 1e3:.2f} | {b * 1e3:.2f} | {a / b:.2f} |")
    if args.modules:
        times = {name: module_times(lib, m, x, y, vocab, amp, sync, args.steps)
                 for name, (lib, m, o, x, y, sync) in sides.items()}
        print("\nforward host ms per step by module class (exclusive: children taken out; hooks on)")
        print("| module | minidl | torch | ratio |\n| --- | ---: | ---: | ---: |")
        for cls in sorted(times["minidl"], key=lambda c: -times["minidl"][c]):
            a, b = times["minidl"][cls], times["torch"].get(cls, float("nan"))
            print(f"| {cls} | {a * 1e3:.3f} | {b * 1e3:.3f} | {a / b:.2f} |")


    for method, asked, rest in (("forward", args.forward, "the modules, functionals and the tape's records around "
                                                          "the ops"),
                                ("backward", args.backward, "the tape's own loop")):
        if not asked:
            continue
        lib, m, o, x, y, sync = sides["minidl"]
        per_class, whole, other = node_times(lib, method, m, o, x, y, vocab, amp, sync, args.steps)
        print(f"\nminidl's {method}: {whole * 1e3:.2f} ms a step, of which {rest} {other * 1e3:.2f} ms (the rest in the "
              f"nodes' {method} methods, exclusive; timers on)")
        print("| Function | calls a step | ms a step | us a call |\n| --- | ---: | ---: | ---: |")
        for name, (t, n) in sorted(per_class.items(), key=lambda kv: -kv[1][0]):
            print(f"| {name} | {n:.0f} | {t * 1e3:.3f} | {t / max(n, 1e-9) * 1e6:.1f} |")


if __name__ == "__main__":
    main()
