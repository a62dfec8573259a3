"""Where the time of a persistent RNN step goes: the kernels of kernels/rnn_persistent.cu timed alone
(CUDA events around the launch) over several sequence lengths, whole and with one part switched off at
compile time (PERSIST_ABLATE_BARRIER / _STAGE / _PRODUCT: the results are then wrong, only the time
counts), the barrier's spin loop backing off (PERSIST_BACKOFF=ns), or "late arrive" (PERSIST_LATE_ARRIVE: every
output of a step written before the CTA arrives at the barrier, as before the split barrier; results still right). The slope over T is the cost of one
step. One layer, one direction, fp32 (--math tf32 or bf16: the recurrent product in that math).

    python3 benchmarks/profile_rnn_persistent.py [--mode lstm] [--batch 32] [--hidden 512]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = {"whole": (), "no barrier": ("-DPERSIST_ABLATE_BARRIER",), "no staging": ("-DPERSIST_ABLATE_STAGE",),
            "no product": ("-DPERSIST_ABLATE_PRODUCT",), "no mma (loads and splits kept)": ("-DPERSIST_ABLATE_MMA",),
            "no barrier, staging, product": ("-DPERSIST_ABLATE_BARRIER", "-DPERSIST_ABLATE_STAGE",
                                             "-DPERSIST_ABLATE_PRODUCT"),
            "backoff 32 ns": ("-DPERSIST_BACKOFF=32",), "backoff 128 ns": ("-DPERSIST_BACKOFF=128",),
            "late arrive": ("-DPERSIST_LATE_ARRIVE",)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="lstm")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--units", default=None,
                        help="hidden units per CTA: N for both passes, or F,B (forward, backward)")
    parser.add_argument("--math", default="fp32", choices=("fp32", "tf32", "bf16"))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--variants", default=None, help="comma-separated names of VARIANTS (default: all)")
    parser.add_argument("--staged-backward", action="store_true",
                        help="the staged backward instead of the partial-sum one (rnn_persistent.PARTIAL_BACKWARD off)")
    parser.add_argument("--no-bf16-exchange", action="store_true",
                        help="bf16: stage the backward's gate gradients as fp32 (rnn_persistent.EXCHANGE_BF16 off)")
    args = parser.parse_args()
    import cupy

    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward
    from minidl.primitives.cuda import rnn_persistent

    units = None if args.units is None else tuple(int(u) for u in args.units.split(","))
    rnn_persistent.UNITS = None if units is None else (units * 2 if len(units) == 1 else units)
    rnn_persistent.EXCHANGE_BF16 = not args.no_bf16_exchange
    rnn_persistent.PARTIAL_BACKWARD = not args.staged_backward
    options = ()   # the variant's compile flags, read by the get_kernel below at every launch
    timings = {}
    real_launch, real_get_kernel = rnn_persistent._launch, rnn_persistent.get_kernel

    def timed_launch(name, blocks, smem, launch_args, threads=rnn_persistent.PT):
        """The launcher's own launch, between two CUDA events."""
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        real_launch(name, blocks, smem, launch_args, threads)
        end.record()
        timings.setdefault("backward" if "backward" in name else "forward", []).append((start, end))

    rnn_persistent._launch = timed_launch
    rnn_persistent.get_kernel = lambda family, name, more=(): real_get_kernel(family, name, tuple(more) + options)
    rng = np.random.default_rng(0)
    H, B = args.hidden, args.batch
    desc = RNNDescriptor(args.mode, H, H, algo="persistent")
    weights = [tuple(cupy.asarray((rng.uniform(-1, 1, s.shape) / np.sqrt(H)).astype(np.float32)) for s in e)
               for e in desc.weight_shapes()]
    print(f"{args.mode} hidden {H} batch {B}, one layer; plan {rnn_persistent.plan(args.mode, B, H, 1)[0]}")
    print(f"{'variant':32s} {'pass':9s} " + " ".join(f"T={T:<6d}" for T in (4, 36, 68)) + "  us/step")
    chosen = VARIANTS if args.variants is None else {k: VARIANTS[k] for k in args.variants.split(",")}
    for variant, flags in chosen.items():
        options = flags
        row = {}
        for T in (4, 36, 68):
            x = cupy.asarray(rng.standard_normal((T, B, H)).astype(np.float32))
            dy = cupy.asarray(rng.standard_normal((T, B, H)).astype(np.float32))
            for _ in range(3):
                _, _, _, reserve = rnn_forward(x, None, None, weights, desc, math=args.math)
                rnn_backward(dy, None, None, reserve)
            cupy.cuda.Device().synchronize()
            timings.clear()
            for _ in range(args.repeats):
                _, _, _, reserve = rnn_forward(x, None, None, weights, desc, math=args.math)
                rnn_backward(dy, None, None, reserve)
            cupy.cuda.Device().synchronize()
            for name, events in timings.items():
                row.setdefault(name, []).append(statistics.median(cupy.cuda.get_elapsed_time(s, e) for s, e in events))
        for name, ms in row.items():
            slope = (ms[2] - ms[0]) / 64 * 1e3
            print(f"{variant:32s} {name:9s} " + " ".join(f"{m:8.3f}" for m in ms) + f"  {slope:6.2f}")
    rnn_persistent._launch, rnn_persistent.get_kernel = real_launch, real_get_kernel


if __name__ == "__main__":
    main()
