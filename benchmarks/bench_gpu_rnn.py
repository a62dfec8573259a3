"""Benchmark: minidl's CUDA RNN primitive against torch/cuDNN on the same GPU, in the same process.

Workloads (device.md's sizes): LSTM and GRU, 2 layers of 512, input 512, seq 64, batch 64; forward
(training mode: the reserve is kept) and forward + backward (all gradients). Plus the bidirectional
LSTM with and without the side stream, to measure what running the two directions concurrently buys.
torch runs with TF32 off (cuDNN and cuBLAS), so both sides are plain float32.

Timing: CUDA events around each call on its library's stream, after a warm-up that includes the NVRTC
compile; the median of --repeats runs. The "host" column is the wall time of our call without waiting for
the GPU: when it is close to the GPU time, the step loop is bound by Python launch costs, not the GPU.

    python3 benchmarks/bench_gpu_rnn.py [--out benchmarks/results/gpu_rnn.md] [--commit SHA] [--repeats 30]
                                        [--profile]   # also print where our host time goes (cProfile)
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._report import git_commit, write_report  # noqa: E402

T, B, INPUT, HIDDEN, LAYERS = 64, 64, 512, 512, 2



def _median_ms(fn, start_event, end_event, synchronize, warmup, repeats):
    """Median GPU time of fn() in ms, and the median host time of issuing it."""
    for _ in range(warmup):
        fn()
    synchronize()
    gpu, host = [], []
    for _ in range(repeats):
        start, end = start_event(), end_event()
        start.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e3)
        end.record()
        end.synchronize()
        gpu.append(start.elapsed(end))
    return statistics.median(gpu), statistics.median(host)


def bench_case(mode, bidirectional, side_stream, warmup, repeats):
    import cupy
    import torch

    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward
    from minidl.primitives.cuda import rnn as cuda_rnn

    rng = np.random.default_rng(0)
    desc = RNNDescriptor(mode, INPUT, HIDDEN, LAYERS, bidirectional)
    D = desc.num_directions
    scale = 1 / np.sqrt(HIDDEN)
    weights_host = [tuple((rng.uniform(-1, 1, s.shape) * scale).astype(np.float32) for s in entry)
                    for entry in desc.weight_shapes()]
    x_host = rng.standard_normal((T, B, INPUT)).astype(np.float32)
    dy_host = rng.standard_normal((T, B, D * HIDDEN)).astype(np.float32)

    # ---- ours
    cuda_rnn.USE_SIDE_STREAM = side_stream
    x, dy = cupy.asarray(x_host), cupy.asarray(dy_host)
    weights = [tuple(cupy.asarray(w) for w in entry) for entry in weights_host]

    def ours_forward():
        return rnn_forward(x, None, None, weights, desc)

    def ours_train():
        _, _, _, reserve = rnn_forward(x, None, None, weights, desc)
        return rnn_backward(dy, None, None, reserve)

    cupy_events = dict(start_event=lambda: _CupyEvent(cupy), end_event=lambda: _CupyEvent(cupy),
                       synchronize=cupy.cuda.Device().synchronize)
    ours_fwd, ours_fwd_host = _median_ms(ours_forward, warmup=warmup, repeats=repeats, **cupy_events)
    ours_fb, ours_fb_host = _median_ms(ours_train, warmup=warmup, repeats=repeats, **cupy_events)
    ours_y = ours_forward()[0].get()
    cuda_rnn.USE_SIDE_STREAM = True

    # ---- torch / cuDNN
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
    m = cls(INPUT, HIDDEN, num_layers=LAYERS, bidirectional=bidirectional).cuda()
    with torch.no_grad():
        for entry, specs in zip(weights_host, desc.weight_shapes()):
            for array, spec in zip(entry, specs):
                getattr(m, spec.name).copy_(torch.from_numpy(array))
    xt = torch.from_numpy(x_host).cuda().requires_grad_(True)
    dyt = torch.from_numpy(dy_host).cuda()

    def torch_forward():
        return m(xt)

    def torch_train():
        out, _ = m(xt)
        out.backward(dyt)

    torch_events = dict(start_event=lambda: _TorchEvent(torch), end_event=lambda: _TorchEvent(torch),
                        synchronize=torch.cuda.synchronize)
    ref_fwd, _ = _median_ms(torch_forward, warmup=warmup, repeats=repeats, **torch_events)
    ref_fb, _ = _median_ms(torch_train, warmup=warmup, repeats=repeats, **torch_events)
    ref_y = torch_forward()[0].detach().cpu().numpy()
    err = float(np.linalg.norm(ours_y - ref_y) / np.linalg.norm(ref_y))

    name = f"{mode.upper()} {LAYERS}x{HIDDEN}{' bidir' if bidirectional else ''}"
    if bidirectional:
        name += ", side stream" if side_stream else ", one stream"
    return dict(name=name, ours_fwd=ours_fwd, ours_fwd_host=ours_fwd_host, ref_fwd=ref_fwd, ours_fb=ours_fb,
                ours_fb_host=ours_fb_host, ref_fb=ref_fb, err=err)


class _CupyEvent:
    def __init__(self, cupy):
        self.event = cupy.cuda.Event()

    def record(self):
        self.event.record()

    def synchronize(self):
        self.event.synchronize()

    def elapsed(self, end):
        import cupy

        return cupy.cuda.get_elapsed_time(self.event, end.event)


class _TorchEvent:
    def __init__(self, torch):
        self.event = torch.cuda.Event(enable_timing=True)

    def record(self):
        self.event.record()

    def synchronize(self):
        self.event.synchronize()

    def elapsed(self, end):
        return self.event.elapsed_time(end.event)


def profile_host(repeats=5):
    """cProfile of our LSTM forward + backward: which Python calls the host time of a training step goes to."""
    import cProfile
    import pstats

    import cupy

    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward

    rng = np.random.default_rng(0)
    desc = RNNDescriptor("lstm", INPUT, HIDDEN, LAYERS)
    weights = [tuple(cupy.asarray((rng.uniform(-1, 1, s.shape) / np.sqrt(HIDDEN)).astype(np.float32)) for s in e)
               for e in desc.weight_shapes()]
    x = cupy.asarray(rng.standard_normal((T, B, INPUT)).astype(np.float32))
    dy = cupy.asarray(rng.standard_normal((T, B, HIDDEN)).astype(np.float32))

    def train():
        _, _, _, reserve = rnn_forward(x, None, None, weights, desc)
        rnn_backward(dy, None, None, reserve)

    train()
    cupy.cuda.Device().synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeats):
        train()
    cupy.cuda.Device().synchronize()
    profiler.disable()
    print(f"host profile of {repeats} LSTM training steps (fwd+bwd):")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu_rnn.md"))
    parser.add_argument("--commit", default=None)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of our host time first")
    args = parser.parse_args()
    if args.repeats < 20:
        parser.error("--repeats must be >= 20 (the table reports medians)")

    import cupy

    if args.profile:
        profile_host()
    cases = [("lstm", False, True), ("gru", False, True), ("lstm", True, True), ("lstm", True, False)]
    rows = [bench_case(mode, bidir, side, args.warmup, args.repeats) for mode, bidir, side in cases]

    props = cupy.cuda.runtime.getDeviceProperties(0)
    device = f"{props['name'].decode()} ({props['multiProcessorCount']} SMs), CuPy {cupy.__version__}"
    import torch

    lines = [
        "# GPU RNN: minidl vs torch/cuDNN (float32, TF32 off)",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- commit: {git_commit(args.commit)}",
        f"- device: {device}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}",
        f"- sizes: seq {T}, batch {B}, input {INPUT}, hidden {HIDDEN}, {LAYERS} layers; median of {args.repeats} "
        "(CUDA events, after warm-up)",
        "- ours: one cuBLAS GEMM for the input projection of all steps, per step one cuBLAS recurrent GEMM + one "
        "fused cell kernel; host = wall time to issue our call (Python launch cost)",
        "",
        "| workload | ours fwd ms | cuDNN fwd ms | fwd ratio | ours fwd+bwd ms | cuDNN fwd+bwd ms | fwd+bwd ratio "
        "| ours host fwd / fwd+bwd ms | rel. err. y |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(f"| {r['name']} | {r['ours_fwd']:.3f} | {r['ref_fwd']:.3f} | {r['ours_fwd'] / r['ref_fwd']:.2f}x "
                     f"| {r['ours_fb']:.3f} | {r['ref_fb']:.3f} | {r['ours_fb'] / r['ref_fb']:.2f}x "
                     f"| {r['ours_fwd_host']:.3f} / {r['ours_fb_host']:.3f} | {r['err']:.1e} |")
    lines.append("")
    lines.append("ratio = ours / cuDNN (lower is better; < 1 means faster than cuDNN).")
    text = "\n".join(lines) + "\n"
    write_report(text, args.out)


if __name__ == "__main__":
    main()
