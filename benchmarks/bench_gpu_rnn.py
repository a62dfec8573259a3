"""Benchmark: minidl's CUDA RNN primitive against torch/cuDNN on the same GPU, in the same process.

Workloads (issue 24's grid): LSTM and GRU, 2 layers of 512, input 512, T 35 and 64, batch 32 and 64, and the
bidirectional LSTM at T64 B64; forward (training mode: the reserve is kept) and forward + backward (all
gradients). Ours runs both algorithms (standard and persistent, RNNDescriptor.algo) in fp32 and with
math="tf32"; cuDNN runs in fp32 with TF32 off, in TF32, and in bf16 (for reference).

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
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._report import git_commit, write_report  # noqa: E402

T, B, INPUT, HIDDEN, LAYERS = 64, 64, 512, 512, 2  # T, B: the --profile run's shape



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


def _graphed_ms(torch, fn, events, warmup, repeats):
    """Median time of fn replayed from a CUDA graph (torch.cuda.CUDAGraph, captured after 3 calls on a side stream,
    the documented recipe): the library's kernels without its host time. NaN where the capture fails."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except Exception as e:  # noqa: BLE001 - the table says n/a
        torch.cuda.synchronize()
        print(f"cuDNN graph capture failed: {type(e).__name__}: {e}")
        return float("nan")
    return _median_ms(graph.replay, warmup=warmup, repeats=repeats, **events)[0]


def _ours_graphed_ms(fn, events, warmup, repeats):
    """Median time of our fn replayed from a minidl CUDA graph (captured after a few eager calls): its kernels without
    the host time of the eager call (what _graphed_ms measures for cuDNN). NaN where the capture fails."""
    import minidl

    try:
        for _ in range(3):
            fn()
        graph = minidl.cuda.CUDAGraph()
        with minidl.cuda.graph(graph):
            fn()
    except Exception as e:  # noqa: BLE001 - the table says n/a
        print(f"minidl graph capture failed: {type(e).__name__}: {e}")
        return float("nan")
    return _median_ms(graph.replay, warmup=warmup, repeats=repeats, **events)[0]


def _weights(desc, rng):
    scale = 1 / np.sqrt(desc.hidden_size)
    return [tuple((rng.uniform(-1, 1, s.shape) * scale).astype(np.float32) for s in entry)
            for entry in desc.weight_shapes()]


