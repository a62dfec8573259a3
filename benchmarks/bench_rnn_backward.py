"""The persistent RNN's backward algorithms, A/B in one process: the staged backward (each CTA stages every CTA's gate
gradients of the last step and multiplies them by its columns of W_hh), the partial-sum backward (each CTA multiplies
its own gate gradients by its own rows of W_hh; the CTAs sum each other's partial dh: rnn_persistent.PARTIAL_BACKWARD),
both one launch per layer, and the wavefront (two layers in one launch, staged) where it fits. 2 layers of 512 (input
512), T35, B32 and B64, LSTM / GRU / vanilla RNN, fp32 / TF32 / bf16; rnn_backward timed with CUDA events after an
untimed forward (median of --repeats).

    python3 benchmarks/bench_rnn_backward.py [--repeats 20] [--modes lstm,gru,rnn_tanh] [--out F]
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import git_commit, write_report  # noqa: E402
from benchmarks.bench_rnn_wavefront import H, T, bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--modes", default="lstm,gru,rnn_tanh")
    ap.add_argument("--maths", default="fp32,tf32,bf16")
    ap.add_argument("--out", default=None)
    ap.add_argument("--commit", default=None, help="the commit to name (default: git's HEAD here)")
    args = ap.parse_args()
    import cupy

    from minidl.primitives.cuda import rnn_persistent

    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    for mode in args.modes.split(","):
        for math in args.maths.split(","):
            for B in (32, 64):
                staged = bench(mode, B, math, False, args.repeats, partial=False)[1]
                partial = bench(mode, B, math, False, args.repeats, partial=True)[1]
                rnn_persistent.WAVEFRONT = True
                fits = rnn_persistent.wave_plan(mode, B, H, math, backward=True)[0] is not None
                wave = bench(mode, B, math, True, args.repeats, partial=False)[1] if fits else None
                wave_cells = f"{wave:.3f} | {partial / wave:.2f}x" if wave else "(does not fit) | "
                rows.append(f"| {mode.upper()} 2x{H} T{T} B{B} | {math} | {staged:.3f} | {partial:.3f} "
                            f"| {partial / staged:.2f}x | {wave_cells} |")
                print(rows[-1], flush=True)
    rnn_persistent.WAVEFRONT, rnn_persistent.PARTIAL_BACKWARD = "auto", "auto"
    lines = [f"# The persistent RNN's backward: staged, partial sums, wavefront ({device})", "",
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {git_commit(args.commit)}, CuPy "
             f"{cupy.__version__}; median of {args.repeats} runs (CUDA events), ms of rnn_backward (both layers, the "
             "weight gradients included) after an untimed forward. Produced by "
             "`python3 benchmarks/bench_rnn_backward.py`.", "",
             "| workload | math | staged, per layer | partial sums, per layer | partial / staged | staged wavefront "
             "| partial / wavefront |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |", *rows]
    write_report("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
