"""The persistent RNN's wavefront, A/B: two stacked layers of one direction in one launch (forward: the upper layer at
step t beside the lower one at t + 2, whose CTAs also project the upper layer's input; backward the other way round;
rnn_persistent.WAVEFRONT) against one launch per layer, in the same process. 2 layers of 512 (input 512), T35, B32 and
B64, LSTM / GRU / vanilla RNN, fp32 / TF32 / bf16; the primitive's rnn_forward (training mode) and rnn_backward timed
apart with CUDA events (median of --repeats), eagerly: a policy is better measured replayed from a CUDA graph, with the
backward (benchmarks/results/gpu_rnn.md, session 12). "wave" says where the wavefront runs with WAVEFRONT = True
("auto": rnn_persistent.wave_plan's docstring).

    python3 benchmarks/bench_rnn_wavefront.py [--repeats 20] [--out F]
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import git_commit, write_report  # noqa: E402

T, H = 35, 512


def _time(fn, before, repeats):
    """Median GPU ms of fn(), each run preceded by before() (untimed)."""
    import cupy

    times = []
    for _ in range(repeats):
        before()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def bench(mode, B, math, wave, repeats, partial="auto"):
    """(forward ms, backward ms) of a 2x512 layer stack with WAVEFRONT = wave and PARTIAL_BACKWARD = partial (its
    policy by default: the per-layer backward is then partial sums where "auto" takes them)."""
    import cupy

    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward
    from minidl.primitives.cuda import rnn_persistent

    rnn_persistent.WAVEFRONT = wave
    rnn_persistent.PARTIAL_BACKWARD = partial
    rng = np.random.default_rng(0)
    desc = RNNDescriptor(mode, H, H, 2, algo="persistent")
    weights = [tuple(cupy.asarray((rng.uniform(-1, 1, s.shape) / np.sqrt(H)).astype(np.float32)) for s in entry)
               for entry in desc.weight_shapes()]
    x = cupy.asarray(rng.standard_normal((T, B, H)).astype(np.float32))
    dy = cupy.asarray(rng.standard_normal((T, B, H)).astype(np.float32))
    reserve = []

    def forward():
        reserve[:] = [rnn_forward(x, None, None, weights, desc, math=math)[3]]

    def backward():
        rnn_backward(dy, None, None, reserve[0])

    for _ in range(3):
        forward()
        backward()
    return _time(forward, lambda: None, repeats), _time(backward, forward, repeats)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import cupy

    from minidl.primitives.cuda import rnn_persistent

    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    for mode in ("lstm", "gru", "rnn_tanh"):
        for math in ("fp32", "tf32", "bf16"):
            for B in (32, 64):
                per_layer = bench(mode, B, math, False, args.repeats)
                wave = bench(mode, B, math, True, args.repeats)
                fits = [rnn_persistent.wave_plan(mode, B, H, math, backward=b)[0] is not None for b in (False, True)]
                where = "/".join(name for name, f in zip(("fwd", "bwd"), fits) if f) or "none"
                rows.append(f"| {mode.upper()} 2x{H} T{T} B{B} | {math} | {where} | {per_layer[0]:.3f} | {wave[0]:.3f} "
                            f"| {wave[0] / per_layer[0]:.2f}x | {per_layer[1]:.3f} | {wave[1]:.3f} "
                            f"| {wave[1] / per_layer[1]:.2f}x |")
    rnn_persistent.WAVEFRONT = "auto"
    lines = [f"# The persistent RNN's wavefront against one launch per layer ({device})", "",
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {git_commit()}, CuPy "
             f"{cupy.__version__}; median of {args.repeats} runs (CUDA events), ms; forward in training mode, backward "
             "= rnn_backward after it. Produced by `python3 benchmarks/bench_rnn_wavefront.py`.", "",
             "| workload | math | wave fits | fwd per layer | fwd wave | ratio | bwd per layer | bwd wave | ratio |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |", *rows]
    write_report("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