def bench_case(mode, steps, batch, bidirectional, warmup, repeats, algos=("standard", "persistent"),
               maths=("fp32",), side_stream=True):
    """Forward (training mode) and forward+backward times of ours (each algorithm and math) and cuDNN's
    (the same math: fp32 with TF32 off, or TF32; and bf16 for cuDNN alone), one layer shape."""
    import cupy
    import torch

    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward
    from minidl.primitives.cuda import rnn as cuda_rnn

    rng = np.random.default_rng(0)
    base = RNNDescriptor(mode, INPUT, HIDDEN, LAYERS, bidirectional)
    D = base.num_directions
    weights_host = _weights(base, rng)
    x_host = rng.standard_normal((steps, batch, INPUT)).astype(np.float32)
    dy_host = rng.standard_normal((steps, batch, D * HIDDEN)).astype(np.float32)
    x, dy = cupy.asarray(x_host), cupy.asarray(dy_host)
    weights = [tuple(cupy.asarray(w) for w in entry) for entry in weights_host]
    cupy_events = dict(start_event=lambda: _CupyEvent(cupy), end_event=lambda: _CupyEvent(cupy),
                       synchronize=cupy.cuda.Device().synchronize)
    row = dict(mode=mode, steps=steps, batch=batch, bidirectional=bidirectional, side_stream=side_stream)
    cuda_rnn.USE_SIDE_STREAM = side_stream
    for algo in algos:
        desc = RNNDescriptor(mode, INPUT, HIDDEN, LAYERS, bidirectional, algo=algo)
        for math in maths:
            if algo == "standard" and math != "fp32":  # (the table shows the standard algorithm in fp32 only)
                continue

            def forward(desc=desc, math=math):
                return rnn_forward(x, None, None, weights, desc, math=math)

            def train(desc=desc, math=math):
                _, _, _, reserve = rnn_forward(x, None, None, weights, desc, math=math)
                return rnn_backward(dy, None, None, reserve)

            row[f"ours_{algo}_{math}_fwd"], row[f"ours_{algo}_{math}_fwd_host"] = _median_ms(
                forward, warmup=warmup, repeats=repeats, **cupy_events)
            row[f"ours_{algo}_{math}_fb"], row[f"ours_{algo}_{math}_fb_host"] = _median_ms(
                train, warmup=warmup, repeats=repeats, **cupy_events)
            if algo == "persistent":
                row[f"ours_{algo}_{math}_fb_graphed"] = _ours_graphed_ms(train, cupy_events, warmup, repeats)
            row[f"y_{algo}_{math}"] = forward()[0].get()
    cuda_rnn.USE_SIDE_STREAM = True

    torch.backends.cudnn.benchmark = True
    cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
    m = cls(INPUT, HIDDEN, num_layers=LAYERS, bidirectional=bidirectional).cuda()
    with torch.no_grad():
        for entry, specs in zip(weights_host, base.weight_shapes()):
            for array, spec in zip(entry, specs):
                getattr(m, spec.name).copy_(torch.from_numpy(array))
    torch_events = dict(start_event=lambda: _TorchEvent(torch), end_event=lambda: _TorchEvent(torch),
                        synchronize=torch.cuda.synchronize)
    for math in dict.fromkeys(tuple(maths) + ("bf16",)):
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = math == "tf32"
        dtype = torch.bfloat16 if math == "bf16" else torch.float32
        mm = m.to(dtype)
        xt = torch.from_numpy(x_host).cuda().to(dtype).requires_grad_(True)
        dyt = torch.from_numpy(dy_host).cuda().to(dtype)

        def torch_forward(mm=mm, xt=xt):
            return mm(xt)

        def torch_train(mm=mm, xt=xt, dyt=dyt):
            out, _ = mm(xt)
            out.backward(dyt)

        row[f"cudnn_{math}_fwd"], _ = _median_ms(torch_forward, warmup=warmup, repeats=repeats, **torch_events)
        row[f"cudnn_{math}_fb"], _ = _median_ms(torch_train, warmup=warmup, repeats=repeats, **torch_events)
        row[f"cudnn_{math}_fb_graphed"] = _graphed_ms(torch, torch_train, torch_events, warmup, repeats)
        if math == "fp32":
            row["y_cudnn"] = torch_forward()[0].detach().float().cpu().numpy()
    m.float()
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    for algo in algos:
        y = row.pop(f"y_{algo}_fp32", None)
        if y is not None:
            row[f"err_{algo}"] = float(np.linalg.norm(y - row["y_cudnn"]) / np.linalg.norm(row["y_cudnn"]))
    for key in [k for k in row if k.startswith("y_")]:
        row.pop(key)
    name = f"{mode.upper()} {LAYERS}x{HIDDEN}{' bidir' if bidirectional else ''} T{steps} B{batch}"
    if bidirectional and not side_stream:
        name += ", one stream"
    row["name"] = name
    return row


def units_sweep(mode, steps, batch, warmup, repeats, choices=(4, 8, 16, (4, 8), (8, 4))):
    """fwd and bwd ms of the persistent algorithm for each forced (forward units, backward units)."""
    import cupy

    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward
    from minidl.primitives.cuda import rnn_persistent

    rng = np.random.default_rng(0)
    desc = RNNDescriptor(mode, INPUT, HIDDEN, LAYERS, algo="persistent")
    weights = [tuple(cupy.asarray(w) for w in entry) for entry in _weights(desc, rng)]
    x = cupy.asarray(rng.standard_normal((steps, batch, INPUT)).astype(np.float32))
    dy = cupy.asarray(rng.standard_normal((steps, batch, HIDDEN)).astype(np.float32))
    events = dict(start_event=lambda: _CupyEvent(cupy), end_event=lambda: _CupyEvent(cupy),
                  synchronize=cupy.cuda.Device().synchronize)
    rows = []
    for units in choices:
        rnn_persistent.UNITS = units
        try:
            fwd, _ = _median_ms(lambda: rnn_forward(x, None, None, weights, desc), warmup=warmup, repeats=repeats,
                                **events)
            _, _, _, reserve = rnn_forward(x, None, None, weights, desc)
            bwd, _ = _median_ms(lambda: rnn_backward(dy, None, None, reserve), warmup=warmup, repeats=repeats,
                                **events)
            rows.append((units, fwd, bwd))
        except ValueError as e:
            rows.append((units, str(e), ""))
        finally:
            rnn_persistent.UNITS = None
    return rows


