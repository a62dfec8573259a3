"""Probe for issue 24's eager ordering (bf16 <= TF32 <= fp32): where an eager persistent RNN pass (2x512, forward then
backward, the primitives) spends its time, fp32 against TF32 and bf16. Session 24's device calls 5, 6 and 12
(benchmarks/results/gpu_rnn.md, session 24):

    python3 benchmarks/probe_eager_rnn.py times       # wall, host time to the last launch, GPU events; cProfile (GRU)
    python3 benchmarks/probe_eager_rnn.py wgrad       # TF32 weight gradients: wgmma + K-major copies or mma.sync
    python3 benchmarks/probe_eager_rnn.py gru-groups  # the GRU's TF32 backward: wavefront or per-layer batch groups

`times`: per pass, the wall time (a sync before and after), the host's time up to its last launch, and the GPU time
between events around the pass. Then cProfile of ten GRU passes in fp32 and in TF32.
`wgrad`: the TF32 weight gradients (trans_a GEMMs, M*N*K ~ 0.9-4.3e9) go to wgmma after two K-major copies
(gemm_wgmma.SMALL_TF32_COPY_WORK is below them). With the threshold raised they run on mma.sync, which reads them as
they are. Each is timed eagerly and replayed from a minidl CUDA graph (bench_gpu_rnn.py's helper). A planned problem
stays planned for the rest of the process, so each variant runs in a process of its own (--variant).
`gru-groups`: "auto" runs the GRU's TF32 backward at batch 32 .. 63 as a wavefront eagerly and, in a CUDA graph, one
layer at a time in batch groups (rnn_persistent.wave_plan). Here both run eagerly: the graph's choice is forced by
patching rnn_persistent._capturing.

This script gathers the three that calls 5, 6 and 12 ran (one-off scripts then; their outputs are
benchmarks/results/runs/eager_rnn_profile_s24c5.txt, rnn_tf32_weight_gradients_s24c6.txt and
eager_gru_groups_s24c12.txt). It was written after those calls, with the same measurements, and has not itself run on
a GPU yet: no device time was left.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def case(mode, T, B, H=512):
    import cupy

    from minidl.primitives import RNNDescriptor

    rng = np.random.default_rng(0)
    desc = RNNDescriptor(mode, H, H, num_layers=2, algo="persistent")
    weights = [tuple(cupy.asarray((rng.uniform(-1, 1, s.shape) / np.sqrt(H)).astype(np.float32)) for s in e)
               for e in desc.weight_shapes()]
    x = cupy.asarray(rng.standard_normal((T, B, H)).astype(np.float32))
    dy = cupy.asarray(rng.standard_normal((T, B, H)).astype(np.float32))
    return desc, weights, x, dy


def one_pass(desc, weights, x, dy, math):
    from minidl.primitives import rnn_backward, rnn_forward

    _, _, _, reserve = rnn_forward(x, None, None, weights, desc, math=math)
    rnn_backward(dy, None, None, reserve)


def timed(fn, passes=25, warmup=3):
    """Median (wall, host to the last launch, GPU events) ms of fn()."""
    import cupy

    rows = []
    for r in range(warmup + passes):
        cupy.cuda.Device().synchronize()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        t0 = time.perf_counter()
        start.record()
        fn()
        t1 = time.perf_counter()
        end.record()
        end.synchronize()
        if r >= warmup:
            rows.append((1e3 * (time.perf_counter() - t0), 1e3 * (t1 - t0), cupy.cuda.get_elapsed_time(start, end)))
    return tuple(float(np.median(col)) for col in zip(*rows))


def run_times():
    import cupy

    for mode in ("gru", "lstm"):
        c = case(mode, 35, 32)
        for math in ("fp32", "tf32", "bf16"):
            wall, host, gpu = timed(lambda: one_pass(*c, math))   # noqa: B023 (called before the loop moves on)
            print(f"{mode} T35 B32 {math}: wall {wall:.3f} ms, host (to the last launch) {host:.3f}, GPU (events) "
                  f"{gpu:.3f} a pass", flush=True)
    for math in ("fp32", "tf32"):
        c = case("gru", 35, 32)
        one_pass(*c, math)
        cupy.cuda.Device().synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(10):
            one_pass(*c, math)
        cupy.cuda.Device().synchronize()
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(22)
        print(f"==== cProfile gru T35 B32 {math}, 10 passes\n{out.getvalue()}", flush=True)


def run_wgrad(variant):
    import cupy
    from bench_gpu_rnn import _CupyEvent, _ours_graphed_ms

    from minidl.primitives.cuda import gemm_wgmma

    if variant == "mma_sync":
        gemm_wgmma.SMALL_TF32_COPY_WORK = 1 << 50
    events = {"start_event": lambda: _CupyEvent(cupy), "end_event": lambda: _CupyEvent(cupy),
              "synchronize": cupy.cuda.Device().synchronize}
    for mode, T, B in (("gru", 35, 32), ("lstm", 35, 32), ("gru", 64, 64), ("lstm", 64, 64)):
        c = case(mode, T, B)
        wall, host, gpu = timed(lambda: one_pass(*c, "tf32"))   # noqa: B023
        graphed = _ours_graphed_ms(lambda: one_pass(*c, "tf32"), events, warmup=3, repeats=20)   # noqa: B023
        print(f"{mode} T{T} B{B} TF32, weight gradients on {variant}: eager wall {wall:.3f} ms (host {host:.3f}, "
              f"events {gpu:.3f}), graphed {graphed:.3f}", flush=True)


def run_gru_groups(rounds):
    from minidl.primitives.cuda import rnn_persistent

    real = rnn_persistent._capturing
    for r in range(rounds):
        for T, B in ((35, 32), (64, 32), (35, 48)):
            c = case("gru", T, B)
            row = []
            for label, math, groups in (("fp32", "fp32", False), ("tf32 wavefront", "tf32", False),
                                        ("tf32 per-layer groups", "tf32", True), ("bf16", "bf16", False)):
                rnn_persistent._capturing = (lambda: True) if groups else real
                try:
                    wall, _, gpu = timed(lambda: one_pass(*c, math))   # noqa: B023
                finally:
                    rnn_persistent._capturing = real
                row.append(f"{label} {wall:.3f} (events {gpu:.3f})")
            print(f"round {r} gru T{T} B{B}: " + " | ".join(row), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("times", "wgrad", "gru-groups"))
    ap.add_argument("--variant", default="wgmma", choices=("wgmma", "mma_sync"), help="wgrad: the weight gradients' kernel")
    ap.add_argument("--rounds", type=int, default=3, help="gru-groups: rounds")
    args = ap.parse_args(argv)
    import cupy

    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: 2x512, ms a pass", flush=True)
    if args.what == "times":
        run_times()
    elif args.what == "wgrad":
        run_wgrad(args.variant)
    else:
        run_gru_groups(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
