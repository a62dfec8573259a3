"""Where a persistent RNN step spends its time, phase by phase: kernels/rnn_persistent.cu compiled with
-DPERSIST_TRACE, whose thread 0 of every CTA notes clock64() at the marks of each step (MARK in the kernel). Prints,
per kernel launch and CTA group (the layer of a wavefront, or the direction), the median over CTAs and steps of the
time between consecutive marks, in microseconds (at the SM clock read from the device), and the step's whole time.

Unlike profile_rnn_persistent.py (the slope of whole launches with parts compiled out, results then wrong) this runs
the kernels as they are; the marks cost thread 0 a few instructions and 16 stores a step.

    python3 benchmarks/trace_rnn_persistent.py [--mode lstm] [--layers 2] [--batch 32] [--steps 35] [--math bf16]

--pt / --nbuf compile the kernels with another CTA size or ring depth (PERSIST_PT, PERSIST_NBUF; the launcher's PT and
NBUF follow); --repeats N also times N untraced forward+backward passes (CUDA events around each persistent launch,
medians of the summed kernel times per pass) with the same options: the A/B of a variant. Those events also count
the host's work between an event and its launch where the GPU waits for it (an eager pass is bound by its host; at
T = 4 a pass read ~0.15 ms, session 23, of which this may be a part); --spin-us U first queues a kernel that keeps the
GPU busy for U microseconds (bench_gpu_conv.py's spin_gpu), so that the host has queued the pass's launches before the
GPU reaches them and the events time the kernels alone.
For an A/B of two trees, run this script (the new tree's) with each tree's library on PYTHONPATH.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TRACE_CTAS, TRACE_STEPS, TRACE_MARKS = 264, 80, 16   # kernels/rnn_persistent.cu
# The marks of each kernel, in the order a step passes them (the kernel's MARK(n) numbers), and what lies between.
FORWARD = [(0, "step start"), (10, "wait for the layer below"), (1, "entry sync"), (2, "first chunk landed"),
           (3, "product"), (4, "slices to shared"), (5, "slices summed"), (11, "cell: operands (LSTM)"),
           (12, "cell: math (LSTM)"), (6, "cell"), (7, "arrive"), (8, "other outputs"), (9, "barrier wait")]
STAGED_BACKWARD = [(0, "step start"), (10, "wait for the layer above"), (1, "entry sync"), (2, "first chunk landed"),
                   (3, "product"), (4, "slices to shared"), (5, "slices summed"), (6, "cell"), (7, "arrive"),
                   (8, "other outputs"), (9, "barrier wait")]
PARTIAL_BACKWARD = [(0, "step start"), (1, "gather of partials"), (2, "operands landed"), (6, "cell"),
                    (3, "partial product + stores"), (7, "arrive"), (8, "other outputs"), (9, "barrier wait")]


def phases(trace, marks, ctas, steps):
    """{phase: median us} over the CTAs `ctas` and steps 1 .. steps - 2, and the step's median whole time."""
    out = {}
    rows = trace[ctas][:, 1:steps - 1]          # (ctas, steps, marks)
    present = [(m, name) for m, name in marks if (rows[..., m] > 0).all()]
    for (m0, _), (m1, name) in itertools.pairwise(present):
        out[name] = float(np.median(rows[..., m1] - rows[..., m0]))
    nxt = trace[ctas][:, 2:steps, 0]
    out["whole step"] = float(np.median(nxt - rows[:, :nxt.shape[1], 0]))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="lstm")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--steps", type=int, default=35)
    parser.add_argument("--math", default="bf16", choices=("fp32", "tf32", "bf16"))
    parser.add_argument("--bidirectional", action="store_true")
    parser.add_argument("--wavefront", default="auto", help="rnn_persistent.WAVEFRONT: auto, on, off")
    parser.add_argument("--pt", type=int, default=None, help="threads per CTA (PERSIST_PT)")
    parser.add_argument("--nbuf", type=int, default=None, help="chunk buffers in the ring (PERSIST_NBUF)")
    parser.add_argument("--repeats", type=int, default=0, help="also time this many untraced passes")
    parser.add_argument("--define", action="append", default=[],
                        help="a macro to compile the kernels with (repeatable)")
    parser.add_argument("--partial", default="auto", help="rnn_persistent.PARTIAL_BACKWARD: auto, on, off")
    parser.add_argument("--no-trace", action="store_true", help="only the untraced timing (--repeats)")
    parser.add_argument("--half-cta-wave-backward", default="auto",
                        help="rnn_persistent.HALF_CTA_WAVE_BACKWARD: auto, on (256 threads), off (512)")
    parser.add_argument("--spin-us", type=float, default=0.0,
                        help="keep the GPU busy this long before each timed pass (the events then exclude host time)")
    parser.add_argument("--batch-groups", default="auto",
                        help="rnn_persistent.BATCH_GROUPS: auto, or how many groups to split the batch between")
    parser.add_argument("--forward-groups", default="auto",
                        help="rnn_persistent.BATCH_GROUPS_FORWARD: auto, or the forward's groups (its 256-thread compile)")
    parser.add_argument("--units", type=int, default=None, help="rnn_persistent.UNITS (units per CTA, one layer)")
    parser.add_argument("--units-wave", type=int, default=None, help="rnn_persistent.UNITS_WAVE (the wavefront's)")
    args = parser.parse_args()
    import cupy
    from bench_gpu_conv import spin_gpu

    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward
    from minidl.primitives.cuda import _compile, rnn_persistent

    switch = {"auto": "auto", "on": True, "off": False}
    rnn_persistent.WAVEFRONT = switch[args.wavefront]
    rnn_persistent.PARTIAL_BACKWARD = switch[args.partial]
    rnn_persistent.HALF_CTA_WAVE_BACKWARD = switch[args.half_cta_wave_backward]
    rnn_persistent.BATCH_GROUPS = args.batch_groups if args.batch_groups == "auto" else int(args.batch_groups)
    rnn_persistent.BATCH_GROUPS_FORWARD = (args.forward_groups if args.forward_groups == "auto"
                                           else int(args.forward_groups))
    rnn_persistent.UNITS, rnn_persistent.UNITS_WAVE = args.units, args.units_wave
    variant = ()
    if args.pt:
        rnn_persistent.PT, variant = args.pt, variant + (f"-DPERSIST_PT={args.pt}",)
    if args.nbuf:
        rnn_persistent.NBUF, variant = args.nbuf, variant + (f"-DPERSIST_NBUF={args.nbuf}",)
    variant += tuple(f"-D{name}" for name in args.define)
    options = variant + (() if args.no_trace else ("-DPERSIST_TRACE",))
    real_launch, real_get_kernel = rnn_persistent._launch, rnn_persistent.get_kernel
    launches = []

    def traced_launch(name, blocks, smem, launch_args, threads=rnn_persistent.PT):
        module = _compile.get_module("rnn_persistent", rnn_persistent._options(threads) + options)
        trace = cupy.ndarray((TRACE_CTAS, TRACE_STEPS, TRACE_MARKS), dtype=cupy.int64,
                             memptr=module.get_global("persist_trace"))
        trace.fill(0)
        real_launch(name, blocks, smem, launch_args, threads)
        cupy.cuda.Device().synchronize()
        units = int(launch_args[6])   # (structs d0, d1, lengths, T, B, H, U, ...)
        # the partial-sum backward: DirBackward's `part` set
        word = rnn_persistent.BACKWARD_PART_WORD
        partial = "backward" in name and int(np.asarray(launch_args[0]).ravel()[word]) != 0
        launches.append((name, blocks, -(-H // units), threads, partial, trace.get()))

    rnn_persistent.get_kernel = lambda family, name, more=(): real_get_kernel(family, name, tuple(more) + options)
    rng = np.random.default_rng(0)
    H, B, T = args.hidden, args.batch, args.steps
    desc = RNNDescriptor(args.mode, H, H, num_layers=args.layers, bidirectional=args.bidirectional,
                         algo="persistent")
    weights = [tuple(cupy.asarray((rng.uniform(-1, 1, s.shape) / np.sqrt(H)).astype(np.float32)) for s in e)
               for e in desc.weight_shapes()]
    x = cupy.asarray(rng.standard_normal((T, B, H)).astype(np.float32))
    dy = cupy.asarray(rng.standard_normal((T, B, desc.num_directions * H)).astype(np.float32))
    for _ in range(2):   # compile, warm up
        _, _, _, reserve = rnn_forward(x, None, None, weights, desc, math=args.math)
        rnn_backward(dy, None, None, reserve)
    cupy.cuda.Device().synchronize()
    rnn_persistent._launch = traced_launch
    try:
        if not args.no_trace:
            _, _, _, reserve = rnn_forward(x, None, None, weights, desc, math=args.math)
            rnn_backward(dy, None, None, reserve)
    finally:
        rnn_persistent._launch = real_launch
        rnn_persistent.get_kernel = real_get_kernel
    timed = {}
    if args.repeats:
        options = variant
        events = []

        def timed_launch(name, blocks, smem, launch_args, threads=rnn_persistent.PT):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            real_launch(name, blocks, smem, launch_args, threads)
            end.record()
            events.append(("backward" if "backward" in name else "forward", start, end))

        rnn_persistent.get_kernel = lambda family, name, more=(): real_get_kernel(family, name, tuple(more) + options)
        rnn_persistent._launch = timed_launch
        spin_cycles = int(args.spin_us * cupy.cuda.runtime.getDeviceProperties(0)["clockRate"] / 1e3)
        try:
            for r in range(args.repeats + 2):
                events.clear()
                if spin_cycles:
                    spin_gpu(spin_cycles)
                _, _, _, reserve = rnn_forward(x, None, None, weights, desc, math=args.math)
                rnn_backward(dy, None, None, reserve)
                cupy.cuda.Device().synchronize()
                if r >= 2:   # (compile, warm-up)
                    for kind in ("forward", "backward"):
                        timed.setdefault(kind, []).append(sum(cupy.cuda.get_elapsed_time(a, b)
                                                              for k, a, b in events if k == kind))
        finally:
            rnn_persistent._launch = real_launch
            rnn_persistent.get_kernel = real_get_kernel
    props = cupy.cuda.runtime.getDeviceProperties(0)
    clock_khz = props["clockRate"]
    to_us = 1e3 / clock_khz
    print(f"{args.mode} {args.layers}x{H}{' bidir' if args.bidirectional else ''} T{T} B{B} {args.math}, "
          f"wavefront {args.wavefront}, partial {args.partial}, batch groups {args.batch_groups} "
          f"(forward {args.forward_groups}); "
          f"{props['name'].decode()}, "
          f"SM clock {clock_khz / 1e3:.0f} MHz; PT {rnn_persistent.PT}, NBUF {rnn_persistent.NBUF}; "
          "median over CTAs and steps 1 .. T-2, us")
    for kind, ms in timed.items():
        print(f"untraced persistent {kind} kernels: median {np.median(ms):.4f} ms a pass "
              f"({args.repeats} passes, min {min(ms):.4f})")
    for name, blocks, per_group, threads, partial, trace in launches:
        marks = PARTIAL_BACKWARD if partial else (STAGED_BACKWARD if "backward" in name else FORWARD)
        steps = min(T, TRACE_STEPS)
        groups = blocks // per_group
        kind = "partial-sum backward" if partial else ("backward" if "backward" in name else "forward")
        for group in range(groups):
            ctas = list(range(group * per_group, (group + 1) * per_group))
            result = phases(trace, marks, ctas, steps)
            print(f"\n{name} ({kind}), {blocks} CTAs of {threads} threads, group {group} (CTAs {ctas[0]}..{ctas[-1]})")
            for phase, cycles in result.items():
                print(f"  {phase:28s} {cycles * to_us:7.3f}")


if __name__ == "__main__":
    main()