def fit_table(modes=("lstm", "gru"), hiddens=(256, 512, 768, 1024, 1536, 2048), batches=(32, 64, 128)):
    """Markdown lines: where the persistent algorithm fits on this GPU (rnn_persistent.plan)."""
    from minidl.primitives.cuda import rnn_persistent

    lines = ["| mode, directions | batch | " + " | ".join(f"H {h}" for h in hiddens) + " |",
             "| --- | ---: | " + " | ".join("---" for _ in hiddens) + " |"]
    for mode in modes:
        for D in (1, 2):
            for B in batches:
                cells = []
                for H in hiddens:
                    p, _ = rnn_persistent.plan(mode, B, H, D)
                    cells.append(f"U {p.forward.units}/{p.backward.units}, {max(p.forward.smem, p.backward.smem) // 1024} KB"
                                 if p else "standard")
                lines.append(f"| {mode.upper()}, {D} | {B} | " + " | ".join(cells) + " |")
    return lines


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
    cases = [(mode, steps, batch, False) for mode in ("lstm", "gru") for steps in (35, 64) for batch in (32, 64)]
    cases += [("lstm", 64, 64, True)]
    rows = [bench_case(mode, steps, batch, bidir, args.warmup, args.repeats, maths=("fp32", "tf32", "bf16"))
            for mode, steps, batch, bidir in tqdm(cases, desc="RNN shapes")]

    props = cupy.cuda.runtime.getDeviceProperties(0)
    device = f"{props['name'].decode()} ({props['multiProcessorCount']} SMs), CuPy {cupy.__version__}"
    import torch

    def ms(r, key):
        return f"{r[key]:.3f}" if key in r else "-"

    lines = [
        "# GPU RNN: minidl's two algorithms against torch/cuDNN",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- commit: {git_commit(args.commit)}",
        f"- device: {device}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}",
        f"- {LAYERS} layers of {HIDDEN} (input {INPUT}); median of {args.repeats} (CUDA events, after warm-up); "
        "forward in training mode (the reserve is kept); fwd+bwd = forward, then all gradients",
        "- standard: one GEMM for the input projection of all steps, then per step one recurrent GEMM + one fused "
        "cell kernel (kernels/rnn.cu); persistent: one launch per layer for all steps, W_hh in shared memory "
        "(kernels/rnn_persistent.cu; its recurrent product on mma.sync: 3xTF32 for fp32, TF32, bf16)",
        "- cuDNN picks its own algorithm (cudnn.benchmark on)",
        "",
        "## fp32 (TF32 off on both sides), ms",
        "",
        "| workload | standard fwd | persistent fwd | cuDNN fwd | persistent / cuDNN | standard fwd+bwd "
        "| persistent fwd+bwd | cuDNN fwd+bwd | persistent / cuDNN | host: persistent fwd+bwd | rel. err. y |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        p_fwd, p_fb = r["ours_persistent_fp32_fwd"], r["ours_persistent_fp32_fb"]
        lines.append(f"| {r['name']} | {ms(r, 'ours_standard_fp32_fwd')} | {p_fwd:.3f} | {r['cudnn_fp32_fwd']:.3f} "
                     f"| {p_fwd / r['cudnn_fp32_fwd']:.2f}x | {ms(r, 'ours_standard_fp32_fb')} | {p_fb:.3f} "
                     f"| {r['cudnn_fp32_fb']:.3f} | {p_fb / r['cudnn_fp32_fb']:.2f}x "
                     f"| {r['ours_persistent_fp32_fb_host']:.3f} | {r.get('err_persistent', float('nan')):.1e} |")
    lines += [
        "",
        "## TF32 and bf16, ms",
        "",
        "Ours in bf16: math=\"bf16\" (what autocast to bfloat16 asks for): float32 data and states, the recurrent "
        "products on bf16 mma, the forward's input projections in TF32, the backward's weight and input gradients on "
        "bf16 wgmma (since session 8). cuDNN in bf16: bfloat16 weights and data.",
        "",
        "| workload | persistent TF32 fwd | cuDNN TF32 fwd | ratio | persistent TF32 fwd+bwd | cuDNN TF32 fwd+bwd "
        "| ratio | persistent bf16 fwd+bwd | cuDNN bf16 fwd+bwd | ratio | ours fp32 : TF32 : bf16 fwd+bwd |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        p_fwd, p_fb = r["ours_persistent_tf32_fwd"], r["ours_persistent_tf32_fb"]
        b_fb, f_fb = r["ours_persistent_bf16_fb"], r["ours_persistent_fp32_fb"]
        lines.append(f"| {r['name']} | {p_fwd:.3f} | {r['cudnn_tf32_fwd']:.3f} | {p_fwd / r['cudnn_tf32_fwd']:.2f}x "
                     f"| {p_fb:.3f} | {r['cudnn_tf32_fb']:.3f} | {p_fb / r['cudnn_tf32_fb']:.2f}x "
                     f"| {b_fb:.3f} | {r['cudnn_bf16_fb']:.3f} | {b_fb / r['cudnn_bf16_fb']:.2f}x "
                     f"| 1 : {p_fb / f_fb:.2f} : {b_fb / f_fb:.2f} |")
    lines.append("")
    lines.append("ratio = ours / cuDNN (lower is better; < 1 means faster than cuDNN). Issue 24's target: <= 0.8x.")
    lines += ["", "## cuDNN without its host time: fwd+bwd replayed from a CUDA graph, ms", "",
              "cuDNN's eager call above pays its host time (descriptors, workspace, ~370 launches a pass); replayed "
              "from a CUDA graph only its kernels run. Ours likewise: the persistent forward+backward replayed from a "
              "minidl CUDA graph (the input projections and weight gradients on our GEMMs, the persistent kernels, "
              "no host time).", "",
              "| workload | cuDNN fp32 graphed | ours fp32 graphed | ratio | cuDNN TF32 graphed | ours TF32 graphed "
              "| ratio | cuDNN bf16 graphed | ours bf16 graphed | ratio |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        cells = []
        for math in ("fp32", "tf32", "bf16"):
            g, ours = r[f"cudnn_{math}_fb_graphed"], r[f"ours_persistent_{math}_fb_graphed"]
            cells.append(f"{g:.3f} | {ours:.3f} | {ours / g:.2f}x" if g == g and ours == ours else
                         f"{g:.3f} | {ours:.3f} | n/a")
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    lines += ["", "## Hidden units per CTA (the persistent algorithm, fp32), ms", "",
              "U units per CTA: 512 / U CTAs per layer (the default, the smallest U that fits the SMs, is 4 here).", "",
              "| workload | U | fwd | bwd |", "| --- | ---: | ---: | ---: |"]
    for mode, steps, batch in (("lstm", 35, 32), ("lstm", 35, 64)):
        for units, fwd, bwd in units_sweep(mode, steps, batch, args.warmup, args.repeats):
            cell = (f"{fwd:.3f} | {bwd:.3f}" if isinstance(fwd, float) else f"{fwd} |")
            lines.append(f"| {mode.upper()} {LAYERS}x{HIDDEN} T{steps} B{batch} | {units} | {cell} |")
    lines += ["", "## Where the persistent algorithm fits on this GPU", "",
              "U forward/backward units per CTA and the larger shared memory of the two kernels; 'standard': "
              "the weights or the batch do not fit, algo='auto' runs the standard algorithm.", ""]
    lines += fit_table()
    text = "\n".join(lines) + "\n"
    write_report(text, args.out)


if __name__ == "__main__":
    main()
