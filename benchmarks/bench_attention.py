"""Benchmark: minidl's fused attention kernel (kernels/attention.cu) and layer norm kernel
(kernels/layer_norm.cu) against torch on the same GPU, in the same process, with the same math.

Attention, forward and forward + backward (all three input gradients), at issue 25's sizes: bf16,
causal, B=8, H=12, D=64 at T=1024 and T=4096; also fp16, non-causal, and D=128. torch runs each of its
SDPA backends where it accepts the problem: FlashAttention-2 ("flash"), cuDNN's fused attention ("cudnn"),
the memory-efficient kernel ("efficient") and the unfused "math" path. float32 (TF32 off on both sides):
minidl runs its fp32 kernel (3xTF32), torch picks its backend. On an H100/H200 minidl's 16-bit forward
(and backward at D = 64) runs kernels/attention_wgmma.cu; "minidl on mma.sync" is the same call held to
attention.cu's kernels (set_tensor_core_gemm("mma_sync")), timed in the same rounds.
Layer norm: (8 x 1024) rows of 768, forward + backward with weight and bias, fp32 and bf16.

The ratio column is minidl's time / torch's (below 1: minidl is faster). Timing: CUDA events around
each call, after a warm-up that includes the NVRTC compile; the median of --repeats runs, in 3 interleaved
rounds over the contenders, the fastest round kept (the device's GPU may be shared: a slow stretch then
hits every contender, not one).

    python3 benchmarks/bench_attention.py [--out benchmarks/results/gpu_attention.md] [--commit SHA]
                                          [--repeats 20] [--quick]
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._report import git_commit, write_report  # noqa: E402

ATTENTION_CASES = [   # (dtype, causal, B, H, T, D)
    ("bfloat16", True, 8, 12, 1024, 64),
    ("bfloat16", True, 8, 12, 4096, 64),
    ("float16", True, 8, 12, 1024, 64),
    ("bfloat16", False, 8, 12, 1024, 64),
    ("bfloat16", True, 4, 16, 2048, 128),
    ("float32", True, 8, 12, 1024, 64),
]
QUICK_CASES = ATTENTION_CASES[:1] + ATTENTION_CASES[-1:]
TORCH_BACKENDS = ("flash", "cudnn", "efficient", "math")
ROUNDS = 3


def _median_ms(fn, event, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = event(), event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


class _CupyEvent:
    def __init__(self):
        import cupy

        self.e = cupy.cuda.Event()

    def record(self):
        self.e.record()

    def synchronize(self):
        self.e.synchronize()

    def elapsed_time(self, other):
        import cupy

        return cupy.cuda.get_elapsed_time(self.e, other.e)


def _flops(causal, B, H, T, D, backward):
    """Matrix FLOPs: forward 2 products of 2 T^2 D each per head (halved when causal); backward 2.5x."""
    f = 4 * B * H * T * T * D * (0.5 if causal else 1.0)
    return f * (3.5 if backward else 1.0)


def _on_mma_sync(fn):
    """fn with minidl's tensor-core kernels held to mma.sync (set_tensor_core_gemm): on an H100/H200 the 16-bit
    attention forward then runs attention.cu instead of attention_wgmma.cu."""
    from minidl.primitives.gemm import get_tensor_core_gemm, set_tensor_core_gemm

    def run():
        previous = get_tensor_core_gemm()
        set_tensor_core_gemm("mma_sync")
        try:
            return fn()
        finally:
            set_tensor_core_gemm(previous)

    return run


def bench_attention(case, warmup, repeats):
    import cupy
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import minidl.primitives as P
    from minidl._dtypes import bfloat16

    dtype, causal, B, H, T, D = case
    np_dtype = bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(0)
    host = [rng.standard_normal((B, H, T, D)).astype(np.float32) for _ in range(4)]
    q, k, v, do = (cupy.asarray(h.astype(np_dtype)) for h in host)
    tq, tk, tv = (torch.tensor(h, device="cuda", dtype=getattr(torch, dtype), requires_grad=True) for h in host[:3])
    tdo = torch.tensor(host[3], device="cuda", dtype=getattr(torch, dtype))

    def ours_fwd():
        return P.attention_forward(q, k, v, causal=causal)

    o, lse = ours_fwd()

    def ours_train():
        o, lse = P.attention_forward(q, k, v, causal=causal)
        return P.attention_backward(q, k, v, o, do, lse, causal=causal)

    def torch_fwd():
        with torch.no_grad():
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

    def torch_train():
        out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        return torch.autograd.grad(out, (tq, tk, tv), tdo)

    row = {"case": case}
    # agreement with torch (its default backend), as a sanity check of what is being timed
    ref = torch_fwd()
    got = torch.from_dlpack(o.view(np.uint16) if dtype == "bfloat16" else o)
    if dtype == "bfloat16":
        got = got.view(torch.bfloat16)
    row["max_err"] = float((got.float() - ref.float()).abs().max())
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    torch_event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    contenders = {"ours": (ours_fwd, ours_train, _CupyEvent, None)}
    if dtype != "float32":   # the same calls with the tensor-core kernels held to mma.sync (attention.cu's forward)
        contenders["ours_mma"] = (_on_mma_sync(ours_fwd), _on_mma_sync(ours_train), _CupyEvent, None)
    for name in TORCH_BACKENDS + ("default",):
        if name == "math" and T >= 4096:   # 12 x 8 x 4096^2 scores: the unfused path at its worst, skipped
            continue
        contenders[name] = (torch_fwd, torch_train, torch_event, backends.get(name))
    # ROUNDS interleaved rounds (ours, flash, cudnn, ... then again): the minimum over rounds of each
    # one's median, so that a slow stretch of the shared GPU does not land on one contender only
    for _ in range(ROUNDS):
        for name, (fwd, train, event, backend) in contenders.items():
            if isinstance(row.get(name), str):
                continue
            try:
                if backend is None:
                    times = (_median_ms(fwd, event, warmup, repeats), _median_ms(train, event, warmup, repeats))
                else:
                    with sdpa_kernel(backend):
                        times = (_median_ms(fwd, event, warmup, repeats), _median_ms(train, event, warmup, repeats))
            except RuntimeError as e:   # the backend does not take this problem
                row[name] = str(e).splitlines()[0][:60]
                continue
            old = row.get(name)
            row[name] = times if old is None else (min(old[0], times[0]), min(old[1], times[1]))
    return row


def bench_layer_norm(dtype, warmup, repeats, rows=8 * 1024, n=768):
    import cupy
    import torch

    import minidl.primitives as P
    from minidl._dtypes import bfloat16

    np_dtype = bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(0)
    x, dy = (cupy.asarray(rng.standard_normal((rows, n)).astype(np_dtype)) for _ in range(2))
    w, b = (cupy.asarray(rng.standard_normal(n).astype(np_dtype)) for _ in range(2))

    def ours():
        y, mean, rstd = P.layer_norm_forward(x, w, b)
        return P.layer_norm_backward(x, dy, w, mean, rstd)

    tx = torch.randn(rows, n, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
    tw = torch.randn(n, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
    tb = torch.randn(n, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
    tdy = torch.randn(rows, n, device="cuda", dtype=getattr(torch, dtype))

    def theirs():
        y = torch.nn.functional.layer_norm(tx, (n,), tw, tb)
        return torch.autograd.grad(y, (tx, tw, tb), tdy)

    torch_event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    rounds = [(_median_ms(ours, _CupyEvent, warmup, repeats), _median_ms(theirs, torch_event, warmup, repeats))
              for _ in range(ROUNDS)]
    return min(r[0] for r in rounds), min(r[1] for r in rounds), rows, n


def _fmt(v):
    return f"{v:.3f}" if isinstance(v, float) else "n/a"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--commit")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="two attention cases and fp32 layer norm only")
    args = parser.parse_args(argv)
    import cupy
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    lines = [f"# Fused attention and layer norm against torch ({gpu})", "",
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {git_commit(args.commit)}, "
             f"torch {torch.__version__} (cuDNN {torch.backends.cudnn.version()}), CuPy {cupy.__version__}; "
             f"median of {args.repeats} runs (fastest of {ROUNDS} interleaved rounds), ms. "
             "Produced by `python3 benchmarks/bench_attention.py`.", "",
             "## Attention (fwd = forward; train = forward + backward, all input gradients)", "",
             "| dtype | causal | B x H x T x D | minidl fwd | minidl train | TFLOP/s train | minidl on mma.sync fwd / "
             "train | torch flash fwd / train | cudnn fwd / train | efficient fwd / train | math fwd / train | "
             "default train | **train ratio vs flash** | vs cudnn | vs default | fwd ratio vs flash | vs cudnn | "
             "max abs err vs torch |",
             "| --- | --- | --- | ---: | ---: | ---: | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | "
             "---: | ---: |"]
    cases = QUICK_CASES if args.quick else ATTENTION_CASES
    for case in cases:
        row = bench_attention(case, args.warmup, args.repeats)
        dtype, causal, B, H, T, D = case
        ours_f, ours_t = row["ours"]

        def pair(name):
            v = row.get(name)
            return f"{v[0]:.3f} / {v[1]:.3f}" if isinstance(v, tuple) else (v or "skipped")

        def ratio(name, i=1):
            v = row.get(name)
            return f"{(ours_f, ours_t)[i] / v[i]:.2f}" if isinstance(v, tuple) else "n/a"

        tflops = _flops(causal, B, H, T, D, True) / (ours_t * 1e-3) / 1e12
        default = row.get("default")
        lines.append(f"| {dtype} | {causal} | {B}x{H}x{T}x{D} | {ours_f:.3f} | {ours_t:.3f} | {tflops:.0f} | "
                     f"{pair('ours_mma') if 'ours_mma' in row else 'n/a'} | "
                     f"{pair('flash')} | {pair('cudnn')} | {pair('efficient')} | {pair('math')} | "
                     f"{_fmt(default[1]) if isinstance(default, tuple) else 'n/a'} | **{ratio('flash')}** | "
                     f"{ratio('cudnn')} | {ratio('default')} | {ratio('flash', 0)} | {ratio('cudnn', 0)} | "
                     f"{row['max_err']:.2e} |")
        print(lines[-1], flush=True)
    lines += ["", "## Layer norm, (rows, 768), forward + backward with weight and bias", "",
              "| dtype | rows x n | minidl ms | torch ms | ratio |", "| --- | --- | ---: | ---: | ---: |"]
    for dtype in (("float32",) if args.quick else ("float32", "bfloat16")):
        ours, theirs, rows, n = bench_layer_norm(dtype, args.warmup, args.repeats)
        lines.append(f"| {dtype} | {rows}x{n} | {ours:.3f} | {theirs:.3f} | {ours / theirs:.2f} |")
        print(lines[-1], flush=True)
    write_report("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
