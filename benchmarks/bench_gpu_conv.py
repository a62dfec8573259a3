"""Benchmark: minidl's GPU convolutions against cuDNN, in one process.

For the 8 convolution shapes of docs/GPU.md (float32, NCHW):
  * the forward time of each of our algorithms that applies;
  * forward + backward (data + filter) with the fastest of our algorithms for each direction;
  * cuDNN through torch (benchmark mode, TF32 off) on the same inputs: forward, and forward +
    backward (aten.convolution_backward computing both gradients);
  * the ratios ours / cuDNN (> 1 means slower) and their geometric mean.
Our SGEMM against cuBLAS (4096^3 and the GEMM shapes of these layers) is in bench_gpu_gemm.py.

Timing: CUDA events around each call, after a warm-up (kernels precompiled first), median of
--repeats runs. GPU time: before each timed call a one-thread spin kernel (~1.5 ms) is queued, so
the host has enqueued the whole call before its start event fires and the events measure the
device's work alone, for ours and cuDNN alike. Host-inclusive time (no spin: the GPU idles while
Python prepares the launches) is reported too for forward + backward, since for the small first
layers it is what a Python caller sees. Writes a markdown report to --out and prints it.

    python3 benchmarks/bench_gpu_conv.py [--out benchmarks/results/gpu_conv.md] [--repeats 25]
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import git_commit, write_report  # noqa: E402

# (label, N, C, K, H=W, kernel, stride, padding)
SHAPES = [
    ("3x3 N128 C64->128 32x32", 128, 64, 128, 32, 3, 1, 1),
    ("3x3 N128 C128->256 16x16", 128, 128, 256, 16, 3, 1, 1),
    ("3x3 N128 C256->512 8x8", 128, 256, 512, 8, 3, 1, 1),
    ("3x3 N64 C64->64 56x56", 64, 64, 64, 56, 3, 1, 1),
    ("1x1 N64 C256->64 56x56", 64, 256, 64, 56, 1, 1, 0),
    ("5x5 N128 C1->32 28x28 pad 2", 128, 1, 32, 28, 5, 1, 2),
    ("3x3 N128 C3->64 32x32", 128, 3, 64, 32, 3, 1, 1),
    ("7x7/2 N32 C3->64 224x224", 32, 3, 64, 224, 7, 2, 3),
]

ALGOS = ("implicit_gemm", "implicit_precomp_gemm", "im2col_gemm", "winograd", "direct")


_SPIN = None


def spin_gpu(cycles=3_000_000):
    """Keep the GPU busy for `cycles` SM clocks (about 1.5 ms) on the current stream (so that the events around
    what is queued next time the device's work, not the host's)."""
    global _SPIN
    import cupy

    if _SPIN is None:
        _SPIN = cupy.RawKernel(r'''extern "C" __global__ void spin(long long cycles)
            { const long long t0 = clock64(); while (clock64() - t0 < cycles) { } }''', "spin")
    _SPIN((1,), (1,), (np.int64(cycles),))


def time_ms(fn, repeats, warmup=3, gpu_only=True):
    """Median of `repeats` CUDA-event timings of fn() (fewer repeats for calls slower than 50 ms).

    gpu_only: queue a spin kernel first so that the events time the device work, not the host's.
    """
    import cupy

    for _ in range(warmup):
        fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for i in range(repeats):
        if gpu_only:
            spin_gpu()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
        if i >= 4 and np.median(times) > 50:
            break
    return float(np.median(times))



def bench_conv(shape, repeats):
    import cupy
    import torch

    from minidl.primitives import convolution as conv
    from minidl.primitives.cuda import convolution as impl

    label, N, C, K, HW, k, stride, pad = shape
    rng = np.random.default_rng(0)
    x = cupy.asarray(rng.standard_normal((N, C, HW, HW), dtype=np.float32))
    w = cupy.asarray((rng.standard_normal((K, C, k, k)) / math.sqrt(C * k * k)).astype(np.float32))
    desc = conv.ConvolutionDescriptor(padding=pad, stride=stride)
    y_shape = conv.convolution_output_shape(x.shape, w.shape, desc)
    dy = cupy.asarray(rng.standard_normal(y_shape, dtype=np.float32))
    problem = conv._make_problem("bench", x.shape, w.shape, desc, "NCHW", np.float32)

    calls = {
        "forward": lambda a: conv.convolution_forward(x, w, desc, algo=a),
        "backward_data": lambda a: conv.convolution_backward_data(w, dy, desc, x.shape, algo=a),
        "backward_filter": lambda a: conv.convolution_backward_filter(x, dy, desc, w.shape, algo=a),
    }
    times = {}
    for direction, call in calls.items():
        for algo in ALGOS:
            if not impl.is_supported(algo, direction, problem)[0]:
                continue
            if algo == "direct" and direction != "forward" and not impl.small_channel_kernel(direction, problem):
                continue  # the reference loops: far too slow to be a candidate (first layers have tiled kernels)
            times[(direction, algo)] = time_ms(lambda: call(algo), repeats)
    best = {d: min((t, a) for (dd, a), t in times.items() if dd == d) for d in calls}

    tx, tw, tdy = (torch.as_tensor(a, device="cuda") for a in (x, w, dy))
    f = lambda: torch.nn.functional.conv2d(tx, tw, None, stride, pad)
    b = lambda: torch.ops.aten.convolution_backward(tdy, tx, tw, None, [stride] * 2, [pad] * 2, [1, 1], False,
                                                    [0, 0], 1, [True, True, False])
    with torch.no_grad():
        cudnn_fwd = time_ms(f, repeats)
        cudnn_bwd = time_ms(b, repeats)
        cudnn_host = time_ms(lambda: (f(), b()), repeats, gpu_only=False)
    ours_total = sum(t for t, _ in best.values())
    ours_host = time_ms(lambda: [calls[d](best[d][1]) for d in calls], repeats, gpu_only=False)
    return {
        "ours_host": ours_host, "cudnn_host": cudnn_host,
        "label": label, "times": times, "best": best, "cudnn_fwd": cudnn_fwd,
        "cudnn_total": cudnn_fwd + cudnn_bwd, "ours_fwd": best["forward"][0], "ours_total": ours_total,
        "gflop_fwd": 2.0 * N * K * y_shape[2] * y_shape[3] * C * k * k / 1e9,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/gpu_conv.md")
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--commit", default=None, help="commit to record (default: git rev-parse, else $MINIDL_COMMIT)")
    parser.add_argument("--shapes", type=int, nargs="*", help="indices into SHAPES (default: all)")
    args = parser.parse_args()

    os.environ.setdefault("CUPY_TF32", "0")
    import cupy
    import torch

    from minidl.primitives.cuda._compile import precompile

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    precompile(["gemm", "convolution"])

    device = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    device = device.decode() if isinstance(device, bytes) else device
    shapes = [SHAPES[i] for i in args.shapes] if args.shapes else SHAPES
    results = []
    for shape in shapes:
        r = bench_conv(shape, args.repeats)
        results.append(r)
        print(f"  {r['label']}: ours fwd {r['ours_fwd']:.3f} ms / cuDNN {r['cudnn_fwd']:.3f} ms, "
              f"fwd+bwd {r['ours_total']:.3f} / {r['cudnn_total']:.3f} ms", flush=True)

    lines = [
        "# minidl GPU convolution vs cuDNN (float32, TF32 off)",
        "",
        f"date {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, commit {git_commit(args.commit)}, device {device}, "
        f"torch {torch.__version__} (cuDNN {torch.backends.cudnn.version()}), CuPy {cupy.__version__}; "
        f"median of {args.repeats} CUDA-event timings after warm-up; NCHW.",
        "",
        "## Forward time of each algorithm (ms)",
        "",
        "| shape | " + " | ".join(ALGOS) + " | cuDNN |",
        "| --- |" + " ---: |" * (len(ALGOS) + 1),
    ]
    for r in results:
        cells = [f"{r['times'][('forward', a)]:.3f}" if ("forward", a) in r["times"] else "n/a" for a in ALGOS]
        lines.append(f"| {r['label']} | " + " | ".join(cells) + f" | {r['cudnn_fwd']:.3f} |")
    for direction in ("backward_data", "backward_filter"):
        lines += ["", f"## {direction} time of each algorithm (ms; direct only where it is a small-channel kernel)", "",
                  "| shape | " + " | ".join(ALGOS) + " |", "| --- |" + " ---: |" * len(ALGOS)]
        for r in results:
            cells = [f"{r['times'][(direction, a)]:.3f}" if (direction, a) in r["times"] else "n/a" for a in ALGOS]
            lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Best algorithm per direction, and forward + backward (data + filter) against cuDNN",
        "",
        "| shape | fwd (algo, ms) | bwd data | bwd filter | ours fwd TFLOP/s | fwd ratio | fwd+bwd ours / cuDNN (ms) | fwd+bwd ratio | host-incl. ours / cuDNN (ms) | host-incl. ratio |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    fwd_ratios, total_ratios, host_ratios = [], [], []
    for r in results:
        b = r["best"]
        fr, tr = r["ours_fwd"] / r["cudnn_fwd"], r["ours_total"] / r["cudnn_total"]
        hr = r["ours_host"] / r["cudnn_host"]
        fwd_ratios.append(fr)
        total_ratios.append(tr)
        host_ratios.append(hr)
        cell = lambda d: f"{b[d][1]} {b[d][0]:.3f}"
        lines.append(f"| {r['label']} | {cell('forward')} | {cell('backward_data')} | {cell('backward_filter')} | "
                     f"{r['gflop_fwd'] / r['ours_fwd']:.1f} | {fr:.2f} | {r['ours_total']:.3f} / "
                     f"{r['cudnn_total']:.3f} | {tr:.2f} | {r['ours_host']:.3f} / {r['cudnn_host']:.3f} | {hr:.2f} |")
    geo = lambda v: math.exp(sum(math.log(t) for t in v) / len(v))
    lines += [
        "",
        f"Geometric mean of the ratios (ours / cuDNN, > 1 is slower): forward {geo(fwd_ratios):.2f}, "
        f"forward + backward {geo(total_ratios):.2f} (GPU time); forward + backward host-inclusive {geo(host_ratios):.2f}.",
        "",
        "Our SGEMM against cuBLAS: gpu_gemm.md (benchmarks/bench_gpu_gemm.py).",
        "",
    ]
    report = "\n".join(lines)
    write_report(report, args.out)


if __name__ == "__main__":
    main()
